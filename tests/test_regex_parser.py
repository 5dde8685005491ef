"""The regex parser and its character sets against Python's ``re`` as the oracle.

* every single-character construct: membership of every code point (surrogates excluded) equals
  ``re.fullmatch(construct, chr(c), flags)``;
* case folding: each cased character's IGNORECASE class equals ``re``'s;
* errors: unsupported/bad constructs raise RegexError naming the construct at the right offset,
  and reject exactly what ``re`` rejects (plus the documented unsupported features);
* languages: finite/bounded languages enumerated from the tree equal the brute-force set of strings
  ``re.fullmatch`` accepts over a small alphabet (fixed cases and hypothesis-generated patterns);
* the outlines-core sample regexes parse, and a tiny tree matcher agrees with ``re`` on them.
"""
from __future__ import annotations

from tests.conftest import SHARED_DATA as _DATA

import functools
import itertools
import json
import random
import re
import sys
import timeit
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.errors import RegexError
from logitgate.regex import charsets
from logitgate.regex.ast import Alt, CharClass, Concat, Empty, Group, Node, Repeat
from logitgate.regex.parser import MAX_REPEAT, parse

SHARED_DATA = _DATA / "outlines-core"
SURROGATE_GAP = 0x800

# ---------------------------------------------------------------------------------------------
# Oracle helpers
# ---------------------------------------------------------------------------------------------


@functools.cache
def every_character() -> str:
    """All code points but the surrogates, built independently of the code under test."""
    codes = np.concatenate(
        [np.arange(0xD800, dtype="<u4"), np.arange(0xE000, 0x110000, dtype="<u4")]
    )
    text = codes.tobytes().decode("utf-32-le")
    assert len(text) == 0x110000 - SURROGATE_GAP
    return text


def to_code_point(position: int) -> int:
    return position if position < 0xD800 else position + SURROGATE_GAP


def re_class(construct: str, flags: int = 0) -> tuple[tuple[int, int], ...]:
    """The code points ``re`` matches with a single-character construct, as merged ranges.

    Scans every character with ``(?:construct)+`` (runs of matches); leading global flags
    ``(?i)`` stay in front.
    """
    head = re.match(r"\(\?[aiLmsux]+\)", construct)
    prefix = head.group(0) if head else ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = re.compile(f"{prefix}(?:{construct[len(prefix):]})+", flags)
    pairs: list[list[int]] = []
    for m in rx.finditer(every_character()):
        lo, hi = m.start(), m.end() - 1
        if lo < 0xD800 <= hi:  # a run across the surrogate gap
            pieces = [(lo, 0xD7FF), (0xD800, hi)]
        else:
            pieces = [(lo, hi)]
        for a, b in pieces:
            a, b = to_code_point(a), to_code_point(b)
            if pairs and pairs[-1][1] + 1 == a:
                pairs[-1][1] = b
            else:
                pairs.append([a, b])
    return tuple((a, b) for a, b in pairs)


def spot_code_points() -> list[int]:
    """Code points for a direct per-character ``re.fullmatch`` cross-check of the scan."""
    rng = random.Random(1234)
    points = set(range(0, 0x250)) | {0x130, 0x131, 0x17F, 0x212A, 0x1E9E, 0x3A3, 0x3C2, 0x345}
    points |= {0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10400, 0x10428, 0x10FFFF}
    points |= {rng.randrange(0x110000) for _ in range(3000)}
    return sorted(c for c in points if not 0xD800 <= c <= 0xDFFF)


SPOT = spot_code_points()


def check_tree(node: Node) -> None:
    """Invariants of every tree the parser returns (see ast.py)."""
    kind = type(node)
    if kind is CharClass:
        prev_hi = -2
        for lo, hi in node.ranges:
            assert 0 <= lo <= hi <= 0x10FFFF
            assert lo > prev_hi + 1, node.ranges  # sorted, disjoint, non-adjacent
            assert hi < 0xD800 or lo > 0xDFFF, node.ranges  # no surrogates
            prev_hi = hi
    elif kind in (Concat, Alt):
        assert len(node.items) >= 2
        for item in node.items:
            assert type(item) is not kind, "nested Concat/Alt must be flattened"
            if kind is Concat:
                assert type(item) is not Empty
            check_tree(item)
    elif kind is Repeat:
        assert node.min >= 0 and (node.max is None or node.max >= max(node.min, 1))
        assert (node.min, node.max) != (1, 1)
        assert node.max is None or node.max <= MAX_REPEAT
        check_tree(node.item)
    elif kind is Group:
        assert node.index >= 1
        check_tree(node.item)
    else:
        assert kind is Empty, node


# ---------------------------------------------------------------------------------------------
# Single-character constructs: every code point
# ---------------------------------------------------------------------------------------------

IC, S, A, M, X = re.IGNORECASE, re.DOTALL, re.ASCII, re.MULTILINE, re.VERBOSE

