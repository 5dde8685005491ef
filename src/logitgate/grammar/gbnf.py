"""GBNF front end: llama.cpp's grammar format (``grammars/README.md``) read into a :class:`GrammarIR`.

Supported, with llama.cpp's syntax (``src/llama-grammar.cpp``):

* rules ``name ::= alternatives``; names are ``[a-zA-Z0-9-]+`` and kept as written. A rule ends
  at a newline outside parentheses, except that a line ending in ``::=`` or ``|`` continues onto
  the next line; inside ``( )`` newlines are free. ``#`` starts a comment to the end of the line.
* ``|``, grouping ``( )``, postfix ``*``, ``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}`` (spaces allowed
  inside the braces; postfixes stack: ``x*?`` is ``(x*)?``), and ``{,n}`` (= ``{0,n}``, an
  extension: llama.cpp wants the minimum written out).
* literals ``"..."`` and character classes ``[...]`` (``^`` right after ``[`` negates; ``a-z``
  ranges; a ``-`` first or last is literal), with the escapes ``\\xHH``, ``\\uHHHH``,
  ``\\UHHHHHHHH`` (exactly that many hex digits), ``\\t \\r \\n \\\\ \\" \\[ \\] \\-``; any other
  escape is an error. Raw characters (newlines too) may appear inside both.
* ``.``: any character, **newline included** (llama.cpp's ``CHAR_ANY`` matches every code point);
  here every code point but the surrogates U+D800..U+DFFF.
* a rule defined twice: the last definition wins, as in llama.cpp (which silently overwrites);
  here a :class:`GrammarWarning` is issued and a note is added to ``GrammarIR.notes``.

Not supported: token references (``<[1234]>``, ``<|eot_id|>``, ``!<...>``): a :class:`GrammarError`
names them. Stricter than llama.cpp (which accepts these and then misbehaves): an empty class ``[]``
(a no-op there), a reversed range ``[z-a]``, ``{m,n}`` with ``n < m``, counts above
:data:`MAX_REPEAT` (llama.cpp rejects a minimum above 2000 and silently drops a maximum above 2000)
and escapes of surrogates or of values above U+10FFFF (a surrogate may end a range; the surrogates
are then left out of the class).

Output: ``lex_mode="chars"``, ``kind="gbnf"``, no named terminals; literals become :class:`Lit`
(``""`` becomes :class:`Empty`), classes and ``.`` become :class:`Rx` over a
:class:`~logitgate.regex.ast.CharClass`, references :class:`Ref` with their line and column
(undefined references are checked by a later pass, not here). Every syntax error is a
:class:`GrammarError` with the line, column and the offending line.
"""
from __future__ import annotations

import bisect
import re
import warnings

from ..errors import GrammarError, GrammarLimitError, GrammarWarning
from ..limits import get_limits
from ..regex import charsets
from ..regex.ast import CharClass
from .ir import Alt, Empty, Expr, GrammarIR, Lit, Ref, Rep, RuleDef, Rx, Seq

__all__ = ["parse_gbnf", "MAX_REPEAT"]

MAX_REPEAT = 10000
"""Default largest count accepted in ``{m,n}`` (the cap in force: ``get_limits().max_gbnf_repeat``)."""

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_HEX = frozenset("0123456789abcdefABCDEF")
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_SIMPLE_ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
_ESCAPE_LIST = r"\xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \] \-"
_TOKEN = re.compile(r"!?<[^>\r\n]{0,40}>?")


def parse_gbnf(text: str, start: str = "root") -> GrammarIR:
    """Parse a GBNF grammar; ``start`` names the start rule (llama.cpp always uses ``root``).

    Raises :class:`GrammarError` (with line and column) for malformed input, unsupported token
    references and a missing start rule.
    """
    return _Parser(text).grammar(start)


def _seq(items: list[Expr]) -> Expr:
    flat: list[Expr] = []
    for item in items:
        if isinstance(item, Seq):
            flat.extend(item.items)
        elif not isinstance(item, Empty):
            flat.append(item)
    if not flat:
        return Empty()
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def _alt(items: list[Expr]) -> Expr:
    flat: list[Expr] = []
    for item in items:
        flat.extend(item.items if isinstance(item, Alt) else (item,))
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def _rep(item: Expr, lo: int, hi: int | None) -> Expr:
    if hi == 0 or isinstance(item, Empty):
        return Empty()
    if lo == 1 and hi == 1:
        return item
    return Rep(item, lo, hi)


