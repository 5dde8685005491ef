"""The GBNF front end: llama.cpp's grammars parse; exact structure (code point ranges, escapes,
repetition, nesting, multi-line rules, comments); an oracle (random regular grammars, IR turned back
into a Python regex, against the same construct written as a Python regex); error positions."""
from __future__ import annotations

from tests.conftest import SHARED_DATA

import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logitgate.errors import GrammarError, GrammarWarning
from logitgate.grammar.gbnf import parse_gbnf
from logitgate.grammar.ir import Alt, Empty, Expr, Lit, Ref, Rep, Rx, Seq
from logitgate.regex.ast import CharClass

GRAMMARS = SHARED_DATA / "llama-cpp-grammars"
NAMES = ["arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"]
ANY = ((0, 0xD7FF), (0xE000, 0x10FFFF))


def body(text: str, rule: str = "root") -> Expr:
    return parse_gbnf(text).rules[rule].body


def cls(ranges: tuple[tuple[int, int], ...], source: str) -> Rx:
    return Rx(CharClass(ranges), source)


# --- llama.cpp's grammars


@pytest.mark.parametrize("name", NAMES)
def test_llama_cpp_grammars_parse(name: str) -> None:
    path = GRAMMARS / f"{name}.gbnf"
    if not path.exists():
        pytest.skip(f"{path} is not there")
    text = path.read_text(encoding="utf-8")
    g = parse_gbnf(text)
    assert (g.start, g.kind, g.lex_mode, g.terminals, g.ignore, g.source) == ("root", "gbnf", "chars", {}, (), text)
    defined = [m.group(1) for m in re.finditer(r"^([a-zA-Z0-9-]+)\s*::=", text, re.M)]
    assert list(g.rules) == defined
    for rule in g.rules.values():
        assert text.splitlines()[rule.line - 1].startswith(rule.name)


def test_llama_cpp_grammar_details() -> None:
    if not GRAMMARS.exists():
        pytest.skip("llama-cpp-grammars data is not there")
    lst = parse_gbnf((GRAMMARS / "list.gbnf").read_text(encoding="utf-8"))
    item = lst.rules["item"].body
    assert isinstance(item, Seq) and isinstance(item.items[1], Rep)
    ranges = item.items[1].item.node.ranges
    assert ranges == ((0, 9), (0x0E, 0x84), (0x86, 0x2027), (0x202A, 0xD7FF), (0xE000, 0x10FFFF))
    eng = parse_gbnf((GRAMMARS / "english.gbnf").read_text(encoding="utf-8"))
    punct = eng.rules["punctuation"].body.node.ranges
    assert punct == ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E))
    jp = parse_gbnf((GRAMMARS / "japanese.gbnf").read_text(encoding="utf-8"))
    assert jp.rules["hiragana"].body == cls(((0x3041, 0x309F),), "[ぁ-ゟ]")


# --- Structure


def test_negated_class_ranges_and_source() -> None:
    src = r'[^"\\\x7F\x00-\x1F]'
    assert body(f"root ::= {src}") == cls(((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E), (0x80, 0xD7FF), (0xE000, 0x10FFFF)), src)


@pytest.mark.parametrize(
    ("src", "ranges"),
    [("[-a]", ((0x2D, 0x2D), (0x61, 0x61))), ("[a-]", ((0x2D, 0x2D), (0x61, 0x61))),
     (r"[a\-c]", ((0x2D, 0x2D), (0x61, 0x61), (0x63, 0x63))), (r"[\[\]\\]", ((0x5B, 0x5D),)),
     ("[a-cb-e]", ((0x61, 0x65),)), (r"[\uD7FF-\uE000]", ((0xD7FF, 0xD7FF), (0xE000, 0xE000))),
     ("[^\\x00-\\U0010FFFF]", ()), ("[\n\t]", ((9, 10),)), ("[^a]", ((0, 0x60), (0x62, 0xD7FF), (0xE000, 0x10FFFF))),
     (".", ANY)],  # `.` is every code point, newline included, as in llama.cpp
)
def test_class_ranges(src: str, ranges: tuple[tuple[int, int], ...]) -> None:
    assert body(f"root ::= {src}") == cls(ranges, src)


def test_literal_escapes() -> None:
    src = r'root ::= "\x41\u00e9\U0001F600\t\r\n\\\"\[\]\-\x411" "é#x"'
    assert body(src) == Seq((Lit('Aé\U0001F600\t\r\n\\"[]-A1'), Lit("é#x")))
    assert body('root ::= ""') == Empty()
    assert body('root ::= "" "a" ""') == Lit("a")


