"""The embedded model (SmolLM2-135M-Instruct GGUF) end to end: logitgate's generation loop and the
transformers ``generate()`` logits processor, outputs checked by jsonschema, ``re`` and Lark's own
parser across seeds and prompts. The llama-cpp-python runtime is in test_llama_cpp.py."""
from __future__ import annotations

import json
import re

import pytest

import logitgate
from logitgate.demo import DEMO_ARITHMETIC_LARK
from logitgate.integrations.generation import generate

jsonschema = pytest.importorskip("jsonschema")
lark = pytest.importorskip("lark")
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
        "pet": {"anyOf": [{"type": "null"}, {"enum": ["cat", "dog", "fish"]}]},
    },
    "required": ["name", "age", "hobbies", "pet"],
    "additionalProperties": False,
}
DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ARITH = DEMO_ARITHMETIC_LARK  # bounded: a greedy small model that repeats itself still has to stop
PROMPTS = [
    "Describe a person as JSON.",
    "Give me a JSON record for a retired teacher who likes gardening.",
    "Answer with JSON only: a young programmer with a dog.",
]


@pytest.fixture(scope="module")
def model(embedded_gguf):
    from logitgate.integrations.transformers import TransformersModel

    return TransformersModel.from_gguf(embedded_gguf, n_threads=2)


@pytest.fixture(scope="module")
def constraints(model):
    tok = model.tokenizer
    return {
        "json": logitgate.compile(logitgate.Grammar.from_json_schema(PERSON), tok),
        "date": logitgate.compile(logitgate.Grammar.from_regex(DATE), tok),
        "lark": logitgate.compile(logitgate.Grammar.from_lark(ARITH), tok),
    }


def _check(kind: str, text: str) -> None:
    if kind == "json":
        jsonschema.validate(json.loads(text), PERSON, format_checker=jsonschema.FormatChecker())
    elif kind == "date":
        assert re.fullmatch(DATE, text), text
    else:
        lark.Lark(ARITH).parse(text)


def test_gguf_tokenizer_matches_the_model_tokenizer_on_prompts(model):
    """The logitgate Tokenizer read from the GGUF metadata decodes what transformers' tokenizer
    (converted from the same GGUF) encodes, byte for byte."""
    texts = PROMPTS + ['{"a": [1, 2.5e-3, "x\\u00e9"]}', "naïve café — 東京 🚀\n\tdef f(x):\n        return x"]
    for text in texts:
        ids = model.hf_tokenizer.encode(text, add_special_tokens=False)
        assert model.tokenizer.decode_bytes(ids) == text.encode()
    assert model.tokenizer.vocab_size == model.model.config.vocab_size


@pytest.mark.parametrize("kind,prompt", [("json", p) for p in PROMPTS]
                         + [("date", "When did the Berlin Wall fall? Answer as YYYY-MM-DD."),
                            ("lark", "Write an arithmetic expression equal to 12.")])
def test_generation_loop_output_is_valid_for_several_seeds(model, constraints, kind, prompt):
    seeds = [0, 1] if kind == "json" else [0, 1, 2]  # many more seeds on llama.cpp: test_llama_cpp.py
    for seed in seeds:
        res = generate(model, [{"role": "user", "content": prompt}], constraints[kind], max_tokens=120,
                       temperature=0.0 if seed == 0 else 0.9, seed=seed)
        assert res.stop_reason == "eos", (seed, res.text)
        _check(kind, res.text)
        assert model.tokenizer.decode_bytes(res.tokens).decode() == res.text


def test_fast_forward_and_step_by_step_both_valid_and_forced_text_identical(model, constraints):
    msgs = [{"role": "user", "content": PROMPTS[0]}]
    fast = generate(model, msgs, constraints["json"], max_tokens=120, fast_forward=True)
    slow = generate(model, msgs, constraints["json"], max_tokens=120, fast_forward=False)
    for res in (fast, slow):
        assert res.stop_reason == "eos"
        _check("json", res.text)
    assert fast.n_forced > 0 and slow.n_forced == 0
    # both begin with the bytes the schema forces before the model has any choice
    assert fast.text.startswith('{"name":"') and slow.text.startswith('{"name":"')
    # a constraint that forces everything gives the same text either way
    only = logitgate.compile(logitgate.Grammar.from_regex(r'\{"answer": "forty-two", "sure": true\}'), model.tokenizer)
    a = generate(model, msgs, only, fast_forward=True)
    b = generate(model, msgs, only, fast_forward=False)
    assert a.text == b.text == '{"answer": "forty-two", "sure": true}'
    assert a.n_sampled < b.n_sampled


