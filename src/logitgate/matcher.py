"""``Matcher``: the per-sequence step API over a ``CompiledGrammar``.

One matcher follows one generated sequence: fill the allowed-token bitmask, accept the sampled
token, roll back, fork for beam search. It is cheap (a state number and a short history) and not
thread-safe on its own; many matchers may share one compiled grammar across threads.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import numpy as np

from .bitmask import bitmask_to_bool
from .compiler import CompiledCFG, CompiledGrammar
from .errors import RecognizerError

__all__ = ["Matcher", "fill_next_token_bitmasks"]


class Matcher:
    """Follows one sequence under a compiled constraint.

    ``max_rollback``: how many accepted steps (tokens or ``accept_bytes`` calls) can be undone
    with ``rollback``; ``-1`` keeps the whole history.

    After EOS is accepted the matcher is terminated: only EOS stays allowed and every other token
    is refused, until ``rollback`` or ``reset``.
    """

    __slots__ = ("compiled", "max_rollback", "_state", "_history", "_terminated", "_cfg", "_error")

    def __init__(self, compiled: CompiledGrammar, *, max_rollback: int = 16) -> None:
        if not isinstance(compiled, CompiledGrammar):
            raise TypeError(f"Matcher expects a CompiledGrammar (logitgate.compile(...)), not {type(compiled).__name__}")
        if max_rollback < -1:
            raise ValueError("max_rollback must be >= 0, or -1 for unlimited")
        self.compiled = compiled
        self.max_rollback = max_rollback
        # a regex state is a DFA state number; a grammar state is a mutable ParseState whose
        # history entries are its snapshots
        self._cfg = isinstance(compiled, CompiledCFG)
        self._state = compiled.initial_state
        self._history: deque[tuple[object, bool]] = deque(maxlen=None if max_rollback < 0 else max_rollback)
        self._terminated = False
        self._error: Exception | None = None

    # -- masks --------------------------------------------------------------------------------
    def fill_next_token_bitmask(self, bitmask: np.ndarray, index: int = 0) -> None:
        """Write the allowed tokens for the next step into row ``index`` of ``bitmask`` (int32,
        shape ``(batch, ceil(vocab_size/32))``; a torch CPU tensor works too)."""
        if self._terminated:
            mask = self.compiled.eos_mask
        else:  # _current_mask inlined: this runs once per generated token
            try:
                mask = self.compiled.token_mask(self._state)
            except RecognizerError as exc:
                self._error = exc
                self._terminated = True
                raise
        if type(bitmask) is np.ndarray and bitmask.dtype is _INT32 and bitmask.ndim == 2:
            try:
                bitmask[index] = mask  # the common case, kept to one row assignment
                return
            except ValueError:  # rows of another width: _row_view says so
                pass
        _row_view(bitmask, index, self.compiled.mask_words)[...] = mask

    def allowed_token_ids(self) -> np.ndarray:
        """The ids allowed next, ascending (a convenience for inspection; slower than a bitmask)."""
        allowed = bitmask_to_bool(self._current_mask(), self.compiled.tokenizer.vocab_size)
        return np.flatnonzero(allowed).astype(np.int64)

    def _current_mask(self) -> np.ndarray:
        if self._terminated:
            return self.compiled.eos_mask
        try:
            return self.compiled.token_mask(self._state)
        except RecognizerError as exc:  # a user recognizer failed: raised once, then the sequence ends
            self._error = exc
            self._terminated = True
            raise

    def is_error(self) -> bool:
        """A user recognizer (``Grammar.from_recognizer``) failed here: the matcher is terminated
        (only EOS is allowed) and ``get_error()`` holds the ``RecognizerError``."""
        return self._error is not None

    def get_error(self) -> Exception | None:
        """The ``RecognizerError`` that terminated the matcher, or None."""
        return self._error

    # -- stepping -----------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token. ``False`` (and no change) when the token is not allowed.

        Raises ``IndexError`` for an id outside ``[0, vocab_size)``.
        """
        tok = self.compiled.tokenizer
        token_id = int(token_id)
        if not 0 <= token_id < tok.vocab_size:
            raise IndexError(f"token id {token_id} is outside the vocabulary [0, {tok.vocab_size})")
        if self._terminated:
            return False
        if token_id in tok.eos_token_ids:
            if not self.compiled.is_accepting(self._state):
                return False
            self._push(self._state)
            self._terminated = True
            return True
        if self._cfg:
            trie = self.compiled.trie
            if token_id >= trie.n_tokens or trie.token_node[token_id] < 0:
                return False
            snap = self._state.snapshot()
            start, end = trie.token_span(token_id)
            if not self._state.advance(trie.token_flat, start, end):
                return False
            self._push(snap)
            return True
        nxt = self.compiled.advance_token(self._state, token_id)
        if nxt < 0:
            return False
        self._push(self._state)
        self._state = nxt
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw bytes (one rollback step). ``False`` and no change if any byte is refused."""
        if self._terminated:
            return False
        if self._cfg:
            if not data:
                return True
            snap = self._state.snapshot()
            flat = np.frombuffer(bytes(data), dtype=np.uint8)
            if not self._state.advance(flat, 0, len(flat)):
                return False
            self._push(snap)
            return True
        nxt = self.compiled.advance_bytes(self._state, bytes(data))
        if nxt < 0:
            return False
        if data:
            self._push(self._state)
            self._state = nxt
        return True

    def accept_string(self, text: str) -> bool:
        """``accept_bytes(text.encode("utf-8"))``."""
        return self.accept_bytes(text.encode("utf-8"))

    def find_jump_forward_bytes(self) -> bytes:
        """The bytes that every valid continuation starts with (empty when there is a choice,
        including the choice to stop). Does not change the matcher."""
        if self._terminated:
            return b""
        return self.compiled.forced_bytes(self._state)

    def rollback(self, num_steps: int = 1) -> None:
        """Undo the last ``num_steps`` accepted steps (EOS included)."""
        if num_steps < 0:
            raise ValueError("num_steps must be >= 0")
        if num_steps > len(self._history):
            raise ValueError(
                f"cannot roll back {num_steps} steps: only {len(self._history)} are kept "
                f"(max_rollback={self.max_rollback})"
            )
        for _ in range(num_steps):
            prev, self._terminated = self._history.pop()
            if self._cfg:
                if prev is not None:
                    self._state.restore(prev)  # type: ignore[arg-type]
            else:
                self._state = prev

    def reset(self) -> None:
        """Back to the start, history and error cleared."""
        self._state = self.compiled.initial_state
        self._history.clear()
        self._terminated = False
        self._error = None

    def fork(self) -> "Matcher":
        """An independent copy at the same position (history included); O(history)."""
        twin = Matcher.__new__(Matcher)
        twin.compiled = self.compiled
        twin.max_rollback = self.max_rollback
        twin._cfg = self._cfg
        twin._state = self._state.copy() if self._cfg else self._state
        twin._history = self._history.copy()
        twin._terminated = self._terminated
        twin._error = self._error
        return twin

    # -- queries ------------------------------------------------------------------------------
    def is_accepting(self) -> bool:
        """The text so far is complete: EOS is allowed now (or was already accepted)."""
        return self._terminated or self.compiled.is_accepting(self._state)

    def is_terminated(self) -> bool:
        """EOS has been accepted."""
        return self._terminated

    @property
    def num_rollback_steps(self) -> int:
        """How many steps ``rollback`` can undo now."""
        return len(self._history)

    def _push(self, state: object) -> None:
        if self.max_rollback != 0:
            if self._cfg and not isinstance(state, tuple):
                state = None  # EOS: the parse state itself does not change
            self._history.append((state, self._terminated))

    def __repr__(self) -> str:
        return f"Matcher(state={self._state}, terminated={self._terminated}, compiled={self.compiled!r})"


def _row_view(bitmask: object, index: int, words: int) -> np.ndarray:
    arr = bitmask.numpy() if type(bitmask).__module__.startswith("torch") else bitmask  # type: ignore[attr-defined]
    if not isinstance(arr, np.ndarray) or arr.dtype != np.int32:
        raise TypeError("bitmask must be an int32 numpy array (or CPU torch tensor) from allocate_token_bitmask")
    row = arr[index] if arr.ndim == 2 else arr
    if row.shape[-1] != words:
        raise ValueError(f"bitmask rows have {row.shape[-1]} words; this vocabulary needs {words} "
                         f"(allocate it with logitgate.allocate_token_bitmask(batch_size, tokenizer.vocab_size))")
    return row


_INT32 = np.dtype(np.int32)
_pool: ThreadPoolExecutor | None = None


def fill_next_token_bitmasks(
    matchers: Sequence[Matcher], bitmask: np.ndarray, indices: Sequence[int] | None = None,
    *, num_threads: int | None = None,
) -> None:
    """Fill row ``indices[k]`` (default ``k``) of ``bitmask`` for ``matchers[k]``, on several
    threads (the mask kernels release the GIL). A matcher whose user recognizer fails ends alone:
    its row allows only EOS and its ``is_error()`` is true; the other rows are filled as usual."""
    global _pool
    rows = list(range(len(matchers))) if indices is None else list(indices)
    if len(rows) != len(matchers):
        raise ValueError(f"{len(matchers)} matchers but {len(rows)} indices")
    threads = num_threads or min(len(matchers), os.cpu_count() or 1)
    if threads <= 1 or len(matchers) <= 1:
        for m, r in zip(matchers, rows):
            _fill_alone(m, bitmask, r)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="logitgate")
    list(_pool.map(lambda mr: _fill_alone(mr[0], bitmask, mr[1]), zip(matchers, rows)))


def _fill_alone(m: Matcher, bitmask: np.ndarray, row: int) -> None:
    try:
        m.fill_next_token_bitmask(bitmask, row)
    except RecognizerError:
        m.fill_next_token_bitmask(bitmask, row)  # terminated by the error: EOS only
