"""The ``format`` keyword (JSON Schema 2020-12 validation, section 7.3) as regular languages.

:func:`format_node` gives, for a format name, the tree (:mod:`logitgate.regex.ast`) of the
*decoded* string values valid for that format: code points, not JSON text (:mod:`.strings`
escapes them). The semantics are those of the official JSON-Schema-Test-Suite
(``optional/format/*``), which pins down what the RFCs leave open. Where a format is not exactly
regular, or exactness would cost an unreasonable automaton, the language is a superset: it may
accept an invalid value but never rejects a valid one. Those formats are
:data:`APPROXIMATE_FORMATS`; :data:`FORMAT_NOTES` says where and why, for them and for the
formats whose reading of the RFC is worth stating.

``regex`` (an ECMA-262 regular expression) is not a regular language: it is checked from above,
on its structure only (see :data:`FORMAT_NOTES`). Names this module does not know are not
supported: :func:`format_node` returns None and the caller decides how to report it.

Unicode-dependent sets (``idn-hostname``, ``idn-email``) are derived from the running Python's
``unicodedata`` (RFC 5892's derivation of PVALID) and cached on disk per Python and Unicode
version, like :mod:`logitgate.regex.charsets`' tables.
"""
from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType

from .._cachedir import cached_json
from ..automata.boolean import difference, intersect
from ..regex import charsets
from ..regex.ast import Alt, CharClass, Concat, Node, Repeat
from ..regex.parser import parse

__all__ = ["APPROXIMATE_FORMATS", "FORMAT_NOTES", "SUPPORTED_FORMATS", "format_node"]

Ranges = charsets.Ranges

# ---------------------------------------------------------------------------------------------
# Tree helpers
# ---------------------------------------------------------------------------------------------


def _seq(*items: Node) -> Node:
    return Concat(items)


def _alt(*items: Node) -> Node:
    return Alt(items)


def _star(item: Node) -> Node:
    return Repeat(item, 0, None)


def _plus(item: Node) -> Node:
    return Repeat(item, 1, None)


def _opt(item: Node) -> Node:
    return Repeat(item, 0, 1)


def _cc(ranges: Ranges) -> CharClass:
    return CharClass(charsets.normalize(ranges))


def _chars(text: str) -> Ranges:
    return charsets.from_code_points(map(ord, text))


def _upto(n: int) -> Node:
    """Any string of 1 to ``n`` characters."""
    return Repeat(CharClass(charsets.ANY), 1, n)


# ---------------------------------------------------------------------------------------------
# Dates and times: RFC 3339 section 5.6 and appendix A
# ---------------------------------------------------------------------------------------------

_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_FULL_DATE = f"(?:[0-9]{{4}}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_HOUR = "(?:[01][0-9]|2[0-3])"
_FRACTION = r"(?:\.[0-9]+)?"
_OFFSET = f"(?:[Zz]|[+-]{_HOUR}:[0-5][0-9])"


def _leap_second_times() -> str:
    """``hh:mm:60[.frac]offset`` where the offset agrees with a UTC time of 23:59 in the hour, and
    in the minute as far as "59 or not" goes (see FORMAT_NOTES: exactness needs the DFA to pair
    all 1440 local times with their offsets).

    Local ``hh:59`` is 23:59 UTC with offset ``+(hh+1):00`` or ``-(23-hh):00``; local ``hh:mm``,
    ``mm < 59``, with ``+hh:(mm+1)`` or ``-(23-hh):(59-mm)``, minutes 01 to 59; ``Z`` at 23:59.
    """
    minute = "(?:0[1-9]|[1-5][0-9])"
    alternatives = []
    for hour in range(24):
        at_59 = [rf"\+{(hour + 1) % 24:02d}:00", f"-{23 - hour:02d}:00"] + (["[Zz]"] if hour == 23 else [])
        before_59 = [rf"\+{hour:02d}:{minute}", f"-{23 - hour:02d}:{minute}"]
        alternatives.append(
            f"{hour:02d}:(?:59:60{_FRACTION}(?:{'|'.join(at_59)})"
            f"|(?:[0-4][0-9]|5[0-8]):60{_FRACTION}(?:{'|'.join(before_59)}))"
        )
    return "(?:" + "|".join(alternatives) + ")"


