"""Independent oracles for the grammar engine tests (``tests/test_grammar_engine.py``).

Nothing here imports ``logitgate``'s grammar code: regexes are read with Python's own ``re``
parser, GBNF with a small parser of its own, Lark grammars with Lark (rules and terminals as Lark
compiles them), and recognition is a plain Earley recognizer written out below.

* :class:`CharRegex` — a Python regex (``re._parser``) as a Thompson NFA over code points:
  ``fullmatch``, ``is_prefix`` (some completion exists) and ``sample`` (a random match).
* :class:`Earley` — an Earley recognizer (Aycock–Horspool nullable handling) over arbitrary
  terminal keys; a chart is an immutable tuple of rows, so a search can branch from any prefix.
* :class:`GbnfOracle` — the exact character-level language of a GBNF grammar (own parser).
* :class:`LarkInfo` — a Lark grammar as Lark compiles it (EBNF expanded rules, terminals with
  priorities, ``%ignore``) plus a random sentence generator and Lark's Earley parser
  (``lexer="dynamic"``) as a language oracle.
* :class:`GreedyReference` — the lexing semantics logitgate documents, implemented literally at
  the character level: contextual (only terminals the parser expects, plus ignored ones,
  compete) or global (all compete), a character that extends the current lexeme towards some
  competing terminal is always taken, a lexeme ends as the best-ranked terminal it fully matches
  (priority, then literals before regexes), lazy terminals end as soon as they match.
* :class:`YaccInfo` / :class:`YaccReference` — AICI's yacc-like format read by its own reader,
  with global lexing (every terminal competes) and the "\\n" start context.
* brute-force token masks: the ids ``t`` with ``m.fork().accept_token(t)``; a BFS completion
  search; mutations; random small Lark / yacc / GBNF grammars for differential fuzzing.
"""
from __future__ import annotations

import random
import re
import re._constants as C
import re._parser as sre_parse
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable

import numpy as np

MAXREPEAT = C.MAXREPEAT

# --------------------------------------------------------------------------------------------
# Regexes over code points
# --------------------------------------------------------------------------------------------

# characters a negated class or '.' may be sampled from
SAMPLE_POOL = [chr(c) for c in range(32, 127)] + ["\t", "\n", "é", "ß", "中", "😀"]


def _cat(cat, ch: str, ascii_only: bool) -> bool:
    if ascii_only and ord(ch) > 127:
        is_d, is_w, is_s = False, False, False
    else:
        is_d = ch.isdecimal()
        is_w = ch.isalnum() or ch == "_"
        is_s = ch.isspace()
    if ascii_only:
        is_s = ch in " \t\n\r\f\v"
    return {
        C.CATEGORY_DIGIT: is_d, C.CATEGORY_NOT_DIGIT: not is_d,
        C.CATEGORY_WORD: is_w, C.CATEGORY_NOT_WORD: not is_w,
        C.CATEGORY_SPACE: is_s, C.CATEGORY_NOT_SPACE: not is_s,
    }[cat]


@dataclass(frozen=True)
class CharSet:
    """A set of code points: ``items`` of ("lit", cp) / ("range", lo, hi) / ("cat", category)."""

    items: tuple
    negate: bool = False
    ignore_case: bool = False
    ascii_only: bool = False

    def _raw(self, ch: str) -> bool:
        cp = ord(ch)
        for it in self.items:
            if it[0] == "lit" and cp == it[1]:
                return True
            if it[0] == "range" and it[1] <= cp <= it[2]:
                return True
            if it[0] == "cat" and _cat(it[1], ch, self.ascii_only):
                return True
            if it[0] == "any":
                return True
            if it[0] == "anynl" and ch != "\n":
                return True
        return False

    def __contains__(self, ch: str) -> bool:
        hit = self._raw(ch)
        if not hit and self.ignore_case:
            for v in {ch.lower(), ch.upper(), ch.swapcase()}:
                if len(v) == 1 and v != ch and self._raw(v):
                    hit = True
                    break
        return hit != self.negate

    def sample(self, rng: random.Random) -> str:
        if not self.negate:
            it = rng.choice(self.items)
            if it[0] == "lit":
                return chr(it[1])
            if it[0] == "range":
                for _ in range(50):
                    cp = rng.randint(it[1], min(it[2], it[1] + 300)) if rng.random() < 0.8 else rng.randint(it[1], it[2])
                    if not 0xD800 <= cp <= 0xDFFF:
                        return chr(cp)
        pool = [c for c in SAMPLE_POOL if c in self]
        if not pool:
            raise ValueError(f"cannot sample {self}")
        return rng.choice(pool)


