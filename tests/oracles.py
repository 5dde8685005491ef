"""Test oracles: a brute-force token mask (every token's bytes stepped through the DFA, no trie),
canonical tokenizations from the tokenizers' own libraries, random valid strings, and Python's
``re`` with a time limit."""
from __future__ import annotations

import random
import re
import signal
import threading

import numpy as np
from hypothesis import reject

from logitgate.automata import ByteDFA


ORACLE_SECONDS = 2.0
"""Longest one ``re`` match of :func:`fullmatches` may take. Python's ``re`` backtracks: a
generated pattern that nests repetitions (``(?:(?:a?)*)+``, say) can run for hours on a text of a
dozen characters (a CI run hung 18 minutes in ``test_nested_single_operand``)."""


class _OracleTimeout(Exception):
    pass


def _expire(signum: int, frame: object) -> None:
    raise _OracleTimeout


def fullmatches(pattern: re.Pattern[str], text: str) -> bool:
    """``pattern.fullmatch(text)`` as an oracle: past ``ORACLE_SECONDS`` it cannot answer, and the
    hypothesis example is discarded (``reject``) rather than the run hanging. No limit off the main
    thread or without ``setitimer``."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return pattern.fullmatch(text) is not None
    old = signal.signal(signal.SIGALRM, _expire)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, ORACLE_SECONDS)
            return pattern.fullmatch(text) is not None  # _sre checks for signals as it runs
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OracleTimeout:
        reject()
        raise  # not reached: reject raises
    finally:
        signal.signal(signal.SIGALRM, old)


class BruteForceMasks:
    """Allowed tokens at a DFA state by stepping every token of the vocabulary independently."""

    def __init__(self, tok) -> None:
        self.tok = tok
        lengths = np.array([len(b) for b in tok.tokens], dtype=np.int64)
        self.lengths = lengths
        width = max(1, int(lengths.max()))
        mat = np.zeros((tok.n_tokens, width), dtype=np.uint8)
        for i, b in enumerate(tok.tokens):
            if b:
                mat[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
        self.mat = mat
        self.regular = np.array(
            [i not in tok.special_ids and lengths[i] > 0 for i in range(tok.n_tokens)], dtype=bool
        )

    def mask(self, dfa: ByteDFA, state: int, accepting: bool) -> np.ndarray:
        """bool[vocab_size]: token allowed from ``state``."""
        st = np.full(self.tok.n_tokens, state, dtype=np.int64)
        idx = np.flatnonzero(self.regular)
        for j in range(self.mat.shape[1]):
            idx = idx[self.lengths[idx] > j]
            if idx.size == 0:
                break
            nxt = dfa.transitions[st[idx], self.mat[idx, j]]
            st[idx] = nxt
            idx = idx[nxt >= 0]
        out = np.zeros(self.tok.vocab_size, dtype=bool)
        out[: self.tok.n_tokens] = self.regular & (st >= 0)
        if accepting:
            out[list(self.tok.eos_token_ids)] = True
        return out


def sample_valid_bytes(dfa: ByteDFA, rng: random.Random, max_len: int = 60) -> bytes:
    """A random string of the DFA's language (walks live bytes, stops at accepting states)."""
    state, out = dfa.start, bytearray()
    for _ in range(10 * max_len):
        live = np.flatnonzero(dfa.transitions[state] >= 0)
        accepting = bool(dfa.accepting[state].any())
        if accepting and (live.size == 0 or len(out) >= max_len or rng.random() < 0.15):
            return bytes(out)
        if live.size == 0:
            break
        # prefer bytes that reach acceptance soon when the string grows long
        b = int(live[rng.randrange(live.size)])
        out.append(b)
        state = int(dfa.transitions[state, b])
    # fall back: finish with the shortest path to acceptance (BFS)
    return bytes(out) + _shortest_completion(dfa, state)


def _shortest_completion(dfa: ByteDFA, state: int) -> bytes:
    from collections import deque

    seen = {state: b""}
    queue = deque([state])
    while queue:
        s = queue.popleft()
        if dfa.accepting[s].any():
            return seen[s]
        for b in np.flatnonzero(dfa.transitions[s] >= 0):
            t = int(dfa.transitions[s, b])
            if t not in seen:
                seen[t] = seen[s] + bytes([int(b)])
                queue.append(t)
    raise AssertionError("live state with no path to acceptance")


