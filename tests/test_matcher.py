"""The step API against oracles: every mask equals a brute-force mask over the whole vocabulary
(both mistral-common tokenizers), valid strings are accepted through canonical and non-canonical
tokenizations, invalid ones agree with ``re.fullmatch``, rollback and fork restore exact state."""
from __future__ import annotations

import random
import re
import threading

import numpy as np
import pytest

import logitgate
from logitgate import bitmask_to_bool

from .conftest import mistral_file, outlines_regexes
from .oracles import BruteForceMasks, CanonicalEncoder, random_split_ids, sample_valid_bytes

OWN_REGEXES = {
    "prefix_alternatives": r"abc|a|ab(cd)?e",
    "optional_tail": r"a(bc)?",
    "digits_or_teen": r"([1-9]|1[0-9])",
    "unicode_classes": r"[αβγ]{1,3}-[\u4e00-\u9fff]+ ?[😀-😂]",
    "ignorecase": r"(?i)hello[ ,]+wörld",
    "json_like": r'\{"id": [0-9]{1,5}, "name": "[^"\\]{0,12}"\}',
    "whitespace_runs": r"\s{2,6}x\t*",
    "word_dot_dash": r"[\w.-]+@[\w-]+\.(com|org)",
    "dotall_any": r"(?s)<.{1,8}>",
}
REGEXES = {**outlines_regexes(), **OWN_REGEXES}

_bf_cache: dict[int, BruteForceMasks] = {}
_enc_cache: dict[str, CanonicalEncoder] = {}


def brute(tok) -> BruteForceMasks:
    if id(tok) not in _bf_cache:
        _bf_cache[id(tok)] = BruteForceMasks(tok)
    return _bf_cache[id(tok)]


def encoder(tok) -> CanonicalEncoder:
    name = "spm" if tok.n_tokens < 100_000 else "tekken"
    if name not in _enc_cache:
        path = mistral_file("tokenizer.model.v1" if name == "spm" else "tekken_240911.json")
        _enc_cache[name] = CanonicalEncoder(name, path)
    return _enc_cache[name]


def current_mask(m: logitgate.Matcher, vocab_size: int) -> np.ndarray:
    bm = logitgate.allocate_token_bitmask(1, vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    return bitmask_to_bool(bm[0], vocab_size)


def check_mask(m: logitgate.Matcher, tok) -> None:
    compiled = m.compiled
    expected = brute(tok).mask(compiled.dfa, m._state, compiled.is_accepting(m._state))
    got = current_mask(m, tok.vocab_size)
    diff = np.flatnonzero(got != expected)
    assert diff.size == 0, (
        f"{diff.size} tokens differ from the brute-force mask, e.g. "
        f"{[(int(t), tok.token_bytes(int(t)) if t < tok.n_tokens else None, bool(got[t])) for t in diff[:5]]}"
    )


@pytest.mark.parametrize("name", sorted(REGEXES))
def test_masks_equal_brute_force_along_valid_strings(name, real_tok):
    pattern = REGEXES[name]
    tok = real_tok
    compiled = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok)
    rng = random.Random(name)
    for _ in range(2):
        data = sample_valid_bytes(compiled.dfa, rng, max_len=40)
        text = data.decode("utf-8")
        assert re.fullmatch(pattern, text), text  # the DFA sample really is valid
        leading, ids = encoder(tok).encode(text, tok)
        m = logitgate.Matcher(compiled, max_rollback=-1)
        if leading:
            assert m.accept_bytes(leading)
        for t in ids:
            check_mask(m, tok)
            assert m.accept_token(t), f"canonical token {tok.token_bytes(t)!r} of {text!r} refused"
        check_mask(m, tok)
        assert m.is_accepting()
        eos = tok.eos_token_ids[0]
        assert m.accept_token(eos) and m.is_terminated()
        after = current_mask(m, tok.vocab_size)
        assert set(np.flatnonzero(after)) == set(tok.eos_token_ids)
        assert not m.accept_token(ids[-1] if ids else eos)


