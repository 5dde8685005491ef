"""Exception hierarchy: one root, positions in every input error."""
from __future__ import annotations

__all__ = ["LogitgateError", "RegexError", "TokenizerError", "CompileError"]


class LogitgateError(Exception):
    """Root of every error logitgate raises on purpose."""


class RegexError(LogitgateError, ValueError):
    """A regex that cannot be compiled; names the offset and shows a caret under the pattern.

    Attributes: ``pattern`` (the source text), ``offset`` (0-based index into it, or None),
    ``reason`` (the message without the context lines).
    """

    def __init__(self, reason: str, pattern: str | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.pattern = pattern
        self.offset = offset
        super().__init__(self._render())

    def get_context(self) -> str:
        """The pattern with a caret under the offending offset ('' when unknown)."""
        if self.pattern is None or self.offset is None:
            return ""
        line = self.pattern.replace("\n", "\\n").replace("\t", "\\t")
        # account for the two-character escapes introduced above, before the offset
        shift = sum(1 for ch in self.pattern[: self.offset] if ch in "\n\t")
        return f"  {line}\n  {' ' * (self.offset + shift)}^"

    def _render(self) -> str:
        if self.pattern is None or self.offset is None:
            return self.reason
        return f"{self.reason} at offset {self.offset}\n{self.get_context()}"


class TokenizerError(LogitgateError, ValueError):
    """A tokenizer that cannot be turned into exact token bytes (names the token or the cause)."""


class CompileError(LogitgateError, ValueError):
    """A constraint that cannot be compiled against a tokenizer (e.g. it matches no string)."""
