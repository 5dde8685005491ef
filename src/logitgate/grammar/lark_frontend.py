"""Lark grammars -> :class:`~logitgate.grammar.ir.GrammarIR`.

Lark's own grammar loader reads the text (``lark.load_grammar.GrammarBuilder``, then
``Grammar.compile``: the two calls ``lark.Lark`` itself makes, without building a parser, which
would cost about twice as much). Everything Lark resolves is therefore supported exactly as Lark
reads it: EBNF operators (``? * + [..] ~ m..n``), templates, ``?rule`` / ``_rule`` / ``!rule``,
aliases, ``%import`` of Lark's bundled grammars (``common``, ``unicode``, ...) and of local files
(searched in ``import_paths``, then relative to the current directory), ``%override``,
``%extend``, ``%ignore``, terminal composition (``SIGNED_NUMBER: ["+"|"-"] NUMBER``), terminal
priorities and regex flags (``i m s x u``).

Mapping: each rule becomes an ``Alt`` of ``Seq`` of ``Ref`` (``Empty`` for an empty expansion),
with Lark's generated helper rules (``__start_star_0``, template instances) kept under Lark's
names; each terminal becomes a :class:`TerminalDef` whose regex is parsed by
:mod:`logitgate.regex.parser` (``literal`` set for plain strings without flags).

Not supported (:class:`~logitgate.errors.GrammarError` naming the terminal or rule):

* ``%declare``\\ d terminals used by the grammar: they have no pattern and come from a postlexer
  (Python's ``_INDENT``/``_DEDENT`` from ``lark.indenter``), which constrained decoding cannot run.
* Regex constructs a finite automaton cannot express: lookarounds, backreferences, word
  boundaries, ... (see :mod:`logitgate.regex.parser`). One exception: the string terminal of
  Lark's ``common.lark`` (``ESCAPED_STRING``, lookbehind-based) is replaced by an equivalent
  lookaround-free regex (noted in ``GrammarIR.notes``).

Semantics that differ from Lark's (recorded in ``GrammarIR.notes``): rule priorities
(``rule.2:``) only pick among parse trees and are ignored; a terminal whose regex has a lazy
quantifier (``/\\/\\*(.|\\n)*?\\*\\//``) is marked ``lazy`` (the lexeme ends at its first match, as
with Python's backtracking ``re.match``); other terminals use longest match.
"""
from __future__ import annotations

import os
import re
from typing import Any, Sequence

from ..errors import GrammarError, GrammarWarning, RegexError
from ..regex.parser import parse as parse_regex
from .ir import Alt, Empty, Expr, GrammarIR, Ref, RuleDef, Seq, TerminalDef

__all__ = ["parse_lark"]

# Lark's regex flags (``/.../imslux``) as Python ``re`` flags. ``l`` is re.LOCALE, which neither
# Python (for str patterns) nor logitgate accepts: the regex parser rejects it with a message.
_FLAGS = {
    "i": re.IGNORECASE,
    "m": re.MULTILINE,
    "s": re.DOTALL,
    "x": re.VERBOSE,
    "u": re.UNICODE,
    "l": re.LOCALE,
}

# common.lark: ESCAPED_STRING: "\"" _STRING_ESC_INNER "\"" compiles to this (with either quote).
# Lark matches it with re.match: the lexeme ends at the first quote preceded by an even run of
# backslashes, which is exactly the prefix-free language of the replacement.
_ESC_STRING = {
    q + ".*?(?<!\\\\)(\\\\\\\\)*?" + q: q + "(?:[^" + q + "\\\\\\n]|\\\\.)*" + q for q in "\"'"
}

_DEF_RE = re.compile(r"^[ \t]*[?!]?([A-Za-z_]\w*)(?:\{[^}\n]*\})?(?:\.-?\d+)?[ \t]*:", re.M)
_IMPORT_RE = re.compile(
    r"^[ \t]*%import[ \t]+(\.?[\w.]+)[ \t]*(?:->[ \t]*(\w+)|\(([^)]*)\))?", re.M
)
_POS_RE = re.compile(r",? at line (\d+),? column (\d+)")
_USED_RE = re.compile(r"'([^']+)' used but not defined \(in (?:rule|terminal) ([^)\s]+)\)")


