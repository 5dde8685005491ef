"""Driving controllers with a model: the in-process runtime.

``run_controller(factory, model, prompt)`` creates the root controller, then at every step calls
``pre_process`` on each live sequence (forking, suspending or stopping it), ``mid_process`` (a
bitmask to sample the next token under, or a splice), appends the tokens, and calls
``post_process``. Forked sequences run side by side; they share the request's variables. As in
AICI, a sampled EOS does not end a sequence by itself: its controller decides (``Stop``).

Each sequence keeps its own token list. A model that runs many sequences (``model.sequences(n)``,
as ``LlamaCppModel`` does) gives each its own cache slot: a fork shares its parent's cache and one
decode call runs the new tokens of every sequence that samples. Any other ``Model`` has one KV
cache, moved between sequences by keeping the common prefix and re-running the rest. A controller that raises, breaks the protocol or overruns its time limit
ends only its own sequence, with the cause in its log; the others go on. Time limits are checked
when a call returns (a call that never returns is not interrupted in-process).
"""
from __future__ import annotations

import time
import traceback
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
    Fork,
    SampleWithBias,
    Splice,
    Stop,
    Suspend,
    VariableStore,
)

if TYPE_CHECKING:  # a duck-typed model: logitgate.integrations.models.Model
    from ..integrations.models import Model

__all__ = ["Limits", "SequenceResult", "RunResult", "run_controller"]


@dataclass(frozen=True)
class Limits:
    """Per-call time limits in seconds (AICI's are 1000 ms / 1 ms / 20 ms / 1 ms for native code;
    these defaults leave room for Python controllers that compile constraints in ``mid_process``)."""

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


@dataclass
class SequenceResult:
    """One sequence of a run: what it generated (the prompt excluded), its log, why it ended."""

    seq_id: int
    tokens: list[int]
    text: str
    log: str
    stop_reason: str
    error: str | None = None


@dataclass
class RunResult:
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


