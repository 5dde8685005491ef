"""JSON string texts from content trees (``logitgate.json_schema.strings``), with Python's ``json``
and ``re`` as the oracle.

* for content patterns and random strings (controls, quotes, backslashes, astral characters,
  U+2028, U+FEFF, ...) in every encoding (``json.dumps`` with and without ``ensure_ascii``, and
  random mixes of raw characters, short escapes and ``\\uXXXX`` in random case), the string tree
  accepts the text iff ``re.fullmatch`` accepts the decoded value;
* invalid texts (raw controls, lone or misordered surrogate escapes, bad escapes, stray quotes)
  are rejected, and fuzzed texts are accepted exactly when ``json.loads`` decodes them to a
  string of scalar values;
* lengths count code points, literals accept every encoding of their value, Automaton nodes encode
  like the equivalent tree;
* the keys other than a set of names (``other_keys_node``, built directly) give the same minimal
  DFA as the boolean difference of any string and the names' literals, through each way the
  DFA builder reads them, and accept a text iff it decodes to a string that is not a name;
* counted strings and their pieces (``counted_string_node``, built directly) give the same
  minimal DFA as the quotes around ``encode_content(length_node(...))``, the same ways.
"""
from __future__ import annotations

import functools
import itertools
import json
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata.boolean import difference
from logitgate.automata.dfa import ByteDFA, build_dfa, regex_dfa
from logitgate.json_schema.strings import (
    _QUOTE,
    any_string_node,
    counted_string_node,
    other_keys_node,
    encode_automaton,
    encode_content,
    length_node,
    literal_string_node,
    string_node,
)
from logitgate.regex.ast import Alt, Automaton, CharClass, Concat, Group, Node, Repeat, TableAutomaton
from logitgate.regex.parser import parse

SPECIAL = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", " ", "a", "é",
           "\u2028", "\u2029", "\ufeff", "\ud7ff", "\ue000", "\uffff", "😀", "\U00010000",
           "\U0010ffff", "𝔸"]
SCALARS = st.characters(blacklist_categories=("Cs",))
CHARS = st.one_of(st.sampled_from(SPECIAL), SCALARS)
SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
         "\t": "\\t"}

CONTENT_PATTERNS = [
    r"(?s).*",
    r"\w+",
    r'[a-z"\\/]*',
    r"(?s).{2,4}",
    r'[\x00-\x1f"\\]+',
    r"[\U0001F600-\U0001F64F]+",
    r"[^a]*",
    r"(?:ab|[é😀])*\u2028?",
    r"[\ud7ff\ue000\uffff\U00010000\U0010ffff]+",
    r"[\U000103ff-\U00010400\U0001F000-\U0001F0FF\U0010fc00-\U0010fc10]*",
    r"\ufeff|x|",
    r"[\x08\x0c\n\r\t/]+",
    r"(?s)(?P<x>[^\x00-\x7f]{1,3})\d",
]


@functools.cache
def content_dfa(pattern: str) -> ByteDFA:
    return regex_dfa(string_node(parse(pattern)))


@functools.cache
def any_dfa() -> ByteDFA:
    return regex_dfa(any_string_node())


def hex4(value: int, rnd: random.Random) -> str:
    return "\\u" + "".join(rnd.choice((d.lower(), d.upper())) for d in f"{value:04x}")