def _full_time() -> str:
    return f"(?:{_HOUR}:[0-5][0-9]:[0-5][0-9]{_FRACTION}{_OFFSET}|{_leap_second_times()})"


def _duration() -> str:
    second = "[0-9]+[Ss]"
    minute = f"[0-9]+[Mm](?:{second})?"
    hour = f"[0-9]+[Hh](?:{minute})?"
    time = f"[Tt](?:{hour}|{minute}|{second})"
    day = "[0-9]+[Dd]"
    month = f"[0-9]+[Mm](?:{day})?"
    year = f"[0-9]+[Yy](?:{month})?"
    return f"[Pp](?:(?:{day}|{month}|{year})(?:{time})?|{time}|[0-9]+[Ww])"


# ---------------------------------------------------------------------------------------------
# IP addresses
# ---------------------------------------------------------------------------------------------

_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = "[0-9A-Fa-f]{1,4}"


def _ipv6(ipv4: str, max_beside_gap: int) -> str:
    """IPv6 text forms (RFC 4291 section 2.2): eight groups, or the last two as ``ipv4``, with at
    most one ``::`` standing for the missing groups, at most ``max_beside_gap`` groups (an IPv4
    part counting two) written beside it."""

    def groups(n: int) -> str:  # n >= 1 groups, the last two possibly an IPv4 address
        tail = f"{_H16}" if n == 1 else f"(?:{_H16}:{_H16}|{ipv4})"
        return tail if n <= 2 else f"(?:{_H16}:){{{n - 2}}}{tail}"

    forms = [groups(8)]
    for right in range(max_beside_gap + 1):
        left = max_beside_gap - right
        head = "" if left == 0 else f"(?:(?:{_H16}:){{0,{left - 1}}}{_H16})?"
        forms.append(f"{head}::{groups(right) if right else ''}")
    return "(?:" + "|".join(forms) + ")"


# ---------------------------------------------------------------------------------------------
# URIs and IRIs: RFC 3986 appendix A, RFC 3987 section 2.2
# ---------------------------------------------------------------------------------------------



def _class_body(ranges: Ranges) -> str:
    """The inside of a ``[...]`` class for ``ranges``."""
    return "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)


_UCSCHAR = _class_body(
    ((0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF))
    + tuple((plane << 16, plane << 16 | 0xFFFD) for plane in range(1, 14))
    + ((0xE1000, 0xEFFFD),)
)
_IPRIVATE = _class_body(((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)))


def _uri(iri: bool, reference: bool) -> str:
    u = "A-Za-z0-9\\-._~" + (_UCSCHAR if iri else "")
    pct = "%[0-9A-Fa-f]{2}"
    sub = "!$&'()*+,;="
    pchar = f"(?:[{u}{sub}:@]|{pct})"
    segment = f"{pchar}*"
    segment_nz_nc = f"(?:[{u}{sub}@]|{pct})+"
    query = f"(?:{pchar}|[/?{_IPRIVATE if iri else ''}])*"
    fragment = f"(?:{pchar}|[/?])*"
    ip_literal = rf"\[(?:{_ipv6(_IPV4, 7)}|[Vv][0-9A-Fa-f]+\.[A-Za-z0-9\-._~{sub}:]+)\]"
    reg_name = f"(?:[{u}{sub}]|{pct})*"  # includes IPv4address
    authority = f"(?:(?:[{u}{sub}:]|{pct})*@)?(?:{ip_literal}|{reg_name})(?::[0-9]*)?"
    path_abempty = f"(?:/{segment})*"
    path_absolute = f"/(?:{pchar}+{path_abempty})?"
    rootless = f"{pchar}+{path_abempty}"
    tail = f"(?:\\?{query})?(?:#{fragment})?"
    absolute = f"[A-Za-z][A-Za-z0-9+\\-.]*:(?://{authority}{path_abempty}|{path_absolute}|{rootless}|){tail}"
    if not reference:
        return absolute
    noscheme = f"{segment_nz_nc}{path_abempty}"
    relative = f"(?://{authority}{path_abempty}|{path_absolute}|{noscheme}|){tail}"
    return f"(?:{absolute}|{relative})"