SINGLE_CHAR_CONSTRUCTS: list[tuple[str, int]] = [
    # dot and literals
    (".", 0), (".", S), (".", M), ("(?s).", 0), ("a", 0), ("é", 0), ("\U0001F600", 0),
    # escapes
    (r"\x41", 0), (r"\u00e9", 0), (r"\U0001F600", 0), (r"\N{EM DASH}", 0), (r"\0", 0),
    (r"\101", 0), (r"\07", 0), (r"\n", 0), (r"\t", 0), (r"\r", 0), (r"\f", 0), (r"\v", 0),
    (r"\a", 0), ("\\.", 0), ("\\-", 0), ("\\é", 0), ("\\\\", 0), ("\\ ", X),
    # categories, Unicode and ASCII
    (r"\d", 0), (r"\D", 0), (r"\w", 0), (r"\W", 0), (r"\s", 0), (r"\S", 0),
    (r"\d", A), (r"\D", A), (r"\w", A), (r"\W", A), (r"\s", A), (r"\S", A),
    (r"(?a)\w", 0), (r"(?a:\w)", 0), (r"(?u:\w)", A), (r"(?a)\s", 0),
    # classes
    ("[a-z]", 0), ("[^a-z]", 0), (r"[^\W\d_]", 0), (r"[\s\S]", 0), (r"[^\s\S]", 0),
    ("[a-z&&]", 0), ("[]a]", 0), ("[^]]", 0), (r"[\]-]", 0), (r"[\x00-\x1f]", 0),
    (r"[\w]", 0), (r"[\d\s]", 0), (r"[^\d\s]", 0), (r"[\b]", 0), ("[.]", 0), ("[-a]", 0),
    ("[a-]", 0), (r"[\d-]", 0), ("[--/]", 0), (r"[\101-\132]", 0), ("[[a]", 0), ("[a||b]", 0),
    ("[aa]", 0), ("[^a]", 0), (r"[\w\s]", A), (r"[^\x00-\x7f]", 0), ("(?x)[ a]", 0),
    (r"[\U00010000-\U0010ffff]", 0), (r"[\ud7ff-\ue000]", 0), (r"\ud800", 0),
    # single-character alternatives become classes
    ("a|b|c", 0), (r"\d|a", 0), (r"[ab]|\s|x", 0),
    # IGNORECASE literals, including re's special equivalences
    ("a", IC), ("k", IC), ("K", IC), ("\u212a", IC), ("(?i)\u212a", 0), ("s", IC), ("ſ", IC),
    ("i", IC), ("I", IC), ("İ", IC), ("ı", IC), ("ß", IC), ("ẞ", IC), ("µ", IC), ("Σ", IC),
    ("ς", IC), ("ϐ", IC), ("\u0345", IC), ("ǅ", IC), ("\u1fb3", IC), ("\U00010400", IC),
    ("\U00010428", IC), ("k", IC | A), ("\u212a", IC | A), ("1", IC), ("_", IC),
    # IGNORECASE classes and ranges
    ("(?i)[a-z]", 0), ("[a-z]", IC | A), ("(?i)[^k]", 0), ("(?i)[^a-z]", 0), ("(?ia)[^a-z]", 0),
    ("(?i)[K-k]", 0), (r"(?i)[\u0130-\u0131]", 0), ("(?i)[α-ω]", 0), ("(?i)[^ſ]", 0),
    (r"(?i)[\u1f80-\u1faf]", 0), ("(?i)[ß0]", 0), ("(?i)[ẞx]", 0), (r"(?i)[a\W]", 0),
    (r"[\w\s]", IC), (r"(?i)[^\W\d_]", 0), ("(?i:[a-z])", 0), ("(?-i:a)", IC), (r"\d|a", IC),
    # IGNORECASE with characters outside the BMP (re's charset quirks)
    (r"(?i)[\U00010400a]", 0), (r"(?i)[^\U00010400a]", 0), (r"(?i)[\U00010428b]", 0),
    (r"(?i)[\U00010400\U00010428]", 0), (r"(?i)[\U00010400-\U00010401]", 0),
    (r"(?i)[\u0100-\U00010427]", 0), (r"(?i)[^\u0100-\U00010427]", 0),
    (r"(?i)[A-\U00010400]", 0), (r"(?ai)[\u00e0-\U00010000]", 0), (r"(?i)[\x00-\U0010ffff]", 0),
    (r"(?i)[\u00b5-\U00010000]", 0), (r"(?ai)[\u00b5-\U00010000]", 0), (r"(?ia)[\U00010400a]", 0),
    ("(?i)\U00010400|a", 0), ("(?i)\U00010400|\U00010401", 0),
]


