"""Grammar.from_recognizer: the adapters and the compiled form, checked against equivalent regexes
(whose masks the regex tests check against brute force) on both real tokenizers."""
from __future__ import annotations

import random

import numpy as np
import pytest

import logitgate as lg
from logitgate.recognizers import RecognizerError, StackRecognizer, as_functional


class Digits:
    """Two to six ASCII digits (the regex [0-9]{2,6})."""

    def initial(self):
        return 0

    def byte_allowed(self, n, byte):
        return 48 <= byte <= 57 and n < 6

    def append(self, n, byte):
        return n + 1

    def special_allowed(self, n, token):
        return token == "eos" and n >= 2


class Words:
    """A StringRecognizer: one or more of the words, separated by nothing (the regex (a|ab|bc)+)."""

    def initial(self):
        return 0

    def append(self, n, text):
        return min(n + 1, 3)

    def allowed(self, n):
        return ["a", "ab", "bc"]

    def special_allowed(self, n):
        return {"eos"} if n > 0 else set()


class Accents:
    """A CharRecognizer: letters from 'é', '日', 'x', at most four (the regex [éx日]{1,4})."""

    def initial(self):
        return 0

    def add_char(self, n, ch):
        return n + 1

    def allowed_chars(self, n):
        return "éx日" if n < 4 else ""

    def can_end(self, n):
        return n > 0


CASES = [(Digits, r"[0-9]{2,6}"), (Words, r"(a|ab|bc)+"), (Accents, r"[éx日]{1,4}")]


@pytest.mark.parametrize("make, regex", CASES, ids=[c[0].__name__ for c in CASES])
def test_masks_equal_the_equivalent_regex_along_random_walks(make, regex, real_tok):
    tok = real_tok
    rec = lg.compile(lg.Grammar.from_recognizer(make()), tok)
    ref = lg.compile(lg.Grammar.from_regex(regex), tok)
    eos = set(tok.eos_token_ids)
    for seed in range(3):
        rng = random.Random(seed)
        a, b = lg.Matcher(rec, max_rollback=-1), lg.Matcher(ref, max_rollback=-1)
        for _ in range(8):
            got, want = a.allowed_token_ids(), b.allowed_token_ids()
            assert np.array_equal(got, want), (make.__name__, len(got), len(want))
            assert a.is_accepting() == b.is_accepting()
            assert a.find_jump_forward_bytes() == b.find_jump_forward_bytes()
            choices = [int(t) for t in want if int(t) not in eos]
            if not choices:
                break
            t = rng.choice(choices)
            assert a.accept_token(t) and b.accept_token(t)
        # rollback and fork land on the same masks as a fresh matcher at the same text
        side = a.fork()
        here = b.allowed_token_ids()
        if a.rollback(1):
            assert b.rollback(1)
            assert np.array_equal(a.allowed_token_ids(), b.allowed_token_ids())
        assert np.array_equal(side.allowed_token_ids(), here)  # the fork kept its position


def test_jump_forward_follows_a_single_continuation(tok_spm):
    class Hello:
        def initial(self):
            return 0

        def append(self, n, text):
            return n + 1

        def allowed(self, n):
            return ["hello world"] if n == 0 else []

        def special_allowed(self, n):
            return {"eos"} if n == 1 else set()

    m = lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Hello()), tok_spm))
    assert m.find_jump_forward_bytes() == b"hello world"
    assert m.accept_string("hello") and m.find_jump_forward_bytes() == b" world"


def test_each_recognizer_object_is_its_own_constraint(tok_spm):
    a, b = lg.Grammar.from_recognizer(Digits()), lg.Grammar.from_recognizer(Digits())
    assert a != b and a.cache_key != b.cache_key
    assert lg.compile(a, tok_spm) is lg.compile(a, tok_spm)


