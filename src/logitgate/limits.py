"""Caps on what one constraint may cost to compile and to follow (``logitgate.Limits``).

Every cap protects the process from one input (a regex, grammar or schema, possibly hostile)
that would otherwise take unbounded time or memory. A constraint beyond a cap is refused with a
:class:`~logitgate.errors.LimitError` naming the cap, its value and how to raise it.

    logitgate.get_limits()                              # the caps in force here
    logitgate.set_limits(logitgate.Limits(max_dfa_states=500_000))   # process-wide default
    with logitgate.using_limits(max_compile_seconds=5): # this thread / async task only
        g = logitgate.Grammar.from_json_schema(untrusted)

Cap sites read the caps in force when they run: the source, repetition, depth and deadline caps
when a ``Grammar`` is created, the automaton, lexer and rule caps when it is compiled (and when a
``Grammar.from_json_schema``/``from_gbnf``... builds them eagerly), the runtime caps
(``mask_cache_bytes``, ``max_forced_bytes``) when ``logitgate.compile`` builds the grammar's engine.
The compile cache is keyed by the constraint, not by the caps: a constraint already compiled
under larger caps is served from the cache as is.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import LimitError

__all__ = ["Limits", "get_limits", "set_limits", "using_limits", "compile_deadline", "check_deadline", "extend_deadline",
           "check_source_size", "deep_recursion"]


@dataclass(frozen=True)
class Limits:
    """Caps on compile time and memory per constraint (defaults in parentheses). ``0`` or ``None``
    for ``max_compile_seconds`` and ``max_recognizer_seconds`` means no limit; every other cap
    must be positive."""

    max_source_bytes: int = 8 << 20
    """Largest regex, grammar or schema text (UTF-8 bytes) accepted (8 MiB, the server's body cap):
    bounds parsing time and the size of everything built from the text."""

    max_compile_seconds: float | None = 60.0
    """Cooperative deadline for one constraint, from the first front-end step to the finished tables
    (60 s): checked in the long compile loops (NFA building, lexer and parser tables, schema
    translation, grammar lowering), never on the per-token path. Time numba spends compiling or
    loading a kernel on its first use does not count."""

    max_dfa_states: int = 100_000
    """Largest regex DFA (character subsets and byte states) (100k): about 1 KiB of transition
    table per state, plus one token mask per state visited (vocab/8 bytes)."""

    max_regex_repeat: int = 1000
    """Largest bound of a regex repetition ``x{m,n}`` (1000, also for schema ``pattern``): each
    unit of a bound copies the repeated part into the automaton."""

    max_gbnf_repeat: int = 10_000
    """Largest GBNF repetition count ``x{m,n}`` (10k): each copy is a grammar production."""

    max_grammar_rules: int = 200_000
    """Most BNF productions a grammar may lower to (200k; repetition counts multiply): each
    costs Earley table entries (tens of bytes) and prediction work per parse step."""

    max_grammar_symbols: int = 2_000_000
    """Most symbols in all BNF productions together (2M; ``x{1000}`` in ``x{1000}`` copies a million):
    about 100 bytes each while lowering, 8 in the parser tables."""

    max_lexer_states: int = 200_000
    """Largest lexer DFA of a Lark/GBNF/yacc grammar, all terminals together (200k states, about
    1 KiB each plus the terminal bitsets)."""

    max_json_lexer_states: int = 60_000
    """Largest lexer DFA of a JSON schema (60k); beyond it string constraints are simplified at
    the next relaxation level before the schema is refused."""

    max_schema_depth: int = 512
    """Deepest nesting of objects and arrays in a JSON schema document (512): translation and
    loading recurse per level; deeper schemas are refused before any work."""

    max_schema_alternatives: int = 256
    """Most alternatives the combinators (anyOf/oneOf/if-then-else...) at one position of a schema
    expand into (256); beyond it if/then/else there are relaxed (reported), then the schema is refused:
    each alternative is a grammar branch."""

    max_forced_bytes: int = 1024
    """Longest forced (jump-forward) string one ``forced_bytes`` call returns for a grammar (1 KiB):
    each byte is a parser step."""

    max_recognizer_seconds: float | None = 30.0
    """Longest one token mask of a Python recognizer (``Grammar.from_recognizer``) may take to
    compute (30 s): a slow or looping ``byte_allowed``/``append`` is stopped with a
    ``RecognizerError`` naming this cap (checked every 4096 trie nodes). ``0``/``None``: no limit."""

    mask_cache_bytes: int = 256 << 20
    """Memory one compiled grammar may spend memoising token masks (256 MiB; least recently used
    are dropped, its lexer-level walks get half as much again)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("max_compile_seconds", "max_recognizer_seconds"):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                    raise ValueError(f"Limits.{f.name} must be a number >= 0 or None, not {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"Limits.{f.name} must be a positive int, not {v!r}")

    def replace(self, **changes: object) -> "Limits":
        """A copy with ``changes`` applied (unknown names raise ``TypeError``)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"unknown Limits field(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_default = Limits()
_current: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("logitgate_limits", default=None)
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("logitgate_deadline", default=None)


def get_limits() -> Limits:
    """The caps in force in this thread / async task (``using_limits``), else the process default."""
    lim = _current.get()
    return _default if lim is None else lim


def set_limits(limits: Limits) -> None:
    """Make ``limits`` the process-wide default (contexts inside ``using_limits`` keep theirs)."""
    global _default
    if not isinstance(limits, Limits):
        raise TypeError(f"set_limits expects a logitgate.Limits, not {type(limits).__name__}")
    _default = limits


@contextlib.contextmanager
def using_limits(limits: Limits | None = None, /, **changes: object) -> Iterator[Limits]:
    """Within the block, the caps are ``limits`` (default: those in force) with ``changes``
    applied; only this thread / async task sees them. Yields the caps in force."""
    base = get_limits() if limits is None else limits
    lim = base.replace(**changes) if changes else base
    token = _current.set(lim)
    try:
        yield lim
    finally:
        _current.reset(token)


class compile_deadline:  # noqa: N801 - used as a function: ``with compile_deadline():``
    """Start the ``max_compile_seconds`` clock unless an enclosing block already did (nested front
    end and compile steps share one deadline). A plain class, not a generator: every compile
    enters it twice, on cold caches."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        if _deadline.get() is not None:
            self._token = None
            return
        secs = get_limits().max_compile_seconds
        self._token = _deadline.set(time.monotonic() + secs if secs else float("inf"))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _deadline.reset(self._token)


def extend_deadline(seconds: float) -> None:
    """Move the current compile deadline (none outside :func:`compile_deadline`) ``seconds``
    later, for time that is not the constraint's: numba compiling or loading a kernel on its
    first use (tens of seconds once after an install, see ``logitgate.kernels``)."""
    end = _deadline.get()
    if end is not None and seconds > 0:
        _deadline.set(end + seconds)


def check_deadline(where: str = "") -> None:
    """Raise ``LimitError(max_compile_seconds)`` once the current compile deadline has passed
    (no-op outside :func:`compile_deadline`). Cheap: one context lookup and one clock read."""
    end = _deadline.get()
    if end is not None and time.monotonic() > end:
        secs = get_limits().max_compile_seconds
        raise LimitError.exceeded("max_compile_seconds", secs, f"compiling took longer than {secs} s"
                                  + (f" ({where})" if where else ""))


def check_source_size(text: str | bytes, what: str, error: type[LimitError] = LimitError) -> None:
    """Raise ``error`` (a ``LimitError`` class) naming ``max_source_bytes`` when ``text`` is
    larger than the cap in UTF-8 bytes."""
    cap = get_limits().max_source_bytes
    n = len(text)
    if isinstance(text, str) and cap // 4 < n <= cap:  # 1 to 4 bytes a character: count when in doubt
        n = len(text.encode("utf-8", "surrogatepass"))
    if n > cap:
        size = f"at least {n}" if isinstance(text, str) and len(text) > cap else str(n)
        raise error(f"the {what} is {size} bytes long", limit="max_source_bytes", value=cap)


_recursion_lock = threading.Lock()
_recursion_users = 0
_recursion_saved = 0


@contextlib.contextmanager
def deep_recursion(frames: int) -> Iterator[None]:
    """Allow at least ``frames`` Python frames of recursion within the block (the interpreter's
    limit is raised while any thread is inside one, then restored). For recursive front ends whose
    depth is already bounded by a cap such as ``max_schema_depth``."""
    global _recursion_users, _recursion_saved
    with _recursion_lock:
        if _recursion_users == 0:
            _recursion_saved = sys.getrecursionlimit()
        _recursion_users += 1
        if sys.getrecursionlimit() < frames:
            sys.setrecursionlimit(frames)
    try:
        yield
    finally:
        with _recursion_lock:
            _recursion_users -= 1
            if _recursion_users == 0:
                sys.setrecursionlimit(_recursion_saved)
