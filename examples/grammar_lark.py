"""A SQL query under a small Lark grammar, checked afterwards by Lark's own parser.

    python examples/grammar_lark.py

The grammar is a subset of SELECT: columns, one table, an optional WHERE with AND-ed comparisons.
logitgate reads it with Lark's grammar loader (extra ``lark``) and enforces it byte by byte while
the model writes, so the text always parses. The same grammar is then given to ``lark.Lark`` to
show the output is a sentence of it.
"""
from __future__ import annotations

import sys

import lark

import logitgate
from logitgate.integrations.generation import generate
from logitgate.integrations.models import load_model

SQL = r"""
start: "SELECT " columns " FROM " NAME where? ";"
columns: "*" | NAME (", " NAME)*
where: " WHERE " condition (" AND " condition)*
condition: NAME OP value
OP: " = " | " > " | " < "
value: NUMBER | STRING
NAME: /[a-z_][a-z0-9_]{0,20}/
NUMBER: /[0-9]{1,6}/
STRING: /'[A-Za-z ]{0,20}'/
"""

REQUESTS = [
    "Write a SQL query: the names and ages of all users older than 30.",
    "Write a SQL query: every order of the customer named 'Alice'.",
]


def main() -> int:
    model = load_model()
    grammar = logitgate.Grammar.from_lark(SQL)
    compiled = logitgate.compile(grammar, model.tokenizer)
    reference = lark.Lark(SQL)                      # Lark's own Earley parser, as an independent check
    for request in REQUESTS:
        res = generate(model, [{"role": "user", "content": request}], compiled, max_tokens=80)
        print(f"{request}\n  -> {res.text}")
        assert res.stop_reason == "eos", res.stop_reason
        tree = reference.parse(res.text)            # raises lark.exceptions.LarkError if it does not parse
        print("  tables:", [str(t) for t in tree.children if isinstance(t, lark.Token)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
