"""Measure ONE engine on ONE tokenizer, in its own process (started by bench_regex.py).

Why a process per engine: RSS-based memory figures are only meaningful when no other
engine's allocations share the process, a native crash (Rust panic, C++ abort) takes down
only that engine's row, and the parent can kill an engine stuck on one regex (timeout)
and restart it on the remaining regexes.

Protocol: reads a job JSON file (argv[1]); writes one JSON object per line to stdout:
  {"event": "setup", ...}            once, after the tokenizer and the engine are ready
  {"event": "start", "regex": name}  before each regex (the parent's timeout clock)
  {"event": "result", ...}           after each regex
Masks of the first walk along the valid sample are saved as int32 [steps, W] .npy files
in job["mask_dir"], for the parent's cross-engine comparison.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers import ENGINES, allocate_bitmask, is_allowed  # noqa: E402
from vocab import load_vocab  # noqa: E402

# \d \s \w too: their first use in a process loads per-process tables (logitgate: Unicode classes
# and their UTF-8 automata from its disk cache, the UTF-8 kernels), a cost cold_start.py measures
WARMUP_REGEX, WARMUP_TEXT = "\\d+(\\.\\d+)?\\s?\\w*", "3.14"
# engines whose memory tracemalloc can see; not logitgate[background]: its indexing thread allocates
# (numba's runtime uses PyMem_RawMalloc) without the GIL, and tracemalloc.stop() racing with that
# crashes CPython before 3.13 (python/cpython#128679)
PYTHON_SIDE = {"logitgate", "logitgate[index]"}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def reset_peak_rss() -> bool:
    """Reset VmHWM (peak RSS) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def walk(m, ids, bm, eos_id, times_ns=None, masks=None):
    """Feed ids to matcher m (its mask for step 0 already in bm). Return (ok, detail).

    A token counts as rejected if the current mask disallows it or advance() refuses it.
    If times_ns is a list, the time of every fill() after an advance is appended (ns).
    """
    perf = time.perf_counter_ns
    for k, t in enumerate(ids):
        if not is_allowed(bm, t):
            return False, f"token {k} ({t}) not in mask"
        if not m.advance(t):
            return False, f"token {k} ({t}) refused by advance"
        t0 = perf()
        m.fill(bm)
        t1 = perf()
        if times_ns is not None:
            times_ns.append(t1 - t0)
        if masks is not None:
            masks.append(bm[0].copy())
    if not m.is_accepting():
        return False, "not accepting at the end"
    if not is_allowed(bm, eos_id):
        return False, "EOS not allowed at the end"
    return True, ""


def run_regex(eng, vocab, item, job):
    """All measurements for one regex. item: name, regex, valid_ids, invalid_ids."""
    res = {"event": "result", "regex": item["name"], "status": "ok"}
    eos = vocab.eos_id
    perf = time.perf_counter_ns

    # 1. compile + first mask, timed; peak RSS around it.
    eng.fresh()
    gc.collect()
    gc.disable()
    rss0 = proc_status_kb("VmRSS")
    peak_ok = reset_peak_rss()
    bm = allocate_bitmask(vocab.vocab_size)
    t0 = perf()
    try:
        handle = eng.compile(item["regex"])
        t1 = perf()
        m = eng.matcher(handle)
        m.fill(bm)
        t2 = perf()
    except Exception as e:  # unsupported regex, engine error
        gc.enable()
        res["status"] = "error"
        res["error"] = f"{type(e).__name__}: {e}".strip()
        return res
    res["compile_ms"] = (t1 - t0) / 1e6
    res["compile_first_mask_ms"] = (t2 - t0) / 1e6
    res["full_index_ms"] = res["compile_ms"] if eng.builds_full_index else None
    res["rss_peak_delta_kb"] = (proc_status_kb("VmHWM") - rss0) if peak_ok else None
    res["rss_retained_delta_kb"] = proc_status_kb("VmRSS") - rss0
    res["engine_reported_bytes"] = eng.index_bytes(handle)

    # 2. first walk along the valid sample (masks kept for comparison), then warm walks.
    budget_end = time.monotonic() + job["walk_budget_s"]  # warm walks stop past this
    times_first, masks = [], [bm[0].copy()]
    ok, detail = walk(m, item["valid_ids"], bm, eos, times_first, masks)
    np.save(os.path.join(job["mask_dir"], f"{item['name']}.npy"), np.stack(masks))
    res["valid_ok"], res["valid_detail"] = ok, detail
    res["steps_walked"] = len(masks)
    res["walks"] = 1
    times_warm = []
    for _ in range(job["repeat"] - 1):
        if time.monotonic() > budget_end:  # a very slow engine: fewer warm walks
            break
        mw = eng.matcher(handle)
        t0 = perf()
        mw.fill(bm)
        times_warm.append(perf() - t0)
        walk(mw, item["valid_ids"], bm, eos, times_warm)
        res["walks"] += 1
    gc.enable()
    res["engine_reported_bytes_after_walks"] = eng.index_bytes(handle)  # lazy engines grow
    res["mask_ns_first_walk"] = times_first
    res["mask_ns_warm"] = times_warm

    # 3. invalid sample: must be refused somewhere (or not accepted at the end).
    m3 = eng.matcher(handle)
    m3.fill(bm)
    ok_inv, detail_inv = walk(m3, item["invalid_ids"], bm, eos)
    res["invalid_rejected"] = not ok_inv
    res["invalid_detail"] = detail_inv if not ok_inv else "accepted the whole invalid sample"
    m = m3 = handle = None
    gc.collect()

    # 4. Python-side memory (tracemalloc) of a second, separate compile + first mask.
    if eng.name in PYTHON_SIDE and job["tracemalloc"]:
        eng.fresh()  # the second compile really compiles
        tracemalloc.start()
        h = eng.compile(item["regex"])
        mm = eng.matcher(h)
        mm.fill(bm)
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        res["tracemalloc_peak_kb"] = peak / 1024
        res["tracemalloc_retained_kb"] = cur / 1024
    return res


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    os.makedirs(job["mask_dir"], exist_ok=True)
    vocab = load_vocab(job["tokenizer"], job["vocab_source"])
    setup = {"event": "setup", "vocab_load_s": vocab.load_s, "vocab_source": vocab.source}
    eng = ENGINES[job["engine"]](vocab)
    setup.update(engine_setup_s=eng.setup_s, import_s=eng.import_s, version=eng.version)

    # Warm-up (not reported per regex): JIT / kernel caches / lazy imports.
    t0 = time.perf_counter()
    try:
        wm = eng.matcher(eng.compile(WARMUP_REGEX))
        bm = allocate_bitmask(vocab.vocab_size)
        wm.fill(bm)
        setup["warmup_error"] = None
    except Exception as e:
        setup["warmup_error"] = f"{type(e).__name__}: {e}"
    setup["warmup_s"] = time.perf_counter() - t0
    emit(setup)

    for item in job["items"]:
        emit({"event": "start", "regex": item["name"]})
        emit(run_regex(eng, vocab, item, job))


if __name__ == "__main__":
    main()
