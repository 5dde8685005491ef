"""Custom recognizers (``Grammar.from_recognizer``): the cost of one token mask on each path.

    python bench/bench_recognizers.py                 # both mistral tokenizers, every recognizer
    python bench/bench_recognizers.py --tokenizer spm32k --walks 2 --steps 16

The recognizers are those of ``examples/recognizers.py`` (a 50k-word list, a Luhn-checked card
number, balanced brackets with a depth cap, a character-level JSON parser). Random valid walks are
drawn once per recognizer and tokenizer (random allowed tokens, EOS only when nothing else is
allowed); every path then replays the same tokens and times ``fill_next_token_bitmask`` per step:

* ``python``: the plain Python walk, memo cleared before every mask (every trie node it keeps
  alive costs a ``byte_allowed``/``append`` call);
* ``memo cold``: a fresh compile, masks memoised per recognizer state, first pass over the walks
  (a state met again within the walks is a lookup);
* ``memo warm``: the same compiled constraint, second pass (every state already met);
* ``numba``: the Luhn and brackets recognizers written as ``NumbaRecognizer``s (int64 states), a
  fresh compile, first pass;
* ``regex``: the built-in regex engine on an equivalent regex (where one exists), first pass;
* ``lm-format-enforcer``: for the JSON parser, lm-format-enforcer's own ``JsonSchemaParser(None)``
  (any JSON) with ``TokenEnforcer`` on the same token ids (when it is installed).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))


def _numba_versions():
    """Luhn (13-19 digits) and Brackets (depth 8) over int64 states, as numba functions."""
    import numba

    from logitgate.recognizers import NumbaRecognizer

    # Luhn state: count * 100 + sum_if_even * 10 + sum_if_odd
    @numba.njit
    def luhn_add(state, d):
        n, even, odd = state // 100, (state // 10) % 10, state % 10
        dd = 2 * d - 9 if 2 * d > 9 else 2 * d
        if n % 2 == 0:
            return (n + 1) * 100 + ((even + dd) % 10) * 10 + (odd + d) % 10
        return (n + 1) * 100 + ((even + d) % 10) * 10 + (odd + dd) % 10

    @numba.njit
    def luhn_valid(state):
        n, even, odd = state // 100, (state // 10) % 10, state % 10
        return 13 <= n <= 19 and (even if n % 2 == 0 else odd) == 0

    @numba.njit
    def luhn_step(state, byte):
        if byte < 48 or byte > 57 or state // 100 >= 19:
            return -1
        nxt = luhn_add(state, byte - 48)
        if state // 100 == 18 and not luhn_valid(nxt):
            return -1
        return nxt

    # Brackets state: started bit | depth << 1 | closers (2 bits each, innermost lowest) << 5
    @numba.njit
    def br_step(state, byte):
        depth = (state >> 1) & 15
        stack = state >> 5
        if 97 <= byte <= 122:
            return state | 1
        kind = -1
        if byte == 40:
            kind = 1
        elif byte == 91:
            kind = 2
        elif byte == 123:
            kind = 3
        if kind > 0:
            if depth >= 8:
                return -1
            return 1 | ((depth + 1) << 1) | (((stack << 2) | kind) << 5)
        close = -1
        if byte == 41:
            close = 1
        elif byte == 93:
            close = 2
        elif byte == 125:
            close = 3
        if close > 0 and depth > 0 and (stack & 3) == close:
            return 1 | ((depth - 1) << 1) | ((stack >> 2) << 5)
        return -1

    @numba.njit
    def br_accepting(state):
        return (state & 1) == 1 and ((state >> 1) & 15) == 0

    # The language of the regex [0-9]{13,19} itself: state = digits so far
    @numba.njit
    def dg_step(state, byte):
        return state + 1 if 48 <= byte <= 57 and state < 19 else -1

    @numba.njit
    def dg_accepting(state):
        return state >= 13

    return {"luhn": NumbaRecognizer(luhn_step, luhn_valid, 0), "brackets": NumbaRecognizer(br_step, br_accepting, 0),
            "digits{13,19}": NumbaRecognizer(dg_step, dg_accepting, 0)}


class _Digits:
    """13 to 19 ASCII digits: the language of the regex ``[0-9]{13,19}``, as a Python recognizer."""

    def initial(self) -> int:
        return 0

    def byte_allowed(self, n: int, byte: int) -> bool:
        return 48 <= byte <= 57 and n < 19

    def append(self, n: int, byte: int) -> int:
        return n + 1

    def special_allowed(self, n: int, token: str) -> bool:
        return token == "eos" and n >= 13


def _as_dfa_compiled(lg, rec, tok, max_states: int = 20_000):
    """The built-in DFA engine (what a regex compiles to) on the same automaton as a
    ``NumbaRecognizer``: its states explored exhaustively (256 ``step`` calls per state) into a
    ``ByteDFA``. The fair "equivalent regex" where no short regex exists (Luhn)."""
    from logitgate.automata import ByteDFA
    from logitgate.compiler import CompiledGrammar

    ids = {rec.start: 0}
    order = [rec.start]
    rows = []
    for s in order:
        row = np.full(256, -1, np.int32)
        for b in range(256):
            n = int(rec.step(s, b))
            if n >= 0:
                if n not in ids:
                    if len(order) >= max_states:
                        raise RuntimeError("too many states to explore")
                    ids[n] = len(order)
                    order.append(n)
                row[b] = ids[n]
        rows.append(row)
    trans = np.stack(rows)
    accepting = np.array([[bool(rec.accepting(s))] for s in order])
    classes = np.arange(256, dtype=np.uint8)
    for a in (trans, accepting, classes):
        a.setflags(write=False)
    dfa = ByteDFA(trans, 0, accepting, np.ones_like(accepting), classes, trans)
    return CompiledGrammar(lg.Grammar("dfa", "explored", 0, (("object", id(rec)),)), tok, dfa), len(order)


def _walks(compiled, tok, rng: random.Random, n_walks: int, steps: int) -> list[list[int]]:
    import logitgate as lg

    eos = set(tok.eos_token_ids)
    out = []
    for _ in range(n_walks):
        m = lg.Matcher(compiled)
        seq: list[int] = []
        for _ in range(steps):
            allowed = [int(t) for t in m.allowed_token_ids()]
            choices = [t for t in allowed if t not in eos]
            if not choices:
                break
            t = rng.choice(choices)
            assert m.accept_token(t)
            seq.append(t)
        out.append(seq)
    return out


def _replay(compiled, walks: list[list[int]], *, clear: bool = False) -> list[float]:
    """Seconds of each mask fill along the walks (the mask before each token and after the last)."""
    import logitgate as lg

    bm = lg.allocate_token_bitmask(1, compiled.tokenizer.vocab_size)
    times = []
    for seq in walks:
        m = lg.Matcher(compiled)
        for t in [*seq, None]:
            if clear:
                compiled._forget()
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bm, 0)
            times.append(time.perf_counter() - t0)
            if t is not None:
                assert m.accept_token(t)
    return times


def _lmfe(tok, walks: list[list[int]]) -> list[float] | None:
    try:
        from lmformatenforcer import JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData
    except ImportError:
        return None
    import logging

    from json_schema_worker import lmfe_tokenizer_data

    logging.getLogger().setLevel(logging.CRITICAL)
    eos = sorted(tok.eos_token_ids)[0]
    data = lmfe_tokenizer_data(TokenEnforcerTokenizerData, tok.tokens, set(tok.special_ids) | set(tok.eos_token_ids),
                               eos, tok.vocab_size)
    times = []
    for seq in walks:
        enforcer = TokenEnforcer(data, JsonSchemaParser(None))
        for k in range(len(seq) + 1):
            t0 = time.perf_counter()
            enforcer.get_allowed_tokens(seq[:k])
            times.append(time.perf_counter() - t0)
    return times


def _row(name: str, tokname: str, path: str, times: list[float] | None) -> str:
    if not times:
        return f"| {name} | {tokname} | {path} | – | – | – | – |"
    us = np.asarray(times) * 1e6
    return (f"| {name} | {tokname} | {path} | {len(us)} | {us.mean():.1f} | {np.percentile(us, 50):.1f} | "
            f"{np.percentile(us, 99):.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", choices=["spm32k", "tekken131k", "both"], default="both")
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import logitgate as lg
    import recognizers as ex
    from vocab import tokenizer_path

    names = ["spm32k", "tekken131k"] if args.tokenizer == "both" else [args.tokenizer]
    numba_recs = _numba_versions()
    makers = {
        "words-50k": (lambda: ex.WordList(ex.make_words(50_000)), None),
        "digits{13,19}": (_Digits, r"[0-9]{13,19}"),
        "luhn": (ex.Luhn, None),
        "brackets": (ex.Brackets, None),
        "json (char-level)": (ex.CharJSON, None),
    }
    print(f"# Recognizer masks: µs per mask fill (walks {args.walks} x up to {args.steps} tokens, seed {args.seed})")
    print("\n| recognizer | tokenizer | path | masks | mean µs | p50 µs | p99 µs |")
    print("|---|---|---|---:|---:|---:|---:|")
    for tokname in names:
        tok = lg.Tokenizer.from_mistral(tokenizer_path(tokname))
        for name, (make, regex) in makers.items():
            rec = make()
            base = lg.compile(lg.Grammar.from_recognizer(rec), tok, cache=False)
            walks = _walks(base, tok, random.Random(f"{args.seed}-{name}-{tokname}"), args.walks, args.steps)
            cold = lg.compile(lg.Grammar.from_recognizer(rec), tok, cache=False)
            rows = [("python", _replay(base, walks, clear=True)),
                    ("memo cold", _replay(cold, walks)), ("memo warm", _replay(cold, walks))]
            if name in numba_recs:
                nb = lg.compile(lg.Grammar.from_recognizer(numba_recs[name]), tok, cache=False)
                _replay(lg.compile(lg.Grammar.from_recognizer(numba_recs[name]), tok, cache=False), walks[:1])  # jit
                rows.append(("numba", _replay(nb, walks)))
                if regex is None and name == "luhn":
                    dfa_c, n_states = _as_dfa_compiled(lg, numba_recs[name], tok)
                    rows.append((f"DFA engine, same automaton ({n_states} states)", _replay(dfa_c, walks)))
            if regex:
                rows.append(("regex (built-in)", _replay(lg.compile(lg.Grammar.from_regex(regex), tok, cache=False),
                                                         walks)))
            if name.startswith("json"):
                rows.append(("lm-format-enforcer", _lmfe(tok, walks)))
            for path, times in rows:
                print(_row(name, tokname, path, times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