def _uri_template() -> str:
    pct = "%[0-9A-Fa-f]{2}"
    # RFC 6570 section 2.1 excludes "'", the test suite allows it (as RFC 3986 does)
    literal = f"(?:[!#$&-;=?-\\[\\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{pct})"
    varchar = f"(?:[A-Za-z0-9_]|{pct})"
    varspec = f"{varchar}(?:\\.?{varchar})*(?::[1-9][0-9]{{0,3}}|\\*)?"
    expression = f"\\{{[+#./;?&=,!@|]?{varspec}(?:,{varspec})*\\}}"
    return f"(?:{literal}|{expression})*"


# ---------------------------------------------------------------------------------------------
# Host names: RFC 1123 section 2.1, RFC 5890/5891 (A-labels)
# ---------------------------------------------------------------------------------------------

_LDH_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

# An A-label is "xn--" and Punycode (RFC 3492). Checking what it decodes to takes far more than a
# small automaton, but every valid one has this shape: an optional non-empty basic part and "-",
# then the deltas, each ending in a letter (a digit below its threshold, which is at most 26).
# The first delta's first two thresholds are 1: "a" alone would be delta 0, which inserts U+0080
# (DISALLOWED), so it is a non-"a" digit and then "a", or digits ending in a letter.
_A_LABEL = (
    "[Xx][Nn]--(?:[A-Za-z0-9-]+-)?"
    "[B-Zb-z0-9](?:[Aa]|[A-Za-z0-9]+[A-Za-z])"
)


@cache
def _a_label() -> Node:
    return intersect(parse(_A_LABEL), _upto(63))


def _hostname() -> Node:
    label = _alt(difference(parse(_LDH_LABEL), parse("[Xx][Nn]--.*")), _a_label())
    return _seq(label, _star(_seq(_cc(_chars(".")), label)))


# ---------------------------------------------------------------------------------------------
# Internationalized host names: IDNA2008 (RFC 5890 to 5893)
# ---------------------------------------------------------------------------------------------

# RFC 5892 section 2.6
_EXCEPTIONS_PVALID = _chars("\u00df\u03c2\u06fd\u06fe\u0f0b\u3007")
_EXCEPTIONS_DISALLOWED = _chars("\u0640\u07fa\u302e\u302f\u3031\u3032\u3033\u3034\u3035\u303b")
# Default_Ignorable_Code_Point (DerivedCoreProperties.txt), which unicodedata does not expose
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
# IgnorableBlocks and OldHangulJamo (RFC 5892 sections 2.4, 2.9)
_DISALLOWED_BLOCKS = (
    (0x1100, 0x11FF), (0x20D0, 0x20FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF), (0x1D100, 0x1D24F),
)
_LETTER_DIGITS = frozenset({"Ll", "Lu", "Lo", "Nd", "Lm", "Mn", "Mc"})
_BIDI_CLASSES = ("L", "R", "AL", "AN", "EN", "ES", "CS", "ET", "ON", "BN", "NSM")

# Scripts.txt: the scripts the CONTEXTO rules name (RFC 5892 appendix A.4 to A.7)
_GREEK = (
    (0x0370, 0x0373), (0x0375, 0x0377), (0x037A, 0x037D), (0x037F, 0x037F), (0x0384, 0x0384),
    (0x0386, 0x0386), (0x0388, 0x038A), (0x038C, 0x038C), (0x038E, 0x03A1), (0x03A3, 0x03E1),
    (0x03F0, 0x03FF), (0x1D26, 0x1D2A), (0x1D5D, 0x1D61), (0x1D66, 0x1D6A), (0x1DBF, 0x1DBF),
    (0x1F00, 0x1FFE), (0x2126, 0x2126), (0xAB65, 0xAB65), (0x10140, 0x101A0), (0x1D200, 0x1D245),
)
_HEBREW = ((0x0591, 0x05F4), (0xFB1D, 0xFB4F))
# Joining_Type D, L or R (ArabicShaping.txt) is a subset of Bidi_Class R or AL plus these
# (Mongolian, Phags-pa); Joining_Type T, restricted to PVALID, is a subset of Mn plus U+1E94B
_JOINING_NOT_RTL = ((0x1807, 0x1807), (0x1820, 0x18AA), (0xA840, 0xA872))
_JOINING_T_NOT_MN = ((0x1E94B, 0x1E94B),)

