"""Regex syntax tree -> position NFA over an alphabet of code point *atoms*.

Every :class:`~logitgate.regex.ast.CharClass` occurrence (after expanding counted repetition) is a
*position*, and so is every edge of an :class:`~logitgate.regex.ast.Automaton` node; the Glushkov
construction gives, per position, the positions that may follow it, so the automaton has no
epsilon moves. Characters are grouped into *atoms*: the coarsest partition of
the code points such that every class of the pattern is a union of atoms (computed with numpy
from all range boundaries). Unicode classes such as ``\\w`` (hundreds of ranges) are then a handful
of atoms, and the subset construction works on characters, not bytes; the DFA builder expands the
result to UTF-8 bytes afterwards (:mod:`logitgate.automata.dfa`).

NFA state ids: ``0 .. n_patterns-1`` are *accept markers* (a set of states containing marker ``k``
has fully matched pattern ``k``), ``n_patterns + p`` is position ``p``, "ready to read one
character of its class".
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate, chain

import numpy as np

from ..errors import LimitError
from ..kernels.automata_kernels import atom_partition
from ..limits import check_deadline
from ..regex.ast import Alt, Automaton, CharClass, Concat, Empty, Group, Node, Repeat, TableAutomaton
from .utf8 import normalize_ranges

__all__ = ["PositionNFA", "AtomPartition", "build_nfa", "class_arrays"]

Ranges = tuple[tuple[int, int], ...]


class _Frag:
    """Glushkov summary of a sub-expression: first positions, last positions, nullability."""

    __slots__ = ("first", "last", "nullable")

    def __init__(self, first: list[int], last: list[int], nullable: bool) -> None:
        self.first = first
        self.last = last
        self.nullable = nullable


_TEMPLATE_MIN_POSITIONS = 8
"""Positions an alternation needs for its fragment to be kept for reuse (smaller ones build
about as fast as they are copied)."""


class _Glushkov:
    """Builds positions (with their class) and follow sets for a list of patterns.

    Positions are numbered from ``offset`` on (the NFA state ids). Follow sets are kept as
    references, so that adding a big ``first`` set to many positions (``(a|b|...)+``) costs one
    reference each: ``follow[i - offset]`` lists the references of position ``i``, a reference
    ``r >= 0`` meaning all of ``groups[r]`` and ``r < 0`` the single state ``-1 - r``.
    """

    def __init__(self, offset: int, max_positions: int | None) -> None:
        self.offset = offset
        self.max_positions = max_positions
        self.limit = "max_dfa_states"  # the cap named when positions run out
        self._reserved = 0
        self.classes: list[Ranges] = []  # distinct normalized classes
        self.class_index: dict[Ranges, int] = {}  # raw ranges -> index into classes (-1: empty)
        self.position_class: list[int] = []
        self.follow: list[list[int]] = []
        self.groups: list[list[int]] = []
        self._group_ids: dict[int, int] = {}  # id of a registered first list -> its group
        # big alternations built so far -> their fragment as built (see _replicate)
        self._templates: dict[Alt, tuple] = {}

    def ref(self, states: list[int]) -> int:
        """A reference to ``states`` (a frag's ``first`` list, never mutated once referenced)."""
        if len(states) == 1:
            return -1 - states[0]
        g = self._group_ids.get(id(states))
        if g is None:
            g = len(self.groups)
            self.groups.append(states)  # keeps the list alive, so its id stays unique
            self._group_ids[id(states)] = g
        return g

    def class_id(self, ranges: Ranges) -> int:
        """Index of the class ``ranges`` in :attr:`classes` (-1: the empty class)."""
        c = self.class_index.get(ranges)
        if c is None:
            normalized = _normalized(ranges)
            if not normalized:
                c = -1
            else:
                c = self.class_index.get(normalized)
                if c is None:
                    c = len(self.classes)
                    self.classes.append(normalized)
                    self.class_index[normalized] = c
            self.class_index[ranges] = c
        return c

    def reserve(self, count: int) -> int:
        """The state id of the next position, after checking that ``count`` more fit."""
        n = len(self.position_class)
        if self.max_positions is not None and n + count > self.max_positions:
            states = self.max_positions // 10
            raise LimitError.exceeded(self.limit, states,
                                      f"regex too large: more than {self.max_positions} character positions after "
                                      f"expanding counted repetition (10 per state of max_states={states})")
        self._reserved += 1
        if not self._reserved & 255:
            check_deadline("building the regex NFA")
        return n + self.offset

    def chain(self, items: Sequence[CharClass]) -> _Frag:
        """A run of one-character items, one after another (a literal string, usually)."""
        get = self.class_index.get
        ids = [get(item.ranges) for item in items]
        if None in ids:
            ids = [self.class_id(item.ranges) for item in items]
        if -1 in ids:
            return _Frag([], [], False)  # an empty class matches nothing
        base = self.reserve(len(ids))
        self.position_class += ids
        self.follow += [[-1 - p] for p in range(base + 1, base + len(ids))]
        self.follow.append([])
        return _Frag([base], [base + len(ids) - 1], False)

    def words(self, items: Sequence[Node]) -> _Frag | None:
        """The alternatives of an alternation of literal strings (``of|or|the|...``, a common
        pattern) all at once, as :meth:`chain` would build them one by one; None when an
        alternative is not a literal, or one of its classes is empty."""
        words: list[Sequence[CharClass]] = []
        for item in items:
            kind = type(item)
            if kind is Concat:
                chars = item.items
                for c in chars:
                    if type(c) is not CharClass:
                        return None
                words.append(chars)
            elif kind is CharClass:
                words.append((item,))
            else:
                return None
        get = self.class_index.get
        ids = [get(c.ranges) for chars in words for c in chars]
        if None in ids:
            ids = [self.class_id(c.ranges) for chars in words for c in chars]
        if -1 in ids:
            return None
        base = self.reserve(len(ids))
        self.position_class += ids
        ends = list(accumulate(map(len, words)))  # one past each word's last position, from 0
        follow = [[-2 - p] for p in range(base, base + len(ids))]  # position p is followed by p + 1 ...
        for e in ends:
            follow[e - 1] = []  # ... except at a word's end
        self.follow += follow
        return _Frag([base] + [base + e for e in ends[:-1]], [base + e - 1 for e in ends], False)

    def concat(self, a: _Frag, b: _Frag) -> _Frag:
        if b.first and a.last:
            follow, offset, r = self.follow, self.offset, self.ref(b.first)
            for p in a.last:
                follow[p - offset].append(r)
        first = a.first + b.first if a.nullable else a.first
        last = b.last + a.last if b.nullable else b.last
        return _Frag(first, last, a.nullable and b.nullable)

    def loop(self, a: _Frag) -> _Frag:
        """``a+`` (in place: the last positions of ``a`` get ``first(a)`` as followers)."""
        if a.first:
            follow, offset, r = self.follow, self.offset, self.ref(a.first)
            for p in a.last:
                follow[p - offset].append(r)
        return a

    def automaton(self, node: Automaton) -> _Frag:
        """A DFA: one position per edge (its ranges as class), followed by the edges leaving its
        target; first = the edges leaving the start, last = the edges entering accepting states."""
        base = len(self.position_class) + self.offset
        outgoing: list[list[int]] = []  # per state: the positions of its edges
        classes: list[int] = []  # per new position: its class
        targets: list[int] = []  # per new position: the state its edge enters
        for state_edges in node.edges:
            positions: list[int] = []
            for ranges, target in state_edges:
                c = self.class_id(ranges)
                if c >= 0:  # an edge on the empty class is no move
                    positions.append(base + len(classes))
                    classes.append(c)
                    targets.append(target)
            outgoing.append(positions)
        self.reserve(len(classes))
        self.position_class += classes
        # one reference per edge: ref() registers each state's list of edges once
        self.follow += [[self.ref(outgoing[t])] if outgoing[t] else [] for t in targets]
        accepting = node.accepting
        last = [base + i for i, t in enumerate(targets) if accepting[t]]
        return _Frag(outgoing[node.start], last, accepting[node.start])

    def build(self, node: Node) -> _Frag:
        kind = type(node)
        if kind is Concat:
            items = node.items
            if items and all(type(item) is CharClass for item in items):  # a literal string, usually
                return self.chain(items)
            frag = _Frag([], [], True)
            i = 0
            while i < len(items):
                if isinstance(items[i], CharClass):  # a run of characters: positions in a chain
                    j = i + 1
                    while j < len(items) and isinstance(items[j], CharClass):
                        j += 1
                    frag = self.concat(frag, self.chain(items[i:j]))
                    i = j
                else:
                    frag = self.concat(frag, self.build(items[i]))
                    i += 1
            return frag
        if kind is CharClass:
            return self.chain((node,))
        if kind is Group:
            return self.build(node.item)
        if isinstance(node, Alt):
            template = self._templates.get(node)
            if template is not None:
                return self._replicate(template)
            i0, g0 = len(self.position_class), len(self.groups)
            alt = self.words(node.items)  # a list of literal strings, at once
            if alt is None:
                alt = _Frag([], [], False)
                for item in node.items:
                    f = self.build(item)
                    alt.first += f.first
                    alt.last += f.last
                    alt.nullable = alt.nullable or f.nullable
            n = len(self.position_class) - i0
            if n >= _TEMPLATE_MIN_POSITIONS:  # its follow lists now, before a parent adds to them
                self._templates[node] = (i0, n, g0, len(self.groups), [f.copy() for f in self.follow[i0:]],
                                         tuple(alt.first), tuple(alt.last), alt.nullable)
            return alt
        if isinstance(node, Empty):
            return _Frag([], [], True)
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Automaton):
            return self.automaton(node)
        if kind is TableAutomaton:  # its edge list, built here (the DFA builder reads the table instead)
            from .boolean import _to_node

            table, accepting, atoms = node.chars
            return self.build(_to_node(table, accepting, atoms))
        raise TypeError(f"not a regex syntax node: {node!r}")

    def _replicate(self, template: tuple) -> _Frag:
        """The fragment of an alternation met again (patterns often repeat a word list): the
        positions, follow lists and groups it had when first built, shifted to new ids. A
        fragment's follow lists only refer to its own positions and groups when it is built."""
        i0, n, g0, g1, follow, first, last, nullable = template
        d = self.reserve(n) - self.offset - i0  # shift of the position ids
        dg = len(self.groups) - g0  # shift of the group ids
        for g in range(g0, g1):
            members = [p + d for p in self.groups[g]]
            self._group_ids[id(members)] = len(self.groups)
            self.groups.append(members)
        self.position_class += self.position_class[i0:i0 + n]
        self.follow += [[r - d if r < 0 else r + dg for r in refs] for refs in follow]
        return _Frag([p + d for p in first], [p + d for p in last], nullable)

    def repeat(self, node: Repeat) -> _Frag:
        lo, hi = node.min, node.max
        item = node.item
        while isinstance(item, Group):
            item = item.item
        if isinstance(item, CharClass) and (hi is None or hi > 0):
            return self.repeat_class(item, lo, hi)
        frag = _Frag([], [], True)
        for _ in range(lo - 1 if hi is None and lo > 0 else lo):
            frag = self.concat(frag, self.build(node.item))
        if hi is None:  # x{m,} = x^(m-1) x+   or   x* when m == 0
            tail = self.loop(self.build(node.item))
            if lo == 0:
                tail.nullable = True
            return self.concat(frag, tail)
        # x{m,n} = x^m (x (x (...)?)?)?  -- nested optionals keep the subset states small
        opt = _Frag([], [], True)
        for _ in range(hi - lo):
            inner = self.concat(self.build(node.item), opt)
            opt = _Frag(inner.first, inner.last, True)
        return self.concat(frag, opt)

    def repeat_class(self, item: CharClass, lo: int, hi: int | None) -> _Frag:
        """``x{lo,hi}`` (``hi`` None: unbounded, else > 0) of one character class: the positions
        :meth:`repeat` would build, as one chain (``\\d{3}``, ``[0-9]{7,14}``)."""
        c = self.class_id(item.ranges)
        if c < 0:  # an empty class matches nothing
            return _Frag([], [], lo == 0)
        count = max(lo, 1) if hi is None else hi
        base = self.reserve(count)
        self.position_class += [c] * count
        self.follow += [[-2 - p] for p in range(base, base + count - 1)]  # p is followed by p + 1
        self.follow.append([])
        end = base + count - 1
        if hi is None:  # the last position loops: x{m,} = x^(m-1) x+
            self.follow[end - self.offset].append(-1 - end)
            return _Frag([base], [end], lo == 0)
        return _Frag([base], list(range(base + max(lo, 1) - 1, end + 1)), lo == 0)


