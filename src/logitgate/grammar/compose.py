"""Grammar composition: a grammar refers to another constraint by name, as a sub-rule.

``embed(ir, {"NAME": sub})`` makes every reference to ``NAME`` in ``ir`` match ``sub``:

* a regex becomes a terminal (one lexeme, lexed like the grammar's other terminals);
* a custom recognizer (``Grammar.from_recognizer``) becomes a terminal too: its byte automaton is
  explored at compile time (``recognizers.explore_automaton``), so it must be finite-state, within
  ``Limits.max_dfa_states`` states (a ``GrammarLimitError`` names the sub-grammar otherwise);
* a Lark, GBNF or yacc grammar, or a JSON Schema (``Grammar.from_json_schema``, with its
  whitespace and property-order options), is copied in: its rules and terminals are renamed
  ``NAME::x`` and ``NAME`` becomes a rule deriving its start rule. A GBNF sub-grammar is first
  turned into lexemes where that is safe (:mod:`logitgate.grammar.lexemes`); what a lenient
  schema relaxed is listed in the host's notes.

The lexer is shared, so a sub-grammar's ignored terminals (``%ignore``, ``SKIP``) would apply to
the whole grammar: embedding one whose ignored terminals differ from the host's is refused.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import GrammarError
from .ir import GrammarIR, Ref, RuleDef, TerminalDef, rename_refs

if TYPE_CHECKING:
    from .spec import Grammar

__all__ = ["embed"]


def _explore(sub: "Grammar", name: str) -> tuple:
    from ..errors import GrammarLimitError, LimitError
    from ..limits import get_limits
    from ..recognizers import explore_automaton

    cap = get_limits().max_dfa_states
    try:
        trans, accepting = explore_automaton(sub._rec[0], max_states=cap)
    except LimitError as e:
        if e.limit != "max_dfa_states":
            raise
        raise GrammarLimitError(f"sub-grammar {name!r}: the custom recognizer has more than {e.value} states; one "
                                "embedded in a grammar must be finite-state (its automaton is explored at compile "
                                "time)", limit=e.limit, value=e.value, rule=name) from None
    if not len(trans):
        raise GrammarError(f"sub-grammar {name!r}: the custom recognizer accepts no text", rule=name)
    return trans, accepting


def embed(ir: GrammarIR, subs: Mapping[str, "Grammar"]) -> GrammarIR:
    """``ir`` with each name of ``subs`` bound to that constraint (see the module docstring)."""
    if not subs:
        return ir
    rules = dict(ir.rules)
    terminals = dict(ir.terminals)
    notes = list(ir.notes)
    for name, sub in subs.items():
        if name in ir.rules or name in ir.terminals:
            raise GrammarError(f"sub-grammar {name!r} clashes with a rule or terminal of the grammar", rule=name)
        if sub.kind == "regex":
            terminals[name] = TerminalDef(name, sub.tree)
            continue
        if sub.kind == "recognizer":
            terminals[name] = TerminalDef(name, None, automaton=_explore(sub, name))
            notes.append(f"sub-grammar {name!r}: a custom recognizer, its automaton explored at compile time")
            continue
        if sub.kind not in ("lark", "gbnf", "yacc", "json_schema"):
            raise GrammarError(f"a {sub.kind} constraint cannot be embedded in a grammar yet", rule=name)
        inner = sub.ir
        if inner.lex_mode == "chars" and ir.lex_mode != "chars":
            from .lexemes import merge_lexemes

            inner = merge_lexemes(inner)[0]
        if set(inner.ignore) and {str(inner.terminals[i].node) for i in inner.ignore} != {
            str(ir.terminals[i].node) for i in ir.ignore
        }:
            raise GrammarError(
                f"sub-grammar {name!r} ignores terminals ({', '.join(inner.ignore)}) that the host grammar does "
                "not: ignored terminals apply to the whole grammar, so it cannot be embedded", rule=name)
        names = {n: f"{name}::{n}" for n in [*inner.rules, *inner.terminals]}
        for n, r in inner.rules.items():
            rules[names[n]] = RuleDef(names[n], rename_refs(r.body, names), None)
        for n, t in inner.terminals.items():
            if n in inner.ignore:
                continue  # the host's identical ignored terminals cover them
            terminals[names[n]] = replace(t, name=names[n])
        rules[name] = RuleDef(name, Ref(names[inner.start]), None)
        notes.append(f"sub-grammar {name!r}: {sub.kind}")
        notes.extend(f"sub-grammar {name!r}: relaxed at {ptr or '/'}: {what}" for ptr, what in sub.relaxed)
    return replace(ir, rules=rules, terminals=terminals, notes=notes)
