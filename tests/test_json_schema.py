"""Grammar.from_json_schema: the API contract, options, errors, and masks on real tokenizers."""
from __future__ import annotations

import json
import random
from decimal import Decimal

import numpy as np
import pytest

import logitgate as lg

from .json_schema_helpers import (BENCH, accepts, agrees_with_jsonschema, bench_instances, bench_schemas,
                                  byte_tokenizer, dumps)


def compiled(schema, **kw):
    return lg.compile(lg.Grammar.from_json_schema(schema, **kw), byte_tokenizer())


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_schema_order_is_the_default():
    c = compiled(PERSON)
    assert accepts(c, '{"name":"Ann","age":31}')
    assert accepts(c, '{"name":"Ann","age":31,"email":"a@b.co","tags":["x","y"]}')
    assert not accepts(c, '{"age":31,"name":"Ann"}')  # out of schema order
    assert not accepts(c, '{"name":"Ann"}')  # required age missing
    assert not accepts(c, '{"name":"","age":31}')  # minLength
    assert not accepts(c, '{"name":"Ann","age":151}')  # maximum
    assert not accepts(c, '{"name":"Ann","age":3,"x":1}')  # additionalProperties false
    assert not accepts(c, '{"name":"Ann","age":3,"tags":["a","b","c","d"]}')  # maxItems
    assert not accepts(c, '{"name":"Ann","age":3,"email":"nope"}')  # format


def test_any_order_each_property_at_most_once():
    c = compiled(PERSON, property_order="any")
    assert accepts(c, '{"age":31,"name":"Ann"}')
    assert accepts(c, '{"tags":[],"age":1,"name":"B"}')
    assert not accepts(c, '{"age":31,"name":"Ann","age":32}')
    assert not accepts(c, '{"age":31}')


def test_additional_properties_default_true_excludes_named_keys():
    c = compiled({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert accepts(c, '{"a":1,"b":"x","c":[1,{"d":null}]}')
    assert accepts(c, '{"b":true}')
    assert not accepts(c, '{"a":1,"a":2}')  # the extra key cannot repeat a named one
    assert not accepts(c, '{"a":"x"}')


def test_whitespace_modes():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    value = {"a": [1, 2], "b": {}}
    pretty = compiled(schema, whitespace="pretty")
    assert accepts(pretty, json.dumps(value, indent=2))
    assert not accepts(pretty, json.dumps(value))
    flexible = compiled(schema, whitespace="flexible")
    for text in (json.dumps(value), json.dumps(value, indent=4), ' {"a" :\n[ 1 ,2 ]\t, "b":{ } } '):
        assert accepts(flexible, text), text
    assert not accepts(flexible, '{"a":' + " " * 65 + "[]}")  # a run is bounded
    compact = compiled(schema)
    assert accepts(compact, '{"a":[1,2],"b":{}}')
    assert not accepts(compact, '{"a": [1,2]}')


def test_json_any_value():
    c = lg.compile(lg.Grammar.json(), byte_tokenizer())
    for v in [None, True, 1, -2.5e-3, "x\u00e9\n", [], {}, {"a": [1, {"b": None}]}]:
        assert accepts(c, json.dumps(v, separators=(",", ":"))), v
    assert not accepts(c, "{'a':1}")
    assert not accepts(c, "[1,]")


def test_string_escapes_and_code_point_lengths():
    c = compiled({"type": "string", "maxLength": 2})
    assert accepts(c, '"\\u00e9\\n"')
    assert accepts(c, '"😀é"')  # two code points, six bytes
    assert not accepts(c, '"abc"')
    assert accepts(c, '"\\ud83d\\ude00"')  # one code point as a surrogate pair
    assert not accepts(c, '"\\ud83d"')  # a lone surrogate is never produced


def test_pattern_is_a_search_and_ecma():
    c = compiled({"type": "string", "pattern": "\\d{3}"})
    assert accepts(c, '"ab123cd"')
    assert not accepts(c, '"ab12cd"')
    anchored = compiled({"type": "string", "pattern": "^[a-z]+$"})
    assert accepts(anchored, '"abc"')
    assert not accepts(anchored, '"abc\\n"')  # ECMA $ is the very end


def test_numbers_exact_decimal_bounds_and_multiple_of():
    c = compiled({"type": "number", "exclusiveMinimum": 0.1, "maximum": 2})
    assert accepts(c, "0.1000001") and accepts(c, "2") and accepts(c, "2.000") and accepts(c, "1e-0")
    assert not accepts(c, "0.1") and not accepts(c, "0.10") and not accepts(c, "2.0001")
    m = compiled({"type": "integer", "multipleOf": 3, "minimum": -10})
    assert accepts(m, "-9") and accepts(m, "3000000000000000000000") and accepts(m, "6.0")
    assert not accepts(m, "4") and not accepts(m, "-12")
    big = compiled({"type": "integer", "minimum": 2**64})
    assert accepts(big, str(2**64)) and not accepts(big, str(2**64 - 1))


@pytest.mark.parametrize("draft, fraction_ok", [("http://json-schema.org/draft-04/schema#", False),
                                                  ("http://json-schema.org/draft-07/schema#", True),
                                                  ("https://json-schema.org/draft/2020-12/schema", True)])
@pytest.mark.parametrize("bounds", [{}, {"minimum": 2, "maximum": 40}, {"multipleOf": 3}])
def test_integer_with_a_zero_fraction_follows_the_draft(draft, fraction_ok, bounds):
    import jsonschema

    schema = {"$schema": draft, "type": "integer", **bounds}
    c = compiled(schema)
    oracle = jsonschema.validators.validator_for(schema)(schema)
    for text in ["3", "3.0", "30.00", "-12", "6"]:
        assert accepts(c, text) == oracle.is_valid(json.loads(text)), text
    assert accepts(c, "3.0") == fraction_ok  # 3 satisfies every bound here


def test_enum_const_and_numeric_equality():
    c = compiled({"enum": ["a", 1, None, {"k": [1]}]})
    for text in ('"a"', "1", "1.0", "null", '{"k":[1]}'):
        assert accepts(c, text), text
    assert not accepts(c, '"b"') and not accepts(c, "2") and not accepts(c, '{"k":[2]}')


def test_refs_recursion_and_defs():
    tree = {
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v"], "additionalProperties": False}},
        "$ref": "#/$defs/node",
    }
    c = compiled(tree)
    assert accepts(c, '{"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]}')
    assert not accepts(c, '{"v":1,"kids":[{"w":2}]}')


def test_remote_refs_from_a_registry():
    registry = {"https://example.com/pos.json": {"type": "integer", "minimum": 1}}
    c = compiled({"type": "array", "items": {"$ref": "https://example.com/pos.json"}}, registry=registry)
    assert accepts(c, "[1,2]") and not accepts(c, "[0]")
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema({"items": {"$ref": "https://example.com/missing.json"}})
    assert e.value.pointer == "/items/$ref"


DYNAMIC_LIST = {  # one generic list, its item type bound by the resource that refers to it
    "$id": "https://example.com/lists",
    "properties": {"ints": {"$ref": "ints"}, "strs": {"$ref": "strs"}},
    "$defs": {
        "generic": {"$id": "generic", "type": "array", "items": {"$dynamicRef": "#item"},
                    "$defs": {"default": {"$dynamicAnchor": "item"}}},
        "ints": {"$id": "ints", "$ref": "generic", "$defs": {"i": {"$dynamicAnchor": "item", "type": "integer"}}},
        "strs": {"$id": "strs", "$ref": "generic", "$defs": {"s": {"$dynamicAnchor": "item", "type": "string"}}},
    },
}
RECURSIVE_TREE = {  # 2019-09: the extension's $recursiveAnchor makes every level require "v"
    "$schema": "https://json-schema.org/draft/2019-09/schema",
    "$id": "https://example.com/strict-tree", "$recursiveAnchor": True, "$ref": "tree", "required": ["v"],
    "$defs": {"tree": {"$id": "tree", "$recursiveAnchor": True, "type": "object",
                       "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$recursiveRef": "#"}}}}},
}