@lru_cache(maxsize=1024)
def _class_array(ranges: Ranges) -> np.ndarray:
    """``ranges`` as an int64 ``[n, 2]`` array (cached: big classes recur across patterns)."""
    arr = np.array(ranges, np.int64).reshape(-1, 2)
    arr.flags.writeable = False
    return arr


@lru_cache(maxsize=1024)
def _normalized(ranges: Ranges) -> Ranges:
    return normalize_ranges(ranges)


def class_arrays(classes: Sequence[Ranges]) -> tuple[np.ndarray, np.ndarray]:
    """``(ranges, range_off)``, the input of kernel ``atom_partition``: class ``c`` is the rows
    ``ranges[range_off[c]:range_off[c + 1]]`` (int64 ``[lo, hi]``)."""
    # few numpy calls: a compile runs on cold caches, where each one costs microseconds
    range_off = np.array(list(accumulate(map(len, classes), initial=0)), np.int64)
    if range_off[-1] == 0:
        return np.zeros((0, 2), np.int64), range_off
    if range_off[-1] <= 64:
        return np.array(list(chain.from_iterable(classes)), np.int64), range_off
    return np.concatenate([_class_array(ranges) for ranges in classes]), range_off  # big classes: cached arrays


class AtomPartition:
    """The coarsest partition of code points into *atoms* such that every class is a union of atoms.

    Code points are cut into elementary intervals at every range boundary (and at 0x80, so no
    interval mixes ASCII with the rest): interval ``i`` is ``starts[i] .. starts[i+1]-1`` and
    belongs to atom ``interval_atom[i]`` (``-1``: in no class; the last interval, from the end of
    the last range on, is always ``-1``). Atoms are numbered by their first interval. Class ``c``
    is the union of atoms ``class_flat[class_off[c]:class_off[c+1]]`` (ascending). Computed by one
    numba kernel (``automata_kernels.atom_partition``).
    """

    __slots__ = ("starts", "interval_atom", "n_atoms", "class_off", "class_flat")

    def __init__(self, classes: Sequence[Ranges]) -> None:
        self._set(*atom_partition(*class_arrays(classes)))

    @classmethod
    def from_arrays(cls, starts: np.ndarray, interval_atom: np.ndarray, n_atoms: int, class_off: np.ndarray,
                    class_flat: np.ndarray) -> "AtomPartition":
        """The partition a kernel that runs ``atom_partition`` returned (its five results)."""
        atoms = cls.__new__(cls)
        atoms._set(starts, interval_atom, n_atoms, class_off, class_flat)
        return atoms

    def _set(self, starts: np.ndarray, interval_atom: np.ndarray, n_atoms: int, class_off: np.ndarray,
             class_flat: np.ndarray) -> None:
        self.starts, self.interval_atom, self.n_atoms = starts, interval_atom, int(n_atoms)
        self.class_off, self.class_flat = class_off, class_flat

    def class_atoms(self, c: int) -> tuple[int, ...]:
        """The atoms whose union is class ``c``."""
        return tuple(self.class_flat[self.class_off[c] : self.class_off[c + 1]].tolist())

    def ranges(self, atoms: Sequence[int], lo: int = 0, hi: int = 0x10FFFF) -> Ranges:
        """The merged code point ranges of the union of ``atoms``, clipped to ``lo..hi``."""
        mask = np.isin(self.interval_atom, np.asarray(atoms, np.int64))
        idx = np.flatnonzero(mask)
        if not len(idx):
            return ()
        first = self.starts[idx]
        last = self.starts[np.minimum(idx + 1, len(self.starts) - 1)] - 1
        # merge runs of consecutive intervals
        run_start = np.ones(len(idx), np.bool_)
        run_start[1:] = idx[1:] != idx[:-1] + 1
        firsts = first[run_start]
        lasts = last[np.append(np.flatnonzero(run_start)[1:] - 1, len(idx) - 1)]
        firsts = np.maximum(firsts, lo)
        lasts = np.minimum(lasts, hi)
        keep = firsts <= lasts
        return tuple(zip(firsts[keep].tolist(), lasts[keep].tolist()))


