"""The keyword table (``logitgate.json_schema.keywords.KEYWORDS``, rendered in the docs) against
what the translator really does."""
from __future__ import annotations

import json

import pytest

import logitgate as lg
from logitgate.json_schema import translate
from logitgate.json_schema.keywords import KEYWORDS, STATUSES

from .json_schema_helpers import accepts, agrees_with_jsonschema, byte_tokenizer

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"

# keyword -> (schema, texts accepted, texts refused): enforced in strict mode
ENFORCED: dict[str, tuple[dict, list[str], list[str]]] = {
    "type": ({"type": ["integer", "null"]}, ["3", "null", "-12"], ["1.5", '"a"', "true"]),
    "enum": ({"enum": [1, "a", None]}, ["1", "1.0", '"a"', "null"], ["2", '"b"']),
    "const": ({"const": {"a": 1}}, ['{"a":1}'], ['{"a":2}', "{}"]),
    "allOf": ({"allOf": [{"type": "integer"}, {"minimum": 3}]}, ["3", "40"], ["2", '"a"']),
    "anyOf": ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, ["3", "true"], ['"a"', "null"]),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, ["3", '"a"'], ["null"]),
    "not": ({"type": ["integer", "string"], "not": {"type": "string"}}, ["3"], ['"a"']),
    "if": ({"type": "integer", "if": {"minimum": 10}, "then": {"multipleOf": 2}, "else": {"maximum": 0}},
           ["12", "0", "-3"], ["11", "5"]),
    "then": ({"type": "integer", "if": {"minimum": 10}, "then": {"multipleOf": 2}}, ["12", "5"], ["11"]),
    "$dynamicRef": ({"$id": "https://example.com/ints", "$ref": "list",
                     "$defs": {"list": {"$id": "list", "type": "array", "items": {"$dynamicRef": "#item"},
                                        "$defs": {"any": {"$dynamicAnchor": "item"}}},
                               "int": {"$dynamicAnchor": "item", "type": "integer"}}},
                    ["[1,2]", "[]"], ['["a"]', "[1.5]"]),
    "$recursiveRef": ({"$schema": D2019, "$id": "https://example.com/t", "$recursiveAnchor": True, "$ref": "tree",
                       "required": ["v"],
                       "$defs": {"tree": {"$id": "tree", "$recursiveAnchor": True, "type": "object",
                                          "properties": {"v": {}, "kids": {"type": "array",
                                                                           "items": {"$recursiveRef": "#"}}}}}},
                      ['{"v":1,"kids":[{"v":2}]}'], ['{"v":1,"kids":[{}]}', "{}"]),
    "else": ({"type": "integer", "if": {"minimum": 10}, "else": {"maximum": 0}}, ["11", "-1"], ["5"]),
    "dependentRequired": ({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
                          ['{"a":1,"b":2}', '{"b":2}', "{}"], ['{"a":1}']),
    "dependentSchemas": ({"type": "object", "properties": {"a": {}, "b": {}},
                          "dependentSchemas": {"a": {"required": ["b"]}}}, ['{"a":1,"b":2}', "{}"], ['{"a":1}']),
    "dependencies": ({"$schema": D7, "type": "object", "properties": {"a": {}, "b": {}},
                      "dependencies": {"a": ["b"]}}, ['{"a":1,"b":2}', "{}"], ['{"a":1}']),
    "$ref": ({"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}},
             ["[1,2]"], ['["a"]']),
    "minLength": ({"type": "string", "minLength": 2}, ['"ab"', '"éé"'], ['"a"']),
    "maxLength": ({"type": "string", "maxLength": 2}, ['"ab"', '"éé"'], ['"abc"']),
    "pattern": ({"type": "string", "pattern": "^[a-z]+\\d$"}, ['"ab1"'], ['"ab"', '"1"']),
    "format": ({"type": "string", "format": "date"}, ['"2024-02-29"'], ['"2023-02-29"', '"x"']),
    "minimum": ({"type": "number", "minimum": 1.5}, ["1.5", "2"], ["1.49"]),
    "maximum": ({"type": "number", "maximum": 1.5}, ["1.5", "-2"], ["1.51"]),
    "exclusiveMinimum": ({"type": "integer", "exclusiveMinimum": 1}, ["2"], ["1"]),
    "exclusiveMaximum": ({"$schema": D4, "type": "integer", "maximum": 1, "exclusiveMaximum": True}, ["0"], ["1"]),
    "multipleOf": ({"type": "number", "multipleOf": 0.5}, ["1.5", "2"], ["1.25"]),
    "properties": ({"type": "object", "properties": {"a": {"type": "integer"}}}, ['{"a":1}', "{}"], ['{"a":"x"}']),
    "required": ({"type": "object", "properties": {"a": {}}, "required": ["a"]}, ['{"a":1}'], ["{}"]),
    "additionalProperties": ({"type": "object", "additionalProperties": {"type": "integer"}},
                             ['{"x":1}'], ['{"x":"a"}']),
    "patternProperties": ({"type": "object", "patternProperties": {"^n": {"type": "integer"}},
                           "additionalProperties": False}, ['{"n1":1}'], ['{"n1":"a"}', '{"x":1}']),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 2}}, ['{"ab":1}'], ['{"abc":1}']),
    "minProperties": ({"type": "object", "minProperties": 1}, ['{"a":1}'], ["{}"]),
    "maxProperties": ({"type": "object", "maxProperties": 1}, ['{"a":1}'], ['{"a":1,"b":2}']),
    "unevaluatedProperties": ({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
                              ['{"a":1}'], ['{"b":1}']),
    "items": ({"type": "array", "items": {"type": "integer"}}, ["[1,2]", "[]"], ['["a"]']),
    "prefixItems": ({"type": "array", "prefixItems": [{"type": "string"}], "items": False}, ['["a"]'],
                    ["[1]", '["a",1]']),
    "additionalItems": ({"$schema": D7, "type": "array", "items": [{"type": "string"}], "additionalItems": False},
                        ['["a"]'], ['["a",1]']),
    "minItems": ({"type": "array", "minItems": 1}, ["[1]"], ["[]"]),
    "maxItems": ({"type": "array", "maxItems": 1}, ["[1]"], ["[1,2]"]),
    "contains": ({"type": "array", "contains": {"type": "string"}}, ['[1,"a"]'], ["[1]"]),
    "minContains": ({"type": "array", "contains": {"type": "string"}, "minContains": 2}, ['["a","b"]'], ['["a"]']),
    "maxContains": ({"type": "array", "contains": {"type": "string"}, "maxContains": 1}, ['["a",1]'],
                    ['["a","b"]']),
    "uniqueItems": ({"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}, ['["a","b"]'],
                    ['["a","a"]']),
    "unevaluatedItems": ({"type": "array", "prefixItems": [{"type": "string"}], "unevaluatedItems": False},
                         ['["a"]'], ['["a",1]']),
}

# keyword -> (schema strict mode refuses, JSON pointer of the problem)
RELAXED: dict[str, tuple[dict, str]] = {
    "oneOf": ({"oneOf": [{"type": "array", "prefixItems": [{"type": "string"}]}, {"type": "array", "maxItems": 3}]},
              "/oneOf"),
    "not": ({"not": {"type": "array", "prefixItems": [{"type": "string"}]}}, "/not"),
    "if": ({"if": {"type": "array", "prefixItems": [{"type": "string"}]}, "then": {"minItems": 2}}, "/if"),
    "then": ({"if": {"type": "array", "prefixItems": [{"type": "string"}]}, "then": {"minItems": 2}}, "/if"),
    "else": ({"if": {"type": "array", "prefixItems": [{"type": "string"}]}, "else": {"minItems": 2}}, "/if"),
    "$recursiveRef": ({"$schema": D2019, "type": "object", "properties": {"a": {"$recursiveRef": "#/$defs/x"}},
                       "$defs": {"x": {"type": "integer"}}}, "/properties/a/$recursiveRef"),
    "minLength": ({"type": "string", "minLength": 300, "pattern": "^a"}, ""),
    "maxLength": ({"type": "string", "maxLength": 300, "format": "uri"}, ""),
    "pattern": ({"type": "string", "pattern": "(a(?=a)b)"}, "/pattern"),
    "format": ({"type": "string", "format": "uri", "maxLength": 250}, ""),
    "multipleOf": ({"type": "number", "multipleOf": 1.234567891}, "/multipleOf"),
    "required": ({"type": "object", "properties": {f"p{i}": {} for i in range(9)},
                  "required": [f"p{i}" for i in range(9)]}, ""),
    "minProperties": ({"type": "object", "properties": {f"p{i}": {} for i in range(100)}, "minProperties": 60}, ""),
    "maxProperties": ({"type": "object", "properties": {f"p{i}": {} for i in range(100)}, "maxProperties": 60}, ""),
    "unevaluatedProperties": ({"type": "object", "anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
                               "unevaluatedProperties": False}, "/unevaluatedProperties"),
    "contains": ({"allOf": [{"contains": {"const": k}} for k in range(4)]}, "/contains"),
    "minContains": ({"type": "array", "contains": {"type": "integer"}, "minContains": 3000}, "/contains"),
    "maxContains": ({"type": "array", "contains": {"type": "array", "prefixItems": [{"type": "string"}]},
                     "maxContains": 1}, "/maxContains"),
    "uniqueItems": ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "/uniqueItems"),
    "unevaluatedItems": ({"type": "array", "anyOf": [{"prefixItems": [{}]}, {"prefixItems": [{}, {}]}],
                          "unevaluatedItems": False}, "/unevaluatedItems"),
}
# property_order="any" is what makes `required` bounded
RELAXED_OPTIONS = {"required": {"property_order": "any"}}

