"""``logitgate.Limits``: the API, and every cap refusing under a small value and passing under a larger one."""
from __future__ import annotations

import asyncio
import json
import pickle
import threading

import pytest

import logitgate
from logitgate import Grammar, LimitError, Limits
from logitgate.errors import GrammarError, RegexError, SchemaError


def test_defaults_match_module_constants() -> None:
    from logitgate.grammar import cfg, engine, gbnf, lexer
    from logitgate.json_schema import MAX_JSON_LEXER_STATES
    from logitgate.regex import parser

    lim = Limits()
    assert lim.max_regex_repeat == parser.MAX_REPEAT
    assert lim.max_gbnf_repeat == gbnf.MAX_REPEAT
    assert lim.max_grammar_rules == cfg.MAX_RULES
    assert lim.max_lexer_states == lexer.MAX_LEXER_STATES
    assert lim.max_json_lexer_states == MAX_JSON_LEXER_STATES
    assert lim.max_forced_bytes == engine.MAX_FORCED_BYTES
    assert lim.mask_cache_bytes == engine.MASK_CACHE_BYTES
    from logitgate.json_schema import translate

    assert lim.max_schema_alternatives == translate.MAX_ALTERNATIVES
    assert logitgate.get_limits() == lim


def test_validation_and_replace() -> None:
    with pytest.raises(ValueError, match="max_dfa_states"):
        Limits(max_dfa_states=0)
    with pytest.raises(ValueError, match="max_compile_seconds"):
        Limits(max_compile_seconds=-1)
    with pytest.raises(TypeError, match="unknown Limits field"):
        Limits().replace(max_nonsense=3)
    assert Limits().replace(max_dfa_states=7).max_dfa_states == 7
    with pytest.raises(TypeError):
        logitgate.set_limits({"max_dfa_states": 5})  # type: ignore[arg-type]


def test_using_limits_is_scoped_and_set_limits_is_global() -> None:
    base = logitgate.get_limits()
    with logitgate.using_limits(max_dfa_states=123) as lim:
        assert lim.max_dfa_states == 123 and logitgate.get_limits().max_dfa_states == 123
        with logitgate.using_limits(max_regex_repeat=5):
            assert logitgate.get_limits().max_dfa_states == 123  # nested changes stack
            assert logitgate.get_limits().max_regex_repeat == 5
    assert logitgate.get_limits() == base
    try:
        logitgate.set_limits(Limits(max_regex_repeat=7))
        assert logitgate.get_limits().max_regex_repeat == 7
        with logitgate.using_limits(max_dfa_states=9):
            assert logitgate.get_limits().max_regex_repeat == 7
    finally:
        logitgate.set_limits(Limits())


