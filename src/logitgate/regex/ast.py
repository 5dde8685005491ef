"""Regex syntax tree shared by the regex parser (``logitgate.regex.parser``) and the automata
builder (``logitgate.automata``).

The tree is already *resolved*: flags (case-insensitive, dotall, ascii, verbose) have been applied
by the parser, every single-character construct is a :class:`CharClass` of Unicode code point
ranges, and a literal string is a :class:`Concat` of one-character classes. Code point ranges never
contain the surrogates U+D800..U+DFFF (they have no UTF-8 encoding); the automata turn the ranges
into UTF-8 byte sequences.

An :class:`Automaton` node embeds a character-level DFA (the result of a boolean operation on
languages, :mod:`logitgate.automata.boolean`) in a tree; a :class:`TableAutomaton` node embeds one
given by a function that builds its table, for languages that a caller can construct directly
(faster than an edge list).

All nodes are immutable and hashable, so sub-automata can be cached by node. A node's hash is
computed once, when it is built (from its children's stored hashes), so hashing a big tree for a
cache lookup costs one attribute read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Union

__all__ = ["Node", "CharClass", "Concat", "Alt", "Repeat", "Empty", "Group", "Automaton", "TableAutomaton",
           "MAX_CODE_POINT"]

MAX_CODE_POINT = 0x10FFFF


class _Node:
    """What every node shares: its hash, computed once when it is built (from its children's
    stored hashes; see :func:`_node`), and pickling by rebuilding (so the hash is recomputed in the
    loading process, where string hashes differ)."""

    __slots__ = ("_hash",)

    def __post_init__(self) -> None:  # replaced per class by _node
        raise NotImplementedError

    def __hash__(self) -> int:
        return self._hash  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple:
        return (type(self), tuple(getattr(self, f) for f in self.__match_args__))  # type: ignore[attr-defined]


def _node(cls: type) -> type:
    """A frozen, slotted dataclass node whose hash is stored when it is built: the dataclass
    decorator would install a hash recomputed from the fields (and so from the whole tree) on
    every call."""
    cls = dataclass(frozen=True, slots=True)(cls)
    name, fields = cls.__name__, cls.__match_args__  # type: ignore[attr-defined]
    setter = object.__setattr__
    if not fields:
        def post_init(self: Any) -> None:
            setter(self, "_hash", hash((name,)))
    elif len(fields) == 1:
        get_one = attrgetter(fields[0])

        def post_init(self: Any) -> None:
            setter(self, "_hash", hash((name, get_one(self))))
    else:
        get_all = attrgetter(*fields)

        def post_init(self: Any) -> None:
            setter(self, "_hash", hash((name,) + get_all(self)))
    cls.__post_init__ = post_init  # type: ignore[attr-defined]
    cls.__hash__ = _Node.__hash__  # type: ignore[method-assign]
    return cls


@_node
class CharClass(_Node):
    """One character from a set of code points.

    ``ranges``: sorted, disjoint, non-adjacent inclusive ``(lo, hi)`` pairs, surrogates excluded.
    An empty tuple matches nothing (e.g. ``[^\\s\\S]``).
    """

    ranges: tuple[tuple[int, int], ...]


@_node
class Concat(_Node):
    """The items one after another (at least two items)."""

    items: tuple["Node", ...]


@_node
class Alt(_Node):
    """Any one of the items (at least two items)."""

    items: tuple["Node", ...]


@_node
class Repeat(_Node):
    """``item`` repeated ``min`` to ``max`` times (``max is None``: unbounded). Laziness is dropped:
    it does not change which strings match as a whole."""

    item: "Node"
    min: int
    max: int | None


@_node
class Empty(_Node):
    """Matches the empty string only."""


@_node
class Group(_Node):
    """A capturing group, kept for later use (named captures); matches like ``item``.

    ``index`` is the 1-based group number, ``name`` the ``(?P<name>...)`` name or None.
    """

    item: "Node"
    index: int
    name: str | None = None


@_node
class Automaton(_Node):
    """A deterministic finite automaton over code points; matches exactly the strings it accepts.

    States are ``0 .. len(accepting)-1`` (at least one); ``start`` is the initial state and
    ``accepting[q]`` whether state ``q`` accepts. ``edges[q]`` lists the moves of state ``q`` as
    ``(ranges, target)`` pairs: a character in ``ranges`` (sorted, disjoint, non-adjacent inclusive
    code point ranges, surrogates excluded, non-empty: the :class:`CharClass` convention) leads
    to state ``target``. Invariants: deterministic (the ranges of one state's edges are pairwise
    disjoint; a character in none of them is rejected) and every state is live (can reach an
    accepting state). :mod:`logitgate.automata.boolean` builds these minimal and canonically
    numbered (breadth-first from ``start == 0``, edges by their smallest code point), so equal
    languages give equal nodes.
    """

    start: int
    accepting: tuple[bool, ...]
    edges: tuple[tuple[tuple[tuple[tuple[int, int], ...], int], ...], ...]

    chars: object = field(default=None, init=False, repr=False, compare=False)
    """The minimal character-level DFA this node was built from, when its builder kept it
    (``(table, accepting, atoms)`` of :mod:`logitgate.automata.boolean`): a cache that lets the
    DFA builder skip the position NFA; never part of equality."""


@_node
class TableAutomaton(_Node):
    """A character-level DFA built on demand by ``build(*args)``: the same language as the
    :class:`Automaton` of that DFA, without its edge list (which a builder of many small
    automata cannot afford). ``build`` is a module-level function (so the node pickles) that
    returns ``(table, accepting, atoms)`` in the form of ``Automaton.chars``: a trimmed, minimal
    DFA with start state 0, ``table`` int32 ``[n_states, n_atoms]`` (``-1``: no move),
    ``accepting`` bool ``[n_states]``, ``atoms`` its
    :class:`~logitgate.automata.nfa.AtomPartition`. Equal ``(build, args)`` must mean equal
    languages: the node is hashed and compared by them. ``byte_build`` (optional, also
    module-level): ``byte_build(*args, tail)`` gives the byte-level DFA of the language followed
    by the bytes ``tail`` as ``(columns, byte_column, accepting)``: the move of state ``q`` on
    byte ``b`` is ``columns[q, byte_column[b]]`` (int32, start 0, ``-1``: none), ``accepting``
    bool ``[n]``, every state live; the DFA builder minimises it, skipping the UTF-8 expansion."""

    build: Any
    args: tuple
    byte_build: Any = None

    _chars: object = field(default=None, init=False, repr=False, compare=False)

    @property
    def chars(self) -> Any:
        """``build(*args)``, computed once."""
        found = self._chars
        if found is None:
            found = self.build(*self.args)
            object.__setattr__(self, "_chars", found)
        return found


Node = Union[CharClass, Concat, Alt, Repeat, Empty, Group, Automaton, TableAutomaton]
