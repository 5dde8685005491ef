"""Boolean operations on regular languages, with regex syntax trees in and out.

All operands go into one position NFA (:func:`~logitgate.automata.nfa.build_nfa`, operand ``k``
is pattern ``k``), so a single subset construction follows every operand at once: the accepting
row of a DFA state says which operands fully match the characters read so far. A boolean
function of that row marks the accepting states of the result; character-level trimming and
Hopcroft minimisation give its minimal DFA, returned as an :class:`~logitgate.regex.ast.Automaton`
node that any other tree (and so the lexer and the grammars) can embed. When that construction
needs more than ``max_states`` states (its states pair the operands' unminimised subsets), an
intersection or difference pairs the operands' own minimal DFAs over the same atoms instead
(kernel ``product_dfa``), then minimises.

Results are canonical: the minimal DFA, numbered breadth-first from its start with successors in
order of the smallest code point leading to them, edges listed by their smallest code point, so
equal languages give equal nodes. Two languages get a plainer node: the empty language is
:data:`NOTHING` (``CharClass(())``, the class of no character, which the automata builders treat
as matching nothing) and ``{""}`` is ``Empty()``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import LimitError
from ..kernels.automata_kernels import bfs_order, product_dfa, renumber_expand
from ..regex.ast import Alt, Automaton, CharClass, Empty, Node, Repeat
from ..regex.charsets import ANY
from .dfa import _POSITIONS_PER_STATE, _determinize, _minimize_chars, _too_many_states
from .nfa import AtomPartition, PositionNFA, build_nfa

__all__ = [
    "ANY_STRING",
    "NOTHING",
    "complement",
    "difference",
    "equivalent",
    "intersect",
    "is_empty",
    "is_subset",
    "paired",
    "union",
]

NOTHING: Node = CharClass(())
"""The empty language: no string matches."""

ANY_STRING: Node = Repeat(CharClass(ANY), 0, None)
"""Every string of any code points (surrogates excepted): the default universe of :func:`complement`."""

_MAX_STATES = 100_000
_PRODUCT_PAIRS = 4
"""An intersection or difference may pair up to this many times ``max_states`` states of its
operands' minimal DFAs before minimising; the result is held to ``max_states``. A pattern and a
length bound pair most of their states (a format and ``maxLength: 255``: 37,000 pairs for a
minimal product of 4,000)."""


def intersect(*nodes: Node, max_states: int = _MAX_STATES, pair: bool = True) -> Node:
    """The strings that every one of ``nodes`` matches (:data:`ANY_STRING` when there are none).
    With ``pair`` (the default), a construction over ``max_states`` falls back on :func:`paired`."""
    if not nodes:
        return ANY_STRING
    try:
        return _combine(nodes, lambda acc: acc.all(axis=1), max_states)
    except LimitError:
        if not pair or len(nodes) == 1:
            raise
    return paired("intersect", nodes, max_states)


def union(*nodes: Node) -> Node:
    """The strings that some one of ``nodes`` matches, as an :class:`Alt` (:data:`NOTHING` when
    there are none); not determinised, so it costs nothing until compiled."""
    if not nodes:
        return NOTHING
    return nodes[0] if len(nodes) == 1 else Alt(tuple(nodes))


def difference(a: Node, b: Node, max_states: int = _MAX_STATES, pair: bool = True) -> Node:
    """The strings that ``a`` matches and ``b`` does not. With ``pair`` (the default), a
    construction over ``max_states`` falls back on :func:`paired`."""
    try:
        return _combine((a, b), lambda acc: acc[:, 0] & ~acc[:, 1], max_states)
    except LimitError:
        if not pair:
            raise
    return paired("difference", (a, b), max_states)


def paired(op: str, nodes: Sequence[Node], max_states: int = _MAX_STATES) -> Node:
    """``intersect(*nodes)`` or ``difference(*nodes)`` (``op``) by pairing the operands' own
    minimal DFAs over the same atoms (kernel ``product_dfa``, up to ``_PRODUCT_PAIRS *
    max_states`` pairs), then minimising: the same canonical node, for when the one subset
    construction over every operand at once is too large (its states pair the operands'
    unminimised subsets). Raises :class:`~logitgate.errors.LimitError` when the result has more
    than ``max_states`` states."""
    nfa, dfas = _operand_dfas(nodes, max_states)
    minimal = dfas[0]
    subtract = op == "difference"
    for other in dfas[1:]:
        if minimal is None:
            break
        if other is None:
            if not subtract:
                minimal = None
            continue  # nothing to take away
        minimal = _paired_minimal(minimal, other, subtract, max_states)
    if minimal is None:
        return NOTHING
    table, accepting = minimal
    if table.shape[0] > max_states:
        raise _too_many_states(max_states)
    return _to_node(table, accepting[:, 0], nfa.atoms)


def _paired_minimal(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], subtract: bool,
                    max_states: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The minimal DFA (``_minimize_chars``'s, None: empty) of the strings ``a`` matches and
    ``b`` matches too, or, with ``subtract``, does not (``b`` then read as complete: where it has
    no move, a sink that accepts nothing)."""
    table, pa, pb, status = product_dfa(a[0], b[0], subtract, _PRODUCT_PAIRS * max_states)
    if status:
        raise _too_many_states(max_states)
    b_acc = np.append(b[1][:, 0], False)  # the sink past b's states (only reached when subtracting)
    accepting = a[1][pa, 0] & (~b_acc[pb] if subtract else b_acc[pb])
    return _minimize_chars(table, np.ascontiguousarray(accepting[:, None]))