@pytest.mark.parametrize(
    ("post", "lo", "hi"),
    [("*", 0, None), ("+", 1, None), ("?", 0, 1), ("{3}", 3, 3), ("{2,}", 2, None), ("{2,5}", 2, 5),
     ("{,4}", 0, 4), ("{ 2 , 5 }", 2, 5), ("{0,10000}", 0, 10000)],
)
def test_repetition_bounds(post: str, lo: int, hi: int | None) -> None:
    assert body(f'root ::= "ab"{post}') == Rep(Lit("ab"), lo, hi)


def test_repetition_edge_cases() -> None:
    a = Lit("a")
    assert body('root ::= "a"{1}') == a
    assert body('root ::= "a"{0} "b"') == Lit("b")
    assert body('root ::= "a"*?') == Rep(Rep(a, 0, None), 0, 1)
    assert body('root ::= "a"{2}{3}') == Rep(Rep(a, 2, 2), 3, 3)
    assert body('root ::= x [0-9]+') == Seq((Ref("x"), Rep(cls(((0x30, 0x39),), "[0-9]"), 1, None)))


def test_nesting_and_collapsing() -> None:
    a, b, c = Lit("a"), Lit("b"), Lit("c")
    assert body('root ::= ("a")') == a
    assert body('root ::= ((("a" | "b")))') == Alt((a, b))
    assert body('root ::= ("a" | ("b" "c")+)? "a"') == Seq((Rep(Alt((a, Rep(Seq((b, c)), 1, None))), 0, 1), a))
    assert body('root ::= ("a" "b") "c"') == Seq((a, b, c))
    assert body('root ::= ("a" | "b") | "c"') == Alt((a, b, c))
    assert body('root ::= | "a" | ()') == Alt((Empty(), a, Empty()))


def test_multiline_rules_and_comments() -> None:
    text = (
        "# leading comment\n"
        "root ::= # after ::=\n"
        '  "a" |   # after |\n'
        "  ( b # inside a group\n"
        "\n"
        '    | "c" )  # trailing\n'
        "\n"
        "b-2 ::=\n"
        '  "x"*\n'
        "b ::= b-2\n"
    )
    g = parse_gbnf(text)
    assert g.rules["root"].body == Alt((Lit("a"), Ref("b"), Lit("c")))
    assert [(r.name, r.line) for r in g.rules.values()] == [("root", 2), ("b-2", 8), ("b", 10)]
    assert g.rules["b"].body == Ref("b-2")
    ref = g.rules["root"].body.items[1]
    assert (ref.line, ref.column) == (4, 5)
    crlf = parse_gbnf('root ::= "a" |\r\n  "b"\r\nx ::= "c"\r\n')
    assert crlf.rules["root"].body == Alt((Lit("a"), Lit("b"))) and crlf.rules["x"].line == 3


def test_start_duplicates_and_names() -> None:
    g = parse_gbnf('Main-1 ::= 0ab\n0ab ::= "z"', start="Main-1")
    assert g.start == "Main-1" and g.rules["Main-1"].body == Ref("0ab")
    with pytest.warns(GrammarWarning, match="defined more than once"):
        g = parse_gbnf('root ::= "a"\nx ::= "b"\nroot ::= "c"\n')
    assert list(g.rules) == ["root", "x"] and g.rules["root"].body == Lit("c") and g.rules["root"].line == 3
    assert len(g.notes) == 1 and "root" in g.notes[0]


# --- Oracle: regular single-rule grammars against Python's re

ALPHABET = ["a", "b", "-", '"', "\\", "]", "[", "^", "\n", "é", "\U0001F600"]
NAMED = {"\n": r"\n", "\\": r"\\", '"': r"\"", "[": r"\[", "]": r"\]", "-": r"\-"}


def gbnf_char(c: str, form: int, in_class: bool) -> str:
    cp = ord(c)
    forms = [f"\\U{cp:08X}"] + ([f"\\u{cp:04x}"] if cp < 0x10000 else []) + ([f"\\x{cp:02X}"] if cp < 256 else [])
    forms += [NAMED[c]] if c in NAMED else []
    forms += [] if c in ('\\"' if not in_class else "\\]-^") else [c]
    return forms[form % len(forms)]


