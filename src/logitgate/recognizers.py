"""Custom constraints written in Python: the byte-level recognizer interfaces of AICI's token trie
(``FunctionalRecognizer``, the ``Recognizer`` byte stack, ``StringRecognizer``) and character
parsers in lm-format-enforcer's style (``CharRecognizer``).

    class Digits:                                   # a FunctionalRecognizer over an int state
        def initial(self): return 0
        def byte_allowed(self, n, b): return 48 <= b <= 57 and n < 4
        def append(self, n, b): return n + 1
        def special_allowed(self, n, token): return token == "eos" and n > 0

    g = logitgate.Grammar.from_recognizer(Digits())
    m = logitgate.Matcher(logitgate.compile(g, tokenizer))   # masks, rollback, fork as for a regex

States must be immutable and hashable: the compiled constraint memoises, per state, the byte
transitions it met and the token mask (a walk of the token trie that prunes a whole subtree at a
refused byte). The walk runs in compiled code over the transitions explored so far and asks the
recognizer (``byte_allowed``, then ``append``) only about a (state, byte) pair it has not met.
So the first masks cost one Python call per live trie node (tens of milliseconds to a second on a
131k vocabulary, depending on how much of the vocabulary the state allows); once states repeat
(a loop inside a string, a counter that comes back), a new state's mask costs compiled code only
(tens of microseconds), and a state met again is a row copy. ``special_allowed(state, "eos")`` says where the text may end.

A method that raises, or returns something other than a bool where a bool is due, raises
``RecognizerError`` naming the method, the state and the byte.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from .errors import RecognizerError

__all__ = [
    "FunctionalRecognizer",
    "Recognizer",
    "StringRecognizer",
    "CharRecognizer",
    "StackRecognizer",
    "RecognizerError",
    "as_functional",
    "NumbaRecognizer",
    "EOS",
    "explore_automaton",
]

S = TypeVar("S", bound=Hashable)
EOS = "eos"
"""The special token a recognizer is asked about: may the text end here."""


@runtime_checkable
class FunctionalRecognizer(Protocol[S]):
    """A byte-level recognizer over immutable, hashable states (AICI's ``FunctionalRecognizer``)."""

    def initial(self) -> S:
        """The state before any byte."""

    def append(self, state: S, byte: int) -> S:
        """The state after ``byte`` (called only where ``byte_allowed(state, byte)``)."""

    def byte_allowed(self, state: S, byte: int) -> bool:
        """Whether ``byte`` may come next."""

    def special_allowed(self, state: S, token: str) -> bool:
        """Whether the special token ``token`` may come next (``"eos"``: the text may end here)."""

    # Optional: ``allowed_bytes(state) -> Iterable[int]``, every byte allowed next at once. When
    # a recognizer has it, the mask walk asks it once per state instead of ``byte_allowed`` once
    # per (state, byte); it must agree with ``byte_allowed``.


@runtime_checkable
class StringRecognizer(Protocol[S]):
    """A recognizer that offers whole strings next (the interface AICI's seed lists as planned)."""

    def initial(self) -> S:
        """The state before any text."""

    def append(self, state: S, text: str) -> S:
        """The state after ``text``, one of the strings ``allowed(state)`` offered."""

    def allowed(self, state: S) -> Iterable[str]:
        """The non-empty strings that may come next."""

    def special_allowed(self, state: S) -> Iterable[str]:
        """The special tokens allowed next (``"eos"`` where the text may end)."""


@runtime_checkable
class CharRecognizer(Protocol[S]):
    """A character-level parser in lm-format-enforcer's style: it offers the characters allowed next."""

    def initial(self) -> S:
        """The state before any character."""

    def add_char(self, state: S, ch: str) -> S:
        """The state after the character ``ch`` (one of ``allowed_chars(state)``)."""

    def allowed_chars(self, state: S) -> Iterable[str]:
        """The characters that may come next."""

    def can_end(self, state: S) -> bool:
        """Whether the text may end here."""


def _as_bool(value: Any, method: str, state: Any, byte: int | None = None) -> bool:
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    where = f" for byte {byte}" if byte is not None else ""
    raise RecognizerError(f"{method}() returned {type(value).__name__} {value!r}, not a bool, at state {state!r}"
                          f"{where}", method=method, state=state, byte=byte)


_NO_STATE = object()


def _call(rec: Any, method: str, *args: Any, state: Any = _NO_STATE, byte: int | None = None, what: str = "",
          then: Callable[[Any], Any] | None = None) -> Any:
    """``rec.method(*args)`` (and ``then`` of its result, e.g. ``list`` of an iterator), any
    failure raised as a ``RecognizerError`` naming the class, the method, ``state``, ``byte`` and
    ``what`` (e.g. `` for 'text'``)."""
    try:
        out = getattr(rec, method)(*args)
        return out if then is None else then(out)
    except RecognizerError:
        raise
    except Exception as exc:
        raise _failed(rec, method, exc, state, byte, what) from exc


def _failed(rec: Any, method: str, exc: Exception, state: Any = _NO_STATE, byte: int | None = None,
            what: str = "") -> RecognizerError:
    """The ``RecognizerError`` for ``rec.method`` having raised ``exc`` (see ``_call``)."""
    at = "" if state is _NO_STATE else f" at state {state!r}"
    where = f" for byte {byte}" if byte is not None else what
    return RecognizerError(f"{type(rec).__name__}.{method}() raised {type(exc).__name__}: {exc}{at}{where}",
                           method=method, state=None if state is _NO_STATE else state, byte=byte)


class _Checked:
    """A FunctionalRecognizer wrapped so that every failure is a ``RecognizerError``.
    ``allowed_bytes`` is None unless the recognizer has that optional method."""

    def __init__(self, rec: Any) -> None:
        self.rec = rec
        self._byte_allowed = rec.byte_allowed  # bound once: the mask walk calls these per new (state, byte)
        self._append = rec.append
        self.allowed_bytes: Callable[[Any], frozenset[int]] | None = (
            self._allowed_bytes if callable(getattr(rec, "allowed_bytes", None)) else None)

    def initial(self) -> Any:
        state = _call(self.rec, "initial")
        _hashable(state, "initial", None)
        return state

    def byte_allowed(self, state: Any, byte: int) -> bool:
        try:
            value = self._byte_allowed(state, byte)
        except RecognizerError:
            raise
        except Exception as exc:
            raise _failed(self.rec, "byte_allowed", exc, state, byte) from exc
        return _as_bool(value, "byte_allowed", state, byte)

    def append(self, state: Any, byte: int) -> Any:
        try:
            nxt = self._append(state, byte)
        except RecognizerError:
            raise
        except Exception as exc:
            raise _failed(self.rec, "append", exc, state, byte) from exc
        _hashable(nxt, "append", state, byte)
        return nxt

    def _allowed_bytes(self, state: Any) -> frozenset[int]:
        got = _call(self.rec, "allowed_bytes", state, state=state, then=frozenset)
        for b in got:
            if type(b) is not int or not 0 <= b <= 255:
                raise RecognizerError(f"allowed_bytes() offered {b!r} at state {state!r}: bytes are ints 0-255",
                                      method="allowed_bytes", state=state)
        return got

    def special_allowed(self, state: Any, token: str) -> bool:
        return _as_bool(_call(self.rec, "special_allowed", state, token, state=state), "special_allowed", state)


def _hashable(state: Any, method: str, prev: Any, byte: int | None = None) -> None:
    try:
        hash(state)
    except TypeError:
        raise RecognizerError(f"{method}() returned an unhashable state {state!r} (states must be immutable and "
                              f"hashable), from state {prev!r}", method=method, state=prev, byte=byte) from None


class _FromStrings:
    """A StringRecognizer as a FunctionalRecognizer. A state is a frozenset of (the string
    recognizer's state, the bytes of an allowed string read so far): when one allowed string is a
    prefix of another, both readings are followed."""

    def __init__(self, rec: Any) -> None:
        self.rec = rec
        self._encoded: dict[Any, tuple[bytes, ...]] = {}

    def _strings(self, s: Any) -> tuple[bytes, ...]:
        out = self._encoded.get(s)
        if out is None:
            texts = _call(self.rec, "allowed", s, state=s, then=list)
            for t in texts:
                if not isinstance(t, str) or not t:
                    raise RecognizerError(f"allowed() offered {t!r} at state {s!r}: strings must be non-empty str",
                                          method="allowed", state=s)
            out = tuple(sorted({t.encode("utf-8") for t in texts}))
            self._encoded[s] = out
        return out

    def initial(self) -> frozenset:
        return frozenset({(_call(self.rec, "initial"), b"")})

    def byte_allowed(self, state: frozenset, byte: int) -> bool:
        return any(enc.startswith(pending + bytes((byte,))) for s, pending in state for enc in self._strings(s))

    def allowed_bytes(self, state: frozenset) -> frozenset[int]:
        return frozenset(enc[len(pending)] for s, pending in state for enc in self._strings(s)
                         if len(enc) > len(pending) and enc.startswith(pending))

    def append(self, state: frozenset, byte: int) -> frozenset:
        out = set()
        for s, pending in state:
            nxt = pending + bytes((byte,))
            for enc in self._strings(s):
                if enc == nxt:
                    text = enc.decode("utf-8")
                    out.add((_call(self.rec, "append", s, text, state=s, what=f" for {text!r}"), b""))
                elif enc.startswith(nxt):
                    out.add((s, nxt))
        return frozenset(out)

    def special_allowed(self, state: frozenset, token: str) -> bool:
        for s, pending in state:
            if pending:
                continue
            if token in _call(self.rec, "special_allowed", s, state=s, then=set):
                return True
        return False


class _FromChars:
    """A CharRecognizer as a FunctionalRecognizer: a state is (the parser's state, the UTF-8 bytes
    of a character begun but not finished)."""

    def __init__(self, rec: Any) -> None:
        self.rec = rec
        self._prefixes: dict[Any, tuple[frozenset, frozenset]] = {}

    def _allowed(self, s: Any) -> tuple[frozenset, frozenset]:
        """(the allowed characters' encodings, every proper prefix of them)."""
        got = self._prefixes.get(s)
        if got is None:
            chars = _call(self.rec, "allowed_chars", s, state=s, then=list)
            for c in chars:
                if not isinstance(c, str) or len(c) != 1:
                    raise RecognizerError(f"allowed_chars() offered {c!r} at state {s!r}: single characters only",
                                          method="allowed_chars", state=s)
            encs = frozenset(c.encode("utf-8") for c in chars)
            prefixes = frozenset(e[:k] for e in encs for k in range(1, len(e)))
            got = (encs, prefixes)
            self._prefixes[s] = got
        return got

    def initial(self) -> tuple:
        return (_call(self.rec, "initial"), b"")

    def byte_allowed(self, state: tuple, byte: int) -> bool:
        s, pending = state
        nxt = pending + bytes((byte,))
        encs, prefixes = self._allowed(s)
        return nxt in encs or nxt in prefixes

    def allowed_bytes(self, state: tuple) -> frozenset[int]:
        s, pending = state
        encs, _ = self._allowed(s)
        k = len(pending)
        return frozenset(e[k] for e in encs if len(e) > k and e.startswith(pending))

    def append(self, state: tuple, byte: int) -> tuple:
        s, pending = state
        nxt = pending + bytes((byte,))
        encs, _ = self._allowed(s)
        if nxt in encs:
            ch = nxt.decode("utf-8")
            return (_call(self.rec, "add_char", s, ch, state=s, what=f" for {ch!r}"), b"")
        return (s, nxt)

    def special_allowed(self, state: tuple, token: str) -> bool:
        s, pending = state
        if pending or token != EOS:
            return False
        return _as_bool(_call(self.rec, "can_end", s, state=s), "can_end", s)


class NumbaRecognizer(FunctionalRecognizer[int]):
    """A recognizer over int64 states given as two numba functions, so that the whole walk of the
    token trie runs in compiled code (no Python call per trie node):

        @numba.njit
        def step(state, byte):      # the next state, or a negative number when byte is refused
            ...
        @numba.njit
        def accepting(state):       # whether the text may end here
            ...
        g = logitgate.Grammar.from_recognizer(NumbaRecognizer(step, accepting, initial=0))

    or as a numba jitclass with ``step`` and ``accepting`` methods:
    ``NumbaRecognizer.from_jitclass(obj, initial=0)``.

    The walk is compiled around ``step`` once per function (or jitclass type), on the first mask
    (about a second; not cached on disk); masks are memoised per state. It is also a
    FunctionalRecognizer (each call goes through numba's dispatcher from Python), so every
    adapter and check applies to it."""

    jitclass: Any = None
    """The jitclass instance, for ``from_jitclass``; None for a pair of functions."""

    def __init__(self, step: Any, accepting: Any, initial: int = 0) -> None:
        for name, fn in (("step", step), ("accepting", accepting)):
            if not hasattr(fn, "py_func"):
                raise TypeError(f"NumbaRecognizer: {name} must be a numba.njit function, not {type(fn).__name__}")
        self.step = step
        self.accepting = accepting
        self.start = int(initial)

    @classmethod
    def from_jitclass(cls, obj: Any, initial: int = 0) -> "NumbaRecognizer":
        """A recognizer from an instance of a ``numba.experimental.jitclass`` that has methods
        ``step(state, byte) -> int`` (negative: refused) and ``accepting(state) -> bool`` over
        int64 states; the trie walk calls ``obj.step`` in compiled code."""
        if not hasattr(type(obj), "class_type") and not hasattr(obj, "_numba_type_"):
            raise TypeError(f"NumbaRecognizer.from_jitclass: {type(obj).__name__} is not a numba jitclass instance")
        for name in ("step", "accepting"):
            if not callable(getattr(obj, name, None)):
                raise TypeError(f"NumbaRecognizer.from_jitclass: {type(obj).__name__} has no method {name}()")
        rec = cls.__new__(cls)
        rec.step = obj.step
        rec.accepting = obj.accepting
        rec.start = int(initial)
        rec.jitclass = obj
        return rec

    def initial(self) -> int:
        return self.start

    def byte_allowed(self, state: int, byte: int) -> bool:
        return int(self.step(state, byte)) >= 0

    def append(self, state: int, byte: int) -> int:
        return int(self.step(state, byte))

    def special_allowed(self, state: int, token: str) -> bool:
        return token == EOS and bool(self.accepting(state))


def as_functional(rec: Any) -> Any:
    """Any supported recognizer as a FunctionalRecognizer whose failures are ``RecognizerError``s.
    Tried in order: FunctionalRecognizer (``byte_allowed``), CharRecognizer (``allowed_chars``),
    StringRecognizer (``allowed``)."""
    if all(callable(getattr(rec, m, None)) for m in ("initial", "append", "byte_allowed", "special_allowed")):
        return _Checked(rec)
    if all(callable(getattr(rec, m, None)) for m in ("initial", "add_char", "allowed_chars", "can_end")):
        return _Checked(_FromChars(rec))
    if all(callable(getattr(rec, m, None)) for m in ("initial", "append", "allowed", "special_allowed")):
        return _Checked(_FromStrings(rec))
    raise TypeError(f"{type(rec).__name__} is not a recognizer: implement FunctionalRecognizer (initial, append, "
                    "byte_allowed, special_allowed), CharRecognizer (initial, add_char, allowed_chars, can_end) or "
                    "StringRecognizer (initial, append, allowed, special_allowed)")


def explore_automaton(rec: Any, *, max_states: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole byte automaton of a finite-state recognizer, explored from ``initial()`` (every
    byte of every state met: ``allowed_bytes`` once per state where the recognizer has it, else
    ``byte_allowed`` 256 times) and trimmed to the states from which the text can still end.

    Returns ``(trans, accepting)``: int32 ``[n, 256]`` (``-1``: refused) and bool ``[n]``, state 0
    the start; ``n == 0`` when the recognizer accepts no text. Raises ``LimitError`` (cap
    ``max_dfa_states``) past ``max_states`` states (the recognizer is not finite-state, or too
    large to expand), and ``RecognizerError`` when a call fails."""
    from .errors import LimitError
    from .limits import check_deadline

    f = as_functional(rec)
    first = f.initial()
    ids: dict[Any, int] = {first: 0}
    order = [first]
    rows: list[np.ndarray] = []
    ends: list[bool] = []
    allowed_bytes = f.allowed_bytes
    for s in order:
        if len(rows) % 256 == 0:
            check_deadline("exploring a recognizer's automaton")
        row = np.full(256, -1, np.int32)
        candidates = sorted(allowed_bytes(s)) if allowed_bytes is not None else \
            [b for b in range(256) if f.byte_allowed(s, b)]
        for b in candidates:
            nxt = f.append(s, b)
            k = ids.get(nxt)
            if k is None:
                if len(order) >= max_states:
                    raise LimitError.exceeded("max_dfa_states", max_states,
                                              f"the recognizer {type(rec).__name__} has more than {max_states} "
                                              "states (is it finite-state?)")
                k = ids[nxt] = len(order)
                order.append(nxt)
            row[b] = k
        rows.append(row)
        ends.append(f.special_allowed(s, EOS))
    trans = np.stack(rows)
    accepting = np.asarray(ends, dtype=bool)
    # trim: keep the states from which an accepting state is reachable
    live = accepting.copy()
    changed = True
    while changed:
        succ_live = np.where(trans >= 0, live[np.maximum(trans, 0)], False).any(axis=1)
        grown = live | succ_live
        changed = bool((grown != live).any())
        live = grown
    if not live[0]:
        return np.zeros((0, 256), np.int32), np.zeros(0, bool)
    keep = np.flatnonzero(live)
    remap = np.full(len(order) + 1, -1, np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    return np.ascontiguousarray(remap[trans[keep]]), np.ascontiguousarray(accepting[keep])


class Recognizer(Protocol):
    """AICI's mutable byte-stack recognizer, as the token-trie walk drives it."""

    def push_byte(self, byte: int) -> None:
        """Append ``byte`` (it must be allowed)."""

    def pop_bytes(self, num: int) -> None:
        """Undo the last ``num`` bytes."""

    def collapse(self) -> None:
        """Forget the undo history: the current state becomes the only one."""

    def byte_allowed(self, byte: int) -> bool:
        """Whether ``byte`` may come next."""

    def special_allowed(self, token: str) -> bool:
        """Whether the special token may come next (``"eos"``)."""

    def trie_finished(self) -> None:
        """Called when a walk of the token trie is over."""

    def try_push_byte(self, byte: int) -> bool:
        """``push_byte`` if allowed; whether it was."""


class StackRecognizer(Recognizer, Generic[S]):
    """A ``Recognizer`` (byte stack) over any FunctionalRecognizer: a stack of its states."""

    def __init__(self, rec: FunctionalRecognizer[S]) -> None:
        self.rec = rec
        self.stack: list[S] = [rec.initial()]

    @property
    def state(self) -> S:
        """The current state."""
        return self.stack[-1]

    def push_byte(self, byte: int) -> None:
        self.stack.append(self.rec.append(self.stack[-1], byte))

    def pop_bytes(self, num: int) -> None:
        if not 0 <= num < len(self.stack):
            raise ValueError(f"cannot pop {num} bytes from a stack of {len(self.stack) - 1}")
        if num:
            del self.stack[-num:]

    def collapse(self) -> None:
        self.stack = [self.stack[-1]]

    def byte_allowed(self, byte: int) -> bool:
        return bool(self.rec.byte_allowed(self.stack[-1], byte))

    def special_allowed(self, token: str) -> bool:
        return bool(self.rec.special_allowed(self.stack[-1], token))

    def trie_finished(self) -> None:
        self.collapse()

    def try_push_byte(self, byte: int) -> bool:
        if not self.byte_allowed(byte):
            return False
        self.push_byte(byte)
        return True