def _is_surrogate(cp: int) -> bool:
    return charsets.SURROGATE_LO <= cp <= charsets.SURROGATE_HI


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.rule: str | None = None
        self.newlines = [i for i, ch in enumerate(text) if ch == "\n"]
        self.first_ref: dict[str, int] = {}  # name -> offset of its first reference

    # -- helpers ---------------------------------------------------------------------------------

    def error(self, reason: str, offset: int) -> GrammarError:
        return GrammarError.at(reason, self.text, offset, rule=self.rule)

    def line_col(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_left(self.newlines, offset)
        line_start = self.newlines[line - 1] + 1 if line else 0
        return line + 1, offset - line_start + 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < self.n else ""

    def describe(self, offset: int) -> str:
        if offset >= self.n:
            return "end of input"
        if self.text.startswith("::=", offset):
            return "'::='"
        return repr(self.text[offset])

    def space(self, newline_ok: bool) -> None:
        """Skip blanks and comments (and newlines when ``newline_ok``), like llama.cpp's parse_space."""
        text, n = self.text, self.n
        while self.pos < n:
            ch = text[self.pos]
            if ch == " " or ch == "\t" or (newline_ok and ch in "\r\n"):
                self.pos += 1
            elif ch == "#":
                while self.pos < n and text[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break

    def name(self) -> str:
        begin = self.pos
        while self.pos < self.n and self.text[self.pos] in _WORD:
            self.pos += 1
        return self.text[begin : self.pos]

    # -- grammar and rules -----------------------------------------------------------------------

    def grammar(self, start: str) -> GrammarIR:
        rules: dict[str, RuleDef] = {}
        notes: list[str] = []
        if self.text.startswith("\ufeff"):
            self.pos = 1
        self.space(True)
        while self.pos < self.n:
            rule = self.rule_def()
            if rule.name in rules:
                msg = (
                    f"rule {rule.name!r} is defined more than once (lines {rules[rule.name].line} "
                    f"and {rule.line}); the last definition wins, as in llama.cpp"
                )
                notes.append(msg)
                warnings.warn(msg, GrammarWarning, stacklevel=3)
            rules[rule.name] = rule
        if start not in rules:
            reason = f"the grammar has no {start!r} rule (the start rule)"
            if start in self.first_ref:
                offset = self.first_ref[start]
                raise GrammarError.at(reason + f"; {start!r} is referenced here", self.text, offset, rule=start)
            raise GrammarError(reason, rule=start)
        return GrammarIR(
            rules=rules,
            terminals={},
            start=start,
            ignore=(),
            lex_mode="chars",
            source=self.text,
            kind="gbnf",
            notes=notes,
        )

    def rule_def(self) -> RuleDef:
        self.rule = None
        name_at = self.pos
        name = self.name()
        if not name:
            if self.text.startswith("::=", self.pos):
                raise self.error("empty rule name before '::='", name_at)
            raise self.error(f"expected a rule name ([a-zA-Z0-9-]+), found {self.describe(name_at)}", name_at)
        self.rule = name
        self.space(False)
        if not self.text.startswith("::=", self.pos):
            raise self.error(f"expected '::=' after rule name {name!r}, found {self.describe(self.pos)}", self.pos)
        self.pos += 3
        self.space(True)
        body = self.alternates(nested=False)
        ch = self.peek()
        if ch == "\r":
            self.pos += 2 if self.text.startswith("\r\n", self.pos) else 1
        elif ch == "\n":
            self.pos += 1
        elif ch == ")":
            raise self.error("unmatched ')'", self.pos)
        elif self.text.startswith("::=", self.pos):
            raise self.error(
                f"unexpected '::=' in the body of rule {name!r} (a rule ends at a newline outside "
                "parentheses, unless the line ends with '|' or '::=')",
                self.pos,
            )
        elif ch:
            raise self.error(
                f"unexpected {self.describe(self.pos)}: expected a literal, character class, rule name, "
                "group, repetition, '|' or the end of the line",
                self.pos,
            )
        self.space(True)
        return RuleDef(name, body, self.line_col(name_at)[0])

    # -- expressions -----------------------------------------------------------------------------

    def alternates(self, nested: bool) -> Expr:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return _alt(alts)

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        while self.pos < self.n:
            ch = self.text[self.pos]
            at = self.pos
            if ch == '"':
                items.append(self.literal())
            elif ch == "[":
                items.append(self.char_class())
            elif ch == ".":
                self.pos += 1
                items.append(Rx(CharClass(charsets.ANY), "."))
            elif ch == "(":
                items.append(self.group())
            elif ch in _WORD:
                name = self.name()
                line, col = self.line_col(at)
                self.first_ref.setdefault(name, at)
                items.append(Ref(name, line, col))
            elif ch in "*+?{":
                if not items:
                    raise self.error(f"'{ch}' has nothing before it to repeat", at)
                items[-1] = self.repetition(items[-1], nested)
            elif ch in "<!":
                m = _TOKEN.match(self.text, at)
                shown = m.group(0) if m else ch
                raise self.error(
                    f"token references such as {shown!r} are not supported (llama.cpp's <[id]>, "
                    "<token> and !<...> syntax)",
                    at,
                )
            else:
                break
            self.space(nested)
        return _seq(items)

    def group(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        self.space(True)
        body = self.alternates(nested=True)
        if self.pos >= self.n:
            raise self.error("unterminated group: '(' has no matching ')'", open_at)
        if self.text[self.pos] != ")":
            line, col = self.line_col(open_at)
            raise self.error(
                f"expected ')' to close the group opened at line {line}, column {col}, "
                f"found {self.describe(self.pos)}",
                self.pos,
            )
        self.pos += 1
        return body

    def char(self, open_at: int, what: str) -> int:
        """One character or escape (llama.cpp's parse_char) inside a literal or class."""
        text, pos = self.text, self.pos
        if text[pos] != "\\":
            self.pos += 1
            return ord(text[pos])
        if pos + 1 >= self.n:
            raise self.error(f"unterminated {what}", open_at)
        esc = text[pos + 1]
        if esc in _HEX_ESCAPES:
            k = _HEX_ESCAPES[esc]
            digits = text[pos + 2 : pos + 2 + k]
            if len(digits) != k or not all(d in _HEX for d in digits):
                raise self.error(f"expected {k} hex digits after '\\{esc}'", pos)
            value = int(digits, 16)
            if value > charsets.MAX_CODE_POINT:
                raise self.error(f"escape '\\{esc}{digits}' is beyond U+10FFFF", pos)
            self.pos += 2 + k
            return value
        if esc in _SIMPLE_ESCAPES:
            self.pos += 2
            return _SIMPLE_ESCAPES[esc]
        raise self.error(f"unknown escape '\\{esc}' (GBNF escapes: {_ESCAPE_LIST})", pos)

    def no_surrogate(self, cp: int, at: int) -> None:
        if _is_surrogate(cp):
            raise self.error(f"U+{cp:04X} is a surrogate code point, which has no UTF-8 encoding", at)

    def literal(self) -> Expr:
        open_at = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated literal: missing closing '\"'", open_at)
            if self.text[self.pos] == '"':
                self.pos += 1
                break
            at = self.pos
            cp = self.char(open_at, "literal")
            self.no_surrogate(cp, at)
            chars.append(chr(cp))
        return Lit("".join(chars)) if chars else Empty()

    def char_class(self) -> Expr:
        text = self.text
        open_at = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        pairs: list[tuple[int, int]] = []
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated character class: missing ']'", open_at)
            if text[self.pos] == "]":
                break
            at = self.pos
            lo = self.char(open_at, "character class")
            hi = lo
            if text.startswith("-", self.pos) and self.pos + 1 < self.n and text[self.pos + 1] != "]":
                self.pos += 1
                hi = self.char(open_at, "character class")
                if hi < lo:
                    raise self.error(f"character range out of order: U+{lo:04X} > U+{hi:04X}", at)
            else:
                self.no_surrogate(lo, at)
            pairs.append((lo, hi))
        self.pos += 1
        source = text[open_at : self.pos]
        if not pairs:
            raise self.error(f"empty character class {source!r}", open_at)
        ranges = charsets.normalize(pairs)
        return Rx(CharClass(charsets.complement(ranges) if negated else ranges), source)

    def count(self) -> int:
        at = self.pos
        while self.pos < self.n and self.text[self.pos].isascii() and self.text[self.pos].isdigit():
            self.pos += 1
        digits = self.text[at : self.pos]
        if not digits:
            raise self.error(f"expected a number in the repetition, found {self.describe(at)}", at)
        cap = get_limits().max_gbnf_repeat  # MAX_REPEAT unless configured
        if len(digits) > len(str(cap)) or int(digits) > cap:
            shown = digits if len(digits) <= 20 else digits[:20] + "..."
            e = GrammarError.at("", self.text, at)
            raise GrammarLimitError(f"repetition count {shown} exceeds the limit of {cap}", limit="max_gbnf_repeat",
                                    value=cap, line=e.line, column=e.column, source_line=e.source_line, rule=self.rule)
        return int(digits)

    def repetition(self, item: Expr, nested: bool) -> Expr:
        op_at = self.pos
        op = self.text[op_at]
        self.pos += 1
        if op == "*":
            return _rep(item, 0, None)
        if op == "+":
            return _rep(item, 1, None)
        if op == "?":
            return _rep(item, 0, 1)
        self.space(nested)
        lo_omitted = self.peek() == ","
        lo = 0 if lo_omitted else self.count()
        self.space(nested)
        hi: int | None
        if self.peek() == "}" and not lo_omitted:
            hi = lo
        elif self.peek() == ",":
            self.pos += 1
            self.space(nested)
            hi = self.count() if lo_omitted or self.peek().isdigit() else None
            self.space(nested)
            if self.peek() != "}":
                if self.pos >= self.n:
                    raise self.error("unterminated repetition: missing '}'", op_at)
                raise self.error(f"expected '}}' in the repetition, found {self.describe(self.pos)}", self.pos)
        elif self.pos >= self.n:
            raise self.error("unterminated repetition: missing '}'", op_at)
        else:
            raise self.error(f"expected ',' or '}}' in the repetition, found {self.describe(self.pos)}", self.pos)
        self.pos += 1
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{lo},{hi}}}: the maximum is less than the minimum", op_at)
        return _rep(item, lo, hi)
