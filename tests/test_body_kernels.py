"""The string-body kernels (``logitgate.kernels.body_kernels``) against a plain-Python reference:
set propagation over the lexer DFA, one continuation level at a time, and a chain built from it.
With every terminal expected the kernels see the raw lexer (a state is "the same" as itself only);
restricted to an expected set, states that behave alike for it are one (checked against a
bisimulation of the lexer)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def utf8_with(trans, canon, same, ends, s: int, succ: int):
    """The states inside the multi-byte characters from ``s`` when every one leads to (a state
    ``same`` as) ``succ``, set by set, one continuation level at a time; None otherwise."""
    mids: set[int] = set()
    for leads, conts in _FORMS:
        frontier = {canon(int(trans[s, b])) for b in leads}
        if succ < 0:
            if frontier != {-1}:
                return None
            continue
        for lo, hi in conts:
            if -1 in frontier:
                return None
            mids |= frontier
            frontier = {canon(int(trans[f, b])) for f in frontier for b in range(lo, hi + 1)}
        if not all(same(f, succ) for f in frontier):
            return None
    if any(ends(m) for m in mids):
        return None
    return tuple(sorted(mids))


def ref_utf8_to(trans, accepts, s, succ):
    return utf8_with(trans, lambda t: t, lambda a, b: a == b, lambda m: accepts[m], s, succ)


def chain_with(trans, canon, same, ends, utf8, s: int, limit: int):
    """The chain of body steps from ``s`` (see ``body_kernels.plain_chain``) for a notion of
    where the walk goes on (``canon``), of states that behave alike (``same``), of where a lexeme
    ends (``ends``) and of the states inside characters (``utf8(s, succ)``). Returns
    ``(states, mids, accepts)``: ``accepts`` when the chain stops at a state where a lexeme ends
    (its last state)."""
    states, mids = [], []
    while len(states) < limit:
        if ends(s):
            return (states, mids, True) if states else None
        succ = canon(int(trans[s, _PLAIN[0]]))
        if not all(same(canon(int(trans[s, b])), succ) for b in _PLAIN):
            return None
        m = utf8(s, succ)
        if m is None:
            return None
        if succ < 0:
            break
        states.append(succ)
        mids.append(m)
        if same(succ, s):  # a loop: the kernel repeats the state it came from
            states += [s] * (limit - len(states))
            mids += [m] * (limit - len(mids))
            break
        s = succ
    return states, mids, False


def ref_chain(trans, accepts, lex, limit):
    return chain_with(trans, lambda t: t, lambda a, b: a == b, lambda s: accepts[s],
                      lambda s, succ: ref_utf8_to(trans, accepts, s, succ), lex, limit)


def all_of(engine) -> tuple:
    """The kernels' view of ``engine``'s lexer with every terminal expected."""
    return engine._restriction(np.full(engine.lexer.acc_bits.shape[1], ~np.uint64(0)))


def raw_view(trans: np.ndarray, accepts: np.ndarray) -> tuple:
    """A restriction over a bare table: one terminal, every state viable, no components."""
    n = trans.shape[0]
    acc = accepts.astype(np.uint64).reshape(n, 1)
    ones = np.ones(1, np.uint64)
    return (trans, acc, np.ones((n, 1), np.uint64), ones, np.zeros(1, np.uint64), ones.copy(),
            np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))


GRAMMARS = [
    logitgate.Grammar.from_json_schema({"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 12}, "b": {"type": "string", "minLength": 2, "pattern": "^[a-zé]+$"},
        "c": {"type": "string", "format": "date"}, "d": {"type": "string"}}}),
    logitgate.Grammar.from_lark('start: "<" /[^>]{0,5}/ ">" | "[" /[^\\]\\n\\u00e9]*/ "]"'),
    logitgate.Grammar.json(),
]


@pytest.mark.parametrize("grammar", GRAMMARS, ids=["schema", "lark", "json"])
def test_chain_and_mids_equal_the_reference(grammar, tok_spm):
    engine = logitgate.compile(grammar, tok_spm, cache=False).engine
    trans = engine.lexer.trans
    accepts = engine.lexer.acc_bits.any(axis=1)
    R = all_of(engine)
    bodies = 0
    for s in range(engine.lexer.n_states):
        row = trans[s, _PLAIN]
        succ = int(np.bincount(row + 1).argmax()) - 1
        mids = np.empty(256, np.int64)
        end = bk.utf8_mids(R, bk.UTF8_FORMS, s, succ, mids, 0)
        assert (None if end < 0 else tuple(mids[:end].tolist())) == ref_utf8_to(trans, accepts, s, succ)
        # memoised with the suffixes of earlier chains: the same as each chain computed afresh
        got = engine._plain_chain(R, b"all", s, 20)
        want = ref_chain(trans, accepts, s, 20)
        if want is None:
            assert got is None
        else:
            bodies += 1
            assert got is not None and got[0].tolist() == want[0]
            states, mids, off, ends_in_lexeme_end = got
            assert [tuple(mids[off[k]:off[k + 1]].tolist()) for k in range(len(states))] == want[1]
            assert ends_in_lexeme_end == want[2]
    assert bodies > 0  # the grammars do have string bodies


@pytest.mark.parametrize("grammar, has_chain", list(zip(GRAMMARS, [True, False, True])), ids=["schema", "lark", "json"])
def test_body_entry_and_steps_equal_numpy(grammar, has_chain, tok_spm):
    """``body_entry`` (the step into a body) and ``body_steps`` (how far a walk goes on) against
    the numpy formulation they replace, for every lexer state and several expected sets."""
    engine = logitgate.compile(grammar, tok_spm, cache=False).engine
    lx = engine.lexer
    trans = lx.trans
    accepts = lx.acc_bits.any(axis=1)
    R = all_of(engine)
    rng = np.random.default_rng(7)
    exps = [np.full(lx.acc_bits.shape[1], ~np.uint64(0)), np.zeros(lx.acc_bits.shape[1], np.uint64)]
    exps += [rng.integers(0, 2**63, lx.acc_bits.shape[1], dtype=np.int64).astype(np.uint64) for _ in range(4)]
    checked = entered = 0
    for s in range(lx.n_states):
        elsewhere = np.zeros(256, np.uint8)
        first = np.empty(256, np.int64)
        succ, n = bk.body_entry(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, s, elsewhere, first)
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
        chain = engine._plain_chain(R, b"all", succ, 20)
        if chain is None:
            continue
        states, cm, off, _ = chain
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
    R = raw_view(trans, accepts)
    mids = np.empty(4096, np.int64)
    n = bk.utf8_mids(R, bk.UTF8_FORMS, 0, 0, mids, 0)
    assert n > 0 and tuple(mids[:n].tolist()) == ref_utf8_to(trans, accepts.astype(bool), 0, 0)
    fanned, acc2 = _utf8_table(True)
    R2 = raw_view(fanned, acc2)
    assert fanned.shape[0] > 12 * 64  # the fan-out is there
    assert bk.utf8_mids(R2, bk.UTF8_FORMS, 0, 0, mids, 0) == -1
    states = np.empty(8, np.int64)
    off = np.zeros(9, np.int64)
    stop = np.zeros(1, np.int64)
    assert bk.plain_chain(R2, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, mids, off, stop) == -1
    # a mids buffer too small for one step is an overflow too
    assert bk.plain_chain(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, np.empty(n - 1, np.int64), off, stop) == -1
    assert bk.plain_chain(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, 0, 8, states, mids, off, stop) == 8 and stop[0] == 0
    assert states.tolist() == [0] * 8 and off[8] == 8 * n  # the self-loop, copied step by step


class Bisim:
    """Which lexer states behave alike for the terminals ``sel`` (viability for ``exp | ign``):
    a breadth-first bisimulation over pairs of states, observing per state whether the walk goes
    on there and which of ``sel``'s terminals end there."""

    def __init__(self, lx, exp: np.ndarray, sel: np.ndarray) -> None:
        self.lx, self.sel = lx, sel
        self.live = exp | lx.ignore_bits
        self.memo: dict[tuple[int, int], bool] = {}

    def canon(self, t: int) -> int:
        return t if t >= 0 and (self.lx.reach_bits[t] & self.live).any() else -1

    def obs(self, x: int):
        x = self.canon(x)
        return None if x < 0 else (self.lx.acc_bits[x] & self.sel).tobytes()

    def same(self, a: int, b: int) -> bool:
        key = (min(a, b), max(a, b))
        if a == b:
            return True
        if key not in self.memo:
            seen, todo, ok = set(), [key], True
            while todo and ok:
                x, y = todo.pop()
                if x == y or (x, y) in seen:
                    continue
                seen.add((x, y))
                ox, oy = self.obs(x), self.obs(y)
                ok = ox == oy
                if ok and ox is not None:
                    todo += [(int(p), int(q)) for p, q in zip(self.lx.trans[x], self.lx.trans[y])]
            self.memo[key] = ok
        return self.memo[key]

    def ends(self, s: int) -> bool:
        return bool((self.lx.acc_bits[s] & self.sel).any())


