"""Data for the JSON Schema benchmark: JSONSchemaBench (schemas + MaskBench instances) and the
official JSON Schema Test Suite, read at run time from shared/data (never copied into the repo).

Importable by tests as well as by ``bench/bench_json_schema.py``; no peer engine is imported here.

* ``shared_data_dir()``: ``$LOGITGATE_SHARED_DATA``, else the first ``shared/data`` found walking
  up from this file, else ``/work/shared/data`` (as ``tests/conftest.py`` does).
* ``load_jsonschemabench(subsets, n)`` / ``load_test_suite(drafts)``: ``Case`` objects (one schema
  with its labelled instances). JSON is read with ``parse_float=Decimal`` so numbers stay verbatim.
* ``dumps(value)``: compact JSON (``,`` and ``:``, no whitespace, UTF-8 text, ``Decimal`` as
  ``str(d)``), the text every engine is fed.
* ``reorder_to_schema(instance, schema, root_schema)``: the instance with object keys in the
  schema's ``properties`` order (what engines that fix the property order expect).

Self-check: ``python bench/json_schema_data.py [--subsets a,b] [--n N]`` reorders real valid
instances and asserts that each reordered instance is the same JSON value, is exactly as valid per
``jsonschema`` as the original, and puts the known keys of the root object first, in schema order.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

# The 10 subsets of the JSONSchemaBench paper's benchmark, then the MaskBench-only ones.
BENCH_SUBSETS = ("Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra",
                 "Glaiveai2K", "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost")
MASKBENCH_SUBSETS = ("BFCL_java", "BFCL_javascript", "BFCL_multiple", "BFCL_parallel",
                     "BFCL_parallel_multiple", "BFCL_simple", "BFCL_sql",
                     "Handwritten", "JME", "MCPspec", "Synthesized")
ALL_SUBSETS = BENCH_SUBSETS + MASKBENCH_SUBSETS
SUITE_DRAFTS = ("draft2020-12", "draft7")
REMOTES_BASE = "http://localhost:1234/"
# Meta-schema URIs by draft name (what a "$schema" says).
_META_URIS = {
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}


def shared_data_dir() -> Path:
    env = os.environ.get("LOGITGATE_SHARED_DATA")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents[1:]:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return Path("/work/shared/data")


DATA_DIR = shared_data_dir()
JSB_DIR = DATA_DIR / "jsonschemabench"
SUITE_DIR = DATA_DIR / "json-schema-test-suite"


# --------------------------------------------------------------------------- JSON text


def loads(text: str) -> Any:
    """JSON with numbers kept verbatim: non-integers as ``Decimal``, integers as ``int``."""
    return json.loads(text, parse_float=Decimal)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dump_str(s: str) -> str:
    out = json.dumps(s, ensure_ascii=False)
    if _SURROGATE.search(out):  # a lone surrogate (from a "\\udXXX" escape) cannot be UTF-8: escape it
        out = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    return out


def dumps(value: Any) -> str:
    """Compact JSON text: no whitespace, non-ASCII kept as is, ``Decimal`` written as ``str(d)``,
    ints as ints, key order as given."""
    parts: list[str] = []
    _dump(value, parts.append)
    return "".join(parts)


def _dump(v: Any, w) -> None:
    if v is None:
        w("null")
    elif v is True:
        w("true")
    elif v is False:
        w("false")
    elif isinstance(v, str):
        w(_dump_str(v))
    elif isinstance(v, int):
        w(int.__repr__(v))
    elif isinstance(v, Decimal):
        if not v.is_finite():
            raise ValueError(f"{v} is not a JSON number")
        w(str(v))
    elif isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"{v} is not a JSON number")
        w(repr(v))
    elif isinstance(v, dict):
        w("{")
        first = True
        for k, x in v.items():
            if not first:
                w(",")
            first = False
            w(_dump_str(str(k)))
            w(":")
            _dump(x, w)
        w("}")
    elif isinstance(v, (list, tuple)):
        w("[")
        for i, x in enumerate(v):
            if i:
                w(",")
            _dump(x, w)
        w("]")
    else:
        raise TypeError(f"{type(v).__name__} is not a JSON value")


# --------------------------------------------------------------------------- cases


@dataclass
class Instance:
    index: int  # position in the upstream "tests" list
    valid: bool
    data: Any
    description: str = ""

    @property
    def id_suffix(self) -> str:
        return f"#{self.index}"


@dataclass
class Case:
    """One schema and its labelled instances."""

    id: str
    subset: str  # JSONSchemaBench subset, or the suite's draft
    schema: Any
    instances: list = field(default_factory=list)
    group: str = ""  # the suite's keyword file ("draft7/ref"), else the subset
    draft: str | None = None  # the suite's draft (default for a schema without $schema)
    description: str = ""

    @property
    def schema_text(self) -> str:
        return dumps(self.schema)


def sample_key(case_id: str) -> str:
    """Deterministic sampling order: sha256 of the id (stable across runs and machines)."""
    return hashlib.sha256(case_id.encode("utf-8")).hexdigest()


def _read_jsonl(path: Path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield loads(line)


def load_jsonschemabench(subsets=None, n: int | None = None, data_dir: Path | None = None) -> list:
    """Cases of the given subsets (default: all 21), ``n`` per subset (None: all), sampled
    deterministically: the ``n`` ids with the smallest sha256, among all schemas of the subset
    (with or without instances). Returned in subset order, then id order."""
    base = Path(data_dir) if data_dir else JSB_DIR
    out = []
    for sub in subsets or ALL_SUBSETS:
        schemas = {r["id"]: r["schema"] for r in _read_jsonl(base / "schemas" / f"{sub}.jsonl")}
        ids = sorted(schemas, key=sample_key)
        if n is not None:
            ids = ids[:n]
        keep = set(ids)
        tests = {}
        inst_file = base / "instances" / f"{sub}.jsonl"
        if inst_file.exists():
            for r in _read_jsonl(inst_file):
                if r["id"] in keep:
                    tests[r["id"]] = r["tests"]
        for cid in sorted(ids):
            insts = [Instance(i, bool(t["valid"]), t["data"], t.get("description", ""))
                     for i, t in enumerate(tests.get(cid, []))]
            out.append(Case(cid, sub, schemas[cid], insts, group=sub))
    return out


def load_test_suite(drafts=SUITE_DRAFTS, n_per_draft: int | None = None, data_dir: Path | None = None,
                    declare_draft: bool = True) -> list:
    """Every test group of the suite (``n_per_draft``: a deterministic sample of groups per draft).
    ``group`` is the keyword file without ``tests/`` and ``.json`` (``draft7/optional/format/uri``).
    ``declare_draft``: an object schema without ``$schema`` gets its draft's meta-schema URI as
    first key (the suite's dialect comes from its folder, which an engine cannot see; engines
    default to 2020-12)."""
    base = Path(data_dir) if data_dir else SUITE_DIR
    out = []
    for d in drafts:
        rows = list(_read_jsonl(base / f"{d}.jsonl"))
        if n_per_draft is not None:
            keep = set(sorted((r["id"] for r in rows), key=sample_key)[:n_per_draft])
            rows = [r for r in rows if r["id"] in keep]
        for r in rows:
            grp = r["file"]
            grp = grp[len("tests/"):] if grp.startswith("tests/") else grp
            grp = grp[:-len(".json")] if grp.endswith(".json") else grp
            insts = [Instance(i, bool(t["valid"]), t["data"], t.get("description", ""))
                     for i, t in enumerate(r["tests"])]
            draft = r.get("draft", d)
            schema = r["schema"]
            if declare_draft and isinstance(schema, dict) and "$schema" not in schema and draft in _META_URIS:
                schema = {"$schema": _META_URIS[draft], **schema}
            out.append(Case(r["id"], d, schema, insts, group=grp, draft=draft,
                            description=r.get("description", "")))
    return out


@lru_cache(maxsize=1)
def suite_remotes(data_dir: str | None = None) -> dict:
    """The suite's remote documents as {"http://localhost:1234/<path>": contents}."""
    base = Path(data_dir) if data_dir else SUITE_DIR / "remotes"
    out = {}
    if base.is_dir():
        for p in sorted(base.rglob("*.json")):
            try:
                out[REMOTES_BASE + p.relative_to(base).as_posix()] = loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
    return out


