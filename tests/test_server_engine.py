"""The server's engine (continuous batching): on a deterministic fake multi-sequence model over a
real tokenizer (constraints honoured in a crowd, batch-independence, stop strings, lengths,
cancellation, back-pressure, shutdown, errors kept to their request, preemption, asyncio), and
on the embedded model through llama.cpp."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import zlib

import numpy as np
import pytest

import logitgate
from logitgate.server.engine import Delta, Engine, EngineFull, RequestHandle, SamplingParams

# -- a deterministic fake model ----------------------------------------------------------------


class FakeSequences:
    """Slots of token lists; ``decode`` checks the engine's bookkeeping (positions, each slot once,
    the shared cache never overfull) and returns logits that depend only on each slot's tokens."""

    def __init__(self, model: "FakeModel", n: int) -> None:
        self.model = model
        self.n_seq_max = n
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.batch_sizes: list[int] = []
        if model.cells is not None:
            self.n_ctx = model.cells

    def copy(self, src: int, dst: int, n: int) -> None:
        self.tokens[dst] = self.tokens[src][:n]

    def truncate(self, slot: int, n: int) -> None:
        del self.tokens[slot][n:]

    def decode(self, items):
        m = self.model
        if m.delay:
            time.sleep(m.delay)
        if m.fail_next:
            m.fail_next = False
            raise RuntimeError("the fake model broke")
        slots = [s for s, _, _ in items]
        assert len(set(slots)) == len(slots), "a slot twice in one decode"
        for slot, pos, toks in items:
            assert toks, "an item without tokens"
            assert pos == len(self.tokens[slot]), f"slot {slot}: position {pos}, but it holds {len(self.tokens[slot])}"
            self.tokens[slot].extend(toks)
        if m.cells is not None:
            assert sum(map(len, self.tokens)) <= m.cells, "the shared cache overflowed"
        self.batch_sizes.append(len(items))
        return [m.logits_for(self.tokens[s]) for s in slots]


