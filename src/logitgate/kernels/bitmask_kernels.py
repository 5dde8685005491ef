"""Bitmask kernel: set the logits of disallowed tokens to ``-inf`` in place (numpy rows)."""
from __future__ import annotations

import numpy as np

from . import CACHE_DIR as _CACHE_DIR  # noqa: F401  (sets numba's cache directory first)
from . import njit


@njit(cache=True, nogil=True)
def mask_rows_inplace(logits: np.ndarray, bitmask: np.ndarray, rows: np.ndarray) -> None:  # pragma: no cover (numba)
    """For each ``r`` in ``rows``: ``logits[r, i] = -inf`` where bit ``i`` of ``bitmask[r]`` is 0,
    and for every column past ``32 * bitmask.shape[1]``. Whole words of allowed tokens are skipped."""
    vocab = logits.shape[1]
    words = bitmask.shape[1]
    covered = min(vocab, words * 32)
    neg = -np.inf
    for r in rows:
        row = logits[r]
        bits = bitmask[r]
        for w in range((covered + 31) // 32):
            v = bits[w]
            if v == -1:
                continue
            base = w * 32
            top = min(32, covered - base)
            for b in range(top):
                if not (v >> b) & 1:
                    row[base + b] = neg
        for i in range(covered, vocab):
            row[i] = neg
