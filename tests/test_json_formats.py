"""Tests for ``logitgate.json_schema.formats``: the languages of the JSON Schema ``format`` values.

Oracles:

* the official JSON-Schema-Test-Suite (``optional/format/*`` of draft 2020-12 and draft 7): every
  string instance is accepted exactly when it is valid, except the over-acceptances listed in
  :data:`KNOWN_OVER_ACCEPTED` (never a rejected valid value);
* Python's own checkers (``ipaddress``, ``uuid``, ``datetime`` through jsonschema's
  ``FormatChecker``, and the ``idna`` package for IDNA2008), compared on generated strings;
* values generated from the RFC grammars (written here independently, as hypothesis strategies),
  which must all be accepted.
"""
from __future__ import annotations

import datetime
import functools
import ipaddress
import json
import re
import unicodedata
import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata.dfa import ByteDFA, regex_dfa
from logitgate.json_schema import formats
from logitgate.json_schema.formats import APPROXIMATE_FORMATS, FORMAT_NOTES, SUPPORTED_FORMATS, format_node
from logitgate.regex import charsets
from tests.conftest import SHARED_DATA

SUITE = SHARED_DATA / "json-schema-test-suite"
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def dfa(name: str) -> ByteDFA:
    node = format_node(name)
    assert node is not None
    return regex_dfa(node)


def accepts(name: str, value: str) -> bool:
    try:
        data = value.encode()
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 text, so never generated
        return False
    return dfa(name).matches(data)


# ---------------------------------------------------------------------------------------------
# The official test suite
# ---------------------------------------------------------------------------------------------

_A_LABEL = "the A-label is checked for Punycode shape only, not decoded"
KNOWN_OVER_ACCEPTED: dict[tuple[str, str], str] = {
    ("hostname", "exceeds maximum overall length (256)"): "total length not checked",
    **{
        ("hostname", description): _A_LABEL
        for description in (
            "contains illegal char U+302E Hangul single dot tone mark",
            "Begins with a Spacing Combining Mark",
            "Begins with a Nonspacing Mark",
            "Begins with an Enclosing Mark",
            "Exceptions that are DISALLOWED, right-to-left chars",
            "Exceptions that are DISALLOWED, left-to-right chars",
            "MIDDLE DOT with no preceding 'l'",
            "MIDDLE DOT with nothing preceding",
            "MIDDLE DOT with no following 'l'",
            "MIDDLE DOT with nothing following",
            "Greek KERAIA not followed by Greek",
            "Greek KERAIA not followed by anything",
            "Hebrew GERESH not preceded by Hebrew",
            "Hebrew GERESH not preceded by anything",
            "Hebrew GERSHAYIM not preceded by Hebrew",
            "Hebrew GERSHAYIM not preceded by anything",
            "KATAKANA MIDDLE DOT with no Hiragana, Katakana, or Han",
            "KATAKANA MIDDLE DOT with no other characters",
            "Arabic-Indic digits mixed with Extended Arabic-Indic digits",
            "ZERO WIDTH JOINER not preceded by Virama",
            "ZERO WIDTH JOINER not preceded by anything",
            'contains "--" in the 3rd and 4th position',
        )
    },
    ("idn-hostname", 'U-label contains "--" in the 3rd and 4th position'): _A_LABEL,
    ("idn-hostname", "A-label that decodes to a disallowed code point is invalid"): _A_LABEL,
    ("idn-hostname", "A-label that decodes to a Bidi rule violation is invalid"): _A_LABEL,
    ("idn-hostname", "KATAKANA MIDDLE DOT with no Hiragana, Katakana, or Han"): "CONTEXTO rule A.7 left out",
    ("idn-hostname", "KATAKANA MIDDLE DOT with no other characters"): "CONTEXTO rule A.7 left out",
    ("idn-hostname", "Bidi domain name with a digit-first label is invalid"): "Bidi rule checked per label",
    ("idn-hostname", "a U-label whose A-label form is longer than 63 octets is invalid"): "U-label length not checked",
    ("idn-hostname", "a name longer than 253 characters is invalid"): "total length not checked",
    **{
        ("regex", description): "structure only, in a reading that accepts Python's re too"
        for description in (
            "when used as a pattern",
            "Python named group (?P<name>...) is not ECMA 262",
            "Python named backreference (?P=name) is not ECMA 262",
            "inline comment group (?#...) is not ECMA 262",
            "a single global inline flag (?i)",
            "multiple global inline flags (?ims)",
        )
    },
}


