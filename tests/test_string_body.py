"""The string-body split of the mask walk (``TokenTrie.string_body``, ``CFGEngine._body_walk``):
plain tokens taken by length from a table, the rest walked in their own trie, the tokens starting
with bytes that leave the body another way walked in full. Checked against the plain full walk
(the fast path switched off) along random walks on both mistral tokenizers."""
from __future__ import annotations

import random

import numpy as np
import pytest

import logitgate as lg
from logitgate.grammar import engine as engine_mod

from .oracles import walk_with_fast_path_off

SCHEMAS = {
    "plain strings": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                      "required": ["a", "b"], "additionalProperties": False},
    "length counters": {"type": "object", "properties": {
        "short": {"type": "string", "minLength": 2, "maxLength": 5},
        "long": {"type": "string", "maxLength": 40}}, "required": ["short", "long"]},
    "open keys": {"type": "object", "properties": {"name": {"type": "string"}, "nick": {"type": "string"}},
                  "additionalProperties": {"type": "string", "maxLength": 12}},
    "patterns and formats": {"type": "array", "items": {"anyOf": [
        {"type": "string", "pattern": "^[a-z]+$"}, {"type": "string", "format": "date"},
        {"type": "string", "enum": ["été", "naïve", "日本"]}]}, "maxItems": 4},
}


def _walk_equal(grammar: lg.Grammar, tok: lg.Tokenizer, seed: int, steps: int, monkeypatch,
                prefix: bytes = b"") -> int:
    """Masks with the split equal those of the full walk along a random walk; returns how many
    masks the split computed."""
    return walk_with_fast_path_off(grammar, tok, monkeypatch, "_body_walk", lambda self, lex, exp: None,
                                   random.Random(seed), steps, prefix)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_split_gives_the_full_walk_masks(name, real_tok, monkeypatch):
    g = lg.Grammar.from_json_schema(SCHEMAS[name], property_order="any")
    used = sum(_walk_equal(g, real_tok, seed, 30, monkeypatch) for seed in range(3))
    if name != "patterns and formats":
        assert used > 0  # the split was taken, not only skipped


def test_lark_strings_take_the_split_too(real_tok, monkeypatch):
    g = lg.Grammar.from_lark('start: "[" (STR ("," STR)*)? "]"\nSTR: /"[^"\\\\\\x00-\\x1f]{0,20}"/')
    assert sum(_walk_equal(g, real_tok, seed, 25, monkeypatch, b'["') for seed in range(3)) > 0


def test_the_plain_token_table(tok_tekken):
    split = tok_tekken.trie.string_body
    assert split.n_plain > 100_000 and split.rest.n_nodes < tok_tekken.trie.n_nodes // 10
    cum = split.cumulative
    assert not cum[0].any() and all((cum[k] & ~cum[k + 1] == 0).all() for k in range(split.max_chars))
    plain = np.flatnonzero(lg.bitmask_to_bool(cum[-1].view(np.int32), tok_tekken.n_tokens))
    for t in random.Random(0).sample(plain.tolist(), 300):
        text = tok_tekken.tokens[t].decode("utf-8")
        assert text and all(c >= " " and c not in '"\\' for c in text)
        k = len(text)
        assert (cum[k][t >> 5] >> (t & 31)) & 1 and not (cum[k - 1][t >> 5] >> (t & 31)) & 1
    for t in (tok_tekken.tokens.index(b'"'), tok_tekken.tokens.index(b"\\")):
        assert tok_tekken.trie.token_node[t] >= 0 and split.rest.token_node[t] >= 0