@pytest.mark.parametrize(("construct", "flags"), SINGLE_CHAR_CONSTRUCTS)
def test_single_character_construct_matches_re_on_every_code_point(
    construct: str, flags: int
) -> None:
    node = parse(construct, flags)
    assert isinstance(node, CharClass), node
    check_tree(node)
    assert node.ranges == re_class(construct, flags)
    # the run scan above is itself cross-checked against plain re.fullmatch on sample points
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = re.compile(construct, flags)
    for c in SPOT:
        assert (rx.fullmatch(chr(c)) is not None) == charsets.contains(node.ranges, c), hex(c)


def test_ignorecase_class_of_every_cased_character_matches_re() -> None:
    """For every character with case (re's sense), ``(?i)c`` and ``(?i)[c]`` equal re on the
    candidate set of all cased characters, and never reach outside it."""
    cased = [c for c in range(0x110000) if (ch := chr(c)).lower() != ch or ch.upper() != ch]
    candidates = "".join(map(chr, cased))
    cased_set = set(cased)
    assert len(cased) > 2500
    for c in cased:
        literal = re.escape(chr(c))
        node = parse(literal, re.IGNORECASE)
        assert isinstance(node, CharClass)
        mine = {x for lo, hi in node.ranges for x in range(lo, hi + 1)}
        assert c in mine
        assert mine <= cased_set | {c}, (hex(c), sorted(map(hex, mine - cased_set)))
        theirs = {ord(m.group()) for m in re.finditer(f"(?i){literal}", candidates)}
        assert mine & cased_set == theirs | ({c} & cased_set), hex(c)
        assert parse(f"[{literal}]", re.IGNORECASE) == node


@pytest.mark.slow
def test_ignorecase_class_of_every_cased_character_full_scan() -> None:
    """The same, scanning every code point for every cased character (about a minute)."""
    cased = [c for c in range(0x110000) if (ch := chr(c)).lower() != ch or ch.upper() != ch]
    for c in cased:
        literal = re.escape(chr(c))
        assert parse(literal, re.IGNORECASE).ranges == re_class(literal, re.IGNORECASE), hex(c)


_PAIR = st.tuples(st.sampled_from([0, 0x60, 0xD7F0, 0xDFF0, 0x10FF00]), st.integers(-8, 300), st.integers(-3, 40))


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(_PAIR, max_size=120), as_lists=st.booleans())
def test_normalize_equals_the_brute_force_set(pairs, as_lists: bool) -> None:
    """Both paths of normalize (plain loop, numpy for many pairs): clipping, surrogates dropped,
    overlapping and adjacent pairs merged; a normalized set comes back as the same object."""
    ranges = [(b + lo, b + lo + w) for b, lo, w in pairs]
    given_pairs = [list(r) for r in ranges] if as_lists else ranges
    points = sorted({c for lo, hi in ranges for c in range(max(lo, 0), min(hi, charsets.MAX_CODE_POINT) + 1)
                     if not charsets.SURROGATE_LO <= c <= charsets.SURROGATE_HI})
    expected: list[tuple[int, int]] = []
    for c in points:
        if expected and c == expected[-1][1] + 1:
            expected[-1] = (expected[-1][0], c)
        else:
            expected.append((c, c))
    got = charsets.normalize(given_pairs)
    assert got == tuple(expected)
    assert all(type(lo) is int and type(hi) is int for lo, hi in got)
    assert charsets.normalize(got) is got


@settings(max_examples=300, deadline=None)
@given(base=st.lists(_PAIR, max_size=60), extra=st.lists(_PAIR, max_size=6))
def test_add_ranges_equals_normalizing_both(base, extra) -> None:
    """Inserting a few normalized ranges into a normalized set (binary search and splicing) gives
    the set normalize computes from both lists: overlaps, adjacency, the surrogate gap."""
    a = charsets.normalize([(b + lo, b + lo + w) for b, lo, w in base])
    e = charsets.normalize([(b + lo, b + lo + w) for b, lo, w in extra])
    assert charsets.add_ranges(a, e) == charsets.normalize(a + e)


@pytest.mark.parametrize("pattern", [r"[\w .\-/]", r"[\d,]", r"[\s|()]", r"[^\w@]", r"[\W_]", r"[\S\n]", r"[\w\u00e9\u3000-\u3010]"])
def test_category_plus_characters_classes_match_re(pattern: str) -> None:
    """A class of one category and a few characters (the insertion path) is re's class."""
    assert parse(pattern).ranges == re_class(pattern)


def test_case_closure_helper_matches_re_for_bmp_ranges() -> None:
    for lo, hi in [(0x61, 0x7A), (0x41, 0x5A), (0x370, 0x3FF), (0x1F00, 0x1FFF), (0x100, 0x17F)]:
        expected = re_class(f"(?i)[\\u{lo:04x}-\\u{hi:04x}]")
        assert charsets.case_closure(((lo, hi),)) == expected
    assert charsets.case_closure(((0x6B, 0x6B),)) == ((0x4B, 0x4B), (0x6B, 0x6B), (0x212A, 0x212A))
    assert charsets.case_closure(((0x6B, 0x6B),), ascii=True) == ((0x4B, 0x4B), (0x6B, 0x6B))