def ref_restricted_utf8(trans, B: Bisim, s: int, succ: int):
    return utf8_with(trans, B.canon, B.same, B.ends, s, succ)


def ref_restricted_chain(trans, B: Bisim, s: int, limit: int):
    return chain_with(trans, B.canon, B.same, B.ends, lambda s, succ: ref_restricted_utf8(trans, B, s, succ), s,
                      limit)


def test_restricted_kernels_equal_a_bisimulation(tok_spm, monkeypatch):
    """For the expected sets a walk meets in a schema whose keys and string values share lexer
    states (other keys allowed, length limits), the restricted kernels agree with the reference
    built on a bisimulation of the lexer: ``same_for`` is exactly "behaves alike for the expected
    terminals", and the step into a body and its chain follow from it."""
    from logitgate.grammar.engine import CFGEngine

    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 6}, "note": {"type": "string"},
        "nick": {"type": "string", "pattern": "^[a-z]+$"}},
        "additionalProperties": {"type": "string", "maxLength": 4}}
    compiled = logitgate.compile(logitgate.Grammar.from_json_schema(schema), tok_spm, cache=False)
    engine = compiled.engine
    seen: dict[tuple[int, bytes], np.ndarray] = {}
    partial = CFGEngine._partial_mask

    def record(self, lex, exp, first=None):
        seen.setdefault((int(lex), exp.tobytes()), exp.copy())
        return partial(self, lex, exp, first)

    monkeypatch.setattr(CFGEngine, "_partial_mask", record)
    m = logitgate.Matcher(compiled)
    for piece in ['{"name":"Ada é","note":"any text at all","nick":"ab","zq":"x1"}']:
        for ch in piece:
            m.fill_next_token_bitmask(logitgate.allocate_token_bitmask(1, tok_spm.vocab_size))
            assert m.accept_string(ch)
    lx = engine.lexer
    trans = lx.trans
    pairs_alike = bodies = mixed = 0
    for (lex, _), exp in seen.items():
        if lex == lx.start:
            continue
        R = engine._restriction(exp)
        B = Bisim(lx, exp, R[5])
        targets = sorted({B.canon(int(trans[lex, b])) for b in _PLAIN})
        for a in targets:
            for b in targets:
                if a >= 0 and b >= 0:
                    assert bool(bk.same_for(R, a, b)) == B.same(a, b)
                    pairs_alike += a != b and B.same(a, b)
        elsewhere = np.zeros(256, np.uint8)
        first = np.empty(256, np.int64)
        succ, n = bk.body_entry(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, lex, elsewhere, first)
        if B.ends(lex):
            assert succ == -2
            continue
        vals = [B.canon(int(trans[lex, b])) for b in _PLAIN]
        counts = {v: vals.count(v) for v in vals}
        want = min(v for v in counts if counts[v] == max(counts.values()))
        assert succ == want
        if succ < 0:
            continue
        want_else = [b for b, v in zip(_PLAIN, vals) if not B.same(v, succ)]
        mids = ref_restricted_utf8(trans, B, lex, succ)
        if mids is None:
            want_else += list(range(0xC2, 0xF5))
            mids = ()
        assert np.flatnonzero(elsewhere).tolist() == sorted(want_else) and tuple(first[:n].tolist()) == mids
        chain = engine._plain_chain(R, exp.tobytes(), succ, 12)
        ref = ref_restricted_chain(trans, B, succ, 12)
        if ref is None:
            assert chain is None
            continue
        # memoised chains may stand for a state by another that behaves alike (a suffix of an
        # earlier chain): the same steps up to the bisimulation, and the same viable mids
        states, cm, off, ends_in_lexeme_end = chain
        assert len(states) == len(ref[0]) and all(B.same(int(a), b) for a, b in zip(states, ref[0]))
        assert ends_in_lexeme_end == ref[2]

        def viable(ms):
            return [B.canon(int(x)) >= 0 for x in ms]

        assert [all(viable(cm[off[k]:off[k + 1]])) for k in range(len(states))] == [all(viable(ms)) for ms in ref[1]]
        fresh = engine._chain_steps(R, succ, 12)
        assert fresh is not None and fresh[0][:12].tolist() == ref[0]  # computed afresh: the very states
        bodies += 1
        mixed += len({int(trans[lex, b]) for b in _PLAIN if vals[_PLAIN.index(b)] >= 0}) > 1
    # the restriction mattered: distinct states were one, and states with plain characters going
    # to several states were still string bodies
    assert pairs_alike > 0 and bodies > 0 and mixed > 0


