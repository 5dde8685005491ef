"""logitgate.Tokenizer: the exact bytes of every token, checked against each tokenizer's own library.

The oracle is always the tokenizer's own code: encode a text with its library, then the bytes of
those ids joined must equal the library's own decoding of the same ids (UTF-8). Where a library
decodes one token at a time, every id of the vocabulary is compared too.
"""
from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logitgate.errors import TokenizerError
from logitgate.vocab.tokenizer import Tokenizer

from .conftest import mistral_file

SRC = Path(__file__).resolve().parents[1] / "src"

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " one leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "\ttab\tseparated\tvalues\n",
    "line one\nline two\r\nline three\n\n\n",
    "    indented\n\t\tmixed\t  whitespace \u3000 ideographic space\u00a0nbsp",
    "Café crème brûlée, naïve façade, Ångström, jalapeño, Ærø",
    "Ελληνικά και русский текст",
    "日本語のテキストと中文文本，还有한국어",
    "😀 emoji 🎉🎉 and flags 🇫🇷🇯🇵",
    "family 👨\u200d👩\u200d👧\u200d👦 and 🏳\ufe0f\u200d🌈 and 👍🏽 ZWJ sequences",
    "def f(x):\n    return x ** 2  # square\n",
    'if (a && b) { printf("%d\\n", a[i]); }',
    '{"key": [1, 2.5e-3, null, true], "nested": {"a": "b"}}',
    '<html><body class="x">&amp; &lt;tag&gt;</body></html>',
    "SELECT * FROM users WHERE id = 42;",
    "3.14159 2718281828 1,000,000 -0.0001 0x1F 1e10",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 12345678901234567890",
    "rare symbols: ∀x∈ℝ, ∑ᵢ xᵢ² ≤ ∞ ⊕ ⊗ ‰ § ¶ † ‡ • ※",
    "math 𝔸𝔹ℂ 𝒳, old italic 𐌰𐌱, cuneiform 𒀀",
    "zero\u200bwidth\u200djoiner, \ufeffBOM, soft\u00adhyphen",
    "combining: e\u0301 a\u0308 n\u0303 ",
    "مرحبا بالعالم",
    "שלום עולם",
    "हिन्दी भाषा",
    "\x01\x07 control chars \x1b[31m red \x1b[0m",
    "▁ lower one eighth block ▁▁ and Ġ Ċ",
    "<s> [INST] looks special </s> <0x41> <unk>",
    "a",
    "URL https://example.com/path?q=1&r=%20#frag and mail a.b@c.de",
]


_mistral_data = mistral_file


def _all_ids(tok: Tokenizer, ids: list[int]) -> bytes:
    return b"".join(tok.token_bytes(i) for i in ids if not tok.is_special(i))


# ---------------------------------------------------------------------- SentencePiece (tokenizer.model.v1)
@pytest.fixture(scope="module")
def sp_path() -> Path:
    pytest.importorskip("sentencepiece")
    return _mistral_data("tokenizer.model.v1")


@pytest.fixture(scope="module")
def sp(sp_path):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(sp_path))


@pytest.fixture(scope="module")
def tok_sp(sp_path) -> Tokenizer:
    return Tokenizer.from_sentencepiece(sp_path)


@pytest.fixture(scope="module", params=["from_mistral", "from_sentencepiece", "processor"])
def tok_sp_any(request, sp_path, sp, tok_sp) -> Tokenizer:
    if request.param == "from_mistral":
        return Tokenizer.from_mistral(sp_path)
    if request.param == "processor":
        return Tokenizer.from_sentencepiece(sp)
    return tok_sp


def _sp_expected(sp, ids: list[int]) -> bytes:
    """SentencePiece's decoding of ``ids``, with the dummy-prefix space put back: encoding prepends
    U+2581 to the text (add_dummy_prefix) and decoding drops one leading U+2581 of the first piece.
    That space is part of the first token, so it belongs in the token's bytes."""
    prefix = b" " if ids and sp.id_to_piece(ids[0]).startswith("\u2581") else b""
    return prefix + sp.decode(ids).encode("utf-8")


def test_sentencepiece_corpus_roundtrip(tok_sp_any, sp):
    used_byte_pieces = 0
    for text in CORPUS:
        ids = sp.encode(text)
        assert ids, text
        used_byte_pieces += sum(sp.is_byte(i) for i in ids)
        ours = b"".join(tok_sp_any.token_bytes(i) for i in ids)
        assert ours == _sp_expected(sp, ids), text
        assert tok_sp_any.decode_bytes(ids) == ours
    assert used_byte_pieces > 50  # the CJK/emoji texts go through byte fallback


