"""The server under faults: bad requests of every kind (streamed or not, with auth on and off) get
their exact status and a complete OpenAI error while good streams go on; clients that vanish
mid-stream (or before a non-streamed answer) have their engine request cancelled and their slot and
cache cells freed; a request that fails inside the engine (its matcher, its mask or the model
raising) gets a complete error, and only it.

Everything runs through HTTP (uvicorn on 127.0.0.1) against the real ``Engine`` on the engine
tests' fake multi-sequence model (random logits, a few ms a step). A reduced load-and-fault round
reuses ``bench/bench_server_load.py`` (16 clients here; the benchmark runs 64 and 256 on the
embedded model, and so does the ``slow`` test at the end).
"""
from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import logitgate
import logitgate.server.engine as engine_mod
from logitgate.server import create_app
from logitgate.server.engine import Engine

from .test_server_api import _serve
from .test_server_engine import FakeModel, FakeSequences

KEY = "sk-faults"
BODY_LIMIT = 64 << 10
MAX_BATCH = 8
BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_server_load.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_server_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_server_load"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class PoisonSequences(FakeSequences):
    """Raises in ``decode`` for a sequence whose tokens hold the poison token, once it has generated
    three tokens (mid-generation), whatever else is in the batch."""

    def __init__(self, model: PoisonModel, n: int) -> None:
        super().__init__(model, n)
        self.prompt_len = [0] * n

    def decode(self, items):
        poison = self.model.poison  # type: ignore[attr-defined]
        for slot, pos, toks in items:
            if pos == 0:
                self.prompt_len[slot] = len(toks)
            elif poison in self.tokens[slot] and pos >= self.prompt_len[slot] + 3:
                raise RuntimeError(f"poisoned sequence {slot}")
        return super().decode(items)


class PoisonModel(FakeModel):
    def __init__(self, tok: logitgate.Tokenizer, **kw: Any) -> None:
        super().__init__(tok, **kw)
        self.poison = self.byte_ids[ord("~")]

    def sequences(self, n: int) -> FakeSequences:
        self.last = PoisonSequences(self, n)
        return self.last


