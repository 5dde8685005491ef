"""Unicode code point ranges -> UTF-8 byte automata.

Two views of the same encoding:

* :func:`utf8_sequences` splits a code point range into sequences of byte ranges, the standard
  algorithm of Rust's ``regex-syntax`` (``utf8::Utf8Sequences``): split by encoded length, then by
  continuation-byte boundaries, so that each sequence's byte strings are exactly the encodings of a
  sub-range. Only valid UTF-8 comes out: no surrogates, no overlong forms.
* :func:`utf8_automaton` builds the *minimal* deterministic byte automaton reading one character
  of several disjoint code point sets and telling which set it was in (:func:`class_automaton`:
  one set), by hash-consing suffix automata on (remaining continuation bytes, labelled value
  set). The DFA builder uses it for the non-ASCII part of every pattern; results are cached, so
  big classes (Unicode ``\\w``) are built once.
"""
from __future__ import annotations

from collections.abc import Callable
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
Piece = tuple[int, int, int]  # (lo, hi, label)
Move = tuple[int, int, int]  # (byte lo, byte hi, child node index or FINAL)
ClassAutomaton = tuple[tuple[Move, ...], ...]
"""Node ``0`` is the root; each node is a sorted tuple of disjoint ``(lo, hi, child)`` moves."""

# (first code point, last code point, lead-byte marker, continuation bytes) per encoded length
_BLOCKS: tuple[tuple[int, int, int, int], ...] = (
    (0x0, 0x7F, 0x00, 0),
    (0x80, 0x7FF, 0xC0, 1),
    (0x800, 0xFFFF, 0xE0, 2),
    (0x10000, MAX_CODE_POINT, 0xF0, 3),
)
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


def _split(pieces: tuple[Piece, ...], shift: int) -> list[tuple[int, int, tuple[Piece, ...]]]:
    """Group labelled values by their digit ``value >> shift``.

    ``pieces`` are sorted disjoint ``(lo, hi, label)``. Returns ``(digit lo, digit hi, low
    pieces)`` with consecutive digits of identical low pieces merged; the low pieces are
    ``(lo, hi, label)`` inside ``[0, 2**shift)``.
    """
    mask = (1 << shift) - 1
    per_digit: list[list] = []  # [digit lo, digit hi, list of low pieces]
    for lo, hi, label in pieces:
        dlo, dhi = lo >> shift, hi >> shift
        if dlo == dhi:
            parts = [(dlo, dlo, (lo & mask, hi & mask, label))]
        else:
            parts = [(dlo, dlo, (lo & mask, mask, label))]
            if dhi > dlo + 1:
                parts.append((dlo + 1, dhi - 1, (0, mask, label)))
            parts.append((dhi, dhi, (0, hi & mask, label)))
        for d0, d1, low in parts:
            last = per_digit[-1] if per_digit else None
            if last is not None and last[0] == last[1] == d0 == d1:
                prev = last[2][-1]
                if prev[2] == label and prev[1] + 1 == low[0]:  # adjacent, same label
                    last[2][-1] = (prev[0], low[1], label)
                else:
                    last[2].append(low)
            else:
                per_digit.append([d0, d1, [low]])
    merged: list[tuple[int, int, tuple[Piece, ...]]] = []
    for d0, d1, lows in per_digit:
        low_t = tuple(lows)
        if merged and merged[-1][1] + 1 == d0 and merged[-1][2] == low_t:
            merged[-1] = (merged[-1][0], d1, low_t)
        else:
            merged.append((d0, d1, low_t))
    return merged