class CharRegex:
    """A Python regex as an NFA over code points (``re._parser``; no anchors or lookarounds)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        parsed = sre_parse.parse(pattern, flags)
        self.tree = parsed
        self.base_flags = parsed.state.flags
        self.edges: list[list[tuple[CharSet, int]]] = []
        self.eps: list[list[int]] = []
        s, e = self._build(list(parsed), self.base_flags)
        self.start_state, self.final = s, e
        self._closure_cache: dict[int, frozenset[int]] = {}
        self._step_cache: dict[tuple[frozenset[int], str], frozenset[int]] = {}
        self.start = self._closure([s])

    # -- construction ------------------------------------------------------------------------
    def _new(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def _charset(self, op, av, flags) -> CharSet:
        ic = bool(flags & re.IGNORECASE)
        asc = bool(flags & re.ASCII)
        if op == C.LITERAL:
            return CharSet((("lit", av),), False, ic, asc)
        if op == C.NOT_LITERAL:
            return CharSet((("lit", av),), True, ic, asc)
        if op == C.ANY:
            return CharSet((("any",) if flags & re.DOTALL else ("anynl",),), False, False, asc)
        if op == C.IN:
            items, neg = [], False
            for iop, iav in av:
                if iop == C.NEGATE:
                    neg = True
                elif iop == C.LITERAL:
                    items.append(("lit", iav))
                elif iop == C.RANGE:
                    items.append(("range", iav[0], iav[1]))
                elif iop == C.CATEGORY:
                    items.append(("cat", iav))
                else:
                    raise NotImplementedError(f"class item {iop}")
            return CharSet(tuple(items), neg, ic, asc)
        if op == C.CATEGORY:
            return CharSet((("cat", av),), False, False, asc)
        raise NotImplementedError(op)

    def _build(self, seq: list, flags: int) -> tuple[int, int]:
        s = self._new()
        cur = s
        for op, av in seq:
            a, b = self._build_one(op, av, flags)
            self.eps[cur].append(a)
            cur = b
        return s, cur

    def _build_one(self, op, av, flags) -> tuple[int, int]:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN, C.CATEGORY):
            a, b = self._new(), self._new()
            self.edges[a].append((self._charset(op, av, flags), b))
            return a, b
        if op == C.SUBPATTERN:
            _group, add, dele, sub = av
            return self._build(list(sub), (flags | add) & ~dele)
        if op == C.BRANCH:
            a, b = self._new(), self._new()
            for alt in av[1]:
                x, y = self._build(list(alt), flags)
                self.eps[a].append(x)
                self.eps[y].append(b)
            return a, b
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            a = self._new()
            cur = a
            for _ in range(lo):
                x, y = self._build(list(sub), flags)
                self.eps[cur].append(x)
                cur = y
            end = self._new()
            if hi == MAXREPEAT:
                x, y = self._build(list(sub), flags)
                self.eps[cur].append(x)
                self.eps[y].append(cur)
                self.eps[cur].append(end)
            else:
                for _ in range(hi - lo):
                    x, y = self._build(list(sub), flags)
                    self.eps[cur].append(end)
                    self.eps[cur].append(x)
                    cur = y
                self.eps[cur].append(end)
            return a, end
        if op == C.ATOMIC_GROUP:
            return self._build(list(av), flags)
        raise NotImplementedError(f"regex construct {op} in {self.pattern!r}")

    # -- matching ----------------------------------------------------------------------------
    def _closure(self, states: Iterable[int]) -> frozenset[int]:
        out = set()
        todo = list(states)
        while todo:
            s = todo.pop()
            if s in out:
                continue
            out.add(s)
            todo.extend(self.eps[s])
        return frozenset(out)

    def step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        key = (states, ch)
        hit = self._step_cache.get(key)
        if hit is None:
            nxt = [t for s in states for cs, t in self.edges[s] if ch in cs]
            hit = self._closure(nxt) if nxt else frozenset()
            if len(self._step_cache) < 200_000:
                self._step_cache[key] = hit
        return hit

    def run(self, text: str) -> frozenset[int]:
        st = self.start
        for ch in text:
            st = self.step(st, ch)
            if not st:
                break
        return st

    def fullmatch(self, text: str) -> bool:
        return self.final in self.run(text)

    def is_prefix(self, text: str) -> bool:
        """Some string of the language starts with ``text`` (every NFA state here can reach the
        final state unless a class is empty, which the grammars used do not have)."""
        return bool(self.run(text))

    # -- sampling ----------------------------------------------------------------------------
    def sample(self, rng: random.Random, max_extra: int = 3) -> str:
        out: list[str] = []
        self._sample(list(self.tree), self.base_flags, rng, max_extra, out)
        return "".join(out)

    def _sample(self, seq, flags, rng, extra, out) -> None:
        for op, av in seq:
            if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN, C.CATEGORY):
                out.append(self._charset(op, av, flags).sample(rng))
            elif op == C.SUBPATTERN:
                self._sample(list(av[3]), (flags | av[1]) & ~av[2], rng, extra, out)
            elif op == C.BRANCH:
                self._sample(list(rng.choice(av[1])), flags, rng, extra, out)
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                lo, hi, sub = av
                top = lo + extra if hi == MAXREPEAT else min(hi, lo + extra)
                for _ in range(rng.randint(lo, top)):
                    self._sample(list(sub), flags, rng, extra, out)
            elif op == C.ATOMIC_GROUP:
                self._sample(list(av), flags, rng, extra, out)
            else:
                raise NotImplementedError(op)


# --------------------------------------------------------------------------------------------
# Earley recognizer
# --------------------------------------------------------------------------------------------


class _Row:
    __slots__ = ("items", "waiting", "accepting")

    def __init__(self, items, waiting, accepting) -> None:
        self.items = items
        self.waiting = waiting  # symbol -> items with the dot before it
        self.accepting = accepting


class Earley:
    """Recognizer for ``rules`` (list of ``(lhs, rhs)``; a symbol is ``("N", name)`` or
    ``("T", key)``). A chart is a tuple of rows; ``scan`` returns a new chart or None."""

    def __init__(self, rules: list[tuple[str, tuple]], start: str) -> None:
        rules = [(lhs, tuple(rhs)) for lhs, rhs in rules]
        # drop productions that use a nonterminal deriving no finite string: an item the parser
        # can reach must be completable, or a live chart would not mean a viable prefix
        productive: set[str] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in rules:
                if lhs not in productive and all(s[0] == "T" or s[1] in productive for s in rhs):
                    productive.add(lhs)
                    changed = True
        rules = [(lhs, rhs) for lhs, rhs in rules if all(s[0] == "T" or s[1] in productive for s in rhs)]
        self.rules = [("$S'", (("N", start),))] + rules
        self.by_lhs: dict[str, list[int]] = defaultdict(list)
        for i, (lhs, _) in enumerate(self.rules):
            self.by_lhs[lhs].append(i)
        nullable: set[str] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.rules:
                if lhs not in nullable and all(s[0] == "N" and s[1] in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        self.nullable = nullable
        self.by_lhs.setdefault(start, [])

    def _close(self, seed: list, k: int, chart: tuple) -> _Row:
        rules = self.rules
        seen = set(seed)
        items = list(seed)
        waiting: dict = defaultdict(list)
        acc = False
        i = 0
        while i < len(items):
            r, d, o = items[i]
            i += 1
            lhs, rhs = rules[r]
            if d == len(rhs):
                if r == 0 and o == 0:
                    acc = True
                if o == k:
                    continue  # an empty derivation: handled when predicting (Aycock-Horspool)
                for r2, d2, o2 in chart[o].waiting.get(("N", lhs), ()):
                    it = (r2, d2 + 1, o2)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
                continue
            sym = rhs[d]
            waiting[sym].append((r, d, o))
            if sym[0] == "N":
                for r2 in self.by_lhs[sym[1]]:
                    it = (r2, 0, k)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
                if sym[1] in self.nullable:
                    it = (r, d + 1, o)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
        return _Row(items, dict(waiting), acc)

    def initial(self) -> tuple:
        return (self._close([(0, 0, 0)], 0, ()),)

    @staticmethod
    def expected(chart: tuple) -> set:
        return {s[1] for s in chart[-1].waiting if s[0] == "T"}

    def scan(self, chart: tuple, match: Callable[[Hashable], bool]) -> tuple | None:
        seed = []
        for sym, its in chart[-1].waiting.items():
            if sym[0] == "T" and match(sym[1]):
                seed.extend((r, d + 1, o) for r, d, o in its)
        if not seed:
            return None
        return chart + (self._close(seed, len(chart), chart),)

    @staticmethod
    def accepting(chart: tuple) -> bool:
        return chart[-1].accepting


# --------------------------------------------------------------------------------------------
# GBNF: exact character-level language
# --------------------------------------------------------------------------------------------

_G_ESC = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}


class GbnfOracle:
    """A GBNF grammar read by its own small parser and recognized character by character."""

    def __init__(self, text: str, start: str = "root") -> None:
        self.text = text
        self.toks = self._tokenize(text)
        self.pos = 0
        self.rules: list[tuple[str, tuple]] = []
        self.sets: list[CharSet] = []
        self.fresh = 0
        defs: dict[str, object] = {}
        while self.pos < len(self.toks):
            name = self._take("name")
            self._take("::=")
            defs[name] = self._alternatives()
        for name, body in defs.items():
            for alt in self._alts_of(body, name):
                self.rules.append((name, tuple(alt)))
        self.earley = Earley(self.rules, start)
        self._match_cache: dict[tuple[int, str], bool] = {}

    # -- tokens ------------------------------------------------------------------------------
    @staticmethod
    def _esc(text: str, i: int) -> tuple[int, int]:
        c = text[i]
        if c in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[c]
            return int(text[i + 1 : i + 1 + n], 16), i + 1 + n
        return _G_ESC[c], i + 1

    def _tokenize(self, text: str) -> list[tuple[str, object]]:
        toks: list[tuple[str, object]] = []
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c in " \t\r\n":
                i += 1
            elif c == "#":
                while i < n and text[i] != "\n":
                    i += 1
            elif text.startswith("::=", i):
                toks.append(("::=", None))
                i += 3
            elif c in "|()*+?.":
                toks.append((c, None))
                i += 1
            elif c == "{":
                j = text.index("}", i)
                body = text[i + 1 : j].replace(" ", "")
                if "," in body:
                    a, b = body.split(",")
                    lo, hi = int(a or 0), (int(b) if b else None)
                else:
                    lo = hi = int(body)
                toks.append(("rep", (lo, hi)))
                i = j + 1
            elif c == '"':
                i += 1
                cps = []
                while text[i] != '"':
                    if text[i] == "\\":
                        cp, i = self._esc(text, i + 1)
                    else:
                        cp, i = ord(text[i]), i + 1
                    cps.append(cp)
                toks.append(("str", cps))
                i += 1
            elif c == "[":
                i += 1
                neg = False
                if text[i] == "^":
                    neg, i = True, i + 1
                cps_items = []
                while text[i] != "]":
                    if text[i] == "\\":
                        lo, i = self._esc(text, i + 1)
                    else:
                        lo, i = ord(text[i]), i + 1
                    if text[i] == "-" and text[i + 1] != "]":
                        i += 1
                        if text[i] == "\\":
                            hi, i = self._esc(text, i + 1)
                        else:
                            hi, i = ord(text[i]), i + 1
                        cps_items.append(("range", lo, hi))
                    else:
                        cps_items.append(("lit", lo))
                toks.append(("class", CharSet(tuple(cps_items), neg)))
                i += 1
            else:
                m = re.compile(r"[a-zA-Z0-9-]+").match(text, i)
                assert m, f"bad GBNF at {text[i:i + 20]!r}"
                toks.append(("name", m.group()))
                i = m.end()
        return toks

    def _peek(self, k: int = 0):
        p = self.pos + k
        return self.toks[p] if p < len(self.toks) else ("eof", None)

    def _take(self, kind: str):
        t = self._peek()
        assert t[0] == kind, (kind, t, self.pos)
        self.pos += 1
        return t[1]

    # -- syntax: ("alt", [seq...]) / ("seq", [item...]) / ("rep", item, lo, hi) / ("ref", n) / ("set", CharSet)
    def _alternatives(self):
        alts = [self._sequence()]
        while self._peek()[0] == "|":
            self.pos += 1
            alts.append(self._sequence())
        return ("alt", alts)

    def _sequence(self):
        items = []
        while True:
            kind, val = self._peek()
            if kind == "name" and self._peek(1)[0] == "::=":
                break
            if kind == "name":
                self.pos += 1
                item = ("ref", val)
            elif kind == "str":
                self.pos += 1
                item = ("seq", [("set", CharSet((("lit", cp),))) for cp in val])
            elif kind == "class":
                self.pos += 1
                item = ("set", val)
            elif kind == ".":
                self.pos += 1
                item = ("set", CharSet((("range", 0, 0xD7FF), ("range", 0xE000, 0x10FFFF))))
            elif kind == "(":
                self.pos += 1
                item = self._alternatives()
                self._take(")")
            else:
                break
            while self._peek()[0] in ("*", "+", "?", "rep"):
                k, v = self._peek()
                self.pos += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(k, v)
                item = ("rep", item, lo, hi)
            items.append(item)
        return ("seq", items)

    # -- lowering to BNF -------------------------------------------------------------------------
    def _new_nt(self, base: str) -> str:
        self.fresh += 1
        return f"{base}#{self.fresh}"

    def _set_sym(self, cs: CharSet):
        self.sets.append(cs)
        return ("T", len(self.sets) - 1)

    def _alts_of(self, node, owner) -> list[list]:
        if node[0] == "alt":
            out = []
            for s in node[1]:
                out.extend(self._alts_of(s, owner))
            return out
        return [self._seq_of(node, owner)]

    def _seq_of(self, node, owner) -> list:
        kind = node[0]
        if kind == "seq":
            out = []
            for it in node[1]:
                out.extend(self._seq_of(it, owner))
            return out
        if kind == "set":
            return [self._set_sym(node[1])]
        if kind == "ref":
            return [("N", node[1])]
        if kind == "alt":
            nt = self._new_nt(owner)
            for alt in self._alts_of(node, owner):
                self.rules.append((nt, tuple(alt)))
            return [("N", nt)]
        if kind == "rep":
            _, item, lo, hi = node
            unit = self._seq_of(("alt", [item]) if item[0] != "alt" else item, owner)
            out = []
            for _ in range(lo):
                out.extend(unit)
            if hi is None:
                star = self._new_nt(owner)
                self.rules.append((star, ()))
                self.rules.append((star, tuple(unit) + (("N", star),)))
                out.append(("N", star))
            else:
                tail: list = []
                for _ in range(hi - lo):
                    opt = self._new_nt(owner)
                    self.rules.append((opt, ()))
                    self.rules.append((opt, tuple(unit) + tuple(tail)))
                    tail = [("N", opt)]
                out.extend(tail)
            return out
        raise AssertionError(node)

    # -- recognition -------------------------------------------------------------------------------
    def initial(self) -> tuple:
        return self.earley.initial()

    def feed(self, chart: tuple, ch: str) -> tuple | None:
        def match(key: int) -> bool:
            k = (key, ch)
            v = self._match_cache.get(k)
            if v is None:
                v = self._match_cache[k] = ch in self.sets[key]
            return v

        return self.earley.scan(chart, match)

    def run(self, text: str) -> tuple[int | None, bool]:
        """(index of the first rejected character or None, accepted as a whole)."""
        chart = self.initial()
        for i, ch in enumerate(text):
            chart = self.feed(chart, ch)
            if chart is None:
                return i, False
        return None, Earley.accepting(chart)

    def accepts(self, text: str) -> bool:
        return self.run(text) == (None, True)


# --------------------------------------------------------------------------------------------
# Lark grammars
# --------------------------------------------------------------------------------------------


@dataclass
class Term:
    name: str
    regex: CharRegex
    rank: int
    lazy: bool
    pattern: str


_LAZY_RE = re.compile(r"(?<!\\)(?:[*+?]|\})\?")


class LarkInfo:
    """A Lark grammar as Lark compiles it, a random sentence generator and Lark's Earley parser."""

    def __init__(self, src: str, start: str = "start") -> None:
        import lark

        self.src = src
        self.start = start
        self.lark = lark.Lark(src, parser="earley", lexer="dynamic", start=start)
        self.lark_tokens = lark.Lark(src, parser="earley", lexer="dynamic", start=start, keep_all_tokens=True)
        self.rules: list[tuple[str, tuple]] = []
        for r in self.lark.rules:
            rhs = tuple(("T", s.name) if s.is_term else ("N", s.name) for s in r.expansion)
            self.rules.append((r.origin.name, rhs))
        self.terms: dict[str, Term] = {}
        for t in self.lark.terminals:
            rx = t.pattern.to_regexp()
            literal = type(t.pattern).__name__ == "PatternStr" and not t.pattern.flags
            lazy = type(t.pattern).__name__ == "PatternRE" and bool(_LAZY_RE.search(t.pattern.value))
            self.terms[t.name] = Term(t.name, CharRegex(rx), t.priority * 2 + int(literal), lazy, rx)
        self.ignore = tuple(self.lark.ignore_tokens)
        self.earley = Earley(self.rules, start)
        self.by_lhs: dict[str, list[tuple]] = defaultdict(list)
        for lhs, rhs in self.rules:
            self.by_lhs[lhs].append(rhs)
        self._heights()

    def _heights(self) -> None:
        inf = float("inf")
        h = {n: inf for n in self.by_lhs}
        changed = True
        while changed:
            changed = False
            for lhs, alts in self.by_lhs.items():
                for rhs in alts:
                    v = 1 + max([h[s[1]] for s in rhs if s[0] == "N"], default=0)
                    if v < h[lhs]:
                        h[lhs] = v
                        changed = True
        self.height = h

    def lark_accepts(self, text: str) -> bool:
        from lark.exceptions import LarkError

        try:
            self.lark.parse(text)
            return True
        except LarkError:
            return False

    def lark_tokens_of(self, text: str) -> list | None:
        """Lark's tokens (type, start, end) of one parse of ``text`` (None if rejected)."""
        from lark import Token
        from lark.exceptions import LarkError

        try:
            tree = self.lark_tokens.parse(text)
        except LarkError:
            return None
        out = [(t.type, t.start_pos, t.end_pos) for t in tree.scan_values(lambda v: isinstance(v, Token))]
        return sorted(out, key=lambda x: x[1])

    # -- random sentences --------------------------------------------------------------------
    def random_tokens(self, rng: random.Random, max_depth: int = 8) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []

        def expand(nt: str, depth: int) -> None:
            alts = self.by_lhs[nt]
            if depth >= max_depth:
                best = min(1 + max([self.height[s[1]] for s in rhs if s[0] == "N"], default=0) for rhs in alts)
                alts = [rhs for rhs in alts
                        if 1 + max([self.height[s[1]] for s in rhs if s[0] == "N"], default=0) == best]
            rhs = rng.choice(alts)
            for kind, name in rhs:
                if kind == "N":
                    expand(name, depth + 1)
                else:
                    out.append((name, self.terms[name].regex.sample(rng)))

        expand(self.start, 0)
        return out

    def join(self, toks: list[tuple[str, str]], rng: random.Random, p_sep: float) -> str:
        seps = [self.terms[n].regex.sample(rng) for n in self.ignore for _ in range(3)]
        seps = [s for s in seps if s] or [""]
        parts = []
        for i, (_, text) in enumerate(toks):
            if i and rng.random() < p_sep:
                parts.append(rng.choice(seps))
            parts.append(text)
        return "".join(parts)