class FakeModel:
    """Fixed logits per (recent tokens, length), from a seeded RNG over a real tokenizer."""

    name = "fake-model"

    def __init__(self, tok: logitgate.Tokenizer, *, seed: int = 0, n_ctx: int = 4096, cells: int | None = None,
                 delay: float = 0.0) -> None:
        self.tokenizer = tok
        self.n_ctx = n_ctx
        self.cells = cells
        self.delay = delay
        self.fail_next = False
        self.table = np.random.default_rng(seed).normal(0.0, 4.0, (61, tok.vocab_size)).astype(np.float32)
        self.byte_ids = {t[0]: i for i, t in enumerate(tok.tokens) if len(t) == 1 and i not in tok.special_ids}
        self.last: FakeSequences | None = None

    def logits_for(self, tokens: list[int]) -> np.ndarray:
        key = zlib.crc32(np.asarray(tokens[-3:], dtype=np.int64).tobytes()) ^ (len(tokens) * 2654435761)
        return self.table[key % len(self.table)].copy()

    def encode(self, text: str) -> list[int]:
        return [self.tokenizer.bos_token_id] + self.encode_bytes(text.encode())

    def encode_bytes(self, data: bytes) -> list[int]:
        return [self.byte_ids[b] for b in data]

    def chat_prompt(self, messages) -> list[int]:
        return self.encode("".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: ")

    def sequences(self, n: int) -> FakeSequences:
        self.last = FakeSequences(self, n)
        return self.last


def prompt(seed: int, n: int = 12) -> list[int]:
    return [1] + [int(t) for t in np.random.default_rng(seed).integers(3, 32000, size=n - 1)]


def drain(h: RequestHandle, timeout: float = 60) -> list[Delta]:
    out = []
    while True:
        d = h.get(timeout=timeout)
        out.append(d)
        if d.finish_reason is not None:
            return out


WORDS = r"[a-z]{2,10}( [a-z]{2,10}){1,4}\."
DIGITS = r"[0-9]{3}-[0-9]{4}"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def compiled(tok_spm):
    return {
        "words": logitgate.compile(logitgate.Grammar.from_regex(WORDS), tok_spm),
        "digits": logitgate.compile(logitgate.Grammar.from_regex(DIGITS), tok_spm),
        "json": logitgate.compile(logitgate.Grammar.from_json_schema(SCHEMA), tok_spm),
    }


@pytest.fixture
def engine_factory(tok_spm):
    engines: list[Engine] = []

    def make(*, start: bool = True, model: FakeModel | None = None, **kw) -> tuple[Engine, FakeModel]:
        model = model or FakeModel(tok_spm)
        eng = Engine(model, **kw)
        engines.append(eng)
        if start:
            eng.start()
        return eng, model

    yield make
    for e in engines:
        e.close()


def check_output(kind: str, text: str) -> None:
    if kind == "words":
        assert re.fullmatch(WORDS, text), text
    elif kind == "digits":
        assert re.fullmatch(DIGITS, text), text
    elif kind == "json":
        import jsonschema

        jsonschema.validate(json.loads(text), SCHEMA)


# -- the fake model ----------------------------------------------------------------------------


def test_many_concurrent_requests_complete_under_their_constraints(engine_factory, compiled):
    eng, model = engine_factory(max_batch=64)
    kinds = ["words", "digits", "json", None] * 8
    handles = []
    for i, kind in enumerate(kinds):
        params = SamplingParams(max_tokens=200 if kind else 40, temperature=0.0 if i % 2 else 0.8, seed=i)
        handles.append((kind, eng.submit(prompt(i), compiled[kind] if kind else None, params)))
    for kind, h in handles:
        deltas = drain(h)
        text, reason = h.result(timeout=5)
        assert text == "".join(d.text for d in deltas)
        assert h.completion_tokens == sum(len(d.token_ids) for d in deltas) <= h_max(kind)
        if kind is None:
            assert reason in ("stop", "length")
        else:
            assert reason == "stop", (kind, text, deltas[-1])
            check_output(kind, text)
    assert max(model.last.batch_sizes) >= 24  # they really ran together
    assert all(not t for t in model.last.tokens)  # every slot freed


def h_max(kind):
    return 200 if kind else 40


def test_output_is_the_same_alone_or_in_a_batch(engine_factory, compiled):
    eng, _ = engine_factory(max_batch=16)
    cases = [("json", SamplingParams(max_tokens=120, temperature=0.0)),
             ("words", SamplingParams(max_tokens=120, temperature=0.9, seed=7)),
             (None, SamplingParams(max_tokens=30, temperature=0.0))]
    alone = [eng.submit(prompt(100 + k), compiled[kind] if kind else None, p).result(timeout=60)
             for k, (kind, p) in enumerate(cases)]
    crowd = [eng.submit(prompt(500 + j), compiled["digits"], SamplingParams(temperature=1.0, seed=j))
             for j in range(12)]
    again = [eng.submit(prompt(100 + k), compiled[kind] if kind else None, p) for k, (kind, p) in enumerate(cases)]
    assert [h.result(timeout=60) for h in again] == alone
    for h in crowd:
        assert h.result(timeout=60)[1] == "stop"
    assert eng.stats()["sequences_per_step"] > 1.5


def test_stop_strings_end_generation_and_are_not_in_the_text(engine_factory, compiled):
    eng, _ = engine_factory()
    p = SamplingParams(max_tokens=60, temperature=0.0)
    full, reason = eng.submit(prompt(3), compiled["words"], p).result(timeout=60)
    assert reason == "stop" and len(full) > 12
    stop = full[6:9]
    cut = full[:full.find(stop)]
    h = eng.submit(prompt(3), compiled["words"], SamplingParams(max_tokens=60, temperature=0.0, stop=["#", stop]))
    deltas = drain(h)
    assert h.result() == (cut, "stop")
    assert "".join(d.text for d in deltas) == cut
    assert not any(stop in d.text for d in deltas)
    # a stop string whose start ends the text is held back, then given out at the end
    tail = full[-2:] + "#"
    h = eng.submit(prompt(3), compiled["words"], SamplingParams(max_tokens=60, temperature=0.0, stop=[tail]))
    deltas = drain(h)
    assert h.result() == (full, "stop")
    assert deltas[-1].text.endswith(full[-2:])


def test_max_tokens_gives_length(engine_factory):
    eng, _ = engine_factory()
    h = eng.submit(prompt(4), None, SamplingParams(max_tokens=7, temperature=0.5, seed=1, ignore_eos=True))
    deltas = drain(h)
    assert deltas[-1].finish_reason == "length"
    assert h.completion_tokens == 7 == sum(len(d.token_ids) for d in deltas)
    assert h.result()[1] == "length"


def test_utf8_is_held_back_until_complete(engine_factory, tok_spm):
    eng, _ = engine_factory()
    pattern = "[éñ漢字😀]{4,12}"
    c = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok_spm)
    for seed in range(4):
        h = eng.submit(prompt(seed), c, SamplingParams(max_tokens=80, temperature=1.0, seed=seed))
        deltas = drain(h)
        text, reason = h.result()
        assert reason == "stop" and re.fullmatch(pattern, text)
        assert all("\ufffd" not in d.text for d in deltas)


