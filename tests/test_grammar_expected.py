"""``grammar.expected.expected_together``: whether an Earley row can expect two terminals at once.

Hand cases (contexts apart, one row, two parse paths over a shared prefix, nesting rules read
whole, nesting that reaches the terminals, a unit beside another reading of its first byte), and
soundness on random grammars against a brute force: every sequence of up to five lexemes,
pushed row by row without any deduplication or whole reading, is an input the exploration must
not call conflict-free when one of its rows expects both.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from logitgate.grammar.cfg import lower
from logitgate.grammar.engine import CFGEngine, ParserTables, _Chart
from logitgate.grammar.expected import expected_together, not_apart_by_predecessors, preceding_terminals
from logitgate.grammar.lark_frontend import parse_lark
from logitgate.grammar.lexer import build_lexer
from logitgate.kernels import earley_kernels as ek

TERMINALS = 'A: "a"\nB: "b"\nC: "c"\nD: "ab"\nE: "e"\n'


def _setup(text: str):
    cfg = lower(parse_lark(text), warn=False)
    return cfg, build_lexer(cfg), [t.name for t in cfg.terminals]


def together(text: str, a: str = "A", others: tuple[str, ...] = ("B",), units: tuple[str, ...] = (),
             max_rows: int = 2000) -> bool | None:
    cfg, lexer, names = _setup(text)
    unit_ids = frozenset(i for i, n in enumerate(cfg.nonterminals) if n in units)
    return expected_together(cfg, lexer, names.index(a), [names.index(o) for o in others if o in names],
                             units=unit_ids, max_rows=max_rows)


def test_contexts_apart() -> None:
    assert together(TERMINALS + 'start: C A | E B\n') is False


def test_one_row() -> None:
    assert together(TERMINALS + 'start: C (A | B)\n') is True


def test_two_paths_over_a_shared_prefix() -> None:
    assert together(TERMINALS + 'start: p | q\np: C E A\nq: C E B\n') is True


def test_overlapping_terminals_scan_together() -> None:
    # "ab" is one lexeme that D and the pair A B could not both be; a D then A, and an A then B
    assert together(TERMINALS + 'start: C D A | C D C B\n') is False
    assert together(TERMINALS + 'start: x A | y B\nx: C D\ny: C D\n') is True


def test_nesting_rule_without_the_others_is_read_whole() -> None:
    grammar = TERMINALS + 'start: v C A | E B\nv: "[" v "]" | D\n'
    assert together(grammar) is False
    # beside a symbol that may read its first lexeme (E), what follows it is not known
    assert together(TERMINALS + 'start: v C A | E C B\nv: "[" v "]" | E\n') is None
    # (A after C, B after E at the start: apart before any exploration)
    assert together(TERMINALS + 'start: v C A | E B\nv: "[" v "]" | E\n') is False
    assert together(TERMINALS + 'start: v (A | B)\nv: "[" v "]" | E\n') is True
    # what follows it may start like a terminal inside it: "c c" is r1 = "c c" before B, or
    # r1 = "c" before "c" A (found by the random test below); unknown, never "apart"
    assert together(TERMINALS + 'start: | r1 r2 r3\nr1: C r1 | C\nr2: B | C A\nr3: \n') is None
    assert together(TERMINALS + 'start: | r1 r2\nr1: C r1 | C\nr2: B | E A\n') is False


def test_nesting_that_reaches_the_others_gives_up() -> None:
    # A and B both come after a C, so only the exploration could tell; it unfolds w forever
    assert together(TERMINALS + 'start: w\nw: "[" w "]" | C B | E C A\n', max_rows=200) is None
    # after different terminals: apart without exploring
    assert together(TERMINALS + 'start: w\nw: "[" w "]" | B | C A\n', max_rows=200) is False


def test_preceding_terminals() -> None:
    cfg, _, names = _setup(TERMINALS + 'start: C x A | y\nx: | E\ny: x B\n')
    before = preceding_terminals(cfg)
    bos = 1 << cfg.n_terminals

    def of(name: str) -> set[str]:
        b = before[names.index(name)]
        return {n for i, n in enumerate(names) if b >> i & 1} | ({"^"} if b & bos else set())

    assert of("C") == {"^"}
    assert of("E") == {"C", "^"}  # y starts with the nullable x
    assert of("A") == {"C", "E"}
    assert of("B") == {"E", "^"}


def test_predecessors_matched_by_one_lexeme() -> None:
    # "a" is one lexeme that both A and F match: after it C and E may be expected together
    grammar = TERMINALS + 'F: /a/\nstart: A C | F E\n'
    cfg, lexer, names = _setup(grammar)
    assert not_apart_by_predecessors(cfg, lexer, names.index("C"), [names.index("E")]) == [names.index("E")]
    assert together(grammar, "C", ("E",)) is True
    # F is never expected where A is, which only the exploration sees
    assert together(TERMINALS + 'F: /a/\nstart: A C | B F E\n', "C", ("E",)) is False
    cfg, lexer, names = _setup(TERMINALS + 'start: A C | B E\n')
    assert not_apart_by_predecessors(cfg, lexer, names.index("C"), [names.index("E")]) == []


def test_unit_beside_another_reading_of_its_first_byte_is_unknown() -> None:
    grammar = TERMINALS + 'start: u | "{" E B\nu: "{" E A "}"\n'
    assert together(grammar) is True
    assert together(grammar, units=("u",)) is None
    assert together(TERMINALS + 'start: C u | E B\nu: "{" E A "}"\n', units=("u",)) is False


def test_absent_terminals() -> None:
    assert together(TERMINALS + 'start: C A\n', others=()) is False
    assert together(TERMINALS + 'start: C A | E D\n', others=("D",)) is False


# -- soundness on random grammars -----------------------------------------------------------

SYMBOLS = ["A", "B", "C", "D", "E", "r1", "r2", "r3"]


@st.composite
def grammars(draw) -> tuple[str, set[str]]:
    """A random grammar over A-E and three rules, and the rules that are units: bracketed, so
    that once complete they expect nothing more (the contract ``units`` asks for)."""
    units = draw(st.sets(st.sampled_from(["r1", "r2", "r3"])))
    lines = [TERMINALS]
    for name in ["start", "r1", "r2", "r3"]:
        alts = draw(st.lists(st.lists(st.sampled_from(SYMBOLS), min_size=0, max_size=3), min_size=1, max_size=3))
        if name == "start":  # reach every rule, keep the language non-empty
            alts.append(["r1", "r2", "r3"])
        if all(any(s.startswith("r") for s in alt) for alt in alts):
            alts.append(["C"])
        body = " | ".join(" ".join(alt) if alt else "" for alt in alts)
        lines.append(f"{name}: " + (f'"[" ({body}) "]"' if name in units else body) + "\n")
    return "".join(lines), units


def _brute(text: str, a: str, other: str, depth: int = 5) -> bool:
    cfg, lexer, names = _setup(text)
    if a not in names or other not in names:
        return False
    tables = ParserTables(cfg)
    G = tables.args()
    n_words = tables.n_words
    ia, io = names.index(a), names.index(other)
    ends = np.unique(lexer.acc_bits, axis=0)

    def has(exp, i):
        return bool(exp[i >> 6] >> np.uint64(i & 63) & np.uint64(1))

    def push(chart, scan, init):
        return CFGEngine._retry(lambda: ek.push_row(G, chart.args(), scan, init), chart)

    chart = _Chart(n_words)
    push(chart, np.zeros(n_words, np.uint64), True)

    def go(d: int) -> bool:
        rows = chart.n_rows
        exp = chart.row_exp[rows - 1].copy()
        if has(exp, ia) and has(exp, io):
            return True
        if d == 0:
            return False
        for acc in ends:  # every set a lexeme can end as, as the lexer would scan it
            scan = acc & exp
            if not scan.any():
                continue
            chart.meta[0] = rows
            if push(chart, scan.copy(), False) == ek.OK and go(d - 1):
                return True
        chart.meta[0] = rows
        return False

    return go(depth)


@settings(max_examples=150, deadline=None)
@given(drawn=grammars())
def test_never_conflict_free_where_a_row_expects_both(drawn: tuple[str, set[str]]) -> None:
    text, units = drawn
    try:
        cfg, _, names = _setup(text)
    except Exception:  # an empty language or a malformed draw: nothing to check
        return
    for a, other in (("A", "B"), ("A", "D"), ("C", "E")):
        if a not in names or other not in names:
            continue
        found = together(text, a, (other,), units=tuple(units), max_rows=500)
        if found is False:
            assert not _brute(text, a, other), (text, a, other, units)
