"""The OpenAI-compatible HTTP layer (``logitgate.server.app``), served by uvicorn on a free port and
driven by the real ``openai`` client (and httpx for raw requests).

The engine is a fake that follows ``logitgate.server.engine``'s contract: it "generates" a text
scripted in the prompt (``SAY<<text>>``), token by token over the SentencePiece tokenizer, under
the request's constraint: where the script leaves what the constraint allows, it takes the lowest
allowed token (EOS first when allowed), so constrained outputs are valid whatever the script says.
``SLOW`` in the prompt waits 50 ms per token, ``ERROR`` fails after two tokens, ``REFUSE`` and
``SHUTDOWN`` are refused at submission (as the engine refuses a prompt too long, or when closing).
The last section puts the real ``Engine`` behind the app: on the engine tests' fake
multi-sequence model, and on the embedded model (skipped where it is not installed).
"""
from __future__ import annotations

import asyncio
import codecs
import hashlib
import json
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

import uvicorn

import logitgate
from logitgate.server import create_app
from logitgate.server.engine import SHUTTING_DOWN, Delta, EngineFull, SamplingParams

API_KEY = "sk-test-key"


# -- a fake engine that follows the engine contract ---------------------------------------------------------
class FakeModel:
    """Greedy longest-match tokenization; a chat prompt is ``<role>content`` lines."""

    def __init__(self, tok: logitgate.Tokenizer) -> None:
        self.name = "fake-model"
        self.tokenizer = tok
        self.by_bytes: dict[bytes, int] = {}
        for i, t in enumerate(tok.tokens):
            if i not in tok.special_ids and t:
                self.by_bytes.setdefault(t, i)
        self.maxlen = max(len(t) for t in self.by_bytes)

    def longest(self, data: bytes, allowed: set[int] | None = None) -> int | None:
        for n in range(min(self.maxlen, len(data)), 0, -1):
            t = self.by_bytes.get(data[:n])
            if t is not None and (allowed is None or t in allowed):
                return t
        return None

    def encode(self, text: str) -> list[int]:
        data, out = text.encode(), []
        while data:
            t = self.longest(data)
            assert t is not None
            out.append(t)
            data = data[len(self.tokenizer.tokens[t]):]
        return out

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return self.encode("".join(f"<{m['role']}>{m['content']}\n" for m in messages))


class FakeHandle:
    def __init__(self, request_id: str, prompt_tokens: int) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.cancelled = threading.Event()
        self.deltas: queue.Queue[Delta] = queue.Queue()
        self._done = False
        self._text: list[str] = []
        self._final: Delta | None = None

    @property
    def finished(self) -> bool:
        return self._final is not None

    @property
    def finish_reason(self) -> str | None:
        return self._final.finish_reason if self._final else None

    @property
    def error(self) -> str | None:
        return self._final.error if self._final else None

    def _push(self, d: Delta) -> None:
        if d.finish_reason is not None:
            self._final = d
        self.deltas.put(d)

    def get(self, timeout: float | None = None) -> Delta:
        d = self.deltas.get(timeout=timeout)
        self._text.append(d.text)
        if d.finish_reason is not None:
            self._done = True
        return d

    def __aiter__(self) -> FakeHandle:
        return self

    async def __anext__(self) -> Delta:
        if self._done:
            raise StopAsyncIteration
        return await asyncio.to_thread(self.get)

    def cancel(self) -> None:
        if not self.finished:
            self.cancelled.set()

    def result(self) -> tuple[str, str | None]:
        while not self._done:
            self.get()
        return "".join(self._text), self.finish_reason


@dataclass
class Submitted:
    prompt: str
    constraint: Any
    params: Any
    handle: FakeHandle


@dataclass
class FakeEngine:
    model: FakeModel
    model_name: str = "fake-model"
    full: bool = False
    requests: list[Submitted] = field(default_factory=list)

    @property
    def tokenizer(self) -> logitgate.Tokenizer:
        return self.model.tokenizer

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"requests": len(self.requests)}

    def submit(self, prompt_ids: list[int], constraint: Any, params: Any) -> FakeHandle:
        if self.full:
            raise EngineFull("queue full (fake)")
        assert constraint is None or isinstance(constraint, logitgate.CompiledGrammar)
        assert isinstance(params, SamplingParams)
        prompt = self.tokenizer.decode_bytes(prompt_ids).decode("utf-8", errors="replace")
        handle = FakeHandle(f"req-{len(self.requests)}", len(prompt_ids))
        self.requests.append(Submitted(prompt, constraint, params, handle))
        if "REFUSE" in prompt or "SHUTDOWN" in prompt:  # the engine ends a request it cannot take at once
            handle._push(Delta("", [], "error", "the prompt is too long" if "REFUSE" in prompt else SHUTTING_DOWN))
            return handle
        m = re.findall(r"SAY<<(.*?)>>", prompt, re.DOTALL)
        target = m[-1] if m else "Hello from the fake engine."
        threading.Thread(target=self._generate, args=(handle, target, constraint, params, prompt), daemon=True).start()
        return handle

    def _generate(self, h: FakeHandle, target: str, constraint: Any, params: Any, prompt: str) -> None:
        tok, model = self.tokenizer, self.model
        eos = tok.eos_token_ids[0]
        matcher = logitgate.Matcher(constraint) if constraint is not None else None
        goal, out = target.encode(), b""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        stops = list(params.stop)
        for step in range(params.max_tokens):
            if h.cancelled.is_set():
                h._push(Delta("", [], "cancelled"))
                return
            if "ERROR" in prompt and step == 2:  # mid-generation (a real engine is slower than the HTTP layer)
                time.sleep(0.05)
                h._push(Delta("", [], "error", "the fake engine failed"))
                return
            allowed = set(matcher.allowed_token_ids().tolist()) if matcher is not None else None
            rest = goal[len(out):] if goal.startswith(out) else b""
            t = model.longest(rest, allowed) if rest else None
            if t is None:
                if allowed is None or eos in allowed:
                    t = eos
                else:
                    t = min(allowed - {eos})
            if matcher is not None:
                assert matcher.accept_token(t)
            if t == eos:
                h._push(Delta(pending + decoder.decode(b"", final=True), [t], "stop"))
                return
            h.completion_tokens += 1
            out += tok.tokens[t]
            pending += decoder.decode(tok.tokens[t])
            cut = [pending.find(s) for s in stops if s in pending]
            if cut:
                h._push(Delta(pending[:min(cut)], [t], "stop"))
                return
            hold = max([k for s in stops for k in range(1, len(s)) if pending.endswith(s[:k])], default=0)
            h._push(Delta(pending[:len(pending) - hold], [t]))
            pending = pending[len(pending) - hold:]
            if "SLOW" in prompt:
                time.sleep(0.05)
        h._push(Delta(pending, [], "length"))


