"""Pathological constraints: each compiles within its budget or is refused by a named cap, quickly;
no RecursionError escapes; a long generation does not grow memory. The full-size runs are
``slow`` (``pytest -m slow tests/test_pathological.py``) and in bench/bench_reliability.py."""
from __future__ import annotations

import random
import time
import tracemalloc

import numpy as np
import pytest

import logitgate
from logitgate import Grammar, LimitError
from logitgate.errors import SchemaError


def _bench():
    """bench/bench_reliability.py, whose input generators the tests share."""
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parent.parent / "bench")
    if here not in sys.path:
        sys.path.insert(0, here)
    import bench_reliability

    return bench_reliability


def _nested(depth: int, kind: str) -> dict:
    return _bench().nested(depth, kind)


def _ref_chain(n: int) -> dict:
    return _bench().ref_chain(n)


def _rules(n: int, gbnf: bool) -> str:
    return _bench().chain_rules(n, gbnf)


def test_state_explosion_is_refused_quickly(tok_spm) -> None:
    t0 = time.perf_counter()
    with pytest.raises(LimitError) as info:
        logitgate.compile(Grammar.from_regex("(a|b)*a(a|b){30}"), tok_spm, cache=False)
    assert time.perf_counter() - t0 < 5
    assert info.value.limit == "max_dfa_states" and "Limits.max_dfa_states=100000" in str(info.value)


@pytest.mark.parametrize("kind", ["object", "array"])
def test_depth_1000_schema_is_refused_by_name_then_compiles_when_raised(kind: str) -> None:
    schema = _nested(1000, kind)
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert isinstance(info.value, LimitError) and info.value.limit == "max_schema_depth"
    with logitgate.using_limits(max_schema_depth=2100):
        g = Grammar.from_json_schema(schema)
    text = ('{"a":' * 1000 + "7" + "}" * 1000) if kind == "object" else ("[" * 1000 + "7" + "]" * 1000)
    cfg, lexer = g._cfg
    from logitgate.grammar.engine import CFGEngine

    st = CFGEngine(cfg, _byte_trie(), 1, np.zeros(1, np.int32), lexer).new_state()
    data = np.frombuffer(text.encode(), np.uint8)
    assert st.advance(data, 0, len(data)) and st.eos_allowed()


def _byte_tok() -> logitgate.Tokenizer:
    return logitgate.Tokenizer.from_bytes([bytes([b]) for b in range(256)] + [b""], eos_token_id=256)


def _byte_trie():
    return _byte_tok().trie


def test_recursive_and_chained_refs_compile(tok_spm) -> None:
    rec = {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
                                                           "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}},
           "$ref": "#/$defs/n"}
    assert logitgate.compile(Grammar.from_json_schema(rec), tok_spm, cache=False).n_states > 0
    t0 = time.perf_counter()
    g = Grammar.from_json_schema(_ref_chain(400))
    assert time.perf_counter() - t0 < 10
    assert g.kind == "json_schema"


def test_no_recursion_error_escapes_from_deep_inputs() -> None:
    deep_text = '{"type":"array","items":' * 3000 + "{}" + "}" * 3000
    with pytest.raises(SchemaError):  # the JSON text itself is too deep to load: still a named error
        Grammar.from_json_schema(deep_text)
    with pytest.raises(logitgate.RegexError):
        Grammar.from_regex("(" * 5000 + "a" + ")" * 5000)
    with pytest.raises(logitgate.GrammarError):
        Grammar.from_gbnf("root ::= " + "(" * 5000 + '"a"' + ")" * 5000)


def test_a_chain_of_3000_gbnf_rules_compiles_and_keeps_its_language() -> None:
    # right-linear: a regular language, but lexemes inline at most MAX_INLINE_DEPTH rules; the rest is parsed
    c = logitgate.compile(Grammar.from_gbnf(_rules(3000, gbnf=True)), _byte_tok(), cache=False)
    for text, ok in [("e0", True), ("k0k1e2", True), ("k0k1e1", False), ("k0k1", False),
                     ("".join(f"k{i}" for i in range(2999)) + "end", True),
                     ("".join(f"k{i}" for i in range(2999)) + "e2999", False)]:
        m = logitgate.Matcher(c)
        assert (m.accept_string(text) and m.is_accepting()) == ok, text[-20:]


def test_alternation_and_enum_5k(tok_spm) -> None:
    t0 = time.perf_counter()
    c = logitgate.compile(Grammar.from_regex("|".join(f"word{i}x" for i in range(5000))), tok_spm, cache=False)
    g = Grammar.from_json_schema({"enum": [f"value{i}" for i in range(5000)]})
    assert time.perf_counter() - t0 < 10
    assert c.is_accepting(c.advance_bytes(c.initial_state, b"word4999x"))
    assert c.advance_bytes(c.initial_state, b"word5000x") == -1 and g.kind == "json_schema"


