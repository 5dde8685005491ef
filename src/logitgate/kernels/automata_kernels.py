"""DFA kernels for ``logitgate.automata``: trimming, Hopcroft minimisation, BFS renumbering and
per-pattern co-reachability, over a class transition table ``trans`` (int32 ``[n, n_classes]``,
``-1`` = no transition).
"""
from __future__ import annotations

import numpy as np
from numba import types

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit

_i32_1d = types.Array(types.int32, 1, "C")
_i64_1d = types.Array(types.int64, 1, "C")
_u8_1d = types.Array(types.uint8, 1, "C")
_i32_2d = types.Array(types.int32, 2, "C")
_i64_2d = types.Array(types.int64, 2, "C")
_u8_2d = types.Array(types.uint8, 2, "C")
_u8_1d_ro = types.Array(types.uint8, 1, "C", readonly=True)
_b1_1d = types.Array(types.boolean, 1, "C")
_b1_2d = types.Array(types.boolean, 2, "C")
_i32_2d_ro = types.Array(types.int32, 2, "C", readonly=True)
_i64_1d_ro = types.Array(types.int64, 1, "C", readonly=True)
_u64_1d_ro = types.Array(types.uint64, 1, "C", readonly=True)
_u64_1d = types.Array(types.uint64, 1, "C")


@njit(cache=True, nogil=True)
def _number_by_first(labels, n_labels):  # pragma: no cover - compiled
    """Renumber ``labels`` (values in ``[0, n_labels)``, all used) in place in order of first
    appearance; returns the index of each label's first element."""
    rank = np.full(n_labels, -1, labels.dtype)
    first = np.empty(n_labels, labels.dtype)
    n_seen = 0
    for i in range(labels.shape[0]):
        b = labels[i]
        if rank[b] < 0:
            rank[b] = n_seen
            first[n_seen] = i
            n_seen += 1
        labels[i] = rank[b]
    return first


@njit(types.Tuple((_i64_1d, _i32_1d))(_i32_2d), cache=True, nogil=True)
def reverse_edges(trans):  # pragma: no cover - compiled
    """Predecessor lists in CSR form: the predecessors of ``t`` are ``pred[off[t]:off[t + 1]]``
    (one entry per class leading there, so a state may repeat)."""
    n, n_classes = trans.shape
    off = np.zeros(n + 1, np.int64)
    for s in range(n):
        for c in range(n_classes):
            t = trans[s, c]
            if t >= 0:
                off[t + 1] += 1
    for t in range(n):
        off[t + 1] += off[t]
    cursor = off[:-1].copy()
    pred = np.empty(off[n], np.int32)
    for s in range(n):
        for c in range(n_classes):
            t = trans[s, c]
            if t >= 0:
                pred[cursor[t]] = s
                cursor[t] += 1
    return off, pred


@njit(_b1_2d(_i32_2d, _b1_2d), cache=True, nogil=True)
def coreachable(trans, accepting):  # pragma: no cover - compiled
    """``out[s, k]``: some path from ``s`` (possibly empty) reaches a state accepting pattern ``k``."""
    n = trans.shape[0]
    n_patterns = accepting.shape[1]
    off, pred = reverse_edges(trans)
    out = np.zeros((n, n_patterns), np.bool_)
    stack = np.empty(n, np.int32)
    for k in range(n_patterns):
        top = 0
        for s in range(n):
            if accepting[s, k]:
                out[s, k] = True
                stack[top] = s
                top += 1
        while top > 0:
            top -= 1
            t = stack[top]
            for i in range(off[t], off[t + 1]):
                s = pred[i]
                if not out[s, k]:
                    out[s, k] = True
                    stack[top] = s
                    top += 1
    return out


@njit(cache=True, nogil=True)
def _scatter_by_class(items, lo, hi, edge_off, edge_cls, edge_val, count, touched, bucket_off, bucket):  # pragma: no cover
    """Counting sort of the edges of ``items[lo:hi]`` by class: edge ``j`` of item ``x`` (``j`` in
    ``edge_off[x]:edge_off[x+1]``) has class ``edge_cls[j]`` and value ``edge_val[j]``. Class
    ``touched[i]`` (``i`` below the returned count, in order of first appearance) gets the values
    ``bucket[bucket_off[c]:bucket_off[c] + count[c]]``, in item order; ``count`` must be all zero
    for the untouched classes on entry (the caller zeroes the touched ones after use). Written out
    in ``_dfas_pass`` as well (calling it there, even inlined, made that loop 2x slower): change
    both together."""
    n_touched = 0
    for k in range(lo, hi):
        x = items[k]
        for j in range(edge_off[x], edge_off[x + 1]):
            c = edge_cls[j]
            if count[c] == 0:
                touched[n_touched] = c
                n_touched += 1
            count[c] += 1
    pos = 0
    for i in range(n_touched):
        c = touched[i]
        bucket_off[c] = pos
        pos += count[c]
        count[c] = 0  # reused as a fill cursor
    for k in range(lo, hi):
        x = items[k]
        for j in range(edge_off[x], edge_off[x + 1]):
            c = edge_cls[j]
            bucket[bucket_off[c] + count[c]] = edge_val[j]
            count[c] += 1
    return n_touched


@njit(types.Tuple((_i32_1d, _i32_1d))(_i32_2d, _i32_1d, types.int64), cache=True, nogil=True)
def hopcroft(trans, labels, n_labels):  # pragma: no cover - compiled
    """Coarsest partition of the states compatible with ``labels`` (in ``[0, n_labels)``) and the
    transitions. Returns ``(block, first)``: a block id per state, blocks numbered in order of
    their smallest state, and that smallest state per block.

    Hopcroft's algorithm on a partial DFA: missing moves go to an implicit dead state, alone in
    its block and never used as a splitter (every other initial block is, which suffices). A
    splitter's incoming moves are gathered and bucketed by class, so the work is proportional to
    the moves that exist: O(m log n) for m moves. A split block already waiting keeps both halves
    waiting; otherwise the smaller half is added.
    """
    n, n_classes = trans.shape
    # incoming moves per target: (source, class)
    in_off = np.zeros(n + 1, np.int64)
    for s in range(n):
        for c in range(n_classes):
            t = trans[s, c]
            if t >= 0:
                in_off[t + 1] += 1
    for t in range(n):
        in_off[t + 1] += in_off[t]
    n_moves = in_off[n]
    cursor = in_off[:-1].copy()
    in_src = np.empty(n_moves, np.int32)
    in_cls = np.empty(n_moves, np.int32)
    for s in range(n):
        for c in range(n_classes):
            t = trans[s, c]
            if t >= 0:
                in_src[cursor[t]] = s
                in_cls[cursor[t]] = c
                cursor[t] += 1
    # initial partition by label (counting sort); elements of block b are elems[start[b]:end[b]]
    count = np.zeros(n_labels + 1, np.int64)
    for s in range(n):
        count[labels[s] + 1] += 1
    for lab in range(n_labels):
        count[lab + 1] += count[lab]
    elems = np.empty(n, np.int32)
    pos = np.empty(n, np.int32)
    fill = count[:-1].copy()
    for s in range(n):
        k = fill[labels[s]]
        elems[k] = s
        pos[s] = k
        fill[labels[s]] += 1
    block = np.empty(n, np.int32)
    start = np.empty(n, np.int32)
    end = np.empty(n, np.int32)
    work = np.empty(n, np.int32)
    waiting = np.zeros(n, np.bool_)
    n_blocks = 0
    n_work = 0
    for lab in range(n_labels):
        if count[lab + 1] > count[lab]:
            start[n_blocks] = count[lab]
            end[n_blocks] = count[lab + 1]
            for k in range(count[lab], count[lab + 1]):
                block[elems[k]] = n_blocks
            work[n_work] = n_blocks
            waiting[n_blocks] = True
            n_work += 1
            n_blocks += 1
    marked = np.zeros(n, np.int32)
    touched = np.empty(n, np.int32)
    class_count = np.zeros(n_classes, np.int64)
    class_start = np.zeros(n_classes, np.int64)
    touched_classes = np.empty(n_classes, np.int32)
    preds = np.empty(max(n_moves, 1), np.int32)
    while n_work > 0:
        n_work -= 1
        a = work[n_work]
        waiting[a] = False
        # the moves into a, bucketed by class (gathered before any split of a)
        n_tc = _scatter_by_class(elems, start[a], end[a], in_off, in_cls, in_src, class_count, touched_classes,
                                 class_start, preds)
        for i in range(n_tc):
            c = touched_classes[i]
            n_touched = 0
            for j in range(class_start[c], class_start[c] + class_count[c]):
                p = preds[j]  # each p has one successor on c, so it is marked at most once
                b = block[p]
                if marked[b] == 0:
                    touched[n_touched] = b
                    n_touched += 1
                k = start[b] + marked[b]  # swap p to the end of b's marked prefix
                q = elems[k]
                pp = pos[p]
                elems[k] = p
                pos[p] = k
                elems[pp] = q
                pos[q] = pp
                marked[b] += 1
            class_count[c] = 0
            for j in range(n_touched):
                b = touched[j]
                mk = marked[b]
                marked[b] = 0
                if mk == end[b] - start[b]:
                    continue
                z = n_blocks
                n_blocks += 1
                start[z] = start[b]
                end[z] = start[b] + mk
                start[b] = end[z]
                for k in range(start[z], end[z]):
                    block[elems[k]] = z
                if waiting[b] or end[z] - start[z] <= end[b] - start[b]:
                    add = z
                else:
                    add = b
                work[n_work] = add
                waiting[add] = True
                n_work += 1
    first = _number_by_first(block, n_blocks)  # blocks numbered by their smallest state
    return block, first


