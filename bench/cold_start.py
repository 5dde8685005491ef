"""Cold and warm start of logitgate, each in a fresh Python process.

    python bench/cold_start.py [--tokenizer spm32k|tekken131k] [--warm-runs 3] [--cold-runs 1]

(a) cold: NUMBA_CACHE_DIR points at a new, empty folder, so every numba kernel the run calls is compiled
    (kernels compile on first use, not at import);
(b) warm: the same again with that folder now filled by (a) (median of --warm-runs).

Each run reports: import numpy+numba, import logitgate (the rest of its import), tokenizer
load, the tokenizer's token trie (built lazily by the first compile), compile of a simple regex, first mask (Matcher + fill), and the whole process wall
time as seen from outside (interpreter start-up included).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REGEX = "[0-9]{3}-[0-9]{4}"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy, numba
t1 = time.perf_counter()
try:
    import logitgate
except ImportError:
    sys.path.insert(0, {src!r})
    import logitgate
t2 = time.perf_counter()
tok = logitgate.Tokenizer.from_mistral({path!r})
t3 = time.perf_counter()
getattr(tok, "trie", None)  # built lazily by the first compile otherwise
t3b = time.perf_counter()
compiled = logitgate.compile(logitgate.Grammar.from_regex({regex!r}), tok)
t4 = time.perf_counter()
m = logitgate.Matcher(compiled)
bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
m.fill_next_token_bitmask(bm, index=0)
t5 = time.perf_counter()
allowed = sum(bin(int(w) & 0xFFFFFFFF).count("1") for w in bm[0])
print(json.dumps({{"import_numpy_numba": t1 - t0, "import_logitgate": t2 - t1, "tokenizer": t3 - t2,
                  "trie": t3b - t3, "compile": t4 - t3b, "first_mask": t5 - t4, "in_process": t5 - t0,
                  "allowed": allowed}}))
"""

PHASES = {
    "import_numpy_numba": "import numpy + numba",
    "import_logitgate": "import logitgate (the rest)",
    "tokenizer": "Tokenizer.from_mistral",
    "trie": "token trie (tok.trie, else part of compile)",
    "compile": "compile regex",
    "first_mask": "first mask (Matcher + fill)",
    "in_process": "total inside the process",
    "process_wall": "process wall time (with interpreter start-up)",
}


def run_once(cache_dir: str, tok_path: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    code = CHILD.format(src=str(REPO / "src"), path=tok_path, regex=REGEX)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_wall"] = wall
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", choices=["spm32k", "tekken131k"], default="spm32k")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--cold-runs", type=int, default=1, help="each with its own empty cache dir")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args()

    sys.path.insert(0, str(HERE))
    from vocab import tokenizer_path

    tok_path = str(tokenizer_path(args.tokenizer))
    cold, warm = [], []
    keep_dir = None
    for _ in range(args.cold_runs):
        cache_dir = tempfile.mkdtemp(prefix="lg-numba-cache-")
        cold.append(run_once(cache_dir, tok_path))
        if keep_dir:
            shutil.rmtree(keep_dir, ignore_errors=True)
        keep_dir = cache_dir
    n_files = sum(len(f) for _, _, f in os.walk(keep_dir))
    for _ in range(args.warm_runs):
        warm.append(run_once(keep_dir, tok_path))
    shutil.rmtree(keep_dir, ignore_errors=True)

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    def ms(seconds):
        return f"{seconds * 1e3:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"

    print(f"# logitgate cold start ({args.tokenizer}, regex {REGEX!r}, python {sys.version.split()[0]})\n")
    print(f"numba cache after the cold run: {n_files} files\n")
    print(f"| phase | cold (empty NUMBA_CACHE_DIR{', median of %d' % len(cold) if len(cold) > 1 else ''}) "
          f"| warm (median of {len(warm)}) |")
    print("|---|---:|---:|")
    for key, label in PHASES.items():
        print(f"| {label} | {ms(med(cold, key))} | {ms(med(warm, key))} |")
    print(f"\nallowed tokens in the first mask: {cold[0]['allowed']} (cold), {warm[0]['allowed']} (warm)")
    if args.json:
        Path(args.json).write_text(json.dumps({"cold": cold, "warm": warm, "regex": REGEX,
                                               "tokenizer": args.tokenizer}, indent=1))


if __name__ == "__main__":
    main()
