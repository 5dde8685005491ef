"""The cache of grammars built from text (``logitgate.grammar.spec._cached``): a second request
for the same source, options and caps returns the same ``Grammar`` without building it again;
anything else builds anew, and errors are never kept."""
from __future__ import annotations

import pytest

import logitgate as lg
from logitgate.grammar import spec

from .json_schema_helpers import accepts, byte_tokenizer

SCHEMA = '{"type":"object","properties":{"n":{"type":"integer","minimum":3}},"required":["n"]}'


@pytest.fixture(autouse=True)
def empty_cache():
    lg.clear_cache()
    yield
    lg.clear_cache()


@pytest.fixture()
def builds(monkeypatch):
    """How many JSON Schema translations and regex parses really ran."""
    count = {"schema": 0, "regex": 0}
    translate, parse = lg.Grammar._translate_schema, spec._parse_regex

    def counting_translate(*a, **k):
        count["schema"] += 1
        return translate(*a, **k)

    def counting_parse(*a, **k):
        count["regex"] += 1
        return parse(*a, **k)

    monkeypatch.setattr(lg.Grammar, "_translate_schema", staticmethod(counting_translate))
    monkeypatch.setattr(spec, "_parse_regex", counting_parse)
    return count


def test_same_schema_text_is_translated_once(builds):
    a = lg.Grammar.from_json_schema(SCHEMA)
    b = lg.Grammar.from_json_schema(SCHEMA)
    assert a is b and builds["schema"] == 1
    c = lg.Grammar.from_json_schema(SCHEMA, property_order="any")
    d = lg.Grammar.from_json_schema(SCHEMA, whitespace="pretty")
    e = lg.Grammar.from_json_schema(SCHEMA, strict=False)
    assert builds["schema"] == 4 and len({id(a), id(c), id(d), id(e)}) == 4
    assert a.cache_key != c.cache_key != d.cache_key


def test_a_changed_dict_is_translated_again(builds):
    schema = {"type": "integer"}
    plain = lg.Grammar.from_json_schema(schema)
    schema["minimum"] = 3
    bounded = lg.Grammar.from_json_schema(schema)
    assert plain is not bounded and builds["schema"] == 2
    tok = byte_tokenizer()
    assert accepts(lg.compile(plain, tok), "1") and not accepts(lg.compile(bounded, tok), "1")
    assert lg.Grammar.from_json_schema(dict(schema)) is bounded and builds["schema"] == 2


@pytest.mark.parametrize("first, second", [
    ({"properties": {"a": {"const": 1}}}, {"properties": {"a": {"const": 1.0}}}),  # 1 vs 1.0: same value
    ({"enum": ["1"]}, {"enum": [1]}),
    ('{"type":"string"}', {"type": "string"}),  # a text and a dict are cached apart
])
def test_inputs_that_differ_are_not_confused(first, second):
    a, b = lg.Grammar.from_json_schema(first), lg.Grammar.from_json_schema(second)
    assert a is not b
    assert lg.Grammar.from_json_schema(first) is a and lg.Grammar.from_json_schema(second) is b


def test_errors_are_not_cached():
    with pytest.raises(lg.SchemaError):
        lg.Grammar.from_json_schema({1: {"type": "string"}})  # a key that is not a string
    lg.Grammar.from_json_schema({"1": {"type": "string"}})
    with pytest.raises(lg.SchemaError):
        lg.Grammar.from_json_schema({1: {"type": "string"}})
    with pytest.raises(lg.RegexError):
        lg.Grammar.from_regex("a(")
    with pytest.raises(lg.RegexError):
        lg.Grammar.from_regex("a(")


def test_the_caps_in_force_are_part_of_the_key(builds):
    schema = {"type": "string", "maxLength": 100, "pattern": "^[a-z]+$"}
    loose = lg.Grammar.from_json_schema(schema, strict=False)
    with lg.using_limits(max_json_lexer_states=20):
        tight = lg.Grammar.from_json_schema(schema, strict=False)
    assert builds["schema"] == 2 and tight is not loose
    assert loose.relaxed == [] and tight.relaxed  # the small cap relaxed the length: built anew


def test_regex_and_grammar_texts_are_cached(builds):
    assert lg.Grammar.from_regex(r"\d+") is lg.Grammar.from_regex(r"\d+")
    assert builds["regex"] == 1
    assert lg.Grammar.from_regex("a", 2) is not lg.Grammar.from_regex("a")  # re.IGNORECASE
    assert lg.Grammar.from_gbnf('root ::= "a"') is lg.Grammar.from_gbnf('root ::= "a"')
    yacc = '%%\nstart: "a" ;\n'
    assert lg.Grammar.from_yacc(yacc) is lg.Grammar.from_yacc(yacc)
    pytest.importorskip("lark")
    assert lg.Grammar.from_lark('start: "a"') is lg.Grammar.from_lark('start: "a"')


def test_subgrammars_are_not_cached():
    sub = lg.Grammar.from_regex("[0-9]+")
    text = 'root ::= "n=" num'
    a = lg.Grammar.from_gbnf(text, subgrammars={"num": sub})
    assert lg.Grammar.from_gbnf(text, subgrammars={"num": sub}) is not a


def test_clear_cache_empties_it(builds):
    lg.Grammar.from_json_schema(SCHEMA)
    lg.clear_cache()
    lg.Grammar.from_json_schema(SCHEMA)
    assert builds["schema"] == 2


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(spec, "GRAMMAR_CACHE_SIZE", 4)
    grammars = [lg.Grammar.from_regex(f"a{{{i}}}") for i in range(6)]
    assert len(spec._grammars) == 4
    assert lg.Grammar.from_regex("a{5}") is grammars[5]  # the most recent are kept
    assert lg.Grammar.from_regex("a{0}") is not grammars[0]
