"""Compiled hot loops (numba, ``@njit(cache=True, nogil=True)`` over flat numpy arrays).

Importing this package fixes numba's on-disk cache directory before any kernel is compiled, so
the cache works from a read-only installed package: ``$NUMBA_CACHE_DIR`` if the user set it,
else ``$LOGITGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/logitgate/numba`` (``~/.cache/...``).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .._cachedir import cache_dir

CACHE_DIR: str = os.environ.get("NUMBA_CACHE_DIR") or cache_dir("numba")
os.environ.setdefault("NUMBA_CACHE_DIR", CACHE_DIR)

import numba  # noqa: E402  (must follow the environment set-up above)

if numba.config.CACHE_DIR != CACHE_DIR:  # numba was imported before us: point it at our directory
    numba.config.CACHE_DIR = CACHE_DIR

import threading  # noqa: E402
import time  # noqa: E402

from numba.core.compiler_lock import global_compiler_lock  # noqa: E402
from numba.core.registry import CPUDispatcher  # noqa: E402

from ..limits import extend_deadline  # noqa: E402

_compiling = threading.local()


def compile_cpu_seconds() -> float:
    """CPU seconds this thread has spent compiling kernels or loading them from the cache (on
    their first use). A Wasm controller's fuel does not pay for them (``controllers.wasm``)."""
    return getattr(_compiling, "cpu", 0.0)


class _OffTheClock:
    """Time spent compiling or loading a kernel is not the constraint's: the compile deadline
    (``Limits.max_compile_seconds``) moves by it, and it is counted in
    :func:`compile_cpu_seconds`. After an install the first compile of a kernel takes seconds (of
    a regex's pipeline, tens of seconds), once; it must not make the first constraint fail."""

    __slots__ = ("_t0", "_c0", "_outer")

    def __enter__(self) -> None:
        depth = getattr(_compiling, "depth", 0)
        _compiling.depth = depth + 1
        self._outer = depth == 0  # a kernel compiled inside another's compile is timed once
        if self._outer:
            self._t0, self._c0 = time.monotonic(), time.thread_time()

    def __exit__(self, *exc: object) -> None:
        _compiling.depth -= 1
        if self._outer:
            extend_deadline(time.monotonic() - self._t0)
            _compiling.cpu = compile_cpu_seconds() + (time.thread_time() - self._c0)


class _Kernel(CPUDispatcher):
    """numba's CPU dispatcher, with its compiles and cache loads off the clock (:class:`_OffTheClock`)."""

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        # numba's C dispatcher calls this when no compiled signature matches the arguments,
        # then calls what it returns with them
        with _OffTheClock():
            return super()._compile_for_args(*args, **kws)


