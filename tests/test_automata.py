"""Tests for ``logitgate.automata``: UTF-8 byte sequences, regex -> minimal byte DFA.

Oracles, not hand-picked expectations: Python's UTF-8 codec for the byte sequences, ``re.fullmatch``
for the languages, an independent character-level Thompson NFA (written here) for "is there still
a continuation", Moore partition refinement (written here) for minimality, per-pattern DFAs for the
multi-pattern columns.
"""
from __future__ import annotations

from tests.conftest import SHARED_DATA as _DATA

import bisect
import importlib.util
import itertools
import json
import random
import re
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from logitgate.automata import ByteDFA, build_dfa, class_automaton, regex_dfa, utf8_sequences
from logitgate.automata.utf8 import FINAL, normalize_ranges, utf8_automaton
from logitgate.errors import CompileError
from logitgate.regex.ast import Alt, CharClass, Concat, Empty, Group, Node, Repeat

from .oracles import fullmatches

HAVE_PARSER = importlib.util.find_spec("logitgate.regex.parser") is not None
needs_parser = pytest.mark.skipif(not HAVE_PARSER, reason="logitgate.regex.parser not available yet")

SURROGATES = (0xD800, 0xDFFF)
SAMPLES_PATH = _DATA / "outlines-core" / "regex_samples.json"


def parse(pattern: str) -> Node:
    from logitgate.regex.parser import parse as _parse

    return _parse(pattern)


# ---------------------------------------------------------------------------------------------
# helpers: AST construction, oracles
# ---------------------------------------------------------------------------------------------


def lit(text: str) -> Node:
    items = tuple(CharClass(((ord(c), ord(c)),)) for c in text)
    if not items:
        return Empty()
    return items[0] if len(items) == 1 else Concat(items)


def cls(*ranges: tuple[str, str] | str) -> CharClass:
    out = []
    for r in ranges:
        lo, hi = (r, r) if isinstance(r, str) else r
        out.append((ord(lo), ord(hi)))
    return CharClass(normalize_ranges(out))


def in_ranges(ranges: tuple[tuple[int, int], ...], cp: int) -> bool:
    i = bisect.bisect_right(ranges, (cp, 0x10FFFF + 1)) - 1
    return i >= 0 and ranges[i][0] <= cp <= ranges[i][1]


class CharNFA:
    """Independent oracle: Thompson NFA over code points (epsilon moves), from the AST."""

    def __init__(self, node: Node) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []
        self.start, self.accept = self._build(node)
        self.coaccessible = self._coaccessible()

    def _new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def _build(self, node: Node) -> tuple[int, int]:
        if isinstance(node, CharClass):
            s, f = self._new(), self._new()
            self.edges[s].append((node.ranges, f))
            return s, f
        if isinstance(node, Group):
            return self._build(node.item)
        if isinstance(node, Empty):
            s = self._new()
            return s, s
        if isinstance(node, Concat):
            parts = [self._build(item) for item in node.items]
            for (_, f), (s, _) in zip(parts, parts[1:]):
                self.eps[f].append(s)
            return parts[0][0], parts[-1][1]
        if isinstance(node, Alt):
            s, f = self._new(), self._new()
            for item in node.items:
                a, b = self._build(item)
                self.eps[s].append(a)
                self.eps[b].append(f)
            return s, f
        if isinstance(node, Repeat):
            s = cur = self._new()
            for _ in range(node.min):
                a, b = self._build(node.item)
                self.eps[cur].append(a)
                cur = b
            if node.max is None:
                a, b = self._build(node.item)
                self.eps[cur].append(a)
                self.eps[b].append(a)
                end = self._new()
                self.eps[cur].append(end)
                self.eps[b].append(end)
                return s, end
            end = self._new()
            self.eps[cur].append(end)
            for _ in range(node.max - node.min):
                a, b = self._build(node.item)
                self.eps[cur].append(a)
                self.eps[b].append(end)
                cur = b
            return s, end
        raise TypeError(node)

    def closure(self, states: set[int]) -> frozenset[int]:
        out, stack = set(states), list(states)
        while stack:
            for t in self.eps[stack.pop()]:
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)

    def _coaccessible(self) -> set[int]:
        preds: list[list[int]] = [[] for _ in self.eps]
        for s in range(len(self.eps)):
            for t in self.eps[s]:
                preds[t].append(s)
            for ranges, t in self.edges[s]:
                if ranges:
                    preds[t].append(s)
        out, stack = {self.accept}, [self.accept]
        while stack:
            for p in preds[stack.pop()]:
                if p not in out:
                    out.add(p)
                    stack.append(p)
        return out

    def run(self, text: str) -> frozenset[int]:
        cur = self.closure({self.start})
        for ch in text:
            cp = ord(ch)
            cur = self.closure({t for s in cur for ranges, t in self.edges[s] if in_ranges(ranges, cp)})
        return cur

    def alive_after_bytes(self, data: bytes) -> bool:
        """Some byte string completes ``data`` into a full match."""
        text, tail = split_utf8_prefix(data)
        if text is None:
            return False
        cur = self.run(text)
        if not tail:
            return bool(cur & self.coaccessible)
        lo, hi = code_points_with_prefix(tail)
        if lo > hi:
            return False
        for s in cur:
            for ranges, t in self.edges[s]:
                if self.closure({t}) & self.coaccessible and ranges_intersect(ranges, lo, hi):
                    return True
        return False


def ranges_intersect(ranges: tuple[tuple[int, int], ...], lo: int, hi: int) -> bool:
    """Whether ``ranges`` contain a non-surrogate code point of ``lo..hi``."""
    for a, b in ranges:
        a, b = max(a, lo), min(b, hi)
        for x, y in ((a, min(b, SURROGATES[0] - 1)), (max(a, SURROGATES[1] + 1), b)):
            if x <= y:
                return True
    return False


def split_utf8_prefix(data: bytes) -> tuple[str | None, bytes]:
    """``(text, tail)``: ``data`` = encoded ``text`` + an incomplete character; text None if
    ``data`` is not a prefix of valid UTF-8."""
    for cut in range(len(data), max(-1, len(data) - 4), -1):
        try:
            text = data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        tail = data[cut:]
        if not tail:
            return text, tail
        lo, hi = code_points_with_prefix(tail)
        return (text, tail) if lo <= hi else (None, tail)
    return None, data


def code_points_with_prefix(tail: bytes) -> tuple[int, int]:
    """The range of code points whose UTF-8 encoding strictly extends ``tail`` (empty: lo > hi).
    UTF-8 is order-preserving, so it is a contiguous range; found by binary search on the codec."""

    def enc(cp: int) -> bytes:
        if SURROGATES[0] <= cp <= SURROGATES[1]:
            cp = SURROGATES[0] - 1 if cp - SURROGATES[0] < 0x400 else SURROGATES[1] + 1
        return chr(cp).encode("utf-8")

    n = 0x110000
    lo = bisect.bisect_left(range(n), tail, key=lambda cp: enc(cp)[: len(tail)])
    hi = bisect.bisect_right(range(n), tail, key=lambda cp: enc(cp)[: len(tail)]) - 1
    if lo <= hi and len(enc(lo)) == len(tail):
        return 1, 0  # a complete character, not a strict prefix
    return lo, hi