class GreedyReference:
    """The documented lexing semantics over a Lark grammar (or any ``rules``/``terms``/``ignore``),
    at the character level, with the Earley recognizer as the parser."""

    def __init__(self, info: LarkInfo, mode: str = "contextual") -> None:
        self.info = info
        self.terms = info.terms
        self.ignore = set(info.ignore)
        self.earley = info.earley
        self.mode = mode

    def _competing(self, exp: set) -> list[str]:
        if self.mode == "global":
            return list(self.terms)
        return [t for t in self.terms if t in exp or t in self.ignore]

    def _end(self, chart, cur: str):
        """End the lexeme ``cur``: (new chart, kind) with kind "scan"/"ignore", or None."""
        exp = Earley.expected(chart)
        cands = [t for t in self._competing(exp) if self.terms[t].regex.fullmatch(cur)]
        if self.mode == "global":
            cands = [t for t in self.terms if self.terms[t].regex.fullmatch(cur)]
        if not cands:
            return None
        best = max(self.terms[t].rank for t in cands)
        win = [t for t in cands if self.terms[t].rank == best]
        scan = {t for t in win if t in exp}
        if scan:
            nxt = self.earley.scan(chart, lambda k: k in scan)
            return None if nxt is None else (nxt, "scan", sorted(scan))
        if any(t in self.ignore for t in win):
            return chart, "ignore", None
        return None

    def _viable(self, exp: set, text: str) -> tuple[bool, bool]:
        """(some competing terminal has ``text`` as a prefix, some terminal at all has)."""
        comp = [t for t in self.terms if t in exp or t in self.ignore]
        ok = any(self.terms[t].regex.is_prefix(text) for t in comp)
        anyt = ok or any(self.terms[t].regex.is_prefix(text) for t in self.terms)
        return ok, anyt

    def _lazy_stop(self, exp: set, cur: str) -> bool:
        return bool(cur) and any(
            self.terms[t].lazy and self.terms[t].regex.fullmatch(cur)
            for t in self.terms if t in exp or t in self.ignore)

    def initial(self):
        return (self.earley.initial(), "")

    def feed(self, state, ch: str, lexemes: list | None = None):
        chart, cur = state
        exp = Earley.expected(chart)
        if not self._lazy_stop(exp, cur):
            ok, anyt = self._viable(exp, cur + ch)
            if ok:
                return chart, cur + ch
            if anyt and self.mode == "global":
                return None
        if not cur:
            return None
        ended = self._end(chart, cur)
        if ended is None:
            return None
        chart2 = ended[0]
        if self._viable(Earley.expected(chart2), ch)[0]:
            if lexemes is not None:
                lexemes.append((ended[1], ended[2], cur))
            return chart2, ch
        return None

    def eos(self, state) -> bool:
        chart, cur = state
        if not cur:
            return Earley.accepting(chart)
        ended = self._end(chart, cur)
        return ended is not None and Earley.accepting(ended[0])

    def run(self, text: str) -> tuple[int | None, bool]:
        """(index of the first rejected character or None, accepted as a whole)."""
        st = self.initial()
        for i, ch in enumerate(text):
            st = self.feed(st, ch)
            if st is None:
                return i, False
        return None, self.eos(st)

    def lexemes(self, text: str) -> list | None:
        """The lexemes (kind, terminals, text) of an accepted text."""
        st = self.initial()
        out: list = []
        for ch in text:
            st = self.feed(st, ch, out)
            if st is None:
                return None
        chart, cur = st
        if cur:
            ended = self._end(chart, cur)
            if ended is None:
                return None
            out.append((ended[1], ended[2], cur))
        return out

    # -- why Lark's dynamic Earley lexer and this one disagree ------------------------------------
    def explain(self, text: str, ours: bool, lark_ok: bool) -> str | None:
        """A reason why Lark's Earley (``lexer="dynamic"``) and greedy contextual lexing read
        ``text`` differently, or None when no lexing difference accounts for it.

        * Lark accepts: walk Lark's own tokenization; at the first token where greedy lexing
          would not end the lexeme there (a competing terminal — one the parser expects at that
          point, or an ignored one — has a longer prefix match, or a same-length match of higher
          rank wins), greedy lexing reads a different token sequence.
        * we accept, Lark rejects: some lexeme of ours is not what Lark's dynamic lexer matches
          for that terminal at that position (Lark takes ``re.match``'s leftmost-first match, not
          the longest one).
        """
        if lark_ok and not ours:
            toks = self.info.lark_tokens_of(text)
            if toks is None:
                return None
            chart = self.earley.initial()
            for name, s, e in toks:
                exp = Earley.expected(chart)
                comp = [t for t in self.terms if t in exp or t in self.ignore]
                if self.mode == "global":
                    comp = list(self.terms)
                if e < len(text) and any(self.terms[t].regex.is_prefix(text[s:e + 1]) for t in comp):
                    return f"greedy lexing extends the lexeme {text[s:e]!r} ({name}) by {text[e]!r}"
                rank = self.terms[name].rank
                better = [t for t in comp if self.terms[t].rank > rank and self.terms[t].regex.fullmatch(text[s:e])]
                if better:
                    return f"{text[s:e]!r} is read as {better[0]} (higher rank) instead of {name}"
                gap_end = [t for t in toks if t[1] >= e]
                nxt = gap_end[0][1] if gap_end else len(text)
                gap = text[e:nxt]
                if gap and any(self.terms[t].regex.is_prefix(text[s:e] + gap[:1]) for t in comp):
                    return f"greedy lexing extends {text[s:e]!r} into the ignored text {gap[:1]!r}"
                chart = self.earley.scan(chart, lambda k, n=name: k == n)
                if chart is None:
                    return None
            return None
        if ours and not lark_ok:
            lex = self.lexemes(text)
            if lex is None:
                return None
            pos = 0
            for kind, names, s in lex:
                for n in names or [t for t in self.ignore if self.terms[t].regex.fullmatch(s)]:
                    m = re.match(self.terms[n].pattern, text[pos:])
                    if m is None or m.end() != len(s):
                        return f"Lark's re.match reads {n} at {pos} as {m and m.group()!r}, not {s!r}"
                pos += len(s)
            return None
        return None