class Utf8Automaton:
    """Minimal byte DFA reading one UTF-8 character and labelling it by the group it belongs to.

    ``nodes[j]`` is a sorted tuple of disjoint moves ``(byte lo, byte hi, child)``; ``child >= 1``
    is another node, ``child < 0`` completes the character in group ``-1 - child`` (so with a
    single group, ``child == FINAL``). Node 0 is the start; ``depth[j]`` is the number of
    continuation bytes node ``j`` still reads (0 for the start). Children are numbered before
    their parents.

    Dense form for the kernels: ``rows[j, c]`` is the child code of node ``j`` on byte ``0x80 + c``
    (on lead byte ``0xC0 + c`` for the start; ASCII moves are not in ``rows``), ``0`` for none;
    ``label_mask[j]`` has bit ``min(label, 63)`` set for every label reachable from node ``j``.
    """

    __slots__ = ("_nodes", "_moves", "depth", "rows", "label_mask")

    def __init__(self, nodes: list[tuple[Move, ...]], depth: list[int]) -> None:
        self._nodes: tuple[tuple[Move, ...], ...] | None = tuple(nodes)
        self._moves: np.ndarray | None = None
        self.depth = np.array(depth, np.int64)
        rows = np.zeros((len(nodes), 64), np.int32)
        masks = [0] * len(nodes)
        for j in list(range(1, len(nodes))) + [0]:  # children before parents
            offset = 0xC0 if j == 0 else 0x80
            mask = 0
            for lo, hi, child in nodes[j]:
                mask |= 1 << min(-1 - child, 63) if child < 0 else masks[child]
                if hi >= offset:
                    rows[j, max(lo, offset) - offset : hi - offset + 1] = child
            masks[j] = mask
        self.rows = rows
        self.label_mask = np.array(masks, np.uint64)
        for a in (self.depth, self.rows, self.label_mask):
            a.flags.writeable = False

    @property
    def nodes(self) -> tuple[tuple[Move, ...], ...]:
        """The moves of each node (rebuilt on first use for an automaton read from disk)."""
        if self._nodes is None:
            assert self._moves is not None
            moves = self._moves.tolist()  # rows (node, lo, hi, child), by node
            nodes: list[list[Move]] = [[] for _ in range(len(self.depth))]
            for j, lo, hi, child in moves:
                nodes[j].append((lo, hi, child))
            self._nodes = tuple(map(tuple, nodes))
        return self._nodes

    def __len__(self) -> int:
        return int(self.depth.shape[0])

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Arrays only: unpickling a big automaton then costs a few array copies, not a tuple per
        move."""
        moves = np.array([(j, lo, hi, child) for j, node in enumerate(self.nodes) for lo, hi, child in node],
                         np.int32).reshape(-1, 4)
        return moves, self.depth, self.rows, self.label_mask

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
        self._moves, self.depth, self.rows, self.label_mask = state
        self._nodes = None
        for a in (self.depth, self.rows, self.label_mask):
            a.flags.writeable = False


DISK_MIN_PIECES = 8
"""Fewer labelled ranges than this: an automaton builds faster than its disk file reads."""


@lru_cache(maxsize=512)
def utf8_automaton(groups: tuple[tuple[tuple[int, int], ...], ...]) -> Utf8Automaton:
    """The minimal labelled UTF-8 automaton of disjoint code point sets (cached by ``groups`` in
    memory, and on disk unless tiny: big ones such as Unicode ``\\w`` take milliseconds to build).
    """
    if sum(len(g) for g in groups) < DISK_MIN_PIECES:
        return _build_utf8_automaton(groups)
    import itertools

    # the groups as one int64 array (label, lo, hi per range): the file's key, and stored in it
    flat = np.fromiter(
        itertools.chain.from_iterable((label, lo, hi) for label, ranges in enumerate(groups) for lo, hi in ranges),
        np.int64,
    )
    return keyed_utf8_automaton(flat, lambda: groups)


def keyed_utf8_automaton(key: np.ndarray, groups: Callable[[], tuple[tuple[tuple[int, int], ...], ...]]) -> Utf8Automaton:
    """The automaton of ``groups()``, kept on disk under ``key`` (an int64 array that determines
    the groups; stored in the file and compared on reading, so a hash collision rebuilds): a
    caller with a cheaper key than the groups themselves skips computing them when on disk.

    The file is the raw arrays one after another (see :func:`_to_bytes`): one read and a few
    array views, which matters on the cold caches of a compile (unpickling four arrays cost
    more than building a small automaton)."""
    import hashlib
    import os
    import tempfile

    from .._cachedir import cache_dir

    digest = hashlib.sha256(key.tobytes()).hexdigest()[:40]
    path = ""
    try:
        path = os.path.join(cache_dir("utf8"), f"{digest}-v3.bin")
        with open(path, "rb") as f:
            automaton = _from_bytes(f.read(), key)
        if automaton is not None:
            return automaton
    except Exception:  # missing, truncated or corrupt: rebuilt
        pass
    automaton = _build_utf8_automaton(groups())
    if path:
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_to_bytes(automaton, key))
            os.replace(tmp, path)
        except OSError:
            pass
    return automaton


def _to_bytes(automaton: Utf8Automaton, key: np.ndarray) -> bytes:
    """int64 ``[len(key), n_nodes, n_moves]``, then ``key`` and ``depth`` (int64), ``label_mask``
    (uint64), the moves (int32 ``[n_moves, 4]``: node, lo, hi, child) and ``rows`` (int32
    ``[n_nodes, 64]``)."""
    moves, depth, rows, label_mask = automaton.__getstate__()
    head = np.array([len(key), len(depth), len(moves)], np.int64)
    return b"".join(a.tobytes() for a in (head, key.astype(np.int64), depth.astype(np.int64),
                                          label_mask.astype(np.uint64), moves.astype(np.int32), rows.astype(np.int32)))


def _from_bytes(data: bytes, key: np.ndarray) -> Utf8Automaton | None:
    """The automaton :func:`_to_bytes` wrote, or None when the stored key is not ``key``; raises
    on a malformed buffer."""
    n_key, n_nodes, n_moves = np.frombuffer(data, np.int64, 3).tolist()
    off = 24
    stored = np.frombuffer(data, np.int64, n_key, off)
    if n_key != len(key) or not np.array_equal(stored, key):
        return None
    off += 8 * n_key
    depth = np.frombuffer(data, np.int64, n_nodes, off)
    off += 8 * n_nodes
    label_mask = np.frombuffer(data, np.uint64, n_nodes, off)
    off += 8 * n_nodes
    moves = np.frombuffer(data, np.int32, 4 * n_moves, off).reshape(n_moves, 4)
    off += 16 * n_moves
    rows = np.frombuffer(data, np.int32, 64 * n_nodes, off).reshape(n_nodes, 64)
    if off + 256 * n_nodes != len(data):
        raise ValueError("trailing bytes in a cached UTF-8 automaton")
    automaton = Utf8Automaton.__new__(Utf8Automaton)
    automaton.__setstate__((moves, depth, rows, label_mask))
    return automaton


def _build_utf8_automaton(groups: tuple[tuple[tuple[int, int], ...], ...]) -> Utf8Automaton:
    """The minimal labelled UTF-8 automaton of disjoint code point sets.

    ``groups[i]`` are normalized ranges (see :func:`normalize_ranges`), pairwise disjoint; a
    character in ``groups[i]`` ends with a move to child ``-1 - i``. Nodes are hash-consed on
    (remaining continuation bytes, labelled value set), which is exactly their residual language,
    so the automaton is minimal. Empty groups give a start node without moves.
    """
    pieces = sorted((lo, hi, label) for label, ranges in enumerate(groups) for lo, hi in ranges)
    nodes: list[tuple[Move, ...]] = [()]
    depth: list[int] = [0]
    index: dict[tuple[int, tuple[Piece, ...]], int] = {}

    def node(k: int, low: tuple[Piece, ...]) -> int:
        """Node reading ``k`` continuation bytes whose 6-bit digits spell a value in ``low``."""
        if k == 0:
            return -1 - low[0][2]
        key = (k, low)
        found = index.get(key)
        if found is not None:
            return found
        shift = 6 * (k - 1)
        moves = tuple((0x80 | d0, 0x80 | d1, node(k - 1, sub)) for d0, d1, sub in _split(low, shift))
        nodes.append(moves)
        depth.append(k)
        index[key] = len(nodes) - 1
        return len(nodes) - 1

    root: list[Move] = []
    for first, last, marker, k in _BLOCKS:
        clipped = tuple(
            (max(lo, first), min(hi, last), label) for lo, hi, label in pieces if lo <= last and hi >= first
        )
        if not clipped:
            continue
        if k == 0:
            root.extend((lo, hi, -1 - label) for lo, hi, label in clipped)
            continue
        for d0, d1, sub in _split(clipped, 6 * k):
            root.append((marker | d0, marker | d1, node(k, sub)))
    nodes[0] = tuple(root)
    return Utf8Automaton(nodes, depth)


def class_automaton(ranges: tuple[tuple[int, int], ...]) -> ClassAutomaton:
    """The minimal DFA over bytes of the UTF-8 encodings of the code points in ``ranges``.

    ``ranges`` must be normalized (see :func:`normalize_ranges`). Node 0 is the start; a move to
    :data:`FINAL` completes one character; every other node is inside a multi-byte character.
    Two nodes are merged exactly when they accept the same suffixes, so the automaton is minimal.
    An empty class gives a root without moves. Cached by ``ranges``.
    """
    return utf8_automaton((ranges,)).nodes
