"""The yacc front end (AICI's yacc-like format with inline lexemes): c.y, small grammars, errors."""
from __future__ import annotations

from tests.conftest import SHARED_DATA

import re

import pytest

from logitgate.automata import regex_dfa
from logitgate.errors import GrammarError
from logitgate.grammar.ir import Alt, Empty, Lit, Ref, Rx, Seq
from logitgate.grammar.yacc import parse_yacc

C_Y = SHARED_DATA / "aici" / "grammars" / "c.y"


@pytest.fixture(scope="module")
def c_text() -> str:
    if not C_Y.exists():
        pytest.skip(f"{C_Y} is not available")
    return C_Y.read_text()


@pytest.fixture(scope="module")
def c_ir(c_text):
    return parse_yacc(c_text)


def single_rx(ir, rule: str, alt: int | None = None) -> Rx:
    body = ir.rules[rule].body
    if alt is not None:
        body = body.items[alt]
    assert isinstance(body, Rx), body
    return body


def accepts(node, *samples: bytes) -> list[bool]:
    dfa = regex_dfa(node)
    return [dfa.matches(s) for s in samples]


# -- c.y ---------------------------------------------------------------------------------------


def test_c_grammar_shape(c_text, c_ir):
    # rule names start in column 0, with ':' after them (possibly on the next line)
    names = set(re.findall(r"^([A-Za-z_]\w*)\s*:", c_text, re.M))
    assert "SKIP" in names and "translation_unit" in names
    assert set(c_ir.rules) == names - {"SKIP"}
    assert len(c_ir.rules) == 69
    assert c_ir.start == "translation_unit"
    assert (c_ir.kind, c_ir.lex_mode, c_ir.source) == ("yacc", "global", c_text)
    assert c_ir.rules["IDENTIFIER"].line == 13
    assert c_ir.rules["translation_unit"].line == c_text.splitlines().index("translation_unit") + 1


def test_c_skip_terminals(c_ir):
    assert len(c_ir.terminals) == 4
    assert c_ir.ignore == tuple(c_ir.terminals)
    block, line, pre, space = c_ir.terminals.values()
    assert [t.line for t in (block, line, pre, space)] == [7, 8, 9, 10]
    assert all(t.literal is None for t in (block, line, pre, space))
    assert accepts(block.node, b"/* a */", b"/**/", b"/* a", b"/* a */ */") == [True, True, False, False]
    assert accepts(line.node, b"// x", b"// x\n", b"/ x") == [True, False, False]
    # the pre-processor regex keeps its backslash-newline continuation (verbatim '\\\n')
    assert accepts(pre.node, b"\n#include <a.h>", b"\n#define X \\\n 1", b"\n#a\nb") == [True, True, False]
    assert accepts(space.node, b"", b"\n  \t", b"\n\n") == [True, True, False]


def test_c_lexemes(c_ir):
    ident = single_rx(c_ir, "IDENTIFIER")
    assert ident.source == '"/[a-zA-Z_][0-9a-zA-Z_]*/"'
    assert accepts(ident.node, b"foo_1", b"_", b"1foo", b"a-b", b"") == [True, True, False, False, False]
    hex_const = single_rx(c_ir, "CONSTANT", 0)  # lazy [uUlL]*? reads as [uUlL]*
    assert accepts(hex_const.node, b"0x1fUL", b"0X0", b"0x", b"0x1g") == [True, True, False, False]
    char_const = single_rx(c_ir, "CONSTANT", 3)  # '(\\.|[^\\'])+' with verbatim backslashes
    assert accepts(char_const.node, b"'a'", b"L'\\n'", b"''", b"'\\'") == [True, True, False, False]
    string = single_rx(c_ir, "STRING_LITERAL")  # single-quoted, contains '"'
    assert string.source.startswith("'/") and string.source.endswith("/'")
    assert accepts(string.node, b'"hi"', b'L"a\\"b"', b'""', b'"a"b"', b'"x') == [True, True, True, False, False]
    unary = c_ir.rules["unary_expression"].body
    assert isinstance(unary, Alt)
    assert unary.items[4] == Seq((Lit("sizeof"), Ref("unary_expression")))
    assert c_ir.rules["unary_operator"].body == Alt(tuple(Lit(c) for c in "&*+-~!"))
    # "/" and "/=" are keywords, not regexes (a regex needs more than two characters)
    assert Lit("/") in [item.items[1] for item in c_ir.rules["multiplicative_expression"].body.items[1:]]
    assert Lit("/=") in c_ir.rules["assignment_operator"].body.items


def test_c_ref_positions(c_text, c_ir):
    lines = c_text.splitlines()
    body = c_ir.rules["translation_unit"].body
    ref = body.items[1].items[1]
    assert ref == Ref("external_declaration")
    assert lines[ref.line - 1][ref.column - 1 :].startswith("external_declaration")
    assert lines[ref.line - 1].strip() == "| translation_unit external_declaration"


# -- small grammars ----------------------------------------------------------------------------