def test_sentencepiece_every_piece_against_decoder(tok_sp, sp):
    """Every normal piece and every ASCII byte piece, decoded by SentencePiece after a fixed
    anchor piece (so that no dummy-prefix space is removed)."""
    anchor = sp.piece_to_id("a")
    assert not sp.is_unknown(anchor)
    checked = 0
    for i in range(sp.get_piece_size()):
        if tok_sp.is_special(i) or (sp.is_byte(i) and tok_sp.tokens[i][0] >= 0x80):
            continue
        assert sp.decode([anchor, i]).encode("utf-8") == b"a" + tok_sp.tokens[i], (i, sp.id_to_piece(i))
        checked += 1
    assert checked == sp.get_piece_size() - 3 - 128


def test_sentencepiece_non_ascii_byte_pieces(tok_sp, sp):
    byte_ids = {tok_sp.tokens[i][0]: i for i in range(tok_sp.n_tokens) if sp.is_byte(i)}
    assert sorted(byte_ids) == list(range(256))
    for ch in "é€😀𒀀":
        ids = [byte_ids[b] for b in ch.encode("utf-8")]
        assert sp.decode(ids).encode("utf-8") == tok_sp.decode_bytes(ids) == ch.encode("utf-8")


def test_sentencepiece_specials_agree_with_mistral_common(sp_path, sp, tok_sp):
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

    mc = SentencePieceTokenizer(str(sp_path))
    assert tok_sp.n_tokens == tok_sp.vocab_size == mc.n_words == 32000
    assert tok_sp.special_ids == set(mc.special_ids) | {sp.unk_id()}
    assert tok_sp.eos_token_ids == (mc.eos_id,)
    assert tok_sp.bos_token_id == mc.bos_id
    assert tok_sp.tokens[:3] == (b"<unk>", b"<s>", b"</s>")
    assert tok_sp.name == "tokenizer.model.v1"


def test_mistral_objects(sp_path, tok_sp, tok_tekken, tekkenizer):
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from_obj = Tokenizer.from_mistral(MistralTokenizer.from_file(str(sp_path)))
    assert from_obj.tokens == tok_sp.tokens and from_obj.fingerprint == tok_sp.fingerprint
    assert from_obj.name == "tokenizer.model.v1"
    from_tekkenizer = Tokenizer.from_mistral(tekkenizer)
    assert from_tekkenizer.fingerprint == tok_tekken.fingerprint
    assert from_tekkenizer.bos_token_id == tok_tekken.bos_token_id


# ---------------------------------------------------------------------- tekken (tekken_240911.json)
@pytest.fixture(scope="module")
def tekken_path() -> Path:
    pytest.importorskip("tiktoken")
    return _mistral_data("tekken_240911.json")


@pytest.fixture(scope="module")
def tekken_loaded(tekken_path) -> tuple[Tokenizer, float]:
    import mistral_common.tokens.tokenizers.tekken  # noqa: F401  (import time is not load time)

    start = time.perf_counter()
    tok = Tokenizer.from_mistral(tekken_path)
    return tok, time.perf_counter() - start


@pytest.fixture(scope="module")
def tok_tekken(tekken_loaded) -> Tokenizer:
    return tekken_loaded[0]


@pytest.fixture(scope="module")
def tekkenizer(tekken_path):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    return Tekkenizer.from_file(tekken_path)


def test_tekken_layout_matches_mistral_common(tok_tekken, tekkenizer):
    assert tok_tekken.n_tokens == tok_tekken.vocab_size == tekkenizer.n_words == 131072
    assert tok_tekken.special_ids == set(tekkenizer.special_ids) == set(range(1000))
    assert tok_tekken.eos_token_ids == (tekkenizer.eos_id,) == (2,)
    assert tok_tekken.bos_token_id == tekkenizer.bos_id == 1
    for i in range(1000):
        assert tok_tekken.tokens[i] == tekkenizer.id_to_piece(i).encode("utf-8")
    for i in range(1000, tekkenizer.n_words):
        assert tok_tekken.tokens[i] == tekkenizer.id_to_byte_piece(i), i


def test_tekken_corpus_roundtrip(tok_tekken, tekkenizer):
    for text in CORPUS:
        ids = tekkenizer.encode(text, bos=True, eos=True)
        assert _all_ids(tok_tekken, ids) == tok_tekken.decode_bytes(ids) == tekkenizer.decode(ids).encode("utf-8")
        assert tok_tekken.decode_bytes(ids) == text.encode("utf-8")