# -- servers ---------------------------------------------------------------------------------------------
@dataclass
class Served:
    url: str
    engine: FakeEngine
    controller_model: Any = None


def _serve(app: Any) -> tuple[str, uvicorn.Server, threading.Thread]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}", server, thread


@pytest.fixture(scope="session")
def servers(tok_spm):
    """Two apps: ``open`` (no key, a controller model, small body limits) and ``keyed`` (an API key,
    no controller model)."""
    from tests.test_generation import ScriptedModel

    started = []
    engine = FakeEngine(FakeModel(tok_spm))
    controller_model = ScriptedModel(tok_spm, b"Answer: yes", strict=False)
    app = create_app(engine, controller_model=controller_model, max_module_bytes=1 << 20, max_body_bytes=256 << 10,
                     recognizers={"pin": Pin()})
    url, server, thread = _serve(app)
    started.append((server, thread))
    keyed_engine = FakeEngine(FakeModel(tok_spm))
    keyed_url, server2, thread2 = _serve(create_app(keyed_engine, api_key=API_KEY))
    started.append((server2, thread2))
    yield {"open": Served(url, engine, controller_model), "keyed": Served(keyed_url, keyed_engine)}
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def srv(servers) -> Served:
    return servers["open"]


@pytest.fixture(scope="session")
def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=30)


