"""Inputs for the front-end fuzz tests (``tests/test_fuzz_frontends.py``): the real regexes,
grammars and schemas of ``../shared/data``, character-level and structural mutators, a per-case
time limit, and a tally of what every front end did with the cases it was given."""
from __future__ import annotations

import copy
import json
import os
import random
import signal
import threading
from collections import Counter, defaultdict
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

from .conftest import SHARED_DATA

# -- case counts ------------------------------------------------------------------------------


def fuzz_cases(default: int) -> int:
    """``default`` scaled by ``$LOGITGATE_FUZZ_SCALE`` (a float, default 1), or replaced by
    ``$LOGITGATE_FUZZ_CASES`` (an int) when that is set."""
    if os.environ.get("LOGITGATE_FUZZ_CASES"):
        return int(os.environ["LOGITGATE_FUZZ_CASES"])
    return max(1, round(default * float(os.environ.get("LOGITGATE_FUZZ_SCALE", "1"))))


class Tally:
    """Per front end: cases run, outcomes (``"ok"`` or the error class name), oracle checks."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.checks: Counter = Counter()

    def record(self, front: str, outcome: str) -> None:
        self.outcomes[front][outcome] += 1

    def check(self, front: str, n: int = 1) -> None:
        self.checks[front] += n

    def summary(self) -> str:
        lines = ["front-end fuzz summary (cases: outcome counts; oracle checks)"]
        total = 0
        for front in sorted(self.outcomes):
            c = self.outcomes[front]
            n = sum(c.values())
            total += n
            parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
            lines.append(f"  {front:<24} {n:>6} cases: {parts}; {self.checks[front]} oracle checks")
        lines.append(f"  {'total':<24} {total:>6} cases")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {f: {"cases": sum(c.values()), "outcomes": dict(c), "oracle_checks": self.checks[f]}
                for f, c in self.outcomes.items()}


TALLY = Tally()


# -- time limit -------------------------------------------------------------------------------


class CaseTimeout(Exception):
    """A case ran past its time limit (raised from SIGALRM in the main thread)."""


@contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Turn a hang into a ``CaseTimeout`` naming ``what`` (main thread with SIGALRM only;
    elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):  # noqa: ARG001
        raise CaseTimeout(f"over {seconds:g} s: {what}")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- real inputs ------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def real_regexes() -> list[str]:
    """outlines-core's benchmark and type/format regexes and its schema→regex expectations."""
    base = SHARED_DATA / "outlines-core"
    out: list[str] = []
    for name in ("regex_samples.json", "type_and_format_regexes.json"):
        text = _read(base / name)
        if text:
            out += [v for v in json.loads(text).values() if isinstance(v, str)]
    text = _read(base / "json_schema_regex_cases.jsonl")
    if text:
        for line in text.split("\n"):
            if line.strip():
                rx = json.loads(line).get("expected_regex")
                if isinstance(rx, str) and len(rx) < 2000:
                    out.append(rx)
    return out


def real_grammars(kind: str) -> dict[str, str]:
    """Real grammars of one kind: ``lark`` (lark and syncode), ``gbnf`` (llama.cpp), ``yacc`` (aici)."""
    if kind == "lark":
        paths = sorted((SHARED_DATA / "lark-grammars").rglob("*.lark")) + sorted((SHARED_DATA / "syncode-grammars").glob("*.lark"))
    elif kind == "gbnf":
        paths = sorted((SHARED_DATA / "llama-cpp-grammars").glob("*.gbnf"))
    else:
        paths = sorted((SHARED_DATA / "aici" / "grammars").glob("*.y"))
    return {str(p.relative_to(SHARED_DATA)): p.read_text(encoding="utf-8") for p in paths}


def _jsonl(path: Path) -> list[dict]:
    text = _read(path)
    if not text:
        return []
    return [json.loads(line, parse_float=Decimal) for line in text.split("\n") if line.strip()]