# --------------------------------------------------------------------------- jsonschema validation

_DRAFT_NAMES = {
    "draft3": "Draft3Validator", "draft4": "Draft4Validator", "draft6": "Draft6Validator",
    "draft7": "Draft7Validator", "draft2019-09": "Draft201909Validator",
    "draft2020-12": "Draft202012Validator",
}


def _is_integer(checker, instance) -> bool:
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    return isinstance(instance, Decimal) and instance.is_finite() and instance == instance.to_integral_value()


@lru_cache(maxsize=None)
def _validator_class(name: str):
    """The jsonschema validator class for a draft name, with ``Decimal`` integral values counted
    as integers (``1.0`` is an integer from draft 6 on; jsonschema only knows int and float)."""
    import jsonschema.validators as jv

    base = getattr(__import__("jsonschema"), _DRAFT_NAMES.get(name, "Draft202012Validator"))
    if name in ("draft3", "draft4"):
        return base
    return jv.extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _is_integer))


def validator_for(schema: Any, draft: str | None = None, remotes: dict | None = None):
    """A jsonschema validator (format checking on) for ``schema``: the draft its ``$schema`` names,
    else ``draft``, else 2020-12; ``remotes`` ({uri: contents}) are added to its registry."""
    import jsonschema.validators as jv
    import referencing
    import referencing.jsonschema as rj

    name = draft or "draft2020-12"
    if isinstance(schema, dict) and isinstance(schema.get("$schema"), str):
        cls0 = jv.validator_for(schema, default=None)
        if cls0 is not None:
            for k, v in _DRAFT_NAMES.items():
                if cls0.__name__ == v:
                    name = k
    cls = _validator_class(name)
    kw = {"format_checker": cls.FORMAT_CHECKER}
    if remotes:
        spec = rj.specification_with(_META_URIS.get(name, _META_URIS["draft2020-12"]))
        reg = referencing.Registry()
        for uri, doc in remotes.items():
            reg = reg.with_resource(uri, referencing.Resource.from_contents(doc, default_specification=spec))
        kw["registry"] = reg
    return cls(schema, **kw)




