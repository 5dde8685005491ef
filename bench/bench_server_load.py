"""Server load and fault benchmark: a real ``logitgate serve`` process on the embedded model, many
concurrent streaming clients, and a round of bad requests and vanishing clients among good ones.

    python bench/bench_server_load.py --clients 64 256            # load rounds, then the fault round
    python bench/bench_server_load.py --clients 16 --max-tokens 16 --fault-clients 16

The server is ``python -m logitgate serve --api-key ... --no-controllers`` (llama.cpp, 127.0.0.1,
``--max-batch 64``), a process of its own; the clients are raw ``httpx.AsyncClient`` SSE streams
in this process; ``/health`` is timed every 100 ms from a third process while each round runs.

* Load round (N clients at once): a quarter JSON Schema (``response_format`` json_schema,
  strict), a quarter regex (extra field ``regex``), half unconstrained (sampled, seeded), all
  streamed with ``max_tokens``. Reported: requests, errors (anything but a 200 stream ending in a
  finish reason and ``[DONE]``), invalid outputs (complete constrained answers that do not match),
  time to first token and whole-request latency (p50 / p99), output tokens per second over the
  round, ``/health`` latency p50 / p99 during the round, the server's peak RSS (``VmHWM``), and
  whether the engine is back to no running or waiting request and no cached token afterwards.
* Fault round: good streams interleaved with malformed JSON, wrong types, a missing field, an
  oversized body (413), an unknown model (404), no or a wrong API key (401), a bad regex, schema
  and grammar (400, streamed or not), and clients that disconnect after two events. Each bad
  request must get its exact status with a complete OpenAI error JSON, each good stream must
  complete, and each disconnected request must be cancelled by the engine.

The latency budget: ``/health`` p99 under ``--budget-ms`` (250 ms) in every round. The exit
status is 1 when a round has an error, an invalid output, a leak, a wrong fault answer or misses
the budget. The two cores of the reference machine are shared with the clients (and possibly other
work): numbers vary from run to run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SCHEMA = {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "ok": {"type": "boolean"}},
          "required": ["age", "ok"], "additionalProperties": False}
REGEX = r"[0-9]{3}-[0-9]{4}"
PROMPTS = ["A person's age as JSON.", "Give me a phone number.", "Tell me about the sea.", "Write a haiku.",
           "What is 2 + 2?", "Name three colours."]


# -- statistics ------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank); 0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs) + 0.5) - 1))]


def peak_rss_mib(pid: int) -> tuple[float, float]:
    """``(VmHWM, VmRSS)`` of a process in MiB (Linux ``/proc``; zeros elsewhere)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0
    got = {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)
           if k in ("VmHWM", "VmRSS")}
    return got.get("VmHWM", 0.0), got.get("VmRSS", 0.0)


# -- one streaming client --------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: int = 0
    kind: str = ""
    ttft: float | None = None
    latency: float = 0.0
    text: str = ""
    finish: str | None = None
    done: bool = False
    tokens: int = 0
    error: str = ""
    body: Any = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.done and self.finish in ("stop", "length") and not self.error

    @property
    def valid(self) -> bool:
        """A complete constrained answer matches its constraint (a cut one is not judged)."""
        if self.finish != "stop" or self.kind == "none":
            return True
        if self.kind == "regex":
            return re.fullmatch(REGEX, self.text) is not None
        try:
            obj = json.loads(self.text)
        except json.JSONDecodeError:
            return False
        try:
            import jsonschema
        except ImportError:  # by hand: 1.0 and 1e2 are integers for JSON Schema too
            age = obj.get("age") if isinstance(obj, dict) else None
            return (isinstance(obj, dict) and set(obj) == {"age", "ok"} and isinstance(age, (int, float))
                    and not isinstance(age, bool) and age == int(age) and 0 <= age <= 120
                    and isinstance(obj["ok"], bool))
        return jsonschema.Draft202012Validator(SCHEMA).is_valid(obj)


