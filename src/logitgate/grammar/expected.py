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

A nonterminal that nests (it occurs inside itself after some other symbol, so its rows stack
without end: a JSON value of any shape), or that the caller names as a unit (any JSON value),
and that cannot reach any of the ``others`` is read as one
symbol ``N^`` (a pseudo-terminal; nullable ``N`` may also be skipped): on one path no row
inside ``N`` expects any of ``others``, so a conflict inside it needs a second path alive beside
it, and that path must have read ``N``'s first lexeme too; where ``N^`` is expected beside a
symbol whose lexemes can start with the same byte, the answer is "unknown" (the two paths may
read the same text, and go on past ``N`` together). A nesting rule that can reach ``others`` still unfolds, and the exploration
gives up past a budget ("unknown").
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..kernels import earley_kernels as ek
from ..limits import check_deadline
from .cfg import CFG
from .engine import ParserTables, _Chart, nullable_nonterminals
from .lexer import LexerTables

__all__ = ["expected_together", "EXPLORE_ROWS"]

EXPLORE_ROWS = 4_000
"""Most distinct parser rows (by fingerprint) an exploration visits before giving up."""


def _components(succ: list[set[int]]) -> list[int]:
    """Tarjan's strongly connected components of the graph ``succ``, iteratively: per node, its
    component, numbered so that a component's successors have smaller numbers."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    comp = [-1] * n
    on_stack = [False] * n
    order: list[int] = []
    counter = n_comp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        order.append(root)
        on_stack[root] = True
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    order.append(w)
                    on_stack[w] = True
                    work.append((w, iter(succ[w])))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = order.pop()
                    on_stack[w] = False
                    comp[w] = n_comp
                    if w == v:
                        break
                n_comp += 1
    return comp


def _summaries(cfg: CFG, nullable: list[bool]) -> tuple[list[frozenset[int]], list[frozenset[int]], list[bool]]:
    """Per nonterminal: the terminals its derivations use, those they can start with (FIRST),
    and whether it nests (lies on a cycle of the "occurs in a rule of" graph through an
    occurrence after the rule's first symbol, so that a parser stacks its rows without end; left
    recursion, a repetition, does not). Over the strongly connected components, successors
    first: one pass each."""
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    succ: list[set[int]] = [set() for _ in range(n_nt)]
    succ_first: list[set[int]] = [set() for _ in range(n_nt)]
    own: list[set[int]] = [set() for _ in range(n_nt)]
    own_first: list[set[int]] = [set() for _ in range(n_nt)]
    inner: list[tuple[int, int]] = []
    for lhs, rhs in cfg.rules:
        leading = True
        for i, s in enumerate(rhs):
            if s < t:
                own[lhs].add(s)
                if leading:
                    own_first[lhs].add(s)
                    leading = False
                continue
            succ[lhs].add(s - t)
            if i:
                inner.append((lhs, s - t))
            if leading:
                succ_first[lhs].add(s - t)
                leading = nullable[s - t]

    def fold(graph: list[set[int]], base: list[set[int]]) -> tuple[list[frozenset[int]], list[int]]:
        comp = _components(graph)
        members: list[list[int]] = [[] for _ in range(max(comp, default=-1) + 1)]
        for v, c in enumerate(comp):
            members[c].append(v)
        value: list[frozenset[int]] = [frozenset()] * len(members)
        for c, vs in enumerate(members):  # successors' components come first
            acc: set[int] = set()
            for v in vs:
                acc |= base[v]
                for w in graph[v]:
                    if comp[w] != c:
                        acc |= value[comp[w]]
            value[c] = frozenset(acc)
        return [value[comp[v]] for v in range(n_nt)], comp

    terms, comp = fold(succ, own)
    first, _ = fold(succ_first, own_first)
    nests = {comp[a] for a, b in inner if comp[a] == comp[b]}
    return terms, first, [comp[v] in nests for v in range(n_nt)]


def expected_together(cfg: CFG, lexer: LexerTables, a: int, others: list[int], *, units: frozenset[int] = frozenset(),
                      max_rows: int = EXPLORE_ROWS) -> bool | None:
    """Whether some row of the parser, on some input, expects terminal ``a`` and one of
    ``others``: True or False, or None when unknown (see the module docstring). ``units``:
    nonterminals each explored on its own and read whole elsewhere, which the caller knows to
    expect nothing more once complete (a JSON value: it ends with its bracket, its quote, its
    one lexeme). Of those explored, one that can end where it could also go on makes the answer
    unknown."""
    if not others:
        return False
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    other_set = set(others)
    nullable = nullable_nonterminals(cfg.rules, t, n_nt)
    terms, first, nesting = _summaries(cfg, nullable)
    start = cfg.rules[0][1][0] - t
    if not terms[start] & other_set:
        return False  # none of ``others`` is ever expected
    # read whole: the units, and the nesting nonterminals that cannot reach ``others``
    whole = sorted(n for n in range(n_nt) if n != 0 and (n in units or (nesting[n] and not terms[n] & other_set)))
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
    # whole-read symbols: one beside another reading of its first byte may hide a conflict (the
    # two paths may read the same text, inside it or past it)
    risky = set(hat.values())
    # first bytes of each terminal and whole-read symbol
    start_moves = lexer.trans[lexer.start]
    fb = np.zeros((n_sym, 256), bool)
    for b in np.flatnonzero(start_moves >= 0).tolist():
        on = np.unpackbits(lexer.reach_bits[start_moves[b]].view(np.uint8), bitorder="little")[:t]
        fb[:t, b] = on.astype(bool)
    for n in whole:
        if first[n]:
            fb[hat[n]] = fb[sorted(first[n])].any(axis=0)
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
        while True:
            rows = chart.n_rows
            r = int(ek.push_row(G, chart.args(), scan, init))
            if r >= 0:
                return r
            chart.meta[0] = rows
            chart.grow(r)

    push(np.zeros(n_words, np.uint64), True)
    stack: list[tuple[int, list[np.ndarray], bool]] = []

    def enter(unit: bool) -> bool | None:
        """Look at the last row: True when it expects ``a`` beside one of ``others``, None when a
        risky whole-read symbol has company that may read its first lexeme, or a unit could end
        here and go on (what follows it elsewhere would be expected beside); else queue the
        scans out of it."""
        k = chart.n_rows - 1
        exp = chart.row_exp[k].copy()
        if (exp & heads).any() and (exp & other_bits).any():
            return True
        if unit and chart.row_acc[k] and exp.any():
            return None
        on = np.flatnonzero(np.unpackbits(exp.view(np.uint8), bitorder="little")[:n_sym]).tolist()
        for h in risky.intersection(on):
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
    while stack:
        rows, scans, unit = stack[-1]
        chart.meta[0] = rows  # pop what the last scan pushed
        if not scans:
            stack.pop()
            continue
        scan = scans.pop()
        if len(stack) == 1:  # a root's marker: the start, or a unit
            unit = not (scan & bits([marker[start]])).any()
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
        found = enter(unit)
        if found is not False:
            return found
    return False
