"""The vocabulary as exact bytes: ``Tokenizer`` and its loaders for real tokenizers.

Every constraint in logitgate works on the exact bytes each token id stands for, so the loaders
below reproduce, token by token, what the tokenizer's own library emits when it decodes:

* byte-level BPE (GPT-2 style, tokenizers ``ByteLevel``): each character of a token string is one
  byte through the inverted GPT-2 byte-to-unicode map;
* SentencePiece style (Llama, Mistral): ``U+2581`` is a space, ``<0xNN>`` byte-fallback pieces are
  the single byte ``NN``, control/unknown/unused pieces are special;
* tiktoken and Mistral's tekken: the bytes are stored directly (base64).

Whole-text decoding artifacts are not part of any token: SentencePiece's removal of the dummy-prefix
space at the start of a text (``Strip`` after ``Fuse`` in a tokenizer.json, the first token of a
``Metaspace`` decoder) and transformers' ``clean_up_tokenization_spaces``.

Ids that no token uses (gaps in a tokenizer.json or tiktoken vocabulary) are marked special with an
empty display text: they are never text and never allowed.
"""
from __future__ import annotations

import binascii
import hashlib
import json
import operator
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TokenizerError

if TYPE_CHECKING:
    from .trie import TokenTrie

__all__ = ["Tokenizer"]

_SPIECE_SPACE = "\u2581"
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# end-of-generation / begin-of-text names, tried when a file does not say which token it is
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<eos>", "<|eos|>", "<|end|>")
_BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>")
# mistral-common's names for the first special ids of a tekken file that lists none
# (``Tekkenizer.DEPRECATED_SPECIAL_TOKENS``); used only when mistral-common is not installed
_TEKKEN_DEFAULT_SPECIALS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)
_TEKKEN_FILLER = "<SPECIAL_{id}>"