def random_walk(dfa: ByteDFA, rng: random.Random, max_len: int = 30, pattern: int | None = None) -> bytes:
    """A random string accepted by the DFA (by ``pattern``, or any pattern)."""

    def accepting(s: int) -> bool:
        return bool(dfa.accepting[s].any() if pattern is None else dfa.accepting[s, pattern])

    state, out = dfa.start, bytearray()
    while True:
        live = np.flatnonzero(dfa.transitions[state] >= 0)
        if accepting(state) and (live.size == 0 or rng.random() < 0.2 or len(out) >= max_len):
            return bytes(out)
        if len(out) >= max_len:  # finish along a shortest path
            return bytes(out) + shortest_completion(dfa, state, accepting)
        b = int(live[rng.randrange(live.size)])
        out.append(b)
        state = int(dfa.transitions[state, b])


def shortest_completion(dfa: ByteDFA, state: int, accepting) -> bytes:
    seen = {state: b""}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        if accepting(s):
            return seen[s]
        for b in np.flatnonzero(dfa.transitions[s] >= 0):
            t = int(dfa.transitions[s, b])
            if t not in seen:
                seen[t] = seen[s] + bytes([int(b)])
                queue.append(t)
    raise AssertionError("no path to acceptance from a state of the DFA")


def moore_blocks(dfa: ByteDFA) -> int:
    """Number of blocks of the coarsest partition (Moore refinement, dead state included)."""
    n = dfa.n_states
    table = dfa.class_transitions.tolist()
    labels = [tuple(row) for row in dfa.accepting.tolist()]
    block = {lab: i for i, lab in enumerate(sorted(set(labels)))}
    part = [block[lab] for lab in labels]
    count = len(set(part))
    while True:
        sig = [(part[s], tuple(part[t] if t >= 0 else -1 for t in table[s])) for s in range(n)]
        ids: dict = {}
        part = [ids.setdefault(x, len(ids)) for x in sig]
        if len(ids) == count:
            return count
        count = len(ids)


def check_structure(dfa: ByteDFA) -> None:
    """Invariants of every non-empty ByteDFA: shapes, liveness, minimality, canonical numbering,
    byte classes, read-only arrays."""
    n, k = dfa.n_states, dfa.n_patterns
    assert dfa.start == 0 and n >= 1
    assert dfa.transitions.shape == (n, 256) and dfa.transitions.dtype == np.int32
    assert dfa.accepting.shape == (n, k) and dfa.reachable.shape == (n, k)
    assert dfa.transitions.min() >= -1 and dfa.transitions.max() < n
    for arr in (dfa.transitions, dfa.accepting, dfa.reachable, dfa.byte_classes, dfa.class_transitions):
        assert not arr.flags.writeable
    # byte classes: same class <=> identical columns; class table consistent
    cols = {}
    for b in range(256):
        cols.setdefault(dfa.transitions[:, b].tobytes(), set()).add(int(dfa.byte_classes[b]))
    assert all(len(v) == 1 for v in cols.values()) and len(cols) == dfa.n_classes
    assert np.array_equal(dfa.class_transitions[:, dfa.byte_classes], dfa.transitions)
    firsts = [int(np.flatnonzero(dfa.byte_classes == c)[0]) for c in range(dfa.n_classes)]
    assert firsts == sorted(firsts)
    # canonical numbering: BFS from the start, successors in byte order
    order, seen = [0], {0}
    for s in order:
        for t in dfa.transitions[s].tolist():
            if t >= 0 and t not in seen:
                seen.add(t)
                order.append(t)
    assert order == list(range(n)), "states are not numbered breadth-first (or not all reachable)"
    # liveness: every state reaches acceptance; reachable[s, k] <=> some path to accepting[., k]
    preds: list[set[int]] = [set() for _ in range(n)]
    for s in range(n):
        for t in set(dfa.transitions[s].tolist()) - {-1}:
            preds[t].add(s)
    for p in range(k):
        reach = set(np.flatnonzero(dfa.accepting[:, p]).tolist())
        stack = list(reach)
        while stack:
            for q in preds[stack.pop()]:
                if q not in reach:
                    reach.add(q)
                    stack.append(q)
        assert sorted(reach) == np.flatnonzero(dfa.reachable[:, p]).tolist()
    assert dfa.reachable.any(axis=1).all(), "a state cannot reach acceptance"
    # minimality: no duplicate (row, accepting) pairs, and Moore refinement merges nothing
    rows = {dfa.transitions[s].tobytes() + dfa.accepting[s].tobytes() for s in range(n)}
    assert len(rows) == n
    assert moore_blocks(dfa) == n


def assert_agrees_with_re(pattern: str, dfa: ByteDFA, strings, flags: int = 0) -> None:
    compiled = re.compile(pattern, flags)
    for s in strings:
        expected = fullmatches(compiled, s)
        assert dfa.matches(s.encode("utf-8")) == expected, (pattern, s, expected)


# ---------------------------------------------------------------------------------------------
# UTF-8
# ---------------------------------------------------------------------------------------------

BOUNDARIES = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF,
              0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF]


def expand_sequences(seqs) -> set[bytes]:
    out: set[bytes] = set()
    for seq in seqs:
        for combo in itertools.product(*(range(lo, hi + 1) for lo, hi in seq)):
            out.add(bytes(combo))
    return out


def encodings(lo: int, hi: int) -> set[bytes]:
    return {chr(c).encode("utf-8") for c in range(lo, hi + 1) if not SURROGATES[0] <= c <= SURROGATES[1]}


def seq_match(seqs, data: bytes) -> bool:
    return any(len(s) == len(data) and all(a <= b <= z for (a, z), b in zip(s, data)) for s in seqs)


def decodes_into(data: bytes, lo: int, hi: int) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return len(text) == 1 and lo <= ord(text) <= hi


def random_byte_strings(rng: random.Random, n: int) -> list[bytes]:
    """1-4 byte strings biased toward almost-valid UTF-8 (lead bytes, continuation bytes)."""
    pools = [range(0x00, 0x100), range(0x80, 0xC0), range(0xC0, 0x100), (0xC0, 0xC1, 0xE0, 0xED, 0xF0, 0xF4, 0xF5)]
    out = []
    for _ in range(n):
        length = rng.randint(1, 4)
        first = rng.choice(rng.choice(pools[2:] + pools[:1]))
        out.append(bytes([first] + [rng.choice(rng.choice(pools[:2])) for _ in range(length - 1)]))
    return out


def range_strategy() -> st.SearchStrategy[tuple[int, int]]:
    point = st.one_of(
        st.sampled_from(BOUNDARIES).flatmap(lambda b: st.integers(max(0, b - 3), min(0x10FFFF, b + 3))),
        st.integers(0, 0x10FFFF),
    )
    return st.tuples(point, point).map(lambda t: (min(t), max(t)))


@pytest.mark.parametrize(
    "lo,hi",
    [(0, 0x7F), (0x7F, 0x80), (0x7E, 0x81), (0x7FF, 0x800), (0x700, 0x900), (0xFFFF, 0x10000),
     (0xFFF0, 0x10010), (0xD7FF, 0xE000), (0xD700, 0xE100), (0xD800, 0xDFFF), (0xDFFF, 0xE000),
     (0x10FFF0, 0x10FFFF), (0x80, 0x7FF), (0x800, 0xFFFF), (0x1000, 0x1FFF), (0x3FFC0, 0x40040),
     (0, 0x10FFFF)],
)
def test_utf8_sequences_boundaries(lo: int, hi: int) -> None:
    seqs = utf8_sequences(lo, hi)
    assert seqs == sorted(seqs)
    if hi - lo <= 70000:
        assert expand_sequences(seqs) == encodings(lo, hi)
    # sequences are disjoint and each one covers whole characters of a single encoded length
    total = sum(int(np.prod([b - a + 1 for a, b in s])) for s in seqs)
    assert total == sum(1 for c in range(lo, hi + 1) if not SURROGATES[0] <= c <= SURROGATES[1])
    for data in random_byte_strings(random.Random(lo ^ hi), 3000):
        assert seq_match(seqs, data) == decodes_into(data, lo, hi), data