class Served:
    def __init__(self, engine: Engine, open_url: str, keyed_url: str) -> None:
        self.engine = engine
        self.open = open_url
        self.keyed = keyed_url

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.open}/v1/stats", timeout=10).json()

    def settle(self, timeout: float = 10.0) -> dict[str, Any]:
        """Stats once nothing runs or waits (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.stats()
            if s["running"] == 0 and s["waiting"] == 0:
                return s
            assert time.monotonic() < deadline, f"requests still running: {s}"
            time.sleep(0.02)


@pytest.fixture(scope="module")
def served(tok_spm):
    """One engine (max_batch 8, 4 ms a step) behind two apps: no API key, and one (64 KiB bodies)."""
    engine = Engine(PoisonModel(tok_spm, delay=0.004), max_batch=MAX_BATCH)
    engine.start()
    started = [_serve(create_app(engine, max_body_bytes=BODY_LIMIT)),
               _serve(create_app(engine, api_key=KEY, max_body_bytes=BODY_LIMIT))]
    yield Served(engine, started[0][0], started[1][0])
    for _, server, thread in started:
        server.should_exit = True
        thread.join(timeout=10)
    engine.close()


def chat(content: str = "Hello", **kw: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": content}], **kw}


def read_sse(r: Any) -> tuple[list[dict[str, Any]], bool]:
    """The JSON events of a whole SSE response and whether it ended with ``[DONE]``."""
    events, done = [], False
    for line in r.iter_lines():
        if line.startswith("data: "):
            assert not done, "an event after [DONE]"
            if line == "data: [DONE]":
                done = True
            else:
                events.append(json.loads(line[6:]))
    return events, done


def assert_error(r: Any, status: int, code: str | None, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


class Background:
    """Good streams running in threads while a test does something else; ``check()`` asserts that
    each completed with a finish reason and ``[DONE]``."""

    def __init__(self, url: str, n: int, max_tokens: int = 60) -> None:
        self.results: list[Any] = [None] * n
        self.threads = [threading.Thread(target=self._one, args=(url, i, max_tokens)) for i in range(n)]
        for t in self.threads:
            t.start()

    def _one(self, url: str, i: int, max_tokens: int) -> None:
        body = chat(f"Background {i}", stream=True, max_tokens=max_tokens, ignore_eos=i % 2 == 0, seed=i,
                    **({"regex": "[0-9]{3}-[0-9]{4}"} if i % 2 else {}))
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
                self.results[i] = (r.status_code, *read_sse(r))
        except Exception as exc:  # noqa: BLE001 - reported by check()
            self.results[i] = exc

    def check(self) -> None:
        for t in self.threads:
            t.join(60)
        for res in self.results:
            assert isinstance(res, tuple), res
            status, events, done = res
            assert status == 200 and done, res
            finish = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
            assert finish in (["stop"], ["length"]) and not any("error" in e for e in events), events[-2:]


# -- bad requests ------------------------------------------------------------------------------------------
BAD: list[tuple[str, bytes | dict[str, Any], int, str, str | None]] = [
    ("malformed JSON", b'{"model": "fake-model", "messages": [', 400, "invalid_json", None),
    ("not UTF-8", b"\xff\xfe{}", 400, "invalid_json", None),
    ("not an object", b'"hello"', 400, "invalid_json", None),
    ("nested too deep", b'{"messages": ' + b"[" * 20000 + b"]" * 20000 + b"}", 400, "invalid_json", None),
    ("wrong type", chat(max_tokens="ten"), 400, "invalid_value", "max_tokens"),
    ("wrong nested type", {"model": "fake-model", "messages": [{"role": "user", "content": 5}]}, 400,
     "invalid_value", "messages[0].content"),
    ("unknown role", {"messages": [{"role": "robot", "content": "x"}]}, 400, "invalid_value", "messages[0].role"),
    ("missing field", {"model": "fake-model"}, 400, "missing_required_parameter", "messages"),
    ("unknown model", chat(model="gpt-99"), 404, "model_not_found", "model"),
    ("bad regex", chat(regex="([0-9]+"), 400, "invalid_regex", "regex"),
    ("bad schema", chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "nope"}}}}}), 400, "invalid_schema",
     "response_format.json_schema.schema"),
    ("bad lark", chat(lark='start: "a" (\n'), 400, "invalid_grammar", "lark"),
    ("bad gbnf", chat(gbnf='root ::= "a" ('), 400, "invalid_grammar", "gbnf"),
    ("state explosion", chat(regex="(a|b)*a(a|b){30}"), 400, "constraint_too_large", "regex"),
    ("repeat over the cap", chat(regex="a{5000}"), 400, "constraint_too_large", "regex"),
    ("schema too deep", chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema":
        json.loads('{"type": "array", "items": ' * 600 + "{}" + "}" * 600)}}), 400, "constraint_too_large",
     "response_format.json_schema.schema"),
    ("two constraints", chat(regex="a", gbnf='root ::= "a"'), 400, "too_many_constraints", None),
    ("n > 1", chat(n=3), 400, "unsupported_parameter", "n"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_bad_requests_get_their_exact_error_while_good_streams_go_on(served, stream):
    """Each bad request, streamed or not, gets its status and a complete error JSON naming its
    cause (and its parameter or position), before any event; meanwhile 6 good streams complete."""
    bg = Background(served.open, 6)
    url = f"{served.open}/v1/chat/completions"
    for name, body, status, code, param in BAD:
        if isinstance(body, dict):
            r = httpx.post(url, json={**body, "stream": stream}, timeout=30)
        else:
            r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=30)
        err = assert_error(r, status, code, param)
        if name == "bad regex":
            assert "offset" in err["message"], err
        if name in ("bad lark", "bad gbnf"):
            assert "line" in err["message"] or "column" in err["message"], err
        if code == "constraint_too_large":  # names the cap
            cap = {"state explosion": "max_dfa_states=", "repeat over the cap": "max_regex_repeat=",
                   "schema too deep": "max_schema_depth="}[name]
            assert cap in err["message"], err
    bg.check()
    assert served.settle()["running"] == 0


def test_oversized_bodies_are_413_declared_or_chunked(served):
    url = f"{served.open}/v1/chat/completions"
    big = chat("x" * (BODY_LIMIT + 1), stream=True)
    assert_error(httpx.post(url, json=big, timeout=30), 413, "request_too_large")

    def chunked():
        yield b'{"model": "fake-model", "stream": true, "messages": [{"role": "user", "content": "'
        for _ in range(BODY_LIMIT // 1024 + 8):
            yield b"y" * 1024
        yield b'"}]}'

    err = assert_error(httpx.post(url, content=chunked(), timeout=30), 413, "request_too_large")
    assert str(BODY_LIMIT) in err["message"]
    r = httpx.post(url, json=chat("fine", max_tokens=4), timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_auth_on_and_off(served):
    body = chat("Hi", max_tokens=5, stream=True)
    keyed = f"{served.keyed}/v1/chat/completions"
    for headers, message in (({}, "a valid API key is required"), ({"Authorization": "Bearer sk-nope"}, "incorrect"),
                             ({"Authorization": f"Basic {KEY}"}, "a valid API key")):
        err = assert_error(httpx.post(keyed, json=body, headers=headers, timeout=30), 401, "invalid_api_key")
        assert message in err["message"] and err["type"] == "authentication_error"
    r = httpx.post(keyed, content=b"{broken", headers={"Authorization": "Bearer bad"}, timeout=30)
    assert_error(r, 401, "invalid_api_key")  # the key is checked before the body is read
    with httpx.stream("POST", keyed, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as r:
        assert r.status_code == 200 and read_sse(r)[1]
    assert httpx.get(f"{served.keyed}/health", timeout=10).status_code == 200
    # auth off: no key needed, and any key is ignored
    for headers in ({}, {"Authorization": "Bearer whatever"}):
        with httpx.stream("POST", f"{served.open}/v1/chat/completions", json=body, headers=headers, timeout=30) as r:
            assert r.status_code == 200 and read_sse(r)[1]


# -- clients that go away ---------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_a_client_gone_mid_stream_frees_its_slot(served, route):
    """Read 3 events of a 3000-token stream and hang up: the engine cancels the request within
    a few steps, frees its slot and cache cells, and a concurrent stream is unaffected."""
    before = served.settle()
    bg = Background(served.open, 2)
    path, body = ("/v1/chat/completions", chat("Talk.")) if route == "chat" else \
        ("/v1/completions", {"model": "fake-model", "prompt": "Once upon a time"})
    body.update(stream=True, max_tokens=3000, ignore_eos=True)
    with httpx.stream("POST", f"{served.open}{path}", json=body, timeout=30) as r:
        assert r.status_code == 200
        lines = (line for line in r.iter_lines() if line.startswith("data: "))
        for _ in range(3):
            assert "[DONE]" not in next(lines)
    bg.check()
    after = served.settle()
    assert after["requests_cancelled"] - before["requests_cancelled"] == 1
    assert after["free_slots"] == MAX_BATCH and after["cached_tokens"] == 0
    assert all(not t for t in served.engine._seqs.tokens), "a slot still holds tokens"  # type: ignore[attr-defined]
    generated = after["tokens_generated"]
    time.sleep(0.2)
    assert served.stats()["tokens_generated"] == generated  # nothing generates any more
    assert generated - before["tokens_generated"] < 1000  # the 3000-token request was stopped early


def test_a_client_gone_before_a_non_streamed_answer_cancels_it(served):
    """Non-streamed: the disconnect is detected (``http.disconnect``) and cancels the request; it
    is not left to run to its max_tokens."""
    before = served.settle()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.open}/v1/chat/completions", json=chat("Talk.", max_tokens=3000, ignore_eos=True),
                   timeout=httpx.Timeout(30, read=0.3))
    after = served.settle(timeout=5)
    assert after["requests_cancelled"] - before["requests_cancelled"] == 1
    assert after["free_slots"] == MAX_BATCH and after["cached_tokens"] == 0
    assert after["tokens_generated"] - before["tokens_generated"] < 1000


# -- failures inside the engine -------------------------------------------------------------------------------
class FaultyMatcher(logitgate.Matcher):
    """Raises once it has accepted 3 tokens holding ``q`` (in accept_token) or ``z`` (computing
    the next mask)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.seen: dict[str, int] = {"q": 0, "z": 0}

    def accept_token(self, token_id: int) -> bool:
        data = self.compiled.tokenizer.tokens[token_id]
        for ch in "qz":
            self.seen[ch] += ch.encode() in data
        if self.seen["q"] >= 3:
            raise RuntimeError("the grammar state is corrupt (injected)")
        return super().accept_token(token_id)

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        if self.seen["z"] >= 3:
            raise ValueError("the mask cannot be computed (injected)")
        super().fill_next_token_bitmask(bitmask, index)