# CONTEXTJ and CONTEXTO code points; the Arabic digits' rules (A.8, A.9) follow from the Bidi rule
_CONTEXTUAL = charsets.union(_chars("\u00b7\u0375\u05f3\u05f4\u30fb\u200c\u200d"),
                             charsets.normalize(((0x0660, 0x0669), (0x06F0, 0x06F9))))
_TABLES_VERSION = 1  # part of the cache file name: bump it when _compute_idna_tables changes
_IDN_DOTS = _chars(".\u3002\uff0e\uff61")  # RFC 3490 section 3.1


def _compute_idna_tables() -> dict[str, list[tuple[int, int]]]:
    """PVALID per RFC 5892's derivation (section 3) from ``unicodedata``, and the properties the
    label rules need, restricted to the characters a U-label may contain."""
    ignorable = charsets.union(charsets.normalize(_DEFAULT_IGNORABLE), charsets.normalize(_DISALLOWED_BLOCKS))
    pvalid = []
    for cp in range(0x110000):
        ch = chr(cp)
        if unicodedata.category(ch) not in _LETTER_DIGITS or charsets.contains(ignorable, cp):
            continue
        if (unicodedata.decomposition(ch) or ch.casefold() != ch) and (
            unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", ch).casefold()) != ch
        ):
            continue  # Unstable
        pvalid.append(cp)
    pvalid_ranges = charsets.union(
        charsets.difference(charsets.from_code_points(pvalid), charsets.union(_EXCEPTIONS_DISALLOWED, _CONTEXTUAL)),
        _EXCEPTIONS_PVALID,
        _chars("-0123456789abcdefghijklmnopqrstuvwxyz"),
    )
    allowed = charsets.union(pvalid_ranges, _CONTEXTUAL)
    tables: dict[str, list[int]] = {name: [] for name in ("mark", "virama", "mn", *_BIDI_CLASSES)}
    for lo, hi in allowed:
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            category = unicodedata.category(ch)
            if category.startswith("M"):
                tables["mark"].append(cp)
            if category == "Mn":
                tables["mn"].append(cp)
            if unicodedata.combining(ch) == 9:
                tables["virama"].append(cp)
            tables.setdefault(unicodedata.bidirectional(ch), []).append(cp)
    result = {name: list(charsets.from_code_points(cps)) for name, cps in tables.items()}
    result["pvalid"] = list(pvalid_ranges)
    return result


@cache
def _idna_tables() -> dict[str, Ranges]:
    version = f"py{sys.version_info[0]}.{sys.version_info[1]}-ucd{unicodedata.unidata_version}"
    name = f"{version}-idna2008-v{_TABLES_VERSION}.json"
    rows = cached_json("unicode", name, _compute_idna_tables)
    return {key: tuple((int(lo), int(hi)) for lo, hi in value) for key, value in rows.items()}


def _bidi(*classes: str) -> Ranges:
    tables = _idna_tables()
    return charsets.union(*(tables[c] for c in classes))