@settings(max_examples=150, deadline=None)
@given(r=range_strategy(), seed=st.integers(0, 2**32))
def test_utf8_sequences_random(r: tuple[int, int], seed: int) -> None:
    lo, hi = r
    seqs = utf8_sequences(lo, hi)
    rng = random.Random(seed)
    # every encoding of a sampled code point of the range is matched
    for _ in range(200):
        c = rng.randint(lo, hi)
        if not SURROGATES[0] <= c <= SURROGATES[1]:
            assert seq_match(seqs, chr(c).encode("utf-8"))
    for c in {lo, hi}:
        if not SURROGATES[0] <= c <= SURROGATES[1]:
            assert seq_match(seqs, chr(c).encode("utf-8"))
    # and any other 1-4 byte string is rejected
    for data in random_byte_strings(rng, 300):
        assert seq_match(seqs, data) == decodes_into(data, lo, hi), data
    if hi - lo < 3000:
        assert expand_sequences(seqs) == encodings(lo, hi)


def run_class_automaton(nodes, data: bytes) -> int | None:
    """Label reached after exactly the whole of ``data`` (None if rejected/incomplete)."""
    node = 0
    for i, b in enumerate(data):
        for lo, hi, child in nodes[node]:
            if lo <= b <= hi:
                break
        else:
            return None
        if child < 0:
            return -1 - child if i == len(data) - 1 else None
        node = child
    return None


@settings(max_examples=60, deadline=None)
@given(ranges=st.lists(range_strategy(), min_size=0, max_size=6), seed=st.integers(0, 2**32))
def test_class_automaton_matches_codec_and_is_minimal(ranges, seed: int) -> None:
    norm = normalize_ranges(ranges)
    nodes = class_automaton(norm)
    rng = random.Random(seed)

    def member(c: int) -> bool:
        return in_ranges(norm, c)

    for data in random_byte_strings(rng, 400):
        try:
            text = data.decode("utf-8")
            ok = len(text) == 1 and member(ord(text))
        except UnicodeDecodeError:
            ok = False
        assert (run_class_automaton(nodes, data) == 0) == ok, data
    for lo, hi in norm:
        for c in {lo, hi, rng.randint(lo, hi)}:
            assert run_class_automaton(nodes, chr(c).encode("utf-8")) == 0
    # minimal: no two nodes have the same moves (children are canonical, so equal moves = equal language)
    assert len(set(nodes)) == len(nodes)
    assert all(child == FINAL or child > 0 for moves in nodes for _, _, child in moves)


def test_labelled_utf8_automaton() -> None:
    groups = (((0x61, 0x7A), (0xE9, 0xE9)), ((0x30, 0x39), (0x660, 0x669), (0x1F600, 0x1F64F)), ((0x80, 0xE8),))
    automaton = utf8_automaton(groups)
    rng = random.Random(7)
    for c in list(range(0, 0x800)) + [rng.randint(0, 0x10FFFF) for _ in range(3000)] + list(range(0x1F5F0, 0x1F660)):
        if SURROGATES[0] <= c <= SURROGATES[1]:
            continue
        expected = next((i for i, g in enumerate(groups) if in_ranges(g, c)), None)
        assert run_class_automaton(automaton.nodes, chr(c).encode("utf-8")) == expected, hex(c)
    assert len(set(automaton.nodes)) == len(automaton.nodes)
    assert automaton.depth[0] == 0 and set(automaton.depth[1:].tolist()) <= {1, 2, 3}


@settings(max_examples=80, deadline=None)
@given(cuts=st.lists(st.sampled_from([0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000,
                                      0x10FFFF]) | st.integers(0x80, 0x10FFFF), min_size=1, max_size=14),
       n_groups=st.integers(1, 4), seed=st.integers(0, 2**32))
def test_utf8_label_automaton_matches_codec_and_is_minimal(cuts, n_groups: int, seed: int) -> None:
    """The kernel's labelled automaton of random intervals (split at encoded-length and surrogate
    edges among others): every character reaches exactly its interval's label, and no two nodes
    have the same residual language (equal rows once children are canonical)."""
    rng = random.Random(seed)
    points = sorted(set(cuts))
    groups: list[list[tuple[int, int]]] = [[] for _ in range(n_groups)]
    for lo, nxt in zip(points, points[1:] + [0x110000]):
        label = rng.randint(-1, n_groups - 1)
        if label >= 0:
            groups[label].append((lo, nxt - 1))
    norm = tuple(normalize_ranges(g) for g in groups)
    automaton = utf8_automaton(norm)
    nodes = automaton.nodes
    probes = {rng.randint(0x80, 0x10FFFF) for _ in range(300)} | {p for q in points for p in (q - 1, q, q + 1)}
    for c in sorted(probes):
        if c < 0x80 or c > 0x10FFFF or SURROGATES[0] <= c <= SURROGATES[1]:
            continue
        expected = next((i for i, g in enumerate(norm) if in_ranges(g, c)), None)
        assert run_class_automaton(nodes, chr(c).encode("utf-8")) == expected, hex(c)
    for data in random_byte_strings(rng, 200):  # only single valid characters are read
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        if len(text) != 1:
            assert run_class_automaton(nodes, data) is None, data
    assert len(set(nodes)) == len(nodes)
    assert all(child < 0 or 0 < child < j or j == 0 for j, moves in enumerate(nodes) for _, _, child in moves)
    labels = [{-1 - c for _, _, c in moves if c < 0} for moves in nodes]
    for j in range(1, len(nodes)):  # label masks: every label reachable from the node
        for _, _, c in nodes[j]:
            if c > 0:
                labels[j] |= labels[c]
        assert automaton.label_mask[j] == sum(1 << min(label, 63) for label in labels[j])


# ---------------------------------------------------------------------------------------------
# hand-built syntax trees
# ---------------------------------------------------------------------------------------------

HAND_CASES: list[tuple[Node, str]] = [
    (lit("abc"), "abc"),
    (Alt((lit("ab"), lit("c"), Empty())), "(?:ab|c|)"),
    (Concat((Repeat(Alt((lit("ab"), lit("c"))), 0, None), lit("d"))), "(?:ab|c)*d"),
    (Repeat(cls(("a", "b")), 2, 4), "[ab]{2,4}"),
    (Repeat(cls("a"), 3, None), "a{3,}"),
    (Concat((Group(Repeat(lit("é"), 1, None), 1), Repeat(lit("😀"), 0, 1))), "(é+)😀?"),
    (Concat((cls(("\x00", "\U0010ffff")), lit("b"))), "(?s:.)b"),
    (Repeat(CharClass(((0x80, 0xD7FF), (0xE000, 0x10FFFF))), 1, 2), "[^\x00-\x7f]{1,2}"),
    (Concat((lit("a"), CharClass(()), lit("b"))), "a[^\\s\\S]b"),
    (Alt((CharClass(()), lit("x"))), "[^\\s\\S]|x"),
    (Alt((lit("x"), Concat((lit("ab"), CharClass(()))))), "x|ab[^\\s\\S]"),
    (Concat((lit("a"), Alt((lit("b"), Concat((lit("c"), CharClass(()))))), lit("d"))), "a(?:b|c[^\\s\\S])d"),
    (Concat((Repeat(Concat((lit("é"), CharClass(()))), 0, None), lit("é"))), "(?:é[^\\s\\S])*é"),
    (Empty(), ""),
    (Repeat(Empty(), 0, None), "(?:)*"),
    (Repeat(Repeat(cls("a", "€"), 0, 2), 2, 3), "(?:[a€]{0,2}){2,3}"),
    (Repeat(Alt((lit("a"), Empty())), 2, None), "(?:a|){2,}"),
    (Repeat(lit("ab"), 0, 0), "(?:ab){0}"),
]
HAND_ALPHABET = ["a", "b", "c", "d", "é", "€", "😀", "x"]


