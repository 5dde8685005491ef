"""One model shared by many generation requests through continuous batching.

    engine = Engine(model, max_batch=64)          # a model with ``sequences(n)`` (llama.cpp, transformers)
    engine.start()
    h = engine.submit(model.chat_prompt(messages), logitgate.compile(grammar, model.tokenizer),
                      SamplingParams(max_tokens=200, temperature=0.7, seed=1, stop=["\\n\\n"]))
    for d in iter(h.get, None): ...               # or ``async for d in h`` on an asyncio loop
    text, finish_reason = h.result()
    engine.close()

A scheduler thread runs steps. Each step admits waiting requests into free sequence slots of
``model.sequences(max_batch)`` (their prompts go into the same ``decode`` call as the running
requests' new tokens), runs that one batched forward pass while a worker thread fills every
constrained request's mask for its next token (masks depend only on tokens already accepted),
then for each request applies its mask, samples with its own seeded generator, advances its
matcher, decodes text incrementally (incomplete UTF-8 and possible stop-string prefixes are held
back) and pushes a ``Delta``. Finished and cancelled requests free their slots.

Where the model's sequences share one cache of ``n_ctx`` tokens (llama.cpp), requests are admitted
while their tokens fit, and when the running requests outgrow it the most recently admitted one
is preempted: its slot is freed and it waits again at the head of the queue with its tokens,
matcher and generator kept; re-admitted, its tokens are computed again (one prefill).
"""
from __future__ import annotations

import asyncio
import codecs
import inspect
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from ..compiler import CompiledGrammar, compile
from ..decoding import sample_token
from ..errors import LogitgateError
from ..grammar import Grammar
from ..matcher import Matcher, fill_next_token_bitmasks
from ..vocab import Tokenizer

__all__ = ["SamplingParams", "Delta", "RequestHandle", "Engine", "EngineError", "EngineFull"]

SHUTTING_DOWN = "server shutting down"
_HEADROOM = 16
"""Cache cells a request must find free beyond its tokens to be admitted (room to grow before
the scheduler preempts anything)."""


class EngineError(LogitgateError):
    """An engine refused a request."""


class EngineFull(EngineError):
    """``max_waiting`` requests already wait for a slot (the server answers 503/429)."""


@dataclass
class SamplingParams:
    """How one request samples."""

    max_tokens: int = 256
    temperature: float = 1.0
    """0 = greedy."""
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    """OpenAI semantics: generation ends at the first stop string, which is not part of the text."""
    ignore_eos: bool = False
    """Unconstrained requests only: EOS and other special tokens are never sampled (benchmarks)."""


@dataclass
class Delta:
    """A piece of one request's output."""

    text: str
    """Newly decoded text (incomplete UTF-8, and text that could still become a stop string, held back)."""
    token_ids: list[int]
    finish_reason: str | None = None
    """``None`` while generating; ``"stop"`` (EOS, the constraint complete, or a stop string),
    ``"length"`` (max_tokens or the context), ``"cancelled"``, ``"error"``."""
    error: str | None = None


