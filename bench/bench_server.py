"""Server benchmark: many concurrent streaming clients on the embedded model through the
OpenAI-compatible server, with the real ``openai`` client, constrained and not.

    python bench/bench_server.py                     # 1, 8, 32, 64 concurrent streams
    python bench/bench_server.py --clients 64 --max-tokens 96

The server (``logitgate.server.create_app`` over one ``Engine``: continuous batching on the
embedded SmolLM2 GGUF on llama.cpp) runs on 127.0.0.1 in this process; the clients are
``openai.AsyncOpenAI`` streams. Each round sends N identical-shape requests at once: JSON for a
schema (``response_format`` json_schema, strict), then the same prompts with no constraint and
``ignore_eos``, each with ``max_tokens`` set to the length of its constrained twin's answer, so
the baseline writes the same tokens in the same steps (answers of different lengths leave the
last steps with small batches, which cost more per token on llama.cpp). Reported per round: errors, requests whose output is invalid (``jsonschema``), time to
first token and whole-request latency (p50, p99), output tokens per second over the round, and
the engine's mask share (time the scheduler waited for masks over its decoding time).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import threading
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 30},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
    "additionalProperties": False,
}
PROMPTS = ["Describe a person as JSON.", "A customer record as JSON, please.", "Invent a character; answer in JSON.",
           "Give me a JSON profile of a retired teacher."]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(max_batch: int):
    import uvicorn

    from logitgate.integrations.models import load_model
    from logitgate.server import create_app
    from logitgate.server.engine import Engine

    model = load_model(runtime="llama-cpp")
    engine = Engine(model, max_batch=max_batch)
    engine.start()
    port = free_port()
    config = uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return engine, server, thread, port


MODEL = [""]


async def one(client, i: int, constrained: bool, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    first = None
    text = ""
    extra = {}
    kw = {}
    if constrained:
        kw["response_format"] = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA,
                                                                          "strict": True}}
    else:
        extra = {"ignore_eos": True}
    stream = await client.chat.completions.create(
        model=MODEL[0], messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], stream=True,
        max_tokens=max_tokens, temperature=0.0, stream_options={"include_usage": True}, extra_body=extra, **kw)
    tokens = 0
    finish = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.perf_counter() - t0
            text += chunk.choices[0].delta.content
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return {"ttft": first or 0.0, "latency": time.perf_counter() - t0, "text": text, "tokens": tokens,
            "finish": finish}


async def round_(port: int, n: int, constrained: bool, max_tokens: int | list[int]) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                timeout=600)
    t = time.perf_counter()
    limits = max_tokens if isinstance(max_tokens, list) else [max_tokens] * n
    results = await asyncio.gather(*(one(client, i, constrained, limits[i]) for i in range(n)),
                                   return_exceptions=True)
    wall = time.perf_counter() - t
    await client.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    invalid = 0
    cut = sum(1 for r in ok if r["finish"] == "length")
    if constrained:  # a complete answer must be valid; one cut at max_tokens is a valid prefix
        import jsonschema

        for r in ok:
            if r["finish"] != "stop":
                continue
            try:
                jsonschema.validate(json.loads(r["text"]), SCHEMA)
            except Exception:  # noqa: BLE001
                invalid += 1
    lat = sorted(r["latency"] for r in ok) or [0.0]
    ttft = sorted(r["ttft"] for r in ok) or [0.0]
    return {"n": n, "errors": len(errors), "cut": cut, "lengths": [0 if isinstance(r, BaseException) else r["tokens"]
                                                       for r in results], "first_error": repr(errors[0]) if errors else "", "invalid": invalid,
            "tokens": sum(r["tokens"] for r in ok), "wall": wall,
            "ttft_p50": statistics.median(ttft), "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "lat_p50": statistics.median(lat), "lat_p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="*", default=[1, 8, 32, 64])
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args(argv)
    engine, server, thread, port = start_server(max(args.clients))
    MODEL[0] = engine.model_name
    print(f"# Server benchmark — {engine.model_name}, llama.cpp, 127.0.0.1:{port}, openai client, "
          f"max_tokens {args.max_tokens}, greedy")
    asyncio.run(round_(port, 2, True, args.max_tokens))  # warm: compile the schema, first grammar states
    asyncio.run(round_(port, 2, False, args.max_tokens))
    print("\n| clients | constraint | errors | invalid | cut at max_tokens | output tokens | tokens/s | "
          "TTFT p50 / p99 s | latency p50 / p99 s | mask share |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---|---:|")
    ratios = []
    for n in args.clients:
        rate = {}
        max_tokens = args.max_tokens
        for constrained in (True, False):
            before = engine.stats()
            r = asyncio.run(round_(port, n, constrained, max_tokens))
            after = engine.stats()
            mask = after.get("mask_s", 0.0) - before.get("mask_s", 0.0)
            fwd = after.get("forward_s", 0.0) - before.get("forward_s", 0.0)
            share = mask / (mask + fwd) if mask + fwd > 0 else 0.0
            rate[constrained] = r["tokens"] / r["wall"]
            print(f"| {n} | {'JSON schema' if constrained else 'none, as many tokens'} | {r['errors']} | "
                  f"{r['invalid']} | {r['cut'] if constrained else '-'} | {r['tokens']} | {rate[constrained]:.1f} | {r['ttft_p50']:.2f} / "
                  f"{r['ttft_p99']:.2f} | {r['lat_p50']:.2f} / {r['lat_p99']:.2f} | {share:.1%} |", flush=True)
            if r["errors"]:
                print(f"  first error: {r['first_error']}")
            if constrained:  # the baseline: each request writes as many tokens as its constrained twin (ignore_eos)
                max_tokens = [max(1, k) for k in r["lengths"]]
        ratios.append((n, rate[True] / rate[False] - 1))
    print("\nconstrained vs unconstrained tokens/s: " + ", ".join(f"{n} clients {d:+.1%}" for n, d in ratios))
    server.should_exit = True
    thread.join(timeout=10)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
