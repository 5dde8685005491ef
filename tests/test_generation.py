"""The generation loop (``logitgate.integrations.generation``) on a scripted model: a stand-in whose
preferences depend only on the text so far, so that fast-forward (which changes the tokenization)
must produce exactly the text step-by-step decoding produces. The real model is in
test_model_integrations.py."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import logitgate
from logitgate.integrations.generation import generate, sample_token


class ScriptedModel:
    """A ``Model`` that wants to write ``target``: each step it prefers the longest token that is a
    prefix of what remains of ``target`` (then EOS at the end). It tokenizes text by greedy longest
    match over the vocabulary, its "canonical" tokenization. Counts forward passes."""

    def __init__(self, tokenizer: logitgate.Tokenizer, target: bytes, strict: bool = True) -> None:
        self.name = "scripted"
        self.strict = strict
        """False: a text off the target (a forward pass a controller's splice then wastes) gets flat
        logits instead of failing the test."""
        self.tokenizer = tokenizer
        self.target = target
        self.text = b""
        self._ids: list[int] = []
        self.forwards = 0
        self._by_bytes: dict[bytes, int] = {}
        for i, t in enumerate(tokenizer.tokens):
            if i not in tokenizer.special_ids and t:
                self._by_bytes.setdefault(t, i)
        self._maxlen = max(len(t) for t in self._by_bytes)

    @property
    def n_past(self) -> int:
        return len(self._ids)

    def encode(self, text: str) -> list[int]:
        ids = self.encode_bytes(text.encode()) or []
        self.prompt_len = len(ids)  # what follows the prompt is the output
        return ids

    def encode_bytes(self, data: bytes) -> list[int] | None:
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._maxlen, len(data) - i), 0, -1):
                t = self._by_bytes.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                return None
        return out

    def chat_prompt(self, messages):
        return self.encode(" ".join(m["content"] for m in messages))

    def reset(self) -> None:
        self._ids = []
        self.text = b""

    def forward(self, tokens):
        self.forwards += 1
        self._ids.extend(tokens)
        done = self.tokenizer.decode_bytes(self._ids[self.prompt_len:])
        logits = np.full(self.tokenizer.vocab_size, -10.0, dtype=np.float32)
        if not self.strict and not self.target.startswith(done):
            return logits
        assert self.target.startswith(done), (done, self.target)
        rest = self.target[len(done):]
        if not rest:
            logits[self.tokenizer.eos_token_ids[0]] = 10.0
            return logits
        for tid, b in enumerate(self.tokenizer.tokens):
            if tid not in self.tokenizer.special_ids and b and rest.startswith(b):
                logits[tid] = len(b)
        return logits

    def truncate(self, n):
        del self._ids[n:]


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["cat", "dog"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "nested": {"type": "object", "properties": {"alpha_value": {"type": "integer"}, "beta_value": {"type": "boolean"}},
                   "required": ["alpha_value", "beta_value"]},
    },
    "required": ["name", "kind", "tags", "nested"],
    "additionalProperties": False,
}
TARGET = {"name": "Ada Lovelace", "kind": "cat", "tags": ["x", "yz"], "nested": {"alpha_value": -12, "beta_value": True}}


@pytest.mark.parametrize("whitespace", ["compact", "pretty"])
def test_fast_forward_gives_the_same_text_as_step_by_step(real_tok, whitespace):
    g = logitgate.Grammar.from_json_schema(SCHEMA, whitespace=whitespace)
    indent = 2 if whitespace == "pretty" else None
    seps = (",", ": ") if whitespace == "pretty" else (",", ":")
    target = json.dumps(TARGET, indent=indent, separators=seps)
    compiled = logitgate.compile(g, real_tok)
    runs = {}
    for ff in (False, True):
        model = ScriptedModel(real_tok, target.encode())
        streamed: list[str] = []
        res = generate(model, "prompt", compiled, max_tokens=400, fast_forward=ff, on_text=streamed.append)
        assert res.text == target and "".join(streamed) == target
        assert res.stop_reason == "eos"
        assert real_tok.decode_bytes(res.tokens) == target.encode()
        runs[ff] = (res, model.forwards)
    slow, fast = runs[False], runs[True]
    assert slow[0].n_forced == 0 and slow[1] == slow[0].n_sampled + 1
    assert fast[0].n_forced > 0, "the keys and punctuation of this schema are forced"
    assert fast[1] < slow[1], "fast-forward saves forward passes"
    assert fast[1] == fast[0].n_sampled + 1  # prefill, then one forward per sampled token; none for forced ones


def test_fast_forward_heals_the_token_before_forced_bytes(tok_spm):
    """A regex whose forced tail is re-tokenized together with the sampled token before it."""
    g = logitgate.Grammar.from_regex(r"(ab|cd)efghijklmnop")
    model = ScriptedModel(tok_spm, b"abefghijklmnop")
    res = generate(model, "x", g, max_tokens=50)
    assert res.text == "abefghijklmnop" and res.n_forced > 0
    # the output is the scripted model's canonical tokenization of the whole text, except the last
    # token, which is sampled under the mask
    canon = model.encode_bytes(b"abefghijklmnop")
    assert res.tokens[:-1] == canon[: len(res.tokens) - 1]


def test_max_tokens_counts_forced_tokens(real_tok):
    g = logitgate.Grammar.from_regex(r"The quick brown fox jumps over the lazy dog\.")
    model = ScriptedModel(real_tok, b"The quick brown fox jumps over the lazy dog.")
    res = generate(model, "x", g, max_tokens=3)
    assert len(res.tokens) == 3 and res.stop_reason == "length"
    assert "The quick brown fox jumps over the lazy dog.".startswith(res.text)


def test_unconstrained_and_constrained_streams_agree_with_text(tok_spm):
    model = ScriptedModel(tok_spm, b"12-34")
    res = generate(model, "x", None, max_tokens=20)
    assert res.text == "12-34" and res.n_forced == 0 and res.mask_s == 0
    # the constraint forbids what the model wants: the output still matches the regex
    model = ScriptedModel(tok_spm, b"12-34")
    g = logitgate.Grammar.from_regex(r"[0-9]{2}-[0-9]{2}")
    res = generate(model, "x", g, max_tokens=20)
    assert re.fullmatch(r"[0-9]{2}-[0-9]{2}", res.text)


def test_overlapped_masks_give_the_same_output(tok_tekken):
    g = logitgate.Grammar.from_json_schema(SCHEMA)
    target = json.dumps(TARGET, separators=(",", ":")).encode()
    outs = []
    for overlap in (False, True):
        model = ScriptedModel(tok_tekken, target)
        outs.append(generate(model, "x", g, max_tokens=200, overlap=overlap).tokens)
    assert outs[0] == outs[1]


def test_sampling_respects_the_mask_and_the_seed():
    rng = np.random.default_rng(1)
    logits = np.array([0.0, -np.inf, 1.0, -np.inf, 0.5], dtype=np.float32)
    picks = {sample_token(logits, rng, temperature=1.5) for _ in range(200)}
    assert picks <= {0, 2, 4} and len(picks) == 3
    assert sample_token(logits, None) == 2
    a = [sample_token(logits, np.random.default_rng(7), 1.0) for _ in range(5)]
    b = [sample_token(logits, np.random.default_rng(7), 1.0) for _ in range(5)]
    assert a == b
    assert {sample_token(logits, rng, 1.0, top_p=0.4) for _ in range(50)} == {2}


def test_constraint_for_another_tokenizer_is_refused(tok_spm, tok_tekken):
    compiled = logitgate.compile(logitgate.Grammar.from_regex("a+"), tok_tekken)
    with pytest.raises(ValueError, match="different tokenizer"):
        generate(ScriptedModel(tok_spm, b"aa"), "x", compiled)


def test_sampling_with_nothing_allowed_returns_a_token_whose_logit_says_so():
    logits = np.full(8, -np.inf, dtype=np.float32)
    t = sample_token(logits, np.random.default_rng(0), temperature=0.7)
    assert 0 <= t < 8 and not np.isfinite(logits[t])