def is_valid(instance: Any, schema: Any, draft: str | None = None, remotes: dict | None = None):
    """True / False per jsonschema, or None when jsonschema fails on the schema."""
    try:
        return bool(validator_for(schema, draft, remotes).is_valid(instance))
    except Exception:  # noqa: BLE001 - unresolvable refs, bad regexes, recursion
        return None


# --------------------------------------------------------------------------- reordering

_MAX_DEPTH = 200


class _Reorderer:
    def __init__(self, root: Any, draft: str | None, remotes: dict | None):
        self.validator = validator_for(root, draft, remotes)
        self.root = root
        self.draft7_like = type(self.validator).__name__ in ("Draft4Validator", "Draft6Validator",
                                                             "Draft7Validator") or (draft in ("draft4", "draft6", "draft7")
                                                                                     and "$schema" not in (root if isinstance(root, dict) else {}))
        try:
            self.resolver0 = self.validator._resolver  # a referencing.Resolver rooted at the schema
        except Exception:  # noqa: BLE001
            self.resolver0 = None
        self._spec = None
        try:
            import referencing.jsonschema as rj

            self._spec = rj.specification_with(_META_URIS.get(draft or "draft2020-12"), default=rj.DRAFT202012)
        except Exception:  # noqa: BLE001
            pass

    # -- references
    def enter(self, node: dict, resolver):
        """The resolver for inside ``node`` (a node with an ``$id`` changes the base URI)."""
        if resolver is None or "$id" not in node or not isinstance(node.get("$id"), str):
            return resolver
        if self.draft7_like and node["$id"].startswith("#"):
            return resolver  # a plain-name fragment, not a base change
        try:
            spec = self._spec
            res = spec.create_resource(node) if spec is not None else None
            return resolver.in_subresource(res) if res is not None else resolver
        except Exception:  # noqa: BLE001
            return resolver

    def lookup(self, ref: str, resolver):
        """(target schema, resolver inside it) or (None, resolver)."""
        if ref.startswith("#/") or ref == "#":
            if resolver is self.resolver0 or resolver is None:
                target = _pointer(self.root, ref[1:])
                if target is not None:
                    return target, resolver
        if resolver is not None:
            try:
                got = resolver.lookup(ref)
                return got.contents, got.resolver
            except Exception:  # noqa: BLE001
                pass
        if ref.startswith("#/"):
            return _pointer(self.root, ref[1:]), resolver
        return None, resolver

    def valid_against(self, instance, sub, resolver) -> bool:
        try:
            v = self.validator.evolve(schema=sub, _resolver=resolver) if resolver is not None \
                else self.validator.evolve(schema=sub)
            return bool(v.is_valid(instance))
        except Exception:  # noqa: BLE001
            return False

    # -- which subschemas apply to a value at one instance location
    def applicable_with_resolvers(self, nodes, instance):
        """Flatten ``nodes`` [(schema, resolver)] through $ref, allOf, the first valid
        anyOf/oneOf branch and if/then/else into the [(schema, resolver)] that apply here."""
        out, seen = [], set()
        stack = list(reversed(nodes))
        while stack:
            node, res = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            res = self.enter(node, res)
            out.append((node, res))
            more = []
            for kw in ("$ref", "$dynamicRef", "$recursiveRef"):
                ref = node.get(kw)
                if isinstance(ref, str):
                    target, tres = self.lookup(ref, res)
                    if target is not None:
                        more.append((target, tres))
            all_of = node.get("allOf")
            if isinstance(all_of, list):
                more.extend((sub, res) for sub in all_of)
            for kw in ("anyOf", "oneOf"):
                branches = node.get(kw)
                if isinstance(branches, list):
                    for sub in branches:
                        if self.valid_against(instance, sub, res):
                            more.append((sub, res))
                            break
            if "if" in node and ("then" in node or "else" in node):
                cond = node["if"]
                holds = self.valid_against(instance, cond, res)
                # the names `if` tests come first, as the schema lists them (and as logitgate's
                # grammar orders them): the whole `if` applies when it holds, else only its names
                if holds:
                    more.append((cond, res))
                elif isinstance(cond, dict) and isinstance(cond.get("properties"), dict):
                    more.append(({"properties": {k: True for k in cond["properties"]}}, res))
                branch = node.get("then") if holds else node.get("else")
                if branch is not None:
                    more.append((branch, res))
            stack.extend(reversed(more))
        return out

    # -- the walk
    def value(self, instance, nodes, depth=0):
        if depth > _MAX_DEPTH or not isinstance(instance, (dict, list)):
            return instance
        app = self.applicable_with_resolvers(nodes, instance)
        for node, _ in app:  # a const / enum member equal to the instance: its own key order
            if "const" in node and _same(node["const"], instance):
                return _order_like(instance, node["const"])
            if isinstance(node.get("enum"), list):
                for member in node["enum"]:
                    if _same(member, instance):
                        return _order_like(instance, member)
        if isinstance(instance, dict):
            return self.obj(instance, app, depth)
        return self.arr(instance, app, depth)

    def obj(self, instance: dict, app, depth):
        order, seen = [], set()
        for node, _ in app:
            props = node.get("properties")
            if isinstance(props, dict):
                for k in props:
                    if k not in seen:
                        seen.add(k)
                        order.append(k)
        keys = [k for k in order if k in instance] + [k for k in instance if k not in seen]
        out = {}
        for k in keys:
            subs = []
            for node, res in app:
                props = node.get("properties")
                if isinstance(props, dict) and k in props:
                    subs.append((props[k], res))
                    continue
                matched = False
                pats = node.get("patternProperties")
                if isinstance(pats, dict):
                    for pat, sub in pats.items():
                        if _search(pat, k):
                            subs.append((sub, res))
                            matched = True
                add = node.get("additionalProperties")
                if not matched and isinstance(add, dict):
                    subs.append((add, res))
            out[k] = self.value(instance[k], subs, depth + 1) if subs else instance[k]
        return out

    def arr(self, instance: list, app, depth):
        out = []
        for i, x in enumerate(instance):
            subs = []
            for node, res in app:
                prefix = node.get("prefixItems")
                items = node.get("items")
                if isinstance(prefix, list):
                    if i < len(prefix):
                        subs.append((prefix[i], res))
                    elif isinstance(items, (dict, bool)):
                        subs.append((items, res))
                elif isinstance(items, list):  # draft 4-7 tuple form
                    if i < len(items):
                        subs.append((items[i], res))
                    elif isinstance(node.get("additionalItems"), dict):
                        subs.append((node["additionalItems"], res))
                elif isinstance(items, dict):
                    subs.append((items, res))
            out.append(self.value(x, subs, depth + 1) if subs else x)
        return out


