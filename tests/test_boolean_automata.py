"""Tests for ``logitgate.automata.boolean`` and the ``Automaton`` regex node.

Oracle: Python's ``re.fullmatch``. Random small regexes over a few characters (ASCII and not) are
combined with intersection, difference and complement; the byte DFA of the result must match a
string exactly when the operands' verdicts, combined the same way, say so. Results are embedded in
bigger trees (concatenation, repetition, alternation) and checked against a split-based oracle, or
against the equivalent Python regex where one exists.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata import build_dfa, regex_dfa
from logitgate.automata.boolean import (
    ANY_STRING,
    NOTHING,
    complement,
    difference,
    equivalent,
    intersect,
    is_empty,
    is_subset,
    union,
)
from logitgate.errors import CompileError
from logitgate.regex.ast import Alt, Automaton, CharClass, Concat, Empty, Node, Repeat
from logitgate.regex.parser import parse

from .oracles import fullmatches

Pred = Callable[[str], bool]

ALPHABET = "ab\u00e9\u20ac\U0001f600"  # a b é € 😀
TEXT_ALPHABET = ALPHABET + "z\n"  # plus characters no operand names
SHORT_STRINGS = ["".join(p) for n in range(4) for p in itertools.product("ab\u20ac\n", repeat=n)]

LEAVES = ["a", "b", "\u00e9", "\u20ac", "\U0001f600", "[ab]", "[^a]", "[a-\u00e9]", ".", "[\u20ac\U0001f600]"]


def _wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]})(?:{p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        inner.map(lambda x: f"(?:{x})*"),
        inner.map(lambda x: f"(?:{x})+"),
        inner.map(lambda x: f"(?:{x})?"),
        inner.map(lambda x: f"({x})"),
        st.tuples(inner, st.integers(0, 2), st.integers(0, 2)).map(lambda p: f"(?:{p[0]}){{{p[1]},{p[1] + p[2]}}}"),
    )


REGEXES = st.recursive(st.sampled_from(LEAVES), _wrap, max_leaves=6)
TEXTS = st.lists(st.text(TEXT_ALPHABET, max_size=7), min_size=1, max_size=20)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def full(pattern: str) -> Pred:
    compiled = re.compile(pattern)
    return lambda s: fullmatches(compiled, s)


def assert_language(node: Node, oracle: Pred, texts: list[str]) -> None:
    dfa = regex_dfa(node)
    for s in SHORT_STRINGS + texts:
        assert dfa.matches(s.encode()) == oracle(s), (node, s)


def repeat_oracle(pred: Pred, lo: int, hi: int | None) -> Pred:
    """``s`` splits into ``lo`` to ``hi`` pieces (``None``: any number), each satisfying ``pred``."""

    def match(s: str) -> bool:
        n = len(s)
        # at most n non-empty pieces; the other pieces can be dropped while at least `lo` remain
        top = lo + n if hi is None else hi
        ends = {0}
        for count in range(top + 1):
            if count >= lo and n in ends:
                return True
            ends = {j for i in ends for j in range(i, n + 1) if pred(s[i:j])}
            if not ends:
                return False
        return False

    return match


def check_invariants(node: Node) -> None:
    """The Automaton invariants, and the canonical numbering the boolean operations promise."""
    if not isinstance(node, Automaton):
        return
    n = len(node.accepting)
    assert node.start == 0 and n >= 1 and len(node.edges) == n
    order = [0]
    for q in order:  # breadth-first, edges by smallest code point
        for _, t in node.edges[q]:
            if t not in order:
                order.append(t)
    assert order == list(range(n))
    for state_edges in node.edges:
        los = [ranges[0][0] for ranges, _ in state_edges]
        assert los == sorted(los)
        assert len({t for _, t in state_edges}) == len(state_edges)  # one edge per target
        flat = sorted(r for ranges, _ in state_edges for r in ranges)
        for (_, hi), (lo, _) in itertools.pairwise(flat):
            assert hi < lo  # disjoint across edges: deterministic
        for ranges, _ in state_edges:
            assert ranges
            for (_, hi), (lo2, _) in itertools.pairwise(ranges):
                assert hi + 1 < lo2  # sorted, non-adjacent
            for lo, hi in ranges:
                assert 0 <= lo <= hi <= 0x10FFFF and (hi < 0xD800 or lo > 0xDFFF)
    live = {q for q in range(n) if node.accepting[q]}
    changed = True
    while changed:
        changed = False
        for q in range(n):
            if q not in live and any(t in live for _, t in node.edges[q]):
                live.add(q)
                changed = True
    assert live == set(range(n))


# ---------------------------------------------------------------------------------------------
# the operations against re.fullmatch
# ---------------------------------------------------------------------------------------------


@SETTINGS
@given(REGEXES, REGEXES, TEXTS)
def test_intersect(ra: str, rb: str, texts: list[str]) -> None:
    a, b = full(ra), full(rb)
    node = intersect(parse(ra), parse(rb))
    check_invariants(node)
    assert_language(node, lambda s: a(s) and b(s), texts)


@SETTINGS
@given(REGEXES, REGEXES, TEXTS)
def test_difference(ra: str, rb: str, texts: list[str]) -> None:
    a, b = full(ra), full(rb)
    node = difference(parse(ra), parse(rb))
    check_invariants(node)
    assert_language(node, lambda s: a(s) and not b(s), texts)


@SETTINGS
@given(REGEXES, TEXTS)
def test_complement(ra: str, texts: list[str]) -> None:
    a = full(ra)
    node = complement(parse(ra))
    check_invariants(node)
    assert_language(node, lambda s: not a(s), texts)


@SETTINGS
@given(REGEXES, REGEXES, TEXTS)
def test_complement_in_universe(ra: str, ru: str, texts: list[str]) -> None:
    a, u = full(ra), full(ru)
    assert_language(complement(parse(ra), parse(ru)), lambda s: u(s) and not a(s), texts)


@SETTINGS
@given(REGEXES, REGEXES, REGEXES, TEXTS)
def test_intersect_three_and_union(ra: str, rb: str, rc: str, texts: list[str]) -> None:
    a, b, c = full(ra), full(rb), full(rc)
    nodes = parse(ra), parse(rb), parse(rc)
    assert_language(intersect(*nodes), lambda s: a(s) and b(s) and c(s), texts)
    assert_language(union(*nodes), lambda s: a(s) or b(s) or c(s), texts)


# ---------------------------------------------------------------------------------------------
# Automaton nodes inside bigger trees
# ---------------------------------------------------------------------------------------------


def x_then_y(node: Node) -> Node:
    return Concat((CharClass(((ord("x"), ord("x")),)), node, CharClass(((ord("y"), ord("y")),))))


@SETTINGS
@given(REGEXES, TEXTS)
def test_nested_single_operand(ra: str, texts: list[str]) -> None:
    """``intersect(a)`` is ``a``'s minimal automaton: nested anywhere it behaves like ``(?:a)``."""
    node = intersect(parse(ra))
    texts = texts + ["x" + s + "y" for s in texts] + [s + s for s in texts]
    assert_language(x_then_y(node), full(f"x(?:{ra})y"), texts)
    assert_language(Repeat(node, 0, None), full(f"(?:{ra})*"), texts)
    assert_language(Repeat(node, 2, 4), full(f"(?:{ra}){{2,4}}"), texts)
    assert_language(Alt((node, parse("b+z"))), full(f"(?:{ra})|b+z"), texts)
    assert_language(Concat((node, node)), full(f"(?:{ra})(?:{ra})"), texts)