def test_unicode_categories_agree_with_str_predicates() -> None:
    """\\d, \\s, \\w are the str.isdecimal / isspace / isalnum+_ sets of the running Python."""
    text = every_character()
    for name, predicate in [
        ("DIGIT", str.isdecimal),
        ("SPACE", str.isspace),
        ("WORD", lambda ch: ch.isalnum() or ch == "_"),
    ]:
        ranges = charsets.category(name)
        rng = random.Random(name)
        for pos in rng.sample(range(len(text)), 20000):
            ch = text[pos]
            assert predicate(ch) == charsets.contains(ranges, ord(ch)), (name, hex(ord(ch)))
        for lo, hi in ranges:
            assert predicate(chr(lo)) and predicate(chr(hi))


# ---------------------------------------------------------------------------------------------
# Range helpers
# ---------------------------------------------------------------------------------------------

small_ranges = st.lists(
    st.tuples(st.integers(0xD7F0, 0xE010), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=5,
)


def as_set(ranges: tuple[tuple[int, int], ...], universe: range) -> set[int]:
    return {c for c in universe if charsets.contains(ranges, c)}


@settings(max_examples=100, deadline=None)
@given(small_ranges, small_ranges)
def test_range_helpers_against_python_sets(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    universe = range(0xD7E0, 0xE040)
    surrogates = set(range(0xD800, 0xE000))
    na, nb = charsets.normalize(a), charsets.normalize(b)
    raw_a = {c for lo, hi in a for c in range(lo, hi + 1)} - surrogates
    raw_b = {c for lo, hi in b for c in range(lo, hi + 1)} - surrogates
    for ranges in (na, nb):
        check_tree(CharClass(ranges))
    assert as_set(na, universe) == raw_a
    assert as_set(charsets.union(na, nb), universe) == raw_a | raw_b
    assert as_set(charsets.intersection(na, nb), universe) == raw_a & raw_b
    assert as_set(charsets.difference(na, nb), universe) == raw_a - raw_b
    comp = charsets.complement(na)
    assert as_set(comp, universe) == set(universe) - raw_a - surrogates
    assert charsets.size(na) + charsets.size(comp) == 0x110000 - SURROGATE_GAP


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

# (pattern, flags, offset, words the message must contain, whether re accepts the pattern)
ERROR_CASES: list[tuple[str, int, int | None, str, bool]] = [
    # unsupported by design (re accepts these)
    (r"(a)\1", 0, 3, "backreference \\1", True),
    (r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10", 0, 30, "backreference \\10", True),
    (r"(?P<n>a)(?P=n)", 0, 8, "backreference (?P=name)", True),
    (r"a(?=b)", 0, 1, "lookahead", True),
    (r"a(?!b)", 0, 1, "negative lookahead", True),
    (r"(?<=a)b", 0, 0, "lookbehind", True),
    (r"(?<!a)b", 0, 0, "negative lookbehind", True),
    (r"(a)(?(1)b|c)", 0, 3, "conditional", True),
    (r"x\b", 0, 1, "word boundary \\b", True),
    (r"\Bx", 0, 0, "word boundary \\B", True),
    (r"a^b", 0, 1, "anchor ^", True),
    (r"a$b", 0, 1, "anchor $", True),
    (r"a\Ab", 0, 1, "anchor \\A", True),
    (r"a\Zb", 0, 1, "anchor \\Z", True),
    (r"(a^)", 0, 2, "anchor ^", True),
    (r"(?:^a)*", 0, 3, "anchor ^", True),
    (r"a|b^", 0, 3, "anchor ^", True),
    (r"$a", 0, 0, "anchor $", True),
    (r"a$(b|c)", 0, 1, "anchor $", True),
    (r"(?m)a\n^b", 0, 7, "anchor ^", True),
    (r"a{1001}", 0, 1, "MAX_REPEAT", True),
    (r"a{2,1001}", 0, 1, "MAX_REPEAT", True),
    (r"a{1001,}", 0, 1, "MAX_REPEAT", True),
    (r"a{,5000}", 0, 1, "MAX_REPEAT", True),
    (r"(?L)a", 0, 2, "LOCALE", False),
    # re rejects these too (or they are only valid in newer Pythons: possessive, atomic)
    (r"a*+", 0, 1, "possessive quantifier '*+'", sys.version_info >= (3, 11)),
    (r"a++", 0, 1, "possessive quantifier '++'", sys.version_info >= (3, 11)),
    (r"a?+", 0, 1, "possessive quantifier '?+'", sys.version_info >= (3, 11)),
    (r"ab{1,2}+", 0, 2, "possessive quantifier '{1,2}+'", sys.version_info >= (3, 11)),
    (r"(?>ab)", 0, 0, "atomic group", sys.version_info >= (3, 11)),
    (r"a\G", 0, 1, "\\G", False),
    (r"\p{L}", 0, 0, "\\p{...}", False),
    (r"x\P{Lu}", 0, 1, "\\P{...}", False),
    (r"[\p{L}]", 0, 1, "\\p{...}", False),
    (r"\q", 0, 0, "bad escape \\q", False),
    (r"[a\q]", 0, 2, "bad escape \\q", False),
    (r"[\A]", 0, 1, "bad escape \\A", False),
    (r"[\8]", 0, 1, "bad escape \\8", False),
    ("a\\", 0, 1, "bad escape", False),
    (r"(ab", 0, 0, "missing )", False),
    (r"a(b(c)", 0, 1, "missing )", False),
    (r"ab)", 0, 2, "unbalanced parenthesis", False),
    (r"*a", 0, 0, "nothing to repeat", False),
    (r"a|*", 0, 2, "nothing to repeat", False),
    (r"(*)", 0, 1, "nothing to repeat", False),
    (r"^*", 0, 1, "nothing to repeat", False),
    (r"{1}", 0, 0, "nothing to repeat", False),
    (r"a**", 0, 2, "multiple repeat", False),
    (r"a{2}{3}", 0, 4, "multiple repeat", False),
    (r"[z-a]", 0, 1, "bad character range z-a", False),
    (r"[\d-z]", 0, 1, "bad character range \\d-z", False),
    (r"[a-\w]", 0, 1, "bad character range a-\\w", False),
    (r"[abc", 0, 0, "unterminated character set", False),
    (r"x[", 0, 1, "unterminated character set", False),
    (r"[]", 0, 0, "unterminated character set", False),
    (r"[a-", 0, 0, "unterminated character set", False),
    (r"a{3,2}", 0, 1, "min repeat greater than max repeat", False),
    (r"a(?i)", 0, 1, "global flags not at the start", sys.version_info < (3, 11)),
    (r"(?z)", 0, 0, "unknown extension ?z", False),
    (r"(?Px)", 0, 0, "unknown extension ?Px", False),
    (r"(?", 0, 0, "unexpected end of pattern", False),
    (r"(?P<1>a)", 0, 0, "bad character in group name '1'", False),
    (r"(?P<>a)", 0, 0, "missing group name", False),
    (r"(?P<ab", 0, 0, "missing >, unterminated group name", False),
    (r"(?P<a>x)(?P<a>y)", 0, 8, "redefinition of group name 'a'", False),
    (r"\x4", 0, 0, "incomplete escape \\x4", False),
    (r"\u12", 0, 0, "incomplete escape \\u12", False),
    (r"\U0011ffff", 0, 0, "bad escape \\U0011ffff", False),
    (r"\N{NOT A CHARACTER NAME}", 0, 0, "undefined character name", False),
    (r"\N", 0, 0, "\\N", False),
    (r"\400", 0, 0, "octal escape value \\400", False),
    (r"(?#abc", 0, 0, "unterminated comment", False),
    (r"(?i-i:a)", 0, 0, "flag turned on and off", False),
    (r"(?-a:x)", 0, 3, "cannot turn off flags 'a', 'u' and 'L'", False),
    (r"(?au)x", 0, 3, "incompatible", False),
    (r"(?iq)x", 0, 3, "unknown flag", False),
    (r"(?i", 0, 0, "missing -, : or )", False),
    (r"a", re.LOCALE, None, "LOCALE", False),
    (r"(?u)a", re.ASCII, None, "ASCII and UNICODE flags are incompatible", False),
]


def _re_accepts(pattern: str, flags: int) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern, flags)
        except (re.error, ValueError, OverflowError):
            return False
    return True


@pytest.mark.parametrize(("pattern", "flags", "offset", "words", "re_accepts"), ERROR_CASES)
def test_errors_name_the_construct_at_its_offset(
    pattern: str, flags: int, offset: int | None, words: str, re_accepts: bool
) -> None:
    with pytest.raises(RegexError) as info:
        parse(pattern, flags)
    err = info.value
    assert err.offset == offset, (err.offset, str(err))
    assert err.pattern == pattern
    assert words in err.reason, err.reason
    if offset is not None:
        assert "^" in str(err).splitlines()[-1]  # the caret line
    # We reject what re rejects; what re accepts we reject only as unsupported by design.
    assert _re_accepts(pattern, flags) == re_accepts
    if re_accepts:
        assert any(w in err.reason for w in ("not supported", "only supported", "MAX_REPEAT"))


def test_deep_nesting_is_a_regex_error_not_a_crash() -> None:
    assert parse("(" * 200 + "a" + ")" * 200) is not None
    with pytest.raises(RegexError, match="nested too deeply"):
        parse("(" * 5000 + "a" + ")" * 5000)


def test_max_repeat_boundary_is_accepted() -> None:
    node = parse(f"a{{{MAX_REPEAT}}}")
    assert node == Repeat(CharClass(((97, 97),)), MAX_REPEAT, MAX_REPEAT)
    assert parse(f"a{{0,{MAX_REPEAT}}}") == Repeat(CharClass(((97, 97),)), 0, MAX_REPEAT)


def test_angle_bracket_group_names_follow_the_running_python() -> None:
    if _re_accepts("(?<n>x)", 0):
        assert parse("(?<n>x)") == Group(CharClass(((120, 120),)), 1, "n")
    else:
        with pytest.raises(RegexError, match="unknown extension"):
            parse("(?<n>x)")


# ---------------------------------------------------------------------------------------------
# Tree shape
# ---------------------------------------------------------------------------------------------


def cc(text: str) -> CharClass:
    return CharClass(tuple((ord(c), ord(c)) for c in text))


def word(text: str) -> Node:
    return Concat(tuple(cc(c) for c in text)) if len(text) > 1 else cc(text)


@pytest.mark.parametrize(
    ("pattern", "flags", "expected"),
    [
        ("abc", 0, word("abc")),
        ("", 0, Empty()),
        ("a{1,1}", 0, cc("a")),
        ("a{1}", 0, cc("a")),
        ("a{0}", 0, Empty()),
        ("(?:)", 0, Empty()),
        ("()", 0, Group(Empty(), 1, None)),
        ("a(?:bc)d", 0, word("abcd")),
        ("a(?#comment)b", 0, word("ab")),
        ("(?:ab)*", 0, Repeat(word("ab"), 0, None)),
        ("a{,2}", 0, Repeat(cc("a"), 0, 2)),
        ("a{2,}?", 0, Repeat(cc("a"), 2, None)),
        ("a{,}", 0, Repeat(cc("a"), 0, None)),
        ("a+?", 0, Repeat(cc("a"), 1, None)),
        ("a{", 0, word("a{")),
        ("a{1", 0, word("a{1")),
        ("a{x}", 0, word("a{x}")),
        ("a{}", 0, word("a{}")),
        ("a{1,2", 0, word("a{1,2")),
        ("a|b|cd", 0, Alt((CharClass(((97, 98),)), word("cd")))),
        ("ab|cd|(?:ef|gh)", 0, Alt((word("ab"), word("cd"), word("ef"), word("gh")))),
        ("a|", 0, Alt((cc("a"), Empty()))),
        ("(a)(?P<x>b)", 0, Concat((Group(cc("a"), 1), Group(cc("b"), 2, "x")))),
        ("((a)b)", 0, Group(Concat((Group(cc("a"), 2), cc("b"))), 1)),
        ("^ab$", 0, word("ab")),
        (r"\Aab\Z", 0, word("ab")),
        ("^a|^b", M, CharClass(((97, 98),))),  # re factors out ^ then merges a|b
        ("^a|^bc$", 0, Alt((cc("a"), word("bc")))),
        ("(^a|b)c$", 0, Concat((Group(CharClass(((97, 98),)), 1), cc("c")))),  # classes merged
        ("(?:ab|a|[b-c]|x)", 0, Alt((word("ab"), CharClass(((97, 99), (120, 120)))))),
        ("(?x) a b # comment\n c", 0, word("abc")),
        ("a b", X, word("ab")),
        ("(?x)[ ]", 0, cc(" ")),
        ("(?x)a\\ b", 0, word("a b")),
        ("(?x: a )b c", 0, word("ab c")),
        ("(?i:a)b", 0, Concat((CharClass(((65, 65), (97, 97))), cc("b")))),
        ("(?:ab|ac)", 0, Concat((cc("a"), CharClass(((98, 99),))))),  # re's prefix factoring
    ],
)
def test_tree_shape(pattern: str, flags: int, expected: Node) -> None:
    node = parse(pattern, flags)
    check_tree(node)
    assert node == expected


# ---------------------------------------------------------------------------------------------
# Languages: enumerate the tree, compare with brute force over re.fullmatch
# ---------------------------------------------------------------------------------------------


def language(node: Node, alphabet: str, max_len: int) -> set[str]:
    """Strings over ``alphabet`` of length <= ``max_len`` in the tree's language."""
    kind = type(node)
    if kind is CharClass:
        return {c for c in alphabet if charsets.contains(node.ranges, ord(c))}
    if kind is Empty:
        return {""}
    if kind is Group:
        return language(node.item, alphabet, max_len)
    if kind is Alt:
        return set().union(*(language(item, alphabet, max_len) for item in node.items))

    def cat(xs: set[str], ys: set[str]) -> set[str]:
        return {x + y for x in xs for y in ys if len(x) + len(y) <= max_len}

    if kind is Concat:
        out = {""}
        for item in node.items:
            out = cat(out, language(item, alphabet, max_len))
        return out
    assert kind is Repeat
    item = language(node.item, alphabet, max_len)
    current = {""}
    for _ in range(node.min):
        current = cat(current, item)
        if not current:
            return set()
    result = set(current)
    steps = 0
    while node.max is None or steps < node.max - node.min:
        current = cat(current, item) - result
        if not current:
            break
        result |= current
        steps += 1
    return result


def brute_force(pattern: str, flags: int, alphabet: str, max_len: int) -> set[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rx = re.compile(pattern, flags)
    return {
        s
        for n in range(max_len + 1)
        for s in map("".join, itertools.product(alphabet, repeat=n))
        if rx.fullmatch(s)
    }


@pytest.mark.parametrize(
    ("pattern", "flags"),
    [
        ("(a|b)?ab{1,2}", 0), ("a|", 0), ("|a", 0), ("(?:ab)*", 0), ("a{,2}b", 0), ("a{2,}", 0),
        ("a{", 0), ("a{1", 0), ("a{x}", 0), ("a{1,2}?b", 0), ("(a*)*b", 0), ("(a|)+", 0),
        ("(?:a?){2,3}", 0), ("[^a]b*", 0), (".a.", 0), (".a.", S), ("(?i)ab|B", 0),
        ("a(?i:b)a", 0), ("(?i)a(?-i:b)", 0), ("^a|b$", 0), ("(^a|b)?", 0), (r"\w\W", 0),
        (r"\s?a\S", 0), ("a{0}b", 0), ("(){2}a", 0), ("a{3}|b{0,1}", 0), ("[ab]{2}|a*", 0),
        ("(?x) a | b # c", 0), ("a(b|c|)d|ab", 0), (r"\x61\142[\x61-b]", 0), ("(?:a|ab)(?:b|)", 0),
    ],
)
def test_language_equals_re_fullmatch(pattern: str, flags: int) -> None:
    alphabet, max_len = "abB\n", 5
    node = parse(pattern, flags)
    check_tree(node)
    assert language(node, alphabet, max_len) == brute_force(pattern, flags, alphabet, max_len)


# A grammar of small patterns over a tiny alphabet.
ATOMS = [
    "a", "b", "A", ".", "[ab]", "[^a]", "[a-b]", "[A-a]", r"\x61", r"\w", r"\W", r"\s", r"\S",
    r"\n", "[^\n]", "(?:)", "()", "a{", "{", "}", ",", "1", "[]a]", "[^]b]", r"[\]a]", "\\.",
    "[a-]", "B",
]
GROUP_OPENERS = ["(", "(?:", "(?P<g>", "(?i:", "(?-i:", "(?s:", "(?a:"]
QUANTIFIERS = ["*", "+", "?", "{2}", "{0,2}", "{1,}", "{,1}", "*?", "+?", "??", "{1,2}?", "{0}"]


def _patterns() -> st.SearchStrategy[str]:
    atom = st.sampled_from(ATOMS)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map("|".join),
            st.tuples(inner, st.sampled_from(["|", ""])).map(lambda t: t[0] + "|" + t[1]),
            st.tuples(st.sampled_from(GROUP_OPENERS), inner).map(lambda t: t[0] + t[1] + ")"),
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda t: f"(?:{t[0]}){t[1]}"),
            st.tuples(atom, st.sampled_from(QUANTIFIERS)).map("".join),
        )

    body = st.recursive(atom, extend, max_leaves=6)
    prefix = st.sampled_from(["", "", "(?i)", "(?s)", "(?a)", "^", "(?i)^", r"\A"])
    suffix = st.sampled_from(["", "", "$", r"\Z"])
    return st.tuples(prefix, body, suffix).map("".join)


def _number_group_names(pattern: str) -> str:
    counter = itertools.count(1)
    return re.sub(r"\(\?P<g>", lambda m: f"(?P<g{next(counter)}>", pattern)


def _compare_with_re(pattern: str, alphabet: str, max_len: int) -> None:
    if not _re_accepts(pattern, 0):
        with pytest.raises(RegexError):
            parse(pattern)
        return
    try:
        node = parse(pattern)
    except RegexError as err:
        # only features that are unsupported by design may be rejected
        assert "not supported" in err.reason or "only supported" in err.reason, (pattern, err)
        return
    check_tree(node)
    assert language(node, alphabet, max_len) == brute_force(pattern, 0, alphabet, max_len), pattern


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_patterns().map(_number_group_names))
def test_random_patterns_have_re_language(pattern: str) -> None:
    _compare_with_re(pattern, "abA\n", 4)