def say(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Please answer. SAY<<{text}>>"}]


def last(srv: Served) -> Submitted:
    return srv.engine.requests[-1]


# -- models, chat, completions ---------------------------------------------------------------------------------
def test_models_list_the_engine_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    assert client.models.retrieve("fake-model").owned_by == "logitgate"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_chat_completion(client, srv):
    r = client.chat.completions.create(model="fake-model", messages=say("Hello there!"), temperature=0.3, top_p=0.9,
                                       seed=7, max_completion_tokens=50, user="someone", presence_penalty=0.0)
    choice = r.choices[0]
    assert choice.message.content == "Hello there!" and choice.message.role == "assistant"
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == "fake-model"
    assert abs(r.created - time.time()) < 60
    sub = last(srv)
    assert sub.constraint is None
    assert (sub.params.temperature, sub.params.top_p, sub.params.seed, sub.params.max_tokens) == (0.3, 0.9, 7, 50)
    assert sub.prompt.startswith("<user>Please answer.")
    assert r.usage.prompt_tokens == sub.handle.prompt_tokens == len(srv.engine.model.encode(sub.prompt))
    assert r.usage.completion_tokens == sub.handle.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_text_parts_and_roles(client, srv):
    msgs = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Part one, "}, {"type": "text", "text": "SAY<<ok>>"}]}]
    r = client.chat.completions.create(model="fake-model", messages=msgs)
    assert r.choices[0].message.content == "ok"
    assert last(srv).prompt == "<system>Be brief.\n<user>Part one, SAY<<ok>>\n"


def test_chat_stream_with_usage(client, srv):
    stream = client.chat.completions.create(model="fake-model", messages=say("Streaming works fine."), stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Streaming works fine."
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == last(srv).handle.completion_tokens
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 2  # really streamed


def test_raw_stream_is_sse_ending_with_done(srv):
    body = {"model": "fake-model", "messages": say("abc"), "stream": True}
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events[:-1])
    assert "usage" not in json.loads(events[0][6:])  # no include_usage: no usage field


def test_completions(client, srv):
    r = client.completions.create(model="fake-model", prompt="Once upon a time SAY<< there was a cat.>>", max_tokens=40)
    assert r.choices[0].text == " there was a cat." and r.choices[0].finish_reason == "stop"
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert last(srv).prompt == "Once upon a time SAY<< there was a cat.>>"
    assert r.usage.prompt_tokens == last(srv).handle.prompt_tokens
    ids = srv.engine.model.encode("SAY<<from ids>>")
    r = client.completions.create(model="fake-model", prompt=ids)
    assert r.choices[0].text == "from ids" and last(srv).handle.prompt_tokens == len(ids)


def test_completions_stream(client, srv):
    chunks = list(client.completions.create(model="fake-model", prompt="SAY<<one two three>>", stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens == last(srv).handle.prompt_tokens + last(srv).handle.completion_tokens


def test_max_tokens_gives_length(client, srv):
    r = client.chat.completions.create(model="fake-model", messages=say("a long long long answer"), max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    assert last(srv).params.max_tokens == 3
    assert "a long long long answer".startswith(r.choices[0].message.content)


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences(client, srv, stream):
    kw = {"model": "fake-model", "messages": say("alpha beta gamma delta"), "stop": ["gam", "zzz"]}
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw))
    else:
        text = client.chat.completions.create(**kw).choices[0].message.content
    assert text == "alpha beta " and last(srv).params.stop == ["gam", "zzz"]
    r = client.completions.create(model="fake-model", prompt="SAY<<x. y>>", stop=".")
    assert r.choices[0].text == "x" and last(srv).params.stop == ["."]


# -- structured outputs ----------------------------------------------------------------------------------------
PET = {"type": "object",
       "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 9},
                      "name": {"type": "string", "maxLength": 12}},
       "required": ["kind", "age"], "additionalProperties": False}


@pytest.mark.parametrize("script", ['{"kind":"dog","age":3,"name":"Rex"}', "I'd rather not say."])
def test_json_schema_strict(client, srv, script):
    rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
    r = client.chat.completions.create(model="fake-model", messages=say(script), response_format=rf)
    doc = json.loads(r.choices[0].message.content)
    jsonschema.validate(doc, PET)
    if script.startswith("{"):
        assert doc == json.loads(script)
    assert isinstance(last(srv).constraint, logitgate.CompiledGrammar)


def test_json_schema_stream(client):
    rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
    chunks = client.chat.completions.create(model="fake-model", messages=say('{"kind":"cat","age":"old"}'),
                                            response_format=rf, stream=True)
    doc = json.loads("".join(c.choices[0].delta.content or "" for c in chunks))
    jsonschema.validate(doc, PET)
    assert doc["kind"] == "cat"


def test_json_object_and_text(client, srv):
    r = client.chat.completions.create(model="fake-model", messages=say('{"a":[1,2],"b":null}'),
                                       response_format={"type": "json_object"})
    assert json.loads(r.choices[0].message.content) == {"a": [1, 2], "b": None}
    assert last(srv).constraint is not None
    r = client.chat.completions.create(model="fake-model", messages=say("[1,2]"),
                                       response_format={"type": "json_object"})
    assert r.choices[0].message.content.startswith("{")  # JSON mode: an object, the array is refused
    r = client.chat.completions.create(model="fake-model", messages=say("plain"), response_format={"type": "text"})
    assert r.choices[0].message.content == "plain" and last(srv).constraint is None


@pytest.mark.parametrize("script", ["555-1234", "call me maybe"])
def test_regex_extra(client, script):
    r = client.chat.completions.create(model="fake-model", messages=say(script),
                                       extra_body={"regex": r"[0-9]{3}-[0-9]{4}"})
    text = r.choices[0].message.content
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", text)
    if script[0].isdigit():
        assert text == script
    r = client.completions.create(model="fake-model", prompt=f"SAY<<{script}>>", extra_body={"regex": r"\d{3}"})
    assert re.fullmatch(r"\d{3}", r.choices[0].text)


LARK = r"""
start: expr
expr: NUMBER ("+" NUMBER)*
NUMBER: /[0-9]+/
"""


@pytest.mark.parametrize("script", ["12+34+5", "twelve"])
def test_lark_extra(client, script):
    import lark

    r = client.chat.completions.create(model="fake-model", messages=say(script), extra_body={"lark": LARK})
    text = r.choices[0].message.content
    lark.Lark(LARK).parse(text)
    if script[0].isdigit():
        assert text == script


def test_gbnf_extra(client):
    gbnf = 'root ::= answer "!"\nanswer ::= "yes" | "no"\n'
    for script, want in (("no!", "no!"), ("maybe", None)):
        chunks = client.chat.completions.create(model="fake-model", messages=say(script), extra_body={"gbnf": gbnf},
                                                stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert re.fullmatch(r"(yes|no)!", text) and (want is None or text == want)


class Pin:
    """A custom recognizer the test server registers as "pin": exactly four ASCII digits."""

    def initial(self):
        return 0

    def byte_allowed(self, n, b):
        return 48 <= b <= 57 and n < 4

    def append(self, n, b):
        return n + 1

    def special_allowed(self, n, token):
        return token == "eos" and n == 4


def test_recognizer_extra_names_a_registered_recognizer(client, srv):
    for script, want in (("2468", "2468"), ("12ab", None)):
        r = client.chat.completions.create(model="fake-model", messages=say(script), extra_body={"recognizer": "pin"})
        text = r.choices[0].message.content
        assert re.fullmatch(r"[0-9]{4}", text) and (want is None or text == want), text
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="fake-model", messages=say("1"), extra_body={"recognizer": "luhn"})
    err = e.value.body
    assert err["code"] == "unknown_recognizer" and err["param"] == "recognizer" and "'pin'" in err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="fake-model", messages=say("1"),
                                       extra_body={"recognizer": "pin", "regex": "[0-9]"})
    assert e.value.body["code"] == "too_many_constraints"
    with pytest.raises(TypeError, match=r"recognizers\['x'\]: object is not a recognizer"):
        create_app(srv.engine, recognizers={"x": object()})


