"""Token-trie kernels: build the flat pre-order trie, walk it under a byte DFA to fill a token
mask, and step a DFA over one token's bytes.

Trie layout (see ``logitgate.vocab.trie``): node 0 is the root; for node ``i > 0``
``node_byte[i]`` is the byte on the edge into it, ``node_depth[i]`` its depth (root = 0),
``subtree_end[i]`` the index just past its subtree in pre-order, and the tokens whose bytes end
exactly at ``i`` are ``node_tokens[tok_off[i]:tok_off[i + 1]]``.
"""
from __future__ import annotations

import numpy as np
from numba import types

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit, walk_njit

_i32_1d = types.Array(types.int32, 1, "C")
_i32_1d_ro = types.Array(types.int32, 1, "C", readonly=True)
_u8_1d_ro = types.Array(types.uint8, 1, "C", readonly=True)
_u32_1d = types.Array(types.uint32, 1, "C")
_u32_1d_ro = types.Array(types.uint32, 1, "C", readonly=True)
_i32_2d_ro = types.Array(types.int32, 2, "C", readonly=True)


@njit(
    types.Tuple((_i32_1d, _i32_1d, _i32_1d, _i32_1d, _i32_1d, _i32_1d))(_u8_1d_ro, _i32_1d_ro, _i32_1d_ro),
    cache=True,
    nogil=True,
)
def build_trie(flat, offsets, order):  # pragma: no cover - compiled
    """Build the pre-order trie from token bytes.

    ``flat[offsets[t]:offsets[t+1]]`` are token t's bytes; ``order`` lists the token ids to insert
    sorted lexicographically by their bytes (empty tokens excluded). Returns
    ``(node_byte, node_depth, subtree_end, tok_off, node_tokens, token_node)`` as int32 arrays;
    ``token_node[t]`` is the node where token t ends (-1 for tokens not inserted).
    """
    n_tok_total = offsets.shape[0] - 1
    m = order.shape[0]
    # pass 1: common prefix with the previous token; a token adds one node per byte past it
    lcps = np.zeros(m, np.int32)
    n_nodes = 1
    for k in range(m):
        t = order[k]
        a0 = offsets[t]
        la = offsets[t + 1] - a0
        lcp = 0
        if k > 0:
            b0 = offsets[order[k - 1]]
            lim = min(la, offsets[order[k - 1] + 1] - b0)
            while lcp < lim and flat[a0 + lcp] == flat[b0 + lcp]:
                lcp += 1
        lcps[k] = lcp
        n_nodes += la - lcp
    node_byte = np.zeros(n_nodes, np.int32)
    node_depth = np.zeros(n_nodes, np.int32)
    subtree_end = np.zeros(n_nodes, np.int32)
    token_node = np.full(n_tok_total, -1, np.int32)
    maxlen = 0
    for k in range(m):
        t = order[k]
        maxlen = max(maxlen, offsets[t + 1] - offsets[t])
    path = np.zeros(maxlen + 1, np.int32)  # path[d] = node at depth d on the current branch
    path[0] = 0
    depth_now = 0  # depth of the deepest node on the current branch
    nxt = 1
    for k in range(m):
        t = order[k]
        a0 = offsets[t]
        la = offsets[t + 1] - a0
        lcp = lcps[k]
        # close the nodes deeper than the common prefix: their subtrees end here
        while depth_now > lcp:
            subtree_end[path[depth_now]] = nxt
            depth_now -= 1
        for d in range(lcp, la):
            node_byte[nxt] = flat[a0 + d]
            node_depth[nxt] = d + 1
            path[d + 1] = nxt
            nxt += 1
        depth_now = la
        token_node[t] = path[la]
    while depth_now > 0:
        subtree_end[path[depth_now]] = nxt
        depth_now -= 1
    subtree_end[0] = nxt
    # tokens per node (CSR); a node can end several tokens with identical bytes
    tok_off = np.zeros(n_nodes + 1, np.int32)
    for k in range(m):
        tok_off[token_node[order[k]] + 1] += 1
    for i in range(n_nodes):
        tok_off[i + 1] += tok_off[i]
    fill = tok_off[:-1].copy()
    node_tokens = np.zeros(m, np.int32)
    for k in range(m):
        t = order[k]
        nd = token_node[t]
        node_tokens[fill[nd]] = t
        fill[nd] += 1
    return node_byte, node_depth, subtree_end, tok_off, node_tokens, token_node