def test_plain_rows_less_leaving_first_bytes_equal_the_token_bytes(real_tok):
    """``_plain_row(n, elsewhere)``: the plain tokens of at most ``n`` characters whose first
    byte is not in ``elsewhere`` (a non-ASCII lead byte there: every non-ASCII first byte), as the
    token bytes say; rows cached per vocabulary answer each (n, bytes) key alone, in any order."""
    engine = lg.compile(lg.Grammar.from_json_schema({"type": "string"}), real_tok, cache=False).engine
    split = real_tok.trie.string_body
    split.plain_rows.clear()
    n_tok = real_tok.n_tokens
    first = np.array([tb[0] if (tb := real_tok.token_bytes(t)) else -1 for t in range(n_tok)])
    plain = [lg.bitmask_to_bool(split.cumulative[k].view(np.int32), n_tok) for k in range(split.max_chars + 1)]
    rng = random.Random(5)
    keys = []
    for _ in range(6):
        leaving = set(rng.sample(range(0x20, 0x7F), rng.randint(0, 3)))
        if rng.random() < 0.4:
            leaving.add(0xC2)
        keys.append((rng.randint(1, min(split.max_chars, 8)), leaving))
    keys += [(n, set()) for n, _ in keys[:2]] + keys  # the same n with other bytes, and hits again
    for n, leaving in keys:
        elsewhere = np.zeros(256, np.uint8)
        for b in leaving:
            elsewhere[b] = 1
            if b == 0xC2:
                elsewhere[0xC2:0xF5] = 1
        row = engine._plain_row(split, n, elsewhere)
        dropped = np.isin(first, [b for b in leaving if b < 0x80]) | ((first >= 0x80) & (0xC2 in leaving))
        want = plain[n] & ~dropped
        assert np.array_equal(lg.bitmask_to_bool(row.view(np.int32), n_tok), want), (n, sorted(leaving))
        assert not row.flags.writeable
    assert len(split.plain_rows) < len(keys)  # repeated keys were answered from the cache


def test_a_mask_wider_than_the_vocabulary(monkeypatch):
    from .conftest import mistral_file

    tok = lg.Tokenizer.from_mistral(mistral_file("tokenizer.model.v1"), vocab_size=32_768)
    assert tok.vocab_size > tok.n_tokens
    g = lg.Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 9}}})
    assert sum(_walk_equal(g, tok, seed, 12, monkeypatch, b'{"s":"') for seed in range(3)) > 0


def test_a_thread_whose_first_boundary_walk_is_in_the_small_trie(tok_tekken, monkeypatch):
    """The per-thread scratch of the boundary walk is sized for the vocabulary's trie even when the
    first walk that needs it is one of the string-body split's small trie (deeper full-trie walks
    come later in the same thread)."""
    import threading

    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 30},
                                               "n": {"type": "integer"}}, "required": ["s", "n"]}
    g = lg.Grammar.from_json_schema(schema)
    got: list = []

    def run():
        try:
            fast = lg.Matcher(lg.compile(g, tok_tekken, cache=False))
            assert fast.accept_bytes(b'{"s":"ab')  # the first mask: inside the string
            masks = [fast.allowed_token_ids()]
            assert fast.accept_bytes(b'c","n":')
            masks.append(fast.allowed_token_ids())
            got.append(masks)
        except Exception as exc:  # noqa: BLE001 - reported below
            got.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not isinstance(got[0], Exception), got[0]
    with monkeypatch.context() as mp:
        mp.setattr(engine_mod.CFGEngine, "_body_walk", lambda self, lex, exp: None)
        ref = lg.Matcher(lg.compile(g, tok_tekken, cache=False))
        assert ref.accept_bytes(b'{"s":"ab')
        first = ref.allowed_token_ids()
        assert ref.accept_bytes(b'c","n":')
        second = ref.allowed_token_ids()
    assert np.array_equal(got[0][0], first) and np.array_equal(got[0][1], second)


def _verdicts(monkeypatch, name: str) -> list[bool]:
    """The answers of ``CFGEngine.<name>`` from now on, recorded as the engine asks them."""
    verdicts: list[bool] = []
    original = getattr(engine_mod.CFGEngine, name)

    def recording(self, lex, exp):
        got = original(self, lex, exp)
        verdicts.append(got)
        return got

    monkeypatch.setattr(engine_mod.CFGEngine, name, recording)
    return verdicts


SEARCH_SCHEMAS = {
    # an unanchored pattern: before its match, plain characters lead to many states (the match's
    # progress), none of them a chain; every plain token stays inside the string
    "uuid search": {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "[a-f0-9]{8}-[a-f0-9]{4}"},
        "title": {"type": "string", "maxLength": 30}}, "required": ["id", "title"],
        "additionalProperties": False},
    "a digit somewhere, or a non-ASCII letter": {"type": "array", "items": {"anyOf": [
        {"type": "string", "pattern": "[0-9]"}, {"type": "string", "pattern": "é|日"}]}, "maxItems": 3},
}


