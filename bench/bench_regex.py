"""logitgate vs outlines-core, llguidance and xgrammar on the outlines-core benchmark regexes.

    python bench/bench_regex.py [--tokenizer spm32k|tekken131k|both] [--engines a,b,...] [--quick]

Each engine runs in its own worker process (bench/regex_worker.py), one after the other,
on the same vocabulary bytes (logitgate.Tokenizer.from_mistral). See bench/README.md for
what every column means.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runner  # noqa: E402
from peers import ENGINES, PEERS, bitmask_to_bool, pkg_version  # noqa: E402
from regex_worker import PYTHON_SIDE  # noqa: E402
from samples import REGEX_FILE, SAMPLES, check_samples, load_regexes  # noqa: E402
from vocab import TOKENIZER_FILES, TextEncoder, load_vocab, reference_token_bytes  # noqa: E402

DEFAULT_ENGINES = ("logitgate", "logitgate[background]", "logitgate[index]") + PEERS


# --------------------------------------------------------------------------- running workers


def run_worker(job: dict, work_dir: Path, timeout_s: float):
    """Run one engine on one tokenizer over job["items"] (see ``runner.run_worker``)."""
    return runner.run_worker(job, work_dir, timeout_s, "regex_worker.py", "regex")


def merge_rounds(rounds: list[dict]) -> dict:
    """One result per regex from the same regex's results in several rounds (each a fresh worker
    process): the median of each compile time and memory figure, the mask times of every round
    pooled, correctness only when every round agrees (an error or a refusal in any round wins)."""
    merged = {}
    for name in rounds[0]:
        runs = [r.get(name, {"status": "missing", "error": "absent from a round"}) for r in rounds]
        bad = next((x for x in runs if x.get("status") != "ok"), None)
        if bad is not None:
            merged[name] = bad
            continue
        res = dict(runs[0])  # round 0's details (messages, steps walked)
        for key in ("compile_ms", "compile_first_mask_ms", "full_index_ms", "rss_peak_delta_kb",
                    "rss_retained_delta_kb", "engine_reported_bytes", "engine_reported_bytes_after_walks",
                    "tracemalloc_peak_kb", "tracemalloc_retained_kb"):
            values = [x.get(key) for x in runs]
            if all(v is not None for v in values):
                res[key] = float(np.median(values))
                res[key + "_rounds"] = values
        for key in ("mask_ns_first_walk", "mask_ns_warm"):
            res[key] = [t for x in runs for t in x.get(key, [])]
        res["walks"] = sum(x.get("walks", 0) for x in runs)
        res["valid_ok"] = all(x["valid_ok"] for x in runs)
        res["invalid_rejected"] = all(x["invalid_rejected"] for x in runs)
        if not res["valid_ok"]:
            res["valid_detail"] = next(x["valid_detail"] for x in runs if not x["valid_ok"])
        if not res["invalid_rejected"]:
            res["invalid_detail"] = next(x["invalid_detail"] for x in runs if not x["invalid_rejected"])
        merged[name] = res
    return merged


# --------------------------------------------------------------------------- statistics


def mask_stats(res):
    ns = list(res.get("mask_ns_first_walk", [])) + list(res.get("mask_ns_warm", []))
    if not ns:
        return None
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return {"n": len(us), "mean": float(us.mean()), "p50": float(np.percentile(us, 50)),
            "p99": float(np.percentile(us, 99)), "max": float(us.max())}


def geo_mean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _ranges(pred) -> str:
    """The code points where pred(chr) holds, as the inside of a character class."""
    parts, start = [], None
    for cp in range(0x110001):
        inside = cp <= 0x10FFFF and pred(chr(cp))
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            parts.append(f"\\U{start:08x}" + (f"-\\U{cp - 1:08x}" if cp - 1 > start else ""))
            start = None
    return "".join(parts)


_RE_CLASS_CACHE: dict = {}


def _re_class(letter: str) -> str:
    """Inside of a character class equal to Python re's \\d, \\s or \\w on str patterns
    (str.isdecimal / str.isspace / str.isalnum or '_'), spelled for the `regex` module."""
    if letter not in _RE_CLASS_CACHE:
        pred = {"d": str.isdecimal, "s": str.isspace, "w": lambda c: c.isalnum() or c == "_"}[letter]
        _RE_CLASS_CACHE[letter] = _ranges(pred)
    return _RE_CLASS_CACHE[letter]


def re_compatible(pattern: str) -> str:
    """Spell \\d \\s \\w (and \\D \\S \\W outside classes) as explicit code-point classes, so
    that the `regex` module matches exactly what Python's `re` does (`regex` follows Unicode
    properties of another Unicode version: its \\s lacks \\x1c-\\x1f, its \\w lacks '²').
    \\D \\S \\W inside a character class are left as they are."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "dsw":
                out.append(_re_class(nxt) if in_class else f"[{_re_class(nxt)}]")
            elif nxt in "DSW" and not in_class:
                out.append(f"[^{_re_class(nxt.lower())}]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # a literal ] first in a class
                out.append("]")
                i += 1
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


class Arbiter:
    """Decides a disputed token with Python: may the text so far + the token's bytes still
    become a full match? Uses the `regex` module's partial matching (``re`` has none) on the
    pattern with re's classes spelled out (``re_compatible``); EOS: ``re.fullmatch``.
    Bytes that end inside a UTF-8 character are decided by trying every completion (up to
    two missing bytes, within a time budget); invalid UTF-8 is never allowed. Returns
    True/False, or None when it cannot say (a special token, budget spent)."""

    def __init__(self, pattern, tokens, special_ids, eos_ids, budget_s=3.0):
        import regex as regex_module

        self.pat = regex_module.compile(re_compatible(pattern))
        self.re_pat = re.compile(pattern)
        self.tokens, self.special, self.eos = tokens, special_ids, set(eos_ids)
        self.deadline = time.monotonic() + budget_s

    def allowed(self, prefix: bytes, token_id: int):
        if token_id in self.eos:
            return self.re_pat.fullmatch(prefix.decode("utf-8")) is not None
        if token_id in self.special:
            return None
        data = prefix + self.tokens[token_id]
        try:
            return self.pat.fullmatch(data.decode("utf-8"), partial=True) is not None
        except UnicodeDecodeError as e:
            if e.reason != "unexpected end of data":
                return False  # no text contains invalid UTF-8
            head, tail = data[:e.start].decode("utf-8"), data[e.start:]
        lead = tail[0]
        need = (2 if lead < 0xE0 else 3 if lead < 0xF0 else 4) - len(tail)
        if need > 2:
            return None
        for cont in itertools.product(range(0x80, 0xC0), repeat=need):
            if time.monotonic() > self.deadline:
                return None
            try:
                ch = (tail + bytes(cont)).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if self.pat.fullmatch(head + ch, partial=True) is not None:
                return True
        return False


def compare_masks(mask_root: Path, vocab, ref, other, regex_name, pattern, path_ids, max_judged=400):
    """Per-step count of tokens on which two engines' masks differ, on their common steps,
    with the arbiter's verdict on (a sample of) the disputed tokens."""
    a_path = mask_root / ref / "masks" / f"{regex_name}.npy"
    b_path = mask_root / other / "masks" / f"{regex_name}.npy"
    if not (a_path.exists() and b_path.exists()):
        return None
    tokens, V = vocab.tokens, vocab.vocab_size
    a, b = np.load(a_path), np.load(b_path)
    steps = min(len(a), len(b))
    per_step, only_ref, only_other, disputed = [], set(), set(), []
    for k in range(steps):
        ma, mb = bitmask_to_bool(a[k:k + 1], V), bitmask_to_bool(b[k:k + 1], V)
        diff = np.nonzero(ma != mb)[0]
        per_step.append(int(len(diff)))
        for t in diff.tolist():
            (only_ref if ma[t] else only_other).add(t)
            disputed.append((k, t, bool(ma[t])))
    union = only_ref | only_other
    verdict = {"ref": 0, "other": 0, "undecided": 0, "judged": 0}
    examples, other_right = [], []
    if disputed:
        arbiter = Arbiter(pattern, tokens, vocab.special_ids, vocab.eos_ids)
        stride = max(1, len(disputed) // max_judged)
        for k, t, ref_allows in disputed[::stride]:
            prefix = b"".join(tokens[i] for i in path_ids[:k])
            ok = arbiter.allowed(prefix, t)
            verdict["judged"] += 1
            if ok is None:
                verdict["undecided"] += 1
            else:
                verdict["ref" if ok == ref_allows else "other"] += 1
                if ok != ref_allows and len(other_right) < 5:
                    other_right.append(f"step {k}: {t} {tokens[t]!r} allowed by {ref if ref_allows else other} "
                                       f"only; Python: {'allowed' if ok else 'not allowed'}")
            if len(examples) < 4 and t not in [e[1] for e in examples]:
                examples.append((k, t, ref_allows, ok))
    return {
        "ref": ref, "other": other, "regex": regex_name, "steps": steps, "per_step": per_step,
        "steps_with_diff": sum(1 for d in per_step if d), "max_diff": max(per_step, default=0),
        "only_ref": len(only_ref), "only_other": len(only_other), "disputed": len(disputed),
        "non_ascii": sum(1 for t in union if any(c >= 0x80 for c in tokens[t])),
        "verdict": verdict, "other_right": other_right,
        "examples": [f"step {k}: {t} {tokens[t]!r} only in {ref if ra else other}"
                     f" (Python: {'allowed' if ok else 'not allowed' if ok is not None else '?'})"
                     for k, t, ra, ok in examples],
    }


# --------------------------------------------------------------------------- report


def fmt(x, nd=2):
    if x is None:
        return "–"
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.{nd}f}"


def fmt_mem(res, engine):
    if engine in PYTHON_SIDE and res.get("tracemalloc_peak_kb") is not None:
        kb, tag = res["tracemalloc_peak_kb"], "tm"
    elif res.get("rss_peak_delta_kb") is not None:
        kb, tag = res["rss_peak_delta_kb"], "rss"
    else:
        return "–"
    text = f"{_kb(kb)} ({tag})"
    if res.get("engine_reported_bytes") is not None:
        text += f", {_kb(res['engine_reported_bytes'] / 1024)} (self)"
    return text


def _kb(kb):
    return f"{kb / 1024:.1f} MB" if kb >= 1024 else f"{kb:.0f} KB"


def yes_no(flag):
    return "ok" if flag else "**NO**"


def print_tokenizer_report(tname, tdata, engines, regexes):
    lines = report_header(tname, tdata, engines)
    table, notes = report_table(tdata, engines, regexes)
    lines += table + report_summary(tdata, engines, regexes) + report_agreement(tdata["comparisons"])
    if notes:
        lines += ["\nNotes:\n"] + notes
    print("\n".join(lines), flush=True)


def report_header(tname, tdata, engines):
    v = tdata["vocab"]
    out = [f"\n## {tname}: {TOKENIZER_FILES[tname]} ({v['n_tokens']:,} tokens, mask width {v['vocab_size']:,}, "
           f"vocabulary from {v['source']}, loaded in {v['load_s']:.2f} s)\n"]
    if v.get("crosscheck"):
        out.append(f"Vocabulary cross-check against mistral-common's own reader: {v['crosscheck']}\n")
    setups = []
    for e in engines:
        s = tdata["setup"].get(e)
        setups.append(f"{e} {s['engine_setup_s']:.2f} s (import {s['import_s']:.2f} s, "
                      f"warm-up {s['warmup_s']:.2f} s)" if s else f"{e} failed")
    out.append("Tokenizer setup per engine (not in compile times): " + "; ".join(setups) + "\n")
    for e in engines:
        err = (tdata["setup"].get(e) or {}).get("warmup_error")
        if err:
            out.append(f"Warm-up of {e} failed: {err[:300]}\n")
    return out


def report_table(tdata, engines, regexes):
    out = ["| regex | engine | compile→1st mask ms | full index ms | mask mean µs | p50 µs | p99 µs | max µs "
           "| index mem | valid ok | invalid rejected |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    notes = []
    for r in regexes:
        for e in engines:
            res = tdata["results"].get(e, {}).get(r, {"status": "missing"})
            if res.get("status") != "ok":
                out.append(f"| {r} | {e} | {res.get('status')} | – | – | – | – | – | – | – | – |")
                notes.append(f"- {r} / {e}: {res.get('status')}: {(res.get('error') or '')[:300]}")
                continue
            ms = mask_stats(res) or {}
            out.append(
                f"| {r} | {e} | {fmt(res['compile_first_mask_ms'])} | {fmt(res['full_index_ms'])} "
                f"| {fmt(ms.get('mean'))} | {fmt(ms.get('p50'))} | {fmt(ms.get('p99'))} | {fmt(ms.get('max'))} "
                f"| {fmt_mem(res, e)} | {yes_no(res['valid_ok'])} | {yes_no(res['invalid_rejected'])} |")
            if not res["valid_ok"]:
                notes.append(f"- {r} / {e}: valid sample refused: {res['valid_detail']}")
            if not res["invalid_rejected"]:
                notes.append(f"- {r} / {e}: invalid sample not rejected: {res['invalid_detail']}")
    return out, notes


def report_summary(tdata, engines, regexes):
    def result(e, r):
        return tdata["results"].get(e, {}).get(r, {})

    working = [e for e in engines if any(result(e, r).get("status") == "ok" for r in regexes)]
    common = [r for r in regexes if all(result(e, r).get("status") == "ok" for e in working)]
    out = ["\nSummary per engine: geo-mean of compile→1st mask over the regexes it compiled, and over "
           "the regexes every working engine compiled (same set); mean of the per-regex mask means and p99s.\n",
           "| engine | compiled | compile geo-mean ms | same-set geo-mean ms | full index geo-mean ms "
           "| mean of mask means µs | mean p99 µs | valid ok | invalid rejected |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in engines:
        ok = [result(e, r) for r in regexes if result(e, r).get("status") == "ok"]
        stats = [st for st in (mask_stats(x) for x in ok) if st]
        same = [result(e, r)["compile_first_mask_ms"] for r in common] if e in working else []
        out.append(
            f"| {e} | {len(ok)}/{len(regexes)} | {fmt(geo_mean([x['compile_first_mask_ms'] for x in ok]))} "
            f"| {fmt(geo_mean(same))} ({len(common)}) | {fmt(geo_mean([x['full_index_ms'] for x in ok]))} "
            f"| {fmt(np.mean([st['mean'] for st in stats]) if stats else None)} "
            f"| {fmt(np.mean([st['p99'] for st in stats]) if stats else None)} "
            f"| {sum(1 for x in ok if x['valid_ok'])}/{len(regexes)} "
            f"| {sum(1 for x in ok if x['invalid_rejected'])}/{len(regexes)} |")
    return out


def report_agreement(cmps):
    out = ["\nMask agreement along the valid sample: at each step, the tokens whose bit differs between "
           "the two engines (0 expected between exact engines). Disputed tokens are judged by Python "
           "(the `regex` module's partial match with `re`'s classes; see README): 'ref right' = "
           "Python agrees with the first engine.\n"]
    if not cmps:
        return out + ["(no pair of engines to compare)"]
    out += ["| regex | engines | steps differing | max tokens/step | only in ref | only in other "
            "| non-ASCII | ref right / other right / undecided (judged) | example |",
            "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for c in cmps:
        v = c["verdict"]
        judged = f"{v['ref']} / {v['other']} / {v['undecided']} ({v['judged']})" if c["disputed"] else "–"
        out.append(f"| {c['regex']} | {c['ref']} vs {c['other']} | {c['steps_with_diff']}/{c['steps']} "
                   f"| {c['max_diff']} | {c['only_ref']} | {c['only_other']} | {c['non_ascii']} | {judged} "
                   f"| {(c['examples'] or ['–'])[0]} |")
    against = [(c, e) for c in cmps for e in c["other_right"]]
    if against:
        out.append(f"\nTokens where Python sides with the other engine (candidate {cmps[0]['ref']} bugs):\n")
        out += [f"- {c['regex']} vs {c['other']}: {e}" for c, e in against]
    else:
        out.append(f"\nPython sided with {cmps[0]['ref']} on every judged disputed token.")
    return out


# --------------------------------------------------------------------------- machine info


def machine_info():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gb": round(mem_gb, 1) if mem_gb else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def engine_versions():
    dists = ["logitgate", "outlines-core", "llguidance", "xgrammar", "numpy", "numba",
             "mistral-common", "sentencepiece", "tiktoken"]
    return {d: pkg_version(d) for d in dists}


# --------------------------------------------------------------------------- main


def crosscheck_vocab(vocab) -> str:
    """Compare the library's token bytes with an independent read of the same file."""
    ref_tokens, ref_special, ref_eos = reference_token_bytes(vocab.name)
    problems = []
    if len(ref_tokens) != len(vocab.tokens):
        problems.append(f"{len(vocab.tokens)} tokens vs {len(ref_tokens)}")
    bad = [i for i, (a, b) in enumerate(zip(vocab.tokens, ref_tokens))
           if i not in ref_special and a != b]
    if bad:
        problems.append(f"{len(bad)} token(s) with other bytes, e.g. "
                        + ", ".join(f"{i}: {vocab.tokens[i]!r} vs {ref_tokens[i]!r}" for i in bad[:3]))
    if set(vocab.special_ids) != set(ref_special):
        problems.append(f"special ids differ ({len(vocab.special_ids)} vs {len(ref_special)})")
    if ref_eos not in vocab.eos_ids:
        problems.append(f"eos {vocab.eos_ids} vs {ref_eos}")
    return "identical" if not problems else "MISMATCH: " + "; ".join(problems)


class Tee:
    """Write stdout to the terminal and to the markdown copy of the report."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)

    def flush(self):
        for s in self.streams:
            s.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", choices=["spm32k", "tekken131k", "both"], default="both")
    ap.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                    help=f"comma-separated, from {', '.join(ENGINES)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="2 walks per regex instead of --repeat")
    ap.add_argument("--repeat", type=int, default=10, help="walks along each valid sample (default 10)")
    ap.add_argument("--walk-budget", type=float, default=None,
                    help="seconds of warm walks per regex before giving up on --repeat (default 5, quick 2)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per regex per engine (default 30)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="fresh worker processes per engine, engines taking turns (default 3): the report "
                         "gives the median compile time of the rounds and pools their mask times")
    ap.add_argument("--regexes", default=None, help="comma-separated subset of regex names")
    ap.add_argument("--vocab-source", choices=["logitgate", "reference"], default="logitgate",
                    help="where the token bytes come from (reference: mistral-common reader, "
                         "for running the peers without logitgate)")
    ap.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc compile")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder for the JSON results")
    ap.add_argument("--keep-work", action="store_true",
                    help="keep the temporary folder with the workers' masks and stderr")
    ap.add_argument("--plot", action="store_true",
                    help="also write PNG plots of the results next to them (bench/plots.py)")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        ap.error(f"unknown engine(s) {unknown}; choose from {list(ENGINES)}")
    if args.vocab_source == "reference":
        engines = [e for e in engines if not e.startswith("logitgate")]
    tokenizers = list(TOKENIZER_FILES) if args.tokenizer == "both" else [args.tokenizer]
    repeat = 2 if args.quick else max(1, args.repeat)
    rounds = 1 if args.quick else max(1, args.rounds)
    walk_budget = args.walk_budget if args.walk_budget is not None else (2.0 if args.quick else 5.0)

    regexes = load_regexes()
    check_samples(regexes)
    if args.regexes:
        wanted = args.regexes.split(",")
        if set(wanted) - set(regexes):
            ap.error(f"unknown regex(es) {sorted(set(wanted) - set(regexes))}; choose from {list(regexes)}")
        regexes = {k: v for k, v in regexes.items() if k in wanted}
    names = list(regexes)

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_base = out_dir / f"regex-{stamp}{'-quick' if args.quick else ''}"
    md_file = open(out_base.with_suffix(".md"), "w", encoding="utf-8")
    sys.stdout = Tee(sys.__stdout__, md_file)
    meta = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "machine": machine_info(), "versions": engine_versions(), "engines": engines,
        "repeat": repeat, "rounds": rounds, "walk_budget_s": walk_budget, "timeout_s": args.timeout,
        "regex_file": str(REGEX_FILE),
    }
    m = meta["machine"]
    print(f"# Regex benchmark: {', '.join(engines)}\n")
    print(f"Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), {m['memory_gb']} GB, "
          f"Python {m['python']}. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
          + f". Walks per regex: {repeat}; rounds: {rounds} (fresh processes per engine, engines in turn: "
          "compile times are the median of the rounds, mask times pooled); timeout "
          f"{args.timeout:g} s per regex per engine.", flush=True)

    report = {"meta": meta, "tokenizers": {}}
    tmp_root = Path(tempfile.mkdtemp(prefix="lg-bench-"))
    for tname in tokenizers:
        vocab = load_vocab(tname, args.vocab_source)
        encoder = TextEncoder(tname, vocab.tokens)
        items = []
        for name in names:
            valid, invalid = SAMPLES[name]
            items.append({"name": name, "regex": regexes[name],
                          "valid_ids": encoder.encode(valid), "invalid_ids": encoder.encode(invalid)})
        tdata = {
            "vocab": {"source": vocab.source, "n_tokens": len(vocab.tokens), "vocab_size": vocab.vocab_size,
                      "load_s": vocab.load_s, "n_special": len(vocab.special_ids), "eos": list(vocab.eos_ids),
                      "crosscheck": crosscheck_vocab(vocab) if vocab.source == "logitgate" else None},
            "paths": {it["name"]: {"valid": it["valid_ids"], "invalid": it["invalid_ids"]} for it in items},
            "setup": {}, "results": {}, "comparisons": [],
        }
        rounds_of: dict[str, list[dict]] = {e: [] for e in engines}
        for rnd in range(rounds):  # engines take turns, so a drift of the machine hits them alike
            for e in engines:
                work = tmp_root / tname / e / f"round{rnd}"
                work.mkdir(parents=True, exist_ok=True)
                job = {"tokenizer": tname, "engine": e, "vocab_source": args.vocab_source, "items": items,
                       "repeat": repeat, "walk_budget_s": walk_budget,
                       "mask_dir": str(tmp_root / tname / e / "masks" if rnd == 0 else work / "masks"),
                       "tracemalloc": not args.no_tracemalloc and rnd == 0}
                t0 = time.perf_counter()
                setup, results = run_worker(job, work, args.timeout)
                print(f"  [{tname}] {e} round {rnd + 1}/{rounds}: {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr, flush=True)
                if rnd == 0:
                    tdata["setup"][e] = setup
                rounds_of[e].append(results)
        for e in engines:
            tdata["results"][e] = merge_rounds(rounds_of[e])
        ref = next((e for e in ("logitgate", "llguidance", "xgrammar") if e in engines), None)
        for name in names:
            for other in engines:
                if ref and other != ref:
                    c = compare_masks(tmp_root / tname, vocab, ref, other, name, regexes[name],
                                      tdata["paths"][name]["valid"])
                    if c:
                        tdata["comparisons"].append(c)
        report["tokenizers"][tname] = tdata
        print_tokenizer_report(tname, tdata, engines, names)

    if args.keep_work:
        print(f"\nWorker files (masks, stderr) kept in {tmp_root}", file=sys.stderr)
    else:
        shutil.rmtree(tmp_root, ignore_errors=True)
    runtime = time.perf_counter() - started
    meta["runtime_s"] = runtime
    out_file = out_base.with_suffix(".json")
    out_file.write_text(json.dumps(report, indent=1, default=str))
    print(f"\nTotal runtime {runtime:.1f} s. Raw results: {out_file} (this report: {md_file.name})")
    sys.stdout = sys.__stdout__
    md_file.close()
    if args.plot:
        import plots

        plots.plot_results([out_file], out_file.parent)


if __name__ == "__main__":
    main()
