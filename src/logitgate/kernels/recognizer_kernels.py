"""Kernels for custom recognizers (``logitgate.recognizers``): the token-trie walk over a lazily
explored byte automaton, and the trie walk specialised to a user's numba ``step`` function.

Lazy exploration. A Python recognizer's states are interned as integers; every byte transition
met so far lives in an open-addressing hash table (``keys[slot] = state * 256 + byte``, ``-1``:
empty slot; ``vals[slot]`` = the next state, ``-1``: the byte is refused). ``walk_ranges`` walks
the trie over that table and stops at each transition it does not know (the node and its parent
state are returned, its subtree left for later); the caller asks the recognizer, inserts the
answers and walks again from those nodes only. Each trie node is visited once per mask, and the
recognizer is called once per (state, byte) over the constraint's lifetime: when states repeat,
a new state's mask costs compiled code only.

Trie layout: see :mod:`logitgate.kernels.trie_kernels` (``nodes[i]``: byte | depth << 8 |
(first token + 1) << 24).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit
from .trie_kernels import copy_dups

__all__ = [
    "HASH_MULT",
    "EMPTY",
    "UNKNOWN",
    "ht_insert",
    "ht_rehash",
    "walk_ranges",
    "step_walker",
    "jitclass_walk",
]

HASH_MULT = np.uint64(0x9E3779B97F4A7C15)
"""Fibonacci hashing: slot = (key * HASH_MULT) >> shift, shift = 64 - log2(capacity)."""
EMPTY = -1
"""An empty slot's key."""
UNKNOWN = -2
"""What a lookup of an unexplored transition gives."""


@njit(cache=True, nogil=True)
def ht_insert(keys, vals, shift, new_keys, new_vals):  # pragma: no cover - compiled
    """Insert (or overwrite) ``new_keys[i] -> new_vals[i]``; returns how many keys were new. The
    caller keeps the load under one half (``ht_rehash`` into a table twice the size)."""
    mask = keys.shape[0] - 1
    added = 0
    for i in range(new_keys.shape[0]):
        key = new_keys[i]
        slot = np.int64((np.uint64(key) * HASH_MULT) >> np.uint64(shift))
        while True:
            k = keys[slot]
            if k == key:
                vals[slot] = new_vals[i]
                break
            if k == EMPTY:
                keys[slot] = key
                vals[slot] = new_vals[i]
                added += 1
                break
            slot = (slot + 1) & mask
    return added


@njit(cache=True, nogil=True)
def ht_rehash(keys, vals, new_keys, new_vals, new_shift):  # pragma: no cover - compiled
    """Move every entry of (keys, vals) into the empty table (new_keys, new_vals)."""
    mask = new_keys.shape[0] - 1
    for i in range(keys.shape[0]):
        key = keys[i]
        if key == EMPTY:
            continue
        slot = np.int64((np.uint64(key) * HASH_MULT) >> np.uint64(new_shift))
        while new_keys[slot] != EMPTY:
            slot = (slot + 1) & mask
        new_keys[slot] = key
        new_vals[slot] = vals[i]


@njit(cache=True, nogil=True)
def walk_ranges(keys, vals, shift, nodes, subtree_end, max_depth, r_lo, r_hi, r_state, out, miss_node,
                miss_state):  # pragma: no cover - compiled
    """Walk the trie nodes ``[r_lo[k], r_hi[k])`` for each k, the parent of node ``r_lo[k]`` being
    in state ``r_state[k]`` (the root range: ``1, n_nodes, start``; a resumed subtree: ``j,
    subtree_end[j], parent state``), over the transitions in the hash table. Sets the bit of each
    token reached in ``out`` (uint32 words). A transition not in the table is recorded in
    ``miss_node``/``miss_state`` (the node, its parent's state) and its subtree skipped; returns
    the number recorded (at most one per node: the ranges are disjoint)."""
    stack = np.empty(max_depth + 1, np.int64)
    mask = keys.shape[0] - 1
    ushift = np.uint64(shift)
    n_miss = 0
    for k in range(r_lo.shape[0]):
        i = r_lo[k]
        hi = r_hi[k]
        stack[((nodes[i] >> 8) & 0xFFFF) - 1] = r_state[k]
        while i < hi:
            r = nodes[i]
            d = (r >> 8) & 0xFFFF
            parent = stack[d - 1]
            key = parent * 256 + (r & 0xFF)
            slot = np.int64((np.uint64(key) * HASH_MULT) >> ushift)
            s = UNKNOWN
            while True:
                kk = keys[slot]
                if kk == key:
                    s = vals[slot]
                    break
                if kk == EMPTY:
                    break
                slot = (slot + 1) & mask
            if s == UNKNOWN:
                miss_node[n_miss] = i
                miss_state[n_miss] = parent
                n_miss += 1
                i = subtree_end[i]
                continue
            if s < 0:
                i = subtree_end[i]
                continue
            stack[d] = s
            t = (r >> 24) - 1
            if t >= 0:
                out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            i += 1
    return n_miss


def _walker(step_of: Callable[..., Any], accepting_of: Callable[..., Any]) -> Callable[..., bool]:
    """The trie walk compiled around ``step_of(rec, state, byte)`` and ``accepting_of(rec, state)``
    (numba functions): fills ``out`` (duplicate tokens included), returns whether ``state`` may end."""

    @njit(nogil=True)
    def walk(rec, state, nodes, subtree_end, max_depth, dup_first, dup_other, out):  # pragma: no cover
        n = nodes.shape[0]
        stack = np.empty(max_depth + 1, np.int64)
        stack[0] = state
        i = 1
        while i < n:
            r = nodes[i]
            d = (r >> 8) & 0xFFFF
            s = step_of(rec, stack[d - 1], r & 0xFF)
            if s < 0:
                i = subtree_end[i]
                continue
            stack[d] = s
            t = (r >> 24) - 1
            if t >= 0:
                out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            i += 1
        copy_dups(out, dup_first, dup_other)
        return bool(accepting_of(rec, state))

    return walk


@functools.lru_cache(maxsize=64)
def step_walker(step: Callable[..., Any], accepting: Callable[..., Any]) -> Callable[..., bool]:
    """The trie walk compiled around numba functions ``step(state, byte) -> next state`` (negative:
    refused) and ``accepting(state)``, so that they are direct calls (a dispatcher passed as an
    argument costs microseconds of type dispatch per mask). Call it as ``walk(0, state, nodes,
    subtree_end, max_depth, dup_first, dup_other, out)``; it returns ``accepting(state)``. Compiled
    on first call, once per pair of functions; not cached on disk (it closes over the user's
    functions)."""

    @njit(nogil=True)
    def step_of(rec, state, byte):  # pragma: no cover - compiled
        return step(state, byte)

    @njit(nogil=True)
    def accepting_of(rec, state):  # pragma: no cover - compiled
        return accepting(state)

    return _walker(step_of, accepting_of)


@njit(nogil=True)
def _method_step(rec, state, byte):  # pragma: no cover - compiled
    return rec.step(state, byte)


@njit(nogil=True)
def _method_accepting(rec, state):  # pragma: no cover - compiled
    return rec.accepting(state)


jitclass_walk = _walker(_method_step, _method_accepting)
"""``step_walker``'s walk for a numba jitclass instance ``rec`` with ``step(state, byte)`` and
``accepting(state)`` methods: ``jitclass_walk(rec, state, ...)``; compiled once per jitclass type."""