FUZZ_TOKENS = [
    "a", "b", "A", "(", ")", "|", "*", "+", "?", "{", "}", ",", "1", "2", "0", "[", "]", "^",
    "-", "$", ".", "\\", ":", "P", "<", ">", "=", "!", "#", "i", "x", " ", "\n", r"\d", r"\w",
    r"\b", r"\1", "(?:", "(?i)", "(?P<n>", "(?#", r"\x61", r"\A", r"\Z", "(?x)", "(?-i:",
    r"\0", r"\12", r"\101", "\\]", r"\-", "{1,2}", "{,", "(?P=n)", "(?<", "(?s)", "(?a)",
    "(?u)", r"\N{LATIN SMALL LETTER A}", r"\u0061", "(?i:", "(?x:", "\u212a", "s", "\u017f",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FUZZ_TOKENS), max_size=9).map("".join))
def test_fuzzed_syntax_agrees_with_re(pattern: str) -> None:
    """Arbitrary token soup: we error exactly when re errors (or on unsupported features), never
    crash, and otherwise have re's language."""
    _compare_with_re(pattern, "ab\n", 3)


# ---------------------------------------------------------------------------------------------
# The outlines-core sample regexes
# ---------------------------------------------------------------------------------------------


def _load(name: str) -> dict[str, str]:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    return json.loads(path.read_text())


