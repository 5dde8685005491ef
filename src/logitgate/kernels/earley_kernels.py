"""Earley parser and lexer kernels over flat arrays: push a chart row for a set of scanned
terminals, step the lexer by one byte, and walk the token trie with both to fill a token mask.

Grammar tables (see ``logitgate.grammar.parser_tables``): dotted rules are numbered ``dr``;
``dr_next[dr]`` is the symbol after the dot (terminal ``< T``, nonterminal ``T + A``, ``-1`` when
complete), ``dr_lhs[dr]`` the rule's left-hand nonterminal, ``pred_ptr``/``pred_dr`` the dotted
rules with the dot at the start for each nonterminal (CSR), ``nullable[A]``.

Chart (one per matcher, grown by the caller when a kernel reports it is full): items
``(it_dr[i], it_org[i])``; row ``k`` holds items ``row_ptr[k]:row_ptr[k+1]``; ``row_exp[k]`` is the
bitset of terminals expected next; ``row_acc[k]`` whether the start rule is complete from 0;
``row_fp[k]`` a 128-bit fingerprint of the row that also covers the rows its items point back to,
so equal fingerprints mean the same parser future (a sound cache key for masks).
``meta[0]`` = number of rows, ``meta[1]`` = hash generation. Nullable rules follow Aycock and
Horspool: predicting a nullable nonterminal also advances over it, so completions never look into
the row being built.

Lexer (``logitgate.grammar.lexer``): one byte DFA for all terminals; ``acc_bits[s]``/``reach_bits[s]``
the terminals matched at / still reachable from state ``s``; ``rank[t]`` orders matches of the same
length (priority, then literals first); ``mode`` 0 = contextual (only terminals the parser expects,
plus ignored ones, compete), 1 = global (all terminals compete, the winner must be expected).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)

OK = 1
REJECT = 0
FULL_ITEMS = -1
FULL_ROWS = -2
FULL_HASH = -3

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


@njit(cache=True, nogil=True, inline="always")
def _mix(x):  # pragma: no cover - compiled
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(32)
    return x


@njit(cache=True, nogil=True)
def _add_item(dr, org, row_start, it_dr, it_org, end, hkey, hgen, gen):  # pragma: no cover - compiled
    """Add (dr, org) at ``end`` unless already in the row; returns the new end, or -1 if the items
    or the hash table are full."""
    key = (np.int64(dr) << np.int64(32)) | np.int64(org)
    mask = hkey.shape[0] - 1
    h = np.int64(_mix(np.uint64(key)) & np.uint64(mask))
    probes = 0
    while hgen[h] == gen:
        if hkey[h] == key:
            return end
        h = (h + 1) & mask
        probes += 1
        if probes > mask:
            return -1
    if end >= it_dr.shape[0]:
        return -1
    if (end - row_start + 1) * 2 > hkey.shape[0]:
        return -1  # keep the table at most half full
    hgen[h] = gen
    hkey[h] = key
    it_dr[end] = dr
    it_org[end] = org
    return end + 1


@njit(cache=True, nogil=True)
def push_row(dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
             it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan, init):  # pragma: no cover
    """Append a row: the items of the last row whose next symbol is a terminal in ``scan`` (a
    bitset), advanced, then closed under prediction and completion. With ``init`` set the row
    is the first one (the start item, ``scan`` ignored). Returns OK, REJECT (nothing scanned; the
    chart is unchanged) or a FULL_* code (the caller grows that array and retries)."""
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
        p0 = row_ptr[k - 1]
        for i in range(p0, start):
            x = dr_next[it_dr[i]]
            if x >= 0 and x < n_term and (scan[x >> 6] >> np.uint64(x & 63)) & np.uint64(1):
                end = _add_item(it_dr[i] + 1, it_org[i], start, it_dr, it_org, end, hkey, hgen, gen)
                if end < 0:
                    return FULL_ITEMS
        if end == start:
            return REJECT
    n_words = row_exp.shape[1]
    for w in range(n_words):
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
        f0 += _mix(d * _M1 ^ g0)
        f1 += _mix((d * _M2) ^ _mix(g1 + d))
    row_fp[k, 0] = f0
    row_fp[k, 1] = f1
    row_acc[k] = acc
    row_ptr[k + 1] = end
    meta[0] = n_rows + 1
    return OK


@njit(cache=True, nogil=True, inline="always")
def _any_and3(a, b, c, n_words):  # pragma: no cover - compiled
    """any(a & (b | c)) over ``n_words`` words of three bitset rows."""
    for w in range(n_words):
        if a[w] & (b[w] | c[w]):
            return True
    return False


@njit(cache=True, nogil=True)
def end_lexeme(s, exp, ign, acc_ptr, acc_list, rank, mode, scan):  # pragma: no cover - compiled
    """Which terminals the lexeme read so far (lexer state ``s``) ends as, given the parser's
    expected set ``exp``. Fills ``scan`` with the winners the parser expects and returns 1; returns
    2 when the winner is an ignored terminal (no parser step), 0 when it cannot end here.
    ``acc_list[acc_ptr[s]:acc_ptr[s+1]]`` are the terminals state ``s`` matches."""
    best = -(1 << 40)
    for q in range(acc_ptr[s], acc_ptr[s + 1]):
        t = acc_list[q]
        w = t >> 6
        bit = np.uint64(1) << np.uint64(t & 63)
        if mode == 0 and not ((exp[w] | ign[w]) & bit):
            continue
        if rank[t] > best:
            best = rank[t]
    if best == -(1 << 40):
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
def _lazy_stop(s, exp, ign, acc_bits, lazy_bits, n_words):  # pragma: no cover - compiled
    for w in range(n_words):
        if acc_bits[s, w] & lazy_bits[w] & (exp[w] | ign[w]):
            return True
    return False


@njit(cache=True, nogil=True)
def lex_byte(s, b, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode,
             dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
             it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan):  # pragma: no cover
    """Feed byte ``b`` at lexer state ``s`` with the parser at its last row. Returns the new lexer
    state (the chart may have gained a row: a lexeme ended before ``b``), -1 if ``b`` is not
    allowed, or a FULL_* code minus 10 (e.g. -11) when the chart must grow (nothing changed)."""
    n_words = row_exp.shape[1]
    last = meta[0] - 1
    exp = row_exp[last]
    t = trans[s, b]
    if t >= 0 and not (s != lex_start and _lazy_stop(s, exp, ign, acc_bits, lazy_bits, n_words)):
        if mode == 1:
            # global lexing: the longest match over all terminals is taken; it must stay viable
            if _any_and3(reach_bits[t], exp, ign, n_words):
                return t
            return -1
        if _any_and3(reach_bits[t], exp, ign, n_words):
            return t
    if s == lex_start:
        return -1
    r = end_lexeme(s, exp, ign, acc_ptr, acc_list, rank, mode, scan)
    if r == 0:
        return -1
    if r == 1:
        st = push_row(dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                      it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan, False)
        if st < 0:
            return st - 10
        if st == 0:
            return -1
        exp = row_exp[meta[0] - 1]
    t = trans[lex_start, b]
    if t >= 0 and _any_and3(reach_bits[t], exp, ign, n_words):
        return t
    if r == 1:
        meta[0] -= 1  # undo the row
    return -1


@njit(cache=True, nogil=True)
def eos_allowed(s, lex_start, acc_ptr, acc_list, ign, rank, mode, dr_next, dr_lhs, pred_ptr, pred_dr, nullable,
                n_term, accept_dr, it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta,
                scan):  # pragma: no cover - compiled
    """1 if the text can end here (lexer at ``s``), 0 if not, a FULL_* code if the chart must grow.
    The chart is left as it was."""
    last = meta[0] - 1
    if s == lex_start:
        return np.int64(row_acc[last])
    r = end_lexeme(s, row_exp[last], ign, acc_ptr, acc_list, rank, mode, scan)
    if r == 0:
        return 0
    if r == 2:
        return np.int64(row_acc[last])
    st = push_row(dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                  it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan, False)
    if st < 0:
        return st
    if st == 0:
        return 0
    ok = row_acc[meta[0] - 1]
    meta[0] -= 1
    return np.int64(ok)


@njit(cache=True, nogil=True)
def fill_mask(nodes, subtree_end, max_depth, s0, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign,
              rank, mode, dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
              it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, out):  # pragma: no cover
    """OR into ``out`` (uint32 words) every token whose bytes are allowed from lexer state ``s0``
    with the parser at the chart's last row. The chart is restored before returning. Returns OK or a
    FULL_* code (then ``out`` is incomplete: grow and call again)."""
    n = nodes.shape[0]
    n_words = row_exp.shape[1]
    lex = np.empty(max_depth + 1, np.int32)
    rows = np.empty(max_depth + 1, np.int64)
    scan = np.zeros(n_words, np.uint64)
    base_rows = meta[0]
    lex[0] = s0
    rows[0] = base_rows
    status = OK
    i = 1
    while i < n:
        r = nodes[i]
        d = (r >> 8) & 0xFFFF
        meta[0] = rows[d - 1]
        s = lex_byte(lex[d - 1], r & 0xFF, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode,
                     dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                     it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan)
        if s < 0:
            if s < -1:
                status = s + 10
                break
            i = subtree_end[i]
            continue
        lex[d] = s
        rows[d] = meta[0]
        t = (r >> 24) - 1
        if t >= 0:
            out[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        i += 1
    meta[0] = base_rows
    return status


@njit(cache=True, nogil=True)
def advance_bytes(flat, start, stop, s0, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode,
                  dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                  it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta):  # pragma: no cover
    """Feed ``flat[start:stop]``; returns the final lexer state (rows appended to the chart), -1 if
    a byte is refused, or a FULL_* code minus 10. On failure the caller restores the row count."""
    scan = np.zeros(row_exp.shape[1], np.uint64)
    s = s0
    for k in range(start, stop):
        s = lex_byte(s, flat[k], trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits, lazy_bits, ign, rank, mode,
                     dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                     it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan)
        if s < 0:
            return s
    return s


@njit(cache=True, nogil=True)
def lexer_walk(nodes, subtree_end, max_depth, s0, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits,
               lazy_bits, has_lazy, ign, rank, mode, exp, out, bnd_node, bnd_state):  # pragma: no cover
    """The part of a mask that depends only on the lexer state ``s0`` and the parser's expected
    set ``exp``: OR into ``out`` every token whose bytes stay inside lexemes the parser does not
    see (the current one, and ignored ones after it). Where a token would end a lexeme the parser
    must scan, record the trie node and the lexer state before it in ``bnd_node``/``bnd_state``
    (its subtree is left for :func:`boundary_walk`). Returns the number of such boundaries."""
    n = nodes.shape[0]
    n_states = trans.shape[0]
    n_words = exp.shape[0]
    ok = np.zeros(n_states, np.uint8)
    stop = np.zeros(n_states, np.uint8)
    for st in range(n_states):
        for w in range(n_words):
            if reach_bits[st, w] & (exp[w] | ign[w]):
                ok[st] = 1
                break
        if has_lazy:
            for w in range(n_words):
                if acc_bits[st, w] & lazy_bits[w] & (exp[w] | ign[w]):
                    stop[st] = 1
                    break
    endres = np.full(n_states, -1, np.int8)
    scan = np.zeros(n_words, np.uint64)
    lex = np.empty(max_depth + 1, np.int32)
    lex[0] = s0
    nb = 0
    i = 1
    while i < n:
        r = nodes[i]
        d = (r >> 8) & 0xFFFF
        s = lex[d - 1]
        b = r & 0xFF
        t = trans[s, b]
        if t >= 0 and not (stop[s] and s != lex_start):
            if ok[t]:
                lex[d] = t
                tok = (r >> 24) - 1
                if tok >= 0:
                    out[tok >> 5] |= np.uint32(1) << np.uint32(tok & 31)
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
            e = end_lexeme(s, exp, ign, acc_ptr, acc_list, rank, mode, scan)
            endres[s] = e
        if e == 1:
            bnd_node[nb] = i
            bnd_state[nb] = s
            nb += 1
            i = subtree_end[i]
            continue
        if e == 2:
            t = trans[lex_start, b]
            if t >= 0 and ok[t]:
                lex[d] = t
                tok = (r >> 24) - 1
                if tok >= 0:
                    out[tok >> 5] |= np.uint32(1) << np.uint32(tok & 31)
                i += 1
                continue
        i = subtree_end[i]
    return nb


@njit(cache=True, nogil=True)
def boundary_walk(nodes, subtree_end, max_depth, bnd_node, bnd_state, nb, trans, lex_start, acc_bits, acc_ptr,
                  acc_list, reach_bits, lazy_bits, ign, rank, mode, dr_next, dr_lhs, pred_ptr, pred_dr, nullable,
                  n_term, accept_dr, it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta,
                  out):  # pragma: no cover
    """Finish a mask after :func:`lexer_walk`: for each recorded boundary (grouped by lexer state,
    so the parser scans each ended lexeme once) push the parser row and walk the node's subtree
    with lexer and parser together. The chart is restored. Returns OK or a FULL_* code."""
    n_words = row_exp.shape[1]
    lex = np.empty(max_depth + 1, np.int32)
    rows = np.empty(max_depth + 1, np.int64)
    scan = np.zeros(n_words, np.uint64)
    base = meta[0]
    status = OK
    k = 0
    while k < nb:
        s_par = bnd_state[k]
        meta[0] = base
        r = end_lexeme(s_par, row_exp[base - 1], ign, acc_ptr, acc_list, rank, mode, scan)
        st = REJECT
        if r == 1:
            st = push_row(dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term, accept_dr,
                          it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan, False)
        if st < 0:
            status = st
            break
        rows1 = meta[0]
        while k < nb and bnd_state[k] == s_par:
            if st == OK:
                i0 = bnd_node[k]
                d0 = (nodes[i0] >> 8) & 0xFFFF
                lex[d0 - 1] = lex_start
                rows[d0 - 1] = rows1
                end = subtree_end[i0]
                i = i0
                while i < end:
                    rr = nodes[i]
                    d = (rr >> 8) & 0xFFFF
                    meta[0] = rows[d - 1]
                    s = lex_byte(lex[d - 1], rr & 0xFF, trans, lex_start, acc_bits, acc_ptr, acc_list, reach_bits,
                                 lazy_bits, ign, rank, mode, dr_next, dr_lhs, pred_ptr, pred_dr, nullable, n_term,
                                 accept_dr, it_dr, it_org, row_ptr, row_exp, row_acc, row_fp, hkey, hgen, meta, scan)
                    if s < 0:
                        if s < -1:
                            status = s + 10
                            break
                        i = subtree_end[i]
                        continue
                    lex[d] = s
                    rows[d] = meta[0]
                    tok = (rr >> 24) - 1
                    if tok >= 0:
                        out[tok >> 5] |= np.uint32(1) << np.uint32(tok & 31)
                    i += 1
                if status != OK:
                    break
            k += 1
        if status != OK:
            break
    meta[0] = base
    return status
