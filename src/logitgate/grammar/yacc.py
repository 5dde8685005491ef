"""Front end for AICI's yacc-like grammar format with inline lexemes (``parse_yacc``).

The format (as read by AICI through grmtools' ``cfgrammar``)::

    %start translation_unit          // declarations, then '%%'
    %%
    SKIP : "/[ \\t\\n]+/" | "//\\*[^*]*\\*+([^/*][^*]*\\*+)*//" ;
    IDENTIFIER : "/[a-zA-Z_][0-9a-zA-Z_]*/" ;
    expr : expr "+" term | term ;
    opt : "x" | ;                     // an empty alternative (or: | %empty)
    %%
    anything here is ignored

* Rules are ``name : alt | alt ... ;``; an alternative is a sequence of rule names and inline
  lexemes, possibly empty. A name defined twice gets the alternatives of both definitions.
  Names follow grmtools: ``[A-Za-z_.][A-Za-z0-9_.]*``.
* Inline lexemes: ``"text"`` / ``'text'`` is the keyword ``text``; when the text is longer than two
  characters and starts and ends with ``/`` it is a regex (``"/[0-9]+/"``). Strings are taken
  **verbatim**: there are no escapes in the string layer, a string ends at the next quote of the
  same kind on the same line (so a lexeme cannot contain its own quote character: use the other
  quotes), and backslashes belong to the regex (``"//\\*.../"`` is the regex ``/\\*...``) or to the
  keyword (``"\\\\"`` is the two-character keyword ``\\\\``), exactly as AICI reads them.
* Regexes are written in Rust ``regex`` syntax and parsed with :func:`logitgate.regex.parser.parse`
  (Python ``re`` syntax). The common subset reads the same; Rust-only syntax that ``re`` rejects
  (``\\p{L}``, ``\\x{..}``, ``\\z``, ``(?U)``) is a ``GrammarError``, and Rust-only character-class
  syntax that ``re`` would silently read differently (nested/POSIX classes ``[[:alpha:]]``, set
  operations ``&&`` ``--`` ``~~``) is rejected up front. Laziness (``*?``) is accepted and dropped.
* ``SKIP`` is special: each alternative must be a single lexeme; they become the named terminals
  ``SKIP_1``, ``SKIP_2``, ... listed in ``GrammarIR.ignore`` (skipped between any two lexemes), and
  ``SKIP`` is neither a rule nor referable.
* Declarations: ``%start name`` (default: the first rule other than ``SKIP``). Accepted and ignored
  (with a line in ``GrammarIR.notes``), since none of them changes the language for a general CFG
  parser: ``%token``, ``%type``, ``%left``, ``%right``, ``%nonassoc``, ``%precedence``, ``%expect``,
  ``%expect-rr``, and ``%prec X`` inside an alternative. ``%empty`` marks an empty alternative.
* Comments ``// ...`` and ``/* ... */`` anywhere outside strings.

Unsupported (``GrammarError``): semantic actions ``{ ... }``, code blocks ``%{ ... %}``, and every
other ``%`` declaration (``%union``, ``%define``, ...). Names are not resolved here (an undefined
name is reported by :mod:`logitgate.grammar.cfg`), except ``%start``, which must name a rule.

Lexing follows AICI: ``lex_mode="global"`` (every lexeme competes everywhere; keywords beat
regexes).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from ..errors import GrammarError, RegexError
from ..regex.parser import parse as parse_regex
from .cfg import literal_node
from .ir import Alt, Empty, Expr, GrammarIR, Lit, Ref, RuleDef, Rx, Seq, TerminalDef

__all__ = ["parse_yacc"]

_NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]*")
_INT = re.compile(r"[0-9]+")
_DIRECTIVE = re.compile(r"%[A-Za-z_][A-Za-z0-9_-]*")

# Declarations that are accepted and ignored, with the reason shown in GrammarIR.notes.
_IGNORED = {
    "%token": "lexemes are written inline",
    "%type": "semantic value types do not change the language",
    "%left": "precedence does not change the language",
    "%right": "precedence does not change the language",
    "%nonassoc": "precedence does not change the language",
    "%precedence": "precedence does not change the language",
    "%expect": "conflict counts do not change the language",
    "%expect-rr": "conflict counts do not change the language",
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # "name", "string", "int", "tag", "directive", "%%", ":", "|", ";", "{", "eof"
    text: str  # the source text (for strings: the content between the quotes)
    start: int
    end: int


class _Lexer:
    """Produces tokens on demand, so that the text after the second ``%%`` is never read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._peeked: _Tok | None = None

    def peek(self) -> _Tok:
        if self._peeked is None:
            self._peeked = self._scan()
        return self._peeked

    def next(self) -> _Tok:
        tok = self.peek()
        self._peeked = None
        return tok

    def _skip_space(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            ch = text[self.pos]
            if ch in " \t\r\n\f\v":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise GrammarError.at("unterminated comment '/*'", text, self.pos)
                self.pos = end + 2
            else:
                return

    def _scan(self) -> _Tok:
        self._skip_space()
        text, i = self.text, self.pos
        if i >= len(text):
            return _Tok("eof", "", i, i)
        ch = text[i]
        if ch in "\"'":
            end = i + 1
            while end < len(text) and text[end] not in (ch, "\n"):
                end += 1
            if end >= len(text) or text[end] != ch:
                reason = f"unterminated string (no closing {ch} on this line)"
                raise GrammarError.at(reason, text, i)
            if end == i + 1:
                raise GrammarError.at("empty lexeme", text, i)
            return self._emit("string", text[i + 1 : end], i, end + 1)
        if text.startswith("%%", i):
            return self._emit("%%", "%%", i, i + 2)
        if ch == "%":
            m = _DIRECTIVE.match(text, i)
            if m is None:
                word = "%{" if text.startswith("%{", i) else "%"
                raise GrammarError.at(f"unsupported declaration {word!r}", text, i)
            return self._emit("directive", m.group(), i, m.end())
        if ch == "<":
            end = text.find(">", i)
            if end < 0 or "\n" in text[i:end]:
                raise GrammarError.at("unterminated type tag '<...>'", text, i)
            return self._emit("tag", text[i : end + 1], i, end + 1)
        for kind, rx in (("name", _NAME), ("int", _INT)):
            m = rx.match(text, i)
            if m:
                return self._emit(kind, m.group(), i, m.end())
        if ch in ":|;{":
            return self._emit(ch, ch, i, i + 1)
        raise GrammarError.at(f"unexpected character {ch!r}", text, i)

    def _emit(self, kind: str, value: str, start: int, end: int) -> _Tok:
        self.pos = end
        return _Tok(kind, value, start, end)


@dataclass
class _Rule:
    line: int
    alts: list[list[tuple[Expr, _Tok]]] = field(default_factory=list)
    alt_ends: list[int] = field(default_factory=list)  # offset of the '|' or ';' closing each alt


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lex = _Lexer(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.rules: dict[str, _Rule] = {}
        self.notes: list[str] = []
        self.start: _Tok | None = None

    def error(self, reason: str, offset: int, rule: str | None = None) -> GrammarError:
        return GrammarError.at(reason, self.text, offset, rule=rule)

    def line_col(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    # -- declarations ---------------------------------------------------------------------------

    def declarations(self) -> None:
        while True:
            tok = self.lex.next()
            if tok.kind == "%%":
                return
            if tok.kind == "eof":
                raise self.error("missing '%%' between the declarations and the rules", tok.start)
            if tok.kind != "directive":
                raise self.error(f"expected a declaration or '%%', found {tok.text!r}", tok.start)
            if tok.text == "%start":
                name = self.lex.next()
                if name.kind != "name":
                    raise self.error("%start must be followed by a rule name", name.start)
                if self.start is not None:
                    raise self.error("duplicate %start declaration", tok.start)
                self.start = name
            elif tok.text in _IGNORED:
                end = tok.end
                while self.lex.peek().kind in ("name", "string", "int", "tag"):
                    end = self.lex.next().end
                self.note(tok, end, _IGNORED[tok.text])
            else:
                raise self.error(f"unsupported declaration {tok.text}", tok.start)

    def note(self, tok: _Tok, end: int, why: str) -> None:
        shown = " ".join(self.text[tok.start : end].split())
        self.notes.append(f"ignored: {shown} (line {self.line_col(tok.start)[0]}): {why}")

    # -- rules ----------------------------------------------------------------------------------

    def rules_section(self) -> int:
        """Parse rules up to the second '%%' or the end; returns the offset where they stop."""
        while True:
            tok = self.lex.next()
            if tok.kind in ("%%", "eof"):
                return tok.start
            if tok.kind != "name":
                raise self.error(f"expected a rule name, found {tok.text!r}", tok.start)
            colon = self.lex.next()
            if colon.kind != ":":
                raise self.error(f"expected ':' after rule name {tok.text!r}", colon.start, tok.text)
            rule = self.rules.setdefault(tok.text, _Rule(self.line_col(tok.start)[0]))
            try:
                self.rule_body(tok.text, rule, colon)
            except GrammarError as e:  # lexer errors (strings, comments) name the rule too
                e.rule = e.rule or tok.text
                raise

    def rule_body(self, name: str, rule: _Rule, last: _Tok) -> None:
        items: list[tuple[Expr, _Tok]] = []
        empty_kw: _Tok | None = None
        while True:
            tok = self.lex.next()
            kind = tok.kind
            if kind in ("|", ";"):
                rule.alts.append(items)
                rule.alt_ends.append(tok.start)
                if kind == ";":
                    return
                items, empty_kw = [], None
            elif kind == "name":
                if self.lex.peek().kind == ":":  # the next rule starts: this one lacks its ';'
                    raise self.error(f"missing ';' at the end of rule {name!r}", last.end, name)
                if tok.text == "SKIP":
                    reason = "SKIP lists skipped lexemes and cannot be referenced"
                    raise self.error(reason, tok.start, name)
                line, col = self.line_col(tok.start)
                items.append((Ref(tok.text, line, col), tok))
            elif kind == "string":
                items.append((self.lexeme(tok, name), tok))
            elif kind in ("%%", "eof"):
                raise self.error(f"missing ';' at the end of rule {name!r}", last.end, name)
            elif tok.text == "%empty":
                empty_kw = tok
            elif tok.text == "%prec":
                arg = self.lex.next()
                if arg.kind not in ("name", "string"):
                    raise self.error("%prec must be followed by a token", arg.start, name)
                self.note(tok, arg.end, "precedence does not change the language")
            elif kind == "{":
                raise self.error("semantic actions '{ ... }' are not supported", tok.start, name)
            elif kind == "directive":
                raise self.error(f"unsupported directive {tok.text} in a rule", tok.start, name)
            else:
                raise self.error(f"unexpected {tok.text!r} in rule {name!r}", tok.start, name)
            if empty_kw is not None and items:
                raise self.error("%empty in a non-empty alternative", empty_kw.start, name)
            last = tok

    def lexeme(self, tok: _Tok, rule: str) -> Expr:
        content = tok.text
        if not (len(content) > 2 and content.startswith("/") and content.endswith("/")):
            return Lit(content)
        pattern = content[1:-1]
        body_start = tok.start + 2  # the quote and the leading '/'
        rust_only = _rust_only_syntax(pattern)
        if rust_only is not None:
            offset, reason = rust_only
            raise self.error(f"invalid regex in rule {rule!r}: {reason}", body_start + offset, rule)
        try:
            node = parse_regex(pattern)
        except RegexError as e:
            raise self.error(
                f"invalid regex in rule {rule!r}: {e.reason}", body_start + (e.offset or 0), rule
            ) from None
        return Rx(node, source=self.text[tok.start : tok.end])

    # -- result ---------------------------------------------------------------------------------

    def build(self) -> GrammarIR:
        self.declarations()
        rules_end = self.rules_section()
        terminals = self.skip_terminals()
        rules = {
            name: RuleDef(name, _body(rule.alts), rule.line)
            for name, rule in self.rules.items()
            if name != "SKIP"
        }
        if self.start is not None:
            if self.start.text not in rules:
                raise self.error(f"start rule {self.start.text!r} is not defined", self.start.start)
            start = self.start.text
        elif rules:
            start = next(iter(rules))
        else:
            raise self.error("the grammar has no rules", rules_end)
        return GrammarIR(
            rules=rules,
            terminals=terminals,
            start=start,
            ignore=tuple(terminals),
            lex_mode="global",
            source=self.text,
            kind="yacc",
            notes=self.notes,
            prefix="\n",
        )

    def skip_terminals(self) -> dict[str, TerminalDef]:
        skip = self.rules.get("SKIP")
        if skip is None:
            return {}
        terminals: dict[str, TerminalDef] = {}
        for items, end in zip(skip.alts, skip.alt_ends):
            if len(items) != 1 or not isinstance(items[0][0], (Lit, Rx)):
                not_lexeme = [tok for expr, tok in items if not isinstance(expr, (Lit, Rx))]
                if not_lexeme:
                    where = not_lexeme[0].start
                elif items:
                    where = items[1][1].start  # a second lexeme
                else:
                    where = end  # an empty alternative: point at its '|' or ';'
                raise self.error(
                    "each alternative of SKIP must be a single inline lexeme "
                    '("text" or "/regex/")', where, "SKIP")
            expr, tok = items[0]
            number = len(terminals) + 1
            name = f"SKIP_{number}"
            while name in self.rules:
                name += "_"
            line = self.line_col(tok.start)[0]
            if isinstance(expr, Lit):
                node = literal_node(expr.text)
                terminals[name] = TerminalDef(name, node, literal=expr.text, line=line)
            else:
                terminals[name] = TerminalDef(name, expr.node, line=line)
        return terminals


def _body(alts: list[list[tuple[Expr, _Tok]]]) -> Expr:
    exprs: list[Expr] = []
    for items in alts:
        parts = tuple(expr for expr, _ in items)
        exprs.append(Empty() if not parts else parts[0] if len(parts) == 1 else Seq(parts))
    return exprs[0] if len(exprs) == 1 else Alt(tuple(exprs))


def _rust_only_syntax(pattern: str) -> tuple[int, str] | None:
    """The first Rust-only character-class construct that Python ``re`` would read differently
    (nested or POSIX classes, set operations), as (offset in ``pattern``, reason), or None."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if not in_class:
            if ch == "[":
                in_class = True
                i += 1
                if pattern.startswith("^", i):
                    i += 1
                if pattern.startswith("]", i):  # ']' first in a class is a literal
                    i += 1
                continue
        elif ch == "]":
            in_class = False
        elif ch == "[":
            reason = "'[' inside a character class (Rust nested or POSIX class) is not supported"
            return i, reason + "; write '\\['"
        elif pattern.startswith(("&&", "--", "~~"), i):
            return i, f"class set operation {pattern[i:i + 2]!r} (Rust syntax) is not supported"
        i += 1
    return None


def parse_yacc(text: str) -> GrammarIR:
    """Parse a grammar in AICI's yacc-like format into a :class:`GrammarIR` (``kind="yacc"``,
    ``lex_mode="global"``, ``SKIP`` alternatives as ignored terminals). Raises GrammarError
    with the line and column of the problem."""
    return _Parser(text).build()
