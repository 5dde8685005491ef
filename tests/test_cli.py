"""The demo command: every text it generates must fully match its regex, or parse as a Python
expression for the arithmetic grammar (exit code 0)."""
from __future__ import annotations

from logitgate.cli import main

from .conftest import mistral_file


def test_demo_generates_valid_text_on_both_tokenizers(capsys):
    mistral_file("tokenizer.model.v1")  # skips when mistral-common is absent
    for name in ("spm", "tekken"):
        assert main(["demo", "--tokenizer", name, "--seed", "3", "--max-steps", "200"]) == 0
        out = capsys.readouterr().out
        assert out.count("re.fullmatch: ok") == 4, out
        assert out.count("ast.parse: ok") == 1, out
        assert "FAILED" not in out


def test_check_reports_unsupported_parts_with_their_pointer(capsys):
    schema = '{"type":"object","properties":{"a":{"type":"string","pattern":"^(a|(?=x)b)+$"}}}'
    assert main(["check", "--schema", schema]) == 1
    out = capsys.readouterr().out
    assert "/properties/a/pattern" in out and "lookahead" in out and "with relaxations" in out
    assert main(["check", "--schema", '{"type":"object","properties":{"a":{"type":"integer"}}}']) == 0
    assert "compiles exactly" in capsys.readouterr().out


def test_check_names_the_position_of_errors(capsys, tmp_path):
    assert main(["check", "--regex", "ab(c"]) == 2
    assert "offset 2" in capsys.readouterr().out
    grammar = tmp_path / "g.lark"
    grammar.write_text('start: a\na: "x" b\n')
    assert main(["check", "--lark", str(grammar)]) == 2
    out = capsys.readouterr().out
    assert "line 2" in out and "'b'" in out
    assert main(["check", "--schema", '{"type": "object", "minProperties": "x"}']) == 2
    assert "/minProperties" in capsys.readouterr().out


def test_check_compiles_for_a_tokenizer(capsys):
    mistral_file("tokenizer.model.v1")
    assert main(["check", "--gbnf", 'root ::= [a-z]+ "@" [a-z]+ ".com"', "--tokenizer", "spm"]) == 0
    out = capsys.readouterr().out
    assert "compiled for" in out and "32000 tokens" in out


def test_one_constraint_at_a_time():
    import pytest

    with pytest.raises(SystemExit, match="give one constraint"):
        main(["check", "--regex", "a", "--json"])


def test_bench_outside_a_checkout_says_so(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="source checkout"):
        main(["bench", "regex", "--bench-dir", str(tmp_path)])
