"""Driving controllers with a model: the runtime.

``run_controller(factory, model, prompt)`` creates the root controller, calls ``init_prompt`` and
``pre_process``, then at every step: acts on each sequence's ``pre_process`` (forking, suspending
or stopping it), takes its ``mid_process`` (a bitmask to sample the next token under, or a
splice), appends the tokens, and runs one chain ``post_process`` → ``pre_process`` →
``mid_process`` per sequence (``run_chain``: it stops at anything but ``Continue``), during which
the model's forward pass for those sequences runs (``overlap``). Controllers that run elsewhere
(``PipelinedController``: worker processes) get every chain before any is collected. Forked
sequences run side by side; they share the request's variables. As in AICI, a sampled EOS does
not end a sequence by itself: its controller decides (``Stop``).

Each sequence keeps its own token list. A model that runs many sequences (``model.sequences(n)``,
as ``LlamaCppModel`` and ``TransformersModel`` do) gives each its own cache slot: a fork shares
its parent's cache and one decode call runs the new tokens of every sequence. Any other ``Model``
has one KV cache, moved between sequences by keeping the common prefix and re-running the rest.
A controller that raises, breaks the protocol or overruns its time limit ends only its own
sequence, with the cause in its log; the others go on. In process, time limits are checked when
a call returns (a call that never returns is not interrupted); worker processes are killed.
"""
from __future__ import annotations

import itertools
import operator
import time
import traceback
from abc import abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..bitmask import apply_token_bitmask_inplace
from ..decoding import prompt_ids, sample_token
from .protocol import (
    Continue,
    Controller,
    ControllerError,
    ControllerHost,
    ControllerStartError,
    Fork,
    SampleWithBias,
    Splice,
    Stop,
    Suspend,
    VariableStore,
)

if TYPE_CHECKING:  # a duck-typed model: logitgate.integrations.models.Model
    from ..integrations.models import Model

__all__ = ["Limits", "SequenceResult", "RunResult", "run_controller", "run_chain", "PipelinedController", "CallFailed"]


@dataclass(frozen=True)
class Limits:
    """Per-call time limits in seconds (AICI's are 1000 ms / 1 ms / 20 ms / 1 ms for native code;
    these defaults leave room for Python controllers that compile constraints in ``mid_process``).
    Each call of a chain keeps its own limit."""

    init_prompt: float = 10.0
    pre_process: float = 1.0
    mid_process: float = 5.0
    post_process: float = 1.0
    fork: float = 10.0
    """Cloning a controller (a script replays its history to get there)."""
    max_sequences: int = 64
    """Sequences one request may create in all (ended ones included); a fork past it ends the
    forking sequence with an error."""
    max_suspended_rounds: int = 64
    """Rounds in which every live sequence is suspended before they are all stopped (a deadlock)."""
    max_variables_bytes: int = 64 << 20
    """The request's shared variables, names and values together; a ``set``/``append`` past it
    raises ``ControllerError`` in the controller that made it."""
    max_run_seconds: float | None = 300.0
    """Wall time of a whole run (every call limit holds, but 64 sequences x many steps add up);
    past it every live sequence ends with an error naming this limit. None: no limit."""


@dataclass
class SequenceResult:
    """One sequence of a run: what it generated (the prompt excluded), its log, why it ended."""

    seq_id: int
    tokens: list[int]
    text: str
    log: str
    stop_reason: str
    error: str | None = None
    sampled_tokens: int = 0
    """How many of the tokens appended along the way the model sampled (the others were spliced)."""


@dataclass
class RunResult:
    """What ``run_controller`` returns: each sequence's result, the shared variables, the number of
    steps and the wall time."""
    sequences: list[SequenceResult]
    variables: dict[str, bytes]
    steps: int = 0
    seconds: float = 0.0


@dataclass
class _Seq:
    seq_id: int
    controller: Controller
    host: ControllerHost
    prompt_len: int
    fork_group: list[int] = field(default_factory=list)
    done: str | None = None
    error: str | None = None
    suspended: bool = False
    pre: object | None = None
    """The result of a ``pre_process`` that ran in the last chain, not yet acted on."""
    mid: object | None = None
    """The result of a ``mid_process`` that ran in the last chain, not yet acted on."""
    logits: np.ndarray | None = None
    logits_for: list[int] | None = None
    """The tokens ``logits`` were computed for."""
    sampled: int = 0
    """Tokens the model sampled for this sequence (the rest were spliced in)."""


