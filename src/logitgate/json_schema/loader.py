"""Reading a schema: a dict, a JSON text or a Pydantic model; its draft; ``$ref`` resolution.

Numbers are kept exact: a JSON text is read with ``parse_float=Decimal`` and Python floats in a
dict become the ``Decimal`` of their shortest repr, so bounds like ``0.1`` mean exactly 0.1.
References are resolved with the ``referencing`` library (``$id``, ``$anchor``, JSON pointers,
relative URIs, and remote documents the caller supplies in a registry).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import referencing
import referencing.exceptions
import referencing.jsonschema as rj

from ..errors import SchemaError

__all__ = ["DRAFTS", "Loaded", "Schema", "draft_of", "load", "lookup", "lookup_recursive"]

Schema = Any  # a JSON Schema: a dict or a bool

ROOT_URI = "urn:logitgate:root"

DRAFTS: dict[str, str] = {
    "draft4": "http://json-schema.org/draft-04/schema",
    "draft6": "http://json-schema.org/draft-06/schema",
    "draft7": "http://json-schema.org/draft-07/schema",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}
_SPECS = {
    "draft4": rj.DRAFT4,
    "draft6": rj.DRAFT6,
    "draft7": rj.DRAFT7,
    "draft2019-09": rj.DRAFT201909,
    "draft2020-12": rj.DRAFT202012,
}
_BY_URI = {uri.rstrip("#"): name for name, uri in DRAFTS.items()}


def draft_of(schema: Schema, default: str = "draft2020-12") -> str:
    """The draft named by the schema's ``$schema`` (``default`` when absent); unknown URIs raise."""
    if not isinstance(schema, dict) or "$schema" not in schema:
        return default
    uri = schema["$schema"]
    if not isinstance(uri, str):
        raise SchemaError("$schema must be a string URI", pointer="/$schema")
    name = _BY_URI.get(uri.rstrip("#").replace("http://json-schema.org/draft/", "https://json-schema.org/draft/"))
    if name is None:
        if "draft-03" in uri:
            raise SchemaError(f"draft 3 schemas are not supported ($schema {uri!r}); drafts 4 to 2020-12 are",
                              pointer="/$schema")
        return default  # a custom meta-schema: read with the default draft's keywords
    return name


