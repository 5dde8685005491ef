"""llama-cpp-python: a logits processor for ``Llama.create_completion``/``create_chat_completion``,
ready ``generate``/``chat`` helpers, and ``LlamaCppModel`` for logitgate's own generation loop
(which adds fast-forward).

    from llama_cpp import Llama
    from logitgate.integrations import llama_cpp as lg

    llm = Llama("model.gguf", chat_format="chatml")
    text = lg.chat(llm, [{"role": "user", "content": "A user as JSON"}],
                   logitgate.Grammar.from_json_schema(User))
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..compiler import CompiledGrammar, compile
from ..grammar import Grammar
from ..matcher import Matcher
from ..vocab import Tokenizer
from .models import chatml, default_system_prompt, require

__all__ = ["LlamaCppLogitsProcessor", "LlamaCppModel", "tokenizer_for", "generate", "chat"]

# Without this, a llama.cpp built with OpenMP busy-waits between calls, and with 2 threads on a
# busy machine generation collapses to about one token per second.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The price of that: each extra OpenMP thread is woken from sleep for every operation of the graph,
# about 40 ms per decode on 2 cores, so a batch of a few tokens (fast-forward, a step of a few forked
# sequences) decodes faster on the single-token thread count. Measured with the embedded model:
# 2 tokens take 46 ms with 2 batch threads and 11 ms with 1; the two break even near 16 tokens.
SMALL_BATCH = 16

_TOKENIZERS: dict[str, Tokenizer] = {}


class BatchThreads:
    """Sets llama.cpp's batch thread count for each decode of a context: ``n_threads`` for a batch
    under :data:`SMALL_BATCH` tokens, ``n_threads_batch`` (the context's own setting) otherwise."""

    def __init__(self, lc: Any, ctx: Any, n_threads: int, n_threads_batch: int) -> None:
        self._lc, self._ctx = lc, ctx
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch
        self._current = n_threads_batch

    def before_decode(self, n_tokens: int) -> None:
        want = self.n_threads_batch if n_tokens >= SMALL_BATCH else self.n_threads
        if want != self._current:
            self._lc.llama_set_n_threads(self._ctx, self.n_threads, want)
            self._current = want


def tokenizer_for(llm: Any) -> Tokenizer:
    """The logitgate ``Tokenizer`` of a ``llama_cpp.Llama``, read from its GGUF file's tokenizer
    metadata (cached per file)."""
    path = str(llm.model_path)
    tok = _TOKENIZERS.get(path)
    if tok is None:
        tok = Tokenizer.from_gguf(path, vocab_size=int(llm.n_vocab()))
        _TOKENIZERS[path] = tok
    return tok


def _as_compiled(constraint: Grammar | CompiledGrammar, llm: Any) -> CompiledGrammar:
    if isinstance(constraint, CompiledGrammar):
        return constraint
    if isinstance(constraint, Grammar):
        return compile(constraint, tokenizer_for(llm))
    raise TypeError(f"constraint must be a logitgate Grammar or CompiledGrammar, not {type(constraint).__name__}")


class LlamaCppLogitsProcessor:
    """A llama-cpp-python logits processor, ``(input_ids, scores) -> scores``.

    One instance follows one generation: the first call takes ``input_ids`` as the prompt, each
    later call feeds the tokens sampled since to the matcher and masks ``scores`` in place.
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.matcher = Matcher(compiled, max_rollback=0)
        self._bitmask = allocate_token_bitmask(1, compiled.tokenizer.vocab_size)
        self._seen: int | None = None
        self.elapsed_s = 0.0
        """Time spent in this processor (feeding tokens, filling and applying masks)."""

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        n = len(input_ids)
        if self._seen is None:
            self._seen = n
        for t in input_ids[self._seen:n]:
            if not self.matcher.accept_token(int(t)):
                raise RuntimeError(f"token {int(t)} was sampled although the constraint forbids it")
        self._seen = n
        self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        apply_token_bitmask_inplace(scores, self._bitmask[0])
        self.elapsed_s += time.perf_counter() - t0
        return scores


def _processors(llm: Any, constraint: Grammar | CompiledGrammar | None) -> Any:
    if constraint is None:
        return None
    llama_cpp = require("llama_cpp", "llama-cpp")
    return llama_cpp.LogitsProcessorList([LlamaCppLogitsProcessor(_as_compiled(constraint, llm))])


def generate(llm: Any, prompt: str, constraint: Grammar | CompiledGrammar | None = None, *,
             max_tokens: int = 256, **kwargs: Any) -> str:
    """``llm.create_completion`` under ``constraint``; returns the generated text.
    Other keyword arguments (``temperature``, ``seed``, ...) go to llama-cpp-python."""
    out = llm.create_completion(prompt, max_tokens=max_tokens, logits_processor=_processors(llm, constraint),
                                **kwargs)
    return str(out["choices"][0]["text"])


def chat(llm: Any, messages: Sequence[Mapping[str, str]], constraint: Grammar | CompiledGrammar | None = None, *,
         max_tokens: int = 256, **kwargs: Any) -> str:
    """``llm.create_chat_completion`` under ``constraint``; returns the assistant's text."""
    out = llm.create_chat_completion(messages=list(messages), max_tokens=max_tokens,
                                     logits_processor=_processors(llm, constraint), **kwargs)
    return str(out["choices"][0]["message"]["content"])


class LlamaCppModel:
    """A ``Model`` (see ``models.py``) over ``llama_cpp.Llama`` for logitgate's generation loop."""

    def __init__(self, llm: Any, *, name: str = "", default_system: str | None = None) -> None:
        self._llama_cpp = require("llama_cpp", "llama-cpp")
        self.llm = llm
        self.name = name or Path(str(llm.model_path)).name
        self.tokenizer = tokenizer_for(llm)
        self.default_system = default_system
        self._n_vocab = int(llm.n_vocab())
        self._sequences: LlamaCppSequences | None = None
        params = llm.context_params
        self._threads = BatchThreads(self._llama_cpp, llm.ctx, int(params.n_threads), int(params.n_threads_batch))

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, n_threads: int | None = None, n_ctx: int = 4096) -> "LlamaCppModel":
        """Load a GGUF file (one thread by default: measured fastest for small models on 2 cores)."""
        llama_cpp = require("llama_cpp", "llama-cpp")
        path = Path(path)
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads or 1, n_batch=512,
                              logits_all=False, verbose=False)
        return cls(llm, default_system=default_system_prompt(path))

    @property
    def n_past(self) -> int:
        """Tokens in the cache."""
        return int(self.llm.n_tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt text; special-token markers in it (``<|im_start|>``) are parsed."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """The model tokenizer's own tokenization of plain text ``data`` (no special tokens), or None
        where it cannot tokenize these bytes exactly."""
        ids = list(self.llm.tokenize(bytes(data), add_bos=False, special=False))
        tok = self.tokenizer
        if any(i >= tok.n_tokens or i in tok.special_ids for i in ids) or tok.decode_bytes(ids) != data:
            return None
        return ids

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The prompt ids for a chat, ending where the assistant's answer starts."""
        return self.encode(chatml(messages, default_system=self.default_system))

    def reset(self) -> None:
        """Empty the cache."""
        self.llm.reset()

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` (at least one) and return float32 logits after the last, shape (V,)."""
        if not tokens:
            raise ValueError("forward needs at least one token")
        self._threads.before_decode(len(tokens))
        self.llm.eval(list(tokens))
        ptr = self._llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).astype(np.float32, copy=True)

    def sequences(self, n_seq_max: int = 64, *, n_ctx: int | None = None) -> "LlamaCppSequences":
        """A context running up to ``n_seq_max`` sequences of this model in one batch (the controller
        runner's forks); created once and kept. ``n_ctx``: tokens of the cache all sequences share
        (default 8192); a kept context with fewer slots or tokens is replaced."""
        s = self._sequences
        if s is None or s.n_seq_max < n_seq_max or (n_ctx is not None and s.n_ctx < n_ctx):
            extra = {} if n_ctx is None else {"n_ctx": n_ctx}
            self._sequences = LlamaCppSequences(self.llm, n_seq_max=n_seq_max, **extra)
        return self._sequences

    def truncate(self, n_past: int) -> None:
        """Keep only the first ``n_past`` tokens of the cache."""
        if not 0 <= n_past <= self.llm.n_tokens:
            raise ValueError(f"cannot truncate to {n_past} tokens: {self.llm.n_tokens} in the cache")
        self.llm.n_tokens = n_past  # eval() drops the KV cells from n_tokens on before decoding


class LlamaCppSequences:
    """Many sequences of one model in one llama.cpp context with a unified KV cache: a fork copies
    its parent's cache cells (no recomputation), and one ``decode`` call runs the new tokens of
    every sequence together. Built on llama.cpp's C API as llama-cpp-python exposes it."""

    def __init__(self, llm: Any, *, n_ctx: int = 8192, n_seq_max: int = 64, n_batch: int = 512) -> None:
        lc = require("llama_cpp", "llama-cpp")
        self._lc = lc
        # the single-sequence context's settings (threads, attention, cache types), for equal logits
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.kv_unified = True
        self.ctx = lc.llama_init_from_model(llm.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {n_seq_max} sequences of {n_ctx} tokens")
        self.mem = lc.llama_get_memory(self.ctx)
        self.n_ctx = int(lc.llama_n_ctx(self.ctx))
        """Tokens the cache holds, all sequences together."""
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch
        self.n_vocab = int(llm.n_vocab())
        self._batch = lc.llama_batch_init(n_batch, 0, 1)
        self._threads = BatchThreads(lc, self.ctx, int(params.n_threads), int(params.n_threads_batch))

    def close(self) -> None:
        if self.ctx:
            self._lc.llama_batch_free(self._batch)
            self._lc.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def copy(self, src: int, dst: int, n: int) -> None:
        """Sequence ``dst`` becomes the first ``n`` tokens of ``src`` (shared cells, no copy of data)."""
        self._lc.llama_memory_seq_rm(self.mem, dst, 0, -1)
        if n:
            self._lc.llama_memory_seq_cp(self.mem, src, dst, 0, n)

    def truncate(self, seq: int, n: int) -> None:
        """Keep the first ``n`` tokens of sequence ``seq``."""
        self._lc.llama_memory_seq_rm(self.mem, seq, n, -1)

    def decode(self, items: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        """``items``: ``(seq, position of the first token, tokens)``; returns the logits after the
        last token of each item. Items are packed into batches of at most ``n_batch`` tokens."""
        lc, b = self._lc, self._batch
        out: list[np.ndarray | None] = [None] * len(items)
        pending: list[tuple[int, int, int, list[int]]] = [(k, s, p, list(t)) for k, (s, p, t) in enumerate(items)]
        while pending:
            b.n_tokens = 0
            rows: list[tuple[int, int]] = []  # (item, batch row of its last token)
            rest: list[tuple[int, int, int, list[int]]] = []
            for k, seq, pos, toks in pending:
                room = self.n_batch - b.n_tokens
                if room <= 0:
                    rest.append((k, seq, pos, toks))
                    continue
                take, left = toks[:room], toks[room:]
                for i, t in enumerate(take):
                    j = b.n_tokens + i
                    b.token[j] = t
                    b.pos[j] = pos + i
                    b.n_seq_id[j] = 1
                    b.seq_id[j][0] = seq
                    b.logits[j] = 0
                b.n_tokens += len(take)
                if left:
                    rest.append((k, seq, pos + len(take), left))
                else:
                    b.logits[b.n_tokens - 1] = 1
                    rows.append((k, b.n_tokens - 1))
            self._threads.before_decode(int(b.n_tokens))
            rc = lc.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc}): the context of the sequences is full?")
            for k, row in rows:
                ptr = lc.llama_get_logits_ith(self.ctx, row)
                out[k] = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32, copy=True)
            pending = rest
        return out  # type: ignore[return-value]
