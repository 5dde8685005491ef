"""The controller protocol (AICI's ``AiciCtrl``): one controller per sequence, called around every
decoding step.

    init_prompt(prompt_tokens)                  once, before generation (long time limit)
    pre_process()            -> Continue | Stop | Suspend | Fork(n)
    mid_process(fork_group)  -> SampleWithBias(bitmask) | Splice(backtrack, ff_tokens) | Stop
    post_process(tokens, backtrack) -> Continue | Stop

``pre_process`` may fork the sequence: the runtime clones the controller (``Controller.fork``) so
that there are ``n`` sequences, which share the request's variables and differ in
``host.seq_id``; ``fork_group`` lists their ids, this sequence's among them. ``mid_process``
either asks the runtime to sample one token under a bitmask (``None``: any token) or splices:
removes the last ``backtrack`` tokens and appends ``ff_tokens`` without sampling.
``post_process`` sees the tokens that were appended (the sampled one, or the spliced ones).

A controller talks to the runtime through its ``ControllerHost`` (the seed's host functions):
the vocabulary and tokenizer, its own sequence id, the request's variables, and its log.
"""
from __future__ import annotations

import io
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

import numpy as np

from ..vocab import Tokenizer

__all__ = [
    "Continue", "Stop", "Suspend", "Fork", "SampleWithBias", "Splice",
    "PreResult", "MidResult", "PostResult",
    "Controller", "ControllerHost", "VariableStore", "ControllerError", "ControllerStartError",
]


class ControllerError(Exception):
    """A controller broke the protocol (a wrong result type, an impossible backtrack, ...)."""


class ControllerStartError(ControllerError):
    """The root controller could not be created (``run_controller`` raises it): ``log`` holds what
    it wrote before it failed (a Wasm start function's log, a worker's traceback)."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class Continue:
    """Go on (``pre_process``: the same as ``Fork(1)``)."""


@dataclass(frozen=True)
class Stop:
    """End this sequence."""

    reason: str = ""


@dataclass(frozen=True)
class Suspend:
    """Skip this round (e.g. waiting for a variable another branch sets)."""


@dataclass(frozen=True)
class Fork:
    """Split into ``num_forks`` sequences (this one and ``num_forks - 1`` clones)."""

    num_forks: int

    def __post_init__(self) -> None:
        if not isinstance(self.num_forks, int) or self.num_forks < 1:
            raise ControllerError(f"Fork needs num_forks >= 1, got {self.num_forks!r}")


@dataclass(frozen=True)
class SampleWithBias:
    """Sample the next token among those allowed by ``bitmask`` (int32 words, bit ``t % 32`` of word
    ``t // 32`` allows token ``t``, as ``logitgate.allocate_token_bitmask``); ``None`` allows all."""

    bitmask: np.ndarray | None = None


@dataclass(frozen=True)
class Splice:
    """Remove the last ``backtrack`` tokens and append ``ff_tokens`` without sampling them."""

    backtrack: int = 0
    ff_tokens: Sequence[int] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.backtrack, int) or self.backtrack < 0:
            raise ControllerError(f"Splice needs backtrack >= 0, got {self.backtrack!r}")


PreResult = Union[Continue, Stop, Suspend, Fork]
"""What ``pre_process`` may return."""
MidResult = Union[SampleWithBias, Splice, Stop]
"""What ``mid_process`` may return."""
PostResult = Union[Continue, Stop]
"""What ``post_process`` may return."""


class VariableStore:
    """Variables shared by all sequences of one request: ``get``/``set``/``append`` of bytes.
    ``max_bytes`` bounds their names and values together (``None``: no bound); a ``set`` or
    ``append`` past it raises ``ControllerError`` and changes nothing."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self._vars: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self._bytes = 0

    def get(self, name: str) -> bytes | None:
        """The value of variable ``name``, or None when it is not set."""
        with self._lock:
            return self._vars.get(name)

    def _store(self, name: str, value: bytes) -> None:
        """Set ``name`` (the lock held), within ``max_bytes``."""
        old = self._vars.get(name)
        size = self._bytes + len(value) - (len(old) if old is not None else -len(name.encode()))
        if self.max_bytes is not None and size > self.max_bytes:
            raise ControllerError(f"variable {name[:40]!r}: the request's variables would hold {size} bytes, over "
                                  f"their limit of {self.max_bytes} bytes")
        self._vars[name] = value
        self._bytes = size

    def set(self, name: str, value: bytes | str) -> None:
        """Set variable ``name`` to ``value`` (a str is stored UTF-8 encoded)."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        with self._lock:
            self._store(name, data)

    def append(self, name: str, value: bytes | str) -> None:
        """Append ``value`` to variable ``name`` (created empty if missing)."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        with self._lock:
            self._store(name, self._vars.get(name, b"") + data)

    def snapshot(self) -> dict[str, bytes]:
        """A copy of every variable."""
        with self._lock:
            return dict(self._vars)


@dataclass
class ControllerHost:
    """What a controller may ask of the runtime (the seed's host functions), for one sequence."""

    tokenizer: Tokenizer
    tokenize_bytes: Callable[[bytes], list[int]]
    """The model's tokenization of bytes (no special tokens)."""
    variables: VariableStore
    seq_id: int = 0
    log: io.StringIO = field(default_factory=io.StringIO)
    """Everything the controller printed, and its errors."""
    tokens: list[int] = field(default_factory=list)
    """The sequence so far, prompt included (kept by the runtime)."""

    @property
    def eos_token(self) -> int:
        """The first EOS id of the vocabulary."""
        return self.tokenizer.eos_token_ids[0]

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """The bytes of ``tokens``, concatenated."""
        return self.tokenizer.decode_bytes(tokens)

    def clone_for(self, seq_id: int) -> "ControllerHost":
        """The host of a forked sequence: same tokenizer and variables, own id, log and tokens."""
        return ControllerHost(self.tokenizer, self.tokenize_bytes, self.variables, seq_id, io.StringIO(),
                              list(self.tokens))


class Controller(ABC):
    """One sequence's controller. Subclasses implement the four calls and ``fork``."""

    host: ControllerHost

    def init_prompt(self, prompt: list[int]) -> None:  # noqa: B027 (optional hook)
        """Called once with the prompt tokens."""

    @abstractmethod
    def pre_process(self) -> PreResult:
        """Before each step: go on, stop, skip this round, or fork."""

    @abstractmethod
    def mid_process(self, fork_group: list[int]) -> MidResult:
        """The step: a bitmask to sample under, a splice, or stop."""

    @abstractmethod
    def post_process(self, tokens: list[int], backtrack: int = 0) -> PostResult:
        """After the step's tokens were appended."""

    @abstractmethod
    def fork(self, host: ControllerHost) -> "Controller":
        """An independent copy of this controller, for a new sequence with ``host``."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Called once when the sequence ends, whatever the reason (release resources here)."""