def random_encoding(s: str, rnd: random.Random) -> str:
    """A JSON text of ``s``: each character raw, short-escaped or ``\\u``-escaped at random."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        options = []
        if cp >= 0x20 and ch not in '"\\':
            options.append(ch)
        if ch in SHORT:
            options.append(SHORT[ch])
        if cp <= 0xFFFF:
            if not 0x20 <= cp <= 0x7E:  # printable ASCII is never \u-escaped
                options.append(hex4(cp, rnd))
        else:
            v = cp - 0x10000
            options.append(hex4(0xD800 + (v >> 10), rnd) + hex4(0xDC00 + (v & 0x3FF), rnd))
        out.append(rnd.choice(options))
    out.append('"')
    return "".join(out)


def encodings(s: str, seed: int) -> list[str]:
    rnd = random.Random(seed)
    texts = [json.dumps(s), json.dumps(s, ensure_ascii=False)]
    texts += [random_encoding(s, rnd) for _ in range(3)]
    for text in texts:
        assert json.loads(text) == s  # the generator itself is right
    return texts


def valid_json_string(text: str) -> bool:
    """Oracle: ``text`` is one JSON string of Unicode scalar values, nothing around it."""
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return False
    try:
        value = json.loads(text)
    except ValueError:
        return False
    if re.search(r"(?<!\\)(?:\\\\)*\\u00(?:[2-6][0-9a-fA-F]|7[0-9a-eA-E])", text):
        return False  # a printable ASCII character written as \uXXXX: not a spelling we produce
    return isinstance(value, str) and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


# ---------------------------------------------------------------------------------------------
# Content patterns in every encoding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", CONTENT_PATTERNS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encodings_match_iff_content_matches(pattern: str, data: st.DataObject) -> None:
    s = data.draw(
        st.one_of(st.text(CHARS, max_size=8), st.from_regex(pattern, fullmatch=True)), label="s"
    )
    seed = data.draw(st.integers(0, 2**32), label="seed")
    expected = re.fullmatch(pattern, s) is not None
    dfa = content_dfa(pattern)
    for text in encodings(s, seed):
        assert dfa.matches(text.encode()) == expected, (s, text)


@settings(max_examples=200, deadline=None)
@given(s=st.text(CHARS, max_size=10), seed=st.integers(0, 2**32))
def test_any_string_accepts_every_encoding(s: str, seed: int) -> None:
    dfa = any_dfa()
    for text in encodings(s, seed):
        assert dfa.matches(text.encode()), text


INVALID_TEXTS = [
    '"\x01"', '"\n"', '"\x1f"', '"a"b"', '"\\"', '"abc', 'abc"', "'a'", '""""', " \"a\"", '"a" ',
    '"\\ud800"', '"\\udc00"', '"\\udc00\\ud800"', '"\\ud83d\\u0041"', '"\\ud83dx"',
    '"\\ud83d\\ud83d\\ude00"', '"\\x41"', '"\\u12"', '"\\u12G4"', '"\\U0001F600"', '"\\a"',
    '"\\\'"', '"\\ "', '"\\u00e"', '"\\uD83D\\uDE0"',
]


@pytest.mark.parametrize("text", INVALID_TEXTS)
def test_invalid_texts_rejected(text: str) -> None:
    assert not valid_json_string(text)
    assert not any_dfa().matches(text.encode())
    assert not content_dfa(r"(?s).*").matches(text.encode())


def test_every_backslash_pair() -> None:
    for cp in range(0x20, 0x80):
        text = '"\\' + chr(cp) + '"'
        assert any_dfa().matches(text.encode()) == valid_json_string(text), text


@settings(max_examples=300, deadline=None)
@given(value=st.integers(0, 0xFFFF), low=st.integers(0, 0xFFFF), seed=st.integers(0, 2**32))
def test_unicode_escapes_exactly_scalar_values(value: int, low: int, seed: int) -> None:
    rnd = random.Random(seed)
    for text in ('"' + hex4(value, rnd) + '"', '"' + hex4(value, rnd) + hex4(low, rnd) + '"'):
        assert any_dfa().matches(text.encode()) == valid_json_string(text), text


CHUNKS = ['"', "\\", "u", "d83d", "DE00", "dc00", "D800", "00e9", "0041", "a", "é", "😀", "\x01",
          "\\n", "\\u00e9", "/", "x", "0", "D8", " ", "\\ud83d", "\\uDE00", "b", "\u2028"]


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.sampled_from(CHUNKS), max_size=8))
def test_fuzzed_texts_against_json_loads(parts: list[str]) -> None:
    text = '"' + "".join(parts) + '"'
    assert any_dfa().matches(text.encode()) == valid_json_string(text), text
    word = valid_json_string(text) and re.fullmatch(r"\w+", json.loads(text)) is not None
    assert content_dfa(r"\w+").matches(text.encode()) == word, text