@cache
def _u_label() -> Node:
    """A U-label (a label with a non-ASCII character) that satisfies IDNA2008's rules, each
    written as a small language and intersected (see :data:`FORMAT_NOTES` for those left out)."""
    t = _idna_tables()
    allowed = charsets.union(t["pvalid"], _CONTEXTUAL)
    anything = _star(_cc(allowed))

    def but(ranges: Ranges) -> CharClass:
        return _cc(charsets.difference(allowed, ranges))

    def within(ranges: Ranges) -> CharClass:
        return _cc(charsets.intersection(allowed, ranges))

    def each(special: str, *contexts: Node) -> Node:
        """Strings in which every character of ``special`` is inside one of ``contexts``."""
        return _star(_alt(but(_chars(special)), *contexts))

    def char(c: str) -> CharClass:
        return _cc(_chars(c))

    virama = _cc(t["virama"])
    joining = within(charsets.union(_bidi("R", "AL"), charsets.normalize(_JOINING_NOT_RTL)))
    transparent = _star(within(charsets.union(t["mn"], _JOINING_T_NOT_MN)))
    greek = charsets.difference(charsets.normalize(_GREEK), _chars("\u0375"))
    hebrew = charsets.difference(charsets.normalize(_HEBREW), _chars("\u05f3\u05f4"))
    nsm = _star(_cc(_bidi("NSM")))
    rtl_shape = _seq(  # RFC 5893 rules 1 to 3
        _cc(_bidi("R", "AL")),
        _opt(_seq(_star(_cc(_bidi("R", "AL", "AN", "EN", "ES", "CS", "ET", "ON", "BN", "NSM"))),
                  _cc(_bidi("R", "AL", "EN", "AN")))),
        nsm,
    )
    one_number_kind = _alt(_star(but(_bidi("EN"))), _star(but(_bidi("AN"))))  # rule 4
    return intersect(
        _seq(but(charsets.union(t["mark"], _chars("-"))), anything),  # RFC 5891 4.2.3.1, 4.2.3.2
        _seq(anything, but(_chars("-"))),
        _alt(_upto(3), parse("..(?:[^-].|-[^-]).*", re.DOTALL)),  # no "--" in positions 3 and 4
        _seq(anything, but(((0, 0x7F),)), anything),
        # RFC 5892 appendix A: CONTEXTJ and CONTEXTO rules
        each("\u200c", _seq(virama, char("\u200c")),
             _seq(joining, _plus(_seq(transparent, char("\u200c"), transparent, joining)))),
        each("\u200d", _seq(virama, char("\u200d"))),
        each("\u00b7l", _seq(char("l"), _star(_seq(char("\u00b7"), char("l"))))),
        each("\u0375", _seq(_plus(char("\u0375")), within(greek))),
        each("\u05f3\u05f4", _seq(within(hebrew), _plus(char("\u05f3\u05f4")))),
        # RFC 5893, label by label: no right-to-left character, or an RTL label
        _alt(_star(but(_bidi("R", "AL", "AN"))), intersect(rtl_shape, one_number_kind)),
    )


def _idn_hostname() -> Node:
    plain = difference(parse(_LDH_LABEL), parse("..--.*"))  # IDNA2008: "--" there only in A-labels
    label = _alt(plain, _a_label(), _u_label())
    return _seq(label, _star(_seq(_cc(_IDN_DOTS), label)))


# ---------------------------------------------------------------------------------------------
# E-mail addresses: RFC 5321 section 4.1.2 (Mailbox), RFC 6531 section 3.3 (UTF-8 extension)
# ---------------------------------------------------------------------------------------------

_SNUM = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]{1,2})"  # 1*3DIGIT up to 255: leading zeros allowed
_SMTP_IPV4 = rf"{_SNUM}(?:\.{_SNUM}){{3}}"
_ADDRESS_LITERAL = rf"\[(?:{_SMTP_IPV4}|[Ii][Pp][Vv]6:{_ipv6(_SMTP_IPV4, 6)})\]"
_SUB_DOMAIN = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_UTF8_NON_ASCII = "\\x80-\\U0010ffff"


def _local_part(non_ascii: str) -> str:
    atext = f"[A-Za-z0-9!#$%&'*+\\-/=?^_`{{|}}~{non_ascii}]"
    quoted = f'"(?:[ !#-\\[\\]-~{non_ascii}]|\\\\[ -~])*"'
    return f"(?:{atext}+(?:\\.{atext}+)*|{quoted})"


def _email() -> Node:
    return parse(f"{_local_part('')}@(?:{_SUB_DOMAIN}(?:\\.{_SUB_DOMAIN})*|{_ADDRESS_LITERAL})")