# -- tool calling ---------------------------------------------------------------------------------------------
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                            "unit": {"$ref": "#/$defs/unit"}},
           "required": ["city", "unit"], "additionalProperties": False,
           "$defs": {"unit": {"enum": ["C", "F"]}}}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": WEATHER, "strict": True}},
    {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": ADD}},
]


def test_tool_choice_required(client, srv):
    r = client.chat.completions.create(model="fake-model", messages=say('{"name":"add","arguments":{"a":2,"b":40}}'),
                                       tools=TOOLS, tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2, "b": 40}
    assert '"get_weather"' in last(srv).prompt and "<system>You can call these functions" in last(srv).prompt


def test_tool_choice_named_forces_that_tool(client, srv):
    r = client.chat.completions.create(model="fake-model", messages=say('{"name":"add","arguments":{"a":1,"b":1}}'),
                                       tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    r = client.chat.completions.create(
        model="fake-model", messages=say('{"name":"get_weather","arguments":{"city":"Rome","unit":"F"}}'),
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Rome", "unit": "F"}


def test_tool_call_stream(client):
    chunks = list(client.chat.completions.create(
        model="fake-model", messages=say('{"name":"get_weather","arguments":{"city":"Paris","unit":"C"}}'),
        tools=TOOLS, tool_choice="required", stream=True))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == "get_weather"
    assert len(deltas) > 2  # the arguments came in pieces
    args = "".join(d.function.arguments or "" for d in deltas)
    assert json.loads(args) == {"city": "Paris", "unit": "C"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)


@pytest.mark.parametrize("choice", ["none", "auto", None])
def test_tool_choice_none_and_auto_answer_in_text(client, srv, choice):
    kw = {} if choice is None else {"tool_choice": choice}
    r = client.chat.completions.create(model="fake-model", messages=say("Sunny."), tools=TOOLS, **kw)
    assert r.choices[0].message.content == "Sunny." and r.choices[0].finish_reason == "stop"
    assert last(srv).constraint is None and "You can call" not in last(srv).prompt


# -- errors ------------------------------------------------------------------------------------------------------
def bad_request(client, **kw) -> openai.BadRequestError:
    kw.setdefault("model", "fake-model")
    kw.setdefault("messages", say("x"))
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**kw)
    assert info.value.status_code == 400
    return info.value


def test_bad_schema_names_its_pointer(client):
    schema = {"type": "object", "properties": {"age": {"type": "integr"}}}
    err = bad_request(client, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert "/properties/age/type" in err.message and err.code == "invalid_schema"
    assert err.param == "response_format.json_schema.schema"
    # strict: a construct that cannot be enforced exactly is named; not strict, it compiles
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}}}
    err = bad_request(client, response_format={"type": "json_schema",
                                               "json_schema": {"name": "x", "schema": schema, "strict": True}})
    assert "/properties/a/pattern" in err.message and "offset 0" in err.message
    client.chat.completions.create(model="fake-model", messages=say("{}"), response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": False}})


def test_bad_tool_schema_names_the_tool(client):
    tools = [TOOLS[0], {"type": "function", "function": {
        "name": "bad", "parameters": {"type": "object", "properties": {"b": {"type": "nope"}}}}}]
    err = bad_request(client, tools=tools, tool_choice="required")
    assert "tools[1].function.parameters at /properties/b/type" in err.message and err.param == "tools[1].function.parameters"
    err = bad_request(client, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "missing"}})
    assert "'missing'" in err.message and err.param == "tool_choice"
    err = bad_request(client, tools=TOOLS + [TOOLS[1]], tool_choice="required")
    assert "two tools are named 'add'" in err.message
    err = bad_request(client, tool_choice="required")
    assert "at least one tool" in err.message


def test_bad_regex_and_grammars_name_where(client):
    err = bad_request(client, extra_body={"regex": "ab(c"})
    assert "offset 2" in err.message and err.param == "regex" and err.code == "invalid_regex"
    err = bad_request(client, extra_body={"lark": 'start: "a"\nfoo: : bar\n'})
    assert "line 2" in err.message and err.param == "lark" and err.code == "invalid_grammar"
    err = bad_request(client, extra_body={"lark": 'start: s\n%import .secret.start -> s\n'})
    assert "relative %import (line 2)" in err.message  # no reading the server's files
    err = bad_request(client, extra_body={"gbnf": 'root ::= "a" |\nx ::= [\n'})
    assert "line 2" in err.message and err.param == "gbnf"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="fake-model", prompt="p", extra_body={"regex": "(?<=a)b"})
    assert "offset" in info.value.message