@njit(_i32_1d(_i32_2d, _i32_1d, types.int64), cache=True, nogil=True)
def bfs_order(trans, columns, start):  # pragma: no cover - compiled
    """The states reachable from ``start`` in breadth-first order, successors taken in the order
    of ``columns`` (the columns of ``trans`` to follow)."""
    n = trans.shape[0]
    seen = np.zeros(n, np.bool_)
    order = np.empty(n, np.int32)
    order[0] = start
    seen[start] = True
    head = 0
    tail = 1
    while head < tail:
        s = order[head]
        head += 1
        for c in columns:
            t = trans[s, c]
            if t >= 0 and not seen[t]:
                seen[t] = True
                order[tail] = t
                tail += 1
    return order[:tail].copy()


@njit(_i32_2d(_i32_2d, _i32_1d, _i32_1d), cache=True, nogil=True)
def renumber_expand(table, order, columns):  # pragma: no cover - compiled
    """``out[i, j] = new[table[order[i], columns[j]]]`` where ``new`` inverts ``order`` (-1 stays)."""
    n = table.shape[0]
    new = np.full(n, -1, np.int32)
    for i in range(order.shape[0]):
        new[order[i]] = i
    out = np.empty((order.shape[0], columns.shape[0]), np.int32)
    for i in range(order.shape[0]):
        row = order[i]
        for j in range(columns.shape[0]):
            t = table[row, columns[j]]
            out[i, j] = new[t] if t >= 0 else -1
    return out


@njit(cache=True, nogil=True)
def _grown_rows(a, n, cap, fill):  # pragma: no cover - compiled
    """A copy of ``a``'s first ``n`` rows at the head of an array of ``cap`` rows, the others
    ``fill``: a store that grows by doubling."""
    out = np.full((cap,) + a.shape[1:], fill, a.dtype)
    out[:n] = a[:n]
    return out


@njit(types.uint64(types.int64), cache=True, nogil=True)
def _mix(v):  # pragma: no cover - compiled
    """splitmix64 finaliser: a well-spread 64-bit hash of one integer."""
    z = np.uint64(v) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(types.uint64(types.int32[::1], types.uint64[::1]), cache=True, nogil=True)
def _row_hash(row, weights):  # pragma: no cover - compiled
    """A hash of ``row``: a weighted sum (independent products, so the loop vectorises),
    then a final mix."""
    h = np.uint64(0)
    for c in range(row.shape[0]):
        h += np.uint64(row[c] + 2) * weights[c]
    return h ^ (h >> np.uint64(29))


@njit(types.UniTuple(types.int64, 2)(_i64_1d, _u64_1d, _i32_2d, _i32_1d, types.uint64), cache=True, nogil=True)
def _find_row(table, hashes, store, row, h):  # pragma: no cover - compiled
    """Open addressing over ``table`` (a power of two long; entry ``k + 1`` stands for row ``k`` of
    ``store``, whose hash is ``hashes[k]``; 0 is empty): ``(k, slot)`` for the stored row equal to
    ``row`` (hash ``h``), or ``(-1, slot)`` with the empty slot where it would go."""
    mask = np.uint64(table.shape[0] - 1)
    slot = h & mask
    while table[slot] != 0:
        k = table[slot] - 1
        if hashes[k] == h:
            same = True
            for c in range(row.shape[0]):
                if store[k, c] != row[c]:
                    same = False
                    break
            if same:
                return k, np.int64(slot)
        slot = (slot + np.uint64(1)) & mask
    return -1, np.int64(slot)


@njit(types.Tuple((types.int32, types.int64))(_i32_2d, _i64_1d, _i32_2d, types.int64, types.int64, types.int64),
      cache=True, nogil=True)
def _whole_subtree(rows, depth, full, n, d, label):  # pragma: no cover - compiled
    """``(node, n)``: the shared node reading ``d`` continuation bytes, any of them, to end in
    ``label`` (created with the ones below it if new; ``n`` nodes exist, ``rows`` has room)."""
    for dd in range(1, d + 1):
        if full[dd, label] < 0:
            rows[n, :] = -1 - label if dd == 1 else full[dd - 1, label]
            depth[n] = dd
            full[dd, label] = n
            n += 1
    return full[d, label], n


@njit(types.Tuple((types.int64, types.int64))(_i32_2d, _i64_1d, _i32_2d, _i64_2d, types.int64, types.int64,
                                               types.int64, types.int64, types.int64, types.int64, types.int64,
                                               types.int64, types.int64), cache=True, nogil=True)
def _place_digits(rows, depth, full, stack, top, n, node, off, shift, child_d, a, b,
                  label):  # pragma: no cover - compiled
    """Make ``node`` read the values ``a .. b`` (their digit ``>> shift`` in column ``off +
    digit``, the rest below in nodes of depth ``child_d``) to end in ``label``: last bytes and
    whole subtrees are set directly, a partial subtree at either end is pushed on ``stack`` as
    ``(node, column, child_d, lo, hi)``. Returns ``(top, n)``."""
    lo_d, hi_d = a >> shift, b >> shift
    if child_d == 0:
        rows[node, off + lo_d:off + hi_d + 1] = -1 - label
        return top, n
    mask = (1 << shift) - 1
    for dg in range(lo_d, hi_d + 1):
        x = a & mask if dg == lo_d else 0
        y = b & mask if dg == hi_d else mask
        if x == 0 and y == mask:
            sub, n = _whole_subtree(rows, depth, full, n, child_d, label)
            rows[node, off + dg] = sub
        else:
            stack[top, 0] = node
            stack[top, 1] = off + dg
            stack[top, 2] = child_d
            stack[top, 3] = x
            stack[top, 4] = y
            top += 1
    return top, n


@njit(types.Tuple((_i32_2d, _i64_1d, _u64_1d))(_i64_1d, _i32_1d), cache=True, nogil=True)
def utf8_label_automaton(starts, labels):  # pragma: no cover - compiled
    """The minimal labelled UTF-8 automaton of intervals above ASCII, in the dense form of
    ``logitgate.automata.utf8.Utf8Automaton``: ``(rows, depth, label_mask)``.

    Interval ``i`` is ``starts[i] .. starts[i + 1] - 1`` (the last one runs to U+10FFFF); its
    code points (surrogates and ASCII excepted) end a character with label ``labels[i]`` (-1:
    none). Each interval is split by encoded length and inserted into a trie of 64-way nodes
    (whole subtrees of one label are one shared node; intervals are disjoint, so no shared node is
    written twice); the trie is then hash-consed bottom-up, by depth, so that children are
    canonical before their parents and equal residual languages become one node: the automaton
    is minimal. Children are numbered before their parents; node 0 is the start.
    """
    n_iv = starts.shape[0]
    n_labels = 1
    for i in range(n_iv):
        n_labels = max(n_labels, labels[i] + 1)
    cap = 128  # nodes; grown by doubling
    rows = np.zeros((cap, 64), np.int32)
    depth = np.zeros(cap, np.int64)
    full = np.full((4, n_labels), -1, np.int32)
    stack = np.empty((16, 5), np.int64)  # (parent, column, child depth, lo, hi)
    n = 1
    for i in range(n_iv):
        label = labels[i]
        if label < 0:
            continue
        first = max(starts[i], 0x80)
        last = starts[i + 1] - 1 if i + 1 < n_iv else 0x10FFFF
        for part in range(4):  # 2-byte, 3-byte below and above the surrogates, 4-byte
            k = 1 if part == 0 else (2 if part < 3 else 3)
            lo = max(first, (0x80, 0x800, 0xE000, 0x10000)[part])
            hi = min(last, (0x7FF, 0xD7FF, 0xFFFF, 0x10FFFF)[part])
            if lo > hi:
                continue
            base = (0xC0, 0xE0, 0xE0, 0xF0)[part] - 0xC0  # column of the lead byte's marker
            if n + 9 > cap:  # room for a part: two partial nodes per depth (its ends), 3 shared
                cap *= 2
                grown = np.zeros((cap, 64), np.int32)
                grown[:n] = rows[:n]
                rows = grown
                grown_depth = np.zeros(cap, np.int64)
                grown_depth[:n] = depth[:n]
                depth = grown_depth
            top, n = _place_digits(rows, depth, full, stack, 0, n, 0, base, 6 * k, k, lo, hi, label)
            while top > 0:
                top -= 1
                parent, col, d, a, b = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3], stack[top, 4]
                node = rows[parent, col]
                if node == 0:
                    rows[parent, col] = n
                    depth[n] = d
                    node = n
                    n += 1
                top, n = _place_digits(rows, depth, full, stack, top, n, node, 0, 6 * (d - 1), d - 1, a, b, label)
    # hash-cons bottom-up: canon[j] is node j's id in the minimal automaton (0: the start)
    canon = np.zeros(n, np.int32)
    out = np.empty((n, 64), np.int32)
    out_depth = np.zeros(n, np.int64)
    hashes = np.empty(n, np.uint64)
    table_size = 64
    while table_size < 2 * n:
        table_size *= 2
    table = np.zeros(table_size, np.int64)  # canonical id + 1
    weights = np.empty(64, np.uint64)
    for c in range(64):
        weights[c] = _mix(c + 1) | np.uint64(1)
    row = np.empty(64, np.int32)
    n_out = 1
    for d in range(1, 4):
        for j in range(1, n):
            if depth[j] != d:
                continue
            for c in range(64):
                code = rows[j, c]
                row[c] = canon[code] if code > 0 else code
            h = _row_hash(row, weights) ^ np.uint64(d)
            # equal rows have equal depths: children of a node are one depth below it
            found, slot = _find_row(table, hashes, out, row, h)
            if found < 0:
                found = n_out
                out[found] = row
                out_depth[found] = d
                hashes[found] = h
                table[slot] = found + 1
                n_out += 1
            canon[j] = found
    for c in range(64):
        code = rows[0, c]
        out[0, c] = canon[code] if code > 0 else code
    label_mask = np.zeros(n_out, np.uint64)
    for i in range(1, n_out + 1):  # children before parents, the start last
        q = i if i < n_out else 0
        m = np.uint64(0)
        for c in range(64):
            code = out[q, c]
            if code < 0:
                m |= np.uint64(1) << np.uint64(min(-1 - code, 63))
            elif code > 0:
                m |= label_mask[code]
        label_mask[q] = m
    return out[:n_out].copy(), out_depth[:n_out].copy(), label_mask


