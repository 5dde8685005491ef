"""The routes of the OpenAI-compatible server, over an ``Engine`` (see ``create_app``).

* ``GET /v1/models``, ``GET /v1/models/{id}``
* ``POST /v1/chat/completions``, ``POST /v1/completions``: non-streaming and streaming (SSE)
* ``POST /v1/controllers`` (a raw Wasm body), ``POST``/``GET /v1/controllers/tags``, ``POST /v1/run``:
  AICI's controller API, run on a separate ``controller_model``
* ``GET /health`` (never behind the API key)

Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``).
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import LogitgateError
from ..limits import Limits, using_limits
from . import openai_api as api
from .engine import SHUTTING_DOWN, EngineFull
from .openai_api import APIError

__all__ = ["create_app"]

log = logging.getLogger("logitgate.server")

DEFAULT_MAX_BODY_BYTES = 8 << 20
DEFAULT_LIMITS = Limits(max_compile_seconds=10.0)
"""The compile caps of a request's constraint: logitgate's defaults, with a 10 s compile deadline."""
_MODULE_ID = re.compile(r"[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# -- middleware: the API key and the body size, before any route runs -------------------------------------
class _BodyTooLarge(APIError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes", code="request_too_large")


class _Gate:
    """Pure ASGI middleware: ``Authorization: Bearer <key>`` on every ``/v1`` route when a key is
    set (401 otherwise), and a body size limit per route (413: at once from ``Content-Length``,
    else when the streamed body passes it)."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.api_key = api_key
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.api_key is not None and (path == "/v1" or path.startswith("/v1/")):
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.api_key.encode()):
                err = APIError(401, "a valid API key is required: 'Authorization: Bearer <key>'"
                               if scheme.lower() != "bearer" or not given.strip() else "incorrect API key provided",
                               code="invalid_api_key")
                await JSONResponse(err.body(), 401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        limit = self.limit_for(path)
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await JSONResponse(_BodyTooLarge(limit).body(), 413)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)


# -- the controller store ------------------------------------------------------------------------------------
@dataclass
class _Stored:
    module: Any  # logitgate.controllers.wasm.WasmModule
    size: int
    created: int


@dataclass
class _State:
    engine: Any
    model_names: list[str]
    controller_model: Any
    created: int = field(default_factory=lambda: int(time.time()))
    modules: dict[str, _Stored] = field(default_factory=dict)
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by the thread of the ``/v1/run`` in progress: one controller run at a time."""
    limits: Limits = field(default_factory=lambda: DEFAULT_LIMITS)
    """The compile caps of requests' constraints."""
    recognizers: dict[str, Any] = field(default_factory=dict)
    """The custom recognizers requests may name (``"recognizer": NAME``)."""

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    def check_model(self, name: str | None) -> None:
        """404 for a model other than the engine's (none named: the engine's)."""
        if name and name not in self.model_names:
            raise APIError(404, f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")


async def _read_json(request: Request, cls: type) -> Any:
    return api.parse_request(await request.body(), cls)


def _engine_names(engine: Any) -> list[str]:
    names = [str(engine.model_name)]
    other = getattr(getattr(engine, "model", None), "name", None)
    if other and str(other) not in names:
        names.append(str(other))
    return names


# -- generation -------------------------------------------------------------------------------------------
async def _prepare(state: _State, prompt_of: Callable[[], Any], spec: api.ConstraintSpec | None,
                   params: Any) -> Any:
    """Tokenize the prompt and compile the constraint (in a worker thread: both can take a while),
    then submit to the engine. Engine full: 429."""
    engine = state.engine

    def work() -> tuple[list[int], Any]:
        prompt = prompt_of()
        if isinstance(prompt, str):
            ids = engine.model.encode(prompt)
        elif prompt and isinstance(prompt[0], dict):
            try:
                ids = engine.model.chat_prompt(prompt)
            except (ValueError, TypeError, KeyError) as exc:  # a chat template that refuses these messages
                raise APIError(400, f"the model's chat template refused the messages: {exc}", param="messages",
                               code="invalid_value") from None
        else:
            ids = list(prompt)
        with using_limits(state.limits):
            compiled = api.compile_constraint(spec, engine.tokenizer) if spec is not None else None
        return list(ids), compiled

    ids, compiled = await anyio.to_thread.run_sync(work)
    try:
        handle = engine.submit(ids, compiled, params)
    except EngineFull as exc:
        raise APIError(429, f"the server is busy, try again later: {exc}", code="engine_full") from None
    except (ValueError, LogitgateError) as exc:
        raise APIError(400, f"the request was refused: {exc}", code="invalid_request") from None
    if getattr(handle, "finished", False) and handle.finish_reason == "error":
        # the engine refused the request itself at once (an empty or too long prompt, ...)
        if handle.error == SHUTTING_DOWN:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        raise APIError(400, f"the request was refused: {handle.error}", code="invalid_request")
    return handle


def _delta_error(delta: Any) -> APIError:
    """The error for a request that ended with ``"error"`` or ``"cancelled"`` mid-generation."""
    if delta.finish_reason == "cancelled" or delta.error == SHUTTING_DOWN:
        return APIError(503, "the server is shutting down" if delta.error == SHUTTING_DOWN
                        else "the request was cancelled by the server", code="shutting_down")
    return APIError(500, f"generation failed: {delta.error or 'unknown error'}", code="generation_error")


async def _collect(handle: Any, request: Request) -> tuple[str, str]:
    """The whole text and the finish reason; a client that disconnects meanwhile cancels the request."""
    parts: list[str] = []
    last: Any = None
    finished = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:
                    message = await request.receive()
                    if message["type"] == "http.disconnect":
                        handle.cancel()
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch)
            async for delta in handle:
                parts.append(delta.text)
                last = delta
                if delta.finish_reason is not None:
                    finished = True
                    break
            tg.cancel_scope.cancel()
    finally:
        if not finished:
            handle.cancel()
    if last is None:  # disconnected: nobody reads this
        raise APIError(499, "client disconnected", code="client_disconnected")
    if last.finish_reason not in ("stop", "length"):
        raise _delta_error(last)
    return "".join(parts), last.finish_reason


