"""The token bitmask contract shared with xgrammar/llguidance-style integrations.

A bitmask is an ``int32`` array of shape ``(batch, ceil(vocab_size / 32))``; token ``t`` of row
``i`` is allowed when bit ``t % 32`` of word ``t // 32`` is set::

    allowed(i, t) = (bitmask[i, t >> 5] >> (t & 31)) & 1

``-1`` (all bits set) allows everything. Applying a mask sets the logits of disallowed tokens to
``-inf``; logits columns beyond the mask's ``32 * words`` are disallowed too.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

__all__ = [
    "allocate_token_bitmask",
    "get_bitmask_shape",
    "apply_token_bitmask_inplace",
    "bitmask_to_bool",
]


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """``(batch_size, ceil(vocab_size / 32))``."""
    return (int(batch_size), (int(vocab_size) + 31) // 32)


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A new all-allowed (``-1``) int32 bitmask of shape ``get_bitmask_shape(batch_size, vocab_size)``.

    Integrations that need a torch tensor can wrap it without a copy: ``torch.from_numpy(bm)``.
    """
    if batch_size < 1 or vocab_size < 1:
        raise ValueError(f"batch_size and vocab_size must be positive, got {batch_size}, {vocab_size}")
    return np.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=np.int32)


def bitmask_to_bool(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack a numpy bitmask (1-D or 2-D) into booleans of shape ``(..., vocab_size)``."""
    bm = np.ascontiguousarray(bitmask, dtype=np.int32)
    if sys.byteorder != "little":  # bits are defined on the int32 values, not on memory order
        bm = bm.byteswap().view(bm.dtype.newbyteorder())
    bits = np.unpackbits(bm.view(np.uint8), axis=-1, bitorder="little")
    if bits.shape[-1] < vocab_size:
        raise ValueError(f"bitmask holds {bits.shape[-1]} bits, fewer than vocab_size={vocab_size}")
    return bits[..., :vocab_size].astype(bool)


def apply_token_bitmask_inplace(
    logits: Any, bitmask: Any, *, indices: Sequence[int] | None = None
) -> None:
    """Set the logits of disallowed tokens to ``-inf``, in place.

    ``logits``: numpy array or torch tensor, shape ``(batch, V)`` or ``(V,)``; ``bitmask``: the
    matching int32 bitmask (numpy or torch; shape ``(batch, W)`` or ``(W,)``). With ``indices``,
    only those rows of ``logits`` are masked, row ``indices[k]`` by bitmask row ``indices[k]``.
    Columns of ``logits`` beyond ``32 * W`` are set to ``-inf``.
    """
    if type(logits).__module__.startswith("torch"):
        _apply_torch(logits, bitmask, indices)
        return
    logits_np = logits
    if not isinstance(logits_np, np.ndarray):
        raise TypeError(f"logits must be a numpy array or a torch tensor, not {type(logits).__name__}")
    bm = bitmask.cpu().numpy() if type(bitmask).__module__.startswith("torch") else np.asarray(bitmask)
    one_dim = logits_np.ndim == 1
    lg = logits_np[None, :] if one_dim else logits_np
    bm2 = bm[None, :] if bm.ndim == 1 else bm
    if bm2.shape[0] < lg.shape[0] and indices is None:
        raise ValueError(f"bitmask has {bm2.shape[0]} rows for {lg.shape[0]} rows of logits")
    rows = np.arange(lg.shape[0], dtype=np.int64) if indices is None else np.asarray(indices, dtype=np.int64)
    if lg.dtype in (np.float32, np.float64) and bm2.dtype == np.int32:  # any strides (numba compiles per layout)
        from .kernels.bitmask_kernels import mask_rows_inplace

        mask_rows_inplace(lg, np.ascontiguousarray(bm2), rows)
        return
    vocab = lg.shape[-1]
    covered = min(vocab, bm2.shape[-1] * 32)
    for r in rows:
        allowed = bitmask_to_bool(bm2[r], covered)
        row = lg[r]
        row[:covered][~allowed] = -np.inf
        row[covered:] = -np.inf


def _apply_torch(logits: Any, bitmask: Any, indices: Sequence[int] | None) -> None:
    import torch

    if (logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64) and logits.is_contiguous()
            and not logits.requires_grad and logits.dim() in (1, 2)):
        # CPU logits: the numba kernel on a numpy view of the same memory
        bm_np = bitmask.cpu().numpy() if isinstance(bitmask, torch.Tensor) else np.asarray(bitmask)
        apply_token_bitmask_inplace(logits.numpy(), bm_np, indices=indices)
        return
    bm = bitmask if isinstance(bitmask, torch.Tensor) else torch.from_numpy(np.asarray(bitmask))
    bm = bm.to(device=logits.device, dtype=torch.int32)
    one_dim = logits.dim() == 1
    lg = logits.unsqueeze(0) if one_dim else logits
    bm2 = bm.unsqueeze(0) if bm.dim() == 1 else bm
    vocab = lg.shape[-1]
    shifts = torch.arange(32, device=lg.device, dtype=torch.int32)
    rows = list(range(lg.shape[0])) if indices is None else list(indices)
    sel = torch.as_tensor(rows, device=lg.device, dtype=torch.long)
    bits = ((bm2[sel].unsqueeze(-1) >> shifts) & 1).bool().reshape(len(rows), -1)
    width = bits.shape[-1]
    if width < vocab:
        pad = torch.zeros(len(rows), vocab - width, dtype=torch.bool, device=lg.device)
        bits = torch.cat([bits, pad], dim=-1)
    disallowed = ~bits[:, :vocab]
    sub = lg[sel]
    sub.masked_fill_(disallowed, float("-inf"))
    lg[sel] = sub