def real_schemas(rng: random.Random, n: int, max_chars: int = 20_000) -> list[tuple[str, Any, list[dict]]]:
    """``n`` schemas drawn from jsonschemabench (with their labelled instances), the
    JSON-Schema-Test-Suite and outlines-core: ``(id, schema, tests)``."""
    pool: list[tuple[str, Any, list[dict]]] = []
    bench = SHARED_DATA / "jsonschemabench"
    for path in sorted((bench / "schemas").glob("*.jsonl")):
        inst = {r["id"]: r["tests"] for r in _jsonl(bench / "instances" / path.name)}
        for rec in _jsonl(path):
            pool.append((rec["id"], rec["schema"], inst.get(rec["id"], [])))
    suite = SHARED_DATA / "json-schema-test-suite"
    for draft in ("draft2020-12", "draft7"):
        for g in _jsonl(suite / f"{draft}.jsonl"):
            pool.append((g["id"], g["schema"], g["tests"]))
    text = _read(SHARED_DATA / "outlines-core" / "json_schema_regex_cases.jsonl")
    for i, line in enumerate((text or "").split("\n")):
        if line.strip():
            pool.append((f"outlines#{i}", json.loads(line, parse_float=Decimal)["schema"], []))
    pool = [p for p in pool if len(json.dumps(p[1], default=str)) <= max_chars]
    return rng.sample(pool, min(n, len(pool)))


# -- character-level mutations ------------------------------------------------------------------

REGEX_META = list("()[]{}|*+?.^$\\-,:<>=!#") + ["(?", "(?:", "(?P<", "(?i)", "\\d", "\\", "{2,", "{9999}",
                                                  "[^", "\\x", "\\u12", "\\N{", "*?", "\n", "é", "\x00"]
GRAMMAR_META = list(":|;()[]{}\"'/*+?~.%-_\n \\#") + ["::=", "->", "%import ", "%ignore ", "%declare ", "%%",
                                                      "%start ", "/[", "\"\"", "..", "~3", "{1,", "\\x", "é", "\x00"]


def mutate_text(text: str, rng: random.Random, meta: list[str]) -> str:
    """One to three random edits: delete, duplicate or swap spans, insert a metacharacter,
    replace a character, or truncate."""
    for _ in range(rng.randint(1, 3)):
        n = len(text)
        op = rng.randrange(7)
        i = rng.randrange(n + 1)
        j = min(n, i + rng.choice([1, 1, 2, 3, 8, 30]))
        if op == 0:
            text = text[:i] + text[j:]
        elif op == 1:
            text = text[:j] + text[i:j] + text[j:]
        elif op == 2 and n > 1:
            k = rng.randrange(n + 1)
            a, b = sorted((i, k))
            span = rng.randint(1, 6)
            if a + span <= b:
                text = text[:a] + text[b:b + span] + text[a + span:b] + text[a:a + span] + text[b + span:]
        elif op == 3:
            text = text[:i] + rng.choice(meta) + text[i:]
        elif op == 4 and n:
            text = text[:i] + rng.choice(meta) + text[i + 1:]
        elif op == 5:
            text = text[:i]
        else:
            text = text[:i] + rng.choice(meta) * rng.randint(2, 12) + text[i:]
    return text