@pytest.mark.parametrize("node,pattern", HAND_CASES, ids=[p or "empty" for _, p in HAND_CASES])
def test_hand_built_trees_against_re(node: Node, pattern: str) -> None:
    dfa = regex_dfa(node)
    strings = ["".join(t) for n in range(5) for t in itertools.product(HAND_ALPHABET[:5], repeat=n)]
    strings += ["".join(random.Random(i).choices(HAND_ALPHABET, k=i % 9)) for i in range(300)]
    assert_agrees_with_re(pattern, dfa, strings)
    if dfa.start < 0:
        assert dfa.n_states == 0 and not dfa.matches(b"")
        assert re.fullmatch(pattern, "") is None
        return
    check_structure(dfa)
    rng = random.Random(1)
    for _ in range(50):
        data = random_walk(dfa, rng)
        assert re.fullmatch(pattern, data.decode("utf-8")) is not None


def test_empty_language_and_empty_string() -> None:
    empty = regex_dfa(CharClass(()))
    assert empty.start == -1 and empty.n_states == 0 and empty.n_patterns == 1
    assert not empty.matches(b"") and not empty.matches(b"a")
    assert empty.step(-1, b"a") == -1
    eps = regex_dfa(Empty())
    assert eps.n_states == 1 and eps.matches(b"") and not eps.matches(b"a")
    assert (eps.transitions == -1).all() and eps.n_classes == 1
    none = build_dfa([])
    assert none.start == -1 and none.n_patterns == 0


def test_bytedfa_api() -> None:
    # "ab(c|d)e*" : forced bytes, step/-1, is_accepting, read-only arrays
    node = Concat((lit("ab"), cls("c", "d"), Repeat(lit("e"), 0, None)))
    dfa = regex_dfa(node)
    assert dfa.forced_bytes(dfa.start) == b"ab"
    after_a = dfa.step(dfa.start, b"a")
    assert dfa.forced_bytes(after_a) == b"b"
    s = dfa.step(dfa.start, b"abc")
    assert dfa.is_accepting(s) and dfa.forced_bytes(s) == b""
    assert dfa.step(dfa.start, b"abx") == -1 and dfa.step(dfa.step(dfa.start, b"abx"), b"e") == -1
    assert not dfa.is_accepting(-1)
    assert dfa.matches(b"abdeee") and not dfa.matches(b"abde\xc3")
    with pytest.raises(ValueError):
        dfa.transitions[0, 0] = 5
    with pytest.raises(AttributeError):
        dfa.start = 3  # type: ignore[misc]
    # forced bytes run through multi-byte characters: "€+" from the start forces e2 82 ac
    euro = regex_dfa(Repeat(lit("€x"), 1, None))
    assert euro.forced_bytes(0) == "€x".encode()


def test_forced_bytes_definition() -> None:
    rng = random.Random(3)
    node = Concat((lit("ab"), Alt((lit("cde"), lit("cdf"))), Repeat(lit("😀"), 1, 2), lit("g")))
    dfa = regex_dfa(node)
    for s in range(dfa.n_states):
        forced = dfa.forced_bytes(s)
        state = s
        for b in forced:  # each taken byte was the only live one, from a non-accepting state
            assert not dfa.accepting[state].any()
            assert np.flatnonzero(dfa.transitions[state] >= 0).tolist() == [b]
            state = int(dfa.transitions[state, b])
        live = np.flatnonzero(dfa.transitions[state] >= 0)
        assert dfa.accepting[state].any() or live.size != 1  # and it stops only when it must
    assert dfa.forced_bytes(0) == b"abcd"
    assert rng  # silence linters