def _ref_body_steps(reach_bits, exp, ign, every, first_mids, per_step):
    """``body_steps`` as a plain loop over every step (no shortcut for repeated states)."""
    live = exp | ign
    reaches = lambda s: bool((reach_bits[s] & live).any())  # noqa: E731
    n = next((k for k, s in enumerate(every) if not reaches(s)), len(every))
    for k in range(n):
        if not all(reaches(m) for m in (first_mids if k == 0 else per_step[k - 1])):
            return -1
    return n


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_body_steps_equal_a_plain_loop(data):
    """``body_steps`` skips the repeated steps of a self-loop (the same state again, its
    multi-byte states copied by ``plain_chain``); on chains of that shape it answers as a loop over
    every step and every state inside a character does."""
    n_states = data.draw(st.integers(2, 6))
    reach_bits = np.array(data.draw(st.lists(st.integers(0, 7), min_size=n_states, max_size=n_states)),
                          np.uint64).reshape(n_states, 1)
    exp = np.array([data.draw(st.integers(0, 7))], np.uint64)
    ign = np.array([data.draw(st.integers(0, 1))], np.uint64)
    length = data.draw(st.integers(1, 8))
    every, per_step = [], []
    mids_of = st.lists(st.integers(0, n_states - 1), max_size=3)
    for k in range(length):
        repeat = k >= 1 and data.draw(st.booleans())
        every.append(every[-1] if repeat else data.draw(st.integers(0, n_states - 1)))
        if k >= 1:  # the states inside the characters from step k - 1 to step k
            loop = k >= 2 and every[k] == every[k - 1] == every[k - 2]
            per_step.append(list(per_step[-1]) if loop else data.draw(mids_of))
    first_mids = data.draw(mids_of)
    off = np.cumsum([0] + [len(m) for m in per_step])
    mids = np.array([m for ms in per_step for m in ms], np.int64)
    got = bk.body_steps(reach_bits, exp, ign, np.array(every, np.int64), np.array(first_mids, np.int64), mids,
                        off.astype(np.int64))
    assert got == _ref_body_steps(reach_bits, exp, ign, every, first_mids, per_step)
