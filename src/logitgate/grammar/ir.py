"""The grammar intermediate representation every front end (Lark, GBNF, yacc) produces.

A :class:`GrammarIR` is a set of named rules whose bodies are EBNF expressions over

* :class:`Ref` — a rule or a named terminal, by name;
* :class:`Lit` — an inline literal terminal (``"while"`` in yacc/Lark, ``"abc"`` in GBNF);
* :class:`Rx` — an inline regex terminal (``/[0-9]+/``, a GBNF character class), already parsed
  into a :mod:`logitgate.regex.ast` tree;
* :class:`Seq`, :class:`Alt`, :class:`Rep` (``?``, ``*``, ``+``, ``{m,n}``) and :class:`Empty`.

Named terminals (:class:`TerminalDef`: Lark's ``NAME: /.../``) carry a regex tree, a priority and a
laziness flag. Everything here is plain data: the checks (undefined, unused and unproductive rules,
an empty language) and the lowering to BNF live in :mod:`logitgate.grammar.cfg`.

Lexing semantics a front end chooses (:class:`LexMode`):

* ``contextual`` — the lexer only considers terminals the parser can accept next (plus ignored
  ones); longest match, then priority, then literals before regexes (Lark).
* ``global`` — every terminal competes (longest match, priority, literals before regexes) and a
  winner the parser cannot accept is an error: the C lexer of the yacc format, where ``int`` is a
  keyword even where an identifier is expected.
* ``chars`` — character-level semantics with no lexer at all (GBNF): the language is exactly the
  context-free language of the rules; the compiler only merges parts into lexemes where that
  cannot change the language.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Union

from ..regex.ast import Node

__all__ = [
    "rename_refs",
    "Expr",
    "Ref",
    "Lit",
    "Rx",
    "Seq",
    "Alt",
    "Rep",
    "Empty",
    "TerminalDef",
    "RuleDef",
    "GrammarIR",
    "LexMode",
]

LexMode = Literal["contextual", "global", "chars"]


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a rule or a named terminal."""

    name: str
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Lit:
    """An inline literal terminal: exactly ``text`` (non-empty; case-insensitive when ``ignore_case``)."""

    text: str
    ignore_case: bool = False


@dataclass(frozen=True, slots=True)
class Rx:
    """An inline regex terminal. ``source`` is the text shown in messages (e.g. ``/[0-9]+/``)."""

    node: Node
    source: str


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Alt:
    items: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Rep:
    """``item`` repeated ``min`` to ``max`` times (``max is None``: unbounded)."""

    item: "Expr"
    min: int
    max: int | None


@dataclass(frozen=True, slots=True)
class Empty:
    """The empty string."""


Expr = Union[Ref, Lit, Rx, Seq, Alt, Rep, Empty]


@dataclass(frozen=True, slots=True)
class TerminalDef:
    """A named terminal: one lexeme matching the regex tree ``node``.

    ``literal``: the exact text when the terminal is a plain string (keywords beat regexes of the
    same length and priority). ``priority``: higher wins among matches of the same length.
    ``lazy``: the lexeme ends as soon as it matches (no longest match). ``automaton``: for a custom
    recognizer embedded as a sub-rule, its explored byte automaton ``(trans, accepting)`` (see
    ``recognizers.explore_automaton``), and ``node`` is None.
    """

    name: str
    node: Node | None
    literal: str | None = None
    priority: int = 0
    lazy: bool = False
    line: int | None = None
    automaton: Any = None


@dataclass(frozen=True, slots=True)
class RuleDef:
    """A rule ``name: body``; ``line`` is where it is defined in the source (1-based) if known."""

    name: str
    body: Expr
    line: int | None = None


@dataclass
class GrammarIR:
    """A whole grammar as produced by a front end.

    ``rules`` and ``terminals`` are keyed by name (disjoint namespaces are the front end's job;
    a name in both is an error). ``ignore``: names of terminals skipped between any two lexemes
    (Lark ``%ignore``, the yacc ``SKIP`` rule). ``source``: the grammar text, for error context.
    """

    rules: dict[str, RuleDef]
    terminals: dict[str, TerminalDef]
    start: str
    ignore: tuple[str, ...] = ()
    lex_mode: LexMode = "contextual"
    source: str = ""
    kind: str = ""
    notes: list[str] = field(default_factory=list)
    prefix: str = ""
    """Text the lexer has seen before the output starts (not part of the output): the yacc
    format starts as if after a newline, as AICI's lexer does, so a first-line ``#include``
    matches the pre-processor rule. A grammar whose lexer refuses the prefix starts without it."""


def rename_refs(e: Expr, names: Mapping[str, str]) -> Expr:
    """``e`` with each reference to a key of ``names`` made a reference to its value."""
    if isinstance(e, Ref):
        return replace(e, name=names[e.name]) if e.name in names else e
    if isinstance(e, Seq):
        return Seq(tuple(rename_refs(i, names) for i in e.items))
    if isinstance(e, Alt):
        return Alt(tuple(rename_refs(i, names) for i in e.items))
    if isinstance(e, Rep):
        return Rep(rename_refs(e.item, names), e.min, e.max)
    return e
