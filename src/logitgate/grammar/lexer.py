"""The lexer of a context-free grammar: one byte DFA for all its terminals, as bitset tables.

``acc_bits[s]`` are the terminals a lexeme ending in state ``s`` matches, ``reach_bits[s]`` the
terminals still reachable from ``s`` (the seed's "reachable tokens per DFA state", used for early
error detection: a byte is allowed only if what it can still become is something the parser
expects). ``rank`` breaks ties between matches of the same length: higher priority first, then
literals before regexes ("keywords are preferred"). Lexemes are never empty: when a terminal's
regex matches the empty string, only its non-empty matches count. The start state is a fresh
copy of the DFA's start that no byte leads back to and that accepts nothing, so being in it means
exactly "no byte of a lexeme read yet".
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..automata import build_dfa
from ..errors import GrammarError, GrammarLimitError, LimitError
from ..limits import check_deadline, get_limits
from .cfg import CFG

__all__ = ["LexerTables", "build_lexer", "MAX_LEXER_STATES"]

MAX_LEXER_STATES = 200_000
"""Default largest lexer DFA (all terminals together) a grammar may compile to (the cap in force:
``get_limits().max_lexer_states``)."""


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class LexerTables:
    trans: np.ndarray  # int32 [n_states, 256], -1 dead
    start: int
    acc_bits: np.ndarray  # uint64 [n_states, n_words]
    acc_ptr: np.ndarray  # int32 [n_states + 1]: acc_list[acc_ptr[s]:acc_ptr[s+1]] = terminals s matches
    acc_list: np.ndarray  # int32
    reach_bits: np.ndarray  # uint64 [n_states, n_words]
    lazy_bits: np.ndarray  # uint64 [n_words]
    ignore_bits: np.ndarray  # uint64 [n_words]
    rank: np.ndarray  # int64 [n_words * 64]
    mode: int  # 0 contextual, 1 global
    has_lazy: bool

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])


def bits_of(flags: np.ndarray, n_words: int) -> np.ndarray:
    """Pack a bool matrix ``[rows, n_terms]`` (or a vector) into uint64 words (bit ``k % 64`` of
    word ``k // 64`` = column ``k``); packs bytes directly, so memory stays at the output's size."""
    flags = np.atleast_2d(np.asarray(flags, dtype=bool))
    packed = np.packbits(flags, axis=1, bitorder="little")
    out = np.zeros((flags.shape[0], n_words * 8), dtype=np.uint8)
    out[:, : packed.shape[1]] = packed
    return out.view("<u8").astype(np.uint64)


def build_lexer(cfg: CFG, max_states: int = 0, limit: str = "max_lexer_states") -> LexerTables:
    """Build the lexer DFA and its tables for ``cfg``'s terminals (at most ``max_states`` states,
    default the cap ``limit`` of ``get_limits()``; beyond it a ``GrammarLimitError`` naming that cap
    says the grammar's terminals need too large a lexer)."""
    terms = cfg.terminals
    n_t = len(terms)
    n_words = max(1, (n_t + 63) // 64)
    if n_t == 0:  # the language is {""}: a lexer that reads nothing
        zeros = np.zeros((1, n_words), np.uint64)
        return LexerTables(trans=_ro(np.full((1, 256), -1, np.int32)), start=0, acc_bits=_ro(zeros),
                           acc_ptr=_ro(np.zeros(2, np.int32)), acc_list=_ro(np.zeros(0, np.int32)),
                           reach_bits=_ro(zeros.copy()), lazy_bits=_ro(np.zeros(n_words, np.uint64)),
                           ignore_bits=_ro(np.zeros(n_words, np.uint64)),
                           rank=_ro(np.zeros(n_words * 64, np.int64)),
                           mode=1 if cfg.lex_mode == "global" else 0, has_lazy=False)
    cap = max_states or getattr(get_limits(), limit)
    check_deadline("building the lexer")
    try:
        dfa = build_dfa([t.node for t in terms], max_states=cap, limit=limit)
    except LimitError as e:
        if e.limit != limit:  # the deadline
            raise
        raise GrammarLimitError(f"the grammar's terminals need too large a lexer (more than {cap} states)",
                                limit=limit, value=cap) from None
    if dfa.start < 0:
        raise GrammarError("no terminal of the grammar matches any string")
    trans = np.asarray(dfa.transitions, dtype=np.int32)
    acc = np.asarray(dfa.accepting, dtype=bool)
    reach = np.asarray(dfa.reachable, dtype=bool)
    start = int(dfa.start)
    never = [t.name for k, t in enumerate(terms) if not reach[start, k]]
    if never:
        raise GrammarError(f"terminals that match no string: {', '.join(never)}")
    only_empty = [t.name for k, t in enumerate(terms)
                  if acc[start, k] and not (reach[trans[start][trans[start] >= 0]][:, k].any())]
    if only_empty:
        raise GrammarError(f"terminals that match only the empty string: {', '.join(only_empty)}")
    # A fresh start state that nothing leads back to: "at the start state" must mean "no byte of
    # a lexeme read yet", but the minimal DFA's start can be re-entered (`/ *[a-z]+/` loops on
    # spaces) and can accept (a regex matching the empty string; lexemes are never empty).
    n = trans.shape[0]
    trans = np.vstack([trans, trans[start:start + 1]])
    acc = np.vstack([acc, np.zeros((1, n_t), dtype=bool)])
    new_reach = np.zeros((1, n_t), dtype=bool)
    live = trans[start][trans[start] >= 0]
    if live.size:
        new_reach[0] = reach[live].any(axis=0)
    reach = np.vstack([reach, new_reach])
    start = n
    rank = np.full(n_words * 64, -(2**40), dtype=np.int64)
    if cfg.lex_mode != "chars":  # chars mode: every match counts, no preferences
        for k, t in enumerate(terms):
            rank[k] = t.priority * 2 + (1 if t.literal is not None else 0)
    else:
        rank[:n_t] = 0
    rows, cols = np.nonzero(acc)
    acc_ptr = np.zeros(acc.shape[0] + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=acc.shape[0]), out=acc_ptr[1:])
    return LexerTables(
        trans=_ro(trans),
        start=start,
        acc_bits=_ro(bits_of(acc, n_words)),
        acc_ptr=_ro(acc_ptr),
        acc_list=_ro(cols.astype(np.int32)),
        reach_bits=_ro(bits_of(reach, n_words)),
        lazy_bits=_ro(bits_of(np.array([t.lazy for t in terms], dtype=bool), n_words)[0]),
        ignore_bits=_ro(bits_of(np.array([t.ignore for t in terms], dtype=bool), n_words)[0]),
        rank=_ro(rank),
        mode=1 if cfg.lex_mode == "global" else 0,
        has_lazy=any(t.lazy for t in terms),
    )
