"""Check a :class:`~logitgate.grammar.ir.GrammarIR` and lower it to a plain BNF grammar (:class:`CFG`).

Checks, each naming the rule (and its line when the front end knows it):

* a reference to a name that is neither a rule nor a terminal -> ``GrammarError``;
* rules that derive no finite string (unproductive) -> ``GrammarWarning``, and their productions
  are dropped so that every item the parser can reach can still be completed (this is what makes
  the parser's early error detection exact); when the start rule itself is unproductive the
  language is empty -> ``GrammarError``;
* rules not reachable from the start rule -> ``GrammarWarning`` (they are dropped).

Lowering: EBNF operators become fresh nonterminals (``x*`` is left-recursive, ``x{m,n}`` a chain of
optional copies), inline literals and regexes become terminals shared by content. In ``chars`` mode
(GBNF) every literal is split into one-character terminals, so no lexing decision can change the
language; :mod:`logitgate.grammar.lexemes` then merges what it safely can into longer lexemes.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError, GrammarLimitError, GrammarWarning
from ..limits import check_deadline, get_limits
from ..regex.ast import CharClass, Concat, Node
from .ir import Alt, Empty, Expr, GrammarIR, Lit, Ref, Rep, Rx, Seq, TerminalDef

__all__ = ["Terminal", "CFG", "lower", "MAX_RULES", "literal_node", "nullable_nonterminals", "last_terminals",
           "symbol_summaries"]

MAX_RULES = 200_000
"""Default largest number of BNF productions a grammar may lower to (repetition counts multiply);
the cap in force is ``get_limits().max_grammar_rules``."""


@dataclass(frozen=True)
class Terminal:
    """A lexeme kind of the lowered grammar."""

    name: str
    node: Node | None
    literal: str | None = None
    priority: int = 0
    lazy: bool = False
    ignore: bool = False
    automaton: Any = None
    """A custom recognizer's explored byte automaton ``(trans, accepting)``, instead of ``node``."""


@dataclass
class CFG:
    """A checked BNF grammar. Symbols: terminal ``i`` is ``i``; nonterminal ``j`` is
    ``n_terminals + j``. ``rules[k] = (lhs nonterminal index, rhs symbols)``; nonterminal 0 is the
    augmented start ``S' -> start`` and rule 0 is its only production."""

    terminals: list[Terminal]
    nonterminals: list[str]
    rules: list[tuple[int, tuple[int, ...]]]
    lex_mode: str
    kind: str = ""
    warnings: list[str] = field(default_factory=list)
    prefix: str = ""

    @property
    def n_terminals(self) -> int:
        return len(self.terminals)

    def symbol_name(self, sym: int) -> str:
        t = self.n_terminals
        return self.terminals[sym].name if sym < t else self.nonterminals[sym - t]


def literal_node(text: str, ignore_case: bool = False) -> Node:
    """The regex tree of a literal string (one character class per code point)."""
    items: list[Node] = []
    for ch in text:
        cp = ord(ch)
        if ignore_case and ch.lower() != ch.upper():
            cps = sorted({cp, ord(ch.lower()[0]), ord(ch.upper()[0])})
            items.append(CharClass(tuple((c, c) for c in cps)))
        else:
            items.append(CharClass(((cp, cp),)))
    return items[0] if len(items) == 1 else Concat(tuple(items))


