"""Tokenizers for the benchmark: one vocabulary source for every engine, plus real encoders.

Every engine is built from the SAME token bytes, taken from
``logitgate.Tokenizer.from_mistral`` (the library under test owns the vocabulary).

``reference_token_bytes`` is an independent, tiny reader of the same mistral-common files
(sentencepiece / mistral-common's Tekkenizer). It is used only to cross-check the library's
vocabulary at start-up, and by ``--vocab-source reference`` to run the peers while logitgate
cannot be imported.

``TextEncoder`` gives the token path a real model would produce for a sample, using
mistral-common's own tokenizers (sentencepiece for the SPM file, Tekkenizer for tekken).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TOKENIZER_FILES = {
    "spm32k": "tokenizer.model.v1",
    "tekken131k": "tekken_240911.json",
}


def import_logitgate():
    """Import logitgate, from the installed package or else from the repo's src/ folder."""
    try:
        import logitgate  # noqa: F401
    except ImportError:
        src = str(REPO / "src")
        if src not in sys.path:
            sys.path.insert(0, src)
        import logitgate  # noqa: F401
    return sys.modules["logitgate"]


def mistral_data_dir() -> Path:
    import mistral_common

    return Path(mistral_common.__file__).resolve().parent / "data"


def tokenizer_path(name: str) -> Path:
    return mistral_data_dir() / TOKENIZER_FILES[name]


@dataclass
class Vocab:
    """What the peer adapters need: token bytes by id, which ids are special, EOS."""

    name: str
    tokens: list  # list[bytes], index = token id; special tokens carry their display text
    special_ids: frozenset
    eos_ids: tuple
    vocab_size: int  # mask width (>= len(tokens))
    source: str  # "logitgate" or "reference"
    load_s: float = 0.0
    lg_tokenizer: object = field(default=None, repr=False)  # the logitgate.Tokenizer, if any

    @property
    def eos_id(self) -> int:
        return self.eos_ids[0]


def load_vocab(name: str, source: str = "logitgate") -> Vocab:
    path = tokenizer_path(name)
    if source == "logitgate":
        lg = import_logitgate()
        t0 = time.perf_counter()
        tok = lg.Tokenizer.from_mistral(str(path))
        load_s = time.perf_counter() - t0
        return Vocab(
            name=name,
            tokens=list(tok.tokens),
            special_ids=frozenset(tok.special_ids),
            eos_ids=tuple(tok.eos_token_ids),
            vocab_size=int(tok.vocab_size),
            source="logitgate",
            load_s=load_s,
            lg_tokenizer=tok,
        )
    if source == "reference":
        t0 = time.perf_counter()
        tokens, special, eos = reference_token_bytes(name)
        return Vocab(name, tokens, special, (eos,), len(tokens), "reference", time.perf_counter() - t0)
    raise ValueError(f"unknown vocabulary source {source!r}")


def reference_token_bytes(name: str):
    """(tokens, special_ids, eos_id) read with mistral-common's own readers."""
    path = tokenizer_path(name)
    if name == "spm32k":
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        tokens, special = [], set()
        for i in range(sp.vocab_size()):
            piece = sp.id_to_piece(i)
            if sp.is_byte(i):  # "<0xAB>"
                tokens.append(bytes([int(piece[3:5], 16)]))
            elif sp.is_control(i) or sp.is_unknown(i):
                tokens.append(piece.encode())
                special.add(i)
            else:
                tokens.append(piece.replace("\u2581", " ").encode())
        return tokens, frozenset(special), sp.eos_id()
    if name == "tekken131k":
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        tk = Tekkenizer.from_file(str(path))
        special = frozenset(range(tk.num_special_tokens))
        tokens = [tk.id_to_byte_piece(i, SpecialTokenPolicy.KEEP) for i in range(tk.n_words)]
        return tokens, special, tk.eos_id
    raise ValueError(name)


class TextEncoder:
    """Token ids a real model would emit for a text that continues an output (no BOS/EOS).

    SentencePiece adds a dummy-prefix space at the start of the input ("123" -> "▁1 2 3"),
    which a model continuing its output would not produce. We encode "\\n" + text and drop the
    leading tokens that spell " \\n" (or "\\n"), so the text itself is tokenized as mid-stream
    text. The result is checked to decode back to the exact bytes of the text.
    """

    def __init__(self, name: str, tokens: list):
        self.name = name
        self.tokens = tokens
        path = tokenizer_path(name)
        if name == "spm32k":
            import sentencepiece

            sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
            self._encode = lambda s: sp.encode(s)
            self._prefix = "\n"
        else:
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer

            tk = Tekkenizer.from_file(str(path))
            self._encode = lambda s: tk.encode(s, bos=False, eos=False)
            self._prefix = ""

    def encode_unchecked(self, text: str) -> list:
        ids = self._encode(self._prefix + text)
        if self._prefix:
            seen = b""
            while ids and seen.strip(b" ") != self._prefix.encode():
                seen += self.tokens[ids[0]]
                ids = ids[1:]
        return ids

    def encode(self, text: str) -> list:
        ids = self.encode_unchecked(text)
        got = b"".join(self.tokens[i] for i in ids)
        if got != text.encode("utf-8"):
            raise AssertionError(f"{self.name}: token path for {text!r} decodes to {got!r}")
        return list(ids)


if __name__ == "__main__":  # quick self-check: python bench/vocab.py
    for nm in TOKENIZER_FILES:
        v = load_vocab(nm, os.environ.get("BENCH_VOCAB_SOURCE", "reference"))
        enc = TextEncoder(nm, v.tokens)
        print(nm, v.source, len(v.tokens), v.vocab_size, len(v.special_ids), v.eos_ids, f"{v.load_s:.2f}s")
        print("  ", [v.tokens[i] for i in enc.encode("https://www.example.com/docs 123-45-6789\n")])