def _idn_email() -> Node:
    sub_domain = _alt(parse(_SUB_DOMAIN), _u_label())
    domain = _seq(sub_domain, _star(_seq(_cc(_chars(".")), sub_domain)))
    return _seq(parse(f"{_local_part(_UTF8_NON_ASCII)}@"), _alt(domain, parse(_ADDRESS_LITERAL)))


# ---------------------------------------------------------------------------------------------
# JSON Pointers: RFC 6901, draft-bhutton-relative-json-pointer-00
# ---------------------------------------------------------------------------------------------

REGEX_FORMAT_DEPTH = 8
"""Group nesting up to which the ``regex`` format checks that parentheses balance."""


def _regex_superset(depth: int = REGEX_FORMAT_DEPTH) -> str:
    """Regular expressions from above, by their structure, so that a pattern valid as ECMA-262
    (the format's dialect) or as Python's ``re`` (what jsonschema checks it with) is accepted: an
    escape takes the next character, a character class runs to its first unescaped ``]``, and
    parentheses balance up to ``depth`` levels of nesting. Past the first construct where the two
    dialects part ways or the structure stops being regular, anything is accepted: a ``]`` right
    after ``[`` or ``[^`` (literal in Python, an empty class in ECMA-262), a Python comment
    ``(?#...)`` or verbose flag (``(?x)``, ``(?x:``), a group opened deeper than ``depth``.
    (Reading both dialects in parallel instead multiplies the automaton by about 5 per level.)
    Refused: ``(a``, ``a)``, ``[a``, a trailing ``\\`` and the like."""
    atom = r"[^\\()\[]|\\[\s\S]|\[(?:[^\]\\]|\\[\s\S])*\]"
    anything_after = r"\(\?[aiLmsux]*x[-aiLmsux]*[):]|\(\?#|\[\^?\]"
    balanced = [f"(?:{atom})*"]  # balanced[k]: groups nested at most k deep
    for _ in range(depth):
        balanced.append(rf"(?:{atom}|\({balanced[-1]}\))*")
    # a prefix with groups left open, up to the first construct past which anything goes
    opened = rf"{balanced[0]}(?:{anything_after}|\()"
    for k in range(1, depth + 1):
        opened = rf"{balanced[k]}(?:{anything_after}|\({opened})"
    return rf"{balanced[depth]}|{opened}[\s\S]*"


_JSON_POINTER = "(?:/(?:[^/~]|~[01])*)*"
_NON_NEGATIVE = "(?:0|[1-9][0-9]*)"
_RELATIVE_JSON_POINTER = f"{_NON_NEGATIVE}(?:[+-]{_NON_NEGATIVE})?(?:#|{_JSON_POINTER})"

# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------

_BUILDERS: dict[str, Callable[[], Node]] = {
    "date-time": lambda: parse(f"{_FULL_DATE}[Tt]{_full_time()}"),
    "date": lambda: parse(_FULL_DATE),
    "time": lambda: parse(_full_time()),
    "duration": lambda: parse(_duration()),
    "email": _email,
    "idn-email": _idn_email,
    "hostname": _hostname,
    "idn-hostname": _idn_hostname,
    "ipv4": lambda: parse(_IPV4),
    "ipv6": lambda: parse(_ipv6(_IPV4, 7)),
    "uri": lambda: parse(_uri(iri=False, reference=False)),
    "uri-reference": lambda: parse(_uri(iri=False, reference=True)),
    "iri": lambda: parse(_uri(iri=True, reference=False)),
    "iri-reference": lambda: parse(_uri(iri=True, reference=True)),
    "uri-template": lambda: parse(_uri_template()),
    "uuid": lambda: parse("[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}"),
    "json-pointer": lambda: parse(_JSON_POINTER),
    "relative-json-pointer": lambda: parse(_RELATIVE_JSON_POINTER),
    "regex": lambda: parse(_regex_superset()),
}

SUPPORTED_FORMATS: tuple[str, ...] = tuple(_BUILDERS)
"""The format names :func:`format_node` knows."""