def test_deterministic_numbering() -> None:
    node = Concat((Repeat(Alt((lit("ab"), lit("é"), cls(("0", "9")))), 0, None), lit("x")))
    a, b = regex_dfa(node), regex_dfa(node)
    for name in ("transitions", "accepting", "reachable", "byte_classes", "class_transitions"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    # an equivalent but differently written tree gives the very same arrays
    other = Concat((Repeat(Alt((cls(("0", "9")), lit("é"), lit("ab"), lit("é"))), 0, None), lit("x")))
    c = regex_dfa(other)
    assert np.array_equal(a.transitions, c.transitions) and np.array_equal(a.byte_classes, c.byte_classes)


def test_known_sizes() -> None:
    # (a|b)*a(a|b){n}: the minimal DFA has exactly 2**(n+1) states
    for n in range(0, 6):
        node = Concat((Repeat(cls("a", "b"), 0, None), lit("a"), Repeat(cls("a", "b"), n, n)))
        dfa = regex_dfa(node)
        assert dfa.n_states == 2 ** (n + 1)
        check_structure(dfa)
    # a{n}: n+1 states, a chain
    assert regex_dfa(Repeat(lit("a"), 50, 50)).n_states == 51
    # any single character: 1 start + 7 mid-character nodes (minimal UTF-8 automaton) + 1 final
    any_char = regex_dfa(CharClass(((0, 0xD7FF), (0xE000, 0x10FFFF))))
    assert any_char.n_states == 9


def test_max_states_cap() -> None:
    node = Concat((Repeat(cls("a", "b"), 0, None), lit("a"), Repeat(cls("a", "b"), 20, 20)))
    with pytest.raises(CompileError, match=r"max_states=1000\b") as info:
        regex_dfa(node, max_states=1000)
    assert "max_states" in str(info.value) and "using_limits(max_dfa_states=" in str(info.value)
    # the same pattern with a smaller exponent fits
    small = Concat((Repeat(cls("a", "b"), 0, None), lit("a"), Repeat(cls("a", "b"), 8, 8)))
    assert regex_dfa(small, max_states=1000).n_states == 512
    # the cap applies to byte states as well: 60 Unicode any-characters in a row
    many = Repeat(CharClass(((0, 0xD7FF), (0xE000, 0x10FFFF))), 60, 60)
    with pytest.raises(CompileError, match="max_states=200"):
        regex_dfa(many, max_states=200)
    assert regex_dfa(many).n_states == 60 * 8 + 1
    # huge counted repetition is refused before building anything
    with pytest.raises(CompileError, match="max_states"):
        regex_dfa(Repeat(Repeat(lit("ab"), 1000, 1000), 1000, 1000), max_states=1000)


def test_many_non_ascii_atoms() -> None:
    # more than 64 non-ASCII atoms (the expansion kernel folds labels >= 63 into one mask bit),
    # and states whose only moves are on one high label: after c_i only d_i may follow
    firsts = [chr(0xE0 + i) for i in range(40)] + [chr(0x4E00 + 7 * i) for i in range(40)]
    seconds = [chr(0x5000 + 3 * i) for i in range(40)] + [chr(0x1F300 + i) for i in range(40)]
    words = [c + d for c, d in zip(firsts, seconds)]
    node = Repeat(Alt(tuple(lit(w) for w in words)), 1, None)
    pattern = "(?:" + "|".join(words) + ")+"
    dfa = regex_dfa(node)
    check_structure(dfa)
    rng = random.Random(9)
    strings = ["".join(rng.sample(words, k)) for k in (1, 2, 3) for _ in range(60)]
    strings += ["".join(rng.choice(firsts) + rng.choice(seconds) for _ in range(2)) for _ in range(200)]
    assert_agrees_with_re(pattern, dfa, strings)
    assert sum(dfa.matches(s.encode()) for s in strings) > 150  # positives are well covered


def test_multi_pattern_hand_built() -> None:
    patterns = [lit("if"), Repeat(cls(("a", "z")), 1, None), Repeat(cls(("0", "9")), 1, None), lit("é")]
    multi = build_dfa(patterns)
    singles = [regex_dfa(p) for p in patterns]
    check_structure(multi)
    assert multi.n_patterns == 4
    s = multi.step(0, b"if")
    assert multi.is_accepting(s, 0) and multi.is_accepting(s, 1) and not multi.is_accepting(s, 2)
    s = multi.step(0, b"i")
    assert multi.reachable[s].tolist() == [True, True, False, False]
    check_multi(multi, singles, [w.encode() for w in ["", "if", "iff", "i", "x9", "12", "é", "é1", "ifé"]])


def check_multi(multi: ByteDFA, singles: list[ByteDFA], strings) -> None:
    """accepting/reachable columns of ``multi`` agree with the per-pattern DFAs on every prefix."""
    for data in strings:
        for cut in range(len(data) + 1):
            prefix = data[:cut]
            ms = multi.step(multi.start, prefix) if multi.start >= 0 else -1
            per = [d.step(d.start, prefix) if d.start >= 0 else -1 for d in singles]
            if ms < 0:
                assert all(p < 0 for p in per), prefix
                continue
            for k, (d, p) in enumerate(zip(singles, per)):
                assert bool(multi.reachable[ms, k]) == (p >= 0), (prefix, k)
                assert bool(multi.accepting[ms, k]) == d.is_accepting(p), (prefix, k)


# ---------------------------------------------------------------------------------------------
# against Python's re, through the parser
# ---------------------------------------------------------------------------------------------

ALPHABET = ["a", "b", "1", " ", "é", "€", "😀", "\n"]


def pattern_strategy() -> st.SearchStrategy[str]:
    chars = st.sampled_from(["a", "b", "1", "é", "😀", "€", " ", "\\n"])
    classes = st.sampled_from(
        ["[ab]", "[^a]", "[a-c]", "[é😀]", "[^é\\n]", ".", "\\d", "\\s", "[a-é]", "[^\\s\\S]", "\\w", "[€-😀]"]
    )
    leaf = st.one_of(chars, classes)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        quant = st.sampled_from(["?", "*", "+", "{2}", "{0,2}", "{1,3}", "{2,}", "??", "*?", "{,2}"])
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map("".join),
            st.lists(inner, min_size=2, max_size=3).map("|".join),
            inner.map(lambda p: f"({p})"),
            inner.map(lambda p: f"(?:{p})"),
            st.tuples(inner.map(lambda p: f"(?:{p})"), quant).map("".join),
            st.tuples(leaf, quant).map("".join),
        )

    return st.recursive(leaf, extend, max_leaves=8)


def byte_oracle_check(node: Node, dfa: ByteDFA, prefixes) -> None:
    """For each valid prefix and each of the 256 bytes: -1 exactly when no continuation exists."""
    nfa = CharNFA(node)
    for prefix in prefixes:
        state = dfa.step(dfa.start, prefix)
        assert state >= 0 and nfa.alive_after_bytes(prefix)
        for b in range(256):
            data = prefix + bytes([b])
            assert (dfa.step(state, bytes([b])) >= 0) == nfa.alive_after_bytes(data), data


def check_random_pattern(pattern: str, strings: list[str], rnd: random.Random) -> None:
    try:
        compiled = re.compile(pattern)
    except re.error:
        assume(False)
    dfa = regex_dfa(parse(pattern))
    assert_agrees_with_re(pattern, dfa, strings)
    if dfa.start < 0:
        assert not any(fullmatches(compiled, s) for s in strings)
        return
    check_structure(dfa)
    # positives sampled from the DFA itself must be matches for re
    for _ in range(10):
        data = random_walk(dfa, rnd, max_len=12)
        assert fullmatches(compiled, data.decode("utf-8")), (pattern, data)


STRINGS = st.lists(st.text(alphabet=ALPHABET, max_size=8), max_size=25)


@needs_parser
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(), strings=STRINGS, rnd=st.randoms(use_true_random=False))
def test_random_patterns_against_re(pattern: str, strings: list[str], rnd: random.Random) -> None:
    check_random_pattern(pattern, strings, rnd)


WORDS = st.lists(st.text(alphabet=["a", "b", "é", "😀", " "], min_size=1, max_size=4), min_size=2, max_size=9)
WORD_LIST_SHAPES = ["(?:{w})", "x(?:{w})y", "((?:{w})[ ,]?)+", "(?:{w})*-(?:{w})", "(?:(?:{w})\\|)*", "({w}){{2,3}}"]


@needs_parser
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=WORDS, shape=st.sampled_from(WORD_LIST_SHAPES), strings=STRINGS, rnd=st.randoms(use_true_random=False))
def test_word_lists_against_re(words: list[str], shape: str, strings: list[str], rnd: random.Random) -> None:
    """Alternations of literal strings (built all at once by the NFA, and copied when the same
    list occurs again) in several contexts; the strings include the words themselves."""
    pattern = shape.format(w="|".join(re.escape(w) for w in words))
    sample = [w for w in words] + ["x" + w + "y" for w in words] + [words[0] + words[-1], words[0] + "-" + words[1]]
    check_random_pattern(pattern, strings + sample, rnd)


@needs_parser
@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(), strings=STRINGS, rnd=st.randoms(use_true_random=False))
def test_random_patterns_against_re_long(pattern: str, strings: list[str], rnd: random.Random) -> None:
    check_random_pattern(pattern, strings, rnd)


@needs_parser
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(), rnd=st.randoms(use_true_random=False))
def test_random_patterns_dead_bytes(pattern: str, rnd: random.Random) -> None:
    try:
        re.compile(pattern)
    except re.error:
        assume(False)
    node = parse(pattern)
    dfa = regex_dfa(node)
    assume(dfa.start >= 0)
    check_structure(dfa)
    prefixes = {b""}
    for _ in range(3):
        walk = random_walk(dfa, rnd, max_len=8)
        prefixes.update(walk[:i] for i in range(len(walk) + 1))
    byte_oracle_check(node, dfa, sorted(prefixes)[:12])


# ---------------------------------------------------------------------------------------------
# the benchmark regexes
# ---------------------------------------------------------------------------------------------