def test_cancel_frees_the_slot_and_the_engine_keeps_serving(engine_factory, tok_spm, compiled):
    eng, model = engine_factory(max_batch=1, model=FakeModel(tok_spm, delay=0.002))
    long = eng.submit(prompt(5), None, SamplingParams(max_tokens=100_000, ignore_eos=True, seed=0))
    queued = eng.submit(prompt(6), compiled["digits"], SamplingParams(temperature=0.0))
    for _ in range(3):
        assert long.get(timeout=10).finish_reason is None
    assert eng.stats()["waiting"] == 1  # the only slot is taken
    long.cancel()
    deltas = drain(long)
    assert deltas[-1].finish_reason == "cancelled"
    text, reason = queued.result(timeout=30)
    assert reason == "stop" and re.fullmatch(DIGITS, text)
    # a waiting request can be cancelled too
    blocker = eng.submit(prompt(7), None, SamplingParams(max_tokens=100_000, ignore_eos=True))
    waiting = eng.submit(prompt(8), None, SamplingParams(max_tokens=5))
    waiting.cancel()
    assert waiting.result(timeout=10)[1] == "cancelled"
    blocker.cancel()
    assert blocker.result(timeout=10)[1] == "cancelled"
    assert eng.submit(prompt(9), None, SamplingParams(max_tokens=3, ignore_eos=True)).result(timeout=10)[1] == "length"
    deadline = time.time() + 5
    while eng.stats()["running"] and time.time() < deadline:
        time.sleep(0.01)
    assert model.last.tokens == [[]]


def test_engine_full_and_close_fail_pending_requests(engine_factory, tok_spm):
    eng, _ = engine_factory(start=False, max_waiting=2)
    a = eng.submit(prompt(1), None, SamplingParams(max_tokens=5))
    b = eng.submit(prompt(2), None, SamplingParams(max_tokens=5))
    with pytest.raises(EngineFull) as info:
        eng.submit(prompt(3), None, SamplingParams(max_tokens=5))
    assert isinstance(info.value, logitgate.LogitgateError)
    eng.close()
    for h in (a, b):
        assert h.result(timeout=5)[1] == "error"
        assert h.get(timeout=5).error == "server shutting down"
    # running and waiting requests of a started engine fail the same way
    eng2, _ = engine_factory(max_batch=1, model=FakeModel(tok_spm, delay=0.002))
    running = eng2.submit(prompt(1), None, SamplingParams(max_tokens=100_000, ignore_eos=True))
    waiting = [eng2.submit(prompt(k), None, SamplingParams(max_tokens=10)) for k in (2, 3)]
    running.get(timeout=10)
    eng2.close()
    for h in [running, *waiting]:
        deltas = drain(h, timeout=5)
        assert (deltas[-1].finish_reason, deltas[-1].error) == ("error", "server shutting down")
    late = eng2.submit(prompt(4), None, SamplingParams(max_tokens=5))
    assert late.result(timeout=5)[1] == "error" and late.error == "server shutting down"


