"""The string-body kernels (``logitgate.kernels.body_kernels``) against a plain-Python reference:
set propagation over the lexer DFA, one continuation level at a time, and a chain built from it."""
from __future__ import annotations

import numpy as np
import pytest

import logitgate
from logitgate.kernels import body_kernels as bk

_FORMS = (
    (range(0xC2, 0xE0), ((0x80, 0xBF),)),
    (range(0xE0, 0xE1), ((0xA0, 0xBF), (0x80, 0xBF))),
    (range(0xE1, 0xED), ((0x80, 0xBF), (0x80, 0xBF))),
    (range(0xED, 0xEE), ((0x80, 0x9F), (0x80, 0xBF))),
    (range(0xEE, 0xF0), ((0x80, 0xBF), (0x80, 0xBF))),
    (range(0xF0, 0xF1), ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    (range(0xF1, 0xF4), ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    (range(0xF4, 0xF5), ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))),
)
_PLAIN = [b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C)]


def ref_utf8_to(trans, accepts, s, succ):
    mids: set[int] = set()
    for leads, conts in _FORMS:
        frontier = {int(trans[s, b]) for b in leads}
        if succ < 0:
            if frontier != {-1}:
                return None
            continue
        for lo, hi in conts:
            if -1 in frontier:
                return None
            mids |= frontier
            frontier = {int(trans[f, b]) for f in frontier for b in range(lo, hi + 1)}
        if frontier != {succ}:
            return None
    if any(accepts[m] for m in mids):
        return None
    return tuple(sorted(mids))


def ref_chain(trans, accepts, lex, limit):
    states, mids, s = [], [], lex
    while len(states) < limit:
        row = trans[s, _PLAIN]
        succ = int(row[0])
        if not (row == succ).all() or accepts[s]:
            return None
        m = ref_utf8_to(trans, accepts, s, succ)
        if m is None:
            return None
        if succ < 0:
            break
        states.append(succ)
        mids.append(m)
        s = succ
    return states, mids


GRAMMARS = [
    logitgate.Grammar.from_json_schema({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 12}, "b": {"type": "string", "minLength": 2, "pattern": "^[a-zé]+$"},
        "c": {"type": "string", "format": "date"}, "d": {"type": "string"}}}),
    logitgate.Grammar.from_lark('start: "<" /[^>]{0,5}/ ">" | "[" /[^\\]\\n\\u00e9]*/ "]"'),
    logitgate.Grammar.json(),
]


@pytest.mark.parametrize("grammar", GRAMMARS, ids=["schema", "lark", "json"])
def test_chain_and_mids_equal_the_reference(grammar, tok_spm):
    engine = logitgate.compile(grammar, tok_spm).engine
    trans = engine.lexer.trans
    accepts = engine.lexer.acc_bits.any(axis=1)
    bodies = 0
    for s in range(engine.lexer.n_states):
        row = trans[s, _PLAIN]
        succ = int(np.bincount(row + 1).argmax()) - 1
        mids = np.empty(256, np.int64)
        end = bk.utf8_mids(trans, accepts.astype(np.uint8), bk.UTF8_FORMS, s, succ, mids, 0)
        assert (None if end < 0 else tuple(mids[:end].tolist())) == ref_utf8_to(trans, accepts, s, succ)
        got = engine._plain_chain(s, 20)
        want = ref_chain(trans, accepts, s, 20)
        if want is None:
            assert got is None
        else:
            bodies += 1
            assert got is not None and got[0].tolist() == want[0]
            states, mids, off = got
            assert [tuple(mids[off[k]:off[k + 1]].tolist()) for k in range(len(states))] == want[1]
    assert bodies > 0  # the grammars do have string bodies