def complement(node: Node, universe: Node | None = None, max_states: int = _MAX_STATES) -> Node:
    """The strings of ``universe`` (default :data:`ANY_STRING`) that ``node`` does not match."""
    return difference(ANY_STRING if universe is None else universe, node, max_states)


def is_empty(node: Node, max_states: int = _MAX_STATES) -> bool:
    """Whether ``node`` matches no string at all.

    No DFA is built: every position of the position NFA reads a non-empty class, so the language
    is non-empty exactly when the accept marker (NFA state 0) is reachable from the start set.
    ``max_states`` only bounds the number of positions, as in :func:`~logitgate.automata.build_dfa`.
    """
    nfa = build_nfa([node], max_positions=_POSITIONS_PER_STATE * max_states)
    follow_off, follow = nfa.follow_off.tolist(), nfa.follow.tolist()
    group_off, members = nfa.group_off.tolist(), nfa.group_members.tolist()
    seen = [False] * nfa.n_states
    group_seen = [False] * (len(group_off) - 1)
    stack = nfa.start.tolist()
    while stack:
        state = stack.pop()
        if state == 0:
            return False
        if seen[state]:
            continue
        seen[state] = True
        for r in follow[follow_off[state] : follow_off[state + 1]]:
            if r < 0:
                stack.append(-1 - r)
            elif not group_seen[r]:
                group_seen[r] = True
                stack += members[group_off[r] : group_off[r + 1]]
    return True


def is_subset(a: Node, b: Node, max_states: int = _MAX_STATES) -> bool:
    """Whether every string that ``a`` matches is matched by ``b``."""
    accepting = _product((a, b), max_states)[2]
    return not (accepting[:, 0] & ~accepting[:, 1]).any()


def equivalent(a: Node, b: Node, max_states: int = _MAX_STATES) -> bool:
    """Whether ``a`` and ``b`` match exactly the same strings."""
    accepting = _product((a, b), max_states)[2]
    return bool((accepting[:, 0] == accepting[:, 1]).all())


def _product(nodes: Sequence[Node], max_states: int) -> tuple[PositionNFA, np.ndarray, np.ndarray]:
    """One subset construction over all of ``nodes``: ``(nfa, table, accepting)``, the table over
    the NFA's atoms (state 0 the start) and ``accepting[s, k]`` whether ``s`` matches ``nodes[k]``.
    Raises :class:`~logitgate.errors.CompileError` beyond ``max_states`` states."""
    nfa = build_nfa(nodes, max_positions=_POSITIONS_PER_STATE * max_states)
    table, accepting = _determinize(nfa, max_states)
    return nfa, table, accepting


