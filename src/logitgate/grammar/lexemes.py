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
from ..limits import check_deadline
from .cfg import CFG, literal_node, lower, nullable_nonterminals, symbol_summaries
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


MAX_INLINE_DEPTH = 64
"""Longest chain of rule references inlined into one lexeme; a rule deeper than that stays a
grammar rule (same language, parsed instead of lexed), so a chain of thousands of rules is not
one regex nested thousands deep."""


def _regular_rules(ir: GrammarIR) -> dict[str, int]:
    """Rules whose language is regular by construction (no recursion, only regular references,
    at most ``MAX_INLINE_DEPTH`` rules deep), with their depth: 1 for a rule that references no
    rule, else one more than its deepest reference."""
    deps = {name: _refs(r.body) for name, r in ir.rules.items()}
    depth: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for name, ds in deps.items():
            if name not in depth and all(d in depth or (d in ir.terminals and ir.terminals[d].automaton is None)
                                         for d in ds):
                d = 1 + max((depth[r] for r in ds if r in depth), default=0)
                if d <= MAX_INLINE_DEPTH:
                    depth[name] = d
                    changed = True
    return depth


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


def _only_empty(e: Expr, ir: GrammarIR, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``e`` derives the empty string and nothing else (no lexeme can stand for it)."""
    if isinstance(e, Empty):
        return True
    if isinstance(e, Lit):
        return not e.text
    if isinstance(e, Rx):
        return False
    if isinstance(e, Ref):
        if e.name in ir.terminals:
            return False
        if e.name in seen:
            return True  # a cycle adds nothing new
        return _only_empty(ir.rules[e.name].body, ir, seen | {e.name})
    if isinstance(e, (Seq, Alt)):
        return all(_only_empty(i, ir, seen) for i in e.items)
    if isinstance(e, Rep):
        return e.max == 0 or _only_empty(e.item, ir, seen)
    raise TypeError(e)


def _trivial(e: Expr) -> bool:
    """A single-character terminal already: nothing to gain by making it a lexeme."""
    return isinstance(e, Rx) or (isinstance(e, Lit) and len(e.text) <= 1)


def _build(ir: GrammarIR, as_rules: set[str], demoted: set[tuple], runs: bool = True
           ) -> tuple[GrammarIR, dict[str, tuple]]:
    """The IR with candidate lexemes made terminals, and where each lexeme came from.

    Candidates, largest first: a regular rule referenced from a kept rule (key ``("rule", name)``),
    a maximal run of regular items in a sequence of a kept rule (``("run", rule, path, i, j)``),
    a regular sub-expression (``("expr", rule, path)``), a literal (``("lit", text)``). A demoted
    candidate is opened up: its parts become candidates in turn; a demoted rule is kept as a rule
    (``as_rules``); a demoted literal is split into characters. Without ``runs`` only rules and
    literals are candidates."""
    terminals: dict[str, TerminalDef] = dict(ir.terminals)
    origin: dict[str, tuple] = {}
    regular = _regular_rules(ir)

    def is_regular(e: Expr) -> bool:
        if isinstance(e, Ref):  # a custom recognizer's automaton is a terminal of its own, never merged
            return e.name in regular or (e.name in ir.terminals and ir.terminals[e.name].automaton is None)
        if isinstance(e, (Seq, Alt)):
            return all(is_regular(i) for i in e.items)
        if isinstance(e, Rep):
            return is_regular(e.item)
        return True

    def lexeme(key: tuple, name: str, e: Expr) -> Expr:
        if _only_empty(e, ir):
            return Empty()
        if name not in terminals:
            terminals[name] = TerminalDef(name, _to_regex(e, ir))
            origin[name] = key
        ref: Expr = Ref(name)
        return Alt((ref, Empty())) if _nullable(e, ir) else ref

    def rewrite(e: Expr, rule: str, path: tuple) -> Expr:
        if isinstance(e, Ref):
            if e.name in regular and e.name not in as_rules:
                return lexeme(("rule", e.name), "<" + e.name + ">", ir.rules[e.name].body)
            return e
        if isinstance(e, Lit):
            key = ("lit", e.text)
            if len(e.text) > 1 and key not in demoted:
                return lexeme(key, repr(e.text), e)
            return e
        if _trivial(e) or isinstance(e, Empty):
            return e
        key = ("expr", rule, path)
        if runs and is_regular(e) and key not in demoted:
            return lexeme(key, f"<{rule}@{'.'.join(map(str, path))}>", e)
        if isinstance(e, Seq):
            out: list[Expr] = []
            items = e.items
            k = 0
            while k < len(items):
                if runs and (is_regular(items[k]) and not _trivial(items[k]) or (
                        is_regular(items[k]) and k + 1 < len(items) and is_regular(items[k + 1]))):
                    m = k
                    while m < len(items) and is_regular(items[m]):
                        m += 1
                    run_key = ("run", rule, path, k, m)
                    if m - k > 1 and run_key not in demoted:
                        out.append(lexeme(run_key, f"<{rule}@{'.'.join(map(str, path))}[{k}:{m}]>", Seq(items[k:m])))
                    else:
                        out.extend(rewrite(items[q], rule, path + (q,)) for q in range(k, m))
                    k = m
                else:
                    out.append(rewrite(items[k], rule, path + (k,)))
                    k += 1
            return Seq(tuple(out))
        if isinstance(e, Alt):
            return Alt(tuple(rewrite(item, rule, path + (q,)) for q, item in enumerate(e.items)))
        if isinstance(e, Rep):
            return Rep(rewrite(e.item, rule, path + ("r",)), e.min, e.max)
        return e

    keep = [n for n in ir.rules if n not in regular or n in as_rules]
    if ir.start not in keep:
        # the whole language is regular: one lexeme (or, once demoted, the start rule is kept)
        body = lexeme(("rule", ir.start), "<" + ir.start + ">", ir.rules[ir.start].body)
        rules = {"$root": replace(ir.rules[ir.start], name="$root", body=body)}
        return replace(ir, rules=rules, terminals=terminals, start="$root"), origin
    rules = {n: replace(ir.rules[n], body=rewrite(ir.rules[n].body, n, ())) for n in keep}
    return replace(ir, rules=rules, terminals=terminals), origin


def _first_follow(cfg: CFG) -> tuple[list[set[int]], frozenset[int]]:
    """FOLLOW sets over terminals for every terminal of the grammar, and FIRST of the start."""
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    nullable = nullable_nonterminals(cfg.rules, t, n_nt)
    first = symbol_summaries(cfg, nullable)[1]
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
    return follow_t, first[0]


def greedy_conflicts(cfg: CFG, lexer: LexerTables) -> set[int]:
    """Terminals involved where greedy lexing could differ from character-level parsing: a
    terminal ``X`` whose complete lexeme can be extended by a byte into a lexeme of a terminal
    ``Y`` that can start where ``X`` starts, while that byte can also start what follows ``X``.
    Both ``X`` and every such ``Y`` are returned (see the module docstring). ``Y`` can start
    where ``X`` does when ``Y`` is ``X``, or both can follow one same terminal, or both can
    start the text (FOLLOW sets over-approximate what an Earley row can expect together)."""
    t = cfg.n_terminals
    trans = lexer.trans

    def unpack(bits: np.ndarray) -> np.ndarray:
        out = np.zeros((bits.shape[0], t), dtype=bool)
        for k in range(t):
            out[:, k] = (bits[:, k >> 6] >> np.uint64(k & 63)) & np.uint64(1)
        return out

    # states reachable from the start (the lexer keeps an unreachable copy of a split start state)
    seen = np.zeros(trans.shape[0], dtype=bool)
    seen[lexer.start] = True
    frontier = np.array([lexer.start])
    while frontier.size:
        nxt_states = trans[frontier].ravel()
        nxt_states = np.unique(nxt_states[nxt_states >= 0])
        frontier = nxt_states[~seen[nxt_states]]
        seen[frontier] = True
    acc = unpack(lexer.acc_bits) & seen[:, None]
    reach = unpack(lexer.reach_bits)
    first = np.zeros((t, 256), dtype=bool)  # bytes a lexeme of terminal k can start with
    row = trans[lexer.start]
    for b in range(256):
        if row[b] >= 0:
            first[:, b] = reach[row[b]]
    follow, start_first = _first_follow(cfg)
    co = np.eye(t, dtype=bool)
    groups = [sorted(f) for f in follow] + [sorted(start_first)]
    for grp in groups:
        idx = np.asarray(grp, dtype=np.int64)
        if idx.size:
            co[np.ix_(idx, idx)] = True
    # terminals that can match the same text at the same position are scanned together, so what
    # follows either can be expected together too: close co under that (fixpoint)
    accf = acc.astype(np.float32)  # a BLAS product: counts stay exact far beyond any state cap (2**24)
    overlap = (accf.T @ accf) > 0
    fol = [np.asarray(sorted(f), dtype=np.int64) for f in follow]
    changed = True
    while changed:
        check_deadline("greedy-lexing analysis")
        changed = False
        for z1, z2 in zip(*np.nonzero(co & overlap & ~np.eye(t, dtype=bool))):
            a, b = fol[z1], fol[z2]
            if a.size and b.size and not co[np.ix_(a, b)].all():
                co[np.ix_(a, b)] = True
                co[np.ix_(b, a)] = True
                changed = True
    bad: set[int] = set()
    for k in range(t):
        states = np.flatnonzero(acc[:, k])
        if not states.size or not follow[k]:
            continue
        nxt = first[np.fromiter(follow[k], dtype=np.int64)].any(axis=0)
        rows = trans[states]
        targets = rows[(rows >= 0) & nxt[None, :]]
        if targets.size:
            ys = np.flatnonzero(reach[targets].any(axis=0) & co[k])
            if ys.size:
                bad.add(k)
                bad.update(int(y) for y in ys)
    return bad


def swallowed_pairs(cfg: CFG, lexer: LexerTables) -> list[tuple[str, str]]:
    """Pairs ``(X, Y)`` with ``Y`` in FOLLOW(X) that greedy lexing can never produce: every
    complete lexeme of ``X`` is extended by every byte ``Y`` can start with (and by every byte an
    ignored terminal between them could start with), so an ``X`` never ends where a ``Y`` could
    begin (``start: /[a-z]+/ "b"``: the ``b`` always extends the word). Reported as warnings."""
    t = cfg.n_terminals
    if t == 0:
        return []
    trans = lexer.trans
    follow, _ = _first_follow(cfg)

    def unpack(bits: np.ndarray) -> np.ndarray:
        out = np.zeros((bits.shape[0], t), dtype=bool)
        for k in range(t):
            out[:, k] = (bits[:, k >> 6] >> np.uint64(k & 63)) & np.uint64(1)
        return out

    acc = unpack(lexer.acc_bits)
    reach = unpack(lexer.reach_bits)
    row = trans[lexer.start]
    first = np.zeros((t, 256), dtype=bool)
    for b in range(256):
        if row[b] >= 0:
            first[:, b] = reach[row[b]]
    ignore = [k for k, term in enumerate(cfg.terminals) if term.ignore]
    ign_first = first[ignore].any(axis=0) if ignore else np.zeros(256, dtype=bool)
    def shown(k: int) -> str:
        term = cfg.terminals[k]
        return repr(term.literal) if term.literal is not None else term.name

    out: list[tuple[str, str]] = []
    for x in range(t):
        states = np.flatnonzero(acc[:, x])
        if not states.size or cfg.terminals[x].ignore or cfg.terminals[x].lazy:
            continue
        nxt = trans[states]  # [states, 256]
        # byte c extends X's lexeme from every accepting state (staying able to become X)
        extends = np.ones(256, dtype=bool)
        for k, st in enumerate(states):
            live = nxt[k] >= 0
            ok = np.zeros(256, dtype=bool)
            ok[live] = reach[nxt[k][live], x]
            extends &= ok
        if (ign_first & ~extends).any():
            continue  # an ignored separator can end X
        for y in sorted(follow[x]):
            if not (first[y] & ~extends).any() and first[y].any():
                out.append((shown(x), shown(y)))
    return out


def _warn_unreachable(ir: GrammarIR) -> None:
    """Name the rules the start rule cannot reach (``GrammarWarning``; merging drops them)."""
    seen, todo = {ir.start}, [ir.start]
    while todo:
        rule = ir.rules.get(todo.pop())
        for name in _refs(rule.body) if rule is not None else ():
            if name in ir.rules and name not in seen:
                seen.add(name)
                todo.append(name)
    unused = [n for n in ir.rules if n not in seen]
    if unused:
        import warnings

        from ..errors import GrammarWarning

        msg = f"unused rules (not reachable from {ir.start!r}), dropped: {', '.join(unused)}"
        if msg not in ir.notes:  # compiled again (another tokenizer): noted once
            ir.notes.append(msg)
        warnings.warn(msg, GrammarWarning, stacklevel=4)


def merge_lexemes(ir: GrammarIR, *, greedy: bool = False) -> tuple[GrammarIR, CFG, LexerTables]:
    """For a ``chars`` grammar: the IR with as many regular parts merged into lexemes as is safe,
    its lowered CFG and that CFG's lexer. With ``greedy``, every candidate is merged without the
    check and lexed like Lark (longest match, literals before regexes): faster, as llguidance
    does, but the language may lose texts where a lexeme could have ended earlier."""
    _warn_unreachable(ir)
    if greedy:
        cand, _ = _build(ir, set(), set(), runs=False)
        cand = replace(cand, lex_mode="contextual")
        cfg = lower(cand)
        return cand, cfg, build_lexer(cfg)
    as_rules: set[str] = set()
    demoted: set[tuple] = set()
    depth = _regular_rules(ir)

    def size(key: tuple) -> int:
        if key[0] in ("run", "expr"):
            return MAX_INLINE_DEPTH + 1
        return depth.get(key[1], 0) if key[0] == "rule" else 0

    for _ in range(MAX_ROUNDS):
        check_deadline("merging lexemes")
        cand, origin = _build(ir, as_rules, demoted)
        cfg = lower(cand, warn=False)
        lexer = build_lexer(cfg)
        bad = greedy_conflicts(cfg, lexer)
        keys = {origin[cfg.terminals[k].name] for k in bad if cfg.terminals[k].name in origin}
        if not keys:
            return cand, lower(cand), lexer
        # the largest candidates first: a lexeme made of other candidates often conflicts with
        # them (``identifier ws "="`` or ``parameter ::= dataType identifier`` against
        # ``identifier``), and once it is opened up its parts may pass alone; demoting them all at
        # once would parse ``identifier`` a character at a time
        rank = max(map(size, keys))
        for key in [k for k in keys if size(k) == rank]:
            if key[0] == "rule":
                as_rules.add(key[1])
            demoted.add(key)
    cfg = lower(ir)
    return ir, cfg, build_lexer(cfg)
