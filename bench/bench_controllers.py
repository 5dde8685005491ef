"""Controller benchmark: what the controller protocol costs per token, against calling the matcher
directly, and the step time with many parallel sequences.

    python bench/bench_controllers.py

The model is a stand-in whose forward pass returns fixed logits at once, so every microsecond
measured is the runtime's and the controller's: the runner's pre/mid/post round trip, the pyctrl
script (``gen_tokens(regex=...)``) computing its mask, sampling and bookkeeping. The vocabulary is
the embedded model's (SmolLM2, 49,152 tokens, read from its GGUF). "direct" is the same walk with a
bare ``Matcher``: fill the mask, apply it, take the best token, accept it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

import logitgate  # noqa: E402
from logitgate.controllers import run_controller, scripting  # noqa: E402
from logitgate.integrations.models import embedded_model_path  # noqa: E402

REGEX = r"[a-z]{1,12}( [a-z]{1,12}){0,40}\."


class FixedModel:
    """A ``Model`` with instant, fixed logits (a seeded random preference over the vocabulary), and
    the many-sequences interface of ``LlamaCppSequences``."""

    def __init__(self, tokenizer: logitgate.Tokenizer) -> None:
        self.name = "fixed"
        self.tokenizer = tokenizer
        self.logits = np.random.default_rng(0).standard_normal(tokenizer.vocab_size).astype(np.float32)
        self._n = 0
        self.forward_s = 0.0

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
        return self.logits.copy()

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
        out = [self.model.logits.copy() for _ in items]
        self.model.forward_s += time.perf_counter() - t
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


def run_script(tok, n_forks: int, max_tokens: int, process: bool = False):
    model = FixedModel(tok)
    factory = scripting.script_factory(script(n_forks, max_tokens), "<bench>")
    if process:  # each sequence's controller in its own worker process
        from logitgate.controllers.process import ProcessControllers

        with ProcessControllers(factory) as remote:
            t = time.perf_counter()
            res = run_controller(remote, model, "x", max_tokens=max_tokens + 10)
            total = time.perf_counter() - t
        return (res, total, sum(len(s.tokens) for s in res.sequences), [s.error for s in res.sequences if s.error],
                model.forward_s)
    t = time.perf_counter()
    res = run_controller(factory, model, "x", max_tokens=max_tokens + 10)
    total = time.perf_counter() - t
    tokens = sum(len(s.tokens) for s in res.sequences)
    errors = [s.error for s in res.sequences if s.error]
    return res, total, tokens, errors, model.forward_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--forks", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    tok = logitgate.Tokenizer.from_gguf(embedded_model_path())
    logits = FixedModel(tok).logits
    print(f"# Controller benchmark — vocabulary {tok.name} ({tok.n_tokens} tokens), regex {REGEX!r}")
    direct(tok, args.tokens, logits)  # warm: compile, first visits
    d = [direct(tok, args.tokens, logits) for _ in range(args.repeat)]
    d_per = statistics.median(s / n for n, s in d)
    print("\n| path | per token µs | overhead over direct µs |")
    print("|---|---:|---:|")
    print(f"| direct: Matcher fill + apply + argmax + accept | {d_per * 1e6:.0f} | |")
    for process in (False, True):
        run_script(tok, 1, args.tokens, process)  # warm
        single = []
        for _ in range(args.repeat):
            res, total, tokens, errors, fwd = run_script(tok, 1, args.tokens, process)
            assert not errors, errors
            single.append((total - fwd) / max(res.steps, 1))
        s_per = statistics.median(single)
        where = "a worker process (pipe + shared memory)" if process else "in process"
        print(f"| pyctrl script through the runner, controller {where} | {s_per * 1e6:.0f} | "
              f"{(s_per - d_per) * 1e6:+.0f} |")
    for process in (False, True):
        many = []
        for _ in range(args.repeat):
            res, total, tokens, errors, fwd = run_script(tok, args.forks, args.tokens, process)
            assert not errors, errors[:3]
            many.append(((total - fwd) / max(res.steps, 1), tokens, res.steps, len(res.sequences)))
        step = statistics.median(m[0] for m in many)
        _, tokens, steps, nseq = many[0]
        where = "worker processes" if process else "in process"
        print(f"\n{nseq} parallel sequences ({where}; fork({args.forks}) then gen_tokens under the regex): "
              f"{steps} steps, {tokens} tokens; median step time without the model {step * 1e3:.2f} ms "
              f"({step / nseq * 1e6:.0f} µs per sequence per step; the first step includes the fork)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