def tree_fullmatch(node: Node, text: str) -> bool:
    """A tiny matcher over the tree (sets of end positions), for tests only."""
    memo: dict[tuple[int, int], frozenset[int]] = {}

    def ends(n: Node, i: int) -> frozenset[int]:
        key = (id(n), i)
        if key in memo:
            return memo[key]
        kind = type(n)
        if kind is CharClass:
            hit = i < len(text) and charsets.contains(n.ranges, ord(text[i]))
            out = frozenset([i + 1]) if hit else frozenset()
        elif kind is Empty:
            out = frozenset([i])
        elif kind is Group:
            out = ends(n.item, i)
        elif kind is Alt:
            out = frozenset().union(*(ends(x, i) for x in n.items))
        elif kind is Concat:
            cur = frozenset([i])
            for x in n.items:
                cur = frozenset().union(*(ends(x, j) for j in cur))
            out = cur
        else:
            cur = frozenset([i])
            for _ in range(n.min):
                cur = frozenset().union(*(ends(n.item, j) for j in cur))
            acc, steps = set(cur), 0
            while cur and (n.max is None or steps < n.max - n.min):
                cur = frozenset().union(*(ends(n.item, j) for j in cur)) - acc
                acc |= cur
                steps += 1
            out = frozenset(acc)
        memo[key] = out
        return out

    return len(text) in ends(node, 0)