@pytest.mark.parametrize("schema, texts", [
    (DYNAMIC_LIST, ['{"ints":[1,2],"strs":["a"]}', '{"ints":["a"]}', '{"strs":[1]}', '{"ints":[],"strs":[]}',
                    '{"ints":[1],"strs":["a",2]}', '{}']),
    (RECURSIVE_TREE, ['{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}', '{"v":1,"kids":[{}]}', '{"v":1,"kids":[{"v":2,"kids":[{}]}]}',
                      '{"kids":[]}', '{"v":1}']),
])
def test_dynamic_scope_like_jsonschema(schema, texts):
    """``$dynamicRef`` and ``$recursiveRef`` resolve in the dynamic scope: the same generic
    subschema, reached through two resources, binds its reference differently. Strict mode (no
    relaxation) and the verdicts of ``jsonschema`` on each text."""
    jsonschema = pytest.importorskip("jsonschema")
    g = lg.Grammar.from_json_schema(schema)
    assert g.relaxed == []
    c = lg.compile(g, byte_tokenizer())
    validator = jsonschema.validators.validator_for(schema)(schema)
    verdicts = [validator.is_valid(json.loads(t)) for t in texts]
    assert True in verdicts and False in verdicts
    assert [accepts(c, t) for t in texts] == verdicts, texts


def test_combinators_if_then_else_and_dependencies():
    s = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "integer"}},
        "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        "then": {"required": ["x"]},
        "dependentRequired": {"x": ["kind"]},
    }
    c = compiled(s, property_order="any")
    assert accepts(c, '{"kind":"a","x":1}') and accepts(c, '{"kind":"b"}') and accepts(c, "{}")
    assert not accepts(c, '{"kind":"a"}') and not accepts(c, '{"x":1}')
    one = compiled({"oneOf": [{"type": "string"}, {"type": "integer"}]})
    assert accepts(one, '"s"') and accepts(one, "3") and not accepts(one, "true")
    assert not lg.Grammar.from_json_schema({"oneOf": [{"type": "string"}, {"type": "integer"}]}).relaxed


def test_contains_and_unique_items():
    c = compiled({"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 2})
    assert accepts(c, "[1,0,1]") and not accepts(c, "[1]") and not accepts(c, "[1,1,1]")
    u = compiled({"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True})
    assert accepts(u, '["z","x"]') and not accepts(u, '["x","x"]')


def test_strict_mode_lists_every_unsupported_construct_with_its_pointer():
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "uniqueItems": True},
        "b": {"oneOf": [{"type": "array", "prefixItems": [{"type": "string"}]}, {"type": "array", "maxItems": 3}]},
    }}
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema(schema)
    pointers = [p for p, _ in e.value.problems]
    assert "/properties/a/uniqueItems" in pointers and "/properties/b/oneOf" in pointers
    g = lg.Grammar.from_json_schema(schema, strict=False)
    assert {p for p, _ in g.relaxed} == set(pointers)


DISJOINT_ONE_OF_CASES = [
    # a property one branch requires is left out of the other's closed property list
    {"type": "object", "oneOf": [
        {"additionalProperties": False, "properties": {"a": {"type": "string"}, "mode": {"enum": ["x"]}}},
        {"additionalProperties": False, "properties": {"b": {"type": "string"}, "mode": {"enum": ["y"]}},
         "required": ["b"]}]},
    # required in both, told apart by enum values, one branch's keywords in an allOf member
    {"type": "object", "oneOf": [
        {"required": ["kind"], "properties": {"kind": {"enum": ["a"]}, "b": {"type": "integer"}}},
        {"allOf": [{"required": ["kind"]}, {"properties": {"kind": {"const": "b"}}}]}]},
    # told apart by the type of a required property, or by a property set to false
    {"oneOf": [{"type": "object", "required": ["v"], "properties": {"v": {"type": "string"}}},
               {"type": "object", "properties": {"v": {"type": "integer"}, "b": False}, "required": ["b"]},
               {"type": "object", "required": ["a"], "properties": {"v": {"type": ["integer", "null"]}},
                "additionalProperties": False}]},
    # told apart one level down: the required "to" of one is closed, the other's requires a key
    {"oneOf": [{"type": "object", "required": ["to"], "properties": {
                   "to": {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}}}},
               {"type": "object", "required": ["to"], "properties": {
                   "to": {"$ref": "#/$defs/reach"}}}],
     "$defs": {"reach": {"required": ["b"], "properties": {"b": {"type": "boolean"}}}}},
]


