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

from dataclasses import dataclass, field

import numpy as np

from ..automata import ByteDFA, build_dfa
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


_NO_COMPONENTS = (_ro(np.zeros(0, np.int64)), _ro(np.zeros(0, np.int32)))
_NO_PARTS = (_ro(np.full((0, 1), -1, np.int32)), _ro(np.zeros(256, np.int32)), _ro(np.zeros(0, np.bool_)))


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
    # per state, the states of the terminals' own DFAs it runs (see ByteDFA.components):
    # comp_part[comp_off[s]:comp_off[s + 1]] (ascending ids), of terminals comp_term[...]; empty
    # comp_off when unknown (a lexer of one terminal, or with embedded automata)
    comp_off: np.ndarray = field(default_factory=lambda: _NO_COMPONENTS[0])
    comp_term: np.ndarray = field(default_factory=lambda: _NO_COMPONENTS[1])
    comp_part: np.ndarray = field(default_factory=lambda: _NO_COMPONENTS[1])
    # the terminals' own DFAs those parts are states of (ByteDFA.parts): part x moves on byte b to
    # part_table[x, part_column[b]] (-1: none), accepting where part_acc; empty with comp_off
    part_table: np.ndarray = field(default_factory=lambda: _NO_PARTS[0])
    part_column: np.ndarray = field(default_factory=lambda: _NO_PARTS[1])
    part_acc: np.ndarray = field(default_factory=lambda: _NO_PARTS[2])
    # a lexer of one regex terminal: that terminal's minimal DFA (before the fresh start state), so
    # a grammar whose text is one lexeme can compile as the DFA (kept for no other lexer: it holds
    # a second copy of the table)
    dfa: ByteDFA | None = None

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