ANNOTATION_VALUES = {"title": "t", "description": "d", "default": 5, "examples": [1], "example": 1,
                     "deprecated": True, "readOnly": True, "writeOnly": True, "$comment": "c",
                     "contentEncoding": "base64", "contentMediaType": "application/json", "contentSchema": {}}


def test_table_lists_what_the_translator_reads() -> None:
    assert set(KEYWORDS) == translate.KNOWN
    for name, kw in KEYWORDS.items():
        assert kw.name == name and kw.status in STATUSES, name
        assert kw.applies_to in ("any", "string", "number", "object", "array"), name


def test_every_keyword_has_a_case() -> None:
    for name, kw in KEYWORDS.items():
        if kw.status in ("exact", "bounded", "partial"):
            assert name in ENFORCED, f"{name}: no enforced case"
        if kw.status in ("bounded", "partial"):
            assert name in RELAXED, f"{name}: no relaxed case"
        if kw.status == "annotation":
            assert name in ANNOTATION_VALUES, name
    assert set(RELAXED) <= {n for n, k in KEYWORDS.items() if k.status in ("bounded", "partial")}
    assert set(ENFORCED) <= {n for n, k in KEYWORDS.items() if k.status != "annotation"}


@pytest.mark.parametrize("name", sorted(ENFORCED))
def test_enforced(name: str) -> None:
    schema, good, bad = ENFORCED[name]
    g = lg.Grammar.from_json_schema(schema)  # strict: nothing relaxed
    assert g.relaxed == []
    compiled = lg.compile(g, byte_tokenizer())
    for text in good:
        assert accepts(compiled, text), (name, text)
    for text in bad:
        assert not accepts(compiled, text), (name, text)


