"""Lexemes for character-level grammars (GBNF): merge regular parts into lexemes where that cannot
change the language.

A GBNF grammar has no lexer: its language is the context-free language of its rules, character by
character. Parsing it one character at a time is exact but makes the parser run at every byte.
Most of a real grammar is regular, though (a JSON string, a number, whitespace), and a regular
rule can be one lexeme of a greedy lexer — *if* greediness never matters. It matters only when a
complete lexeme ``X`` could be extended by a byte ``c`` into a longer lexeme while ``c`` could also
start whatever follows ``X`` in the grammar. So a candidate set of lexemes is accepted only when,
for every lexeme ``X``, the bytes that can extend a complete ``X`` (read off the lexer DFA, over all
lexemes: conservative) are disjoint from the first bytes of every lexeme that can follow ``X``
(FOLLOW sets of the lowered grammar). Candidates that fail are demoted (the rule is parsed again,
its regular parts tried as lexemes in their own right; a literal is split into characters), and
the check is repeated until it holds; one-character lexemes always pass, so it terminates.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..regex.ast import Alt as RAlt
from ..regex.ast import Concat, Node, Repeat
from ..regex.ast import Empty as REmpty
from .cfg import CFG, literal_node, lower
from .ir import Alt, Empty, Expr, GrammarIR, Lit, Ref, Rep, Rx, Seq, TerminalDef
from .lexer import LexerTables, build_lexer

__all__ = ["merge_lexemes", "greedy_conflicts"]

MAX_ROUNDS = 64


def _refs(e: Expr) -> set[str]:
    if isinstance(e, Ref):
        return {e.name}
    if isinstance(e, (Seq, Alt)):
        out: set[str] = set()
        for item in e.items:
            out |= _refs(item)
        return out
    if isinstance(e, Rep):
        return _refs(e.item)
    return set()


def _regular_rules(ir: GrammarIR) -> set[str]:
    """Rules whose language is regular by construction: no recursion, only regular references."""
    deps = {name: _refs(r.body) for name, r in ir.rules.items()}
    regular: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, ds in deps.items():
            if name not in regular and all(d in regular or d in ir.terminals for d in ds):
                regular.add(name)
                changed = True
    return regular


def _to_regex(e: Expr, ir: GrammarIR) -> Node:
    if isinstance(e, Lit):
        return literal_node(e.text, e.ignore_case) if e.text else REmpty()
    if isinstance(e, Rx):
        return e.node
    if isinstance(e, Empty):
        return REmpty()
    if isinstance(e, Ref):
        if e.name in ir.terminals:
            return ir.terminals[e.name].node
        return _to_regex(ir.rules[e.name].body, ir)
    if isinstance(e, Seq):
        items = tuple(_to_regex(i, ir) for i in e.items)
        return items[0] if len(items) == 1 else Concat(items)
    if isinstance(e, Alt):
        items = tuple(_to_regex(i, ir) for i in e.items)
        return items[0] if len(items) == 1 else RAlt(items)
    if isinstance(e, Rep):
        return Repeat(_to_regex(e.item, ir), e.min, e.max)
    raise TypeError(e)


def _nullable(e: Expr, ir: GrammarIR, seen: frozenset[str] = frozenset()) -> bool:
    if isinstance(e, (Empty,)):
        return True
    if isinstance(e, Lit):
        return not e.text
    if isinstance(e, Rx):
        return False
    if isinstance(e, Ref):
        if e.name in ir.terminals or e.name in seen:
            return False
        return _nullable(ir.rules[e.name].body, ir, seen | {e.name})
    if isinstance(e, Seq):
        return all(_nullable(i, ir, seen) for i in e.items)
    if isinstance(e, Alt):
        return any(_nullable(i, ir, seen) for i in e.items)
    if isinstance(e, Rep):
        return e.min == 0 or _nullable(e.item, ir, seen)
    raise TypeError(e)


def _build(ir: GrammarIR, as_rules: set[str], split: set[str]) -> tuple[GrammarIR, dict[str, tuple[str, str]]]:
    """The IR with every regular rule referenced from a kept rule turned into a lexeme, and every
    literal in a kept rule a lexeme (unless listed in ``split``); and where each lexeme came from
    (terminal name -> ("rule", rule name) or ("lit", text))."""
    terminals: dict[str, TerminalDef] = dict(ir.terminals)
    origin: dict[str, tuple[str, str]] = {}
    regular = _regular_rules(ir)

    def lexeme_ref(name: str, node: Node, nullable: bool, source: tuple[str, str]) -> Expr:
        if name not in terminals:
            terminals[name] = TerminalDef(name, node)
            origin[name] = source
        ref: Expr = Ref(name)
        return Alt((ref, Empty())) if nullable else ref

    def rewrite(e: Expr) -> Expr:
        if isinstance(e, Ref):
            if e.name in regular and e.name not in as_rules:
                return lexeme_ref("<" + e.name + ">", _to_regex(ir.rules[e.name].body, ir),
                                  _nullable(ir.rules[e.name].body, ir), ("rule", e.name))
            return e
        if isinstance(e, Lit):
            if len(e.text) > 1 and e.text not in split:
                return lexeme_ref(repr(e.text), literal_node(e.text, e.ignore_case), False, ("lit", e.text))
            return e
        if isinstance(e, Seq):
            return Seq(tuple(rewrite(i) for i in e.items))
        if isinstance(e, Alt):
            return Alt(tuple(rewrite(i) for i in e.items))
        if isinstance(e, Rep):
            return Rep(rewrite(e.item), e.min, e.max)
        return e

    keep = {n for n in ir.rules if n not in regular or n in as_rules}
    if ir.start in regular and ir.start not in as_rules:
        # the whole language is regular: one lexeme
        rules = {"$root": replace(ir.rules[ir.start], name="$root", body=rewrite(Ref(ir.start)))}
        return replace(ir, rules=rules, terminals=terminals, start="$root"), origin
    rules = {n: replace(ir.rules[n], body=rewrite(ir.rules[n].body)) for n in keep}
    return replace(ir, rules=rules, terminals=terminals), origin


def _first_follow(cfg: CFG) -> list[set[int]]:
    """FOLLOW sets over terminals for every terminal of the grammar."""
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    nullable = [False] * n_nt
    first: list[set[int]] = [set() for _ in range(n_nt)]
    changed = True
    while changed:
        changed = False
        for lhs, rhs in cfg.rules:
            acc: set[int] = set()
            all_null = True
            for s in rhs:
                if s < t:
                    acc.add(s)
                    all_null = False
                    break
                acc |= first[s - t]
                if not nullable[s - t]:
                    all_null = False
                    break
            if not acc <= first[lhs]:
                first[lhs] |= acc
                changed = True
            if all_null and not nullable[lhs]:
                nullable[lhs] = True
                changed = True
    follow_nt: list[set[int]] = [set() for _ in range(n_nt)]
    follow_t: list[set[int]] = [set() for _ in range(t)]
    changed = True
    while changed:
        changed = False
        for lhs, rhs in cfg.rules:
            trailer = set(follow_nt[lhs])
            for s in reversed(rhs):
                if s < t:
                    if not trailer <= follow_t[s]:
                        follow_t[s] |= trailer
                        changed = True
                    trailer = {s}
                else:
                    a = s - t
                    if not trailer <= follow_nt[a]:
                        follow_nt[a] |= trailer
                        changed = True
                    trailer = (trailer | first[a]) if nullable[a] else set(first[a])
    return follow_t


def greedy_conflicts(cfg: CFG, lexer: LexerTables) -> set[int]:
    """Terminals involved where greedy lexing could differ from character-level parsing: a
    terminal ``X`` whose complete lexeme can be extended by a byte that can also start what follows
    ``X``, and every terminal that such an extension leads into (see the module docstring)."""
    t = cfg.n_terminals
    trans = lexer.trans
    n_words = lexer.acc_bits.shape[1]

    def unpack(bits: np.ndarray) -> np.ndarray:
        out = np.zeros((bits.shape[0], t), dtype=bool)
        for k in range(t):
            out[:, k] = (bits[:, k >> 6] >> np.uint64(k & 63)) & np.uint64(1)
        return out

    # states reachable from the start (the lexer keeps an unreachable copy of a split start state)
    seen = np.zeros(trans.shape[0], dtype=bool)
    todo = [lexer.start]
    seen[lexer.start] = True
    while todo:
        s = todo.pop()
        for nx in np.unique(trans[s][trans[s] >= 0]):
            if not seen[nx]:
                seen[nx] = True
                todo.append(int(nx))
    acc = unpack(lexer.acc_bits) & seen[:, None]
    reach = unpack(lexer.reach_bits)
    first = np.zeros((t, 256), dtype=bool)  # bytes a lexeme of terminal k can start with
    row = trans[lexer.start]
    for b in range(256):
        if row[b] >= 0:
            first[:, b] = reach[row[b]]
    follow = _first_follow(cfg)
    bad: set[int] = set()
    for k in range(t):
        states = np.flatnonzero(acc[:, k])
        if not states.size or not follow[k]:
            continue
        nxt = np.zeros(256, dtype=bool)
        for f in follow[k]:
            nxt |= first[f]
        for s in states:
            for c in np.flatnonzero((trans[s] >= 0) & nxt):
                bad.add(k)
                bad.update(int(y) for y in np.flatnonzero(reach[trans[s, c]]))
    return bad


def merge_lexemes(ir: GrammarIR) -> tuple[GrammarIR, CFG]:
    """For a ``chars`` grammar: the IR with as many regular parts merged into lexemes as is safe,
    and its lowered CFG."""
    as_rules: set[str] = set()
    split: set[str] = set()
    for _ in range(MAX_ROUNDS):
        cand, origin = _build(ir, as_rules, split)
        cfg = lower(cand, warn=False)
        lexer = build_lexer(cfg)
        bad = greedy_conflicts(cfg, lexer)
        demote_rules: set[str] = set()
        demote_lits: set[str] = set()
        for k in bad:
            kind, what = origin.get(cfg.terminals[k].name, ("", ""))
            if kind == "rule":
                demote_rules.add(what)
            elif kind == "lit":
                demote_lits.add(what)
        if not demote_rules and not demote_lits:
            return cand, lower(cand)
        as_rules |= demote_rules
        split |= demote_lits
    return ir, lower(ir)