def mutate_lines(text: str, rng: random.Random) -> str:
    """Line-level edits of a grammar: drop, duplicate or swap whole lines."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 2)):
        i, k = rng.randrange(len(lines)), rng.randrange(len(lines))
        op = rng.randrange(3)
        if op == 0 and len(lines) > 1:
            del lines[i]
        elif op == 1:
            lines.insert(k, lines[i])
        else:
            lines[i], lines[k] = lines[k], lines[i]
    return "\n".join(lines)


# -- structural mutations of JSON schemas --------------------------------------------------------

_KEYWORDS = ["type", "properties", "required", "items", "prefixItems", "additionalProperties", "enum", "const",
             "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
             "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "minProperties",
             "maxProperties", "anyOf", "oneOf", "allOf", "not", "$ref", "$defs", "definitions", "if", "then",
             "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
             "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems",
             "$schema", "$id", "$anchor", "$dynamicRef", "additionalItems", "dependencies", "default"]
_ODD_VALUES: list[Any] = [None, True, False, 0, -1, -(10**40), 10**40, Decimal("1e400"), Decimal("-0.0"),
                          Decimal("1e-400"), 2**63, 1.5, "", "string", "#/definitions/nope", "#/$defs/a/b/../c",
                          "http://example.invalid/x.json", "#", "#/", "#/properties/~2", "%25%", "[", "(?<=a)b",
                          "\\", [], [1, "a", None], {}, {"type": "nope"}, {"$ref": "#"}, ["string", "null", 3],
                          {"": {}}, "integer", "object", "array", "date-time", "uri", "email", "\x00"]


def _paths(node: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, here + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, here + (i,))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def mutate_schema(schema: Any, rng: random.Random) -> Any:
    """One to three structural edits: a keyword given a value of the wrong type, an unknown or
    misplaced keyword, a bogus ``$ref``, huge or negative numbers and counts, a deleted
    subschema, deep nesting, a self-reference."""
    s = copy.deepcopy(schema)
    for _ in range(rng.randint(1, 3)):
        if not isinstance(s, dict):
            s = {"anyOf": [s]} if rng.random() < 0.5 else {"type": "object", "properties": {"x": s}}
        dicts = [p for p in _paths(s) if isinstance(_get(s, p), dict)]
        p = rng.choice(dicts)
        node = _get(s, p)
        op = rng.randrange(9)
        if op == 0 and node:  # existing keyword, wrong value
            node[rng.choice(list(node))] = copy.deepcopy(rng.choice(_ODD_VALUES))
        elif op == 1:  # any keyword, odd value
            node[rng.choice(_KEYWORDS)] = copy.deepcopy(rng.choice(_ODD_VALUES))
        elif op == 2:  # unknown keyword
            node[rng.choice(["x-custom", "typo", "propertys", "$comment", "nullable", "examples"])] = \
                copy.deepcopy(rng.choice(_ODD_VALUES))
        elif op == 3:  # bogus or cyclic $ref
            node["$ref"] = rng.choice(["#/definitions/missing", "#/$defs/x", "other.json#/a", "#foo", "#",
                                       "#/" + "/".join(str(x) for x in p), "#/properties", "urn:x"])
        elif op == 4:  # counts: negative, huge, inverted
            k = rng.choice(["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                            "minContains", "maxContains"])
            node[k] = rng.choice([-1, -5, 0, 10**6, 10**30, 3, Decimal("2.5")])
        elif op == 5:  # numbers: huge, tiny, inverted bounds
            node["type"] = rng.choice(["number", "integer"])
            for k in rng.sample(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"], 2):
                node[k] = rng.choice([10**40, -(10**40), Decimal("1e-30"), Decimal("0.1"), 0, -3, 7,
                                      Decimal("1e308"), Decimal("-1e-7")])
        elif op == 6 and p:  # delete this subschema from its parent
            parent = _get(s, p[:-1])
            if isinstance(parent, dict):
                del parent[p[-1]]
            else:
                parent.pop(p[-1])
        elif op == 7:  # deep nesting
            inner: Any = copy.deepcopy(node)
            for _ in range(rng.choice([5, 30, 120])):
                inner = rng.choice([{"type": "array", "items": inner}, {"anyOf": [inner]},
                                    {"type": "object", "properties": {"a": inner}, "required": ["a"]}])
            node.clear()
            node.update(inner)
        else:  # type mixtures
            node["type"] = rng.choice([["string", "integer"], ["object", "array", "null"], [], "any", 5,
                                       ["number", "number"]])
    return s


def mutate_schema_text(schema: Any, rng: random.Random) -> str:
    """The schema as JSON text with character-level edits (usually no longer JSON)."""
    text = json.dumps(schema, default=str)
    return mutate_text(text, rng, list('{}[]:,"\\') + ['"type"', '"$ref"', "1e999", "-", "null"])
