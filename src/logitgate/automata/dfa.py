"""Position NFA -> minimal byte DFA.

Pipeline (:func:`build_dfa`):

1. :func:`~logitgate.automata.nfa.build_nfa`: Glushkov position NFA over *atoms* (the coarsest
   partition of code points refining every class of the patterns), so Unicode classes cost a few
   atoms, not hundreds of ranges.
2. Subset construction on characters (kernel ``determinize``): DFA states are hash-consed sets
   of NFA states, the alphabet is the atoms.
3. Character-level trimming (states that cannot reach acceptance go) and Hopcroft minimisation
   (kernels ``coreachable``, ``hopcroft``): the minimal DFA over atoms.
4. UTF-8 expansion (:func:`_expand`): ASCII atoms become byte columns directly; the other atoms
   share one minimal labelled UTF-8 automaton (label = atom; kernel ``utf8_label_automaton``,
   kept in memory when big), which kernel ``expand_utf8`` copies for each state with the labels
   replaced by that state's targets,
   hash-consing the mid-character nodes bottom-up (Revuz's algorithm for the acyclic part).
   Since the character-level DFA is minimal this gives the minimal byte DFA: boundary states stay
   distinct (a distinguishing string of characters encodes to distinguishing bytes), no
   mid-character node is equivalent to a boundary state or to a node of another depth, and two
   nodes of the same depth are equivalent exactly when their rows agree.
5. Breadth-first renumbering from the start (successors in byte order); byte classes = bytes with
   identical columns, numbered by their smallest byte (kernel ``canonical_classes``).

The minimal DFA is unique up to isomorphism and the numbering canonical, so equal inputs give
identical arrays.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import LimitError
from ..kernels import DirectCalls, automata_kernels
from ..kernels.automata_kernels import (
    assemble_columns,
    canonical_classes,
    coreachable,
    determinize,
    determinize_dfas,
    expand_utf8,
    group_rows_i32,
    hopcroft,
    non_ascii_atoms,
    union_table,
    utf8_label_automaton,
)
from ..limits import check_deadline, get_limits
from ..regex.ast import Automaton, CharClass, Concat, Empty, Group, Node, TableAutomaton
from .nfa import AtomPartition, PositionNFA, build_nfa, class_arrays

# a regex compile's kernels, without numba's per-call type dispatch (see kernels.DirectCalls)
_AK = DirectCalls(automata_kernels, ("regex_byte_dfa", "utf8_byte_dfa"))

__all__ = ["ByteDFA", "build_dfa", "regex_dfa"]

_POSITIONS_PER_STATE = 10  # character positions allowed per max_states before even building the NFA


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """Minimal DFA over bytes recognising ``n_patterns`` patterns at once (immutable).

    ``transitions[s, b]`` is the state after byte ``b`` (``-1``: no string of any pattern can be
    completed any more). Every state is reachable from ``start`` and can reach acceptance of some
    pattern; ``start`` is ``0``, or ``-1`` when no pattern matches any string (then there are no
    states). ``accepting[s, k]``: the bytes read so far fully match pattern ``k``;
    ``reachable[s, k]``: some continuation (possibly empty) from ``s`` fully matches pattern ``k``.
    Bytes with identical columns share a ``byte_classes`` entry (classes numbered by their
    smallest byte) and ``class_transitions[s, byte_classes[b]] == transitions[s, b]``.

    Constructed as ``ByteDFA(transitions, start, accepting, reachable, byte_classes,
    class_transitions)``; ``transitions`` may be None, and is then built from the class table on
    first use (a regex's mask walk and steps use the class table alone).

    ``components`` (a union of several patterns' DFAs, else None): ``(off, pattern, part)``, the
    states of the patterns' own DFAs that state ``s`` runs, ``part[off[s]:off[s + 1]]`` (ids
    unique over all patterns, ascending) with their patterns. Two states whose components for a
    set of patterns are equal behave alike for those patterns, whatever they do for the others.
    ``parts`` (with ``components``): ``(table, byte_column, accepting)``, the patterns' own DFAs
    in one table: part state ``x`` moves on byte ``b`` to ``table[x, byte_column[b]]`` (-1: none).
    """

    _transitions: np.ndarray | None
    start: int
    accepting: np.ndarray
    reachable: np.ndarray
    byte_classes: np.ndarray
    class_transitions: np.ndarray
    components: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    parts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def transitions(self) -> np.ndarray:
        """``[n_states, 256]`` int32: the state after each byte, -1 when dead (read-only)."""
        trans = self._transitions
        if trans is None:
            trans = np.ascontiguousarray(self.class_transitions[:, self.byte_classes])
            trans.flags.writeable = False
            object.__setattr__(self, "_transitions", trans)  # a cache: equal whoever builds it
        return trans

    @property
    def n_states(self) -> int:
        return int(self.class_transitions.shape[0])

    @property
    def n_patterns(self) -> int:
        return int(self.accepting.shape[1])

    @property
    def n_classes(self) -> int:
        return int(self.class_transitions.shape[1])

    def step(self, state: int, data: bytes) -> int:
        """The state after reading ``data`` from ``state``; ``-1`` once dead (or if ``state`` is)."""
        trans = self.transitions
        for byte in data:
            if state < 0:
                return -1
            state = int(trans[state, byte])
        return state

    def is_accepting(self, state: int, pattern: int = 0) -> bool:
        """Whether ``state`` fully matches ``pattern`` (False for the dead state ``-1``)."""
        return state >= 0 and bool(self.accepting[state, pattern])

    def matches(self, data: bytes, pattern: int = 0) -> bool:
        """Whether ``data`` as a whole matches ``pattern``."""
        if self.start < 0:
            return False
        return self.is_accepting(self.step(self.start, data), pattern)

    def forced_bytes(self, state: int) -> bytes:
        """The longest byte string forced from ``state``: while the state accepts no pattern and
        has exactly one live byte, take that byte (``b""`` for the dead state)."""
        out = bytearray()
        for _ in range(self.n_states):  # every state is live, so a forced chain cannot cycle
            if state < 0 or self.accepting[state].any():
                break
            live = np.flatnonzero(self.transitions[state] >= 0)
            if live.shape[0] != 1:
                break
            out.append(int(live[0]))
            state = int(self.transitions[state, live[0]])
        return bytes(out)

    def __repr__(self) -> str:
        return (
            f"ByteDFA(n_states={self.n_states}, n_patterns={self.n_patterns}, "
            f"n_classes={self.n_classes}, start={self.start})"
        )


def regex_dfa(node: Node, **kw: int) -> ByteDFA:
    """The minimal DFA of one pattern (``build_dfa([node], **kw)``)."""
    return build_dfa([node], **kw)


def build_dfa(nodes: Sequence[Node], *, max_states: int | None = None, limit: str = "max_dfa_states") -> ByteDFA:
    """One minimal DFA recognising each of ``nodes`` (pattern ``k`` is ``nodes[k]``).

    Raises :class:`~logitgate.errors.LimitError` (cap ``limit``, a :class:`~logitgate.Limits`
    field) when determinisation needs more than ``max_states`` states (character-level subsets, or
    byte states after UTF-8 expansion), or the expanded regex has more than ``10 * max_states``
    character positions. ``max_states`` defaults to ``get_limits().max_dfa_states``. Checks the
    compile deadline between steps.

    Several patterns (a lexer's terminals): each pattern's own minimal DFA (a literal string
    directly, anything else through the pipeline above, cached by syntax tree so that terminals
    shared by many grammars, such as JSON's strings and numbers, are built once per process),
    then the subset construction of their union (kernel ``determinize_dfas``), which is
    minimal as it stands. The result is the same canonical DFA as one position NFA over all the
    patterns would give, and records each state's ``components``.
    """
    if max_states is None:
        max_states = getattr(get_limits(), limit)
    nodes = list(nodes)
    if not nodes:
        return _empty_dfa(0)
    if len(nodes) == 1:
        return _glushkov_dfa(nodes, max_states, limit)
    return _union_dfa([_pattern_part(node, max_states, limit) for node in nodes], max_states, limit)


def _glushkov_dfa(nodes: Sequence[Node], max_states: int, limit: str) -> ByteDFA:
    """The pipeline of the module docstring: one position NFA over all of ``nodes``.

    One pattern (every compile of a regex, and each part of a union) takes the fast path: one
    kernel call for the atoms, steps 2-3 and, when every atom is ASCII, steps 4-5
    (``regex_byte_dfa``), else a second one for steps 4-5 (``utf8_byte_dfa``). A compile runs on
    cold caches, where each kernel call and numpy operation costs microseconds: fewer, larger
    calls make it faster. Several patterns (tests use it as the union's oracle) go step by step."""
    if len(nodes) != 1:
        return _stepwise_dfa(nodes, max_states, limit)
    nfa = build_nfa(nodes, max_positions=_POSITIONS_PER_STATE * max_states, limit=limit, atoms=False)
    check_deadline("regex NFA built")
    status, byte_classes, class_transitions, accepting, table, char_accepting, starts, interval_atom = \
        _AK.regex_byte_dfa(*class_arrays(nfa.classes), nfa.follow_off, nfa.follow, nfa.group_off,
                           nfa.group_members, nfa.class_of, nfa.start, max_states)
    if status == 1:
        raise _too_many_states(max_states, limit)
    if status == 2:
        return _empty_dfa(1)
    check_deadline("regex determinised")
    if status == 3:  # some atom is not ASCII: the UTF-8 expansion
        first_na, na_atoms, labels = non_ascii_atoms(starts, interval_atom)
        scratch = _scratch()
        byte_classes, class_transitions, accepting, status, needed = _AK.utf8_byte_dfa(
            table, char_accepting, starts, interval_atom, na_atoms,
            *_label_automaton(starts, int(first_na), labels), max_states, scratch)
        if status:
            raise _too_many_states(max_states, limit)
        if needed > scratch.shape[0]:
            _grow_scratch(needed)
    reachable = np.empty(accepting.shape, np.bool_)  # (np.ones_like runs Python code: slow on cold caches)
    reachable.fill(True)  # one pattern, minimal: every state leads to acceptance
    return _freeze(None, 0, accepting, reachable, byte_classes, class_transitions)


_THREAD = threading.local()
_SCRATCH_START = 1 << 18  # int32 entries (1 MB): a regex with Unicode classes such as complex_phone fits
_SCRATCH_MAX = 1 << 22


def _scratch() -> np.ndarray:
    """This thread's scratch buffer for kernel ``utf8_byte_dfa`` (the mid-character rows and the
    byte table before renumbering). Its pages are touched once, when it is made: a fresh page
    costs a page fault (3-20 µs measured in this project's virtual machines), which made up most
    of the UTF-8 expansion of a regex such as ``\\d{1,4}[-.\\s]?\\d{1,4}``."""
    buf = getattr(_THREAD, "scratch", None)
    if buf is None:
        buf = _THREAD.scratch = np.full(_SCRATCH_START, -1, np.int32)
    return buf


def _grow_scratch(needed: int) -> None:
    """Make this thread's scratch at least ``needed`` entries long for the next compile (up to
    ``_SCRATCH_MAX``; a larger expansion allocates its own arrays)."""
    if needed <= _SCRATCH_MAX:
        _THREAD.scratch = np.full(min(max(needed, 2 * _scratch().shape[0]), _SCRATCH_MAX), -1, np.int32)


def _stepwise_dfa(nodes: Sequence[Node], max_states: int, limit: str) -> ByteDFA:
    """:func:`_glushkov_dfa` one step at a time, for any number of patterns."""
    nfa = build_nfa(nodes, max_positions=_POSITIONS_PER_STATE * max_states, limit=limit)
    table, accepting = _determinize(nfa, max_states, limit)
    minimal = _minimize_chars(table, accepting)
    if minimal is None:
        return _empty_dfa(len(nodes))
    columns, byte_column, accepting = _expand(*minimal, nfa.atoms, max_states, limit)
    return _canonical(columns, byte_column, accepting)


_PATTERN_CACHE: dict[Node, ByteDFA] = {}
_PATTERN_CACHE_SIZE = 2048  # entries, each a minimal DFA of at most _PATTERN_CACHE_STATES states
_PATTERN_CACHE_STATES = 4096


def _pattern_part(node: Node, max_states: int, limit: str) -> ByteDFA | bytes:
    """One pattern of a union: the bytes of a literal string, else its minimal DFA, built by
    :func:`_glushkov_dfa` and cached by syntax tree (thread-safe: entries are immutable and a
    race only builds one twice)."""
    data = _literal_bytes(node)
    if data is not None:
        if len(data) + 1 > max_states:
            raise _too_many_states(max_states, limit)
        return data
    found = _PATTERN_CACHE.get(node)
    if found is None:
        found = _from_automaton(node, max_states, limit) or _glushkov_dfa([node], max_states, limit)
        if found.n_states <= _PATTERN_CACHE_STATES:
            if len(_PATTERN_CACHE) >= _PATTERN_CACHE_SIZE:
                _PATTERN_CACHE.clear()
            _PATTERN_CACHE[node] = found
    elif found.n_states > max_states:  # built under a larger cap; the union needs at least as many
        raise _too_many_states(max_states, limit)
    return found


def _from_automaton(node: Node, max_states: int, limit: str) -> ByteDFA | None:
    """The minimal DFA of an :class:`Automaton` node that keeps its character-level DFA
    (``node.chars``, from :mod:`logitgate.automata.boolean`) or of a :class:`TableAutomaton`,
    possibly followed by a literal (a JSON key and its colon), without a position NFA: the
    character DFA expanded to bytes, the literal's chain appended to its accepting states (or the
    node's own ``byte_build`` given the literal). None when the node is not of that shape, or the
    accepting states already move on the literal's first byte (then the NFA decides)."""
    if type(node) is Automaton or type(node) is TableAutomaton:
        head, tail = node, ""
    elif type(node) is Concat and (type(node.items[0]) is Automaton or type(node.items[0]) is TableAutomaton):
        head = node.items[0]
        rest = node.items[1:]
        tail = _literal_text(rest[0] if len(rest) == 1 else Concat(rest))
    else:
        return None
    if tail is None:
        return None
    if type(head) is TableAutomaton and head.byte_build is not None:
        data = tail.encode("utf-8")
        table, byte_column, accepting = head.byte_build(*head.args, data)
        if table.shape[0] > max_states:
            raise _too_many_states(max_states, limit)
        minimal = _minimize_chars(table, np.ascontiguousarray(accepting[:, None]), trimmed=True)
        return _canonical(minimal[0], byte_column, minimal[1])
    if head.chars is None:
        return None
    table, accepting, atoms = head.chars
    columns, byte_column, acc = _expand(table, np.ascontiguousarray(accepting[:, None]), atoms, max_states, limit)
    if not tail:
        return _canonical(columns, byte_column, acc)
    data = np.frombuffer(tail.encode("utf-8"), np.uint8)
    trans = columns[:, byte_column]
    ends = np.flatnonzero(acc[:, 0])
    if (trans[ends, data[0]] >= 0).any():
        return None
    n, length = trans.shape[0], len(data)
    if n + length > max_states:
        raise _too_many_states(max_states, limit)
    ext = np.full((n + length, 256), -1, np.int32)
    ext[:n] = trans
    ext[ends, data[0]] = n
    ext[np.arange(n, n + length - 1), data[1:]] = np.arange(n + 1, n + length, dtype=np.int32)
    accepting_ext = np.zeros((n + length, 1), np.bool_)
    accepting_ext[-1, 0] = True
    minimal = _minimize_chars(ext, accepting_ext, trimmed=True)  # every state leads to the chain's end
    assert minimal is not None
    table, accepting_min = minimal
    return _canonical(table, _IDENTITY_COLUMNS, accepting_min)


_IDENTITY_COLUMNS = np.arange(256, dtype=np.int32)


def _literal_bytes(node: Node) -> bytes | None:
    """The UTF-8 bytes of the one string ``node`` matches when it is a plain literal (a
    concatenation of single code points), else None."""
    text = _literal_text(node)
    return None if text is None else text.encode("utf-8")  # never a surrogate (ast invariant)


def _literal_text(node: Node) -> str | None:
    kind = type(node)
    if kind is CharClass:
        ranges = node.ranges
        return chr(ranges[0][0]) if len(ranges) == 1 and ranges[0][0] == ranges[0][1] else None
    if kind is Concat:
        chars = []
        for item in node.items:
            if type(item) is CharClass:  # inline: literals are long runs of one-character classes
                ranges = item.ranges
                if len(ranges) != 1 or ranges[0][0] != ranges[0][1]:
                    return None
                chars.append(chr(ranges[0][0]))
            else:
                part = _literal_text(item)
                if part is None:
                    return None
                chars.append(part)
        return "".join(chars)
    if kind is Group:
        return _literal_text(node.item)
    if kind is Empty:
        return ""
    return None


_NO_CLASSES = np.zeros((0, 256), np.uint8)


def _union_dfa(parts: Sequence[ByteDFA | bytes], max_states: int, limit: str) -> ByteDFA:
    """The minimal DFA recognising each of ``parts`` (pattern ``k``: the language of DFA
    ``parts[k]``, or the literal string ``parts[k]``)."""
    dfa_ids = [k for k, p in enumerate(parts) if not isinstance(p, bytes) and p.start >= 0]
    lit_ids = [k for k, p in enumerate(parts) if isinstance(p, bytes)]
    if not dfa_ids and not lit_ids:
        return _empty_dfa(len(parts))
    dfas = [parts[k] for k in dfa_ids]
    lits = [parts[k] for k in lit_ids]
    state_off = np.zeros(len(dfas) + 1, np.int64)
    flat_off = np.zeros(len(dfas) + 1, np.int64)
    lit_off = np.zeros(len(lits) + 1, np.int64)
    if dfas:
        np.cumsum([d.n_states for d in dfas], out=state_off[1:])
        np.cumsum([d.class_transitions.size for d in dfas], out=flat_off[1:])
        flat = np.concatenate([d.class_transitions.ravel() for d in dfas])
        byte_classes = np.stack([d.byte_classes for d in dfas])
        acc = np.concatenate([d.accepting[:, 0] for d in dfas])
    else:
        flat, byte_classes, acc = np.zeros(0, np.int32), _NO_CLASSES, np.zeros(0, np.bool_)
    if lits:
        np.cumsum([len(x) for x in lits], out=lit_off[1:])
    lit = np.frombuffer(b"".join(lits), np.uint8)
    table, byte_column, pattern_of, accept_of, start = union_table(
        flat, state_off, flat_off, byte_classes, acc, np.asarray(dfa_ids, np.int32), lit, lit_off,
        np.asarray(lit_ids, np.int32))
    # Already minimal: each part is a minimal DFA whose states all lead to acceptance, so two
    # distinct subsets differ in some part's state, whose languages differ (a part's absent
    # state has the empty one), and no two subsets accept the same continuations.
    trans, accepting, status, members, member_off = determinize_dfas(
        table, pattern_of, accept_of, start, len(parts), max_states)
    if status:
        raise _too_many_states(max_states, limit)
    check_deadline("lexer union determinised")
    return _canonical(trans, byte_column, accepting, (member_off, members, pattern_of), (table, byte_column, accept_of))


def _too_many_states(max_states: int, limit: str = "max_dfa_states") -> LimitError:
    return LimitError.exceeded(limit, max_states, f"regex DFA over max_states={max_states} states during determinisation")


def _determinize(nfa: PositionNFA, max_states: int, limit: str = "max_dfa_states",
                 start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Subset construction over atoms (numba kernel). Returns ``(table, accepting)``: int32
    ``[n, n_atoms]`` (``-1``: no move) and bool ``[n, n_patterns]``; state 0 is the start set,
    ``nfa.start`` unless ``start`` is given (one pattern's part of it, say)."""
    atoms = nfa.atoms
    table, accepting, status = determinize(
        nfa.follow_off,
        nfa.follow,
        nfa.group_off,
        nfa.group_members,
        nfa.class_of,
        atoms.class_off,
        atoms.class_flat,
        nfa.start if start is None else start,
        nfa.n_patterns,
        atoms.n_atoms,
        max_states,
    )
    if status:
        raise _too_many_states(max_states, limit)
    return table, accepting


def _minimize_chars(
    table: np.ndarray, accepting: np.ndarray, trimmed: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """Trim (unless every state is known to be live: ``trimmed``) and minimise the
    character-level DFA; the start becomes state 0 (None: empty)."""
    n = table.shape[0]
    if not trimmed:
        live = coreachable(table, accepting).any(axis=1)
        if not live[0]:
            return None
        if not live.all():
            keep = np.flatnonzero(live)
            remap = np.full(n + 1, -1, np.int32)  # remap[-1] == -1 keeps missing moves missing
            remap[keep] = np.arange(len(keep), dtype=np.int32)
            table = remap[table[keep]]
            accepting = accepting[keep]
    if accepting.shape[1] == 1:
        labels = accepting[:, 0].astype(np.int32)
        n_labels = 2
    else:
        first, labels = group_rows_i32(accepting.astype(np.int32))
        labels = labels.astype(np.int32)
        n_labels = len(first)
    block, reps = hopcroft(np.ascontiguousarray(table), labels, n_labels)
    new_id = np.append(block, np.int32(-1))  # blocks are numbered by first state: start stays 0
    return np.ascontiguousarray(new_id[table[reps]]), np.ascontiguousarray(accepting[reps])


_NO_ROWS = np.zeros((0, 64), np.int32)
_NO_LEAD = np.zeros(0, np.int64)
_NO_OUT = np.zeros(0, np.int32)
_LABEL_CACHE: dict[tuple[bytes, bytes], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_LABEL_CACHE_MIN = 32  # non-ASCII intervals; a smaller automaton builds as fast as a lookup


def _label_automaton(starts: np.ndarray, first_na: int,
                     labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labelled UTF-8 automaton of the non-ASCII atoms (kernel ``utf8_label_automaton``) as
    ``(rows, depth, label_mask)``: ``starts`` of the atom partition, ``first_na`` and ``labels``
    from kernel ``non_ascii_atoms``. Kept in memory by the non-ASCII interval layout when that
    has at least ``_LABEL_CACHE_MIN`` intervals (Unicode ``\\w``: about 150 µs to build).

    The arrays are read-only: a kernel whose signature takes read-only arrays, given writable
    ones, is dispatched through numba's type conversion search, which cost 200-400 µs once per
    process and type combination (measured on the benchmark's relation-extraction regex)."""
    starts = starts[first_na:]
    key = None
    if len(starts) >= _LABEL_CACHE_MIN:
        key = (starts.tobytes(), labels.tobytes())
        found = _LABEL_CACHE.get(key)
        if found is not None:
            return found
    found = utf8_label_automaton(starts.copy(), labels)
    for a in found:  # read-only, as the kernels' signatures take them (and the cache shares them)
        a.flags.writeable = False
    if key is not None:
        if len(_LABEL_CACHE) >= 256:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[key] = found
    return found


def _expand(
    table: np.ndarray, accepting: np.ndarray, atoms: AtomPartition, max_states: int, limit: str = "max_dfa_states"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimal character-level DFA -> minimal byte DFA (see the module docstring, step 4).

    Character state ``q`` keeps id ``q``; mid-character nodes follow. Returns ``(columns,
    byte_column, accepting)``: the move of state ``s`` on byte ``b`` is
    ``columns[s, byte_column[b]]`` (int32, ``-1``: none; kernel ``assemble_columns``).
    """
    m = table.shape[0]
    # non-ASCII atoms: one labelled UTF-8 automaton over all of them, expanded per state
    first_na, na_atoms, labels = non_ascii_atoms(atoms.starts, atoms.interval_atom)
    if len(na_atoms):
        rows, depth, label_mask = _label_automaton(atoms.starts, int(first_na), labels)
        targets = np.ascontiguousarray(table[:, na_atoms])
        first, lead_of = group_rows_i32(targets)  # states with equal targets get equal lead bytes
        lead, mid = expand_utf8(rows, depth, label_mask, targets[first], m, max_states - m, _NO_ROWS)
    else:
        lead, lead_of, mid = _NO_ROWS, _NO_LEAD, _NO_ROWS
    n = m + mid.shape[0]
    if n > max_states:
        raise _too_many_states(max_states, limit)
    columns, byte_column = assemble_columns(table, atoms.starts, atoms.interval_atom, lead, lead_of, mid, _NO_OUT)
    full_accepting = np.zeros((n, accepting.shape[1]), np.bool_)
    full_accepting[:m] = accepting
    return columns, byte_column, full_accepting


def _canonical(columns: np.ndarray, byte_column: np.ndarray, accepting: np.ndarray,
               subsets: tuple[np.ndarray, ...] | None = None,
               parts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> ByteDFA:
    """Exact byte classes, breadth-first renumbering from state 0 (successors in byte order) and
    co-reachability (``automata_kernels.canonical_classes``). ``columns[s, byte_column[b]]`` is
    the move of state ``s`` on byte ``b``. ``subsets`` (a union): ``(off, members, pattern_of)``,
    state ``s`` runs the parts' states ``members[off[s]:off[s + 1]]``."""
    byte_classes, class_transitions, order = canonical_classes(columns, byte_column)
    accepting = np.ascontiguousarray(accepting[order])
    components = None
    if subsets is not None:
        off, members, pattern_of = subsets
        lo = off[order]
        counts = off[order + 1] - lo
        new_off = np.zeros(len(order) + 1, np.int64)
        np.cumsum(counts, out=new_off[1:])
        part = members[np.repeat(lo - new_off[:-1], counts) + np.arange(new_off[-1])]
        components = (new_off, np.ascontiguousarray(pattern_of[part]), np.ascontiguousarray(part))
        # the parts are trimmed: a state can still match exactly the patterns it runs a state of
        reachable = np.zeros_like(accepting)
        reachable[np.repeat(np.arange(len(order)), counts), components[1]] = True
    elif accepting.shape[1] == 1:
        reachable = np.ones_like(accepting)
    else:
        reachable = coreachable(class_transitions, accepting)
    return _freeze(None, 0, accepting, reachable, byte_classes, class_transitions, components,
                   parts if components is not None else None)


def _empty_dfa(n_patterns: int) -> ByteDFA:
    return _freeze(
        np.zeros((0, 256), np.int32),
        -1,
        np.zeros((0, n_patterns), np.bool_),
        np.zeros((0, n_patterns), np.bool_),
        np.zeros(256, np.uint8),
        np.zeros((0, 1), np.int32),
    )


def _freeze(
    transitions: np.ndarray | None,
    start: int,
    accepting: np.ndarray,
    reachable: np.ndarray,
    byte_classes: np.ndarray,
    class_transitions: np.ndarray,
    components: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    parts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> ByteDFA:
    for a in (transitions, accepting, reachable, byte_classes, class_transitions, *(components or ()),
              *(parts or ())):
        if a is not None:
            a.flags.writeable = False
    return ByteDFA(transitions, start, accepting, reachable, byte_classes, class_transitions, components, parts)