def _reusable_prefix(cached: Sequence[int], tokens: Sequence[int]) -> int:
    """How many cached tokens ``tokens`` can keep: their common prefix, leaving at least one token
    of ``tokens`` to run (a forward pass is what gives logits)."""
    k, limit = 0, min(len(cached), len(tokens) - 1)
    while k < limit and cached[k] == tokens[k]:
        k += 1
    return k


class _ModelCache:
    """Moves the model's single KV cache between sequences: keep the common prefix, run the rest."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens: list[int] = []
        model.reset()

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        k = _reusable_prefix(self.tokens, tokens)
        if k < len(self.tokens):
            self.model.truncate(k)
            del self.tokens[k:]
        out = self.model.forward(list(tokens[k:]))
        self.tokens.extend(tokens[k:])
        return out

    def logits_many(self, requests: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        return [self.logits(tokens) for _, tokens in requests]

    def fork(self, parent: int, child: int) -> None:
        pass

    def release(self, seq_id: int) -> None:
        pass


class _BatchedCache:
    """Every sequence in its own slot of a multi-sequence model (``model.sequences(n)``, e.g.
    ``LlamaCppSequences``): a fork shares its parent's cache, and one decode runs every sequence's
    new tokens."""

    def __init__(self, seqs: object, n_slots: int) -> None:
        self.seqs = seqs
        self.free = list(range(n_slots - 1, -1, -1))
        self.slot: dict[int, int] = {}
        self.tokens: dict[int, list[int]] = {}

    def _slot(self, seq_id: int) -> int:
        if seq_id not in self.slot:
            if not self.free:
                raise ControllerError("no free sequence slot in the model's context")
            self.slot[seq_id] = self.free.pop()
            self.tokens[seq_id] = []
            self.seqs.truncate(self.slot[seq_id], 0)  # type: ignore[attr-defined]
        return self.slot[seq_id]

    def fork(self, parent: int, child: int) -> None:
        if parent in self.slot:
            dst = self._slot(child)
            self.seqs.copy(self.slot[parent], dst, len(self.tokens[parent]))  # type: ignore[attr-defined]
            self.tokens[child] = list(self.tokens[parent])

    def release(self, seq_id: int) -> None:
        slot = self.slot.pop(seq_id, None)
        if slot is not None:
            self.seqs.truncate(slot, 0)  # type: ignore[attr-defined]
            self.free.append(slot)
            del self.tokens[seq_id]

    def logits_many(self, requests: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        items = []
        for seq_id, tokens in requests:
            slot = self._slot(seq_id)
            have = self.tokens[seq_id]
            k = _reusable_prefix(have, tokens)
            if k < len(have):
                self.seqs.truncate(slot, k)  # type: ignore[attr-defined]
            items.append((slot, k, list(tokens[k:])))
            self.tokens[seq_id] = list(tokens)
        return self.seqs.decode(items) if items else []  # type: ignore[attr-defined]


Call = tuple[str, tuple]
"""One controller call of a chain: the method name and its arguments."""


class CallFailed(Exception):
    """A call of a chain raised (``call`` names it); ``__cause__`` is the controller's exception."""

    def __init__(self, call: str, exc: BaseException) -> None:
        super().__init__(f"{call} raised {type(exc).__name__}: {exc}")
        self.call = call
        self.exc = exc


_CHAIN_BREAKS = ("post_process", "pre_process")


def run_chain(controller: Controller, calls: Sequence[Call], *, on_call: Callable[[int], None] | None = None,
              paused: Callable[[], float] | None = None,
              catch: type[BaseException] = Exception) -> tuple[list[object], list[float]]:
    """Run ``calls`` on ``controller`` in order, stopping after a ``post_process`` or ``pre_process``
    whose result is not ``Continue`` (the runtime must see a stop, a suspension or a fork before
    anything else runs). Returns the results and each call's seconds; raises ``CallFailed`` when a
    call raises ``catch``.

    A worker process passes ``on_call(i)`` (told as call ``i`` starts), ``paused()`` (the seconds
    its controller has waited on the runtime so far: left out of each call's time) and
    ``catch=BaseException`` (everything goes back to the runtime)."""
    results: list[object] = []
    times: list[float] = []
    for i, (name, args) in enumerate(calls):
        if on_call is not None:
            on_call(i)
        waited = paused() if paused is not None else 0.0
        t = time.perf_counter()
        try:
            r = getattr(controller, name)(*args)
        except catch as exc:
            raise CallFailed(name, exc) from exc
        dt = time.perf_counter() - t
        if paused is not None:
            dt -= paused() - waited
        times.append(dt)
        results.append(r)
        if name in _CHAIN_BREAKS and not isinstance(r, Continue):
            break
    return results, times