@SETTINGS
@given(REGEXES, REGEXES, TEXTS)
def test_nested_boolean_results(ra: str, rb: str, texts: list[str]) -> None:
    a, b = full(ra), full(rb)

    def both(s: str) -> bool:
        return a(s) and b(s)

    node = intersect(parse(ra), parse(rb))
    texts = texts + ["x" + s + "y" for s in texts] + [s + s for s in texts]
    assert_language(x_then_y(node), lambda s: len(s) >= 2 and s[0] == "x" and s[-1] == "y" and both(s[1:-1]), texts)
    assert_language(Repeat(node, 0, None), repeat_oracle(both, 0, None), texts)
    assert_language(Repeat(node, 2, 4), repeat_oracle(both, 2, 4), texts)
    assert_language(Alt((node, parse("b+z"))), lambda s: both(s) or re.fullmatch("b+z", s) is not None, texts)
    minus = difference(parse(ra), parse(rb))
    assert_language(Repeat(minus, 1, None), repeat_oracle(lambda s: a(s) and not b(s), 1, None), texts)


def test_nested_in_multi_pattern_dfa() -> None:
    word = difference(parse("[a-z]+"), parse("if|else"))
    dfa = build_dfa([word, parse("if|else"), Repeat(word, 0, 2)])
    for text, expect in [("if", (False, True, True)), ("iff", (True, False, True)), ("", (False, False, True)),
                         ("else", (False, True, True)), ("x", (True, False, True)), ("x1", (False, False, False))]:
        state = dfa.step(dfa.start, text.encode())
        assert tuple(dfa.is_accepting(state, k) for k in range(3)) == expect, text


