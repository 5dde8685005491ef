"""Whether the Earley parser of a grammar can expect two terminals at one point: a bounded
exploration of its rows, lexeme by lexeme.

A front end that splits a language into lexemes at a point where another terminal's lexemes
run on (the JSON Schema translator's pieces of long strings) must know that the two are never
expected together: the greedy lexer would end neither there. Static approximations (FOLLOW
sets) merge every context a rule is used in; the parser itself does not. So the parser is run
over *terminals* rather than bytes: from the first row, each expected terminal ``x`` is scanned
together with every expected terminal that some lexeme ends as beside it (a superset of what
the lexer would scan: more items, so a superset of what is expected next), depth first, a row
popped after its subtree. Rows with the same fingerprint have the same future (see
``kernels.earley_kernels``), so each is explored once.

Some nonterminals are read as one symbol ``N^`` (a pseudo-terminal; a nullable one may also
be skipped): the caller's units (a JSON value, which expects nothing more once complete), each
also explored on its own from a marker of its own when it may hold both terminals inside; and
the nonterminals that nest (they occur inside themselves after some other symbol, so their rows
stack without end) with neither terminal inside. On one path the rows inside ``N`` are seen
where ``N`` is explored, or hold neither terminal; a conflict beside it needs a second path that
read ``N``'s first lexeme too, so where ``N^`` is expected beside a symbol whose lexemes can
start with the same byte the answer is "unknown" (the two paths may read the same text, and go
on past ``N`` together), and so it is where an explored unit could end and go on, and where
what follows a nesting ``N^`` may start like a terminal inside ``N`` (a shorter and a longer
reading of ``N``: ``r1: C r1 | C`` before ``C A | B`` expects ``A`` and ``B`` after ``C C``).
A nesting rule
with a terminal inside still unfolds, and the exploration gives up past a budget ("unknown").

Before any of that, a cheap necessary condition settles most pairs of a large grammar: a row is
pushed by scanning one lexeme, so two terminals it expects each come right after a terminal
that lexeme matched (or both at the start of the text). A terminal ``o`` none of whose
predecessors any lexeme matches beside one of ``a``'s is never expected with ``a``
(``not_apart_by_predecessors``).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..kernels import earley_kernels as ek
from ..limits import check_deadline
from .cfg import CFG, last_terminals, nullable_nonterminals, symbol_summaries
from .engine import CFGEngine, ParserTables, _Chart
from .lexer import LexerTables

__all__ = ["expected_together", "not_apart_by_predecessors", "preceding_terminals", "lexeme_companions", "iter_bits",
           "EXPLORE_ROWS"]

EXPLORE_ROWS = 4_000
"""Most distinct parser rows (by fingerprint) an exploration visits before giving up."""


def iter_bits(x: int):
    """The indices of the set bits of the int ``x``, lowest first."""
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def lexeme_companions(lexer: LexerTables, t: int) -> list[int]:
    """Per terminal (of ``t``), the terminals some lexeme ends as beside it (itself included),
    as int bitsets: the union of the lexer's accepting sets that hold it."""
    companions = [1 << x for x in range(t)]
    for row in np.unique(lexer.acc_bits, axis=0):
        bits = int.from_bytes(row.astype("<u8").tobytes(), "little")
        for x in iter_bits(bits):
            companions[x] |= bits
    return companions


def preceding_terminals(cfg: CFG) -> list[int]:
    """Per terminal, the terminals that can come right before it in a sentential form of the
    grammar (bit ``n_terminals``: the start of the text), as int bitsets. A superset for rules
    no derivation uses; nullable symbols between are skipped."""
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    rules = cfg.rules
    nullable = nullable_nonterminals(rules, t, n_nt)
    last = last_terminals(rules, t, n_nt, nullable)
    before = [0] * (t + n_nt)  # per symbol: what can come right before it
    before[t + rules[0][0]] = 1 << t
    for _, rhs in rules:
        prev = 0  # what can end right before the current symbol inside this rule
        for s in rhs:
            before[s] |= prev
            prev = (1 << s) if s < t else last[s - t] | (prev if nullable[s - t] else 0)
    # what comes before a nonterminal comes before the symbols its rules can start with
    users: list[list[int]] = [[] for _ in range(n_nt)]
    for r, (lhs, _) in enumerate(rules):
        users[lhs].append(r)
    queue = list(range(n_nt))
    while queue:
        n = queue.pop()
        have = before[t + n]
        for r in users[n]:
            for s in rules[r][1]:
                if have & ~before[s]:
                    before[s] |= have
                    if s >= t:
                        queue.append(s - t)
                if s < t or not nullable[s - t]:
                    break
    return before[:t]