def run_controller(controller_factory: Callable[[ControllerHost], Controller], model: Model,
                   prompt: str | Sequence[int] | Sequence[Mapping[str, str]], *, max_tokens: int = 200,
                   temperature: float = 0.0, seed: int | None = 0, limits: Limits = Limits(),
                   on_event: Callable[[int, str, str], None] | None = None) -> RunResult:
    """Run a controller (and its forks) on ``model`` from ``prompt``.

    ``controller_factory(host)`` builds the root controller. ``max_tokens`` bounds each sequence's
    generated tokens. ``on_event(seq_id, kind, data)`` streams ``"text"`` (newly appended text),
    ``"log"`` (new log output), ``"fork"`` (the new ids) and ``"end"`` (the stop reason).
    """
    t_start = time.perf_counter()
    tok = model.tokenizer
    rng = np.random.default_rng(seed) if temperature > 0 else None
    variables = VariableStore()
    prompt_tokens = prompt_ids(model, prompt)
    sequences = getattr(model, "sequences", None)
    cache: _ModelCache | _BatchedCache = (
        _BatchedCache(sequences(limits.max_sequences), limits.max_sequences) if callable(sequences)
        else _ModelCache(model))

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
            try:
                seq.controller.close()
            except Exception as exc:  # a failing close must not stop the others
                seq.host.log.write(f"\n[logitgate] close() raised {type(exc).__name__}: {exc}\n")
            if error:
                seq.host.log.write(f"\n[logitgate] sequence {seq.seq_id} ended: {error}\n")
            flush_log(seq)
            emit(seq, "end", reason)

    def call(seq: _Seq, what: str, fn: Callable[[], object]) -> object | None:
        """Run one controller call; on an exception or an overrun, end the sequence and return None."""
        t = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # the controller's own error ends only its sequence
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            seq.host.log.write(tb)
            end(seq, "error", f"{what} raised {type(exc).__name__}: {exc}")
            return None
        dt = time.perf_counter() - t
        limit = getattr(limits, what)
        if dt > limit:
            end(seq, "error", f"{what} took {dt * 1e3:.0f} ms, over its limit of {limit * 1e3:.0f} ms")
            return None
        return out

    try:
        root = controller_factory(root_host)
    except Exception as exc:
        raise ControllerError(f"the controller could not be created: {type(exc).__name__}: {exc}") from exc
    first = _Seq(0, root, root_host, len(prompt_tokens))
    seqs.append(first)
    call(first, "init_prompt", lambda: root.init_prompt(list(prompt_tokens)))
    flush_log(first)
    steps = 0
    idle_rounds = 0
    while True:
        live = [s for s in seqs if s.done is None]
        if not live:
            break
        steps += 1
        # pre_process: stop, suspend, fork
        for seq in live:
            seq.suspended = False
            r = call(seq, "pre_process", seq.controller.pre_process)
            if seq.done is not None:
                continue
            if isinstance(r, Stop):
                end(seq, "stop")
            elif isinstance(r, Suspend):
                seq.suspended = True
            elif isinstance(r, Fork):
                if len(seqs) + r.num_forks - 1 > limits.max_sequences:  # ended ones count: no churning
                    end(seq, "error", f"fork({r.num_forks}) would exceed {limits.max_sequences} sequences "
                                      "for this request")
                    continue
                group = [seq.seq_id]
                for _ in range(r.num_forks - 1):
                    host = seq.host.clone_for(next_id)
                    clone = call(seq, "fork", lambda h=host, s=seq: s.controller.fork(h))
                    if clone is None:
                        break
                    twin = _Seq(next_id, clone, host, seq.prompt_len)  # type: ignore[arg-type]
                    cache.fork(seq.seq_id, next_id)
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
        live = [s for s in seqs if s.done is None and not s.suspended]
        if not live:
            idle_rounds += 1
            if idle_rounds > limits.max_suspended_rounds:
                for s in seqs:
                    end(s, "error", "deadlock: every sequence waits (Suspend) for something no sequence will do")
            continue
        idle_rounds = 0
        # mid_process for every sequence, then the logits of all that sample (one batch where the
        # model runs many sequences), then the tokens and post_process
        steps_of: list[tuple[_Seq, object]] = []
        for seq in live:
            if seq.done is not None:
                continue
            r = call(seq, "mid_process", lambda s=seq: s.controller.mid_process(list(s.fork_group or [s.seq_id])))
            if seq.done is not None:
                continue
            if isinstance(r, Stop):
                end(seq, "stop")
            elif isinstance(r, SampleWithBias) and not seq.host.tokens:
                end(seq, "error", "cannot sample after an empty sequence: give a prompt or force text first")
            elif isinstance(r, (SampleWithBias, Splice)):
                steps_of.append((seq, r))
            else:
                end(seq, "error", f"mid_process returned {r!r}, not SampleWithBias/Splice/Stop")
        sampling = [(seq, r) for seq, r in steps_of if isinstance(r, SampleWithBias)]
        all_logits = cache.logits_many([(seq.seq_id, seq.host.tokens) for seq, _ in sampling])
        sampled = {}
        for (seq, r), logits in zip(sampling, all_logits):
            if r.bitmask is not None:  # type: ignore[union-attr]
                bm = np.asarray(r.bitmask)  # type: ignore[union-attr]
                if bm.dtype != np.int32 or bm.ndim != 1 or bm.shape[0] * 32 < tok.n_tokens:
                    end(seq, "error", f"mid_process returned a bitmask of {bm.dtype} {bm.shape}, "
                                      f"not int32 words covering {tok.n_tokens} tokens")
                    continue
                apply_token_bitmask_inplace(logits, bm)
            token = sample_token(logits, rng, temperature)
            if not np.isfinite(logits[token]):  # the best logit is -inf: nothing is allowed
                end(seq, "error", "the bitmask allows no token")
                continue
            sampled[seq.seq_id] = token
        for seq, r in steps_of:
            if seq.done is not None:
                continue
            host = seq.host
            backtrack = 0
            if isinstance(r, SampleWithBias):
                new = [sampled[seq.seq_id]]
            else:
                assert isinstance(r, Splice)
                backtrack = r.backtrack
                generated = len(host.tokens) - seq.prompt_len
                if backtrack > generated:
                    end(seq, "error", f"Splice backtracks {backtrack} tokens but only {generated} were generated")
                    continue
                new = [int(t) for t in r.ff_tokens]
                if any(not 0 <= t < tok.vocab_size for t in new):
                    end(seq, "error", f"Splice has token ids outside the vocabulary: {new}")
                    continue
            if backtrack:
                del host.tokens[len(host.tokens) - backtrack:]
            host.tokens.extend(new)
            if new:
                emit(seq, "text", tok.decode_bytes([t for t in new if t not in tok.special_ids]).decode(
                    "utf-8", errors="replace"))
            post = call(seq, "post_process", lambda s=seq, n=new, b=backtrack: s.controller.post_process(n, b))
            flush_log(seq)
            if seq.done is not None:
                continue
            if isinstance(post, Stop):
                end(seq, "stop")
            elif not isinstance(post, Continue):
                end(seq, "error", f"post_process returned {post!r}, not Continue/Stop")
            elif len(host.tokens) - seq.prompt_len >= max_tokens:
                end(seq, "length")
        for seq in seqs:
            if seq.done is not None:
                cache.release(seq.seq_id)
    results = []
    for s in seqs:
        out = s.host.tokens[s.prompt_len:]
        text_ids = [t for t in out if t not in tok.special_ids]
        results.append(SequenceResult(s.seq_id, out, tok.decode_bytes(text_ids).decode("utf-8", errors="replace"),
                                      s.host.log.getvalue(), s.done or "stop", s.error))
    return RunResult(results, variables.snapshot(), steps, time.perf_counter() - t_start)
