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

__all__ = ["Grammar"]

_ALLOWED_RE_FLAGS = re.IGNORECASE | re.DOTALL | re.VERBOSE | re.ASCII | re.MULTILINE | re.UNICODE


@dataclass(frozen=True)
class Grammar:
    """A constraint on the generated text. Build one with a ``from_*`` constructor."""

    kind: str
    source: str
    flags: int = 0
    _tree: Node | None = field(default=None, compare=False, repr=False, hash=False)

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
        return cls("regex", pattern, int(flags), tree)

    @property
    def cache_key(self) -> tuple[str, str, int]:
        """Identity of the constraint for the compile cache."""
        return (self.kind, self.source, self.flags)

    @property
    def tree(self) -> Node:
        """The parsed regex syntax tree (regex grammars only)."""
        if self._tree is None:
            raise ValueError(f"a {self.kind} grammar has no regex tree")
        return self._tree