# ---------------------------------------------------------------------------------------------
# Lengths, literals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bounds", [(0, 0), (0, 1), (1, 1), (2, 4), (3, None), (0, None), (5, 2)])
@settings(max_examples=40, deadline=None)
@given(s=st.text(CHARS, max_size=6), seed=st.integers(0, 2**32))
def test_length_counts_code_points(bounds: tuple[int, int | None], s: str, seed: int) -> None:
    lo, hi = bounds
    dfa = _length_dfa(lo, hi)
    expected = lo <= len(s) and (hi is None or len(s) <= hi)
    for text in encodings(s, seed):
        assert dfa.matches(text.encode()) == expected, (bounds, text)


@functools.cache
def _length_dfa(lo: int, hi: int | None) -> ByteDFA:
    return regex_dfa(string_node(length_node(lo, hi)))


def test_length_counts_surrogate_pair_as_one() -> None:
    dfa = _length_dfa(1, 1)
    assert dfa.matches(b'"\\ud83d\\ude00"')
    assert dfa.matches('"😀"'.encode())
    assert not _length_dfa(2, 2).matches(b'"\\ud83d\\ude00"')


def test_length_bounds_checked() -> None:
    with pytest.raises(ValueError):
        length_node(-1, 3)


@settings(max_examples=60, deadline=None)
@given(s=st.text(CHARS, max_size=6), other=st.text(CHARS, max_size=6), seed=st.integers(0, 2**32))
def test_literal_accepts_exactly_its_value(s: str, other: str, seed: int) -> None:
    dfa = regex_dfa(literal_string_node(s))
    for text in encodings(s, seed):
        assert dfa.matches(text.encode()), text
    for text in encodings(other, seed):
        assert dfa.matches(text.encode()) == (other == s), text


def test_literal_refuses_lone_surrogate() -> None:
    with pytest.raises(ValueError):
        literal_string_node("a\ud800")


# ---------------------------------------------------------------------------------------------
# Structure, Automaton nodes
# ---------------------------------------------------------------------------------------------


def char_class_leaves(node: Node) -> int:
    if isinstance(node, CharClass):
        return 1
    if isinstance(node, (Concat, Alt)):
        return sum(map(char_class_leaves, node.items))
    if isinstance(node, (Repeat, Group)):
        return char_class_leaves(node.item)
    return 0


def test_tree_sizes_stay_small() -> None:
    assert char_class_leaves(any_string_node()) <= 40
    assert char_class_leaves(string_node(parse(r"\w+"))) <= 3000
    assert any_string_node() is any_string_node()


def test_structure_is_kept() -> None:
    node = encode_content(parse(r"(?P<n>a)b*"))
    assert isinstance(node, Concat) and isinstance(node.items[0], Group)
    assert node.items[0].name == "n" and isinstance(node.items[1], Repeat)


# (?:[a-z"\\\n]|[astral][\x00-\x1f/é])*é(?:x|[\U00010000-\U0001FFFF\u0100-\u01ff]{2})?
ASTRAL = ((0x1F600, 0x1F64F), (0x10400, 0x10800))
AUTOMATON = Automaton(
    start=0,
    accepting=(False, False, True, False, True),
    edges=(
        ((((0x0A, 0x0A), (0x22, 0x22), (0x5C, 0x5C), (0x61, 0x7A)), 0), (ASTRAL, 1), (((0xE9, 0xE9),), 2)),
        ((((0x00, 0x1F), (0x2F, 0x2F), (0xE9, 0xE9)), 0),),
        ((((0x78, 0x78),), 4), (((0x100, 0x1FF), (0x10000, 0x1FFFF)), 3)),
        ((((0x100, 0x1FF), (0x10000, 0x1FFFF)), 4),),
        (),
    ),
)
AUTOMATON_PATTERN = (
    r'(?:[a-z"\\\n]|[\U0001F600-\U0001F64F\U00010400-\U00010800][\x00-\x1f/é])*é'
    r"(?:x|[\U00010000-\U0001FFFF\u0100-\u01ff]{2})?"
)
AUTOMATON_CHARS = st.sampled_from(list('az"\\\n\x00\x1f/éx\u0100\u01ff\U00010000\U0001ffff😀\U00010400\U00010800\U00010801'))