def test_wrong_types_name_the_field(client):
    err = bad_request(client, max_tokens="lots")
    assert err.param == "max_tokens" and "max_tokens" in err.message
    err = bad_request(client, messages="hello")
    assert err.param == "messages"
    err = bad_request(client, messages=[{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])
    assert err.param == "messages[1].role"
    err = bad_request(client, temperature=5)
    assert err.param == "temperature"
    err = bad_request(client, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    assert err.param == "messages[0].content[0]" and "text content parts" in err.message
    err = bad_request(client, response_format={"type": "json_schema"})
    assert err.param == "response_format.json_schema"
    err = bad_request(client, stop=["a", ""])
    assert err.param == "stop"


def test_refused_options(client):
    err = bad_request(client, n=2)
    assert err.param == "n" and "n=1" in err.message
    err = bad_request(client, response_format={"type": "json_object"}, extra_body={"regex": "a"})
    assert err.code == "too_many_constraints" and "response_format" in err.message and "regex" in err.message
    err = bad_request(client, extra_body={"regex": "a", "lark": 'start: "a"'})
    assert err.code == "too_many_constraints"
    err = bad_request(client, tools=TOOLS, tool_choice="required", extra_body={"regex": "a"})
    assert err.code == "too_many_constraints"
    err = bad_request(client, logprobs=True)
    assert err.param == "logprobs"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="fake-model", prompt=["a", "b"])
    assert "one prompt per request" in info.value.message
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="fake-model", prompt="a", echo=True)