def test_tekken_load_time(tekken_loaded):
    tok, seconds = tekken_loaded
    print(f"\ntekken_240911.json loaded in {seconds:.3f} s ({tok.n_tokens} tokens)")
    assert seconds < 3.0  # about 0.5 s on a laptop; generous bound against noisy machines


def test_tekken_without_mistral_common_gives_the_same_tokens(tekken_path, tok_tekken, monkeypatch):
    """The fallback names of the special tokens (mistral-common not installed) are mistral-common's."""
    monkeypatch.setitem(sys.modules, "mistral_common.tokens.tokenizers.tekken", None)  # import -> ImportError
    tok = Tokenizer.from_mistral(tekken_path)
    assert tok.fingerprint == tok_tekken.fingerprint


def test_tekken_file_with_special_tokens(tekken_path, tmp_path):
    """A newer tekken file that lists its special tokens (and pads them with fillers)."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    data = json.loads(tekken_path.read_text())
    specials = [{"rank": 0, "token_str": "<unk>", "is_control": True},
                {"rank": 1, "token_str": "<s>", "is_control": True},
                {"rank": 2, "token_str": "</s>", "is_control": True},
                {"rank": 3, "token_str": "[INST]", "is_control": True}]
    small = {"config": dict(data["config"], default_num_special_tokens=10, default_vocab_size=10 + 600,
                            version="v13"),
             "vocab": data["vocab"][:700], "special_tokens": specials}
    path = tmp_path / "tekken_small.json"
    path.write_text(json.dumps(small))
    ref = Tekkenizer.from_file(path)
    tok = Tokenizer.from_mistral(path)
    assert tok.n_tokens == ref.n_words == 610
    assert tok.special_ids == ref.special_ids
    assert (tok.bos_token_id, tok.eos_token_ids) == (ref.bos_id, (ref.eos_id,))
    assert [tok.tokens[i].decode() for i in range(10)] == [ref.id_to_piece(i) for i in range(10)]
    assert all(tok.tokens[i] == ref.id_to_byte_piece(i) for i in range(10, 610))


# ---------------------------------------------------------------------- transformers
@pytest.fixture(scope="module")
def hf_llama_folder(sp_path, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("llama")
    (folder / "tokenizer.model").write_bytes(sp_path.read_bytes())
    return folder


def test_transformers_sentencepiece_backend(sp_path, sp, tok_sp):
    """transformers' SentencePiece-backed (slow) tokenizer, with added tokens."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.SentencePieceBackend(vocab_file=str(sp_path), unk_token="<unk>", bos_token="<s>",
                                           eos_token="</s>")
    tok = Tokenizer.from_huggingface(hf)
    assert tok.tokens == tok_sp.tokens and tok.fingerprint == tok_sp.fingerprint
    assert (tok.bos_token_id, tok.eos_token_ids) == (hf.bos_token_id, (hf.eos_token_id,))

    hf.add_tokens(["<tool>", "\u2581hey"])
    hf.add_special_tokens({"additional_special_tokens": ["<|sp|>"]})
    tok = Tokenizer.from_huggingface(hf)
    assert tok.n_tokens == len(hf) == 32002
    assert tok.special_ids == tok_sp.special_ids | {hf.convert_tokens_to_ids("<|sp|>")}
    anchor = hf.convert_tokens_to_ids("\u2581a")
    for text in ("<tool>", "\u2581hey"):
        i = hf.convert_tokens_to_ids(text)
        # the anchor keeps transformers' final .strip() away from the token's own spaces
        assert hf.decode([anchor, i]).encode("utf-8") == b"a" + tok.token_bytes(i)
    assert tok.token_bytes(hf.convert_tokens_to_ids("<tool>")) == b"<tool>"


