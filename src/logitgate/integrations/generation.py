"""logitgate's own generation loop over a ``Model``: masks, sampling, fast-forward with token healing,
streaming, and timings.

Fast-forward: after each sampled token, the bytes the constraint forces next
(``Matcher.find_jump_forward_bytes``) are appended without a forward pass per token. They are
re-tokenized together with the token just sampled, so the model sees its tokenizer's canonical
tokenization of the text (token healing); the last token of that tokenization is left for the model
to sample under the mask, since a longer token may extend it.
"""
from __future__ import annotations

import codecs
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..compiler import CompiledGrammar, compile
from ..decoding import Prompt, prompt_ids, sample_token
from ..grammar import Grammar
from ..matcher import Matcher
from .models import Model

__all__ = ["GenerationResult", "generate", "sample_token"]



@dataclass
class GenerationResult:
    """What ``generate`` produced, and where the time went."""

    text: str
    tokens: list[int]
    """The output token ids (fast-forwarded ones included, EOS excluded)."""
    stop_reason: str
    """``"eos"`` (the model ended, or the constraint allowed nothing else), ``"length"`` (max_tokens)."""
    n_prompt: int = 0
    n_sampled: int = 0
    """Output tokens the model sampled (EOS not counted)."""
    n_forced: int = 0
    """Tokens appended by fast-forward, without a forward pass of their own."""
    prefill_s: float = 0.0
    decode_s: float = 0.0
    """Wall time after the prompt: forward passes, masks, sampling, bookkeeping."""
    forward_s: float = 0.0
    mask_s: float = 0.0
    """Time the loop waited for masks (filling and applying them)."""
    mask_step_s: list[float] = field(default_factory=list)
    """Per sampled token: time spent on its mask (filling and applying)."""

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of decoding (prompt prefill excluded)."""
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def mask_share(self) -> float:
        """The share of decoding time spent waiting for masks."""
        return self.mask_s / self.decode_s if self.decode_s > 0 else 0.0


def _forced_tokens(model: Model, matcher: Matcher, last: int | None, limit: int) -> tuple[list[int], bool] | None:
    """Fast-forward: ``(tokens, healed)``, at most ``limit`` tokens to append (``healed``: they
    replace ``last``), already accepted by ``matcher``; ``None`` when nothing is forced or the
    forced bytes cannot be tokenized exactly."""
    forced = matcher.find_jump_forward_bytes()
    if not forced:
        return None
    tok = model.tokenizer
    if last is not None:
        prev = tok.token_bytes(last)
        ids = model.encode_bytes(prev + forced)
        # heal only when the new tokens cover the sampled one, so the streamed text only grows
        if ids and len(ids) >= 2 and len(tok.decode_bytes(ids[:-1])) >= len(prev):
            ids = ids[:-1][:limit]
            if len(tok.decode_bytes(ids)) >= len(prev):
                matcher.rollback(1)
                if all(matcher.accept_token(t) for t in ids):
                    return ids, True
                raise RuntimeError(f"the constraint refused the re-tokenization {ids} of its own forced bytes")
    room = limit if last is None else limit - 1  # the sampled token comes first
    ids = model.encode_bytes(forced)
    if ids and len(ids) >= 2 and room > 0:
        ids = ids[:-1][:room]
        for t in ids:
            if not matcher.accept_token(t):
                raise RuntimeError(f"the constraint refused token {t} of its own forced bytes {forced!r}")
        return ids, False
    return None


def generate(model: Model, prompt: Prompt, constraint: Grammar | CompiledGrammar | None = None, *,
             max_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0, seed: int | None = 0,
             fast_forward: bool = True, overlap: bool = True,
             on_text: Callable[[str], None] | None = None) -> GenerationResult:
    """Generate from ``prompt`` (text, token ids, or chat messages) under ``constraint``.

    ``fast_forward``: append forced bytes without a forward pass per token (see the module doc).
    ``overlap``: compute the next mask on a worker thread while the model runs its forward pass
    (the model runtimes release the GIL there; it hides the cost of first visits to grammar states).
    ``on_text``: called with each new piece of text as it is produced (streaming).
    """
    tok = model.tokenizer
    compiled = compile(constraint, tok) if isinstance(constraint, Grammar) else constraint
    if compiled is not None and compiled.tokenizer.fingerprint != tok.fingerprint:
        raise ValueError("the constraint was compiled for a different tokenizer than the model's")
    matcher = Matcher(compiled, max_rollback=1) if compiled is not None else None
    rng = np.random.default_rng(seed) if temperature > 0 else None
    bitmask = allocate_token_bitmask(1, tok.vocab_size)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[int] = []
    pieces: list[str] = []
    res = GenerationResult(text="", tokens=out, stop_reason="length")
    stops = set(tok.eos_token_ids)

    def emit(data: bytes) -> None:
        piece = decoder.decode(data)
        if piece:
            pieces.append(piece)
            if on_text is not None:
                on_text(piece)

    def fill() -> float:
        t = time.perf_counter()
        assert matcher is not None
        matcher.fill_next_token_bitmask(bitmask, 0)
        return time.perf_counter() - t

    ids = prompt_ids(model, prompt)
    res.n_prompt = len(ids)
    if not ids:
        raise ValueError("the prompt is empty")
    if matcher is not None and fast_forward:
        forced = _forced_tokens(model, matcher, None, max_tokens)
        if forced:
            ids = ids + forced[0]
            out.extend(forced[0])
            res.n_forced += len(forced[0])
            emit(tok.decode_bytes(forced[0]))
    pool = ThreadPoolExecutor(1, thread_name_prefix="logitgate-mask") if overlap and matcher is not None else None
    # the first mask is computed during the prompt's prefill
    pending_fill = pool.submit(fill) if pool is not None else None
    t0 = time.perf_counter()
    model.reset()
    try:
        logits = model.forward(ids)
    except BaseException:
        if pool is not None:
            pool.shutdown(wait=True)
        raise
    res.prefill_s = time.perf_counter() - t0
    res.forward_s = 0.0
    t_start = time.perf_counter()
    try:
        while len(out) < max_tokens:
            if matcher is not None:
                t = time.perf_counter()
                if pending_fill is not None:
                    pending_fill.result()
                    pending_fill = None
                else:
                    fill()
                apply_token_bitmask_inplace(logits, bitmask[0])
                dt = time.perf_counter() - t
                res.mask_s += dt
                res.mask_step_s.append(dt)
            token = sample_token(logits, rng, temperature, top_p)
            if not np.isfinite(logits[token]):
                res.stop_reason = "eos"  # nothing allowed: cannot happen for a compiled constraint
                break
            if token in stops or token in tok.special_ids:
                if matcher is not None and not matcher.accept_token(token):
                    raise RuntimeError(f"token {token} was sampled although the constraint forbids it")
                res.stop_reason = "eos"
                break
            if matcher is not None and not matcher.accept_token(token):
                raise RuntimeError(f"token {token} was sampled although the constraint forbids it")
            res.n_sampled += 1
            step = [token]
            if matcher is not None and fast_forward and len(out) + 1 < max_tokens:
                # room for the sampled token's place plus the forced ones
                forced = _forced_tokens(model, matcher, token, max_tokens - len(out))
                if forced:
                    step = forced[0] if forced[1] else [token, *forced[0]]
                    res.n_forced += len(step) - 1
            out.extend(step)
            emit(tok.decode_bytes(step))
            if len(out) >= max_tokens:
                break
            if pool is not None:
                pending_fill = pool.submit(fill)
            t = time.perf_counter()
            logits = model.forward(step)
            res.forward_s += time.perf_counter() - t
    finally:
        if pending_fill is not None:
            pending_fill.result()
        if pool is not None:
            pool.shutdown(wait=True)
    res.decode_s = time.perf_counter() - t_start
    emit(b"")
    pieces.append(decoder.decode(b"", final=True))
    res.text = "".join(pieces)
    return res