def test_handwritten_automaton() -> None:
    """A DFA written by hand: an even number of ``a``, any ``b`` or ``€``."""
    a, rest = ((ord("a"), ord("a")),), ((ord("b"), ord("b")), (0x20AC, 0x20AC))
    even = Automaton(0, (True, False), (((a, 1), (rest, 0)), ((a, 0), (rest, 1))))
    assert hash(even) == hash(Automaton(0, (True, False), even.edges))
    texts = ["", "a", "aa", "ab€a", "b€b", "aaa", "€", "c", "aab"]
    assert_language(even, full("(?:[b€]*a[b€]*a)*[b€]*"), texts)
    assert_language(Repeat(even, 3, 3), full("(?:(?:[b€]*a[b€]*a)*[b€]*){3}"), texts)
    assert equivalent(even, parse("(?:[b€]*a[b€]*a)*[b€]*"))
    assert intersect(even) == even  # already minimal and canonical


# ---------------------------------------------------------------------------------------------
# predicates, canonical form, limits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "empty"),
    [("a", False), ("", False), ("[^\\s\\S]", True), ("a[^\\s\\S]*b", False), ("(?:a[^\\s\\S])+", True),
     ("(?:a|[^\\s\\S]b)(?:[^\\s\\S])?", False), ("x(?:[^\\s\\S]){2,3}", True)],
)
def test_is_empty(pattern: str, empty: bool) -> None:
    assert is_empty(parse(pattern)) is empty


def test_known_cases() -> None:
    p = parse
    assert is_empty(NOTHING) and not is_empty(Empty()) and not is_empty(ANY_STRING)
    assert is_empty(intersect(p("a+"), p("b+")))
    assert is_subset(p("ab"), p("[a-z]+")) and not is_subset(p("[a-z]+"), p("ab"))
    assert is_subset(NOTHING, p("a")) and is_subset(p("\U0001f600*"), ANY_STRING)
    assert equivalent(p("(a|b)*"), p("(a*b*)*")) and not equivalent(p("a*"), p("a+"))
    assert equivalent(complement(complement(p("a|bc*"))), p("a|bc*"))
    assert equivalent(union(p("a"), p("b")), p("[ab]"))
    assert union() == NOTHING and intersect() == ANY_STRING and union(p("a")) == p("a")


def test_canonical_small_results() -> None:
    p = parse
    assert intersect(p("a"), p("b")) == NOTHING == CharClass(())
    assert regex_dfa(NOTHING).start == -1
    assert regex_dfa(Concat((p("a"), NOTHING))).start == -1
    assert not regex_dfa(Alt((NOTHING, p("a")))).matches(b"")
    assert intersect(p("a*"), p("b*")) == Empty()
    assert difference(p("a*"), p("a+")) == Empty()
    assert complement(ANY_STRING) == NOTHING
    assert intersect(p("(a|b)*")) == intersect(p("(a*b*)*"))  # equal languages, equal nodes
    assert intersect(p("[a-c]"), p("[b-d]")) == Automaton(0, (False, True), (((((98, 99),), 1),), ()))