@pytest.mark.parametrize("name", sorted(SEARCH_SCHEMAS))
def test_strings_closed_under_plain_text_take_the_split(name, real_tok, monkeypatch):
    """``CFGEngine._plain_closed``: a string state no plain text can leave gets every plain token
    from the table, whichever states its characters lead to; the masks equal the full walk's
    (``_walk_equal`` switches the whole split off for the reference)."""
    verdicts = _verdicts(monkeypatch, "_plain_closed")
    g = lg.Grammar.from_json_schema(SEARCH_SCHEMAS[name])
    prefix = b'{"id":"' if name == "uuid search" else b'["'
    for seed in range(3):
        _walk_equal(g, real_tok, seed, 25, monkeypatch, prefix)
    assert any(verdicts)


def test_a_key_s_first_letters_where_any_key_may_follow_take_the_split(real_tok, monkeypatch):
    """``CFGEngine._plain_closed``: after a key's opening quote, with other keys allowed too, every
    plain token stays inside the key whichever known key it starts, under the expected set of
    each property (the keys still allowed change). The masks equal the full walk's."""
    verdicts = _verdicts(monkeypatch, "_plain_closed")
    props = {k: {"type": "string", "maxLength": 8} for k in ("name", "nickname", "note", "type", "title", "été")}
    g = lg.Grammar.from_json_schema({"type": "object", "properties": props})  # other keys allowed
    for seed in range(3):
        _walk_equal(g, real_tok, seed, 30, monkeypatch, b'{"')
    assert any(verdicts)
    verdicts.clear()
    closed = lg.Grammar.from_json_schema({"type": "object", "properties": props, "additionalProperties": False})
    for seed in range(2):
        _walk_equal(closed, real_tok, seed, 20, monkeypatch, b'{"')
    assert not any(verdicts)  # only the schema's keys: a key's letters can be refused


def test_plain_closure_refuses_a_state_plain_text_can_leave(tok_tekken):
    """A bounded string (``maxLength``) is not closed: past its end, plain characters stop the
    walk; an unanchored pattern's string is, and so are the states plain text leads it to."""
    from logitgate.kernels import body_kernels as bk

    def engine_at(schema, text):
        m = lg.Matcher(lg.compile(lg.Grammar.from_json_schema(schema), tok_tekken, cache=False))
        assert m.accept_bytes(text)
        st = m._state
        return m.compiled.engine, st.lex, st.chart.row_exp[st.chart.n_rows - 1]

    eng, lex, exp = engine_at({"type": "string", "maxLength": 3}, b'"a')
    members = np.empty(bk.CLOSURE_CAP, np.int64)
    assert engine_mod._BK.plain_closure(eng._restriction(exp), bk.PLAIN_ASCII, bk.UTF8_FORMS, lex, members) == -1
    assert not eng._plain_closed(lex, exp)
    eng, lex, exp = engine_at({"type": "string", "pattern": "ab"}, b'"x')
    n = engine_mod._BK.plain_closure(eng._restriction(exp), bk.PLAIN_ASCII, bk.UTF8_FORMS, lex, members)
    assert n >= 2 and members[0] == lex  # before the match, after an "a", (after the match)
    assert eng._plain_closed(lex, exp)
    assert all(eng._plain_closed(int(s), exp) for s in members[:n])
    # the lexer's own states (for a lexer without components) say the same, and remember it
    assert eng._closure_closed(lex, exp) and all(int(s) in eng._closed[exp.tobytes()][0] for s in members[:n])


def test_a_lexer_of_one_terminal_follows_its_own_states(real_tok, monkeypatch):
    """A lexer of one regex terminal has no components: ``_plain_closed`` asks
    ``_closure_closed``, which follows the lexer's own states; the masks equal the full walk's."""
    verdicts = _verdicts(monkeypatch, "_closure_closed")
    g = lg.Grammar.from_lark('start: STR+\nSTR: /"[^"\\\\\\x00-\\x1f]*x[^"\\\\\\x00-\\x1f]*"/')
    engine = lg.compile(g, real_tok, cache=False).engine
    assert engine.lexer.comp_off.shape[0] == 0
    for seed in range(3):
        _walk_equal(g, real_tok, seed, 25, monkeypatch, b'"')
    assert any(verdicts)