class Tokenizer:
    """A vocabulary: the exact bytes of every token id, which ids are special, and the EOS ids.

    Immutable. ``tokens[i]`` is the exact byte string of id ``i`` for a text token; for a special
    (control) token it is its name in UTF-8, for display only. ``special_ids`` always contains the
    EOS ids and the BOS id. Ids in ``[n_tokens, vocab_size)`` are padding of the model's logits and
    are never allowed.
    """

    __slots__ = ("tokens", "special_ids", "eos_token_ids", "bos_token_id", "vocab_size", "n_tokens", "name",
                 "_fingerprint", "_trie")

    tokens: tuple[bytes, ...]
    special_ids: frozenset[int]
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    vocab_size: int
    n_tokens: int
    name: str
    _fingerprint: str | None
    _trie: TokenTrie | None

    def __init__(self, tokens: Sequence[bytes], *, eos_token_ids: Iterable[int], special_ids: Iterable[int] = (),
                 bos_token_id: int | None = None, vocab_size: int | None = None, name: str = "") -> None:
        toks = tuple(tokens)
        n = len(toks)
        if n == 0:
            raise TokenizerError("a tokenizer needs at least one token")
        for i, t in enumerate(toks):
            if type(t) is not bytes:
                if not isinstance(t, (bytes, bytearray, memoryview)):
                    raise TokenizerError(f"token {i} is {type(t).__name__}, not bytes: {t!r}")
                toks = toks[:i] + tuple(bytes(x) for x in toks[i:])
                break
        eos = tuple(dict.fromkeys(_token_id(e, n, "EOS id") for e in eos_token_ids))
        if not eos:
            raise TokenizerError("at least one EOS token id is needed")
        bos = None if bos_token_id is None else _token_id(bos_token_id, n, "BOS id")
        special = {_token_id(s, n, "special id") for s in special_ids}
        special.update(eos)
        if bos is not None:
            special.add(bos)
        for i, t in enumerate(toks):
            if not t and i not in special:
                raise TokenizerError(f"token {i} has empty bytes but is not special")
        if vocab_size is None:
            vocab_size = n
        else:
            vocab_size = _as_int(vocab_size, "vocab_size")
            if vocab_size < n:
                raise TokenizerError(f"vocab_size {vocab_size} is smaller than the number of tokens {n}")
        if not isinstance(name, str):
            raise TokenizerError(f"name must be a str, not {type(name).__name__}")
        setattr_ = object.__setattr__
        setattr_(self, "tokens", toks)
        setattr_(self, "special_ids", frozenset(special))
        setattr_(self, "eos_token_ids", eos)
        setattr_(self, "bos_token_id", bos)
        setattr_(self, "vocab_size", vocab_size)
        setattr_(self, "n_tokens", n)
        setattr_(self, "name", name)
        setattr_(self, "_fingerprint", None)
        setattr_(self, "_trie", None)

    # ------------------------------------------------------------------ immutability, pickling
    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Tokenizer is immutable (cannot set {key!r})")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"Tokenizer is immutable (cannot delete {key!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.tokens, self.eos_token_ids, tuple(sorted(self.special_ids)), self.bos_token_id,
                           self.vocab_size, self.name))

    def __repr__(self) -> str:
        return (f"Tokenizer(name={self.name!r}, n_tokens={self.n_tokens}, vocab_size={self.vocab_size}, "
                f"special={len(self.special_ids)}, eos_token_ids={self.eos_token_ids}, "
                f"bos_token_id={self.bos_token_id})")

    # ------------------------------------------------------------------ queries
    @property
    def fingerprint(self) -> str:
        """SHA-256 hex digest of the tokens, special ids, EOS ids and vocab_size (a cache key)."""
        fp = self._fingerprint
        if fp is None:
            h = hashlib.sha256(b"logitgate.Tokenizer/1\0")
            h.update(b"%d %d\0" % (self.n_tokens, self.vocab_size))
            h.update(b"".join(len(t).to_bytes(4, "little") for t in self.tokens))
            h.update(b"".join(self.tokens))
            h.update(b"\0special " + b" ".join(b"%d" % i for i in sorted(self.special_ids)))
            h.update(b"\0eos " + b" ".join(b"%d" % i for i in self.eos_token_ids))
            fp = h.hexdigest()
            object.__setattr__(self, "_fingerprint", fp)
        return fp

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of ``token_id`` (for a special token: its name, display only)."""
        return self.tokens[_token_id(token_id, self.n_tokens, "token id", self.vocab_size)]

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The concatenated bytes of ``ids``, special tokens skipped."""
        n, special, tokens = self.n_tokens, self.special_ids, self.tokens
        out = []
        for i in ids:
            i = _token_id(i, n, "token id", self.vocab_size)
            if i not in special:
                out.append(tokens[i])
        return b"".join(out)

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is never text: a special token, or a padding id >= ``n_tokens``."""
        i = _as_int(token_id, "token id")
        if not 0 <= i < self.vocab_size:
            raise TokenizerError(f"token id {i} is out of range [0, {self.vocab_size})")
        return i >= self.n_tokens or i in self.special_ids

    @property
    def trie(self) -> TokenTrie:
        """The token trie of the non-special tokens, built on first use and cached."""
        trie = self._trie
        if trie is None:
            from .trie import TokenTrie

            trie = TokenTrie.from_tokenizer(self)
            object.__setattr__(self, "_trie", trie)
        return trie

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_bytes(cls, tokens: Sequence[bytes], *, eos_token_id: int | Sequence[int], special_ids: Iterable[int] = (),
                   bos_token_id: int | None = None, vocab_size: int | None = None, name: str = "") -> Tokenizer:
        """A tokenizer from the byte string of every id; ``eos_token_id`` is one id or several."""
        eos = [eos_token_id] if isinstance(eos_token_id, int) or not isinstance(eos_token_id, Iterable) \
            else list(eos_token_id)
        return cls(tokens, eos_token_ids=eos, special_ids=special_ids, bos_token_id=bos_token_id,
                   vocab_size=vocab_size, name=name)

    @classmethod
    def from_huggingface(cls, hf_tokenizer: Any, *, vocab_size: int | None = None) -> Tokenizer:
        """From a transformers tokenizer (fast/tokenizers-backed, or SentencePiece-backed) or a
        ``tokenizers.Tokenizer``.

        A fast tokenizer is read from its ``tokenizer.json`` (see :meth:`from_tokenizers_json`);
        a SentencePiece one from its ``sp_model`` (see :meth:`from_sentencepiece`) plus its added
        tokens (their content, with ``U+2581`` as a space like every piece). EOS/BOS come from the
        tokenizer's ``eos_token_id`` and ``bos_token_id``; every id in ``all_special_ids`` is special.
        """
        name = str(getattr(hf_tokenizer, "name_or_path", "") or "")
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None and _is_tokenizers_object(hf_tokenizer):
            backend = hf_tokenizer
        if backend is not None:
            parts = _parse_tokenizers_json(json.loads(backend.to_str()))
        elif getattr(hf_tokenizer, "sp_model", None) is not None:
            parts = _sentencepiece_parts(hf_tokenizer.sp_model)
            # transformers decodes these by joining pieces and added tokens alike, then U+2581 -> " "
            for i, added in sorted(getattr(hf_tokenizer, "added_tokens_decoder", {}).items()):
                text, is_special = str(added.content), bool(added.special)
                parts.put(int(i), text if is_special else text.replace(_SPIECE_SPACE, " "), is_special)
        else:
            raise TokenizerError(f"unknown tokenizer object type {type(hf_tokenizer).__module__}."
                                 f"{type(hf_tokenizer).__qualname__}: expected a transformers tokenizer backed by "
                                 "`tokenizers` or SentencePiece, or a tokenizers.Tokenizer")
        tokens, special = parts.finish()
        special.update(i for i in getattr(hf_tokenizer, "all_special_ids", ()) if 0 <= i < len(tokens))
        if backend is hf_tokenizer:  # a bare tokenizers.Tokenizer: no EOS/BOS attributes
            eos_id, bos_id = None, next(iter(parts.guess_ids(_BOS_NAMES)), None)
        else:
            eos_id, bos_id = getattr(hf_tokenizer, "eos_token_id", None), getattr(hf_tokenizer, "bos_token_id", None)
        eos = [eos_id] if eos_id is not None else parts.guess_ids(_EOS_NAMES, all_found=True)
        if not eos:
            raise TokenizerError(f"cannot tell the EOS token of {name or 'this tokenizer'}: it has no eos_token_id "
                                 f"and none of {list(_EOS_NAMES)} is a special token")
        return cls(tokens, eos_token_ids=eos, special_ids=special, bos_token_id=bos_id, vocab_size=vocab_size,
                   name=name)

    @classmethod
    def from_tokenizers_json(cls, source: str | os.PathLike[str] | Mapping[str, Any], *, eos_token: str | None = None,
                             vocab_size: int | None = None) -> Tokenizer:
        """From a Hugging Face ``tokenizer.json``: a path (or a folder holding one), its text, or its dict.

        The token bytes follow the file's ``decoder`` (ByteLevel, Metaspace, or a Sequence of
        Replace/ByteFallback/Fuse/Strip), with ``<0xNN>`` as one byte when ``model.byte_fallback``
        is set; non-special added tokens go through the same decoder, as in ``tokenizers``.
        EOS: ``eos_token`` if given, else every special token named like an end token
        (``</s>``, ``<|endoftext|>``, ``<|eot_id|>``, ``<|im_end|>``, ...).
        """
        data, name = _load_json_source(source)
        parts = _parse_tokenizers_json(data)
        if eos_token is not None:
            eos = [parts.id_of(eos_token)]
        else:
            eos = parts.guess_ids(_EOS_NAMES, all_found=True)
            if not eos:
                raise TokenizerError(f"cannot tell the EOS token of {name or 'this tokenizer.json'}: none of "
                                     f"{list(_EOS_NAMES)} is a special token; pass eos_token=")
        bos = next(iter(parts.guess_ids(_BOS_NAMES)), None)
        tokens, special = parts.finish()
        return cls(tokens, eos_token_ids=eos, special_ids=special, bos_token_id=bos, vocab_size=vocab_size,
                   name=name)

    @classmethod
    def from_tiktoken(cls, source: str | os.PathLike[str] | Mapping[bytes, int] | Any, *,
                      special_tokens: Mapping[str, int] | None = None, eos_token: str | None = None,
                      vocab_size: int | None = None) -> Tokenizer:
        """From tiktoken ranks: a ``.tiktoken`` file ("base64 rank" lines), a dict bytes -> rank, or a
        ``tiktoken.Encoding`` (whose special tokens are included). The id of a token is its rank.

        ``special_tokens`` (name -> id) adds special tokens; EOS is ``eos_token`` (a special token
        name) if given, else every special token named like an end token.
        """
        specials: dict[str, int] = {}
        if isinstance(source, (str, os.PathLike)):
            path = Path(source)
            ranks = _read_tiktoken_file(path)
            name = path.name
        elif isinstance(source, Mapping):
            ranks = dict(source)
            name = ""
        elif all(hasattr(source, a) for a in ("decode_single_token_bytes", "n_vocab", "special_tokens_set")):
            specials = {s: source.encode_single_token(s) for s in source.special_tokens_set}
            special_id_set = set(specials.values())
            ranks = {}
            for i in range(source.n_vocab):
                if i not in special_id_set:
                    try:
                        ranks[source.decode_single_token_bytes(i)] = i
                    except KeyError:  # a gap in the ranks
                        pass
            name = str(getattr(source, "name", ""))
        else:
            raise TokenizerError(f"unknown tiktoken source type {type(source).__qualname__}: expected a path, "
                                 "a dict bytes -> rank, or a tiktoken.Encoding")
        specials.update(special_tokens or {})
        by_id: dict[int, tuple[str | bytes, bool]] = {}
        for tok, rank in ranks.items():
            if not isinstance(tok, bytes):
                raise TokenizerError(f"tiktoken token {tok!r} (rank {rank}) is not bytes")
            rank = _as_int(rank, f"rank of tiktoken token {tok!r}")
            if rank < 0 or rank in by_id:
                raise TokenizerError(f"tiktoken token {tok!r} has a negative or duplicate rank {rank}")
            by_id[rank] = (tok, False)
        for text, i in specials.items():
            i = _as_int(i, f"id of special token {text!r}")
            if i < 0:
                raise TokenizerError(f"special token {text!r} has a negative id {i}")
            if i in by_id and by_id[i] != (text, True):
                raise TokenizerError(f"special token {text!r} has id {i}, already used by {by_id[i][0]!r}")
            by_id[i] = (text, True)
        parts = _Parts()
        for i, (entry, is_special) in by_id.items():
            parts.put(i, entry, is_special)
        if eos_token is not None:
            if eos_token not in specials:
                raise TokenizerError(f"eos_token {eos_token!r} is not one of the special tokens {sorted(specials)}")
            eos = [specials[eos_token]]
        else:
            eos = [specials[s] for s in _EOS_NAMES if s in specials]
            if not eos:
                raise TokenizerError("cannot tell the EOS token of this tiktoken vocabulary: pass special_tokens= "
                                     "and eos_token=")
        bos = next((specials[s] for s in _BOS_NAMES if s in specials), None)
        tokens, special = parts.finish()
        return cls(tokens, eos_token_ids=eos, special_ids=special, bos_token_id=bos, vocab_size=vocab_size,
                   name=name)

    @classmethod
    def from_mistral(cls, source: str | os.PathLike[str] | Any, *, vocab_size: int | None = None) -> Tokenizer:
        """From mistral-common: a tekken ``.json`` path, a SentencePiece ``.model`` path (such as
        ``tokenizer.model.v1``), or a mistral-common tokenizer object (``MistralTokenizer``, an
        instruct tokenizer, ``Tekkenizer`` or ``SentencePieceTokenizer``).

        Tekken: ids ``0 .. default_num_special_tokens - 1`` are special, then the vocab entries by
        rank up to ``default_vocab_size`` ids in all; EOS is ``</s>`` and BOS ``<s>``.
        """
        if isinstance(source, (str, os.PathLike)):
            path = Path(source)
            if not path.is_file():
                raise TokenizerError(f"no such tokenizer file: {path}")
            if _is_json_file(path):
                return cls._from_tekken_json(path, vocab_size)
            return cls.from_sentencepiece(path, vocab_size=vocab_size)
        tok = getattr(source, "instruct_tokenizer", source)  # MistralTokenizer -> InstructTokenizer
        tok = getattr(tok, "tokenizer", tok)  # InstructTokenizer -> Tekkenizer / SentencePieceTokenizer
        try:
            from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer
        except ImportError:
            raise TokenizerError(f"unknown tokenizer object type {type(source).__qualname__} (mistral-common is "
                                 "not installed: pip install logitgate[mistral])") from None
        if isinstance(tok, Tekkenizer):
            n_special = tok.num_special_tokens
            tokens = [tok.id_to_piece(i).encode("utf-8") for i in range(n_special)]
            tokens += [tok.id_to_byte_piece(i) for i in range(n_special, tok.n_words)]
            file_path = getattr(tok, "_file_path", None)
            return cls(tokens, eos_token_ids=[tok.eos_id], special_ids=range(n_special), bos_token_id=tok.bos_id,
                       vocab_size=vocab_size, name=Path(file_path).name if file_path else "")
        if isinstance(tok, SentencePieceTokenizer):
            return cls._from_sp_processor(tok._model, vocab_size, Path(tok.file_path).name)
        raise TokenizerError(f"unknown tokenizer object type {type(source).__qualname__}: expected a mistral-common "
                             "tokenizer or a path to a tekken .json / SentencePiece .model file")

    @classmethod
    def from_sentencepiece(cls, path_or_processor: str | os.PathLike[str] | Any, *,
                           vocab_size: int | None = None) -> Tokenizer:
        """From a SentencePiece ``.model`` file or a ``sentencepiece.SentencePieceProcessor``.

        Control, unknown and unused pieces are special; ``<0xNN>`` byte pieces are one byte; in
        every other piece ``U+2581`` is a space. EOS/BOS are the model's ``eos_id``/``bos_id``.
        """
        name = ""
        if isinstance(path_or_processor, (str, os.PathLike)):
            spm = _import_optional("sentencepiece", "hf", "mistral")
            path = Path(path_or_processor)
            if not path.is_file():
                raise TokenizerError(f"no such SentencePiece model file: {path}")
            try:
                sp = spm.SentencePieceProcessor(model_file=str(path))
            except Exception as e:  # sentencepiece raises OSError/RuntimeError on a bad file
                raise TokenizerError(f"{path} is not a SentencePiece model: {e}") from e
            name = path.name
        else:
            sp = path_or_processor
            if not all(hasattr(sp, a) for a in ("get_piece_size", "id_to_piece", "is_control", "is_byte", "eos_id")):
                raise TokenizerError(f"unknown tokenizer object type {type(sp).__qualname__}: expected a path or a "
                                     "sentencepiece.SentencePieceProcessor")
        return cls._from_sp_processor(sp, vocab_size, name)

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], *, vocab_size: int | None = None) -> Tokenizer:
        """From the tokenizer metadata of a GGUF model file (``tokenizer.ggml.*``), read with the
        ``gguf`` package; byte-level BPE (``gpt2``) and SentencePiece (``llama``) vocabularies.

        EOS: the file's eos id plus its eot/eom ids; the logits width comes from the output matrix
        (or ``<arch>.vocab_size``) unless ``vocab_size`` is given. See :mod:`logitgate.vocab.gguf`.
        """
        from .gguf import tokenizer_from_gguf

        return tokenizer_from_gguf(path, vocab_size=vocab_size)

    # ------------------------------------------------------------------ helpers
    @classmethod
    def _from_sp_processor(cls, sp: Any, vocab_size: int | None, name: str) -> Tokenizer:
        tokens, special = _sentencepiece_parts(sp).finish()
        eos, bos = sp.eos_id(), sp.bos_id()
        if eos < 0:
            raise TokenizerError("the SentencePiece model has no EOS piece (eos_id is -1)")
        return cls(tokens, eos_token_ids=[eos], special_ids=special, bos_token_id=bos if bos >= 0 else None,
                   vocab_size=vocab_size, name=name)

    @classmethod
    def _from_tekken_json(cls, path: Path, vocab_size: int | None) -> Tokenizer:
        """A mistral-common tekken file, laid out exactly as ``Tekkenizer.from_file`` does."""
        try:
            with open(path, "rb") as f:
                data = json.load(f)
            config = data["config"]
            n_special = int(config["default_num_special_tokens"])
            n_total = int(config["default_vocab_size"])
            vocab = data["vocab"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TokenizerError(f"{path} is not a tekken tokenizer file: {e!r}") from e
        n_inner = n_total - n_special
        if n_inner < 0 or len(vocab) < n_inner:
            raise TokenizerError(f"{path}: default_vocab_size {n_total} needs {n_inner} vocab entries after "
                                 f"{n_special} special tokens, the file has {len(vocab)}")
        specials = data.get("special_tokens")
        if specials is None:
            try:
                from mistral_common.tokens.tokenizers.tekken import Tekkenizer
            except ImportError:
                names = list(_TEKKEN_DEFAULT_SPECIALS)
                template = _TEKKEN_FILLER
            else:
                default = sorted(Tekkenizer.DEPRECATED_SPECIAL_TOKENS, key=lambda t: t["rank"])
                names = [str(getattr(t["token_str"], "value", t["token_str"])) for t in default]
                template = getattr(Tekkenizer, "SPECIAL_TOKEN_TEMPLATE", _TEKKEN_FILLER)
        else:
            by_rank = {int(t["rank"]): str(t["token_str"]) for t in specials}
            if sorted(by_rank) != list(range(len(specials))):
                raise TokenizerError(f"{path}: special token ranks are not 0..{len(specials) - 1}")
            names = [by_rank[r] for r in range(len(specials))]
            template = _TEKKEN_FILLER
        if len(names) > n_special or len(set(names)) != len(names):
            raise TokenizerError(f"{path}: {len(names)} special tokens for {n_special} special ids, or duplicates")
        names += [template.format(id=i) for i in range(len(names), n_special)]
        tokens = [s.encode("utf-8") for s in names]
        a2b = binascii.a2b_base64
        for rank in range(n_inner):
            entry = vocab[rank]
            try:
                if entry["rank"] != rank:
                    raise ValueError(f"rank {entry['rank']} at position {rank}")
                tokens.append(a2b(entry["token_bytes"]))
            except (KeyError, TypeError, ValueError, binascii.Error) as e:
                raise TokenizerError(f"{path}: cannot read the bytes of token {n_special + rank} "
                                     f"({str(entry)[:80]}): {e}") from e
        if "</s>" not in names:
            raise TokenizerError(f"{path}: no </s> special token")
        bos = names.index("<s>") if "<s>" in names else None
        return cls(tokens, eos_token_ids=[names.index("</s>")], special_ids=range(n_special), bos_token_id=bos,
                   vocab_size=vocab_size, name=path.name)


def _rebuild(tokens: Sequence[bytes], eos: Iterable[int], special: Iterable[int], bos: int | None, vocab_size: int,
             name: str) -> Tokenizer:
    return Tokenizer(tokens, eos_token_ids=eos, special_ids=special, bos_token_id=bos, vocab_size=vocab_size, name=name)


# ---------------------------------------------------------------------- small helpers
def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise TokenizerError(f"{what} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TokenizerError(f"{what} must be an int, not {type(value).__name__} ({value!r})") from None


def _token_id(value: Any, n_tokens: int, what: str, limit: int | None = None) -> int:
    """``value`` as an id in ``[0, n_tokens)``; ids in ``[n_tokens, limit)`` are padding."""
    i = _as_int(value, what)
    if 0 <= i < n_tokens:
        return i
    if limit is not None and n_tokens <= i < limit:
        raise TokenizerError(f"{what} {i} is a padding id (the tokenizer has {n_tokens} tokens)")
    raise TokenizerError(f"{what} {i} is out of range [0, {n_tokens}): the tokenizer has {n_tokens} tokens")


def _import_optional(module: str, *extras: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        hint = " or ".join(f"pip install logitgate[{x}]" for x in extras)
        raise ImportError(f"this loader needs the {module!r} package: {hint}") from e


def _is_tokenizers_object(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.split(".")[0] == "tokenizers" and cls.__name__ == "Tokenizer" and hasattr(obj, "to_str")


def _is_json_file(path: Path) -> bool:
    if path.name.endswith(".json"):
        return True
    with open(path, "rb") as f:
        return f.read(64).lstrip()[:1] == b"{"


def _load_json_source(source: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """A tokenizer.json as a dict, and a name (the file's) for messages."""
    if isinstance(source, Mapping):
        return source, ""
    if isinstance(source, str) and source.lstrip().startswith("{"):
        text, name = source, ""
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"no such tokenizer.json: {path}")
        text, name = path.read_text(encoding="utf-8"), path.name
    else:
        raise TokenizerError(f"unknown tokenizer.json source type {type(source).__qualname__}: expected a path, "
                             "a JSON string or a dict")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise TokenizerError(f"{name or 'tokenizer.json text'} is not valid JSON: {e}") from e
    if not isinstance(data, Mapping):
        raise TokenizerError(f"{name or 'tokenizer.json text'} is not a JSON object")
    return data, name


