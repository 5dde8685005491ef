"""Hugging Face transformers: a ``LogitsProcessor`` for ``model.generate()`` that masks the whole
batch at once (one constraint per row, or one for all), and ``TransformersModel`` for logitgate's
own generation loop.

    proc = LogitgateLogitsProcessor([compiled_a, compiled_b])   # row 0 and row 1
    out = model.generate(**batch, logits_processor=[proc], max_new_tokens=64)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..compiler import CompiledGrammar
from .._cachedir import cache_dir
from ..matcher import Matcher, fill_next_token_bitmasks
from ..vocab import Tokenizer
from .models import ModelError, chatml, default_system_prompt, file_digest, require

__all__ = ["LogitgateLogitsProcessor", "TransformersModel"]


class LogitgateLogitsProcessor:
    """A transformers logits processor: ``processor(input_ids, scores) -> scores``.

    ``constraints``: one compiled constraint for every row, or one per prompt. With
    ``num_return_sequences=k`` (or sampling several rows per prompt) the batch has ``k`` rows per
    prompt, in order, and each gets its prompt's constraint. The first call sees the prompts; each
    later call feeds every row's last token to its matcher. Rows that ended (EOS accepted) ignore
    the padding transformers appends. Greedy search and sampling are supported; beam search
    reorders rows and is not (use ``Matcher.fork`` in a custom loop).
    """

    def __init__(self, constraints: CompiledGrammar | Sequence[CompiledGrammar], *,
                 num_threads: int | None = None) -> None:
        cs = [constraints] if isinstance(constraints, CompiledGrammar) else list(constraints)
        if not cs or not all(isinstance(c, CompiledGrammar) for c in cs):
            raise TypeError("constraints must be a CompiledGrammar or a non-empty list of them (logitgate.compile)")
        widths = {c.tokenizer.vocab_size for c in cs}
        if len(widths) != 1:
            raise ValueError(f"the constraints are compiled for different vocabularies (widths {sorted(widths)})")
        self.constraints = cs
        self.num_threads = num_threads
        self.matchers: list[Matcher] = []
        self._bitmask: np.ndarray | None = None
        self._length = 0
        self.elapsed_s = 0.0
        """Time spent in this processor (feeding tokens, filling and applying masks), for
        measuring its share of a generation."""

    def reset(self) -> None:
        """Forget the batch, so the processor can serve another ``generate()`` call."""
        self.matchers = []
        self._bitmask = None
        self._length = 0

    def _start(self, batch: int, length: int) -> None:
        cs = self.constraints
        if len(cs) != 1 and batch % len(cs):
            raise ValueError(f"{len(cs)} constraints for a batch of {batch} rows: give one per prompt")
        per = batch // len(cs) if len(cs) > 1 else batch
        self.matchers = [Matcher(cs[0] if len(cs) == 1 else cs[r // per], max_rollback=0) for r in range(batch)]
        self._bitmask = allocate_token_bitmask(batch, cs[0].tokenizer.vocab_size)
        self._length = length

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        t0 = time.perf_counter()
        batch, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if not self.matchers or length <= self._length or batch != len(self.matchers):
            self._start(batch, length)
        else:
            if length != self._length + 1:
                raise RuntimeError(f"expected one new token per call, got {length - self._length}")
            last = input_ids[:, -1].tolist()
            for r, (m, t) in enumerate(zip(self.matchers, last)):
                if m.is_terminated():
                    continue  # padding after EOS
                if not m.accept_token(int(t)):
                    raise RuntimeError(f"row {r}: token {t} was chosen although the constraint forbids it")
            self._length = length
        assert self._bitmask is not None
        fill_next_token_bitmasks(self.matchers, self._bitmask, num_threads=self.num_threads)
        apply_token_bitmask_inplace(scores, self._bitmask)
        self.elapsed_s += time.perf_counter() - t0
        return scores


class TransformersModel:
    """A ``Model`` (see ``models.py``) over a transformers causal LM on the CPU, with a KV cache."""

    def __init__(self, model: Any, hf_tokenizer: Any, tokenizer: Tokenizer, *, name: str = "",
                 default_system: str | None = None) -> None:
        self.torch = require("torch", "torch")
        self.model = model.eval()
        self.hf_tokenizer = hf_tokenizer
        self.tokenizer = tokenizer
        self.name = name or str(getattr(model.config, "_name_or_path", "model"))
        self.default_system = default_system
        self._cache: Any = None
        self._n = 0

    @classmethod
    def from_folder(cls, folder: str | os.PathLike[str], *, n_threads: int | None = None,
                    tokenizer: Tokenizer | None = None, default_system: str | None = None) -> "TransformersModel":
        """Load a transformers model folder (config, weights, tokenizer files)."""
        torch = require("torch", "torch")
        tf = require("transformers", "hf")
        if n_threads:
            torch.set_num_threads(n_threads)
        model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
        hf_tok = tf.AutoTokenizer.from_pretrained(str(folder))
        tok = tokenizer or Tokenizer.from_huggingface(hf_tok, vocab_size=int(model.config.vocab_size))
        return cls(model, hf_tok, tok, name=Path(folder).name, default_system=default_system)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], *, n_threads: int | None = None,
                  progress: Callable[[str], None] | None = None) -> "TransformersModel":
        """Load a GGUF file with transformers (through ``gguf``). The first load dequantizes the file
        (about a minute for SmolLM2 on 2 cores) and keeps a float32 copy in logitgate's cache
        folder (``$LOGITGATE_CACHE_DIR/models``), which later loads read in seconds."""
        path = Path(path)
        say = progress or (lambda _m: None)
        folder = Path(cache_dir("models")) / f"{path.stem}-{file_digest(path)}"
        if not (folder / "config.json").exists():
            say(f"converting {path.name} for transformers (first use only; cached in {folder})")
            _convert_gguf(path, folder)
        say(f"loading {path.name} with transformers")
        # the GGUF's own tokenizer metadata, as llama.cpp reads it, as wide as the model's logits
        width = int(json.loads((folder / "config.json").read_text())["vocab_size"])
        model = cls.from_folder(folder, n_threads=n_threads, tokenizer=Tokenizer.from_gguf(path, vocab_size=width),
                                default_system=default_system_prompt(path))
        model.name = path.name
        return model

    @property
    def n_past(self) -> int:
        return self._n

    def encode(self, text: str) -> list[int]:
        return list(self.hf_tokenizer.encode(text, add_special_tokens=True))

    def encode_bytes(self, data: bytes) -> list[int] | None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        ids = list(self.hf_tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
        tok = self.tokenizer
        if any(i >= tok.n_tokens or i in tok.special_ids for i in ids) or tok.decode_bytes(ids) != data:
            return None
        return ids

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        if self.default_system is None and getattr(self.hf_tokenizer, "chat_template", None):
            text = self.hf_tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            return list(self.hf_tokenizer.encode(text, add_special_tokens=False))
        return list(self.hf_tokenizer.encode(chatml(messages, default_system=self.default_system),
                                             add_special_tokens=False))

    def reset(self) -> None:
        self._cache = None
        self._n = 0

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("forward needs at least one token")
        torch = self.torch
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.inference_mode():
            out = self.model(input_ids=ids, past_key_values=self._cache, use_cache=True)
        self._cache = out.past_key_values
        self._n += len(tokens)
        return out.logits[0, -1].float().numpy().copy()

    def truncate(self, n_past: int) -> None:
        if not 0 <= n_past <= self._n:
            raise ValueError(f"cannot truncate to {n_past} tokens: {self._n} in the cache")
        if n_past == 0:
            self.reset()
            return
        if n_past < self._n:
            self._cache.crop(n_past)
            self._n = n_past


def _convert_gguf(path: Path, folder: Path) -> None:
    """Dequantize a GGUF file into a plain float32 transformers folder (``save_pretrained`` refuses
    a GGUF-loaded model, so its weights are copied into a fresh model of the same config)."""
    torch = require("torch", "torch")
    tf = require("transformers", "hf")
    require("gguf", "gguf")
    try:
        src = tf.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        hf_tok = tf.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:  # transformers raises many kinds here; name the file
        raise ModelError(f"transformers cannot load {path}: {exc}") from exc
    fresh = type(src)(src.config)
    fresh.load_state_dict(src.state_dict())
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp"))
    try:
        fresh.save_pretrained(tmp)
        hf_tok.save_pretrained(tmp)
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "config.json").exists():
            raise
