"""PNG plots of the side-by-side benchmark results (bench_regex.py, bench_grammar.py,
bench_json_schema.py).

    python bench/plots.py [RESULT.json ...] [--out DIR]

Without RESULT files: the newest result of each kind (regex, grammar, json-schema) in
bench/results. Without --out: the PNGs go next to each result file.

Per result file and tokenizer, one PNG per metric, named ``<result stem>-<tokenizer>-<metric>.png``:

* ``compile``: compile time per engine, grouped by regex / grammar / JSONSchemaBench subset.
  regex: compile→1st mask ms per regex; grammar: compile ms per grammar; both with a last group
  "median" over the items every engine that compiled anything compiled (same set).
  json-schema: compile p50 ms per subset, over all subsets (ALL), over the same set of schemas
  (``common_bench``), and over the JSON Schema Test Suite (SUITE, and its same set).
* ``mask``: time of one mask fill, mean (top) and p99 (bottom) in µs, with the same groups
  (regex / grammar: over all walks; the summary group is the mean of the per-item figures,
  as in the markdown reports).
* ``coverage`` (json-schema only): % of schemas compiled, of valid instances accepted and of
  invalid instances rejected per engine, for JSONSchemaBench (ALL) and the test suite (SUITE),
  each bar labelled with its count.

A missing bar is marked with why (error, timeout, unsupported, ...). Times use a log scale when
they span more than a factor of 30. Every engine keeps its colour in every plot; logitgate first.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import zlib
from datetime import datetime
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"

KINDS = ("regex", "grammar", "json-schema")
METRICS = {"regex": ("compile", "mask"), "grammar": ("compile", "mask"),
           "json-schema": ("compile", "mask", "coverage")}
KIND_TITLE = {"regex": "Regex", "grammar": "Grammar", "json-schema": "JSON Schema"}

# One colour per engine, in every plot: logitgate and its modes in blues/purples, the peers apart.
ENGINE_COLOURS = {
    "logitgate": "#1f77b4",
    "logitgate[background]": "#9ecae1",
    "logitgate[index]": "#08306b",
    "logitgate[lazy]": "#807dba",
    "logitgate[greedy]": "#17becf",
    "logitgate[any]": "#6baed6",
    "logitgate[strict]": "#54278f",
    "llguidance": "#ff7f0e",
    "xgrammar": "#2ca02c",
    "outlines-core": "#d62728",
    "lm-format-enforcer": "#8c564b",
}
_EXTRA_COLOURS = ("#e377c2", "#7f7f7f", "#bcbd22", "#9467bd", "#f7b6d2", "#c49c94", "#dbdb8d", "#98df8a")
FAIL_COLOUR = "#b22222"


def engine_colour(engine: str) -> str:
    """The engine's fixed colour (an unknown engine: a colour picked from its name, so stable too)."""
    return ENGINE_COLOURS.get(engine) or _EXTRA_COLOURS[zlib.crc32(engine.encode()) % len(_EXTRA_COLOURS)]


def order_engines(engines) -> list:
    """logitgate first, then its other modes, then the peers: the known engines in the order of
    ENGINE_COLOURS (the same in every plot), any other one after its kind, in the recorded order."""
    engines = list(dict.fromkeys(engines))
    known = list(ENGINE_COLOURS)
    return sorted(engines, key=lambda e: (e != "logitgate", not e.startswith("logitgate"),
                                          known.index(e) if e in known else len(known), engines.index(e)))


# --------------------------------------------------------------------------- reading results


def result_kind(data: dict, path: Path | None = None) -> str:
    """regex, grammar or json-schema: from what the benchmark records in meta, else the file name."""
    meta = data.get("meta", {})
    if "regex_file" in meta:
        return "regex"
    if "grammar_files" in meta:
        return "grammar"
    if "schemas" in data or "subsets" in meta:
        return "json-schema"
    if path is not None:
        for kind in ("json-schema", "grammar", "regex"):
            if path.name.startswith(kind + "-"):
                return kind
    raise ValueError(f"{path or 'result'}: not a regex, grammar or json-schema benchmark result")