def _one_by_one(matchers: list[Any], bitmask: Any, indices: list[int]) -> None:
    for m, i in zip(matchers, indices):
        m.fill_next_token_bitmask(bitmask, i)


@pytest.mark.parametrize("fault", ["matcher", "mask", "model"])
def test_a_request_failing_inside_the_engine_gets_a_complete_error(served, monkeypatch, fault):
    """A request whose matcher raises, whose mask cannot be computed, or which the model fails on
    (mid-generation, in a batch) ends with an error event then ``[DONE]`` (a 500 JSON when not
    streamed); the others in the same batch complete, and the engine serves new requests."""
    monkeypatch.setattr(engine_mod, "Matcher", FaultyMatcher)
    monkeypatch.setattr(engine_mod, "fill_next_token_bitmasks", _one_by_one)
    body = {"matcher": chat("Go", regex="q{40}"), "mask": chat("Go", regex="z{40}"),
            "model": chat("Go ~", max_tokens=40, ignore_eos=True)}[fault]
    expected = {"matcher": "the grammar state is corrupt", "mask": "the mask cannot be computed",
                "model": "the model failed: RuntimeError: poisoned sequence"}[fault]
    before = served.settle()
    bg = Background(served.open, 4)
    with httpx.stream("POST", f"{served.open}/v1/chat/completions", json={**body, "stream": True},
                      timeout=30) as r:
        assert r.status_code == 200
        events, done = read_sse(r)
    assert done, "the stream did not end with [DONE]"
    assert "error" in events[-1] and expected in events[-1]["error"]["message"], events[-1]
    assert events[-1]["error"]["code"] == "generation_error"
    assert sum(len(c["delta"].get("content") or "") for e in events[:-1] for c in e.get("choices", [])) >= 2
    err = assert_error(httpx.post(f"{served.open}/v1/chat/completions", json=body, timeout=30), 500,
                       "generation_error")
    assert expected in err["message"]
    bg.check()
    after = served.settle()
    assert after["requests_failed"] - before["requests_failed"] == 2
    assert after["free_slots"] == MAX_BATCH and after["cached_tokens"] == 0
    r = httpx.post(f"{served.open}/v1/chat/completions", json=chat("Again", max_tokens=5), timeout=30)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_a_stream_that_breaks_in_the_http_layer_still_ends_properly(served, monkeypatch):
    """A bug while writing events (here: a chunk that cannot be built) gives an error event and
    ``[DONE]``, and the engine request is cancelled."""
    from logitgate.server import openai_api

    real = openai_api.chat_chunk
    calls = {"n": 0}

    def breaking(**kw: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyError("injected")
        return real(**kw)

    monkeypatch.setattr(openai_api, "chat_chunk", breaking)
    before = served.settle()
    with httpx.stream("POST", f"{served.open}/v1/chat/completions", timeout=30,
                      json=chat("Go", stream=True, max_tokens=2000, ignore_eos=True)) as r:
        events, done = read_sse(r)
    assert done and events[-1]["error"]["code"] == "internal_error" and "KeyError" in events[-1]["error"]["message"]
    after = served.settle()
    assert after["requests_cancelled"] - before["requests_cancelled"] == 1 and after["free_slots"] == MAX_BATCH


def test_health_tells_a_dead_engine(tok_spm):
    engine = Engine(FakeModel(tok_spm), max_batch=2)  # never started
    url, server, thread = _serve(create_app(engine))
    try:
        r = httpx.get(f"{url}/health", timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_down"
        engine.start()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        engine.close()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 503
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()


# -- load with faults (reduced) -----------------------------------------------------------------------------
def test_16_streams_with_faults_and_disconnects(served):
    """The benchmark's rounds, small: 16 concurrent streams (a quarter JSON Schema, a quarter
    regex), then 16 good streams among 24 bad requests (each must get its exact status) and 4
    clients that hang up mid-stream; /health answers throughout."""
    bench = _bench()
    server = bench.Server(served.keyed, "fake-model", KEY, max_body_bytes=BODY_LIMIT)
    r = bench.load_round(server, 16, max_tokens=16, timeout=60)
    assert r["errors"] == 0, r["first_error"]
    assert r["invalid"] == 0 and r["leak"] == 0 and r["tokens"] > 0
    assert r["health"] and r["health_failed"] == 0
    f = bench.fault_round(server, 16, max_tokens=16, disconnects=4, timeout=60)
    assert f["good_completed"] == f["good"] == 16, f["first_good_error"]
    assert f["faults_exact"] == f["faults"] == 24, f["wrong"]
    assert f["disconnects_started"] == 4 and f["cancelled"] >= 4
    assert f["leak"] == 0 and f["health_failed"] == 0
    print(f"\n16 streams: /health p99 {bench.pct(r['health'], .99) * 1e3:.1f} ms, "
          f"latency p99 {bench.pct(r['latency'], .99):.2f} s")


@pytest.mark.slow
def test_bench_server_load_64_and_256_on_the_embedded_model(embedded_gguf):
    """The whole benchmark against `logitgate serve` on the embedded model: 64 and 256 clients
    and the fault round; it exits 0 only with no error, no leak, every fault answered exactly and
    /health p99 within its budget."""
    pytest.importorskip("llama_cpp")
    import subprocess

    proc = subprocess.run([sys.executable, str(BENCH), "--clients", "64", "256"], capture_output=True, text=True,
                          timeout=1500, check=False)
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