def sorted_pair(pair: tuple[Any, Any]) -> tuple[Any, Any]:
    return (pair[0], pair[1]) if ord(pair[0][0]) <= ord(pair[1][0]) else (pair[1], pair[0])


chars = st.tuples(st.sampled_from(ALPHABET), st.integers(0, 4))
leaf = st.one_of(
    st.tuples(st.just("lit"), st.lists(chars, max_size=3)),
    st.tuples(st.just("class"), st.booleans(), st.lists(st.tuples(chars, chars).map(sorted_pair), min_size=1, max_size=3)),
    st.just(("dot",)),
)
post = st.sampled_from(["*", "+", "?", "{2}", "{0,}", "{1,2}", "{,2}", "{ 0 , 1 }"])
tree = st.recursive(
    leaf,
    lambda kids: st.one_of(
        st.tuples(st.just("seq"), st.lists(kids, min_size=1, max_size=3)),
        st.tuples(st.just("alt"), st.lists(kids, min_size=2, max_size=3)),
        st.tuples(st.just("rep"), kids, post),
    ),
    max_leaves=6,
)


def to_gbnf(node: Any) -> str:
    kind = node[0]
    if kind == "lit":
        return '"' + "".join(gbnf_char(c, f, False) for c, f in node[1]) + '"'
    if kind == "class":
        items = [gbnf_char(*lo, True) + ("" if lo[0] == hi[0] else "-" + gbnf_char(*hi, True)) for lo, hi in node[2]]
        return "[" + ("^" if node[1] else "") + "".join(items) + "]"
    if kind == "seq":
        return "(" + " ".join(map(to_gbnf, node[1])) + ")"
    if kind == "alt":
        return "(" + " |\n  ".join(map(to_gbnf, node[1])) + " # comment\n)"
    return "." if kind == "dot" else to_gbnf(node[1]) + node[2]


def to_python(node: Any) -> str:
    kind = node[0]
    if kind == "lit":
        return "(?:" + re.escape("".join(c for c, _ in node[1])) + ")"
    if kind == "class":
        pairs = "".join(f"\\U{ord(lo[0]):08x}-\\U{ord(hi[0]):08x}" for lo, hi in node[2])
        return "[" + ("^" if node[1] else "") + pairs + "]"
    if kind == "dot":
        return "(?s:.)"
    if kind == "seq":
        return "(?:" + "".join(map(to_python, node[1])) + ")"
    if kind == "alt":
        return "(?:" + "|".join(map(to_python, node[1])) + ")"
    return "(?:" + to_python(node[1]) + ")" + node[2].replace(" ", "")


def ir_to_python(e: Expr) -> str:
    if isinstance(e, Empty):
        return ""
    if isinstance(e, Lit):
        return "(?:" + re.escape(e.text) + ")"
    if isinstance(e, Rx):
        assert isinstance(e.node, CharClass)
        inner = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in e.node.ranges)
        return "[" + inner + "]" if inner else "(?!)"
    if isinstance(e, Seq):
        return "(?:" + "".join(map(ir_to_python, e.items)) + ")"
    if isinstance(e, Alt):
        return "(?:" + "|".join(map(ir_to_python, e.items)) + ")"
    assert isinstance(e, Rep), e
    return "(?:" + ir_to_python(e.item) + "){" + f"{e.min},{'' if e.max is None else e.max}" + "}"


COUNTS = {"*": (0, 2), "+": (1, 3), "?": (0, 1), "{2}": (2, 2), "{0,}": (0, 2), "{1,2}": (1, 2), "{,2}": (0, 2), "{ 0 , 1 }": (0, 1)}


def sample(node: Any, rng: random.Random) -> str | None:
    """A random string of the construct's language (None when the drawn class has no member here)."""
    kind = node[0]
    if kind == "lit":
        return "".join(c for c, _ in node[1])
    if kind in ("class", "dot"):
        members = [c for c in ALPHABET + ["c"] if re.fullmatch(to_python(node), c)]
        return rng.choice(members) if members else None
    if kind == "rep":
        parts = [sample(node[1], rng) for _ in range(rng.randint(*COUNTS[node[2]]))]
    else:
        parts = [sample(k, rng) for k in (node[1] if kind == "seq" else [rng.choice(node[1])])]
    return None if None in parts else "".join(p for p in parts if p is not None)


