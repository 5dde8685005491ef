"""Parse a Python ``re`` pattern into a :mod:`logitgate.regex.ast` tree.

``parse(pattern, flags)`` returns a tree whose language is exactly
``{s : re.fullmatch(pattern, s, flags)}`` (for strings without surrogates): the syntax and the
semantics are those of Python's ``re`` for ``str`` patterns (Python 3.10 to 3.13), and the parser
mirrors ``re``'s own so that every corner case (``{`` that is not a quantifier, ``]`` first in a
class, verbose-mode comments, ...) reads the same way. Flags are applied while parsing: the tree
has no flags left. Laziness (``*?``, ``+?``, ``??``, ``{m,n}?``) is accepted and dropped: it does
not change which strings match as a whole.

Supported syntax
----------------
* Literals, and escaped punctuation (``\\.``, ``\\[``, ``\\-``, ...).
* ``.``: any character but ``\\n``; any character with ``re.DOTALL`` / ``(?s)``.
* Classes ``[...]`` and ``[^...]`` with ranges ``a-z``; ``]`` first is a literal; ``-`` first or
  last is a literal; escapes work inside (``\\b`` is a backspace there); ``[`` ``&&`` ``--`` ``~~``
  ``||`` are literals (as in ``re``, which only warns about them).
* ``\\d \\D \\w \\W \\s \\S`` inside and outside classes, with Unicode semantics by default (the
  running Python's ``str.isdecimal``, ``str.isalnum`` + ``_``, ``str.isspace``, exactly as its
  ``re``) and ASCII semantics under ``re.ASCII`` / ``(?a)``.
* Escapes ``\\a \\f \\n \\r \\t \\v \\\\``, ``\\0``, octal ``\\ooo`` (up to ``\\377``), ``\\xhh``,
  ``\\uXXXX``, ``\\UXXXXXXXX``, ``\\N{NAME}``.
* Groups: ``(...)``, ``(?:...)``, ``(?P<name>...)`` (and ``(?<name>...)`` where the running Python
  accepts it), comments ``(?#...)``.
* Flags: ``re.IGNORECASE``, ``re.DOTALL``, ``re.VERBOSE``, ``re.ASCII``, ``re.UNICODE``,
  ``re.MULTILINE`` as arguments; inline ``(?aimsux)`` at the start of the pattern; scoped
  ``(?i:...)``, ``(?-i:...)``, ``(?a:...)``, ... .
* Quantifiers ``* + ? {m} {m,} {m,n} {,n}`` and their lazy forms. A ``{`` that does not start a
  valid quantifier is a literal, as in ``re``. Bounds above :data:`MAX_REPEAT` are rejected.
* Alternation ``|``, including empty alternatives.
* ``re.VERBOSE`` / ``(?x)``: whitespace and ``#`` comments are ignored outside classes.
* Anchors ``^``/``\\A`` at the start and ``$``/``\\Z`` at the end of the pattern (also inside
  top-level alternatives and groups, on every path): they are no-ops under full matching.

IGNORECASE follows ``re`` exactly for Unicode patterns: a character matches when it is
case-equivalent per ``re`` (``'ſ'`` ~ ``'s'``, KELVIN SIGN ~ ``'k'``, ``'İ'`` ~ ``'i'``, ...), and
classes and ranges are closed under that equivalence; with ``re.ASCII`` only ASCII letters fold.
See :mod:`logitgate.regex.charsets`, which also documents the one ``re`` quirk reproduced here
(uppercase non-BMP letters listed in a multi-item class under IGNORECASE).

Errors
------
Every problem raises :class:`logitgate.errors.RegexError` naming the construct, with the offset
of the construct in the pattern. Unsupported (by design): backreferences ``\\1`` and
``(?P=name)``; lookahead/lookbehind ``(?=`` ``(?!`` ``(?<=`` ``(?<!``; conditionals ``(?(1)...)``;
atomic groups ``(?>...)``; possessive quantifiers ``*+ ++ ?+ {m,n}+``; word boundaries ``\\b \\B``;
anchors anywhere but at the start/end; ``re.LOCALE`` / ``(?L)``; repetition bounds above
:data:`MAX_REPEAT`. Also rejected, as ``re`` rejects them: ``\\G``, ``\\p{..}``/``\\P{..}``
(Python's ``re`` has no property classes) and other unknown ASCII-letter escapes, unbalanced
parentheses, nothing to repeat, multiple repeat, bad ranges ``[z-a]``, unterminated classes,
``{3,2}``, bad group names, unknown extensions ``(?...``, bad inline flags. Global flags not at the
start of the pattern are rejected too (Python 3.11+ rejects them; 3.10 only warned). Patterns nested
too deeply for the recursive parser raise RegexError as well.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from logitgate.errors import RegexError, RegexLimitError
from logitgate.limits import get_limits
from logitgate.regex import charsets
from logitgate.regex.ast import Alt, CharClass, Concat, Empty, Group, Node, Repeat

__all__ = ["parse", "MAX_REPEAT"]

MAX_REPEAT = 1000
"""Default largest repetition bound accepted in ``{m}``, ``{m,}``, ``{m,n}`` (larger ones would blow up
the automaton; ``re`` itself allows up to 2**32 - 2); the cap in force is
``logitgate.get_limits().max_regex_repeat``."""

# re flag bits
_I = int(re.IGNORECASE)
_L = int(re.LOCALE)
_M = int(re.MULTILINE)
_S = int(re.DOTALL)
_X = int(re.VERBOSE)
_A = int(re.ASCII)
_U = int(re.UNICODE)
_TYPE_FLAGS = _A | _L | _U
_ACCEPTED_FLAGS = _I | _M | _S | _X | _A | _U

_FLAG_LETTERS = {"i": _I, "L": _L, "m": _M, "s": _S, "x": _X, "a": _A, "u": _U}

_SPECIAL_CHARS = frozenset(".\\[{()*+?^$|")
_REPEAT_CHARS = frozenset("*+?{")
_DIGITS = frozenset("0123456789")
_OCT_DIGITS = frozenset("01234567")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WHITESPACE = frozenset(" \t\n\r\v\f")
_LITERAL_RUN = re.compile(r"[^.\\\[{()*+?^$|]+")
_WORD_LIST = re.compile(rf"(?:{_LITERAL_RUN.pattern}\|)+{_LITERAL_RUN.pattern}(?=\)|\Z)")
"""Alternatives that are all plain strings, up to the ``)`` or the end (``of|or|the|...``)."""

_SIMPLE_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92}
_CATEGORY_ESCAPES = {
    "d": "DIGIT",
    "D": "NOT_DIGIT",
    "s": "SPACE",
    "S": "NOT_SPACE",
    "w": "WORD",
    "W": "NOT_WORD",
}


def _re_accepts(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


# Syntax that depends on the running Python's re.
_ANGLE_GROUP_NAMES = _re_accepts("(?<n>x)")
_LOWER_Z_ANCHOR = _re_accepts(r"x\z")


# ---------------------------------------------------------------------------------------------
# Intermediate form, mirroring re's own parse tree
# ---------------------------------------------------------------------------------------------
# Single characters are hashable tuples, compared by value (as re compares them when it factors
# common prefixes out of alternatives): ("LITERAL", cp), ("NOT_LITERAL", cp), ("ANY", None),
# ("IN", items) with items as in charsets.charset_ranges. Composite items compare by identity.

_Atom = tuple[str, Any]


@dataclass(frozen=True)
class _At:
    """An anchor: kind "BEGIN" (``^``, ``\\A``) or "END" (``$``, ``\\Z``)."""

    kind: str
    text: str = field(compare=False)
    offset: int = field(compare=False)


class _Repeat:
    __slots__ = ("min", "max", "seq")

    def __init__(self, min: int, max: int | None, seq: list[_Item]) -> None:
        self.min = min
        self.max = max
        self.seq = seq


class _Group:
    __slots__ = ("index", "name", "add_flags", "del_flags", "seq")

    def __init__(
        self, index: int | None, name: str | None, add: int, dele: int, seq: list[_Item]
    ) -> None:
        self.index = index
        self.name = name
        self.add_flags = add
        self.del_flags = dele
        self.seq = seq


class _Branch:
    __slots__ = ("alternatives",)

    def __init__(self, alternatives: list[list[_Item]]) -> None:
        self.alternatives = alternatives


_Item = _Atom | _At | _Repeat | _Group | _Branch


# ---------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------


_REUSE_MIN_BODY = 16
"""Characters a group's body needs for the parser to remember it (shorter ones
parse faster than they are looked up)."""


class _Parser:
    """Recursive-descent parser over ``pattern``; ``pos`` is the index of the next unread char."""

    def __init__(self, pattern: str, flags: int) -> None:
        self.s = pattern
        self.n = len(pattern)
        self.pos = 0
        self.flags = flags  # argument flags | global inline flags
        self.group_count = 0
        self.group_names: dict[str, int] = {}
        # bodies of groups parsed so far ((body, verbose) -> items), for patterns
        # that repeat a sub-pattern (generated ones often do): see parse_group
        self._bodies: dict[tuple[str, bool], list[_Item]] = {}

    # -- helpers ----------------------------------------------------------------------------

    def error(self, reason: str, offset: int | None) -> RegexError:
        return RegexError(reason, self.s, offset)

    def token(self) -> str | None:
        """The next token (a char, or a backslash and the char after it) without consuming it."""
        pos = self.pos
        if pos >= self.n:
            return None
        c = self.s[pos]
        if c == "\\":
            if pos + 1 >= self.n:
                raise self.error("bad escape (end of pattern): trailing backslash", pos)
            return self.s[pos : pos + 2]
        return c

    def get(self) -> str | None:
        """Consume and return the next token (None at the end)."""
        tok = self.token()
        if tok is not None:
            self.pos += len(tok)
        return tok

    def match(self, char: str) -> bool:
        if self.pos < self.n and self.s[self.pos] == char:
            self.pos += 1
            return True
        return False

    def getwhile(self, count: int, chars: frozenset[str]) -> str:
        start = self.pos
        end = start
        while end < self.n and end - start < count and self.s[end] in chars:
            end += 1
        self.pos = end
        return self.s[start:end]

    def getuntil(self, terminator: str, what: str, construct_start: int) -> str:
        result = ""
        while True:
            tok = self.get()
            if tok is None:
                if not result:
                    raise self.error(f"missing {what}", construct_start)
                raise self.error(f"missing {terminator}, unterminated {what}", construct_start)
            if tok == terminator:
                if not result:
                    raise self.error(f"missing {what}", construct_start)
                return result
            result += tok

    # -- alternation and sequences ------------------------------------------------------------

    def parse_sub(self, verbose: bool, nested: int) -> list[_Item]:
        """``a|b|c`` (stops before ``)`` or at the end)."""
        items: list[list[_Item]] = []
        words = None if verbose else _WORD_LIST.match(self.s, self.pos)
        if words is not None:  # fast path: what parse_seq would give each alternative
            items = [[("LITERAL", ord(ch)) for ch in word] for word in words.group().split("|")]
            self.pos = words.end()
        while words is None:
            items.append(self.parse_seq(verbose, nested + 1, not nested and not items))
            if not self.match("|"):
                break
            if not nested:
                verbose = bool(self.flags & _X)
        if len(items) == 1:
            return items[0]

        seq: list[_Item] = []
        # Factor out a common prefix, as re does (it decides which alternatives become classes).
        while True:
            prefix: _Item | None = None
            for item in items:
                if not item:
                    break
                if prefix is None:
                    prefix = item[0]
                elif item[0] != prefix:
                    break
            else:
                for item in items:
                    del item[0]
                assert prefix is not None
                seq.append(prefix)
                continue
            break

        # Alternatives that are all single characters become one class.
        class_items: list[charsets.ClassItem] = []
        for item in items:
            if len(item) != 1:
                break
            first = item[0]
            if type(first) is not tuple:
                break
            if first[0] == "LITERAL":
                class_items.append(first)
            elif first[0] == "IN" and (not first[1] or first[1][0][0] != "NEGATE"):
                class_items.extend(first[1])
            else:
                break
        else:
            seq.append(("IN", tuple(dict.fromkeys(class_items))))
            return seq

        seq.append(_Branch(items))
        return seq

    def parse_seq(self, verbose: bool, nested: int, first: bool = False) -> list[_Item]:
        """A sequence of items up to ``|``, ``)`` or the end."""
        s = self.s
        n = self.n
        seq: list[_Item] = []
        append = seq.append
        literal_run = _LITERAL_RUN.match
        has_groups = False
        while True:
            pos = self.pos
            if pos >= n:
                break
            c = s[pos]
            if c == "|" or c == ")":
                break
            if not verbose and c not in _SPECIAL_CHARS:
                run = literal_run(s, pos)  # fast path: a run of plain characters
                end = run.end() if run else pos + 1
                seq.extend([("LITERAL", ord(ch)) for ch in s[pos:end]])
                self.pos = end
                continue
            self.pos = pos + 1

            if verbose:
                if c in _WHITESPACE:
                    continue
                if c == "#":
                    self.pos = pos
                    while True:
                        tok = self.get()
                        if tok is None or tok == "\n":
                            break
                    continue

            if c not in _SPECIAL_CHARS:
                append(("LITERAL", ord(c)))
            elif c == "\\":
                if pos + 1 >= n:
                    raise self.error("bad escape (end of pattern): trailing backslash", pos)
                self.pos = pos + 2
                item = self.escape(s[pos + 1], pos)
                append(item)
            elif c == "[":
                append(self.parse_class(pos))
            elif c in _REPEAT_CHARS:
                self.parse_repeat(c, pos, seq)
            elif c == ".":
                append(("ANY", None))
            elif c == "(":
                has_groups = True
                verbose = self.parse_group(pos, seq, verbose, nested, first)
            elif c == "^":
                append(_At("BEGIN", "^", pos))
            elif c == "$":
                append(_At("END", "$", pos))
            else:  # pragma: no cover - every special char is handled above
                raise AssertionError(c)

        # Splice non-capturing, flag-less groups into the sequence (as re does).
        if has_groups:
            spliced: list[_Item] = []
            for x in seq:
                if type(x) is _Group and x.index is None and not x.add_flags and not x.del_flags:
                    spliced.extend(x.seq)
                else:
                    spliced.append(x)
            seq = spliced
        return seq

    # -- repeats ------------------------------------------------------------------------------

    def parse_repeat(self, c: str, start: int, seq: list[_Item]) -> None:
        s = self.s
        if c == "?":
            lo, hi = 0, 1
        elif c == "*":
            lo, hi = 0, None
        elif c == "+":
            lo, hi = 1, None
        else:  # "{"
            here = self.pos
            if here < self.n and s[here] == "}":
                seq.append(("LITERAL", ord("{")))
                return
            lo_text = self.getwhile(self.n, _DIGITS)
            if self.match(","):
                hi_text = self.getwhile(self.n, _DIGITS)
            else:
                hi_text = lo_text
            if not self.match("}"):
                seq.append(("LITERAL", ord("{")))
                self.pos = here
                return
            text = s[start : self.pos]
            lo = self.bound(lo_text, text, start) if lo_text else 0
            hi = self.bound(hi_text, text, start) if hi_text else None
            if hi is not None and hi < lo:
                raise self.error(f"bad repeat {text}: min repeat greater than max repeat", start)
        text = s[start : self.pos]
        if not seq or type(seq[-1]) is _At:
            raise self.error(f"nothing to repeat before quantifier {text!r}", start)
        last = seq[-1]
        if type(last) is _Repeat:
            raise self.error(f"multiple repeat: quantifier {text!r} follows another one", start)
        plain_group = type(last) is _Group and last.index is None
        if plain_group and not last.add_flags and not last.del_flags:  # type: ignore[union-attr]
            item = last.seq  # type: ignore[union-attr]
        else:
            item = [last]
        if self.match("?"):
            pass  # lazy: same language under full matching
        elif self.pos < self.n and s[self.pos] == "+":
            raise self.error(f"possessive quantifier {text + '+'!r} is not supported", start)
        seq[-1] = _Repeat(lo, hi, item)

    def bound(self, digits: str, text: str, start: int) -> int:
        cap = get_limits().max_regex_repeat  # MAX_REPEAT unless configured
        value = int(digits) if len(digits) <= 9 else cap + 1
        if value > cap:
            shown = digits if len(digits) <= 12 else digits[:12] + "..."
            raise RegexLimitError(
                f"repetition bound {shown} in {text if len(text) <= 24 else text[:24] + '...'} is above MAX_REPEAT",
                self.s, start, limit="max_regex_repeat", value=cap,
            )
        return value

    # -- escapes ------------------------------------------------------------------------------

    def escape(self, ch: str, start: int) -> _Item:
        """An escape outside a class; ``start`` is the offset of the backslash."""
        category = _CATEGORY_ESCAPES.get(ch)
        if category is not None:
            return ("IN", (("CATEGORY", category),))
        if ch == "A":
            return _At("BEGIN", "\\A", start)
        if ch == "Z" or (ch == "z" and _LOWER_Z_ANCHOR):
            return _At("END", "\\" + ch, start)
        if ch == "b" or ch == "B":
            raise self.error(f"word boundary \\{ch} is not supported", start)
        code = _SIMPLE_ESCAPES.get(ch)
        if code is not None:
            return ("LITERAL", code)
        value = self.common_escape(ch, start)
        if value is not None:
            return ("LITERAL", value)
        if ch == "0":
            digits = self.getwhile(2, _OCT_DIGITS)
            return ("LITERAL", int("0" + digits, 8))
        if ch in _DIGITS:
            text = ch
            if self.pos < self.n and self.s[self.pos] in _DIGITS:
                text += self.s[self.pos]
                self.pos += 1
                if (
                    text[0] in _OCT_DIGITS
                    and text[1] in _OCT_DIGITS
                    and self.pos < self.n
                    and self.s[self.pos] in _OCT_DIGITS
                ):
                    text += self.s[self.pos]
                    self.pos += 1
                    value = int(text, 8)
                    if value > 0o377:
                        raise self.error(
                            f"octal escape value \\{text} outside of range 0-0o377", start
                        )
                    return ("LITERAL", value)
            raise self.error(f"backreference \\{text} is not supported", start)
        return ("LITERAL", self.plain_escape(ch, start))

    def class_escape(self, ch: str, start: int) -> _Atom:
        """An escape inside a class: ("LITERAL", cp) or ("IN", ((CATEGORY, name),))."""
        category = _CATEGORY_ESCAPES.get(ch)
        if category is not None:
            return ("IN", (("CATEGORY", category),))
        if ch == "b":
            return ("LITERAL", 8)
        code = _SIMPLE_ESCAPES.get(ch)
        if code is not None:
            return ("LITERAL", code)
        value = self.common_escape(ch, start)
        if value is not None:
            return ("LITERAL", value)
        if ch in _OCT_DIGITS:
            text = ch + self.getwhile(2, _OCT_DIGITS)
            value = int(text, 8)
            if value > 0o377:
                raise self.error(f"octal escape value \\{text} outside of range 0-0o377", start)
            return ("LITERAL", value)
        if ch in _DIGITS:
            raise self.error(f"bad escape \\{ch}", start)
        return ("LITERAL", self.plain_escape(ch, start))

    def common_escape(self, ch: str, start: int) -> int | None:
        """``\\x``, ``\\u``, ``\\U``, ``\\N``: the code point, or None for other escapes."""
        if ch == "x" or ch == "u" or ch == "U":
            width = {"x": 2, "u": 4, "U": 8}[ch]
            digits = self.getwhile(width, _HEX_DIGITS)
            if len(digits) != width:
                raise self.error(
                    f"incomplete escape \\{ch}{digits} (needs {width} hex digits)", start
                )
            value = int(digits, 16)
            if value > charsets.MAX_CODE_POINT:
                raise self.error(f"bad escape \\{ch}{digits}: not a code point", start)
            return value
        if ch == "N":
            if not self.match("{"):
                raise self.error("bad escape \\N: missing { after \\N", start)
            name = self.getuntil("}", "character name", start)
            try:
                return ord(unicodedata.lookup(name))
            except (KeyError, TypeError):
                reason = f"undefined character name {name!r} in \\N{{...}}"
                raise self.error(reason, start) from None
        return None

    def plain_escape(self, ch: str, start: int) -> int:
        """An escaped non-letter is itself; an unknown ASCII-letter escape is an error."""
        if ch not in _ASCII_LETTERS:
            return ord(ch)
        if ch == "p" or ch == "P":
            raise self.error(
                f"Unicode property escape \\{ch}{{...}} is not supported: Python's re has no "
                "\\p/\\P classes (bad escape)",
                start,
            )
        if ch == "G":
            raise self.error("\\G (match start anchor) is not supported: bad escape \\G", start)
        raise self.error(f"bad escape \\{ch}", start)

    # -- classes ------------------------------------------------------------------------------

    def parse_class(self, start: int) -> _Atom:
        """``[...]``; ``start`` is the offset of ``[`` (already consumed)."""
        items: list[_Atom] = []
        negate = self.match("^")
        while True:
            tok_pos = self.pos
            tok = self.get()
            if tok is None:
                raise self.error("unterminated character set [...]", start)
            if tok == "]" and items:
                break
            if tok[0] == "\\":
                code1 = self.class_escape(tok[1], tok_pos)
            else:
                code1 = ("LITERAL", ord(tok))
            if self.match("-"):
                that_pos = self.pos
                that = self.get()
                if that is None:
                    raise self.error("unterminated character set [...]", start)
                if that == "]":
                    if code1[0] == "IN":
                        code1 = code1[1][0]
                    items.append(code1)
                    items.append(("LITERAL", ord("-")))
                    break
                if that[0] == "\\":
                    code2 = self.class_escape(that[1], that_pos)
                else:
                    code2 = ("LITERAL", ord(that))
                if code1[0] != "LITERAL" or code2[0] != "LITERAL":
                    raise self.error(f"bad character range {tok}-{that}", tok_pos)
                if code2[1] < code1[1]:
                    raise self.error(f"bad character range {tok}-{that}", tok_pos)
                items.append(("RANGE", (code1[1], code2[1])))
            else:
                if code1[0] == "IN":
                    code1 = code1[1][0]
                items.append(code1)
        unique = tuple(dict.fromkeys(items))
        if len(unique) == 1 and unique[0][0] == "LITERAL":
            return ("NOT_LITERAL" if negate else "LITERAL", unique[0][1])
        if negate:
            unique = (("NEGATE", None),) + unique
        return ("IN", unique)

    # -- groups -------------------------------------------------------------------------------

    def parse_group(
        self, start: int, seq: list[_Item], verbose: bool, nested: int, first: bool
    ) -> bool:
        """``(...)`` and the ``(?...)`` extensions; returns the (possibly changed) verbose flag."""
        capture = True
        name: str | None = None
        add_flags = del_flags = 0
        if self.match("?"):
            char_pos = self.pos
            char = self.get()
            if char is None:
                raise self.error("unexpected end of pattern after '(?'", start)
            if char == "P":
                if self.match("<"):
                    name = self.group_name(">", start)
                elif self.match("="):
                    raise self.error("named backreference (?P=name) is not supported", start)
                else:
                    nxt = self.get()
                    if nxt is None:
                        raise self.error("unexpected end of pattern after '(?P'", start)
                    raise self.error(f"unknown extension ?P{nxt}", start)
            elif char == ":":
                capture = False
            elif char == "#":
                while True:
                    if self.pos >= self.n:
                        raise self.error("missing ), unterminated comment (?#...)", start)
                    if self.get() == ")":
                        break
                return verbose
            elif char == "=":
                raise self.error("lookahead assertion (?=...) is not supported", start)
            elif char == "!":
                raise self.error("negative lookahead assertion (?!...) is not supported", start)
            elif char == "<":
                nxt = self.token()
                if nxt is None:
                    raise self.error("unexpected end of pattern after '(?<'", start)
                if nxt == "=":
                    raise self.error("lookbehind assertion (?<=...) is not supported", start)
                if nxt == "!":
                    raise self.error(
                        "negative lookbehind assertion (?<!...) is not supported", start
                    )
                if not _ANGLE_GROUP_NAMES:
                    raise self.error(f"unknown extension ?<{nxt}", start)
                name = self.group_name(">", start)
            elif char == "(":
                raise self.error("conditional group (?(id)yes|no) is not supported", start)
            elif char == ">":
                raise self.error("atomic group (?>...) is not supported", start)
            elif char in _FLAG_LETTERS or char == "-":
                flags = self.parse_flags(char, char_pos, start)
                if flags is None:  # global flags (?aimsux)
                    if not first or seq:
                        raise self.error(
                            "global flags not at the start of the expression are not supported",
                            start,
                        )
                    return bool(self.flags & _X)
                add_flags, del_flags = flags
                capture = False
            else:
                raise self.error(f"unknown extension ?{char}", start)

        index: int | None = None
        if capture:
            self.group_count += 1
            index = self.group_count
            if name is not None:
                if name in self.group_names:
                    raise self.error(
                        f"redefinition of group name {name!r} as group {index}; "
                        f"was group {self.group_names[name]}",
                        start,
                    )
                self.group_names[name] = index
        sub_verbose = bool((verbose or (add_flags & _X)) and not (del_flags & _X))
        body = self.pos
        # the same body again: parsing is a function of the text, so its items are reused
        for (text, v), items in self._bodies.items():
            if v == sub_verbose and self.s.startswith(text, body) and self.s.startswith(")", body + len(text)):
                self.pos = body + len(text) + 1
                seq.append(_Group(index, name, add_flags, del_flags, items))
                return verbose
        groups = self.group_count
        sub = self.parse_sub(sub_verbose, nested + 1)
        if not self.match(")"):
            raise self.error("missing ), unterminated subpattern", start)
        if self.group_count == groups and self.pos - body > _REUSE_MIN_BODY and len(self._bodies) < 64:
            # no capturing group inside (their numbers would differ); items are never changed
            # once parsed, so the two groups may share them
            self._bodies[(self.s[body:self.pos - 1], sub_verbose)] = sub
        seq.append(_Group(index, name, add_flags, del_flags, sub))
        return verbose

    def group_name(self, terminator: str, start: int) -> str:
        name = self.getuntil(terminator, "group name", start)
        if not name.isidentifier():
            raise self.error(f"bad character in group name {name!r}", start)
        return name

    def parse_flags(self, char: str, char_pos: int, start: int) -> tuple[int, int] | None:
        """``(?aimsux)`` (returns None, flags recorded globally) or ``(?aimsux-imsx:``."""
        add_flags = del_flags = 0
        if char != "-":
            while True:
                if char == "L":
                    raise self.error(
                        "bad inline flags: (?L) / re.LOCALE is not supported for str patterns",
                        char_pos,
                    )
                flag = _FLAG_LETTERS[char]
                add_flags |= flag
                if (flag & _TYPE_FLAGS) and (add_flags & _TYPE_FLAGS) != flag:
                    raise self.error(
                        "bad inline flags: flags 'a', 'u' and 'L' are incompatible", char_pos
                    )
                char_pos = self.pos
                nxt = self.get()
                if nxt is None:
                    raise self.error("missing -, : or ) in inline flags", start)
                char = nxt
                if char in (")", "-", ":"):
                    break
                if char not in _FLAG_LETTERS:
                    msg = "unknown flag" if char.isalpha() else "missing -, : or )"
                    raise self.error(f"bad inline flags: {msg} {char!r}", char_pos)
        if char == ")":
            self.flags |= add_flags
            return None
        if char == "-":
            char_pos = self.pos
            nxt = self.get()
            if nxt is None:
                raise self.error("missing flag after '-' in inline flags", start)
            char = nxt
            if char not in _FLAG_LETTERS:
                msg = "unknown flag" if char.isalpha() else "missing flag"
                raise self.error(f"bad inline flags: {msg} {char!r}", char_pos)
            while True:
                flag = _FLAG_LETTERS[char]
                if flag & _TYPE_FLAGS:
                    raise self.error(
                        "bad inline flags: cannot turn off flags 'a', 'u' and 'L'", char_pos
                    )
                del_flags |= flag
                char_pos = self.pos
                nxt = self.get()
                if nxt is None:
                    raise self.error("missing : in inline flags", start)
                char = nxt
                if char == ":":
                    break
                if char not in _FLAG_LETTERS:
                    msg = "unknown flag" if char.isalpha() else "missing :"
                    raise self.error(f"bad inline flags: {msg} {char!r}", char_pos)
        if add_flags & del_flags:
            raise self.error("bad inline flags: flag turned on and off", start)
        return add_flags, del_flags


# ---------------------------------------------------------------------------------------------
# From the intermediate form to the AST (flags applied, anchors checked)
# ---------------------------------------------------------------------------------------------

_EMPTY = Empty()


def _combine_flags(flags: int, add_flags: int, del_flags: int) -> int:
    if add_flags & _TYPE_FLAGS:
        flags &= ~_TYPE_FLAGS
    return (flags | add_flags) & ~del_flags


def _empty_only(item: _Item) -> bool:
    """Whether the item can only match the empty string by construction (anchors, empty groups)."""
    if type(item) is tuple:
        return False
    if type(item) is _At:
        return True
    if type(item) is _Branch:
        return all(all(map(_empty_only, alt)) for alt in item.alternatives)
    assert type(item) is _Group or type(item) is _Repeat
    return all(map(_empty_only, item.seq))


_literal_classes: dict[int, CharClass] = {}


def _literal_class(code_point: int) -> CharClass:
    """The class of one character (shared instances)."""
    node = _literal_classes.get(code_point)
    if node is None:
        if 0 <= code_point < charsets.SURROGATE_LO or charsets.SURROGATE_HI < code_point <= charsets.MAX_CODE_POINT:
            # already normalized
            node = CharClass(((code_point, code_point),))
        else:
            node = CharClass(charsets.normalize(((code_point, code_point),)))
        if len(_literal_classes) < 65536:
            _literal_classes[code_point] = node
    return node


@lru_cache(maxsize=8192)
def _atom_class(atom: _Atom, ignorecase: bool, ascii: bool, dotall: bool) -> CharClass:
    op, av = atom
    if op == "LITERAL":
        if ignorecase:
            return CharClass(charsets.ignorecase_literal(av, ascii))
        return CharClass(charsets.normalize(((av, av),)))
    if op == "NOT_LITERAL":
        if ignorecase:
            return CharClass(charsets.complement(charsets.ignorecase_literal(av, ascii)))
        return CharClass(charsets.complement(charsets.normalize(((av, av),))))
    if op == "IN":
        return CharClass(charsets.charset_ranges(av, ignorecase, ascii))
    if op == "ANY":
        return CharClass(charsets.dot(dotall))
    raise AssertionError(op)  # pragma: no cover


class _Builder:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        # alternations built so far, by (id, flags, starts, ends): the parser shares the items of
        # a repeated group body (see _Parser.parse_group), and nodes are immutable
        self._branches: dict[tuple[int, int, bool, bool], Node] = {}

    def seq(self, seq: list[_Item], flags: int, at_start: bool, at_end: bool) -> Node:
        """A sequence; ``at_start``/``at_end``: nothing can be consumed before/after it."""
        ignorecase = bool(flags & _I)
        ascii = bool(flags & _A)
        dotall = bool(flags & _S)
        literal_get = None if ignorecase else _literal_classes.get
        nodes: list[Node] = []
        append = nodes.append
        count = len(seq)
        start = 0
        if literal_get is not None:  # fast path for a run of plain literals (the common case)
            for item in seq:
                if type(item) is not tuple or item[0] != "LITERAL":
                    break
                append(literal_get(item[1]) or _literal_class(item[1]))
            start = len(nodes)
            if start == count:
                return Concat(tuple(nodes)) if start > 1 else (nodes[0] if nodes else _EMPTY)
        first_solid = count  # index of the first item that can consume a character
        last_solid = -1
        if at_start:
            first_solid = 0
            while first_solid < count and _empty_only(seq[first_solid]):
                first_solid += 1
        if at_end:
            last_solid = count - 1
            while last_solid >= 0 and _empty_only(seq[last_solid]):
                last_solid -= 1
        node: Node
        for i in range(start, count):
            item = seq[i]
            if type(item) is tuple:
                if literal_get is not None and item[0] == "LITERAL":
                    append(literal_get(item[1]) or _literal_class(item[1]))
                else:
                    append(_atom_class(item, ignorecase, ascii, dotall))
                continue
            starts = at_start and i <= first_solid
            ends = at_end and i >= last_solid
            if type(item) is _At:
                self.anchor(item, starts, ends)
                continue
            if type(item) is _Group:
                node = self.group(item, flags, starts, ends)
            elif type(item) is _Branch:
                key = (id(item), flags, starts, ends)
                found = self._branches.get(key)
                if found is None:
                    found = self._branches[key] = _alt([self.seq(alt, flags, starts, ends) for alt in item.alternatives])
                node = found
            else:
                assert type(item) is _Repeat
                node = self.repeat(item, flags, starts, ends)
            if type(node) is Concat:
                nodes.extend(node.items)
            elif type(node) is not Empty:
                append(node)
        if not nodes:
            return _EMPTY
        if len(nodes) == 1:
            return nodes[0]
        return Concat(tuple(nodes))

    def anchor(self, at: _At, starts: bool, ends: bool) -> None:
        if (at.kind == "BEGIN" and starts) or (at.kind == "END" and ends):
            return  # a no-op under full matching
        where = "start" if at.kind == "BEGIN" else "end"
        raise RegexError(
            f"anchor {at.text} is only supported at the start or end of the pattern "
            f"({at.text} must be at the {where} of every path)",
            self.pattern,
            at.offset,
        )

    def group(self, group: _Group, flags: int, starts: bool, ends: bool) -> Node:
        inner = _combine_flags(flags, group.add_flags, group.del_flags)
        node = self.seq(group.seq, inner, starts, ends)
        if group.index is None:
            return node
        return Group(node, group.index, group.name)

    def repeat(self, rep: _Repeat, flags: int, starts: bool, ends: bool) -> Node:
        once = rep.max is not None and rep.max <= 1  # anchors stay at the start/end only then
        node = self.seq(rep.seq, flags, starts and once, ends and once)
        if rep.max == 0 or type(node) is Empty:
            return _EMPTY
        if rep.min == 1 and rep.max == 1:
            return node
        return Repeat(node, rep.min, rep.max)


def _alt(nodes: list[Node]) -> Node:
    """Alternatives, flattened; single-character alternatives are merged into one class."""
    flat: list[Node] = []
    classes: list[CharClass] = []
    for node in nodes:
        for item in node.items if isinstance(node, Alt) else (node,):
            if type(item) is CharClass:
                if not classes:
                    flat.append(item)  # placeholder for the merged class
                classes.append(item)
            else:
                flat.append(item)
    if len(classes) > 1:
        merged = CharClass(charsets.union(*(c.ranges for c in classes)))
        flat[flat.index(classes[0])] = merged
    if len(flat) == 1:
        return flat[0]
    return Alt(tuple(flat))


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def parse(pattern: str, flags: int = 0) -> Node:
    """Parse ``pattern`` (Python ``re`` syntax, ``re`` flag values) into a syntax tree whose
    language is ``{s : re.fullmatch(pattern, s, flags)}``; raises RegexError."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
    flags = int(flags)
    if flags & _L:
        raise RegexError("re.LOCALE is not supported for str patterns", pattern, None)
    if flags & ~_ACCEPTED_FLAGS:
        raise RegexError(
            f"unsupported flags {flags & ~_ACCEPTED_FLAGS:#x} (supported: IGNORECASE, DOTALL, "
            "VERBOSE, ASCII, UNICODE, MULTILINE)",
            pattern,
            None,
        )
    try:
        parser = _Parser(pattern, flags)
        seq = parser.parse_sub(bool(flags & _X), 0)
        if parser.pos < parser.n:  # stopped at a ')'
            raise RegexError("unbalanced parenthesis: ')' without '('", pattern, parser.pos)
        final = parser.flags
        if final & _A:
            if final & _U:
                raise RegexError("ASCII and UNICODE flags are incompatible", pattern, None)
        else:
            final |= _U
        return _Builder(pattern).seq(seq, final, True, True)
    except RecursionError:
        raise RegexError("groups are nested too deeply", pattern, None) from None
