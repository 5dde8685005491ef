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