def test_transformers_llama_fast_from_sentencepiece(hf_llama_folder, tok_sp):
    """LlamaTokenizer.from_pretrained on the .model file converts it to a `tokenizers` BPE."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("google.protobuf", reason="transformers needs protobuf to convert a .model file")
    hf = transformers.LlamaTokenizer.from_pretrained(str(hf_llama_folder), legacy=False)
    assert len(hf) == 32000  # (LlamaTokenizer(vocab_file=...) gives a 3-token vocab in transformers 5)
    assert hf.backend_tokenizer is not None
    for tok in (Tokenizer.from_huggingface(hf), Tokenizer.from_tokenizers_json(hf.backend_tokenizer.to_str())):
        assert tok.tokens == tok_sp.tokens
        assert tok.special_ids == tok_sp.special_ids
        assert (tok.eos_token_ids, tok.bos_token_id) == (tok_sp.eos_token_ids, tok_sp.bos_token_id)
    tok = Tokenizer.from_huggingface(hf)
    for text in CORPUS:
        ids = hf.encode(text, add_special_tokens=False)
        ours = _all_ids(tok, ids)
        # the decoder's Strip(" ", 1, 0) after Fuse drops one leading space of the whole text (the
        # SentencePiece dummy prefix), nothing else
        expected = hf.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False).encode()
        assert (ours[1:] if ours.startswith(b" ") else ours) == expected, text


def test_transformers_tekken_fast(tekken_path, tok_tekken):
    """transformers' own conversion of the tekken file to a byte-level BPE (GPT-2 characters)."""
    pytest.importorskip("transformers")
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    hf = convert_tekken_tokenizer(str(tekken_path), chat_template="")
    tok = Tokenizer.from_huggingface(hf)
    assert tok.n_tokens == len(hf) == tok_tekken.n_tokens
    assert tok.tokens[1000:] == tok_tekken.tokens[1000:]
    assert tok.special_ids == tok_tekken.special_ids
    assert (tok.eos_token_ids, tok.bos_token_id) == (tok_tekken.eos_token_ids, tok_tekken.bos_token_id)
    for text in CORPUS[:12]:
        ids = hf.encode(text, add_special_tokens=False)
        assert tok.decode_bytes(ids) == hf.decode(ids, clean_up_tokenization_spaces=False).encode() == text.encode()


# ---------------------------------------------------------------------- byte-level BPE trained here
ADDED_TEXTS = [
    "call <tool> now<|sp|>then",
    "say hey there, hey!",
    "Ġyo and Ġyo again",
    "<|endoftext|>after the end<|pad|>",
]


@pytest.fixture(scope="module")
def bpe():
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers

    tk = tokenizers.Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|pad|>"], show_progress=False)
    tk.train_from_iterator(CORPUS * 5, trainer)
    # "Ġyo" is matched as literal input text but decodes to " yo" (the ByteLevel decoder runs on
    # added tokens too); " hey" has a space, outside the byte alphabet: decoded as UTF-8 as is
    tk.add_tokens([AddedToken("<tool>"), AddedToken(" hey", normalized=False), AddedToken("Ġyo", normalized=False)])
    tk.add_special_tokens(["<|sp|>"])
    return tk


@pytest.fixture(scope="module", params=["json", "dict", "path", "folder", "tokenizers", "transformers"])
def tok_bpe(request, bpe, tmp_path_factory) -> tuple[Tokenizer, object]:
    text = bpe.to_str()
    if request.param == "json":
        return Tokenizer.from_tokenizers_json(text), bpe
    if request.param == "dict":
        return Tokenizer.from_tokenizers_json(json.loads(text)), bpe
    if request.param in ("path", "folder"):
        folder = tmp_path_factory.mktemp("bpe")
        (folder / "tokenizer.json").write_text(text, encoding="utf-8")
        return Tokenizer.from_tokenizers_json(folder / "tokenizer.json" if request.param == "path" else folder), bpe
    if request.param == "tokenizers":
        return Tokenizer.from_huggingface(bpe), bpe
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                              pad_token="<|pad|>")
    return Tokenizer.from_huggingface(hf), hf


def _decode(lib, ids: list[int]) -> str:
    if hasattr(lib, "backend_tokenizer"):
        return lib.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return lib.decode(ids, skip_special_tokens=True)


def _encode(lib, text: str) -> list[int]:
    if hasattr(lib, "backend_tokenizer"):
        return lib.encode(text, add_special_tokens=False)
    return lib.encode(text).ids


def test_bytelevel_corpus_roundtrip(tok_bpe):
    tok, lib = tok_bpe
    for text in CORPUS + ADDED_TEXTS:
        ids = _encode(lib, text)
        assert _all_ids(tok, ids) == tok.decode_bytes(ids) == _decode(lib, ids).encode("utf-8"), text


def test_bytelevel_added_and_special_tokens(tok_bpe, bpe):
    tok, _ = tok_bpe
    ids = {t: bpe.token_to_id(t) for t in ("<|endoftext|>", "<|pad|>", "<|sp|>", "<tool>", " hey", "Ġyo")}
    assert tok.special_ids == {ids["<|endoftext|>"], ids["<|pad|>"], ids["<|sp|>"]}
    assert tok.eos_token_ids == (ids["<|endoftext|>"],)
    assert tok.token_bytes(ids["<tool>"]) == b"<tool>"
    assert tok.token_bytes(ids[" hey"]) == b" hey"
    assert tok.token_bytes(ids["Ġyo"]) == b" yo" == bpe.decode([ids["Ġyo"]]).encode()
    assert tok.token_bytes(ids["<|sp|>"]) == b"<|sp|>"  # display only
    for text, token in (("call <tool> now", "<tool>"), ("say hey", " hey"), ("Ġyo!", "Ġyo")):
        assert ids[token] in bpe.encode(text).ids  # the round trip above does exercise them