def test_limits_differ_per_thread_and_task() -> None:
    seen: dict[str, int] = {}
    gate = threading.Barrier(2)

    def worker(name: str, cap: int) -> None:
        with logitgate.using_limits(max_regex_repeat=cap):
            gate.wait()
            seen[name] = logitgate.get_limits().max_regex_repeat

    threads = [threading.Thread(target=worker, args=(n, c)) for n, c in (("a", 11), ("b", 22))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": 11, "b": 22}

    async def task(cap: int) -> int:
        with logitgate.using_limits(max_regex_repeat=cap):
            await asyncio.sleep(0)
            return logitgate.get_limits().max_regex_repeat

    async def both() -> list[int]:
        return list(await asyncio.gather(task(3), task(4)))

    assert asyncio.run(both()) == [3, 4]
    assert logitgate.get_limits().max_regex_repeat == 1000


def test_limit_error_shape_and_pickle() -> None:
    with pytest.raises(LimitError) as info:
        with logitgate.using_limits(max_regex_repeat=10):
            Grammar.from_regex("ab{11}")
    err = info.value
    assert isinstance(err, RegexError) and isinstance(err, logitgate.CompileError)
    assert err.limit == "max_regex_repeat" and err.value == 10 and err.offset == 2
    assert "Limits.max_regex_repeat=10" in str(err) and "using_limits(max_regex_repeat=" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and back.limit == "max_regex_repeat" and str(back) == str(err)


def test_regex_repeat_cap_both_ways() -> None:
    with pytest.raises(LimitError, match="max_regex_repeat"):
        Grammar.from_regex("a{1500}")
    with logitgate.using_limits(max_regex_repeat=2000):
        assert Grammar.from_regex("a{1500}").tree.min == 1500


def test_dfa_state_cap_both_ways(tok_spm) -> None:
    g = Grammar.from_regex("(a|b)*a(a|b){12}")  # 2**13 DFA states
    with logitgate.using_limits(max_dfa_states=4000), pytest.raises(LimitError) as info:
        logitgate.compile(g, tok_spm, cache=False)
    assert info.value.limit == "max_dfa_states" and info.value.value == 4000
    with logitgate.using_limits(max_dfa_states=10_000):
        assert logitgate.compile(g, tok_spm, cache=False).n_states == 2**13


def test_source_size_cap_both_ways() -> None:
    text = "a" * 5000
    with logitgate.using_limits(max_source_bytes=4096):
        with pytest.raises(LimitError, match="max_source_bytes") as info:
            Grammar.from_regex(text)
        assert isinstance(info.value, LimitError) and info.value.value == 4096
        with pytest.raises(LimitError, match="max_source_bytes"):
            Grammar.from_gbnf(f'root ::= "{text}"')
        with pytest.raises(LimitError, match="max_source_bytes"):
            Grammar.from_lark(f'start: "{text}"')
        with pytest.raises(SchemaError, match="max_source_bytes"):
            Grammar.from_json_schema({"enum": [text]})
        with pytest.raises(SchemaError, match="max_source_bytes"):
            Grammar.from_json_schema('{"const": "' + text + '"}')
        # multi-byte characters count as their UTF-8 size
        with pytest.raises(LimitError, match="max_source_bytes"):
            Grammar.from_regex("é" * 2100)
    assert Grammar.from_regex(text).source == text


def test_gbnf_repeat_cap_both_ways() -> None:
    with pytest.raises(GrammarError, match="max_gbnf_repeat") as info:
        Grammar.from_gbnf('root ::= "a"{20000}')
    assert info.value.line == 1 and info.value.column == 14 and info.value.limit == "max_gbnf_repeat"
    with logitgate.using_limits(max_gbnf_repeat=100_000):
        assert Grammar.from_gbnf('root ::= "a"{20000}').kind == "gbnf"


def test_grammar_rules_and_symbols_caps_both_ways() -> None:
    from logitgate.grammar.cfg import lower

    g = Grammar.from_gbnf('root ::= x{30,300}\nx ::= "a" | "b"')  # about 550 productions
    with logitgate.using_limits(max_grammar_rules=200), pytest.raises(LimitError) as info:
        lower(g.ir)
    assert info.value.limit == "max_grammar_rules"
    assert len(lower(g.ir).rules) > 200
    nested = Grammar.from_gbnf('root ::= ("ab"{2000}){2000}')  # 8M symbols if built
    with pytest.raises(LimitError) as info:
        lower(nested.ir)
    assert info.value.limit == "max_grammar_symbols"
    with logitgate.using_limits(max_grammar_symbols=10_000):
        with pytest.raises(LimitError, match="max_grammar_symbols"):
            lower(Grammar.from_gbnf('root ::= ("ab"{100}){100}').ir)
    assert lower(Grammar.from_gbnf('root ::= ("ab"{100}){100}').ir).rules


def test_lexer_state_cap_both_ways(tok_spm) -> None:
    g = Grammar.from_lark('start: A\nA: /(a|b)*a(a|b){10}/')
    with logitgate.using_limits(max_lexer_states=500), pytest.raises(GrammarError) as info:
        logitgate.compile(g, tok_spm, cache=False)
    assert isinstance(info.value, LimitError) and info.value.limit == "max_lexer_states"
    assert "too large a lexer" in str(info.value)
    assert logitgate.compile(g, tok_spm, cache=False).n_states > 2000


def test_json_lexer_cap_relaxes_then_refuses() -> None:
    schema = {"type": "string", "pattern": "^(a|b)*a(a|b){9}$"}
    assert Grammar.from_json_schema(schema).kind == "json_schema"
    with logitgate.using_limits(max_json_lexer_states=50):
        with pytest.raises(SchemaError, match="Limits.max_json_lexer_states"):
            Grammar.from_json_schema(schema)  # strict: the relaxation it would need is refused
        relaxed = Grammar.from_json_schema(schema, strict=False)
        assert any("too large a lexer" in why for _, why in relaxed.relaxed)
    with logitgate.using_limits(max_json_lexer_states=5), pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(True, strict=False)  # even the last relaxation level is too big
    assert isinstance(info.value, LimitError) and info.value.limit == "max_json_lexer_states"


def test_schema_depth_cap_both_ways() -> None:
    schema: dict = {"type": "integer"}
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    with logitgate.using_limits(max_schema_depth=30), pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert isinstance(info.value, LimitError) and info.value.limit == "max_schema_depth"
    assert info.value.pointer.startswith("/items/items")
    with logitgate.using_limits(max_schema_depth=30), pytest.raises(SchemaError, match="max_schema_depth"):
        Grammar.from_json_schema(json.dumps(schema))  # as text
    assert Grammar.from_json_schema(schema).kind == "json_schema"


def test_compile_deadline_both_ways(tok_spm) -> None:
    from logitgate.limits import check_deadline, compile_deadline

    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)}}
    with logitgate.using_limits(max_compile_seconds=1e-9), pytest.raises(LimitError) as info:
        Grammar.from_json_schema(schema)
    assert info.value.limit == "max_compile_seconds" and "compiling took longer" in str(info.value)
    with logitgate.using_limits(max_compile_seconds=1e-9), pytest.raises(LimitError, match="max_compile_seconds"):
        logitgate.compile(Grammar.from_regex("[a-z]{1,200}@[a-z]{1,200}"), tok_spm, cache=False)
    check_deadline()  # outside any compile: never raises
    with logitgate.using_limits(max_compile_seconds=0), compile_deadline():
        check_deadline()  # 0 means no deadline
    assert Grammar.from_json_schema(schema).kind == "json_schema"


