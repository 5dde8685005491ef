"""The Lark front end: real grammars load or fail with a GrammarError, terminals agree with Lark."""
from __future__ import annotations

from tests.conftest import SHARED_DATA

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("lark")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata import regex_dfa
from logitgate.errors import GrammarError
from logitgate.grammar.ir import Alt, Empty, GrammarIR, Ref, Seq
from logitgate.grammar.lark_frontend import _has_lazy_quantifier, parse_lark

DATA = SHARED_DATA
CORPUS = sorted(
    [*(DATA / "lark-grammars").glob("**/*.lark"), *(DATA / "syncode-grammars").glob("*.lark")]
)

# Grammars whose start rule is not called "start".
STARTS = {
    "lark-grammars/lark/grammars/python.lark": "file_input",
    "lark-grammars/examples/advanced/python2.lark": "file_input",
}

# Every grammar of the corpus that cannot be used, and a fragment of the reason.
EXPECTED_FAILURES = {
    # terminal libraries meant for %import: no rules at all
    "lark-grammars/lark/grammars/common.lark": "start rule 'start' is not defined",
    "lark-grammars/lark/grammars/unicode.lark": "start rule 'start' is not defined",
    # indentation comes from lark's Indenter postlexer: %declare _INDENT _DEDENT
    "lark-grammars/lark/grammars/python.lark": "terminals _INDENT, _DEDENT are declared",
    "lark-grammars/examples/advanced/python2.lark": "terminals _INDENT, _DEDENT are declared",
    "syncode-grammars/python.lark": "terminals _INDENT, _DEDENT are declared",
    # OP: /[+*]|[?](?![a-z])/ (a lookahead)
    "lark-grammars/lark/grammars/lark.lark": "terminal OP: negative lookahead",
    "lark-grammars/examples/advanced/template_lark.lark": "terminal OP: negative lookahead",
    # MULTILINE_COMMENT: /\/\*(\*(?!\/)|[^*])*\*\// (a lookahead)
    "lark-grammars/examples/grammars/verilog.lark": "terminal MULTILINE_COMMENT: negative lookahead",
}


def _rel(path: Path) -> str:
    return path.relative_to(DATA).as_posix()


def _load(rel: str) -> GrammarIR:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"{rel} is not in the shared data")
    # import_paths: the grammar's own folder, so composition/storage.lark finds csv and json
    return parse_lark(path.read_text(), start=STARTS.get(rel, "start"), import_paths=[path.parent])


def _check_ir(ir: GrammarIR) -> None:
    assert ir.kind == "lark" and ir.lex_mode == "contextual" and ir.start in ir.rules
    assert not set(ir.rules) & set(ir.terminals)
    assert set(ir.ignore) <= set(ir.terminals)
    for name, rule in ir.rules.items():
        assert rule.name == name and isinstance(rule.body, Alt) and rule.body.items
        for alt in rule.body.items:
            assert isinstance(alt, (Seq, Empty))
            for ref in alt.items if isinstance(alt, Seq) else ():
                assert isinstance(ref, Ref) and (ref.name in ir.rules or ref.name in ir.terminals)


@pytest.mark.skipif(not CORPUS, reason="no Lark grammars in the shared data")
@pytest.mark.parametrize("path", CORPUS, ids=_rel)
def test_corpus_grammar_loads_or_fails_as_expected(path: Path) -> None:
    rel = _rel(path)
    try:
        ir = _load(rel)
    except GrammarError as e:  # anything else escapes and fails the test
        print(f"{rel}: {e.reason}")
        assert rel in EXPECTED_FAILURES, f"unexpected failure: {e}"
        assert EXPECTED_FAILURES[rel] in e.reason
        return
    assert rel not in EXPECTED_FAILURES, f"{rel} loads but was expected to fail"
    _check_ir(ir)


@pytest.mark.skipif(not CORPUS, reason="no Lark grammars in the shared data")
def test_expected_failures_are_in_the_corpus() -> None:
    assert set(EXPECTED_FAILURES) <= {_rel(p) for p in CORPUS}


# --- terminals compiled by logitgate accept exactly what Lark's regexes accept ---------------

