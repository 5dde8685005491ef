"""Grammars for the context-free grammar benchmark, and one valid sample text per grammar.

The grammar texts are read at run time from shared/data (never copied into the repo):

* GBNF (llama.cpp):          llama-cpp-grammars/{json,c,arithmetic,list,chess}.gbnf
* Lark (syncode, lark):      syncode-grammars/{json,sql,c,calc}.lark,
                             lark-grammars/examples/composition/json.lark
* yacc-like, inline lexemes: aici/grammars/c.y, sample text aici/grammars/sample.c

Only the samples live here. ``check_samples`` verifies every sample with an oracle that is
not the engine under test and raises if one is refused:

* Lark grammars: ``lark.Lark(src, parser="earley", lexer="dynamic").parse(sample)``;
* GBNF grammars: two readers, no hand conversion: llguidance's own GBNF reader and matcher
  fed the sample byte by byte (a 256-token byte vocabulary, no real tokenizer involved), and
  xgrammar's ``Grammar.from_ebnf`` + ``xgrammar.testing._is_grammar_accept_string``. The
  sample passes when one of them accepts it; a refusal by the other is printed (llguidance
  turns terminal-only GBNF rules into greedy lexemes, so it refuses every text of
  arithmetic.gbnf; xgrammar cannot read json.gbnf's empty first alternative);
* c.y: no independent reader of that format is installed, so the sample is not checked.
  (aici's own lexer starts as if a newline had just been seen, ``file_start_state`` in its
  lex.rs; the SKIP pre-processor rule needs that for the ``#include`` on line 1.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"

# --------------------------------------------------------------------------- samples

# One document, written two ways: pretty (indent 2, what a model asked for JSON usually
# writes) for json.gbnf and syncode's json.lark; compact with ", " and ": " for lark's
# composition/json.lark, which wants whitespace after ':' and none before ',' ']' '}'.
_JSON_DOC = {
    "order_id": "ord-20931",
    "customer": {"name": "Amélie Durand", "email": "amelie.durand@example.fr", "city": "Zürich", "vip": True},
    "items": [
        {"sku": "KB-104", "title": "Mechanical keyboard", "qty": 1, "price": 89.9},
        {"sku": "MS-220", "title": "Wireless mouse", "qty": 2, "price": 24.5},
    ],
    "discount": -5.0,
    "shipping": {"method": "express", "days": 2, "tracking": None},
    "tags": ["gift", "priority"],
    "paid": False,
}
JSON_PRETTY = json.dumps(_JSON_DOC, indent=2, ensure_ascii=False)
JSON_COMPACT = json.dumps(_JSON_DOC, ensure_ascii=False)

# c.gbnf is a small C subset with whitespace only where the grammar puts `ws` (one or more
# of [ \t\n]): after a type, around '=', after "return", after ',' in argument lists and
# ';' in for, inside "( ... )" of a parenthesised expression (required there). A statement
# follows '{', ';' or '}' directly, so line breaks come from `// ...\n` comment statements
# (and /* */ comments). One parameter at most, conditions without spaces.
C_GBNF = (
    "int sumSquares(int n){// sum of the squares of 1..n, skipping multiples of 7\n"
    "int total = 0;// running sum\n"
    "int i = 1;// loop counter\n"
    "while(i<=n){// visit every value\n"
    "if(i-( i/7 )*7==0){// a multiple of seven: skip it\n"
    "i = i+1;}else{total = total+i*i;// accumulate\n"
    "i = i+1;}}// end of the loop\n"
    "for(int k = 0; k<3; k = k+1){total = total-k;}// small correction\n"
    "/* report the result\n"
    "   before returning it */"
    "log (total, n);// trace\n"
    "if(total>1000){total = 1000;}// clamp\n"
    "return total;}"
)

# syncode's c.lark: WS is ignored, several parameters, `void`; its single-line comment
# needs two newlines (a regex ending in \n, then a literal "\n"), so only /* */ here.
C_LARK = """\
int gcd(int a, int b) {
    while (b != 0) {
        int t = b;
        b = a - (a / b) * b;
        a = t;
    }
    return a;
}

