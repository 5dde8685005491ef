"""The regex mask kernels of ``logitgate.kernels.trie_kernels`` against brute force, and the first
mask request's batch in ``CompiledGrammar.token_mask``."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import logitgate
from logitgate import bitmask_to_bool
from logitgate.kernels import trie_kernels

from .oracles import BruteForceMasks

ALPHABET = b"ab0-\xc3\xa9\xe2\x82\xac"  # ASCII, a 2-byte and a 3-byte character


def _small_tokenizer(rng: random.Random) -> logitgate.Tokenizer:
    """Random tokens over a few bytes, duplicates and UTF-8 fragments included."""
    tokens = {bytes([b]) for b in ALPHABET}
    while len(tokens) < 60:
        tokens.add(bytes(rng.choice(ALPHABET) for _ in range(rng.randint(1, 5))))
    toks = [b"</s>", *sorted(tokens)]
    toks += [toks[5], toks[9]]  # two ids sharing their bytes with earlier ones
    return logitgate.Tokenizer.from_bytes(toks, eos_token_id=0, special_ids=[0])


def _fill(compiled: logitgate.CompiledGrammar, states: list[int], budget: int, wide: bool = True
          ) -> tuple[int, np.ndarray]:
    trie = compiled.trie
    rows = np.asarray(states, np.int32) * np.int32(compiled._n_classes)
    out = np.full((len(states), compiled.mask_words + 1), 0xDEADBEEF, np.uint32)  # garbage: rows are zeroed
    fanout = trie.root_fanout if wide else np.zeros(256, np.int32)
    fanout.setflags(write=False)
    done = trie_kernels.fill_masks_dfa(compiled._table, compiled._byte_class, rows, trie.root_child, trie.nodes,
                                       trie.subtree_end, trie.dup_first, trie.dup_other, trie.max_depth, out, budget,
                                       fanout, trie.root_grand, compiled._live, compiled._n_classes)
    return done, out


def test_wide_nodes_are_indexed_and_masks_equal_the_plain_walk(tok_spm, tok_tekken) -> None:
    """Wide first bytes (" " has over a hundred second bytes) are entered through their child
    index when the state lets few bytes on; every state's mask equals the walk that scans every
    child, and the index holds exactly the children."""
    for tok in (tok_spm, tok_tekken):
        trie = tok.trie
        assert (trie.root_fanout[trie.root_fanout > 0] >= logitgate.vocab.trie.WIDE_CHILDREN).all()
        b = ord(" ")
        kids = np.flatnonzero(trie.root_grand[b * 256:(b + 1) * 256] >= 0)
        assert trie.root_fanout[b] == kids.size > 64
        j = trie.root_child[b]
        assert all(trie.nodes[trie.root_grand[b * 256 + c]] & 0xFF == c for c in kids)
        assert all(trie.node_depth[trie.root_grand[b * 256 + c]] == 2 and j < trie.root_grand[b * 256 + c]
                   < trie.subtree_end[j] for c in kids)
        for pattern in [r"\+?\d{1,4}?[-.\s]?\(?\d{1,3}?\)?[-.\s]?\d{1,4}", r"( [a-z]+|\.[0-9]|-[A-Z]+)*", r"[ -~]{0,6}x"]:
            c = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok, cache=False)
            states = list(range(c.n_states))
            done, fast = _fill(c, states, 10**9)
            _, plain = _fill(c, states, 10**9, wide=False)
            assert done == len(states) and np.array_equal(fast, plain), pattern
            assert (c._live == ((c.dfa.transitions >= 0).sum(axis=1))).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       pattern=st.sampled_from([r"[ab]+-?\d*", r"(é|€)+a?", r"a{2,4}(0|-)*", r"[^a]{1,3}€?", r"(ab|b0)*é"]))
def test_fill_masks_dfa_matches_brute_force_on_every_state(seed, pattern):
    tok = _small_tokenizer(random.Random(seed))
    c = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok, cache=False)
    brute = BruteForceMasks(tok)
    states = list(range(c.n_states))
    random.Random(seed).shuffle(states)
    done, out = _fill(c, states, 10**9)
    assert done == len(states)
    for k, s in enumerate(states):
        words = out[k, :-1].view(np.int32)
        expected = brute.mask(c.dfa, s, accepting=False)
        assert np.array_equal(bitmask_to_bool(words, tok.vocab_size), expected), (pattern, s)


def test_fill_masks_dfa_budget_keeps_the_first_state_and_stops_before_passing_it(tok_tekken):
    c = logitgate.compile(logitgate.Grammar.from_regex(r"[0-9]{3}-[a-z ]+"), tok_tekken, cache=False)
    states = list(range(c.n_states))
    _, full = _fill(c, states, 10**9)
    done, out = _fill(c, states, 0)
    assert done == 1 and np.array_equal(out[0], full[0])
    counts = [_fill(c, states, budget)[0] for budget in (2_000, 8_000, 40_000, 10**9)]
    assert counts == sorted(counts) and counts[-1] == len(states) and counts[0] < len(states)
    done, out = _fill(c, states, 8_000)
    assert np.array_equal(out[:done], full[:done])


def test_ascii_bfs_rows_is_breadth_first_over_ascii_bytes(tok_spm):
    c = logitgate.compile(logitgate.Grammar.from_regex(r"(\d|é)+[-x]\w{1,3}"), tok_spm, cache=False)
    dfa, n = c.dfa, c._n_classes
    order, seen, queue = [], {dfa.start}, deque([dfa.start])
    while queue:
        s = queue.popleft()
        order.append(s)
        for b in range(128):
            t = int(dfa.transitions[s, b])
            if t >= 0 and t not in seen:
                seen.add(t)
                queue.append(t)
    got = trie_kernels.ascii_bfs_rows(c._table, c._byte_class, n, np.int32(dfa.start * n), 1000) // n
    assert got.tolist() == order  # classes are numbered by first byte: the same order as by bytes
    assert len(order) < dfa.n_states  # the states inside non-ASCII characters are left out
    assert trie_kernels.ascii_bfs_rows(c._table, c._byte_class, n, np.int32(0), 3).tolist() == (got[:3] * n).tolist()


def test_first_mask_request_fills_the_ascii_path_states(tok_tekken):
    """A phone-number pattern: the first request fills the states an ASCII number walks through,
    so walking one computes no more masks, and every mask is the brute-force one."""
    c = logitgate.compile(logitgate.Grammar.from_regex(r"\d{3}-\d{2}-\d{4}"), tok_tekken, cache=False)
    assert c.n_masks_computed == 0
    m = logitgate.Matcher(c)
    bm = logitgate.allocate_token_bitmask(1, tok_tekken.vocab_size)
    m.fill_next_token_bitmask(bm)
    batch = c.n_masks_computed
    assert 12 <= batch < c.n_states  # the 12 ASCII states, not the 200 inside Unicode digits
    brute = BruteForceMasks(tok_tekken)
    for ch in "123-45-6789":
        assert m.accept_string(ch)
        m.fill_next_token_bitmask(bm)
        expected = brute.mask(c.dfa, m._state, c.is_accepting(m._state))
        assert np.array_equal(bitmask_to_bool(bm[0], tok_tekken.vocab_size), expected)
    assert c.n_masks_computed == batch
    # a state outside the batch: inside an Arabic-Indic digit (the first of its two bytes)
    m.reset()
    assert m.accept_bytes("١".encode()[:1])
    m.fill_next_token_bitmask(bm)
    assert c.n_masks_computed == batch + 1
    expected = brute.mask(c.dfa, m._state, False)
    assert np.array_equal(bitmask_to_bool(bm[0], tok_tekken.vocab_size), expected)


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_first_request_batch_stays_within_the_mask_cache_cap(cap, tok_spm):
    words = (tok_spm.vocab_size + 31) // 32
    with logitgate.using_limits(mask_cache_bytes=4 * words * cap):
        c = logitgate.compile(logitgate.Grammar.from_regex(r"[0-9]{2,9}"), tok_spm, cache=False)
    m = logitgate.Matcher(c)
    for ch in "123456789":
        c.token_mask(m._state)
        assert m.accept_string(ch)
        assert c.n_masks_computed <= max(cap, 2)  # a cap of 1: one batch row and one memoised mask


@pytest.mark.parametrize("readonly", [True, False])
def test_class_table_is_row_offsets_with_dead_moves_kept(readonly):
    rng = np.random.default_rng(7)
    for n_states, n_classes in ((0, 3), (1, 1), (7, 5), (300, 41)):
        table = rng.integers(-1, max(n_states, 1), size=(n_states, n_classes)).astype(np.int32)
        table.setflags(write=not readonly)
        got = trie_kernels.class_table(table)
        expected = np.where(table >= 0, table * n_classes, -1).reshape(-1)
        assert got.dtype == np.int32 and not got.flags.writeable
        assert np.array_equal(got, expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1),
       pattern=st.sampled_from([r"[ab]+-?\d*", r"(é|€)+a?", r"a{2,4}(0|-)*", r"[^a]{1,3}€?", r"(ab|b0)*é",
                                r"[^-]*-[^0]*", r"(a[^b]*|b[^a]*)0"]))
def test_pair_walk_turns_any_state_s_mask_into_any_other_s(seed, pattern):
    """``_pair_walk`` (+ ``_sync_dups``) from the plain mask of a state ``r`` gives the plain mask
    of ``s``, for every pair of states: the subtrees it skips, sets and clears are all right, and
    the ids sharing bytes with others follow them (the tokenizer has two)."""
    tok = _small_tokenizer(random.Random(seed))
    c = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok, cache=False)
    trie = c.trie
    states = list(range(c.n_states))
    _, plain = _fill(c, states, 10**9)
    stack = np.empty(trie.max_depth + 1, np.int32)
    ref_stack = np.empty(trie.max_depth + 1, np.int32)
    for r in states:
        for s in states:
            mask = plain[r].copy()
            visited = trie_kernels._pair_walk(c._table, c._byte_class, s * c._n_classes, r * c._n_classes,
                                              trie.root_child, trie.nodes, trie.subtree_end, stack, ref_stack, mask,
                                              10**9)
            trie_kernels._sync_dups(mask, trie.dup_first, trie.dup_other)
            assert visited >= 0 and np.array_equal(mask[:-1], plain[s, :-1]), (pattern, r, s)
            if r == s:  # every subtree is skipped at the root
                assert visited == (trie.root_child >= 0).sum()


ALIKE_PATTERNS = [
    r"""(['"\ ,]?((?:of|the|moral|and|altruism|virtue|is|an|it|for|a)['"\ ,]?)+['"\ ,]?\s\|\s([^|\(\)\n]{1,})"""
    r"""\s\|\s['"\ ,]?((?:of|the|moral|and|altruism|virtue)['"\ ,]?)+['"\ ,]?(\s\|\s\(([^|\(\)\n]{1,})\s\|\s"""
    r"""([^|\(\)\n]{1,})\))*\n)*""",
    r"(Name: [^\n]+\nCity: [^\n]{2,}\n){1,3}",
    r"[^|\n]+(\s\|\s[^|\n]+)+!",
]


def test_masks_derived_from_alike_states_equal_plain_walks(tok_spm, tok_tekken) -> None:
    """A heavy state's mask derived from a kept alike state's (``state_mask``) equals its plain
    walk, EOS bits included, in any order of requests; and some masks are derived."""
    for tok in (tok_spm, tok_tekken):
        derived = 0
        for pattern in ALIKE_PATTERNS:
            c = logitgate.compile(logitgate.Grammar.from_regex(pattern), tok, cache=False)
            states = list(range(c.n_states))
            random.Random(len(pattern)).shuffle(states)
            _, plain = _fill(c, states, 10**9)
            for k, s in enumerate(states):
                expected = plain[k, :-1].copy()
                if c._accepting[s]:
                    expected |= c._eos_words
                assert np.array_equal(c.token_mask(s).view(np.uint32), expected), (tok.name, pattern, s)
            derived += c.n_alike_masks
        assert derived > 0, tok.name
