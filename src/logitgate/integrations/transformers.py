"""Hugging Face transformers: a ``LogitsProcessor`` for ``model.generate()`` that masks the whole
batch at once (one constraint per row, or one for all), and ``TransformersModel`` for logitgate's
own generation loop.

    proc = LogitgateLogitsProcessor([compiled_a, compiled_b])   # row 0 and row 1
    out = model.generate(**batch, logits_processor=[proc], max_new_tokens=64)
"""
from __future__ import annotations

import copy
import inspect
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

__all__ = ["LogitgateLogitsProcessor", "TransformersModel", "TransformersSequences"]


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
                raise RuntimeError(f"expected one new token per call, got {length - self._length}: a processor "
                                   "follows one generate() call; call its reset() (or make a new one) before "
                                   "reusing it for another generate()")
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
        self._cache_kwarg = _cache_kwarg(self.model)

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
        """Tokens in the cache."""
        return self._n

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt text; special-token markers in it (``<|im_start|>``) are parsed."""
        return list(self.hf_tokenizer.encode(text, add_special_tokens=True))

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """The model tokenizer's own tokenization of plain text ``data`` (no special tokens), or None
        where it cannot tokenize these bytes exactly."""
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
        """The prompt ids for a chat, ending where the assistant's answer starts."""
        if self.default_system is None and getattr(self.hf_tokenizer, "chat_template", None):
            text = self.hf_tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            return list(self.hf_tokenizer.encode(text, add_special_tokens=False))
        return list(self.hf_tokenizer.encode(chatml(messages, default_system=self.default_system),
                                             add_special_tokens=False))

    def reset(self) -> None:
        """Empty the cache."""
        self._cache = None
        self._n = 0

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` (at least one) and return float32 logits after the last, shape (V,)."""
        if not tokens:
            raise ValueError("forward needs at least one token")
        torch = self.torch
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=True, **{self._cache_kwarg: self._cache})
        self._cache = _returned_cache(out)
        self._n += len(tokens)
        return out.logits[0, -1].float().numpy().copy()

    def truncate(self, n_past: int) -> None:
        """Keep only the first ``n_past`` tokens of the cache."""
        if not 0 <= n_past <= self._n:
            raise ValueError(f"cannot truncate to {n_past} tokens: {self._n} in the cache")
        if n_past == 0:
            self.reset()
            return
        if n_past < self._n:
            # a negative count (tokens to drop) crops on transformers 4.x and 5.x alike
            self._cache.crop(n_past - self._n)
            self._n = n_past

    def sequences(self, n: int = 64) -> TransformersSequences:
        """``n`` sequences of this model, each with its own KV cache, decoded together in one
        batched forward pass (the controller runner's forks; see ``TransformersSequences``). A
        fresh set each call; this model's own single-sequence cache is left alone."""
        return TransformersSequences(self, n)



def _cache_kwarg(model: Any) -> str:
    """The name of the forward pass's KV-cache argument: ``cache`` (transformers 5.x) or
    ``past_key_values`` (4.x)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _returned_cache(out: Any) -> Any:
    """The KV cache a forward pass returned (``out.cache`` on transformers 5.x, else
    ``out.past_key_values``)."""
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def _plain_kv_cache(model: Any) -> bool:
    """Whether ``model`` keeps plain growing key/value tensors in a ``DynamicCache`` (every layer a
    ``DynamicLayer``: full attention, no sliding window, no recurrent state), so that slots can be
    padded into one batch cache and cut out of it again."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # transformers before the layered Cache API
        return False
    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # noqa: BLE001 - a config DynamicCache cannot read: play safe
        return False
    params = inspect.signature(model.forward).parameters
    return (all(type(layer) is DynamicLayer for layer in layers)
            and {"attention_mask", "position_ids"} <= params.keys())


_PAD_SLACK = 16
"""Items whose new-token counts differ by at most this many (or a quarter of the longest) share a
batch; longer ones (a prompt beside one-token steps) run in a batch of their own rather than
padding every row to their length."""

_KV = list[tuple[Any, Any]]
"""One slot's cache in batched mode: per layer, keys and values ``[1, heads, tokens, head_dim]``."""


class TransformersSequences:
    """``n`` sequences (slots) of one ``TransformersModel``, the multi-sequence interface of the
    controller runner (as ``LlamaCppSequences``): each slot has its own KV cache; ``copy`` forks a
    slot by sharing its parent's tensors (slices, no recomputation), ``truncate`` crops, and
    ``decode`` runs the new tokens of many slots in one batched forward pass.

    Batching: each slot's past keys/values are left-padded to the longest past, the new tokens
    right-padded to the longest item, with a 2-D ``attention_mask`` that zeroes the padding and
    explicit ``position_ids`` (each slot's own positions); afterwards each slot keeps its rows of
    the grown batch cache without the padding (views, no copy); the same slots stepping on at
    equal lengths reuse that batch cache as it is, without padding again. That needs a cache of plain
    key/value tensors (``DynamicLayer``s: Llama, Qwen, Mistral, Phi...). Models whose cache holds
    anything else (sliding windows, recurrent state) or transformers before 4.56 run each item in
    a forward pass of its own on a per-slot cache object instead (``batched`` is False): same
    results, no batching; a fork then deep-copies the cache, or re-runs the tokens where the cache
    cannot be cropped.
    """

    def __init__(self, model: TransformersModel, n: int = 64) -> None:
        if n < 1:
            raise ValueError(f"sequences(n) needs n >= 1, got {n}")
        self.model = model
        self.torch = model.torch
        self.n_seq_max = n
        self.batched = _plain_kv_cache(model.model)
        self._cache_kwarg = _cache_kwarg(model.model)
        params = inspect.signature(model.model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
        self._tokens: list[list[int]] = [[] for _ in range(n)]
        self._kv: list[_KV | None] = [None] * n      # batched mode
        self._caches: list[Any] = [None] * n        # per-item mode: a transformers Cache, or None
        self._resident: tuple[_KV, list[_KV | None]] | None = None
        """The last batch's grown cache and the slots' caches cut from it (see ``_decode_batch``)."""
        self.forward_calls = 0
        """Forward passes run so far (one per batch of items), for tests and measurements."""

    def _check(self, slot: int) -> int:
        if not 0 <= slot < self.n_seq_max:
            raise ValueError(f"slot {slot} is out of range: these sequences have {self.n_seq_max} slots "
                             f"(model.sequences(n) with a larger n for more)")
        return slot

    def length(self, slot: int) -> int:
        """How many tokens slot ``slot`` holds."""
        return len(self._tokens[self._check(slot)])

    def copy(self, src: int, dst: int, n: int) -> None:
        """Slot ``dst`` becomes the first ``n`` tokens of slot ``src`` (a fork)."""
        self._check(src), self._check(dst)
        if not 0 <= n <= len(self._tokens[src]):
            raise ValueError(f"cannot copy {n} tokens of slot {src}: it holds {len(self._tokens[src])}")
        if src == dst:
            self.truncate(dst, n)
            return
        self._tokens[dst] = self._tokens[src][:n]
        if self.batched:
            kv = self._kv[src]
            with self.torch.inference_mode():
                self._kv[dst] = [(k[:, :, :n], v[:, :, :n]) for k, v in kv] if n and kv else None
        else:
            cache = self._caches[src]
            self._caches[dst] = None
            if n and cache is not None and (n == len(self._tokens[src]) or getattr(cache, "is_croppable", False)):
                cache = copy.deepcopy(cache)
                if n < len(self._tokens[src]):
                    cache.crop(n - len(self._tokens[src]))
                self._caches[dst] = cache  # else the next decode re-runs the tokens

    def truncate(self, slot: int, n: int) -> None:
        """Keep the first ``n`` tokens of slot ``slot`` (all of them if it holds fewer)."""
        have = len(self._tokens[self._check(slot)])
        if n >= have:
            return
        n = max(n, 0)
        del self._tokens[slot][n:]
        if self.batched:
            kv = self._kv[slot]
            with self.torch.inference_mode():
                self._kv[slot] = [(k[:, :, :n], v[:, :, :n]) for k, v in kv] if n and kv else None
        else:
            cache = self._caches[slot]
            if n and cache is not None and getattr(cache, "is_croppable", False):
                cache.crop(n - have)
            else:
                self._caches[slot] = None  # the next decode re-runs the tokens

    def decode(self, items: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        """``items``: ``(slot, position of the first new token, new tokens)``, each slot at most
        once; returns the logits after the last new token of each item (float32). A position
        below the slot's length truncates it there first. In batched mode the items run in one
        forward pass (items of very different lengths, such as a prompt beside one-token steps,
        in a few)."""
        seen: set[int] = set()
        for slot, pos, toks in items:
            self._check(slot)
            if slot in seen:
                raise ValueError(f"slot {slot} appears twice in one decode")
            seen.add(slot)
            if not toks:
                raise ValueError(f"slot {slot}: decode needs at least one new token")
            if not 0 <= pos <= len(self._tokens[slot]):
                raise ValueError(f"slot {slot} holds {len(self._tokens[slot])} tokens: "
                                 f"cannot decode at position {pos}")
        for slot, pos, _ in items:
            self.truncate(slot, pos)
        out: list[np.ndarray | None] = [None] * len(items)
        if not self.batched:
            for k, (slot, _, toks) in enumerate(items):
                out[k] = self._decode_one(slot, list(toks))
            return out  # type: ignore[return-value]
        for group in self._groups(items):
            for k, logits in zip(group, self._decode_batch([(items[k][0], list(items[k][2])) for k in group])):
                out[k] = logits
        return out  # type: ignore[return-value]

    @staticmethod
    def _groups(items: Sequence[tuple[int, int, Sequence[int]]]) -> list[list[int]]:
        """Item indices in batches of similar new-token counts (see ``_PAD_SLACK``)."""
        order = sorted(range(len(items)), key=lambda k: -len(items[k][2]))
        groups: list[list[int]] = []
        longest = 0
        for k in order:
            q = len(items[k][2])
            if groups and longest - q <= max(_PAD_SLACK, longest // 4):
                groups[-1].append(k)
            else:
                groups.append([k])
                longest = q
        return groups

    def _decode_one(self, slot: int, toks: list[int]) -> np.ndarray:
        """Per-item mode: one forward pass on the slot's own cache (re-running its tokens first
        where the cache was dropped)."""
        torch = self.torch
        cache = self._caches[slot]
        run = toks if cache is not None else self._tokens[slot] + toks
        ids = torch.tensor([run], dtype=torch.long)
        with torch.inference_mode():
            out = self.model.model(input_ids=ids, use_cache=True, **{self._cache_kwarg: cache})
        self.forward_calls += 1
        self._caches[slot] = _returned_cache(out)
        self._tokens[slot].extend(toks)
        return out.logits[0, -1].float().numpy().copy()

    def _decode_batch(self, batch: list[tuple[int, list[int]]]) -> list[np.ndarray]:
        """Batched mode: one forward pass for ``(slot, new tokens)`` pairs, as the class docstring
        describes; updates each slot's cache and tokens."""
        torch = self.torch
        from transformers.cache_utils import DynamicCache, DynamicLayer

        past = [len(self._tokens[s]) for s, _ in batch]
        new = [len(t) for _, t in batch]
        b, p_max, q_max = len(batch), max(past), max(new)
        ids = torch.zeros((b, q_max), dtype=torch.long)
        mask = torch.zeros((b, p_max + q_max), dtype=torch.long)
        positions = torch.empty((b, q_max), dtype=torch.long)
        for r, ((_, toks), p, q) in enumerate(zip(batch, past, new)):
            ids[r, :q] = torch.tensor(toks, dtype=torch.long)
            mask[r, p_max - p:p_max + q] = 1
            positions[r] = torch.arange(p, p + q_max)  # the padding continues (masked out anyway)
        kwargs: dict[str, Any] = {}
        if self._logits_to_keep:  # only the rows' last tokens go through the LM head
            keep = sorted({q - 1 for q in new})
            kwargs["logits_to_keep"] = torch.tensor(keep, dtype=torch.long)
            col = [keep.index(q - 1) for q in new]
        else:
            col = [q - 1 for q in new]
        with torch.inference_mode():
            cache = DynamicCache()
            kvs = [self._kv[s] for s, _ in batch]
            resident = self._resident
            if (resident is not None and len(resident[1]) == b and all(x is y for x, y in zip(kvs, resident[1]))
                    and p_max == min(past)):
                padded = resident[0]  # the same sequences stepping together: their last batch as it was
            else:
                n_layers = max(len(kv) for kv in kvs if kv) if p_max else 0
                padded = [tuple(_left_pad([kv[i][j] if kv else None for kv in kvs], past, p_max) for j in (0, 1))
                          for i in range(n_layers)]
            for keys, values in padded:
                layer = DynamicLayer()
                layer.update(keys[:, :, :0], values[:, :, :0])  # initialise, then adopt without a copy
                layer.keys, layer.values = keys, values
                cache.layers.append(layer)
            out = self.model.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                   **{self._cache_kwarg: cache}, **kwargs)
            self.forward_calls += 1
            grown = _returned_cache(out)
            layers = [(layer.keys, layer.values) for layer in grown.layers]
            for r, ((slot, toks), p, q) in enumerate(zip(batch, past, new)):
                lo, hi = p_max - p, p_max + q
                self._kv[slot] = [(k[r:r + 1, :, lo:hi], v[r:r + 1, :, lo:hi]) for k, v in layers]
                self._tokens[slot].extend(toks)
            # kept while these slots are untouched: a next step of the same slots with equal
            # lengths (no padding anywhere) reuses it instead of padding the rows together again
            self._resident = (layers, [self._kv[s] for s, _ in batch]) if min(new) == q_max else None
            logits = out.logits[torch.arange(b), torch.tensor(col)].float()
        return [row.numpy().copy() for row in logits]


def _left_pad(parts: list[Any], past: list[int], p_max: int) -> Any:
    """``[batch, heads, p_max, head_dim]``: each row's ``[1, heads, p, head_dim]`` tensor (None
    where ``p`` is 0) after ``p_max - p`` zero columns."""
    ref = next(x for x in parts if x is not None)
    out = ref.new_zeros((len(parts), ref.shape[1], p_max, ref.shape[3]))
    for r, (x, p) in enumerate(zip(parts, past)):
        if x is not None and p:
            out[r, :, p_max - p:] = x[0]
    return out


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