def parse_lark(
    text: str,
    *,
    start: str = "start",
    import_paths: Sequence[str | os.PathLike[str]] = (),
    external_names: Sequence[str] = (),
) -> GrammarIR:
    """Read a Lark grammar with Lark's own loader and return its :class:`GrammarIR`.

    ``start``: the start rule. ``import_paths``: folders searched by ``%import`` (relative or
    not) before Lark's bundled grammars. ``external_names``: ``%declare``-d terminals that are
    supplied from outside (sub-grammars, see ``Grammar.from_lark(subgrammars=...)``): they are
    left as references. Raises :class:`GrammarError` for grammars Lark rejects and for the
    unsupported features listed in the module docstring.
    """
    try:
        from lark import exceptions as lark_exc
        from lark.load_grammar import GrammarBuilder
    except ImportError as e:
        raise ImportError(
            "reading Lark grammars needs the lark package: pip install 'logitgate[lark]'"
        ) from e

    paths = [os.fspath(p) for p in import_paths]
    # Lark resolves a relative %import against the folder of the grammar's file name, and for
    # text without one against __main__'s folder: use the first import path (else the current
    # directory) instead.
    source_name = os.path.join(paths[0] if paths else os.curdir, "<grammar>")
    defs = _definitions(text)

    class _Builder(GrammarBuilder):  # type: ignore[misc,valid-type]
        def do_import(self, dotted_path: Any, *args: Any, **kwargs: Any) -> None:
            try:
                super().do_import(dotted_path, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - every failure is about this %import
                raise _ImportFailed(tuple(dotted_path), e) from e

    try:
        builder = _Builder(False, paths)
        builder.load_grammar(text, source_name)
        terminals, rules, ignore = builder.build().compile([start], set())
    except _ImportFailed as f:
        raise _import_error(f, text, paths) from f.error
    except lark_exc.UnexpectedInput as e:
        line, col = getattr(e, "line", None), getattr(e, "column", None)
        token = getattr(e, "token", None)
        what = f"unexpected {str(token)!r}" if token is not None else str(e).split(" at line ")[0]
        reason = f"invalid Lark grammar: {what}"
        raise _error_at_line(reason, text, line, col) from e
    except lark_exc.LarkError as e:
        raise _lark_error(e, text, defs) from e
    except Exception as e:  # noqa: BLE001 - Lark's loader fails with asserts and AttributeErrors too
        raise GrammarError(f"Lark could not load the grammar ({type(e).__name__}: {e})") from e

    notes: list[str] = []
    external = set(external_names)
    patterned = {str(t.name) for t in terminals}
    rule_bodies: dict[str, list[Expr]] = {}
    prioritized: dict[str, int] = {}
    declared: list[str] = []
    for r in rules:
        items: list[Ref] = []
        for sym in r.expansion:
            name = str(sym.name)  # Lark's names are Token (a str subclass): keep plain str
            if sym.is_term and name not in patterned and name not in declared and name not in external:
                declared.append(name)
            items.append(Ref(name))
        origin = str(r.origin.name)
        rule_bodies.setdefault(origin, []).append(Seq(tuple(items)) if items else Empty())
        prio = getattr(r.options, "priority", None)
        if prio is not None:
            prioritized.setdefault(origin, prio)

    if declared:
        names = ", ".join(declared)
        m = re.search(r"^[ \t]*%declare\b[^\n]*\b" + re.escape(declared[0]) + r"\b", text, re.M)
        reason = (
            f"terminal{'s' if len(declared) > 1 else ''} {names} "
            f"{'are' if len(declared) > 1 else 'is'} declared without a pattern (%declare): "
            "such terminals come from a postlexer (e.g. Python's indentation tokens "
            "_INDENT/_DEDENT from lark's Indenter), which constrained decoding cannot run"
        )
        if m:
            raise GrammarError.at(reason, text, m.start(), rule=declared[0])
        raise GrammarError(reason, rule=declared[0])
    if start not in rule_bodies:
        raise GrammarError(f"start rule {start!r} is not defined", rule=start)

    term_defs: dict[str, TerminalDef] = {}
    lazy_names: list[str] = []
    for t in terminals:
        td = _terminal(t, text, defs, notes)
        term_defs[td.name] = td
        if td.lazy:
            lazy_names.append(td.name)

    clash = sorted(set(rule_bodies) & set(term_defs))
    if clash:  # Lark keeps rules lowercase and terminals uppercase; never expected
        raise GrammarError(f"names used for both a rule and a terminal: {', '.join(clash)}")

    rule_defs = {
        n: RuleDef(n, Alt(tuple(bodies)), _line_of(text, defs, n)) for n, bodies in rule_bodies.items()
    }
    # Lark's compile drops rules the start cannot reach: name those this text defines
    unused = [n for n, d in builder._definitions.items()
              if not d.is_term and not d.params and n in defs and str(n) not in rule_bodies]
    if unused:
        import warnings

        where = ", ".join(f"{n} (line {_line_of(text, defs, n)})" for n in unused)
        msg = f"unused rules (not reachable from {start!r}), dropped: {where}"
        notes.append(msg)
        warnings.warn(msg, GrammarWarning, stacklevel=4)

    ignore_names: list[str] = []
    for n in map(str, ignore):
        if n in term_defs:
            if n not in ignore_names:
                ignore_names.append(n)
        else:
            notes.append(f"%ignore {n}: declared without a pattern, dropped")

    if prioritized:
        listed = ", ".join(f"{n}.{p}" for n, p in prioritized.items())
        notes.append(f"rule priorities ignored (they only choose among parse trees): {listed}")
    if lazy_names:
        notes.append(
            "lazy terminals (regex with a lazy quantifier; lexeme ends at its first match): "
            + ", ".join(lazy_names)
        )

    return GrammarIR(
        rules=rule_defs,
        terminals=term_defs,
        start=start,
        ignore=tuple(ignore_names),
        lex_mode="contextual",
        source=text,
        kind="lark",
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Terminals
# ---------------------------------------------------------------------------------------------


def _terminal(t: Any, text: str, defs: dict[str, list[int]], notes: list[str]) -> TerminalDef:
    pattern = t.pattern
    value: str = pattern.value
    flags = set(pattern.flags)
    name = str(t.name)
    line = _line_of(text, defs, name)
    literal: str | None = None
    lazy = False
    if pattern.type == "str":
        regex, re_flags = re.escape(value), 0
        if flags - {"i"}:
            raise _terminal_error(name, f"unsupported flags {''.join(sorted(flags))!r} on a string", text, defs)
        if "i" in flags:
            re_flags = re.IGNORECASE
        else:
            literal = value
    else:
        unknown = flags - set(_FLAGS)
        if unknown:
            raise _terminal_error(
                name, f"unknown Lark regex flag(s) {''.join(sorted(unknown))!r}", text, defs
            )
        re_flags = 0
        for f in flags:
            re_flags |= _FLAGS[f]
        regex = value
        if not flags and value in _ESC_STRING:
            regex = _ESC_STRING[value]
            notes.append(
                f"terminal {name}: Lark's lookbehind-based string regex replaced by the "
                f"equivalent /{regex}/"
            )
        else:
            lazy = _has_lazy_quantifier(value, bool(re_flags & re.VERBOSE))
    try:
        node = parse_regex(regex, re_flags)
    except RegexError as e:
        shown = f"/{value}/{''.join(sorted(flags))}" if pattern.type == "re" else repr(value)
        raise _terminal_error(
            name,
            f"{e.reason} (in {shown}); logitgate compiles terminals to finite automata",
            text,
            defs,
        ) from e
    return TerminalDef(name, node, literal=literal, priority=int(t.priority), lazy=lazy, line=line)


def _has_lazy_quantifier(pattern: str, verbose: bool) -> bool:
    """Whether ``pattern`` (Python ``re`` syntax) has a lazy quantifier ``*? +? ?? {m,n}?``."""
    i, n = 0, len(pattern)
    prev = ""  # the kind of the previous token: "open" for '(', "quant" for a quantifier
    while i < n:
        c = pattern[i]
        if c == "\\":
            i, prev = i + 2, "atom"
            continue
        if c == "[":
            i += 1
            if pattern[i : i + 1] == "^":
                i += 1
            if pattern[i : i + 1] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i, prev = i + 1, "atom"
            continue
        if pattern.startswith("(?#", i):
            end = pattern.find(")", i)
            i = n if end < 0 else end + 1
            continue
        if verbose and c == "#":
            end = pattern.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if verbose and c.isspace():
            i += 1
            continue
        if c == "?" and prev == "quant":
            return True
        if c in "*+" or (c == "?" and prev != "open"):
            prev = "quant"
        elif c == "{":
            m = re.match(r"\{\d*(?:,\d*)?\}", pattern[i:])
            if m and m.group() not in ("{}", "{,}") and prev not in ("open", ""):
                i, prev = i + m.end(), "quant"
                continue
            prev = "atom"
        else:
            prev = "open" if c == "(" else "atom"
        i += 1
    return False


def _terminal_error(name: str, reason: str, text: str, defs: dict[str, list[int]]) -> GrammarError:
    reason = f"terminal {name}: {reason}"
    offsets = defs.get(name)
    if offsets:
        return GrammarError.at(reason, text, offsets[0], rule=name)
    return GrammarError(reason, rule=name)


# ---------------------------------------------------------------------------------------------
# Positions and Lark's errors
# ---------------------------------------------------------------------------------------------


def _definitions(text: str) -> dict[str, list[int]]:
    """Offsets of each name's definitions (``name:``, ``NAME.2:``, ``?name{x}:``) and imports."""
    defs: dict[str, list[int]] = {}
    for m in _DEF_RE.finditer(text):
        defs.setdefault(m.group(1), []).append(m.start(1))
    for m in _IMPORT_RE.finditer(text):
        names = [m.group(2) or m.group(1).rsplit(".", 1)[-1]]
        if m.group(3):
            names = [s.strip() for s in m.group(3).split(",") if s.strip()]
        for nm in names:
            defs.setdefault(nm, []).append(m.start())
    return defs


def _line_of(text: str, defs: dict[str, list[int]], name: str) -> int | None:
    offsets = defs.get(name)
    return text.count("\n", 0, offsets[0]) + 1 if offsets else None


def _error_at_line(reason: str, text: str, line: int | None, column: int | None) -> GrammarError:
    lines = text.split("\n")
    if line is None or not 1 <= line <= len(lines):
        return GrammarError(reason)
    return GrammarError(reason, line=line, column=column, source_line=lines[line - 1])


def _lark_error(e: Exception, text: str, defs: dict[str, list[int]]) -> GrammarError:
    """Lark's GrammarError -> ours, with the position when Lark gives or implies one."""
    if len(e.args) == 2 and isinstance(e.args[1], SyntaxError):  # eval_escaping's (literal, error)
        reason = f"invalid escape in the literal {e.args[0]!r}: {e.args[1].msg}"
        at = _find_literal(text, str(e.args[0]))
        return GrammarError.at(reason, text, at) if at is not None else GrammarError(reason)
    head = str(e).split("\n\n", 1)[0].strip()
    m = _POS_RE.search(head)
    if m:
        reason = head[: m.start()] + head[m.end() :]
        reason = re.sub(r"\s+in \S+:\s*$", "", reason).rstrip(" :,")
        return _error_at_line(f"invalid Lark grammar: {reason}", text, int(m.group(1)), int(m.group(2)))
    m = _USED_RE.search(head)
    if m:
        used, container = m.groups()
        offsets = defs.get(container)
        if offsets:
            start = offsets[0]
            later = [o for offs in defs.values() for o in offs if o > start]
            end = min(later, default=len(text))
            use = re.compile(r"(?<![\w\"'/%])" + re.escape(used) + r"(?!\w)").search(text, start, end)
            if use and use.start() != start:
                return GrammarError.at(head, text, use.start(), rule=used)
            return GrammarError.at(head, text, start, rule=used)
        return GrammarError(head, rule=used)
    m = re.search(r"'([^']+)' defined more than once", head)
    if m and len(defs.get(m.group(1), ())) > 1:
        return GrammarError.at(head, text, defs[m.group(1)][1], rule=m.group(1))
    return _located(head, text, defs)


def _find_literal(text: str, body: str) -> int | None:
    """Offset of a quoted literal or regex whose body is ``body`` (None when not found)."""
    for q in "\"/":
        at = text.find(q + body + q)
        if at >= 0:
            return at
    at = text.find(body) if body else -1
    return at if at >= 0 else None


def _located(head: str, text: str, defs: dict[str, list[int]]) -> GrammarError:
    """A Lark error without a position, placed at what its message names: the rule or terminal
    used inside a terminal, the rule or terminal it is about, the literal, or the statement."""
    m = re.search(r"NonTerminal\('([^']+)'\) in (\w+)", head)
    if m:  # a rule used inside a terminal (or inside an inline %ignore pattern)
        used, container = m.groups()
        if container in defs:
            start = defs[container][0]
        else:
            ign = re.compile(r"^[ \t]*%ignore\b[^\n]*\b" + re.escape(used) + r"\b", re.M).search(text)
            ign = ign or re.compile(r"^[ \t]*%ignore", re.M).search(text)
            start = ign.start() if ign else None
        if start is not None:
            end = text.find("\n", start)
            use = re.compile(r"(?<![\w\"'/%])" + re.escape(used) + r"(?!\w)").search(
                text, start + 1, len(text) if end < 0 else end)
            return GrammarError.at(head, text, use.start() if use else start, rule=used)
    m = re.search(r"Rules defined twice:\s*\*\s*<(\w+)\s*:", head)
    names = [m.group(1)] if m else []
    names += [w for w in re.findall(r"[A-Za-z_]\w*", head) if w in defs]
    for name in names:
        if name in defs:
            return GrammarError.at(head, text, defs[name][0], rule=name)
    m = re.search(r"used but not defined: (\w+)", head)
    if m:  # the first use of the undefined name
        use = re.compile(r"(?<![\w\"'/%])" + re.escape(m.group(1)) + r"(?!\w)").search(text)
        if use:
            return GrammarError.at(head, text, use.start(), rule=m.group(1))
        return GrammarError(head, rule=m.group(1))
    m = re.search(r"grammar `([^`]+)`|import '[^']*' from '([^']+)'", head)
    if m:
        imp = re.compile(r"^[ \t]*%import[ \t]+\.?" + re.escape(m.group(1) or m.group(2).rsplit(".", 1)[0]),
                         re.M).search(text)
        if imp:
            return GrammarError.at(head, text, imp.start())
    m = re.search(r"`'(.*)'`|\((.+)\)$", head)
    if m:
        at = _find_literal(text, m.group(1) if m.group(1) is not None else m.group(2))
        if at is not None:
            return GrammarError.at(head, text, at)
    for word, pattern in (("ignore", r"^[ \t]*%ignore\b"), ("?rule", r"^[ \t]*\?_"), ("->", r"->")):
        if word in head.lower():
            hit = re.compile(pattern, re.M).search(text)
            if hit:
                return GrammarError.at(head, text, hit.start())
    return GrammarError(head)


class _ImportFailed(Exception):
    def __init__(self, dotted: tuple[str, ...], error: Exception) -> None:
        super().__init__(dotted, error)
        self.dotted = dotted
        self.error = error


def _import_error(f: _ImportFailed, text: str, paths: list[str]) -> GrammarError:
    dotted = ".".join(f.dotted)
    e = f.error
    if isinstance(e, OSError):
        where = f"import_paths {paths}" if paths else "the current directory (no import_paths)"
        reason = (
            f"%import {dotted}: cannot find {getattr(e, 'filename', None) or dotted + '.lark'} "
            f"in {where} nor among Lark's bundled grammars"
        )
    else:
        msg = str(e).split("\n\n", 1)[0].strip() or type(e).__name__
        reason = f"%import {dotted}: the imported grammar is invalid: {msg}"
    m = re.search(r"^[ \t]*%import[ \t]+\.?" + re.escape(dotted) + r"\b", text, re.M)
    if m:
        return GrammarError.at(reason, text, m.start())
    return GrammarError(reason)