def _suite_cases() -> list[tuple[str, str, str, bool]]:
    """``(format, description, data, valid)`` for the string instances of the groups of
    ``optional/format/*`` whose schema is just a format."""
    cases = []
    for file in ("draft2020-12.jsonl", "draft7.jsonl"):
        path = SUITE / file
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line:
                continue
            group = json.loads(line)
            schema = group["schema"]
            if "/optional/format/" not in group["file"] or set(schema) - {"format", "$schema"}:
                continue
            cases += [
                (schema["format"], test["description"], test["data"], test["valid"])
                for test in group["tests"]
                if isinstance(test["data"], str)
            ]
    return cases


SUITE_CASES = _suite_cases()


@pytest.mark.skipif(not SUITE_CASES, reason="shared/data/json-schema-test-suite not found")
@pytest.mark.parametrize(("name", "description", "data", "valid"), SUITE_CASES,
                         ids=[f"{name}: {description}" for name, description, _, _ in SUITE_CASES])
def test_official_suite(name: str, description: str, data: str, valid: bool) -> None:
    if name not in SUPPORTED_FORMATS:
        assert format_node(name) is None  # unknown: the caller reports it
        return
    if (name, description) in KNOWN_OVER_ACCEPTED:
        assert not valid and accepts(name, data), "a known deviation must be an over-acceptance"
        return
    assert accepts(name, data) == valid


def test_known_deviations_are_in_the_suite() -> None:
    if not SUITE_CASES:
        pytest.skip("shared/data/json-schema-test-suite not found")
    seen = {(name, description) for name, description, _, _ in SUITE_CASES}
    assert set(KNOWN_OVER_ACCEPTED) <= seen


# ---------------------------------------------------------------------------------------------
# Module contract
# ---------------------------------------------------------------------------------------------


def test_registry() -> None:
    assert format_node("no-such-format") is None
    assert "regex" in SUPPORTED_FORMATS and "regex" in APPROXIMATE_FORMATS
    assert set(FORMAT_NOTES) <= set(SUPPORTED_FORMATS)
    assert APPROXIMATE_FORMATS <= set(FORMAT_NOTES)
    assert {name for name, _ in KNOWN_OVER_ACCEPTED} <= APPROXIMATE_FORMATS
    assert format_node("ipv4") is format_node("ipv4")


@pytest.mark.parametrize("name", SUPPORTED_FORMATS)
def test_dfa_size(name: str) -> None:
    automaton = dfa(name)
    assert 0 < automaton.n_states < 10_000


# ---------------------------------------------------------------------------------------------
# Against Python's checkers
# ---------------------------------------------------------------------------------------------


def _python_accepts(name: str, value: str) -> bool:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.FormatChecker().conforms(value, name)


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_ipv4_addresses(n: int) -> None:
    assert accepts("ipv4", str(ipaddress.IPv4Address(n)))


@SETTINGS
@given(st.text("0123456789.x+ ", max_size=16) | st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,4}){1,4}", fullmatch=True))
def test_ipv4_like_python(value: str) -> None:
    assert accepts("ipv4", value) == _python_accepts("ipv4", value)


@SETTINGS
@given(st.integers(0, 2**128 - 1), st.integers(0, 2**32 - 1), st.booleans())
def test_ipv6_addresses(n: int, v4: int, upper: bool) -> None:
    address = ipaddress.IPv6Address(n)
    ipv4 = ipaddress.IPv4Address(v4)
    mixed = (f"{address.exploded[:30]}{ipv4}", f"::ffff:{ipv4}", f"64:ff9b::{ipv4}")
    for form in (address.compressed, address.exploded, *mixed):
        assert accepts("ipv6", form.upper() if upper else form), form


@SETTINGS
@given(st.from_regex(r"([0-9a-fA-F]{0,5}:{1,3}){1,9}([0-9a-f]{0,5}|[0-9]{1,3}(\.[0-9]{1,3}){0,4})", fullmatch=True))
def test_ipv6_like_python(value: str) -> None:
    assert accepts("ipv6", value) == _python_accepts("ipv6", value)


@SETTINGS
@given(st.integers(0, 2**128 - 1), st.sampled_from([str.lower, str.upper, str.swapcase]))
def test_uuids(n: int, case: Callable[[str], str]) -> None:
    assert accepts("uuid", case(str(uuid.UUID(int=n))))


