"""Regex syntax tree shared by the regex parser (``logitgate.regex.parser``) and the automata
builder (``logitgate.automata``).

The tree is already *resolved*: flags (case-insensitive, dotall, ascii, verbose) have been applied
by the parser, every single-character construct is a :class:`CharClass` of Unicode code point
ranges, and a literal string is a :class:`Concat` of one-character classes. Code point ranges never
contain the surrogates U+D800..U+DFFF (they have no UTF-8 encoding); the automata turn the ranges
into UTF-8 byte sequences.

All nodes are immutable and hashable, so sub-automata can be cached by node.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

__all__ = ["Node", "CharClass", "Concat", "Alt", "Repeat", "Empty", "Group", "MAX_CODE_POINT"]

MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True, slots=True)
class CharClass:
    """One character from a set of code points.

    ``ranges``: sorted, disjoint, non-adjacent inclusive ``(lo, hi)`` pairs, surrogates excluded.
    An empty tuple matches nothing (e.g. ``[^\\s\\S]``).
    """

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Concat:
    """The items one after another (at least two items)."""

    items: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the items (at least two items)."""

    items: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max is None``: unbounded). Laziness is dropped:
    it does not change which strings match as a whole."""

    item: "Node"
    min: int
    max: int | None


@dataclass(frozen=True, slots=True)
class Empty:
    """Matches the empty string only."""


@dataclass(frozen=True, slots=True)
class Group:
    """A capturing group, kept for later use (named captures); matches like ``item``.

    ``index`` is the 1-based group number, ``name`` the ``(?P<name>...)`` name or None.
    """

    item: "Node"
    index: int
    name: str | None = None


Node = Union[CharClass, Concat, Alt, Repeat, Empty, Group]
