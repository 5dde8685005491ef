"""``TransformersSequences``: many sequences of a transformers model in one batched forward pass.

The oracle is a fresh single-sequence ``TransformersModel.forward`` over each slot's whole token
list; the end-to-end check runs a forking controller with and without ``sequences``."""
from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from logitgate.controllers import run_controller

from .test_controller_runner import Steps

ATOL = 1e-3


@pytest.fixture(scope="module")
def tmodel(embedded_gguf):
    """The embedded SmolLM2 (Llama architecture) on transformers, loaded once for this module, on
    one torch thread (a busy machine makes several threads many times slower on these small
    passes); the thread count is put back afterwards."""
    import torch

    from logitgate.integrations.transformers import TransformersModel

    threads = torch.get_num_threads()
    try:
        yield TransformersModel.from_gguf(embedded_gguf, n_threads=1)
    finally:
        torch.set_num_threads(threads)


def single(model, tokens: list[int]) -> np.ndarray:
    """The oracle: a fresh single-sequence forward pass over ``tokens``."""
    model.reset()
    try:
        return model.forward(tokens)
    finally:
        model.reset()


def check(model, got: list[np.ndarray], full: list[list[int]]) -> None:
    assert len(got) == len(full)
    for k, (logits, tokens) in enumerate(zip(got, full)):
        want = single(model, tokens)
        assert logits.dtype == np.float32 and logits.shape == want.shape
        assert np.allclose(logits, want, atol=ATOL, rtol=0), (k, float(np.abs(logits - want).max()))
        assert int(logits.argmax()) == int(want.argmax()), k


@pytest.mark.parametrize("mode", ["batched", "per-item", "per-item-uncroppable"])
def test_decode_matches_single_sequence_forwards(tmodel, mode, monkeypatch):
    seqs = tmodel.sequences(6)
    assert seqs.batched  # a Llama-architecture model batches
    batched = mode == "batched"
    seqs.batched = batched  # the per-item fallback gives the same logits on the same model
    if mode == "per-item-uncroppable":  # as for a sliding-window cache: forks and truncations re-run tokens
        from transformers.cache_utils import DynamicCache

        monkeypatch.setattr(DynamicCache, "is_croppable", property(lambda self: False))
    a = tmodel.encode("The quick brown fox jumps over the lazy dog because")
    b = tmodel.encode("Hello")
    c = tmodel.encode("1, 2, 3,")
    tokens: dict[int, list[int]] = {}

    def run(items):
        got = seqs.decode(items)
        for slot, pos, new in items:
            tokens[slot] = tokens.get(slot, [])[:pos] + list(new)
        check(tmodel, got, [tokens[slot] for slot, _, _ in items])

    # prompts of different lengths together
    calls = seqs.forward_calls
    run([(0, 0, a), (1, 0, b), (2, 0, c)])
    if batched:
        assert seqs.forward_calls == calls + 1
    # forks: slot 3 = all of slot 0, slot 4 = the first 4 tokens of slot 0
    seqs.copy(0, 3, len(a))
    seqs.copy(0, 4, 4)
    tokens[3], tokens[4] = list(a), a[:4]
    assert seqs.length(3) == len(a) and seqs.length(4) == 4
    # one-token and several-token items, every slot at its own length, an empty slot beside them
    calls = seqs.forward_calls
    run([(0, len(a), [11]), (1, len(b), [12, 13, 14]), (2, len(c), [15]), (3, len(a), [16, 17]),
         (4, 4, [18]), (5, 0, [19])])
    if batched:
        assert seqs.forward_calls == calls + 1
    # truncate, then decode again; a decode position below the length truncates too
    seqs.truncate(1, 2)
    tokens[1] = tokens[1][:2]
    run([(1, 2, [20]), (0, 3, [21, 22]), (3, len(a) + 2, [23])])
    # a fork of a fork, cut inside the parent's own new tokens; the parent keeps its cache
    seqs.copy(3, 5, len(a) + 1)
    tokens[5] = tokens[3][:len(a) + 1]
    run([(5, len(a) + 1, [24]), (3, len(a) + 3, [25])])
    # truncate to nothing: the slot starts over
    seqs.truncate(0, 0)
    run([(0, 0, b + [26])])


def test_items_of_very_different_lengths_run_in_separate_batches(tmodel):
    seqs = tmodel.sequences(4)
    prompt = tmodel.encode("Once upon a time there was a little robot who lived on a quiet hill. " * 2)
    seqs.decode([(0, 0, prompt[:5]), (1, 0, prompt[:6])])
    calls = seqs.forward_calls
    got = seqs.decode([(0, 5, [30]), (1, 6, [31]), (2, 0, prompt)])  # a long prompt beside two steps
    assert seqs.forward_calls == calls + 2  # not padded to the prompt's length
    check(tmodel, got, [prompt[:5] + [30], prompt[:6] + [31], prompt])