@SETTINGS
@given(st.text("0123456789abcdefABCDEF-", min_size=35, max_size=37))
def test_uuid_like_python(value: str) -> None:
    assert accepts("uuid", value) == _python_accepts("uuid", value)


@SETTINGS
@given(st.dates())
def test_dates(day: datetime.date) -> None:
    assert accepts("date", day.isoformat())


@SETTINGS
@given(st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", fullmatch=True))
def test_date_like_python(value: str) -> None:
    if value.startswith("0000"):  # year 0 is valid in RFC 3339, not in Python
        assert accepts("date", value) == accepts("date", "2000" + value[4:])
    else:
        assert accepts("date", value) == _python_accepts("date", value)


def test_leap_years() -> None:
    for year in range(10_000):
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        assert accepts("date", f"{year:04d}-02-29") == leap, year


# ---------------------------------------------------------------------------------------------
# Times
# ---------------------------------------------------------------------------------------------


def _offset(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@SETTINGS
@given(
    st.datetimes(),
    st.integers(-1439, 1439),
    st.sampled_from(["", ".5", ".000", ".123456789012345"]),
    st.booleans(),
    st.sampled_from(["T", "t"]),
)
def test_date_times(moment: datetime.datetime, offset: int, fraction: str, zulu: bool, t: str) -> None:
    zone = "Z" if zulu else _offset(offset)
    time = f"{moment:%H:%M:%S}{fraction}{zone}"
    assert accepts("time", time)
    assert accepts("date-time", f"{moment.date().isoformat()}{t}{time}")


def test_every_leap_second_is_accepted() -> None:
    """Every local time and offset that is 23:59:60 UTC, with and without a fraction."""
    for offset in range(-1439, 1440):
        local = (23 * 60 + 59 + offset) % 1440
        for zone in [_offset(offset)] + (["-00:00", "Z", "z"] if offset == 0 else []):
            time = f"{local // 60:02d}:{local % 60:02d}:60{zone}"
            assert accepts("time", time), time
            assert accepts("date-time", f"1998-12-31T{time[:8]}.25{time[8:]}")


def _check_leap_second_approximation(locals_: list[int], offsets: list[int]) -> None:
    """Exactly the deviation FORMAT_NOTES describes: a leap second is accepted when moving its
    local minute, without crossing :59, would make it 23:59 UTC."""
    automaton = dfa("time")
    for local in locals_:
        hour, minute = divmod(local, 60)
        same_side = range(59, 60) if minute == 59 else range(59)
        state = automaton.step(automaton.start, f"{hour:02d}:{minute:02d}:60".encode())
        for offset in offsets:
            expected = (1439 + offset - hour * 60) % 1440 in same_side  # the minute that would be exact
            accepted = automaton.is_accepting(automaton.step(state, _offset(offset).encode()))
            assert accepted == expected, (local, offset)


def test_leap_second_approximation() -> None:
    _check_leap_second_approximation(
        sorted({*range(0, 1440, 7), *range(59, 1440, 60)}), sorted({*range(-1439, 1440, 13), *range(-1380, 1440, 60)})
    )


@pytest.mark.slow
def test_leap_second_approximation_exhaustive() -> None:
    _check_leap_second_approximation(list(range(1440)), list(range(-1439, 1440)))


# ---------------------------------------------------------------------------------------------
# Grammar-generated values that must be accepted
# ---------------------------------------------------------------------------------------------

_DIGITS = st.text("0123456789", min_size=1, max_size=4)


@SETTINGS
@given(st.data())
def test_durations(data: st.DataObject) -> None:
    """RFC 3339 appendix A, one production at a time."""
    def unit(letter: str) -> str:
        return data.draw(_DIGITS) + data.draw(st.sampled_from([letter, letter.lower()]))

    kind = data.draw(st.sampled_from(["date", "time", "week"]))
    if kind == "week":
        body = unit("W")
    else:
        time_units = data.draw(st.sampled_from([["H"], ["H", "M"], ["H", "M", "S"], ["M"], ["M", "S"], ["S"]]))
        time = "T" + "".join(unit(u) for u in time_units)
        if kind == "time":
            body = time
        else:
            date_units = data.draw(st.sampled_from([["D"], ["M"], ["M", "D"], ["Y"], ["Y", "M"], ["Y", "M", "D"]]))
            body = "".join(unit(u) for u in date_units) + data.draw(st.sampled_from(["", time]))
    assert accepts("duration", data.draw(st.sampled_from(["P", "p"])) + body)


_ALPHA = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LDH_LABELS = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?", fullmatch=True).filter(
    lambda label: label[2:4] != "--"
)
_DOMAINS = st.lists(_LDH_LABELS, min_size=1, max_size=4).map(".".join)


@SETTINGS
@given(_DOMAINS)
def test_hostnames(name: str) -> None:
    assert accepts("hostname", name)
    assert accepts("idn-hostname", name)


_IPV4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
_IPV6 = st.integers(0, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n)))