def test_part_text_codes_match_the_terminals_languages():
    """``body_kernels.parts_text`` on small terminals: a JSON string goes on through any plain
    text and accepts only after its closing quote; a bounded one refuses text past its bound; a
    literal key refuses most characters; a terminal that accepts on a plain character ends."""
    from logitgate.automata.dfa import build_dfa
    from logitgate.kernels import body_kernels as bk
    from logitgate.regex.parser import parse

    nodes = [parse(r'"[^"\\\x00-\x1f]*"'), parse(r'"[^"\\\x00-\x1f]{0,3}"'), parse('"name"'), parse("[a-z]+")]
    dfa = build_dfa(nodes)
    table, column, acc = dfa.parts
    off, term, part = dfa.components
    starts = {int(term[k]): int(part[k]) for k in range(off[dfa.start], off[dfa.start + 1])}
    closed = np.full(table.shape[0], -1, np.int8)
    ends = np.full(table.shape[0], -1, np.int8)
    # the states after the opening quote (the fourth terminal: its first letter)
    after = [int(table[starts[k], column[ord('"')]]) for k in range(3)] + [int(table[starts[3], column[ord("a")]])]
    bk.parts_text(table, column, acc, bk.PLAIN_ASCII, bk.UTF8_FORMS, np.array(after, np.int32), closed, ends)
    assert [int(closed[x]) for x in after] == [1, 0, 0, 0]
    assert [int(ends[x]) for x in after] == [0, 0, 0, 1]


def test_parts_closed_asks_only_the_terminals_looked_at():
    """``body_kernels.parts_closed`` (``CFGEngine._plain_closed``): inside a string, a lexer state
    also runs a long ``maxLength`` string (another property's terminal), whose search is big;
    when only the first terminal is looked at, the answer is "closed" and the counter is never
    searched; looking at both, the counter is asked and, bounded, the state is not closed."""
    from logitgate.automata.dfa import build_dfa
    from logitgate.kernels import body_kernels as bk
    from logitgate.regex.parser import parse

    dfa = build_dfa([parse(r'"[^"\\\x00-\x1f]*"'), parse(r'"[^"\\\x00-\x1f]{0,900}"')])
    table, column, acc = dfa.parts
    off, term, part = (np.ascontiguousarray(a) for a in dfa.components)
    after = int(dfa.transitions[dfa.start, ord('"')])
    lo, hi = int(off[after]), int(off[after + 1])
    assert sorted(term[lo:hi].tolist()) == [0, 1]
    counter = int(part[lo:hi][term[lo:hi] == 1][0])
    for flags, want in (([True, False], True), ([True, True], False)):
        closed = np.full(table.shape[0], -1, np.int8)
        ends = np.full(table.shape[0], -1, np.int8)
        on = np.array(flags)
        got = bk.parts_closed(table, column, acc, bk.PLAIN_ASCII, bk.UTF8_FORMS, off.astype(np.int64),
                              term.astype(np.int32), part.astype(np.int32), on, on, after, closed, ends)
        assert got == want
        assert (ends[counter] < 0) == (not flags[1])  # searched only when looked at


def test_uuid_beside_a_long_counter_takes_the_split(tok_tekken, monkeypatch):
    """The engine side: a uuid search string beside a 255-character ``maxLength`` property is
    closed at every step, with the full walk's masks."""
    verdicts = _verdicts(monkeypatch, "_plain_closed")
    schema = {"type": "object", "properties": {
        "id": {"type": "string", "pattern": "[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}"},
        "title": {"type": "string", "maxLength": 255}}, "required": ["id", "title"], "additionalProperties": False}
    g = lg.Grammar.from_json_schema(schema)
    _walk_equal(g, tok_tekken, 0, 20, monkeypatch, b'{"id":"12')
    assert verdicts and all(verdicts[:5])


