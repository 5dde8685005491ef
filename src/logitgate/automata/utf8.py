"""Unicode code point ranges -> UTF-8 byte automata.

Two views of the same encoding:

* :func:`utf8_sequences` splits a code point range into sequences of byte ranges, the standard
  algorithm of Rust's ``regex-syntax`` (``utf8::Utf8Sequences``): split by encoded length, then by
  continuation-byte boundaries, so that each sequence's byte strings are exactly the encodings of a
  sub-range. Only valid UTF-8 comes out: no surrogates, no overlong forms.
* :func:`utf8_automaton` builds the *minimal* deterministic byte automaton reading one character
  of several disjoint code point sets and telling which set it was in (:func:`class_automaton`:
  one set), by hash-consing suffix automata on (remaining continuation bytes, labelled value
  set), in one kernel call (``utf8_label_automaton``, which the DFA builder calls directly for
  the non-ASCII part of every pattern).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..regex.charsets import MAX_CODE_POINT, SURROGATE_HI, SURROGATE_LO
from ..regex.charsets import normalize as normalize_ranges  # one normal form for code point sets

__all__ = [
    "MAX_CODE_POINT",
    "SURROGATE_LO",
    "SURROGATE_HI",
    "FINAL",
    "ClassAutomaton",
    "Utf8Automaton",
    "utf8_automaton",
    "normalize_ranges",
    "utf8_sequences",
    "class_automaton",
]


#: Child index meaning "the character is complete" in a :data:`ClassAutomaton` move.
FINAL = -1

ByteRange = tuple[int, int]
Move = tuple[int, int, int]  # (byte lo, byte hi, child node index or FINAL)
ClassAutomaton = tuple[tuple[Move, ...], ...]
"""Node ``0`` is the root; each node is a sorted tuple of disjoint ``(lo, hi, child)`` moves."""

_MAX_SCALAR_BY_LEN = (0x7F, 0x7FF, 0xFFFF)


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


def utf8_sequences(lo: int, hi: int) -> list[tuple[ByteRange, ...]]:
    """The byte-range sequences whose strings are exactly the UTF-8 encodings of ``lo..hi``.

    Surrogates inside the range are skipped. Sequences come out sorted and pairwise disjoint; each
    is a tuple of 1 to 4 inclusive ``(byte lo, byte hi)`` ranges.
    """
    out: list[tuple[ByteRange, ...]] = []
    stack: list[tuple[int, int]] = [(max(lo, 0), min(hi, MAX_CODE_POINT))]
    while stack:
        start, end = stack.pop()
        while True:
            if start < SURROGATE_HI + 1 and end > SURROGATE_LO - 1:  # split around surrogates
                stack.append((SURROGATE_HI + 1, end))
                end = SURROGATE_LO - 1
            if start > end:
                break
            for max_scalar in _MAX_SCALAR_BY_LEN:  # split by encoded length
                if start <= max_scalar < end:
                    stack.append((max_scalar + 1, end))
                    end = max_scalar
                    break
            else:
                if end <= 0x7F:
                    out.append(((start, end),))
                    break
                for i in (1, 2, 3):  # split so that every continuation byte spans a full range
                    m = (1 << (6 * i)) - 1
                    if start & ~m != end & ~m:
                        if start & m:
                            stack.append(((start | m) + 1, end))
                            end = start | m
                            break
                        if end & m != m:
                            stack.append((end & ~m, end))
                            end = (end & ~m) - 1
                            break
                else:
                    a, b = _encode(start), _encode(end)
                    out.append(tuple(zip(a, b)))
                    break
    return out


class Utf8Automaton:
    """Minimal byte DFA reading one UTF-8 character and labelling it by the group it belongs to.

    Dense form, as the kernels build and read it: ``rows[j, c]`` is the child code of node ``j``
    on byte ``0x80 + c`` (on lead byte ``0xC0 + c`` for the start; ASCII moves are not in
    ``rows``), ``0`` for none; a code ``>= 1`` is another node, ``< 0`` completes the character
    in group ``-1 - code``. Node 0 is the start; ``depth[j]`` is the number of continuation bytes
    node ``j`` still reads (0 for the start); children are numbered before their parents.
    ``label_mask[j]`` has bit ``min(label, 63)`` set for every label reachable from node ``j``.
    :attr:`nodes` is the same automaton as lists of byte-range moves, ASCII included.
    """

    __slots__ = ("depth", "rows", "label_mask", "_ascii", "_nodes")

    def __init__(self, rows: np.ndarray, depth: np.ndarray, label_mask: np.ndarray,
                 ascii_moves: tuple[Move, ...]) -> None:
        self.rows, self.depth, self.label_mask = rows, depth, label_mask
        for a in (self.depth, self.rows, self.label_mask):
            a.flags.writeable = False
        self._ascii = ascii_moves
        self._nodes: tuple[tuple[Move, ...], ...] | None = None

    @property
    def nodes(self) -> tuple[tuple[Move, ...], ...]:
        """``nodes[j]``: the sorted disjoint moves ``(byte lo, byte hi, child code)`` of node ``j``."""
        if self._nodes is None:
            nodes = []
            for j, row in enumerate(self.rows.tolist()):
                offset = 0xC0 if j == 0 else 0x80
                moves = list(self._ascii) if j == 0 else []
                c = 0
                while c < 64:
                    e = c
                    while e + 1 < 64 and row[e + 1] == row[c]:
                        e += 1
                    if row[c]:
                        moves.append((offset + c, offset + e, row[c]))
                    c = e + 1
                nodes.append(tuple(moves))
            self._nodes = tuple(nodes)
        return self._nodes

    def __len__(self) -> int:
        return int(self.depth.shape[0])


@lru_cache(maxsize=512)
def utf8_automaton(groups: tuple[tuple[tuple[int, int], ...], ...]) -> Utf8Automaton:
    """The minimal labelled UTF-8 automaton of disjoint code point sets (kernel
    ``utf8_label_automaton``; cached by ``groups``).

    ``groups[i]`` are normalized ranges (see :func:`normalize_ranges`), pairwise disjoint; a
    character in ``groups[i]`` ends with a move to child ``-1 - i``. Empty groups give a start
    node without moves.
    """
    from ..kernels.automata_kernels import utf8_label_automaton

    pieces = sorted((lo, hi, label) for label, ranges in enumerate(groups) for lo, hi in ranges)
    ascii_moves = tuple((lo, min(hi, 0x7F), -1 - label) for lo, hi, label in pieces if lo <= 0x7F)
    starts, labels = [0x80], [-1]  # intervals from 0x80 on, each with its label (-1: none)
    for lo, hi, label in pieces:
        if hi < 0x80:
            continue
        lo = max(lo, 0x80)
        if starts[-1] == lo:
            labels[-1] = label
        else:
            starts.append(lo)
            labels.append(label)
        if hi < MAX_CODE_POINT:
            starts.append(hi + 1)
            labels.append(-1)
    rows, depth, label_mask = utf8_label_automaton(np.array(starts, np.int64), np.array(labels, np.int32))
    return Utf8Automaton(rows, depth, label_mask, ascii_moves)


def class_automaton(ranges: tuple[tuple[int, int], ...]) -> ClassAutomaton:
    """The minimal DFA over bytes of the UTF-8 encodings of the code points in ``ranges``.

    ``ranges`` must be normalized (see :func:`normalize_ranges`). Node 0 is the start; a move to
    :data:`FINAL` completes one character; every other node is inside a multi-byte character.
    Two nodes are merged exactly when they accept the same suffixes, so the automaton is minimal.
    An empty class gives a root without moves. Cached by ``ranges``.
    """
    return utf8_automaton((ranges,)).nodes