SEMANTIC = [
    "syncode-grammars/json.lark",
    "lark-grammars/examples/standalone/json.lark",
    "lark-grammars/examples/composition/json.lark",
    "syncode-grammars/sql.lark",  # case-insensitive strings and (?i:...) groups
    "syncode-grammars/c.lark",  # a lazy comment regex
]


def _lark_reference(rel: str) -> dict[str, tuple[str, bool]]:
    """name -> (Lark's regex for the terminal, whether a token must be Lark's *first* match)."""
    from lark.load_grammar import load_grammar

    path = DATA / rel
    grammar, _ = load_grammar(path.read_text(), str(path), [str(path.parent)], False)
    terminals, _, _ = grammar.compile([STARTS.get(rel, "start")], set())
    return {
        # the only lookaround patterns that load: Lark's ESCAPED_STRING, replaced by its tokens
        t.name: (t.pattern.to_regexp(), "(?<!" in t.pattern.value)
        for t in terminals
    }


def _accepted_by_lark(regex: str, first_match: bool, s: str) -> bool:
    if first_match:  # Lark's lexer calls re.match: a token is what the first match consumes
        m = re.match(regex, s)
        return m is not None and m.end() == len(s)
    return re.fullmatch(regex, s) is not None


@pytest.mark.parametrize("rel", SEMANTIC)
def test_terminals_agree_with_lark(rel: str) -> None:
    ir = _load(rel)
    ref = _lark_reference(rel)
    assert set(ref) == set(ir.terminals)
    dfas = {name: regex_dfa(t.node) for name, t in ir.terminals.items()}
    names = sorted(ref)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(names))
        regex, first_match = ref[name]
        alphabet = sorted(set(regex) | set("aZ09 \n\"\\'-+.eE"))
        s = data.draw(st.from_regex(regex, fullmatch=True) | st.text(st.sampled_from(alphabet), max_size=8))
        s += data.draw(st.sampled_from(["", "", *alphabet]))  # often just past a match
        want = _accepted_by_lark(regex, first_match, s)
        assert dfas[name].matches(s.encode("utf-8")) == want, (name, regex, s)
        term = ir.terminals[name]
        if term.literal is not None:
            assert want == (s == term.literal)

    check()


def test_escaped_string_is_lookaround_free_and_exact() -> None:
    ir = parse_lark('start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n')
    dfa = regex_dfa(ir.terminals["ESCAPED_STRING"].node)
    lark_rx = r'".*?(?<!\\)(\\\\)*?"'
    for s in ['""', '"a"', r'"\""', r'"\\"', r'"\\\"a"', '"a"b"', r'"\"', '"a\nb"', r'"\\\\"', 'x']:
        assert dfa.matches(s.encode()) == _accepted_by_lark(lark_rx, True, s), s
    assert any("ESCAPED_STRING" in n for n in ir.notes)
    assert not ir.terminals["ESCAPED_STRING"].lazy


# --- mapping --------------------------------------------------------------------------------


def test_rules_terminals_and_ignore_map_one_to_one() -> None:
    text = (
        'start: A x? | "c"i\n'
        "x.2: B\n"
        "A: \"a\"\n"
        "B.3: /b+/\n"
        "%import common.WS\n"
        "%ignore WS\n"
    )
    ir = parse_lark(text)
    assert ir.rules["start"].body == Alt((Seq((Ref("A"), Ref("x"))), Seq((Ref("A"),)), Seq((Ref("C"),))))
    assert ir.rules["x"].body == Alt((Seq((Ref("B"),)),))
    assert ir.rules["x"].line == 2 and ir.rules["start"].line == 1
    a, b, c = ir.terminals["A"], ir.terminals["B"], ir.terminals["C"]
    assert (a.literal, a.priority, a.line) == ("a", 0, 3)
    assert (b.literal, b.priority, b.line) == (None, 3, 4)
    assert c.literal is None and regex_dfa(c.node).matches(b"C") and regex_dfa(c.node).matches(b"c")
    assert regex_dfa(b.node).matches(b"bbb") and not regex_dfa(b.node).matches(b"")
    assert ir.ignore == ("WS",) and ir.source == text and ir.start == "start"
    assert any("x.2" in n for n in ir.notes)


