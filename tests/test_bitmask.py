"""The bitmask contract: shape, bit order, and applying a mask to numpy and torch logits."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import logitgate


def reference_bool(bitmask_row: np.ndarray, vocab: int) -> np.ndarray:
    return np.array([(int(bitmask_row[t >> 5]) >> (t & 31)) & 1 == 1 for t in range(vocab)])


@given(st.integers(1, 200), st.integers(0, 2**32 - 1), st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_bitmask_to_bool_follows_the_documented_bit_order(vocab, seed, batch_extra):
    rng = np.random.default_rng(seed)
    bm = logitgate.allocate_token_bitmask(1 + batch_extra, vocab)
    assert bm.shape == logitgate.get_bitmask_shape(1 + batch_extra, vocab) == (1 + batch_extra, (vocab + 31) // 32)
    assert (bm == -1).all()
    bm[:] = rng.integers(-(2**31), 2**31, size=bm.shape, dtype=np.int64).astype(np.int32)
    for r in range(bm.shape[0]):
        assert np.array_equal(logitgate.bitmask_to_bool(bm[r], vocab), reference_bool(bm[r], vocab))


@given(st.integers(1, 100), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_apply_numpy(vocab, seed):
    rng = np.random.default_rng(seed)
    width = vocab + int(rng.integers(0, 40))  # logits may be wider than the mask
    bm = rng.integers(-(2**31), 2**31, size=(2, (vocab + 31) // 32), dtype=np.int64).astype(np.int32)
    logits = rng.standard_normal((2, width)).astype(np.float32)
    original = logits.copy()
    logitgate.apply_token_bitmask_inplace(logits, bm)
    covered = min(width, bm.shape[1] * 32)
    for r in range(2):
        allowed = np.zeros(width, dtype=bool)
        allowed[:covered] = reference_bool(bm[r], covered)
        assert np.array_equal(np.isneginf(logits[r]), ~allowed)
        assert np.array_equal(logits[r][allowed], original[r][allowed])


def test_apply_numpy_selected_rows_and_1d():
    bm = logitgate.allocate_token_bitmask(3, 40)
    bm[:, 0] = 0b101
    bm[:, 1] = 0
    logits = np.zeros((3, 40))
    logitgate.apply_token_bitmask_inplace(logits, bm, indices=[1])
    assert np.isfinite(logits[0]).all() and np.isfinite(logits[2]).all()
    assert list(np.flatnonzero(np.isfinite(logits[1]))) == [0, 2]
    one = np.zeros(40)
    logitgate.apply_token_bitmask_inplace(one, bm[0])
    assert list(np.flatnonzero(np.isfinite(one))) == [0, 2]


def test_apply_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    bm = rng.integers(-(2**31), 2**31, size=(3, 5), dtype=np.int64).astype(np.int32)
    logits = rng.standard_normal((3, 170)).astype(np.float32)
    expected = logits.copy()
    logitgate.apply_token_bitmask_inplace(expected, bm)
    for dtype in (torch.float32, torch.bfloat16):
        t = torch.from_numpy(logits.copy()).to(dtype)
        logitgate.apply_token_bitmask_inplace(t, torch.from_numpy(bm))
        got = t.float().numpy()
        assert np.array_equal(np.isneginf(got), np.isneginf(expected))
    t = torch.from_numpy(logits.copy())
    logitgate.apply_token_bitmask_inplace(t, bm, indices=[2])
    assert np.isfinite(t[0].numpy()).all()
    assert np.array_equal(np.isneginf(t[2].numpy()), np.isneginf(expected[2]))


def test_bad_bitmask_is_refused(tok_spm):
    m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex("x"), tok_spm))
    with pytest.raises(ValueError, match="words"):
        m.fill_next_token_bitmask(logitgate.allocate_token_bitmask(1, 10))
    with pytest.raises(TypeError):
        m.fill_next_token_bitmask(np.zeros((1, (tok_spm.vocab_size + 31) // 32), dtype=np.int64))


def test_fill_into_torch_tensor_and_1d_rows(tok_spm):
    torch = pytest.importorskip("torch")
    m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex("[0-9]+"), tok_spm))
    ref = logitgate.allocate_token_bitmask(2, tok_spm.vocab_size)
    m.fill_next_token_bitmask(ref, 1)
    t = torch.full((2, ref.shape[1]), -1, dtype=torch.int32)
    m.fill_next_token_bitmask(t, 1)
    assert np.array_equal(t.numpy(), ref)
    row = np.full(ref.shape[1], -1, dtype=np.int32)
    m.fill_next_token_bitmask(row)
    assert np.array_equal(row, ref[1])