@pytest.mark.parametrize("name", sorted(RELAXED))
def test_relaxed_is_reported(name: str) -> None:
    schema, pointer = RELAXED[name]
    opts = RELAXED_OPTIONS.get(name, {})
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema(schema, **opts)
    assert pointer in [p for p, _ in e.value.problems], (name, e.value.problems)
    g = lg.Grammar.from_json_schema(schema, strict=False, **opts)
    assert pointer in [p for p, _ in g.relaxed]


@pytest.mark.parametrize("name", sorted(ANNOTATION_VALUES))
def test_annotation_changes_nothing(name: str) -> None:
    base = {"type": "string", "maxLength": 3}
    g = lg.Grammar.from_json_schema({**base, name: ANNOTATION_VALUES[name]})
    assert g.relaxed == []
    compiled = lg.compile(g, byte_tokenizer())
    for text, ok in [('"abc"', True), ('"abcd"', False), ("1", False)]:
        assert accepts(compiled, text) is ok, (name, text)


def test_unsupported_formats_are_annotations() -> None:
    g = lg.Grammar.from_json_schema({"type": "string", "format": "no-such-format"})
    assert g.relaxed == [] and any("no-such-format" in n for n in g.notes)
    assert accepts(lg.compile(g, byte_tokenizer()), '"(("')


def test_regex_format_is_checked_from_above() -> None:
    import json

    g = lg.Grammar.from_json_schema({"type": "string", "format": "regex"})
    assert g.relaxed == [] and any("'regex' is checked from above" in n for n in g.notes)
    c = lg.compile(g, byte_tokenizer())
    for pattern, ok in [(r"(a|b)+\d[\]]", True), ("[]", True), ("((", False), ("[a", False), ("a\\", False)]:
        assert accepts(c, json.dumps(pattern)) == ok, pattern