BENCH_SAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "email": (["john.doe@example.com", "a@b.co", "x_y+z@sub.domain.org"],
              ["john@", "@example.com", "john doe@example.com", "a@b."]),
    "complex_phone": (["+1 (555) 123-4567", "555-123-4567", "5551234567", "+44 20 7946 0958"],
                      ["phone", "+-", "", "555-123-4567x"]),
    "simple_phone": (["+14155552671", "14155552671"], ["+0123456789", "123", "+1 415 555"]),
    "date": (["12/05/2023", "1.1.99", "2023-12-31", "31-12-1999"], ["32/13/2023", "1/1/1", "2023-13-01"]),
    "time": (["12:30 pm", "9:05am", "09:59"], ["13:00", "12:60", "9:5"]),
    "ip": (["192.168.0.1", "255.255.255.255", "0.0.0.0"], ["256.1.1.1", "1.2.3", "1.2.3.4."]),
    "url": (["https://www.example.com/path/to", "example.org", "http://a.bc/ü_ñ/x y"],
            ["http://", "https://example", "ftp://x.com"]),
    "ssn": (["123-45-6789", "١٢٣-٤٥-٦٧٨٩"], ["123456789", "12-345-6789", "123-45-678"]),
    "complex_span_constrained_relation_extraction": (
        ["altruism | is | virtue\n", "", "'the, | concern | selflessness' | (x | y)\n"],
        ["hello | is | virtue\n", "altruism | is | virtue", "altruism | is | virtue |\n"],
    ),
}


def bench_regexes() -> dict[str, str]:
    if not SAMPLES_PATH.exists():
        pytest.skip(f"benchmark regexes not found at {SAMPLES_PATH}")
    return json.loads(SAMPLES_PATH.read_text())


@needs_parser
@pytest.mark.parametrize("name", list(BENCH_SAMPLES))
def test_benchmark_regexes(name: str) -> None:
    pattern = bench_regexes()[name]
    dfa = regex_dfa(parse(pattern))
    check_structure(dfa)
    valid, invalid = BENCH_SAMPLES[name]
    for s in valid:
        assert re.fullmatch(pattern, s) is not None, s  # the sample itself is right
        assert dfa.matches(s.encode()), s
    for s in invalid:
        assert re.fullmatch(pattern, s) is None, s
        assert not dfa.matches(s.encode()), s
    rng = random.Random(name)
    walks = [random_walk(dfa, rng, max_len=40) for _ in range(40)]
    for data in walks:
        assert re.fullmatch(pattern, data.decode("utf-8")) is not None, data
    # mutations of positives: re decides
    alphabet = sorted(set("".join(valid))) + ["x", "٣", " "]
    for data in walks[:20]:
        text = data.decode()
        for _ in range(5):
            i = rng.randrange(len(text) + 1)
            mutated = text[:i] + rng.choice(alphabet) + text[i + 1 :]
            assert dfa.matches(mutated.encode()) == (re.fullmatch(pattern, mutated) is not None), mutated


@needs_parser
@pytest.mark.parametrize("name", ["date", "ip", "time", "ssn"])
def test_benchmark_dead_bytes(name: str) -> None:
    pattern = bench_regexes()[name]
    node = parse(pattern)
    dfa = regex_dfa(node)
    rng = random.Random(name)
    prefixes = {b""}
    for _ in range(3):
        walk = random_walk(dfa, rng, max_len=12)
        prefixes.update(walk[:i] for i in range(0, len(walk) + 1, 3))
    byte_oracle_check(node, dfa, sorted(prefixes)[:8])


@needs_parser
@pytest.mark.slow
@pytest.mark.parametrize("name", list(BENCH_SAMPLES))
def test_benchmark_dead_bytes_all(name: str) -> None:
    pattern = bench_regexes()[name]
    node = parse(pattern)
    dfa = regex_dfa(node)
    rng = random.Random(name)
    prefixes = {b""}
    for _ in range(5):
        walk = random_walk(dfa, rng, max_len=30)
        prefixes.update(walk[:i] for i in range(len(walk) + 1))
    byte_oracle_check(node, dfa, sorted(prefixes)[:150])


@needs_parser
def test_multi_pattern_lexer() -> None:
    terminals = [r"[a-z_]\w*", r"if|else|while", r"\d+(\.\d+)?", r"\s+", r'"([^"\\]|\\.)*"', r"==|=|<=?", r"é+"]
    nodes = [parse(p) for p in terminals]
    multi = build_dfa(nodes)
    singles = [regex_dfa(n) for n in nodes]
    check_structure(multi)
    rng = random.Random(5)
    strings = [random_walk(singles[k], rng, max_len=10) for k in range(len(nodes)) for _ in range(15)]
    strings += [random_walk(multi, rng, max_len=10) for _ in range(40)]
    strings += [bytes(rng.choice(b'ifwhle_"\\= 1.9xa\xc3\xa9') for _ in range(rng.randint(0, 6))) for _ in range(80)]
    check_multi(multi, singles, strings)
    for data in strings:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        for k, p in enumerate(terminals):
            assert multi.matches(data, k) == (re.fullmatch(p, text) is not None), (p, data)


def assert_same_dfa(a: ByteDFA, b: ByteDFA) -> None:
    """Two canonical minimal DFAs are the same arrays."""
    assert a.start == b.start
    for name in ("accepting", "reachable", "byte_classes", "class_transitions"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


LITERALS = st.text(alphabet=["a", "b", "é", "€", "😀", "\n", '"'], max_size=5)


@needs_parser
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns=st.lists(st.one_of(pattern_strategy(), LITERALS.map(re.escape)), min_size=2, max_size=6))
def test_union_of_pattern_dfas_is_the_single_nfa_dfa(patterns: list[str]) -> None:
    """build_dfa of several patterns (each pattern's DFA, literals built directly, then the
    subset construction of their union) gives exactly the DFA of one position NFA over all."""
    from logitgate.automata.dfa import _glushkov_dfa

    nodes = [parse(p) for p in patterns]
    assert_same_dfa(build_dfa(nodes), _glushkov_dfa(nodes, 10_000, "max_dfa_states"))


@needs_parser
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=st.one_of(pattern_strategy(), LITERALS.map(re.escape)))
def test_one_call_pipeline_equals_the_stepwise_one(pattern: str) -> None:
    """One pattern's DFA through the fused kernels (regex_byte_dfa, with utf8_byte_dfa for
    non-ASCII atoms) is the same arrays as the step-by-step pipeline's."""
    from logitgate.automata.dfa import _glushkov_dfa, _stepwise_dfa

    node = parse(pattern)
    assert_same_dfa(_glushkov_dfa([node], 10_000, "max_dfa_states"), _stepwise_dfa([node], 10_000, "max_dfa_states"))


@needs_parser
@pytest.mark.parametrize("name", list(BENCH_SAMPLES))
def test_one_call_pipeline_on_benchmark_regexes(name: str) -> None:
    from logitgate.automata.dfa import _glushkov_dfa, _stepwise_dfa

    node = parse(bench_regexes()[name])
    assert_same_dfa(_glushkov_dfa([node], 100_000, "max_dfa_states"), _stepwise_dfa([node], 100_000, "max_dfa_states"))


def _alike_for(dfa: ByteDFA, keep: list[int], a: int, b: int) -> bool:
    """Whether states ``a`` and ``b`` accept the same continuations for each pattern in ``keep``
    (a bisimulation over pairs of states, -1 standing for the dead state)."""
    trans = dfa.transitions

    def obs(x: int):
        return None if x < 0 or not dfa.reachable[x, keep].any() else tuple(dfa.accepting[x, keep])

    seen, todo = set(), [(a, b)]
    while todo:
        x, y = todo.pop()
        if x == y or (x, y) in seen:
            continue
        seen.add((x, y))
        if obs(x) != obs(y):
            return False
        if obs(x) is not None:
            todo += [(int(p), int(q)) for p, q in zip(trans[x], trans[y])]
    return True