def request_body(i: int, model: str, max_tokens: int, *, completions: bool = False) -> tuple[str, dict[str, Any]]:
    """``(kind, body)`` of good request ``i``: a quarter JSON Schema, a quarter regex, half unconstrained."""
    kind = ("json", "regex", "none", "none")[i % 4]
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0.7,
                            "seed": i, "stream_options": {"include_usage": True}}
    prompt = PROMPTS[i % len(PROMPTS)]
    if completions:
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    if kind == "json":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA,
                                                                          "strict": True}}
    elif kind == "regex":
        body["regex"] = REGEX
    return kind, body


async def stream(client: httpx.AsyncClient, path: str, body: dict[str, Any] | bytes, *, kind: str = "none",
                 headers: dict[str, str] | None = None, stop_after: int | None = None) -> Outcome:
    """POST and read the SSE stream to ``[DONE]`` (or disconnect after ``stop_after`` events)."""
    out = Outcome(kind=kind)
    t0 = time.perf_counter()
    kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    try:
        async with client.stream("POST", path, headers=headers, **kw) as r:
            out.status = r.status_code
            if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/event-stream"):
                raw = await r.aread()
                try:
                    out.body = json.loads(raw)
                except json.JSONDecodeError:
                    out.error = f"not JSON: {raw[:80]!r}"
                return out
            events = 0
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    out.done = True
                    break
                obj = json.loads(data)
                if "error" in obj:
                    out.error = obj["error"].get("message", "error")
                    out.body = obj
                    continue
                for choice in obj.get("choices") or []:
                    piece = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
                    if piece:
                        if out.ttft is None:
                            out.ttft = time.perf_counter() - t0
                        out.text += piece
                    out.finish = choice.get("finish_reason") or out.finish
                if obj.get("usage"):
                    out.tokens = obj["usage"]["completion_tokens"]
                events += 1
                if stop_after is not None and events >= stop_after:
                    break  # leaving the block closes the connection mid-stream
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        out.latency = time.perf_counter() - t0
    return out


# -- /health prober (a process of its own) ------------------------------------------------------------------
class HealthProbe:
    """Times ``GET /health`` every ``interval`` seconds from another process until ``stop()``."""

    def __init__(self, base_url: str, interval: float = 0.1) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--probe", base_url, "--interval", str(interval)],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self) -> tuple[list[float], int]:
        """Latencies in seconds, and the number of failed probes."""
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        times = [float(x) for x in out.split()]
        return [t for t in times if t >= 0], sum(1 for t in times if t < 0)


def probe_forever(base_url: str, interval: float) -> None:
    """Print the latency of ``GET /health`` (seconds; -1 for a failure) until SIGTERM."""
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    with httpx.Client(base_url=base_url, timeout=10) as c:
        while not stop:
            t = time.perf_counter()
            try:
                ok = c.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            dt = time.perf_counter() - t
            print(f"{dt if ok else -1.0:.6f}", flush=True)
            time.sleep(max(0.0, interval - dt))


# -- rounds ----------------------------------------------------------------------------------------------
@dataclass
class Server:
    url: str
    model: str
    api_key: str | None = None
    pid: int | None = None
    max_body_bytes: int = 8 << 20

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def make_client(server: Server, n: int, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=timeout,
                             limits=httpx.Limits(max_connections=n + 32, max_keepalive_connections=n + 32))


