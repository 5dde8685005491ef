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
from numba import types

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit, walk_njit

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
def plain_chain(R, plain, forms, lex, limit, states, mids, mid_off, stop):  # pragma: no cover - compiled
    """The chain of string-body steps from ``lex``: ``states[k]`` is (a state :func:`same_for` as)
    the state after ``k + 1`` plain characters, the states inside multi-byte characters on the
    way to it are ``mids[mid_off[k]:mid_off[k + 1]]``. Stops after ``limit`` steps, before the
    first state where every plain character stops the walk, or at the first state where a lexeme
    the walk looks at ends (a piece of a long string, exactly so many characters long): it is the
    chain's last state, and ``stop[0]`` is set to 1 (else 0). Returns the number of steps, or -1
    when some state on the way is not a body step (plain characters go different ways, a lexeme
    ends at ``lex`` itself, or a buffer overflows)."""
    return _plain_chain(R, plain, forms, lex, limit, states, mids, mid_off, stop, np.empty(_MAX_FRONTIER, np.int64),
                        np.empty(_MAX_FRONTIER, np.int64))


@walk_njit
def _plain_chain(R, plain, forms, lex, limit, states, mids, mid_off, stop, frontier,
                 nxt):  # pragma: no cover - compiled
    trans, acc_bits, reach_bits, exp, ign, sel, off, term, part = R
    s = lex
    n = 0
    mid_off[0] = 0
    stop[0] = 0
    while n < limit:
        if _ends(acc_bits, sel, s):
            if n == 0:
                return -1
            stop[0] = 1  # tokens going on past here leave the lexeme: the caller walks them
            return n
        prev_raw = trans[s, plain[0]]
        succ = _canon(reach_bits, exp, ign, prev_raw)
        for i in range(1, plain.shape[0]):
            raw = trans[s, plain[i]]
            if raw == prev_raw:
                continue  # a run of one target (most of a row): looked at once
            prev_raw = raw
            if not _same(reach_bits, off, term, part, sel, _canon(reach_bits, exp, ign, raw), succ):
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
    lead to many states, not one chain: :func:`plain_chain` refuses it). For a lexer whose states'
    components are unknown (``CFGEngine._closure_closed``; with them, ``parts_text`` answers per
    terminal). Returns how many states (``lex`` first) plain characters lead to, written to
    ``members``; -1 when some string of them stops the walk or ends a lexeme, or when ``members``
    is full."""
    return _plain_closure(R, plain, forms, lex, members, np.zeros(R[0].shape[0], np.bool_),
                          np.empty(_MAX_FRONTIER, np.int64), np.empty(_MAX_FRONTIER, np.int64))


@njit(cache=True, nogil=True, inline="always")
def _close_add(seen, t, members, n):  # pragma: no cover - compiled
    """Add state ``t`` to ``members[:n]`` unless it is there: the new length, -1 when full."""
    if seen[t]:
        return n
    if n >= members.shape[0]:
        return -1
    seen[t] = True
    members[n] = t
    return n + 1


@walk_njit
def _plain_closure(R, plain, forms, lex, members, seen, frontier, nxt):  # pragma: no cover - compiled
    trans, acc_bits, reach_bits, exp, ign, sel, _, _, _ = R
    n = _close_add(seen, lex, members, 0)
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
            n = _close_add(seen, t, members, n)
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
                n = _close_add(seen, frontier[i], members, n)
                if n < 0:
                    return -1
    return n


PART_TEXT_STATES = 16384
"""The most states :func:`parts_text` follows from one part state (those after whole characters and
those inside one: about 19 per character of a length counter, so a ``maxLength`` up to ~860 fits);
past it, that state and those met on the way are answered "refuses text and accepts on the way"
(safe: they are then not closed), so a longer counter is not searched again at its next step."""


def _ro(dtype: object, ndim: int) -> object:
    return types.Array(dtype, ndim, "C", readonly=True)


@njit(cache=True, nogil=True, inline="always")
def _part_node(slots, node_state, node_role, node_slot, refused, accepts, acc, nn, t, role):  # pragma: no cover
    """The search node of state ``t`` in ``role`` (added when new, its hash slot kept in
    ``node_slot``): ``(index, nn)``, index -1 when the nodes are full."""
    key = t * 32 + role + 1
    mask = slots.shape[0] - 1
    h = (key * 0x9E3779B1) & mask
    while slots[h] >= 0:
        k = slots[h]
        if node_state[k] == t and node_role[k] == role:
            return k, nn
        h = (h + 1) & mask
    if nn >= node_state.shape[0]:
        return -1, nn
    slots[h] = nn
    node_slot[nn] = h
    node_state[nn] = t
    node_role[nn] = role
    refused[nn] = False
    accepts[nn] = acc[t]
    return nn, nn + 1


@njit(cache=True, nogil=True, inline="always")
def _part_edge(slots, node_state, node_role, node_slot, refused, accepts, acc, nn, e_src, e_dst, ne, src, t,
               role):  # pragma: no cover - compiled
    """The move from node ``src`` to state ``t`` in ``role`` (-1: refused, marked on ``src``):
    ``(nn, ne)`` after adding the node and the edge, ``(-nn - 1, ne)`` when either overflows."""
    if t < 0:
        refused[src] = True
        return nn, ne
    dst, nn = _part_node(slots, node_state, node_role, node_slot, refused, accepts, acc, nn, t, role)
    if dst < 0 or ne >= e_src.shape[0]:
        return -nn - 1, ne
    e_src[ne] = src
    e_dst[ne] = dst
    return nn, ne + 1


@walk_njit
def _part_search(table, column, acc, plain, forms, p, slots, node_state, node_role, node_slot, refused, accepts,
                 e_src, e_dst):  # pragma: no cover - compiled
    """:func:`parts_text`'s search from ``p``, breadth-first over nodes (see there): ``(nn, ne)``,
    the nodes and the edges ``e_src[:ne]`` -> ``e_dst[:ne]`` between them; ``-nn - 1`` when the
    nodes or the edges overflow."""
    _, nn = _part_node(slots, node_state, node_role, node_slot, refused, accepts, acc, 0, p, -1)
    ne = 0
    head = 0
    while head < nn:
        src = head
        q = node_state[head]
        role = node_role[head]
        head += 1
        if role < 0:  # after whole characters: plain ASCII, then the lead bytes of every form
            for k in range(-1, forms.shape[0]):
                lo = 0 if k < 0 else forms[k, 0]
                hi = plain.shape[0] - 1 if k < 0 else forms[k, 1]
                nrole = -1 if k < 0 else 3 * k
                prev = -3
                for i in range(lo, hi + 1):
                    t = table[q, column[plain[i] if k < 0 else i]]
                    if t == prev:
                        continue
                    prev = t
                    nn, ne = _part_edge(slots, node_state, node_role, node_slot, refused, accepts, acc, nn, e_src, e_dst,
                                        ne, src, t, nrole)
                    if nn < 0:
                        return nn, ne
        else:  # inside a character of form k, before its c-th continuation byte
            k = role // 3
            c = role % 3
            nrole = -1 if c + 1 == forms[k, 2] else role + 1
            prev = -3
            for b in range(forms[k, 3 + 2 * c], forms[k, 4 + 2 * c] + 1):
                t = table[q, column[b]]
                if t == prev:
                    continue
                prev = t
                nn, ne = _part_edge(slots, node_state, node_role, node_slot, refused, accepts, acc, nn, e_src, e_dst, ne,
                                    src, t, nrole)
                if nn < 0:
                    return nn, ne
    return nn, ne


@njit(types.void(_ro(types.int32, 2), _ro(types.int32, 1), _ro(types.boolean, 1), _ro(types.int64, 1),
                 _ro(types.int64, 2), types.Array(types.int32, 1, "C"), types.Array(types.int8, 1, "C"),
                 types.Array(types.int8, 1, "C")),
      cache=True, nogil=True)  # loaded at import: a first call mid-generation would cost milliseconds
def parts_text(table, column, acc, plain, forms, todo, closed, ends):  # pragma: no cover - compiled
    """How plain text (see the module docstring) runs from each state ``p`` of ``todo`` in the
    terminals' own DFAs (``table[x, column[b]]``, -1: none; accepting where ``acc``), for those
    not known yet (-1): ``closed[p] = 1`` when every string of plain characters goes on from
    there (none is refused), ``ends[p] = 1`` when the DFA accepts at ``p`` or on the way (also
    inside a multi-byte character). Every state after whole characters that ``p``'s text passes
    is answered too (the same search read backwards: a state is not closed when it reaches a
    refused byte, ends when it reaches an accepting state), so a string's next states, a length
    counter's say, are known at once. A terminal that goes on through any plain text and accepts
    only after something else (a JSON string's closing quote) keeps a lexer state it runs viable,
    and ends no lexeme, along every plain token."""
    n = table.shape[0]
    cap = min(n * (1 + 3 * forms.shape[0]), PART_TEXT_STATES)
    # the search's nodes: a state after whole characters (role -1), or a state inside a character
    # of form k awaiting its c-th continuation byte (role 3k + c), found through a hash table
    size = 1
    while size < 2 * cap:
        size *= 2
    slots = np.full(size, -1, np.int32)
    node_state = np.empty(cap, np.int64)
    node_role = np.empty(cap, np.int32)
    node_slot = np.empty(cap, np.int64)
    refused = np.empty(cap, np.bool_)  # a byte of a plain character is refused right from there
    accepts = np.empty(cap, np.bool_)
    e_src = np.empty(32 * cap, np.int32)
    e_dst = np.empty(32 * cap, np.int32)
    for j in range(todo.shape[0]):
        p = todo[j]
        if closed[p] >= 0 and ends[p] >= 0:
            continue
        nn, ne = _part_search(table, column, acc, plain, forms, p, slots, node_state, node_role, node_slot, refused,
                              accepts, e_src, e_dst)
        if nn < 0:  # too big: this state and those met on the way, safely (not searched again)
            nn = -nn - 1
            closed[p] = 0
            ends[p] = 1
            for i in range(nn):
                if node_role[i] < 0 and ends[node_state[i]] < 0:
                    closed[node_state[i]] = 0
                    ends[node_state[i]] = 1
        else:
            changed = True  # backwards over the edges until nothing changes (breadth-first order)
            while changed:
                changed = False
                for e in range(ne - 1, -1, -1):
                    a = e_src[e]
                    b = e_dst[e]
                    if refused[b] and not refused[a]:
                        refused[a] = True
                        changed = True
                    if accepts[b] and not accepts[a]:
                        accepts[a] = True
                        changed = True
            for i in range(nn):
                if node_role[i] < 0:
                    closed[node_state[i]] = 0 if refused[i] else 1
                    ends[node_state[i]] = 1 if accepts[i] else 0
        for i in range(nn):
            slots[node_slot[i]] = -1


PARTS_ALIKE_PAIRS = 4096
"""The most pairs of part states :func:`parts_alike` compares before it answers "not alike"
(safe: the caller then walks)."""


@njit(types.boolean(_ro(types.int32, 2), _ro(types.boolean, 1), types.int64, types.int64, types.int64,
                    types.Array(types.int64, 1, "C"), types.Array(types.int64, 1, "C"),
                    types.Array(types.int64, 1, "C")),
      cache=True, nogil=True)  # loaded at import, as parts_text
def parts_alike(table, acc, p, q, depth, slots, pairs, pair_slot):  # pragma: no cover - compiled
    """Whether part states ``p`` and ``q`` of one terminal's own DFA (``table[x, column]``, -1:
    none; accepting where ``acc``) behave alike on every byte string of at most ``depth`` bytes:
    after each prefix both are refused, or both go on and accept alike. First each byte repeated
    alone (cheap, and where a length counter near its limit differs first), then breadth-first
    over the pairs met (``slots``: a hash table of pair indexes, all -1, a power of two at least
    twice ``pairs``, left all -1 again; ``pair_slot`` as long as ``pairs``), so a pair met again
    is not followed twice; False past ``pairs.shape[0]`` pairs (unknown). Two length counters far enough from their
    limits are alike, say, where the strings that tell them apart are longer than any token."""
    if acc[p] != acc[q]:
        return False
    if p == q or depth <= 0:
        return True
    n_cols = table.shape[1]
    for c in range(n_cols):  # first, cheaply, each byte repeated: a counter near its limit fails here
        x = p
        y = q
        for _ in range(depth):
            x = table[x, c]
            y = table[y, c]
            if x < 0 or y < 0:
                if x != y:
                    return False
                break
            if acc[x] != acc[y]:
                return False
            if x == y:
                break
    mask = slots.shape[0] - 1
    cap = pairs.shape[0]
    pairs[0] = p * table.shape[0] + q
    pair_slot[0] = (pairs[0] * 0x9E3779B1) & mask
    slots[pair_slot[0]] = 0
    n = 1
    head = 0
    level_end = 1  # pairs[:level_end] are at most `level` bytes away
    level = 0
    alike = True
    while head < n and alike:
        if head == level_end:
            level += 1
            level_end = n
        key = pairs[head]
        head += 1
        x = key // table.shape[0]
        y = key % table.shape[0]
        px = -2
        py = -2
        for c in range(n_cols):
            tx = table[x, c]
            ty = table[y, c]
            if tx == px and ty == py:  # the column before led to the same pair
                continue
            px = tx
            py = ty
            if tx < 0 or ty < 0:
                if tx != ty:
                    alike = False
                    break
                continue
            if acc[tx] != acc[ty]:
                alike = False
                break
            if tx == ty or level + 1 >= depth:
                continue
            nk = tx * table.shape[0] + ty
            h = (nk * 0x9E3779B1) & mask
            while slots[h] >= 0 and pairs[slots[h]] != nk:
                h = (h + 1) & mask
            if slots[h] >= 0:
                continue
            if n >= cap:
                alike = False
                break
            slots[h] = n
            pair_slot[n] = h
            pairs[n] = nk
            n += 1
    for i in range(n):  # clear the slots used
        slots[pair_slot[i]] = -1
    return alike


@njit(cache=True, nogil=True, inline="always")
def _unknown_parts(comp_term, comp_part, lo, hi, flags, memo, todo):  # pragma: no cover - compiled
    """Into ``todo``, the parts ``comp_part[lo:hi]`` of flagged terminals whose ``memo`` is not
    known yet (-1); how many."""
    n = 0
    for k in range(lo, hi):
        if flags[comp_term[k]] and memo[comp_part[k]] < 0:
            todo[n] = comp_part[k]
            n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _any_part(comp_term, comp_part, lo, hi, flags, memo):  # pragma: no cover - compiled
    """Whether a part ``comp_part[lo:hi]`` of a flagged terminal has ``memo`` 1."""
    for k in range(lo, hi):
        if flags[comp_term[k]] and memo[comp_part[k]] == 1:
            return True
    return False


@njit(types.boolean(_ro(types.int32, 2), _ro(types.int32, 1), _ro(types.boolean, 1), _ro(types.int64, 1),
                    _ro(types.int64, 2), _ro(types.int64, 1), _ro(types.int32, 1), _ro(types.int32, 1),
                    _ro(types.boolean, 1), _ro(types.boolean, 1), types.int64, types.Array(types.int8, 1, "C"),
                    types.Array(types.int8, 1, "C")),
      cache=True, nogil=True)  # loaded at import, as parts_text
def parts_closed(table, column, acc, plain, forms, comp_off, comp_term, comp_part, sel, look, lex, closed,
                 ends):  # pragma: no cover - compiled
    """Whether no plain text leaves the lexeme from lexer state ``lex`` (``CFGEngine._plain_closed``):
    of the terminals' own DFAs it runs (``comp_*``), none flagged in ``sel`` (those that end a
    lexeme) accepts on the way, and one flagged in ``look`` (those the walk looks for) goes on
    through any plain text. Asks :func:`parts_text` (memo ``closed``/``ends``) only about the
    parts of flagged terminals: another string's length counter run beside (a long ``maxLength``,
    whose search is cut short) is neither asked nor in the way."""
    lo = comp_off[lex]
    hi = comp_off[lex + 1]
    todo = np.empty(hi - lo, np.int32)
    n = _unknown_parts(comp_term, comp_part, lo, hi, sel, ends, todo)  # parts met for the first time
    if n:
        parts_text(table, column, acc, plain, forms, todo[:n], closed, ends)
    if _any_part(comp_term, comp_part, lo, hi, sel, ends):
        return False  # a lexeme the walk looks at can end on the way
    if _any_part(comp_term, comp_part, lo, hi, look, closed):
        return True
    # known to end nowhere (from an earlier part), not yet if closed
    n = _unknown_parts(comp_term, comp_part, lo, hi, look, closed, todo)
    if n:
        parts_text(table, column, acc, plain, forms, todo[:n], closed, ends)
        return _any_part(comp_term, comp_part, lo, hi, look, closed)
    return False