class _EventStream(StreamingResponse):
    """An SSE response that calls ``on_close()`` once it is over, however it ended (a client that
    went away before the first event included)."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=_SSE_HEADERS)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def _usage(handle: Any) -> dict[str, int]:
    return api.usage(int(handle.prompt_tokens), int(handle.completion_tokens))


def _delta_stream(handle: Any, first: list[Any], on_delta: Callable[[Any], list[Any]],
                  on_end: Callable[[Any], list[Any]]) -> _EventStream:
    """SSE events for a request: ``first``, ``on_delta(delta)`` for each delta, ``on_end(last)``
    at the end (an error event instead if the engine failed), then ``[DONE]``. A client that goes
    away before the end cancels the request."""
    finished = False

    async def events() -> AsyncIterator[str]:
        nonlocal finished
        try:
            for obj in first:
                yield api.sse(obj)
            async for delta in handle:
                if delta.finish_reason is None:
                    for obj in on_delta(delta):
                        yield api.sse(obj)
                    continue
                if delta.finish_reason in ("stop", "length"):
                    out = [api.sse(obj) for obj in on_delta(delta) + on_end(delta)]
                else:
                    out = [api.sse(_delta_error(delta).body())]
                finished = True
                for event in out:
                    yield event
                break
        except Exception as exc:  # a bug while streaming: the client still gets an error event and [DONE]
            log.exception("a stream failed")
            handle.cancel()
            yield api.sse(APIError(500, f"internal server error while streaming ({type(exc).__name__}: {exc})",
                                   code="internal_error").body())
        yield api.sse("[DONE]")

    def on_close() -> None:
        if not finished:
            handle.cancel()

    return _EventStream(events(), on_close)


# -- controllers (/v1/run) -------------------------------------------------------------------------------------
class _RunCancelled(Exception):
    """Raised from ``on_event`` to stop a run whose client went away."""


_FINISH = {"stop": "aici-stop", "error": "fail"}


def _run_stream(state: _State, module: Any, req: api.RunRequest, arg: str) -> _EventStream:
    """The SSE stream of a controller run: ``initial-run``, ``run`` objects as events come, ``[DONE]``.

    The run happens in a worker thread holding ``state.run_lock``; its events are handed to the
    event loop with ``call_soon_threadsafe``. A client that disconnects stops the run at its next
    event."""
    from logitgate.controllers import ControllerStartError, run_controller
    from logitgate.controllers.wasm import WasmLimits

    model = state.controller_model
    cancelled = threading.Event()

    async def events() -> AsyncIterator[str]:
        while not state.run_lock.acquire(blocking=False):  # polled: cancellation-safe, never leaks the lock
            await asyncio.sleep(0.02)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def post(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone
                cancelled.set()

        def on_event(seq_id: int, kind: str, data: str) -> None:
            if cancelled.is_set():
                raise _RunCancelled()
            post(("event", (seq_id, kind, data)))

        def work() -> None:
            try:
                prompt_ids = model.encode(req.prompt) if req.prompt else []
                post(("prompt", len(prompt_ids)))
                res = run_controller(module.controller_factory(WasmLimits(), arg=arg), model, req.prompt,
                                     max_tokens=req.max_tokens, temperature=req.temperature, seed=req.seed,
                                     on_event=on_event)
                post(("done", res))
            except _RunCancelled:
                post(("cancelled", None))
            except ControllerStartError as exc:  # the module's own failure: reported with its log
                log.info("controller failed to start: %s", exc)
                post(("failed", exc))
            except BaseException as exc:  # reported to the client
                log.exception("controller run failed")
                post(("failed", exc))
            finally:
                state.run_lock.release()

        try:
            threading.Thread(target=work, name="logitgate-run", daemon=True).start()
        except BaseException:
            state.run_lock.release()
            raise
        rid = api.new_id("run-")
        yield api.sse({"id": rid, "object": "initial-run", "created": api.now(), "model": _model_name(model)})
        prompt_tokens = 0
        appended = sampled = 0  # tokens appended to all forks so far, and of those the sampled ones
        while True:
            items = [await queue.get()]
            while not queue.empty():
                items.append(queue.get_nowait())
            forks: dict[int, dict[str, Any]] = {}
            end: tuple[str, Any] | None = None
            for kind, payload in items:
                if kind == "prompt":
                    prompt_tokens = payload
                elif kind == "event":
                    seq_id, what, data = payload
                    fork = forks.setdefault(seq_id, {"index": seq_id, "text": "", "logs": "", "error": "",
                                                     "storage": []})
                    if what == "text":
                        fork["text"] += data
                    elif what in ("sampled", "spliced"):
                        appended += int(data)
                        sampled += int(data) if what == "sampled" else 0
                    elif what == "log":
                        fork["logs"] += data
                    elif what == "end":
                        fork["finish_reason"] = _FINISH.get(data, data)
                else:
                    end = (kind, payload)
            if forks:
                yield api.sse({"object": "run", "forks": [forks[k] for k in sorted(forks)],
                               "usage": _run_usage(sampled, prompt_tokens + appended)})
            if end is None:
                continue
            kind, payload = end
            if kind == "done":
                yield api.sse(_final_run(payload, prompt_tokens))
            elif kind == "failed":
                yield api.sse({"object": "run", "forks": [{
                    "index": 0, "text": "", "logs": getattr(payload, "log", ""), "finish_reason": "fail", "storage": [],
                    "error": f"{type(payload).__name__}: {payload}"}],
                    "usage": _run_usage(sampled, prompt_tokens + appended)})
            yield api.sse("[DONE]")
            return

    return _EventStream(events(), cancelled.set)  # a client gone mid-run stops it at its next event


async def _controller_chat(state: _State, req: api.ChatCompletionRequest) -> dict[str, Any]:
    """``chat/completions`` with logitgate's ``controller`` field: the uploaded controller writes the
    answer from the chat's prompt (on the controller model, one run at a time); every sequence it
    forks is a choice. Not streamed (``/v1/run`` streams a run)."""
    from logitgate.controllers import ControllerStartError, run_controller
    from logitgate.controllers.wasm import WasmLimits

    if req.stream:
        raise APIError(400, "a chat completion with a controller is not streamed; POST /v1/run streams a "
                            "controller run", param="stream", code="unsupported_parameter")
    if api.constraint_spec(req, state.recognizers) is not None:
        raise APIError(400, "a controller writes the answer itself: give no response_format, regex, lark, gbnf, "
                            "recognizer or tools with it", param="controller", code="too_many_constraints")
    module = _stored_module(state, req.controller)
    model = state.controller_model
    arg = req.controller_arg
    arg = "" if arg is None else arg if isinstance(arg, str) else json.dumps(arg, ensure_ascii=False)
    messages = api.chat_messages(req, None)
    params = api.sampling_params(req)

    def work() -> tuple[Any, int]:
        with state.run_lock:
            prompt_ids = model.chat_prompt(messages)
            res = run_controller(module.controller_factory(WasmLimits(), arg=arg), model, prompt_ids,
                                 max_tokens=params.max_tokens, temperature=params.temperature,
                                 seed=params.seed if params.seed is not None else 0)
            return res, len(prompt_ids)

    try:
        res, n_prompt = await asyncio.get_running_loop().run_in_executor(None, work)
    except (APIError, asyncio.CancelledError):
        raise
    except ControllerStartError as exc:  # the module failed before its first token: its fault, with its log
        raise APIError(422, f"the controller failed to start: {exc}", param="controller",
                       code="controller_failed", logs=exc.log) from None
    except Exception as exc:  # the runner itself failed (a controller's own errors are in its sequences)
        log.exception("controller run failed")
        raise APIError(500, f"the controller run failed: {type(exc).__name__}: {exc}", param="controller",
                       code="controller_error") from None
    return api.controller_chat_response(rid=api.new_id("chatcmpl-"), created=api.now(), model=state.model_name,
                                        result=res, prompt_tokens=n_prompt)


def _stored_module(state: _State, name: str) -> Any:
    """The uploaded controller named by module id or tag (404 if none; 503 without a controller model)."""
    if state.controller_model is None:
        raise APIError(503, "controllers are not available on this server: it was started without a "
                            "controller model", code="controllers_unavailable")
    module_id = name if name in state.modules else state.tags.get(name, {}).get("module_id")
    stored = state.modules.get(module_id) if module_id else None
    if stored is None:
        raise APIError(404, f"no controller {name!r}: upload it to /v1/controllers, then use its module_id "
                            "or a tag", param="controller", code="controller_not_found")
    return stored.module


def _model_name(model: Any) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def _run_usage(sampled: int, ff: int) -> dict[str, int]:
    return {"sampled_tokens": sampled, "ff_tokens": ff, "cost": 2 * sampled + ff}


def _final_run(res: Any, prompt_tokens: int) -> dict[str, Any]:
    """The last ``run`` object: every fork's finish reason and error, the variables as AICI
    ``WriteVar`` storage operations (on fork 0), exact token counts."""
    storage = [{"WriteVar": {"name": k, "value": bytes(v).hex(), "op": "Set", "when_version_is": None}}
               for k, v in sorted(res.variables.items())]
    forks = [{"index": s.seq_id, "text": "", "logs": "", "error": s.error or "",
              "finish_reason": _FINISH.get(s.stop_reason, s.stop_reason),
              "storage": storage if s.seq_id == 0 else []} for s in res.sequences]
    sampled = sum(s.sampled_tokens for s in res.sequences)
    return {"object": "run", "forks": forks,
            "usage": _run_usage(sampled, prompt_tokens + sum(len(s.tokens) for s in res.sequences))}


# -- the app ------------------------------------------------------------------------------------------------
def create_app(engine: Any, *, api_key: str | None = None, controller_model: Any = None,
               max_module_bytes: int = 16 << 20, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               manage_engine: bool = False, limits: Limits | None = None, max_modules: int = 256,
               recognizers: Mapping[str, Any] | None = None) -> FastAPI:
    """The FastAPI app serving ``engine`` (a ``logitgate.server.engine.Engine``).

    ``api_key``: when set, every ``/v1`` route needs ``Authorization: Bearer <api_key>``.
    ``controller_model``: the model ``/v1/run`` runs controllers on (a separate instance from the
    engine's; one run at a time); None answers ``/v1/run`` with 503. ``max_module_bytes``: the
    largest Wasm module ``/v1/controllers`` accepts (413 above); ``max_body_bytes``: the largest
    body of the other routes. ``manage_engine``: call ``engine.start()`` at startup and
    ``engine.close()`` at shutdown (off by default: the caller owns the engine). ``limits``: the
    compile caps of requests' constraints (default ``DEFAULT_LIMITS``); a constraint over one is a
    400 ``constraint_too_large`` naming the cap. ``max_modules``: most Wasm modules stored at once
    (507 beyond). ``recognizers``: custom recognizers (``logitgate.recognizers``) by name; a request
    asks for one with the extra body field ``"recognizer": NAME`` (400 ``unknown_recognizer``
    otherwise). Each is compiled once and its mask memo shared by every request; one that fails
    ends only the request it failed in (finish reason ``"error"``).
    """
    from ..recognizers import as_functional

    for name, rec in (recognizers or {}).items():  # a TypeError now, naming what is missing, not at a request
        try:
            as_functional(rec)
        except TypeError as exc:
            raise TypeError(f"recognizers[{name!r}]: {exc}") from None
    state = _State(engine, _engine_names(engine), controller_model, limits=limits or DEFAULT_LIMITS,
                   recognizers=dict(recognizers or {}))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_engine:
            engine.start()
        try:
            yield
        finally:
            if manage_engine:
                engine.close()

    app = FastAPI(title="logitgate", summary="OpenAI-compatible constrained decoding", lifespan=lifespan)
    app.state.logitgate = state
    app.add_middleware(_Gate, api_key=api_key,  # type: ignore[arg-type]
                       limit_for=lambda path: max_module_bytes if path == "/v1/controllers" else max_body_bytes)
    _install_error_handlers(app)
    v1 = APIRouter(prefix="/v1")

    @app.get("/health")
    async def health() -> Any:
        """200 while the engine's scheduler runs, else 503 (a dead or closed engine serves nobody)."""
        if getattr(engine, "alive", True):
            return {"status": "ok", "model": state.model_name}
        return JSONResponse({"status": "unavailable", "model": state.model_name,
                             **APIError(503, "the engine is not running", code="engine_down").body()}, 503)

    @v1.get("/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(state)]}

    @v1.get("/models/{model_id:path}")
    async def get_model(model_id: str) -> dict[str, Any]:
        state.check_model(model_id)
        return _model_card(state)

    @v1.get("/stats")
    async def stats() -> Any:
        return JSONResponse(json.loads(json.dumps(engine.stats(), default=str)))

    @v1.post("/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Any:
        req: api.ChatCompletionRequest = await _read_json(request, api.ChatCompletionRequest)
        state.check_model(req.model)
        api.refuse_unsupported(req)
        if req.controller is not None:
            return await _controller_chat(state, req)
        spec = api.constraint_spec(req, state.recognizers)
        messages = api.chat_messages(req, spec)
        handle = await _prepare(state, lambda: messages, spec, api.sampling_params(req))
        rid, created, name = api.new_id("chatcmpl-"), api.now(), state.model_name
        call_id = api.new_id("call_")[:29] if spec is not None and spec.kind == "tools" else None
        if not req.stream:
            text, finish = await _collect(handle, request)
            return api.chat_response(rid=rid, created=created, model=name, text=text, finish_reason=finish,
                                     usage_=_usage(handle), tool_call_id=call_id)
        with_usage = bool(req.stream_options and req.stream_options.include_usage)
        calls = api.ToolCallStream(call_id) if call_id is not None else None

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
            return api.chat_chunk(rid=rid, created=created, model=name, delta=delta, finish_reason=finish,
                                  usage_=None, with_usage=with_usage)

        def on_delta(delta: Any) -> list[Any]:
            if not delta.text:
                return []
            if calls is None:
                return [chunk({"content": delta.text})]
            return [chunk({"tool_calls": [d]}) for d in calls.feed(delta.text)]

        def on_end(last: Any) -> list[Any]:
            finish = last.finish_reason
            out: list[Any] = []
            if calls is not None:
                deltas, text = calls.finish(finish)
                out += [chunk({"tool_calls": [d]}) for d in deltas]
                if text:
                    out.append(chunk({"content": text}))
                elif finish == "stop":
                    finish = "tool_calls"
            out.append(chunk({}, finish))
            if with_usage:
                out.append(api.chat_chunk(rid=rid, created=created, model=name, delta=None,
                                          usage_=_usage(handle), with_usage=True))
            return out

        first = chunk({"role": "assistant", "content": None if calls is not None else ""})
        return _delta_stream(handle, [first], on_delta, on_end)

    @v1.post("/completions", response_model=None)
    async def completions(request: Request) -> Any:
        req: api.CompletionRequest = await _read_json(request, api.CompletionRequest)
        state.check_model(req.model)
        api.refuse_unsupported(req)
        spec = api.constraint_spec(req, state.recognizers)
        prompt = api.completion_prompt(req, int(engine.tokenizer.vocab_size))
        handle = await _prepare(state, lambda: prompt, spec, api.sampling_params(req))
        rid, created, name = api.new_id("cmpl-"), api.now(), state.model_name
        if not req.stream:
            text, finish = await _collect(handle, request)
            return api.completion_response(rid=rid, created=created, model=name, text=text, finish_reason=finish,
                                           usage_=_usage(handle))
        with_usage = bool(req.stream_options and req.stream_options.include_usage)

        def on_delta(delta: Any) -> list[Any]:
            if not delta.text:
                return []
            return [api.completion_chunk(rid=rid, created=created, model=name, text=delta.text,
                                         with_usage=with_usage)]

        def on_end(last: Any) -> list[Any]:
            out = [api.completion_chunk(rid=rid, created=created, model=name, text="",
                                        finish_reason=last.finish_reason, with_usage=with_usage)]
            if with_usage:
                out.append(api.completion_chunk(rid=rid, created=created, model=name, text=None,
                                                usage_=_usage(handle), with_usage=True))
            return out

        return _delta_stream(handle, [], on_delta, on_end)

    # -- AICI controllers ------------------------------------------------------------------------------
    @v1.post("/controllers", response_model=None)
    async def upload_controller(request: Request) -> Any:
        from logitgate.controllers.wasm import WasmError, WasmModule

        data = await request.body()
        if len(data) > max_module_bytes:
            raise _BodyTooLarge(max_module_bytes)
        if not data:
            raise APIError(400, "the body must be a WebAssembly module (the raw .wasm bytes)", code="invalid_module")
        module_id = hashlib.sha256(data).hexdigest()
        t0 = time.perf_counter()
        if module_id not in state.modules:
            if len(state.modules) >= max_modules:  # each holds compiled code: memory an uploader could exhaust
                raise APIError(507, f"the server already stores {max_modules} controller modules, its limit",
                               code="too_many_modules")
            try:
                module = await anyio.to_thread.run_sync(
                    lambda: WasmModule.from_bytes(data, name=module_id[:12], max_bytes=max_module_bytes))
            except WasmError as exc:
                raise APIError(400, f"the module was refused: {exc}", code="invalid_module") from None
            state.modules[module_id] = _Stored(module, len(data), api.now())
        return {"module_id": module_id, "wasm_size": len(data), "time": round((time.perf_counter() - t0) * 1e3)}

    @v1.post("/controllers/tags", response_model=None)
    async def tag_controller(request: Request) -> Any:
        req: api.TagRequest = await _read_json(request, api.TagRequest)
        stored = state.modules.get(req.module_id)
        if stored is None:
            raise APIError(404, f"no module {req.module_id!r} was uploaded", param="module_id",
                           code="module_not_found")
        for i, tag in enumerate(req.tags):
            if not _TAG.fullmatch(tag) or _MODULE_ID.fullmatch(tag):
                raise APIError(400, f"invalid tag {tag!r}: 1 to 128 letters, digits, '.', '_' or '-' (not a "
                                    "module id)", param=f"tags[{i}]", code="invalid_value")
        out = []
        for tag in dict.fromkeys(req.tags):
            entry = {"tag": tag, "module_id": req.module_id, "updated_at": api.now(), "updated_by": "api",
                     "wasm_size": stored.size}
            state.tags[tag] = entry
            out.append(entry)
        return {"tags": out}

    @v1.get("/controllers/tags")
    async def list_tags() -> dict[str, Any]:
        return {"tags": [state.tags[t] for t in sorted(state.tags)]}

    @v1.post("/run", response_model=None)
    async def run(request: Request) -> Any:
        req: api.RunRequest = await _read_json(request, api.RunRequest)
        module = _stored_module(state, req.controller)
        arg = req.controller_arg
        arg = "" if arg is None else arg if isinstance(arg, str) else json.dumps(arg, ensure_ascii=False)
        return _run_stream(state, module, req, arg)

    app.include_router(v1)
    return app


def _model_card(state: _State) -> dict[str, Any]:
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "logitgate"}


def _install_error_handlers(app: FastAPI) -> None:
    """Every error as OpenAI's JSON: ours, pydantic's, routing's (404, 405) and unexpected ones (500)."""

    async def api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIError)
        return JSONResponse(exc.body(), exc.status)

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        message = {404: "no such route", 405: "method not allowed"}.get(status, str(exc.detail))
        code = {404: "not_found", 405: "method_not_allowed"}.get(status)
        return JSONResponse(APIError(status, message, code=code).body(), status, headers=exc.headers)

    async def validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [p for p in first.get("loc", ()) if p != "body"]
        err = APIError(400, f"invalid request: {first.get('msg')}", param=".".join(map(str, loc)) or None,
                       code="invalid_value")
        return JSONResponse(err.body(), 400)

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error", exc_info=exc)
        err = APIError(500, f"internal server error ({type(exc).__name__})", code="internal_error")
        return JSONResponse(err.body(), 500)

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(Exception, unexpected)

