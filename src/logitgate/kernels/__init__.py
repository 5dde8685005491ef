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

__all__ = ["CACHE_DIR"]
