"""Answers in a fixed format: a date, a yes/no answer and a phone number, each under a regex.

    python examples/regex_answer.py

A regex (Python ``re`` syntax) constrains the whole answer, as ``re.fullmatch`` would judge it.
The example also compiles a constraint once and reuses it for several prompts, and shows the
error a regex logitgate cannot turn into an automaton gives.
"""
from __future__ import annotations

import re
import sys

import logitgate
from logitgate.integrations.generation import generate
from logitgate.integrations.models import load_model

QUESTIONS = [
    ("When did Apollo 11 land on the Moon? Answer as YYYY-MM-DD.", r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("Is Paris the capital of France?", r"(Yes|No)\."),
    ("Give a phone number in international format.", r"\+[1-9][0-9]{7,14}"),
]


def main() -> int:
    model = load_model()
    for question, pattern in QUESTIONS:
        # compile once for the model's vocabulary; the compiled constraint is reusable and thread-safe
        compiled = logitgate.compile(logitgate.Grammar.from_regex(pattern), model.tokenizer)
        res = generate(model, [{"role": "user", "content": question}], compiled, max_tokens=30)
        print(f"{question}\n  -> {res.text!r}")
        assert re.fullmatch(pattern, res.text), (pattern, res.text)
        assert res.stop_reason == "eos"

    # Backreferences (and lookaround) cannot be a DFA: refused with the offset and a caret line.
    try:
        logitgate.Grammar.from_regex(r"(a+)b\1")
    except logitgate.RegexError as exc:
        print(f"refused as expected:\n{exc}")
    else:
        raise AssertionError("a backreference should be refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