def test_bytelevel_every_token_against_decoder(tok_bpe, bpe):
    """tokenizers decodes one id at a time lossily (U+FFFD for a partial UTF-8 sequence), as
    Python's errors="replace" does; complete tokens must match exactly."""
    tok, _ = tok_bpe
    assert tok.n_tokens == bpe.get_vocab_size(with_added_tokens=True)
    partial = 0
    for i in range(tok.n_tokens):
        if tok.is_special(i):
            continue
        ours = tok.tokens[i]
        try:
            assert ours.decode("utf-8") == bpe.decode([i]), i
        except UnicodeDecodeError:
            partial += 1
            assert ours.decode("utf-8", "replace") == bpe.decode([i]), i
    assert partial >= 60  # the lone non-ASCII bytes of the alphabet, at least


# ---------------------------------------------------------------------- SentencePiece-style tokenizer.json
@pytest.fixture(scope="module")
def llama_style():
    """A Llama-style tokenizer.json (BPE over U+2581 pieces, <0xNN> byte fallback) trained on the
    ASCII part of the corpus, so that every other character goes through byte fallback."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tk = tokenizers.Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False)
    tk.train_from_iterator([t for t in CORPUS if t.isascii()] * 5, trainer)
    data = json.loads(tk.to_str())
    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    vocab += [t for t, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in vocab]
    data["model"].update(vocab={t: i for i, t in enumerate(vocab)}, byte_fallback=True, unk_token="<unk>",
                         fuse_unk=True)
    data["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, t in enumerate(vocab[:3])]
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return data, tokenizers.Tokenizer.from_str(json.dumps(data))


def test_llama_style_json_roundtrip(llama_style):
    data, lib = llama_style
    tok = Tokenizer.from_tokenizers_json(data)
    assert tok.eos_token_ids == (2,) and tok.bos_token_id == 1 and tok.special_ids == {0, 1, 2}
    assert [tok.tokens[3 + b] for b in range(256)] == [bytes([b]) for b in range(256)]
    fallback = 0
    for text in CORPUS:
        ids = lib.encode(text).ids
        fallback += sum(3 <= i < 259 for i in ids)
        ours = _all_ids(tok, ids)
        # Strip(" ", 1, 0) after Fuse: one leading space of the whole text (the dummy prefix) is dropped
        assert (ours[1:] if ours.startswith(b" ") else ours) == lib.decode(ids).encode("utf-8"), text
    assert fallback > 100


def test_metaspace_unigram_json_roundtrip():
    """A T5-style Unigram with a Metaspace decoder, which drops every U+2581 of the first token
    (prepend_scheme "always"): a whole-text artifact, accounted for on the first token only."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tk = tokenizers.Tokenizer(models.Unigram())
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>", show_progress=False)
    tk.train_from_iterator(CORPUS * 5, trainer)
    tok = Tokenizer.from_tokenizers_json(tk.to_str())
    assert tok.eos_token_ids == (tk.token_to_id("</s>"),)
    assert tok.special_ids == {tk.token_to_id(t) for t in ("<pad>", "</s>", "<unk>")}
    for text in CORPUS:
        ids = [i for i in tk.encode(text).ids if not tok.is_special(i)]
        if not ids:
            continue
        first, rest = tok.token_bytes(ids[0]), tok.decode_bytes(ids[1:])
        assert b" " not in tk.id_to_token(ids[0]).encode()  # so its spaces all come from U+2581
        assert first.replace(b" ", b"") + rest == tk.decode(ids).encode("utf-8"), text


# ---------------------------------------------------------------------- tiktoken
@pytest.fixture(scope="module")
def tekken_ranks(tekken_path) -> tuple[dict[bytes, int], str]:
    data = json.loads(tekken_path.read_text())
    n = data["config"]["default_vocab_size"] - data["config"]["default_num_special_tokens"]
    return {base64.b64decode(v["token_bytes"]): v["rank"] for v in data["vocab"][:n]}, data["config"]["pattern"]