@pytest.mark.parametrize("name", sorted(REGEXES))
def test_non_canonical_tokenizations_accepted(name, real_tok):
    tok = real_tok
    compiled = logitgate.compile(logitgate.Grammar.from_regex(REGEXES[name]), tok)
    rng = random.Random("split-" + name)
    for _ in range(3):
        data = sample_valid_bytes(compiled.dfa, rng, max_len=40)
        ids = random_split_ids(tok, data, rng)
        assert ids is not None, "both tokenizers have a token for every single byte"
        m = logitgate.Matcher(compiled)
        for t in ids:
            assert m.accept_token(t), (data, tok.token_bytes(t))
        assert m.is_accepting()


@pytest.mark.parametrize("name", sorted(REGEXES))
def test_invalid_strings_agree_with_re(name, tok_tekken):
    pattern = REGEXES[name]
    compiled = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok_tekken)
    rng = random.Random("bad-" + name)
    alphabet = "ab1-9.@ \"{}:αé中😀_x\t"
    for _ in range(40):
        data = sample_valid_bytes(compiled.dfa, rng, max_len=20)
        text = data.decode()
        # mutate: insert, delete or replace one character
        i = rng.randrange(len(text) + 1)
        op = rng.randrange(3)
        c = rng.choice(alphabet)
        text = text[:i] + c + text[i:] if op == 0 else text[:i] + text[i + 1:] if op == 1 else text[:i] + c + text[i + 1:]
        m = logitgate.Matcher(compiled)
        ok = m.accept_string(text) and m.is_accepting()
        assert ok == (re.fullmatch(pattern, text) is not None), text


def test_rollback_restores_exact_state(tok_spm):
    tok = tok_spm
    pattern = OWN_REGEXES["json_like"]
    compiled = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok)
    rng = random.Random(7)
    data = sample_valid_bytes(compiled.dfa, rng, max_len=30)
    ids = random_split_ids(tok, data, rng)
    assert ids
    m = logitgate.Matcher(compiled, max_rollback=len(ids) + 1)
    for t in ids:
        assert m.accept_token(t)
    assert m.accept_token(tok.eos_token_ids[0])
    for k in range(1, len(ids) + 2):
        m2 = logitgate.Matcher(compiled)
        for t in ids[: len(ids) + 1 - k]:
            assert m2.accept_token(t)
        probe = m.fork()
        probe.rollback(k)
        assert np.array_equal(current_mask(probe, tok.vocab_size), current_mask(m2, tok.vocab_size))
        assert probe.is_accepting() == m2.is_accepting()
        assert probe.is_terminated() == m2.is_terminated()
        assert probe.find_jump_forward_bytes() == m2.find_jump_forward_bytes()
    with pytest.raises(ValueError, match="only"):
        m.rollback(len(ids) + 2)


def test_rollback_window_is_bounded(tok_spm):
    compiled = logitgate.compile(logitgate.Grammar.from_regex("a{0,50}"), tok_spm)
    a = logitgate.Matcher(compiled, max_rollback=3)
    for _ in range(10):
        assert a.accept_string("a")
    assert a.num_rollback_steps == 3
    a.rollback(3)
    with pytest.raises(ValueError):
        a.rollback(1)
    none = logitgate.Matcher(compiled, max_rollback=0)
    assert none.accept_string("a") and none.num_rollback_steps == 0


def test_fork_is_independent(tok_tekken):
    compiled = logitgate.compile(logitgate.Grammar.from_regex(r"(cat|dog)s?"), tok_tekken)
    m = logitgate.Matcher(compiled)
    assert m.accept_string("c")
    twin = m.fork()
    assert twin.accept_string("ats")
    assert twin.is_accepting() and not m.is_accepting()
    assert m.accept_string("at") and m.is_accepting()
    assert not twin.accept_string("s")