def test_errors_end_only_their_request(engine_factory, tok_spm, compiled):
    eng, model = engine_factory(model=FakeModel(tok_spm, n_ctx=64))
    nothing = logitgate.compile(logitgate.Grammar.from_regex("nothing allowed [0-9]{3}"), tok_spm)
    raising = logitgate.compile(logitgate.Grammar.from_regex("a raising mask [0-9]{3}"), tok_spm)
    other_tok = logitgate.Tokenizer.from_bytes([b"a", b"b", b"</s>"], eos_token_id=2)
    foreign = logitgate.compile(logitgate.Grammar.from_regex("a+"), other_tok)
    nothing.token_mask = lambda state: np.zeros(nothing.mask_words, dtype=np.int32)

    def boom(state):
        raise RuntimeError("kaboom")

    raising.token_mask = boom
    try:
        good = [eng.submit(prompt(20 + k), compiled["digits"], SamplingParams(temperature=0.0)) for k in range(3)]
        bad = {
            "allows no token": eng.submit(prompt(30), nothing, SamplingParams()),
            "kaboom": eng.submit(prompt(31), raising, SamplingParams()),
            "different tokenizer": eng.submit(prompt(32), foreign, SamplingParams()),
            "context holds 64": eng.submit(prompt(33, n=100), None, SamplingParams()),
            "prompt is empty": eng.submit([], None, SamplingParams()),
        }
        for h in good:
            text, reason = h.result(timeout=30)
            assert reason == "stop" and re.fullmatch(DIGITS, text)
        for message, h in bad.items():
            assert h.result(timeout=30)[1] == "error"
            assert message in h.error, h.error
        # a failing batched forward pass: each request is decoded apart, and those the model does not
        # fail again go on (one the model keeps failing on ends alone: see test_server_faults.py)
        slow = [eng.submit(prompt(40 + k), None, SamplingParams(max_tokens=10_000, ignore_eos=True)) for k in range(3)]
        slow[0].get(timeout=10)
        model.fail_next = True
        for h in slow:
            assert h.result(timeout=10)[1] == "length"  # at the context, as if nothing had failed
        assert not model.fail_next, "the failure was never hit"
        text, reason = eng.submit(prompt(50), compiled["digits"], SamplingParams()).result(timeout=30)
        assert reason == "stop" and re.fullmatch(DIGITS, text)
        # a long generation stops at the context
        h = eng.submit(prompt(51, n=60), None, SamplingParams(max_tokens=100, ignore_eos=True))
        assert h.result(timeout=10)[1] == "length" and h.completion_tokens == 4
    finally:
        del nothing.token_mask, raising.token_mask


def test_a_full_shared_cache_preempts_and_outputs_stay_the_same(engine_factory, tok_spm, compiled):
    eng, model = engine_factory(model=FakeModel(tok_spm, cells=160))
    params = [SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=60, temperature=0.7, seed=3, ignore_eos=True)]
    alone = [eng.submit(prompt(60 + k, n=20), None, params[k % 2]).result(timeout=30) for k in range(5)]
    assert eng.stats()["preemptions"] == 0
    together = [eng.submit(prompt(60 + k, n=20), None, params[k % 2]) for k in range(5)]
    assert [h.result(timeout=30) for h in together] == alone
    assert all(r == "length" for _, r in alone)
    assert eng.stats()["preemptions"] > 0
    assert max(model.last.batch_sizes) >= 2