def test_encoded_automaton_is_deterministic_and_live() -> None:
    encoded = encode_automaton(AUTOMATON)
    n = len(encoded.accepting)
    assert len(encoded.edges) == n > len(AUTOMATON.accepting)
    for moves in encoded.edges:
        seen = [pair for ranges, _ in moves for pair in ranges]
        seen.sort()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(seen)), moves
        assert all(ranges for ranges, _ in moves)
    live = {q for q in range(n) if encoded.accepting[q]}
    while True:
        more = {q for q in range(n) if any(t in live for _, t in encoded.edges[q])} - live
        if not more:
            break
        live |= more
    assert live == set(range(n))


@settings(max_examples=150, deadline=None)
@given(
    s=st.one_of(st.text(AUTOMATON_CHARS, max_size=6), st.from_regex(AUTOMATON_PATTERN, fullmatch=True)),
    seed=st.integers(0, 2**32),
)
def test_automaton_encodes_like_its_tree(s: str, seed: int) -> None:
    expected = re.fullmatch(AUTOMATON_PATTERN, s) is not None
    dfa = _automaton_dfa()
    for text in encodings(s, seed):
        assert dfa.matches(text.encode()) == expected, text


@functools.cache
def _automaton_dfa() -> ByteDFA:
    return regex_dfa(string_node(AUTOMATON))


# ---------------------------------------------------------------------------------------------
# Keys other than a set of names
# ---------------------------------------------------------------------------------------------

KEY_CHARS = st.sampled_from(list("ab_-Z9 ~!{"))  # few letters: names share prefixes
NAME_SETS = st.lists(st.text(KEY_CHARS, max_size=5), min_size=1, max_size=6)
_COLON = CharClass(((0x3A, 0x3A),))
_DIGITS = CharClass(((0x30, 0x39),))


def _same_dfa(a: ByteDFA, b: ByteDFA) -> bool:
    return (a.n_states == b.n_states and (a.transitions == b.transitions).all()
            and (a.accepting == b.accepting).all())


def _names_difference(names: list[str]) -> Node:
    lits = [literal_string_node(n) for n in names]
    return difference(any_string_node(), lits[0] if len(lits) == 1 else Alt(tuple(lits)))


@settings(max_examples=60, deadline=None)
@given(names=NAME_SETS)
def test_other_keys_node_is_the_boolean_difference(names: list[str]) -> None:
    direct = other_keys_node(names)
    assert isinstance(direct, TableAutomaton)
    oracle = _names_difference(names)
    # the lexer's ways in: a union part followed by a literal (the byte builder), a union part
    # alone (the byte builder, no tail), one pattern (the position NFA, from the table's edges)
    for wrap in (lambda n: [Concat((n, _COLON)), _DIGITS], lambda n: [n, _DIGITS],
                 lambda n: [Concat((n, _COLON))], lambda n: [Alt((n, _DIGITS))]):
        assert _same_dfa(build_dfa(wrap(direct)), build_dfa(wrap(oracle))), names


@settings(max_examples=150, deadline=None)
@given(names=NAME_SETS, s=st.one_of(st.text(KEY_CHARS, max_size=6), st.text(CHARS, max_size=4)),
       seed=st.integers(0, 2**32))
def test_other_keys_accept_exactly_the_other_strings(names: list[str], s: str, seed: int) -> None:
    dfa = _other_keys_dfa(tuple(sorted(set(names))))
    for text in encodings(s, seed):
        assert dfa.matches((text + ":").encode()) == (s not in names), (names, text)