def test_jump_forward_bytes_agree_with_masks(real_tok):
    tok = real_tok
    compiled = logitgate.compile(logitgate.Grammar.from_regex(r'\{"name": "(Ann|Bob)", "id": 4[0-9]\}'), tok)
    m = logitgate.Matcher(compiled)
    assert m.find_jump_forward_bytes() == b'{"name": "'
    assert m.accept_string('{"name": "B')
    assert m.find_jump_forward_bytes() == b'ob", "id": 4'
    # every allowed token is consistent with the forced bytes
    forced = m.find_jump_forward_bytes()
    allowed = np.flatnonzero(current_mask(m, tok.vocab_size))
    assert allowed.size > 0
    for t in allowed:
        b = tok.token_bytes(int(t))
        assert b.startswith(forced) or forced.startswith(b)
    assert m.accept_string('ob", "id": 42}')
    assert m.find_jump_forward_bytes() == b"" and m.is_accepting()


def test_special_padding_and_out_of_range_tokens():
    tokens = [b"<s>", b"</s>", b"a", b"b", b"ab", b"a"]
    tok = logitgate.Tokenizer.from_bytes(tokens, eos_token_id=1, special_ids=[0, 1], vocab_size=70)
    compiled = logitgate.compile(logitgate.Grammar.from_regex("a+b?"), tok)
    m = logitgate.Matcher(compiled)
    allowed = set(np.flatnonzero(current_mask(m, tok.vocab_size)))
    assert allowed == {2, 4, 5}  # both ids with bytes b"a" (duplicates), "ab"; no BOS, no padding
    assert not m.accept_token(0)  # a special non-EOS token is never allowed
    assert not m.accept_token(40)  # padding id
    with pytest.raises(IndexError):
        m.accept_token(70)
    assert not m.accept_token(1)  # EOS before the text is complete
    assert m.accept_token(5)
    assert set(np.flatnonzero(current_mask(m, tok.vocab_size))) == {1, 2, 3, 4, 5}
    assert m.accept_token(4) and m.accept_token(1) and m.is_terminated()


def test_regex_that_matches_nothing_is_refused(tok_spm):
    with pytest.raises(logitgate.CompileError, match="matches no string"):
        logitgate.compile(logitgate.Grammar.from_regex(r"[^\s\S]"), tok_spm)


def test_batch_fill_on_threads_equals_single_fills(tok_tekken):
    tok = tok_tekken
    patterns = list(REGEXES.values())[:8]
    matchers = []
    rng = random.Random(3)
    for p in patterns:
        c = logitgate.compile(logitgate.Grammar.from_regex(p), tok)
        m = logitgate.Matcher(c)
        m.accept_bytes(sample_valid_bytes(c.dfa, rng, max_len=10)[:3])
        matchers.append(m)
    batch = logitgate.allocate_token_bitmask(len(matchers) + 2, tok.vocab_size)
    logitgate.fill_next_token_bitmasks(matchers, batch, indices=list(range(2, len(matchers) + 2)))
    assert (batch[:2] == -1).all()
    for k, m in enumerate(matchers):
        single = logitgate.allocate_token_bitmask(1, tok.vocab_size)
        m.fill_next_token_bitmask(single)
        assert np.array_equal(single[0], batch[k + 2])


def test_compile_cache_and_concurrent_first_use(tok_spm):
    g = logitgate.Grammar.from_regex(r"[0-9a-f]{8}-(dead|beef)")
    logitgate.clear_cache()
    results: list[object] = []

    def work() -> None:
        c = logitgate.compile(g, tok_spm)
        m = logitgate.Matcher(c)
        bm = logitgate.allocate_token_bitmask(1, tok_spm.vocab_size)
        m.fill_next_token_bitmask(bm)
        results.append((c, bm.copy()))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c, _ in results}) == 1
    assert all(np.array_equal(bm, results[0][1]) for _, bm in results)
    assert logitgate.compile(g, tok_spm) is results[0][0]