@pytest.mark.parametrize("schema", [
    {"not": {"not": {"type": "string", "maxLength": 2}}},
    {"type": ["integer", "string"], "not": {"not": {"type": "integer", "minimum": 3}}},
    {"allOf": [{"enum": [1, "a", None]}, {"not": {"not": {"type": "string"}}}]},
    {"not": {"not": {"not": {"type": "null"}}}},
    {"type": "object", "properties": {"a": {"not": {"not": {"enum": [1, 2]}}}}, "required": ["a"]},
])
def test_double_negation_is_exact(schema: dict) -> None:
    """``not`` of ``not A`` is A, enforced exactly (nothing relaxed), against ``jsonschema``."""
    jsonschema = pytest.importorskip("jsonschema")
    g = lg.Grammar.from_json_schema(schema)  # strict: would raise if a negation were relaxed
    compiled = lg.compile(g, byte_tokenizer())
    validator = jsonschema.Draft202012Validator(schema)
    texts = ["1", "3", "7", "-2", '"a"', '"ab"', '"abc"', "null", "true", "[]", "{}", '{"a":1}', '{"a":3}',
             '{"a":"x"}', "2.5"]
    for text in texts:
        assert accepts(compiled, text) == validator.is_valid(json.loads(text)), (schema, text)


COMBINED_NEGATIONS = [
    {"not": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                       {"properties": {"b": {"type": "null"}}, "required": ["b"]}],
             "properties": {"c": {"type": "integer"}}, "required": ["c"]}},
    {"not": {"allOf": [{"multipleOf": 2}], "anyOf": [{"multipleOf": 3}], "oneOf": [{"multipleOf": 5}]}},
    {"not": {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}], "not": {"required": ["c"]}}},
    {"not": {"oneOf": [{"type": "object", "minProperties": 2}]}},
    {"type": "object", "if": {"properties": {"a": {"const": 1}}, "allOf": [{"required": ["a"]}]},
     "then": {"required": ["b"]}, "else": {"maxProperties": 1}},
]


@pytest.mark.parametrize("schema", COMBINED_NEGATIONS)
def test_negated_combinators_beside_other_keywords_are_exact(schema: dict) -> None:
    """A schema whose ``allOf``, ``anyOf``, one-member ``oneOf`` or ``not`` sit beside other
    keywords is the conjunction of its parts, so ``not`` (and an ``if``) of it is the union of their
    negations: strict mode compiles it, and the grammar agrees with ``jsonschema``."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    leaf = st.one_of(st.integers(-2, 31), st.sampled_from(["a", None, True]))
    agrees_with_jsonschema(schema, st.one_of(leaf, st.dictionaries(st.sampled_from("abcd"), leaf, max_size=4)),
                           max_examples=200)


COUNT_NEGATIONS = [
    {"not": {"minItems": 2}},
    {"not": {"type": "array", "maxItems": 1}},
    {"not": {"minProperties": 1, "maxProperties": 2}},
    {"type": ["array", "object"], "not": {"maxItems": 0, "minProperties": 2}},
    {"type": "array", "if": {"minItems": 1}, "then": {"minItems": 2}, "else": {"maxItems": 0}},
    {"oneOf": [{"type": "array", "minItems": 1}, {"maxItems": 2}]},
    {"oneOf": [{"type": "object", "required": ["a"]}, {"maxProperties": 1}]},
    {"not": {"type": "object", "properties": {"a": {"minItems": 1}}, "minProperties": 2}},
]


@pytest.mark.parametrize("schema", COUNT_NEGATIONS)
def test_negated_counts_are_exact(schema: dict) -> None:
    """``not``, ``if`` and overlapping ``oneOf`` over ``minItems``/``maxItems``/``minProperties``/
    ``maxProperties`` (with ``type``, ``properties``, ``required``) are exact: strict mode compiles
    them, and the grammar agrees with ``jsonschema`` on small arrays, objects and scalars."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    leaf = st.one_of(st.integers(-3, 3), st.sampled_from(["a", None, True]))
    value = st.one_of(leaf, st.lists(st.one_of(leaf, st.lists(leaf, max_size=2)), max_size=4),
                      st.dictionaries(st.sampled_from("abcd"), st.one_of(leaf, st.lists(leaf, max_size=2)),
                                      max_size=4))
    agrees_with_jsonschema(schema, value)