def run_subtitle(data: dict, path: Path | None, tdata: dict) -> str:
    """'run 2026-11-23 13:41 UTC · AMD EPYC, 2 cores, 23.5 GB · 32,000 tokens · quick'."""
    meta = data.get("meta", {})
    when = None
    if meta.get("started"):
        try:
            t = datetime.fromisoformat(str(meta["started"]))
            when = t.strftime("%Y-%m-%d %H:%M") + (" UTC" if t.utcoffset() is not None and not t.utcoffset() else "")
        except ValueError:
            when = str(meta["started"])
    if when is None and path is not None:
        m = re.search(r"(\d{8})-(\d{6})", path.name)
        if m:
            when = datetime.strptime("".join(m.groups()), "%Y%m%d%H%M%S").strftime("%Y-%m-%d %H:%M")
    parts = [f"run {when}" if when else "run date not recorded"]
    mach = meta.get("machine") or {}
    if mach:
        desc = [mach.get("cpu") or "unknown CPU"]
        if mach.get("cores"):
            usable = mach.get("cores_usable")
            desc.append(f"{mach['cores']} cores" + (f" ({usable} usable)" if usable and usable != mach["cores"] else ""))
        if mach.get("memory_gb"):
            desc.append(f"{mach['memory_gb']} GB")
        parts.append(", ".join(desc))
    vocab = tdata.get("vocab") or {}
    if vocab.get("n_tokens"):
        parts.append(f"{vocab['n_tokens']:,} tokens")
    if path is not None and path.stem.endswith("-quick"):
        parts.append("quick run")
    return " · ".join(parts)


def _mask_us(res: dict):
    """Mean and p99 (µs) of a regex / grammar result's mask fills over all walks, or None."""
    ns = list(res.get("mask_ns_first_walk") or []) + list(res.get("mask_ns_warm") or [])
    if not ns:
        return None
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return float(us.mean()), float(np.percentile(us, 99))


class Panel:
    """Grouped-bar data: ``values[engine][i]`` for ``groups[i]`` (None = no bar, ``notes[engine][i]``
    says why), ``labels`` the text over a bar (default: its value). The last ``n_summary`` groups
    are summaries, drawn in a panel of their own on the same scale."""

    def __init__(self, groups, engines, n_summary=0, title=None):
        self.groups = list(groups)
        self.engines = list(engines)
        self.n_summary = n_summary
        self.title = title
        self.values = {e: [None] * len(self.groups) for e in self.engines}
        self.notes = {e: [None] * len(self.groups) for e in self.engines}
        self.labels = {e: [None] * len(self.groups) for e in self.engines}

    def has_data(self, engine=None):
        engines = [engine] if engine else self.engines
        return any(v is not None for e in engines for v in self.values[e])

    def keep(self, engines):
        self.engines = [e for e in self.engines if e in engines]

    def parts(self):
        """(detail, summary) sub-panels, the empty ones left out."""
        cut = len(self.groups) - self.n_summary
        out = []
        for lo, hi in ((0, cut), (cut, len(self.groups))):
            if hi > lo:
                p = Panel(self.groups[lo:hi], self.engines)
                for d in ("values", "notes", "labels"):
                    getattr(p, d).update({e: getattr(self, d)[e][lo:hi] for e in self.engines})
                out.append(p)
        return out


def items_panels(tdata: dict, engines: list, compile_key: str, what: str):
    """compile, mask-mean and mask-p99 panels of a regex or grammar result: one group per item, and
    a summary over the items every working engine compiled (median compile, mean of mask figures)."""
    items = list(tdata.get("paths") or {})
    results = tdata.get("results") or {}
    for e in engines:  # items only a result knows (a hand-made file without paths)
        items += [n for n in results.get(e) or {} if n not in items]

    def res(e, n):
        return (results.get(e) or {}).get(n) or {"status": "missing"}

    working = [e for e in engines if any(res(e, n).get("status") == "ok" for n in items)]
    common = [n for n in items if working and all(res(e, n).get("status") == "ok" for e in working)]
    k = 1 if len(items) > 1 and common else 0
    same = f"all {len(items)}" if len(common) == len(items) else f"same {len(common)}"
    comp = Panel(items + [f"median\n({same} {what})"] * k, engines, k)
    mean = Panel(items + [f"mean\n({same} {what})"] * k, engines, k)
    p99 = Panel(mean.groups, engines, k)
    for e in engines:
        for i, n in enumerate(items):
            r = res(e, n)
            if r.get("status") != "ok":
                for p in (comp, mean, p99):
                    p.notes[e][i] = str(r.get("status") or "missing")
                continue
            comp.values[e][i] = r.get(compile_key)
            ms = _mask_us(r)
            if ms:
                mean.values[e][i], p99.values[e][i] = ms
            else:
                mean.notes[e][i] = p99.notes[e][i] = "no fills"
        if k and e in working:
            j = len(items)
            cs = [c for c in (comp.values[e][items.index(n)] for n in common) if c is not None]
            comp.values[e][j] = float(np.median(cs)) if cs else None
            for p in (mean, p99):
                xs = [x for x in (p.values[e][items.index(n)] for n in common) if x is not None]
                p.values[e][j] = float(np.mean(xs)) if xs else None
        elif k:
            for p in (comp, mean, p99):
                p.notes[e][len(items)] = "none compiled"
    return comp, mean, p99


