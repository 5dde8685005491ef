"""Shared by the JSON Schema tests: exact-number JSON reading and writing, a byte-level acceptor,
and the official test suite's remote documents as a registry."""
from __future__ import annotations

import json
from decimal import Decimal
from functools import lru_cache
from typing import Any

import logitgate as lg

from .conftest import SHARED_DATA

SUITE = SHARED_DATA / "json-schema-test-suite"
BENCH = SHARED_DATA / "jsonschemabench"


def loads(text: str) -> Any:
    """JSON with numbers kept exact (Decimal for non-integers)."""
    return json.loads(text, parse_float=Decimal)


def dumps(value: Any) -> str:
    """Compact JSON (``separators=(",", ":")``, UTF-8 kept), Decimals verbatim."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dumps(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@lru_cache(maxsize=1)
def byte_tokenizer() -> lg.Tokenizer:
    """EOS plus the 256 single bytes: masks and acceptance at byte granularity."""
    toks = [b"</s>"] + [bytes([i]) for i in range(256)]
    return lg.Tokenizer.from_bytes(toks, eos_token_id=0, special_ids=[0])


def accepts(compiled: lg.CompiledGrammar, text: str) -> bool:
    """Whether the whole text is accepted (fed as bytes, then complete)."""
    m = lg.Matcher(compiled)
    return m.accept_bytes(text.encode("utf-8", "surrogatepass")) and m.is_accepting()


def agrees_with_jsonschema(schema: Any, values: Any, *, max_examples: int = 150) -> None:
    """Compile ``schema`` (strict, any key order) over the byte tokenizer and check, for values
    drawn from the hypothesis strategy ``values``, that the grammar accepts a value's compact JSON
    exactly when ``jsonschema`` (draft 2020-12) finds it valid."""
    import jsonschema
    from hypothesis import HealthCheck, given, settings

    compiled = lg.compile(lg.Grammar.from_json_schema(schema, property_order="any"), byte_tokenizer())
    validator = jsonschema.Draft202012Validator(schema)

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values)
    def agree(v: Any) -> None:
        text = json.dumps(v, separators=(",", ":"))
        assert accepts(compiled, text) == validator.is_valid(v), (schema, text)

    agree()


@lru_cache(maxsize=1)
def suite_registry() -> dict[str, Any]:
    """The suite's remote documents at http://localhost:1234/<path>."""
    out: dict[str, Any] = {}
    root = SUITE / "remotes"
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        out[f"http://localhost:1234/{rel}"] = loads(path.read_text())
    return out


def suite_groups(draft: str) -> list[dict]:
    path = SUITE / f"{draft}.jsonl"
    return [loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def bench_schemas(subset: str) -> dict[str, Any]:
    path = BENCH / "schemas" / f"{subset}.jsonl"
    out = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        rec = loads(line)
        out[rec["id"]] = rec["schema"]
    return out


def bench_instances(subset: str) -> dict[str, list[dict]]:
    path = BENCH / "instances" / f"{subset}.jsonl"
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        rec = loads(line)
        out[rec["id"]] = rec["tests"]
    return out


def data_available() -> bool:
    return SUITE.is_dir() and BENCH.is_dir()