class _Lowering:
    def __init__(self, ir: GrammarIR) -> None:
        self.ir = ir
        self.terminals: list[Terminal] = []
        self.term_index: dict[object, int] = {}
        self.nonterminals: list[str] = ["$start"]
        self.nt_index: dict[str, int] = {}
        self.rules: list[tuple[str, list[tuple[str, object]]]] = []  # filled later as symbols
        self.prods: dict[int, list[list[tuple[str, int]]]] = {}  # nt -> alternatives of ("t"|"n", idx)
        self.fresh = 0
        self.n_prods = 0
        self.n_syms = 0
        lim = get_limits()
        self.max_rules = lim.max_grammar_rules  # MAX_RULES unless configured
        self.max_syms = lim.max_grammar_symbols

    # -- errors -----------------------------------------------------------------------------
    def error(self, reason: str, rule: str | None = None, line: int | None = None, column: int | None = None) -> GrammarError:
        src_line = None
        if line is not None and self.ir.source:
            lines = self.ir.source.splitlines()
            if 0 < line <= len(lines):
                src_line = lines[line - 1]
        return GrammarError(reason, line=line, column=column, source_line=src_line, rule=rule)

    # -- terminals ----------------------------------------------------------------------------
    def terminal(self, key: object, make: "callable[[], Terminal]") -> int:  # type: ignore[valid-type]
        idx = self.term_index.get(key)
        if idx is None:
            idx = len(self.terminals)
            self.terminals.append(make())
            self.term_index[key] = idx
        return idx

    def named_terminal(self, name: str) -> int:
        idx = self.term_index.get(("named", name))
        if idx is not None:
            return idx
        td: TerminalDef = self.ir.terminals[name]
        return self.terminal(("named", name), lambda: Terminal(
            td.name, td.node, td.literal, td.priority, td.lazy, name in self.ir.ignore, td.automaton))

    def lit_terminal(self, text: str, ignore_case: bool) -> int:
        shown = repr(text) if not ignore_case else repr(text) + "i"
        return self.terminal(("lit", text, ignore_case), lambda: Terminal(
            shown, literal_node(text, ignore_case), None if ignore_case else text))

    def rx_terminal(self, rx: Rx) -> int:
        return self.terminal(("rx", rx.node), lambda: Terminal(rx.source, rx.node))

    # -- nonterminals -------------------------------------------------------------------------
    def nt(self, name: str) -> int:
        idx = self.nt_index.get(name)
        if idx is None:
            idx = len(self.nonterminals)
            self.nonterminals.append(name)
            self.nt_index[name] = idx
        return idx

    def new_nt(self, base: str) -> int:
        self.fresh += 1
        return self.nt(f"{base}#{self.fresh}")

    def grow(self, n_symbols: int) -> None:
        """Count ``n_symbols`` more right-hand-side symbols (before building them)."""
        self.n_syms += n_symbols
        if self.n_syms > self.max_syms:
            raise GrammarLimitError(f"the grammar expands to more than {self.max_syms} symbols in its productions "
                                    f"(repetition counts too large?)", limit="max_grammar_symbols", value=self.max_syms)

    def add(self, nt: int, alt: list[tuple[str, int]]) -> None:
        self.grow(len(alt) + 1)
        self.prods.setdefault(nt, []).append(alt)
        self.n_prods += 1
        if self.n_prods > self.max_rules:
            raise GrammarLimitError(f"the grammar expands to more than {self.max_rules} productions "
                                    f"(repetition counts too large?)", limit="max_grammar_rules", value=self.max_rules)
        if not self.n_prods & 1023:
            check_deadline("lowering the grammar")

    # -- expressions ----------------------------------------------------------------------------
    def alternatives(self, e: Expr, owner: str) -> list[list[tuple[str, int]]]:
        if type(e) is Alt:
            out: list[list[tuple[str, int]]] = []
            for item in e.items:
                out.extend(self.alternatives(item, owner))
            return out
        return [self.sequence(e, owner)]

    def sequence(self, e: Expr, owner: str) -> list[tuple[str, int]]:
        kind = type(e)  # the expression classes are final: exact type tests, most frequent first
        if kind is Ref:
            return [self.ref(e, owner)]
        if kind is Seq:
            out: list[tuple[str, int]] = []
            for item in e.items:
                if type(item) is Ref:
                    out.append(self.ref(item, owner))
                else:
                    out.extend(self.sequence(item, owner))
            return out
        if kind is Empty:
            return []
        if kind is Lit:
            if not e.text:
                return []
            if self.ir.lex_mode == "chars":
                return [("t", self.lit_terminal(ch, e.ignore_case)) for ch in e.text]
            return [("t", self.lit_terminal(e.text, e.ignore_case))]
        if kind is Rx:
            return [("t", self.rx_terminal(e))]
        if kind is Alt:
            n = self.new_nt(owner)
            for alt in self.alternatives(e, owner):
                self.add(n, alt)
            return [("n", n)]
        if kind is Rep:
            return self.repeat(e, owner)
        raise TypeError(f"not a grammar expression: {e!r}")

    def ref(self, e: Ref, owner: str) -> tuple[str, int]:
        name = e.name
        if name in self.ir.rules:
            return ("n", self.nt(name))
        if name in self.ir.terminals:
            return ("t", self.named_terminal(name))
        raise self.error(f"undefined rule or terminal {name!r} (used in rule {owner!r})", rule=owner,
                         line=e.line, column=e.column)

    def repeat(self, e: Rep, owner: str) -> list[tuple[str, int]]:
        if e.min < 0 or (e.max is not None and e.max < e.min):
            raise self.error(f"bad repetition bounds {{{e.min},{e.max}}} in rule {owner!r}", rule=owner)
        if e.max == 0:
            return []
        body = self.alternatives(e.item, owner)
        if len(body) == 1:
            unit = body[0]
        else:
            n = self.new_nt(owner)
            for alt in body:
                self.add(n, alt)
            unit = [("n", n)]
        out: list[tuple[str, int]] = []
        self.grow(e.min * len(unit))  # nested counts multiply: refuse before building
        for _ in range(e.min):
            out.extend(unit)
        if e.max is None:
            star = self.new_nt(owner)  # star -> ε | star unit
            self.add(star, [])
            self.add(star, [("n", star), *unit])
            out.append(("n", star))
        elif e.max > e.min:
            # opt_k -> ε | unit opt_{k-1}: at most (max - min) more copies, one nonterminal each
            tail: list[tuple[str, int]] = []
            for _ in range(e.max - e.min):
                opt = self.new_nt(owner)
                self.add(opt, [])
                self.add(opt, [*unit, *tail])
                tail = [("n", opt)]
            out.extend(tail)
        return out