class _SignedKernel(_Kernel):
    """A dispatcher whose declared signatures are compiled (or loaded from the on-disk cache)
    on its first use, a call from Python or the compile of a kernel that calls it, rather than
    when its module is imported; after that it accepts only those signatures, as numba's own
    ``@njit(signature)`` does. Loading a kernel from the cache costs 5-40 ms, and the first
    load ~200 ms of numba's set-up: paid at import, that made ``import logitgate`` ~0.9 s,
    mostly for grammar and JSON Schema kernels that a regex never calls."""

    _pending: tuple = ()

    def _load_signatures(self) -> None:
        with global_compiler_lock, _OffTheClock():
            if not self._pending:
                return
            from numba.core import typeinfer

            with typeinfer.register_dispatcher(self):
                for sig in self._pending:
                    self.compile(sig)
            self.disable_compile()
            self._pending = ()

    def _compile_for_args(self, *args: Any, **kws: Any) -> Any:
        if self._pending:  # the first call from Python: load the signatures, then dispatch again
            self._load_signatures()
            return self
        return super()._compile_for_args(*args, **kws)

    def get_call_template(self, args: Any, kws: Any) -> Any:
        if self._pending:  # another kernel's compile types a call to this one
            self._load_signatures()
        return super().get_call_template(args, kws)


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` for logitgate's kernels: compiles and cache loads are off the compile
    clock (:class:`_OffTheClock`); given a signature (or a list of them), the kernel is compiled
    for exactly those on its first use instead of at import (see :class:`_SignedKernel`), and
    calls with other argument types raise ``TypeError`` as under numba's eager signatures."""
    fn = args[0] if args and callable(args[0]) else None
    sigs = None if fn is not None or not args else (args[0] if isinstance(args[0], list) else [args[0]])
    cache = options.pop("cache", False)
    local_types = options.pop("locals", {})
    targetoptions = dict(options, nopython=True)

    def wrap(fn: Callable[..., Any]) -> Any:
        cls = _Kernel if sigs is None else _SignedKernel
        disp = cls(py_func=fn, locals=dict(local_types), targetoptions=targetoptions)
        if cache:
            disp.enable_caching()
        if sigs is not None:
            disp._pending = tuple(sigs)
        return disp

    return wrap if fn is None else wrap(fn)


KERNEL_MODULES = ("automata_kernels", "bitmask_kernels", "body_kernels", "earley_kernels", "recognizer_kernels",
                  "trie_kernels")


def load_all() -> int:
    """Compile (or load from the on-disk cache) every kernel that declares its signatures, as
    importing them used to, and load from the cache every specialisation of the other kernels
    (compiled on first use for the types they were called with) that an earlier run on this
    machine left there: for a server's start-up or a benchmark's set-up, so that no first
    request or timed step pays a kernel's first load. Returns how many kernels it loaded (0 after
    the first call: the cache indexes are read once per process)."""
    import importlib

    global _all_loaded
    if _all_loaded:
        return 0
    n = 0
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for value in list(vars(module).values()):
            if isinstance(value, _SignedKernel):
                if value._pending:
                    value._load_signatures()
                    n += 1
            elif isinstance(value, _Kernel):
                n += _load_cached(value)
    _all_loaded = True
    return n


_all_loaded = False
"""Whether :func:`load_all` has run in this process (a kernel compiled since is in memory)."""


def _cached_signatures(kernel: _Kernel) -> list:
    """The argument types ``kernel``'s on-disk cache holds code for, compiled on this machine
    (numba's cache index; empty when the kernel is not cached or numba's layout is unknown)."""
    try:
        index = kernel._cache._cache_file._load_index()
        magic = kernel.targetctx.codegen().magic_tuple()
    except Exception:  # no cache (NullCache), or internals of another numba version
        return []
    return [key[0] for key in index if isinstance(key, tuple) and len(key) >= 2 and key[1] == magic]


def _load_cached(kernel: _Kernel) -> int:
    """Load ``kernel``'s cached specialisations that are not loaded yet (1 if any was)."""
    sigs = [sig for sig in _cached_signatures(kernel) if sig not in kernel.overloads]
    if not sigs:
        return 0
    loaded = 0
    with global_compiler_lock, _OffTheClock():
        for sig in sigs:
            try:
                kernel.compile(sig)  # found in the cache: loaded, not compiled
                loaded = 1
            except Exception:  # a stale entry numba cannot type any more: left to first use
                pass
    return loaded


def _reference_counting_can_be_off() -> bool:
    try:
        from numba.core.cpu import CPUTargetOptions
    except ImportError:  # pragma: no cover - a numba without the module
        return False
    return hasattr(CPUTargetOptions, "_nrt")


NO_REFCOUNT: bool = _reference_counting_can_be_off()
"""Whether :func:`walk_njit` kernels run without numba's reference counting (numba's ``_nrt``
option, there since numba 0.20; a numba without it compiles them as usual)."""


def walk_njit(fn):
    """``@njit(cache=True, nogil=True)`` for a kernel that allocates no array (it works in the
    caller's buffers), compiled without numba's reference counting.

    Numba counts references to every array a function binds, with an atomic increment and
    decrement, and its pruning pass cannot remove the pairs that straddle branches
    (numba/numba#2350). A helper inlined into a walk's loop and handed the lexer's or the
    chart's tuple of arrays then costs two atomics per array per call: a parser step answered
    from the memo inside the boundary walk took ~550 ns that way, against ~10 ns of real work.
    Such a kernel never owns an array (the caller keeps them all alive), so the counts are not
    needed; a kernel that allocates fails to compile under this decorator rather than leaking.
    """
    if NO_REFCOUNT:
        return njit(cache=True, nogil=True, _nrt=False)(fn)
    return njit(cache=True, nogil=True)(fn)


DISPATCH_ONLY: bool = os.environ.get("LOGITGATE_KERNEL_DISPATCH", "") not in ("", "0")
"""``LOGITGATE_KERNEL_DISPATCH=1``: :class:`DirectCalls` keep every call on numba's dispatcher
(which checks each argument's type; tests use it to prove each kernel gets one set of types)."""


class DirectCalls:
    """Per-step calls into some kernels of a module, without numba's per-call type dispatch.

    A numba dispatcher types every argument on every call (~75 ns per array) before its compiled
    code unboxes them (~40 ns per array); a grammar step hands its kernels ~40 arrays, a token's
    advance ~50. ``DirectCalls(module, names)`` has one attribute per name: the compiled code's
    entry point, which unboxes the arguments and checks their item sizes but not their dtypes,
    dimensions or layout. The first call goes through the dispatcher (which compiles or loads the
    kernel); the attribute then becomes the entry point of the specialisation for exactly that
    call's argument types (the dispatcher itself if there is none). Only for kernels
    whose call sites always pass the same dtypes, dimensions and layouts
    (``tests/test_kernel_calls.py`` runs the steps under :data:`DISPATCH_ONLY` and checks this):
    a kernel that also holds other specialisations (a test's, or loaded by :func:`load_all`) is
    bound to the one for the first call's types.
    """

    def __init__(self, module: object, names: tuple[str, ...]) -> None:
        for name in names:
            dispatcher = getattr(module, name)
            if DISPATCH_ONLY:
                target = dispatcher
            elif not getattr(dispatcher, "_can_compile", True) and len(dispatcher.overloads) == 1:
                # compiled for its one declared signature: its entry point at once (a
                # dispatcher's first call with a set of types costs hundreds of microseconds)
                target = next(iter(dispatcher.overloads.values())).entry_point
            else:  # the first call goes through the dispatcher (which compiles or loads the
                # kernel), then the attribute becomes the entry point for that call's types
                target = self._first_call(name, dispatcher)
            setattr(self, name, target)

    def _first_call(self, name: str, dispatcher: Any) -> Any:
        def first_call(*args: Any) -> Any:
            result = dispatcher(*args)
            setattr(self, name, _entry_point(dispatcher, args) or dispatcher)
            return result

        return first_call


def _entry_point(dispatcher: Any, args: tuple) -> Any:
    """The compiled entry point of ``dispatcher``'s specialisation for exactly the types of
    ``args`` (a kernel may hold others: loaded from the cache by :func:`load_all`, or compiled
    for a test), or of its only one (a signed kernel takes arrays its signature declares
    read-only, say), else None."""
    overloads = dispatcher.overloads
    try:
        found = overloads.get(tuple(dispatcher.typeof_pyval(a) for a in args))
    except Exception:
        found = None
    if found is None and len(overloads) == 1:
        found = next(iter(overloads.values()))
    return getattr(found, "entry_point", None)


__all__ = ["CACHE_DIR", "DISPATCH_ONLY", "NO_REFCOUNT", "DirectCalls", "compile_cpu_seconds", "load_all", "njit",
           "walk_njit"]
