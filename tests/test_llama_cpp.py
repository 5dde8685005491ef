"""llama-cpp-python with the embedded model: the GGUF tokenizer against llama.cpp's own, the logits
processor in ``create_completion``/``create_chat_completion``, the ``generate``/``chat`` helpers,
logitgate's loop with fast-forward on ``LlamaCppModel``, and the CLI on it."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import logitgate
from logitgate.demo import DEMO_ARITHMETIC_LARK
from logitgate.integrations.generation import generate

llama_cpp = pytest.importorskip("llama_cpp")
jsonschema = pytest.importorskip("jsonschema")
lark = pytest.importorskip("lark")

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "country": {"type": "string", "maxLength": 30},
        "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
        "landmarks": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
    },
    "required": ["city", "country", "population", "landmarks"],
    "additionalProperties": False,
}
TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]"


@pytest.fixture(scope="module")
def model(llama_model):
    return llama_model


def test_gguf_tokenizer_agrees_with_llama_cpp(model):
    llm, tok = model.llm, model.tokenizer
    assert tok.vocab_size == llm.n_vocab() and tok.eos_token_ids == (llm.token_eos(),)
    import ctypes

    buf = ctypes.create_string_buffer(1024)  # llama-cpp-python's detokenize truncates pieces at 32 bytes
    vocab = llm._model.vocab
    for i in range(tok.n_tokens):
        if i not in tok.special_ids:
            n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, False)
            assert buf.raw[:n] == tok.token_bytes(i), i
    corpus = ["Hello, world!", '{"key": [1, 2.5e-3, null, "caf\u00e9"]}', "def f(x):\n    return x ** 2\n",
              "  leading and trailing spaces  ", "emoji 🚀🎉 and CJK 東京タワー", "tabs\tand\r\nnewlines\n\n",
              "SELECT * FROM t WHERE a >= 10 AND b <> 'x';", "ünïcödé ñ ß ø å", "1234567890" * 5]
    for text in corpus:
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        assert tok.decode_bytes(ids) == text.encode(), text
        assert model.encode_bytes(text.encode()) == list(ids)
    specials = llm.tokenize(b"<|im_start|>user<|im_end|>", add_bos=False, special=True)
    assert specials[0] in tok.special_ids and specials[-1] in tok.eos_token_ids


def _check_json(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4] + [pytest.param(s, marks=pytest.mark.slow) for s in range(5, 40)])
def test_loop_outputs_are_valid(model, seed):
    tok = model.tokenizer
    cases = [
        (logitgate.Grammar.from_json_schema(SCHEMA), "Describe Paris as JSON.", _check_json),
        (logitgate.Grammar.from_regex(TIME), "What time is lunch? Answer HH:MM.",
         lambda t: re.fullmatch(TIME, t) or pytest.fail(t)),
        (logitgate.Grammar.from_lark(DEMO_ARITHMETIC_LARK), "Write a sum equal to 7.",
         lambda t: lark.Lark(DEMO_ARITHMETIC_LARK).parse(t)),
    ]
    for grammar, prompt, check in cases:
        res = generate(model, [{"role": "user", "content": prompt}], logitgate.compile(grammar, tok), max_tokens=150,
                       temperature=0.0 if seed == 0 else 1.0, seed=seed)
        assert res.stop_reason == "eos", res.text
        check(res.text)


def test_fast_forward_saves_forward_passes_and_stays_valid(model):
    compiled = logitgate.compile(logitgate.Grammar.from_json_schema(SCHEMA), model.tokenizer)
    msgs = [{"role": "user", "content": "Describe Rome as JSON."}]
    fast = generate(model, msgs, compiled, max_tokens=150, fast_forward=True)
    slow = generate(model, msgs, compiled, max_tokens=150, fast_forward=False)
    for res in (fast, slow):
        _check_json(res.text)
    assert fast.n_forced >= 4 and slow.n_forced == 0
    assert fast.n_sampled < slow.n_sampled


def test_small_batches_decode_on_the_single_token_thread_count(model):
    """A fast-forward step of a few tokens must not wake the batch threads (about 40 ms each decode
    with OMP_WAIT_POLICY=PASSIVE); a long batch still gets them, and the logits do not change."""
    from logitgate.integrations.llama_cpp import SMALL_BATCH

    ctx = model.llm.ctx
    params = model.llm.context_params
    ids = model.encode("The capital of Italy is")
    seq = ids + [ids[-1]] * max(SMALL_BATCH - len(ids), 2)
    model.reset()
    long_logits = model.forward(seq)  # one batch of at least SMALL_BATCH tokens
    assert llama_cpp.llama_n_threads_batch(ctx) == params.n_threads_batch
    model.reset()
    model.forward(seq[:-2])
    small_logits = model.forward(seq[-2:])  # the same sequence, ending with a batch of 2
    assert llama_cpp.llama_n_threads_batch(ctx) == params.n_threads
    assert int(np.argmax(small_logits)) == int(np.argmax(long_logits))


def test_logits_processor_in_create_chat_completion(model):
    from logitgate.integrations import llama_cpp as lg

    llm = model.llm
    compiled = logitgate.compile(logitgate.Grammar.from_json_schema(SCHEMA), model.tokenizer)
    for seed in (0, 1):
        text = lg.chat(llm, [{"role": "user", "content": "Describe Tokyo as JSON."}], compiled, max_tokens=150,
                       temperature=0.8, seed=seed)
        _check_json(text)
    text = lg.generate(llm, "The meeting starts at ", logitgate.Grammar.from_regex(TIME), max_tokens=10, temperature=0)
    assert re.fullmatch(TIME, text), text


def test_cli_generate_on_llama_cpp(capsys):
    from logitgate.cli import main

    assert main(["generate", "--runtime", "llama-cpp", "--regex", TIME, "--prompt", "What time is it?",
                 "--stats"]) == 0
    out, err = capsys.readouterr()
    assert re.fullmatch(TIME, out.strip()), out
    stats = json.loads(err.strip().splitlines()[-1])
    assert stats["stop_reason"] == "eos" and stats["tokens"] >= 2


def test_cli_generate_pydantic_class(tmp_path, capsys, monkeypatch):
    from logitgate.cli import main

    (tmp_path / "shapes.py").write_text(
        "from pydantic import BaseModel, Field\n"
        "class Box(BaseModel):\n    width: int = Field(ge=1, le=99)\n    height: int = Field(ge=1, le=99)\n"
        "    label: str = Field(max_length=12)\n")
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--runtime", "llama-cpp", "--pydantic", "shapes:Box", "--prompt", "A box as JSON."]) == 0
    value = json.loads(capsys.readouterr().out)
    assert set(value) == {"width", "height", "label"} and 1 <= value["width"] <= 99 and len(value["label"]) <= 12


def test_cli_generate_with_a_custom_recognizer(tmp_path, capsys):
    from logitgate.cli import main

    (tmp_path / "pin.py").write_text(
        "class Pin:\n"
        "    def initial(self): return 0\n"
        "    def byte_allowed(self, n, b): return 48 <= b <= 57 and n < 4\n"
        "    def append(self, n, b): return n + 1\n"
        "    def special_allowed(self, n, token): return token == 'eos' and n == 4\n"
        "class NotOne:\n    pass\n")
    assert main(["generate", "--runtime", "llama-cpp", "--recognizer", f"{tmp_path / 'pin.py'}:Pin", "--prompt",
                 "A four-digit PIN:"]) == 0
    assert re.fullmatch(r"[0-9]{4}", capsys.readouterr().out.strip())
    with pytest.raises(SystemExit, match="not a recognizer"):
        main(["generate", "--recognizer", f"{tmp_path / 'pin.py'}:NotOne", "--prompt", "x"])


def test_the_readme_demo_runs_on_the_embedded_model(capsys):
    from logitgate.cli import main

    assert main(["demo", "--runtime", "llama-cpp"]) == 0
    out = capsys.readouterr().out
    assert out.count("   valid") == 3 and "INVALID" not in out
    assert out.count("tokens/s") == 3 and "masks" in out


def test_cli_runs_pyctrl_samples_on_the_embedded_model(capsys, tmp_path):
    from logitgate.cli import main

    from .conftest import SHARED_DATA

    samples = SHARED_DATA / "aici" / "pyctrl-samples"
    if not samples.is_dir():
        pytest.skip("the AICI samples are not in ../shared/data")
    assert main(["run", str(samples / "yesno.py"), "--runtime", "llama-cpp", "--prompt", "Is water wet?"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"== sequence 0 \(stop\)\n\n(Yes|No)\n", out), out
    # 10 forks of 200 tokens each, run as one batch per step on llama.cpp
    rc = main(["run", str(samples / "forkbomb.py"), "--runtime", "llama-cpp", "--checks", "report",
               "--max-tokens", "400"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("== sequence") == 10 and all(f"foo{i} = " in out for i in range(10))
    forks = tmp_path / "forks.py"
    forks.write_text(
        "import pyaici.server as aici\n\nasync def main():\n    await aici.FixedTokens('Colours:')\n"
        "    i = await aici.fork(3)\n    await aici.gen_text(regex=r' (red|green|blue)', store_var=f'c{i}')\n"
        "    if i == 0:\n        a, b = await aici.wait_vars('c1', 'c2')\n"
        "        await aici.FixedTokens(' and' + a.decode() + ' and' + b.decode())\n\naici.start(main())\n")
    assert main(["run", str(forks), "--runtime", "llama-cpp", "--max-tokens", "30"]) == 0
    out = capsys.readouterr().out
    assert out.count("== sequence") == 3
    values = dict(re.findall(r"(c[012]) = '([^']*)'", out))
    assert set(values) == {"c0", "c1", "c2"} and all(re.fullmatch(" (red|green|blue)", v) for v in values.values())
    assert f"Colours:{values['c0']} and{values['c1']} and{values['c2']}" in out
    bad = tmp_path / "bad.py"
    bad.write_text("import pyaici.server as aici\n\nasync def main():\n    await aici.FixedTokens('x')\n"
                   "    raise ValueError('boom')\n\naici.start(main())\n")
    assert main(["run", str(bad), "--runtime", "llama-cpp"]) == 1
    captured = capsys.readouterr()
    assert "ValueError: boom" in captured.out + captured.err
