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

_TOKENIZERS: dict[str, Tokenizer] = {}


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
        return int(self.llm.n_tokens)

    def encode(self, text: str) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))

    def encode_bytes(self, data: bytes) -> list[int] | None:
        ids = list(self.llm.tokenize(bytes(data), add_bos=False, special=False))
        tok = self.tokenizer
        if any(i >= tok.n_tokens or i in tok.special_ids for i in ids) or tok.decode_bytes(ids) != data:
            return None
        return ids

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return self.encode(chatml(messages, default_system=self.default_system))

    def reset(self) -> None:
        self.llm.reset()

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("forward needs at least one token")
        self.llm.eval(list(tokens))
        ptr = self._llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).astype(np.float32, copy=True)

    def truncate(self, n_past: int) -> None:
        if not 0 <= n_past <= self.llm.n_tokens:
            raise ValueError(f"cannot truncate to {n_past} tokens: {self.llm.n_tokens} in the cache")
        self.llm.n_tokens = n_past  # eval() drops the KV cells from n_tokens on before decoding