def lower(ir: GrammarIR, *, warn: bool = True) -> CFG:
    """Check ``ir`` and lower it to BNF (see the module docstring for what is reported; with
    ``warn`` the findings are also issued as ``GrammarWarning``)."""
    both = set(ir.rules) & set(ir.terminals)
    if both:
        raise GrammarError(f"names used both as a rule and as a terminal: {', '.join(sorted(both))}")
    if ir.start not in ir.rules:
        raise GrammarError(f"the start rule {ir.start!r} is not defined", rule=ir.start)
    for name in ir.ignore:
        if name not in ir.terminals:
            raise GrammarError(f"ignored terminal {name!r} is not defined", rule=name)
    low = _Lowering(ir)
    # rules reachable from the start, breadth first (unreachable ones are reported, not lowered)
    start_nt = low.nt(ir.start)
    low.add(0, [("n", start_nt)])
    i = 1  # nonterminals in order of discovery (new ones are appended): each rule once
    while i < len(low.nonterminals):
        name = low.nonterminals[i]
        rule = ir.rules.get(name)
        if rule is not None:
            for alt in low.alternatives(rule.body, name):
                low.add(i, alt)
        i += 1
    for name in ir.ignore:
        low.named_terminal(name)
    msgs: list[str] = []
    unused = [r for r in ir.rules if r not in low.nt_index]
    if unused:
        msgs.append(f"unused rules (not reachable from {ir.start!r}): {', '.join(unused)}")
    t = len(low.terminals)
    n_nt = len(low.nonterminals)
    # productive nonterminals: an alternative is once all its nonterminals are
    productive = _least_fixpoint(n_nt, [(nt, [i for kind, i in alt if kind != "t"])
                                        for nt, alts in low.prods.items() for alt in alts])
    if not productive[start_nt]:
        raise low.error(f"the grammar's language is empty: the start rule {ir.start!r} derives no finite string",
                        rule=ir.start, line=ir.rules[ir.start].line)
    bad = [low.nonterminals[i] for i in range(1, n_nt) if not productive[i]]
    if bad:
        named = sorted({b.split("#")[0] for b in bad})
        msgs.append(f"rules that derive no finite string (their alternatives are dropped): {', '.join(named)}")
    rules: list[tuple[int, tuple[int, ...]]] = []
    for nt in range(n_nt):
        for alt in low.prods.get(nt, []):
            if all(kind == "t" or productive[i] for kind, i in alt):
                rules.append((nt, tuple(i if kind == "t" else t + i for kind, i in alt)))
    for msg in msgs if warn else ():
        warnings.warn(msg, GrammarWarning, stacklevel=3)
    return CFG(low.terminals, low.nonterminals, rules, ir.lex_mode, ir.kind, msgs, ir.prefix)


def nullable_nonterminals(rules: list, t: int, n_nt: int) -> list[bool]:
    """Per nonterminal, whether it derives the empty string (``rules``: ``(lhs, rhs)`` over
    symbols, terminals below ``t``): a rule with no terminal is once all its symbols are."""
    return _least_fixpoint(n_nt, [(lhs, [s - t for s in rhs]) for lhs, rhs in rules if all(s >= t for s in rhs)])