def test_empty_expansion_templates_and_start() -> None:
    ir = parse_lark('top: _pair{"a", "b"} "c"?\n_pair{x, y}: x y\n', start="top")
    assert Empty() not in ir.rules["top"].body.items  # "c"? is expanded in top itself
    assert ir.rules["top"].body.items[0] == Seq((Ref("_pair{A,B}"), Ref("C")))
    assert ir.rules["_pair{A,B}"].body == Alt((Seq((Ref("A"), Ref("B"))),))
    ir = parse_lark('start: "a" rest\nrest: "b" rest |\n')
    assert Empty() in ir.rules["rest"].body.items
    with pytest.raises(GrammarError, match="start rule 'main' is not defined"):
        parse_lark('start: "a"\n', start="main")


def test_regex_flags_and_lazy() -> None:
    ir = parse_lark('start: A B C\nA: /a.b/is\nB: /x\n  y # comment\n  /x\nC: "/*" /(.|\\n)*?/ "*/"\n')
    a = regex_dfa(ir.terminals["A"].node)
    assert a.matches(b"A\nB") and not a.matches(b"a\n\nb")
    assert regex_dfa(ir.terminals["B"].node).matches(b"xy")
    assert ir.terminals["C"].lazy and not ir.terminals["A"].lazy
    assert any("lazy" in n and "C" in n for n in ir.notes)


@pytest.mark.parametrize(
    ("pattern", "lazy"),
    [("a*?", True), ("a{2,3}?", True), ("a??", True), ("(ab)+?c", True), ("a*", False),
     (r"\*?", False), ("[*?]", False), ("(?:a)?", False), ("(?#x*?)a", False), ("[]*?]", False),
     (r"\(?x", False), ("a{,}?", False)],
)
def test_lazy_quantifier_detection(pattern: str, lazy: bool) -> None:
    assert _has_lazy_quantifier(pattern, verbose=False) is lazy


# --- errors ---------------------------------------------------------------------------------


def test_lark_syntax_error_has_line_and_column() -> None:
    with pytest.raises(GrammarError) as info:
        parse_lark('start: "a"\nfoo: ::: x\n')
    assert (info.value.line, info.value.column) == (2, 6)
    assert info.value.source_line == "foo: ::: x"
    with pytest.raises(GrammarError) as info:
        parse_lark('start: "a"\n  | )\n')
    assert (info.value.line, info.value.column) == (2, 5) and "')'" in info.value.reason


def test_undefined_rule_is_named() -> None:
    with pytest.raises(GrammarError, match="'foo' used but not defined") as info:
        parse_lark('start: "a"\n  | "b" foo\n')
    assert info.value.rule == "foo" and (info.value.line, info.value.column) == (2, 9)


def test_declared_terminal_is_named() -> None:
    with pytest.raises(GrammarError, match="declared without a pattern") as info:
        parse_lark('start: A _INDENT\nA: "a"\n%declare _INDENT\n')
    assert info.value.rule == "_INDENT" and info.value.line == 3 and "_INDENT" in info.value.reason


def test_unsupported_regex_names_terminal_and_line() -> None:
    with pytest.raises(GrammarError, match=r"terminal NUM: .*lookahead") as info:
        parse_lark('start: NUM\n\nNUM: /[0-9]+(?![a-z])/\n')
    assert info.value.rule == "NUM" and info.value.line == 3


@pytest.mark.parametrize(
    "text",
    [
        'start: "a" "b\n',  # unterminated string
        'start: A\nA: ""\n',  # empty terminal
        "start: a\n%declare a\n",  # a declared rule (Lark's loader crashes on it)
        "%import nothere.X\nstart: X\n",  # missing file
        'start: "a"\nstart: "b"\n',  # defined twice
        "start: A\nA: /a/l\n",  # LOCALE flag
        'start: "\\x4"\n',  # bad escape
    ],
)
def test_bad_grammars_raise_grammar_error_only(text: str) -> None:
    with pytest.raises(GrammarError):
        parse_lark(text)


def test_missing_import_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "sub.lark").write_text('X: "x"\n')
    assert "X" in parse_lark("%import .sub.X\nstart: X\n", import_paths=[tmp_path]).terminals
    with pytest.raises(GrammarError, match="nothere.lark") as info:
        parse_lark("start: X\n%import .nothere.X\n", import_paths=[tmp_path])
    assert info.value.line == 2


def test_missing_lark_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lark", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'logitgate[lark]'")):
        parse_lark('start: "a"\n')