@SETTINGS
@given(REGEXES, REGEXES)
def test_determinism_and_predicates(ra: str, rb: str) -> None:
    a, b = parse(ra), parse(rb)
    node = intersect(a, b)
    assert node == intersect(a, b) == intersect(b, a) and hash(node) == hash(intersect(a, b))
    assert difference(a, b) == difference(a, b)
    assert is_empty(node) == (node == NOTHING)
    assert is_subset(a, b) == is_empty(difference(a, b))
    assert equivalent(a, b) == (intersect(a) == intersect(b)) == (is_subset(a, b) and is_subset(b, a))
    assert equivalent(a, intersect(a)) and equivalent(complement(complement(a)), a)


def test_unicode_classes() -> None:
    word = parse(r"\w+")
    not_digits = difference(word, parse(r"\d+"))
    texts = ["abc", "123", "١٢٣", "a1", "é", "日本", "😀", "", "a b", "٣x"]
    assert_language(not_digits, lambda s: bool(re.fullmatch(r"\w+", s)) and not re.fullmatch(r"\d+", s), texts)
    assert_language(complement(word), lambda s: not re.fullmatch(r"\w+", s), texts)


def test_max_states() -> None:
    hard = parse("(?:a|b)*a(?:a|b){12}")
    with pytest.raises(CompileError, match="max_states"):
        intersect(hard, parse("[ab]*"), max_states=100)
    with pytest.raises(CompileError, match="max_states"):
        is_subset(hard, parse("[ab]*"), max_states=100)
    assert not is_empty(hard, max_states=100)  # no determinisation


def test_max_positions_counts_automaton_edges() -> None:
    five = intersect(parse("[a-z]{5}"))
    assert isinstance(five, Automaton)
    assert regex_dfa(Repeat(five, 4, 4), max_states=30).matches(b"abcde" * 4)  # 20 positions
    with pytest.raises(CompileError, match="positions"):
        regex_dfa(Repeat(five, 70, 70), max_states=30)  # 350 positions > 10 * max_states


PAIRED = [
    (r"[a-z]+(\.[a-z]+)*@[a-z]+(\.[a-z]+)+", r".{0,40}"),
    (r"(a|ab|abc)*c?(b|bc)*", r"[abc]{3,30}"),
    (r"[ab]*a[ab]{4}", r".{0,20}"),
    (r"\w+( \w+)*", r"[^x]{2,50}"),
]


def _states(node: Node) -> int:
    return len(node.accepting) if isinstance(node, Automaton) else 1


@pytest.mark.parametrize("a, b", PAIRED)
def test_a_cap_the_combined_subsets_exceed_is_met_by_the_operands_product(a: str, b: str) -> None:
    """One subset construction over both operands pairs their unminimised subsets; past the cap,
    intersect and difference pair the operands' minimal DFAs instead (kernel ``product_dfa``).
    The result is the same canonical node as without a cap, exactly at the size of the minimal
    result, and a cap below that size is still an error."""
    from logitgate.automata import boolean

    na, nb = parse(a), parse(b)
    combined = boolean._product((na, nb), 10**6)[1].shape[0]
    _, (da, db) = boolean._operand_dfas((na, nb), 10**6)
    tried = 0
    for op, complete in ((intersect, False), (difference, True)):
        full = op(na, nb)
        n = _states(full)
        pairs = boolean.product_dfa(da[0], db[0], complete, 10**6)[0].shape[0]
        cap = max(n, -(-pairs // boolean._PRODUCT_PAIRS))  # the pairs before minimising may be 4x the cap
        if cap >= combined:
            continue  # the single construction fits this cap
        tried += 1
        assert op(na, nb, max_states=cap) == full
        with pytest.raises(CompileError):
            op(na, nb, max_states=n - 1)
    assert tried
    both = regex_dfa(intersect(na, nb, max_states=_states(intersect(na, nb))))
    for k in range(6):
        for p in itertools.product("ab.@ c", repeat=k):
            t = "".join(p)
            assert both.matches(t.encode()) == (re.fullmatch(a, t) is not None and re.fullmatch(b, t) is not None), t