# --------------------------------------------------------------------------------------------
# Brute-force token masks
# --------------------------------------------------------------------------------------------


def first_byte_ok(m) -> set[int]:
    """Bytes b with ``m.fork().accept_bytes(bytes([b]))`` (tried on one probe fork, rolled back
    after each success, when the matcher keeps a rollback window)."""
    probe = m.fork()
    if probe.max_rollback == 0:
        return {b for b in range(256) if m.fork().accept_bytes(bytes([b]))}
    out = set()
    for b in range(256):
        if probe.accept_bytes(bytes([b])):
            out.add(b)
            probe.rollback(1)
    return out


_first_bytes_cache: dict[int, np.ndarray] = {}


def _first_bytes(tok) -> np.ndarray:
    """First byte of every id (-1: empty, special or beyond the tokens)."""
    key = id(tok)
    if key not in _first_bytes_cache:
        out = np.full(tok.vocab_size, -1, dtype=np.int32)
        for t, b in enumerate(tok.tokens):
            if b and t not in tok.special_ids:
                out[t] = b[0]
        _first_bytes_cache[key] = out
    return _first_bytes_cache[key]


def brute_force_allowed(m, tok, ids: Iterable[int] | None = None, confirm: Iterable[int] = ()) -> set[int]:
    """The ids among ``ids`` (default: the whole vocabulary) that ``m.fork().accept_token``
    accepts.

    To keep it fast: a token whose first byte is refused on its own is refused as a whole (the
    matcher reads a token's bytes in order, so this is exact), and the others are tried on one
    probe fork, rolled back after each success (a refusal changes nothing). Every id found
    allowed, and every id in ``confirm``, is then re-checked on its own fresh fork."""
    firsts = np.zeros(257, dtype=bool)
    firsts[list(first_byte_ok(m))] = True
    firsts[256] = True  # -1 (empty/special): always tried
    fb = _first_bytes(tok)
    ids = np.arange(tok.vocab_size) if ids is None else np.asarray(sorted(set(int(i) for i in ids)), dtype=np.int64)
    cand = ids[firsts[fb[ids]]]
    probe = m.fork()
    out: set[int] = set()
    for t in cand.tolist():
        if probe.accept_token(t):
            out.add(t)
            probe.rollback(1)
    in_ids = set(ids.tolist())
    for t in out | (set(int(c) for c in confirm) & in_ids):
        assert m.fork().accept_token(t) == (t in out), f"probe and a fresh fork disagree on id {t}"
    return out