class PositionNFA:
    """Epsilon-free NFA over atoms of one or more patterns (layout in the module docstring).

    NFA state ``i`` reads one character of class ``class_of[i]`` (``-1`` for the accept markers,
    which read nothing) and then enters its followers: the next positions plus the markers of the
    patterns it may end. They are the union over the references
    ``follow[follow_off[i]:follow_off[i+1]]``: a reference ``r >= 0`` stands for all of
    ``group_members[group_off[r]:group_off[r+1]]``, ``r < 0`` for the single state ``-1 - r``.
    ``start`` is the initial set and ``atoms.class_atoms(c)`` the atoms of class ``c``. All arrays
    are numpy (CSR layout).
    """

    __slots__ = (
        "n_patterns", "start", "follow_off", "follow", "group_off", "group_members", "class_of", "atoms", "classes",
        "start_off",
    )

    def __init__(
        self,
        n_patterns: int,
        start: np.ndarray,
        follow_off: np.ndarray,
        follow: np.ndarray,
        group_off: np.ndarray,
        group_members: np.ndarray,
        class_of: np.ndarray,
        atoms: AtomPartition | None,
        classes: Sequence[Ranges] = (),
        start_off: Sequence[int] = (),
    ) -> None:
        self.n_patterns = n_patterns
        self.start = start
        self.follow_off = follow_off
        self.follow = follow
        self.group_off = group_off
        self.group_members = group_members
        self.class_of = class_of
        self.atoms = atoms  # None when build_nfa was told to leave it to a kernel
        self.classes = classes  # the distinct classes, class_of's numbering
        self.start_off = start_off  # pattern k's part of ``start``: start[start_off[k]:start_off[k + 1]]

    @property
    def n_states(self) -> int:
        return int(self.class_of.shape[0])

    def followers(self, state: int) -> list[int]:
        """The NFA states entered after ``state`` reads a character (sorted)."""
        out: set[int] = set()
        for r in self.follow[self.follow_off[state] : self.follow_off[state + 1]].tolist():
            if r < 0:
                out.add(-1 - r)
            else:
                out.update(self.group_members[self.group_off[r] : self.group_off[r + 1]].tolist())
        return sorted(out)


