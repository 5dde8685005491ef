"""Earley parser and lexer kernels over flat arrays: push a chart row for a set of scanned
terminals, step the lexer by one byte, and walk the token trie with both to fill a token mask.

Arguments are grouped in tuples of arrays (numba passes them as one value):

``G`` — grammar tables (``logitgate.grammar.engine.ParserTables``): dotted rules are numbered
``dr``; ``dr_next[dr]`` is the symbol after the dot (terminal ``< n_term``, nonterminal
``n_term + A``, ``-1`` when complete), ``dr_lhs[dr]`` the rule's left-hand nonterminal,
``pred_ptr``/``pred_dr`` the dotted rules with the dot at the start for each nonterminal (CSR),
``nullable[A]``, ``n_term``, ``accept_dr`` (the augmented start rule, complete).

``C`` — the chart (one per matcher, grown by the caller when a kernel reports FULL_*): items
``(it_dr[i], it_org[i])``; row ``k`` holds items ``row_ptr[k]:row_ptr[k+1]``; ``row_exp[k]`` is the
bitset of terminals expected next; ``row_acc[k]`` whether the start rule is complete from row 0;
``row_fp[k]`` a 128-bit fingerprint of the row that also covers the rows its items point back to,
so equal fingerprints mean the same parser future (a sound cache key for masks); a per-row hash
table (``hkey``/``hgen``) dedups items; ``meta[0]`` = number of rows, ``meta[1]`` = hash generation.
Nullable rules follow Aycock and Horspool: predicting a nullable nonterminal also advances over
it, so completions never look into the row being built.

``L`` — the lexer (``logitgate.grammar.lexer.LexerTables``): one byte DFA ``trans`` for all
terminals; ``acc_ptr``/``acc_list`` (and ``acc_bits``) the terminals a state matches,
``reach_bits[s]`` the terminals still reachable from ``s``; ``rank[t]`` orders matches of the same
length (priority, then literals first); ``mode`` 0 = contextual (only terminals the parser
expects, plus ignored ones, compete), 1 = global (all terminals compete, the winner must be
expected); ``lazy_bits`` terminals that end as soon as they match.

``M`` — a walk's scratch and a row table (one per thread and engine): a row pushed on top of
a row of a given fingerprint for given terminals is always the same, so the walks answer such a
push from the table, writing only what a walk reads of a row (see :func:`push_memo`).
"""
from __future__ import annotations

import numpy as np

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit, walk_njit

OK = 1
REJECT = 0
FULL_ITEMS = -1
FULL_ROWS = -2
FULL_HASH = -3
_LEX_FULL = -10  # lexer-level results below this are FULL_* codes shifted by -10

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
MEMO_SLOTS = 4096


@njit(cache=True, nogil=True, inline="always")
def _mix(x):  # pragma: no cover - compiled
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(32)
    return x


@walk_njit
def _add_item(dr, org, row_start, it_dr, it_org, end, hkey, hgen, gen):  # pragma: no cover - compiled
    """Add (dr, org) at ``end`` unless already in the row; returns the new end, or -1 if the items
    or the hash table are full."""
    key = (np.int64(dr) << np.int64(32)) | np.int64(org)
    mask = hkey.shape[0] - 1
    h = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    while hgen[h] == gen:
        if hkey[h] == key:
            return end
        h = (h + 1) & mask
    if end >= it_dr.shape[0] or (end - row_start + 1) * 2 > hkey.shape[0]:
        return -1  # items full, or the table would be more than half full
    hgen[h] = gen
    hkey[h] = key
    it_dr[end] = dr
    it_org[end] = org
    return end + 1


@walk_njit
def push_row(G, C, scan, init):  # pragma: no cover - compiled
    """Append a row: the items of the last row whose next symbol is a terminal in ``scan`` (a
    bitset), advanced, then closed under prediction and completion. With ``init`` set the row
    is the first one (the start item; ``scan`` ignored). Returns OK, REJECT (nothing scanned; the
    chart is unchanged) or a FULL_* code (the caller grows that array and retries)."""
    dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr = G
    it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta = C
    n_rows = meta[0]
    if n_rows + 1 >= row_ptr.shape[0] or n_rows >= row_exp.shape[0]:
        return FULL_ROWS
    k = n_rows  # index of the new row
    start = row_ptr[k]
    gen = np.int32(meta[1] + 1)
    if gen > 2_000_000_000:
        hgen[:] = 0
        gen = np.int32(1)
    meta[1] = gen
    end = start
    if init:
        end = _add_item(0, 0, start, it_dr, it_org, end, hkey, hgen, gen)
        if end < 0:
            return FULL_ITEMS
    else:
        for i in range(row_ptr[k - 1], start):
            x = dr_next[it_dr[i]]
            if x >= 0 and x < n_term and (scan[x >> 6] >> np.uint64(x & 63)) & np.uint64(1):
                end = _add_item(it_dr[i] + 1, it_org[i], start, it_dr, it_org, end, hkey, hgen, gen)
                if end < 0:
                    return FULL_ITEMS
        if end == start:
            return REJECT
    for w in range(row_exp.shape[1]):
        row_exp[k, w] = 0
    acc = 0
    j = start
    while j < end:
        dr = it_dr[j]
        x = dr_next[dr]
        if x < 0:
            o = it_org[j]
            if dr == accept_dr and o == 0:
                acc = 1
            if o != k:  # completions from this row were done when predicting (nullable)
                a = n_term + dr_lhs[dr]
                for i in range(row_ptr[o], row_ptr[o + 1]):
                    if dr_next[it_dr[i]] == a:
                        end = _add_item(it_dr[i] + 1, it_org[i], start, it_dr, it_org, end, hkey, hgen, gen)
                        if end < 0:
                            return FULL_ITEMS
        elif x >= n_term:
            a = x - n_term
            for q in range(pred_ptr[a], pred_ptr[a + 1]):
                end = _add_item(pred_dr[q], k, start, it_dr, it_org, end, hkey, hgen, gen)
                if end < 0:
                    return FULL_ITEMS
            if nullable[a]:
                end = _add_item(dr + 1, it_org[j], start, it_dr, it_org, end, hkey, hgen, gen)
                if end < 0:
                    return FULL_ITEMS
        else:
            row_exp[k, x >> 6] |= np.uint64(1) << np.uint64(x & 63)
        j += 1
    # fingerprint: order-independent sum over items of mix(dr, fingerprint of the origin row)
    f0 = np.uint64(0)
    f1 = np.uint64(0)
    for i in range(start, end):
        o = it_org[i]
        d = np.uint64(it_dr[i]) + np.uint64(1)
        if o == k:
            g0 = np.uint64(0x1234567)
            g1 = np.uint64(0x7654321)
        else:
            g0 = row_fp[o, 0]
            g1 = row_fp[o, 1]
        f0 += _mix((d * _M1) ^ g0)
        f1 += _mix((d * _M2) ^ _mix(g1 + d))
    row_fp[k, 0] = f0
    row_fp[k, 1] = f1
    row_acc[k] = acc
    row_ptr[k + 1] = end
    meta[0] = n_rows + 1
    return OK