def test_unknown_model_and_route(client, srv):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-5", messages=say("x"))
    assert info.value.code == "model_not_found" and "fake-model" in info.value.message
    r = httpx.get(f"{srv.url}/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(f"{srv.url}/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_malformed_bodies(srv):
    url = f"{srv.url}/v1/chat/completions"
    r = httpx.post(url, content=b'{"model": "fake-model", "messages": [', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(url, content=b"[1, 2]")
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    r = httpx.post(url, content=b"\xff\xfe")
    assert r.status_code == 400
    r = httpx.post(url, json={"model": "fake-model"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    big = {"model": "fake-model", "messages": say("x" * (300 << 10))}
    r = httpx.post(url, json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: counted as it comes
        yield b'{"model": "fake-model", "messages": [{"role": "user", "content": "'
        for _ in range(300):
            yield b"x" * 1024
        yield b'"}]}'

    r = httpx.post(url, content=chunked())
    assert r.status_code == 413
    # the server is still fine
    assert httpx.get(f"{srv.url}/v1/models").status_code == 200


def test_engine_full_and_engine_error(client, srv):
    srv.engine.full = True
    try:
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="fake-model", messages=say("x"))
        assert info.value.code == "engine_full"
    finally:
        srv.engine.full = False
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="fake-model", messages=say("ERROR and a longer text after it"))
    assert "the fake engine failed" in info.value.message
    with pytest.raises(openai.APIError) as info:
        list(client.chat.completions.create(model="fake-model", messages=say("ERROR please, a longer text"), stream=True))
    assert "the fake engine failed" in str(info.value.message)
    # refused by the engine at submission: a 400 (503 when it shuts down), before any stream starts
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="fake-model", messages=say("REFUSE"), stream=stream)
        assert "the prompt is too long" in info.value.message
    with pytest.raises(openai.InternalServerError) as info:
        client.completions.create(model="fake-model", prompt="SHUTDOWN")
    assert info.value.status_code == 503 and info.value.code == "shutting_down"


# -- auth ----------------------------------------------------------------------------------------------------
def test_api_key(servers):
    keyed = servers["keyed"]
    good = openai.OpenAI(base_url=f"{keyed.url}/v1", api_key=API_KEY, max_retries=0)
    assert good.chat.completions.create(model="fake-model", messages=say("in")).choices[0].message.content == "in"
    bad = openai.OpenAI(base_url=f"{keyed.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model="fake-model", messages=say("in"))
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    r = httpx.post(f"{keyed.url}/v1/chat/completions", content=b"{broken")  # auth comes before the body
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{keyed.url}/v1/nothing").status_code == 401
    assert httpx.get(f"{keyed.url}/health").status_code == 200  # not under /v1
    assert len(keyed.engine.requests) == 1


# -- disconnects -------------------------------------------------------------------------------------------
def _wait_cancelled(sub: Submitted, timeout: float = 10.0) -> bool:
    return sub.handle.cancelled.wait(timeout)


def test_disconnect_mid_stream_cancels(srv):
    body = {"model": "fake-model", "messages": say("SLOW " + "word " * 200), "stream": True}
    n = len(srv.engine.requests)
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: ") for line in got)
    sub = srv.engine.requests[n]
    assert _wait_cancelled(sub), "the engine never saw cancel()"
    assert sub.handle.completion_tokens < 150


def test_disconnect_while_waiting_cancels(srv):
    body = {"model": "fake-model", "messages": say("SLOW " + "word " * 200)}
    n = len(srv.engine.requests)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=httpx.Timeout(30, read=0.5))
    assert _wait_cancelled(srv.engine.requests[n])


def test_a_finished_request_is_not_cancelled(client, srv):
    client.chat.completions.create(model="fake-model", messages=say("done"))
    list(client.chat.completions.create(model="fake-model", messages=say("done"), stream=True))
    time.sleep(0.1)
    assert not srv.engine.requests[-1].handle.cancelled.is_set()
    assert not srv.engine.requests[-2].handle.cancelled.is_set()


# -- AICI controllers ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def yesno_wasm(tmp_path_factory) -> bytes:
    from logitgate.controllers import wasm

    pytest.importorskip("wasmtime")
    try:
        path = wasm.build_c([wasm.C_SOURCES / "yesno.c"], tmp_path_factory.mktemp("wasm") / "yesno.wasm")
    except wasm.WasmBuildError as exc:
        pytest.skip(str(exc))
    return path.read_bytes()


@pytest.fixture(scope="session")
def uploaded(srv, yesno_wasm) -> str:
    r = httpx.post(f"{srv.url}/v1/controllers", content=yesno_wasm, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["module_id"]


def run_events(url: str, body: dict[str, Any]) -> list[Any]:
    with httpx.stream("POST", f"{url}/v1/run", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        raw = r.read().decode()
    events = [e[len("data: "):] for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_upload_and_tags(srv, yesno_wasm, uploaded):
    assert uploaded == hashlib.sha256(yesno_wasm).hexdigest()
    r = httpx.post(f"{srv.url}/v1/controllers", content=yesno_wasm)  # again: the same id
    assert r.json()["module_id"] == uploaded and r.json()["wasm_size"] == len(yesno_wasm)
    assert isinstance(r.json()["time"], int)
    r = httpx.post(f"{srv.url}/v1/controllers/tags", json={"module_id": uploaded, "tags": ["yesno-latest", "yn"]})
    assert r.status_code == 200 and [t["tag"] for t in r.json()["tags"]] == ["yesno-latest", "yn"]
    listed = httpx.get(f"{srv.url}/v1/controllers/tags").json()["tags"]
    by_tag = {t["tag"]: t for t in listed}
    assert by_tag["yesno-latest"]["module_id"] == uploaded and by_tag["yn"]["wasm_size"] == len(yesno_wasm)
    r = httpx.post(f"{srv.url}/v1/controllers/tags", json={"module_id": "0" * 64, "tags": ["x"]})
    assert r.status_code == 404
    r = httpx.post(f"{srv.url}/v1/controllers/tags", json={"module_id": uploaded, "tags": ["bad tag!"]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tags[0]"


def test_bad_uploads_are_refused(srv):
    wasmtime = pytest.importorskip("wasmtime")
    r = httpx.post(f"{srv.url}/v1/controllers", content=b"definitely not wasm")
    assert r.status_code == 400 and "not a WebAssembly binary" in r.json()["error"]["message"]
    wasi = wasmtime.wat2wasm('(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) '
                             '(result i32))) (memory (export "memory") 1))')
    r = httpx.post(f"{srv.url}/v1/controllers", content=bytes(wasi))
    assert r.status_code == 400 and "wasi_snapshot_preview1.fd_write" in r.json()["error"]["message"]
    r = httpx.post(f"{srv.url}/v1/controllers", content=b"\0asm" + b"\0" * (1 << 20))
    assert r.status_code == 413
    r = httpx.post(f"{srv.url}/v1/controllers", content=b"")
    assert r.status_code == 400


def test_run_a_controller(srv, uploaded):
    httpx.post(f"{srv.url}/v1/controllers/tags", json={"module_id": uploaded, "tags": ["yesno"]})
    events = run_events(srv.url, {"controller": "yesno", "controller_arg": "Answer:\n (yes|no)",
                                  "prompt": "Is the sky blue?", "max_tokens": 20})
    first, runs = events[0], events[1:]
    assert first["object"] == "initial-run" and first["id"].startswith("run-") and first["model"] == "scripted"
    assert runs and all(e["object"] == "run" and "usage" in e for e in runs)
    forks = [f for e in runs for f in e["forks"]]
    assert {f["index"] for f in forks} == {0}
    assert "".join(f["text"] for f in forks) == "Answer: yes"
    assert "".join(f["logs"] for f in forks) == "answer: yes\n"
    final = runs[-1]["forks"][0]
    assert final["finish_reason"] == "aici-stop" and final["error"] == ""
    assert final["storage"] == [{"WriteVar": {"name": "answer", "value": b" yes".hex(), "op": "Set",
                                              "when_version_is": None}}]
    usage = runs[-1]["usage"]
    assert usage["sampled_tokens"] > 0 and usage["cost"] == 2 * usage["sampled_tokens"] + usage["ff_tokens"]
    # by module id, twice at once: the runs take turns on the one controller model
    results: list[list[Any]] = []
    body = {"controller": uploaded, "controller_arg": "Answer:\n (yes|no)", "prompt": "Q"}
    threads = [threading.Thread(target=lambda: results.append(run_events(srv.url, body))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    for evs in results:
        assert "".join(f["text"] for e in evs[1:] for f in e["forks"]) == "Answer: yes"


def test_run_errors(srv, servers, uploaded):
    # an object argument is passed as its JSON text (yesno wants a newline in it, so it fails)
    events = run_events(srv.url, {"controller": uploaded, "controller_arg": {"q": "no newline"}, "prompt": "p"})
    final = events[-1]["forks"][0]
    assert final["finish_reason"] == "fail" and final["error"]
    assert "needs a newline" in "".join(f["logs"] for e in events[1:] for f in e["forks"])
    r = httpx.post(f"{srv.url}/v1/run", json={"controller": "no-such-tag"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "controller_not_found"
    r = httpx.post(f"{srv.url}/v1/run", json={"controller": uploaded, "max_tokens": "many"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    keyed = servers["keyed"]
    r = httpx.post(f"{keyed.url}/v1/run", json={"controller": uploaded},
                   headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 503 and "controller model" in r.json()["error"]["message"]


# -- the real engine behind the HTTP layer ---------------------------------------------------------------------
@pytest.fixture(scope="module", params=["engine-fake-model", "embedded"])
def real(request, tok_spm):
    """The real ``Engine`` behind the app: on the engine tests' fake multi-sequence model (random
    logits, 5 ms a step), and on the embedded model through llama.cpp (with a second instance for
    ``/v1/run``)."""
    from logitgate.server.engine import Engine

    controller_model = None
    if request.param == "embedded":
        embedded_gguf = request.getfixturevalue("embedded_gguf")
        pytest.importorskip("llama_cpp")
        from logitgate.integrations.llama_cpp import LlamaCppModel

        model = LlamaCppModel.from_path(embedded_gguf)
        controller_model = LlamaCppModel.from_path(embedded_gguf)
    else:
        from tests.test_server_engine import FakeModel as MultiSequenceModel

        model = MultiSequenceModel(tok_spm, delay=0.005)
    engine = Engine(model, max_batch=4)
    engine.start()
    url, server, thread = _serve(create_app(engine, controller_model=controller_model))
    yield Served(url, engine, controller_model)
    server.should_exit = True
    thread.join(timeout=10)
    engine.close()


@pytest.fixture(scope="module")
def real_client(real) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{real.url}/v1", api_key="unused", max_retries=0, timeout=300)


def test_real_engine_structured_outputs(real, real_client):
    name = real.engine.model_name
    assert [m.id for m in real_client.models.list().data] == [name]
    messages = [{"role": "user", "content": "A pet as JSON."}]
    rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
    r = real_client.chat.completions.create(model=name, messages=messages, response_format=rf, max_tokens=60,
                                            temperature=0)
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), PET)
    assert r.usage.prompt_tokens == len(real.engine.model.chat_prompt(messages)) and r.usage.completion_tokens > 0
    chunks = list(real_client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "When did Apollo 11 land?"}], stream=True, max_tokens=20,
        extra_body={"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}, stream_options={"include_usage": True}))
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "".join(c.choices[0].delta.content or ""
                                                                for c in chunks if c.choices))
    assert chunks[-1].usage.completion_tokens > 0
    r = real_client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Weather in Rome?"}],
                                            tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0)
    (call,) = r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), {"get_weather": WEATHER, "add": ADD}[call.function.name])
    r = real_client.completions.create(model=name, prompt="Numbers:", max_tokens=8, extra_body={"lark": LARK})
    if r.choices[0].finish_reason == "stop":
        import lark

        lark.Lark(LARK).parse(r.choices[0].text)


def test_real_engine_concurrent_requests(real, real_client):
    results: list[str] = []
    errors: list[Exception] = []

    def ask(i: int) -> None:
        try:
            r = real_client.chat.completions.create(
                model=real.engine.model_name, messages=[{"role": "user", "content": f"Person number {i} as JSON."}],
                response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PET, "strict": True}},
                max_tokens=60, temperature=0.8, seed=i - 4)  # negative seeds too
            results.append(r.choices[0].message.content)
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors and len(results) == 8, errors
    for text in results:
        jsonschema.validate(json.loads(text), PET)


def test_real_engine_refusals_and_cancel(real, real_client):
    name = real.engine.model_name
    with pytest.raises(openai.BadRequestError) as info:  # longer than the context: the engine refuses it
        real_client.chat.completions.create(model=name, messages=[{"role": "user", "content": "word " * 9000}])
    assert "tokens" in info.value.message
    before = real.engine.stats()["tokens_generated"]
    body = {"model": name, "messages": [{"role": "user", "content": "Write."}], "stream": True,
            "max_tokens": 1000, "regex": "[a-z ]{1000}"}
    with httpx.stream("POST", f"{real.url}/v1/chat/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(8):
            next(lines)
    deadline = time.monotonic() + 10
    while real.engine.stats()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert real.engine.stats()["running"] == 0
    time.sleep(0.1)
    assert real.engine.stats()["tokens_generated"] - before < 500  # stopped well before its 1000 tokens


def _upload_c_controllers(real, *names: str) -> list[str]:
    """Build ``wasm_src/NAME.c`` for each name and upload it to the real server; the module ids
    (skips where the real engine has no controller model, or no C compiler or wasmtime is there)."""
    if real.controller_model is None:
        pytest.skip("the engine's fake model cannot run controllers")
    pytest.importorskip("wasmtime")
    import tempfile

    from logitgate.controllers import wasm

    with tempfile.TemporaryDirectory() as d:
        try:
            modules = [wasm.build_c([wasm.C_SOURCES / f"{n}.c"], f"{d}/{n}.wasm").read_bytes() for n in names]
        except wasm.WasmBuildError as exc:
            pytest.skip(str(exc))
    return [httpx.post(f"{real.url}/v1/controllers", content=data).json()["module_id"] for data in modules]


def test_real_controller_run(real):
    (module_id,) = _upload_c_controllers(real, "yesno")
    events = run_events(real.url, {"controller": module_id, "controller_arg": "Answer:\n (yes|no)",
                                   "prompt": "Is water wet?", "max_tokens": 10})
    text = "".join(f["text"] for e in events[1:] for f in e["forks"])
    assert re.fullmatch(r"Answer: (yes|no)", text), text
    assert events[-1]["forks"][0]["finish_reason"] == "aici-stop"


def test_chat_completion_written_by_a_controller(real, real_client):
    """The `controller` extra field: an uploaded controller writes the chat answer, each of its
    sequences a choice, with logs and variables in the `controller` field."""
    ids = _upload_c_controllers(real, "yesno", "forks")
    name = real.engine.model_name
    messages = [{"role": "user", "content": "Is water wet?"}]
    r = real_client.chat.completions.create(model=name, messages=messages, max_tokens=10,
                                            extra_body={"controller": ids[0], "controller_arg": "Answer:\n (yes|no)"})
    (choice,) = r.choices
    assert re.fullmatch(r"Answer: (yes|no)", choice.message.content) and choice.finish_reason == "stop"
    extra = r.model_extra["controller"]
    assert extra["variables"]["answer"] == choice.message.content[len("Answer:"):]
    assert "answer:" in extra["sequences"][0]["logs"]
    r = real_client.chat.completions.create(model=name, messages=messages, max_tokens=12,
                                            extra_body={"controller": ids[1]})
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        assert c.message.content.startswith(f" {c.index}="), c.message.content
    for bad, status in (({"controller": ids[0], "regex": "a"}, 400), ({"controller": "nope"}, 404)):
        with pytest.raises(openai.APIStatusError) as info:
            real_client.chat.completions.create(model=name, messages=messages, extra_body=bad)
        assert info.value.status_code == status
    with pytest.raises(openai.BadRequestError, match="not streamed"):
        real_client.chat.completions.create(model=name, messages=messages, stream=True,
                                            extra_body={"controller": ids[0]})


def test_grammars_are_memoised_by_content():
    from logitgate.server.openai_api import ConstraintSpec, cached_grammar

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    one = cached_grammar(ConstraintSpec("json_schema", "response_format", dict(schema), strict=True))
    two = cached_grammar(ConstraintSpec("json_schema", "response_format", json.loads(json.dumps(schema)), strict=True))
    other = cached_grammar(ConstraintSpec("json_schema", "response_format", dict(schema), strict=False))
    assert one is two and other is not one
    assert cached_grammar(ConstraintSpec("regex", "regex", "[0-9]+")) is cached_grammar(ConstraintSpec("regex", "regex", "[0-9]+"))


@pytest.mark.parametrize("where", ["engine-fake-model", pytest.param("embedded", marks=pytest.mark.slow)])
def test_load_64_concurrent_streams_all_valid(where, tok_spm, request):
    """The bounded load test: 64 concurrent streaming requests (async openai client) through the
    real Engine (max_batch 64), half JSON Schema, half regex: zero errors, every output valid.
    Latency p50/p99 is printed, not asserted."""
    import asyncio
    import statistics

    from logitgate.server.engine import Engine

    if where == "embedded":
        embedded_gguf = request.getfixturevalue("embedded_gguf")
        pytest.importorskip("llama_cpp")
        from logitgate.integrations.llama_cpp import LlamaCppModel

        model = LlamaCppModel.from_path(embedded_gguf)
    else:
        from tests.test_server_engine import FakeModel as MultiSequenceModel

        model = MultiSequenceModel(tok_spm, delay=0.002)
    engine = Engine(model, max_batch=64)
    engine.start()
    url, server, thread = _serve(create_app(engine))
    pattern = r"[0-9]{3}-[0-9]{4}"
    rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, float, str]:
        t = time.perf_counter()
        kw: dict = {"response_format": rf} if i % 2 else {"extra_body": {"regex": pattern}}
        stream = await client.chat.completions.create(
            model=engine.model_name, messages=[{"role": "user", "content": f"Request {i}."}], stream=True,
            max_tokens=80, temperature=0.7, seed=i, **kw)
        text, finish = "", ""
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, time.perf_counter() - t, finish

    async def run_all() -> list:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
        try:
            return await asyncio.gather(*(one(client, i) for i in range(64)), return_exceptions=True)
        finally:
            await client.close()

    try:
        results = asyncio.run(run_all())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        engine.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    for i, (text, _, finish) in enumerate(results):
        assert finish == "stop", (i, text, finish)
        if i % 2:
            jsonschema.validate(json.loads(text), PET)
        else:
            assert re.fullmatch(pattern, text), text
    lat = sorted(r[1] for r in results)
    print(f"\n64 streams ({where}): latency p50 {statistics.median(lat):.2f} s, p99 {lat[-1]:.2f} s")


def test_logitgate_serve_cli_on_the_embedded_model(embedded_gguf, tmp_path):
    """`logitgate serve` starts on the embedded model (a process of its own), requires its API key,
    answers the OpenAI client with valid structured output, and stops on SIGTERM."""
    import signal
    import subprocess
    import sys

    pytest.importorskip("llama_cpp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "logitgate", "serve", "--port", str(port), "--api-key", "k3y",
                             "--runtime", "llama-cpp", "--no-controllers", "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "the server did not come up"
            time.sleep(0.2)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k3y", max_retries=0, timeout=120)
        (model,) = [m.id for m in client.models.list().data]
        assert model.endswith(".gguf")
        rf = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "A pet as JSON."}],
                                           response_format=rf, max_tokens=60, temperature=0)
        jsonschema.validate(json.loads(r.choices[0].message.content), PET)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log.close()
    assert proc.returncode is not None