@njit(
    types.Tuple((_i32_2d, _i32_2d))(_i32_2d_ro, _i64_1d_ro, _u64_1d_ro, _i32_2d, types.int64, types.int64, _i32_2d),
    cache=True,
    nogil=True,
)
def expand_utf8(rows, depth, label_mask, targets, first_mid, max_mid, store):  # pragma: no cover - compiled
    """Byte-level moves of the non-ASCII characters of every character state, minimal.

    ``rows``/``depth``/``label_mask``: a labelled UTF-8 automaton in dense form (see
    ``logitgate.automata.utf8.Utf8Automaton``; label ``l`` = the ``l``-th group of atoms);
    ``targets[q, l]``: the character state reached from state ``q`` on group ``l`` (-1: none).
    Each state gets a copy of the automaton with its labels replaced by its targets, pruned of
    dead nodes; mid-character nodes are hash-consed bottom-up (by depth) on their rows, so equal
    nodes are shared across states. Returns ``(lead, mid)``: ``lead[q, c]`` the move of state ``q``
    on lead byte ``0xC0 + c``, ``mid[k, c]`` the move of mid node ``k`` (state id
    ``first_mid + k``) on byte ``0x80 + c``. Stops early once more than ``max_mid`` mid nodes
    exist (the caller checks the count against its cap). ``store``: where the mid rows are written
    while they fit (``mid`` is then a view of it; a caller's scratch saves fresh pages), else a
    new array.
    """
    m, n_labels = targets.shape
    n_nodes = rows.shape[0]
    order = np.argsort(depth[1:], kind="mergesort") + 1  # depth 1 first: children before parents
    lead = np.full((m, 64), -1, np.int32)
    if store.shape[0] > 0:
        cap = store.shape[0]
        mid = store
    else:  # room for every node of every state (no regrowth), within bounds
        cap = max(64, min(m * (n_nodes - 1), max_mid + 1, 4096))
        mid = np.empty((cap, 64), np.int32)
    n_mid = 0
    table_size = 256  # open addressing, stores mid index + 1
    while table_size < 2 * min(cap, 2048):
        table_size *= 2
    table = np.zeros(table_size, np.int64)
    hashes = np.empty(cap, np.uint64)
    canon = np.full(n_nodes, -1, np.int32)
    # a node all of whose characters end in one label (below 63, so its label_mask bit is exact)
    # has the same copy for every state with the same target for that label: single[j] is the
    # label, memo[j, t + 1] the copy for target t (-2: not made yet)
    single = np.full(n_nodes, -1, np.int64)
    max_target = -1
    for q in range(m):
        for lab in range(n_labels):
            max_target = max(max_target, targets[q, lab])
    if n_nodes * (max_target + 2) > 1 << 18:  # too large a memo to fill: no shortcut
        n_single = 1
    else:
        n_single = n_nodes
    for j in range(1, n_single):
        lm = label_mask[j]
        if lm != 0 and lm & (lm - np.uint64(1)) == 0 and lm < (np.uint64(1) << np.uint64(63)):
            lab = 0
            while lm > np.uint64(1):
                lm >>= np.uint64(1)
                lab += 1
            single[j] = lab
    memo = np.full((n_single, max_target + 2 if n_single > 1 else 1), -2, np.int32)
    row = np.empty(64, np.int32)
    weights = np.empty(64, np.uint64)
    for c in range(64):
        weights[c] = _mix(c + 1) | np.uint64(1)
    for q in range(m):
        qmask = np.uint64(0)
        for lab in range(n_labels):
            if targets[q, lab] >= 0:
                qmask |= np.uint64(1) << np.uint64(min(lab, 63))
        if qmask == 0:
            continue
        for j in order:
            canon[j] = -1
            if label_mask[j] & qmask == 0:
                continue
            if single[j] >= 0:
                known = memo[j, targets[q, single[j]] + 1]
                if known != -2:
                    canon[j] = known
                    continue
            live = False
            for c in range(64):
                code = rows[j, c]
                if code == 0:
                    t = -1
                elif code > 0:
                    t = canon[code]
                else:
                    t = targets[q, -1 - code]
                row[c] = t
                if t >= 0:
                    live = True
            if not live:
                if single[j] >= 0:
                    memo[j, targets[q, single[j]] + 1] = -1
                continue
            h = _row_hash(row, weights)
            found, slot = _find_row(table, hashes, mid, row, h)
            if found < 0:
                if n_mid == cap:  # grow the row store
                    cap *= 2
                    mid = _grown_rows(mid, n_mid, cap, 0)
                    hashes = _grown_rows(hashes, n_mid, cap, 0)
                mid[n_mid] = row
                hashes[n_mid] = h
                table[slot] = n_mid + 1
                found = n_mid
                n_mid += 1
                if n_mid > max_mid:
                    return lead, mid[:n_mid]
                if 2 * n_mid > table_size:  # rehash into a table twice as large
                    table_size *= 2
                    table = np.zeros(table_size, np.int64)
                    for k in range(n_mid):
                        s = hashes[k] & np.uint64(table_size - 1)
                        while table[s] != 0:
                            s = (s + np.uint64(1)) & np.uint64(table_size - 1)
                        table[s] = k + 1
            canon[j] = first_mid + found
            if single[j] >= 0:
                memo[j, targets[q, single[j]] + 1] = canon[j]
        for c in range(64):
            code = rows[0, c]
            if code > 0:
                lead[q, c] = canon[code]
            elif code < 0:
                lead[q, c] = targets[q, -1 - code]
    return lead, mid[:n_mid]


@njit(cache=True, nogil=True)
def _add_set(pool, set_off, set_hash, slots, trans, n_sets, slot, h, members):  # pragma: no cover - compiled
    """Store ``members`` as subset ``n_sets`` of a subset construction (hash ``h``, free slot
    ``slot`` of the open-addressing table ``slots``, which holds subset id + 1), growing the
    per-subset arrays (offsets into ``pool``, hashes, ``trans`` rows), the member pool and the
    table (rehashed past half full) as needed. Returns ``(pool, set_off, set_hash, slots,
    trans)``, new arrays where one grew."""
    set_cap = set_hash.shape[0]
    if n_sets == set_cap:
        set_cap *= 2
        grown_off = np.zeros(set_cap + 1, np.int64)
        grown_off[: n_sets + 1] = set_off[: n_sets + 1]
        set_off = grown_off
        grown_hash = np.empty(set_cap, np.uint64)
        grown_hash[:n_sets] = set_hash[:n_sets]
        set_hash = grown_hash
        grown_trans = np.full((set_cap, trans.shape[1]), -1, np.int32)
        grown_trans[:n_sets] = trans[:n_sets]
        trans = grown_trans
    end = set_off[n_sets] + members.shape[0]
    if end > pool.shape[0]:
        grown_pool = np.empty(max(2 * pool.shape[0], end), np.int32)
        grown_pool[: set_off[n_sets]] = pool[: set_off[n_sets]]
        pool = grown_pool
    pool[set_off[n_sets] : end] = members
    set_off[n_sets + 1] = end
    set_hash[n_sets] = h
    slots[slot] = n_sets + 1
    table_size = slots.shape[0]
    if 2 * (n_sets + 1) > table_size:  # rehash
        table_size *= 2
        slots = np.zeros(table_size, np.int64)
        for d in range(n_sets + 1):
            sl = set_hash[d] & np.uint64(table_size - 1)
            while slots[sl] != 0:
                sl = (sl + np.uint64(1)) & np.uint64(table_size - 1)
            slots[sl] = d + 1
    return pool, set_off, set_hash, slots, trans