@pytest.fixture(scope="module")
def tiktoken_enc(tekken_ranks):
    tiktoken = pytest.importorskip("tiktoken")
    ranks, pattern = tekken_ranks
    n = len(ranks)  # ids n, n + 1, n + 2 are left unused
    return tiktoken.Encoding(name="tekken-ranks", pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": n + 3, "<|fim_middle|>": n + 4})


@pytest.fixture(scope="module", params=["encoding", "dict", "file"])
def tok_tiktoken(request, tiktoken_enc, tekken_ranks, tmp_path_factory) -> Tokenizer:
    if request.param == "encoding":
        return Tokenizer.from_tiktoken(tiktoken_enc)
    ranks, _ = tekken_ranks
    n = len(ranks)
    specials = {"<|endoftext|>": n + 3, "<|fim_middle|>": n + 4}
    if request.param == "dict":
        return Tokenizer.from_tiktoken(ranks, special_tokens=specials, eos_token="<|endoftext|>")
    path = tmp_path_factory.mktemp("tiktoken") / "tekken.tiktoken"
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in ranks.items()))
    return Tokenizer.from_tiktoken(path, special_tokens=specials)


def test_tiktoken_corpus_roundtrip(tok_tiktoken, tiktoken_enc):
    for text in CORPUS:
        ids = tiktoken_enc.encode_ordinary(text)
        assert _all_ids(tok_tiktoken, ids) == tiktoken_enc.decode_bytes(ids) == text.encode("utf-8")


def test_tiktoken_vocab(tok_tiktoken, tiktoken_enc, tok_tekken):
    n = tiktoken_enc.n_vocab - 5
    assert tok_tiktoken.n_tokens == tiktoken_enc.n_vocab
    assert all(tok_tiktoken.tokens[i] == tiktoken_enc.decode_single_token_bytes(i) for i in range(n))
    assert tok_tiktoken.tokens[:n] == tok_tekken.tokens[1000:]  # two loaders, same bytes
    assert tok_tiktoken.special_ids == {n, n + 1, n + 2, n + 3, n + 4}  # the gaps too
    assert tok_tiktoken.tokens[n:] == (b"", b"", b"", b"<|endoftext|>", b"<|fim_middle|>")
    assert tok_tiktoken.eos_token_ids == (n + 3,)
    assert tok_tiktoken.bos_token_id is None


def test_tiktoken_loaders_agree(tiktoken_enc, tekken_ranks):
    ranks, _ = tekken_ranks
    n = len(ranks)
    a = Tokenizer.from_tiktoken(tiktoken_enc)
    b = Tokenizer.from_tiktoken(ranks, special_tokens={"<|endoftext|>": n + 3, "<|fim_middle|>": n + 4})
    assert a.fingerprint == b.fingerprint
    c = Tokenizer.from_tiktoken(tiktoken_enc, eos_token="<|fim_middle|>", vocab_size=n + 100)
    assert c.eos_token_ids == (n + 4,) and c.vocab_size == n + 100 and c.fingerprint != a.fingerprint


# ---------------------------------------------------------------------- errors
class _FakeSentencePiece:
    """A SentencePieceProcessor look-alike whose byte piece 4 is malformed."""

    pieces = ["<unk>", "<s>", "</s>", "<0x41>", "<0xG1>", "\u2581hi"]

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def id_to_piece(self, i: int) -> str:
        return self.pieces[i]

    def is_control(self, i: int) -> bool:
        return i in (1, 2)

    def is_unknown(self, i: int) -> bool:
        return i == 0

    def is_unused(self, i: int) -> bool:
        return False

    def is_byte(self, i: int) -> bool:
        return i in (3, 4)

    def eos_id(self) -> int:
        return 2

    def bos_id(self) -> int:
        return 1


def _bytefallback_json(tokens: list[str]) -> dict:
    return {"model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}, "merges": [],
                      "byte_fallback": True},
            "added_tokens": [{"id": 0, "content": "</s>", "special": True}],
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]}}


def test_error_unknown_tokenizer_object():
    for load in (Tokenizer.from_huggingface, Tokenizer.from_mistral, Tokenizer.from_sentencepiece,
                 Tokenizer.from_tiktoken, Tokenizer.from_tokenizers_json):
        with pytest.raises(TokenizerError, match="unknown .*type .*float"):
            load(3.5)


def test_error_malformed_byte_piece():
    with pytest.raises(TokenizerError, match=r"token 4 '<0xG1>'.*malformed"):
        Tokenizer.from_sentencepiece(_FakeSentencePiece())
    fake = _FakeSentencePiece()
    fake.pieces = list(fake.pieces)
    fake.pieces[4] = "<0x41"
    with pytest.raises(TokenizerError, match=r"token 4 '<0x41'.*byte piece"):
        Tokenizer.from_sentencepiece(fake)
    with pytest.raises(TokenizerError, match=r"token 2 '<0xZZ>'.*malformed"):
        Tokenizer.from_tokenizers_json(_bytefallback_json(["</s>", "<0x41>", "<0xZZ>", "\u2581a"]))
    good = Tokenizer.from_tokenizers_json(_bytefallback_json(["</s>", "<0x41>", "<0x0a>", "\u2581a"]))
    assert good.tokens == (b"</s>", b"A", b"\n", b" a")


