"""JSON Schema benchmark: logitgate next to llguidance, xgrammar, outlines-core and
lm-format-enforcer on JSONSchemaBench (with its MaskBench instances) and the JSON Schema Test Suite.

    python bench/bench_json_schema.py                 # --n 20 per subset, whole suite, both tokenizers
    python bench/bench_json_schema.py --quick         # --n 5, spm32k, a sample of the suite
    python bench/bench_json_schema.py --full          # every schema (lm-format-enforcer still --lmfe-n)
    python bench/bench_json_schema.py --subsets Github_easy,Kubernetes --engines llguidance,xgrammar --no-suite

Schemas and instances are read at run time from shared/data (bench/json_schema_data.py). Each engine
runs in its own worker process (bench/json_schema_worker.py, through runner.run_worker), one after
the other, on the same vocabulary bytes (logitgate.Tokenizer.from_mistral). See bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runner  # noqa: E402
from bench_grammar import Tee, crosscheck_vocab, fmt, machine_info  # noqa: E402
from json_schema_data import (  # noqa: E402
    ALL_SUBSETS, BENCH_SUBSETS, DATA_DIR, MASKBENCH_SUBSETS, SUITE_DRAFTS, dumps, is_valid, key_orders,
    load_jsonschemabench, load_test_suite, reorder_to_schema, sample_key, suite_remotes,
)
from peers import pkg_version  # noqa: E402
from vocab import TOKENIZER_FILES, TextEncoder, load_vocab  # noqa: E402

ENGINE_NAMES = ("logitgate", "logitgate[any]", "logitgate[strict]", "llguidance", "xgrammar",
                "outlines-core", "lm-format-enforcer")
# Which key order each engine is fed ("schema": reorder_to_schema; "original": as in the data).
ENGINE_ORDER = {"logitgate": "schema", "logitgate[any]": "original", "logitgate[strict]": None,
                "llguidance": "schema", "xgrammar": "schema", "outlines-core": "schema",
                "lm-format-enforcer": "original"}
LOGITGATE_ENGINES = ("logitgate", "logitgate[any]", "logitgate[strict]")
LMFE = "lm-format-enforcer"
SUITE = "suite"


# --------------------------------------------------------------------------- inputs


def select_instances(case, max_valid, max_invalid, suite):
    """All tests of a suite group; for JSONSchemaBench the first max_valid valid and the first
    max_invalid invalid instances (upstream order)."""
    if suite:
        return list(case.instances)
    valid = [i for i in case.instances if i.valid][:max_valid]
    invalid = [i for i in case.instances if not i.valid][:max_invalid]
    return sorted(valid + invalid, key=lambda i: i.index)


def prepare_cases(cases, args, log):
    """Texts for every selected instance, in the original and in the schema's key order; checks
    that reordering keeps the value (and jsonschema's verdict on the valid ones)."""
    remotes = suite_remotes()
    remote_texts = {u: dumps(d) for u, d in remotes.items()}
    prepared, moved, checked, problems = [], 0, 0, []
    t0 = time.perf_counter()
    for c in cases:
        suite = c.subset in SUITE_DRAFTS
        rem = remotes if suite else None
        schema_text = c.schema_text
        if suite and c.draft == "draft7" and isinstance(c.schema, dict) and "$schema" not in c.schema:
            # the suite's draft-7 groups leave the draft implicit: say it, for every engine alike
            schema_text = dumps({"$schema": "http://json-schema.org/draft-07/schema#", **c.schema})
        insts = []
        for inst in select_instances(c, args.max_valid, args.invalid, suite):
            orig = dumps(inst.data)
            new = reorder_to_schema(inst.data, c.schema, c.schema, draft=c.draft, remotes=rem)
            if new != inst.data:
                problems.append(f"{c.id}#{inst.index}: reordering changed the value")
                new = inst.data
            sch = dumps(new)
            if key_orders(new) != key_orders(inst.data):
                moved += 1
                if inst.valid and args.check_reorder:
                    checked += 1
                    before = is_valid(inst.data, c.schema, c.draft, rem)
                    after = is_valid(new, c.schema, c.draft, rem)
                    if before != after:
                        problems.append(f"{c.id}#{inst.index}: jsonschema {before} before reordering, {after} after")
            insts.append({"i": inst.index, "valid": inst.valid, "text": {"original": orig, "schema": sch},
                          "description": inst.description})
        item = {"name": c.id, "group": c.group if suite else c.subset, "suite": suite, "schema_text": schema_text,
                "draft": c.draft, "instances": insts, "schema_bytes": len(schema_text.encode("utf-8"))}
        if suite and "localhost:1234" in schema_text:
            item["remotes"] = remote_texts
        prepared.append(item)
    n_inst = sum(len(p["instances"]) for p in prepared)
    log(f"Instances: {n_inst} selected ({sum(1 for p in prepared for i in p['instances'] if i['valid'])} valid), "
        f"{moved} with keys moved by reorder_to_schema; reordered valid ones re-validated with jsonschema: "
        f"{checked}, problems: {len(problems)} ({time.perf_counter() - t0:.1f} s).\n")
    if problems:
        for p in problems[:20]:
            log(f"- REORDER PROBLEM {p}")
        raise SystemExit("reorder_to_schema broke instances (see above)")
    return prepared


def encode_items(prepared, encoder, vocab):
    """Token paths of every instance text (original and schema order), per tokenizer."""
    paths, failures = {}, []
    for p in prepared:
        for inst in p["instances"]:
            for variant, text in inst["text"].items():
                if text in paths:
                    continue
                try:
                    paths[text] = encoder.encode(text)
                except AssertionError as e:
                    paths[text] = None
                    failures.append(f"{p['name']}#{inst['i']}: {str(e)[:200]}")
    return paths, failures


def engine_items(prepared, engine, paths, lmfe_keep):
    order = ENGINE_ORDER[engine]
    items = []
    for p in prepared:
        if engine == LMFE and p["name"] not in lmfe_keep:
            continue
        insts = []
        if order is not None:
            for inst in p["instances"]:
                ids = paths.get(inst["text"][order])
                if ids is not None:
                    insts.append({"i": inst["i"], "valid": inst["valid"], "ids": ids})
        it = {"name": p["name"], "schema_text": p["schema_text"], "instances": insts}
        if "remotes" in p:
            it["remotes"] = p["remotes"]
        items.append(it)
    return round_robin(items, prepared)


def round_robin(items, prepared):
    """Items interleaved over their sources (each JSONSchemaBench subset, each suite draft) in
    proportion to their sizes: the k-th of n items of a source runs at position (k + 0.5) / n. If
    an engine's time budget runs out, every source is cut at about the same fraction."""
    source = {p["name"]: (p["draft"] if p["suite"] else p["group"]) for p in prepared}
    queues = {}
    for it in items:
        queues.setdefault(source[it["name"]], []).append(it)
    keyed = [((k + 0.5) / len(q), j, k, it) for j, q in enumerate(queues.values()) for k, it in enumerate(q)]
    return [it for *_, it in sorted(keyed, key=lambda x: x[:3])]


# --------------------------------------------------------------------------- running


class Ticker:
    """Prints the worker's progress (its last "progress <id>" line on stderr) every few seconds."""

    def __init__(self, work: Path, label: str, names: list, every: float):
        self.work, self.label, self.every = work, label, every
        self.index = {n: k for k, n in enumerate(names)}
        self.n = len(names)
        self.stop = threading.Event()
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def run(self):
        while not self.stop.wait(self.every):
            files = sorted(self.work.glob("stderr*.txt"), key=lambda f: f.stat().st_mtime)
            last = None
            if files:
                try:
                    with open(files[-1], "rb") as f:
                        f.seek(max(0, f.seek(0, 2) - 4096))
                        for line in f.read().decode("utf-8", "replace").splitlines():
                            if line.startswith("progress "):
                                last = line[len("progress "):].strip()
                except OSError:
                    pass
            where = f"{self.index.get(last, -1) + 1}/{self.n} ({last})" if last else "setting up"
            print(f"    {self.label}: {where}, {time.perf_counter() - self.t0:.0f} s",
                  file=sys.stderr, flush=True)


def run_engine(job, work, timeout_s, label, names, every):
    with Ticker(work, label, names, every):
        return runner.run_worker(job, work, timeout_s, "json_schema_worker.py", "schema")


# --------------------------------------------------------------------------- statistics


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else None


def summarize(results, names, paths_bytes, fills_by_name, lists=True):
    """One row of the report over the schemas ``names`` (``lists``: with the false rejects, each
    with where its walk stopped, and the false accepts; the group rows have them, not ALL)."""
    row = {"schemas": len(names), "compiled": 0, "unsupported": 0, "errors": 0, "timeouts": 0, "crashes": 0,
           "not_run": 0,
           "valid_total": 0, "valid_accepted": 0, "invalid_total": 0, "invalid_rejected": 0, "skipped": 0,
           "false_rejects": [], "false_accepts": []}
    compile_ms, first_us, fills = [], [], []
    for n in names:
        r = results.get(n, {"status": "missing"})
        st = r.get("status")
        if st == "ok":
            row["compiled"] += 1
            compile_ms.append(r["compile_ms"])
            if r.get("first_mask_us") is not None:
                first_us.append(r["first_mask_us"])
            fills.extend(fills_by_name.get(n, ()))
            for o in r.get("instances", []):
                if o["outcome"] in ("skipped", "error"):
                    row["skipped"] += 1
                    continue
                iid = f"{n}:{o['i']}"
                if o["valid"]:
                    row["valid_total"] += 1
                    if o["outcome"] == "accepted":
                        row["valid_accepted"] += 1
                    else:
                        row["false_rejects"].append({"id": iid, "why": o.get("why"), "taken": o.get("taken"),
                                                     "tokens": o.get("tokens"), "context": paths_bytes(n, o)})
                else:
                    row["invalid_total"] += 1
                    if o["outcome"] == "rejected":
                        row["invalid_rejected"] += 1
                    else:
                        row["false_accepts"].append(iid)
        elif st == "unsupported":
            row["unsupported"] += 1
        elif st == "timeout":
            row["timeouts"] += 1
        elif st == "skipped":
            row["not_run"] += 1
        elif st == "crash":
            row["crashes"] += 1
        else:
            row["errors"] += 1
    us = np.asarray(fills, dtype=np.float64) / 1e3
    row.update(compile_p50_ms=pct(compile_ms, 50), compile_p99_ms=pct(compile_ms, 99),
               first_mask_p50_us=pct(first_us, 50), fills=len(us),
               mask_mean_us=float(us.mean()) if len(us) else None, mask_p50_us=pct(us, 50),
               mask_p99_us=pct(us, 99), mask_max_us=float(us.max()) if len(us) else None)
    if not lists:
        row["false_rejects"] = len(row["false_rejects"])
        row["false_accepts"] = len(row["false_accepts"])
    return row


def row_cells(row, walks=True):
    tc = row["timeouts"] + row["crashes"]
    va = f"{row['valid_accepted']}/{row['valid_total']}" if walks else "–"
    ir = f"{row['invalid_rejected']}/{row['invalid_total']}" if walks else "–"
    return (f"{row['schemas']} | {row['compiled']} | {row['unsupported']} | {row['errors']} | "
            f"{tc if tc else 0}{' (' + str(row['crashes']) + ' crash)' if row['crashes'] else ''} | {row['not_run']} | "
            f"{fmt(row['compile_p50_ms'])} | {fmt(row['compile_p99_ms'])} | {fmt(row['first_mask_p50_us'])} | "
            f"{fmt(row['mask_mean_us']) if walks else '–'} | {fmt(row['mask_p50_us']) if walks else '–'} | "
            f"{fmt(row['mask_p99_us']) if walks else '–'} | {va} | {ir}")


HEADER = ("| schemas | compiled | unsupported | compile errors | timeouts/crashes | not run | compile p50 ms "
          "| compile p99 ms | 1st mask p50 µs | mask mean µs | mask p50 µs | mask p99 µs | valid accepted "
          "| invalid rejected |")
ALIGN = "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"


def normalize_error(msg: str) -> str:
    """A short, id-free form of an error message, to count errors of the same kind."""
    m = " ".join((msg or "").split())
    m = re.sub(r"\(at [^)]*\)", "(at …)", m)
    m = re.sub(r"\d+", "N", m)
    m = re.sub(r"'[^']{20,}'|\"[^\"]{20,}\"", "'…'", m)
    return m[:140]


# --------------------------------------------------------------------------- report


def print_tokenizer_report(tname, tdata, engines, groups_bench, groups_suite):
    v = tdata["vocab"]
    lines = [f"\n## {tname}: {TOKENIZER_FILES[tname]} ({v['n_tokens']:,} tokens, mask width "
             f"{v['vocab_size']:,}, vocabulary from {v['source']}, loaded in {v['load_s']:.2f} s)\n"]
    if v.get("crosscheck"):
        lines.append(f"Vocabulary cross-check against mistral-common's own reader: {v['crosscheck']}\n")
    if tdata["path_failures"]:
        lines.append(f"Token paths that do not spell their text (instances dropped): {len(tdata['path_failures'])}\n")
    setups = []
    for e in engines:
        s = tdata["setup"].get(e)
        setups.append(f"{e} {s['engine_setup_s']:.2f} s (import {s['import_s']:.2f} s, warm-up "
                      f"{s['warmup_s']:.2f} s with {s.get('warmup_with') or 'nothing'}; run {tdata['runtime'][e]:.0f} s)"
                      if s else f"{e} failed (run {tdata['runtime'].get(e, 0):.0f} s)")
    lines.append("Tokenizer setup per engine (not in compile times): " + "; ".join(setups) + "\n")
    for e in engines:
        err = (tdata["setup"].get(e) or {}).get("warmup_error")
        if err:
            lines.append(f"Warm-up of {e} failed: {err[:300]}\n")

    rows = tdata["rows"]
    if groups_bench:
        lines += [f"### JSONSchemaBench ({tname})\n",
                  "| subset | engine " + HEADER, "|---|---" + ALIGN]
        for g in groups_bench + ["ALL"]:
            for e in engines:
                r = rows[e].get(g)
                if r is None:
                    continue
                name = f"**{g}**" if g == "ALL" else g
                lines.append(f"| {name} | {e} | " + row_cells(r, e != "logitgate[strict]") + " |")
        lines += same_set_lines(tdata, engines, "bench")
    if groups_suite:
        lines += [f"\n### JSON Schema Test Suite ({tname}): summary\n",
                  "| drafts | engine " + HEADER + " tests passed |", "|---|---" + ALIGN + "---:|"]
        for e in engines:
            r = rows[e].get("SUITE")
            if r is None:
                continue
            passed = r["valid_accepted"] + r["invalid_rejected"]
            lines.append(f"| {'+'.join(SUITE_DRAFTS)} | {e} | " + row_cells(r, e != "logitgate[strict]")
                         + f" | {passed}/{r['tests']} |" if e != "logitgate[strict]"
                         else f"| {'+'.join(SUITE_DRAFTS)} | {e} | " + row_cells(r, False) + " | – |")
        walkers = [e for e in engines if e != "logitgate[strict]"]
        lines += [f"\n### JSON Schema Test Suite ({tname}): tests passed per keyword file\n",
                  "A test passes when a valid instance is accepted or an invalid one rejected; tests of a "
                  "group the engine did not compile (or did not run) count as not passed (`nc`: groups not "
                  "compiled; `p/t`: the engine ran only t of the file's tests).\n",
                  "| file | tests | " + " | ".join(walkers) + " |", "|---|---:|" + "---:|" * len(walkers)]
        for g in groups_suite:
            cells = []
            total = tdata["suite_group_tests"][g]
            for e in walkers:
                r = rows[e].get("suite:" + g)
                if r is None:
                    cells.append("–")
                    continue
                passed = r["valid_accepted"] + r["invalid_rejected"]
                nc = r["schemas"] - r["compiled"]
                of = f"/{r['tests']}" if r["tests"] != total else ""  # lm-format-enforcer: fewer groups
                cells.append(f"{passed}{of}{' (' + str(nc) + ' nc)' if nc else ''}")
            lines.append(f"| {g} | {total} | " + " | ".join(cells) + " |")
    lines += error_lines(tdata, engines)
    print("\n".join(lines), flush=True)


def same_set_lines(tdata, engines, which):
    common = tdata["common_" + which]
    if not common["engines"]:
        return []
    out = [f"\nSame set ({len(common['names'])} schemas compiled by every engine that ran the whole "
           f"selection: {', '.join(common['engines'])}): compile p50 / p99 ms, mask mean / p99 µs.\n",
           "| engine | compile p50 ms | compile p99 ms | mask mean µs | mask p99 µs |", "|---|---:|---:|---:|---:|"]
    for e in common["engines"]:
        r = common["rows"][e]
        out.append(f"| {e} | {fmt(r['compile_p50_ms'])} | {fmt(r['compile_p99_ms'])} | {fmt(r['mask_mean_us'])} "
                   f"| {fmt(r['mask_p99_us'])} |")
    return out


def error_lines(tdata, engines, top=6):
    out = ["\nMost frequent reasons a schema did not compile (normalised message: count):\n"]
    any_ = False
    for e in engines:
        c = Counter()
        for r in tdata["results"].get(e, {}).values():
            if r.get("status") in ("unsupported", "error", "timeout", "crash"):
                c[f"{r['status']}: {normalize_error(r.get('error', ''))}"] += 1
        if c:
            any_ = True
            out.append(f"- **{e}**: " + "; ".join(f"`{m}` ×{k}" for m, k in c.most_common(top)))
    return out if any_ else []


def print_logitgate_modes_report(tdata, engines, groups):
    """What strict mode refuses (keywords of the SchemaErrors) and what strict=False relaxes."""
    lines = []
    if "logitgate[strict]" in engines:
        rows, results = tdata["rows"]["logitgate[strict]"], tdata["results"]["logitgate[strict]"]
        lax = tdata["results"].get("logitgate", {})
        kw, refused, also_lax = Counter(), 0, 0
        for name, r in results.items():
            if r.get("status") == "unsupported":
                refused += 1
                if lax.get(name, {}).get("status") == "unsupported":
                    also_lax += 1  # not a strictness refusal: strict=False refuses it too
                    continue
                for k in set(r.get("keywords") or ["?"]):
                    kw[k] += 1
        lines += ["\n### logitgate strict mode (strict=True): schemas it refuses\n",
                  f"{refused} of {len(results)} schemas refused with a SchemaError"
                  + (f", {also_lax} of them refused by strict=False too (unsatisfiable, unresolvable, ...)"
                     if "logitgate" in engines else "") + ". Per subset: "
                  + ", ".join(f"{g} {rows[g]['unsupported']}/{rows[g]['schemas']}" for g in groups if g in rows)
                  + ". Keywords the strict-only refusals point at (a schema counts once per keyword):\n"]
        if kw:
            lines += ["| keyword | schemas |", "|---|---:|"] + [f"| `{k}` | {n} |" for k, n in kw.most_common()]
    if "logitgate" in engines:
        results = tdata["results"]["logitgate"]
        kw, relaxed = Counter(), 0
        for r in results.values():
            if r.get("relaxed_keywords"):
                relaxed += 1
                for k in set(r["relaxed_keywords"]):
                    kw[k] += 1
        ok = sum(1 for r in results.values() if r.get("status") == "ok")
        lines += [f"\nlogitgate (strict=False) relaxed something (`Grammar.relaxed`) in {relaxed} of the {ok} "
                  f"schemas it compiled" + (": " + ", ".join(f"`{k}` {n}" for k, n in kw.most_common()) if kw else "")
                  + "."]
    if lines:
        print("\n".join(lines), flush=True)


# --------------------------------------------------------------------------- main


def engine_versions():
    dists = ["logitgate", "llguidance", "xgrammar", "outlines-core", "lm-format-enforcer", "jsonschema",
             "referencing", "numpy", "numba", "mistral-common", "sentencepiece", "torch"]
    return {d: pkg_version(d) for d in dists}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", choices=["spm32k", "tekken131k", "both"], default=None,
                    help="default both (quick: spm32k)")
    ap.add_argument("--engines", default=",".join(ENGINE_NAMES),
                    help=f"comma-separated, from {', '.join(ENGINE_NAMES)} (default: all)")
    ap.add_argument("--subsets", default=None,
                    help="comma-separated JSONSchemaBench subsets (default: all 21; 'bench' = the paper's 10, "
                         "'maskbench' = the 11 MaskBench-only ones, 'none' = no JSONSchemaBench)")
    ap.add_argument("--n", type=int, default=None, help="schemas per subset, deterministic sample (default 20, quick 5)")
    ap.add_argument("--full", action="store_true", help="every schema of every subset (lm-format-enforcer still --lmfe-n)")
    ap.add_argument("--lmfe-n", type=int, default=None,
                    help="schemas per subset for lm-format-enforcer, the first of the same sample (default 5, quick 2; 0 = same as --n)")
    ap.add_argument("--lmfe-suite-n", type=int, default=None,
                    help="test-suite groups per draft for lm-format-enforcer (default 40, quick 10; 0 = all)")
    ap.add_argument("--max-valid", type=int, default=3, help="valid instances per schema (default 3)")
    ap.add_argument("--invalid", type=int, default=3, help="invalid instances per schema (default 3)")
    ap.add_argument("--suite", dest="suite", action="store_true", default=True, help="run the JSON Schema Test Suite (default)")
    ap.add_argument("--no-suite", dest="suite", action="store_false")
    ap.add_argument("--suite-n", type=int, default=None,
                    help="test-suite groups per draft, deterministic sample (default all, quick 30)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per schema per engine (default 30)")
    ap.add_argument("--walk-budget", type=float, default=None,
                    help="seconds of instance walks per schema; later instances are skipped (default 0.7 × timeout)")
    ap.add_argument("--engine-budget", type=float, default=None,
                    help="seconds per engine per tokenizer (setup included); schemas not started by then are "
                         "'not run' (default 300, quick 120; 0 or --full: unlimited). Schemas are interleaved over "
                         "the subsets and suite drafts, so a cut spreads over all of them")
    ap.add_argument("--quick", action="store_true", help="n=5, one tokenizer (spm32k), 30 suite groups per draft")
    ap.add_argument("--no-check-reorder", dest="check_reorder", action="store_false",
                    help="skip re-validating reordered valid instances with jsonschema")
    ap.add_argument("--vocab-source", choices=["logitgate", "reference"], default="logitgate")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--keep-work", action="store_true", help="keep the workers' job files and stderr")
    ap.add_argument("--plot", action="store_true",
                    help="also write PNG plots of the results next to them (bench/plots.py)")
    ap.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines (stderr)")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINE_NAMES]
    if unknown:
        ap.error(f"unknown engine(s) {unknown}; choose from {list(ENGINE_NAMES)}")
    if args.vocab_source == "reference":
        engines = [e for e in engines if e not in LOGITGATE_ENGINES]
    if args.subsets in (None, "all"):
        subsets = list(ALL_SUBSETS)
    elif args.subsets == "none":
        subsets = []
    elif args.subsets == "bench":
        subsets = list(BENCH_SUBSETS)
    elif args.subsets == "maskbench":
        subsets = list(MASKBENCH_SUBSETS)
    else:
        subsets = [s.strip() for s in args.subsets.split(",") if s.strip()]
        bad = [s for s in subsets if s not in ALL_SUBSETS]
        if bad:
            ap.error(f"unknown subset(s) {bad}; choose from {list(ALL_SUBSETS)}")
    tokenizer = args.tokenizer or ("spm32k" if args.quick else "both")
    tokenizers = list(TOKENIZER_FILES) if tokenizer == "both" else [tokenizer]
    n = None if args.full else (args.n if args.n is not None else (5 if args.quick else 20))
    lmfe_n = args.lmfe_n if args.lmfe_n is not None else (2 if args.quick else 5)
    lmfe_n = n if lmfe_n == 0 else (lmfe_n if n is None else min(lmfe_n, n))
    suite_n = args.suite_n if args.suite_n is not None else (30 if args.quick else None)
    lmfe_suite_n = args.lmfe_suite_n if args.lmfe_suite_n is not None else (10 if args.quick else 40)
    lmfe_suite_n = suite_n if lmfe_suite_n == 0 else (lmfe_suite_n if suite_n is None else min(lmfe_suite_n, suite_n))
    walk_budget = args.walk_budget if args.walk_budget is not None else 0.7 * args.timeout
    engine_budget = args.engine_budget if args.engine_budget is not None else (
        0 if args.full else (120 if args.quick else 300))
    engine_budget = engine_budget or None

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_base = out_dir / f"json-schema-{stamp}{'-quick' if args.quick else ''}"
    md_file = open(out_base.with_suffix(".md"), "w", encoding="utf-8")
    sys.stdout = Tee(sys.__stdout__, md_file)
    meta = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "machine": machine_info(), "versions": engine_versions(), "engines": engines, "subsets": subsets,
        "n_per_subset": n, "lmfe_n_per_subset": lmfe_n, "suite": args.suite, "suite_n_per_draft": suite_n,
        "lmfe_suite_n_per_draft": lmfe_suite_n, "max_valid": args.max_valid, "max_invalid": args.invalid,
        "timeout_s": args.timeout, "walk_budget_s": walk_budget, "engine_budget_s": engine_budget, "data_dir": str(DATA_DIR),
        "tokenizers": tokenizers,
    }
    m = meta["machine"]
    print(f"# JSON Schema benchmark: {', '.join(engines)}\n")
    print(f"Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), {m['memory_gb']} GB, "
          f"Python {m['python']}. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".\n")
    print(f"Data: {DATA_DIR}. JSONSchemaBench: {len(subsets)} subset(s), "
          f"{'all' if n is None else n} schema(s) per subset (deterministic sample: smallest sha256 of the id), "
          f"up to {args.max_valid} valid + {args.invalid} invalid instances per schema. Test suite: "
          f"{('all groups' if suite_n is None else f'{suite_n} groups per draft') if args.suite else 'not run'}. "
          f"{LMFE} (slow) runs on the first {lmfe_n} schema(s) of each subset's sample"
          f"{' and ' + ('all' if lmfe_suite_n is None else str(lmfe_suite_n)) + ' suite groups per draft' if args.suite else ''}"
          f" only. Timeout {args.timeout:g} s per schema per engine (instance walks stop after {walk_budget:g} s); "
          f"time budget per engine per tokenizer: {f'{engine_budget:g} s' if engine_budget else 'unlimited'} "
          f"(schemas interleaved over the subsets in proportion to their sizes; those not started within it are 'not run').\n",
          flush=True)

    def log(s):
        print(s, flush=True)

    cases = load_jsonschemabench(subsets, n) if subsets else []
    suite_cases = load_test_suite(SUITE_DRAFTS, suite_n) if args.suite else []
    prepared = prepare_cases(cases + suite_cases, args, log)
    groups_bench = [s for s in subsets if any(p["group"] == s and not p["suite"] for p in prepared)]
    groups_suite = sorted({p["group"] for p in prepared if p["suite"]})
    lmfe_keep = set()
    for s in subsets:
        ids = [p["name"] for p in prepared if not p["suite"] and p["group"] == s]
        lmfe_keep.update(sorted(ids, key=sample_key)[:lmfe_n] if lmfe_n is not None else ids)
    for d in SUITE_DRAFTS:
        ids = [c.id for c in suite_cases if c.subset == d]
        lmfe_keep.update(sorted(ids, key=sample_key)[:lmfe_suite_n] if lmfe_suite_n is not None else ids)
    by_name = {p["name"]: p for p in prepared}
    names_all = [p["name"] for p in prepared]

    report = {"meta": meta, "schemas": {p["name"]: {"group": p["group"], "suite": p["suite"],
                                                     "schema_bytes": p["schema_bytes"],
                                                     "instances": [{"i": i["i"], "valid": i["valid"]}
                                                                   for i in p["instances"]]}
                                         for p in prepared},
              "tokenizers": {}}
    tmp_root = Path(tempfile.mkdtemp(prefix="lg-jsbench-"))
    strict_printed = False
    for tname in tokenizers:
        # logitgate[strict] builds Grammars only (tokenizer-independent): it runs with the first tokenizer
        t_engines = [e for e in engines if e != "logitgate[strict]" or tname == tokenizers[0]]
        vocab = load_vocab(tname, args.vocab_source)
        encoder = TextEncoder(tname, vocab.tokens)
        paths, failures = encode_items(prepared, encoder, vocab)
        tdata = {
            "vocab": {"source": vocab.source, "n_tokens": len(vocab.tokens), "vocab_size": vocab.vocab_size,
                      "load_s": vocab.load_s, "n_special": len(vocab.special_ids), "eos": list(vocab.eos_ids),
                      "crosscheck": crosscheck_vocab(vocab) if vocab.source == "logitgate" else None},
            "path_failures": failures, "setup": {}, "results": {}, "rows": {}, "runtime": {},
        }
        for e in t_engines:
            items = engine_items(prepared, e, paths, lmfe_keep)
            work = tmp_root / tname / re.sub(r"[^A-Za-z0-9_.-]", "_", e)
            work.mkdir(parents=True, exist_ok=True)
            job = {"tokenizer": tname, "engine": e, "vocab_source": args.vocab_source, "items": items,
                   "walk_budget_s": walk_budget,
                   "deadline": time.time() + engine_budget if engine_budget else None}
            t0 = time.perf_counter()
            print(f"  [{tname}] {e}: {len(items)} schemas ...", file=sys.stderr, flush=True)
            setup, results = run_engine(job, work, args.timeout, f"[{tname}] {e}", [it["name"] for it in items],
                                        args.progress_every)
            dt = time.perf_counter() - t0
            st = Counter(r.get("status") for r in results.values())
            print(f"  [{tname}] {e}: done in {dt:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(st.items())),
                  file=sys.stderr, flush=True)
            tdata["setup"][e] = setup
            tdata["results"][e] = results
            tdata["runtime"][e] = dt

        fills_all = {}
        for e in t_engines:
            res = tdata["results"][e]
            order = ENGINE_ORDER[e] or "original"
            ran = [nm for nm in names_all if nm in res]
            fills = fills_all[e] = {nm: res[nm].pop("fill_ns", []) for nm in ran}

            def ctx(name, o, order=order):
                """The text around the byte where the walk stopped: '…before ^ after'."""
                inst = next(i for i in by_name[name]["instances"] if i["i"] == o["i"])
                text = inst["text"][order]
                ids = paths.get(text) or []
                off = len(b"".join(vocab.tokens[t] for t in ids[:o.get("taken") or 0]))
                tb = text.encode("utf-8")
                return (f"{tb[max(0, off - 40):off].decode('utf-8', 'replace')} ^ "
                        f"{tb[off:off + 20].decode('utf-8', 'replace')}")

            rows = {}
            for g in groups_bench:
                nm = [x for x in ran if not by_name[x]["suite"] and by_name[x]["group"] == g]
                if nm:
                    rows[g] = summarize(res, nm, ctx, fills)
            bench_names = [x for x in ran if not by_name[x]["suite"]]
            if bench_names:
                rows["ALL"] = summarize(res, bench_names, ctx, fills, lists=False)
            suite_names = [x for x in ran if by_name[x]["suite"]]
            if suite_names:
                rows["SUITE"] = summarize(res, suite_names, ctx, fills, lists=False)
                rows["SUITE"]["tests"] = sum(len(by_name[x]["instances"]) for x in suite_names)
                for g in groups_suite:
                    nm = [x for x in suite_names if by_name[x]["group"] == g]
                    if nm:
                        rows["suite:" + g] = summarize(res, nm, ctx, fills)
                        rows["suite:" + g]["tests"] = sum(len(by_name[x]["instances"]) for x in nm)
            tdata["rows"][e] = rows
            for nm in ran:  # per-schema mask summary in place of the raw fill times
                f = np.asarray(fills[nm], dtype=np.float64) / 1e3
                if len(f):
                    res[nm]["mask_us"] = {"n": len(f), "mean": float(f.mean()), "p50": pct(f, 50),
                                          "p99": pct(f, 99), "max": float(f.max())}
        tdata["suite_tests"] = sum(len(p["instances"]) for p in prepared if p["suite"])
        tdata["suite_group_tests"] = {g: sum(len(p["instances"]) for p in prepared if p["suite"] and p["group"] == g)
                                      for g in groups_suite}
        # Same set: the schemas every engine that ran the whole selection compiled.
        for which, pred in (("bench", lambda p: not p["suite"]), ("suite", lambda p: p["suite"])):
            sel = [p["name"] for p in prepared if pred(p)]
            full = [e for e in t_engines if e != "logitgate[strict]"
                    and all(nm in tdata["results"][e] for nm in sel)
                    and any(tdata["results"][e][nm].get("status") == "ok" for nm in sel)]
            common = [nm for nm in sel if full and all(tdata["results"][e][nm].get("status") == "ok" for e in full)]
            crow = {}
            for e in full:
                cm = [tdata["results"][e][nm]["compile_ms"] for nm in common]
                us = np.asarray([x for nm in common for x in fills_all[e][nm]], dtype=np.float64) / 1e3
                crow[e] = {"compile_p50_ms": pct(cm, 50), "compile_p99_ms": pct(cm, 99),
                           "mask_mean_us": float(us.mean()) if len(us) else None, "mask_p99_us": pct(us, 99)}
            tdata["common_" + which] = {"engines": full if len(full) > 1 else [], "names": common, "rows": crow}
        del fills_all
        report["tokenizers"][tname] = tdata
        print_tokenizer_report(tname, tdata, t_engines, groups_bench, groups_suite)
        if not strict_printed:  # tokenizer-independent: printed once
            strict_printed = True
            print_logitgate_modes_report(tdata, t_engines, groups_bench + ["SUITE"])

    if args.keep_work:
        print(f"\nWorker files (jobs, stderr) kept in {tmp_root}", file=sys.stderr)
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
