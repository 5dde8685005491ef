"""Concurrency (issue 9): one compiled grammar shared by many matchers on many threads gives the
masks a single-threaded run gives, and the compile cache is safe under concurrent first use.

The oracle is the same walk replayed on one thread against a separately compiled copy of the
grammar. The threaded runs share a freshly compiled grammar, so its mask memo (regex DFA rows,
grammar lexer-state and boundary caches) is filled concurrently, which is where a race would show.
"""
from __future__ import annotations

import hashlib
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import logitgate
from logitgate import compiler

N_THREADS = 8

LARK_EXPR = r"""
start: expr
?expr: term (("+" | "-") term)*
?term: factor (("*" | "/") factor)*
?factor: NUMBER | NAME | "(" expr ")" | NAME "(" [expr ("," expr)*] ")"
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%import common.WS
%ignore WS
"""

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "name": {"type": "string", "maxLength": 20},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4},
        "score": {"type": "number"},
        "child": {"$ref": "#"},
    },
    "required": ["id", "name"],
}


def _grammars() -> dict[str, logitgate.Grammar]:
    return {
        "regex": logitgate.Grammar.from_regex(r"(\d{1,3}\.){3}\d{1,3}|[a-z]+@[a-z]+\.(com|org)|\(\w+( \w+)*\)"),
        "lark": logitgate.Grammar.from_lark(LARK_EXPR),
        "json_schema": logitgate.Grammar.from_json_schema(SCHEMA, whitespace="flexible"),
    }


def _digest(row: np.ndarray) -> str:
    return hashlib.blake2b(row.tobytes(), digest_size=12).hexdigest()


def _walk(compiled: logitgate.CompiledGrammar, seed: int, steps: int) -> tuple[list[int], list[str]]:
    """A random walk: at each step the mask's digest, then a random allowed non-EOS token."""
    rng = random.Random(seed)
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, compiled.tokenizer.vocab_size)
    eos = np.array(sorted(compiled.tokenizer.eos_token_ids), dtype=np.int64)
    tokens: list[int] = []
    digests: list[str] = []
    for _ in range(steps):
        m.fill_next_token_bitmask(bm, 0)
        digests.append(_digest(bm[0]))
        allowed = np.setdiff1d(np.flatnonzero(logitgate.bitmask_to_bool(bm[0], compiled.tokenizer.vocab_size)), eos)
        if len(allowed) == 0:
            break
        t = int(allowed[rng.randrange(len(allowed))])
        assert m.accept_token(t)
        tokens.append(t)
    return tokens, digests


def _replay(compiled: logitgate.CompiledGrammar, tokens: list[int], barrier: threading.Barrier | None) -> list[str]:
    """The masks met along a given token sequence (fork/rollback exercised on the way)."""
    if barrier is not None:
        barrier.wait()
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, compiled.tokenizer.vocab_size)
    digests = []
    for i, t in enumerate(tokens):
        m.fill_next_token_bitmask(bm, 0)
        digests.append(_digest(bm[0]))
        if i % 5 == 4:  # a fork must not disturb its parent, nor a rollback the shared memo
            side = m.fork()
            assert side.accept_token(t)
            side.rollback(1)
        assert m.accept_token(t)
    m.fill_next_token_bitmask(bm, 0)
    digests.append(_digest(bm[0]))
    return digests


@pytest.mark.parametrize("kind", ["regex", "lark", "json_schema"])
def test_shared_grammar_on_many_threads_matches_single_thread(kind, real_tok):
    _stress(_grammars()[kind], real_tok, threads=N_THREADS, walks_per_thread=2, steps=40)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["regex", "lark", "json_schema"])
def test_shared_grammar_stress(kind, real_tok):
    _stress(_grammars()[kind], real_tok, threads=16, walks_per_thread=3, steps=150)


def _stress(grammar: logitgate.Grammar, tok: logitgate.Tokenizer, *, threads: int, walks_per_thread: int,
            steps: int) -> None:
    reference = logitgate.compile(grammar, tok, cache=False)
    walks = [_walk(reference, seed, steps=steps) for seed in range(walks_per_thread * threads)]
    single = [_replay(logitgate.compile(grammar, tok, cache=False), tokens, None) for tokens, _ in walks[:2]]

    shared = logitgate.compile(grammar, tok, cache=False)  # fresh: its memo fills concurrently
    barrier = threading.Barrier(threads)
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_replay, shared, tokens, barrier if i < threads else None)
                   for i, (tokens, _) in enumerate(walks)]
        threaded = [f.result(timeout=300) for f in futures]

    assert single == threaded[:2]
    for (tokens, digests), got in zip(walks, threaded):
        assert len(tokens) > 0
        # the walk records the mask before each accepted token; the replay records one more at the end
        assert got[: len(digests)] == digests
    # the batched helper, on threads too, fills the same rows
    matchers = []
    for tokens, _ in walks:
        m = logitgate.Matcher(shared)
        for t in tokens[: len(tokens) // 2]:
            assert m.accept_token(t)
        matchers.append(m)
    bm = logitgate.allocate_token_bitmask(len(matchers), tok.vocab_size)
    logitgate.fill_next_token_bitmasks(matchers, bm, num_threads=4)
    for row, (tokens, digests) in zip(bm, walks):
        assert _digest(row) == digests[len(tokens) // 2]


def test_concurrent_first_compile_runs_once(tok_spm, monkeypatch):
    grammar = logitgate.Grammar.from_regex(r"[A-Z]{2}-\d{4}-(alpha|beta|gamma)")
    logitgate.clear_cache()
    calls = []
    real = compiler._compile_uncached

    def counting(g, tok):
        calls.append(threading.get_ident())
        return real(g, tok)

    monkeypatch.setattr(compiler, "_compile_uncached", counting)
    barrier = threading.Barrier(N_THREADS)

    def first_use():
        barrier.wait()
        return logitgate.compile(grammar, tok_spm)

    with ThreadPoolExecutor(N_THREADS) as pool:
        results = list(pool.map(lambda _: first_use(), range(N_THREADS)))
    assert len(calls) == 1
    assert all(r is results[0] for r in results)
    assert not compiler._key_locks  # the per-key lock is dropped once the entry is in the cache


def test_concurrent_failing_compiles_each_raise_and_leave_no_lock(tok_spm):
    # a pattern whose every branch is impossible: it parses, but no string matches it
    grammar = logitgate.Grammar.from_regex(r"a[^\s\S]b")
    logitgate.clear_cache()
    barrier = threading.Barrier(N_THREADS)

    def first_use():
        barrier.wait()
        try:
            logitgate.compile(grammar, tok_spm)
        except logitgate.CompileError as exc:
            return exc
        return None

    with ThreadPoolExecutor(N_THREADS) as pool:
        errors = list(pool.map(lambda _: first_use(), range(N_THREADS)))
    assert all(isinstance(e, logitgate.CompileError) and "matches no string" in str(e) for e in errors)
    assert not compiler._key_locks  # failures must not leak one lock per distinct bad grammar