def test_part_text_on_long_counters():
    """A 300-character counter is searched whole: exact codes for its states (bounded: refuses
    past its end; ends only after the quote). A 1,000-character one is too big: the state asked and
    those the search met are answered "refuses, ends" (safe), so the next character's state is
    known without a second search."""
    from logitgate.automata.dfa import build_dfa
    from logitgate.kernels import body_kernels as bk
    from logitgate.regex.parser import parse

    for bound, codes in ((300, (0, 0)), (1000, (0, 1))):
        dfa = build_dfa([parse(r'"[^"\\\x00-\x1f]{0,%d}"' % bound), parse("[0-9]+")])
        table, column, acc = dfa.parts
        off, term, part = dfa.components
        starts = {int(term[k]): int(part[k]) for k in range(off[dfa.start], off[dfa.start + 1])}
        first = int(table[starts[0], column[ord('"')]])
        second = int(table[first, column[ord("a")]])
        closed = np.full(table.shape[0], -1, np.int8)
        ends = np.full(table.shape[0], -1, np.int8)
        bk.parts_text(table, column, acc, bk.PLAIN_ASCII, bk.UTF8_FORMS, np.array([first], np.int32), closed, ends)
        assert (int(closed[first]), int(ends[first])) == codes
        assert (int(closed[second]), int(ends[second])) == codes  # answered by the same search


def test_a_counter_beside_other_patterns_is_followed_once(tok_tekken, monkeypatch):
    """``CFGEngine._plain_chain``: inside a ``maxLength`` string, the text also runs other
    properties' patterns (letters keep a key-like pattern alive, the chain's characters need not),
    so the exact lexer states differ from the chain's; a costly chain is also known by the part
    states of the terminals looked at, and its next steps reuse it. The masks are the full walk's."""
    monkeypatch.setattr(engine_mod, "CHAIN_SIGS_AFTER_NS", 0)
    schema = {"type": "object", "properties": {
        "key": {"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,255}$"},
        "value": {"type": "string", "minLength": 1, "maxLength": 255}}, "required": ["key", "value"],
        "additionalProperties": False}
    g = lg.Grammar.from_json_schema(schema)
    steps = []
    original = engine_mod.CFGEngine._chain_steps

    def counting(R, lex, limit):
        steps.append(lex)
        return original(R, lex, limit)

    monkeypatch.setattr(engine_mod.CFGEngine, "_chain_steps", staticmethod(counting))
    m = lg.Matcher(lg.compile(g, tok_tekken, cache=False))
    assert m.accept_bytes(b'{"key":"k","value":"')
    m.allowed_token_ids()
    for word in ("example", "-", "value", "-", "that", "-", "goes", "-", "on"):
        assert m.accept_string(word)
        m.allowed_token_ids()
    assert 1 <= len(steps) <= 2  # followed once (the state after the quote may start its own chain)
    _walk_equal(g, tok_tekken, 0, 25, monkeypatch, b'{"key":"k","value":"ab')


@pytest.mark.parametrize("start", [0, 37])
def test_a_long_string_s_pieces_take_the_split(start, real_tok, monkeypatch):
    """Inside a piece of a long string (exactly 64 characters, then the next piece), the chain of
    plain steps ends where the piece does: the plain tokens that fit are a row of the table, the
    longer ones are walked (``StringBodySplit.beyond``) as they run into the next piece. The
    masks equal the full walk's, and the pieces take the split rather than the full walk."""
    from logitgate.vocab.trie import StringBodySplit

    tiers: list[int] = []
    beyond = StringBodySplit.beyond

    def counting(self, n):
        got = beyond(self, n)
        tiers.append(-1 if got is None else 0 if got is self.rest else n)
        return got

    monkeypatch.setattr(StringBodySplit, "beyond", counting)
    g = lg.Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string", "minLength": 300}},
                                     "required": ["s"], "additionalProperties": False})
    prefix = b'{"s":"' + b"ab" * start
    used = sum(_walk_equal(g, real_tok, seed, 30, monkeypatch, prefix) for seed in range(2))
    assert used > 0 and any(t > 0 for t in tiers)  # some tokens were walked on into the next piece