float average(int total, int count) {
    if (count == 0) {
        return 0;
    } else {
        float result = total / count;
        return result;
    }
}

void report(int n) {
    /* print every value up to n */
    for (int i = 1; i <= n; i = i + 1) {
        show(i, gcd(i, n), -average(n, i));
    }
}
"""

# arithmetic.gbnf: "expr = term" lines; an operator is followed directly by its operand.
ARITHMETIC = (
    "price*qty+shipping = total\n"
    "(price+tax)*qty-discount = (net_total)\n"
    "rate*(hours+overtime)/days = pay\n"
    "width*height*2 = area\n"
    "(a+b)/(c-4) = 12\n"
)

LIST = (
    "- Buy milk, eggs and a baguette\n"
    "- Call the dentist to move Tuesday's appointment\n"
    "- Review pull request #482 (parser fixes)\n"
    "- Book train tickets to Lyon for Zoë and Jürgen\n"
    "- Water the plants on the balcony\n"
)

CHESS = (
    "1. e4 e5\n"
    "2. Nf3 Nc6\n"
    "3. Bb5 a6\n"
    "4. Ba4 Nf6\n"
    "5. O-O Be7\n"
    "6. Re1 b5\n"
    "7. Bb3 d6\n"
    "8. c3 O-O\n"
    "9. h3 Nb8\n"
    "10. d4 Nbd7\n"
    "11. c4 c6\n"
    "12. cxb5 axb5\n"
)

SQL = """\
SELECT c.name, COUNT(o.id) AS order_count, SUM(o.total) AS revenue
FROM customers AS c JOIN orders AS o ON c.id = o.customer_id
WHERE o.status = 'shipped' AND o.total > 20
GROUP BY c.name
HAVING SUM(o.total) > 1000
ORDER BY revenue DESC
LIMIT 10;"""

CALC = "(12.5 + 7) * 3 - 42 / (6 - 4) * 2.25 + 100"

C_Y_FILE = "aici/grammars/sample.c"
C_Y_CUT = 2000  # bytes: the default walk is sample.c up to the last top-level "}" line within this


def c_y_sample(full: bool = False) -> str:
    """sample.c, whole (full=True) or cut after the last top-level closing "}" line that ends
    within the first C_Y_CUT bytes (so the cut text is still a complete translation unit)."""
    text = (DATA_DIR / C_Y_FILE).read_text(encoding="utf-8")
    if full:
        return text
    out, size, best = [], 0, None
    for line in text.splitlines(keepends=True):
        size += len(line.encode("utf-8"))
        if size > C_Y_CUT:
            break
        out.append(line)
        if line.rstrip("\n") == "}":
            best = len(out)
    return "".join(out[:best]) if best else "".join(out)


# --------------------------------------------------------------------------- grammars


@dataclass(frozen=True)
class GrammarCase:
    name: str
    fmt: str  # "gbnf" | "lark" | "yacc"
    path: str  # relative to DATA_DIR
    sample: str | None  # None: computed (c.y)

    def text(self) -> str:
        return (DATA_DIR / self.path).read_text(encoding="utf-8")


GRAMMARS = {
    g.name: g
    for g in [
        GrammarCase("json.gbnf", "gbnf", "llama-cpp-grammars/json.gbnf", JSON_PRETTY),
        GrammarCase("c.gbnf", "gbnf", "llama-cpp-grammars/c.gbnf", C_GBNF),
        GrammarCase("arithmetic.gbnf", "gbnf", "llama-cpp-grammars/arithmetic.gbnf", ARITHMETIC),
        GrammarCase("list.gbnf", "gbnf", "llama-cpp-grammars/list.gbnf", LIST),
        GrammarCase("chess.gbnf", "gbnf", "llama-cpp-grammars/chess.gbnf", CHESS),
        GrammarCase("json.lark", "lark", "syncode-grammars/json.lark", JSON_PRETTY),
        GrammarCase("json-comp.lark", "lark", "lark-grammars/examples/composition/json.lark", JSON_COMPACT),
        GrammarCase("sql.lark", "lark", "syncode-grammars/sql.lark", SQL),
        GrammarCase("c.lark", "lark", "syncode-grammars/c.lark", C_LARK),
        GrammarCase("calc.lark", "lark", "syncode-grammars/calc.lark", CALC),
        GrammarCase("c.y", "yacc", "aici/grammars/c.y", None),
    ]
}


def sample_text(case: GrammarCase, c_y_full: bool = False) -> str:
    return case.sample if case.sample is not None else c_y_sample(c_y_full)


# --------------------------------------------------------------------------- validation


class _ByteTokens:
    """A 256-token byte vocabulary (+ EOS) for llguidance: a sample is fed byte by byte."""

    is_tokenizer_wrapper = True

    def __init__(self):
        self.tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        self.special_token_ids = [256]
        self.eos_token_id = 256
        self.bos_token_id = None

    def __call__(self, text):
        return list(text.encode("utf-8") if isinstance(text, str) else text)


def _check_lark(src: str, sample: str):
    import lark

    try:
        lark.Lark(src, parser="earley", lexer="dynamic").parse(sample)
        return True, "lark Earley (dynamic lexer) parses it"
    except Exception as e:  # lark.exceptions.* or a grammar error
        return False, f"lark: {type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _check_gbnf_llguidance(src: str, sample: str):
    import llguidance

    tok = llguidance.LLTokenizer(_ByteTokens())
    m = llguidance.LLMatcher(tok, llguidance.grammar_from("gbnf", src), log_level=0)
    if m.is_error():
        return None, f"llguidance cannot read the grammar: {m.get_error()}"
    data = sample.encode("utf-8")
    for i, b in enumerate(data):
        if not m.consume_token(b):
            return False, f"llguidance refuses byte {i} ({data[max(0, i - 30):i]!r} ^ {data[i:i + 10]!r})"
    if not m.is_accepting():
        return False, "llguidance: not accepting at the end"
    return True, "llguidance matcher accepts it"


def _check_gbnf_xgrammar(src: str, sample: str):
    try:
        import xgrammar
        from xgrammar.testing import _is_grammar_accept_string

        g = xgrammar.Grammar.from_ebnf(src, root_rule_name="root")
        return bool(_is_grammar_accept_string(g, sample)), "xgrammar"
    except Exception as e:
        return None, f"xgrammar: {type(e).__name__}: {' '.join(str(e).split())[:200]}"


def check_samples(names, c_y_full: bool = False, log=print):
    """Check each named grammar's sample with an independent oracle; raise if one is refused.

    Returns {name: outcome string}."""
    outcomes, bad = {}, []
    for name in names:
        case = GRAMMARS[name]
        sample = sample_text(case, c_y_full)
        if case.fmt == "lark":
            ok, detail = _check_lark(case.text(), sample)
            checker = "lark Earley"
        elif case.fmt == "gbnf":
            # Two GBNF readers, neither converted by hand: the sample passes when one accepts
            # it; a refusal by the other is printed (it is then that engine's quirk).
            lok, ldetail = _check_gbnf_llguidance(case.text(), sample)
            xok, xdetail = _check_gbnf_xgrammar(case.text(), sample)
            xdetail = {True: "xgrammar matcher accepts it", False: "xgrammar REFUSES it"}.get(xok, xdetail)
            if lok is False:
                ldetail = ldetail.replace("llguidance", "llguidance REFUSES it:", 1)
            ok = bool(lok or xok) if (lok is not None or xok is not None) else False
            checker = " + ".join(n for n, v in (("llguidance", lok), ("xgrammar", xok)) if v) or "none"
            detail = f"{ldetail}; {xdetail}"
            if lok is not None and xok is not None and lok != xok:
                detail += " (the two checkers DISAGREE)"
        else:
            ok, detail, checker = True, "not checked (no independent reader of the yacc-like format)", "none"
        outcomes[name] = f"{'ok' if ok else 'FAILED'} [{checker}] {detail}"
        log(f"  sample {name} ({len(sample.encode('utf-8'))} bytes): {outcomes[name]}")
        if not ok:
            bad.append(f"{name}: {detail}")
    if bad:
        raise SystemExit("invalid grammar sample(s):\n  " + "\n  ".join(bad))
    return outcomes


if __name__ == "__main__":  # python bench/grammar_samples.py
    check_samples(list(GRAMMARS))