@needs_parser
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns=st.lists(st.one_of(pattern_strategy(), LITERALS.map(re.escape)), min_size=2, max_size=5),
       pick=st.integers(1, 2**5 - 1))
def test_union_components_tell_behaviour_per_pattern(patterns: list[str], pick: int) -> None:
    """A union DFA's ``components`` (the states of each pattern's own DFA a state runs): two
    states run the same components of a set of patterns exactly when they accept the same
    continuations for each of those patterns."""
    dfa = build_dfa([parse(p) for p in patterns])
    if dfa.start < 0:
        return
    off, pattern, part = dfa.components
    assert off.shape[0] == dfa.n_states + 1
    keep = [k for k in range(len(patterns)) if pick >> k & 1] or [0]
    # each state runs a component of exactly the patterns it can still match (co-reachability
    # computed afresh: the DFA's own `reachable` is read off the components)
    from logitgate.kernels.automata_kernels import coreachable

    live = coreachable(dfa.class_transitions.copy(), dfa.accepting.copy())
    assert np.array_equal(live, dfa.reachable)
    for s in range(dfa.n_states):
        pats = pattern[off[s]:off[s + 1]]
        assert sorted(set(pats.tolist())) == sorted(np.flatnonzero(live[s]).tolist())
        assert len(set(pats.tolist())) == len(pats)

    def comps(s: int) -> list[int]:
        sel = np.isin(pattern[off[s]:off[s + 1]], keep)
        return part[off[s]:off[s + 1]][sel].tolist()

    states = range(min(dfa.n_states, 40))
    for a in states:
        for b in states:
            assert (comps(a) == comps(b)) == _alike_for(dfa, keep, a, b), (patterns, keep, a, b)


def test_union_literals_and_cache() -> None:
    from logitgate.automata import dfa as dfa_mod

    nodes = [lit("if"), lit(""), lit("é€"), Repeat(cls(("a", "z")), 1, None), lit("if"), CharClass(())]
    multi = build_dfa(nodes)
    assert_same_dfa(multi, dfa_mod._glushkov_dfa(nodes, 10_000, "max_dfa_states"))
    assert multi.is_accepting(0, 1) and not multi.is_accepting(0, 0)
    s = multi.step(0, b"if")
    assert [multi.is_accepting(s, k) for k in range(6)] == [True, False, False, True, True, False]
    assert not multi.reachable[0, 5]  # the empty class: no string
    # the regex part is cached by tree: an equal tree built afresh finds it
    assert dfa_mod._PATTERN_CACHE[Repeat(cls(("a", "z")), 1, None)].n_states == 2
    # a cached DFA larger than a later, smaller cap is refused like a fresh build
    big = Repeat(cls("a", "b"), 30, 30)
    build_dfa([big, lit("x")])
    with pytest.raises(CompileError, match="max_states=20"):
        build_dfa([big, lit("x")], max_states=20)
    with pytest.raises(CompileError, match="max_states=3"):
        build_dfa([lit("abcd"), lit("x")], max_states=3)


@needs_parser
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=pattern_strategy(), b=pattern_strategy(), tail=LITERALS)
def test_automaton_nodes_skip_the_nfa_exactly(a: str, b: str, tail: str) -> None:
    """A boolean operation's node keeps its character DFA; build_dfa expands it (and appends a
    literal tail) without the position NFA, and gets exactly the NFA pipeline's DFA."""
    from logitgate.automata import boolean
    from logitgate.automata.dfa import _from_automaton, _glushkov_dfa
    from logitgate.regex.ast import Automaton

    node = boolean.difference(parse(a), parse(b))
    assume(isinstance(node, Automaton))
    assert node.chars is not None
    for whole in (node, Concat((node, lit(tail))) if tail else node):
        direct = _from_automaton(whole, 10_000, "max_dfa_states")
        reference = _glushkov_dfa([whole], 10_000, "max_dfa_states")
        if direct is None:  # only when an accepting state already moves on the tail's first byte
            first = tail.encode()[0]
            base = regex_dfa(node)
            assert whole is not node and any(base.transitions[q, first] >= 0
                                             for q in np.flatnonzero(base.accepting[:, 0]))
            continue
        assert_same_dfa(direct, reference)
    # an equal node built without the character DFA takes the NFA path, same result
    plain = Automaton(node.start, node.accepting, node.edges)
    assert plain == node and plain.chars is None and _from_automaton(plain, 10_000, "max_dfa_states") is None


@needs_parser
@needs_parser
def test_union_grows_past_its_first_arrays() -> None:
    """A union with more subsets, member slots and byte classes than the subset construction
    starts with (64 subsets, 128 hash slots, 64 classes) grows them between passes and still
    gives the single NFA's DFA; past ``max_states`` it is refused."""
    from logitgate.automata.dfa import _glushkov_dfa

    rng = random.Random(7)
    printable = [chr(c) for c in range(0x21, 0x7F)]
    words = {"".join(rng.choice(printable) for _ in range(rng.randint(1, 9))) for _ in range(300)}
    patterns = sorted(re.escape(w) for w in words) + [r"[a-z]+", r"\d+(\.\d+)?", r'"[^"]*"', r"é+|😀"]
    nodes = [parse(p) for p in patterns]
    union = build_dfa(nodes, max_states=100_000)
    assert union.n_states > 300 and union.class_transitions.shape[1] > 64
    assert_same_dfa(union, _glushkov_dfa(nodes, 100_000, "max_dfa_states"))
    with pytest.raises(CompileError):
        build_dfa(nodes, max_states=union.n_states - 1)


def test_union_on_corpus_lexers() -> None:
    """The lexers of corpus grammars: the union path and the single NFA agree exactly."""
    from logitgate.automata.dfa import _glushkov_dfa
    from logitgate.grammar.cfg import lower
    import logitgate as lg

    base = _DATA / "llama-cpp-grammars"
    if not base.exists():
        pytest.skip("llama.cpp grammars not found")
    done = 0
    for name in ("json.gbnf", "c.gbnf", "arithmetic.gbnf", "chess.gbnf"):
        path = base / name
        if not path.exists():
            continue
        cfg = lower(lg.Grammar.from_gbnf(path.read_text()).ir, warn=False)
        nodes = [t.node for t in cfg.terminals if t.automaton is None]
        assert_same_dfa(build_dfa(nodes, max_states=50_000), _glushkov_dfa(nodes, 50_000, "max_dfa_states"))
        done += 1
    assert done >= 3


@needs_parser
def test_json_schema_regex_cases() -> None:
    """outlines-core's JSON-schema regexes (big alternations, Unicode classes): their own
    should/should-not samples and random accepted strings, against re."""
    base = SAMPLES_PATH.parent
    if not (base / "json_schema_regex_cases.jsonl").exists():
        pytest.skip("outlines-core JSON schema cases not found")
    cases = [json.loads(line) for line in (base / "json_schema_regex_cases.jsonl").read_text().splitlines() if line]
    patterns = [(c["expected_regex"], (c.get("should_match") or []) + (c.get("should_not_match") or []))
                for c in cases if c.get("expected_regex")]
    patterns += [(p, []) for p in json.loads((base / "type_and_format_regexes.json").read_text()).values()]
    assert len(patterns) > 50
    rng = random.Random(2)
    for pattern, samples in patterns:
        dfa = regex_dfa(parse(pattern))
        assert_agrees_with_re(pattern, dfa, samples)
        for _ in range(5):
            data = random_walk(dfa, rng, max_len=60)
            assert re.fullmatch(pattern, data.decode("utf-8")) is not None, (pattern, data)