SMALL = """\
/* leading comment */
%token NUM
%left '+' '-'
%expect 1
%%
SKIP : "/[ \\t]+/" | '#' ;   // two skipped lexemes
expr : expr '+' term %prec '+'
     | term
     ;
term : 'x' | ;
term : %empty | "/" | "//" ;
%%
int main() { return "unterminated; }
"""


def test_small_grammar():
    ir = parse_yacc(SMALL)
    assert ir.start == "expr"  # the first rule that is not SKIP
    assert list(ir.rules) == ["expr", "term"]
    assert ir.rules["expr"].body == Alt((Seq((Ref("expr"), Lit("+"), Ref("term"))), Ref("term")))
    # the second definition of term adds alternatives; '| ;' and %empty are empty alternatives
    assert ir.rules["term"].body == Alt((Lit("x"), Empty(), Empty(), Lit("/"), Lit("//")))
    assert ir.rules["term"].line == 10
    assert list(ir.terminals) == ["SKIP_1", "SKIP_2"] and ir.ignore == ("SKIP_1", "SKIP_2")
    space, hash_ = ir.terminals.values()
    assert space.literal is None and accepts(space.node, b" \t", b"") == [True, False]
    assert hash_.literal == "#" and accepts(hash_.node, b"#", b"##") == [True, False]
    joined = "\n".join(ir.notes)
    assert len(ir.notes) == 4 and all(n.startswith("ignored: ") for n in ir.notes)
    for shown in ("%token NUM", "%left '+' '-'", "%expect 1", "%prec '+'"):
        assert shown in joined


def test_start_declaration_and_skip_name_clash():
    ir = parse_yacc("%start b\n%%\na : b ;\nb : 'y' a | ;\nSKIP_1 : 'z' ;\nSKIP : ' ' ;\n")
    assert ir.start == "b"
    assert set(ir.rules) == {"a", "b", "SKIP_1"}
    assert set(ir.terminals).isdisjoint(ir.rules) and len(ir.terminals) == 1
    assert ir.rules["b"].body == Alt((Seq((Lit("y"), Ref("a"))), Empty()))


# -- errors ------------------------------------------------------------------------------------

ERRORS = [
    # (grammar, line, column, rule, words in the message)
    ('%%\na : "x ;\n', 2, 5, "a", "unterminated string"),
    ("%%\na : 'x\" ;\n", 2, 5, "a", "unterminated string"),
    ('%%\na : "x"\nb : "y" ;\n', 2, 8, "a", "missing ';'"),
    ('%%\na : "x" b\n', 2, 10, "a", "missing ';'"),
    ('%%\na "x" ;\n', 2, 3, "a", "expected ':'"),
    ('%%\n\n  a : b "/ab[c/" ;\n', 3, 13, "a", "invalid regex in rule 'a'"),
    ('%%\na : "/(x/" ;\n', 2, 7, "a", "invalid regex"),
    ('%%\na : "/[[:alpha:]]/" ;\n', 2, 8, "a", "Rust"),
    ('%%\na : "/\\p{L}/" ;\n', 2, 7, "a", "invalid regex"),
    ('%%\na : x ;\nSKIP : "/ /" | a ;\n', 3, 16, "SKIP", "single inline lexeme"),
    ("%%\nSKIP : ' ' ' ' ;\na : 'x' ;\n", 2, 12, "SKIP", "single inline lexeme"),
    ("%%\nSKIP : ' ' | ;\na : 'x' ;\n", 2, 14, "SKIP", "single inline lexeme"),
    ("%%\nSKIP : ' ' ;\na : SKIP 'x' ;\n", 3, 5, "a", "cannot be referenced"),
    ("%%\na : 'x' { f(); } ;\n", 2, 9, "a", "semantic actions"),
    ("%%\na : 'x' %empty ;\n", 2, 9, "a", "%empty"),
    ("%union { int x; }\n%%\na : 'x' ;\n", 1, 1, None, "%union"),
    ("%{\n#include <x>\n%}\n%%\na : 'x' ;\n", 1, 1, None, "%{"),
    ("a : 'x' ;\n", 1, 1, None, "expected a declaration"),
    ("%start a\n", 2, 1, None, "missing '%%'"),
    ("%start b\n%%\na : 'x' ;\n", 1, 8, None, "start rule 'b'"),
    ("%%\na : '' ;\n", 2, 5, "a", "empty lexeme"),
    ("%%\n/* open\na : 'x' ;\n", 2, 1, None, "unterminated comment"),
    ("%%\nSKIP : ' ' ;\n", 3, 1, None, "no rules"),
]


@pytest.mark.parametrize(("text", "line", "column", "rule", "words"), ERRORS)
def test_errors(text, line, column, rule, words):
    with pytest.raises(GrammarError) as info:
        parse_yacc(text)
    err = info.value
    assert (err.line, err.column, err.rule) == (line, column, rule)
    assert words in err.reason
    assert err.source_line == text.split("\n")[line - 1]
    assert "^" in str(err)
