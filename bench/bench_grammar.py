"""logitgate vs llguidance and xgrammar on context-free grammars (GBNF, Lark, yacc-like).

    python bench/bench_grammar.py [--tokenizer spm32k|tekken131k|both] [--engines a,b,...]
                                  [--grammars a,b,...] [--quick]

The grammar texts are read at run time from shared/data; one valid sample per grammar is in
bench/grammar_samples.py, checked at start-up by an independent oracle. Each engine runs in
its own worker process (bench/grammar_worker.py), one after the other, on the same
vocabulary bytes (logitgate.Tokenizer.from_mistral). See bench/README.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grammar_samples import DATA_DIR, GRAMMARS, check_samples, sample_text  # noqa: E402
import runner  # noqa: E402
from peers import pkg_version  # noqa: E402
from vocab import TOKENIZER_FILES, TextEncoder, load_vocab, reference_token_bytes  # noqa: E402

ENGINE_NAMES = ("logitgate", "logitgate[greedy]", "llguidance", "xgrammar")


# --------------------------------------------------------------------------- running workers


def run_worker(job: dict, work_dir: Path, timeout_s: float):
    """Run one engine on one tokenizer over job["items"] (see ``runner.run_worker``)."""
    return runner.run_worker(job, work_dir, timeout_s, "grammar_worker.py", "grammar")


# --------------------------------------------------------------------------- statistics


def mask_stats(res):
    """Statistics over all walks, plus the first walk alone ("cold": an engine that memoises masks
    meets every state for the first time there; later walks of the same text reuse its memo)."""
    first = list(res.get("mask_ns_first_walk", []))
    ns = first + list(res.get("mask_ns_warm", []))
    if not ns:
        return None
    us = np.asarray(ns, dtype=np.float64) / 1e3
    cold = np.asarray(first, dtype=np.float64) / 1e3 if first else us
    return {"n": len(us), "mean": float(us.mean()), "p50": float(np.percentile(us, 50)),
            "p99": float(np.percentile(us, 99)), "max": float(us.max()),
            "cold_mean": float(cold.mean()), "cold_p99": float(np.percentile(cold, 99))}


def geo_mean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def compare_masks(work: Path, vocab, a: str, b: str, name: str, ids: list, res_a: dict, res_b: dict):
    """Compare the first-walk masks of engines a and b on one grammar, over the steps both
    reached. Returns a summary dict, or None when either has no masks."""
    fa, fb = work / a / "masks" / f"{name}.npy", work / b / "masks" / f"{name}.npy"
    if not (fa.exists() and fb.exists()):
        return None
    ma, mb = np.load(fa), np.load(fb)
    n = min(len(ma), len(mb))
    V = vocab.vocab_size
    ca, cb = res_a.get("allowed_counts", []), res_b.get("allowed_counts", [])
    nc = min(len(ca), len(cb))
    out = {"grammar": name, "a": a, "b": b, "steps": n, "steps_counted": nc,
           "steps_count_differs": sum(1 for i in range(nc) if ca[i] != cb[i]),
           "steps_mask_differs": 0, "max_diff": 0, "only_a": 0, "only_b": 0, "example": None}
    diff_rows = np.nonzero((ma[:n] != mb[:n]).any(axis=1))[0]

    def describe(i, only_a, only_b):
        before = b"".join(vocab.tokens[t] for t in ids[:i])[-20:]
        side, toks = (a, only_a) if len(only_a) else (b, only_b)
        shown = ", ".join(repr(vocab.tokens[t]) if t not in vocab.special_ids else f"<special {t}>"
                          for t in toks[:4])
        return (f"step {i} after …{before!r}: {len(only_a)} only in {a}, {len(only_b)} only in {b}; "
                f"only in {side}: {shown}")

    largest = None
    for i in diff_rows:
        xa = np.unpackbits(ma[i].view(np.uint8), bitorder="little")[:V].astype(bool)
        xb = np.unpackbits(mb[i].view(np.uint8), bitorder="little")[:V].astype(bool)
        only_a, only_b = np.nonzero(xa & ~xb)[0], np.nonzero(xb & ~xa)[0]
        if not len(only_a) and not len(only_b):
            continue  # differed only in padding bits past the vocabulary
        out["steps_mask_differs"] += 1
        out["only_a"] += len(only_a)
        out["only_b"] += len(only_b)
        if out["example"] is None:
            out["example"] = describe(i, only_a, only_b)
        if len(only_a) + len(only_b) > out["max_diff"]:
            out["max_diff"] = len(only_a) + len(only_b)
            largest = (i, only_a, only_b)
    out["largest"] = describe(*largest) if largest is not None else None
    return out


# --------------------------------------------------------------------------- report


def fmt(x, digits=None):
    if x is None:
        return "–"
    if digits is None:
        digits = 0 if abs(x) >= 100 else (1 if abs(x) >= 10 else 2)
    return f"{x:,.{digits}f}"


def end_text(res):
    if res.get("walk_rejected"):
        return res["walk_rejected"].split(" (")[0]
    if res.get("walk_is_accepting") and res.get("walk_eos_allowed"):
        return "accepting"
    if res.get("walk_is_accepting"):
        return "accepting, EOS not in mask"
    return "**not accepting**"


def print_tokenizer_report(tname, tdata, engines, grammars):
    v = tdata["vocab"]
    lines = [f"\n## {tname}: {TOKENIZER_FILES[tname]} ({v['n_tokens']:,} tokens, mask width "
             f"{v['vocab_size']:,}, vocabulary from {v['source']}, loaded in {v['load_s']:.2f} s)\n"]
    if v.get("crosscheck"):
        lines.append(f"Vocabulary cross-check against mistral-common's own reader: {v['crosscheck']}\n")
    setups = []
    for e in engines:
        s = tdata["setup"].get(e)
        setups.append(f"{e} {s['engine_setup_s']:.2f} s (import {s['import_s']:.2f} s, warm-up "
                      f"{s['warmup_s']:.2f} s with {s.get('warmup_with') or 'nothing'})" if s else f"{e} failed")
    lines.append("Tokenizer setup per engine (not in compile times): " + "; ".join(setups) + "\n")
    for e in engines:
        err = (tdata["setup"].get(e) or {}).get("warmup_error")
        if err:
            lines.append(f"Warm-up of {e} failed: {err[:300]}\n")

    lines += ["| grammar | engine | compile ms | 1st mask ms | tokens | first walk mean µs | first walk p99 µs "
              "| mask mean µs | p50 µs | p99 µs | max µs | walks | end of walk |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    notes = []
    for g in grammars:
        n_tok = len(tdata["paths"][g]["ids"])
        for e in engines:
            res = tdata["results"].get(e, {}).get(g, {"status": "missing"})
            if res.get("status") != "ok":
                lines.append(f"| {g} | {e} | {res.get('status')} | – | –/{n_tok} | – | – | – | – | – | – | – | – |")
                notes.append(f"- {g} / {e}: {res.get('status')}: {(res.get('error') or '')[:400]}")
                continue
            ms = mask_stats(res) or {}
            lines.append(
                f"| {g} | {e} | {fmt(res['compile_ms'])} | {fmt(res['first_mask_ms'])} "
                f"| {res['walk_tokens_accepted']}/{n_tok} | {fmt(ms.get('cold_mean'))} | {fmt(ms.get('cold_p99'))} "
                f"| {fmt(ms.get('mean'))} | {fmt(ms.get('p50'))} "
                f"| {fmt(ms.get('p99'))} | {fmt(ms.get('max'))} | {res['walks']} | {end_text(res)} |")
            if res.get("walk_rejected"):
                off = res["walk_rejected_at_byte"]
                text = tdata["paths"][g]["text"].encode("utf-8")
                notes.append(f"- {g} / {e}: {res['walk_rejected']}: …{text[max(0, off - 30):off]!r} ^ "
                             f"{text[off:off + 15]!r}")
            for w in res.get("engine_warnings") or []:
                notes.append(f"- {g} / {e}: warning: {' '.join(str(w).split())[:300]}")
    lines += report_summary(tdata, engines, grammars)
    lines += report_agreement(tdata["comparisons"])
    if notes:
        lines += ["\nNotes:\n"] + notes
    print("\n".join(lines), flush=True)


def report_summary(tdata, engines, grammars):
    def result(e, g):
        return tdata["results"].get(e, {}).get(g, {})

    working = [e for e in engines if any(result(e, g).get("status") == "ok" for g in grammars)]
    common = [g for g in grammars if working and all(result(e, g).get("status") == "ok" for e in working)]
    out = ["\nSummary per engine: geo-mean of compile ms over the grammars it compiled, and over the "
           "grammars every working engine compiled (same set); mean of the per-grammar mask means and p99s "
           "(each over the steps that engine walked), first walk alone and all walks.\n",
           "| engine | compiled | walked to the end | accepting at the end | compile geo-mean ms "
           "| same-set geo-mean ms | mean of first-walk means µs | mean of mask means µs | mean p99 µs |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in engines:
        ok = [result(e, g) for g in grammars if result(e, g).get("status") == "ok"]
        stats = [st for st in (mask_stats(x) for x in ok) if st]
        same = [result(e, g)["compile_ms"] for g in common] if e in working else []
        out.append(
            f"| {e} | {len(ok)}/{len(grammars)} | {sum(1 for x in ok if x['walk_ok'])}/{len(grammars)} "
            f"| {sum(1 for x in ok if x['walk_is_accepting'] and x['walk_eos_allowed'])}/{len(grammars)} "
            f"| {fmt(geo_mean([x['compile_ms'] for x in ok]))} | {fmt(geo_mean(same))} ({len(common)}) "
            f"| {fmt(np.mean([st['cold_mean'] for st in stats]) if stats else None)} "
            f"| {fmt(np.mean([st['mean'] for st in stats]) if stats else None)} "
            f"| {fmt(np.mean([st['p99'] for st in stats]) if stats else None)} |")
    return out


def report_agreement(cmps):
    out = ["\nMask agreement along the first walk, by engine pair, over the steps both engines reached: "
           "steps where the number of allowed tokens differs, steps where the masks differ, the most "
           "tokens differing at one step, token-steps allowed by one side only, the first difference and the "
           "step with the most differing tokens. "
           "A peer is not an oracle: nothing here says which side is right.\n"]
    if not cmps:
        return out + ["(no pair of engines with masks to compare)"]
    out += ["| grammar | engines | steps | count differs | mask differs | max tokens/step | only in A "
            "| only in B | first difference | largest difference |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in cmps:
        out.append(f"| {c['grammar']} | {c['a']} (A) vs {c['b']} (B) | {c['steps']} | {c['steps_count_differs']} "
                   f"| {c['steps_mask_differs']} | {c['max_diff']} | {c['only_a']} | {c['only_b']} "
                   f"| {(c['example'] or '–').replace('|', '¦')} "
                   f"| {'–' if c['largest'] is None else 'same step' if c['largest'] == c['example'] else c['largest'].replace('|', '¦')} |")
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
    return {"cpu": cpu, "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "memory_gb": round(mem_gb, 1) if mem_gb else None,
            "platform": platform.platform(), "python": platform.python_version()}


def engine_versions():
    dists = ["logitgate", "llguidance", "xgrammar", "lark", "numpy", "numba", "mistral-common",
             "sentencepiece", "tiktoken"]
    return {d: pkg_version(d) for d in dists}


def crosscheck_vocab(vocab) -> str:
    """Compare the library's token bytes with an independent read of the same file."""
    ref_tokens, ref_special, ref_eos = reference_token_bytes(vocab.name)
    problems = []
    if len(ref_tokens) != len(vocab.tokens):
        problems.append(f"{len(vocab.tokens)} tokens vs {len(ref_tokens)}")
    bad = [i for i, (x, y) in enumerate(zip(vocab.tokens, ref_tokens)) if i not in ref_special and x != y]
    if bad:
        problems.append(f"{len(bad)} token(s) with other bytes, e.g. "
                        + ", ".join(f"{i}: {vocab.tokens[i]!r} vs {ref_tokens[i]!r}" for i in bad[:3]))
    if set(vocab.special_ids) != set(ref_special):
        problems.append(f"special ids differ ({len(vocab.special_ids)} vs {len(ref_special)})")
    if ref_eos not in vocab.eos_ids:
        problems.append(f"eos {vocab.eos_ids} vs {ref_eos}")
    return "identical" if not problems else "MISMATCH: " + "; ".join(problems)


class Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)

    def flush(self):
        for s in self.streams:
            s.flush()


# --------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", choices=["spm32k", "tekken131k", "both"], default="both")
    ap.add_argument("--engines", default=",".join(ENGINE_NAMES),
                    help=f"comma-separated, from {', '.join(ENGINE_NAMES)} (default: all)")
    ap.add_argument("--grammars", default=None,
                    help=f"comma-separated subset of {', '.join(GRAMMARS)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="2 walks per grammar, 1 s walk budget")
    ap.add_argument("--repeat", type=int, default=10, help="walks along each sample (default 10)")
    ap.add_argument("--walk-budget", type=float, default=None,
                    help="seconds of warm walks per grammar before giving up on --repeat (default 3, quick 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per grammar per engine (default 60)")
    ap.add_argument("--c-y-full", action="store_true",
                    help="walk the whole aici sample.c (42 kB) for c.y instead of its first ~2 kB")
    ap.add_argument("--vocab-source", choices=["logitgate", "reference"], default="logitgate",
                    help="where the token bytes come from (reference: mistral-common's reader, "
                         "for running the peers without logitgate)")
    ap.add_argument("--out", default=str(HERE / "results"), help="folder for the JSON results")
    ap.add_argument("--keep-work", action="store_true", help="keep the workers' masks and stderr")
    ap.add_argument("--plot", action="store_true",
                    help="also write PNG plots of the results next to them (bench/plots.py)")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINE_NAMES]
    if unknown:
        ap.error(f"unknown engine(s) {unknown}; choose from {list(ENGINE_NAMES)}")
    if args.vocab_source == "reference":
        engines = [e for e in engines if e != "logitgate"]
    names = list(GRAMMARS)
    if args.grammars:
        wanted = [g.strip() for g in args.grammars.split(",") if g.strip()]
        if set(wanted) - set(GRAMMARS):
            ap.error(f"unknown grammar(s) {sorted(set(wanted) - set(GRAMMARS))}; choose from {names}")
        names = [g for g in names if g in wanted]
    tokenizers = list(TOKENIZER_FILES) if args.tokenizer == "both" else [args.tokenizer]
    repeat = 2 if args.quick else max(1, args.repeat)
    walk_budget = args.walk_budget if args.walk_budget is not None else (1.0 if args.quick else 3.0)

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_base = out_dir / f"grammar-{stamp}{'-quick' if args.quick else ''}"
    md_file = open(out_base.with_suffix(".md"), "w", encoding="utf-8")
    sys.stdout = Tee(sys.__stdout__, md_file)
    meta = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
        "machine": machine_info(), "versions": engine_versions(), "engines": engines,
        "repeat": repeat, "walk_budget_s": walk_budget, "timeout_s": args.timeout,
        "data_dir": str(DATA_DIR), "grammar_files": {g: GRAMMARS[g].path for g in names},
    }
    m = meta["machine"]
    print(f"# Grammar benchmark: {', '.join(engines)}\n")
    print(f"Machine: {m['cpu']}, {m['cores']} cores ({m['cores_usable']} usable), {m['memory_gb']} GB, "
          f"Python {m['python']}. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
          + f". Walks per grammar: {repeat} (walk budget {walk_budget:g} s); timeout {args.timeout:g} s "
          f"per grammar per engine.\n", flush=True)

    print("Sample validation (independent oracles; the run stops if one refuses a sample):\n")
    meta["sample_validation"] = check_samples(names, args.c_y_full, log=lambda s: print("-" + s[1:]))
    texts = {g: sample_text(GRAMMARS[g], args.c_y_full) for g in names}
    sources = {g: GRAMMARS[g].text() for g in names}

    report = {"meta": meta, "tokenizers": {}}
    tmp_root = Path(tempfile.mkdtemp(prefix="lg-gbench-"))
    for tname in tokenizers:
        vocab = load_vocab(tname, args.vocab_source)
        encoder = TextEncoder(tname, vocab.tokens)
        items, paths = [], {}
        for g in names:
            ids = encoder.encode(texts[g])
            offsets = list(itertools.accumulate((len(vocab.tokens[t]) for t in ids), initial=0))[:-1]
            items.append({"name": g, "fmt": GRAMMARS[g].fmt, "text": sources[g], "ids": ids, "offsets": offsets})
            paths[g] = {"text": texts[g], "ids": ids}
        tdata = {
            "vocab": {"source": vocab.source, "n_tokens": len(vocab.tokens), "vocab_size": vocab.vocab_size,
                      "load_s": vocab.load_s, "n_special": len(vocab.special_ids), "eos": list(vocab.eos_ids),
                      "crosscheck": crosscheck_vocab(vocab) if vocab.source == "logitgate" else None},
            "paths": paths, "setup": {}, "results": {}, "comparisons": [],
        }
        for e in engines:
            work = tmp_root / tname / e
            work.mkdir(parents=True, exist_ok=True)
            job = {"tokenizer": tname, "engine": e, "vocab_source": args.vocab_source, "items": items,
                   "repeat": repeat, "walk_budget_s": walk_budget, "mask_dir": str(work / "masks")}
            t0 = time.perf_counter()
            setup, results = run_worker(job, work, args.timeout)
            print(f"  [{tname}] {e}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
            tdata["setup"][e] = setup
            tdata["results"][e] = results
        for g in names:
            for a, b in itertools.combinations(engines, 2):
                ra, rb = tdata["results"][a].get(g, {}), tdata["results"][b].get(g, {})
                if ra.get("status") == "ok" and rb.get("status") == "ok":
                    c = compare_masks(tmp_root / tname, vocab, a, b, g, paths[g]["ids"], ra, rb)
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