def test_mask_cache_cap_bounds_regex_masks(tok_spm) -> None:
    g = Grammar.from_regex("[a-z]{0,40}")
    words = (tok_spm.vocab_size + 31) // 32
    with logitgate.using_limits(mask_cache_bytes=4 * words * 5):
        compiled = logitgate.compile(g, tok_spm, cache=False)
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, tok_spm.vocab_size)
    letters = [t for t in range(tok_spm.vocab_size) if tok_spm.token_bytes(t) in (b"a", b"b", b"c")][:1]
    assert letters
    for _ in range(30):
        m.fill_next_token_bitmask(bm)
        assert m.accept_token(letters[0])
    assert compiled.n_masks_computed <= 5
    assert logitgate.bitmask_to_bool(bm[0], tok_spm.vocab_size)[letters[0]]


def test_forced_bytes_cap(tok_spm) -> None:
    g = Grammar.from_lark('start: "' + "x" * 300 + '"')
    with logitgate.using_limits(max_forced_bytes=100):
        short = logitgate.compile(g, tok_spm, cache=False)
    assert len(logitgate.Matcher(short).compiled.forced_bytes(short.initial_state)) == 100
    full = logitgate.compile(g, tok_spm, cache=False)
    assert full.forced_bytes(full.initial_state) == b"x" * 300


def test_a_grammar_cap_hit_by_a_schema_is_a_schema_error_with_its_pointer() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(30)}}
    with logitgate.using_limits(max_grammar_symbols=50), pytest.raises(logitgate.SchemaError) as info:
        logitgate.Grammar.from_json_schema(schema)
    err = info.value
    assert isinstance(err, logitgate.LimitError) and err.limit == "max_grammar_symbols" and err.value == 50
    assert err.pointer == "" and "max_grammar_symbols=50" in str(err)
    logitgate.Grammar.from_json_schema(schema)  # the default caps allow it


def test_schema_alternatives_cap_is_named_and_configurable() -> None:
    pair = {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}
    schema = {"type": "object", "allOf": [pair, pair, pair]}  # 8 combinations
    with logitgate.using_limits(max_schema_alternatives=4), pytest.raises(LimitError) as info:
        Grammar.from_json_schema(schema)
    assert isinstance(info.value, SchemaError) and info.value.limit == "max_schema_alternatives"
    assert "max_schema_alternatives=4" in str(info.value)
    Grammar.from_json_schema(schema)