@pytest.mark.parametrize("schema", DISJOINT_ONE_OF_CASES)
def test_one_of_with_branches_apart_on_objects_is_exact(schema: dict) -> None:
    """``oneOf`` branches that no object satisfies together (a property one requires and the
    other forbids or restricts to other values or types, ``allOf`` members counted) are proved
    disjoint: strict mode compiles them, and the grammar agrees with ``jsonschema``."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    assert not lg.Grammar.from_json_schema(schema, property_order="any").relaxed
    leaf = st.sampled_from(["a", "b", "x", "y", 1, None, True])
    keys = st.sampled_from(["a", "b", "v", "kind", "mode", "to"])
    agrees_with_jsonschema(schema, st.one_of(
        leaf, st.dictionaries(keys, st.one_of(leaf, st.dictionaries(keys, leaf, max_size=2)), max_size=4)),
        max_examples=200)


PROVED_APART_CASES = [
    # property counts: one branch requires two properties, the other allows at most one
    {"type": "object", "oneOf": [
        {"required": ["a", "b"], "patternProperties": {"^x": {"type": "string"}}},
        {"maxProperties": 1, "additionalProperties": {"type": "boolean"}}]},
    # a required property's type against the types additionalProperties allows the other's keys
    {"oneOf": [{"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}},
                "patternProperties": {"^x": {"type": "string"}}},
               {"type": "object", "additionalProperties": {"type": "boolean", "enum": [False]}}]},
    # a branch that is a union: apart from the other branch member by member (its types narrowed
    # to its members')
    {"oneOf": [{"$ref": "#/$defs/strings"}, {"type": "object", "patternProperties": {"^x": {"type": "string"}}}],
     "$defs": {"strings": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}},
    {"type": "array", "items": {"oneOf": [
        {"$ref": "#/$defs/repo"},
        {"type": "object", "additionalProperties": {"type": "boolean"}, "maxProperties": 1}]},
     "$defs": {"repo": {"type": "object", "oneOf": [
         {"required": ["type", "url"], "properties": {"type": {"const": "a"}}, "patternProperties": {"^x": {}}},
         {"required": ["type", "url"], "properties": {"type": {"const": "b"}}}]}}},
]


@pytest.mark.parametrize("schema", PROVED_APART_CASES)
def test_one_of_branches_proved_apart_by_counts_extra_properties_and_unions(schema: dict, monkeypatch) -> None:
    """Proved disjoint, not made exclusive by negation (``_exclusive`` is switched off here), and
    exact against ``jsonschema``."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    from logitgate.json_schema.translate import Translator

    monkeypatch.setattr(Translator, "_exclusive", lambda self, members: None)
    lg.clear_cache()
    assert not lg.Grammar.from_json_schema(schema, property_order="any").relaxed
    leaf = st.sampled_from(["a", "b", "x", 1, None, True, False])
    keys = st.sampled_from(["a", "b", "kind", "type", "url", "xa"])
    agrees_with_jsonschema(schema, st.one_of(
        leaf, st.lists(leaf, max_size=3), st.dictionaries(keys, leaf, max_size=3),
        st.lists(st.dictionaries(keys, leaf, max_size=3), max_size=2)), max_examples=200)


TYPE_EXCLUDED_CASES = [
    # null satisfies the first two branches alike, booleans the last two: only arrays are valid
    {"type": ["array", "boolean", "null"], "oneOf": [
        {"$ref": "#/$defs/ops"}, {"type": "boolean"}, {"$ref": "#/$defs/off"}]},
    {"oneOf": [{"type": ["array", "null"], "items": {"enum": ["if", "do"]}, "uniqueItems": True},
               {"type": "null"}, {"type": "object", "patternProperties": {"^x": {"type": "string"}}}]},
    # integers satisfy both: only numbers with a fraction are left
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
]
TYPE_EXCLUDED_DEFS = {"ops": {"type": ["array", "boolean", "null"], "items": {"enum": ["==", None]}},
                      "off": {"description": "removes the rule", "type": "null"}}