def test_error_eos_out_of_range():
    with pytest.raises(TokenizerError, match="EOS id 5 is out of range"):
        Tokenizer([b"a", b"b"], eos_token_ids=[5])
    with pytest.raises(TokenizerError, match="EOS id -1"):
        Tokenizer.from_bytes([b"a", b"b"], eos_token_id=-1)
    with pytest.raises(TokenizerError, match="at least one EOS"):
        Tokenizer([b"a", b"b"], eos_token_ids=[])
    with pytest.raises(TokenizerError, match="BOS id 9"):
        Tokenizer([b"a", b"b"], eos_token_ids=[1], bos_token_id=9)
    with pytest.raises(TokenizerError, match="special id 2"):
        Tokenizer([b"a", b"b"], eos_token_ids=[1], special_ids=[2])


def test_error_vocab_size_too_small():
    with pytest.raises(TokenizerError, match="vocab_size 2 is smaller than the number of tokens 3"):
        Tokenizer([b"a", b"b", b"c"], eos_token_ids=[0], vocab_size=2)


def test_error_bad_tokens():
    with pytest.raises(TokenizerError, match="token 1 has empty bytes"):
        Tokenizer([b"a", b"", b"c"], eos_token_ids=[0])
    with pytest.raises(TokenizerError, match="token 2 is str"):
        Tokenizer([b"a", b"b", "c"], eos_token_ids=[0])
    with pytest.raises(TokenizerError, match="at least one token"):
        Tokenizer([], eos_token_ids=[0])


def test_error_unsupported_tokenizer_json():
    data = _bytefallback_json(["</s>", "a", "##b"])
    data["decoder"] = {"type": "WordPiece", "prefix": "##"}
    with pytest.raises(TokenizerError, match="WordPiece"):
        Tokenizer.from_tokenizers_json(data)
    data["decoder"] = None
    with pytest.raises(TokenizerError, match="no decoder"):
        Tokenizer.from_tokenizers_json(data)
    data = _bytefallback_json(["</s>", "a"])
    data["model"]["type"] = "Mystery"
    with pytest.raises(TokenizerError, match="'Mystery'"):
        Tokenizer.from_tokenizers_json(data)
    data = _bytefallback_json(["<end>", "a"])
    data["added_tokens"][0]["content"] = "<end>"
    with pytest.raises(TokenizerError, match="eos_token"):
        Tokenizer.from_tokenizers_json(data)
    assert Tokenizer.from_tokenizers_json(data, eos_token="<end>").eos_token_ids == (0,)
    with pytest.raises(TokenizerError, match="'<nope>' is not in the vocabulary"):
        Tokenizer.from_tokenizers_json(data, eos_token="<nope>")
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.from_tokenizers_json("{not json")


def test_error_tiktoken_inputs(tmp_path):
    path = tmp_path / "bad.tiktoken"
    path.write_bytes(b"YQ== 0\nYg== 1\nnot-a-pair\n")
    with pytest.raises(TokenizerError, match=r"bad.tiktoken:3"):
        Tokenizer.from_tiktoken(path, special_tokens={"<|endoftext|>": 2})
    with pytest.raises(TokenizerError, match="pass special_tokens= and eos_token="):
        Tokenizer.from_tiktoken({b"a": 0, b"b": 1})
    with pytest.raises(TokenizerError, match="'<eot>' is not one of the special tokens"):
        Tokenizer.from_tiktoken({b"a": 0}, special_tokens={"<|endoftext|>": 1}, eos_token="<eot>")
    with pytest.raises(TokenizerError, match="'<x>' has id 0, already used by b'a'"):
        Tokenizer.from_tiktoken({b"a": 0}, special_tokens={"<x>": 0})
    with pytest.raises(TokenizerError, match="duplicate rank 0"):
        Tokenizer.from_tiktoken({b"a": 0, b"b": 0}, special_tokens={"<|endoftext|>": 1})