def test_slots_stepping_together_reuse_their_batch(tmodel, monkeypatch):
    """The same slots stepping with equal lengths run on their last batch cache as it was (no
    re-padding); touching a slot (truncate, fork) makes the next step pad again."""
    import logitgate.integrations.transformers as tf_mod

    pads = []
    real_pad = tf_mod._left_pad
    monkeypatch.setattr(tf_mod, "_left_pad", lambda *a: pads.append(1) or real_pad(*a))
    seqs = tmodel.sequences(4)
    prompt = tmodel.encode("Colours: red, green,")
    seqs.decode([(0, 0, prompt)])
    for s in (1, 2):
        seqs.copy(0, s, len(prompt))
    tokens = {s: list(prompt) for s in range(3)}

    def step(new: dict[int, int]):
        items = [(s, len(tokens[s]), [t]) for s, t in new.items()]
        for s, t in new.items():
            tokens[s].append(t)
        check(tmodel, seqs.decode(items), [tokens[s] for s in new])

    step({0: 40, 1: 41, 2: 42})
    pads.clear()
    step({0: 43, 1: 44, 2: 45})
    step({0: 46, 1: 47, 2: 48})
    assert not pads  # reused
    seqs.truncate(1, len(prompt) + 1)
    tokens[1] = tokens[1][:len(prompt) + 1]
    step({0: 49, 1: 50, 2: 51})  # slot 1 is shorter now: padded
    assert pads
    pads.clear()
    step({2: 52, 0: 53})  # other slots, other order: padded
    assert pads


def test_slot_limit_and_bad_items(tmodel):
    seqs = tmodel.sequences(2)
    seqs.decode([(0, 0, [1, 2, 3])])
    with pytest.raises(ValueError, match="out of range: these sequences have 2 slots"):
        seqs.decode([(2, 0, [1])])
    with pytest.raises(ValueError, match="out of range"):
        seqs.copy(0, 5, 1)
    with pytest.raises(ValueError, match="cannot decode at position 7"):
        seqs.decode([(0, 7, [1])])
    with pytest.raises(ValueError, match="twice"):
        seqs.decode([(1, 0, [1]), (1, 0, [2])])
    with pytest.raises(ValueError, match="cannot copy 4 tokens"):
        seqs.copy(0, 1, 4)
    with pytest.raises(ValueError, match="n >= 1"):
        tmodel.sequences(0)


class SingleSequence:
    """Forwards the ``Model`` protocol to a model, hiding its ``sequences`` (the runner then moves
    one KV cache between the sequences)."""

    def __init__(self, model) -> None:
        self.model = model
        self.name = model.name
        self.tokenizer = model.tokenizer

    @property
    def n_past(self) -> int:
        return self.model.n_past

    def encode(self, text):
        return self.model.encode(text)

    def encode_bytes(self, data):
        return self.model.encode_bytes(data)

    def chat_prompt(self, messages):
        return self.model.chat_prompt(messages)

    def reset(self):
        self.model.reset()

    def forward(self, tokens):
        return self.model.forward(tokens)

    def truncate(self, n_past):
        self.model.truncate(n_past)


class Spy(SingleSequence):
    """The model with ``sequences``, keeping the object the runner got."""

    seqs = None

    def sequences(self, n):
        self.seqs = self.model.sequences(n)
        return self.seqs


def test_forking_controller_gives_the_same_texts_batched_and_on_one_cache(tmodel):
    steps = [("text", "Three colours:"), ("fork", 3), ("mark",),
             ("regex", r" (red|green|blue|yellow|black|white)", 4), ("store", "c"),
             ("back_to_mark", " my favourite is"), ("regex", r" [a-z]{2,8}\.", 5), ("store", "fav")]
    prompt = [{"role": "user", "content": "Name three colours."}]
    spy = Spy(tmodel)
    batched = run_controller(lambda h: Steps(h, steps), spy, prompt, temperature=0.0)
    assert spy.seqs is not None and spy.seqs.batched and spy.seqs.forward_calls > 0
    single_cache = run_controller(lambda h: Steps(h, steps), SingleSequence(tmodel), prompt, temperature=0.0)
    assert len(batched.sequences) == 3
    for seq in batched.sequences:
        assert seq.error is None, seq.log
        fav = batched.variables["fav" + str(seq.seq_id)].decode()
        assert re.fullmatch(r" my favourite is [a-z]{2,8}\.", fav)
        assert seq.text == "Three colours:" + fav
    assert [(s.seq_id, s.text, s.tokens, s.stop_reason) for s in batched.sequences] == \
        [(s.seq_id, s.text, s.tokens, s.stop_reason) for s in single_cache.sequences]
    assert batched.variables == single_cache.variables