class CanonicalEncoder:
    """The real tokenizer's own encoding of a text, without BOS/EOS.

    SentencePiece prepends a dummy-prefix space to a text; in the middle of a generation a text
    has no such space, so the space is stripped from the first piece and returned as
    ``leading`` bytes to be fed with ``accept_bytes`` (its remainder) by the caller.
    """

    def __init__(self, name: str, path) -> None:
        self.name = name
        if name == "spm":
            import sentencepiece as spm

            self._sp = spm.SentencePieceProcessor(model_file=str(path))
        else:
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer

            self._tk = Tekkenizer.from_file(str(path))

    def encode(self, text: str, tok) -> tuple[bytes, list[int]]:
        """``(leading_bytes, ids)``: feed ``leading_bytes`` first, then the ids."""
        if self.name == "spm":
            ids = list(self._sp.encode(text))
            if ids and tok.token_bytes(ids[0]).startswith(b" ") and not text.startswith(" "):
                return tok.token_bytes(ids[0])[1:], ids[1:]
            return b"", ids
        return b"", list(self._tk.encode(text, bos=False, eos=False))


def random_split_ids(tok, data: bytes, rng: random.Random) -> list[int] | None:
    """A non-canonical tokenization of ``data``: random pieces that exist as tokens, single-byte
    tokens otherwise. None if some byte has no single-byte token."""
    table = tok_bytes_index(tok)
    ids, i = [], 0
    while i < len(data):
        options = []
        for j in range(i + 1, min(len(data), i + 12) + 1):
            t = table.get(data[i:j])
            if t is not None:
                options.append(t)
        if not options:
            return None
        t = rng.choice(options)
        ids.append(t)
        i += len(tok.token_bytes(t))
    return ids


_index_cache: dict[int, dict[bytes, int]] = {}


def tok_bytes_index(tok) -> dict[bytes, int]:
    key = id(tok)
    if key not in _index_cache:
        idx: dict[bytes, int] = {}
        for t, b in enumerate(tok.tokens):
            if b and t not in tok.special_ids:
                idx.setdefault(b, t)
        _index_cache[key] = idx
    return _index_cache[key]


def walk_with_fast_path_off(grammar, tok, monkeypatch, method: str, off, rng: random.Random, steps: int,
                            prefix: bytes = b"", longest: bool = True) -> int:
    """The engine's own oracle for a fast path: along a random walk, the masks with
    ``CFGEngine.<method>`` in place equal those with it replaced by ``off`` (the plain path);
    returns how many of the fast path's calls answered (not None). Picks among a few allowed
    tokens the longest (deep into strings) or, with ``longest=False``, the shortest (many steps)."""
    import logitgate as lg
    from logitgate.grammar import engine as engine_mod

    fast = lg.compile(grammar, tok, cache=False)
    with monkeypatch.context() as mp:
        mp.setattr(engine_mod.CFGEngine, method, off)
        slow = lg.compile(grammar, tok, cache=False)
    used = 0
    original = getattr(engine_mod.CFGEngine, method)

    def counting(self, *args):
        nonlocal used
        got = original(self, *args)
        used += got is not None
        return got

    a, b = lg.Matcher(fast), lg.Matcher(slow)
    assert a.accept_bytes(prefix) and b.accept_bytes(prefix)
    for _ in range(steps):
        with monkeypatch.context() as mp:
            mp.setattr(engine_mod.CFGEngine, method, counting)
            want = a.allowed_token_ids()
        with monkeypatch.context() as mp:
            mp.setattr(engine_mod.CFGEngine, method, off)
            ref = b.allowed_token_ids()
        assert np.array_equal(want, ref), (len(want), len(ref))
        choices = [int(t) for t in ref if int(t) not in tok.eos_token_ids]
        if not choices:
            break
        pick = max if longest else min
        t = pick(rng.sample(choices, min(4 if longest else 3, len(choices))), key=lambda x: len(tok.tokens[x]))
        assert a.accept_token(t) and b.accept_token(t)
    return used