@needs_parser
@pytest.mark.slow
def test_benchmark_multi_pattern() -> None:
    regexes = bench_regexes()
    names = ["email", "ip", "date", "time", "simple_phone", "ssn"]
    nodes = [parse(regexes[n]) for n in names]
    multi = build_dfa(nodes)
    singles = [regex_dfa(n) for n in nodes]
    check_structure(multi)
    rng = random.Random(11)
    strings = [random_walk(s, rng, max_len=25) for s in singles for _ in range(20)]
    check_multi(multi, singles, strings)


def test_kernels_are_dispatched_without_type_conversion(monkeypatch) -> None:
    """A kernel with an explicit signature given arrays of another type (writable where it takes
    read-only ones, say) still runs, but numba first searches for a conversion: 200-400 µs, once
    per process and type combination, which a single compile pays in full. Compiles of Unicode
    patterns (big and small non-ASCII layouts, one pattern and a union) make no such search.
    (A search made by an earlier test in the same process is cached by numba and not seen here.)"""
    from numba.core import dispatcher

    from logitgate.regex.parser import parse

    searched: list[str] = []
    original = dispatcher._DispatcherBase._search_new_conversions

    def spy(self, *args, **kws):
        searched.append(self.py_func.__name__)
        return original(self, *args, **kws)

    monkeypatch.setattr(dispatcher._DispatcherBase, "_search_new_conversions", spy)
    patterns = [r"\w+\d", r"[^|()\n]{1,}\s", "é+x", r"(\d|[α-ω])+", "[\u0100-\u0200]x"]
    for pattern in patterns:
        regex_dfa(parse(pattern))
    build_dfa([parse(p) for p in patterns])
    assert searched == []


_WORD = st.text("abcé|\\.", min_size=1, max_size=4).map(re.escape)
# words, and loops of alternatives (their follow sets are groups: what a copied fragment renumbers)
_WORDS = st.lists(_WORD | st.tuples(_WORD, _WORD, _WORD).map(lambda w: f"{w[0]}(?:{w[1]}|c{w[2]})+"),
                  min_size=2, max_size=9)


@needs_parser
@settings(max_examples=60, deadline=None)
@given(words=_WORDS, other=_WORDS, shape=st.integers(0, 5), flags=st.sampled_from(["", "(?i)", "(?x)"]))
def test_repeated_group_bodies_and_alternations_are_reused_exactly(words, other, shape, flags) -> None:
    """A non-capturing group body met again is parsed once (the parser shares its items), its
    alternation built once (the builder keeps it) and its NFA fragment copied with shifted ids
    (``_Glushkov._replicate``): the minimal DFA (canonical arrays) equals the one from a parse
    that reuses nothing (the trees may differ: shared items factor as equal prefixes), every NFA
    array equals that of a build that copies nothing, and the DFA agrees with ``re``."""
    from logitgate.automata import nfa as nfa_module
    from logitgate.regex import parser as parser_module

    a, b = "(?:" + "|".join(words) + ")", "(?:" + "|".join(other) + ")"
    pattern = flags + [a + "-" + a, f"({a}|x{b})+{a}?", f"{a}{{2,3}}{b}{a}", f"(?i:{a}){a}",
                       f"(?:{a}|{b}){a}(?:{a}|{b})", f"{a}*({a})"][shape]
    with pytest.MonkeyPatch.context() as mp:  # reuse whatever repeats, however small
        mp.setattr(parser_module, "_REUSE_MIN_BODY", 0)
        mp.setattr(nfa_module, "_TEMPLATE_MIN_POSITIONS", 1)
        tree = parse(pattern)
        reused_nfa = nfa_module.build_nfa([tree], atoms=False)
    with pytest.MonkeyPatch.context() as mp:  # reuse nothing
        mp.setattr(parser_module, "_REUSE_MIN_BODY", 10**9)
        mp.setattr(nfa_module, "_TEMPLATE_MIN_POSITIONS", 10**9)
        fresh_tree = parse(pattern)
        fresh_nfa = nfa_module.build_nfa([tree], atoms=False)
    for name in ("start", "follow_off", "follow", "group_off", "group_members", "class_of"):
        assert np.array_equal(getattr(reused_nfa, name), getattr(fresh_nfa, name)), name
    dfa = regex_dfa(tree)
    fresh_dfa = regex_dfa(fresh_tree)
    for name in ("accepting", "byte_classes", "class_transitions"):
        assert np.array_equal(getattr(dfa, name), getattr(fresh_dfa, name)), name
    rng = random.Random(len(pattern))
    pieces = ["-", "x", "c", *(w.replace("\\", "") for w in words + other)]
    strings = ["".join(rng.choice(pieces)
                       for _ in range(rng.randint(0, 6))) for _ in range(60)]
    assert_agrees_with_re(pattern, dfa, strings)


@needs_parser
@pytest.mark.parametrize("pattern", [r"\+?\d{1,4}?[-.\s]?\(?\d{1,3}?\)?[-.\s]?\d{1,4}[-.\s]?\d{1,4}", r"\w+é\s\d{2,3}",
                                     r"[^a]{0,5}x", r"(\d|\s)*"])
def test_utf8_expansion_scratch_is_only_scratch(pattern: str) -> None:
    """The UTF-8 expansion (kernel ``utf8_byte_dfa``) writes its mid-character rows and byte table
    into a per-thread scratch buffer when that is large enough: stale contents must not leak into
    the DFA (same arrays as with no room, where the kernel allocates), and a compile that needed
    more room than the scratch had grows it for the next one."""
    from logitgate.automata import dfa as dfa_mod

    node = parse(pattern)
    saved = dfa_mod._scratch()
    try:
        dfa_mod._THREAD.scratch = np.zeros(0, np.int32)  # no room: the kernel's own arrays
        dfa_mod._PATTERN_CACHE.clear()
        roomless = dfa_mod._glushkov_dfa([node], 100_000, "max_dfa_states")
        grown = dfa_mod._scratch()
        assert grown.shape[0] > 0, "the scratch did not grow after a compile that needed it"
        # grown enough: the same compile now leaves the scratch as it is (no further growth)
        dfa_mod._glushkov_dfa([node], 100_000, "max_dfa_states")
        assert dfa_mod._scratch() is grown
        rng = np.random.default_rng(0)
        garbage = rng.integers(-5, 1 << 20, size=1 << 20).astype(np.int32)
        before = garbage.copy()
        dfa_mod._THREAD.scratch = garbage
        in_scratch = dfa_mod._glushkov_dfa([node], 100_000, "max_dfa_states")
        assert not np.array_equal(garbage, before), "the kernel did not write into the scratch"
        assert_same_dfa(in_scratch, roomless)
        check_structure(in_scratch)
        # a second compile over the scratch the first one left dirty; the first DFA shares no
        # memory with the scratch, so it is unchanged by the second compile's writes
        assert_same_dfa(dfa_mod._glushkov_dfa([node], 100_000, "max_dfa_states"), roomless)
        assert_same_dfa(in_scratch, roomless)
    finally:
        dfa_mod._THREAD.scratch = saved