class Broken(Digits):
    def __init__(self, where: str, how: str) -> None:
        self.where, self.how = where, how

    def _fail(self, method, value):
        if method != self.where:
            return value
        if self.how == "raise":
            raise KeyError("boom")
        if self.how == "non-bool":
            return "yes"
        return [1, 2]  # an unhashable state

    def byte_allowed(self, n, byte):
        return self._fail("byte_allowed", super().byte_allowed(n, byte)) if byte == 55 else super().byte_allowed(n, byte)

    def append(self, n, byte):
        return self._fail("append", super().append(n, byte))

    def special_allowed(self, n, token):
        return self._fail("special_allowed", super().special_allowed(n, token))


@pytest.mark.parametrize("where, how, needle", [
    ("byte_allowed", "raise", "Broken.byte_allowed() raised KeyError: 'boom' at state 0 for byte 55"),
    ("byte_allowed", "non-bool", "byte_allowed() returned str 'yes', not a bool, at state 0 for byte 55"),
    ("append", "raise", "Broken.append() raised KeyError"),
    ("append", "unhashable", "append() returned an unhashable state [1, 2]"),
    ("special_allowed", "non-bool", "special_allowed() returned str 'yes'"),
])
def test_a_failing_recognizer_names_the_method_state_and_byte(tok_spm, where, how, needle):
    m = lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Broken(where, how)), tok_spm))
    with pytest.raises(RecognizerError) as info:
        m.allowed_token_ids()
    assert needle in str(info.value) and info.value.method == where


def test_not_a_recognizer_and_the_byte_stack():
    with pytest.raises(TypeError, match="is not a recognizer"):
        lg.Grammar.from_recognizer(object())
    s = StackRecognizer(as_functional(Digits()))
    assert s.try_push_byte(ord("4")) and not s.try_push_byte(ord("x")) and not s.special_allowed("eos")
    s.push_byte(ord("2"))
    assert s.special_allowed("eos") and s.state == 2
    s.pop_bytes(1)
    assert s.state == 1
    s.collapse()
    with pytest.raises(ValueError):
        s.pop_bytes(1)


def test_a_numba_recognizer_walks_in_compiled_code_and_matches_the_regex(real_tok):
    import numba

    from logitgate.recognizers import NumbaRecognizer

    @numba.njit
    def step(n, b):
        if 48 <= b <= 57 and n < 6:
            return n + 1
        return -1

    @numba.njit
    def accepting(n):
        return n >= 2

    rec = lg.compile(lg.Grammar.from_recognizer(NumbaRecognizer(step, accepting)), real_tok)
    ref = lg.compile(lg.Grammar.from_regex(r"[0-9]{2,6}"), real_tok)
    rng = random.Random(3)
    a, b = lg.Matcher(rec), lg.Matcher(ref)
    for _ in range(7):
        want = b.allowed_token_ids()
        assert np.array_equal(a.allowed_token_ids(), want) and a.is_accepting() == b.is_accepting()
        choices = [int(t) for t in want if int(t) not in real_tok.eos_token_ids]
        if not choices:
            break
        t = rng.choice(choices)
        assert a.accept_token(t) and b.accept_token(t)
    with pytest.raises(TypeError, match="must be a numba.njit function"):
        NumbaRecognizer(lambda n, b: n, accepting)


def test_a_slow_recognizer_is_stopped_by_its_time_cap(tok_tekken):
    import time as _time

    class Slow:
        def initial(self):
            return 0

        def byte_allowed(self, n, byte):
            _time.sleep(0.0005)
            return True

        def append(self, n, byte):
            return min(n + 1, 3)

        def special_allowed(self, n, token):
            return True

    with lg.using_limits(max_recognizer_seconds=0.2):
        compiled = lg.compile(lg.Grammar.from_recognizer(Slow()), tok_tekken)
    t = _time.perf_counter()
    with pytest.raises(RecognizerError, match="max_recognizer_seconds=0.2"):
        lg.Matcher(compiled).allowed_token_ids()
    assert _time.perf_counter() - t < 10