class PipelinedController(Controller):
    """A controller whose calls run elsewhere (a worker process): the runner starts a chain of calls
    on every sequence (``start_calls``) before it collects any result (``finish_many``), so the
    controllers run in parallel with each other and with the model's forward pass. The chain
    follows ``run_chain``'s rule."""

    @abstractmethod
    def start_calls(self, calls: Sequence[Call]) -> None:
        """Send the chain; return at once."""

    @abstractmethod
    def finish_calls(self) -> tuple[list[object], list[float]]:
        """The chain's results and each call's seconds (``CallFailed`` or a ``ControllerError``
        if it failed)."""

    @classmethod
    def finish_many(cls, controllers: Sequence["PipelinedController"]) -> list[tuple | BaseException]:
        """``finish_calls`` of each controller (an exception in place of a failed chain's result)."""
        out: list[tuple | BaseException] = []
        for c in controllers:
            try:
                out.append(c.finish_calls())
            except Exception as exc:  # noqa: BLE001
                out.append(exc)
        return out


def _forward(cache: _ModelCache | _BatchedCache, seqs: list[_Seq]) -> float:
    """The model's logits for each sequence's tokens (one batch where the model runs many); the
    seconds it took."""
    if not seqs:
        return 0.0
    t = time.perf_counter()
    requests = [(s.seq_id, list(s.host.tokens)) for s in seqs]
    for s, (_, toks), x in zip(seqs, requests, cache.logits_many(requests)):
        s.logits, s.logits_for = x, toks
    return time.perf_counter() - t


