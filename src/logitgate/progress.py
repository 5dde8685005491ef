"""A progress display for long steps (model load, large compiles): an elapsed-time line on stderr,
refreshed while the step runs when stderr is a terminal, and the total time when it ends."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["progress"]


@contextmanager
def progress(label: str, *, stream=None, interval: float = 0.25) -> Iterator[Callable[[str], None]]:  # type: ignore[no-untyped-def]
    """``with progress("loading the model") as say: ...``; ``say(msg)`` updates the step's text."""
    out = stream or sys.stderr
    live = hasattr(out, "isatty") and out.isatty()
    state = {"label": label}
    start = time.perf_counter()
    done = threading.Event()

    def line() -> str:
        return f"{state['label']} ... {time.perf_counter() - start:5.1f} s"

    def refresh() -> None:
        while not done.wait(interval):
            out.write("\r\033[K" + line())
            out.flush()

    def say(msg: str) -> None:
        state["label"] = msg
        if not live:
            out.write(msg + "\n")
            out.flush()

    ticker = threading.Thread(target=refresh, daemon=True) if live else None
    if ticker is not None:
        ticker.start()
    try:
        yield say
    finally:
        done.set()
        if ticker is not None:
            ticker.join()
        elapsed = time.perf_counter() - start
        if live:
            out.write(f"\r\033[K{state['label']}: {elapsed:.1f} s\n")
        elif elapsed >= 1.0:
            out.write(f"{state['label']}: done in {elapsed:.1f} s\n")
        out.flush()