def not_apart_by_predecessors(cfg: CFG, lexer: LexerTables, a: int, others: list[int],
                              before: list[int] | None = None) -> list[int]:
    """Those of ``others`` that this necessary condition does not rule out being expected
    together with terminal ``a``: a row is pushed by scanning one lexeme, so both come right
    after a terminal matched by that one lexeme (a row's expected terminals come after what it
    scanned; the scanned set is the terminals the lexeme ends as there), or both may start the
    text. ``before``: ``preceding_terminals(cfg)``, when the caller has it."""
    if before is None:
        before = preceding_terminals(cfg)
    mine = before[a]
    if not mine:
        return []
    # the terminals some lexeme ends as beside one of ``a``'s predecessors (those included)
    companions = lexeme_companions(lexer, cfg.n_terminals)
    beside = mine
    for c in iter_bits(mine):
        if c < len(companions):  # (bit n_terminals: the start of the text)
            beside |= companions[c]
    return [o for o in others if before[o] & beside]


def expected_together(cfg: CFG, lexer: LexerTables, a: int, others: list[int], *, units: frozenset[int] = frozenset(),
                      max_rows: int = EXPLORE_ROWS, before: list[int] | None = None) -> bool | None:
    """Whether some row of the parser, on some input, expects terminal ``a`` and one of
    ``others``: True or False, or None when unknown (see the module docstring). ``units``:
    nonterminals each explored on its own and read whole elsewhere, which the caller knows to
    expect nothing more once complete (a JSON value: it ends with its bracket, its quote, its
    one lexeme). Of those explored, one that can end where it could also go on makes the answer
    unknown. ``before``: ``preceding_terminals(cfg)``, when the caller has it."""
    if not others:
        return False
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    other_set = set(others)
    nullable = nullable_nonterminals(cfg.rules, t, n_nt)
    terms, first, nesting = symbol_summaries(cfg, nullable)
    start = cfg.rules[0][1][0] - t
    if not terms[start] & other_set:
        return False  # none of ``others`` is ever expected
    others = not_apart_by_predecessors(cfg, lexer, a, others, before)
    if not others:
        return False
    other_set = set(others)
    # read whole: the units, and the nesting nonterminals with neither ``a`` nor ``others``
    # inside (one that can end where it could go on would leave ``a`` expected past its end)
    whole = sorted(n for n in range(n_nt) if n != 0 and (n in units or (
        nesting[n] and a not in terms[n] and not terms[n] & other_set)))
    # explored from a marker of their own: the start, and the units that may hold both inside
    roots = [start] + [n for n in sorted(units) if n != start and a in terms[n] and terms[n] & other_set]
    hat = {n: t + i for i, n in enumerate(whole)}
    marker = {n: t + len(whole) + i for i, n in enumerate(roots)}
    n_sym = t + len(whole) + len(roots)
    # nonterminals: the grammar's, then a wrapper per whole one (its pseudo-terminal, or nothing
    # when nullable), then the selector of the roots
    wrap = {n: n_nt + i for i, n in enumerate(whole)}
    select = n_nt + len(whole)

    def sym(s: int) -> int:
        if s < t:
            return s
        return n_sym + wrap.get(s - t, s - t)

    rules: list[tuple[int, tuple[int, ...]]] = [(0, (n_sym + select,))]
    expanded = set(range(1, n_nt)) - set(whole) | set(roots)
    for lhs, rhs in cfg.rules[1:]:
        if lhs in expanded:
            rules.append((lhs, tuple(sym(x) for x in rhs)))
    for n in whole:
        rules.append((wrap[n], (hat[n],)))
        if nullable[n]:
            rules.append((wrap[n], ()))
    for n in roots:
        rules.append((select, (marker[n], n_sym + n)))
    names = list(cfg.nonterminals) + [f"{cfg.nonterminals[n]}^" for n in whole] + ["$roots"]
    tables = ParserTables(SimpleNamespace(rules=rules, n_terminals=n_sym, nonterminals=names))  # type: ignore[arg-type]
    G = tables.args()
    n_words = tables.n_words

    def bits(symbols) -> np.ndarray:
        out = np.zeros(n_words, np.uint64)
        for x in symbols:
            out[x >> 6] |= np.uint64(1) << np.uint64(x & 63)
        return out

    heads = bits([a] + [hat[n] for n in whole if a in first[n]])
    other_bits = bits(others + [hat[n] for n in whole if first[n] & other_set])
    # first bytes of each terminal and whole-read symbol
    start_moves = lexer.trans[lexer.start]
    fb = np.zeros((n_sym, 256), bool)
    for b in np.flatnonzero(start_moves >= 0).tolist():
        on = np.unpackbits(lexer.reach_bits[start_moves[b]].view(np.uint8), bitorder="little")[:t]
        fb[:t, b] = on.astype(bool)
    for n in whole:
        if first[n]:
            fb[hat[n]] = fb[sorted(first[n])].any(axis=0)
    # per nesting symbol read whole (not a unit): the first bytes of the terminals inside it,
    # a superset of what it could go on with where it could also end
    inner = {hat[n]: fb[sorted(terms[n])].any(axis=0) for n in whole if n not in units and terms[n]}
    # per terminal, the terminals some lexeme ends as beside it (itself included)
    ends = np.unique(lexer.acc_bits, axis=0)
    beside = np.zeros((n_sym, n_words), np.uint64)
    for x in range(n_sym):
        w, b = x >> 6, np.uint64(1) << np.uint64(x & 63)
        if x < t:
            rows = ends[(ends[:, w] & b) != 0]
            if rows.shape[0]:
                beside[x, :rows.shape[1]] = np.bitwise_or.reduce(rows, axis=0)
        beside[x, w] |= b
    chart = _Chart(n_words)

    def push(scan: np.ndarray, init: bool) -> int:
        return CFGEngine._retry(lambda: ek.push_row(G, chart.args(), scan, init), chart)

    push(np.zeros(n_words, np.uint64), True)
    stack: list[tuple[int, list[np.ndarray], bool]] = []

    def enter(unit: bool, scanned: np.ndarray) -> bool | None:
        """Look at the last row, pushed by ``scanned``: True when it expects ``a`` beside one of
        ``others``, None when a whole-read symbol has company that may read its first lexeme,
        or a unit could end here and go on (what follows it elsewhere would be expected
        beside), or a nesting symbol just read whole is followed by what may go on inside it
        (the same text read as its longer form: what follows it there, and what this row
        expects, may be expected together); else queue the scans out of it."""
        k = chart.n_rows - 1
        exp = chart.row_exp[k].copy()
        if (exp & heads).any() and (exp & other_bits).any():
            return True
        if unit and chart.row_acc[k] and exp.any():
            return None
        on = np.flatnonzero(np.unpackbits(exp.view(np.uint8), bitorder="little")[:n_sym]).tolist()
        if on and inner:
            for h in np.flatnonzero(np.unpackbits(scanned.view(np.uint8), bitorder="little")[:n_sym]).tolist():
                if h in inner and (fb[on].any(axis=0) & inner[h]).any():
                    return None
        # a whole-read symbol beside another reading of its first byte may hide a conflict (the
        # two paths may read the same text, inside it or past it)
        for h in [x for x in on if t <= x < t + len(whole)]:
            rest = [x for x in on if x != h]
            if rest and (fb[rest].any(axis=0) & fb[h]).any():
                return None
        scans: dict[bytes, np.ndarray] = {}
        for x in on:
            sc = beside[x] & exp
            scans.setdefault(sc.tobytes(), sc)
        stack.append((chart.n_rows, list(scans.values()), unit))
        return False

    # the first row expects the roots' markers: each is scanned alone
    seen = {chart.row_fp[0].tobytes()}
    stack.append((chart.n_rows, [bits([marker[n]]) for n in reversed(roots)], False))
    start_marker = bits([marker[start]])
    while stack:
        rows, scans, unit = stack[-1]
        chart.meta[0] = rows  # pop what the last scan pushed
        if not scans:
            stack.pop()
            continue
        scan = scans.pop()
        if len(stack) == 1:  # a root's marker: the start, or a unit
            unit = not (scan & start_marker).any()
        if push(scan, False) != ek.OK:
            continue
        fp = chart.row_fp[rows].tobytes()
        if fp in seen:
            continue
        seen.add(fp)
        if len(seen) > max_rows:
            return None
        if len(seen) % 256 == 0:
            check_deadline("exploring the parser's expected sets")
        found = enter(unit, scan)
        if found is not False:
            return found
    return False
