"""States that behave alike over any token's bytes share one walk (``CFGEngine._alike_entry``,
``body_kernels.parts_alike``): checked against bounded equivalence computed another way (Moore's
refinement, one round per byte) and, in the engine, against the masks of a full walk at every
step of random walks on both mistral tokenizers."""
from __future__ import annotations

import random

import numpy as np
import pytest

import logitgate as lg
from logitgate.grammar import engine as engine_mod
from logitgate.kernels import body_kernels as bk

from .oracles import walk_with_fast_path_off


def _moore(table: np.ndarray, acc: np.ndarray, depth: int) -> np.ndarray:
    """Classes of states no string of at most ``depth`` bytes tells apart (-1 = refused, a class
    of its own), by ``depth`` rounds of partition refinement."""
    cls = acc.astype(np.int64)
    for _ in range(depth):
        succ = np.where(table >= 0, cls[np.maximum(table, 0)], -1)
        keys = {}
        new = np.empty_like(cls)
        for s in range(table.shape[0]):
            new[s] = keys.setdefault((int(cls[s]),) + tuple(succ[s].tolist()), len(keys))
        cls = new
    return cls


def _scratch():
    cap = bk.PARTS_ALIKE_PAIRS
    return np.full(4 * cap, -1, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)


@pytest.mark.parametrize("pattern", [r"^[a-c]{1,12}$", r"^(?:\S+\s+){0,3}\S+$", r"[0-9]{3}-", r"^.{0,9}$"])
def test_parts_alike_is_bounded_equivalence(pattern):
    """For every pair of part states of a string terminal and several depths, ``parts_alike``
    answers as Moore's refinement does (the kernel explores pairs breadth-first instead)."""
    g = lg.Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern},
                                                                      "n": {"type": "integer"}}})
    tok = lg.Tokenizer.from_bytes([bytes([b]) for b in range(256)] + [b"<eos>"], eos_token_id=256, special_ids=[256])
    eng = lg.compile(g, tok, cache=False).engine
    table, acc = eng.lexer.part_table, eng.lexer.part_acc
    n = table.shape[0]
    assert n > 8
    rng = random.Random(0)
    pairs = [(p, q) for p in range(n) for q in range(p, min(n, p + 4))]
    pairs += [tuple(sorted(rng.sample(range(n), 2))) for _ in range(3000)]
    scratch = _scratch()
    seen_alike = seen_apart = 0
    for depth in (1, 3, 6, 20):
        cls = _moore(table, acc, depth)
        for p, q in pairs:
            got = bool(bk.parts_alike(table, acc, p, q, depth, *scratch))
            assert got == (cls[p] == cls[q]), (pattern, depth, p, q)
            seen_alike += got and p != q
            seen_apart += not got
    assert (scratch[0] == -1).all()  # the hash table is left empty
    assert seen_alike and seen_apart


SCHEMAS = {
    # a class counter: every step of the string is a new lexer state, walked in full before
    "class counter": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,200}$"},
                                                       "n": {"type": "integer"}}, "required": ["id", "n"]},
    # words counted and a length counter: alike only while both are far from their limits
    "words and length": {"type": "object", "properties": {
        "s": {"type": "string", "pattern": r"^(?:[a-z]+ ){0,12}[a-z]+$", "maxLength": 150}}, "required": ["s"]},
    "exact length": {"type": "array", "items": {"type": "string", "pattern": "^[A-Fa-f0-9]{24}$"}},
}


def _compare(g: lg.Grammar, tok: lg.Tokenizer, monkeypatch, seeds: int) -> int:
    """Masks along random walks (mostly short tokens: many steps inside the strings, near and far
    from their limits) equal those with the comparison switched off; returns how many states
    shared another's walk."""
    return sum(walk_with_fast_path_off(g, tok, monkeypatch, "_alike_entry", lambda self, lex, key: None,
                                       random.Random(seed), 40, longest=False) for seed in range(seeds))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_alike_states_give_the_full_walk_masks(name, real_tok, monkeypatch):
    """Every costly walk's state is kept (``ALIKE_WORTH_NS`` = 0), so the comparison runs at every
    step; the masks equal those with it switched off, and some states did share a walk."""
    monkeypatch.setattr(engine_mod, "ALIKE_WORTH_NS", 0)
    shared = _compare(lg.Grammar.from_json_schema(SCHEMAS[name]), real_tok, monkeypatch, 3)
    if name != "exact length":  # 24 characters: every two states differ within a token's length
        assert shared > 0


LARK = {
    # two counted terminals that start alike: the lexer state runs both while the text fits both
    "two counters": 'start: "[" item ("," item)* "]"\nitem: ID | HEX\nID: /[a-z_][a-z0-9_]{0,150}/\n'
                    'HEX: /0x[0-9a-f]{1,90}/',
    "counter and ignored spaces": 'start: WORD+\nWORD: /[a-z]{1,120}/\n%ignore " "',
}


@pytest.mark.parametrize("name", sorted(LARK))
def test_alike_states_in_lark_grammars(name, real_tok, monkeypatch):
    """The same comparison in Lark grammars: several terminals in one lexer state, and an ignored
    terminal; the masks equal those with the comparison switched off."""
    monkeypatch.setattr(engine_mod, "ALIKE_WORTH_NS", 0)
    assert _compare(lg.Grammar.from_lark(LARK[name]), real_tok, monkeypatch, 2) > 0