def _read_tiktoken_file(path: Path) -> dict[bytes, int]:
    """The ranks of a tiktoken BPE file: one ``base64 rank`` pair per line."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise TokenizerError(f"cannot read tiktoken file {path}: {e}") from e
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            b64, rank = line.split()
            ranks[binascii.a2b_base64(b64)] = int(rank)
        except (ValueError, binascii.Error):
            raise TokenizerError(f"{path}:{lineno}: expected 'base64 rank', got {line[:60]!r}") from None
    return ranks


# ---------------------------------------------------------------------- vocab assembly
class _Parts:
    """Token texts by id while a loader assembles a vocabulary."""

    def __init__(self) -> None:
        self.by_id: dict[int, bytes] = {}
        self.special: set[int] = set()
        self.names: dict[str, int] = {}  # special token name -> id
        self.texts: dict[str, int] = {}  # any token string as the file writes it -> id

    @property
    def n(self) -> int:
        return max(self.by_id, default=-1) + 1

    def put(self, i: int, text: str | bytes, is_special: bool) -> None:
        """Token ``i`` is ``text`` (bytes, or a str stored as UTF-8); a special one is display only."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        self.by_id[i] = data
        if is_special:
            self.special.add(i)
            if isinstance(text, str):
                self.names[text] = i
        else:
            self.special.discard(i)
        if isinstance(text, str):
            self.texts[text] = i

    def id_of(self, text: str) -> int:
        if text in self.names:
            return self.names[text]
        if text in self.texts:
            return self.texts[text]
        raise TokenizerError(f"token {text!r} is not in the vocabulary")

    def guess_ids(self, names: Sequence[str], all_found: bool = False) -> list[int]:
        found = [self.names[s] for s in names if s in self.names]
        return found if all_found else found[:1]

    def finish(self) -> tuple[list[bytes], set[int]]:
        """Every id's bytes and the special ids; an id no token uses is special (empty display text)."""
        n = self.n
        out = [b""] * n
        for i, b in self.by_id.items():
            out[i] = b
        special = set(self.special)
        if len(self.by_id) < n:
            special.update(i for i in range(n) if i not in self.by_id)
        return out, special


