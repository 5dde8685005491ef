"""The ``logitgate`` command line. For now: ``logitgate demo`` (later issues add generate, check,
serve, bench)."""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path
from typing import Sequence

__all__ = ["main"]

DEMO_ARITHMETIC_GBNF = r"""
root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" expr ")"
number ::= [1-9] [0-9]{0,3} | "0"
ws     ::= " "?
"""
"""A recursive grammar (GBNF) for the demo: every text it allows is a Python expression."""

DEMO_REGEXES = [
    ("phone number", r"\+?[1-9][0-9]{7,14}"),
    ("ISO date", r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("e-mail", r"[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,12}\.(com|org|net|io)"),
    ("tiny JSON object", r'\{"name": "[A-Z][a-z]{1,9}", "age": [1-9][0-9]?, "tags": \[("[a-z]{1,8}"(, "[a-z]{1,8}"){0,2})?\]\}'),
]


def _mistral_data_file(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "the demo uses the real tokenizers shipped by mistral-common: pip install 'logitgate[mistral]'"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    if not path.exists():
        raise SystemExit(f"mistral-common does not ship {name} (looked at {path})")
    return path


DEMO_TOKENIZERS = {"tekken": "tekken_240911.json", "spm": "tokenizer.model.v1"}


def _is_python_expression(text: str) -> bool:
    import ast

    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def _demo_one(logitgate, tok, title, grammar, check, oracle, bitmask, rng, max_steps) -> bool:  # type: ignore[no-untyped-def]
    """Generate one text under ``grammar`` with a seeded random stand-in for the model; True if
    it ended (EOS) and ``check`` accepts it."""
    import numpy as np

    eos = set(tok.eos_token_ids)
    print(f"\n== {title}")
    t0 = time.perf_counter()
    compiled = logitgate.compile(grammar, tok)
    matcher = logitgate.Matcher(compiled)
    matcher.fill_next_token_bitmask(bitmask)
    first = time.perf_counter() - t0
    kind = f"{compiled.n_states} DFA states" if grammar.kind == "regex" else f"{compiled.n_states} lexer states"
    print(f"   compiled to first mask in {first * 1e3:.1f} ms ({kind})")
    mask_time = 0.0
    steps = 0
    ids: list[int] = []
    while not matcher.is_terminated() and steps < max_steps:
        t1 = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        mask_time += time.perf_counter() - t1
        allowed = np.flatnonzero(logitgate.bitmask_to_bool(bitmask[0], tok.vocab_size))
        forced = matcher.find_jump_forward_bytes()
        # a stand-in for the model: a seeded random choice among the allowed tokens, ending
        # (EOS) with probability 1/3 whenever the text is already complete; past 20 steps it
        # prefers tokens that close a parenthesis, so that recursive texts come to an end
        choices = [int(t) for t in allowed if int(t) not in eos]
        if steps > 20:
            closing = [t for t in choices if b")" in tok.token_bytes(t) and b"(" not in tok.token_bytes(t)]
            choices = closing or choices
        if matcher.is_accepting() and (not choices or rng.random() < 1 / 3 or steps > 20):
            choice = next(t for t in allowed if int(t) in eos)
        else:
            choice = rng.choice(choices)
        shown = "EOS" if int(choice) in eos else repr(tok.token_bytes(int(choice)))
        extra = f"  forced next: {forced!r}" if forced else ""
        print(f"   step {steps:2d}: {len(allowed):6d} tokens allowed -> {shown}{extra}")
        if not matcher.accept_token(int(choice)):
            print("   internal error: the chosen allowed token was refused")
            return False
        ids.append(int(choice))
        steps += 1
    text = tok.decode_bytes(ids).decode("utf-8", errors="replace")
    ok = check(text) and matcher.is_terminated()
    print(f"   text: {text!r}  ({steps} steps, mean mask {mask_time / max(steps, 1) * 1e6:.0f} µs)"
          f"  {oracle}: {'ok' if ok else 'FAILED'}")
    return ok


def _demo(args: argparse.Namespace) -> int:
    import logitgate

    t0 = time.perf_counter()
    tok = logitgate.Tokenizer.from_mistral(_mistral_data_file(DEMO_TOKENIZERS[args.tokenizer]))
    n_nodes = tok.trie.n_nodes
    print(f"tokenizer: {args.tokenizer} ({tok.n_tokens} tokens, logits width {tok.vocab_size}, "
          f"{n_nodes} trie nodes) loaded in {time.perf_counter() - t0:.2f} s")
    rng = random.Random(args.seed)
    bitmask = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    all_ok = True
    runs = [(f"{title}: /{pattern}/", logitgate.Grammar.from_regex(pattern),
             lambda text, p=pattern: re.fullmatch(p, text) is not None, "re.fullmatch") for title, pattern in DEMO_REGEXES]
    runs.append(("arithmetic (a recursive GBNF grammar)", logitgate.Grammar.from_gbnf(DEMO_ARITHMETIC_GBNF),
                 _is_python_expression, "ast.parse"))
    for title, grammar, check, oracle in runs:
        ok = _demo_one(logitgate, tok, title, grammar, check, oracle, bitmask, rng, args.max_steps)
        all_ok &= ok
    return 0 if all_ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="logitgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="regex- and grammar-constrained generation over a real bundled tokenizer")
    demo.add_argument("--tokenizer", choices=sorted(DEMO_TOKENIZERS), default="tekken")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--max-steps", type=int, default=80)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