def completion_search(m, alphabet: bytes, max_nodes: int = 4000, max_len: int = 24,
                      key: Callable | None = None) -> bytes | None:
    """A shortest byte string (over ``alphabet``) after which ``m`` is accepting, by BFS over
    ``m.fork().accept_bytes(bytes([b]))``; ``key(matcher)`` (optional) merges equal states."""
    if m.is_accepting():
        return b""
    queue = deque([(m, b"")])
    seen = set()
    nodes = 0
    while queue and nodes < max_nodes:
        cur, path = queue.popleft()
        if len(path) >= max_len:
            continue
        for b in alphabet:
            nxt = cur.fork()
            if not nxt.accept_bytes(bytes([b])):
                continue
            nodes += 1
            p = path + bytes([b])
            if nxt.is_accepting():
                return p
            k = key(nxt) if key is not None else None
            if k is not None:
                if k in seen:
                    continue
                seen.add(k)
            queue.append((nxt, p))
    return None


def mutate(text: str, rng: random.Random, alphabet: str, toks: list[str] | None = None) -> str:
    """Delete, insert or replace one character, or swap two adjacent tokens."""
    op = rng.randrange(4 if toks and len(toks) > 1 else 3)
    if op == 3:
        i = rng.randrange(len(toks) - 1)
        toks = list(toks)
        toks[i], toks[i + 1] = toks[i + 1], toks[i]
        return "".join(toks)
    i = rng.randrange(len(text) + 1)
    c = rng.choice(alphabet)
    if op == 0:
        return text[:i] + c + text[i:]
    if op == 1:
        return text[:i] + text[i + 1:]
    return text[:i] + c + text[i + 1:]