def test_missing_optional_library_names_the_extra(sp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import -> ImportError
    with pytest.raises(ImportError, match=r"pip install logitgate\[hf\]"):
        Tokenizer.from_sentencepiece(sp_path)


def test_error_missing_files(tmp_path):
    with pytest.raises(TokenizerError, match="no such"):
        Tokenizer.from_mistral(tmp_path / "tekken.json")
    with pytest.raises(TokenizerError, match="no such"):
        Tokenizer.from_tokenizers_json(tmp_path / "missing.json")


# ---------------------------------------------------------------------- the class itself
def _small() -> Tokenizer:
    return Tokenizer.from_bytes([b"<eos>", b"a", b"bc", b"\xe2\x82", b"<bos>"], eos_token_id=0, bos_token_id=4,
                                vocab_size=8, name="small")


def test_queries():
    tok = _small()
    assert tok.n_tokens == 5 and tok.vocab_size == 8 and tok.name == "small"
    assert tok.special_ids == {0, 4}  # EOS and BOS are always special
    assert tok.eos_token_ids == (0,) and tok.bos_token_id == 4
    assert tok.token_bytes(3) == b"\xe2\x82" and tok.token_bytes(0) == b"<eos>"
    assert tok.decode_bytes([4, 1, 2, 0, 3]) == b"abc\xe2\x82"
    assert [tok.is_special(i) for i in range(8)] == [True, False, False, False, True, True, True, True]
    with pytest.raises(TokenizerError, match="token id 6 is a padding id"):
        tok.token_bytes(6)
    with pytest.raises(TokenizerError, match="token id 8 is out of range"):
        tok.decode_bytes([1, 8])
    with pytest.raises(TokenizerError, match="token id -1"):
        tok.token_bytes(-1)
    with pytest.raises(TokenizerError, match="out of range"):
        tok.is_special(8)
    assert Tokenizer.from_bytes([b"x", b"y"], eos_token_id=[1, 0, 1]).eos_token_ids == (1, 0)
    assert "small" in repr(tok)


def test_immutable_and_picklable():
    tok = _small()
    assert isinstance(tok.tokens, tuple) and isinstance(tok.special_ids, frozenset)
    with pytest.raises(AttributeError):
        tok.vocab_size = 9
    with pytest.raises(AttributeError):
        tok.tokens = ()
    with pytest.raises(AttributeError):
        del tok.name
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.tokens == tok.tokens and copy.fingerprint == tok.fingerprint and copy.name == tok.name
    assert (copy.bos_token_id, copy.eos_token_ids, copy.special_ids) == (4, (0,), frozenset({0, 4}))
    assert Tokenizer.from_bytes([bytearray(b"a"), b"b"], eos_token_id=1).tokens == (b"a", b"b")


def test_fingerprint():
    tok = _small()
    fp = tok.fingerprint
    assert len(fp) == 64 and int(fp, 16) >= 0 and tok.fingerprint == fp
    base = dict(eos_token_id=0, bos_token_id=4, vocab_size=8)
    tokens = [b"<eos>", b"a", b"bc", b"\xe2\x82", b"<bos>"]
    assert Tokenizer.from_bytes(tokens, name="other", **base).fingerprint == fp  # the name is not part of it
    assert Tokenizer.from_bytes([b"<eos>", b"a", b"b", b"c\xe2\x82", b"<bos>"], **base).fingerprint != fp
    assert Tokenizer.from_bytes(tokens, **dict(base, vocab_size=5)).fingerprint != fp
    assert Tokenizer.from_bytes(tokens, special_ids=[2], **base).fingerprint != fp
    assert Tokenizer.from_bytes(tokens, **dict(base, eos_token_id=[0, 4])).fingerprint != fp


def test_trie_is_built_once():
    pytest.importorskip("logitgate.vocab.trie")
    tok = _small()
    trie = tok.trie
    assert trie is tok.trie
    assert type(trie).__name__ == "TokenTrie"


def test_core_import_needs_no_optional_library():
    code = ("import sys, logitgate.vocab.tokenizer\n"
            "bad = [m for m in ('transformers', 'tokenizers', 'sentencepiece', 'tiktoken', 'mistral_common')"
            " if m in sys.modules]\n"
            "assert not bad, bad\n")
    env = {"PYTHONPATH": str(SRC), "PATH": ""}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6), min_size=2, max_size=30), st.data())
def test_decode_bytes_is_concatenation(tokens, data):
    eos = data.draw(st.integers(0, len(tokens) - 1))
    special = data.draw(st.sets(st.integers(0, len(tokens) - 1), max_size=3))
    tok = Tokenizer.from_bytes(tokens, eos_token_id=eos, special_ids=special)
    ids = data.draw(st.lists(st.integers(0, len(tokens) - 1), max_size=20))
    assert tok.decode_bytes(ids) == b"".join(tokens[i] for i in ids if i not in special and i != eos)