class RequestHandle:
    """One submitted request: its stream of ``Delta``s (``get`` from threads, ``async for`` from
    asyncio; use one or the other), ``cancel``, and the blocking ``result``."""

    def __init__(self, request_id: str, prompt_tokens: int, wake: Any = None) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        """Tokens generated so far (EOS not counted)."""
        self._queue: queue.SimpleQueue[Delta] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._aio: tuple[asyncio.AbstractEventLoop, asyncio.Queue[Delta]] | None = None
        self._parts: list[str] = []
        self._final: Delta | None = None
        self._done = threading.Event()
        self._cancelled = False
        self._wake = wake

    @property
    def finished(self) -> bool:
        """The final delta (with a finish reason) has been produced."""
        return self._done.is_set()

    @property
    def finish_reason(self) -> str | None:
        """Why the request ended (``stop``, ``length``...), None while it runs."""
        return self._final.finish_reason if self._final is not None else None

    def get(self, timeout: float | None = None) -> Delta:
        """The next delta, blocking; raises ``TimeoutError`` after ``timeout`` seconds. After the
        final delta, returns an empty delta with the same finish reason."""
        if self._aio is not None:
            raise RuntimeError("this request is being read with 'async for'")
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            final = self._final
            if final is not None and self._queue.empty():
                return Delta("", [], final.finish_reason, final.error)
            raise TimeoutError(f"no output from request {self.request_id} within {timeout} s") from None

    async def __aiter__(self) -> AsyncIterator[Delta]:
        """Deltas until the one with a finish reason, awaited on the running event loop (the
        scheduler hands them over with ``call_soon_threadsafe``; none produced before are lost).
        Leaving the loop early cancels the request."""
        loop = asyncio.get_running_loop()
        aq: asyncio.Queue[Delta] = asyncio.Queue()
        with self._lock:
            if self._aio is not None:
                raise RuntimeError("this request is already being iterated")
            while True:
                try:
                    aq.put_nowait(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._aio = (loop, aq)
        finished = False
        try:
            while True:
                d = await aq.get()
                finished = d.finish_reason is not None
                yield d
                if finished:
                    return
        finally:
            if not finished:
                self.cancel()

    def cancel(self) -> None:
        """Stop generating (the client went away): the request ends with ``"cancelled"`` and its
        slot is freed at the next step."""
        if not self._done.is_set():
            self._cancelled = True
            if self._wake is not None:
                self._wake()

    def result(self, timeout: float | None = None) -> tuple[str, str]:
        """Blocking: ``(full text, finish_reason)``."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} did not finish within {timeout} s")
        assert self._final is not None and self._final.finish_reason is not None
        return "".join(self._parts), self._final.finish_reason

    @property
    def error(self) -> str | None:
        """The error message of a failed request, None otherwise."""
        return self._final.error if self._final is not None else None

    def _push(self, d: Delta) -> None:
        """Scheduler side: hand over one delta."""
        if self._done.is_set():
            return
        self._parts.append(d.text)
        with self._lock:
            if self._aio is None:
                self._queue.put(d)
            else:
                loop, aq = self._aio
                try:
                    loop.call_soon_threadsafe(aq.put_nowait, d)
                except RuntimeError:  # the loop is closed: nobody reads any more
                    pass
        if d.finish_reason is not None:
            self._final = d
            self._done.set()

    def __repr__(self) -> str:
        return (f"RequestHandle({self.request_id!r}, prompt_tokens={self.prompt_tokens}, "
                f"completion_tokens={self.completion_tokens}, finish_reason={self.finish_reason!r})")


class _StopFilter:
    """Holds back text that could still become a stop string; finds the first stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""

    def push(self, text: str) -> tuple[str, bool]:
        """``(text to emit now, a stop string was reached)``; text from the stop string on is dropped."""
        if not self.stops:
            return text, False
        buf = self.held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[:min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


class _Request:
    """Scheduler-side state of one request."""

    __slots__ = ("handle", "params", "matcher", "rng", "tokens", "n_prompt", "n_cached", "slot", "limit",
                 "decoder", "stops", "order")

    def __init__(self, handle: RequestHandle, prompt: list[int], matcher: Matcher | None,
                 params: SamplingParams) -> None:
        self.handle = handle
        self.params = params
        self.matcher = matcher
        self.rng = np.random.default_rng(params.seed) if params.temperature > 0 else None
        self.tokens = prompt
        """Prompt and generated tokens; the cache holds the first ``n_cached``."""
        self.n_prompt = len(prompt)
        self.n_cached = 0
        self.slot = -1
        self.limit = 0
        """Most tokens the sequence may hold (prompt and completion)."""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stops = _StopFilter(params.stop)
        self.order = 0
        """Admission order (the latest admitted is preempted first)."""


class _RequestFailed(Exception):
    """Ends one request with finish_reason ``"error"``."""


class Engine:
    """Runs many generation requests on one model at once (continuous batching), each under its
    own constraint; see the module docstring.

    ``model``: a logitgate model with ``sequences(n)`` (``LlamaCppModel``, ``TransformersModel``).
    ``max_batch``: most requests running at once (sequence slots). ``max_waiting``: most requests
    waiting for a slot; ``submit`` raises ``EngineFull`` beyond. ``n_ctx``: tokens of the cache the
    sequences share, where the model takes it (llama.cpp; default ``max(8192, 256 * max_batch)``).
    While the engine runs it owns the model's sequences (do not run the controller runner on the
    same model meanwhile).
    """

    def __init__(self, model: Any, *, max_batch: int = 64, max_waiting: int = 1024,
                 n_ctx: int | None = None) -> None:
        if max_batch < 1 or max_waiting < 0:
            raise ValueError("max_batch must be >= 1 and max_waiting >= 0")
        make = getattr(model, "sequences", None)
        if not callable(make):
            raise TypeError(f"{type(model).__name__} has no sequences(n): the engine needs a multi-sequence model")
        self.model = model
        self.tokenizer: Tokenizer = model.tokenizer
        self.model_name: str = str(getattr(model, "name", "") or type(model).__name__)
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        if "n_ctx" in inspect.signature(make).parameters:
            self._seqs = make(max_batch, n_ctx=n_ctx or max(8192, 256 * max_batch))
        else:
            self._seqs = make(max_batch)
        cap = getattr(self._seqs, "n_ctx", None)
        self.capacity: int | None = int(cap) if cap else None
        """Tokens the sequences' shared cache holds (``None``: no shared limit)."""
        ctx = _context_limit(model)
        limits = [x for x in (ctx, self.capacity) if x]
        self.context_limit: int | None = min(limits) if limits else None
        """Most tokens (prompt and completion) one request may hold."""
        self._eos = frozenset(self.tokenizer.eos_token_ids)
        self._never_text = np.array(sorted(set(self.tokenizer.special_ids)
                                           | set(range(self.tokenizer.n_tokens, self.tokenizer.vocab_size))),
                                    dtype=np.int64)
        self._bitmask = allocate_token_bitmask(max_batch, self.tokenizer.vocab_size)
        self._cond = threading.Condition()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._free = list(range(max_batch - 1, -1, -1))
        self._closing = False
        self._closed = False
        self._cancel_seen = False
        self._thread: threading.Thread | None = None
        self._mask_pool: ThreadPoolExecutor | None = None
        self._admitted = 0
        self._stats = {"steps": 0, "rows": 0, "tokens_generated": 0, "prompt_tokens": 0, "forward_s": 0.0,
                       "mask_s": 0.0, "busy_s": 0.0, "requests_finished": 0,
                       "requests_cancelled": 0, "requests_failed": 0, "preemptions": 0}

    # -- public ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the scheduler thread (after loading every compiled kernel, so that no first
        request pays a kernel's first load)."""
        from ..kernels import load_all

        load_all()
        with self._cond:
            if self._closed or self._closing:
                raise EngineError("the engine is closed")
            if self._thread is not None:
                return
            for slot in range(self.max_batch):
                self._seqs.truncate(slot, 0)
            self._mask_pool = ThreadPoolExecutor(1, thread_name_prefix="logitgate-engine-mask")
            self._thread = threading.Thread(target=self._loop, name="logitgate-engine", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop: every pending request ends with ``"error"`` (``server shutting down``); joins the
        scheduler thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cond:
            pending = list(self._waiting) + self._running
            self._waiting.clear()
            self._running = []
            self._closed = True
        for r in pending:
            self._end(r, "", "error", SHUTTING_DOWN)
        if self._mask_pool is not None:
            self._mask_pool.shutdown(wait=True)
            self._mask_pool = None

    def __enter__(self) -> "Engine":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, prompt_ids: Sequence[int], constraint: CompiledGrammar | Grammar | None,
               params: SamplingParams | None = None) -> RequestHandle:
        """Queue a request (thread-safe). Raises ``EngineFull`` when ``max_waiting`` requests
        already wait. Problems with the request itself (an empty or too long prompt, a constraint
        for another tokenizer) end it at once with ``"error"`` and a message."""
        params = params if params is not None else SamplingParams()
        prompt = [int(t) for t in prompt_ids]
        handle = RequestHandle(f"req-{uuid.uuid4().hex[:24]}", len(prompt), self._wake)
        try:
            matcher = self._matcher(constraint)
            self._check(prompt, params)
        except _RequestFailed as exc:
            handle._push(Delta("", [], "error", str(exc)))
            return handle
        r = _Request(handle, prompt, matcher, params)
        with self._cond:
            if self._closing or self._closed:
                handle._push(Delta("", [], "error", SHUTTING_DOWN))
                return handle
            if len(self._waiting) >= self.max_waiting:
                raise EngineFull(f"{len(self._waiting)} requests already wait for the model; try again later")
            self._waiting.append(r)
            self._cond.notify_all()
        return handle

    def stats(self) -> dict[str, Any]:
        """Counters since start: ``steps``, ``sequences_per_step`` (mean rows per forward pass),
        ``tokens_generated``, ``prompt_tokens``, ``forward_s``, ``mask_s`` (time the loop waited
        for masks, applying them included), ``busy_s`` (time in steps), ``mask_share``
        (``mask_s / busy_s``), ``tokens_per_s`` (generated tokens per busy second),
        ``requests_finished`` (of which ``requests_cancelled`` and ``requests_failed``),
        ``preemptions``, ``running``, ``waiting``, ``free_slots`` (sequence
        slots not in use), ``cached_tokens`` (cache cells the running requests hold)."""
        s = dict(self._stats)
        busy = s["busy_s"]
        s["sequences_per_step"] = s.pop("rows") / s["steps"] if s["steps"] else 0.0
        s["mask_share"] = s["mask_s"] / busy if busy > 0 else 0.0
        s["tokens_per_s"] = s["tokens_generated"] / busy if busy > 0 else 0.0
        running = list(self._running)
        s["running"] = len(running)
        s["waiting"] = len(self._waiting)
        s["free_slots"] = len(self._free)
        s["cached_tokens"] = sum(r.n_cached for r in running)
        return s

    @property
    def alive(self) -> bool:
        """The scheduler thread runs (started, not closed, not dead)."""
        t = self._thread
        return t is not None and t.is_alive() and not self._closing

    # -- submission checks -------------------------------------------------------------------
    def _matcher(self, constraint: CompiledGrammar | Grammar | None) -> Matcher | None:
        if constraint is None:
            return None
        try:
            compiled = compile(constraint, self.tokenizer) if isinstance(constraint, Grammar) else constraint
        except LogitgateError as exc:
            raise _RequestFailed(f"the constraint does not compile: {exc}") from exc
        if not isinstance(compiled, CompiledGrammar):
            raise _RequestFailed(f"constraint must be a CompiledGrammar, not {type(constraint).__name__}")
        if compiled.tokenizer.fingerprint != self.tokenizer.fingerprint:
            raise _RequestFailed("the constraint was compiled for a different tokenizer than the model's")
        return Matcher(compiled, max_rollback=0)

    def _check(self, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise _RequestFailed("the prompt is empty")
        bad = [t for t in prompt if not 0 <= t < self.tokenizer.vocab_size]
        if bad:
            raise _RequestFailed(f"prompt token id {bad[0]} is outside the vocabulary [0, {self.tokenizer.vocab_size})")
        if self.context_limit is not None and len(prompt) >= self.context_limit:
            raise _RequestFailed(f"the prompt has {len(prompt)} tokens; this model's context holds "
                                 f"{self.context_limit} (prompt and completion together)")
        if params.max_tokens < 1:
            raise _RequestFailed(f"max_tokens must be at least 1, got {params.max_tokens}")
        if params.temperature < 0 or not 0 < params.top_p <= 1:
            raise _RequestFailed("temperature must be >= 0 and top_p in (0, 1]")

    def _wake(self) -> None:
        with self._cond:
            self._cancel_seen = True
            self._cond.notify_all()

    # -- the scheduler -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._running and not self._waiting:
                    self._cond.wait()
                if self._closing:
                    break
                admitted = self._admit()
            t0 = time.perf_counter()
            try:
                self._step(admitted)
            except Exception as exc:  # a bug: fail what runs (and what was being admitted), keep serving
                message = f"internal error: {type(exc).__name__}: {exc}"
                for r in admitted:
                    if r not in self._running:
                        self._end(r, "", "error", message)
                        if r.slot >= 0:
                            self._free_slot(r)
                self._fail_running(message)
            self._stats["busy_s"] += time.perf_counter() - t0
        self._fail_running(SHUTTING_DOWN)

    def _admit(self) -> list[_Request]:
        """Under the lock: drop cancelled waiting requests, take those that fit."""
        if self._cancel_seen:
            self._cancel_seen = False
            for r in [r for r in self._waiting if r.handle._cancelled]:
                self._waiting.remove(r)
                self._end(r, "", "cancelled")
        used = sum(len(r.tokens) for r in self._running)
        taken: list[_Request] = []
        while self._waiting and len(self._running) + len(taken) < self.max_batch:
            r = self._waiting[0]
            need = len(r.tokens) + min(_HEADROOM, r.params.max_tokens - r.handle.completion_tokens)
            if self.capacity is not None and used + need > self.capacity and (self._running or taken):
                break
            self._waiting.popleft()
            used += len(r.tokens)
            taken.append(r)
        return taken

    def _step(self, admitted: list[_Request]) -> None:
        """One forward pass for every running request, and one token each."""
        st = self._stats
        for r in [r for r in self._running if r.handle._cancelled]:
            self._release(r, "", "cancelled")
        for r in admitted:
            r.slot = self._free.pop()
            r.n_cached = 0
            r.limit = self.context_limit or (1 << 62)
            if not r.order:
                st["prompt_tokens"] += r.n_prompt
            self._admitted += 1
            r.order = self._admitted
            self._running.append(r)
        self._preempt()
        running = self._running
        if not running:
            return
        constrained = [r for r in running if r.matcher is not None]
        masks: Future[dict[int, str]] | None = None
        if constrained and self._mask_pool is not None:
            masks = self._mask_pool.submit(self._fill_masks, constrained)
        items = [(r.slot, r.n_cached, r.tokens[r.n_cached:]) for r in running]
        t = time.perf_counter()
        try:
            logits = self._seqs.decode(items)
        except Exception:
            if masks is not None:
                masks.exception()
            running, logits = self._decode_apart(running)
            if not running:
                return
        st["forward_s"] += time.perf_counter() - t
        st["steps"] += 1
        st["rows"] += len(running)
        for r in running:
            r.n_cached = len(r.tokens)
        t = time.perf_counter()
        failed = masks.result() if masks is not None else {}
        mask_s = time.perf_counter() - t
        done: list[_Request] = []
        for r, x in zip(running, logits):
            try:
                if r.slot in failed:
                    raise _RequestFailed(failed[r.slot])
                mask_s += self._advance(r, x)
            except _RequestFailed as exc:
                self._end(r, r.stops.flush(), "error", str(exc))
            except Exception as exc:
                self._end(r, r.stops.flush(), "error", f"{type(exc).__name__}: {exc}")
            if r.handle.finished:
                done.append(r)
        st["mask_s"] += mask_s
        for r in done:
            self._release(r)

    def _decode_apart(self, running: list[_Request]) -> tuple[list[_Request], list[Any]]:
        """After a batched decode raised: decode each request alone (its cache back to what it held),
        so one request the model fails on ends with ``"error"`` and the others go on. Returns the
        requests that decoded and their logits."""
        ok: list[_Request] = []
        logits: list[Any] = []
        for r in list(running):
            try:
                self._seqs.truncate(r.slot, r.n_cached)
                (x,) = self._seqs.decode([(r.slot, r.n_cached, r.tokens[r.n_cached:])])
            except Exception as exc:  # noqa: BLE001 - whatever the model raised ends this request only
                self._end(r, r.stops.flush(), "error", f"the model failed: {type(exc).__name__}: {exc}")
                self._release(r)
                continue
            ok.append(r)
            logits.append(x)
        return ok, logits

    def _fill_masks(self, requests: list[_Request]) -> dict[int, str]:
        """Worker thread: fill each request's row (its slot) of the bitmask; ``{slot: error}`` for
        the matchers that raised."""
        matchers = [r.matcher for r in requests]
        try:
            fill_next_token_bitmasks(matchers, self._bitmask, [r.slot for r in requests])  # type: ignore[arg-type]
            return {}
        except Exception:
            failed: dict[int, str] = {}
            for r in requests:
                try:
                    r.matcher.fill_next_token_bitmask(self._bitmask, r.slot)  # type: ignore[union-attr]
                except Exception as exc:
                    failed[r.slot] = f"the constraint failed to compute a mask: {type(exc).__name__}: {exc}"
            return failed

    def _advance(self, r: _Request, logits: np.ndarray) -> float:
        """Sample and accept one token for ``r`` and push its delta; returns the seconds spent
        applying its mask."""
        p, tok = r.params, self.tokenizer
        mask_s = 0.0
        if r.matcher is not None and r.matcher.is_error():  # a custom recognizer failed on this row only
            raise _RequestFailed(f"the custom recognizer failed: {r.matcher.get_error()}")
        if r.matcher is not None:
            t = time.perf_counter()
            apply_token_bitmask_inplace(logits, self._bitmask[r.slot])
            mask_s = time.perf_counter() - t
        elif p.ignore_eos:
            logits[self._never_text[self._never_text < len(logits)]] = -np.inf
        token = sample_token(logits, r.rng, p.temperature, p.top_p)
        if not np.isfinite(logits[token]):
            raise _RequestFailed("the constraint allows no token here" if r.matcher is not None
                                 else "the model's logits are not finite")
        if r.matcher is not None and not r.matcher.accept_token(token):
            raise _RequestFailed(f"token {token} was sampled although the constraint forbids it")
        if token in self._eos or token >= tok.n_tokens or token in tok.special_ids:
            self._end(r, r.stops.flush() + r.decoder.decode(b"", final=True), "stop")
            return mask_s
        r.tokens.append(token)
        r.handle.completion_tokens += 1
        self._stats["tokens_generated"] += 1
        text, stopped = r.stops.push(r.decoder.decode(tok.tokens[token]))
        if stopped:
            self._end(r, text, "stop", token_ids=[token])
        elif r.handle.completion_tokens >= p.max_tokens or len(r.tokens) >= r.limit:
            tail, stopped = r.stops.push(r.decoder.decode(b"", final=True))
            self._end(r, text + tail + r.stops.flush(), "stop" if stopped else "length", token_ids=[token])
        else:
            r.handle._push(Delta(text, [token]))
        return mask_s

    def _preempt(self) -> None:
        """While the running requests' tokens outgrow the shared cache, send the latest admitted
        back to the head of the queue (its tokens are computed again when it returns)."""
        if self.capacity is None:
            return
        while len(self._running) > 1 and sum(len(r.tokens) for r in self._running) > self.capacity:
            r = max(self._running, key=lambda x: x.order)
            self._running.remove(r)
            self._free_slot(r)
            r.n_cached = 0
            self._stats["preemptions"] += 1
            with self._cond:
                self._waiting.appendleft(r)

    def _end(self, r: _Request, text: str, reason: str, error: str | None = None,
             token_ids: list[int] | None = None) -> None:
        if not r.handle.finished:
            self._stats["requests_finished"] += 1
            if reason in ("cancelled", "error"):
                self._stats["requests_cancelled" if reason == "cancelled" else "requests_failed"] += 1
            r.handle._push(Delta(text, token_ids or [], reason, error))

    def _free_slot(self, r: _Request) -> None:
        if r.slot >= 0:
            try:
                self._seqs.truncate(r.slot, 0)
            finally:
                self._free.append(r.slot)
                r.slot = -1

    def _release(self, r: _Request, text: str = "", reason: str | None = None) -> None:
        """Remove a running request (ending it with ``reason`` if given) and free its slot."""
        if reason is not None:
            self._end(r, text, reason)
        self._running.remove(r)
        self._free_slot(r)

    def _fail_running(self, message: str) -> None:
        for r in list(self._running):
            self._end(r, "", "error", message)
            try:
                self._release(r)
            except Exception:
                pass


def _context_limit(model: Any) -> int | None:
    """The most tokens one sequence of ``model`` may hold, where the model tells."""
    n = getattr(model, "n_ctx", None)
    if callable(n):
        n = n()
    if n is None and hasattr(model, "llm"):
        n = model.llm.n_ctx()
    if n is None:
        config = getattr(getattr(model, "model", None), "config", None)
        n = getattr(config, "max_position_embeddings", None)
    return int(n) if n else None
