"""Compiled hot loops (numba, ``@njit(cache=True, nogil=True)`` over flat numpy arrays).

Importing this package fixes numba's on-disk cache directory before any kernel is compiled, so
the cache works from a read-only installed package: ``$NUMBA_CACHE_DIR`` if the user set it,
else ``$LOGITGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/logitgate/numba`` (``~/.cache/...``).
"""
from __future__ import annotations

import os
from typing import Any

from .._cachedir import cache_dir

CACHE_DIR: str = os.environ.get("NUMBA_CACHE_DIR") or cache_dir("numba")
os.environ.setdefault("NUMBA_CACHE_DIR", CACHE_DIR)

import numba  # noqa: E402  (must follow the environment set-up above)

if numba.config.CACHE_DIR != CACHE_DIR:  # numba was imported before us: point it at our directory
    numba.config.CACHE_DIR = CACHE_DIR

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
        return numba.njit(cache=True, nogil=True, _nrt=False)(fn)
    return numba.njit(cache=True, nogil=True)(fn)


DISPATCH_ONLY: bool = os.environ.get("LOGITGATE_KERNEL_DISPATCH", "") not in ("", "0")
"""``LOGITGATE_KERNEL_DISPATCH=1``: :class:`DirectCalls` keep every call on numba's dispatcher
(which checks each argument's type; tests use it to prove each kernel gets one set of types)."""


class DirectCalls:
    """Per-step calls into some kernels of a module, without numba's per-call type dispatch.

    A numba dispatcher types every argument on every call (~75 ns per array) before its compiled
    code unboxes them (~40 ns per array); a grammar step hands its kernels ~40 arrays, a token's
    advance ~50. ``DirectCalls(module, names)`` has one attribute per name: the compiled code's
    entry point, which unboxes the arguments and checks their item sizes but not their dtypes,
    dimensions or layout; for a kernel without a signature (compiled on first use), a first call
    through its dispatcher, after which the attribute becomes the entry point. Only for kernels
    whose call sites always pass the same dtypes, dimensions and layouts
    (``tests/test_kernel_calls.py`` runs the steps under :data:`DISPATCH_ONLY` and checks this);
    a kernel compiled for several stays on its dispatcher.
    """

    def __init__(self, module: object, names: tuple[str, ...]) -> None:
        for name in names:
            dispatcher = getattr(module, name)
            if DISPATCH_ONLY:
                target = dispatcher
            else:  # a kernel with a signature is compiled at import: its entry point at once (a
                # dispatcher's first call with a new set of types costs ~400 us of numba's Python)
                target = _entry_point(dispatcher) or self._first_call(name, dispatcher)
            setattr(self, name, target)

    def _first_call(self, name: str, dispatcher: Any) -> Any:
        def first_call(*args: Any) -> Any:
            result = dispatcher(*args)
            setattr(self, name, _entry_point(dispatcher) or dispatcher)
            return result

        return first_call


def _entry_point(dispatcher: Any) -> Any:
    """The compiled entry point of a dispatcher with exactly one specialisation, else None."""
    if len(dispatcher.overloads) != 1:
        return None
    return getattr(next(iter(dispatcher.overloads.values())), "entry_point", None)


__all__ = ["CACHE_DIR", "DISPATCH_ONLY", "NO_REFCOUNT", "DirectCalls", "walk_njit"]
