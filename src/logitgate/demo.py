"""The demos behind ``logitgate demo``: the embedded model answering under a Pydantic schema, a
regex and a grammar; and (``--tokenizer``) the model-free walk over a real tokenizer that shows
allowed-token counts, forced bytes and the accepted text per step."""
from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

__all__ = ["tokenizer_demo", "model_demo"]

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


def tokenizer_demo(args: argparse.Namespace) -> int:
    """The model-free demo over a bundled tokenizer (exit code 0 when every text checks)."""
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




DEMO_PERSON_SCHEMA = {
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "minLength": 1, "maxLength": 40},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "city", "languages"],
    "additionalProperties": False,
}
"""The JSON Schema of the demo's Pydantic model ``Person`` (used as is when Pydantic is absent)."""

DEMO_DATE_REGEX = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"

DEMO_ARITHMETIC_LARK = r"""
start: sum
sum: product (ADD product)~0..3
product: atom (MUL atom)~0..2
atom: NUMBER | "(" NUMBER (ADD NUMBER)~1..2 ")"
ADD: "+" | "-"
MUL: "*" | "/"
NUMBER: /[1-9][0-9]{0,3}|0/
%ignore " "
"""
"""The demo's grammar (Lark): arithmetic over integers, bounded so that a small model that repeats
itself still has to stop; answers are checked with Lark's own parser."""


def person_model() -> object:
    """The demo's Pydantic model (``None`` when Pydantic is not installed)."""
    try:
        from pydantic import BaseModel, Field
    except ImportError:
        return None

    class Person(BaseModel):
        model_config = {"extra": "forbid"}
        name: str = Field(min_length=1, max_length=40)
        age: int = Field(ge=0, le=120)
        city: str = Field(min_length=1, max_length=40)
        languages: list[str] = Field(min_length=1, max_length=3)

    return Person


def demo_tasks() -> list[tuple[str, str, object, object]]:
    """``(title, user prompt, Grammar, check(text) -> str | None)`` for the model demo; the check
    returns None when the answer is valid, else the reason."""
    import json

    from . import Grammar

    person = person_model()
    schema_source = person if person is not None else DEMO_PERSON_SCHEMA

    def check_json(text: str) -> str | None:
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"not JSON: {exc}"
        if person is not None:
            try:
                person.model_validate(value)  # type: ignore[attr-defined]
            except Exception as exc:  # pydantic.ValidationError
                return f"Pydantic refuses it: {exc}"
        return None

    def check_date(text: str) -> str | None:
        return None if re.fullmatch(DEMO_DATE_REGEX, text) else "does not match the regex"

    def check_arith(text: str) -> str | None:
        try:
            from lark import Lark
        except ImportError:
            return None if _is_python_expression(text) else "not an arithmetic expression"
        try:
            Lark(DEMO_ARITHMETIC_LARK).parse(text)
        except Exception as exc:  # lark.exceptions.LarkError
            return f"Lark refuses it: {exc}"
        return None

    return [
        ("JSON for a Pydantic model (Person)",
         "Invent a person. Answer in JSON with name, age, city and the languages they speak.",
         Grammar.from_json_schema(schema_source), check_json),
        ("a regex (ISO date)", "On what date did Apollo 11 land on the Moon? Answer as YYYY-MM-DD.",
         Grammar.from_regex(DEMO_DATE_REGEX), check_date),
        ("a grammar (Lark arithmetic)", "Write an arithmetic expression whose value is 42.",
         Grammar.from_lark(DEMO_ARITHMETIC_LARK), check_arith),
    ]


def model_demo(args: argparse.Namespace) -> int:
    """The embedded model (or ``--model``) answering three chat prompts under a schema, a regex and
    a grammar; prints each answer, whether it checks, tokens per second and the mask time share."""
    from . import compile
    from .integrations.generation import generate
    from .integrations.models import load_model
    from .progress import progress

    with progress("loading the model") as say:
        model = load_model(args.model, runtime=args.runtime, progress=say)
    from .kernels import load_all

    with progress("loading the compiled kernels"):
        load_all()  # as a server does at start-up: the masks timed below do not pay first loads
    print(f"model: {model.name} ({type(model).__name__}), vocabulary {model.tokenizer.n_tokens} tokens")
    ok = True
    for title, prompt, grammar, check in demo_tasks():
        print(f"\n== {title}\n   user: {prompt}")
        with progress("compiling the constraint"):
            t0 = time.perf_counter()
            compiled = compile(grammar, model.tokenizer)
            compile_s = time.perf_counter() - t0
        print("   assistant: ", end="", flush=True)
        res = generate(model, [{"role": "user", "content": prompt}], compiled, max_tokens=args.max_tokens,
                       temperature=args.temperature, seed=args.seed, on_text=lambda s: print(s, end="", flush=True))
        print()
        problem = check(res.text)  # type: ignore[operator]
        if res.stop_reason != "eos":
            problem = problem or f"stopped at --max-tokens {args.max_tokens} before the answer was complete"
        ok &= problem is None
        print(f"   {'valid' if problem is None else 'INVALID: ' + problem}")
        print(f"   {len(res.tokens)} tokens ({res.n_sampled} sampled, {res.n_forced} fast-forwarded) at "
              f"{res.tokens_per_s:.1f} tokens/s; masks {res.mask_share:.1%} of the time "
              f"(mean {res.mask_s / max(len(res.mask_step_s), 1) * 1e6:.0f} µs); compile {compile_s * 1e3:.0f} ms")
    return 0 if ok else 1
