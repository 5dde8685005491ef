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

# Files whose semantics we deliberately do not follow.
SEMANTIC_DEVIATIONS = {
    # formats are asserted (as structured-output users and JSONSchemaBench's labels expect); the
    # 2020-12 default treats them as annotations only
    "format": "format is asserted, not an annotation",
    "optional/format/unknown": "unknown formats are not asserted",
    "optional/format-assertion": "format vocabulary switching by $vocabulary is not supported",
    "vocabulary": "$vocabulary is not read",
    # a valid document must be a JSON text a model can write: no NaN, no integers beyond floats
    "optional/float-overflow": "1e308 * 10 as integer needs exponent forms for integers",
    "optional/content": "contentEncoding/contentMediaType are annotations here",
}
# Groups expected not to compile (SchemaError), by id prefix, with the reason.
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
        try:
            g = lg.Grammar.from_json_schema(group["schema"], strict=False, property_order="any", registry=registry)
            compiled = lg.compile(g, tok)
        except lg.SchemaError as e:
            rec["error"] = str(e)
            results.append(rec)
            continue
        rec["relaxed"] = g.relaxed
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
    bad = [(r["id"], r["false_rejects"]) for r in outcomes if r["false_rejects"] and not _deviation(r)]
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
    assert n > 400 and compiled / n > 0.9, f"only {compiled}/{n} groups compile"