def test_in_a_batch_a_failing_recognizer_ends_only_its_own_sequence(tok_spm):
    good = lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Digits()), tok_spm))
    bad = lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Broken("byte_allowed", "raise")), tok_spm))
    ref = lg.Matcher(lg.compile(lg.Grammar.from_regex(r"[0-9]{2,6}"), tok_spm))
    bm = lg.allocate_token_bitmask(2, tok_spm.vocab_size)
    for threads in (1, 2):
        lg.fill_next_token_bitmasks([bad, good], bm, num_threads=threads)
        assert np.array_equal(np.flatnonzero(lg.bitmask_to_bool(bm[1], tok_spm.vocab_size)), ref.allowed_token_ids())
        assert np.array_equal(np.flatnonzero(lg.bitmask_to_bool(bm[0], tok_spm.vocab_size)),
                              sorted(tok_spm.eos_token_ids))
        assert bad.is_error() and "byte_allowed" in str(bad.get_error()) and not good.is_error()
    assert bad.is_terminated() and not bad.accept_token(int(ref.allowed_token_ids()[0]))
    bad.reset()
    assert not bad.is_error()


def _walk_equal(rec_compiled, ref_compiled, tok, seed: int, steps: int = 8) -> None:
    """Masks and ends equal along a random walk of allowed tokens."""
    rng = random.Random(seed)
    a, b = lg.Matcher(rec_compiled), lg.Matcher(ref_compiled)
    for _ in range(steps):
        want = b.allowed_token_ids()
        assert np.array_equal(a.allowed_token_ids(), want) and a.is_accepting() == b.is_accepting()
        choices = [int(t) for t in want if int(t) not in tok.eos_token_ids]
        if not choices:
            break
        t = rng.choice(choices)
        assert a.accept_token(t) and b.accept_token(t)


def test_a_jitclass_recognizer_matches_the_regex(real_tok):
    from numba import int64
    from numba.experimental import jitclass

    from logitgate.recognizers import NumbaRecognizer

    @jitclass([("lo", int64), ("hi", int64)])
    class Count:
        def __init__(self, lo, hi):
            self.lo = lo
            self.hi = hi

        def step(self, n, b):
            return n + 1 if 48 <= b <= 57 and n < self.hi else -1

        def accepting(self, n):
            return n >= self.lo

    rec = NumbaRecognizer.from_jitclass(Count(2, 6))
    ref = lg.compile(lg.Grammar.from_regex(r"[0-9]{2,6}"), real_tok)
    for seed in range(3):
        _walk_equal(lg.compile(lg.Grammar.from_recognizer(rec), real_tok, cache=False), ref, real_tok, seed)
    with pytest.raises(TypeError, match="not a numba jitclass"):
        NumbaRecognizer.from_jitclass(Digits())


class DigitsWithBytes(Digits):
    """Digits, also offering every allowed byte at once (the optional ``allowed_bytes``)."""

    calls = 0

    def byte_allowed(self, n, byte):
        DigitsWithBytes.calls += 1
        return super().byte_allowed(n, byte)

    def allowed_bytes(self, n):
        return range(48, 58) if n < 6 else ()


def test_allowed_bytes_replaces_byte_allowed_in_the_walk(real_tok):
    ref = lg.compile(lg.Grammar.from_regex(r"[0-9]{2,6}"), real_tok)
    DigitsWithBytes.calls = 0
    _walk_equal(lg.compile(lg.Grammar.from_recognizer(DigitsWithBytes()), real_tok, cache=False), ref, real_tok, 5)
    assert DigitsWithBytes.calls == 0

    class Bad(Digits):
        def allowed_bytes(self, n):
            return [48, 300]

    with pytest.raises(RecognizerError, match=r"allowed_bytes\(\) offered 300"):
        lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Bad()), real_tok, cache=False)).allowed_token_ids()


class Mod7:
    """Decimal numbers whose value is 0 mod 7, up to 12 digits: states repeat (value mod 7, length)."""

    def initial(self):
        return (0, 0)

    def byte_allowed(self, s, byte):
        return 48 <= byte <= 57 and s[1] < 12

    def append(self, s, byte):
        return ((s[0] * 10 + byte - 48) % 7, s[1] + 1)

    def special_allowed(self, s, token):
        return token == "eos" and s[1] > 0 and s[0] == 0


