"""ECMA-262 regular expressions, as JSON Schema's ``pattern`` and ``patternProperties`` use them.

A schema pattern is an ECMA-262 regex with *search* semantics: a string is valid when the
pattern matches anywhere in it. :func:`ecma_to_python` translates a pattern into an equivalent
Python ``re`` pattern (for ``re.search``); :func:`pattern_node` gives the tree (over decoded
string content) of the strings in which it matches.

Semantics: the syntax is ECMA-262's with the Annex B leniencies browsers accept (a ``{``, ``}``
or ``]`` that starts no construct is a literal; ``[\\w-.]`` has a literal ``-``; ``\\-`` and
other escaped punctuation are identity escapes), and the characters are code points, as with the
``u`` flag the JSON Schema specification recommends (``.`` matches one astral character, a
surrogate pair written as two ``\\uXXXX`` escapes is one character, ``\\u{1F600}`` and
``\\p{...}`` are accepted). In detail:

* ``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]``, ``\\s`` = the ECMA white space and line
  terminators (``\\t \\n \\v \\f \\r``, space, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
  U+202F, U+205F, U+3000, U+FEFF), and their negations ``\\D \\W \\S``;
* ``.`` = any character but ``\\n``, ``\\r``, U+2028, U+2029; ``[^]`` = any character; ``[]`` =
  none; ``^`` and ``$`` = start and end of the input (no multiline flag in JSON Schema);
* escapes ``\\t \\n \\v \\f \\r \\0 \\cX \\xHH \\uHHHH \\u{H...}``, ``\\b`` (backspace) in classes;
* ``\\p{Name}``/``\\P{Name}`` for General_Category values (``L``, ``Letter``, ``Nd``,
  ``digit``, ..., optionally as ``gc=``/``General_Category=``) and ``Any``, ``ASCII``,
  ``Assigned``, from the running Python's Unicode database;
* groups ``(...)``, ``(?:...)``, ``(?<name>...)``; quantifiers ``* + ? {n} {n,} {n,m}`` and their
  lazy forms.

Lookaheads ``(?=...)`` and ``(?!...)`` in the pattern's top-level sequence
(``^(?!@@)[\\w@]+$``, ``^(?=.*\\d)(?=.*[a-z]).{8,}$``, ``a(?=\\.json)``) are exact: the
remainder of the input at their position is intersected with (or stripped of) what the lookahead
matches, with the boolean automata of :mod:`logitgate.automata.boolean`.

Refused with a :class:`~logitgate.errors.RegexError` naming the construct's offset in the ECMA
pattern: lookaheads nested in a group, alternative or repetition, lookbehind, backreferences (``\\1``, ``\\k<name>``) and legacy octal
escapes, word boundaries ``\\b \\B``, modifier groups ``(?i:...)``, script and binary properties
other than the three above, and syntax errors (including non-ECMA syntax such as ``(?P<n>...)``,
``(?i)``, ``\\a``, ``\\Z``). Anchors may stand anywhere (``(?:^|,)x``, ``(a$)?``, ``(^a|b)*``):
:func:`pattern_node` resolves them exactly.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache, lru_cache

from .._cachedir import cached_json
from ..errors import RegexError
from ..regex import charsets
from ..regex.ast import Alt, CharClass, Concat, Empty, Node, Repeat
from ..limits import get_limits

__all__ = ["ecma_to_python", "pattern_node"]

Ranges = charsets.Ranges

# ---------------------------------------------------------------------------------------------
# Character sets
# ---------------------------------------------------------------------------------------------

_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE: Ranges = charsets.normalize(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
     (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)
_DOT: Ranges = charsets.complement(charsets.normalize([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
_CLASS_ESCAPES: dict[str, Ranges] = {
    "d": _DIGIT,
    "D": charsets.complement(_DIGIT),
    "w": _WORD,
    "W": charsets.complement(_WORD),
    "s": _SPACE,
    "S": charsets.complement(_SPACE),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}

# General_Category value names ECMA-262 accepts (long, short and extra aliases), as sets of the
# two-letter categories unicodedata reports.
_GC_GROUPS = {
    "L": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "LC": ("Lu", "Ll", "Lt"),
    "M": ("Mn", "Mc", "Me"),
    "N": ("Nd", "Nl", "No"),
    "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "S": ("Sm", "Sc", "Sk", "So"),
    "Z": ("Zs", "Zl", "Zp"),
    "C": ("Cc", "Cf", "Cs", "Co", "Cn"),
}
_GC_VALUES = frozenset(c for g, cs in _GC_GROUPS.items() if g != "LC" for c in cs)
_GC_NAMES = {
    "Cased_Letter": "LC", "Close_Punctuation": "Pe", "Connector_Punctuation": "Pc",
    "Control": "Cc", "cntrl": "Cc", "Currency_Symbol": "Sc", "Dash_Punctuation": "Pd",
    "Decimal_Number": "Nd", "digit": "Nd", "Enclosing_Mark": "Me", "Final_Punctuation": "Pf",
    "Format": "Cf", "Initial_Punctuation": "Pi", "Letter": "L", "Letter_Number": "Nl",
    "Line_Separator": "Zl", "Lowercase_Letter": "Ll", "Mark": "M", "Combining_Mark": "M",
    "Math_Symbol": "Sm", "Modifier_Letter": "Lm", "Modifier_Symbol": "Sk",
    "Nonspacing_Mark": "Mn", "Number": "N", "Open_Punctuation": "Ps", "Other": "C",
    "Other_Letter": "Lo", "Other_Number": "No", "Other_Punctuation": "Po", "Other_Symbol": "So",
    "Paragraph_Separator": "Zp", "Private_Use": "Co", "Punctuation": "P", "punct": "P",
    "Separator": "Z", "Space_Separator": "Zs", "Spacing_Mark": "Mc", "Surrogate": "Cs",
    "Symbol": "S", "Titlecase_Letter": "Lt", "Unassigned": "Cn", "Uppercase_Letter": "Lu",
}


@cache
def _categories() -> dict[str, Ranges]:
    """Two-letter General_Category -> its code points (scanned once, kept on disk per Unicode
    version)."""

    def scan() -> dict[str, list[tuple[int, int]]]:
        table: dict[str, list[tuple[int, int]]] = {}
        start, current = 0, unicodedata.category("\0")
        for cp in range(1, charsets.MAX_CODE_POINT + 2):
            cat = unicodedata.category(chr(cp)) if cp <= charsets.MAX_CODE_POINT else None
            if cat != current:
                table.setdefault(current, []).append((start, cp - 1))
                start, current = cp, cat
        return table

    rows = cached_json("unicode", f"ucd{unicodedata.unidata_version}-general-category.json", scan)
    return {cat: charsets.normalize((int(lo), int(hi)) for lo, hi in pairs) for cat, pairs in rows.items()}


@cache
def _property(name: str) -> Ranges | None:
    """The code points of ``\\p{name}``, or None for an unknown or unsupported property."""
    if name == "Any":
        return charsets.ANY
    if name == "ASCII":
        return ((0, 0x7F),)
    if name == "Assigned":
        return charsets.complement(_categories().get("Cn", ()))
    key, sep, value = name.partition("=")
    if sep:
        if key not in ("gc", "General_Category"):
            return None
        name = value
    short = _GC_NAMES.get(name, name)
    if short in _GC_GROUPS:
        return charsets.union(*(_categories().get(c, ()) for c in _GC_GROUPS[short]))
    if short in _GC_VALUES:
        return _categories().get(short, ())
    return None


# ---------------------------------------------------------------------------------------------
# Intermediate tree
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chars:
    """One character of ``ranges``."""

    ranges: Ranges


@dataclass(frozen=True)
class _Anchor:
    """``^`` (``start``) or ``$``, at ``offset`` in the pattern."""

    start: bool
    offset: int


@dataclass(frozen=True)
class _Seq:
    items: tuple[_Item, ...]


@dataclass(frozen=True)
class _Alt:
    items: tuple[_Item, ...]


@dataclass(frozen=True)
class _Repeat:
    item: _Item
    min: int
    max: int | None
    lazy: bool


@dataclass(frozen=True)
class _Group:
    """``(...)`` (``capturing``, with an optional ``name``) or ``(?:...)``."""

    item: _Item
    capturing: bool
    name: str | None


@dataclass(frozen=True)
class _Look:
    """A lookahead ``(?=...)`` (or ``(?!...)``, ``negative``) at ``offset`` in the pattern."""

    item: _Item
    negative: bool
    offset: int


@dataclass(frozen=True)
class _Done:
    """A sub-pattern already turned into a tree (no anchors): a tempered repetition."""

    node: Node


_Item = _Chars | _Anchor | _Seq | _Alt | _Repeat | _Group | _Look | _Done

_QUANTIFIER = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
_HEX_ESCAPE = re.compile(r"x([0-9a-fA-F]{2})")
_UNICODE_ESCAPE = re.compile(r"u(?:([0-9a-fA-F]{4})|\{([0-9a-fA-F]+)\})")
_LOW_SURROGATE_ESCAPE = re.compile(r"\\u([dD][c-fC-F][0-9a-fA-F]{2})")
_PROPERTY = re.compile(r"\{([A-Za-z0-9_=]+)\}")
_INLINE_FLAGS = re.compile(r"\?[a-zA-Z-]+\)")


class _Parser:
    """Recursive descent over an ECMA-262 pattern; ``pos`` is the next unread index."""

    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.n = len(pattern)
        self.pos = 0
        self.names: set[str] = set()

    def error(self, reason: str, offset: int) -> RegexError:
        return RegexError(reason, self.s, offset)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.s[i] if i < self.n else ""

    def parse(self) -> _Item:
        item = self.disjunction()
        if self.pos < self.n:
            raise self.error("unmatched ')'", self.pos)
        return item

    def disjunction(self) -> _Item:
        alternatives = [self.alternative()]
        while self.peek() == "|":
            self.pos += 1
            alternatives.append(self.alternative())
        return alternatives[0] if len(alternatives) == 1 else _Alt(tuple(alternatives))

    def alternative(self) -> _Item:
        items: list[_Item] = []
        while self.pos < self.n and self.peek() not in "|)":
            items.append(self.term())
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def term(self) -> _Item:
        start = self.pos
        c = self.s[start]
        self.pos += 1
        atom: _Item
        if c == "^" or c == "$":
            atom = _Anchor(c == "^", start)
        elif c == "(":
            atom = self.group(start)
        elif c == "[":
            atom = _Chars(self.char_class(start))
        elif c == ".":
            atom = _Chars(_DOT)
        elif c == "\\":
            atom = _Chars(self.escape(start))
        elif c in "*+?" or (c == "{" and _QUANTIFIER.match(self.s, start)):
            raise self.error(f"nothing to repeat before quantifier {c!r}", start)
        else:
            cp = self.literal(c)
            atom = _Chars(charsets.normalize([(cp, cp)]))
        return self.quantified(atom)

    def literal(self, c: str) -> int:
        """The code point of the raw character ``c`` just read; a raw surrogate pair (two chars
        of a str) is one code point (its low half is consumed too)."""
        low = self.peek()
        if "\ud800" <= c <= "\udbff" and "\udc00" <= low <= "\udfff":
            self.pos += 1
            return 0x10000 + ((ord(c) - 0xD800) << 10) + ord(low) - 0xDC00
        return ord(c)

    def quantified(self, atom: _Item) -> _Item:
        start = self.pos
        c = self.peek()
        m = _QUANTIFIER.match(self.s, start) if c == "{" else None
        if c in ("*", "+", "?"):
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            self.pos += 1
        elif m:
            lo = self.bound(m.group(1), start)
            hi = lo if not m.group(2) else (self.bound(m.group(3), start) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self.error(f"numbers out of order in quantifier {m.group(0)}", start)
            self.pos = m.end()
        else:
            return atom
        if isinstance(atom, _Anchor):
            raise self.error("nothing to repeat: a quantifier cannot follow an anchor", start)
        if isinstance(atom, _Look):
            raise self.error("nothing to repeat: a quantifier cannot follow a lookahead", start)
        lazy = self.peek() == "?"
        self.pos += lazy
        if self.peek() in ("*", "+", "?") or _QUANTIFIER.match(self.s, self.pos):
            raise self.error("nothing to repeat: a quantifier cannot follow another", self.pos)
        return _Repeat(atom, lo, hi, lazy)

    def bound(self, digits: str, start: int) -> int:
        cap = get_limits().max_regex_repeat  # MAX_REPEAT unless configured
        value = int(digits) if len(digits) <= 9 else cap + 1
        if value > cap:
            raise self.error(f"repetition bound {digits[:12]} exceeds MAX_REPEAT = {cap} "
                             f"(Limits.max_regex_repeat)", start)
        return value

    # -- groups ---------------------------------------------------------------------------------

    def group(self, start: int) -> _Item:
        capturing, name = True, None
        if self.peek() == "?":
            head = self.s[self.pos + 1 : self.pos + 3]
            if head.startswith(":"):
                capturing = False
                self.pos += 2
            elif head.startswith(("<=", "<!")):
                raise self.error(f"lookbehind (?{head}...) is not supported", start)
            elif head.startswith(("=", "!")):
                self.pos += 2
                item = self.disjunction()
                if self.peek() != ")":
                    raise self.error("unterminated group: missing ')'", start)
                self.pos += 1
                return _Look(item, head[0] == "!", start)
            elif head.startswith("<"):
                name = self.group_name(start)
            elif head.startswith("P"):
                raise self.error("(?P...) is Python syntax, not ECMA-262: use (?<name>...)", start)
            elif _INLINE_FLAGS.match(self.s, self.pos):
                raise self.error("inline flags (?i) are Python syntax, not ECMA-262", start)
            elif head[:1].isascii() and (head[:1].isalpha() or head.startswith("-")):
                raise self.error("modifier groups (?i:...) are not supported", start)
            elif head.startswith("#"):
                raise self.error("comments (?#...) are Python syntax, not ECMA-262", start)
            else:
                raise self.error(f"invalid group (?{head[:1]}", start)
        item = self.disjunction()
        if self.peek() != ")":
            raise self.error("unterminated group: missing ')'", start)
        self.pos += 1
        return _Group(item, capturing, name)

    def group_name(self, start: int) -> str:
        end = self.s.find(">", self.pos + 2)
        name = self.s[self.pos + 2 : end] if end >= 0 else ""
        if not name or not _valid_group_name(name):
            raise self.error(f"invalid group name {name!r}", start)
        if name in self.names:
            raise self.error(f"duplicate group name {name!r}", start)
        self.names.add(name)
        self.pos = end + 1
        return name

    # -- classes and escapes --------------------------------------------------------------------

    def char_class(self, start: int) -> Ranges:
        """``[...]`` (``[`` consumed); ``start`` is the offset of ``[``."""
        negate = self.peek() == "^"
        self.pos += negate
        pairs: list[tuple[int, int]] = []
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated character class", start)
            if self.peek() == "]":
                self.pos += 1
                break
            first_at = self.pos
            first, single = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                second, single2 = self.class_atom()
                if single is not None and single2 is not None:
                    if single > single2:
                        raise self.error("range out of order in character class", first_at)
                    pairs.append((single, single2))
                    continue
                pairs += [*first, (0x2D, 0x2D), *second]  # Annex B: [\w-.] has a literal '-'
                continue
            pairs += first
        ranges = charsets.normalize(pairs)
        return charsets.complement(ranges) if negate else ranges

    def class_atom(self) -> tuple[Ranges, int | None]:
        """One class member: its ranges, and its code point when it is a single character
        (possibly a lone surrogate, which only a range can use)."""
        start = self.pos
        c = self.s[start]
        self.pos += 1
        if c != "\\":
            cp = self.literal(c)
            return charsets.normalize([(cp, cp)]), cp
        if self.peek() == "b":
            self.pos += 1
            return ((8, 8),), 8
        cp = self.escape_code_point(start)
        if cp is not None:
            return charsets.normalize([(cp, cp)]), cp
        return self.escape(start), None

    def escape(self, start: int) -> Ranges:
        """The set of an escape whose backslash is at ``start`` (``pos`` is after it)."""
        cp = self.escape_code_point(start)
        if cp is not None:
            return charsets.normalize([(cp, cp)])
        c = self.peek()
        if c == "":
            raise self.error("\\ at end of pattern", start)
        self.pos += 1
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c]
        if c in ("p", "P"):
            return self.property(c == "P", start)
        if c in ("b", "B"):
            raise self.error(f"word boundary \\{c} is not supported", start)
        if c.isdigit():
            raise self.error(
                f"backreference or legacy octal escape \\{c} is not supported (a backreference "
                "is not regular)",
                start,
            )
        if c == "k":
            raise self.error("backreference \\k<name> is not supported (not regular)", start)
        if c == "c":
            raise self.error("\\c must be followed by an ASCII letter", start)
        if c in ("x", "u"):
            raise self.error(f"incomplete escape \\{c}", start)
        raise self.error(f"invalid escape \\{c}", start)

    def escape_code_point(self, start: int) -> int | None:
        """The code point of a character escape (``pos`` after the backslash; consumed), or None
        (nothing consumed) when the escape is not a single character."""
        c = self.peek()
        s = self.s
        if c in _CONTROL_ESCAPES:
            self.pos += 1
            return _CONTROL_ESCAPES[c]
        if c == "0" and not self.peek(1).isdigit():
            self.pos += 1
            return 0
        if c == "c" and self.peek(1).isascii() and self.peek(1).isalpha():
            self.pos += 2
            return ord(s[self.pos - 1]) % 32
        m = _HEX_ESCAPE.match(s, self.pos)
        if m:
            self.pos = m.end()
            return int(m.group(1), 16)
        if c == "u":
            m = _UNICODE_ESCAPE.match(s, self.pos)
            if m is None:
                return None
            if m.group(2) is not None:
                value = int(m.group(2), 16)
                if value > charsets.MAX_CODE_POINT:
                    raise self.error(f"\\u{{{m.group(2)}}} is not a code point", start)
                self.pos = m.end()
                return value
            value = int(m.group(1), 16)
            self.pos = m.end()
            low = _LOW_SURROGATE_ESCAPE.match(s, self.pos)
            if 0xD800 <= value <= 0xDBFF and low:  # a surrogate pair written as two escapes
                self.pos = low.end()
                return 0x10000 + ((value - 0xD800) << 10) + int(low.group(1), 16) - 0xDC00
            return value
        if c and not (c.isascii() and c.isalnum()):  # identity escape: \- \. \/ ...
            self.pos += 1
            return self.literal(c)
        return None

    def property(self, negated: bool, start: int) -> Ranges:
        m = _PROPERTY.match(self.s, self.pos)
        if m is None:
            raise self.error("\\p must be followed by {Name}", start)
        ranges = _property(m.group(1))
        if ranges is None:
            raise self.error(
                f"Unicode property \\p{{{m.group(1)}}} is not supported (General_Category "
                "values, Any, ASCII and Assigned are)",
                start,
            )
        self.pos = m.end()
        return charsets.complement(ranges) if negated else ranges


def _valid_group_name(name: str) -> bool:
    """An ECMA RegExpIdentifierName (``$`` and ``_`` allowed, ZWNJ/ZWJ after the first)."""
    head = "_" if name[0] == "$" else name[0]
    tail = name[1:].replace("$", "_").replace("\u200c", "_").replace("\u200d", "_")
    return (head + tail).isidentifier()


@lru_cache(maxsize=1024)
def _parse(pattern: str) -> _Item:
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
    try:
        return _Parser(pattern).parse()
    except RecursionError:
        raise RegexError("groups are nested too deeply", pattern, None) from None


# ---------------------------------------------------------------------------------------------
# Python rendering
# ---------------------------------------------------------------------------------------------


def _py_char(cp: int) -> str:
    c = chr(cp)
    if c.isascii() and (c.isalnum() or c == "_" or c == " "):
        return c
    if 0x21 <= cp <= 0x7E:
        return "\\" + c
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _py_ranges(ranges: Ranges) -> str:
    return "".join(
        _py_char(lo) if lo == hi else f"{_py_char(lo)}{'-' if hi > lo + 1 else ''}{_py_char(hi)}"
        for lo, hi in ranges
    )


def _py_class(ranges: Ranges) -> str:
    if ranges == charsets.ANY:
        return "(?s:.)"
    if not ranges:
        return "[^\\x00-\\U0010ffff]"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _py_char(ranges[0][0])
    inside = _py_ranges(ranges)
    negated = _py_ranges(charsets.complement(ranges))
    return f"[^{negated}]" if len(negated) < len(inside) else f"[{inside}]"


def _python(item: _Item) -> str:
    if isinstance(item, _Chars):
        return _py_class(item.ranges)
    if isinstance(item, _Anchor):
        return "\\A" if item.start else "\\Z"
    if isinstance(item, _Seq):
        return "".join(map(_python, item.items))
    if isinstance(item, _Alt):
        return "|".join(_python(i) for i in item.items)
    if isinstance(item, _Look):
        return f"(?{'!' if item.negative else '='}{_python(item.item)})"
    if isinstance(item, _Group):
        if not item.capturing:
            return f"(?:{_python(item.item)})"
        if item.name is not None and item.name.isidentifier():
            return f"(?P<{item.name}>{_python(item.item)})"
        return f"({_python(item.item)})"
    body = _python(item.item)  # a character or a group: quantifiable as it is
    lo, hi = item.min, item.max
    if (lo, hi) in ((0, None), (1, None), (0, 1)):
        q = {(0, None): "*", (1, None): "+", (0, 1): "?"}[(lo, hi)]
    else:
        q = f"{{{lo}}}" if lo == hi else f"{{{lo},{'' if hi is None else hi}}}"
    return body + q + ("?" if item.lazy else "")


def ecma_to_python(pattern: str) -> str:
    """A Python ``re`` pattern equivalent to the ECMA-262 ``pattern`` (same matches at the same
    positions; ``^``/``$`` become ``\\A``/``\\Z``, classes are spelled out as code point ranges).
    Raises RegexError (with ``pattern`` and the offset of the construct) for what the module
    docstring lists as refused."""
    return _python(_parse(pattern))


# ---------------------------------------------------------------------------------------------
# Search language
# ---------------------------------------------------------------------------------------------
# Anchors are resolved by splitting a sub-pattern's language by the anchors its paths pass:
# flavour (s, e) holds the strings matched along paths that pass a ``^`` (s) / a ``$`` (e). On
# such a path nothing may be consumed before the ``^`` / after the ``$``, and the match must then
# start at the start / end at the end of the whole string.

_Flavour = tuple[bool, bool]
_Lang = dict[_Flavour, Node]
_FREE: _Flavour = (False, False)
_START: _Flavour = (True, False)
_END: _Flavour = (False, True)
_BOTH: _Flavour = (True, True)
_EMPTY = Empty()
_ANY_STAR = Repeat(CharClass(charsets.ANY), 0, None)


def _nullable(node: Node) -> bool:
    if isinstance(node, CharClass):
        return False
    if isinstance(node, Concat):
        return all(map(_nullable, node.items))
    if isinstance(node, Alt):
        return any(map(_nullable, node.items))
    if isinstance(node, Repeat):
        return node.min == 0 or _nullable(node.item)
    return True  # Empty


def _cat(*nodes: Node) -> Node:
    items = [x for n in nodes for x in (n.items if isinstance(n, Concat) else (n,))]
    items = [x for x in items if not isinstance(x, Empty)]
    if not items:
        return _EMPTY
    return items[0] if len(items) == 1 else Concat(tuple(items))


def _alt(nodes: list[Node]) -> Node:
    flat = list(dict.fromkeys(x for n in nodes for x in (n.items if isinstance(n, Alt) else (n,))))
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def _union(parts: list[tuple[_Flavour, Node]]) -> _Lang:
    grouped: dict[_Flavour, list[Node]] = {}
    for flavour, node in parts:
        grouped.setdefault(flavour, []).append(node)
    return {f: _alt(nodes) for f, nodes in grouped.items()}


def _concat_lang(a: _Lang, b: _Lang) -> _Lang:
    parts = []
    for (sa, ea), x in a.items():
        for (sb, eb), y in b.items():
            # b passes a '^': a must have consumed nothing; a passed a '$': b must consume nothing
            if (sb and not _nullable(x)) or (ea and not _nullable(y)):
                continue
            parts.append(((sa or sb, ea or eb), _cat(_EMPTY if sb else x, _EMPTY if ea else y)))
    return _union(parts)


def _power(node: Node, lo: int, hi: int | None) -> Node:
    if hi == 0 or isinstance(node, Empty):
        return _EMPTY
    return node if lo == hi == 1 else Repeat(node, lo, hi)


def _repeat_lang(x: _Lang, lo: int, hi: int | None) -> _Lang:
    """``X{lo,hi}`` by flavour. On a path through the iterations, every iteration before the
    last one passing a ``^`` (a) and after the first one passing a ``$`` (b) consumes nothing.
    So, if a <= b: empty iterations, then X_start, anchor-free ones, X_end, empty ones (or one
    X_both in the middle); if b < a, every iteration is empty."""
    free = x.get(_FREE)
    empty = {f for f, node in x.items() if _nullable(node)}
    before = bool(empty & {_FREE, _START})  # empty iterations can pad before the '^' one
    after = bool(empty & {_FREE, _END})  # ... after the '$' one

    def middle(anchored: int, padded: bool) -> Node | None:
        """Anchor-free iterations beside ``anchored`` anchored ones (None: count impossible)."""
        top = None if hi is None else hi - anchored
        if top is not None and top < 0:
            return None
        bottom = 0 if padded else max(lo - anchored, 0)
        if free is None:
            return _EMPTY if bottom == 0 else None
        return _power(free, bottom, top)

    parts: list[tuple[_Flavour, Node]] = []
    if (m := middle(0, False)) is not None:
        parts.append((_FREE, m))
    if _START in x and (m := middle(1, before)) is not None:
        parts.append((_START, _cat(x[_START], m)))
    if _END in x and (m := middle(1, after)) is not None:
        parts.append((_END, _cat(m, x[_END])))
    if _START in x and _END in x and (m := middle(2, before or after)) is not None:
        parts.append((_BOTH, _cat(x[_START], m, x[_END])))
    if _BOTH in x and (hi is None or hi >= 1) and (before or after or lo <= 1):
        parts.append((_BOTH, x[_BOTH]))
    if (hi is None or hi >= 2) and empty & {_END, _BOTH} and empty & {_START, _BOTH}:
        parts.append((_BOTH, _EMPTY))
    return _union(parts)


def _lang(item: _Item) -> _Lang:
    if isinstance(item, _Chars):
        return {_FREE: CharClass(item.ranges)}
    if isinstance(item, _Done):
        return {_FREE: item.node}
    if isinstance(item, _Anchor):
        return {_START if item.start else _END: _EMPTY}
    if isinstance(item, _Seq):
        lang: _Lang = {_FREE: _EMPTY}
        for i in item.items:
            lang = _concat_lang(lang, _lang(i))
        return lang
    if isinstance(item, _Alt):
        return _union([part for i in item.items for part in _lang(i).items()])
    if isinstance(item, _Group):
        return _lang(item.item)
    if isinstance(item, _Look):
        raise _Misplaced(item.offset, "lookahead (?=...) or (?!...) is supported only in the top-level sequence of "
                                      "a pattern (not inside a group, an alternative or a repetition): not supported "
                                      "here")
    if item.max == 0:
        return {_FREE: _EMPTY}
    inner = _lang(item.item)
    if item.min == item.max == 1:
        return inner
    return _repeat_lang(inner, item.min, item.max)


class _Misplaced(Exception):
    """A construct the search language cannot place (a lookahead nested in a group, an anchor
    beside lookaheads); becomes a RegexError naming the pattern."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def _first_look(item: _Item) -> _Look | None:
    if isinstance(item, _Look):
        return item
    if isinstance(item, (_Seq, _Alt)):
        for i in item.items:
            if (found := _first_look(i)) is not None:
                return found
        return None
    if isinstance(item, (_Group, _Repeat)):
        return _first_look(item.item)
    return None


@lru_cache(maxsize=1024)
def pattern_node(pattern: str) -> Node:
    """The tree (over decoded string content) of the strings in which the ECMA-262 ``pattern``
    matches somewhere (JSON Schema ``pattern`` semantics). Raises RegexError."""
    item = _parse(pattern)
    try:
        if _first_look(item) is not None:
            return _lookahead_node(item)
        parts = [
            _cat(_EMPTY if s else _ANY_STAR, node, _EMPTY if e else _ANY_STAR)
            for (s, e), node in _lang(item).items()
        ]
    except _Misplaced as e:
        raise RegexError(e.reason, pattern, e.offset) from None
    return _alt(parts) if parts else CharClass(())


_LOOK_MAX_STATES = 10_000
"""Largest automaton a lookahead's intersection or difference may take (else not supported)."""


def _refuse_nested(items: list[_Item]) -> None:
    """Raise ``_Misplaced`` at the first lookahead nested inside any of ``items``."""
    for it in items:
        nested = _first_look(it)
        if nested is not None:
            _lang(nested)  # raises _Misplaced at the nested lookahead


def _remainders(lang: _Lang, offset: int, start_ok: bool) -> Node:
    """The remainders of the input a language allows at a lookahead's position: a match, then
    anything (nothing after its ``$``); a ``^`` in it only where ``start_ok``."""
    out = []
    for (s, e), node in lang.items():
        if s and not start_ok:
            raise _Misplaced(offset, "'^' beside a lookahead is supported only at the start of the pattern: "
                                     "not supported here")
        out.append(_cat(node, _EMPTY if e else _ANY_STAR))
    return _alt(out) if out else CharClass(())


def _too_large(offset: int) -> _Misplaced:
    return _Misplaced(offset, f"lookahead: the automaton of the pattern exceeds {_LOOK_MAX_STATES} states: "
                              "not supported")


def _tempered(item: _Item) -> _Done | None:
    """``(?:(?!A)(?=B)...X)*`` right before the final ``$`` (a "tempered" repetition: characters of
    ``X``, none of them where the rest of the input starts with ``A``, each where it starts with
    ``B``), as a tree; None for any other item. Since only ``$`` follows, the rest of the input at
    an iteration is a non-empty suffix of the repetition's own text ``w``: ``w`` is in ``X*`` and
    no non-empty suffix of it starts with an ``A`` match (or fails to start with a ``B`` one)."""
    from ..automata.boolean import complement, difference, intersect
    from ..errors import CompileError

    if not isinstance(item, _Repeat) or item.min != 0 or item.max is not None:
        return None
    body = item.item
    while isinstance(body, _Group):
        body = body.item
    if not isinstance(body, _Seq) or len(body.items) < 2 or not isinstance(body.items[-1], _Chars) or \
            not all(isinstance(i, _Look) for i in body.items[:-1]):
        return None
    looks: list[_Look] = list(body.items[:-1])  # type: ignore[arg-type]
    _refuse_nested([look.item for look in looks])
    chars = CharClass(body.items[-1].ranges)  # type: ignore[union-attr]
    nonempty = Repeat(CharClass(charsets.ANY), 1, None)
    try:
        bad: list[Node] = []
        for look in looks:
            starts = _remainders(_lang(look.item), look.offset, False)
            # the suffixes at which an iteration fails: those that start with (or without) a match
            failing = starts if look.negative else complement(starts, max_states=_LOOK_MAX_STATES)
            bad.append(_cat(_ANY_STAR, intersect(failing, nonempty, max_states=_LOOK_MAX_STATES)))
        node = difference(Repeat(chars, 0, None), _alt(bad), max_states=_LOOK_MAX_STATES)
    except CompileError:
        raise _too_large(looks[0].offset) from None
    return _Done(node)


def _lookahead_node(item: _Item) -> Node:
    """``pattern_node`` of a pattern whose top-level sequence has lookaheads.

    Read as ``[^] S0 L1 S1 L2 ... Sn``: segments ``Si`` without lookaheads, lookaheads ``Li`` between
    them. A lookahead constrains the *remainder* of the input at its position, so the strings
    that remainder may be are built from the end: ``T = rest(Sn)`` (``Sn`` then anything, or
    nothing after a ``$``), then for each lookahead ``T = T & rest(body)`` (``(?=``) or
    ``T - rest(body)`` (``(?!``), and ``T = S(i-1) T``. Without a leading ``^`` the match may
    start anywhere: ``[^]*`` first. Anchors may stand as the leading ``^``, in the last segment,
    and in a lookahead body at the very start (``^(?!^a)``); elsewhere they are not supported."""
    from ..automata.boolean import difference, intersect
    from ..errors import CompileError

    items = list(item.items) if isinstance(item, _Seq) else [item]
    lead = False
    while items and isinstance(items[0], _Anchor) and items[0].start:
        lead = True
        items.pop(0)
    if len(items) >= 2 and isinstance(items[-1], _Anchor) and not items[-1].start:
        tempered = _tempered(items[-2])
        if tempered is not None:
            items[-2] = tempered
    segments: list[list[_Item]] = [[]]
    looks: list[_Look] = []
    for it in items:
        if isinstance(it, _Look):
            looks.append(it)
            segments.append([])
        else:
            segments[-1].append(it)
    _refuse_nested([i for seg in segments for i in seg] + [look.item for look in looks])
    last_at = looks[-1].offset if looks else 0
    remainder = _remainders(_lang(_Seq(tuple(segments[-1]))), last_at, not looks and lead)
    for k in range(len(looks) - 1, -1, -1):
        look = looks[k]
        at_start = lead and not any(segments[: k + 1])
        body = _remainders(_lang(look.item), look.offset, at_start)
        try:
            op = difference if look.negative else intersect
            remainder = op(remainder, body, max_states=_LOOK_MAX_STATES)
        except CompileError:
            raise _too_large(look.offset) from None
        before = _lang(_Seq(tuple(segments[k])))
        if set(before) - {_FREE}:
            raise _Misplaced(look.offset, "an anchor before a lookahead is supported only as the pattern's leading "
                                          "'^': not supported here")
        remainder = _cat(before.get(_FREE, CharClass(())), remainder)
    return _cat(_EMPTY if lead else _ANY_STAR, remainder)