def _exact_numbers(value: Any, pointer: str = "") -> Any:
    """A copy of a JSON-like value with floats as exact Decimals (non-finite floats refused)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"{value!r} is not a JSON number", pointer=pointer or "/")
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SchemaError(f"object keys must be strings, not {type(k).__name__}", pointer=pointer)
            out[k] = _exact_numbers(v, f"{pointer}/{escape_pointer(k)}")
        return out
    if isinstance(value, (list, tuple)):
        return [_exact_numbers(v, f"{pointer}/{i}") for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, bool, int, Decimal)):
        return value
    raise SchemaError(f"{type(value).__name__} is not a JSON value", pointer=pointer or "/")


def escape_pointer(token: str) -> str:
    """One JSON pointer reference token (RFC 6901 escaping)."""
    return token.replace("~", "~0").replace("/", "~1")


def _to_schema(schema: Any) -> Schema:
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema, parse_float=Decimal)
        except json.JSONDecodeError as e:
            raise SchemaError(f"the schema is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):  # a Pydantic model class
        return _exact_numbers(schema.model_json_schema())
    if hasattr(schema, "json_schema") and callable(schema.json_schema) and type(schema).__name__ == "TypeAdapter":
        return _exact_numbers(schema.json_schema())
    if isinstance(schema, (bool, Mapping)):
        return _exact_numbers(schema)
    raise SchemaError(f"a schema must be a dict, a bool, a JSON string or a Pydantic model class, "
                      f"not {type(schema).__name__}")


class Loaded:
    """A schema ready to translate: its contents, draft, and a resolver for its references."""

    def __init__(self, root: Schema, draft: str, registry: referencing.Registry) -> None:
        self.root = root
        self.draft = draft
        self.spec = _SPECS[draft]
        self.registry = registry
        self.resolver = registry.resolver(base_uri=self.base_uri)

    @property
    def base_uri(self) -> str:
        if isinstance(self.root, dict):
            rid = self.spec.id_of(self.root)
            if rid:
                return rid
        return ROOT_URI

    def spec_of(self, schema: Schema) -> rj.Specification:
        """The specification a sub-document uses (its own ``$schema`` may switch draft)."""
        if isinstance(schema, dict) and "$schema" in schema:
            try:
                return _SPECS[draft_of(schema)]
            except SchemaError:
                return self.spec
        return self.spec


def load(schema: Any, registry: Mapping[str, Any] | referencing.Registry | None = None) -> Loaded:
    """Read ``schema`` and build the registry its references resolve against.

    ``registry``: extra documents for remote ``$ref``s, as ``{uri: schema}`` or a ready
    ``referencing.Registry``.
    """
    root = _to_schema(schema)
    draft = draft_of(root)
    spec = _SPECS[draft]
    if isinstance(registry, referencing.Registry):
        reg = registry
    else:
        reg = _metaschemas()
        for uri, doc in (registry or {}).items():
            doc = _to_schema(doc)
            res = referencing.Resource.from_contents(doc, default_specification=spec) if isinstance(doc, dict) \
                else spec.create_resource(doc)
            reg = reg.with_resource(uri, res)
    resource = spec.create_resource(root)
    loaded_uri = (spec.id_of(root) if isinstance(root, dict) else None) or ROOT_URI
    reg = reg.with_resource(loaded_uri, resource)
    if loaded_uri != ROOT_URI:
        reg = reg.with_resource(ROOT_URI, resource)
    if registry or not _may_skip_crawl(schema):
        reg = _crawl(reg)
    return Loaded(root, draft, reg)


_ID_KEYS = ("$id", '"id"', "$anchor", "$dynamicAnchor", "$recursiveAnchor", "\\u")


def _may_skip_crawl(schema: Any) -> bool:
    """Whether the schema text names no ``$id``/``id``/anchor keyword (nor any escaped key), so
    that crawling it up front (indexing those, about 0.2 ms) would find nothing: JSON pointer
    fragments resolve against the contents directly (and ``referencing`` still crawls on a miss)."""
    if isinstance(schema, bytes):
        try:
            schema = schema.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return isinstance(schema, str) and not any(key in schema for key in _ID_KEYS)


def _crawl(reg: referencing.Registry) -> referencing.Registry:
    try:
        return reg.crawl()
    except Exception as e:  # noqa: BLE001 - referencing raises several kinds on malformed ids
        raise SchemaError(f"cannot index the schema's $id/$anchor keywords: {e}", pointer="") from None


def _metaschemas() -> referencing.Registry:
    """The drafts' meta-schemas (a ``$ref`` to one is legal), from ``jsonschema-specifications``."""
    try:
        from jsonschema_specifications import REGISTRY
    except ImportError:  # pragma: no cover - a dependency
        return referencing.Registry()
    return REGISTRY


def lookup(resolver: referencing._core.Resolver, ref: str, pointer: str) -> referencing._core.Resolved:
    """Resolve ``ref`` against ``resolver``; a dangling reference is a SchemaError at ``pointer``."""
    try:
        return resolver.lookup(ref)
    except referencing.exceptions.Unresolvable as e:
        raise SchemaError(f"cannot resolve $ref {ref!r} ({type(e).__name__}); pass remote documents with "
                          f"registry={{uri: schema}}", pointer=pointer) from None
    except ValueError as e:  # urllib refuses the URI itself (e.g. an unbalanced '[')
        raise SchemaError(f"cannot resolve $ref {ref!r}: not a valid URI reference ({e})", pointer=pointer) from None


def lookup_recursive(resolver: referencing._core.Resolver, pointer: str) -> referencing._core.Resolved:
    """``$recursiveRef: "#"`` (2019-09) in the dynamic scope ``resolver`` carries: the current
    resource's root, or, when that has ``$recursiveAnchor: true``, the outermost resource reached
    outward through roots that have it too (``referencing.jsonschema.lookup_recursive_ref``)."""
    try:
        return rj.lookup_recursive_ref(resolver)
    except referencing.exceptions.Unresolvable as e:
        raise SchemaError(f"cannot resolve $recursiveRef '#' ({type(e).__name__})", pointer=pointer) from None