@SETTINGS
@given(st.data())
def test_emails(data: st.DataObject) -> None:
    """RFC 5321 Mailbox."""
    atext = _ALPHA + "0123456789!#$%&'*+-/=?^_`{|}~"
    dot_string = st.lists(st.text(atext, min_size=1, max_size=5), min_size=1, max_size=3).map(".".join)
    printable = [chr(c) for c in range(32, 127)]
    qcontent = st.sampled_from([c for c in printable if c not in '"\\']) | st.sampled_from(printable).map("\\".__add__)
    quoted = st.lists(qcontent, max_size=5).map(lambda parts: '"' + "".join(parts) + '"')
    literal = _IPV4.map(lambda a: f"[{a}]") | _IPV6.map(lambda a: f"[IPv6:{a}]")
    local = data.draw(dot_string | quoted)
    address = f"{local}@{data.draw(_DOMAINS | literal)}"  # Python writes "::" for 2 groups or more
    assert accepts("email", address), address
    assert accepts("idn-email", address), address


@SETTINGS
@given(
    st.lists(st.text(st.characters(codec="utf-8", min_codepoint=0x80) | st.sampled_from("ab9!~"), min_size=1,
                     max_size=4), min_size=1, max_size=3).map(".".join),
    st.sampled_from(["\uc2e4\ub840.\ud14c\uc2a4\ud2b8", "b\u00fccher.example", "\u05d0\u05d1.com", "xn--4gbwdl.io"]),
)
def test_idn_emails(local: str, domain: str) -> None:
    """RFC 6531: any non-ASCII character in the local part, U-labels in the domain."""
    address = f"{local}@{domain}"
    assert accepts("idn-email", address)
    assert accepts("idn-email", f'"{local}"@{domain}')
    assert accepts("email", address) == address.isascii()


_UNRESERVED = _ALPHA + "0123456789-._~"
_SUB_DELIMS = "!$&'()*+,;="
_PCT = st.integers(0, 255).map(lambda b: f"%{b:02X}")


