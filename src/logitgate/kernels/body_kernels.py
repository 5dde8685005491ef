"""String-body kernels: where plain characters lead a lexer DFA (see
``logitgate.grammar.engine.CFGEngine._body_walk``).

A lexer state is a *string body* step when every plain character (printable ASCII other than
``"`` and ``\\``, and every valid non-ASCII character) leads from it to one same state, passing
only states where no lexeme ends. These kernels find that state, the states inside multi-byte
characters on the way, and the chain of such steps from a state (a string body, a length
counter). "Same" and "ends" are for the terminals a walk looks at: the kernels read the lexer
through ``R = (trans, acc_bits, reach_bits, exp, ign, sel, comp_off, comp_term, comp_part)``
(``CFGEngine._restriction``): a move to a state that reaches nothing in ``exp`` or ``ign``
stops the walk like a refused byte, only terminals in ``sel`` end a lexeme, and two states that
run the same states of ``sel``'s terminals' own DFAs (``comp_*``, see ``LexerTables``) are one.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import walk_njit

# UTF-8 forms of valid scalars: lead bytes lo..hi, how many continuation bytes, and their ranges
UTF8_FORMS = np.array([
    # lead lo, lead hi, n, cont ranges (lo, hi) x 3
    (0xC2, 0xDF, 1, 0x80, 0xBF, 0, 0, 0, 0),
    (0xE0, 0xE0, 2, 0xA0, 0xBF, 0x80, 0xBF, 0, 0),
    (0xE1, 0xEC, 2, 0x80, 0xBF, 0x80, 0xBF, 0, 0),
    (0xED, 0xED, 2, 0x80, 0x9F, 0x80, 0xBF, 0, 0),
    (0xEE, 0xEF, 2, 0x80, 0xBF, 0x80, 0xBF, 0, 0),
    (0xF0, 0xF0, 3, 0x90, 0xBF, 0x80, 0xBF, 0x80, 0xBF),
    (0xF1, 0xF3, 3, 0x80, 0xBF, 0x80, 0xBF, 0x80, 0xBF),
    (0xF4, 0xF4, 3, 0x80, 0x8F, 0x80, 0xBF, 0x80, 0xBF),
], np.int64)
UTF8_FORMS.setflags(write=False)

PLAIN_ASCII = np.array([b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C)], np.int64)  # as plain_text_lengths
PLAIN_ASCII.setflags(write=False)

_MAX_FRONTIER = 64  # more distinct states at one position of a character: "not a body" (safe)


@njit(cache=True, nogil=True, inline="always")
def _add(arr, n, v):  # pragma: no cover - compiled
    """Append ``v`` to ``arr[:n]`` unless present; the new length, -1 when full."""
    for i in range(n):
        if arr[i] == v:
            return n
    if n >= arr.shape[0]:
        return -1
    arr[n] = v
    return n + 1


@njit(cache=True, nogil=True, inline="always")
def _targets(trans, reach_bits, exp, ign, s, lo, hi, out, n):  # pragma: no cover - compiled
    """Add the :func:`_canon` targets of state ``s`` on the bytes ``lo..hi`` to ``out[:n]``
    (distinct; runs of one target in a row looked at once): the new length, -1 when full."""
    prev = -2
    for b in range(lo, hi + 1):
        t = trans[s, b]
        if t == prev:
            continue
        prev = t
        n = _add(out, n, _canon(reach_bits, exp, ign, t))
        if n < 0:
            return -1
    return n


@njit(cache=True, nogil=True, inline="always")
def _continue(trans, reach_bits, exp, ign, frontier, nf, lo, hi, nxt):  # pragma: no cover - compiled
    """The distinct :func:`_canon` targets of the states ``frontier[:nf]`` on the continuation
    bytes ``lo..hi`` into ``nxt``: how many, -1 when ``nxt`` is full."""
    nn = 0
    for i in range(nf):
        nn = _targets(trans, reach_bits, exp, ign, frontier[i], lo, hi, nxt, nn)
        if nn < 0:
            return -1
    return nn


@njit(cache=True, nogil=True, inline="always")
def _reaches(reach_bits, s, exp, ign):  # pragma: no cover - compiled
    """Whether lexer state ``s`` can still reach a terminal in ``exp`` or ``ign`` (the same test
    as ``earley_kernels._viable``, kept here: numba's cache does not follow a call into another
    module, so an edit there would leave this module's compiled code stale)."""
    for w in range(exp.shape[0]):
        if reach_bits[s, w] & (exp[w] | ign[w]):
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _canon(reach_bits, exp, ign, t):  # pragma: no cover - compiled
    """``t``, or -1 when the walk stops there (refused, or no terminal it looks for reachable)."""
    if t < 0 or not _reaches(reach_bits, t, exp, ign):
        return -1
    return t


@njit(cache=True, nogil=True, inline="always")
def _ends(acc_bits, sel, s):  # pragma: no cover - compiled
    """Whether a lexeme the walk looks at (``sel``) ends in state ``s``."""
    for w in range(sel.shape[0]):
        if acc_bits[s, w] & sel[w]:
            return True
    return False


@njit(cache=True, nogil=True, inline="always")
def _same(reach_bits, off, term, part, sel, a, b):  # pragma: no cover - compiled
    """Whether lexer states ``a`` and ``b`` (from :func:`_canon`) behave alike for the terminals
    ``sel``: equal, or running the same states of those terminals' own DFAs (``comp_*``; then
    every continuation reaches and ends the same of them). Always False between distinct states
    when the components are unknown."""
    if a == b:
        return True
    if a < 0 or b < 0 or off.shape[0] == 0:
        return False
    for w in range(sel.shape[0]):  # the terminals still reachable first: cheap, and mostly enough
        if (reach_bits[a, w] ^ reach_bits[b, w]) & sel[w]:
            return False
    i, ie = off[a], off[a + 1]
    j, je = off[b], off[b + 1]
    one = np.uint64(1)
    while True:
        while i < ie and not (sel[term[i] >> 6] >> np.uint64(term[i] & 63)) & one:
            i += 1
        while j < je and not (sel[term[j] >> 6] >> np.uint64(term[j] & 63)) & one:
            j += 1
        if i == ie or j == je:
            return i == ie and j == je
        if part[i] != part[j]:
            return False
        i += 1
        j += 1


@walk_njit
def same_for(R, a, b):  # pragma: no cover - compiled
    """:func:`_same` for the restriction ``R`` (see the module docstring)."""
    return _same(R[2], R[6], R[7], R[8], R[5], a, b)


@njit(cache=True, nogil=True)
def utf8_mids(R, forms, s, succ, mids, start):  # pragma: no cover - compiled
    """Whether every valid non-ASCII character leads from ``s`` to a state :func:`same_for` as
    ``succ`` (``-1``: every one stops the walk), passing only states where the walk goes on and
    no lexeme it looks at ends. If so, appends the states inside the characters (distinct,
    sorted) to ``mids[start:]`` and returns the new end; else -1 (also when ``mids`` or a
    frontier overflows: the caller then treats ``s`` as no body)."""
    return _utf8_mids(R, forms, s, succ, mids, start, np.empty(_MAX_FRONTIER, np.int64),
                      np.empty(_MAX_FRONTIER, np.int64))


@walk_njit
def _utf8_mids(R, forms, s, succ, mids, start, frontier, nxt):  # pragma: no cover - compiled
    """:func:`utf8_mids` with its two frontiers' scratch."""
    trans, acc_bits, reach_bits, exp, ign, sel, off, term, part = R
    n_mids = start
    for k in range(forms.shape[0]):
        nf = _targets(trans, reach_bits, exp, ign, s, forms[k, 0], forms[k, 1], frontier, 0)
        if nf < 0:
            return -1
        if succ < 0:
            if nf != 1 or frontier[0] != -1:
                return -1
            continue
        for c in range(forms[k, 2]):
            for i in range(nf):
                if frontier[i] < 0:
                    return -1
                seen = False
                for j in range(start, n_mids):
                    if mids[j] == frontier[i]:
                        seen = True
                        break
                if not seen:
                    if n_mids >= mids.shape[0]:
                        return -1
                    mids[n_mids] = frontier[i]
                    n_mids += 1
            nn = _continue(trans, reach_bits, exp, ign, frontier, nf, forms[k, 3 + 2 * c], forms[k, 4 + 2 * c], nxt)
            if nn < 0:
                return -1
            for i in range(nn):
                frontier[i] = nxt[i]
            nf = nn
        for i in range(nf):
            if not _same(reach_bits, off, term, part, sel, frontier[i], succ):
                return -1
    for j in range(start, n_mids):
        if _ends(acc_bits, sel, mids[j]):
            return -1
    for j in range(start + 1, n_mids):  # sorted (insertion: they are few; numba's sort allocates)
        v = mids[j]
        q = j - 1
        while q >= start and mids[q] > v:
            mids[q + 1] = mids[q]
            q -= 1
        mids[q + 1] = v
    return n_mids


@njit(cache=True, nogil=True)
def plain_chain(R, plain, forms, lex, limit, states, mids, mid_off):  # pragma: no cover - compiled
    """The chain of string-body steps from ``lex``: ``states[k]`` is (a state :func:`same_for` as)
    the state after ``k + 1`` plain characters, the states inside multi-byte characters on the
    way to it are ``mids[mid_off[k]:mid_off[k + 1]]``. Stops after ``limit`` steps or before the
    first state where every plain character stops the walk. Returns the number of steps, or -1
    when some state on the way is not a body step (plain characters go different ways, a lexeme
    the walk looks at ends there, or a buffer overflows)."""
    return _plain_chain(R, plain, forms, lex, limit, states, mids, mid_off, np.empty(_MAX_FRONTIER, np.int64),
                        np.empty(_MAX_FRONTIER, np.int64))


@walk_njit
def _plain_chain(R, plain, forms, lex, limit, states, mids, mid_off, frontier, nxt):  # pragma: no cover - compiled
    trans, acc_bits, reach_bits, exp, ign, sel, off, term, part = R
    s = lex
    n = 0
    mid_off[0] = 0
    while n < limit:
        prev_raw = trans[s, plain[0]]
        succ = _canon(reach_bits, exp, ign, prev_raw)
        for i in range(1, plain.shape[0]):
            raw = trans[s, plain[i]]
            if raw == prev_raw:
                continue  # a run of one target (most of a row): looked at once
            prev_raw = raw
            if not _same(reach_bits, off, term, part, sel, _canon(reach_bits, exp, ign, raw), succ):
                return -1
        if _ends(acc_bits, sel, s):
            return -1
        end = _utf8_mids(R, forms, s, succ, mids, mid_off[n], frontier, nxt)
        if end < 0:
            return -1
        if succ < 0:
            break
        states[n] = succ
        n += 1
        mid_off[n] = end
        if _same(reach_bits, off, term, part, sel, succ, s):
            # a self-loop (a string body): every later step is this one again
            k = end - mid_off[n - 1]
            while n < limit:
                if mid_off[n] + k > mids.shape[0]:
                    return -1
                for j in range(k):
                    mids[mid_off[n] + j] = mids[mid_off[n - 1] + j]
                states[n] = s
                mid_off[n + 1] = mid_off[n] + k
                n += 1
            break
        s = succ
    return n


@njit(cache=True, nogil=True)
def body_entry(R, plain, forms, lex, elsewhere, first_mids):  # pragma: no cover - compiled
    """The step into a string body from lexer state ``lex``: the state ``succ`` most plain ASCII
    characters lead to (the smallest on a tie), with ``elsewhere[b] = 1`` for the plain characters
    that go another way (to a state not :func:`same_for` as ``succ``) and for every non-ASCII lead
    byte when multi-byte characters do not all lead to ``succ`` (see :func:`utf8_mids`; else the
    states inside them are ``first_mids[:n]``). Returns ``(succ, n)``; ``succ = -2`` when a lexeme
    the walk looks at ends at ``lex`` (no body), ``-1`` when most plain characters stop the walk."""
    m = plain.shape[0]
    # the distinct targets of the plain characters (few: a body, key letters) and their counts;
    # a row's runs of one target are looked at once
    return _body_entry(R, plain, forms, lex, elsewhere, first_mids,
                       np.empty(m, np.int64),  # per character: index into the distinct targets
                       np.empty(m, np.int64), np.zeros(m, np.int64),
                       np.empty(m, np.bool_),  # per distinct target: the same as succ for the walk
                       np.empty(_MAX_FRONTIER, np.int64), np.empty(_MAX_FRONTIER, np.int64))


@walk_njit
def _body_entry(R, plain, forms, lex, elsewhere, first_mids, tgt, dist, cnt, alike, frontier,
                nxt):  # pragma: no cover - compiled
    trans, acc_bits, reach_bits, exp, ign, sel, off, term, part = R
    if _ends(acc_bits, sel, lex):
        return -2, 0
    m = plain.shape[0]
    nd = 0
    prev_raw = -3
    k = -1
    for i in range(m):
        raw = trans[lex, plain[i]]
        if raw != prev_raw:
            prev_raw = raw
            v = _canon(reach_bits, exp, ign, raw)
            k = -1
            for q in range(nd):
                if dist[q] == v:
                    k = q
                    break
            if k < 0:
                k = nd
                dist[nd] = v
                nd += 1
        tgt[i] = k
        cnt[k] += 1
    # the most frequent target, the smallest on a tie
    best = 0
    for q in range(1, nd):
        if cnt[q] > cnt[best] or (cnt[q] == cnt[best] and dist[q] < dist[best]):
            best = q
    succ = dist[best]
    if succ < 0:
        return -1, 0
    for q in range(nd):
        alike[q] = _same(reach_bits, off, term, part, sel, dist[q], succ)
    for i in range(m):
        if not alike[tgt[i]]:
            elsewhere[plain[i]] = 1
    n = _utf8_mids(R, forms, lex, succ, first_mids, 0, frontier, nxt)
    if n < 0:
        for b in range(0xC2, 0xF5):
            elsewhere[b] = 1  # multi-byte characters go their own ways: the full walk
        n = 0
    return succ, n


@walk_njit
def body_steps(reach_bits, exp, ign, every, first_mids, mids, off):  # pragma: no cover - compiled
    """How many steps of a string body a walk goes on through for the expected set ``exp`` (and
    ignored terminals ``ign``): the first ``n`` states of ``every`` that can still reach an
    expected terminal. Returns ``n``, or -1 when a state inside a multi-byte character of one of
    those steps (``first_mids`` for step 0, ``mids[off[k - 1]:off[k]]`` for step ``k``) cannot:
    then ASCII goes on where some characters stop, and the plain tokens are not one row."""
    n = every.shape[0]
    for k in range(every.shape[0]):
        if k > 0 and every[k] == every[k - 1]:
            continue  # a string body's self-loop: the same state again
        if not _reaches(reach_bits, every[k], exp, ign):
            n = k
            break
    for k in range(n):
        if k >= 2 and every[k] == every[k - 1] and every[k - 1] == every[k - 2]:
            continue  # the same step as the one before (its multi-byte states are copies of those)
        lo = 0 if k == 0 else off[k - 1]
        hi = first_mids.shape[0] if k == 0 else off[k]
        for q in range(lo, hi):
            if not _reaches(reach_bits, first_mids[q] if k == 0 else mids[q], exp, ign):
                return -1
    return n


CLOSURE_CAP = 1024
"""The most states :func:`plain_closure` collects before it answers "not closed" (safe)."""


@njit(cache=True, nogil=True)
def plain_closure(R, plain, forms, lex, members):  # pragma: no cover - compiled
    """Whether plain text can never leave the lexeme from lexer state ``lex``: every string of plain
    characters (see the module docstring) leads, byte by byte, only through states where the walk
    goes on and no lexeme it looks at ends. Then every plain token is inside the lexeme, whichever
    way its characters go (an unanchored ``pattern`` before its match, say, where the characters
    lead to many states, not one chain: :func:`plain_chain` refuses it). Returns how many states
    (``lex`` first; one per class of :func:`same_for` states) plain characters lead to, written
    to ``members``; -1 when some string of them stops the walk or ends a lexeme, or when
    ``members`` is full."""
    cap = members.shape[0]
    size = 1
    while size < 2 * cap:
        size *= 2
    return _plain_closure(R, plain, forms, lex, members, np.full(size, -1, np.int64), np.empty(cap, np.int64),
                          np.empty(_MAX_FRONTIER, np.int64), np.empty(_MAX_FRONTIER, np.int64))


@njit(cache=True, nogil=True, inline="always")
def _class_hash(off, term, part, sel, s):  # pragma: no cover - compiled
    """A hash equal for states :func:`_same` holds between (the state itself without components)."""
    if off.shape[0] == 0:
        return np.int64(s)
    h = np.int64(1469598103934665603 & 0x7FFFFFFFFFFFFFFF)
    one = np.uint64(1)
    for i in range(off[s], off[s + 1]):
        if (sel[term[i] >> 6] >> np.uint64(term[i] & 63)) & one:
            h = (h ^ (np.int64(term[i]) * 1000003 + np.int64(part[i]))) * 1099511628211
    return h & 0x7FFFFFFFFFFFFFFF


@njit(cache=True, nogil=True, inline="always")
def _close_add(reach_bits, off, term, part, sel, t, members, hashes, n, slots):  # pragma: no cover - compiled
    """Add state ``t`` to ``members[:n]`` unless a :func:`_same` one is there: the new length, -1
    when full."""
    h = _class_hash(off, term, part, sel, t)
    mask = slots.shape[0] - 1
    j = h & mask
    while slots[j] >= 0:
        k = slots[j]
        if hashes[k] == h and _same(reach_bits, off, term, part, sel, members[k], t):
            return n
        j = (j + 1) & mask
    if n >= members.shape[0]:
        return -1
    slots[j] = n
    members[n] = t
    hashes[n] = h
    return n + 1


@walk_njit
def _plain_closure(R, plain, forms, lex, members, slots, hashes, frontier, nxt):  # pragma: no cover - compiled
    trans, acc_bits, reach_bits, exp, ign, sel, off, term, part = R
    n = _close_add(reach_bits, off, term, part, sel, lex, members, hashes, 0, slots)
    head = 0
    while head < n:
        q = members[head]
        head += 1
        if _ends(acc_bits, sel, q):
            return -1
        prev = -3
        for i in range(plain.shape[0]):
            raw = trans[q, plain[i]]
            if raw == prev:
                continue  # a run of one target (most of a row): looked at once
            prev = raw
            t = _canon(reach_bits, exp, ign, raw)
            if t < 0:
                return -1
            n = _close_add(reach_bits, off, term, part, sel, t, members, hashes, n, slots)
            if n < 0:
                return -1
        for k in range(forms.shape[0]):
            nf = _targets(trans, reach_bits, exp, ign, q, forms[k, 0], forms[k, 1], frontier, 0)
            if nf < 0:
                return -1
            for c in range(forms[k, 2]):
                for i in range(nf):  # a state inside a character: the walk goes on, no lexeme ends
                    if frontier[i] < 0 or _ends(acc_bits, sel, frontier[i]):
                        return -1
                nn = _continue(trans, reach_bits, exp, ign, frontier, nf, forms[k, 3 + 2 * c], forms[k, 4 + 2 * c],
                               nxt)
                if nn < 0:
                    return -1
                for i in range(nn):
                    frontier[i] = nxt[i]
                nf = nn
            for i in range(nf):  # the states after a whole character
                if frontier[i] < 0:
                    return -1
                n = _close_add(reach_bits, off, term, part, sel, frontier[i], members, hashes, n, slots)
                if n < 0:
                    return -1
    return n


@njit(cache=True, nogil=True)
def parts_text(table, column, acc, plain, forms, todo, closed, ends):  # pragma: no cover - compiled
    """How plain text (see the module docstring) runs from each state ``p`` of ``todo`` in the
    terminals' own DFAs (``table[x, column[b]]``, -1: none; accepting where ``acc``), for those
    not known yet (-1): ``closed[p] = 1`` when every string of plain characters goes on from
    there (none is refused), ``ends[p] = 1`` when the DFA accepts at ``p`` or on the way (also
    inside a multi-byte character). The states after whole characters that ``p``'s text passes
    have a subset of it: they get ``closed = 1`` when ``p`` is closed, ``ends = 0`` when ``p``
    accepts nowhere. A terminal that goes on through any plain text and accepts only after
    something else (a JSON string's closing quote) keeps a lexer state it runs viable, and ends
    no lexeme, along every plain token."""
    n = table.shape[0]
    flags = np.zeros(n, np.int32)
    queue = np.empty(n, np.int64)
    touched = np.empty(n, np.int64)
    frontier = np.empty(_MAX_FRONTIER, np.int64)
    nxt = np.empty(_MAX_FRONTIER, np.int64)
    for j in range(todo.shape[0]):
        p = todo[j]
        if closed[p] >= 0 and ends[p] >= 0:
            continue
        code, nq, nt = _part_text(table, column, acc, plain, forms, p, flags, queue, touched, frontier, nxt)
        if code & 1:
            for i in range(nq):
                closed[queue[i]] = 1
        if not code & 2:
            for i in range(nq):
                ends[queue[i]] = 0
        closed[p] = code & 1
        ends[p] = code >> 1
        for i in range(nt):
            flags[touched[i]] = 0


@njit(cache=True, nogil=True, inline="always")
def _part_moves(table, column, acc, q, lo, hi, out, n):  # pragma: no cover - compiled
    """Add the targets of part state ``q`` on the bytes ``lo..hi`` to ``out[:n]`` (distinct; runs
    of one target looked at once): ``(n, refused, accepts)``, ``n`` -1 when ``out`` is full,
    ``refused`` when some byte has no move, ``accepts`` when some target accepts."""
    refused = False
    accepts = False
    prev = -2
    for b in range(lo, hi + 1):
        t = table[q, column[b]]
        if t == prev:
            continue
        prev = t
        if t < 0:
            refused = True
            continue
        accepts = accepts or acc[t]
        n = _add(out, n, t)
        if n < 0:
            break
    return n, refused, accepts


@njit(cache=True, nogil=True, inline="always")
def _enqueue(flags, touched, nt, queue, nq, t):  # pragma: no cover - compiled
    """Queue part state ``t`` (a state after whole characters) unless it was: ``(nt, nq)``."""
    if not flags[t] & 2:
        if flags[t] == 0:
            touched[nt] = t
            nt += 1
        flags[t] |= 2
        queue[nq] = t
        nq += 1
    return nt, nq


@walk_njit
def _part_text(table, column, acc, plain, forms, p, flags, queue, touched, frontier, nxt):  # pragma: no cover - compiled
    """:func:`parts_text` for one state: ``(code, nq, nt)``, bit 0 of ``code`` closed, bit 1 ends
    (``2`` when a frontier overflows: safe); the states after whole characters passed are
    ``queue[:nq]``, every state whose ``flags`` it set is in ``touched[:nt]``. ``flags``: bit 1
    queued, bit 2 + 3k + c: the continuation bytes of form k's c-th byte followed from there."""
    closed = True
    ends = acc[p]
    queue[0] = p
    flags[p] = 2
    touched[0] = p
    nt = 1
    nq = 1
    head = 0
    while head < nq:
        q = queue[head]
        head += 1
        prev = -3
        for i in range(plain.shape[0]):
            t = table[q, column[plain[i]]]
            if t == prev:
                continue
            prev = t
            if t < 0:
                closed = False
                continue
            ends = ends or acc[t]
            nt, nq = _enqueue(flags, touched, nt, queue, nq, t)
        for k in range(forms.shape[0]):
            nf, refused, accepts = _part_moves(table, column, acc, q, forms[k, 0], forms[k, 1], frontier, 0)
            closed = closed and not refused
            ends = ends or accepts
            if nf < 0:
                return 2, nq, nt
            for c in range(forms[k, 2]):
                bit = np.int32(1) << np.int32(2 + 3 * k + c)
                nn = 0
                for i in range(nf):
                    f = frontier[i]
                    if flags[f] & bit:
                        continue  # followed from here before: its successors are in
                    if flags[f] == 0:
                        touched[nt] = f
                        nt += 1
                    flags[f] |= bit
                    nn, refused, accepts = _part_moves(table, column, acc, f, forms[k, 3 + 2 * c], forms[k, 4 + 2 * c],
                                                       nxt, nn)
                    closed = closed and not refused
                    ends = ends or accepts
                    if nn < 0:
                        return 2, nq, nt
                for i in range(nn):
                    frontier[i] = nxt[i]
                nf = nn
            for i in range(nf):  # the states after a whole character
                nt, nq = _enqueue(flags, touched, nt, queue, nq, frontier[i])
    return (1 if closed else 0) | (2 if ends else 0), nq, nt