_i64_1d_ro = types.Array(types.int64, 1, "C", readonly=True)

# Packed node record: bits 0-7 edge byte, 8-23 depth, 24-55 (first token id + 1, 0 = none).
NODE_BYTE_MASK = 0xFF
NODE_DEPTH_SHIFT = 8
NODE_DEPTH_MASK = 0xFFFF
NODE_TOKEN_SHIFT = 24


def class_table(class_transitions: np.ndarray) -> np.ndarray:
    """The flat form of a DFA's class table that :func:`fill_masks_dfa` walks: entry
    ``s * n_classes + c`` holds the next state's row offset (``next * n_classes``), or -1 for a
    dead move, so a step is one load with no multiplication (int32, read-only)."""
    n_states, n_classes = class_transitions.shape
    if n_states * n_classes >= 2**31:  # every offset is below n_states * n_classes
        raise ValueError("DFA class table too large for int32 row offsets")
    out = _row_offsets(np.ascontiguousarray(class_transitions, dtype=np.int32))
    out.setflags(write=False)
    return out


@njit([_i32_1d(_i32_2d_ro), _i32_1d(types.Array(types.int32, 2, "C"))], cache=True, nogil=True)
def _row_offsets(table):  # pragma: no cover - compiled
    """``table`` flattened, each next state ``t`` as its row offset ``t * n_classes`` (-1 stays)."""
    n_states, n_classes = table.shape
    out = np.empty(n_states * n_classes, np.int32)
    flat = table.reshape(-1)
    m = np.int32(n_classes)
    for k in range(flat.shape[0]):
        t = flat[k]
        out[k] = (t * m) | (t >> np.int32(31))  # -1 (all ones) stays -1, without a branch
    return out


_u32_2d = types.Array(types.uint32, 2, "C")


@njit(cache=True, nogil=True)
def live_bytes(class_transitions, byte_class):  # pragma: no cover - compiled
    """For each state of a class table, how many of the 256 bytes do not lead to the dead state."""
    n_states, n_classes = class_transitions.shape
    size = np.zeros(n_classes, np.int32)
    for b in range(256):
        size[byte_class[b]] += 1
    live = np.zeros(n_states, np.int32)
    for s in range(n_states):
        n = 0
        for c in range(n_classes):
            if class_transitions[s, c] >= 0:
                n += size[c]
        live[s] = n
    return live


@njit((_i32_2d_ro, _u8_1d_ro, types.Array(types.boolean, 2, "C", readonly=True)), cache=True, nogil=True)
def walk_tables(class_transitions, byte_classes, accepting):  # pragma: no cover - compiled
    """What a compiled regex walks, from its DFA's arrays in one call (a compile runs on cold
    caches, where each numpy operation costs microseconds): the flat row-offset table of
    :func:`class_table` (the caller checks its size), the byte classes as int32, whether each
    state accepts (pattern 0) and how many bytes lead on from each state (see
    :func:`_fill_masks_dfa`)."""
    table = _row_offsets(class_transitions)
    byte_class = byte_classes.astype(np.int32)
    n_states = class_transitions.shape[0]
    acc = np.empty(n_states, np.bool_)
    for s in range(n_states):
        acc[s] = accepting[s, 0]
    return table, byte_class, acc, live_bytes(class_transitions, byte_class)


@njit(types.void(_u32_1d, _i32_1d_ro, _i32_1d_ro), cache=True, nogil=True)
def copy_dups(out, dup_first, dup_other):  # pragma: no cover - compiled
    """Set token ``dup_other[k]`` in ``out`` wherever ``dup_first[k]`` (same bytes) is set."""
    for k in range(dup_first.shape[0]):
        a = dup_first[k]
        if (out[a >> 5] >> np.uint32(a & 31)) & np.uint32(1):
            b = dup_other[k]
            out[b >> 5] |= np.uint32(1) << np.uint32(b & 31)


