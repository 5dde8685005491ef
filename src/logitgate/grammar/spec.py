"""``Grammar``: what the output must look like, independent of any tokenizer.

A ``Grammar`` is cheap, immutable and hashable; its source is checked when it is created, so a bad
regex fails here with its offset. ``logitgate.compile(grammar, tokenizer)`` turns it into a
``CompiledGrammar`` for one vocabulary.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import RegexError
from ..regex.ast import Node
from .ir import GrammarIR

__all__ = ["Grammar"]

_ALLOWED_RE_FLAGS = re.IGNORECASE | re.DOTALL | re.VERBOSE | re.ASCII | re.MULTILINE | re.UNICODE


@dataclass(frozen=True)
class Grammar:
    """A constraint on the generated text. Build one with a ``from_*`` constructor."""

    kind: str
    source: str
    flags: int = 0
    options: tuple = ()
    _tree: Node | None = field(default=None, compare=False, repr=False, hash=False)
    _ir: GrammarIR | None = field(default=None, compare=False, repr=False, hash=False)

    @classmethod
    def from_regex(cls, pattern: str, flags: int | re.RegexFlag = 0) -> "Grammar":
        """The output must fully match ``pattern`` (Python ``re`` syntax and semantics, as
        ``re.fullmatch(pattern, text, flags)``; see ``logitgate.regex.parser`` for what is supported).

        Accepts a compiled ``re.Pattern`` too (its pattern and flags are used). Raises
        ``RegexError`` with the offset of the first unsupported or malformed construct.
        """
        if isinstance(pattern, re.Pattern):
            if isinstance(pattern.pattern, bytes):
                raise RegexError("bytes patterns are not supported; pass a str pattern")
            flags = int(flags) | (pattern.flags & _ALLOWED_RE_FLAGS)
            pattern = pattern.pattern
        if not isinstance(pattern, str):
            raise RegexError(f"a regex must be a str, not {type(pattern).__name__}")
        from ..regex.parser import parse

        tree = parse(pattern, int(flags))
        return cls("regex", pattern, int(flags), _tree=tree)

    @classmethod
    def from_lark(cls, text: str, *, start: str = "start", import_paths: tuple[str, ...] = ()) -> "Grammar":
        """A grammar in Lark syntax (read by Lark's own loader: EBNF, templates, ``%ignore``,
        ``%import common.*``, terminal priorities). Lexing is contextual and greedy: at each
        position only terminals the parser can accept (and ignored ones) compete; the longest match
        wins, then the higher priority, then literals over regexes. Needs ``pip install 'logitgate[lark]'``.
        Raises ``GrammarError`` with line and column."""
        from .lark_frontend import parse_lark

        paths = tuple(str(p) for p in import_paths)
        ir = parse_lark(text, start=start, import_paths=paths)
        return cls("lark", text, 0, (("start", start), ("import_paths", paths)), _ir=ir)

    @classmethod
    def from_gbnf(cls, text: str, *, start: str = "root") -> "Grammar":
        """A llama.cpp GBNF grammar. The language is exactly the grammar's, character by character
        (no lexer decisions); regular parts are merged into lexemes only where that cannot change
        it. Raises ``GrammarError`` with line and column."""
        from .gbnf import parse_gbnf

        ir = parse_gbnf(text, start=start)
        return cls("gbnf", text, 0, (("start", start),), _ir=ir)

    @classmethod
    def from_yacc(cls, text: str) -> "Grammar":
        """A grammar in the yacc-like format with inline lexemes (``"keyword"``, ``"/regex/"``, the
        ``SKIP`` rule, ``%start``) of AICI. One lexer for all terminals (longest match, keywords
        before regexes), as in C. Raises ``GrammarError`` with line and column."""
        from .yacc import parse_yacc

        return cls("yacc", text, 0, (), _ir=parse_yacc(text))

    @property
    def ir(self) -> GrammarIR:
        """The grammar's intermediate representation (context-free grammars only)."""
        if self._ir is None:
            raise ValueError(f"a {self.kind} grammar has no grammar IR")
        return self._ir

    @property
    def cache_key(self) -> tuple:
        """Identity of the constraint for the compile cache."""
        return (self.kind, self.source, self.flags, self.options)

    @property
    def tree(self) -> Node:
        """The parsed regex syntax tree (regex grammars only)."""
        if self._tree is None:
            raise ValueError(f"a {self.kind} grammar has no regex tree")
        return self._tree