def test_1000_properties_and_1000_rules(tok_spm) -> None:
    props = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(1000)}}
    t0 = time.perf_counter()
    logitgate.compile(Grammar.from_json_schema(props), tok_spm, cache=False)
    logitgate.compile(Grammar.from_lark(_rules(1000, gbnf=False)), tok_spm, cache=False)
    flat = "root ::= " + " | ".join(f"r{i}" for i in range(1000)) + "\n" + "\n".join(
        f'r{i} ::= "k{i}" [0-9]+' for i in range(1000))
    logitgate.compile(Grammar.from_gbnf(flat), tok_spm, cache=False)
    assert time.perf_counter() - t0 < 20


def test_nested_repetition_is_refused_before_building() -> None:
    t0 = time.perf_counter()
    with pytest.raises(LimitError) as info:
        logitgate.grammar.cfg.lower(Grammar.from_gbnf('root ::= ("ab"{5000}){5000}').ir)
    assert info.value.limit == "max_grammar_symbols" and time.perf_counter() - t0 < 2


def _walk(compiled, n_tokens: int, seed: int = 0, every: int = 0) -> list[int]:
    """A random walk of ``n_tokens`` allowed tokens (never EOS, never into a state where only EOS
    is left); the traced memory every ``every`` tokens."""
    tok = compiled.tokenizer
    rng = random.Random(seed)
    eos = set(tok.eos_token_ids)
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bm)
    sizes = []
    for step in range(1, n_tokens + 1):
        allowed = np.flatnonzero(logitgate.bitmask_to_bool(bm[0], tok.vocab_size))
        picks = [int(allowed[i]) for i in rng.sample(range(len(allowed)), min(16, len(allowed)))]
        picks = [t for t in picks if t not in eos]
        assert picks
        for k, t in enumerate(picks):
            assert m.accept_token(t)
            m.fill_next_token_bitmask(bm)
            if k == len(picks) - 1 or set(np.flatnonzero(logitgate.bitmask_to_bool(bm[0], tok.vocab_size)).tolist()) - eos:
                break
            m.rollback(1)
        if every and step % every == 0:
            sizes.append(tracemalloc.get_traced_memory()[0])
    return sizes


LONG_GRAMMARS = {
    "regex": lambda: Grammar.from_regex(r'(\{"id":[0-9]+,"ok":(true|false)\}\n)*'),
    "json-array": lambda: Grammar.from_gbnf(
        'root ::= "[" item ("," item)* "]"\nitem ::= "{\\"id\\":" [0-9]{1,6} ",\\"ok\\":" ("true" | "false") "}"'),
}


@pytest.mark.parametrize("name", sorted(LONG_GRAMMARS))
def test_long_generation_memory_stays_flat(name: str, tok_spm) -> None:
    compiled = logitgate.compile(LONG_GRAMMARS[name](), tok_spm, cache=False)
    tracemalloc.start()
    try:
        sizes = _walk(compiled, 6000, every=2000)
    finally:
        tracemalloc.stop()
    # masks and walks are memoised by the first tokens; after that, growth stays small
    assert sizes[-1] - sizes[0] < 2 * 2**20, sizes


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LONG_GRAMMARS))
def test_long_generation_100k_tokens_rss(name: str, tok_tekken) -> None:
    import os

    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    compiled = logitgate.compile(LONG_GRAMMARS[name](), tok_tekken, cache=False)
    _walk(compiled, 10_000)
    start = rss()
    _walk(compiled, 100_000, seed=1)
    assert rss() - start < 64, (start, rss())


@pytest.mark.slow
def test_full_size_pathological_cases(tok_tekken) -> None:
    budget = {"alternation": 30.0, "enum": 30.0, "props": 60.0, "rules": 60.0}
    t0 = time.perf_counter()
    logitgate.compile(Grammar.from_regex("|".join(f"word{i}x" for i in range(50_000))), tok_tekken, cache=False)
    assert time.perf_counter() - t0 < budget["alternation"]
    t0 = time.perf_counter()
    logitgate.compile(Grammar.from_json_schema({"enum": [f"value{i}" for i in range(50_000)]}), tok_tekken, cache=False)
    assert time.perf_counter() - t0 < budget["enum"]
    for n in (2000, 5000):
        t0 = time.perf_counter()
        props = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
        logitgate.compile(Grammar.from_json_schema(props), tok_tekken, cache=False)
        assert time.perf_counter() - t0 < budget["props"]
    t0 = time.perf_counter()
    logitgate.compile(Grammar.from_lark(_rules(3000, gbnf=False)), tok_tekken, cache=False)
    logitgate.compile(Grammar.from_gbnf(_rules(3000, gbnf=True)), tok_tekken, cache=False)
    assert time.perf_counter() - t0 < budget["rules"]
    t0 = time.perf_counter()
    logitgate.compile(Grammar.from_json_schema(_ref_chain(1000)), tok_tekken, cache=False)
    assert time.perf_counter() - t0 < 30