def _byte_piece(piece: str, token_id: int) -> int | None:
    """The byte of a ``<0xNN>`` piece, None when ``piece`` is not one; a malformed one is an error."""
    m = _BYTE_PIECE.fullmatch(piece)
    if m:
        return int(m.group(1), 16)
    if piece.startswith("<0x") and piece.endswith(">"):
        raise TokenizerError(f"token {token_id} {piece!r} is a malformed byte-fallback piece (expected <0xNN>)")
    return None


def _sentencepiece_parts(sp: Any) -> _Parts:
    """Token bytes from a SentencePieceProcessor's piece types."""
    parts = _Parts()
    is_unknown = getattr(sp, "is_unknown", lambda i: False)
    is_unused = getattr(sp, "is_unused", lambda i: False)
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if sp.is_control(i) or is_unknown(i) or is_unused(i):
            parts.put(i, piece, True)
        elif sp.is_byte(i):
            byte = _byte_piece(piece, i)
            if byte is None:
                raise TokenizerError(f"token {i} {piece!r} is a byte piece but not of the form <0xNN>")
            parts.put(i, bytes((byte,)), False)
        else:
            parts.put(i, piece.replace(_SPIECE_SPACE, " "), False)
    return parts


def _gpt2_char_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode map (printable bytes map to themselves, the other
    68 bytes to U+0100 onwards in byte order)."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    table = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            table[chr(0x100 + shift)] = b
            shift += 1
    return table