@pytest.mark.parametrize("grammar, has_chain", list(zip(GRAMMARS, [True, False, True])), ids=["schema", "lark", "json"])
def test_body_entry_and_steps_equal_numpy(grammar, has_chain, tok_spm):
    """``body_entry`` (the step into a body) and ``body_steps`` (how far a walk goes on) against
    the numpy formulation they replace, for every lexer state and several expected sets."""
    engine = logitgate.compile(grammar, tok_spm).engine
    lx = engine.lexer
    trans = lx.trans
    accepts = lx.acc_bits.any(axis=1)
    rng = np.random.default_rng(7)
    exps = [np.full(lx.acc_bits.shape[1], ~np.uint64(0)), np.zeros(lx.acc_bits.shape[1], np.uint64)]
    exps += [rng.integers(0, 2**63, lx.acc_bits.shape[1], dtype=np.int64).astype(np.uint64) for _ in range(4)]
    checked = entered = 0
    for s in range(lx.n_states):
        elsewhere = np.zeros(256, np.uint8)
        first = np.empty(256, np.int64)
        succ, n = bk.body_entry(trans, accepts.astype(np.uint8), bk.PLAIN_ASCII, bk.UTF8_FORMS, s, elsewhere, first)
        if accepts[s]:
            assert succ == -2
            continue
        row = trans[s, _PLAIN]
        want = int(np.bincount(row + 1).argmax()) - 1
        assert succ == want
        if succ < 0:
            continue
        entered += 1
        want_else = np.zeros(256, np.uint8)
        want_else[np.asarray(_PLAIN)[row != succ]] = 1
        mids = ref_utf8_to(trans, accepts, s, succ)
        if mids is None:
            want_else[0xC2:0xF5] = 1
            mids = ()
        assert elsewhere.tolist() == want_else.tolist() and tuple(first[:n].tolist()) == mids
        chain = engine._plain_chain(succ, 20)
        if chain is None:
            continue
        states, cm, off = chain
        every = np.concatenate(([succ], states))
        per_step = [mids] + [tuple(cm[off[k]:off[k + 1]].tolist()) for k in range(len(states))]
        for exp in exps:
            live = exp | lx.ignore_bits
            viable = (lx.reach_bits[every] & live).any(axis=1)
            steps = int(viable.argmin()) if not viable.all() else len(viable)
            stuck = [k for k, ms in enumerate(per_step) for m in ms if not (lx.reach_bits[m] & live).any()]
            want_n = -1 if stuck and min(stuck) < steps else steps
            got = bk.body_steps(lx.reach_bits, exp, lx.ignore_bits, every, np.asarray(mids, np.int64), cm, off)
            assert got == want_n
            checked += 1
    assert entered > 0 and (checked > 0) == has_chain


def _utf8_table(fan_out_3byte: bool) -> tuple[np.ndarray, np.ndarray]:
    """A lexer table whose state 0 is a string body: plain ASCII loops on it and every valid
    UTF-8 character leads back to it. With ``fan_out_3byte``, the characters with lead bytes
    E1..EC pass through a different state for every (lead, first continuation) pair: 12 x 64
    states at one position, past the kernels' frontier cap."""
    rows: list[np.ndarray] = []

    def new() -> int:
        rows.append(np.full(256, -1, np.int32))
        return len(rows) - 1

    body = new()
    for b in _PLAIN:
        rows[body][b] = body
    for leads, conts in _FORMS:
        if fan_out_3byte and leads == range(0xE1, 0xED):
            for lead in leads:
                mid = new()
                rows[body][lead] = mid
                for c in range(conts[0][0], conts[0][1] + 1):
                    last = new()
                    rows[mid][c] = last
                    rows[last][conts[1][0]:conts[1][1] + 1] = body
            continue
        states = [new() for _ in conts]
        for lead in leads:
            rows[body][lead] = states[0]
        for k, (lo, hi) in enumerate(conts):
            rows[states[k]][lo:hi + 1] = states[k + 1] if k + 1 < len(conts) else body
    trans = np.vstack(rows)
    return trans, np.zeros(trans.shape[0], np.uint8)


def test_a_frontier_past_the_cap_is_not_a_body() -> None:
    """The overflow paths: more distinct states at one position of a character than the frontier
    holds, or more mids than the buffer, make the kernels answer "not a body" (the caller then
    walks the whole trie: slower, never wrong)."""
    trans, accepts = _utf8_table(False)
    mids = np.empty(4096, np.int64)
    n = bk.utf8_mids(trans, accepts, bk.UTF8_FORMS, 0, 0, mids, 0)
    assert n > 0 and tuple(mids[:n].tolist()) == ref_utf8_to(trans, accepts.astype(bool), 0, 0)
    fanned, acc2 = _utf8_table(True)
    assert fanned.shape[0] > 12 * 64  # the fan-out is there
    assert bk.utf8_mids(fanned, acc2, bk.UTF8_FORMS, 0, 0, mids, 0) == -1
    states = np.empty(8, np.int64)
    off = np.zeros(9, np.int64)
    assert bk.plain_chain(fanned, acc2, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, mids, off) == -1
    # a mids buffer too small for one step is an overflow too
    assert bk.plain_chain(trans, accepts, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, np.empty(n - 1, np.int64),
                          off) == -1
    assert bk.plain_chain(trans, accepts, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, mids, off) == 8
    assert states.tolist() == [0] * 8 and off[8] == 8 * n  # the self-loop, copied step by step