@njit(
    types.Tuple((_i32_2d, _b1_2d, types.int64))(
        _i64_1d,
        _i32_1d,
        _i64_1d,
        _i32_1d,
        _i32_1d,
        _i64_1d,
        _i32_1d,
        _i32_1d,
        types.int64,
        types.int64,
        types.int64,
    ),
    cache=True,
    nogil=True,
)
def determinize(
    follow_off,
    follow,
    group_off,
    group_members,
    class_of,
    class_off,
    class_atoms,
    start,
    n_patterns,
    n_atoms,
    max_states,
):  # pragma: no cover - compiled
    """Subset construction of a position NFA over atoms.

    NFA state ``i`` reads a character of class ``class_of[i]`` (-1: an accept marker, ``i <
    n_patterns``) and then enters the union of its references ``follow[follow_off[i]:
    follow_off[i+1]]`` (``r >= 0``: ``group_members[group_off[r]:group_off[r+1]]``; ``r < 0``:
    the state ``-1 - r``); class ``c`` is the union of atoms
    ``class_atoms[class_off[c]:class_off[c+1]]``. DFA states are the sorted sets
    of NFA states reached, hash-consed; state 0 is ``start``. Returns ``(table, accepting,
    status)``: ``table[s, a]`` the state after atom ``a`` (-1: the empty set), ``accepting[s, k]``
    whether set ``s`` holds marker ``k``; ``status`` is 1 when more than ``max_states`` sets
    would be needed (the arrays are then incomplete). Sets are kept unsorted: their hash is a sum
    of per-member hashes and equality is checked against the marks of the set being built.
    """
    n_nfa = class_of.shape[0]
    width = max(n_atoms, 1)
    # the sets, stored back to back in `pool`
    pool_cap = 1024
    pool = np.empty(pool_cap, np.int32)
    set_cap = 64
    set_off = np.zeros(set_cap + 1, np.int64)
    set_hash = np.empty(set_cap, np.uint64)
    n_sets = 0
    table_size = 128  # open addressing: set id + 1
    slots = np.zeros(table_size, np.int64)
    trans = np.full((set_cap, width), -1, np.int32)
    # scratch
    mark = np.zeros(n_nfa, np.int64)
    stamp = 0
    buf = np.empty(n_nfa, np.int32)
    bucket_count = np.zeros(width, np.int64)
    bucket_off = np.zeros(width + 1, np.int64)
    bucket = np.empty(0, np.int32)
    touched = np.empty(width, np.int32)
    # the start set
    if start.shape[0] > pool_cap:
        pool_cap = start.shape[0]
        pool = np.empty(pool_cap, np.int32)
    stamp += 1
    h = np.uint64(0)
    n_first = 0
    for x in start:
        if mark[x] != stamp:
            mark[x] = stamp
            pool[n_first] = x
            n_first += 1
            h += _mix(x)
    set_off[1] = n_first
    set_hash[0] = h
    slots[h & np.uint64(table_size - 1)] = 1
    n_sets = 1
    s = 0
    while s < n_sets:
        lo, hi = set_off[s], set_off[s + 1]
        # bucket the members by atom
        n_touched = 0
        total = 0
        for k in range(lo, hi):
            c = class_of[pool[k]]
            if c < 0:
                continue
            for j in range(class_off[c], class_off[c + 1]):
                a = class_atoms[j]
                if bucket_count[a] == 0:
                    touched[n_touched] = a
                    n_touched += 1
                bucket_count[a] += 1
                total += 1
        if bucket.shape[0] < total:
            bucket = np.empty(2 * total, np.int32)
        pos = 0
        for t in range(n_touched):
            a = touched[t]
            bucket_off[a] = pos
            pos += bucket_count[a]
            bucket_count[a] = 0  # reused as a fill cursor
        for k in range(lo, hi):
            i = pool[k]
            c = class_of[i]
            if c < 0:
                continue
            for j in range(class_off[c], class_off[c + 1]):
                a = class_atoms[j]
                bucket[bucket_off[a] + bucket_count[a]] = i
                bucket_count[a] += 1
        prev_off = -1
        prev_cnt = -1
        prev_found = -1
        for t in range(n_touched):
            a = touched[t]
            off_a = bucket_off[a]
            cnt_a = bucket_count[a]
            bucket_count[a] = 0
            if cnt_a == prev_cnt:  # same members as the previous atom (same classes): same target
                same = True
                for k in range(cnt_a):
                    if bucket[off_a + k] != bucket[prev_off + k]:
                        same = False
                        break
                if same:
                    trans[s, a] = prev_found
                    continue
            prev_off = off_a
            prev_cnt = cnt_a
            prev_found = -1
            # the union of the followers of the members reading atom a
            stamp += 1
            n_buf = 0
            h = np.uint64(0)
            for k in range(off_a, off_a + cnt_a):
                i = bucket[k]
                for j in range(follow_off[i], follow_off[i + 1]):
                    r = follow[j]
                    if r < 0:
                        lo_g, hi_g, single = 0, 0, -1 - r
                    else:
                        lo_g, hi_g, single = group_off[r], group_off[r + 1], -1
                    if single >= 0 and mark[single] != stamp:
                        mark[single] = stamp
                        buf[n_buf] = single
                        n_buf += 1
                        h += _mix(single)
                    for g in range(lo_g, hi_g):
                        x = group_members[g]
                        if mark[x] != stamp:
                            mark[x] = stamp
                            buf[n_buf] = x
                            n_buf += 1
                            h += _mix(x)
            if n_buf == 0:
                continue
            slot = h & np.uint64(table_size - 1)
            found = -1
            while slots[slot] != 0:
                d = slots[slot] - 1
                if set_hash[d] == h and set_off[d + 1] - set_off[d] == n_buf:
                    same = True  # same size, so equal iff all of d's members are marked
                    for k in range(set_off[d], set_off[d + 1]):
                        if mark[pool[k]] != stamp:
                            same = False
                            break
                    if same:
                        found = d
                        break
                slot = (slot + np.uint64(1)) & np.uint64(table_size - 1)
            if found < 0:
                if n_sets >= max_states:
                    return trans[:n_sets], np.zeros((n_sets, n_patterns), np.bool_), 1
                found = n_sets
                pool, set_off, set_hash, slots, trans = _add_set(pool, set_off, set_hash, slots, trans, n_sets,
                                                                 slot, h, buf[:n_buf])
                n_sets += 1
                table_size = slots.shape[0]
            trans[s, a] = found
            prev_found = found
        s += 1
    accepting = np.zeros((n_sets, n_patterns), np.bool_)
    for s in range(n_sets):
        for k in range(set_off[s], set_off[s + 1]):
            if pool[k] < n_patterns:
                accepting[s, pool[k]] = True
    return trans[:n_sets].copy(), accepting, 0


