"""The official JSON-Schema-Test-Suite (draft 2020-12 and draft 7) through the grammar engine.

Every group is compiled with ``strict=False`` and ``property_order="any"`` (instances keep their
key order); every instance is fed as compact JSON bytes. Invariants checked:

* no valid instance is ever rejected (a blocked valid document is the worst failure), except the
  listed known deviations;
* an invalid instance is rejected unless the group's grammar reports a relaxation
  (``Grammar.relaxed``) or the group is a listed known deviation;
* a group that does not compile raises ``SchemaError`` and is listed in ``EXPECTED_UNSUPPORTED``.
"""
from __future__ import annotations

import pytest

import logitgate as lg

from .json_schema_helpers import SUITE, accepts, byte_tokenizer, dumps, suite_groups, suite_registry

pytestmark = pytest.mark.skipif(not SUITE.is_dir(), reason="shared/data/json-schema-test-suite not found")

# Files whose semantics we deliberately do not follow (false accepts and rejects allowed there).
SEMANTIC_DEVIATIONS = {
    # formats are asserted (as structured-output users and JSONSchemaBench's labels expect); the
    # 2020-12 default treats them as annotations only
    "format": "format is asserted, not an annotation",
    "optional/format-assertion": "format vocabulary switching by $vocabulary is not supported",
    "vocabulary": "$vocabulary is not read",
    "optional/cross-draft": "a $ref into a document of another draft is read with the referring draft",
    # integers are written without exponent: 1e308 * 10 cannot be produced as an integer
    "optional/float-overflow": "integers are produced without exponent",
    "optional/content": "contentEncoding/contentMediaType/contentSchema are annotations",
    # not regular, or approximated from above: see logitgate.json_schema.formats.FORMAT_NOTES
    "optional/format/regex": "format regex is not asserted",
    "optional/format/ecmascript-regex": "format regex is not asserted",
    "optional/format/unknown": "unknown formats are not asserted",
}
# Groups with a known false reject (none at present).
KNOWN_FALSE_REJECTS: dict[str, str] = {}
EXPECTED_UNSUPPORTED: dict[str, str] = {}


def _groups() -> list[dict]:
    if not SUITE.is_dir():
        return []
    return suite_groups("draft2020-12") + suite_groups("draft7")


def _file(group: dict) -> str:
    f = group["file"].split("/", 2)[2]
    return f[: -len(".json")]


@pytest.fixture(scope="module")
def outcomes():
    tok = byte_tokenizer()
    registry = suite_registry()
    results = []
    for group in _groups():
        rec = {"id": group["id"], "file": _file(group), "false_rejects": [], "false_accepts": [], "error": None,
               "relaxed": []}
        schema = group["schema"]
        if group["draft"] == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
            schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
        try:
            g = lg.Grammar.from_json_schema(schema, strict=False, property_order="any", registry=registry)
            compiled = lg.compile(g, tok)
        except lg.SchemaError as e:
            if "no JSON document" in str(e):  # right exactly when no instance is valid
                rec["false_rejects"] = [t["description"] for t in group["tests"] if t["valid"]]
            else:
                rec["error"] = str(e)
            results.append(rec)
            continue
        from logitgate.json_schema.formats import APPROXIMATE_FORMATS

        approximate = any(f'"format":"{f}"' in dumps(schema) for f in APPROXIMATE_FORMATS)
        rec["relaxed"] = g.relaxed or (["approximate format"] if approximate else [])
        for test in group["tests"]:
            text = dumps(test["data"])
            ok = accepts(compiled, text)
            if test["valid"] and not ok:
                rec["false_rejects"].append(test["description"])
            elif not test["valid"] and ok:
                rec["false_accepts"].append(test["description"])
        results.append(rec)
    return results


def _deviation(rec: dict) -> bool:
    return rec["file"] in SEMANTIC_DEVIATIONS


def test_no_valid_instance_rejected(outcomes):
    bad = [(r["id"], r["false_rejects"]) for r in outcomes
           if r["false_rejects"] and not _deviation(r) and r["id"] not in KNOWN_FALSE_REJECTS]
    assert not bad, f"{len(bad)} groups reject valid instances: {bad[:10]}"


def test_invalid_instances_rejected_unless_relaxed(outcomes):
    bad = [(r["id"], r["false_accepts"]) for r in outcomes
           if r["false_accepts"] and not r["relaxed"] and not _deviation(r)]
    assert not bad, f"{len(bad)} groups accept invalid instances without reporting a relaxation: {bad[:10]}"


def test_unsupported_groups_are_the_expected_ones(outcomes):
    errors = {r["id"]: r["error"] for r in outcomes if r["error"]}
    unexpected = {k: v for k, v in errors.items() if not any(k.startswith(p) for p in EXPECTED_UNSUPPORTED)}
    assert not unexpected, f"{len(unexpected)} groups fail to compile: {list(unexpected.items())[:10]}"


def test_coverage_summary(outcomes):
    n = len(outcomes)
    compiled = sum(1 for r in outcomes if not r["error"])
    exact = sum(1 for r in outcomes if not r["error"] and not r["false_accepts"] and not r["false_rejects"])
    assert n > 400 and compiled == n, f"only {compiled}/{n} groups compile"
    assert exact / n > 0.89, f"only {exact}/{n} groups are decided exactly"  # 543/601 when written


def _outcome(schema, tok, tests) -> object:
    try:
        compiled = lg.compile(lg.Grammar.from_json_schema(schema, strict=False, property_order="any"), tok)
    except lg.SchemaError as e:
        return ("error", str(e))
    return [accepts(compiled, dumps(t["data"])) for t in tests]


def test_schema_text_without_ids_loads_like_the_dict():
    """A schema given as text that names no ``$id``/``id``/anchor skips the registry's crawl:
    on every group of the reference files, the text compiles to the same accept/reject outcome
    (or the same error) as the dict, which is always crawled."""
    from logitgate.json_schema.loader import _may_skip_crawl

    tok = byte_tokenizer()
    files = ("ref", "refRemote", "defs", "anchor", "id", "definitions", "dynamicRef", "recursiveRef", "items")
    groups = [g for g in _groups() if _file(g) in files]
    assert len(groups) > 50
    skipped = 0
    for group in groups:
        schema = group["schema"]
        if group["draft"] == "draft7" and isinstance(schema, dict) and "$schema" not in schema:
            schema = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
        text = dumps(schema)
        skipped += _may_skip_crawl(text)
        assert _outcome(text, tok, group["tests"]) == _outcome(schema, tok, group["tests"]), group["id"]
    assert skipped > 10  # the comparison covers schemas that skip the crawl