def settled(server: Server, timeout: float = 30.0) -> dict[str, Any]:
    """``/v1/stats`` once nothing runs or waits (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        s = httpx.get(f"{server.url}/v1/stats", headers=server.headers, timeout=10).json()
        if (s["running"] == 0 and s["waiting"] == 0) or time.monotonic() > deadline:
            return s
        time.sleep(0.05)


def load_round(server: Server, n: int, *, max_tokens: int = 24, timeout: float = 600.0,
               probe_interval: float = 0.1) -> dict[str, Any]:
    """N concurrent good streams (chat; every 8th a text completion); see the module docstring."""

    async def run() -> list[Outcome]:
        async with make_client(server, n, timeout) as client:
            jobs = []
            for i in range(n):
                completions = i % 8 == 7
                kind, body = request_body(i, server.model, max_tokens, completions=completions)
                jobs.append(stream(client, "/v1/completions" if completions else "/v1/chat/completions", body,
                                   kind=kind))
            return list(await asyncio.wait_for(asyncio.gather(*jobs), timeout))

    probe = HealthProbe(server.url, probe_interval)
    t = time.perf_counter()
    try:
        results = asyncio.run(run())
    finally:
        wall = time.perf_counter() - t
        health, health_failed = probe.stop()
    after = settled(server)
    bad = [r for r in results if not r.ok]
    good = [r for r in results if r.ok]
    hwm, rss = peak_rss_mib(server.pid) if server.pid else (0.0, 0.0)
    return {"clients": n, "requests": len(results), "errors": len(bad),
            "first_error": (bad[0].error or f"HTTP {bad[0].status}: {bad[0].body}") if bad else "",
            "invalid": sum(1 for r in good if not r.valid),
            "invalid_examples": [f"{r.kind}: {r.text!r}" for r in good if not r.valid][:3],
            "cut": sum(1 for r in good if r.finish == "length"),
            "tokens": sum(r.tokens for r in good), "wall": wall,
            "ttft": [r.ttft for r in good if r.ttft is not None], "latency": [r.latency for r in good],
            "health": health, "health_failed": health_failed, "peak_rss_mib": hwm, "rss_mib": rss,
            "leak": after["running"] + after["waiting"] + after.get("cached_tokens", 0)}


# What each bad request must get: (name, path, body or raw bytes, headers override, status, error code).
def fault_cases(server: Server) -> list[tuple[str, str, Any, dict[str, str] | None, int, str | None]]:
    m, chat = server.model, "/v1/chat/completions"
    msgs = [{"role": "user", "content": "Hi"}]
    big = b'{"model": "' + m.encode() + b'", "messages": [{"role": "user", "content": "' + \
        b"x" * (server.max_body_bytes + 1024) + b'"}]}'
    cases: list[tuple[str, str, Any, dict[str, str] | None, int, str | None]] = [
        ("malformed JSON", chat, b'{"model": "x", "messages": [', None, 400, "invalid_json"),
        ("not an object", chat, b"[1, 2, 3]", None, 400, "invalid_json"),
        ("too deep", chat, b"[" * 5000 + b"]" * 5000, None, 400, "invalid_json"),
        ("wrong type", chat, {"model": m, "messages": msgs, "max_tokens": "many", "stream": True}, None, 400,
         "invalid_value"),
        ("missing field", chat, {"model": m, "stream": True}, None, 400, "missing_required_parameter"),
        ("oversized body", chat, big, None, 413, "request_too_large"),
        ("unknown model", chat, {"model": "gpt-99", "messages": msgs, "stream": True}, None, 404, "model_not_found"),
        ("bad regex", chat, {"model": m, "messages": msgs, "stream": True, "regex": "a(b"}, None, 400,
         "invalid_regex"),
        ("bad schema", chat, {"model": m, "messages": msgs, "stream": True, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}}, None, 400,
         "invalid_schema"),
        ("bad gbnf", "/v1/completions", {"model": m, "prompt": "x", "gbnf": 'root ::= "a" (', "stream": True},
         None, 400, "invalid_grammar"),
    ]
    if server.api_key:
        cases += [("no API key", chat, {"model": m, "messages": msgs, "stream": True}, {"Authorization": ""}, 401,
                   "invalid_api_key"),
                  ("wrong API key", chat, {"model": m, "messages": msgs, "stream": True},
                   {"Authorization": "Bearer sk-wrong"}, 401, "invalid_api_key")]
    return cases


def fault_round(server: Server, n_good: int, *, max_tokens: int = 24, disconnects: int = 8, rounds_of_faults: int = 2,
                timeout: float = 600.0, probe_interval: float = 0.1) -> dict[str, Any]:
    """Good streams, bad requests and disconnecting clients, all at once, interleaved."""
    cases = fault_cases(server)
    before = httpx.get(f"{server.url}/v1/stats", headers=server.headers, timeout=10).json()

    async def run() -> tuple[list[Outcome], list[tuple[Any, Outcome]], list[Outcome]]:
        async with make_client(server, n_good + disconnects + len(cases) * rounds_of_faults, timeout) as client:
            good, faults, gone = [], [], []
            bad = [c for _ in range(rounds_of_faults) for c in cases]
            for i in range(max(n_good, len(bad), disconnects)):
                if i < n_good:
                    kind, body = request_body(i, server.model, max_tokens, completions=i % 8 == 7)
                    good.append(stream(client, "/v1/completions" if i % 8 == 7 else "/v1/chat/completions", body,
                                       kind=kind))
                if i < len(bad):
                    _, path, body, hdrs, _, _ = bad[i]
                    faults.append(stream(client, path, body, headers=hdrs))
                if i < disconnects:  # long unconstrained streams, dropped after two events
                    _, body = request_body(2, server.model, 4096, completions=i % 2 == 1)
                    body["ignore_eos"] = True
                    gone.append(stream(client, "/v1/completions" if i % 2 else "/v1/chat/completions", body,
                                       stop_after=2))
            got = await asyncio.wait_for(asyncio.gather(*good, *faults, *gone), timeout)
            return (list(got[:len(good)]), list(zip(bad, got[len(good):len(good) + len(faults)])),
                    list(got[len(good) + len(faults):]))

    probe = HealthProbe(server.url, probe_interval)
    t = time.perf_counter()
    try:
        good, faults, gone = asyncio.run(run())
    finally:
        wall = time.perf_counter() - t
        health, health_failed = probe.stop()
    after = settled(server)
    wrong = []
    for (label, _, _, _, want, want_code), r in faults:
        err = r.body.get("error") if isinstance(r.body, dict) else None
        complete = isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err) and err["message"]
        if r.status != want or not complete or (want_code is not None and err.get("code") != want_code):
            wrong.append(f"{label}: HTTP {r.status} {r.body or r.error}")
    cancelled = after.get("requests_cancelled", 0) - before.get("requests_cancelled", 0)
    return {"good": len(good), "good_completed": sum(1 for r in good if r.ok),
            "good_invalid": sum(1 for r in good if r.ok and not r.valid),
            "first_good_error": next((r.error or f"HTTP {r.status}: {r.body}" for r in good if not r.ok), ""),
            "faults": len(faults), "faults_exact": len(faults) - len(wrong), "wrong": wrong,
            "disconnects": len(gone), "disconnects_started": sum(1 for r in gone if r.status == 200),
            "cancelled": cancelled, "wall": wall, "health": health, "health_failed": health_failed,
            "leak": after["running"] + after["waiting"] + after.get("cached_tokens", 0),
            "peak_rss_mib": peak_rss_mib(server.pid)[0] if server.pid else 0.0}


# -- the server process ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(api_key: str, max_batch: int, log_path: Path) -> tuple[subprocess.Popen[bytes], Server]:
    port = free_port()
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "logitgate", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--api-key", api_key, "--runtime", "llama-cpp", "--no-controllers",
                             "--max-batch", str(max_batch), "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}):\n{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the server did not come up within 180 s")
        time.sleep(0.2)
    headers = {"Authorization": f"Bearer {api_key}"}
    model = httpx.get(f"{url}/v1/models", headers=headers, timeout=10).json()["data"][0]["id"]
    return proc, Server(url, model, api_key, proc.pid)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--fault-clients", type=int, default=64, help="good streams in the fault round (0: no round)")
    ap.add_argument("--disconnects", type=int, default=8)
    ap.add_argument("--budget-ms", type=float, default=250.0, help="the /health p99 budget under load")
    ap.add_argument("--timeout", type=float, default=600.0, help="the bound on each round, seconds")
    ap.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=float, default=0.1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        probe_forever(args.probe, args.interval)
        return 0
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"logitgate-serve-{os.getpid()}.log"
    proc, server = start_server(secrets.token_hex(16), args.max_batch, log_path)
    problems: list[str] = []
    worst_health = 0.0
    try:
        idle = HealthProbe(server.url)
        time.sleep(2.0)
        idle_health, _ = idle.stop()
        load_round(server, 4, max_tokens=args.max_tokens, timeout=args.timeout)  # warm: compile the constraints
        hwm0, rss0 = peak_rss_mib(proc.pid)
        print(f"# Server load — `logitgate serve` ({server.model}, llama.cpp, --max-batch {args.max_batch}, "
              f"API key on, --no-controllers) on 127.0.0.1, pid {proc.pid}; max_tokens {args.max_tokens}; "
              f"{os.cpu_count()} CPUs shared with the clients")
        print(f"idle: /health p50 {pct(idle_health, .5) * 1e3:.1f} ms, p99 {pct(idle_health, .99) * 1e3:.1f} ms; "
              f"RSS after warm-up {rss0:.0f} MiB (peak {hwm0:.0f} MiB)\n")
        print("| clients | requests | errors | invalid | cut | output tokens | tokens/s | TTFT p50 / p99 s | "
              "latency p50 / p99 s | /health p50 / p99 ms | peak RSS MiB | left running |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|")
        for n in args.clients:
            r = load_round(server, n, max_tokens=args.max_tokens, timeout=args.timeout)
            h50, h99 = pct(r["health"], .5) * 1e3, pct(r["health"], .99) * 1e3
            print(f"| {n} | {r['requests']} | {r['errors']} | {r['invalid']} | {r['cut']} | {r['tokens']} | "
                  f"{r['tokens'] / r['wall']:.1f} | {pct(r['ttft'], .5):.2f} / {pct(r['ttft'], .99):.2f} | "
                  f"{pct(r['latency'], .5):.2f} / {pct(r['latency'], .99):.2f} | {h50:.1f} / {h99:.1f} | "
                  f"{r['peak_rss_mib']:.0f} | {r['leak']} |", flush=True)
            if r["errors"]:
                print(f"  first error: {r['first_error']}")
            for example in r["invalid_examples"]:
                print(f"  invalid: {example}")
            if r["health_failed"]:
                print(f"  {r['health_failed']} /health probes failed")
            worst_health = max(worst_health, h99)
            problems += [f"{n} clients: {what}" for what, bad in (
                ("errors", r["errors"]), ("invalid outputs", r["invalid"]), ("requests left running", r["leak"]),
                ("failed /health probes", r["health_failed"]), ("/health over budget", h99 > args.budget_ms)) if bad]
        if args.fault_clients:
            f = fault_round(server, args.fault_clients, max_tokens=args.max_tokens, disconnects=args.disconnects,
                            timeout=args.timeout)
            h50, h99 = pct(f["health"], .5) * 1e3, pct(f["health"], .99) * 1e3
            print("\n| fault round | good streams completed | bad requests answered exactly | disconnects "
                  "cancelled | /health p50 / p99 ms | left running | wall s |")
            print("|---|---:|---:|---:|---|---:|---:|")
            print(f"| {f['good']} good + {f['faults']} bad + {f['disconnects']} disconnecting | "
                  f"{f['good_completed']} / {f['good']} | {f['faults_exact']} / {f['faults']} | "
                  f"{f['cancelled']} / {f['disconnects']} | {h50:.1f} / {h99:.1f} | {f['leak']} | {f['wall']:.1f} |")
            for w in f["wrong"]:
                print(f"  wrong answer: {w}")
            if f["first_good_error"]:
                print(f"  first good-stream error: {f['first_good_error']}")
            worst_health = max(worst_health, h99)
            problems += [f"fault round: {what}" for what, bad in (
                ("good streams not completed", f["good_completed"] != f["good"]),
                ("invalid outputs", f["good_invalid"]), ("wrong fault answers", f["wrong"]),
                ("requests left running", f["leak"]), ("disconnects not cancelled", f["cancelled"] < f["disconnects"]),
                ("failed /health probes", f["health_failed"]), ("/health over budget", h99 > args.budget_ms)) if bad]
        if proc.poll() is not None:
            problems.append("the server died")
        hwm, _ = peak_rss_mib(proc.pid)
        print(f"\nserver peak RSS (VmHWM) {hwm:.0f} MiB; worst /health p99 {worst_health:.1f} ms "
              f"(budget {args.budget_ms:.0f} ms); " + ("FAILED: " + "; ".join(problems) if problems else "all checks held"))
    finally:
        stop_server(proc)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