def test_async_iteration_from_an_event_loop(engine_factory, tok_spm, compiled):
    eng, _ = engine_factory(model=FakeModel(tok_spm, delay=0.003))

    async def consume(h: RequestHandle) -> tuple[str, str]:
        parts, reason = [], None
        async for d in h:
            parts.append(d.text)
            reason = d.finish_reason
        return "".join(parts), reason

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        handles = [eng.submit(prompt(70 + k), compiled["words"], SamplingParams(temperature=0.0)) for k in range(4)]
        got = await asyncio.gather(*(consume(h) for h in handles))
        stop.set()
        await t
        return handles, got, ticks

    handles, got, ticks = asyncio.run(main())
    for h, res in zip(handles, got):
        assert res == h.result() and res[1] == "stop"
    assert ticks >= 10  # the loop ran while the requests generated
    # deltas produced before the iteration started are not lost
    h = eng.submit(prompt(80), compiled["words"], SamplingParams(temperature=0.0))
    h.result(timeout=30)
    assert asyncio.run(consume(h)) == h.result()
    # leaving the loop early cancels the request
    h = eng.submit(prompt(81), None, SamplingParams(max_tokens=100_000, ignore_eos=True))

    async def first(h):
        async for d in h:
            return d

    assert asyncio.run(first(h)).finish_reason is None
    assert h.result(timeout=10)[1] == "cancelled"


def test_stats(engine_factory, compiled):
    eng, _ = engine_factory()
    hs = [eng.submit(prompt(90 + k), compiled["json"], SamplingParams(temperature=0.0)) for k in range(6)]
    for h in hs:
        h.result(timeout=60)
    s = eng.stats()
    for key in ("steps", "sequences_per_step", "tokens_generated", "forward_s", "mask_s", "mask_share",
                "tokens_per_s"):
        assert key in s
    assert s["tokens_generated"] == sum(h.completion_tokens for h in hs) > 0
    assert s["steps"] >= max(h.completion_tokens for h in hs)
    assert 1 < s["sequences_per_step"] <= 6
    assert 0 <= s["mask_share"] <= 1 and s["tokens_per_s"] > 0
    assert s["requests_finished"] == 6 and s["running"] == s["waiting"] == 0


def test_submit_is_thread_safe(engine_factory, compiled):
    eng, _ = engine_factory(max_batch=8)
    results: list[tuple[str, str]] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        h = eng.submit(prompt(200 + k), compiled["digits"], SamplingParams(temperature=0.0))
        r = h.result(timeout=60)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 24
    assert all(reason == "stop" and re.fullmatch(DIGITS, text) for text, reason in results)


# -- the embedded model --------------------------------------------------------------------------


def test_embedded_model_concurrent_requests_match_the_single_request_loop(llama_model):
    from logitgate.integrations.generation import generate

    tok = llama_model.tokenizer
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    js = logitgate.compile(logitgate.Grammar.from_json_schema(schema), tok)
    rx = logitgate.compile(logitgate.Grammar.from_regex(date), tok)
    cases = [
        ("json", js, "A person as JSON."), ("json", js, "Give me a user record as JSON."),
        ("json", js, "Describe a cat owner as JSON."), ("date", rx, "When did Apollo 11 land on the Moon?"),
        ("date", rx, "The date of the first iPhone release?"), ("date", rx, "Pick a date in 1999."),
        (None, None, "Say hello in French."), (None, None, "Name three colors."),
    ]
    max_tokens = 40
    same_in_batch: list[bool] = []
    with Engine(llama_model, max_batch=8) as eng:
        handles = [eng.submit(llama_model.chat_prompt([{"role": "user", "content": q}]), c,
                              SamplingParams(max_tokens=max_tokens, temperature=0.0)) for _, c, q in cases]
        outputs = [h.result(timeout=120) for h in handles]
        stats = eng.stats()
    lengths = [h.completion_tokens for h in handles]
    # all eight ran in one batch: about as many steps as the longest answer (and its prefill), not
    # one per token of them all. (A fixed mean of rows per step would depend on how long the
    # answers are, which differs between CPUs: llama.cpp's kernels round differently.)
    assert stats["steps"] <= max(lengths) + 2 < sum(lengths) / 2
    assert stats["sequences_per_step"] >= sum(lengths) / stats["steps"]
    for (kind, _, _), (text, reason) in zip(cases, outputs):
        if kind == "json":
            import jsonschema

            assert reason == "stop", text
            jsonschema.validate(json.loads(text), schema)
        elif kind == "date":
            assert reason == "stop" and re.fullmatch(date, text), text
        else:
            assert reason in ("stop", "length") and text
    # greedy, one request at a time: the same text as logitgate's single-request loop. (In a batch,
    # llama.cpp's logits depend slightly on where a sequence's cells sit in the shared cache: its
    # attention works through the cache in blocks, so a near tie may go the other way.)
    with Engine(llama_model, max_batch=8) as eng:
        for (kind, c, q), (text, reason) in list(zip(cases, outputs))[::2]:
            ids = llama_model.chat_prompt([{"role": "user", "content": q}])
            mine = eng.submit(ids, c, SamplingParams(max_tokens=max_tokens, temperature=0.0)).result(timeout=60)
            res = generate(llama_model, ids, c, max_tokens=max_tokens, temperature=0.0, fast_forward=False)
            assert mine == (res.text, {"eos": "stop", "length": "length"}[res.stop_reason]), q
            same_in_batch.append(text == res.text)
    print(f"batched outputs equal to the single-request loop: {sum(same_in_batch)} of {len(same_in_batch)}")