@njit(cache=True, nogil=True)
def ascii_bfs_rows(table, byte_class, n_classes, first, limit):  # pragma: no cover - compiled
    """Row offsets of up to ``limit`` states of a flat class table (see :func:`class_table`),
    breadth-first from the state at row ``first`` (included) over ASCII bytes only: the states an
    ASCII text meets first, each once."""
    ascii_cls = np.zeros(n_classes, np.bool_)
    for b in range(128):
        ascii_cls[byte_class[b]] = True
    classes = np.flatnonzero(ascii_cls)
    seen = np.zeros(table.shape[0] // n_classes, np.bool_)
    out = np.empty(max(limit, 1), np.int32)
    out[0] = first
    seen[first // n_classes] = True
    count = 1
    head = 0
    while head < count and count < limit:
        r = out[head]
        head += 1
        for c in classes:
            s = table[r + c]
            if s >= 0 and not seen[s // n_classes]:
                seen[s // n_classes] = True
                out[count] = s
                count += 1
                if count == limit:
                    break
    return out[:count]


@walk_njit
def _fill_masks_dfa(table, byte_class, rows, root_child, nodes, subtree_end, dup_first, dup_other, stack, out,
                    budget, root_fanout, root_grand, live, n_classes):  # pragma: no cover - compiled
    """Fill ``out[k]`` with the mask of the DFA state at row offset ``rows[k]``, for ``k = 0, 1,
    ...`` while at most ``budget`` trie nodes have been visited in all (a row's fixed work counts
    as ``16 + words / 4`` visits, mostly for the first touch of fresh memory; the first state is
    always done, a later one that would pass the budget is left unfinished); returns how many rows
    were filled. ``out`` may be uninitialised: a row is zeroed before its walk. ``stack`` is
    scratch for the DFA state per depth (the trie's depth + 1 entries; the kernel allocates nothing,
    so it runs without numba's reference counting, see ``kernels.walk_njit``).

    A token is set when its bytes lead the DFA to a live state. ``table[row + byte_class[b]]`` is
    the next state's row offset, -1 when dead (see :func:`class_table`); a dead byte prunes the
    whole subtree below it. The root's children are found through ``root_child[b]`` (the node of
    byte ``b``, -1: none), so a dead first byte costs no trie access. A row holds the mask's
    uint32 words (bit t = token t) plus one spare word at the end, where nodes that end no token
    set a bit, so the loop has no branch per token (the caller ignores that word). Tokens sharing
    their bytes with an earlier id (``dup_other[j]`` duplicates ``dup_first[j]``) are copied
    over at the end.

    A wide root child (``root_fanout[b]`` children, 0 when few; ``root_grand[b * 256 + c]`` its
    child on byte ``c``) whose state lets at most half as many bytes on (``live[state]``, states
    numbered ``row // n_classes``) is entered through that index: only the children on live bytes
    are read, not all of them (``" "`` has 124 children in a 131k vocabulary, scattered over a
    million-node array, and a phone-number state lets ten digits on). ``root_fanout`` all zero
    walks every subtree the plain way."""
    spare = (out.shape[1] - 1) * 32 + 1  # token -1 (none) + spare = the spare word's bit 0
    visited = 0
    per_row = 16 + (out.shape[1] >> 2)  # a row's first touch (page faults), zeroing and root check, in visits
    for k in range(rows.shape[0]):
        visited += per_row
        if k > 0 and visited > budget:
            return k
        mask = out[k]
        mask[:] = 0
        row = rows[k]
        stack[0] = row
        for b in range(256):
            j = root_child[b]
            if j < 0:
                continue
            s = table[row + byte_class[b]]
            if s < 0:
                continue
            fan = root_fanout[b]
            if fan > 0 and live[s // n_classes] * 2 <= fan:
                # the root child itself, then its subtrees on live bytes only
                stack[1] = s
                r = nodes[j]
                t = (r >> 24) - 1
                t += (t >> 63) & spare
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                visited += 16  # the byte scan
                lo = b * 256
                for c in range(256):
                    ch = root_grand[lo + c]
                    if ch < 0 or table[s + byte_class[c]] < 0:
                        continue
                    visited = _walk_subtree(table, byte_class, nodes, subtree_end, ch, stack, mask, spare, visited,
                                            budget, k > 0)
                    if visited < 0:
                        return k  # row k is left unfinished
                continue
            visited = _walk_subtree(table, byte_class, nodes, subtree_end, j, stack, mask, spare, visited, budget,
                                    k > 0)
            if visited < 0:
                return k  # row k is left unfinished
        copy_dups(mask, dup_first, dup_other)
    return rows.shape[0]


@njit(cache=True, nogil=True, inline="always")
def _walk_subtree(table, byte_class, nodes, subtree_end, j, stack, mask, spare, visited, budget,
                  stoppable):  # pragma: no cover - compiled
    """:func:`_fill_masks_dfa`'s walk of the subtree of node ``j`` (its parent's state on
    ``stack``): the visits so far, or -1 once they pass ``budget`` (when ``stoppable``)."""
    # unsigned indices: numba gives a signed index a test for negative values (Python's wrap
    # around) at each access, which cost ~40% of this loop (a 266k-node walk: 1.0 -> 0.6 ms)
    one = np.uint64(1)
    i = np.uint64(j)
    end = np.uint64(subtree_end[j])
    while i < end:
        visited += 1
        if visited > budget and stoppable:
            return -1
        r = nodes[i]
        d = np.uint64((r >> 8) & 0xFFFF)
        s = table[np.uint64(stack[d - one]) + np.uint64(byte_class[np.uint64(r & 0xFF)])]
        if s < 0:
            i = np.uint64(subtree_end[i])
            continue
        stack[d] = s
        t = (r >> 24) - 1
        t = np.uint64(t + ((t >> 63) & spare))
        mask[t >> np.uint64(5)] |= np.uint32(1) << np.uint32(t & np.uint64(31))
        i += one
    return visited


@njit((_i32_1d_ro, _i32_1d_ro, types.int64, types.int32, types.int64, _i32_1d_ro, _i64_1d_ro, _i32_1d_ro, _i32_1d_ro,
       _i32_1d_ro, types.int64, types.int64, types.Array(types.boolean, 1, "C"), _u32_1d_ro, _i32_1d_ro, _i32_1d_ro,
       _i32_1d_ro), cache=True, nogil=True)  # loaded at import
def first_batch_masks(table, byte_class, n_classes, first, limit, root_child, nodes, subtree_end, dup_first, dup_other,
                      max_depth, budget, accepting, eos, root_fanout, root_grand, live):  # pragma: no cover - compiled
    """:func:`ascii_bfs_rows` then :func:`_fill_masks_dfa` in one call (a regex's first mask
    request, on the cold caches of a fresh compile, where each call costs microseconds): the
    masks of the state at row ``first`` and of the states an ASCII text meets next, within
    ``budget`` visits, with the bits of ``eos`` (a mask: one word per 32 tokens) set in those of
    the states that ``accepting``. Returns ``(rows, out)``, ``out[k]`` (the mask's words and the
    walk's spare one) the mask of ``rows[k]``, as many rows as were filled."""
    rows = ascii_bfs_rows(table, byte_class, n_classes, first, limit)
    words = eos.shape[0]
    out = np.empty((rows.shape[0], words + 1), np.uint32)
    done = _fill_masks_dfa(table, byte_class, rows, root_child, nodes, subtree_end, dup_first, dup_other,
                           np.empty(max_depth + 1, np.int32), out, budget, root_fanout, root_grand, live, n_classes)
    for k in range(done):
        if accepting[rows[k] // n_classes]:
            for w in range(words):
                if eos[w]:  # (few words have EOS bits: an OR over the row would write it all)
                    out[k, w] |= eos[w]
    return rows[:done], out[:done]


@njit(cache=True, nogil=True, inline="always")
def _plain_estimate(table, byte_class, row, root_child, subtree_end):  # pragma: no cover - compiled
    """The nodes a walk from ``row`` would at most visit: the subtrees of the live root children."""
    n = 0
    for b in range(256):
        j = root_child[b]
        if j >= 0 and table[row + byte_class[b]] >= 0:
            n += subtree_end[j] - j
    return n


@njit(cache=True, nogil=True, inline="always")
def _estimates(table, byte_class, row, ref, root_child, subtree_end, root_fanout,
               root_grand):  # pragma: no cover - compiled
    """``(live, differ)``, two bytes into the trie: ``live`` the nodes below the nodes live from
    ``row`` (whole subtrees of the root's narrow children; below the grandchildren of its wide
    ones, those with a ``root_grand`` index), a bound on what a walk from ``row`` visits;
    ``differ`` (with ``ref >= 0``) the nodes below those where the states reached from ``row``
    and from ``ref`` differ, a bound on what :func:`_pair_walk` visits (less the root's children
    and grandchildren)."""
    live = 0
    differ = 0
    for b in range(256):
        j = root_child[b]
        if j < 0:
            continue
        c = byte_class[b]
        s = table[row + c]
        q = table[ref + c] if ref >= 0 else -1
        if s < 0 and q < 0:
            continue
        size = subtree_end[j] - j
        if root_fanout[b] == 0 or s < 0 or (q < 0 and ref >= 0):
            if s >= 0:
                live += size
            if ref >= 0 and s != q:
                differ += size
            continue
        lo = b * 256
        for c2 in range(256):
            g = root_grand[lo + c2]
            if g < 0:
                continue
            s2 = table[s + byte_class[c2]]
            q2 = table[q + byte_class[c2]] if ref >= 0 else -1
            if s2 >= 0:
                live += subtree_end[g] - g
            if ref >= 0 and s2 != q2:
                differ += subtree_end[g] - g
    return live, differ


@njit(cache=True, nogil=True)
def _pair_walk(table, byte_class, row, ref, root_child, nodes, subtree_end, stack, ref_stack, mask,
               budget):  # pragma: no cover - compiled
    """Turn ``mask``, the walk's mask of the state at row offset ``ref`` (its spare word
    included, before EOS and duplicate bits are settled), into that of ``row``: walk the trie
    with both states side by side and skip every subtree where they reach the same state (or
    both die), since its bits are already right; where only ``ref`` dies, set the bits below as
    a plain walk does; where only ``row`` dies, clear the subtree's bits. Returns the nodes
    visited, or -1 once they pass ``budget`` (``mask`` is then left half done)."""
    spare = (mask.shape[0] - 1) * 32 + 1  # token -1 (none) + spare = the spare word's bit 0
    one = np.uint64(1)
    visited = 0
    stack[0] = row
    ref_stack[0] = ref
    for b in range(256):
        j = root_child[b]
        if j < 0:
            continue
        i = np.uint64(j)
        end = np.uint64(subtree_end[j])
        while i < end:
            visited += 1
            if visited > budget:
                return -1
            r = nodes[i]
            d = np.uint64((r >> 8) & 0xFFFF)
            c = np.uint64(byte_class[np.uint64(r & 0xFF)])
            p = stack[d - one]
            s = table[np.uint64(p) + c] if p >= 0 else -1
            p = ref_stack[d - one]
            q = table[np.uint64(p) + c] if p >= 0 else -1
            if s == q:  # the same state, or both dead: the same bits below as in the reference
                i = np.uint64(subtree_end[i])
                continue
            if s < 0:  # dead from row only: no token of the subtree is allowed
                e = np.uint64(subtree_end[i])
                visited += int(e - i)
                while i < e:
                    t = (nodes[i] >> 24) - 1
                    t = np.uint64(t + ((t >> 63) & spare))
                    mask[t >> np.uint64(5)] &= ~(np.uint32(1) << np.uint32(t & np.uint64(31)))
                    i += one
                continue
            t = (r >> 24) - 1
            t = np.uint64(t + ((t >> 63) & spare))
            mask[t >> np.uint64(5)] |= np.uint32(1) << np.uint32(t & np.uint64(31))
            stack[d] = s
            ref_stack[d] = q
            i += one
    return visited


@njit(cache=True, nogil=True, inline="always")
def _sync_dups(mask, dup_first, dup_other):  # pragma: no cover - compiled
    """Give token ``dup_other[k]`` the bit of ``dup_first[k]`` (set or cleared)."""
    for k in range(dup_first.shape[0]):
        f = dup_first[k]
        o = dup_other[k]
        bit = np.uint32(1) << np.uint32(o & 31)
        if (mask[f >> 5] >> np.uint32(f & 31)) & np.uint32(1):
            mask[o >> 5] |= bit
        else:
            mask[o >> 5] &= ~bit


@njit(types.int64(_i32_1d_ro, _i32_1d_ro, types.int64, types.int64, _i32_1d_ro, _i64_1d_ro, _i32_1d_ro, _i32_1d_ro,
                  _i32_1d_ro, types.int64, _i32_1d_ro, _i32_1d_ro, _i32_1d_ro, types.boolean, _u32_1d_ro, _i32_1d,
                  _i32_1d, types.Array(types.int64, 1, "C"), types.Array(types.uint32, 2, "C"), types.int64,
                  types.int64),
      cache=True, nogil=True)  # loaded at import
def state_mask(table, byte_class, n_classes, row, root_child, nodes, subtree_end, dup_first, dup_other, max_depth,
               root_fanout, root_grand, live, accepting, eos, out, ref_rows, ref_reach, ref_masks, slot,
               min_nodes):  # pragma: no cover - compiled
    """The mask of the one state at row offset ``row`` into ``out`` (int32, the mask's words and
    the walk's spare one), with the bits of ``eos`` set when ``accepting``: a regex's later mask
    requests, in one call that takes the fewest arguments to convert (see :func:`_fill_masks_dfa`).

    A state whose walk may visit ``min_nodes`` nodes or more, two bytes in (see
    :func:`_estimates`; a free-text span lets most of the vocabulary on), is *heavy*. With
    ``slot >= 0``, the masks of recent heavy states, before their EOS bits, are kept in
    ``ref_masks`` (their row offsets in ``ref_rows``, -1: empty; their estimates in
    ``ref_reach``): a heavy state is derived from one of them by :func:`_pair_walk` when the two
    states are alike (they differ below at most a quarter of its nodes, two bytes in), and its own
    mask is stored at ``slot``. Returns 0 (a plain walk), 1 (a heavy state, walked and stored) or 2
    (derived from a kept mask, and stored)."""
    words = out.shape[0] - 1
    mask = out.view(np.uint32)
    how = 0
    reach = 0
    if slot >= 0 and _plain_estimate(table, byte_class, row, root_child, subtree_end) >= min_nodes:
        reach = _estimates(table, byte_class, row, -1, root_child, subtree_end, root_fanout, root_grand)[0]
        if reach >= min_nodes:
            how = 1
            stack = np.empty(max_depth + 1, np.int32)
            ref_stack = np.empty(max_depth + 1, np.int32)
            for k in range(ref_rows.shape[0]):
                ref = ref_rows[k]
                # the nodes live from one state only are among those where the two differ
                if ref < 0 or abs(reach - ref_reach[k]) * 4 > reach:
                    continue
                differ = _estimates(table, byte_class, row, ref, root_child, subtree_end, root_fanout, root_grand)[1]
                if differ * 4 > reach:
                    continue
                mask[:] = ref_masks[k]
                # the bound plus the root's children and grandchildren: the walk fails only if the
                # estimate was wrong, and then costs little more than a quarter of a plain walk
                if _pair_walk(table, byte_class, row, ref, root_child, nodes, subtree_end, stack, ref_stack, mask,
                              differ + 65_536 + 256) >= 0:
                    _sync_dups(mask, dup_first, dup_other)
                    how = 2
                    break
    if how < 2:
        rows = np.empty(1, np.int32)
        rows[0] = row
        _fill_masks_dfa(table, byte_class, rows, root_child, nodes, subtree_end, dup_first, dup_other,
                        np.empty(max_depth + 1, np.int32), mask.reshape((1, words + 1)), 1 << 62,
                        root_fanout, root_grand, live, n_classes)
    if how > 0:
        ref_masks[slot] = mask
        ref_rows[slot] = row
        ref_reach[slot] = reach
    if accepting:
        for w in range(words):
            if eos[w]:
                out[w] |= np.int32(eos[w])
    return how


@njit(
    types.int64(_i32_1d_ro, _i32_1d_ro, _i32_1d_ro, _i32_1d_ro, _i64_1d_ro, _i32_1d_ro, _i32_1d_ro, _i32_1d_ro,
                types.int64, _u32_2d, types.int64, _i32_1d_ro, _i32_1d_ro, _i32_1d_ro, types.int64),
    cache=True,
    nogil=True,
)
def fill_masks_dfa(table, byte_class, rows, root_child, nodes, subtree_end, dup_first, dup_other, max_depth, out,
                   budget, root_fanout, root_grand, live, n_classes):  # pragma: no cover - compiled
    """See :func:`_fill_masks_dfa`."""
    return _fill_masks_dfa(table, byte_class, rows, root_child, nodes, subtree_end, dup_first, dup_other,
                           np.empty(max_depth + 1, np.int32), out, budget, root_fanout, root_grand, live, n_classes)


@njit(types.int32(_i32_1d_ro, _i32_1d_ro, types.int32, _u8_1d_ro, types.int64, types.int64), cache=True, nogil=True)
def dfa_walk(table, byte_class, row, flat, start, end):  # pragma: no cover - compiled
    """Step the DFA from the state at row offset ``row`` of its flat class table (see
    :func:`class_table`) over ``flat[start:end]``: the row offset reached, -1 as soon as it dies."""
    r = row
    for k in range(start, end):
        r = table[r + byte_class[flat[k]]]
        if r < 0:
            return -1
    return r


@njit(cache=True, nogil=True)
def plain_text_lengths(flat, offsets, token_node):  # pragma: no cover - compiled
    """For each token: its length in characters when its bytes are complete, valid UTF-8 text
    of characters other than ``"``, ``\\``, U+0000-U+001F and U+007F (the body of a JSON
    string; DEL is left out because grammars often refuse it, llama.cpp's ``json.gbnf`` among
    them, and one refused plain character makes no state a string body), else -1 (also for
    tokens not in the trie, ``token_node < 0``, and empty ones)."""
    n = token_node.shape[0]
    out = np.full(n, -1, np.int32)
    for t in range(n):
        if token_node[t] < 0:
            continue
        i = offsets[t]
        end = offsets[t + 1]
        if i == end:
            continue
        chars = 0
        ok = True
        while i < end:
            b = flat[i]
            if b < 0x80:
                if b < 0x20 or b == 0x22 or b == 0x5C or b == 0x7F:
                    ok = False
                    break
                i += 1
            else:
                if 0xC2 <= b <= 0xDF:
                    k, lo, hi = 1, 0x80, 0xBF
                elif b == 0xE0:
                    k, lo, hi = 2, 0xA0, 0xBF
                elif 0xE1 <= b <= 0xEC or 0xEE <= b <= 0xEF:
                    k, lo, hi = 2, 0x80, 0xBF
                elif b == 0xED:
                    k, lo, hi = 2, 0x80, 0x9F
                elif b == 0xF0:
                    k, lo, hi = 3, 0x90, 0xBF
                elif 0xF1 <= b <= 0xF3:
                    k, lo, hi = 3, 0x80, 0xBF
                elif b == 0xF4:
                    k, lo, hi = 3, 0x80, 0x8F
                else:
                    ok = False
                    break
                if i + k >= end:  # the character is cut off at the token's end
                    ok = False
                    break
                c = flat[i + 1]
                if c < lo or c > hi:
                    ok = False
                    break
                for j in range(2, k + 1):
                    c = flat[i + j]
                    if c < 0x80 or c > 0xBF:
                        ok = False
                        break
                if not ok:
                    break
                i += k + 1
            chars += 1
        if ok:
            out[t] = chars
    return out