@njit(cache=True, nogil=True, inline="always")
def end_lexeme(L, s, exp, scan):  # pragma: no cover - compiled
    """Which terminals the lexeme read so far (lexer state ``s``) ends as, given the parser's
    expected set ``exp``. Fills ``scan`` with the winners the parser expects and returns 1; returns
    2 when the winner is an ignored terminal (no parser step), 0 when it cannot end here."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    none = -(1 << 40)
    best = none
    for q in range(acc_ptr[s], acc_ptr[s + 1]):
        t = acc_list[q]
        w = t >> 6
        bit = np.uint64(1) << np.uint64(t & 63)
        if mode == 0 and not ((exp[w] | ign[w]) & bit):
            continue
        if rank[t] > best:
            best = rank[t]
    if best == none:
        return 0
    for w in range(scan.shape[0]):
        scan[w] = 0
    any_scan = False
    any_ign = False
    for q in range(acc_ptr[s], acc_ptr[s + 1]):
        t = acc_list[q]
        if rank[t] != best:
            continue
        w = t >> 6
        bit = np.uint64(1) << np.uint64(t & 63)
        if exp[w] & bit:
            scan[w] |= bit
            any_scan = True
        elif ign[w] & bit:
            any_ign = True
    if any_scan:
        return 1
    if any_ign:
        return 2
    return 0


@njit(cache=True, nogil=True, inline="always")
def _viable(reach_bits, t, exp, ign):  # pragma: no cover - compiled
    for w in range(exp.shape[0]):
        if reach_bits[t, w] & (exp[w] | ign[w]):
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _lazy_stop(acc_bits, lazy_bits, s, exp, ign):  # pragma: no cover - compiled
    for w in range(exp.shape[0]):
        if acc_bits[s, w] & lazy_bits[w] & (exp[w] | ign[w]):
            return True
    return False


def memo_slots(n_rules: int) -> int:
    """Row-table size for a grammar of ``n_rules`` productions: 16 per production, as a power of
    two from 256 to ``MEMO_SLOTS`` (a small grammar's parser has few states to remember, and a
    smaller table is faster to set up)."""
    slots = 256
    while slots < MEMO_SLOTS and slots < 16 * n_rules:
        slots *= 2
    return slots


def new_memo(n_words: int, max_depth: int, n_states: int = 1, slots: int = MEMO_SLOTS):
    """Scratch for :func:`push_memo` and the walks (one per thread and engine, reused by every
    walk). Its row table outlives a walk: it answers pushes by fingerprint, which names a parser
    state, not a chart. ``slots``: the row table's size, a power of two of at least 2 (it starts
    again when half full; a caller that uses no memo, such as the byte steps, passes 2; an engine
    passes :func:`memo_slots` of its grammar)."""
    assert slots >= 2 and slots & (slots - 1) == 0, slots
    # A slot is read only once its state is set, and a row's terminals only once written: those
    # arrays start uninitialised (zeroing them touched every page of a new engine's memo, most
    # of a small grammar's first mask)
    return (
        np.empty((slots, 2), np.uint64),  # key: fingerprint of the parent row
        np.empty((slots, n_words), np.uint64),  # key: the terminals scanned
        np.zeros(slots, np.uint8),  # 0 empty, 1 a row, 2 the push was refused
        np.empty((slots, n_words), np.uint64),  # the row: expected terminals
        np.empty(slots, np.uint8),  # the row: accepting
        np.empty((slots, 2), np.uint64),  # the row: fingerprint
        np.empty((max_depth + 3, n_words), np.uint64),  # terminals scanned for rows base.. (to build them)
        np.zeros(8, np.int64),  # entries used, rows built (below: real), base row, hits, misses
        np.zeros((max_depth + 2, n_states), np.uint8),  # group_walk: viability per depth and lexer state
        np.zeros(max_depth + 2, np.int32),  # group_walk: lexer state per depth
        np.zeros(max_depth + 2, np.int64),  # group_walk: rows per depth
        np.zeros(max_depth + 2, np.int32),  # group_walk: which depth's okt row applies
        np.zeros(n_words, np.uint64),  # scanned terminals
        np.zeros((max_depth + 2, n_states), np.uint8),  # group_walk: lazy stop per depth and lexer state
    )


@njit(cache=True, nogil=True, inline="always")
def push_memo(G, C, M, scan):  # pragma: no cover - compiled
    """``push_row`` for the terminals ``scan`` inside a walk, answered from the memo's row table
    when that push was seen before on a row of the same fingerprint (in any walk). An answered
    row is *virtual*: its expected set, acceptance and fingerprint are written, its items are
    not; they are built (``push_row`` again, for each virtual row in turn, with the terminals
    kept in ``rscan``) only when a push misses the table on top of it. The walk reads nothing of
    a row but those three (and a miss's ``push_row``), so most rows of a walk are never built."""
    it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta = C
    p_fp, p_scan, p_state, p_exp, p_acc, p_rfp, rscan, m_meta = M[:8]
    k = meta[0]
    base = m_meta[2]
    if m_meta[1] > k:
        m_meta[1] = k  # rows from k on are being replaced
    rel = k - base
    if rel < 0 or rel >= rscan.shape[0] or m_meta[1] < base:
        return push_row(G, C, scan, False)
    slots = p_state.shape[0]
    n_words = scan.shape[0]
    f0 = row_fp[k - 1, 0]
    f1 = row_fp[k - 1, 1]
    hv = _mix(f0 ^ _mix(f1 + _M1))
    for w in range(n_words):
        hv = _mix(hv ^ scan[w])
    h = np.int64(hv & np.uint64(slots - 1))
    while p_state[h] != 0:
        same = p_fp[h, 0] == f0 and p_fp[h, 1] == f1
        if same:
            for w in range(n_words):
                if p_scan[h, w] != scan[w]:
                    same = False
                    break
        if same:
            m_meta[3] += 1
            if p_state[h] == 2:
                return REJECT
            if k + 1 >= row_ptr.shape[0] or k >= row_exp.shape[0]:
                return FULL_ROWS
            row_ptr[k + 1] = row_ptr[k]  # no items (yet)
            for w in range(row_exp.shape[1]):
                row_exp[k, w] = p_exp[h, w]
                rscan[rel, w] = scan[w]
            row_acc[k] = p_acc[h]
            row_fp[k, 0] = p_rfp[h, 0]
            row_fp[k, 1] = p_rfp[h, 1]
            meta[0] = k + 1
            return OK
        h = (h + 1) & (slots - 1)
    m_meta[4] += 1
    # build the virtual rows below, then this one
    for j in range(m_meta[1], k):
        meta[0] = j
        r = push_row(G, C, rscan[j - base], False)
        if r != OK:  # FULL_* (a row that was pushed once is never refused)
            meta[0] = k
            return r
        m_meta[1] = j + 1
    meta[0] = k
    r = push_row(G, C, scan, False)
    if r < 0:
        return r
    if r == OK:
        m_meta[1] = k + 1
        for w in range(n_words):
            rscan[rel, w] = scan[w]
    if m_meta[0] * 2 >= slots:  # the table is half full: start again
        p_state[:] = 0
        m_meta[0] = 0
        h = np.int64(hv & np.uint64(slots - 1))
        while p_state[h] != 0:
            h = (h + 1) & (slots - 1)
    m_meta[0] += 1
    p_fp[h, 0] = f0
    p_fp[h, 1] = f1
    for w in range(n_words):
        p_scan[h, w] = scan[w]
    if r != OK:
        p_state[h] = 2
        return r
    p_state[h] = 1
    for w in range(row_exp.shape[1]):
        p_exp[h, w] = row_exp[k, w]
    p_acc[h] = row_acc[k]
    p_rfp[h, 0] = row_fp[k, 0]
    p_rfp[h, 1] = row_fp[k, 1]
    return r


@njit(cache=True, nogil=True, inline="always")
def lex_byte(L, G, C, M, s, b, scan, use_memo):  # pragma: no cover - compiled
    """Feed byte ``b`` at lexer state ``s`` with the parser at the chart's last row. Returns the
    new lexer state (the chart gained a row if a lexeme ended before ``b``), -1 if ``b`` is not
    allowed, or a FULL_* code + ``_LEX_FULL`` when the chart must grow (nothing changed)."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    row_exp = C[3]
    meta = C[8]
    exp = row_exp[meta[0] - 1]
    t = trans[s, b]
    if t >= 0 and not (has_lazy and s != lex_start and _lazy_stop(acc_bits, lazy_bits, s, exp, ign)):
        if _viable(reach_bits, t, exp, ign):
            return t
        if mode == 1:
            return -1  # global lexing: the longest match is taken, and it is not viable
    if s == lex_start:
        return -1
    r = end_lexeme(L, s, exp, scan)
    if r == 0:
        return -1
    if r == 1:
        if use_memo:
            st = push_memo(G, C, M, scan)
        else:
            st = push_row(G, C, scan, False)
        if st < 0:
            return st + _LEX_FULL
        if st == REJECT:
            return -1
        exp = row_exp[meta[0] - 1]
    t = trans[lex_start, b]
    if t >= 0 and _viable(reach_bits, t, exp, ign):
        return t
    if r == 1:
        meta[0] -= 1  # undo the row
    return -1


@walk_njit
def eos_allowed(L, G, C, s, scan):  # pragma: no cover - compiled
    """1 if the text can end here (lexer at ``s``), 0 if not, a FULL_* code if the chart must grow.
    The chart is left as it was."""
    row_exp, row_acc, meta = C[3], C[4], C[8]
    last = meta[0] - 1
    if s == L[1]:
        return np.int64(row_acc[last])
    r = end_lexeme(L, s, row_exp[last], scan)
    if r == 0:
        return 0
    if r == 2:
        return np.int64(row_acc[last])
    st = push_row(G, C, scan, False)
    if st < 0:
        return st
    if st == REJECT:
        return 0
    ok = row_acc[meta[0] - 1]
    meta[0] -= 1
    return np.int64(ok)


@njit(cache=True, nogil=True)
def advance_bytes(L, G, C, M, flat, start, stop, s0):  # pragma: no cover - compiled
    """Feed ``flat[start:stop]``; returns the final lexer state (rows appended to the chart), -1 if
    a byte is refused, or a FULL_* code + ``_LEX_FULL``. On failure the caller restores the rows."""
    return _advance_bytes(L, G, C, M, flat, start, stop, s0, np.zeros(C[3].shape[1], np.uint64))


@walk_njit
def _advance_bytes(L, G, C, M, flat, start, stop, s0, scan):  # pragma: no cover - compiled
    s = s0
    for k in range(start, stop):
        s = lex_byte(L, G, C, M, s, flat[k], scan, False)
        if s < 0:
            return s
    return s


@walk_njit
def viable_bytes(L, s, exp, limit):  # pragma: no cover - compiled
    """How many bytes lead from lexer state ``s`` to a state from which a terminal of ``exp`` (or
    an ignored one) can still be matched, counting up to ``limit`` only."""
    trans = L[0]
    reach_bits = L[5]
    ign = L[7]
    n = 0
    for b in range(256):
        t = trans[s, b]
        if t >= 0 and _viable(reach_bits, t, exp, ign):
            n += 1
            if n >= limit:
                return n
    return n


@njit(cache=True, nogil=True)
def lexer_walk(nodes, subtree_end, max_depth, L, s0, exp, first_ok, out, bnd_node, bnd_state):  # pragma: no cover
    """The part of a mask that depends only on the lexer state ``s0`` and the parser's expected
    set ``exp``: OR into ``out`` every token whose bytes stay inside lexemes the parser does not
    see (the current one, and ignored ones after it). Where a token would end a lexeme the parser
    must scan, record the trie node and the lexer state before it in ``bnd_node``/``bnd_state``
    (its subtree is left for :func:`group_walk`). Only tokens whose first byte ``b`` has
    ``first_ok[b]`` are considered. Returns the number of such boundaries."""
    n_states = L[0].shape[0]
    # per lexer state, computed when first needed (a big lexer has thousands of states, a walk
    # meets few): ok 1 = viable for exp, 2 = not; stop 1 = a lazy lexeme ends here, 2 = not
    return _lexer_walk(nodes, subtree_end, L, s0, exp, first_ok, out, bnd_node, bnd_state,
                       np.zeros(n_states, np.uint8), np.zeros(n_states, np.uint8), np.full(n_states, -1, np.int8),
                       np.zeros(exp.shape[0], np.uint64), np.empty(max_depth + 1, np.int32))


@walk_njit
def _lexer_walk(nodes, subtree_end, L, s0, exp, first_ok, out, bnd_node, bnd_state, ok, stop, endres, scan,
                lex):  # pragma: no cover - compiled
    """:func:`lexer_walk` in the scratch arrays it allocates."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    n = nodes.shape[0]
    lex[0] = s0
    nb = 0
    i = 1
    while i < n:
        r = nodes[i]
        d = (r >> 8) & 0xFFFF
        s = lex[d - 1]
        b = r & 0xFF
        if d == 1 and not first_ok[b]:
            i = subtree_end[i]
            continue
        t = trans[s, b]
        if t >= 0 and has_lazy:
            z = stop[s]
            if z == 0:
                z = 1 if s != lex_start and _lazy_stop(acc_bits, lazy_bits, s, exp, ign) else 2
                stop[s] = z
            if z == 1:
                t = -1
        if t >= 0:
            v = ok[t]
            if v == 0:
                v = 1 if _viable(reach_bits, t, exp, ign) else 2
                ok[t] = v
            if v == 1:
                lex[d] = t
                tok = (r >> 24) - 1  # -1: no token ends here; sets no bit of the last word
                out[tok >> 5] |= np.uint32(tok >= 0) << np.uint32(tok & 31)
                i += 1
                continue
            if mode == 1:
                i = subtree_end[i]
                continue
        if s == lex_start:
            i = subtree_end[i]
            continue
        e = endres[s]
        if e < 0:
            e = end_lexeme(L, s, exp, scan)
            endres[s] = e
        if e == 1:
            # a lexeme the parser sees ends before byte b: the group walk pushes its row and goes
            # on from the start state, so a byte that starts no lexeme at all kills the subtree
            # here (a name followed by a letter no terminal starts with, say)
            if trans[lex_start, b] >= 0:
                bnd_node[nb] = i
                bnd_state[nb] = s
                nb += 1
        elif e == 2:
            t = trans[lex_start, b]
            if t >= 0 and ok[t] == 0:
                ok[t] = 1 if _viable(reach_bits, t, exp, ign) else 2
            if t >= 0 and ok[t] == 1:
                lex[d] = t
                tok = (r >> 24) - 1  # -1: no token ends here; sets no bit of the last word
                out[tok >> 5] |= np.uint32(tok >= 0) << np.uint32(tok & 31)
                i += 1
                continue
        i = subtree_end[i]
    return nb


@njit(cache=True, nogil=True)
def end_and_push(L, G, C, s):  # pragma: no cover - compiled
    """End the lexeme in lexer state ``s`` and push the parser row for it. Returns OK (a row was
    pushed), REJECT (it cannot end here, or it is an ignored lexeme: no row) or a FULL_* code."""
    return _end_and_push(L, G, C, s, np.zeros(C[3].shape[1], np.uint64))


@walk_njit
def _end_and_push(L, G, C, s, scan):  # pragma: no cover - compiled
    row_exp, meta = C[3], C[8]
    if s == L[1]:
        return REJECT
    r = end_lexeme(L, s, row_exp[meta[0] - 1], scan)
    if r != 1:
        return REJECT
    return push_row(G, C, scan, False)


@njit(cache=True, nogil=True)
def merge_groups(nodes, subtree_end, bnd_node, bnd_state, merge_limit):  # pragma: no cover - compiled
    """Merge the subtrees below the boundaries of each lexer-state group into one small trie.

    Boundaries sharing a lexer state (``bnd_state``, sorted) continue identically after their
    lexeme ends, and their subtrees repeat the same suffixes ("x)", "y)", ... all continue with
    ")"), so each group's subtrees are merged by byte path. Returns ``(g_ptr, g_state, m_rec,
    m_end, mem_ptr, mem)``: group ``g`` owns merged nodes ``g_ptr[g]:g_ptr[g+1]`` in pre-order,
    ``m_rec`` packs byte (bits 0-7) and depth below the boundary (bits 8+, first byte = 1),
    ``m_end`` is each node's subtree end, and the trie nodes merged into node ``k`` (whose tokens
    it stands for) are ``mem[mem_ptr[k]:mem_ptr[k+1]]``. A group whose subtrees hold more than
    ``merge_limit`` nodes is left unmerged (``g_raw[g]``; merging costs more than it saves there):
    its boundary nodes are ``r_node[r_ptr[g]:r_ptr[g+1]]``, walked in the token trie itself."""
    nb = bnd_node.shape[0]
    n_groups = 0
    for k in range(nb):
        if k == 0 or bnd_state[k] != bnd_state[k - 1]:
            n_groups += 1
    g_ptr = np.zeros(n_groups + 1, np.int32)
    g_state = np.zeros(n_groups, np.int32)
    g_raw = np.zeros(n_groups, np.uint8)
    r_ptr = np.zeros(n_groups + 1, np.int32)
    r_node = np.zeros(nb, np.int32)
    # first pass: which groups to merge (small groups of several boundaries, within a budget)
    total = 0
    g = 0
    k = 0
    while k < nb:
        k_end = k
        size = 0
        while k_end < nb and bnd_state[k_end] == bnd_state[k]:
            size += subtree_end[bnd_node[k_end]] - bnd_node[k_end]
            k_end += 1
        # merging dedups the suffixes of many small subtrees; a few big ones barely overlap
        if size > merge_limit or total + size > 4 * merge_limit or size > 256 * (k_end - k):
            g_raw[g] = 1
        else:
            total += size
        g += 1
        k = k_end
    # every entry below is written before it is read: no zeroing (a big group's buffers are
    # hundreds of kB)
    m_rec = np.empty(total, np.int64)
    m_end = np.empty(total, np.int32)
    mem_ptr = np.empty(total + 1, np.int32)
    mem = np.empty(total, np.int32)
    # work buffers: member lists of pending frames live in `buf`
    buf = np.empty(2 * total + 256, np.int32)
    st_start = np.empty(total + 256, np.int32)
    st_len = np.empty(total + 256, np.int32)
    st_depth = np.empty(total + 256, np.int32)
    counts = np.zeros(256, np.int32)
    offs = np.zeros(257, np.int32)
    cb = np.empty(total + 1, np.int32)
    cn = np.empty(total + 1, np.int32)
    ident = np.arange(256)  # the order of one node's children (at most 256, already in byte order)
    obuf = np.empty(17, np.int64)  # the order of a short list of several nodes' children
    n_m = 0
    n_mem = 0
    g = 0
    k = 0
    while k < nb:
        s = bnd_state[k]
        k_end = k
        while k_end < nb and bnd_state[k_end] == s:
            k_end += 1
        g_state[g] = s
        g_ptr[g] = n_m
        r_ptr[g] = k
        for q in range(k, k_end):
            r_node[q] = bnd_node[q]
        if g_raw[g]:
            g += 1
            k = k_end
            continue
        # root level: bucket the boundary nodes by their byte
        top = 0
        buf_top = 0
        counts[:] = 0
        for q in range(k, k_end):
            counts[nodes[bnd_node[q]] & 0xFF] += 1
        offs[0] = buf_top
        for b in range(256):
            offs[b + 1] = offs[b] + counts[b]
        counts[:] = 0
        for q in range(k, k_end):
            b = nodes[bnd_node[q]] & 0xFF
            buf[offs[b] + counts[b]] = bnd_node[q]
            counts[b] += 1
        buf_top = offs[256]
        for b in range(255, -1, -1):
            if counts[b]:
                st_start[top] = offs[b]
                st_len[top] = counts[b]
                st_depth[top] = 1
                top += 1
        while top > 0:
            top -= 1
            a0 = st_start[top]
            ln = st_len[top]
            dep = st_depth[top]
            node_id = n_m
            n_m += 1
            first = buf[a0]
            m_rec[node_id] = (nodes[first] & 0xFF) | (np.int64(dep) << 8)
            mem_ptr[node_id] = n_mem
            for q in range(ln):
                mem[n_mem] = buf[a0 + q]
                n_mem += 1
            # children of all members, grouped by byte (stable), appended to buf
            n_c = 0
            for q in range(ln):
                m = buf[a0 + q]
                c = m + 1
                while c < subtree_end[m]:
                    cb[n_c] = nodes[c] & 0xFF
                    cn[n_c] = c
                    n_c += 1
                    c = subtree_end[c]
            if n_c == 0:
                if top == 0:
                    buf_top = 0
                continue
            if ln == 1 or n_c == 1:
                order = ident[:n_c]  # one member: its children are already in byte order
            elif n_c <= 16:  # a stable insertion sort, without allocating
                order = obuf[:n_c]
                for q in range(n_c):
                    v = cb[q]
                    j = q
                    while j > 0 and cb[order[j - 1]] > v:
                        order[j] = order[j - 1]
                        j -= 1
                    order[j] = q
            else:
                order = np.argsort(cb[:n_c], kind="mergesort")
            base = buf_top
            for q in range(n_c):
                buf[base + q] = cn[order[q]]
            buf_top = base + n_c
            # push runs of equal bytes, last run first (so the smallest byte is popped first)
            q = n_c
            while q > 0:
                q0 = q - 1
                bq = cb[order[q0]]
                while q0 > 0 and cb[order[q0 - 1]] == bq:
                    q0 -= 1
                st_start[top] = base + q0
                st_len[top] = q - q0
                st_depth[top] = dep + 1
                top += 1
                q = q0
            if top == 0:
                buf_top = 0
        # subtree ends inside the group: the next node at the same or a smaller depth
        g_end = n_m
        stack = np.empty(g_end - g_ptr[g] + 1, np.int32)
        sp = 0
        for i in range(g_ptr[g], g_end):
            d = m_rec[i] >> 8
            while sp > 0 and (m_rec[stack[sp - 1]] >> 8) >= d:
                sp -= 1
                m_end[stack[sp]] = i
            stack[sp] = i
            sp += 1
        while sp > 0:
            sp -= 1
            m_end[stack[sp]] = g_end
        g += 1
        k = k_end
    g_ptr[n_groups] = n_m
    r_ptr[n_groups] = nb
    mem_ptr[n_m] = n_mem
    return (g_ptr, g_state, m_rec[:n_m].copy(), m_end[:n_m].copy(), mem_ptr[:n_m + 1].copy(), mem[:n_mem].copy(),
            g_raw, r_ptr, r_node)


GROUP_HEADER = 8
"""Words before the segments of a packed group record (:func:`pack_groups`): the offsets of its
seven segments and of its end."""


@njit(cache=True, nogil=True)
def _put_segment(pack, k, off, a):  # pragma: no cover - compiled
    pack[k] = off
    for i in range(a.shape[0]):
        pack[off + i] = a[i]
    return off + a.shape[0]


@njit(cache=True, nogil=True)
def pack_groups(g_ptr, m_end, mem_ptr, mem, g_raw, r_ptr, r_node):  # pragma: no cover - compiled
    """The int32 arrays of :func:`merge_groups` (``g_raw`` widened) as one array: ``pack[k]`` is
    where segment ``k`` starts and ``pack[k + 1]`` where it ends. A step hands the boundary walk
    three arrays instead of nine, and a kernel returns them boxed at ~0.5 us each."""
    n = g_ptr.shape[0] + m_end.shape[0] + mem_ptr.shape[0] + mem.shape[0] + g_raw.shape[0] + r_ptr.shape[0] + \
        r_node.shape[0]
    pack = np.empty(GROUP_HEADER + n, np.int32)
    off = _put_segment(pack, 0, GROUP_HEADER, g_ptr)
    off = _put_segment(pack, 1, off, m_end)
    off = _put_segment(pack, 2, off, mem_ptr)
    off = _put_segment(pack, 3, off, mem)
    off = _put_segment(pack, 4, off, g_raw)
    off = _put_segment(pack, 5, off, r_ptr)
    off = _put_segment(pack, 6, off, r_node)
    pack[7] = off
    return pack


@njit(cache=True, nogil=True)
def merge_packed(nodes, subtree_end, bnd_node, bnd_state, merge_limit):  # pragma: no cover - compiled
    """:func:`merge_groups` as the boundary walk takes it: ``((g_state, pack, m_rec), any_raw)``,
    the rest packed by :func:`pack_groups`; ``any_raw`` is 1 when some group was left unmerged."""
    g_ptr, g_state, m_rec, m_end, mem_ptr, mem, g_raw, r_ptr, r_node = merge_groups(
        nodes, subtree_end, bnd_node, bnd_state, merge_limit)
    any_raw = 0
    for g in range(g_raw.shape[0]):
        if g_raw[g]:
            any_raw = 1
            break
    return (g_state, pack_groups(g_ptr, m_end, mem_ptr, mem, g_raw, r_ptr, r_node), m_rec), any_raw


@njit(cache=True, nogil=True)
def split_boundaries(nodes, subtree_end, bnd_node, bnd_state, merge_limit, first_bytes):  # pragma: no cover
    """The boundaries of a :func:`lexer_walk` split by depth: set ``first_bytes[b]`` for those at a
    token's first byte (the current lexeme ends before the token; the caller finishes them), and
    merge the deeper ones (stably sorted by lexer state) with :func:`merge_packed`. Returns
    ``(groups, deep nodes, deep states, first bytes set, any group left raw)``."""
    nb = bnd_node.shape[0]
    n_deep = 0
    n_first = 0
    for k in range(nb):
        if ((nodes[bnd_node[k]] >> 8) & 0xFFFF) == 1:
            b = nodes[bnd_node[k]] & 0xFF
            n_first += 1 - first_bytes[b]
            first_bytes[b] = 1
        else:
            n_deep += 1
    node = np.empty(n_deep, np.int32)
    state = np.empty(n_deep, np.int32)
    q = 0
    for k in range(nb):
        if ((nodes[bnd_node[k]] >> 8) & 0xFFFF) != 1:
            node[q] = bnd_node[k]
            state[q] = bnd_state[k]
            q += 1
    order = np.argsort(state, kind="mergesort")
    dn = node[order]
    ds = state[order]
    groups, any_raw = merge_packed(nodes, subtree_end, dn, ds, merge_limit)
    return groups, dn, ds, n_first, any_raw


@walk_njit
def group_walk(nodes, subtree_end, max_depth, g_state, pack, m_rec, L, G, C, M, out):  # pragma: no cover
    """Finish a mask after :func:`lexer_walk` over the merged boundary tries of
    :func:`merge_packed` (``g_state``, ``pack``, ``m_rec``): for each group push the parser row
    for the lexeme that ended (once), then walk the group's trie with lexer and parser together.
    Inside a lexeme only the lexer moves (a table lookup: which lexer states are viable for the
    row at hand is cached per depth, ``okt``, recomputed lazily after the row changes). The chart
    is restored. Returns OK or a FULL_* code."""
    g_ptr = pack[pack[0]:pack[1]]
    m_end = pack[pack[1]:pack[2]]
    mem_ptr = pack[pack[2]:pack[3]]
    mem = pack[pack[3]:pack[4]]
    g_raw = pack[pack[4]:pack[5]]
    r_ptr = pack[pack[5]:pack[6]]
    r_node = pack[pack[6]:pack[7]]
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    row_exp = C[3]
    meta = C[8]
    m_meta = M[7]
    okt, lex, rows, okd, scan, okl = M[8], M[9], M[10], M[11], M[12], M[13]
    base = meta[0]
    m_meta[1] = base  # rows below are real
    m_meta[2] = base
    status = OK
    for g in range(g_state.shape[0]):
        if g_state[g] < 0:
            continue  # a group left out (start_walk_apply)
        meta[0] = base
        r = end_lexeme(L, g_state[g], row_exp[base - 1], scan)
        if r != 1:
            continue
        st = push_memo(G, C, M, scan)
        if st < 0:
            status = st
            break
        if st != OK:
            continue
        lex[0] = lex_start
        rows[0] = meta[0]
        okd[0] = 0
        okt[0, :] = 0
        if has_lazy:
            okl[0, :] = 0
        raw = g_raw[g] == 1
        n_parts = r_ptr[g + 1] - r_ptr[g] if raw else 1
        for part in range(n_parts):
            if raw:
                i = r_node[r_ptr[g] + part]
                end = subtree_end[i]
                shift = ((nodes[i] >> 8) & 0xFFFF) - 1  # depths relative to the boundary
            else:
                i = g_ptr[g]
                end = g_ptr[g + 1]
                shift = 0
            while i < end:
                if raw:
                    rr = nodes[i]
                    d = ((rr >> 8) & 0xFFFF) - shift
                else:
                    rr = m_rec[i]
                    d = rr >> 8
                sp = lex[d - 1]
                b = rr & 0xFF
                t = trans[sp, b]
                od = okd[d - 1]
                accepted = False
                stop = False
                if has_lazy and t >= 0:  # a lazy terminal that matches here ends the lexeme
                    lz = okl[od, sp]
                    if lz == 0:
                        lz = 1 if _lazy_stop(acc_bits, lazy_bits, sp, row_exp[rows[d - 1] - 1], ign) else 2
                        okl[od, sp] = lz
                    stop = lz == 1
                if t >= 0 and not stop:
                    v = okt[od, t]
                    if v == 0:
                        v = 1 if _viable(reach_bits, t, row_exp[rows[d - 1] - 1], ign) else 2
                        okt[od, t] = v
                    if v == 1:
                        lex[d] = t
                        rows[d] = rows[d - 1]
                        okd[d] = od
                        accepted = True
                    elif mode == 1:
                        i = subtree_end[i] if raw else m_end[i]
                        continue
                if not accepted:
                    meta[0] = rows[d - 1]
                    s = lex_byte(L, G, C, M, sp, b, scan, True)
                    if s < 0:
                        if s <= _LEX_FULL:
                            status = s - _LEX_FULL
                            break
                        i = subtree_end[i] if raw else m_end[i]
                        continue
                    lex[d] = s
                    rows[d] = meta[0]
                    if rows[d] != rows[d - 1]:
                        okd[d] = d
                        okt[d, :] = 0
                        if has_lazy:
                            okl[d, :] = 0
                    else:
                        okd[d] = od
                # no branch on whether a token ends here: -1 sets no bit of the last word
                if raw:
                    tok = (rr >> 24) - 1
                    out[tok >> 5] |= np.uint32(tok >= 0) << np.uint32(tok & 31)
                else:
                    for q in range(mem_ptr[i], mem_ptr[i + 1]):
                        tok = (nodes[mem[q]] >> 24) - 1
                        out[tok >> 5] |= np.uint32(tok >= 0) << np.uint32(tok & 31)
                i += 1
            if status != OK:
                break
        if status != OK:
            break
    meta[0] = base
    return status


@njit(cache=True, nogil=True)
def next_bytes(L, G, C, M, s, out):  # pragma: no cover - compiled
    """Set ``out[b] = 1`` for every byte ``b`` that may come next (lexer at ``s``), ending the
    current lexeme (one parser row) at most once for all bytes. The chart is left as it was.
    Returns OK or a FULL_* code."""
    return _next_bytes(L, G, C, s, out, np.zeros(C[3].shape[1], np.uint64))


@walk_njit
def _next_bytes(L, G, C, s, out, scan):  # pragma: no cover - compiled
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    row_exp = C[3]
    meta = C[8]
    rows = meta[0]
    exp = row_exp[rows - 1]
    stop = has_lazy and s != lex_start and _lazy_stop(acc_bits, lazy_bits, s, exp, ign)
    need_end = False
    for b in range(256):
        out[b] = 0
        t = trans[s, b]
        if t >= 0 and not stop:
            if _viable(reach_bits, t, exp, ign):
                out[b] = 1
                continue
            if mode == 1:
                continue
        need_end = True
        out[b] = 2  # decided below, after the lexeme ends
    if need_end:
        ok_end = False
        if s != lex_start:
            r = end_lexeme(L, s, exp, scan)
            if r == 1:
                st = push_row(G, C, scan, False)
                if st < 0:
                    meta[0] = rows
                    return st
                ok_end = st == OK
            elif r == 2:
                ok_end = True
        exp2 = row_exp[meta[0] - 1]
        for b in range(256):
            if out[b] == 2:
                t = trans[lex_start, b]
                out[b] = 1 if ok_end and t >= 0 and _viable(reach_bits, t, exp2, ign) else 0
    meta[0] = rows
    return OK


@njit(cache=True, nogil=True, inline="always")
def _sig_mix(h, v):  # pragma: no cover - compiled
    """One step of a 64-bit multiplicative hash (wrapping)."""
    h ^= np.uint64(v) + np.uint64(0x9E3779B97F4A7C15) + (h << np.uint64(6)) + (h >> np.uint64(2))
    return h * np.uint64(0xBF58476D1CE4E5B9)


def new_row_runs(n_states: int, cap: int = 1 << 14) -> tuple:
    """Empty lazily-filled lexer rows as runs (see :func:`_row_runs`) for ``n_states`` states,
    room for ``cap`` runs, and the all ``-1`` scratch array :func:`lexeme_signature` numbers
    states in: ``(run_off, run_cnt, run_byte, run_target, used, canon)``."""
    return (np.full(n_states, -1, np.int32), np.zeros(n_states, np.int32), np.empty(cap, np.int32),
            np.empty(cap, np.int32), np.zeros(1, np.int64), np.full(n_states, -1, np.int32))


def grow_row_runs(runs: tuple) -> tuple:
    """``runs`` with twice the room for runs (the rows already made kept)."""
    off, cnt, byte, target, used, canon = runs
    cap = 2 * byte.shape[0]
    b2, t2 = np.empty(cap, np.int32), np.empty(cap, np.int32)
    b2[:used[0]] = byte[:used[0]]
    t2[:used[0]] = target[:used[0]]
    return off, cnt, b2, t2, used, canon


@njit(cache=True, nogil=True, inline="always")
def _row_runs(trans, s, runs):  # pragma: no cover - compiled
    """Make lexer row ``s`` as runs of equal targets, once (rows are made as first read, so a big
    lexer never pays for the rows no signature looks at): run ``k`` (``run_off[s] <= k <
    run_off[s] + run_cnt[s]``) covers bytes ``run_byte[k]`` up to the next run's first byte (or
    255), all going to ``run_target[k]``. False when the buffers are full (nothing written)."""
    run_off, run_cnt, run_byte, run_target, used, _ = runs
    if run_off[s] >= 0:
        return True
    u = used[0]
    if u + 256 > run_byte.shape[0]:
        return False
    k = u
    prev = -2
    for b in range(256):
        t = trans[s, b]
        if t != prev:
            run_byte[k] = b
            run_target[k] = t
            k += 1
            prev = t
    run_cnt[s] = k - u
    run_off[s] = u
    used[0] = k
    return True


@njit(cache=True, nogil=True)
def lexeme_signature(L, runs, s0, exp, first_ok, depth, order):  # pragma: no cover - compiled
    """A 128-bit fingerprint of everything :func:`lexer_walk` reads from lexer state ``s0`` with
    expected set ``exp``: the states reachable within ``depth`` bytes through moves the walk
    follows, numbered in breadth-first order (written to ``order``: canonical -> local state),
    their rows (targets as canonical numbers, -1 where the walk stops; rows are read as runs,
    made as needed in ``runs``, see :func:`new_row_runs`), per state whether it is viable, a lazy
    stop, and how its lexeme ends, and the bytes some lexeme starts with. Equal fingerprints give
    equal walks up to that numbering, so walks can be shared across grammars. Returns ``(h1, h2,
    n)``; ``n = -1``: not shareable (an ignored lexeme can follow, which continues from the start
    state, or more than ``order.shape[0]`` states); ``n = -2``: ``runs`` is full (grow it with
    :func:`grow_row_runs` and ask again). Not thread-safe for one ``runs``."""
    return _lexeme_signature(L, runs, s0, exp, first_ok, depth, order, np.empty(order.shape[0], np.int32),
                             np.zeros(exp.shape[0], np.uint64))


@walk_njit
def _lexeme_signature(L, runs, s0, exp, first_ok, depth, order, dep, scan):  # pragma: no cover - compiled
    canon = runs[5]
    h1, h2, n, filled = _signature(L, runs, canon, s0, exp, first_ok, depth, order, dep, scan)
    for k in range(1, filled):  # the scratch numbering back to all -1
        canon[order[k]] = -1
    return h1, h2, n


@njit(cache=True, nogil=True, inline="always")
def _signature(L, runs, canon, s0, exp, first_ok, depth, order, dep, scan):  # pragma: no cover - compiled
    """:func:`lexeme_signature`, also returning how many entries of ``order`` it numbered (``dep``,
    ``scan``: scratch)."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    run_off, run_cnt, run_byte, run_target = runs[0], runs[1], runs[2], runs[3]
    # local state -> canonical number (-1: not met yet); the root row (number 0) is apart: only
    # there do first bytes outside ``first_ok`` skip their subtree, so s0 met again is numbered anew
    h1 = np.uint64(0x243F6A8885A308D3)
    h2 = np.uint64(0x13198A2E03707344)
    # the bytes that start some lexeme: a boundary before any other byte is dropped by the walk
    for w in range(4):
        bits = np.uint64(0)
        for b in range(64 * w, 64 * w + 64):
            if trans[lex_start, b] >= 0:
                bits |= np.uint64(1) << np.uint64(b & 63)
        h1 = _sig_mix(h1, bits)
        h2 = _sig_mix(h2, bits ^ np.uint64(0x5555))
    order[0] = s0
    dep[0] = 0
    n = 1
    q = 0
    while q < n:
        s = order[q]
        d = dep[q]
        ok = 1 if _viable(reach_bits, s, exp, ign) else 0
        stop = 1 if has_lazy and s != lex_start and _lazy_stop(acc_bits, lazy_bits, s, exp, ign) else 0
        e = 0
        if s != lex_start:
            e = end_lexeme(L, s, exp, scan)
            if e == 2:
                return np.uint64(0), np.uint64(0), -1, n
        flags = ok | (stop << 1) | (e << 2) | ((1 if s == lex_start else 0) << 4) | (mode << 5)
        h1 = _sig_mix(h1, flags)
        h2 = _sig_mix(h2, flags + 77)
        if d < depth:
            prev = -100
            if not _row_runs(trans, s, runs):
                return np.uint64(0), np.uint64(0), -2, n
            lo = run_off[s]
            hi = lo + run_cnt[s]
            for k in range(lo, hi):
                t = run_target[k]
                last = run_byte[k + 1] if k + 1 < hi else 256
                v = -1
                if t >= 0 and stop == 0:
                    if _viable(reach_bits, t, exp, ign):
                        c = canon[t]
                        if c < 0:
                            if n >= order.shape[0]:
                                return np.uint64(0), np.uint64(0), -1, n
                            c = n
                            canon[t] = c
                            order[n] = t
                            dep[n] = d + 1
                            n += 1
                        v = c
                    elif mode == 1:
                        v = -3  # a global lexer drops the token here, no end check
                for b in range(run_byte[k], last):
                    w = v
                    if q == 0 and not first_ok[b]:
                        w = -5  # the walk never starts with this byte
                    if w != prev:
                        h1 = _sig_mix(h1, (b << 32) | (w + 8))
                        h2 = _sig_mix(h2, (w + 8) * 257 + b)
                        prev = w
                    if q > 0:
                        break  # the rest of the run repeats w (only the root row varies per byte)
        else:
            h1 = _sig_mix(h1, np.uint64(0xFFFF))
        q += 1
    return h1, h2, n, n


@njit(cache=True, nogil=True, inline="always")
def _narrows(reach_bits, s, t):  # pragma: no cover - compiled
    """Whether some terminal reachable from lexer state ``s`` is not reachable from ``t``."""
    for w in range(reach_bits.shape[1]):
        if reach_bits[s, w] & ~reach_bits[t, w]:
            return True
    return False


@njit(cache=True, nogil=True)
def start_walk_index(nodes, subtree_end, max_depth, L, kind, stop, follow, in_tok, in_state, in_first, bnd_node,
                     bnd_state, bnd_first, div_node, div_state, div_next, div_first):  # pragma: no cover - compiled
    """The lexer-only walk from the start state for a whole class of expected sets at once (see
    ``CFGEngine._start_walk``): the walk :func:`lexer_walk` would make if every terminal were
    expected, except where the class fixes what happens. Per lexer state, ``kind`` says how a
    lexeme ends there (0 it cannot, 1 as an ignored one: the walk goes on from the start state,
    2 as one the parser sees) and ``stop`` whether a lazy terminal in force ends it at once; a
    byte that goes on from a state of kind 1 into state ``t`` is followed only if ``follow[t]``
    (else the ignored lexeme ends there). Records, each with the first byte of its token(s):
    every token reached with the lexer state at its end (``in_*``), every lexeme end of kind 2
    before a byte that starts a lexeme (``bnd_*``: the trie node and the state before it) and,
    contextual lexing only, every byte that goes on from a state of kind 2 to one with fewer
    reachable terminals (``div_*``: the node, the state before and after it; a boundary for an
    expected set with none of those left: with the same ones, the next state is viable whenever
    this one is). Returns the three counts."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    n = nodes.shape[0]
    lex = np.empty(max_depth + 1, np.int32)
    lex[0] = lex_start
    n_in = 0
    n_bnd = 0
    n_div = 0
    fb = 0
    i = 1
    while i < n:
        r = nodes[i]
        d = (r >> 8) & 0xFFFF
        s = lex[d - 1]
        b = r & 0xFF
        if d == 1:
            fb = b
        t = trans[s, b]
        if t >= 0 and stop[s]:
            t = -1
        k = kind[s]
        if t >= 0:
            if k == 1 and not follow[t]:
                t = trans[lex_start, b]
            elif k == 2 and mode == 0 and trans[lex_start, b] >= 0 and _narrows(reach_bits, s, t):
                div_node[n_div] = i
                div_state[n_div] = s
                div_next[n_div] = t
                div_first[n_div] = fb
                n_div += 1
        elif k == 1:
            t = trans[lex_start, b]
        elif k == 2 and trans[lex_start, b] >= 0:
            bnd_node[n_bnd] = i
            bnd_state[n_bnd] = s
            bnd_first[n_bnd] = fb
            n_bnd += 1
        if t < 0:
            i = subtree_end[i]
            continue
        lex[d] = t
        if (r >> 24) > 0:
            in_tok[n_in] = (r >> 24) - 1
            in_state[n_in] = t
            in_first[n_in] = fb
            n_in += 1
        i += 1
    return n_in, n_bnd, n_div


@njit(cache=True, nogil=True)
def start_walk_class(L, exp, mixed, fork, out):  # pragma: no cover - compiled
    """Which class of expected sets ``exp`` is in, for ``start_walk_index``: how a lexeme ends at
    each state of ``mixed`` (``end_lexeme``: 0, 1, 2) and whether each state of ``fork`` is viable
    (1, 0), written to ``out``."""
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    scan = np.zeros(exp.shape[0], np.uint64)
    for k in range(mixed.shape[0]):
        out[k] = end_lexeme(L, mixed[k], exp, scan)
    for k in range(fork.shape[0]):
        out[mixed.shape[0] + k] = 1 if _viable(reach_bits, fork[k], exp, ign) else 0


@njit(cache=True, nogil=True, inline="always")
def _viable_cached(ok, reach_bits, t, exp, ign):  # pragma: no cover - compiled
    """``_viable`` for state ``t``, kept in ``ok[t]`` (0 unknown, 1 viable, 2 not)."""
    if ok[t] == 0:
        ok[t] = 1 if _viable(reach_bits, t, exp, ign) else 2
    return ok[t] == 1


@njit(cache=True, nogil=True, inline="always")
def _ends_seen(L, s, exp, scan, ok, ends):  # pragma: no cover - compiled
    """Whether the walk reaches state ``s`` (viable) and a lexeme the parser sees ends there
    (``end_lexeme`` 1, kept in ``ends[s]``; -1 unknown)."""
    if not _viable_cached(ok, L[5], s, exp, L[7]):
        return False
    if ends[s] < 0:
        ends[s] = end_lexeme(L, s, exp, scan)
    return ends[s] == 1


@njit(cache=True, nogil=True)
def start_walk_apply(L, exp, first_ok, st_ptr, st_state, in_tok, in_first, g_state, g_first, g_on, d_ptr, d_state,
                     div_node, div_next, div_first, out, dyn_node, dyn_state):  # pragma: no cover - compiled
    """The lexer-only walk from the start state for the expected set ``exp`` (tokens whose first
    byte ``b`` has ``first_ok[b]``), from :func:`start_walk_index`'s record: OR into ``out`` the
    tokens that stay inside lexemes (those whose state at their end is viable: a lexeme's
    reachable terminals only shrink as it goes on), set ``g_on[g]`` to ``g_state[g]`` for the
    boundary groups that end a lexeme the parser sees (else -1), and write the boundaries where a
    viable lexeme stops because ``exp`` has nothing reachable from the next state to
    ``dyn_node``/``dyn_state`` (records of state ``d_state[k]``: ``d_ptr[k]:d_ptr[k + 1]``).
    Returns their number."""
    n_states = L[0].shape[0]
    return _start_walk_apply(L, exp, first_ok, st_ptr, st_state, in_tok, in_first, g_state, g_first, g_on, d_ptr,
                             d_state, div_node, div_next, div_first, out, dyn_node, dyn_state,
                             np.zeros(exp.shape[0], np.uint64),
                             np.zeros(n_states, np.uint8),  # 1 viable, 2 not
                             np.full(n_states, -1, np.int8))


@walk_njit
def _start_walk_apply(L, exp, first_ok, st_ptr, st_state, in_tok, in_first, g_state, g_first, g_on, d_ptr, d_state,
                      div_node, div_next, div_first, out, dyn_node, dyn_state, scan, ok,
                      ends):  # pragma: no cover - compiled
    trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode, has_lazy = L
    for k in range(st_state.shape[0]):
        if not _viable(reach_bits, st_state[k], exp, ign):
            continue
        for q in range(st_ptr[k], st_ptr[k + 1]):
            if first_ok[in_first[q]]:
                tok = in_tok[q]
                out[tok >> 5] |= np.uint32(1) << np.uint32(tok & 31)
    for g in range(g_state.shape[0]):
        s = g_state[g]
        g_on[g] = s if first_ok[g_first[g]] and _ends_seen(L, s, exp, scan, ok, ends) else -1
    nd = 0
    for k in range(d_state.shape[0]):
        s = d_state[k]
        if not _ends_seen(L, s, exp, scan, ok, ends):
            continue
        for q in range(d_ptr[k], d_ptr[k + 1]):
            if first_ok[div_first[q]] and not _viable_cached(ok, reach_bits, div_next[q], exp, ign):
                dyn_node[nd] = div_node[q]
                dyn_state[nd] = s
                nd += 1
    return nd


@njit(cache=True, nogil=True)
def group_by_key(keys, n_keys):  # pragma: no cover - compiled
    """A stable counting sort of ``keys`` (each in ``[0, n_keys)``): ``(order, uniq, ptr)``, the
    positions in key order, the distinct keys in order, and group ``g`` (key ``uniq[g]``) as
    ``order[ptr[g]:ptr[g + 1]]``."""
    n = keys.shape[0]
    count = np.zeros(n_keys + 1, np.int64)
    for i in range(n):
        count[keys[i] + 1] += 1
    n_uniq = 0
    for k in range(n_keys):
        if count[k + 1]:
            n_uniq += 1
        count[k + 1] += count[k]
    order = np.empty(n, np.int32)
    uniq = np.empty(n_uniq, np.int64)
    ptr = np.empty(n_uniq + 1, np.int64)
    g = 0
    for k in range(n_keys):
        if count[k + 1] > count[k]:
            uniq[g] = k
            ptr[g] = count[k]
            g += 1
    ptr[n_uniq] = n
    for i in range(n):
        k = keys[i]
        order[count[k]] = i
        count[k] += 1
    return order, uniq, ptr
