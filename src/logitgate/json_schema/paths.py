"""Which JSON values of a schema's grammar can start at one point of a document: a necessary
condition for two value terminals to be expected together, read off the grammar's value rules.

A JSON text's brackets fix, at every point, the values that enclose it and where each starts;
two parses of one prefix differ only in which value rule reads each of them. So two value
rules (or two terminals that start values) can start at one point only if the values
enclosing them can start at one point too, each entered after lexemes that one lexeme could
be (the keys before them, both ``[``, both ``,``), or one starts where the other does (a rule
whose value is another rule's, an ``anyOf`` branch). The pairs are found from the document's
root by a worklist over that product, with the grammar's other nonterminals folded into the
value rules that use them. The long strings' pieces use it (``translate.piece_conflicts``):
where the exploration of the parser's rows (``grammar.expected``) runs out of budget on a
large object, this settles most pairs.
"""
from __future__ import annotations

from typing import Any

from ..grammar.cfg import CFG, last_terminals, nullable_nonterminals
from ..grammar.expected import iter_bits, lexeme_companions

__all__ = ["values_apart"]


def values_apart(cfg: CFG, lexer: Any, units: frozenset[int], a: int, others: list[int]) -> list[int]:
    """Those of ``others`` (terminals that start JSON values) that may start a value where
    terminal ``a`` does, as far as this test sees (see the module docstring); the rest are never
    expected together with ``a``. ``units``: the nonterminals that are whole JSON values."""
    if not others:
        return []
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    nullable = nullable_nonterminals(cfg.rules, t, n_nt)
    last = last_terminals(cfg.rules, t, n_nt, nullable)
    roots = set(units) | {0}
    leaves = {a, *others}
    # nodes: nonterminals by index, leaves (the terminals asked about) as n_nt + terminal
    own: list[dict[int, int]] = [{} for _ in range(n_nt)]  # node -> the terminals right before it
    inh: list[set[int]] = [set() for _ in range(n_nt)]  # nodes that start where the nonterminal does
    calls: list[tuple[int, int, bool, int]] = []
    for lhs, rhs in cfg.rules:
        prev, at_start = 0, True
        for s in rhs:
            node = None
            if s < t:
                if s in leaves:
                    node = n_nt + s
            elif s - t in roots:
                node = s - t
            else:
                calls.append((lhs, prev, at_start, s - t))
            if node is not None:
                if prev:
                    own[lhs][node] = own[lhs].get(node, 0) | prev
                if at_start:
                    inh[lhs].add(node)
            if s < t:
                prev, at_start = 1 << s, False
            else:
                prev = last[s - t] | (prev if nullable[s - t] else 0)
                at_start = at_start and nullable[s - t]
    # fold the other nonterminals into their users (a worklist over the call sites)
    callers: list[list[int]] = [[] for _ in range(n_nt)]
    for k, (_, _, _, callee) in enumerate(calls):
        callers[callee].append(k)
    queue = list(range(len(calls)))
    while queue:
        lhs, prev, at_start, callee = calls[queue.pop()]
        changed = False
        mine = own[lhs]
        for node, bits in own[callee].items():
            if bits & ~mine.get(node, 0):
                mine[node] = mine.get(node, 0) | bits
                changed = True
        for node in inh[callee]:
            if prev and prev & ~mine.get(node, 0):
                mine[node] = mine.get(node, 0) | prev
                changed = True
            if at_start and node not in inh[lhs]:
                inh[lhs].add(node)
                changed = True
        if changed and lhs not in roots:
            queue.extend(callers[lhs])
    beside = lexeme_companions(lexer, t)
    # per value rule, its inner values by each terminal that may come right before them
    by_term: dict[int, dict[int, list[int]]] = {}
    for u in roots:
        index: dict[int, list[int]] = {}
        for node, bits in own[u].items():
            for c in iter_bits(bits):
                index.setdefault(c, []).append(node)
        by_term[u] = index
    near: dict[int, int] = {}

    def closure(bits: int) -> int:
        found = near.get(bits)
        if found is None:
            found = 0
            for c in iter_bits(bits):
                found |= beside[c]
            near[bits] = found
        return found

    seen = {(0, 0)}
    todo = [(0, 0)]
    wanted = {(min(n_nt + a, n_nt + o), max(n_nt + a, n_nt + o)): o for o in others}
    hit: set[int] = set()

    def add(p: int, q: int) -> None:
        key = (p, q) if p <= q else (q, p)
        if key not in seen:
            seen.add(key)
            todo.append(key)
            if key in wanted:
                hit.add(wanted[key])

    while todo:
        p, q = todo.pop()
        if p < n_nt:
            for v in inh[p]:
                add(v, q)
        if q < n_nt:
            for v in inh[q]:
                add(p, v)
        if p >= n_nt or q >= n_nt:
            continue  # a leaf is one lexeme: what is inside the other value starts later
        index = by_term[q]
        for v, bits in own[p].items():
            for c in iter_bits(closure(bits)):
                for w in index.get(c, ()):
                    add(v, w)
    return [o for o in others if o in hit or o == a]
