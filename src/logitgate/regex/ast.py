"""Regex syntax tree shared by the regex parser (``logitgate.regex.parser``) and the automata
builder (``logitgate.automata``).

The tree is already *resolved*: flags (case-insensitive, dotall, ascii, verbose) have been applied
by the parser, every single-character construct is a :class:`CharClass` of Unicode code point
ranges, and a literal string is a :class:`Concat` of one-character classes. Code point ranges never
contain the surrogates U+D800..U+DFFF (they have no UTF-8 encoding); the automata turn the ranges
into UTF-8 byte sequences.

An :class:`Automaton` node embeds a character-level DFA (the result of a boolean operation on
languages, :mod:`logitgate.automata.boolean`) in a tree.

All nodes are immutable and hashable, so sub-automata can be cached by node. A node's hash is
computed once, when it is built (from its children's stored hashes), so hashing a big tree for a
cache lookup costs one attribute read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

__all__ = ["Node", "CharClass", "Concat", "Alt", "Repeat", "Empty", "Group", "Automaton", "MAX_CODE_POINT"]

MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True, slots=True)
class CharClass:
    """One character from a set of code points.

    ``ranges``: sorted, disjoint, non-adjacent inclusive ``(lo, hi)`` pairs, surrogates excluded.
    An empty tuple matches nothing (e.g. ``[^\\s\\S]``).
    """

    ranges: tuple[tuple[int, int], ...]

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("CharClass", self.ranges)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (CharClass, (self.ranges,))


@dataclass(frozen=True, slots=True)
class Concat:
    """The items one after another (at least two items)."""

    items: tuple["Node", ...]

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Concat", self.items)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Concat, (self.items,))


@dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the items (at least two items)."""

    items: tuple["Node", ...]

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Alt", self.items)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Alt, (self.items,))


@dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max is None``: unbounded). Laziness is dropped:
    it does not change which strings match as a whole."""

    item: "Node"
    min: int
    max: int | None

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Repeat", self.item, self.min, self.max)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Repeat, (self.item, self.min, self.max))


@dataclass(frozen=True, slots=True)
class Empty:
    """Matches the empty string only."""

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Empty",)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Empty, ())


@dataclass(frozen=True, slots=True)
class Group:
    """A capturing group, kept for later use (named captures); matches like ``item``.

    ``index`` is the 1-based group number, ``name`` the ``(?P<name>...)`` name or None.
    """

    item: "Node"
    index: int
    name: str | None = None

    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Group", self.item, self.index, self.name)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Group, (self.item, self.index, self.name))


@dataclass(frozen=True, slots=True)
class Automaton:
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

    _hash: int = field(init=False, repr=False, compare=False)
    chars: object = field(default=None, init=False, repr=False, compare=False)
    """The minimal character-level DFA this node was built from, when its builder kept it
    (``(table, accepting, atoms)`` of :mod:`logitgate.automata.boolean`): a cache that lets the
    DFA builder skip the position NFA; never part of equality."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(("Automaton", self.start, self.accepting, self.edges)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuilt, so the hash is recomputed in the loading process
        return (Automaton, (self.start, self.accepting, self.edges))


Node = Union[CharClass, Concat, Alt, Repeat, Empty, Group, Automaton]