def last_terminals(rules: list, t: int, n_nt: int, nullable: list[bool]) -> list[int]:
    """Per nonterminal, the terminals its derivations can end with, as int bitsets (``rules`` and
    ``t`` as for ``nullable_nonterminals``): a worklist over the rules that end with each
    nonterminal, nullable symbols after it skipped."""
    sets = [0] * n_nt
    users: list[list[int]] = [[] for _ in range(n_nt)]
    for r, (_, rhs) in enumerate(rules):
        for s in reversed(rhs):
            if s < t:
                break
            users[s - t].append(r)
            if not nullable[s - t]:
                break
    queue = list(range(len(rules)))
    while queue:
        lhs, rhs = rules[queue.pop()]
        acc = 0
        for s in reversed(rhs):
            if s < t:
                acc |= 1 << s
                break
            acc |= sets[s - t]
            if not nullable[s - t]:
                break
        if acc & ~sets[lhs]:
            sets[lhs] |= acc
            queue.extend(users[lhs])
    return sets


def _least_fixpoint(n_nt: int, rules: list[tuple[int, list[int]]]) -> list[bool]:
    """Per nonterminal, whether some rule ``(lhs, nonterminals)`` of it has all its listed
    nonterminals marked, least fixpoint (a worklist over each rule's count of those not yet
    marked): productive nonterminals, nullable ones."""
    marked = [False] * n_nt
    remaining: list[int] = []
    users: list[list[int]] = [[] for _ in range(n_nt)]
    queue: list[int] = []
    for r, (lhs, nts) in enumerate(rules):
        remaining.append(len(nts))
        for i in nts:
            users[i].append(r)
        if not nts:
            queue.append(lhs)
    while queue:
        nt = queue.pop()
        if marked[nt]:
            continue
        marked[nt] = True
        for r in users[nt]:
            remaining[r] -= 1
            if remaining[r] == 0:
                queue.append(rules[r][0])
    return marked


def _components(succ: list[set[int]]) -> list[int]:
    """Tarjan's strongly connected components of the graph ``succ``, iteratively: per node, its
    component, numbered so that a component's successors have smaller numbers."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    comp = [-1] * n
    on_stack = [False] * n
    order: list[int] = []
    counter = n_comp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        order.append(root)
        on_stack[root] = True
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    order.append(w)
                    on_stack[w] = True
                    work.append((w, iter(succ[w])))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = order.pop()
                    on_stack[w] = False
                    comp[w] = n_comp
                    if w == v:
                        break
                n_comp += 1
    return comp


def symbol_summaries(cfg: CFG, nullable: list[bool]) -> tuple[list[frozenset[int]], list[frozenset[int]], list[bool]]:
    """Per nonterminal: the terminals its derivations use, those they can start with (FIRST),
    and whether it nests (lies on a cycle of the "occurs in a rule of" graph through an
    occurrence after the rule's first symbol, so that a parser stacks its rows without end; left
    recursion, a repetition, does not). Over the strongly connected components, successors
    first: one pass each."""
    t = cfg.n_terminals
    n_nt = len(cfg.nonterminals)
    succ: list[set[int]] = [set() for _ in range(n_nt)]
    succ_first: list[set[int]] = [set() for _ in range(n_nt)]
    own: list[set[int]] = [set() for _ in range(n_nt)]
    own_first: list[set[int]] = [set() for _ in range(n_nt)]
    inner: list[tuple[int, int]] = []
    for lhs, rhs in cfg.rules:
        leading = True
        for i, s in enumerate(rhs):
            if s < t:
                own[lhs].add(s)
                if leading:
                    own_first[lhs].add(s)
                    leading = False
                continue
            succ[lhs].add(s - t)
            if i:
                inner.append((lhs, s - t))
            if leading:
                succ_first[lhs].add(s - t)
                leading = nullable[s - t]

    def fold(graph: list[set[int]], base: list[set[int]]) -> tuple[list[frozenset[int]], list[int]]:
        comp = _components(graph)
        members: list[list[int]] = [[] for _ in range(max(comp, default=-1) + 1)]
        for v, c in enumerate(comp):
            members[c].append(v)
        value: list[frozenset[int]] = [frozenset()] * len(members)
        for c, vs in enumerate(members):  # successors' components come first
            acc: set[int] = set()
            for v in vs:
                acc |= base[v]
                for w in graph[v]:
                    if comp[w] != c:
                        acc |= value[comp[w]]
            value[c] = frozenset(acc)
        return [value[comp[v]] for v in range(n_nt)], comp

    terms, comp = fold(succ, own)
    first, _ = fold(succ_first, own_first)
    nests = {comp[a] for a, b in inner if comp[a] == comp[b]}
    return terms, first, [comp[v] in nests for v in range(n_nt)]