def run_controller(controller_factory: Callable[[ControllerHost], Controller], model: Model,
                   prompt: str | Sequence[int] | Sequence[Mapping[str, str]], *, max_tokens: int = 200,
                   temperature: float = 0.0, seed: int | None = 0, limits: Limits = Limits(),
                   overlap: bool = True,
                   on_event: Callable[[int, str, str], None] | None = None) -> RunResult:
    """Run a controller (and its forks) on ``model`` from ``prompt``.

    ``controller_factory(host)`` builds the root controller. ``max_tokens`` bounds each sequence's
    generated tokens. ``on_event(seq_id, kind, data)`` streams ``"sampled"`` or ``"spliced"`` (how
    many tokens were appended, and how), then ``"text"`` (their text), ``"log"`` (new log output),
    ``"fork"`` (the new ids) and ``"end"`` (the stop reason).

    Each step runs, for every sequence that got tokens, one chain ``post_process`` →
    ``pre_process`` → ``mid_process`` (the last two only while the previous said ``Continue``).
    With ``overlap=True`` (the default) the model's forward pass for those sequences runs
    meanwhile (see ``chains`` below), so the controllers' work hides behind it; a sequence whose
    ``mid_process`` then splices wastes that pass (its cache is kept). ``overlap=False`` runs the
    model only for sequences that sample, after their ``mid_process``.
    """
    t_start = time.perf_counter()
    tok = model.tokenizer
    rng = np.random.default_rng(seed) if temperature > 0 else None
    variables = VariableStore(limits.max_variables_bytes)
    prompt_tokens = prompt_ids(model, prompt)
    sequences = getattr(model, "sequences", None)
    cache: _ModelCache | _BatchedCache = (
        _BatchedCache(sequences(limits.max_sequences), limits.max_sequences) if callable(sequences)
        else _ModelCache(model))
    pool: ThreadPoolExecutor | None = None  # runs in-process controllers during the forward pass
    forward_s = 0.0  # the latest forward pass: a thread is worth it only beside a slow one

    def forward(seqs: list[_Seq]) -> None:
        nonlocal forward_s
        if seqs:
            forward_s = _forward(cache, seqs)

    def tokenize_bytes(data: bytes) -> list[int]:
        ids = model.encode_bytes(bytes(data))
        if ids is None:
            raise ControllerError(f"the model's tokenizer cannot tokenize {bytes(data)[:40]!r} exactly")
        return ids

    root_host = ControllerHost(tok, tokenize_bytes, variables, 0, tokens=list(prompt_tokens))
    seqs: list[_Seq] = []
    log_seen: dict[int, int] = {}
    next_id = 1

    def emit(seq: _Seq, kind: str, data: str) -> None:
        if on_event is not None:
            on_event(seq.seq_id, kind, data)

    def flush_log(seq: _Seq) -> None:
        text = seq.host.log.getvalue()
        start = log_seen.get(seq.seq_id, 0)
        if len(text) > start:
            log_seen[seq.seq_id] = len(text)
            emit(seq, "log", text[start:])

    def end(seq: _Seq, reason: str, error: str | None = None) -> None:
        if seq.done is None:
            seq.done = reason
            seq.error = error
            seq.logits = None
            try:
                seq.controller.close()
            except Exception as exc:  # a failing close must not stop the others
                seq.host.log.write(f"\n[logitgate] close() raised {type(exc).__name__}: {exc}\n")
            if error:
                seq.host.log.write(f"\n[logitgate] sequence {seq.seq_id} ended: {error}\n")
            flush_log(seq)
            emit(seq, "end", reason)

    def failed(seq: _Seq, what: str, exc: BaseException) -> None:
        """A call raised (or its worker failed): end the sequence with the cause."""
        if isinstance(exc, CallFailed):
            what, exc = exc.call, exc.exc
        what = getattr(exc, "call", None) or what  # a timeout names the call of the chain that overran
        if not getattr(exc, "logged", False):  # a worker's failure is in the log already
            seq.host.log.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        end(seq, "error", f"{what} raised {type(exc).__name__}: {exc}")

    def chains(batch: list[tuple[_Seq, list[Call]]],
               during: Callable[[], None] | None = None) -> list[tuple[_Seq, list[object]]]:
        """Run a chain of calls on each sequence; the results of those that did not fail or overrun
        a limit. ``during`` (the model's forward pass) runs on this thread meanwhile: controllers in
        worker processes are all started before it; in-process controllers run, and the workers'
        replies are collected, on a background thread (Python that runs while the model's native
        code releases the GIL) when the model's last pass took over a millisecond (else a thread
        costs more than it hides); otherwise both happen here, after the pass."""
        nonlocal pool
        remote = [(s, c) for s, c in batch if isinstance(s.controller, PipelinedController)]
        local = [(s, c) for s, c in batch if not isinstance(s.controller, PipelinedController)]
        done: dict[int, tuple | BaseException] = {}

        def run_local() -> None:
            for s, c in local:
                try:
                    done[s.seq_id] = run_chain(s.controller, c)
                except Exception as exc:  # noqa: BLE001
                    done[s.seq_id] = exc

        def collect() -> None:
            started = [s for s, _ in remote if s.seq_id not in done]
            if started:
                outcomes = type(started[0].controller).finish_many([s.controller for s in started])  # type: ignore
                done.update((s.seq_id, o) for s, o in zip(started, outcomes))

        def background() -> None:
            run_local()
            collect()

        for s, c in remote:
            try:
                s.controller.start_calls(c)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001
                done[s.seq_id] = exc
        job: Future | None = None
        try:
            if batch and during is not None and forward_s > 1e-3:
                if pool is None:
                    pool = ThreadPoolExecutor(1, thread_name_prefix="logitgate-controllers")
                job = pool.submit(background)
            else:
                run_local()
            if during is not None:
                during()
        finally:
            if job is not None:
                job.result()
            else:
                collect()
        out = []
        for s, c in batch:
            o = done.get(s.seq_id)
            if isinstance(o, BaseException):
                failed(s, c[0][0], o)
            elif o is not None:
                results, times = o
                for (name, _), dt in zip(c, times):
                    limit = getattr(limits, name)
                    if dt > limit:
                        end(s, "error", f"{name} took {dt * 1e3:.0f} ms, over its limit of {limit * 1e3:.0f} ms")
                        break
                else:
                    out.append((s, list(results)))
            flush_log(s)
        return out

    try:
        root = controller_factory(root_host)
    except Exception as exc:
        raise ControllerStartError(f"the controller could not be created: {type(exc).__name__}: {exc}",
                                   root_host.log.getvalue()) from exc
    first = _Seq(0, root, root_host, len(prompt_tokens))
    seqs.append(first)
    try:
        for s, res in chains([(first, [("init_prompt", (list(prompt_tokens),)), ("pre_process", ())])]):
            s.pre = res[1] if len(res) > 1 else None
            if len(res) < 2:
                end(s, "error", "init_prompt did not run")
        steps = 0
        idle_rounds = 0
        while True:
            live = [s for s in seqs if s.done is None]
            if not live:
                break
            if limits.max_run_seconds is not None and time.perf_counter() - t_start > limits.max_run_seconds:
                for s in live:
                    end(s, "error", f"the run took over Limits.max_run_seconds={limits.max_run_seconds:g} s")
                break
            steps += 1
            # pre_process where no chain gave it (a sequence suspended last round)
            need = [s for s in live if s.pre is None]
            for s, res in chains([(s, [("pre_process", ())]) for s in need]):
                s.pre = res[0]
            # stop, suspend, fork
            for seq in live:
                r, seq.pre = seq.pre, None
                seq.suspended = False
                if seq.done is not None:
                    continue
                if isinstance(r, Stop):
                    end(seq, "stop")
                elif isinstance(r, Suspend):
                    seq.suspended = True
                    seq.mid = None
                elif isinstance(r, Fork):
                    seq.mid = None
                    if len(seqs) + r.num_forks - 1 > limits.max_sequences:  # ended ones count: no churning
                        end(seq, "error", f"fork({r.num_forks}) would exceed {limits.max_sequences} sequences "
                                          "for this request")
                        continue
                    group = [seq.seq_id]
                    for _ in range(r.num_forks - 1):
                        host = seq.host.clone_for(next_id)
                        t = time.perf_counter()
                        try:
                            clone = seq.controller.fork(host)
                        except Exception as exc:  # noqa: BLE001
                            failed(seq, "fork", exc)
                            break
                        dt = time.perf_counter() - t
                        if dt > limits.fork:
                            end(seq, "error", f"fork took {dt * 1e3:.0f} ms, over its limit of "
                                              f"{limits.fork * 1e3:.0f} ms")
                            clone.close()
                            break
                        twin = _Seq(next_id, clone, host, seq.prompt_len)
                        cache.fork(seq.seq_id, next_id)
                        if seq.logits is not None:  # same tokens, same logits
                            twin.logits, twin.logits_for = seq.logits.copy(), seq.logits_for
                        seqs.append(twin)
                        group.append(next_id)
                        next_id += 1
                    if seq.done is not None:
                        continue
                    for s in seqs:
                        if s.seq_id in group:
                            s.fork_group = list(group)
                    emit(seq, "fork", ",".join(map(str, group[1:])))
                elif isinstance(r, Continue):
                    if not seq.fork_group:
                        seq.fork_group = [seq.seq_id]
                else:
                    end(seq, "error", f"pre_process returned {r!r}, not Continue/Stop/Suspend/Fork")
            runnable = [s for s in seqs if s.done is None and not s.suspended]
            if not runnable:
                idle_rounds += 1
                if idle_rounds > limits.max_suspended_rounds:
                    for s in seqs:
                        end(s, "error", "deadlock: every sequence waits (Suspend) for something no sequence will do")
                continue
            idle_rounds = 0
            # mid_process where no chain gave it (after a fork or a suspension, and the first step);
            # with overlap, the forward pass of those sequences meanwhile
            need = [s for s in runnable if s.mid is None]
            pass_for = [s for s in need if s.logits is None and s.host.tokens] if overlap else []
            for s, res in chains([(s, [("mid_process", (list(s.fork_group or [s.seq_id]),))]) for s in need],
                                 (lambda f=pass_for: forward(f)) if pass_for else None):
                s.mid = res[0]
            # the tokens: sampled under the mask (the logits of every sampling sequence first, in one
            # batch where they are missing), or spliced
            steps_of: list[tuple[_Seq, object]] = []
            for seq in runnable:
                r, seq.mid = seq.mid, None
                if seq.done is not None:
                    continue
                if seq.logits is not None and seq.logits_for != seq.host.tokens:
                    seq.logits = None  # the controller edited its tokens after the pass started
                if isinstance(r, Stop):
                    end(seq, "stop")
                elif isinstance(r, SampleWithBias) and not seq.host.tokens:
                    end(seq, "error", "cannot sample after an empty sequence: give a prompt or force text first")
                elif isinstance(r, (SampleWithBias, Splice)):
                    steps_of.append((seq, r))
                else:
                    end(seq, "error", f"mid_process returned {r!r}, not SampleWithBias/Splice/Stop")
            forward([s for s, r in steps_of if isinstance(r, SampleWithBias) and s.logits is None])
            appended: list[tuple[_Seq, list[int], int]] = []
            for seq, r in steps_of:
                logits, seq.logits = seq.logits, None
                host = seq.host
                backtrack = 0
                if isinstance(r, SampleWithBias):
                    assert logits is not None
                    if r.bitmask is not None:
                        bm = np.asarray(r.bitmask)
                        if bm.dtype != np.int32 or bm.ndim != 1 or bm.shape[0] * 32 < tok.n_tokens:
                            end(seq, "error", f"mid_process returned a bitmask of {bm.dtype} {bm.shape}, "
                                              f"not int32 words covering {tok.n_tokens} tokens")
                            continue
                        apply_token_bitmask_inplace(logits, bm)
                    token = sample_token(logits, rng, temperature)
                    if not np.isfinite(logits[token]):  # the best logit is -inf: nothing is allowed
                        end(seq, "error", "the bitmask allows no token")
                        continue
                    new = [token]
                else:
                    assert isinstance(r, Splice)
                    backtrack = r.backtrack
                    generated = len(host.tokens) - seq.prompt_len
                    if backtrack > generated:
                        end(seq, "error", f"Splice backtracks {backtrack} tokens but only {generated} were generated")
                        continue
                    room = max_tokens - (generated - backtrack)  # a splice is cut at max_tokens
                    try:
                        new = [operator.index(t) for t in itertools.islice(r.ff_tokens, max(room, 0))]
                    except TypeError as exc:
                        end(seq, "error", f"Splice has a token id that is not an integer: {exc}")
                        continue
                    bad = [t for t in new if not 0 <= t < tok.vocab_size]
                    if bad:
                        end(seq, "error", f"Splice has {len(bad)} token ids outside the vocabulary [0, {tok.vocab_size})"
                                          f": {bad[:8]}{' ...' if len(bad) > 8 else ''}")
                        continue
                if backtrack:
                    del host.tokens[len(host.tokens) - backtrack:]
                host.tokens.extend(new)
                if isinstance(r, SampleWithBias):
                    seq.sampled += 1
                if new:
                    emit(seq, "sampled" if isinstance(r, SampleWithBias) else "spliced", str(len(new)))
                    emit(seq, "text", tok.decode_bytes([t for t in new if t not in tok.special_ids]).decode(
                        "utf-8", errors="replace"))
                appended.append((seq, new, backtrack))
            # post_process, and (merged into the same call) the next pre_process and mid_process;
            # the next forward pass overlaps them
            for seq in seqs:
                if seq.done is not None:
                    cache.release(seq.seq_id)
            batch: list[tuple[_Seq, list[Call]]] = []
            for seq, new, backtrack in appended:
                calls: list[Call] = [("post_process", (new, backtrack))]
                if len(seq.host.tokens) - seq.prompt_len < max_tokens:
                    calls += [("pre_process", ()), ("mid_process", (list(seq.fork_group or [seq.seq_id]),))]
                batch.append((seq, calls))
            pass_for = [s for s, c in batch if len(c) > 1] if overlap else []
            for seq, res in chains(batch, (lambda f=pass_for: forward(f)) if pass_for else None):
                post = res[0]
                if isinstance(post, Stop):
                    end(seq, "stop")
                elif not isinstance(post, Continue):
                    end(seq, "error", f"post_process returned {post!r}, not Continue/Stop")
                elif len(seq.host.tokens) - seq.prompt_len >= max_tokens:
                    end(seq, "length")
                else:
                    seq.pre = res[1]
                    seq.mid = res[2] if len(res) > 2 else None
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for s in seqs:
            if s.done is None:
                try:
                    s.controller.close()
                except Exception:  # noqa: BLE001, S110
                    pass
    results = []
    for s in seqs:
        out = s.host.tokens[s.prompt_len:]
        text_ids = [t for t in out if t not in tok.special_ids]
        results.append(SequenceResult(s.seq_id, out, tok.decode_bytes(text_ids).decode("utf-8", errors="replace"),
                                      s.host.log.getvalue(), s.done or "stop", s.error, s.sampled))
    return RunResult(results, variables.snapshot(), steps, time.perf_counter() - t_start)