def _mutations(text: str, rng: random.Random, alphabet: str) -> list[str]:
    out = []
    for _ in range(6):
        chars = list(text)
        op = rng.randrange(3)
        pos = rng.randrange(len(chars) + 1)
        if op == 0 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif op == 1:
            chars.insert(pos, rng.choice(alphabet))
        elif chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
        out.append("".join(chars))
    return out


def _sample_regexes() -> dict[str, str]:
    return {**_load("regex_samples.json"), **_load("type_and_format_regexes.json")}


def test_sample_regexes_parse_and_match_like_re() -> None:
    regexes = _sample_regexes()
    assert len(regexes) == 22
    rng = random.Random(7)
    alphabet = "aZ09 -.:/@|()\"'\\\n_x%é"
    for name, pattern in regexes.items():
        node = parse(pattern)
        check_tree(node)
        rx = re.compile(pattern)
        for _ in range(25):
            # a random string re accepts, then mutations of it that it may reject
            example = _random_member(node, rng)
            assert rx.fullmatch(example), (name, example)
            assert tree_fullmatch(node, example)
            for text in _mutations(example, rng, alphabet):
                assert tree_fullmatch(node, text) == bool(rx.fullmatch(text)), (name, text)


def _random_member(node: Node, rng: random.Random) -> str:
    """A random string of the tree's language (bounded repeats)."""
    kind = type(node)
    if kind is CharClass:
        lo, hi = rng.choice(node.ranges)
        return chr(rng.randint(lo, min(hi, lo + 200)))
    if kind is Empty:
        return ""
    if kind is Group:
        return _random_member(node.item, rng)
    if kind is Alt:
        return _random_member(rng.choice(node.items), rng)
    if kind is Concat:
        return "".join(_random_member(x, rng) for x in node.items)
    top = node.max if node.max is not None else node.min + 3
    count = rng.randint(node.min, min(top, node.min + 3))
    return "".join(_random_member(node.item, rng) for _ in range(count))


def test_json_schema_regex_cases_parse_and_classify_examples() -> None:
    path = SHARED_DATA / "json_schema_regex_cases.jsonl"
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert cases
    checked = 0
    for case in cases:
        pattern = case.get("expected_regex")
        if pattern is None:
            continue
        node = parse(pattern)
        check_tree(node)
        for text in case.get("should_match", []) + case.get("should_not_match", []):
            expected = bool(re.fullmatch(pattern, text))
            assert tree_fullmatch(node, text) == expected, (case["id"], text)
            checked += 1
    assert checked > 50


def test_sample_regexes_parse_fast() -> None:
    """Generous bound (the real figure is well under 1 ms each): catches accidental blow-ups."""
    regexes = _sample_regexes()
    for pattern in regexes.values():
        parse(pattern)  # warm-up: tables built once
    for name, pattern in regexes.items():
        best = min(timeit.repeat(functools.partial(parse, pattern), number=3, repeat=3)) / 3
        assert best < 0.02, (name, best)
