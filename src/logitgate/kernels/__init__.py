"""Compiled hot loops (numba, ``@njit(cache=True, nogil=True)`` over flat numpy arrays).

Importing this package fixes numba's on-disk cache directory before any kernel is compiled, so
the cache works from a read-only installed package: ``$NUMBA_CACHE_DIR`` if the user set it,
else ``$LOGITGATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/logitgate/numba`` (``~/.cache/...``).
"""
from __future__ import annotations

import os
import tempfile


def _cache_dir() -> str:
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("LOGITGATE_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "logitgate")
    path = os.path.join(base, "numba")
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError:
        path = os.path.join(tempfile.gettempdir(), "logitgate-numba")
        os.makedirs(path, exist_ok=True)
    return path


CACHE_DIR: str = _cache_dir()
os.environ.setdefault("NUMBA_CACHE_DIR", CACHE_DIR)

import numba  # noqa: E402  (must follow the environment set-up above)

if numba.config.CACHE_DIR != CACHE_DIR:  # numba was imported before us: point it at our directory
    numba.config.CACHE_DIR = CACHE_DIR

__all__ = ["CACHE_DIR"]