def json_groups(tdata: dict, engines: list):
    """(label, row getter) per group of a JSON Schema result: the JSONSchemaBench subsets, then the
    summaries ALL, its same set (common_bench), SUITE and its same set (common_suite)."""
    rows = tdata.get("rows") or {}
    subsets = []
    for e in engines:
        subsets += [g for g in rows.get(e) or {} if g not in ("ALL", "SUITE") and not g.startswith("suite:")
                    and g not in subsets]
    detail = [(g, lambda e, g=g: (rows.get(e) or {}).get(g)) for g in subsets]
    summary = []
    for top, common_key, name in (("ALL", "common_bench", "JSONSchemaBench"), ("SUITE", "common_suite", "suite")):
        if any(top in (rows.get(e) or {}) for e in engines):
            summary.append((top, lambda e, top=top: (rows.get(e) or {}).get(top)))
        common = tdata.get(common_key) or {}
        if common.get("engines"):
            label = f"{name}\nsame set ({len(common.get('names') or [])})"
            summary.append((label, lambda e, c=common: (c.get("rows") or {}).get(e) if e in c["engines"] else None))
    return detail, summary


def json_panels(tdata: dict, engines: list):
    """compile p50, mask mean and mask p99 panels of a JSON Schema result (one group per row)."""
    detail, summary = json_groups(tdata, engines)
    groups = detail + summary
    labels = [g for g, _ in groups]
    comp, mean, p99 = (Panel(labels, engines, len(summary)) for _ in range(3))
    for e in engines:
        for i, (_, get) in enumerate(groups):
            row = get(e)
            if row is None:
                for p in (comp, mean, p99):
                    p.notes[e][i] = "not run"
                continue
            if row.get("compile_p50_ms") is None:
                for p in (comp, mean, p99):
                    p.notes[e][i] = "none compiled" if row.get("compiled") == 0 else "–"
                continue
            comp.values[e][i] = row["compile_p50_ms"]
            for p, key in ((mean, "mask_mean_us"), (p99, "mask_p99_us")):
                p.values[e][i] = row.get(key)
                if row.get(key) is None:
                    p.notes[e][i] = "no fills"
    return comp, mean, p99


COVERAGE = (("compiled", "compiled", "schemas"), ("valid accepted", "valid_accepted", "valid_total"),
            ("invalid rejected", "invalid_rejected", "invalid_total"))


def coverage_panels(tdata: dict, engines: list):
    """% compiled / valid accepted / invalid rejected per engine, for ALL and SUITE; counts as labels."""
    rows = tdata.get("rows") or {}
    panels = []
    for top, title in (("ALL", "JSONSchemaBench (all subsets)"), ("SUITE", "JSON Schema Test Suite")):
        if not any(top in (rows.get(e) or {}) for e in engines):
            continue
        p = Panel([m[0] for m in COVERAGE], engines, title=title)
        for e in engines:
            row = (rows.get(e) or {}).get(top)
            for i, (_, num, den) in enumerate(COVERAGE):
                if row is None:
                    p.notes[e][i] = "not run"
                elif not row.get(den):
                    p.notes[e][i] = "no walks" if num != "compiled" else "none"
                else:
                    p.values[e][i] = 100.0 * row[num] / row[den]
                    p.labels[e][i] = f"{row[num]}/{row[den]}"
        panels.append(p)
    return panels


# --------------------------------------------------------------------------- drawing


def fmt_value(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.2f}"
    return f"{x:.2g}"