@pytest.mark.parametrize("case", range(len(TYPE_EXCLUDED_CASES)))
def test_one_of_excludes_a_type_two_branches_accept_whole(case: int) -> None:
    """Where two branches each accept every value of a type, no value of it satisfies the
    ``oneOf``: the type is excluded, the other branches stay as they are, nothing is relaxed."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    schema = dict(TYPE_EXCLUDED_CASES[case], **{"$defs": TYPE_EXCLUDED_DEFS})
    g = lg.Grammar.from_json_schema(schema, property_order="any")
    assert not g.relaxed
    leaf = st.sampled_from(["if", "do", "==", 1, 2.5, None, True, False])
    agrees_with_jsonschema(schema, st.one_of(leaf, st.lists(leaf, max_size=3), st.dictionaries(
        st.sampled_from(["xa", "b"]), leaf, max_size=2)), max_examples=150)


NEGATED_ARRAY_CASES = [
    {"not": {"items": {"type": "string"}}},
    {"not": {"type": "array", "items": {"type": ["string", "null"], "maxLength": 1}}},
    {"not": {"contains": {"type": "string"}}},
    {"not": {"type": "array", "minItems": 2, "contains": {"enum": [1, "a"]}}},
    {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "string"}}]},
    {"type": "array", "if": {"items": {"type": "integer"}}, "then": {"maxItems": 1}, "else": {"minItems": 2}},
    # a oneOf negated: its anyOf where the branches are apart, and the types two accept whole
    {"not": {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]}},
    {"allOf": [{"enum": ["a", 1]}, {"not": {"oneOf": [True, True, True]}}]},
    {"not": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "string", "maxLength": 1}]}},
    # several contains at one position, counted apart (with minContains and maxContains)
    {"type": "array", "allOf": [{"contains": {"const": 1}}, {"contains": {"type": "string"}}]},
    {"type": "array", "allOf": [{"contains": {"type": "integer"}, "minContains": 2},
                                {"contains": {"type": "string"}, "maxContains": 1}]},
    {"oneOf": [{"allOf": [{"items": {"type": ["integer", "string"]}}, {"contains": {"type": "string"}}]},
               {"allOf": [{"items": {"type": "integer"}}, {"contains": {"const": 1}}]}]},
    # no item is an object whose "a" is a string: every item is in the union of the negation's parts
    {"not": {"contains": {"type": "object", "properties": {"a": {"type": "string"}}}}},
    # some item is an object with an "a..." key whose value is not a string
    {"not": {"items": {"patternProperties": {"^a": {"type": "string"}}}}},
    # maxContains over a schema whose negation is a group (once a crash)
    {"type": "array", "contains": {"type": "object", "properties": {"a": {"type": "string"}}}, "maxContains": 1},
]


@pytest.mark.parametrize("schema", NEGATED_ARRAY_CASES)
def test_negation_of_items_contains_and_one_of_is_exact(schema: dict) -> None:
    """``not items S`` is "some item is not S" (``contains`` of S's negation), ``not contains S``
    is "every item is not S" (an ``anyOf`` of the negation's parts); a ``oneOf`` is negated as its ``anyOf`` and the types two branches
    accept whole. Exact in ``not``, ``oneOf`` and ``if``, against ``jsonschema``."""
    pytest.importorskip("jsonschema")
    from hypothesis import strategies as st

    assert not lg.Grammar.from_json_schema(schema, property_order="any").relaxed
    leaf = st.sampled_from(["a", "bc", 1, 2.5, None, True])
    agrees_with_jsonschema(schema, st.one_of(leaf, st.lists(leaf, max_size=4), st.lists(
        st.lists(leaf, max_size=2), max_size=2), st.lists(st.one_of(leaf, st.dictionaries(
            st.sampled_from(["a", "b"]), leaf, max_size=2)), max_size=3)), max_examples=200)


EXISTS_CASES = [
    # some key has a "b" in it
    ({"not": {"patternProperties": {"b": False}}}, [{"ab": 1}, {"x": 1, "b": None}]),
    # a 3-letter key with "ab" whose value is a string with an "A", and one with "cd" and a "C"
    ({"type": "object", "propertyNames": {"pattern": "^...$"}, "allOf": [
        {"not": {"patternProperties": {"ab": {"not": {"type": "string", "pattern": "A"}}}}},
        {"not": {"patternProperties": {"cd": {"not": {"type": "string", "pattern": "C"}}}}}]},
     [{"abc": "xAx", "xcd": "CC"}, {"xcd": "CC", "qqq": 1, "abc": "A"}]),
    # a key propertyNames refuses: here the key "1"
    ({"not": {"propertyNames": {"not": {"const": "1"}}}}, [{"1": 2}, {"a": 1, "1": None}]),
    # a key neither named nor matched, with a value additionalProperties refuses
    ({"not": {"properties": {"ab": {}}, "patternProperties": {"^c": {}}, "additionalProperties": {"type": "string"}}},
     [{"q": 1}, {"ab": 1, "b": True}]),
    # a named key is among those a pattern matches
    ({"properties": {"ab": {"type": ["string", "integer"]}, "q": {}},
      "not": {"patternProperties": {"b": {"type": "string"}}}},
     [{"ab": 1}, {"q": 1, "ab": 2}, {"b": 1}, {"ab": "x", "q": 1, "bb": None}]),
    # keys from sets (a hitting-set puzzle): one of 1/3 and one of 2/7/9, at most three members
    ({"type": "object", "patternProperties": {"^[0-9]$": {"type": "array", "minItems": 2}},
      "additionalProperties": False, "maxProperties": 3,
      "not": {"anyOf": [{"propertyNames": {"not": {"enum": ["1", "3"]}}},
                        {"propertyNames": {"not": {"enum": ["2", "7", "9"]}}}]}},
     [{"1": [1, 2], "2": [1, 2]}, {"3": [1, 2], "9": [0, 0], "5": [1, 1]}]),
]


@pytest.mark.parametrize("case", range(len(EXISTS_CASES)))
def test_negated_pattern_properties_additional_properties_and_property_names_are_exact(case: int) -> None:
    """``not`` of ``patternProperties``/``additionalProperties``/``propertyNames`` asks for a
    member that breaks it: the object grammar tracks it. Exact against ``jsonschema`` in any
    key order and in schema order, with the valid examples accepted in both."""
    pytest.importorskip("jsonschema")
    import jsonschema
    from hypothesis import strategies as st

    schema, valid = EXISTS_CASES[case]
    validator = jsonschema.Draft202012Validator(schema)
    assert all(validator.is_valid(v) for v in valid)
    props = list(schema.get("properties") or {})
    for order in ("any", "schema"):
        lg.clear_cache()
        c = compiled(schema, property_order=order, strict=True)
        for v in valid:
            if order == "schema":  # the named keys first, in the schema's order
                v = dict(sorted(v.items(), key=lambda kv: props.index(kv[0]) if kv[0] in props else len(props)))
            assert accepts(c, json.dumps(v, separators=(",", ":"))), (order, v)
    leaf = st.sampled_from(["xAx", "CC", "x", 1, None, True, [1, 2], [0]])
    keys = st.sampled_from(["ab", "abc", "xcd", "q", "b", "1", "2", "3", "9", "a"])
    agrees_with_jsonschema(schema, st.one_of(leaf, st.dictionaries(keys, leaf, max_size=4)), max_examples=250)


def test_more_negated_members_than_tracked_are_reported() -> None:
    schema = {"allOf": [{"not": {"patternProperties": {c: False}}} for c in "abcdef"]}
    with pytest.raises(lg.SchemaError, match="more than 5 members required by negated keywords"):
        lg.Grammar.from_json_schema(schema)
    c = compiled({"allOf": [{"not": {"patternProperties": {c: False}}} for c in "abcde"]})
    assert accepts(c, '{"abcde":1}') and accepts(c, '{"c":1,"bade":2}') and not accepts(c, '{"abcd":1}')


def test_one_of_branches_sharing_a_type_other_than_object_are_not_taken_as_disjoint() -> None:
    """Branches told apart only by their objects' properties overlap on the other types they both
    allow: a string satisfies both here, so ``oneOf`` refuses it (it was once taken as disjoint
    and let through); with no such type left, the check proves them apart."""
    schema = {"oneOf": [{"type": ["object", "string"], "required": ["k"], "properties": {"k": {"const": 1}}},
                        {"type": ["object", "string"], "required": ["k"], "properties": {"k": {"const": 2}}}]}
    c = compiled(schema)
    assert accepts(c, '{"k":1}') and accepts(c, '{"k":2}')
    assert not accepts(c, '"x"') and not accepts(c, '{"k":3}')
    # an array satisfies a branch with no type and the array branch alike: a real overlap
    g = lg.Grammar.from_json_schema({"oneOf": [{"required": ["name"]},
                                               {"type": "array", "prefixItems": [{"type": "string"}]}]}, strict=False)
    assert [p for p, _ in g.relaxed] == ["/oneOf"]


ONE_OF_CASES = [
    ({"oneOf": [{"type": "integer"}, {"minimum": 3}]},
     [5, 2, 3.5, "x", 1.5, 3, -7, 100, [1], None, 2.0, True]),
    # exactly one of two required properties (overlapping branches: an object may have both)
    ({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
      "oneOf": [{"properties": {"type": {"enum": ["Int32", "String"]}}, "required": ["type"]},
                {"properties": {"customType": {"type": "string", "pattern": "^[A-Z]"}}, "required": ["customType"]}]},
     [{"name": "a", "type": "Int32"}, {"name": "a", "customType": "My"}, {"name": "a", "type": "Int32", "customType": "My"},
      {"name": "a"}, {"name": "a", "type": "Other", "customType": "My"}, {"name": "a", "type": "String", "customType": "x"},
      {"name": "a", "type": "Other"}]),
    ({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^a"}, {"const": "b"}]},
     ["", "abc", "abcd", "bcd", "b", "zzzz", "a", 1]),
    # unknown keywords beside them are annotations: the branches are negated all the same
    ({"oneOf": [{"type": "string", "maxLength": 3, "x-kind": "short"}, {"type": "string", "pattern": "^a", "x-note": 1},
                {"$ref": "#/$defs/b", "x-why": "a ref"}], "$defs": {"b": {"const": "b", "standsFor": "bee"}}},
     ["", "abc", "abcd", "bcd", "b", "zzzz", "a", 1]),
]


def test_one_of_branches_apart_by_their_own_values(monkeypatch, tok_spm) -> None:
    """Branches whose own ``const``/``enum`` values differ are proved apart, whatever else they
    hold (an unknown keyword, an annotation): no negation needed (``_exclusive`` off), nothing
    relaxed, exact against ``jsonschema``; values equal as JSON numbers (2 and 2.0) still overlap."""
    import jsonschema

    from logitgate.json_schema.translate import Translator

    monkeypatch.setattr(Translator, "_exclusive", lambda self, members: None)
    lg.clear_cache()
    schema = {"type": "number", "oneOf": [{"const": 1, "standsFor": "Characters"}, {"const": 2, "standsFor": "Words"},
                                          {"enum": [3, 4.5], "title": "more"}]}
    compiled_ = lg.compile(lg.Grammar.from_json_schema(schema), tok_spm)
    validator = jsonschema.Draft202012Validator(schema)
    for v in [1, 2, 3, 4.5, 5, 0, 2.5, "1"]:
        m = lg.Matcher(compiled_)
        assert (m.accept_bytes(json.dumps(v).encode()) and m.is_accepting()) == validator.is_valid(v), v
    g = lg.Grammar.from_json_schema({"oneOf": [{"enum": [1, 2], "x": 0}, {"enum": [2.0, 3]}]}, strict=False)
    assert [p for p, _ in g.relaxed] == ["/oneOf"]  # 2 and 2.0 are one value: not apart


@pytest.mark.parametrize("case", range(len(ONE_OF_CASES)))
def test_overlapping_one_of_is_exact_when_its_branches_can_be_negated(case, tok_spm):
    import jsonschema

    schema, values = ONE_OF_CASES[case]
    # exact, so strict compiles it; any key order, since the branches declare their keys apart
    g = lg.Grammar.from_json_schema(schema, strict=True, property_order="any")
    compiled = lg.compile(g, tok_spm)
    validator = jsonschema.Draft202012Validator(schema)
    for v in values:
        m = lg.Matcher(compiled)
        got = m.accept_bytes(json.dumps(v, separators=(",", ":")).encode()) and m.is_accepting()
        assert got == validator.is_valid(v), v


def test_unsatisfiable_and_malformed_schemas_are_reported():
    for schema in ({"type": "integer", "minimum": 5, "maximum": 4}, {"allOf": [{"type": "string"}, {"type": "null"}]},
                   {"type": "object", "required": ["a"], "properties": {"a": False}}, False):
        with pytest.raises(lg.SchemaError, match="no JSON document"):
            lg.Grammar.from_json_schema(schema)
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema({"properties": {"a": {"type": "strin"}}})
    assert e.value.pointer == "/properties/a/type"
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema({"properties": {"a": {"pattern": "(?<=x)y"}}})
    assert e.value.pointer == "/properties/a/pattern" and "offset" in str(e.value)
    with pytest.raises(lg.SchemaError, match="not valid JSON"):
        lg.Grammar.from_json_schema('{"type": ')
    with pytest.raises(ValueError, match="whitespace"):
        lg.Grammar.from_json_schema({}, whitespace="tabs")


def test_pydantic_models():
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        name: str
        price: float = pydantic.Field(gt=0)
        tags: list[str] = []

    c = compiled(Item)
    assert accepts(c, '{"name":"x","price":1.5,"tags":["a"]}')
    assert accepts(c, '{"name":"x","price":2}')
    assert not accepts(c, '{"name":"x","price":0}')
    assert Item.model_validate_json('{"name":"x","price":1.5}').price == 1.5


def test_numbers_in_the_schema_stay_exact():
    g1 = lg.Grammar.from_json_schema('{"type": "number", "maximum": 0.1}')
    g2 = lg.Grammar.from_json_schema({"type": "number", "maximum": Decimal("0.1")})
    g3 = lg.Grammar.from_json_schema({"type": "number", "maximum": 0.1})
    assert g1.cache_key == g2.cache_key == g3.cache_key
    c = lg.compile(g1, byte_tokenizer())
    assert accepts(c, "0.1") and not accepts(c, "0.10000000000000001")


def _brute_mask(m: lg.Matcher, vocab: int) -> np.ndarray:
    out = np.zeros(vocab, bool)
    for t in range(vocab):
        out[t] = m.fork().accept_token(t)
    return out


@pytest.mark.parametrize("tok_name", ["tok_spm", "tok_tekken"])
def test_masks_match_brute_force_on_real_tokenizers(tok_name, request):
    """Along a valid document, every mask equals the per-token brute force (sampled steps)."""
    tok = request.getfixturevalue(tok_name)
    c = lg.compile(lg.Grammar.from_json_schema(PERSON), tok)
    text = '{"name":"Zoë \\"Z\\"","age":42,"email":"z@example.org","tags":["a","b"]}'
    _walk_checking_masks(c, tok, text.encode(), random.Random(0), every=4, n_random=3000, n_allowed=200)


def _walk_checking_masks(c, tok, data: bytes, rng, *, every: int, n_random: int, n_allowed: int) -> None:
    """Walk ``data`` by the longest allowed token that spells the next bytes; every ``every``
    steps, check the mask against the per-token brute force on ``n_random`` random tokens and the
    first ``n_allowed`` allowed ones. The document must be accepted at its end."""
    m = lg.Matcher(c)
    pos = steps = 0
    while pos < len(data):
        allowed = m.allowed_token_ids()
        if steps % every == 0:
            allowed_set = set(allowed.tolist())
            sample = sorted(set(rng.sample(range(tok.vocab_size), n_random)) | set(allowed[:n_allowed].tolist()))
            for t in sample:
                assert (t in allowed_set) == m.fork().accept_token(t), (pos, t)
        best = max((t for t in allowed.tolist() if data.startswith(tok.token_bytes(t), pos)),
                   key=lambda t: len(tok.token_bytes(t)))
        assert m.accept_token(best)
        pos += len(tok.token_bytes(best))
        steps += 1
    assert m.is_accepting()


@pytest.mark.skipif(not BENCH.is_dir(), reason="shared/data/jsonschemabench not found")
@pytest.mark.parametrize("subset", ["Github_easy", "Glaiveai2K", "Kubernetes", "JsonSchemaStore", "Snowplow",
                                    "WashingtonPost", "Github_medium"])
def test_jsonschemabench_sample(subset):
    """A sample of JSONSchemaBench: every valid instance accepted (in its own key order, with
    property_order="any"), every invalid one rejected unless the grammar reports a relaxation."""
    schemas = bench_schemas(subset)
    instances = bench_instances(subset)
    ids = [i for i in schemas if i in instances][:6]
    assert ids
    for sid in ids:
        g = lg.Grammar.from_json_schema(schemas[sid], strict=False, property_order="any")
        c = lg.compile(g, byte_tokenizer())
        for test in instances[sid]:
            ok = accepts(c, dumps(test["data"]))
            if test["valid"]:
                assert ok, (sid, test["description"])
            elif not g.relaxed:
                assert not ok, (sid, test["description"])


def test_too_many_combinations_relax_conditionals_and_report_them():
    """An allOf of 10 independent if/then (2**10 consistent combinations) compiles with
    strict=False: the conditionals are reported as relaxed, valid documents still pass, the other
    keywords still hold."""
    branches = [{"if": {"properties": {f"p{i}": {"const": 1}}, "required": [f"p{i}"]},
                 "then": {"properties": {"v": {"type": "integer", "maximum": i}}}} for i in range(10)]
    schema = {"type": "object", "properties": {"kind": {"type": "string"}, "v": {"type": "integer"}},
              "required": ["kind"], "allOf": branches}
    with pytest.raises(lg.SchemaError, match="if/then/else not enforced"):
        lg.Grammar.from_json_schema(schema)
    g = lg.Grammar.from_json_schema(schema, strict=False)
    assert any(p.endswith("/if") for p, _ in g.relaxed)
    c = lg.compile(g, byte_tokenizer())
    assert accepts(c, '{"kind":"k3","v":2}') and accepts(c, '{"kind":"other","v":50}')
    assert not accepts(c, '{"kind":3}') and not accepts(c, '{"v":1}')


def test_too_many_alternatives_leave_out_the_last_disjunctions_when_lenient():
    """Four independent anyOf pairs make 16 combinations; under a cap of 8 the strict translation
    stops at the cap, the lenient one expands the first three pairs (8 paths) and leaves the fourth
    out, reported: every valid document still passes (jsonschema decides), and every accepted one
    keeps the three pairs it enforces."""
    import itertools

    import jsonschema

    keys = [f"{c}{i}" for i in range(4) for c in "ab"]
    pairs = [{"anyOf": [{"required": [f"a{i}"]}, {"required": [f"b{i}"]}]} for i in range(4)]
    schema = {"type": "object", "properties": {k: {"const": 1} for k in keys}, "additionalProperties": False,
              "allOf": pairs}
    with lg.using_limits(max_schema_alternatives=8):
        with pytest.raises(lg.LimitError):
            lg.Grammar.from_json_schema(schema)
        g = lg.Grammar.from_json_schema(schema, strict=False)
        c = lg.compile(g, byte_tokenizer())
    assert [p for p, _ in g.relaxed] == ["/allOf/3/anyOf"]
    assert "'anyOf' not enforced" in g.relaxed[0][1] and "max_schema_alternatives" in g.relaxed[0][1]
    loose = 0
    for chosen in itertools.product([False, True], repeat=len(keys)):
        doc = {k: 1 for k, on in zip(keys, chosen) if on}
        ok = accepts(c, dumps(doc))
        if jsonschema.Draft202012Validator(schema).is_valid(doc):
            assert ok, doc
        if ok:
            assert all(f"a{i}" in doc or f"b{i}" in doc for i in range(3)), doc
            loose += not ("a3" in doc or "b3" in doc)
    assert loose > 0  # the fourth pair is not enforced, as reported


def test_an_email_format_with_a_long_max_length_is_enforced_whole():
    """``format: email`` with ``maxLength: 255`` (common in real schemas): one subset construction
    over both needed more states than the lexeme cap and the pair was relaxed; the product of
    their minimal DFAs fits, so both hold."""
    schema = {"type": "string", "format": "email", "maxLength": 255}
    g = lg.Grammar.from_json_schema(schema)
    assert not g.relaxed
    c = lg.compile(g, byte_tokenizer())
    domain = "@example.com"
    for n in (254, 255, 256):
        local = "a" * (n - len(domain))
        assert accepts(c, json.dumps(local + domain)) == (n <= 255), n
    assert not accepts(c, json.dumps("a" * 20))  # not an email


def test_paired_string_automata_stop_at_the_translation_s_budget(monkeypatch: pytest.MonkeyPatch):
    """The automata built by pairing (``boolean.paired``) share one budget of states per
    translation: with room for one, the first property's email and length hold and the second's
    are relaxed, reported at its pointer."""
    from logitgate.json_schema import translate

    one = {"type": "string", "format": "email", "maxLength": 255}
    monkeypatch.setattr(translate, "PAIRED_STATES", 1)
    schema = {"type": "object", "properties": {"a": one, "b": dict(one, maxLength=254)}, "required": ["a", "b"]}
    g = lg.Grammar.from_json_schema(schema, strict=False)
    assert [p for p, _ in g.relaxed] == ["/properties/b"]
    c = lg.compile(g, byte_tokenizer())
    long = "a" * 250 + "@example.com"
    assert accepts(c, dumps({"a": "x@example.com", "b": "y@example.com"}))
    assert not accepts(c, dumps({"a": long, "b": "x@example.com"}))
    assert accepts(c, dumps({"a": "x@example.com", "b": long}))  # relaxed, as reported


def test_a_ref_to_a_properties_map_with_an_id_property_is_a_schema_error():
    # found by fuzzing: draft 4 reads "id" as the schema's id; a dict there used to escape as AttributeError
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
              "properties": {"id": {"type": "string"}, "a": {"$ref": "#/properties"}}}
    with pytest.raises(lg.SchemaError, match="id must be a string") as info:
        lg.Grammar.from_json_schema(schema)
    assert info.value.pointer.endswith("/properties/id")


def test_if_then_on_one_discriminator_is_exact_without_exploding(tok_spm):
    """An allOf of many if/then on one property's const (a discriminated union): 2**N combinations
    of which N + 2 are consistent; the expansion drops the contradictory ones early, so the schema
    is exact (no relaxation) and valid documents pass."""
    import jsonschema

    kinds = [f"k{i}" for i in range(14)]
    schema = {"type": "object", "properties": {"kind": {"type": "string"}},
              "allOf": [{"if": {"properties": {"kind": {"const": k}}},
                         "then": {"properties": {"v": {"type": "integer", "maximum": i}}, "required": ["v"]}}
                        for i, k in enumerate(kinds)]}
    g = lg.Grammar.from_json_schema(schema, strict=True, property_order="any")
    compiled = lg.compile(g, tok_spm)
    validator = jsonschema.Draft202012Validator(schema)
    values = [{"kind": "k3", "v": 2}, {"kind": "k3", "v": 9}, {"kind": "k3"}, {"kind": "zz", "v": 99}, {"kind": "zz"},
              {"v": -5}, {}, {"kind": "k13", "v": 13}, {"kind": "k0", "v": 1}, {"kind": 3}]
    for v in values:
        m = lg.Matcher(compiled)
        got = m.accept_bytes(json.dumps(v, separators=(",", ":")).encode()) and m.is_accepting()
        assert got == validator.is_valid(v), v


# ---------------------------------------------------------------------------------------------
# Long strings lexed in pieces (Translator.length_string)
# ---------------------------------------------------------------------------------------------

_LONG_CHARS = ["a", "é", "😀", "\n", '"', "\\", "z", "€"]


def _text_of(n: int, rnd: random.Random) -> str:
    return "".join(rnd.choice(_LONG_CHARS) for _ in range(n))


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 3 code points: every bound past 3 takes the piece grammar."""
    from logitgate.json_schema import translate

    monkeypatch.setattr(translate, "MAX_EXACT_LENGTH", 3)
    monkeypatch.setattr(translate, "PIECE_LENGTH", 3)
    monkeypatch.setattr(translate, "MIN_PIECE_LENGTH", 3)


def _length_schemas(lo: int, hi: int | None) -> list[tuple[dict, str]]:
    s: dict = {"type": "string"}
    if lo:
        s["minLength"] = lo
    if hi is not None:
        s["maxLength"] = hi
    return [(s, "{}"),
            ({"type": "object", "properties": {"a": s, "b": {"type": "string"}}, "required": ["a"]},
             '{{"a":{},"b":"plain","c":"more"}}'),
            ({"type": "array", "items": {"anyOf": [s, {"type": "integer"}]}}, "[1,{}]")]


@pytest.mark.parametrize("lo,hi", [(0, 4), (2, 7), (4, None), (7, 7), (5, 9), (0, 11), (10, None)])
def test_long_lengths_in_pieces_are_exact(small_pieces, lo: int, hi: int | None) -> None:
    """Every length from 0 to 14, in every encoding, inside objects and arrays, is accepted
    exactly when it is within the bounds; strict mode reports nothing."""
    rnd = random.Random(lo * 31 + (hi or 99))
    for schema, frame in _length_schemas(lo, hi):
        g = lg.Grammar.from_json_schema(schema)
        assert g.relaxed == []
        c = lg.compile(g, byte_tokenizer())
        for n in range(15):
            s = _text_of(n, rnd)
            for text in (json.dumps(s), json.dumps(s, ensure_ascii=False)):
                want = lo <= n and (hi is None or n <= hi)
                assert accepts(c, frame.format(text)) == want, (schema, n, text)


def test_long_lengths_at_the_default_piece_length() -> None:
    """Bounds far past a piece (300, 1000): strict mode compiles them, exact at the bound."""
    rnd = random.Random(7)
    c = compiled({"type": "string", "maxLength": 300})
    for n, want in ((0, True), (64, True), (65, True), (299, True), (300, True), (301, False), (640, False)):
        assert accepts(c, json.dumps(_text_of(n, rnd))) == want, n
    c = compiled({"type": "object", "properties": {"d": {"type": "string", "minLength": 1000}}, "required": ["d"]})
    assert accepts(c, '{"d":' + json.dumps(_text_of(1000, rnd), ensure_ascii=False) + "}")
    assert not accepts(c, '{"d":' + json.dumps(_text_of(999, rnd)) + "}")


def test_pieces_fall_back_where_another_lexeme_runs_past_them() -> None:
    """A pattern string expected where a long string is would run past the first piece: the
    schema's strings are whole lexemes again (exact up to the cap of 256, relaxed and reported
    past it), and no valid string is refused. Apart, pieces are kept, exact."""
    import jsonschema

    rnd = random.Random(3)
    for hi in (200, 300):
        together = {"anyOf": [{"type": "string", "maxLength": hi}, {"type": "string", "pattern": "^a+$"}]}
        g = lg.Grammar.from_json_schema(together, strict=False)
        assert any("maxLength" in why for _, why in g.relaxed) == (hi > 256), g.relaxed
        c = lg.compile(g, byte_tokenizer())
        valid = jsonschema.Draft202012Validator(together).is_valid
        for n in (*range(0, 70, 7), 199, 200, 201, 299, 300, 301, 400):
            for s in (_text_of(n, rnd), "a" * n, "b" * n):
                if valid(s):
                    assert accepts(c, json.dumps(s)), (hi, s)
                elif not g.relaxed:
                    assert not accepts(c, json.dumps(s)), (hi, s)
    apart = {"type": "object", "properties": {"long": {"type": "string", "maxLength": 300},
                                              "pat": {"type": "string", "pattern": "^a+$"}}}
    c = compiled(apart)  # strict: nothing relaxed
    assert accepts(c, '{"long":"' + "b" * 300 + '","pat":"' + "a" * 12 + '"}')
    assert not accepts(c, '{"long":"' + "b" * 301 + '"}')


def test_piece_masks_match_brute_force(tok_spm, monkeypatch) -> None:
    """Tokens crossing the pieces' boundaries: every mask along a document equals the per-token
    brute force on a sample of the vocabulary."""
    from logitgate.json_schema import translate

    monkeypatch.setattr(translate, "MAX_EXACT_LENGTH", 5)
    monkeypatch.setattr(translate, "PIECE_LENGTH", 5)
    monkeypatch.setattr(translate, "MIN_PIECE_LENGTH", 5)
    schema = {"type": "object", "properties": {"d": {"type": "string", "maxLength": 40}, "e": {"type": "string"}},
              "required": ["d", "e"]}
    c = lg.compile(lg.Grammar.from_json_schema(schema), tok_spm)
    data = ('{"d":"the quick brown fox jumps over it","e":"an unbounded string, in pieces too"}').encode()
    _walk_checking_masks(c, tok_spm, data, random.Random(1), every=1, n_random=1500, n_allowed=300)


def test_other_strings_are_split_only_where_a_long_string_is_expected() -> None:
    """An unconstrained string that may start where a long string does is lexed in pieces too
    (else the lexer would run on past the first piece); one elsewhere stays one lexeme (cheaper
    masks). Both are exact."""
    rnd = random.Random(5)
    apart = {"type": "object", "properties": {"long": {"type": "string", "maxLength": 300}, "free": {"type": "string"}}}
    # (any length: the second branch takes what the first refuses, in pieces too)
    together = {"type": "object", "properties": {"long": {"anyOf": [{"type": "string", "maxLength": 300},
                                                                    {"type": "string", "minLength": 2}]},
                                                 "free": {"type": "string"}}}
    for schema, split in ((apart, False), (together, True)):
        _, tr, _, _ = lg.Grammar._translate_schema(schema, "compact", "schema", True, None)
        assert tr.head_term is not None and bool(tr.split_terms) != split, (schema, tr.split_terms)
        g = lg.Grammar.from_json_schema(schema)  # strict: nothing relaxed
        c = lg.compile(g, byte_tokenizer())
        for n, ok in ((0, True), (2, True), (64, True), (65, True), (300, True), (301, split), (700, split)):
            assert accepts(c, '{"long":' + json.dumps(_text_of(n, rnd)) + "}") == ok, (schema, n)
        assert accepts(c, '{"long":"xy","free":' + json.dumps(_text_of(500, rnd)) + "}")
