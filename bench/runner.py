"""Running benchmark workers: one engine per subprocess, fed a job file, reporting JSON events on
stdout (``setup``, ``start``, ``result``); a worker that times out or crashes on an item is
restarted on the remaining ones. Shared by the regex and grammar benchmarks."""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETUP_TIMEOUT_S = 300  # tokenizer load + engine setup + warm-up (the first numba JIT can be slow)


def run_worker(job: dict, work_dir: Path, timeout_s: float, worker: str, key: str):
    """Run one engine on one tokenizer over job["items"] in the worker script ``worker``
    (events name their item under ``key``); restart it after a timeout or a crash on the
    remaining items. Returns (setup, {item: result})."""
    results, setup = {}, None
    pending = list(job["items"])
    attempt = 0
    while pending:
        attempt += 1
        job_file = work_dir / f"job{attempt}.json"
        job_file.write_text(json.dumps(dict(job, items=pending)))
        err_file = open(work_dir / f"stderr{attempt}.txt", "w+")
        proc = subprocess.Popen(
            [sys.executable, str(HERE / worker), str(job_file)],
            stdout=subprocess.PIPE, stderr=err_file, text=True,
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()

        current, deadline = None, time.monotonic() + SETUP_TIMEOUT_S
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:  # timed out: kill, record, go on with the rest
                proc.kill()
                proc.wait()
                if current is None:
                    why = f"timeout: worker setup took over {SETUP_TIMEOUT_S} s"
                    for it in pending:
                        results[it["name"]] = {"status": "timeout", "error": why}
                    pending = []
                else:
                    results[current] = {"status": "timeout", "error": f"over {timeout_s:g} s"}
                    pending = _after(pending, current)
                break
            if line is None:  # worker exited
                rc = proc.wait()
                tail = _tail(err_file)
                if current is not None:  # died inside an item: a crash
                    results[current] = {"status": "crash", "error": f"exit {rc}: {tail}"}
                    pending = _after(pending, current)
                elif pending:  # exited before starting the remaining items
                    for it in pending:
                        results[it["name"]] = {"status": "error", "error": f"worker failed (exit {rc}): {tail}"}
                    pending = []
                break
            ev = json.loads(line)
            if ev["event"] == "setup":
                setup = setup or ev
                deadline = time.monotonic() + SETUP_TIMEOUT_S
            elif ev["event"] == "start":
                current, deadline = ev[key], time.monotonic() + timeout_s
            elif ev["event"] == "result":
                results[ev[key]] = ev
                pending = [it for it in pending if it["name"] != ev[key]]
                current = None
        err_file.close()
    return setup, results


def _pump(stream, q):
    for line in stream:
        if line.startswith("{"):
            q.put(line)
    q.put(None)


def _after(pending, name):
    names = [it["name"] for it in pending]
    return pending[names.index(name) + 1:]


def _tail(f, n=600):
    f.flush()
    f.seek(0)
    text = " ".join(f.read().split())
    return text[-n:] if text else "(no stderr)"
