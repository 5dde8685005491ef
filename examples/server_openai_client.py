"""``logitgate serve`` queried with the OpenAI Python client.

    python examples/server_openai_client.py

Starts the server on the embedded model as a subprocess (``python -m logitgate serve``, the same
as the ``logitgate serve`` command) on a free port of 127.0.0.1 with an API key, waits for
``/health``, then sends: a chat completion under a JSON Schema (``response_format``), a streamed
answer under a regex (``extra_body``), a text completion under a Lark grammar, a required tool
call, and a bad regex (a 400 with the offset). Stops the server at the end.
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import httpx
import openai

API_KEY = "example-key"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 40},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False},
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    """``logitgate serve`` in a subprocess; returns once ``/health`` answers 200."""
    server = subprocess.Popen([sys.executable, "-m", "logitgate", "serve", "--port", str(port), "--api-key", API_KEY,
                               "--no-controllers", "--log-level", "warning"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"logitgate serve exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.terminate()
    raise RuntimeError("logitgate serve did not become healthy in 120 s")


def main() -> int:
    port = free_port()
    server = start_server(port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY)
        model = client.models.list().data[0].id
        print("model:", model)

        # 1. JSON Schema through response_format (strict: refused if not enforceable exactly); a
        # fixed seed, and room for a 30-character name spelt one byte per token
        r = client.chat.completions.create(
            model=model, max_tokens=120, seed=0,
            messages=[{"role": "user", "content": "Describe a person as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}})
        person = json.loads(r.choices[0].message.content)
        print("json_schema:", person, "| finish:", r.choices[0].finish_reason)
        assert set(person) == {"name", "age"} and r.choices[0].finish_reason == "stop"

        # 2. a regex as an extra body field, streamed
        stream = client.chat.completions.create(
            model=model, max_tokens=10, stream=True, seed=0,
            messages=[{"role": "user", "content": "Pick a three-digit number."}],
            extra_body={"regex": "[1-9][0-9]{2}"})
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        print("regex, streamed:", pieces)
        assert re.fullmatch("[1-9][0-9]{2}", "".join(pieces))

        # 3. a text completion under a Lark grammar
        c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=10, seed=0,
                                      extra_body={"lark": 'start: " " WORD "."\nWORD: /[A-Z][a-z]+/'})
        print("lark:", repr(c.choices[0].text))
        assert re.fullmatch(r" [A-Z][a-z]+\.", c.choices[0].text)

        # 4. a required tool call: the answer is a call of one of the tools, arguments valid for its schema
        r = client.chat.completions.create(
            model=model, max_tokens=60, seed=0, tools=[WEATHER_TOOL], tool_choice="required",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        call = r.choices[0].message.tool_calls[0]
        args = json.loads(call.function.arguments)
        print("tool call:", call.function.name, args, "| finish:", r.choices[0].finish_reason)
        assert call.function.name == "get_weather" and args["unit"] in ("celsius", "fahrenheit")
        assert r.choices[0].finish_reason == "tool_calls"

        # 5. errors are OpenAI-style JSON; a bad regex names its offset
        try:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                           extra_body={"regex": "[0-9"})
        except openai.BadRequestError as exc:
            print("bad regex:", exc.status_code, exc.body["code"], "|", exc.body["message"].splitlines()[0])
            assert exc.body["param"] == "regex"
        else:
            raise AssertionError("the bad regex was accepted")

        stats = httpx.get(f"http://127.0.0.1:{port}/v1/stats", headers={"Authorization": f"Bearer {API_KEY}"}).json()
        print(f"stats: {stats['requests_finished']} requests, {stats['tokens_generated']} tokens, "
              f"mask share {stats['mask_share']:.1%}")
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