def _brute_force(tok, rec, state) -> np.ndarray:
    """The allowed ids at ``state``, one token at a time through the recognizer (no trie)."""
    out = []
    for t, data in enumerate(tok.tokens):
        if t in tok.special_ids or not data:
            continue
        s, ok = state, True
        for b in data:
            if not rec.byte_allowed(s, b):
                ok = False
                break
            s = rec.append(s, b)
        if ok:
            out.append(t)
    if rec.special_allowed(state, "eos"):
        out.extend(tok.eos_token_ids)
    return np.array(sorted(set(out)), dtype=np.int64)


def test_explored_transitions_give_the_brute_force_mask_and_survive_forget(tok_spm):
    rec = Mod7()
    compiled = lg.compile(lg.Grammar.from_recognizer(rec), tok_spm, cache=False)
    rng = random.Random(11)
    m = lg.Matcher(compiled)
    state = rec.initial()
    for _ in range(6):
        got = m.allowed_token_ids()
        assert np.array_equal(got, _brute_force(tok_spm, rec, state))
        choices = [int(t) for t in got if int(t) not in tok_spm.eos_token_ids]
        if not choices:
            break
        t = rng.choice(choices)
        assert m.accept_token(t)
        for b in tok_spm.tokens[t]:
            state = rec.append(state, b)
    before = compiled._ht_used
    assert before > 0 and compiled._ht_keys.shape[0] >= 2 * before
    compiled._forget()  # memo and table gone: the same masks come back from the recognizer
    assert compiled._ht_used == 0 and not compiled._masks
    assert np.array_equal(m.allowed_token_ids(), _brute_force(tok_spm, rec, state))


def test_the_transition_table_grows_and_keeps_every_entry(tok_spm):
    from logitgate.kernels.recognizer_kernels import EMPTY, HASH_MULT

    compiled = lg.compile(lg.Grammar.from_recognizer(Mod7()), tok_spm, cache=False)
    rng = np.random.default_rng(0)
    want: dict[int, int] = {}
    for _ in range(5):  # batches, with repeated keys overwritten
        keys = rng.integers(0, 1 << 40, 3000, dtype=np.int64)
        keys[:100] = list(want)[:100] or keys[:100]
        vals = rng.integers(-1, 1 << 20, 3000).astype(np.int32)
        compiled._ht_add(keys, vals)
        want.update(zip(keys.tolist(), vals.tolist()))
    table_keys, table_vals = compiled._ht_keys, compiled._ht_vals
    cap = table_keys.shape[0]
    assert cap > 1 << 12 and compiled._ht_used == len(want) and 2 * len(want) <= cap
    live = table_keys != EMPTY
    assert dict(zip(table_keys[live].tolist(), table_vals[live].tolist())) == want
    # every key is found by probing from its hash slot without meeting an empty slot
    for key in list(want)[:500]:
        slot = ((key * int(HASH_MULT)) & (2**64 - 1)) >> compiled._ht_shift  # the kernels' uint64 product
        while table_keys[slot] != key:
            assert table_keys[slot] != EMPTY
            slot = (slot + 1) % cap


# -- recognizers as sub-rules of a grammar ----------------------------------------------------------------


class Pin:
    """Exactly four ASCII digits."""

    def initial(self):
        return 0

    def byte_allowed(self, n, byte):
        return 48 <= byte <= 57 and n < 4

    def append(self, n, byte):
        return n + 1

    def special_allowed(self, n, token):
        return token == "eos" and n == 4