@settings(max_examples=300, deadline=None)
@given(tree, st.lists(st.text(alphabet=ALPHABET + ["c"], max_size=5), max_size=8), st.integers(0, 2**32))
def test_oracle_against_python_re(node: Any, strings: list[str], seed: int) -> None:
    text = "root ::= " + to_gbnf(node) + "\n"
    got, want = ir_to_python(body(text)), to_python(node)
    rng = random.Random(seed)
    witnesses = [w for w in (sample(node, rng) for _ in range(3)) if w is not None]
    for w in witnesses:
        assert re.fullmatch(want, w), (text, want, w)
    for s in strings + witnesses:
        assert bool(re.fullmatch(got, s)) == bool(re.fullmatch(want, s)), (text, got, want, s)


# --- Errors


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ('root ::= "abc', 1, 10, "unterminated literal"),
        ('root ::= "ab\\', 1, 10, "unterminated literal"),
        ("root ::= [abc", 1, 10, "unterminated character class"),
        ('root ::= ("a" "b"', 1, 10, "unterminated group"),
        ('root ::= ("a"\nfoo ::= "b"', 2, 5, "expected ')' to close the group opened at line 1, column 10"),
        ('root ::= "a"\nx ::= "\\q"', 2, 8, "unknown escape '\\q'"),
        ('root ::= "\\x4"', 1, 11, "expected 2 hex digits after '\\x'"),
        ('root ::= "\\u12g4"', 1, 11, "expected 4 hex digits after '\\u'"),
        ("root ::= [\\U00110000]", 1, 11, "beyond U+10FFFF"),
        ('root ::= "\\uD800"', 1, 11, "surrogate"),
        ("root ::= [z-a]", 1, 11, "out of order"),
        ("root ::= []", 1, 10, "empty character class '[]'"),
        ("root ::= [^]", 1, 10, "empty character class '[^]'"),
        ('root ::= "a"{3,2}', 1, 13, "maximum is less than the minimum"),
        ('root ::= "a"{20000}', 1, 14, "repetition count 20000 exceeds the limit of 10000"),
        ('root ::= "a"{1,' + "9" * 40 + "}", 1, 16, "exceeds the limit of 10000"),
        ('root ::= "a"{x}', 1, 14, "expected a number"),
        ('root ::= "a"{,}', 1, 15, "expected a number"),
        ('root ::= "a"{2', 1, 13, "unterminated repetition"),
        ('root ::= "a"{2;}', 1, 15, "expected ',' or '}'"),
        ('root ::= *"a"', 1, 10, "'*' has nothing before it"),
        ('root ::= "a" | +', 1, 16, "'+' has nothing before it"),
        ('root "a"', 1, 6, "expected '::=' after rule name 'root'"),
        ('root\n::= "a"', 1, 5, "expected '::='"),
        ('::= "a"', 1, 1, "empty rule name"),
        ('root ::= "a"\n| "b"', 2, 1, "expected a rule name"),
        ('root ::= "a" )', 1, 14, "unmatched ')'"),
        ('root ::= "a" ;', 1, 14, "unexpected ';'"),
        ('root ::= a |\nb ::= "x"', 2, 3, "unexpected '::='"),
        ("root ::= <[1234]>", 1, 10, "token references such as '<[1234]>' are not supported"),
        ('root ::= "a" <|eot_id|>', 1, 14, "'<|eot_id|>'"),
        ("root ::= (!<[7]>)", 1, 11, "'!<[7]>'"),
    ],
)
def test_errors_have_positions(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(GrammarError) as info:
        parse_gbnf(text)
    err = info.value
    assert fragment in err.reason
    assert (err.line, err.column) == (line, column)
    assert err.source_line == text.split("\n")[line - 1]
    assert str(err).endswith("\n  " + " " * (column - 1) + "^")


def test_error_names_the_rule() -> None:
    with pytest.raises(GrammarError) as info:
        parse_gbnf('root ::= x\nx ::= "\\z"')
    assert info.value.rule == "x"


def test_missing_start_rule() -> None:
    for text in ['x ::= "a"', "", "# only a comment\n"]:
        with pytest.raises(GrammarError, match="the grammar has no 'root' rule") as info:
            parse_gbnf(text)
        assert info.value.line is None and info.value.rule == "root"
    with pytest.raises(GrammarError, match="no 'root' rule") as info:
        parse_gbnf('x ::= "a"\ny ::= x root')
    assert (info.value.line, info.value.column) == (2, 9)
    with pytest.raises(GrammarError, match="no 'main' rule"):
        parse_gbnf('root ::= "a"', start="main")