def _text(
    chars: str, min_size: int = 0, max_size: int = 6, extra: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[str]:
    """Strings of ``chars``, percent-encoded octets and ``extra``."""
    piece = st.text(chars, min_size=1, max_size=1) | _PCT
    if extra is not None:
        piece |= extra
    return st.lists(piece, min_size=min_size, max_size=max_size).map("".join)


def _uri_strategies(ucschar: st.SearchStrategy[str] | None, iprivate: st.SearchStrategy[str] | None):
    """Absolute URIs and relative references: RFC 3986 appendix A (RFC 3987 section 2.2 with
    ``ucschar`` and ``iprivate``)."""
    pchar = _UNRESERVED + _SUB_DELIMS + ":@"
    scheme = st.from_regex(r"[a-zA-Z][a-zA-Z0-9+.-]{0,5}", fullmatch=True)
    userinfo = _text(_UNRESERVED + _SUB_DELIMS + ":", extra=ucschar).map(lambda u: u + "@")
    ipvfuture = st.from_regex(r"[vV][0-9a-fA-F]{1,3}\.[a-zA-Z0-9:!$&'()*+,;=._~-]{1,5}", fullmatch=True)
    host = _text(_UNRESERVED + _SUB_DELIMS, extra=ucschar) | _IPV4 | (_IPV6 | ipvfuture).map(lambda a: f"[{a}]")
    port = st.text("0123456789", max_size=5).map(lambda p: ":" + p)
    authority = st.tuples(st.just("") | userinfo, host, st.just("") | port).map("".join)
    abempty = st.lists(_text(pchar, extra=ucschar).map(lambda s: "/" + s), max_size=3).map("".join)
    rootless = st.tuples(_text(pchar, min_size=1, extra=ucschar), abempty).map("".join)
    noscheme = st.tuples(_text(_UNRESERVED + _SUB_DELIMS + "@", min_size=1, extra=ucschar), abempty).map("".join)
    network = st.tuples(st.just("//"), authority, abempty).map("".join)
    absolute_path = st.just("/") | rootless.map(lambda p: "/" + p)
    query = _text(pchar + "/?", extra=ucschar if iprivate is None else ucschar | iprivate).map(lambda q: "?" + q)
    fragment = _text(pchar + "/?", extra=ucschar).map(lambda f: "#" + f)
    tail = st.tuples(st.just("") | query, st.just("") | fragment).map("".join)
    absolute = st.tuples(scheme, st.just(":"), network | absolute_path | rootless | st.just(""), tail).map("".join)
    relative = st.tuples(network | absolute_path | noscheme | st.just(""), tail).map("".join)
    return absolute, relative


def _is_ucschar(c: str) -> bool:
    cp = ord(c)
    if cp < 0x10000:
        return 0xA0 <= cp <= 0xD7FF or 0xF900 <= cp <= 0xFDCF or 0xFDF0 <= cp <= 0xFFEF
    return cp & 0xFFFF <= 0xFFFD and cp < 0xE0000 or 0xE1000 <= cp <= 0xEFFFD


_UCSCHAR = st.characters(codec="utf-8").filter(_is_ucschar)
_IPRIVATE = st.characters(min_codepoint=0xE000, max_codepoint=0xF8FF) | st.characters(
    min_codepoint=0xF0000, max_codepoint=0xFFFFD
)
_URIS = _uri_strategies(None, None)
_IRIS = _uri_strategies(_UCSCHAR, _IPRIVATE)


@SETTINGS
@given(_URIS[0])
def test_uris(value: str) -> None:
    for name in ("uri", "uri-reference", "iri", "iri-reference"):
        assert accepts(name, value), (name, value)


@SETTINGS
@given(_URIS[1])
def test_relative_uri_references(value: str) -> None:
    assert accepts("uri-reference", value)
    assert accepts("iri-reference", value)


@SETTINGS
@given(_IRIS[0])
def test_iris(value: str) -> None:
    assert accepts("iri", value)
    assert accepts("iri-reference", value)


@SETTINGS
@given(_IRIS[1])
def test_relative_iri_references(value: str) -> None:
    assert accepts("iri-reference", value)


@SETTINGS
@given(st.data())
def test_uri_templates(data: st.DataObject) -> None:
    """RFC 6570 section 2, level 4."""
    varchar = st.text(_ALPHA + "0123456789_", min_size=1, max_size=1) | _PCT
    varname = st.lists(st.tuples(st.sampled_from(["", "."]), varchar), max_size=3).map(
        lambda parts: "".join(dot + c for dot, c in parts)
    )
    varname = st.tuples(varchar, varname).map("".join)
    modifier = st.just("") | st.just("*") | st.integers(1, 9999).map(lambda n: f":{n}")
    varspec = st.tuples(varname, modifier).map("".join)
    expression = st.tuples(
        st.sampled_from(list("+#./;?&=,!@|") + [""]), st.lists(varspec, min_size=1, max_size=3).map(",".join)
    ).map(lambda parts: "{" + parts[0] + parts[1] + "}")
    literal = _text("!#$&'()*+,-./0123456789:;=?@ABCXYZ[]_abcxyz~", min_size=1, extra=_UCSCHAR | _IPRIVATE)
    template = "".join(data.draw(st.lists(literal | expression, max_size=4)))
    assert accepts("uri-template", template), template


def _json_pointer_ok(value: str) -> bool:
    """RFC 6901, written out: empty, or "/" tokens where "~" is followed by 0 or 1."""
    return value == "" or (value.startswith("/") and all(
        re.fullmatch(r"(?:[^~]|~[01])*", token, re.DOTALL) for token in value[1:].split("/")
    ))


@SETTINGS
@given(st.text("/~01a#-+9\n", max_size=10))
def test_json_pointers(value: str) -> None:
    assert accepts("json-pointer", value) == _json_pointer_ok(value)
    number = re.match(r"(0|[1-9][0-9]*)([+-](0|[1-9][0-9]*))?", value)
    rest = value[number.end():] if number else None
    expected = rest is not None and (rest == "#" or _json_pointer_ok(rest))
    assert accepts("relative-json-pointer", value) == expected


# ---------------------------------------------------------------------------------------------
# IDNA2008 against the idna package
# ---------------------------------------------------------------------------------------------


def test_pvalid_matches_idna() -> None:
    """Our PVALID (derived from unicodedata) is the idna package's, on the code points the
    running Python has assigned."""
    idnadata = pytest.importorskip("idna.idnadata")
    theirs = charsets.normalize((r >> 32, (r & 0xFFFFFFFF) - 1) for r in idnadata.codepoint_classes["PVALID"])
    assigned = charsets.complement(charsets.from_code_points(
        cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) == "Cn"
    ))
    ours = formats._idna_tables()["pvalid"]
    assert charsets.intersection(theirs, assigned) == ours


