"""``Tokenizer`` from a GGUF file's own tokenizer metadata (llama.cpp's ``tokenizer.ggml.*`` keys).

The token bytes follow what llama.cpp emits for each token (``token_to_piece``), by
``tokenizer.ggml.model``:

* ``gpt2`` (byte-level BPE): each character of a token is one byte through the inverted GPT-2
  byte-to-unicode map; a token with a character outside that map is its text in UTF-8 (as
  ``tokenizers``' ByteLevel decoder does);
* ``llama`` (SentencePiece): ``U+2581`` is a space; a BYTE token ``<0xNN>`` is the byte ``NN``.

By ``tokenizer.ggml.token_type``: NORMAL (1) tokens decode as above; BYTE (6) tokens are one byte;
USER_DEFINED (4) tokens are their text in UTF-8, exactly as stored (llama.cpp copies them
verbatim), and are special only when spelled like a control marker (``<|...|>``, ``<｜...｜>``);
UNKNOWN (2), CONTROL (3), UNUSED (5) and any other type are special. A token with empty text is
special too: it can never be text.

EOS ids: ``tokenizer.ggml.eos_token_id`` plus ``tokenizer.ggml.eot_token_id`` and
``tokenizer.ggml.eom_token_id`` where present -- only what the file declares; llama.cpp's guesses
from token names (``<|im_end|>``, ``<|eot_id|>``, ...) are not applied. BOS is
``tokenizer.ggml.bos_token_id`` if present. The logits width is the ``output.weight`` (else
``token_embd.weight``) tensor's vocabulary dimension, else ``<arch>.vocab_size``, else the number
of tokens; the ``vocab_size`` argument overrides all of them.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._cachedir import cached_json
from ..errors import TokenizerError
from .tokenizer import _SPIECE_SPACE, Tokenizer, _byte_piece, _gpt2_char_to_byte, _import_optional, _Parts

__all__ = ["tokenizer_from_gguf"]

# llama.cpp's token types (``tokenizer.ggml.token_type``); any other value is special
_NORMAL, _USER_DEFINED, _BYTE = 1, 4, 6
_SUPPORTED = {"gpt2": "byte-level BPE", "llama": "SentencePiece"}
# user-defined tokens spelled like the ones llama.cpp's converter marks CONTROL
_CONTROL_MARKER = re.compile(r"<\|.*\|>|<\uff5c.*\uff5c>", re.DOTALL)
_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
_BOS_KEY = "tokenizer.ggml.bos_token_id"


def tokenizer_from_gguf(path: str | os.PathLike[str], *, vocab_size: int | None = None) -> Tokenizer:
    """A :class:`Tokenizer` from the tokenizer metadata of the GGUF file at ``path``.

    Raises :class:`TokenizerError` naming the file (and the key) when the file is missing, is not
    a GGUF file, lacks a tokenizer key or uses an unsupported tokenizer model.
    """
    path = Path(path)
    try:
        st = path.stat()
        key = hashlib.sha256(f"{_CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
        # GGUFReader parses every metadata entry in Python (about 4 s for a 49k vocabulary): the
        # result is cached per file (path, size, modification time) as JSON
        data = cached_json("tokenizers", f"gguf-{key[:24]}.json", lambda: _to_json(_load(path, None)))
        return Tokenizer([bytes.fromhex(t) for t in data["tokens"]], eos_token_ids=data["eos"],
                         special_ids=data["special"], bos_token_id=data["bos"],
                         vocab_size=data["vocab_size"] if vocab_size is None else vocab_size, name=path.name)
    except OSError:
        pass  # a missing file: _load names the problem
    except TokenizerError as e:
        raise TokenizerError(f"{path}: {e}") from e.__cause__  # the same message, now naming the file
    try:
        return _load(path, vocab_size)
    except TokenizerError as e:
        raise TokenizerError(f"{path}: {e}") from e.__cause__


_CACHE_FORMAT = 1


def _to_json(tok: Tokenizer) -> dict[str, Any]:
    return {"tokens": [t.hex() for t in tok.tokens], "eos": list(tok.eos_token_ids), "special": sorted(tok.special_ids),
            "bos": tok.bos_token_id, "vocab_size": tok.vocab_size}


def _load(path: Path, vocab_size: int | None) -> Tokenizer:
    meta = _Metadata(path)
    model = meta.string("tokenizer.ggml.model")
    if model not in _SUPPORTED:
        supported = ", ".join(f"{k} ({v})" for k, v in _SUPPORTED.items())
        raise TokenizerError(f"unsupported tokenizer model {model!r} (tokenizer.ggml.model); supported: {supported}")
    texts = meta.strings("tokenizer.ggml.tokens")
    types = meta.ints("tokenizer.ggml.token_type")
    if len(types) != len(texts):
        raise TokenizerError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(texts)} tokens")
    decode = _byte_level_decoder() if model == "gpt2" else _sentencepiece_bytes
    parts = _Parts()
    for i, (text, kind) in enumerate(zip(texts, types, strict=True)):
        if kind == _NORMAL:
            data = decode(text)
            parts.put(i, data, not data)
        elif kind == _BYTE:
            byte = _byte_piece(text, i)
            if byte is None:
                raise TokenizerError(f"token {i} {text!r} has type BYTE but is not of the form <0xNN>")
            parts.put(i, bytes((byte,)), False)
        elif kind == _USER_DEFINED:
            parts.put(i, text, not text or _CONTROL_MARKER.fullmatch(text) is not None)
        else:  # UNKNOWN, CONTROL, UNUSED, undefined
            parts.put(i, text, True)
    tokens, special = parts.finish()
    n = len(tokens)
    eos = [meta.token_id(key, n) for key in _EOS_KEYS if key in meta]
    if not eos:
        raise TokenizerError(f"no {_EOS_KEYS[0]} key (nor eot/eom): cannot tell the EOS token")
    bos = meta.token_id(_BOS_KEY, n) if _BOS_KEY in meta else None
    if vocab_size is None:
        vocab_size = meta.logits_width()
    return Tokenizer(tokens, eos_token_ids=eos, special_ids=special, bos_token_id=bos, vocab_size=vocab_size,
                     name=path.name)


def _sentencepiece_bytes(text: str) -> bytes:
    return text.replace(_SPIECE_SPACE, " ").encode("utf-8")


def _byte_level_decoder() -> Callable[[str], bytes]:
    table = _gpt2_char_to_byte()

    def decode(text: str) -> bytes:
        try:
            return bytes(map(table.__getitem__, text))
        except KeyError:  # not byte-level spelled: the text itself
            return text.encode("utf-8")

    return decode


class _Metadata:
    """The key-value fields and tensors of a GGUF file, read with gguf's ``GGUFReader``."""

    def __init__(self, path: Path) -> None:
        gguf = _import_optional("gguf", "gguf")
        try:
            with open(path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise TokenizerError(f"cannot open GGUF file: {e.strerror or e}") from None
        if magic != b"GGUF":
            raise TokenizerError(f"not a GGUF file (it starts with {magic!r}, not b'GGUF')")
        try:
            reader = gguf.GGUFReader(path, "r")
        except Exception as e:  # gguf raises ValueError/IndexError/... on a damaged file
            raise TokenizerError(f"cannot read the GGUF file: {type(e).__name__}: {e}") from e
        self._types = gguf.GGUFValueType
        self.fields: dict[str, Any] = dict(reader.fields)
        self.tensor_shapes = {t.name: [int(d) for d in t.shape] for t in reader.tensors}

    def __contains__(self, key: str) -> bool:
        return key in self.fields

    def _field(self, key: str, array: bool) -> Any:
        field = self.fields.get(key)
        if field is None:
            raise TokenizerError(f"missing key {key}")
        if (field.types[0] == self._types.ARRAY) != array:
            raise TokenizerError(f"key {key} is {'not ' if array else ''}an array")
        return field

    def _decode(self, key: str, part: Any, i: int | None = None) -> str:
        try:
            return bytes(part).decode("utf-8")
        except UnicodeDecodeError:
            where = "" if i is None else f" (entry {i})"
            raise TokenizerError(f"key {key}{where} is not valid UTF-8: {bytes(part)[:60]!r}") from None

    def string(self, key: str) -> str:
        field = self._field(key, array=False)
        if field.types[0] != self._types.STRING:
            raise TokenizerError(f"key {key} is not a string")
        return self._decode(key, field.parts[field.data[0]])

    def strings(self, key: str) -> list[str]:
        field = self._field(key, array=True)
        if len(field.types) < 2 or field.types[-1] != self._types.STRING:
            if not field.data:  # an empty array has no element type
                return []
            raise TokenizerError(f"key {key} is not an array of strings")
        return [self._decode(key, field.parts[j], i) for i, j in enumerate(field.data)]

    def ints(self, key: str) -> list[int]:
        field = self._field(key, array=True)
        values = [field.parts[j] for j in field.data]
        if any(v.dtype.kind not in "iu" for v in values):
            raise TokenizerError(f"key {key} is not an array of integers")
        return [int(v[0]) for v in values]

    def integer(self, key: str) -> int:
        value = self._field(key, array=False).parts[-1]
        if value.dtype.kind not in "iu":
            raise TokenizerError(f"key {key} is not an integer")
        return int(value[0])

    def token_id(self, key: str, n_tokens: int) -> int:
        value = self.integer(key)
        if not 0 <= value < n_tokens:
            raise TokenizerError(f"key {key} = {value} is not a token id (the file has {n_tokens} tokens)")
        return value

    def logits_width(self) -> int | None:
        """The vocabulary dimension of the output (or tied embedding) matrix, else ``<arch>.vocab_size``."""
        for name in ("output.weight", "token_embd.weight"):
            shape = self.tensor_shapes.get(name)
            if shape is not None and len(shape) == 2:
                return shape[1]  # GGUF order: (n_embd, n_vocab)
        if "general.architecture" in self:
            key = f"{self.string('general.architecture')}.vocab_size"
            if key in self:
                return self.integer(key)
        return None