def _same(a: Any, b: Any) -> bool:
    """JSON equality (True is not 1) of two values with objects."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _order_like(instance: Any, model: Any) -> Any:
    """``instance`` (equal to ``model``) with every object's keys in ``model``'s order."""
    if isinstance(instance, dict) and isinstance(model, dict):
        return {k: _order_like(instance[k], model[k]) for k in model}
    if isinstance(instance, list) and isinstance(model, list):
        return [_order_like(x, y) for x, y in zip(instance, model)]
    return instance


def _pointer(doc: Any, ptr: str) -> Any:
    """A JSON pointer ("/a/b", percent-decoded, ~0 ~1) into doc, or None."""
    from urllib.parse import unquote

    if ptr == "":
        return doc
    cur = doc
    for tok in unquote(ptr).split("/")[1:]:
        tok = tok.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return None
    return cur


@lru_cache(maxsize=4096)
def _compiled(pat: str):
    try:
        return re.compile(pat)
    except re.error:
        return None


def _search(pat: str, key: str) -> bool:
    rx = _compiled(pat)
    return bool(rx is not None and rx.search(key))


def reorder_to_schema(instance: Any, schema: Any, root_schema: Any = None, *, draft: str | None = None,
                      remotes: dict | None = None) -> Any:
    """``instance`` with every object's keys in the order of the schema's ``properties``: the keys
    the schema names first, in schema order, then the others in their original order.

    Follows ``properties``, ``patternProperties`` / ``additionalProperties``, ``items`` /
    ``prefixItems`` (and draft-7 tuple ``items`` / ``additionalItems``), ``$ref`` (local JSON pointers
    directly, anything else through ``referencing``), ``allOf`` (the union of the properties orders,
    in order), ``if``/``then``/``else``, and for ``anyOf`` / ``oneOf`` the first branch the instance
    validates against (jsonschema, the schema's ``$schema`` draft or ``draft``, default 2020-12,
    format checking on). An object or array equal to a ``const`` (or an ``enum`` member) that
    applies takes that value's key order. Never raises: on any failure the original instance is
    returned.
    ``schema`` is the subschema the instance is for; ``root_schema`` the document its references
    resolve in (default: ``schema``)."""
    try:
        root = schema if root_schema is None else root_schema
        r = _Reorderer(root, draft, remotes)
        return r.value(instance, [(schema, r.resolver0)])
    except Exception:  # noqa: BLE001 - documented: fall back to the original order
        return instance
    except RecursionError:
        return instance


def key_orders(value: Any) -> Any:
    """A structure that differs iff the key order anywhere differs (for tests / the self-check)."""
    if isinstance(value, dict):
        return [(k, key_orders(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [key_orders(v) for v in value]
    return None


# --------------------------------------------------------------------------- self-check


def self_check(subsets=None, n: int | None = 50, suite: bool = True, log=print) -> dict:
    """Reorder every valid instance of the sampled cases and check: same JSON value; same
    jsonschema verdict as the original; the root object's known keys first, in schema order."""
    import time

    t0 = time.perf_counter()
    cases = load_jsonschemabench(subsets, n)
    if suite:
        cases += load_test_suite()
    remotes = suite_remotes()
    stats = {"instances": 0, "reordered": 0, "label_valid_jsonschema_valid": 0,
             "label_valid_jsonschema_invalid": 0, "jsonschema_error": 0, "problems": []}
    for c in cases:
        rem = remotes if c.draft else None
        for inst in c.instances:
            if not inst.valid:
                continue
            stats["instances"] += 1
            new = reorder_to_schema(inst.data, c.schema, c.schema, draft=c.draft, remotes=rem)
            where = f"{c.id}{inst.id_suffix}"
            if new != inst.data or dumps(new).encode() == b"" or len(dumps(new)) != len(dumps(inst.data)):
                stats["problems"].append(f"{where}: reordered value differs from the original")
                continue
            if key_orders(new) != key_orders(inst.data):
                stats["reordered"] += 1
            v_old = is_valid(inst.data, c.schema, c.draft, rem)
            v_new = is_valid(new, c.schema, c.draft, rem)
            if v_old is None:
                stats["jsonschema_error"] += 1
            elif v_old != v_new:
                stats["problems"].append(f"{where}: jsonschema says {v_old} before, {v_new} after reordering")
            else:
                stats["label_valid_jsonschema_valid" if v_old else "label_valid_jsonschema_invalid"] += 1
            if isinstance(new, dict) and isinstance(c.schema, dict) and isinstance(c.schema.get("properties"), dict) \
                    and not any(k in c.schema for k in ("allOf", "anyOf", "oneOf", "$ref", "if")):
                known = [k for k in c.schema["properties"] if k in new]
                if list(new)[:len(known)] != known:
                    stats["problems"].append(f"{where}: root keys {list(new)[:6]} not in schema order {known[:6]}")
    stats["seconds"] = round(time.perf_counter() - t0, 2)
    log(f"reorder self-check: {stats['instances']} valid instances over {len(cases)} schemas, "
        f"{stats['reordered']} with keys moved; jsonschema agrees with the 'valid' label on "
        f"{stats['label_valid_jsonschema_valid']} (disagrees on {stats['label_valid_jsonschema_invalid']}, "
        f"jsonschema failed on {stats['jsonschema_error']}); {len(stats['problems'])} problem(s); "
        f"{stats['seconds']} s")
    for p in stats["problems"][:20]:
        log("  PROBLEM " + p)
    return stats


def _main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Self-check of reorder_to_schema on real instances.")
    ap.add_argument("--subsets", default=None, help="comma-separated (default: all 21)")
    ap.add_argument("--n", type=int, default=50, help="schemas per subset (0: all)")
    ap.add_argument("--no-suite", action="store_true")
    args = ap.parse_args(argv)
    subsets = [s.strip() for s in args.subsets.split(",")] if args.subsets else None
    stats = self_check(subsets, args.n or None, not args.no_suite)
    assert not stats["problems"], f"{len(stats['problems'])} reorder problem(s)"
    return 0


if __name__ == "__main__":
    sys.exit(_main())