@pytest.fixture(scope="module")
def transformers_model(embedded_gguf):
    """The embedded SmolLM2 on transformers (one torch thread, put back afterwards)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch

    from logitgate.integrations.transformers import TransformersModel

    threads = torch.get_num_threads()
    try:
        yield TransformersModel.from_gguf(embedded_gguf, n_threads=1)
    finally:
        torch.set_num_threads(threads)


def test_embedded_model_on_transformers_batches_to_the_single_request_result(transformers_model):
    from logitgate.integrations.generation import generate

    model = transformers_model
    date = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    rx = logitgate.compile(logitgate.Grammar.from_regex(date), model.tokenizer)
    cases = [(rx, "When did Apollo 11 land?"), (None, "Say hello in French."), (rx, "Pick a date in 1999."),
             (None, "Name three colors.")]
    ids = [model.chat_prompt([{"role": "user", "content": q}]) for _, q in cases]
    with Engine(model, max_batch=4) as eng:
        assert eng.capacity is None and eng.context_limit == model.model.config.max_position_embeddings
        outputs = [h.result(timeout=120) for h in
                   [eng.submit(i, c, SamplingParams(max_tokens=20, temperature=0.0)) for i, (c, _) in zip(ids, cases)]]
        assert eng.stats()["sequences_per_step"] > 2
    for i, (c, _), out in zip(ids, cases, outputs):
        if c is not None:
            assert out[1] == "stop" and re.fullmatch(date, out[0])
        res = generate(model, i, c, max_tokens=20, temperature=0.0, fast_forward=False)
        assert out == (res.text, {"eos": "stop", "length": "length"}[res.stop_reason])


class _Pin:
    """A custom recognizer: exactly four ASCII digits; ``fail_at`` digits in, byte_allowed raises."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    def initial(self):
        return 0

    def byte_allowed(self, n, b):
        if n == self.fail_at:
            raise ValueError(f"no digit {n + 1}")
        return 48 <= b <= 57 and n < 4

    def append(self, n, b):
        return n + 1

    def special_allowed(self, n, token):
        return token == "eos" and n == 4


def test_a_failing_custom_recognizer_ends_only_its_request(engine_factory, tok_spm, compiled):
    eng, _ = engine_factory()
    pin = logitgate.compile(logitgate.Grammar.from_recognizer(_Pin()), tok_spm)
    broken = logitgate.compile(logitgate.Grammar.from_recognizer(_Pin(fail_at=2)), tok_spm)
    good = [eng.submit(prompt(60 + k), pin, SamplingParams()) for k in range(3)]
    digits = eng.submit(prompt(70), compiled["digits"], SamplingParams())
    bad = eng.submit(prompt(71), broken, SamplingParams())
    for h in good:
        text, reason = h.result(timeout=30)
        assert reason == "stop" and re.fullmatch(r"[0-9]{4}", text), text
    assert digits.result(timeout=30)[1] == "stop"
    text, reason = bad.result(timeout=30)
    assert reason == "error" and "custom recognizer failed" in bad.error and "no digit 3" in bad.error, bad.error
    assert re.fullmatch(r"[0-9]{2}", text)  # the two digits it wrote before its recognizer failed