def _operand_dfas(nodes: Sequence[Node], max_states: int
                  ) -> tuple[PositionNFA, list[tuple[np.ndarray, np.ndarray] | None]]:
    """Each operand's minimal DFA (:func:`~logitgate.automata.dfa._minimize_chars`'s
    ``(table, accepting)``, None: empty) over the atoms of one position NFA of them all, so that
    their product (kernel ``product_dfa``) reads the same atoms. Smaller than one subset
    construction over every operand at once, whose states pair the operands' unminimised
    subsets: a pattern and a length bound (``.{0,255}``) made tens of thousands of those where
    the minimal pairs are a few thousand."""
    nfa = build_nfa(nodes, max_positions=_POSITIONS_PER_STATE * max_states)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for k in range(len(nodes)):
        start = np.ascontiguousarray(nfa.start[nfa.start_off[k]:nfa.start_off[k + 1]])
        table, accepting = _determinize(nfa, max_states, start=start)
        out.append(_minimize_chars(table, np.ascontiguousarray(accepting[:, k:k + 1])))
    return nfa, out


def _combine(nodes: Sequence[Node], accept: Callable[[np.ndarray], np.ndarray], max_states: int) -> Node:
    """The strings for which ``accept`` holds: it maps the product DFA's operand matches (bool
    ``[n_states, n_operands]``) to the result's accepting states (bool ``[n_states]``)."""
    nfa, table, accepting = _product(nodes, max_states)
    minimal = _minimize_chars(table, np.ascontiguousarray(accept(accepting)[:, None]))
    if minimal is None:
        return NOTHING
    table, accepting = minimal
    return _to_node(table, accepting[:, 0], nfa.atoms)


def _to_node(table: np.ndarray, accepting: np.ndarray, atoms: AtomPartition) -> Node:
    """A trimmed, minimal DFA over ``atoms`` (start 0) as a canonical node (module docstring)."""
    columns = np.arange(table.shape[1], dtype=np.int32)  # atoms are numbered by smallest code point
    order = bfs_order(table, columns, 0)
    table = renumber_expand(table, order, columns)
    accepting = accepting[order].tolist()
    n = table.shape[0]
    if n == 1 and accepting[0] and not (table >= 0).any():
        return Empty()
    # a state's target per elementary interval of code points (interval_atom -1 picks the -1
    # padding), cut into runs of one target; the last interval (past every class) has none, so
    # every run with a target ends where the next run of its state starts
    padded = np.concatenate((table, np.full((n, 1), -1, np.int32)), axis=1)
    rows = padded[:, atoms.interval_atom]
    change = np.ones(rows.shape, np.bool_)
    change[:, 1:] = rows[:, 1:] != rows[:, :-1]
    run_state, run_interval = np.nonzero(change)
    run_target = rows[run_state, run_interval]
    starts = atoms.starts
    run_lo = starts[run_interval]
    run_hi = np.empty_like(run_lo)
    run_hi[:-1] = run_lo[1:] - 1  # meaningful where the run has a target (never a state's last)
    keep = np.flatnonzero(run_target >= 0)
    per_state: list[dict[int, list[tuple[int, int]]]] = [{} for _ in range(n)]
    for q, target, lo, hi in zip(run_state[keep].tolist(), run_target[keep].tolist(), run_lo[keep].tolist(),
                                 run_hi[keep].tolist()):
        by_target = per_state[q]
        found = by_target.get(target)
        if found is None:
            by_target[target] = [(lo, hi)]
        else:
            found.append((lo, hi))
    edges = [tuple((tuple(ranges), target) for target, ranges in by_target.items()) for by_target in per_state]
    node = Automaton(0, tuple(accepting), tuple(edges))
    object.__setattr__(node, "chars", (table, np.asarray(accepting, np.bool_), atoms))  # for build_dfa
    return node