FORMAT_NOTES: Mapping[str, str] = MappingProxyType({
    "date-time": (
        "Leap seconds as for time, on any date (RFC 3339 allows them only at the end of a month "
        "that had one, which the test suite does not check either)."
    ),
    "time": (
        "A leap second (:60) is accepted when its offset agrees with 23:59 UTC in the hour, and "
        "in the minutes as far as ':59 or not' goes, so 15:58:60-08:02 (00:00 UTC) is accepted. "
        "Pairing each local minute with its offset exactly is regular but takes about 11,000 DFA "
        "states instead of 500."
    ),
    "duration": (
        "The designators (P, Y, M, W, D, T, H, S) are case-insensitive, as ABNF strings are "
        "(RFC 5234 section 2.3)."
    ),
    "email": (
        "The size limits of RFC 5321 section 4.5.3.1 (local part 64, domain 255 octets) are not "
        "checked: longer addresses are accepted. Address literals: IPv4, and IPv6 after the tag "
        "'IPv6:' (case-insensitive), the only one registered."
    ),
    "idn-email": (
        "RFC 6531 over RFC 5321; domain labels are RFC 5321 sub-domains or U-labels as for "
        "idn-hostname, with its deviations; size limits are not checked."
    ),
    "hostname": (
        "The 253-character limit on the whole name is not checked (longer names are accepted): "
        "the exact automaton has about 79,000 states instead of 400. "
        "A label starting with 'xn--' must have the shape of valid Punycode, but is not decoded: "
        "A-labels of U-labels that break IDNA2008 rules are accepted."
    ),
    "idn-hostname": (
        "IDNA2008 checked on the characters: PVALID code points (RFC 5892's derivation from the "
        "running Python's Unicode database), '.', U+3002, U+FF0E and U+FF61 as separators, the "
        "hyphen and leading-mark rules, the CONTEXTJ and CONTEXTO rules (joining types "
        "approximated from above: Bidi class R or AL, Mongolian, Phags-pa) and the Bidi rule "
        "label by label. Accepted though invalid: U-labels whose A-label exceeds 63 characters "
        "and names over 253 characters (counting multiplies the Unicode automaton), labels not in "
        "NFC, a KATAKANA MIDDLE DOT in a label without Hiragana, Katakana or Han (the rule more "
        "than doubles the automaton), labels that break the Bidi rule only because another label "
        "is right-to-left (the idna package checks label by label too), and A-labels as for "
        "hostname."
    ),
    "uri-template": (
        "An apostrophe is accepted in literals (RFC 6570's ABNF excludes it; the test suite "
        "requires it). The reserved operators = , ! @ | are accepted, as the ABNF has them."
    ),
    "relative-json-pointer": (
        "Index manipulation ('0+1', '1-2/a', JSON Schema 2020-12's draft) is accepted; the draft "
        "7 version of the format has none."
    ),
    "regex": (
        "Regular expressions are not a regular language; only their structure is checked, so "
        "that what ECMA-262 or Python's re accepts is accepted: parentheses balance (up to 8 "
        "levels of nesting), character classes are closed, and the pattern does not end inside "
        "an escape. Past a group nested deeper, a ']' right after '[' or '[^', '(?#' or a verbose "
        "flag '(?x)', anything is accepted. Misplaced quantifiers, bad escapes (\\a), "
        "Python-only syntax ((?P<name>...), (?i)) and reversed class ranges are accepted."
    ),
})
"""Per format: where and why its language differs from the RFC's (or is not supported)."""

APPROXIMATE_FORMATS: frozenset[str] = frozenset(
    {"date-time", "time", "email", "idn-email", "hostname", "idn-hostname", "regex"}
)
"""The formats whose language also has some invalid values (:data:`FORMAT_NOTES` says which): a
schema using one is enforced loosely there, a relaxation to report."""


def format_node(name: str) -> Node | None:
    """The language of valid string values (decoded code points) of format ``name``, or None for
    a format that is not supported (a name this module does not know). Built once per name."""
    return _build(name) if name in _BUILDERS else None


@cache
def _build(name: str) -> Node:
    return _BUILDERS[name]()
