"""``json_schema.paths.values_apart``: which value terminals can start a value where the first
piece of a long string does. Random small schemas (pieces of 3 code points, so every bound past
3 is in pieces), checked against a brute force over the parser's rows (every sequence of up to
ten lexemes, as the lexer could end them): wherever a row expects both, ``values_apart`` must
keep the pair; and hand cases where only the document's structure tells them apart.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

from logitgate.grammar.cfg import lower
from logitgate.grammar.engine import CFGEngine, ParserTables, _Chart
from logitgate.grammar.lexer import build_lexer
from logitgate.json_schema import schema_to_ir
from logitgate.json_schema import translate
from logitgate.json_schema.paths import values_apart
from logitgate.kernels import earley_kernels as ek


@pytest.fixture(autouse=True)
def _small_pieces(monkeypatch):
    monkeypatch.setattr(translate, "MAX_EXACT_LENGTH", 3)
    monkeypatch.setattr(translate, "PIECE_LENGTH", 3)
    monkeypatch.setattr(translate, "MIN_PIECE_LENGTH", 3)

LONG = {"type": "string", "maxLength": 10}
RUN = {"type": "string", "pattern": "^a+$"}
LEAVES = [LONG, LONG, RUN, RUN, {"type": "string", "format": "date-time"}, {"type": "string"}, {"type": "integer"}, {},
          {"enum": ["aaaaaaaa", {"a": ["aaaaaaaa"]}, {"b": {"c": "aaaaaaaa"}}]}]


def _schemas():
    leaf = st.sampled_from(LEAVES)

    def extend(inner):
        props = st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=2)
        obj = st.builds(lambda p, extra, req: {"type": "object", "properties": p, "additionalProperties": extra,
                                               **({"required": sorted(p)[:1]} if req and p else {})},
                        props, st.one_of(st.booleans(), inner), st.booleans())
        arr = st.one_of(st.builds(lambda i: {"type": "array", "items": i}, inner),
                        st.builds(lambda a, b: {"type": "array", "prefixItems": [a, b]}, inner, inner))
        anyof = st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner)
        return st.one_of(obj, arr, anyof)

    return st.recursive(leaf, extend, max_leaves=8)


def _setup(schema: dict):
    _, tr = schema_to_ir(schema, whitespace="compact", property_order="schema", strict=False, level=0, pieces=True)
    cfg = lower(tr.ir, warn=False)
    lexer = build_lexer(cfg, limit="max_json_lexer_states")
    units = frozenset(i for i, n in enumerate(cfg.nonterminals) if n in tr.value_rules)
    return tr, cfg, lexer, units


def _together(cfg, lexer, a: int, others: list[int], depth: int = 10) -> set[int]:
    """Those of ``others`` some row expects together with ``a``, over every sequence of up to
    ``depth`` lexemes (each scanned as a set of terminals one lexeme ends as); rows with the same
    fingerprint have the same future, so each is expanded once per remaining depth."""
    tables = ParserTables(cfg)
    G = tables.args()
    n_words = tables.n_words
    ends = np.unique(lexer.acc_bits, axis=0)
    chart = _Chart(n_words)

    def push(scan, init):
        return CFGEngine._retry(lambda: ek.push_row(G, chart.args(), scan, init), chart)

    def has(exp, i):
        return bool(exp[i >> 6] >> np.uint64(i & 63) & np.uint64(1))

    push(np.zeros(n_words, np.uint64), True)
    best: dict[bytes, int] = {}
    found: set[int] = set()

    def go(d: int) -> None:
        rows = chart.n_rows
        fp = chart.row_fp[rows - 1].tobytes()
        if best.get(fp, -1) >= d:
            return
        best[fp] = d
        exp = chart.row_exp[rows - 1].copy()
        if has(exp, a):
            found.update(o for o in others if has(exp, o))
        if d == 0:
            return
        for acc in ends:
            scan = acc & exp
            if scan.any():
                chart.meta[0] = rows
                if push(scan.copy(), False) == ek.OK:
                    go(d - 1)
        chart.meta[0] = rows

    go(depth)
    return found


@settings(max_examples=300, deadline=None)
@given(schema=_schemas())
def test_never_apart_where_a_row_expects_both(schema: dict) -> None:
    try:
        tr, cfg, lexer, units = _setup(schema)
    except Exception:  # an unsatisfiable draw
        return
    if tr.head_term is None:
        return
    names = [t.name for t in cfg.terminals]
    h = names.index(tr.head_term)
    runners = translate.piece_runners(tr, cfg, lexer)
    kept = values_apart(cfg, lexer, units, h, runners)
    missed = _together(cfg, lexer, h, runners) - set(kept)
    assert not missed, (json.dumps(schema), [names[o] for o in missed])


def _kept(schema: dict) -> list[str]:
    tr, cfg, lexer, units = _setup(schema)
    names = [t.name for t in cfg.terminals]
    runners = translate.piece_runners(tr, cfg, lexer)
    assert runners, "the schema has no terminal running past a first piece"
    return [names[o] for o in values_apart(cfg, lexer, units, names.index(tr.head_term), runners)]



def test_values_under_other_keys_are_apart() -> None:
    # the free object's key matches "p" too, but no object is both
    assert _kept({"type": "object", "properties": {"p": RUN, "x": {"type": "object", "additionalProperties": LONG}}}) == []
    assert _kept({"type": "object", "properties": {"p": RUN, "q": LONG}}) == []


def test_values_at_one_point_are_kept() -> None:
    assert _kept({"anyOf": [LONG, RUN]}) != []
    # two branches' objects read the same key "p": two parses of one prefix
    assert _kept({"anyOf": [{"type": "object", "properties": {"p": RUN}},
                            {"type": "object", "properties": {"p": LONG}}]}) != []
    # a free key matches "p"
    assert _kept({"anyOf": [{"type": "object", "properties": {"p": RUN}},
                            {"type": "object", "additionalProperties": LONG}]}) != []
    # the first item of one array, any item of the other
    assert _kept({"anyOf": [{"type": "array", "prefixItems": [RUN]}, {"type": "array", "items": LONG}]}) != []


def test_items_at_different_places_are_apart() -> None:
    # the first item runs, only later ones are long: "[" and "," are different lexemes
    assert _kept({"type": "array", "prefixItems": [RUN], "items": LONG}) == []


def test_values_nested_in_an_enum_value_are_paired_at_their_own_level() -> None:
    # the long constant sits two objects down inside the enum's value, where the other branch's
    # long string is: a rule per nested object keeps the enclosing values paired level by level
    const = {"enum": [{"a": {"b": "aaaaaaaaaa"}}]}
    other = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": LONG}}}}
    assert _kept({"anyOf": [const, other]}) != []
    assert _kept({"type": "object", "properties": {"p": const, "q": other}}) == []
