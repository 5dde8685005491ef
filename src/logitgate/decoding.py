"""Pieces shared by the decoding loops (the generation loop and the controller runner): the prompt's
token ids, and choosing the next token from (masked) logits."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["prompt_ids", "sample_token"]

Prompt = str | Sequence[int] | Sequence[Mapping[str, str]]


def prompt_ids(model: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: text (``model.encode``), chat messages (``model.chat_prompt``) or ids."""
    if isinstance(prompt, str):
        return model.encode(prompt)
    items = list(prompt)
    if items and isinstance(items[0], Mapping):
        return model.chat_prompt(items)
    return [int(t) for t in items]


def sample_token(logits: np.ndarray, rng: np.random.Generator | None, temperature: float = 0.0,
                 top_p: float = 1.0) -> int:
    """Greedy (``temperature == 0``) or temperature/top-p sampling over (masked) logits."""
    if temperature <= 0 or rng is None:
        return int(np.argmax(logits))
    top = float(np.max(logits))
    if not np.isfinite(top):  # nothing allowed (or NaN): the caller sees logits[token] is not finite
        return int(np.argmax(logits))
    x = logits.astype(np.float64) / temperature
    x -= x.max()
    p = np.exp(x)
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        keep = np.cumsum(p[order]) - p[order] < top_p
        q = np.zeros_like(p)
        q[order[keep]] = p[order[keep]]
        p = q / q.sum()
    return int(rng.choice(len(p), p=p))
