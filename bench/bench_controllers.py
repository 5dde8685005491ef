"""Controller benchmark: what the controller protocol costs per token, against calling the matcher
directly, and the step time with many parallel sequences.

    python bench/bench_controllers.py

The model is a stand-in whose forward pass returns fixed logits at once, so every microsecond
measured is the runtime's and the controller's: the runner's post/pre/mid chain (one round trip
to a worker), the pyctrl script (``gen_tokens(regex=...)``) computing its mask, sampling and
bookkeeping. (With a real model the chain runs during the forward pass; here nothing hides it.) The vocabulary is
the embedded model's (SmolLM2, 49,152 tokens, read from its GGUF). "direct" is the same walk with a
bare ``Matcher``: fill the mask, apply it, take the best token, accept it.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent

import logitgate  # noqa: E402
from logitgate.controllers import run_controller, scripting  # noqa: E402
from logitgate.integrations.models import embedded_model_path  # noqa: E402

REGEX = r"[a-z]{1,12}( [a-z]{1,12}){0,40}\."


@njit(nogil=True, cache=True)
def _spin(n: int) -> float:
    """n rounds of arithmetic in native code, without the GIL: a stand-in for a forward pass."""
    x = 0.0
    for i in range(n):
        x = math.sqrt(x + i)
    return x


_ROUNDS_PER_S: list[float] = []


def busy(seconds: float) -> None:
    """Keep one core busy in native code (no GIL) for about ``seconds``, as llama.cpp on one thread
    does during a forward pass (a sleep would let the CPU idle and come back cold)."""
    if not _ROUNDS_PER_S:
        _spin(1000)
        t = time.perf_counter()
        _spin(2_000_000)
        _ROUNDS_PER_S.append(2_000_000 / (time.perf_counter() - t))
    _spin(int(seconds * _ROUNDS_PER_S[0]))


class FixedModel:
    """A ``Model`` with instant, fixed logits (a seeded random preference over the vocabulary), and
    the many-sequences interface of ``LlamaCppSequences``."""

    def __init__(self, tokenizer: logitgate.Tokenizer, forward_s: float = 0.0) -> None:
        self.name = "fixed"
        self.sleep = forward_s
        """Seconds each forward pass (each batched decode) takes: native code on one core, without
        the GIL (``busy``)."""
        self.tokenizer = tokenizer
        self.logits = np.random.default_rng(0).standard_normal(tokenizer.vocab_size).astype(np.float32)
        self._n = 0
        self.forward_s = 0.0
        self.passes: list[float] = []
        """The duration of each forward pass (each decode), sleep included."""

    @property
    def n_past(self) -> int:
        return self._n

    def encode(self, text: str) -> list[int]:
        return [self.tokenizer.bos_token_id or 1]

    _by_bytes: dict[bytes, int] = {}

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """Greedy longest match over the vocabulary."""
        by = FixedModel._by_bytes
        if not by:
            by.update((t, i) for i, t in enumerate(self.tokenizer.tokens) if i not in self.tokenizer.special_ids)
        out, i = [], 0
        while i < len(data):
            for n in range(min(16, len(data) - i), 0, -1):
                if data[i:i + n] in by:
                    out.append(by[data[i:i + n]])
                    i += n
                    break
            else:
                return None
        return out

    def chat_prompt(self, messages):
        return self.encode("")

    def reset(self) -> None:
        self._n = 0

    def forward(self, tokens):
        self._n += len(tokens)
        t = time.perf_counter()
        if self.sleep:
            busy(self.sleep)
        out = self.logits.copy()
        self.passes.append(time.perf_counter() - t)
        return out

    def truncate(self, n: int) -> None:
        self._n = n

    def sequences(self, n: int) -> "FixedSequences":
        """Many sequences, one "decode" for all (as LlamaCppSequences)."""
        return FixedSequences(self)


class FixedSequences:
    def __init__(self, model: FixedModel) -> None:
        self.model = model

    def copy(self, src: int, dst: int, n: int) -> None:
        pass

    def truncate(self, seq: int, n: int) -> None:
        pass

    def decode(self, items):
        t = time.perf_counter()
        if self.model.sleep:
            busy(self.model.sleep)
        out = [self.model.logits.copy() for _ in items]
        self.model.forward_s += time.perf_counter() - t
        self.model.passes.append(time.perf_counter() - t)
        return out


def script(n_forks: int, max_tokens: int) -> str:
    fork = f"    await aici.fork({n_forks})\n" if n_forks > 1 else ""
    return ("import pyaici.server as aici\n\nasync def main():\n    await aici.FixedTokens('Say:')\n" + fork +
            f"    await aici.gen_tokens(regex={REGEX!r}, max_tokens={max_tokens})\n\naici.start(main())\n")


def direct(tok: logitgate.Tokenizer, max_tokens: int, logits: np.ndarray) -> tuple[int, float]:
    compiled = logitgate.compile(logitgate.Grammar.from_regex(REGEX), tok)
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    t = time.perf_counter()
    n = 0
    while n < max_tokens and not m.is_terminated():
        m.fill_next_token_bitmask(bm, 0)
        x = logits.copy()
        logitgate.apply_token_bitmask_inplace(x, bm[0])
        m.accept_token(int(np.argmax(x)))
        n += 1
    return n, time.perf_counter() - t


def run_script(tok, n_forks: int, max_tokens: int, process: bool = False, overlap: bool = True,
               forward_s: float = 0.0):
    """One run; returns (result, seconds, the gaps between sequence 0's steps, the first of which
    is the fork, worker start seconds, the median forward pass in seconds)."""
    model = FixedModel(tok, forward_s)
    factory = scripting.script_factory(script(n_forks, max_tokens), "<bench>")
    stamps: list[float] = []

    def on_event(seq: int, kind: str, data: str) -> None:
        if seq == 0 and kind == "text":
            stamps.append(time.perf_counter())

    t = time.perf_counter()
    if process:  # each sequence's controller in its own worker process
        from logitgate.controllers.process import ProcessControllers

        with ProcessControllers(factory) as remote:
            res = run_controller(remote, model, "x", max_tokens=max_tokens + 10, on_event=on_event,
                                 overlap=overlap)
    else:
        res = run_controller(factory, model, "x", max_tokens=max_tokens + 10, on_event=on_event, overlap=overlap)
    total = time.perf_counter() - t
    errors = [s.error for s in res.sequences if s.error]
    assert not errors, errors[:3]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return res, total, gaps, stamps[0] - t, statistics.median(model.passes) if model.passes else 0.0


def wasm_row(tok, args) -> None:
    """The same generation by a Wasm controller (wasm_src/yesno.c: splice a prefix, then sample
    under the host's mask for the regex until EOS), in process, bounded by fuel."""
    try:
        from logitgate.controllers import wasm
    except ImportError:
        print("| Wasm controller (yesno.c) | not run: pip install wasmtime | | | |")
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            module = wasm.WasmModule.from_file(wasm.build_c([wasm.C_SOURCES / "yesno.c"], Path(tmp) / "y.wasm"))
        except wasm.WasmError as exc:
            print(f"| Wasm controller (yesno.c) | not run: {exc} | | | |")
            return
    factory = module.controller_factory(wasm.WasmLimits(), arg="Say:\n" + REGEX)
    gaps, starts = [], []
    for _ in range(args.repeat + 1):
        stamps: list[float] = []
        t = time.perf_counter()
        res = run_controller(factory, FixedModel(tok), "x", max_tokens=args.tokens + 10,
                             on_event=lambda i, k, d: stamps.append(time.perf_counter()) if k == "text" else None)
        assert not any(s.error for s in res.sequences), res.sequences[0].log
        gaps += [b - a for a, b in zip(stamps[1:], stamps[2:])]
        starts.append(stamps[0] - t)
    per = statistics.median(gaps)
    p90 = sorted(gaps)[int(0.9 * len(gaps))]
    print(f"| Wasm controller (C, yesno.c: host regex mask), in process | {per * 1e6:.0f} | "
          f"{(per - DIRECT[0]) * 1e6:+.0f} | {p90 * 1e6:.0f} | {statistics.median(starts) * 1e3:.1f} |")


DIRECT = [0.0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--forks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--forward-ms", type=float, default=10.0, help="the simulated forward pass of the overlap rows")
    args = ap.parse_args(argv)
    tok = logitgate.Tokenizer.from_gguf(embedded_model_path())
    logits = FixedModel(tok).logits
    print(f"# Controller benchmark — vocabulary {tok.name} ({tok.n_tokens} tokens), regex {REGEX!r}")
    print("Warm masks (one run first, in this process, so workers inherit the mask memo); per-token figures "
          "are the median gap between sequence 0's tokens, over all runs (startup and the fork excluded).")
    direct(tok, args.tokens, logits)  # warm: compile, first visits
    run_script(tok, 1, args.tokens)
    d = [direct(tok, args.tokens, logits) for _ in range(args.repeat)]
    d_per = DIRECT[0] = statistics.median(s / n for n, s in d)
    print("\n| path | per token µs | overhead over direct µs | p90 µs | first token after start, ms |")
    print("|---|---:|---:|---:|---:|")
    print(f"| direct: Matcher fill + apply + argmax + accept | {d_per * 1e6:.0f} | | | |")
    for process in (False, True):
        gaps, starts = [], []
        for _ in range(args.repeat):
            res, total, g, first, _ = run_script(tok, 1, args.tokens, process)
            gaps += g[1:]
            starts.append(first)
        per = statistics.median(gaps)
        p90 = sorted(gaps)[int(0.9 * len(gaps))]
        where = "a worker process (pipe + shared memory)" if process else "in process"
        print(f"| pyctrl script through the runner, controller {where} | {per * 1e6:.0f} | "
              f"{(per - d_per) * 1e6:+.0f} | {p90 * 1e6:.0f} | {statistics.median(starts) * 1e3:.1f} |")
    wasm_row(tok, args)
    fwd = args.forward_ms / 1e3
    print(f"\nWith a {args.forward_ms:g} ms forward pass (native code on one core, without the GIL), what the "
          "step costs beyond the pass's measured duration (the chain overlaps the pass):")
    print("\n| path | step µs | over the forward pass µs | over direct µs | p90 over the pass µs |")
    print("|---|---:|---:|---:|---:|")
    for process in (False, True):
        gaps, passes = [], []
        for _ in range(args.repeat):
            res, total, g, first, p = run_script(tok, 1, args.tokens, process, forward_s=fwd)
            gaps += g[1:]
            passes.append(p)
        per = statistics.median(gaps)
        p90 = sorted(gaps)[int(0.9 * len(gaps))]
        fwd_real = statistics.median(passes)
        where = "worker process" if process else "in process"
        print(f"| pyctrl script, {where} | {per * 1e6:.0f} | {(per - fwd_real) * 1e6:+.0f} | "
              f"{(per - fwd_real - d_per) * 1e6:+.0f} | {(p90 - fwd_real) * 1e6:+.0f} |")
    for forward_s in (0.0, fwd):
        print(f"\n| {args.forks} parallel sequences (fork({args.forks}), then gen_tokens under the regex), "
              f"forward pass {forward_s * 1e3:g} ms | step ms (median) | over the pass ms | p90 ms | "
              "per sequence per step µs | the fork step, ms |")
        print("|---|---:|---:|---:|---:|---:|")
        for process in (False, True):
            gaps, forks, passes = [], [], []
            for _ in range(args.repeat):
                res, total, g, first, p = run_script(tok, args.forks, args.tokens, process, forward_s=forward_s)
                assert len(res.sequences) == args.forks
                forks.append(g[0])
                gaps += g[1:]
                passes.append(p if forward_s else 0.0)
            fwd_real = statistics.median(passes)
            step = statistics.median(gaps)
            p90 = sorted(gaps)[int(0.9 * len(gaps))]
            where = "worker processes" if process else "in process"
            print(f"| {where} | {step * 1e3:.2f} | {(step - fwd_real) * 1e3:.2f} | {p90 * 1e3:.2f} | "
                  f"{(step - fwd_real) / args.forks * 1e6:.0f} | {statistics.median(forks) * 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