HOSTS = {
    "lark": lambda sub: lg.Grammar.from_lark('start: "pin=" PIN ("," PIN)*\n%declare PIN', subgrammars={"PIN": sub}),
    "gbnf": lambda sub: lg.Grammar.from_gbnf('root ::= "pin=" PIN ("," PIN)*', subgrammars={"PIN": sub}),
    "yacc": lambda sub: lg.Grammar.from_yacc('%start s\n%%\ns: "pin=" PIN | s "," PIN ;', subgrammars={"PIN": sub}),
}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_a_recognizer_is_a_sub_rule_of_a_grammar(host, real_tok):
    g = HOSTS[host](lg.Grammar.from_recognizer(Pin()))
    assert any("custom recognizer" in n for n in g.notes)
    ref = lg.compile(lg.Grammar.from_regex(r"pin=[0-9]{4}(,[0-9]{4})*"), real_tok)
    compiled = lg.compile(g, real_tok)
    for seed in range(3):
        _walk_equal(compiled, ref, real_tok, seed, steps=14)
    m = lg.Matcher(compiled)
    assert m.accept_bytes(b"pin=1234,56") and not m.accept_bytes(b"x") and m.accept_bytes(b"78")
    assert m.is_accepting()


def test_a_luhn_sub_rule_keeps_the_check_digit(tok_spm):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from recognizers import Luhn, luhn_valid

    g = lg.Grammar.from_lark('start: "card " CARD\n%declare CARD', subgrammars={"CARD": lg.Grammar.from_recognizer(Luhn())})
    compiled = lg.compile(g, tok_spm)
    rng = random.Random(2)
    for _ in range(20):
        digits = [rng.randrange(10) for _ in range(rng.randrange(12, 18))]
        body = "".join(map(str, digits))
        check = next(d for d in range(10) if luhn_valid(body + str(d)))
        m = lg.Matcher(compiled)
        assert m.accept_bytes(f"card {body}".encode())
        assert not m.accept_bytes(str((check + 1) % 10).encode()) or not m.is_accepting()
        m = lg.Matcher(compiled)
        assert m.accept_bytes(f"card {body}{check}".encode()) and m.is_accepting()


def test_sub_rule_recognizers_that_cannot_be_embedded_say_why():
    class Counter(Pin):  # any number of digits, at least one: not finite-state
        def byte_allowed(self, n, byte):
            return 48 <= byte <= 57

        def special_allowed(self, n, token):
            return n > 0

    class Never(Pin):
        def special_allowed(self, n, token):
            return False

    class Raises(Pin):
        def append(self, n, byte):
            raise KeyError(byte)

    with lg.using_limits(max_dfa_states=50):
        with pytest.raises(lg.GrammarError, match=r"sub-grammar 'PIN'.*more than 50 states.*finite-state") as e:
            HOSTS["lark"](lg.Grammar.from_recognizer(Counter()))
    assert isinstance(e.value, lg.LimitError) and e.value.limit == "max_dfa_states" and e.value.rule == "PIN"
    with pytest.raises(lg.GrammarError, match="accepts no text"):
        HOSTS["gbnf"](lg.Grammar.from_recognizer(Never()))
    with pytest.raises(RecognizerError, match=r"Raises.append\(\) raised KeyError"):
        HOSTS["yacc"](lg.Grammar.from_recognizer(Raises()))


def test_explore_automaton_trims_states_that_cannot_end():
    from logitgate.recognizers import explore_automaton

    class DeadEnd(Pin):  # "9" leads to a state that can never end
        def append(self, n, byte):
            return -1 if byte == 57 or n < 0 else n + 1

        def byte_allowed(self, n, byte):
            return 48 <= byte <= 57 and 0 <= n < 4 or n < 0 and byte == 48

    trans, accepting = explore_automaton(DeadEnd(), max_states=100)
    assert trans.shape == (5, 256) and accepting.tolist() == [False] * 4 + [True]
    assert (trans[:4, 48:57] >= 0).all() and (trans[:, 57] == -1).all() and (trans[4] == -1).all()


def test_a_failing_method_is_called_once_and_its_error_named(tok_spm):
    class Flaky(Pin):
        calls = 0

        def byte_allowed(self, n, byte):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise ValueError("first call fails")
            return super().byte_allowed(n, byte)

    m = lg.Matcher(lg.compile(lg.Grammar.from_recognizer(Flaky()), tok_spm, cache=False))
    with pytest.raises(RecognizerError, match=r"Flaky.byte_allowed\(\) raised ValueError: first call fails"):
        m.allowed_token_ids()
    assert Flaky.calls == 1 and m.is_error()