def wrap_label(text: str, width: int = 18) -> str:
    """Break a long item name (complex_span_constrained_relation_extraction) after '_' or '-'."""
    if len(text) <= width or "\n" in text:
        return text
    lines, line = [], ""
    for piece in re.split(r"(?<=[_\-/])", text):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    return "\n".join(lines + [line])


def y_scale(panel: Panel, percent=False):
    """(log?, ylim, annotate?) for a whole row of parts, so that they share one scale."""
    pos = [v for e in panel.engines for v in panel.values[e] if v is not None and v > 0]
    annotate = len(panel.groups) * max(1, len(panel.engines)) <= 40
    if percent:
        return False, (0, 118), True
    if not pos:
        return False, None, annotate
    lo, hi = min(pos), max(pos)
    if hi / lo > 30:
        return True, (lo / 3, hi * (6 if annotate else 3)), annotate
    return False, (0, hi * (1.35 if annotate else 1.1)), annotate


def draw_bars(ax, panel: Panel, ylabel, log=False, ylim=None, annotate=False, percent=False):
    """Grouped bars on ax: one group per panel.groups entry, one bar per engine (fixed colours);
    a missing bar gets its note written along the bottom of the axes."""
    groups, engines = panel.groups, panel.engines
    n = max(1, len(engines))
    width = 0.8 / n
    x = np.arange(len(groups))
    if log:
        ax.set_yscale("log")
    base = blended_transform_factory(ax.transData, ax.transAxes)
    for k, e in enumerate(engines):
        xs = x - 0.4 + width * (k + 0.5)
        heights = [v if v is not None and (v > 0 or not log) else np.nan for v in panel.values[e]]
        ax.bar(xs, heights, width * 0.92, color=engine_colour(e), label=e, edgecolor="white", linewidth=0.4)
        for i, v in enumerate(panel.values[e]):
            if v is None:
                if panel.notes[e][i]:
                    ax.text(xs[i], 0.02, panel.notes[e][i], transform=base, rotation=90, ha="center",
                            va="bottom", fontsize=7, color=FAIL_COLOUR, clip_on=True)
                continue
            text = panel.labels[e][i] or (fmt_value(v) if annotate else None)
            if text and (v > 0 or not log):
                ax.annotate(text, (xs[i], v), xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7, rotation=0 if percent and n <= 4 else 90)
    labels = [wrap_label(g) for g in groups]
    long = len(groups) > 6 or max((len(line) for g in labels for line in g.split("\n")), default=0) > 16
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=35 if long else 0, ha="right" if long else "center",
                       rotation_mode="anchor" if long else "default", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    if ylabel:
        ax.set_ylabel(ylabel + (" (log scale)" if log else ""))
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.set_axisbelow(True)
    if ylim:
        ax.set_ylim(*ylim)
    if panel.title:
        ax.set_title(panel.title, fontsize=9)


def draw_row(axes_row, panel: Panel, ylabel: str, title=None, percent=False, ticks=True):
    """A panel over a row of axes: its detail groups, then its summary groups, on one y scale."""
    log, ylim, annotate = y_scale(panel, percent)
    for j, (ax, part) in enumerate(zip(axes_row, panel.parts())):
        draw_bars(ax, part, ylabel if j == 0 else None, log, ylim, annotate, percent)
        if j:
            ax.tick_params(axis="y", labelleft=False)
        if not ticks:
            ax.tick_params(axis="x", labelbottom=False)
    if title:
        axes_row[0].set_title(title, fontsize=9, loc="left")
    if not panel.has_data():
        axes_row[0].text(0.5, 0.5, "no data", transform=axes_row[0].transAxes, ha="center", va="center",
                         fontsize=12, color="grey")


def new_figure(panels_per_row, n_rows: int = 1, min_w: float = 7.5):
    """A figure for rows of panels laid out like panels_per_row (list of Panels side by side:
    each panel's parts get their own axes, widths in proportion to their groups)."""
    widths = [max(len(part.groups), 1.2) for p in panels_per_row for part in (p.parts() or [p])]
    n_eng = max((len(p.engines) for p in panels_per_row), default=1)
    per_group = 0.3 + 0.17 * max(1, n_eng)
    w = min(22.0, max(min_w, 1.6 + sum(widths) * per_group))
    rotated = any(len(p.groups) > 6 or max((len(g) for g in p.groups), default=0) > 16 for p in panels_per_row)
    fig = Figure(figsize=(w, 1.5 + 3.3 * n_rows + (1.0 if rotated else 0.3)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, len(widths), squeeze=False, gridspec_kw={"width_ratios": widths})
    return fig, axes


def finish(fig, engines, title: str, subtitle: str, path: Path) -> Path:
    fig.suptitle(f"{title}\n{subtitle}", fontsize=11)
    handles = [Patch(facecolor=engine_colour(e), label=e) for e in engines]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7), fontsize=8, frameon=False)
    fig.savefig(path, format="png")
    return path