def _product(terms: list, dfa: object, cap: int, limit: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One DFA running the regex terminals' DFA (``dfa``, or None) beside each terminal given as an
    explored automaton (``Terminal.automaton``: trimmed, so each of its states can still accept),
    over the reachable tuples of their states. Returns ``(trans, accepting, reachable, start)`` with
    columns in ``terms`` order."""
    n_t = len(terms)
    rx_cols = [k for k, t in enumerate(terms) if t.automaton is None]
    au_cols = [k for k, t in enumerate(terms) if t.automaton is not None]
    comps: list[np.ndarray] = []  # transition tables, [n, 256]
    if dfa is not None and dfa.start >= 0:  # type: ignore[attr-defined]
        comps.append(np.asarray(dfa.transitions, dtype=np.int32))  # type: ignore[attr-defined]
        rx_start = int(dfa.start)  # type: ignore[attr-defined]
    else:
        rx_start = -1
    for k in au_cols:
        comps.append(np.asarray(terms[k].automaton[0], dtype=np.int32))
    # bytes no component tells apart share a class: one step per class
    sig = np.stack([np.unique(c.T, axis=0, return_inverse=True)[1].reshape(-1) for c in comps if c.shape[0]], axis=1) \
        if any(c.shape[0] for c in comps) else np.zeros((256, 1), np.int64)
    _, reps, byte_class = np.unique(sig, axis=0, return_index=True, return_inverse=True)
    byte_class = byte_class.reshape(-1)
    starts = ([rx_start] if rx_start >= 0 else []) + [0 if terms[k].automaton[0].shape[0] else -1 for k in au_cols]
    first = tuple(starts)
    ids = {first: 0}
    order = [first]
    rows: list[list[int]] = []
    for tup in order:
        row = []
        for b in reps.tolist():
            nxt = tuple(int(c[s, b]) if s >= 0 else -1 for c, s in zip(comps, tup))
            if all(s < 0 for s in nxt):
                row.append(-1)
                continue
            k = ids.get(nxt)
            if k is None:
                if len(order) >= cap:
                    raise LimitError.exceeded(limit, cap, "lexer states")
                k = ids[nxt] = len(order)
                order.append(nxt)
            row.append(k)
        rows.append(row)
    states = np.asarray(order, dtype=np.int64).reshape(len(order), len(comps))
    class_trans = np.asarray(rows, dtype=np.int32).reshape(len(order), len(reps))
    trans = np.ascontiguousarray(class_trans[:, byte_class])
    acc = np.zeros((len(order), n_t), dtype=bool)
    reach = np.zeros((len(order), n_t), dtype=bool)
    if rx_start >= 0:
        rs = states[:, 0]
        ok = rs >= 0
        acc[np.ix_(ok, rx_cols)] = np.asarray(dfa.accepting, dtype=bool)[rs[ok]]  # type: ignore[attr-defined]
        reach[np.ix_(ok, rx_cols)] = np.asarray(dfa.reachable, dtype=bool)[rs[ok]]  # type: ignore[attr-defined]
    for j, k in enumerate(au_cols):
        ss = states[:, j + (1 if rx_start >= 0 else 0)]
        ok = ss >= 0
        acc[ok, k] = np.asarray(terms[k].automaton[1], dtype=bool)[ss[ok]]
        reach[ok, k] = True  # trimmed: every state of the automaton can still accept
    return trans, acc, reach, 0


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
        regex_terms = [t.node for t in terms if t.automaton is None]
        dfa = build_dfa(regex_terms, max_states=cap, limit=limit) if regex_terms else None
        if dfa is not None and dfa.start < 0 and len(regex_terms) == n_t:
            raise GrammarError("no terminal of the grammar matches any string")
        components = parts = None
        if len(regex_terms) == n_t:
            trans = np.asarray(dfa.transitions, dtype=np.int32)
            acc = np.asarray(dfa.accepting, dtype=bool)
            reach = np.asarray(dfa.reachable, dtype=bool)
            start = int(dfa.start)
            components, parts = dfa.components, dfa.parts
        else:  # custom recognizers embedded as terminals: the product with their explored automata
            trans, acc, reach, start = _product(terms, dfa, cap, limit)
    except LimitError as e:
        if e.limit != limit:  # the deadline
            raise
        raise GrammarLimitError(f"the grammar's terminals need too large a lexer (more than {cap} states)",
                                limit=limit, value=cap) from None
    if not reach[start].all():
        never = [terms[k].name for k in np.flatnonzero(~reach[start]).tolist()]
        raise GrammarError(f"terminals that match no string: {', '.join(never)}")
    live = trans[start][trans[start] >= 0]  # the states one byte in
    later = reach[live].any(axis=0) if live.size else np.zeros(n_t, dtype=bool)
    if (acc[start] & ~later).any():
        only_empty = [terms[k].name for k in np.flatnonzero(acc[start] & ~later).tolist()]
        raise GrammarError(f"terminals that match only the empty string: {', '.join(only_empty)}")
    # A fresh start state that nothing leads back to: "at the start state" must mean "no byte of
    # a lexeme read yet", but the minimal DFA's start can be re-entered (`/ *[a-z]+/` loops on
    # spaces) and can accept (a regex matching the empty string; lexemes are never empty).
    n = trans.shape[0]
    trans = np.vstack([trans, trans[start:start + 1]])
    acc = np.vstack([acc, np.zeros((1, n_t), dtype=bool)])
    reach = np.vstack([reach, later[None, :]])  # the fresh start reaches what one byte in does
    comp = {}
    if components is not None:  # the fresh start runs what the old one does
        off, term, part = components
        lo, hi = int(off[start]), int(off[start + 1])
        comp = dict(comp_off=_ro(np.append(off, off[-1] + (hi - lo))),
                    comp_term=_ro(np.concatenate([term, term[lo:hi]])),
                    comp_part=_ro(np.concatenate([part, part[lo:hi]])))
        if parts is not None:
            comp.update(part_table=parts[0], part_column=parts[1], part_acc=parts[2])
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
        dfa=dfa if n_t == 1 and len(regex_terms) == 1 else None,
        **comp,
    )
