"""JSON Schema (drafts 4 to 2020-12) and Pydantic models as grammars (``Grammar.from_json_schema``).

Pipeline: :mod:`.loader` reads the schema (dict, JSON text or Pydantic model; exact numbers; the
draft; ``$ref`` resolution with ``referencing``), :mod:`.translate` turns it into a grammar IR
(with :mod:`.objects`, :mod:`.arrays`, and the lexeme languages of :mod:`.strings`,
:mod:`.numbers`, :mod:`.formats`, :mod:`.ecma`), which the grammar engine compiles like any
other context-free grammar.
"""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from .loader import load
from .translate import (
    MAX_WHITESPACE,
    PROPERTY_ORDERS,
    WHITESPACE_MODES,
    Translation,
    build_ir,
)

MAX_JSON_LEXER_STATES = 60_000
"""Largest lexer DFA for one schema; beyond it string constraints are simplified (reported)."""

__all__ = ["MAX_JSON_LEXER_STATES", "MAX_WHITESPACE", "PROPERTY_ORDERS", "WHITESPACE_MODES", "Translation", "canonical_json", "schema_to_ir"]


def canonical_json(value: Any) -> str:
    """Compact JSON text of a schema, keys in their order, Decimals verbatim (the cache key)."""
    try:  # no Decimal inside (the common case): the C encoder gives the same text
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return _canonical_json(value)


def _canonical_json(value: Any) -> str:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _canonical_json(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def check_schema_shape(schema: Any) -> None:
    """Refuse a schema document nested deeper than ``Limits.max_schema_depth`` (objects and arrays)
    or larger than ``Limits.max_source_bytes`` as compact JSON (escapes not counted); iterative, so
    any depth is measured safely. Raises ``SchemaLimitError`` with the pointer of the deepest part."""
    from ..errors import SchemaLimitError
    from ..limits import get_limits
    from .loader import escape_pointer

    lim = get_limits()
    size = 0
    stack: list[tuple[Any, int, tuple]] = [(schema, 1, ())]
    while stack:
        v, depth, path = stack.pop()
        if isinstance(v, (dict, list)) and depth > lim.max_schema_depth:
            ptr = "".join("/" + escape_pointer(str(p)) for p in path)
            raise SchemaLimitError(f"the schema nests objects and arrays {depth} deep", limit="max_schema_depth",
                                   value=lim.max_schema_depth, pointer=ptr)
        if isinstance(v, dict):
            size += 2 + len(v)
            for k, x in v.items():
                size += len(k) + 3 if isinstance(k, str) else 8
                stack.append((x, depth + 1, path + (k,) if depth <= 64 else path))
        elif isinstance(v, list):
            size += 2 + len(v)
            stack.extend((x, depth + 1, path + (i,) if depth <= 64 else path) for i, x in enumerate(v))
        else:
            size += len(v) + 2 if isinstance(v, str) else 5
        if size > lim.max_source_bytes:
            raise SchemaLimitError(f"the schema is over {lim.max_source_bytes} bytes as JSON", limit="max_source_bytes",
                                   value=lim.max_source_bytes, pointer="")


def schema_to_ir(schema: Any, *, whitespace: str = "compact", property_order: str = "schema", strict: bool = True,
                 registry: Any = None, level: int = 0, pieces: bool = True, split: bool = False
                 ) -> tuple[Any, Translation]:
    """``(loaded schema, translation)`` for the given options (raises SchemaError); ``level``,
    ``pieces`` and ``split``: see :func:`~logitgate.json_schema.translate.build_ir`."""
    if whitespace not in WHITESPACE_MODES:
        raise ValueError(f"whitespace must be one of {', '.join(map(repr, WHITESPACE_MODES))}, not {whitespace!r}")
    if property_order not in PROPERTY_ORDERS:
        raise ValueError(f"property_order must be one of {', '.join(map(repr, PROPERTY_ORDERS))}, "
                         f"not {property_order!r}")
    if isinstance(schema, (dict, list)):
        check_schema_shape(schema)
    loaded = load(schema, registry)
    if not isinstance(schema, (dict, list)):  # a JSON text or a Pydantic model: check what it gave
        check_schema_shape(loaded.root)
    return loaded, build_ir(loaded, whitespace=whitespace, property_order=property_order, strict=strict, level=level,
                            pieces=pieces, split=split)