# --------------------------------------------------------------------------- per kind


def plot_file(json_path: Path, out_dir: Path) -> list:
    """Every PNG of one result file (per tokenizer: compile, mask, and coverage for JSON Schema)."""
    json_path = Path(json_path)
    data = json.loads(json_path.read_text(encoding="utf-8"))
    kind = result_kind(data, json_path)
    meta = data.get("meta", {})
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for tname, tdata in (data.get("tokenizers") or {}).items():
        results = tdata.get("results") or {}
        engines = order_engines([e for e in meta.get("engines") or [] if e in results] + list(results))
        sub = run_subtitle(data, json_path, tdata)
        head = f"{KIND_TITLE[kind]} benchmark · {tname}"
        stem = f"{json_path.stem}-{tname}"
        if kind == "json-schema":
            comp, mean, p99 = json_panels(tdata, engines)
            comp_label = "compile p50 ms"
        elif kind == "regex":
            comp, mean, p99 = items_panels(tdata, engines, "compile_first_mask_ms", "regexes")
            comp_label = "compile→1st mask ms"
        else:
            comp, mean, p99 = items_panels(tdata, engines, "compile_ms", "grammars")
            comp_label = "compile ms"

        fig, axes = new_figure([comp])
        draw_row(axes[0], comp, comp_label)
        written.append(finish(fig, comp.engines, f"{head} · compile time", sub, out_dir / f"{stem}-compile.png"))

        with_mask = [e for e in engines if mean.has_data(e) or p99.has_data(e)]
        mean.keep(with_mask)
        p99.keep(with_mask)
        fig, axes = new_figure([mean], n_rows=2)
        draw_row(axes[0], mean, "mask mean µs", "mean time of one mask fill", ticks=False)
        draw_row(axes[1], p99, "mask p99 µs", "p99 time of one mask fill")
        written.append(finish(fig, mean.engines, f"{head} · mask time", sub, out_dir / f"{stem}-mask.png"))

        if kind == "json-schema":
            panels = coverage_panels(tdata, engines) or [Panel([m[0] for m in COVERAGE], engines)]
            fig, axes = new_figure(panels, min_w=9)
            for j, p in enumerate(panels):
                draw_row(axes[0][j:j + 1], p, "% of schemas / instances" if j == 0 else "", percent=True)
            written.append(finish(fig, engines, f"{head} · coverage and correctness", sub,
                                  out_dir / f"{stem}-coverage.png"))
    return written


def plot_results(json_paths, out_dir: Path) -> list[Path]:
    """Write the PNGs of every result file in json_paths into out_dir; print and return their paths."""
    out_dir = Path(out_dir)
    written = []
    for p in json_paths:
        for png in plot_file(Path(p), out_dir):
            print(png, flush=True)
            written.append(png)
    return written


def newest_results(results_dir: Path | None = None) -> list[Path]:
    """The newest result file of each kind in results_dir (default bench/results), by the time
    stamp in its name, then its mtime."""
    out = []
    for kind in KINDS:
        files = [f for f in Path(results_dir or RESULTS_DIR).glob(f"{kind}-*.json")
                 if re.fullmatch(rf"{kind}-\d{{8}}-\d{{6}}(-quick)?\.json", f.name)]
        if files:
            out.append(max(files, key=lambda f: (re.search(r"\d{8}-\d{6}", f.name).group(0), f.stat().st_mtime)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path,
                    help=f"result JSON files (default: the newest of each kind in {RESULTS_DIR})")
    ap.add_argument("--out", type=Path, default=None, help="folder for the PNGs (default: next to each result file)")
    args = ap.parse_args(argv)
    paths = args.results or newest_results()
    if not paths:
        ap.error(f"no result files given and none in {RESULTS_DIR}")
    for p in paths:
        if not p.is_file():
            ap.error(f"no such file: {p}")
    for p in paths:
        plot_results([p], args.out or p.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