@njit(cache=True, nogil=True)
def _group_equal_rows(h, rows):  # pragma: no cover - compiled
    """``(group_of, first)``: a group per row of the 2-D ``rows``, equal exactly for equal rows,
    numbered in order of first appearance, and the first row of each group; ``h`` is a hash of
    each row (equal rows, equal hashes). An open-addressing table on the hash, rows with equal
    hashes compared exactly (linear time; a sort by hash cost more than the rest of a compile)."""
    n = rows.shape[0]
    w = rows.shape[1]
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    size = 1 << bits
    shift = np.uint64(64 - bits)
    slots = np.zeros(size, np.int64)  # group + 1, 0: free
    group_of = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    n_groups = 0
    for i in range(n):
        hi = h[i]
        sl = np.int64((hi * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        found = -1
        while slots[sl] != 0:
            g = slots[sl] - 1
            r = first[g]
            if h[r] == hi:
                same = True
                for j in range(w):
                    if rows[i, j] != rows[r, j]:
                        same = False
                        break
                if same:
                    found = g
                    break
            sl = (sl + 1) & (size - 1)
        if found < 0:
            found = n_groups
            first[found] = i
            slots[sl] = found + 1
            n_groups += 1
        group_of[i] = found
    return group_of, first[:n_groups].copy()


@njit(types.Tuple((_i64_1d, _i64_1d, types.int64, _i64_1d, _i32_1d))(_i64_2d, _i64_1d), cache=True, nogil=True)
def atom_partition(ranges, range_off):  # pragma: no cover - compiled
    """The coarsest partition of code points into atoms such that every class is a union of atoms
    (see ``logitgate.automata.nfa.AtomPartition``). Class ``c`` is the union of the inclusive
    ranges ``ranges[range_off[c]:range_off[c+1]]`` (``[lo, hi]`` rows).

    Returns ``(starts, interval_atom, n_atoms, class_off, class_atoms)``: the elementary intervals
    (cut at every range boundary and at 0x80; interval ``i`` is ``starts[i] .. starts[i+1]-1``,
    the last one runs to the end), each interval's atom (-1: in no class; atoms numbered by first
    interval), and per class the ascending atoms of its union,
    ``class_atoms[class_off[c]:class_off[c+1]]``. Intervals with equal class sets are grouped by a
    hash of the set and then compared exactly."""
    n_classes = range_off.shape[0] - 1
    m = ranges.shape[0]
    pts = np.empty(2 * m + 1, np.int64)
    for k in range(m):
        pts[2 * k] = ranges[k, 0]
        pts[2 * k + 1] = ranges[k, 1] + 1
    pts[2 * m] = 0x80
    pts.sort()
    n_iv = 1
    for k in range(1, pts.shape[0]):
        if pts[k] != pts[k - 1]:
            n_iv += 1
    starts = np.empty(n_iv, np.int64)
    starts[0] = pts[0]
    j = 1
    for k in range(1, pts.shape[0]):
        if pts[k] != pts[k - 1]:
            starts[j] = pts[k]
            j += 1
    # membership of each interval in each class, and a hash of each interval's class set
    member = np.zeros((n_iv, n_classes), np.bool_)
    h = np.zeros(n_iv, np.uint64)
    for c in range(n_classes):
        w = _mix(c + 1) | np.uint64(1)
        for k in range(range_off[c], range_off[c + 1]):
            a = np.searchsorted(starts, ranges[k, 0])
            b = np.searchsorted(starts, ranges[k, 1] + 1)
            for i in range(a, b):
                if not member[i, c]:
                    member[i, c] = True
                    h[i] += w
    # group intervals by class set (groups numbered by first interval); atoms: the groups of
    # non-empty class sets, in the same order
    group_of, first = _group_equal_rows(h, member)
    n_groups = first.shape[0]
    atom_of_group = np.full(n_groups, -1, np.int64)
    atom_rep = np.empty(n_groups, np.int64)
    n_atoms = 0
    for g in range(n_groups):
        r = first[g]
        for c in range(n_classes):
            if member[r, c]:
                atom_of_group[g] = n_atoms
                atom_rep[n_atoms] = r
                n_atoms += 1
                break
    interval_atom = np.empty(n_iv, np.int64)
    for i in range(n_iv):
        interval_atom[i] = atom_of_group[group_of[i]]
    per_class = np.zeros(n_classes, np.int64)  # how many atoms each class has
    for a in range(n_atoms):
        per_class += member[atom_rep[a]]
    class_off = np.zeros(n_classes + 1, np.int64)
    class_off[1:] = np.cumsum(per_class)
    fill = class_off[:-1].copy()
    class_atoms = np.empty(class_off[n_classes], np.int32)
    for a in range(n_atoms):
        r = atom_rep[a]
        for c in range(n_classes):
            if member[r, c]:
                class_atoms[fill[c]] = a
                fill[c] += 1
    return starts, interval_atom, n_atoms, class_off, class_atoms


@njit(types.Tuple((_u8_1d, _i32_2d, _i32_1d))(_i32_2d, _i32_1d), cache=True, nogil=True)
def canonical_classes(columns, byte_column):  # pragma: no cover - compiled
    """Exact byte classes and breadth-first renumbering of a byte DFA whose move on byte ``b``
    from state ``s`` is ``columns[s, byte_column[b]]`` (-1: none; state 0 is the start).

    Bytes with identical columns share a class; classes are numbered by first byte. States are
    renumbered breadth-first from 0, successors in class order; unreachable states are dropped.
    Returns ``(byte_classes, class_transitions, order)``: uint8 ``[256]``, int32 ``[n', k]`` and
    the old id of each new state."""
    n = columns.shape[0]
    width = columns.shape[1]
    # the columns bytes use, in order of first byte
    rank = np.full(width, -1, np.int32)
    used = np.empty(256, np.int32)
    n_used = 0
    for b in range(256):
        c = byte_column[b]
        if rank[c] < 0:
            rank[c] = n_used
            used[n_used] = c
            n_used += 1
    # identical columns share a class, numbered by first appearance: a 32-bit hash and the
    # largest entry of every column (row by row, so the loop runs over contiguous memory), then
    # exact comparison, except between columns with no move at all (the usual case: unused lead
    # and continuation bytes)
    hw = np.full(width, np.uint32(0x811C9DC5), np.uint32)
    top = np.full(width, -1, np.int32)
    for i in range(n):
        row = columns[i]
        for c in range(width):
            hw[c] = (hw[c] ^ np.uint32(row[c] + 2)) * np.uint32(16777619)
            top[c] = max(top[c], row[c])
    cls = np.full(n_used, -1, np.int32)
    class_columns = np.empty(n_used, np.int32)
    n_cls = 0
    for j in range(n_used):
        if cls[j] >= 0:
            continue
        cls[j] = n_cls
        cj = used[j]
        class_columns[n_cls] = cj
        for k in range(j + 1, n_used):
            ck = used[k]
            if cls[k] < 0 and hw[ck] == hw[cj] and top[ck] == top[cj] and (
                    top[cj] < 0 or np.array_equal(columns[:, cj], columns[:, ck])):
                cls[k] = n_cls
        n_cls += 1
    byte_classes = np.empty(256, np.uint8)
    for b in range(256):
        byte_classes[b] = cls[rank[byte_column[b]]]
    # breadth-first renumbering from state 0
    new = np.full(n, -1, np.int32)
    order = np.empty(n, np.int32)
    order[0] = 0
    new[0] = 0
    head = 0
    tail = 1
    while head < tail:
        s = order[head]
        head += 1
        for k in range(n_cls):
            t = columns[s, class_columns[k]]
            if t >= 0 and new[t] < 0:
                new[t] = tail
                order[tail] = t
                tail += 1
    trans = np.empty((tail, n_cls), np.int32)
    for i in range(tail):
        s = order[i]
        for k in range(n_cls):
            t = columns[s, class_columns[k]]
            trans[i, k] = new[t] if t >= 0 else -1
    return byte_classes, trans, order[:tail].copy()


@njit(types.Tuple((types.int64, _i64_1d, _i32_1d))(_i64_1d, _i64_1d), cache=True, nogil=True)
def non_ascii_atoms(starts, interval_atom):  # pragma: no cover - compiled
    """For an atom partition (``starts``, ``interval_atom``): ``(first_na, na_atoms, labels)``,
    the first interval at or above 0x80, the ascending atoms of the intervals from there on, and
    each such interval's index into ``na_atoms`` (-1: in no atom)."""
    first_na = np.searchsorted(starts, 0x80)
    n = interval_atom.shape[0]
    top = 0
    for i in range(first_na, n):
        top = max(top, interval_atom[i] + 1)
    seen = np.zeros(top, np.bool_)
    for i in range(first_na, n):
        if interval_atom[i] >= 0:
            seen[interval_atom[i]] = True
    index = np.full(top, -1, np.int32)
    na_atoms = np.empty(top, np.int64)
    k = 0
    for a in range(top):
        if seen[a]:
            index[a] = k
            na_atoms[k] = a
            k += 1
    labels = np.empty(n - first_na, np.int32)
    for i in range(first_na, n):
        a = interval_atom[i]
        labels[i - first_na] = index[a] if a >= 0 else -1
    return first_na, na_atoms[:k].copy(), labels


@njit(types.Tuple((_i64_1d, _i64_1d))(_i32_2d), cache=True, nogil=True)
def group_rows_i32(a):  # pragma: no cover - compiled
    """``(first, inverse)`` for the rows of ``a``: the first row of each distinct row, in order of
    first appearance, and each row's group (hashed, then compared exactly)."""
    n = a.shape[0]
    w = a.shape[1]
    h = np.empty(n, np.uint64)
    for i in range(n):
        x = np.uint64(0xCBF29CE484222325)
        for j in range(w):
            x = (x ^ np.uint64(a[i, j] + 2)) * np.uint64(0x100000001B3)
        h[i] = x
    inverse, first = _group_equal_rows(h, a)
    return first, inverse


@njit(types.Tuple((_i32_2d, _i32_1d))(_i32_2d, _i64_1d, _i64_1d, _i32_2d, _i64_1d, _i32_2d, _i32_1d), cache=True,
      nogil=True)
def assemble_columns(table, starts, interval_atom, lead, lead_of, mid, out):  # pragma: no cover - compiled
    """The byte-level table of ``logitgate.automata.dfa._expand``: ``(columns, byte_column)`` with
    the move of state ``s`` on byte ``b`` at ``columns[s, byte_column[b]]``. Columns are the
    distinct ASCII atoms (ascending) of the character table ``table`` ([m, atoms]), then 64
    continuation-byte columns (``mid``, the rows of the mid-character nodes, which follow the m
    character states), then 64 lead-byte columns (state ``s`` takes row ``lead_of[s]`` of
    ``lead``; no lead moves when ``lead_of`` is empty) and a last column that is never a move.
    ``columns`` is a view of ``out`` when that is large enough, else a new array."""
    m = table.shape[0]
    n = m + mid.shape[0]
    ascii_atom = np.full(128, -1, np.int64)
    k = 0
    for b in range(128):
        while k + 1 < starts.shape[0] and starts[k + 1] <= b:
            k += 1
        if starts[k] <= b:
            ascii_atom[b] = interval_atom[k]
    top = 0
    for b in range(128):
        top = max(top, ascii_atom[b] + 1)
    col_of = np.full(top, -1, np.int32)
    for b in range(128):
        if ascii_atom[b] >= 0:
            col_of[ascii_atom[b]] = 0
    r = 0
    for a in range(top):
        if col_of[a] == 0:
            col_of[a] = r
            r += 1
    width = r + 129
    byte_column = np.empty(256, np.int32)
    for b in range(128):
        byte_column[b] = col_of[ascii_atom[b]] if ascii_atom[b] >= 0 else width - 1
    for b in range(128, 256):
        byte_column[b] = r + b - 128
    if out.shape[0] >= n * width:
        columns = out[:n * width].reshape((n, width))
        columns[:] = -1
    else:
        columns = np.full((n, width), -1, np.int32)
    for a in range(top):
        c = col_of[a]
        if c >= 0:
            for s in range(m):
                columns[s, c] = table[s, a]
    for i in range(mid.shape[0]):
        for j in range(64):
            columns[m + i, r + j] = mid[i, j]
    if lead_of.shape[0]:
        for s in range(m):
            row = lead_of[s]
            for j in range(64):
                columns[s, r + 64 + j] = lead[row, j]
    return columns, byte_column


@njit(cache=True, nogil=True)
def _dfas_pass(edge_off, edge_cls, edge_tgt, pool, set_off, set_hash, slots, trans, count, touched, bucket_off,
               bucket, k_max, max_states, at):  # pragma: no cover - compiled
    """The subset loop of :func:`determinize_dfas` from subset ``at[0]`` (``at[1]`` subsets so
    far), for as long as its arrays have room for one more subset's successors: returns 0 when
    every subset is expanded, 1 when the caller must grow the arrays (``at`` says where to go on),
    2 past ``max_states`` subsets. Its arrays are never replaced here, so the loop keeps them in
    registers (a loop that may replace them, as growing in place did, ran 3-5 times slower)."""
    width = trans.shape[1]
    table_size = slots.shape[0]
    mask = np.uint64(table_size - 1)
    s = at[0]
    n_sets = at[1]
    while s < n_sets:
        if n_sets + width + 1 > set_hash.shape[0] or set_off[n_sets] + width * k_max > pool.shape[0] \
                or 2 * (n_sets + width + 1) > table_size:
            at[0] = s
            at[1] = n_sets
            return 1
        lo, hi = set_off[s], set_off[s + 1]
        # _scatter_by_class, written out (the call costs as much as the work on a small subset)
        n_touched = 0
        for k in range(lo, hi):
            x = pool[k]
            for j in range(edge_off[x], edge_off[x + 1]):
                c = edge_cls[j]
                if count[c] == 0:
                    touched[n_touched] = c
                    n_touched += 1
                count[c] += 1
        pos = 0
        for i in range(n_touched):
            c = touched[i]
            bucket_off[c] = pos
            pos += count[c]
            count[c] = 0
        for k in range(lo, hi):
            x = pool[k]
            for j in range(edge_off[x], edge_off[x + 1]):
                c = edge_cls[j]
                bucket[bucket_off[c] + count[c]] = edge_tgt[j]
                count[c] += 1
        prev_off = -1
        prev_cnt = -1
        prev_found = -1
        for i in range(n_touched):
            c = touched[i]
            off_c = bucket_off[c]
            n_buf = count[c]
            count[c] = 0
            if n_buf == prev_cnt:  # the same targets as the previous class: the same subset
                same = True
                for k in range(n_buf):
                    if bucket[off_c + k] != bucket[prev_off + k]:
                        same = False
                        break
                if same:
                    trans[s, c] = prev_found
                    continue
            h = np.uint64(0)
            for k in range(n_buf):
                h = (h ^ _mix(bucket[off_c + k])) * np.uint64(0x100000001B3)
            slot = h & mask
            found = -1
            while slots[slot] != 0:
                d = slots[slot] - 1
                if set_hash[d] == h and set_off[d + 1] - set_off[d] == n_buf:
                    same = True
                    base = set_off[d]
                    for k in range(n_buf):
                        if pool[base + k] != bucket[off_c + k]:
                            same = False
                            break
                    if same:
                        found = d
                        break
                slot = (slot + np.uint64(1)) & mask
            if found < 0:
                if n_sets >= max_states:
                    for j in range(i + 1, n_touched):  # leave the class counts zeroed
                        count[touched[j]] = 0
                    at[0] = s
                    at[1] = n_sets
                    return 2
                found = n_sets
                base = set_off[n_sets]
                for k in range(n_buf):
                    pool[base + k] = bucket[off_c + k]
                set_off[n_sets + 1] = base + n_buf
                set_hash[n_sets] = h
                slots[slot] = n_sets + 1
                n_sets += 1
            trans[s, c] = found
            prev_off = off_c
            prev_cnt = n_buf
            prev_found = found
        s += 1
    at[0] = s
    at[1] = n_sets
    return 0


@njit(
    types.Tuple((_i32_2d, _b1_2d, types.int64, _i32_1d, _i64_1d))(
        _i32_2d, _i32_1d, _b1_1d, _i32_1d, types.int64, types.int64
    ),
    cache=True,
    nogil=True,
)
def determinize_dfas(table, pattern_of, accept_of, start, n_patterns, max_states):  # pragma: no cover - compiled
    """Subset construction of the disjoint union of DFAs over one shared alphabet of classes.

    ``table[x, c]``: the move of state ``x`` (an id over all the DFAs, each DFA's states a
    contiguous block in pattern order) on class ``c`` (-1: none); ``pattern_of[x]`` its DFA (the
    pattern it recognises), ``accept_of[x]`` whether it accepts; ``start``: the DFAs' start states,
    ascending. A subset holds at most one state per DFA, so the members of a subset, taken in
    order, move to targets in order: subsets stay sorted without sorting. Each subset scatters
    its members' edges (sparse: most states of a lexer's literals have one) into per-class
    buckets; a bucket equal to the previous one reuses its target. Returns ``(trans, accepting,
    status)`` as :func:`determinize`: state 0 is ``start``, ``accepting[s, k]`` whether subset
    ``s`` holds an accepting state of DFA ``k``; ``status`` 1 when more than ``max_states``
    subsets would be needed; ``(members, member_off)``: subset ``s`` holds the states
    ``members[member_off[s]:member_off[s + 1]]``, ascending (empty on status 1).
    """
    n, width = table.shape
    # the edges of each state, CSR
    edge_off = np.zeros(n + 1, np.int64)
    for x in range(n):
        cnt = 0
        for c in range(width):
            if table[x, c] >= 0:
                cnt += 1
        edge_off[x + 1] = edge_off[x] + cnt
    edge_cls = np.empty(edge_off[n], np.int32)
    edge_tgt = np.empty(edge_off[n], np.int32)
    e = 0
    for x in range(n):
        for c in range(width):
            t = table[x, c]
            if t >= 0:
                edge_cls[e] = c
                edge_tgt[e] = t
                e += 1
    k_max = max(1, start.shape[0])
    pool = np.empty(max(256, 4 * k_max), np.int32)
    set_off = np.zeros(65, np.int64)
    set_hash = np.empty(64, np.uint64)
    slots = np.zeros(128, np.int64)  # open addressing: subset id + 1
    trans = np.full((64, width), -1, np.int32)
    count = np.zeros(width, np.int64)
    bucket_off = np.zeros(width, np.int64)
    bucket = np.empty(width * k_max, np.int32)
    touched = np.empty(width, np.int32)
    h = np.uint64(0)
    for k in range(start.shape[0]):
        pool[k] = start[k]
        h = (h ^ _mix(start[k])) * np.uint64(0x100000001B3)
    set_off[1] = start.shape[0]
    set_hash[0] = h
    slots[h & np.uint64(slots.shape[0] - 1)] = 1
    at = np.zeros(2, np.int64)  # the next subset to expand, the number of subsets
    at[1] = 1
    while True:
        status = _dfas_pass(edge_off, edge_cls, edge_tgt, pool, set_off, set_hash, slots, trans, count, touched,
                            bucket_off, bucket, k_max, max_states, at)
        if status == 0:
            break
        n_sets = at[1]
        if status == 2:
            return (trans[:n_sets], np.zeros((n_sets, n_patterns), np.bool_), 1, np.zeros(0, np.int32),
                    np.zeros(1, np.int64))
        # room for the next subset's successors (at most one new subset per class, each of at
        # most k_max members): grown here, outside the pass, which never replaces its arrays
        need = n_sets + width + 1
        if need > set_hash.shape[0]:
            cap = max(2 * set_hash.shape[0], need)
            grown_off = np.zeros(cap + 1, np.int64)
            grown_off[: n_sets + 1] = set_off[: n_sets + 1]
            set_off = grown_off
            grown_hash = np.empty(cap, np.uint64)
            grown_hash[:n_sets] = set_hash[:n_sets]
            set_hash = grown_hash
            grown_trans = np.full((cap, width), -1, np.int32)
            grown_trans[:n_sets] = trans[:n_sets]
            trans = grown_trans
        if set_off[n_sets] + width * k_max > pool.shape[0]:
            grown_pool = np.empty(max(2 * pool.shape[0], set_off[n_sets] + width * k_max), np.int32)
            grown_pool[: set_off[n_sets]] = pool[: set_off[n_sets]]
            pool = grown_pool
        if 2 * need > slots.shape[0]:
            size = slots.shape[0]
            while 2 * need > size:
                size *= 2
            slots = np.zeros(size, np.int64)
            for d in range(n_sets):
                sl = set_hash[d] & np.uint64(size - 1)
                while slots[sl] != 0:
                    sl = (sl + np.uint64(1)) & np.uint64(size - 1)
                slots[sl] = d + 1
    n_sets = at[1]
    accepting = np.zeros((n_sets, n_patterns), np.bool_)
    for s in range(n_sets):
        for k in range(set_off[s], set_off[s + 1]):
            x = pool[k]
            if accept_of[x]:
                accepting[s, pattern_of[x]] = True
    return trans[:n_sets].copy(), accepting, 0, pool[: set_off[n_sets]].copy(), set_off[: n_sets + 1].copy()


@njit(
    types.Tuple((_i32_2d, _i32_1d, _i32_1d, _b1_1d, _i32_1d))(
        _i32_1d, _i64_1d, _i64_1d, _u8_2d, _b1_1d, _i32_1d, _u8_1d_ro, _i64_1d, _i32_1d
    ),
    cache=True,
    nogil=True,
)
def union_table(flat, state_off, flat_off, byte_classes, acc, patterns, lit, lit_off, lit_patterns):  # pragma: no cover
    """The input of :func:`determinize_dfas` for DFAs given by their class tables, and literals.

    DFA ``j`` (pattern ``patterns[j]``, start state 0) has ``n_j = state_off[j+1] - state_off[j]``
    states, its class table row-major in ``flat[flat_off[j]:flat_off[j+1]]`` and its accepting
    states in ``acc[state_off[j]:state_off[j+1]]``; ``byte_classes[j, b]`` is the class of byte
    ``b`` in DFA ``j``. Literal ``i`` (pattern ``lit_patterns[i]``) is the byte string
    ``lit[lit_off[i]:lit_off[i+1]]``, a chain of states after the DFAs'. The shared classes are
    the groups of bytes that every DFA puts in one class and no literal tells apart, numbered by
    their smallest byte. Returns ``(table, byte_column, pattern_of, accept_of, start)``:
    ``table[x, c]`` the move of global state ``x`` on shared class ``c`` (-1: none),
    ``byte_column[b]`` the shared class of byte ``b``, each global state's pattern and whether it
    accepts, and each part's start (DFAs, then literals).
    """
    k = byte_classes.shape[0]
    n_lit = lit_patterns.shape[0]
    cols = np.full((256, k + 1), -1, np.int32)
    for j in range(k):
        for b in range(256):
            cols[b, j] = byte_classes[j, b]
    for i in range(lit.shape[0]):
        cols[lit[i], k] = lit[i]
    first, inverse = group_rows_i32(cols)
    width = first.shape[0]
    byte_column = inverse.astype(np.int32)
    n_dfa = state_off[k]
    n = n_dfa + lit.shape[0] + n_lit
    table = np.full((n, width), -1, np.int32)
    pattern_of = np.empty(n, np.int32)
    accept_of = np.zeros(n, np.bool_)
    start = np.empty(k + n_lit, np.int32)
    for j in range(k):
        base = state_off[j]
        n_j = state_off[j + 1] - base
        start[j] = base
        m_j = (flat_off[j + 1] - flat_off[j]) // max(n_j, 1)
        for q in range(n_j):
            row = flat_off[j] + q * m_j
            pattern_of[base + q] = patterns[j]
            accept_of[base + q] = acc[base + q]
            for c in range(width):
                t = flat[row + byte_classes[j, first[c]]]
                if t >= 0:
                    table[base + q, c] = t + base
    for i in range(n_lit):
        base = n_dfa + lit_off[i] + i  # literal i's states: one per byte, then the accepting end
        start[k + i] = base
        length = lit_off[i + 1] - lit_off[i]
        for q in range(length + 1):
            pattern_of[base + q] = lit_patterns[i]
        for q in range(length):
            table[base + q, byte_column[lit[lit_off[i] + q]]] = base + q + 1
        accept_of[base + length] = True
    return table, byte_column, pattern_of, accept_of, start


@njit(cache=True, nogil=True)  # compiled into regex_char_dfa, its one caller
def minimal_char_dfa(follow_off, follow, group_off, group_members, class_of, class_off, class_atoms, start, n_atoms,
                     max_states):  # pragma: no cover - compiled
    """The whole character-level half of a one-pattern regex in one call (a compile runs on cold
    caches, where each kernel call and numpy operation costs microseconds): ``determinize``,
    trimming (``coreachable``) and ``hopcroft``. Returns ``(table, accepting, status)``: the
    minimal trimmed DFA over atoms, start 0 (int32 ``[m, n_atoms]``, bool ``[m, 1]``); status 1:
    more than ``max_states`` subsets, 2: the language is empty."""
    table, accepting, status = determinize(follow_off, follow, group_off, group_members, class_of, class_off,
                                           class_atoms, start, 1, n_atoms, max_states)
    if status:
        return table, accepting, 1
    n = table.shape[0]
    live = coreachable(table, accepting)
    if not live[0, 0]:
        return table, accepting, 2
    n_live = 0
    remap = np.full(n, -1, np.int32)
    for s in range(n):
        if live[s, 0]:
            remap[s] = n_live
            n_live += 1
    if n_live < n:
        trimmed = np.empty((n_live, n_atoms), np.int32)
        acc = np.empty((n_live, 1), np.bool_)
        for s in range(n):
            r = remap[s]
            if r >= 0:
                acc[r, 0] = accepting[s, 0]
                for a in range(n_atoms):
                    t = table[s, a]
                    trimmed[r, a] = remap[t] if t >= 0 else -1
        table, accepting = trimmed, acc
    labels = np.empty(n_live, np.int32)
    for s in range(n_live):
        labels[s] = 1 if accepting[s, 0] else 0
    block, reps = hopcroft(table, labels, 2)  # blocks numbered by first state: the start stays 0
    m = reps.shape[0]
    out = np.empty((m, n_atoms), np.int32)
    out_acc = np.empty((m, 1), np.bool_)
    for i in range(m):
        s = reps[i]
        out_acc[i, 0] = accepting[s, 0]
        for a in range(n_atoms):
            t = table[s, a]
            out[i, a] = block[t] if t >= 0 else -1
    return out, out_acc, 0


@njit(cache=True, nogil=True)
def _renumbered_accepting(accepting, order):  # pragma: no cover - compiled
    """Row ``i``: ``accepting[order[i]]``, False beyond its rows (mid-character states)."""
    out = np.zeros((order.shape[0], accepting.shape[1]), np.bool_)
    for i in range(order.shape[0]):
        if order[i] < accepting.shape[0]:
            out[i] = accepting[order[i]]
    return out


@njit((_i32_2d, _b1_2d, _i64_1d, _i64_1d), cache=True, nogil=True)
def ascii_byte_dfa(table, accepting, starts, interval_atom):  # pragma: no cover - compiled
    """``assemble_columns`` then ``canonical_classes`` for a character DFA whose atoms are all
    ASCII (no lead or continuation bytes): ``(byte_classes, class_transitions, accepting)``, the
    last renumbered like the states."""
    columns, byte_column = assemble_columns(table, starts, interval_atom, np.zeros((0, 64), np.int32),
                                            np.zeros(0, np.int64), np.zeros((0, 64), np.int32),
                                            np.zeros(0, np.int32))
    byte_classes, trans, order = canonical_classes(columns, byte_column)
    return byte_classes, trans, _renumbered_accepting(accepting, order)


@njit((_i32_2d, _b1_2d, _i64_1d, _i64_1d, _i64_1d, _i32_2d_ro, _i64_1d_ro, _u64_1d_ro, types.int64, _i32_1d),
      cache=True, nogil=True)
def utf8_byte_dfa(table, accepting, starts, interval_atom, na_atoms, rows, depth, label_mask,
                  max_states, scratch):  # pragma: no cover - compiled
    """``logitgate.automata.dfa._expand`` then ``canonical_classes`` in one call, for a character
    DFA with non-ASCII atoms ``na_atoms`` (from ``non_ascii_atoms``; ``rows``, ``depth``,
    ``label_mask``: their labelled UTF-8 automaton, from ``utf8_label_automaton``): states with
    equal non-ASCII targets share their lead bytes (``group_rows_i32``), ``expand_utf8`` builds
    the mid-character nodes, ``assemble_columns`` the byte table. Returns
    ``(byte_classes, class_transitions, accepting, status, needed)``, ``accepting`` renumbered
    like the states; status 1: more than ``max_states`` byte states. The mid-character rows and
    the byte table are written into ``scratch`` as far as it goes (the caller's reusable buffer:
    fresh pages cost a page fault each, several µs in a virtual machine); ``needed``: the
    ``scratch`` length with which both would have gone there."""
    m = table.shape[0]
    targets = np.empty((m, na_atoms.shape[0]), np.int32)
    for s in range(m):
        for j in range(na_atoms.shape[0]):
            targets[s, j] = table[s, na_atoms[j]]
    first, lead_of = group_rows_i32(targets)
    distinct = np.empty((first.shape[0], targets.shape[1]), np.int32)
    for i in range(first.shape[0]):
        distinct[i] = targets[first[i]]
    # at most one mid row per (distinct row, node), and one more than the cap stops the build
    cap = max(1, min(distinct.shape[0] * (rows.shape[0] - 1), max_states - m + 1))
    if cap * 64 <= scratch.shape[0]:
        store = scratch[:cap * 64].reshape((cap, 64))
    else:
        store = np.empty((0, 64), np.int32)
    lead, mid = expand_utf8(rows, depth, label_mask, distinct, m, max_states - m, store)
    if m + mid.shape[0] > max_states:
        return np.zeros(256, np.uint8), np.zeros((0, 1), np.int32), accepting, 1, 0
    used = mid.shape[0] * 64 if store.shape[0] else 0
    columns, byte_column = assemble_columns(table, starts, interval_atom, lead, lead_of, mid, scratch[used:])
    # the next compile of this size finds room for both: the row store is sized by ``cap``
    needed = max(cap * 64, mid.shape[0] * 64 + columns.shape[0] * columns.shape[1])
    byte_classes, trans, order = canonical_classes(columns, byte_column)
    return byte_classes, trans, _renumbered_accepting(accepting, order), 0, needed


# signatures load compiled code at import, not at the first compile that calls the kernel
@njit((_i64_2d, _i64_1d, _i64_1d, _i32_1d, _i64_1d, _i32_1d, _i32_1d, _i32_1d, types.int64), cache=True, nogil=True)
def regex_char_dfa(ranges, range_off, follow_off, follow, group_off, group_members, class_of, start,
                   max_states):  # pragma: no cover - compiled
    """``atom_partition`` of the classes (``ranges``, ``range_off``) then ``minimal_char_dfa``:
    a one-pattern position NFA to its minimal DFA over atoms in one call. Returns ``(table,
    accepting, status, starts, interval_atom, n_atoms, class_off, class_atoms)``."""
    starts, interval_atom, n_atoms, class_off, class_atoms = atom_partition(ranges, range_off)
    table, accepting, status = minimal_char_dfa(follow_off, follow, group_off, group_members, class_of, class_off,
                                                class_atoms, start, n_atoms, max_states)
    return table, accepting, status, starts, interval_atom, n_atoms, class_off, class_atoms


@njit((_i64_2d, _i64_1d, _i64_1d, _i32_1d, _i64_1d, _i32_1d, _i32_1d, _i32_1d, types.int64), cache=True, nogil=True)
def regex_byte_dfa(ranges, range_off, follow_off, follow, group_off, group_members, class_of, start,
                   max_states):  # pragma: no cover - compiled
    """:func:`regex_char_dfa`, then :func:`ascii_byte_dfa` when every atom is ASCII, in one call
    (a regex compile runs on cold caches, where a kernel call costs ~10 us more than its work).
    Returns ``(status, byte_classes, class_transitions, byte accepting, table, accepting, starts,
    interval_atom)``: status 0 with the byte DFA; 3 when some atom is not ASCII (the byte DFA is
    left to the caller, from the character DFA and its atoms); else ``regex_char_dfa``'s status."""
    table, accepting, status, starts, interval_atom, _, _, _ = regex_char_dfa(
        ranges, range_off, follow_off, follow, group_off, group_members, class_of, start, max_states)
    if status == 0 and starts[starts.shape[0] - 1] <= 0x80:  # the last interval is in no atom
        byte_classes, trans, acc = ascii_byte_dfa(table, accepting, starts, interval_atom)
        return 0, byte_classes, trans, acc, table, accepting, starts, interval_atom
    return (3 if status == 0 else status), np.zeros(256, np.uint8), np.zeros((0, 1), np.int32), accepting, table, \
        accepting, starts, interval_atom


@njit(types.Tuple((_i32_2d, _i32_1d, _i32_1d, types.int64))(_i32_2d, _i32_2d, types.boolean, types.int64),
      cache=True, nogil=True)
def product_dfa(ta, tb, b_complete, max_states):  # pragma: no cover - compiled
    """The reachable part of the product of two DFAs over the same atoms (start 0 in each; -1: no
    move): ``(table, pa, pb, status)``, product state ``s`` the pair ``(pa[s], pb[s])`` (state 0
    the pair of starts). A pair moves where both do. With ``b_complete``, ``b`` is read as
    complete: where it has no move the pair goes on with ``pb == tb.shape[0]``, a sink that never
    moves on (for a difference). ``status`` 1: more than ``max_states`` pairs (then incomplete).
    Pairs are hash-consed by open addressing on ``pa * (nb + 1) + pb``."""
    width = ta.shape[1]
    nb1 = tb.shape[0] + 1
    sink = tb.shape[0]
    cap = 256
    table = np.full((cap, width), -1, np.int32)
    pa = np.empty(cap, np.int32)
    pb = np.empty(cap, np.int32)
    size = 1024  # hash slots: pair key, its state
    keys = np.full(size, -1, np.int64)
    vals = np.empty(size, np.int32)
    pa[0] = 0
    pb[0] = 0
    keys[_mix(0) & np.uint64(size - 1)] = 0
    vals[_mix(0) & np.uint64(size - 1)] = 0
    n = 1
    s = 0
    while s < n:
        a = pa[s]
        b = pb[s]
        for x in range(width):
            a2 = ta[a, x]
            if a2 < 0:
                continue
            if b == sink:
                b2 = sink
            else:
                b2 = tb[b, x]
                if b2 < 0:
                    if not b_complete:
                        continue
                    b2 = sink
            key = np.int64(a2) * nb1 + b2
            sl = _mix(key) & np.uint64(size - 1)
            while keys[sl] != -1 and keys[sl] != key:
                sl = (sl + np.uint64(1)) & np.uint64(size - 1)
            if keys[sl] == key:
                table[s, x] = vals[sl]
                continue
            if n >= max_states:
                return table[:n], pa[:n], pb[:n], 1
            if n == cap:
                cap *= 2
                table = _grown_rows(table, n, cap, -1)  # -1: no move (yet)
                pa = _grown_rows(pa, n, cap, 0)
                pb = _grown_rows(pb, n, cap, 0)
            keys[sl] = key
            vals[sl] = n
            pa[n] = a2
            pb[n] = b2
            table[s, x] = n
            n += 1
            if 2 * n > size:  # keep the load under one half
                size *= 2
                k2 = np.full(size, -1, np.int64)
                v2 = np.empty(size, np.int32)
                for j in range(size // 2):
                    if keys[j] != -1:
                        t = _mix(keys[j]) & np.uint64(size - 1)
                        while k2[t] != -1:
                            t = (t + np.uint64(1)) & np.uint64(size - 1)
                        k2[t] = keys[j]
                        v2[t] = vals[j]
                keys = k2
                vals = v2
        s += 1
    return table[:n].copy(), pa[:n].copy(), pb[:n].copy(), 0