def test_build_index_gives_the_lazy_masks(tok_spm):
    g = logitgate.Grammar.from_regex(OWN_REGEXES["word_dot_dash"])
    lazy = logitgate.compile(g, tok_spm, cache=False)
    full = logitgate.compile(g, tok_spm, cache=False).build_index()
    for s in range(full.n_states):
        assert np.array_equal(lazy.token_mask(s), full.token_mask(s))


@pytest.mark.parametrize("mode", ["background", "lazy", "eager"])
def test_index_modes_give_identical_masks(mode, tok_tekken):
    g = logitgate.Grammar.from_regex(r"(https?://)?[a-z0-9.-]{1,20}\.(com|org)(/[\w.-]*)*")
    ref = logitgate.compile(g, tok_tekken, cache=False, index="lazy")
    c = logitgate.compile(g, tok_tekken, cache=False, index=mode)
    if mode == "eager":
        assert c.n_masks_computed == c.n_states
    if mode == "lazy":
        assert c.n_masks_computed == 0
    rng = random.Random(mode)
    data = sample_valid_bytes(c.dfa, rng, max_len=30)
    m, r = logitgate.Matcher(c), logitgate.Matcher(ref)
    for i in range(len(data) + 1):
        assert np.array_equal(current_mask(m, tok_tekken.vocab_size), current_mask(r, tok_tekken.vocab_size))
        if i < len(data):
            assert m.accept_bytes(data[i:i + 1]) and r.accept_bytes(data[i:i + 1])
    if mode == "background":  # the background thread finishes the whole index
        import time

        deadline = time.monotonic() + 60
        while c.n_masks_computed < c.n_states and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.n_masks_computed == c.n_states
        for s in range(c.n_states):
            assert np.array_equal(c.token_mask(s), ref.token_mask(s))


def test_compile_rejects_bad_arguments(tok_spm):
    g = logitgate.Grammar.from_regex("a")
    with pytest.raises(TypeError, match="Grammar"):
        logitgate.compile("a", tok_spm)
    with pytest.raises(TypeError, match="Tokenizer"):
        logitgate.compile(g, object())
    with pytest.raises(ValueError, match="index"):
        logitgate.compile(g, tok_spm, index="sometimes")


def test_allowed_token_ids_match_the_bitmask(tok_spm):
    m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex("[0-9]{2}"), tok_spm))
    for step in ("", "4", "2"):
        assert m.accept_string(step)
        assert np.array_equal(m.allowed_token_ids(), np.flatnonzero(current_mask(m, tok_spm.vocab_size)))
    assert m.accept_token(tok_spm.eos_token_ids[0])
    assert list(m.allowed_token_ids()) == list(tok_spm.eos_token_ids)


def test_bitmask_of_the_wrong_shape_or_type_is_refused_clearly(tok_spm):
    """Rows narrower or wider than the vocabulary's words, and other dtypes, raise an error that
    says how to allocate the bitmask; nothing is written. A right one is filled in place."""
    m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex("[0-9]{2}"), tok_spm))
    words = (tok_spm.vocab_size + 31) // 32
    for bad in (np.zeros((2, words - 1), np.int32), np.zeros((2, words + 1), np.int32)):
        with pytest.raises(ValueError, match="allocate_token_bitmask"):
            m.fill_next_token_bitmask(bad, 1)
        assert not bad.any()
    with pytest.raises(TypeError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((2, words), np.int64), 1)
    good = np.zeros((2, words), np.int32)
    m.fill_next_token_bitmask(good, 1)
    assert not good[0].any()
    allowed = np.flatnonzero(bitmask_to_bool(good[1], tok_spm.vocab_size))
    assert len(allowed) > 0 and np.array_equal(allowed, m.allowed_token_ids())