def test_transformers_generate_batch_with_a_constraint_per_row(model, constraints):
    import torch

    from logitgate.integrations.transformers import LogitgateLogitsProcessor

    hf_tok = model.hf_tokenizer
    hf_tok.padding_side = "left"
    if hf_tok.pad_token_id is None:
        hf_tok.pad_token = hf_tok.eos_token
    prompts = ["Describe a person as JSON.", "When did the Berlin Wall fall? Answer as YYYY-MM-DD.",
               "Write an arithmetic expression equal to 12."]
    kinds = ["json", "date", "lark"]
    texts = [hf_tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts]
    batch = hf_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    eos = list(model.tokenizer.eos_token_ids)
    for sample in (False, True):
        proc = LogitgateLogitsProcessor([constraints[k] for k in kinds])
        torch.manual_seed(3)
        out = model.model.generate(**batch, logits_processor=[proc], max_new_tokens=120, do_sample=sample,
                                   temperature=0.8 if sample else None, top_p=None, top_k=None,
                                   eos_token_id=eos, pad_token_id=hf_tok.pad_token_id)
        new = out[:, batch["input_ids"].shape[1]:]
        for row, kind in enumerate(kinds):
            ids = [int(t) for t in new[row] if int(t) not in eos]
            # the row ended with EOS (the processor never sees the last EOS: generate() stops first)
            assert any(int(t) in eos for t in new[row]), (sample, kind, hf_tok.decode(ids))
            _check(kind, model.tokenizer.decode_bytes(ids).decode())


def test_transformers_num_return_sequences_share_the_prompt_constraint(model, constraints):
    import torch

    from logitgate.integrations.transformers import LogitgateLogitsProcessor

    hf_tok = model.hf_tokenizer
    text = hf_tok.apply_chat_template([{"role": "user", "content": "Pick a date."}], tokenize=False,
                                      add_generation_prompt=True)
    batch = hf_tok([text], return_tensors="pt", add_special_tokens=False)
    proc = LogitgateLogitsProcessor(constraints["date"])
    torch.manual_seed(0)
    eos = list(model.tokenizer.eos_token_ids)
    out = model.model.generate(**batch, logits_processor=[proc], max_new_tokens=20, do_sample=True,
                               num_return_sequences=4, eos_token_id=eos, pad_token_id=eos[0])
    assert len(proc.matchers) == 4
    for row in out[:, batch["input_ids"].shape[1]:]:
        _check("date", model.tokenizer.decode_bytes([int(t) for t in row if int(t) not in eos]).decode())


def test_processor_refuses_a_forbidden_token(constraints):
    import torch

    from logitgate.integrations.transformers import LogitgateLogitsProcessor

    c = constraints["date"]
    proc = LogitgateLogitsProcessor(c)
    scores = torch.zeros((1, c.tokenizer.vocab_size))
    masked = proc(torch.tensor([[5, 6]]), scores.clone())
    allowed = torch.isfinite(masked[0]).nonzero().flatten().tolist()
    assert allowed and all(c.tokenizer.token_bytes(t)[:1] in (b"1", b"2") for t in allowed)
    bad = next(i for i in range(100, 2000) if c.tokenizer.token_bytes(i)[:1].isalpha())
    with pytest.raises(RuntimeError, match="forbids"):
        proc(torch.tensor([[5, 6, bad]]), scores.clone())


def test_a_local_model_folder_replaces_the_default(model, constraints):
    """``load_model(folder)``: a transformers folder (here the float32 copy of the embedded GGUF that
    the first load wrote) with its own tokenizer files; the constraint is compiled for its vocabulary."""
    from logitgate.integrations.models import load_model

    folder = model.model.name_or_path
    local = load_model(folder)
    assert type(local).__name__ == "TransformersModel" and local.tokenizer.vocab_size == model.tokenizer.vocab_size
    # the folder's tokenizer (tokenizer.json) and the GGUF metadata agree on every token's bytes
    assert local.tokenizer.tokens == model.tokenizer.tokens
    compiled = logitgate.compile(logitgate.Grammar.from_regex(DATE), local.tokenizer)
    res = generate(local, [{"role": "user", "content": "Pick a date as YYYY-MM-DD."}], compiled, max_tokens=20)
    _check("date", res.text)