def _decoder_steps(decoder: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if decoder is None:
        return []
    if decoder.get("type") == "Sequence":
        return [s for d in decoder.get("decoders", ()) for s in _decoder_steps(d)]
    return [decoder]


def _compile_decoder(decoder: Mapping[str, Any] | None, byte_fallback: bool) -> Callable[[str, int], bytes]:
    """The per-token effect of a tokenizer.json ``decoder``: token string (and id) -> bytes.

    Steps that act on the fused text (``Strip`` after ``Fuse``/``ByteLevel``) and the first-token
    rule of ``Metaspace`` only ever touch the start of a whole text, so they are left out.
    """
    steps = _decoder_steps(decoder)
    if not steps:
        raise TokenizerError("the tokenizer.json has no decoder: `tokenizers` joins such tokens with spaces, so "
                             "their bytes cannot be determined")
    ops: list[tuple[Any, ...]] = []
    fused = False
    kinds = [s.get("type") for s in steps]
    if byte_fallback and "ByteFallback" not in kinds:
        ops.append(("bytes",))  # model.byte_fallback: <0xNN> tokens stand for bytes whatever the decoder says
    if "ByteLevel" in kinds and ("ByteFallback" in kinds or byte_fallback):
        raise TokenizerError("a tokenizer.json mixing ByteLevel and ByteFallback decoding is not supported")
    for step in steps:
        kind = step.get("type")
        if kind == "Replace":
            pattern = step.get("pattern") or {}
            if "String" not in pattern:
                raise TokenizerError(f"unsupported decoder step Replace with pattern {pattern!r} (only plain "
                                     "strings are supported)")
            old, new = pattern["String"], step.get("content", "")
            if fused and len(old) > 1:
                raise TokenizerError(f"unsupported decoder step Replace({old!r}) after Fuse (it may span tokens)")
            ops.append(("replace", old, new))
        elif kind == "ByteFallback":
            ops.append(("bytes",))
        elif kind == "Fuse":
            fused = True
        elif kind == "Strip":
            if not fused:
                ops.append(("strip", step.get("content", " "), int(step.get("start", 0)), int(step.get("stop", 0))))
        elif kind == "Metaspace":
            ops.append(("replace", step.get("replacement", _SPIECE_SPACE), " "))
        elif kind == "ByteLevel":
            ops.append(("bytelevel", _gpt2_char_to_byte()))
            fused = True
        else:
            raise TokenizerError(f"unsupported tokenizer.json decoder {kind!r}: its tokens have no exact bytes "
                                 "(supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)")

    def decode(token: str, token_id: int) -> bytes:
        value: str | bytes = token
        for op in ops:
            kind = op[0]
            if kind == "replace":
                value = value.replace(op[1], op[2]) if isinstance(value, str) \
                    else value.replace(op[1].encode("utf-8"), op[2].encode("utf-8"))
            elif kind == "bytes":
                if isinstance(value, str):
                    byte = _byte_piece(value, token_id)
                    if byte is not None:
                        value = bytes((byte,))
            elif kind == "strip":
                value = _strip(value, op[1], op[2], op[3])
            elif isinstance(value, str):  # bytelevel: every char one byte, else the token as UTF-8
                text = value
                try:
                    value = bytes(map(op[1].__getitem__, text))
                except KeyError:
                    value = text.encode("utf-8")
        return value.encode("utf-8") if isinstance(value, str) else value

    return decode


def _strip(value: str | bytes, content: str, start: int, stop: int) -> str | bytes:
    """tokenizers' ``Strip`` decoder on one token: drop up to ``start`` leading and ``stop``
    trailing copies of the character ``content``."""
    unit: str | bytes = content if isinstance(value, str) else content.encode("utf-8")
    size = len(unit)
    lo, hi = 0, len(value)
    for _ in range(start):
        if value[lo:lo + size] != unit or lo + size > hi:
            break
        lo += size
    for _ in range(stop):
        if hi - size < lo or value[hi - size:hi] != unit:
            break
        hi -= size
    return value[lo:hi]


def _parse_tokenizers_json(data: Mapping[str, Any]) -> _Parts:
    """Token bytes of a tokenizer.json: the model vocab and the added tokens, through the decoder."""
    model = data.get("model")
    if not isinstance(model, Mapping):
        raise TokenizerError("the tokenizer.json has no model")
    kind = model.get("type") or ("Unigram" if isinstance(model.get("vocab"), list) else
                                 "BPE" if "merges" in model else None)
    texts: dict[int, str] = {}
    special: set[int] = set()
    if kind in ("BPE", "WordLevel", "WordPiece"):
        vocab = model.get("vocab") or {}
        if not isinstance(vocab, Mapping):
            raise TokenizerError(f"the {kind} vocab of the tokenizer.json is not an object")
        for text, i in vocab.items():
            i = _as_int(i, f"id of token {text!r}")
            if i < 0 or (i in texts and texts[i] != text):
                raise TokenizerError(f"token {text!r} has id {i}, which is negative or already used by "
                                     f"{texts.get(i)!r}")
            texts[i] = text
        unk = model.get("unk_token")
        if unk is not None and unk in vocab:
            special.add(int(vocab[unk]))
    elif kind == "Unigram":
        for i, entry in enumerate(model.get("vocab") or ()):
            texts[i] = entry[0] if isinstance(entry, (list, tuple)) else entry
        if model.get("unk_id") is not None:
            special.add(int(model["unk_id"]))
    else:
        raise TokenizerError(f"unknown tokenizers model type {kind!r} (expected BPE, Unigram, WordLevel or "
                             "WordPiece)")
    added: dict[int, tuple[str, bool]] = {}
    for entry in data.get("added_tokens") or ():
        i = _as_int(entry.get("id"), f"id of added token {entry.get('content')!r}")
        added[i] = (str(entry.get("content", "")), bool(entry.get("special", False)))

    decode = _compile_decoder(data.get("decoder"), bool(model.get("byte_fallback", False)))
    parts = _Parts()
    for i, text in texts.items():
        if i in added:
            continue
        if i in special:
            parts.put(i, text, True)
        else:
            parts.put(i, decode(text, i), False)
            parts.texts[text] = i
    for i, (text, is_special) in added.items():
        parts.put(i, text if is_special else decode(text, i), is_special)
        parts.texts[text] = i
    return parts