_SCRIPTS = (  # per script, the characters IDNA2008's rules are about, and some plain ones
    "abcxyzl-0123456789A\u00e9\u00df\u00fc\u00b7\u0300",  # Latin, MIDDLE DOT, a mark
    "\u03b1\u03b2\u03c2\u0375\u0301\u0391-0",  # Greek, KERAIA
    "\u05d0\u05d1\u05f3\u05f4\u0591\u05b0-0",  # Hebrew, GERESH, GERSHAYIM, points
    "\u0627\u0628\u064a\u0640\u0660\u0661\u06f0\u06f1\u064b\u200c-0",  # Arabic, digits, ZWNJ
    "\u0915\u0937\u094d\u0903\u200c\u200d-a",  # Devanagari, virama, joiners
    "\u3041\u30a1\u4e08\u30fb\u3007\u302e\uc2e4\ub840a",  # Kana, Han, Hangul
    "\u1820\u1821\u1885\u200c",  # Mongolian
)
_IDN_LABELS = st.sampled_from(_SCRIPTS).flatmap(lambda chars: st.text(chars, min_size=1, max_size=8))


@SETTINGS
@given(st.lists(_IDN_LABELS, min_size=1, max_size=3).map(".".join))
def test_idn_hostnames_idna_accepts(name: str) -> None:
    """Whatever the idna package accepts is accepted (it checks more: lengths, NFC, A-labels)."""
    if _python_accepts("idn-hostname", name):
        assert accepts("idn-hostname", name), name


@SETTINGS
@given(_IDN_LABELS)
def test_a_labels(label: str) -> None:
    """The A-label of every valid U-label has the Punycode shape hostname requires."""
    idna = pytest.importorskip("idna")
    try:
        a_label = idna.encode(label).decode()
    except idna.IDNAError:
        return
    for name in ("hostname", "idn-hostname"):
        assert accepts(name, a_label), (name, label, a_label)
        assert accepts(name, a_label.upper()), (name, label, a_label)


# ---------------------------------------------------------------------------------------------
# regex: checked from above, on structure
# ---------------------------------------------------------------------------------------------

_REGEX_CHARS = st.sampled_from(list("ab()[]\\^$*+?.|{},-:=!<>#\n ")
                               + ["(?:", "(?=", "(?<n>", "\\d", "[^", "(?#", "(?x)", "(?x:", "(?P<n>", "(?i)"])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_REGEX_CHARS, max_size=14).map("".join))
def test_regex_format_never_refuses_a_pattern_python_compiles(pattern: str) -> None:
    """Python's ``re`` (jsonschema's checker for this format) as the oracle from one side: every
    pattern it compiles is accepted, Python-only forms included (comments, verbose mode, a
    leading ``]`` in a class)."""
    import re
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning: possible nested set
        try:
            re.compile(pattern)
        except re.error:
            return
    assert accepts("regex", pattern), pattern


@pytest.mark.parametrize("pattern", ["(a", "a)", "[a", "a\\", "((a)", "(a))", "(?:[)", "x(y[z)]", "[^a"])
def test_regex_format_refuses_unbalanced_structure(pattern: str) -> None:
    import re

    with pytest.raises(re.error):  # invalid for Python too
        re.compile(pattern)
    assert not accepts("regex", pattern)


def test_regex_format_accepts_deep_nesting_and_both_dialects() -> None:
    deep = "(" * 12 + "a" + ")" * 12
    assert accepts("regex", deep) and accepts("regex", "[()]|\\(|\\)") and accepts("regex", "")
    # ECMA-262 only: empty classes; Python only: a leading ] in a class, comments, verbose mode
    for pattern in ["a[]", "[^]b", "[]a]", "[^]a]", "(?#x(y)z", "(?x) a # (", "(?x: ( )"]:
        assert accepts("regex", pattern), pattern