def _csr(lists: list[list[int]], skip: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, flat)`` of ``skip`` empty rows followed by ``lists``."""
    offsets = np.array([0] * skip + list(accumulate(map(len, lists), initial=0)), np.int64)
    return offsets, np.array(list(chain.from_iterable(lists)), np.int32)


def build_nfa(nodes: Sequence[Node], *, max_positions: int | None = None, limit: str = "max_dfa_states",
              atoms: bool = True) -> PositionNFA:
    """Build the position NFA recognising each of ``nodes`` (pattern ``k`` = ``nodes[k]``).

    ``max_positions`` caps the number of character positions after expanding counted repetition;
    exceeding it raises :class:`~logitgate.errors.LimitError` naming ``limit`` (the states cap the
    positions cap derives from). ``atoms=False`` leaves ``atoms`` None, for a caller whose kernel
    partitions the classes itself (from :func:`class_arrays` of ``classes``).
    """
    k_patterns = len(nodes)
    g = _Glushkov(k_patterns, max_positions)
    g.limit = limit
    start: list[int] = []
    start_off = [0]
    for k, node in enumerate(nodes):
        frag = g.build(node)
        start += frag.first
        if frag.nullable:
            start.append(k)
        start_off.append(len(start))
        for p in frag.last:  # a last position also enters the accept marker of its pattern
            g.follow[p - k_patterns].append(-1 - k)
    follow_off, follow = _csr(g.follow, skip=k_patterns)
    group_off, group_members = _csr(g.groups)
    class_of = np.array([-1] * k_patterns + g.position_class, np.int32)
    return PositionNFA(k_patterns, np.array(start, np.int32), follow_off, follow, group_off, group_members, class_of,
                       AtomPartition(g.classes) if atoms else None, g.classes, start_off)
