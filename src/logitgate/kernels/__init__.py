"""Compiled hot loops (numba, ``@njit(cache=True, nogil=True)`` over flat numpy arrays).

Importing this package fixes numba's on-disk cache directory before any kernel is compiled, so
the cache works from a read-only installed package: ``$NUMBA_CACHE_DIR`` if the user set it,
else ``$LOGITGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/logitgate/numba`` (``~/.cache/...``).
"""
from __future__ import annotations

import os

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


__all__ = ["CACHE_DIR", "NO_REFCOUNT", "walk_njit"]
