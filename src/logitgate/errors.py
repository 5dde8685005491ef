"""Exception hierarchy: one root, positions in every input error."""
from __future__ import annotations

__all__ = [
    "LogitgateError",
    "RegexError",
    "GrammarError",
    "GrammarWarning",
    "SchemaError",
    "TokenizerError",
    "CompileError",
    "LimitError",
    "RecognizerError",
]


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


class GrammarError(LogitgateError, ValueError):
    """A grammar (Lark, GBNF, yacc) that cannot be compiled: names the line, column and rule.

    Attributes: ``reason`` (the message without context), ``line``/``column`` (1-based, or None),
    ``source_line`` (the offending line of the grammar text, or None), ``rule`` (the rule or
    terminal the error is about, or None).
    """

    def __init__(
        self,
        reason: str,
        *,
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
        rule: str | None = None,
    ) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.source_line = source_line
        self.rule = rule
        super().__init__(self._render())

    @classmethod
    def at(cls, reason: str, text: str, offset: int, rule: str | None = None) -> "GrammarError":
        """Error at a 0-based character ``offset`` of the grammar ``text`` (line/column computed)."""
        offset = max(0, min(offset, len(text)))
        line = text.count("\n", 0, offset) + 1
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        src = text[start : end if end >= 0 else len(text)]
        return cls(reason, line=line, column=offset - start + 1, source_line=src, rule=rule)

    def get_context(self) -> str:
        """The offending grammar line with a caret under the column ('' when unknown)."""
        if self.source_line is None:
            return ""
        caret = "" if self.column is None else "\n  " + " " * (self.column - 1) + "^"
        return "  " + self.source_line.replace("\t", " ") + caret

    def _render(self) -> str:
        where = ""
        if self.line is not None:
            where = f" at line {self.line}" + (f", column {self.column}" if self.column is not None else "")
        ctx = self.get_context()
        return f"{self.reason}{where}" + (f"\n{ctx}" if ctx else "")


class GrammarWarning(UserWarning):
    """A grammar compiles but has a likely mistake (an unused or unproductive rule), named."""


class TokenizerError(LogitgateError, ValueError):
    """A tokenizer that cannot be turned into exact token bytes (names the token or the cause)."""


class CompileError(LogitgateError, ValueError):
    """A constraint that cannot be compiled against a tokenizer (e.g. it matches no string)."""


class SchemaError(LogitgateError, ValueError):
    """A JSON Schema that cannot be compiled as asked; every problem names its JSON pointer.

    Attributes: ``problems`` (a list of ``(pointer, message)`` pairs, pointers like ``/properties/a``
    into the schema as given, ``""`` for the root), ``reason`` (the summary line).
    """

    def __init__(self, reason: str, problems: list[tuple[str, str]] | None = None, *, pointer: str | None = None) -> None:
        self.reason = reason
        if problems is None:
            problems = [(pointer, reason)] if pointer is not None else []
        self.problems = list(problems)
        super().__init__(self._render())

    @property
    def pointer(self) -> str | None:
        """The JSON pointer of the first problem (None when unknown)."""
        return self.problems[0][0] if self.problems else None

    def _render(self) -> str:
        if len(self.problems) == 1 and self.problems[0][1] == self.reason:
            where = self.problems[0][0]
            if where is None:
                return self.reason
            first, nl, rest = self.reason.partition("\n")  # a pattern error's caret lines stay below
            return f"{first} (at {where or '/'}){nl}{rest}"
        lines = [self.reason] + [f"  {ptr or '/'}: {msg}" for ptr, msg in self.problems]
        return "\n".join(lines)


class LimitError(CompileError):
    """A constraint refused because it needs more than a cap of :class:`logitgate.Limits` allows.

    Attributes: ``limit`` (the ``Limits`` field name, e.g. ``"max_dfa_states"``), ``value`` (the cap
    in force). The message names both and how to raise the cap. Refusals of a regex, grammar or
    schema are also a ``RegexError``/``GrammarError``/``SchemaError`` (with their position).
    """

    def __init__(self, message: str, *, limit: str = "", value: object = None) -> None:
        self.limit = limit
        self.value = value
        super().__init__(message)

    @staticmethod
    def advice(limit: str, value: object) -> str:
        """The message tail naming the cap: ``exceeds Limits.X=V; raise it with ...``."""
        return f"exceeds Limits.{limit}={value}; raise it with logitgate.using_limits({limit}=...)"

    @classmethod
    def exceeded(cls, limit: str, value: object, what: str) -> "LimitError":
        """``LimitError("<what>: exceeds Limits.<limit>=<value>; raise it with ...")``."""
        return cls(f"{what}: {cls.advice(limit, value)}", limit=limit, value=value)

    def __reduce__(self) -> tuple:
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


def _restore_error(cls: type, args: tuple, state: dict) -> BaseException:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class RegexLimitError(LimitError, RegexError):
    """A regex beyond a cap (e.g. a repetition bound over ``Limits.max_regex_repeat``), with its offset."""

    def __init__(self, reason: str, pattern: str | None = None, offset: int | None = None, *,
                 limit: str = "", value: object = None) -> None:
        self.limit = limit
        self.value = value
        RegexError.__init__(self, f"{reason}: {LimitError.advice(limit, value)}" if limit else reason, pattern, offset)


class GrammarLimitError(LimitError, GrammarError):
    """A grammar beyond a cap (rules, repetition counts, lexer states), with line/column when known."""

    def __init__(self, reason: str, *, limit: str = "", value: object = None, line: int | None = None,
                 column: int | None = None, source_line: str | None = None, rule: str | None = None) -> None:
        self.limit = limit
        self.value = value
        GrammarError.__init__(self, f"{reason}: {LimitError.advice(limit, value)}" if limit else reason,
                              line=line, column=column, source_line=source_line, rule=rule)


class SchemaLimitError(LimitError, SchemaError):
    """A JSON schema beyond a cap (depth, size, lexer states), with the JSON pointer when known."""

    def __init__(self, reason: str, *, limit: str = "", value: object = None, pointer: str | None = None) -> None:
        self.limit = limit
        self.value = value
        SchemaError.__init__(self, f"{reason}: {LimitError.advice(limit, value)}" if limit else reason,
                             pointer=pointer)


class RecognizerError(LogitgateError, ValueError):
    """A user recognizer (``Grammar.from_recognizer``) failed: ``method``, ``state`` and ``byte``
    (None where not applicable) name the call; the cause is chained."""

    def __init__(self, message: str, *, method: str = "", state: object = None, byte: int | None = None) -> None:
        self.method = method
        self.state = state
        self.byte = byte
        super().__init__(message)