@functools.cache
def _other_keys_dfa(names: tuple[str, ...]) -> ByteDFA:
    node = other_keys_node(names)
    assert node is not None
    return build_dfa([Concat((node, _COLON)), _DIGITS])


def test_other_keys_node_declines_names_with_escaped_forms() -> None:
    # characters with an escaped spelling go to the boolean difference instead
    for name in ["a/b", 'q"', "back\\slash", "tab\t", "é", "😀", "\x7f"]:
        assert other_keys_node(["ok", name]) is None, name
    assert other_keys_node(["ok", "fine name!"]) is not None


def test_other_keys_node_is_keyed_by_the_name_set_and_pickles() -> None:
    import pickle

    a, b = other_keys_node(["x", "y", "x"]), other_keys_node(["y", "x"])
    assert a == b and hash(a) == hash(b) and a != other_keys_node(["x"])
    again = pickle.loads(pickle.dumps(a))
    assert again == a
    assert _same_dfa(build_dfa([again, _DIGITS]), build_dfa([a, _DIGITS]))
    assert _same_dfa(build_dfa([Concat((again, _COLON))]), build_dfa([Concat((_names_difference(["x", "y"]), _COLON))]))


# ---------------------------------------------------------------------------------------------
# Counted strings and pieces of strings
# ---------------------------------------------------------------------------------------------

def _counted_oracle(lo: int, hi: int | None, opening: bool, closing: bool) -> Node:
    items = [_QUOTE] if opening else []
    items.append(encode_content(length_node(lo, hi)))
    if closing:
        items.append(_QUOTE)
    return Concat(tuple(items))


@settings(max_examples=80, deadline=None)
@given(lo=st.integers(0, 6), span=st.one_of(st.none(), st.integers(0, 5)), opening=st.booleans(),
       closing=st.booleans())
def test_counted_string_node_is_the_length_tree(lo: int, span: int | None, opening: bool, closing: bool) -> None:
    if not (opening or closing or lo):
        lo = 1  # a lexeme is never empty
    hi = None if span is None else lo + span
    direct = counted_string_node(lo, hi, opening, closing)
    assert isinstance(direct, TableAutomaton)
    oracle = _counted_oracle(lo, hi, opening, closing)
    # a union part followed by a literal (byte builder, or the character table when there is no
    # closing quote), a union part alone, one pattern (the position NFA from the table's edges)
    for wrap in (lambda n: [Concat((n, _COLON)), _DIGITS], lambda n: [n, _DIGITS],
                 lambda n: [Concat((n, _COLON))], lambda n: [Alt((n, _DIGITS))]):
        assert _same_dfa(build_dfa(wrap(direct)), build_dfa(wrap(oracle))), (lo, hi, opening, closing)
    if hi is not None:  # and the bounds are the ones asked for
        assert not _same_dfa(build_dfa([direct]), build_dfa([_counted_oracle(lo, hi + 1, opening, closing)]))


@settings(max_examples=100, deadline=None)
@given(s=st.text(CHARS, max_size=9), seed=st.integers(0, 2**32))
def test_counted_string_counts_code_points(s: str, seed: int) -> None:
    for lo, hi in ((2, 5), (0, 3), (4, None), (7, 7)):
        dfa = _counted_dfa(lo, hi)
        for text in encodings(s, seed):
            assert dfa.matches(text.encode("utf-8", "surrogatepass")) == (lo <= len(s) and (hi is None or len(s) <= hi))


@functools.cache
def _counted_dfa(lo: int, hi: int | None) -> ByteDFA:
    return build_dfa([counted_string_node(lo, hi)])


def test_counted_string_node_checks_bounds_and_pickles() -> None:
    import pickle

    with pytest.raises(ValueError):
        counted_string_node(3, 2)
    with pytest.raises(ValueError):
        counted_string_node(-1, 2)
    a = counted_string_node(2, 300, True, False)
    assert a == counted_string_node(2, 300, True, False) and a != counted_string_node(2, 300, True, True)
    assert pickle.loads(pickle.dumps(a)) == a
