"""Where logitgate keeps its on-disk caches (numba kernels, Unicode tables).

``$LOGITGATE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/logitgate`` (``~/.cache/logitgate``); if
that is not writable, a folder in the system temp directory.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable

__all__ = ["cache_dir", "cached_json"]


_CHECKED: dict[str, str] = {}  # folder asked for -> the folder used (checked once per process)


def cache_dir(sub: str) -> str:
    """The writable cache folder ``sub`` (created if missing)."""
    base = os.environ.get("LOGITGATE_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "logitgate")
    wanted = os.path.join(base, sub)
    path = _CHECKED.get(wanted)
    if path is not None:  # no stat per call: a folder removed since is a miss, and writes fail quietly
        return path
    path = wanted
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(path)
    except OSError:
        path = os.path.join(tempfile.gettempdir(), "logitgate-cache", sub)
        os.makedirs(path, exist_ok=True)
    _CHECKED[wanted] = path
    return path


def cached_json(sub: str, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, stored as JSON in ``cache_dir(sub)/name`` and read back on later calls
    (also in later processes). A missing, unreadable or corrupt file is recomputed."""
    try:
        path = os.path.join(cache_dir(sub), name)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    value = compute()
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except OSError:
        pass
    return value