def as_bool_mask(ids: Iterable[int], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[list(ids)] = True
    return out


# --------------------------------------------------------------------------------------------
# AICI's yacc-like format (for c.y): own reader
# --------------------------------------------------------------------------------------------


class YaccInfo:
    """A yacc grammar with inline lexemes read by its own small reader: ``"kw"`` / ``'kw'`` are
    keywords (rank 1), ``"/re/"`` regexes (rank 0), ``SKIP`` alternatives are ignored terminals.
    Duck-types :class:`LarkInfo` for :class:`GreedyReference` (``terms``, ``ignore``, ``earley``)."""

    PREFIX = "\n"  # the lexer starts as if after a newline (AICI)

    def __init__(self, text: str) -> None:
        toks = self._tokens(text)
        start = None
        i = 0
        while toks[i] != ("%%", "%%"):
            if toks[i] == ("dir", "%start"):
                start = toks[i + 1][1]
                i += 1
            i += 1
        i += 1
        alts_of: dict[str, list[list]] = defaultdict(list)
        order: list[str] = []
        while i < len(toks) and toks[i][0] != "%%":
            name = toks[i][1]
            assert toks[i + 1][0] == ":", toks[i:i + 3]
            i += 2
            cur: list = []
            while True:
                kind, val = toks[i]
                i += 1
                if kind in ("|", ";"):
                    alts_of[name].append(cur)
                    cur = []
                    if kind == ";":
                        break
                elif kind == "dir" and val == "%prec":
                    i += 1
                elif kind == "dir" and val == "%empty":
                    pass
                else:
                    cur.append((kind, val))
            if name not in order:
                order.append(name)
        self.terms: dict[str, Term] = {}
        self.rules: list[tuple[str, tuple]] = []
        ignore = []
        start = start or next(n for n in order if n != "SKIP")
        # rules unreachable from the start are dropped, their lexemes with them (as logitgate
        # does: an unused rule's keyword does not compete in the global lexer)
        reach, todo = {start}, [start]
        while todo:
            for alt in alts_of[todo.pop()]:
                for kind, val in alt:
                    if kind == "name" and val not in reach:
                        reach.add(val)
                        todo.append(val)
        order = [n for n in order if n in reach or n == "SKIP"]
        for name in order:
            for alt in alts_of[name]:
                rhs = []
                for kind, val in alt:
                    if kind == "name":
                        rhs.append(("N", val))
                    else:
                        rhs.append(("T", self._term(val)))
                if name == "SKIP":
                    assert len(rhs) == 1
                    ignore.append(rhs[0][1])
                else:
                    self.rules.append((name, tuple(rhs)))
        self.ignore = tuple(ignore)
        self.start = start
        self.earley = Earley(self.rules, self.start)

    def _term(self, s: str) -> str:
        key = "lex:" + s
        if key not in self.terms:
            if len(s) > 2 and s[0] == "/" and s[-1] == "/":
                pat = s[1:-1]
                self.terms[key] = Term(key, CharRegex(pat), 0, False, pat)
            else:
                pat = re.escape(s)
                self.terms[key] = Term(key, CharRegex(pat), 1, False, pat)
        return key

    @staticmethod
    def _tokens(text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        i, n = 0, len(text)
        seen_pct = 0
        while i < n:
            c = text[i]
            if c.isspace():
                i += 1
            elif text.startswith("//", i):
                j = text.find("\n", i)
                i = n if j < 0 else j
            elif text.startswith("/*", i):
                i = text.index("*/", i + 2) + 2
            elif c in "\"'":
                j = text.index(c, i + 1)
                out.append(("str", text[i + 1:j]))
                i = j + 1
            elif text.startswith("%%", i):
                out.append(("%%", "%%"))
                i += 2
                seen_pct += 1
                if seen_pct == 2:
                    break
            elif c == "%":
                m = re.compile(r"%[A-Za-z_-]+").match(text, i)
                out.append(("dir", m.group()))
                i = m.end()
            elif c in ":|;":
                out.append((c, c))
                i += 1
            else:
                m = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]*|[0-9]+").match(text, i)
                assert m, text[i:i + 30]
                out.append(("name", m.group()))
                i = m.end()
        return out


class YaccReference(GreedyReference):
    """Global lexing over a :class:`YaccInfo`, with its start context."""

    def __init__(self, info: YaccInfo) -> None:
        super().__init__(info, mode="global")  # type: ignore[arg-type]

    def initial(self):
        """After the start context "\\n" (a grammar whose lexer refuses it starts without it)."""
        st = plain = super().initial()
        for ch in YaccInfo.PREFIX:
            st = self.feed(st, ch)
            if st is None:
                return plain
        return st


# --------------------------------------------------------------------------------------------
# Random small grammars (differential fuzzing against GreedyReference)
# --------------------------------------------------------------------------------------------

FUZZ_LEXEMES = ['"a"', '"ab"', '"b"', '"ba"', '"c"', '"abc"', "/a+/", "/[ab]+/", "/b*c/", "/[a-c]/",
                "/(ab)+/", "/ca?/", "/a[bc]*?c/", '"a"i', "/ *a/", "/b+ /", '" c"', "/a|ab/", "/c*/"]


def random_lark_grammar(rng: random.Random) -> tuple[str, bool]:
    """A random Lark grammar over the letters a, b, c (named terminals with priorities, inline
    literals and regexes, ``[x]``, ``x+``, empty alternatives, ``%ignore " "``). Returns
    (source, has ignore)."""
    terms = rng.sample(FUZZ_LEXEMES, rng.randint(2, 5))
    lines: list[str] = []
    names: list[str] = []
    for i, t in enumerate(terms):
        if rng.random() < 0.5:
            lines.append(f"T{i}{rng.choice(['', '', '.2', '.-1'])}: {t}")
            names.append(f"T{i}")
        else:
            names.append(t)
    rules = ["start", "x", "y"][: rng.randint(1, 3)]
    for r in rules:
        alts = []
        for _ in range(rng.randint(1, 3)):
            k = rng.randint(0 if r != "start" else 1, 3)
            pool = names + rules[1:] + [f"{rng.choice(names)}+", f"[{rng.choice(names)}]"]
            alts.append(" ".join(rng.choice(pool) for _ in range(k)))
        lines.insert(0, f"{r}: " + " | ".join(alts))
    ign = rng.random() < 0.5
    if ign:
        lines.append('%ignore " "')
    return "\n".join(lines), ign


def random_yacc_grammar(rng: random.Random) -> tuple[str, bool]:
    """A random grammar in the yacc format (inline keywords and regexes, optional SKIP)."""
    lex = [t.replace('"a"i', '"a"') for t in rng.sample(FUZZ_LEXEMES, rng.randint(2, 5))]
    lex = [t if t.startswith('"') else '"' + t + '"' for t in lex]
    rules = ["start", "x", "y"][: rng.randint(1, 3)]
    lines = ["%start start", "%%"]
    ign = rng.random() < 0.6
    if ign:
        lines.append('SKIP : "/[ \\n]+/" ;')
    for r in rules:
        alts = []
        for _ in range(rng.randint(1, 3)):
            k = rng.randint(0 if r != "start" else 1, 3)
            alts.append(" ".join(rng.choice(lex + rules[1:]) for _ in range(k)))
        lines.append(f"{r} : " + " | ".join(alts) + " ;")
    return "\n".join(lines), ign


FUZZ_GBNF_ITEMS = ['"a"', '"ab"', '"b"', '"ba"', '"c"', '"abc"', "[a-c]", "[ab]", "[^a]", '" "', "[ a]"]


def random_gbnf_grammar(rng: random.Random) -> str:
    """A random GBNF grammar over a, b, c and space (rules root, x, y; groups, ``* + ? {m,n}``)."""
    rules = ["root", "x", "y"]

    def item(depth: int) -> str:
        r = rng.random()
        if r < 0.25:
            base = rng.choice(rules)
        elif r < 0.35 and depth < 2:
            base = "(" + " | ".join(seq(depth + 1) or '""' for _ in range(rng.randint(1, 2))) + ")"
        else:
            base = rng.choice(FUZZ_GBNF_ITEMS)
        return base + rng.choice(["", "", "", "*", "+", "?", "{1,2}", "{0,2}"])

    def seq(depth: int) -> str:
        return " ".join(item(depth) for _ in range(rng.randint(0 if depth else 1, 3)))

    lines = []
    for r in rules:
        alts = [seq(0) for _ in range(rng.randint(1, 3))]
        lines.append(f"{r} ::= " + " | ".join(alts))
    return "\n".join(lines)
