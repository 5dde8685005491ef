"""``Grammar``: what the output must look like, independent of any tokenizer.

A ``Grammar`` is cheap, immutable and hashable; its source is checked when it is created, so a bad
regex fails here with its offset. Grammars built from text are cached (``GRAMMAR_CACHE_SIZE``).
``logitgate.compile(grammar, tokenizer)`` turns it into a ``CompiledGrammar`` for one vocabulary.
"""
from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from dataclasses import dataclass, field

from ..errors import GrammarLimitError, RegexError, RegexLimitError, SchemaLimitError
from ..limits import check_source_size, compile_deadline, deep_recursion, get_limits
from ..regex.ast import Node
from ..regex.parser import parse as _parse_regex
from .ir import GrammarIR

__all__ = ["Grammar", "GRAMMAR_CACHE_SIZE", "clear_grammar_cache"]

GRAMMAR_CACHE_SIZE = 128
"""How many grammars built from a text the process-wide cache keeps (least recently used are
dropped): asking again for a grammar already built from the same source, options and caps
(``Limits``) returns the same ``Grammar`` without parsing or translating again."""
_grammars: "OrderedDict[tuple, Grammar]" = OrderedDict()
_grammars_lock = threading.Lock()


def clear_grammar_cache() -> None:
    """Drop every cached grammar (``logitgate.clear_cache()`` does too)."""
    with _grammars_lock:
        _grammars.clear()


def _cached(key: tuple | None, build: "Callable[[], Grammar]") -> "Grammar":
    """The grammar ``build()`` gives, kept by ``key`` and the caps in force (None: not cached,
    as for inputs read from elsewhere than the arguments). Errors are not kept: a bad source
    raises every time. Thread-safe: two threads may build the same grammar once each."""
    if key is None:
        return build()
    full = (key, get_limits())
    with _grammars_lock:
        hit = _grammars.get(full)
        if hit is not None:
            _grammars.move_to_end(full)
            return hit
    grammar = build()
    with _grammars_lock:
        _grammars[full] = grammar
        while len(_grammars) > GRAMMAR_CACHE_SIZE:
            _grammars.popitem(last=False)
    return grammar

_ALLOWED_RE_FLAGS = re.IGNORECASE | re.DOTALL | re.VERBOSE | re.ASCII | re.MULTILINE | re.UNICODE


@contextlib.contextmanager
def _no_recursion_error(what: str) -> Iterator[None]:
    """Turn a RecursionError of a recursive front end into a GrammarError (a backstop: inputs
    nested this deeply are refused, never a crash)."""
    try:
        yield
    except RecursionError:
        from ..errors import GrammarError

        raise GrammarError(f"the {what} nests too deeply to compile (rules or groups within each other, "
                           f"or a long chain of rules each referring to the next)") from None


@dataclass(frozen=True)
class Grammar:
    """A constraint on the generated text. Build one with a ``from_*`` constructor."""

    kind: str
    source: str
    flags: int = 0
    options: tuple = ()
    _tree: Node | None = field(default=None, compare=False, repr=False, hash=False)
    _ir: GrammarIR | None = field(default=None, compare=False, repr=False, hash=False)
    _cfg: Any = field(default=None, compare=False, repr=False, hash=False)
    _relaxed: tuple = field(default=(), compare=False, repr=False, hash=False)
    _rec: Any = field(default=None, compare=False, repr=False, hash=False)

    @classmethod
    def from_regex(cls, pattern: str, flags: int | re.RegexFlag = 0) -> "Grammar":
        """The output must fully match ``pattern`` (Python ``re`` syntax and semantics, as
        ``re.fullmatch(pattern, text, flags)``; see ``logitgate.regex.parser`` for what is supported).

        Accepts a compiled ``re.Pattern`` too (its pattern and flags are used). Raises
        ``RegexError`` with the offset of the first unsupported or malformed construct.
        """
        if isinstance(pattern, re.Pattern):
            if isinstance(pattern.pattern, bytes):
                raise RegexError("bytes patterns are not supported; pass a str pattern")
            flags = int(flags) | (pattern.flags & _ALLOWED_RE_FLAGS)
            pattern = pattern.pattern
        if not isinstance(pattern, str):
            raise RegexError(f"a regex must be a str, not {type(pattern).__name__}")
        check_source_size(pattern, "regex", RegexLimitError)
        flags = int(flags)

        def build() -> Grammar:
            with compile_deadline():
                tree = _parse_regex(pattern, flags)
            return cls("regex", pattern, flags, _tree=tree)

        return _cached(("regex", pattern, flags), build)

    @classmethod
    def from_lark(cls, text: str, *, start: str = "start", import_paths: Sequence[str] = (),
                  subgrammars: Mapping[str, "Grammar"] | None = None) -> "Grammar":
        """A grammar in Lark syntax (read by Lark's own loader: EBNF, templates, ``%ignore``,
        ``%import common.*``, terminal priorities). Lexing is contextual and greedy: at each
        position only terminals the parser can accept (and ignored ones) compete; the longest match
        wins, then the higher priority, then literals over regexes. Needs ``pip install 'logitgate[lark]'``.

        ``subgrammars``: constraints used by name; declare each in the grammar with
        ``%declare NAME`` (e.g. ``%declare EMAIL`` with ``subgrammars={"EMAIL": Grammar.from_regex(...)}``;
        a grammar works too, see ``logitgate.grammar.compose``). Raises ``GrammarError`` with line
        and column."""
        from .lark_frontend import parse_lark

        paths = tuple(str(p) for p in import_paths)
        subs = dict(subgrammars or {})
        for name in subs:
            if not name.lstrip("_").isupper():
                from ..errors import GrammarError

                raise GrammarError(f"sub-grammar name {name!r}: in Lark, name it in UPPERCASE and declare it with "
                                   f"'%declare {name.upper()}' (Lark only lets terminals be declared)", rule=name)
        if isinstance(text, str):
            check_source_size(text, "grammar", GrammarLimitError)

        def build() -> Grammar:
            with compile_deadline(), _no_recursion_error("grammar"):
                ir = parse_lark(text, start=start, import_paths=paths, external_names=tuple(subs))
                return cls._composed("lark", text, (("start", start), ("import_paths", paths)), ir, subs)

        # files imported from import_paths may change between calls: those are read every time
        plain = isinstance(text, str) and isinstance(start, str) and not paths and not subs
        return _cached(("lark", text, start) if plain else None, build)

    @classmethod
    def from_gbnf(cls, text: str, *, start: str = "root", lexing: str = "exact",
                  subgrammars: Mapping[str, "Grammar"] | None = None) -> "Grammar":
        """A llama.cpp GBNF grammar.

        ``lexing="exact"`` (default): the language is exactly the grammar's, character by
        character; regular parts are merged into lexemes only where that provably cannot change
        it (the rest is parsed a character at a time, which is slower). ``lexing="greedy"``: every
        regular rule and literal becomes a lexeme of a greedy lexer, as llguidance does — faster,
        but texts where a lexeme must end before a byte that could extend it are lost (e.g. with
        ``x ::= [a-z]+ ws`` followed by ``"\\n"``, ``ws`` swallows the newline).
        ``subgrammars``: constraints referred to by rule name (a name the grammar uses but does
        not define). Raises ``GrammarError`` with line and column."""
        from .gbnf import parse_gbnf

        if lexing not in ("exact", "greedy"):
            raise ValueError(f"lexing must be 'exact' or 'greedy', not {lexing!r}")
        options: tuple = (("start", start),) if lexing == "exact" else (("start", start), ("lexing", lexing))
        if isinstance(text, str):
            check_source_size(text, "grammar", GrammarLimitError)

        def build() -> Grammar:
            with compile_deadline(), _no_recursion_error("grammar"):
                return cls._composed("gbnf", text, options, parse_gbnf(text, start=start), dict(subgrammars or {}))

        plain = isinstance(text, str) and isinstance(start, str) and not subgrammars
        return _cached(("gbnf", text, options) if plain else None, build)

    @classmethod
    def from_yacc(cls, text: str, *, subgrammars: Mapping[str, "Grammar"] | None = None) -> "Grammar":
        """A grammar in the yacc-like format with inline lexemes (``"keyword"``, ``"/regex/"``, the
        ``SKIP`` rule, ``%start``) of AICI. One lexer for all terminals (longest match, keywords
        before regexes), as in C; the text starts as if after a newline, as in AICI.
        ``subgrammars``: constraints referred to by rule name. Raises ``GrammarError`` with line
        and column."""
        from .yacc import parse_yacc

        if isinstance(text, str):
            check_source_size(text, "grammar", GrammarLimitError)

        def build() -> Grammar:
            with compile_deadline(), _no_recursion_error("grammar"):
                return cls._composed("yacc", text, (), parse_yacc(text), dict(subgrammars or {}))

        return _cached(("yacc", text) if isinstance(text, str) and not subgrammars else None, build)

    @classmethod
    def from_json_schema(cls, schema: Any, *, whitespace: str = "compact", property_order: str = "schema",
                         strict: bool = True, registry: Mapping[str, Any] | None = None) -> "Grammar":
        """JSON documents valid under ``schema``: a dict, a JSON text, or a Pydantic model class
        (drafts 4 to 2020-12, from ``$schema``; default 2020-12).

        ``whitespace``: ``"compact"`` (no whitespace, as ``json.dumps(separators=(",", ":"))``),
        ``"pretty"`` (``json.dumps(indent=2)`` layout) or ``"flexible"`` (any JSON whitespace
        between tokens, at most 64 characters per run, so a model cannot loop on spaces).
        ``property_order``: ``"schema"`` (named properties in the schema's order, then any others)
        or ``"any"`` (any order; objects with more than 8 named properties may repeat an optional
        one, see the docs). ``strict``: raise ``SchemaError`` listing every construct that cannot be
        enforced exactly (with its JSON pointer); with ``strict=False`` such constructs are relaxed
        to an over-approximation and listed in ``Grammar.relaxed``. ``registry``: documents for
        remote ``$ref``s, ``{uri: schema}``. A schema no document satisfies raises ``SchemaError``.
        The same schema (text, or a plain dict by its ``repr``) with the same options and caps
        returns the cached ``Grammar`` (see ``GRAMMAR_CACHE_SIZE``).
        """
        if isinstance(schema, (str, bytes)):
            check_source_size(schema, "schema", SchemaLimitError)
        # the cache knows a schema by its text, or by the repr of a plain dict/list/bool (which
        # tells 1 from "1" and 1.0 from 1, and changes when the dict is changed); a Pydantic model
        # or a referencing.Registry is translated every time
        try:
            if isinstance(schema, (str, bytes)):
                source_key: Any = schema
            elif type(schema) in (dict, list, bool):
                source_key = ("repr", repr(schema))
            else:
                source_key = None
            reg_key = None if registry is None else repr(registry) if type(registry) is dict else False
        except RecursionError:  # nested deeper than repr goes: translated (and its depth checked) uncached
            source_key = reg_key = None
        key = None if source_key is None or reg_key is False else \
            ("json_schema", source_key, whitespace, property_order, bool(strict), reg_key)
        return _cached(key, lambda: cls._json_schema(schema, whitespace, property_order, strict, registry))

    @classmethod
    def _json_schema(cls, schema: Any, whitespace: str, property_order: str, strict: bool,
                     registry: Mapping[str, Any] | None) -> "Grammar":
        """``from_json_schema`` without the cache."""
        from ..json_schema import canonical_json

        lim = get_limits()
        try:
            # recursion per schema level is bounded by max_schema_depth (checked before any work)
            with compile_deadline(), deep_recursion(1000 + 40 * lim.max_schema_depth):
                loaded, tr, cfg, lexer = cls._translate_schema(schema, whitespace, property_order, strict, registry)
                source = canonical_json(loaded.root)
                reg = canonical_json({str(k): v for k, v in dict(registry).items()}) if registry else None
        except RecursionError:
            raise SchemaLimitError("the schema recurses too deeply to translate (nesting or a chain of $refs)",
                                   limit="max_schema_depth", value=lim.max_schema_depth, pointer="") from None
        options: tuple = (("whitespace", whitespace), ("property_order", property_order), ("strict", bool(strict)))
        if registry:
            options += (("registry", reg),)
        return cls("json_schema", source, 0, options, _ir=tr.ir, _cfg=(cfg, lexer),
                   _relaxed=tuple(tr.relaxed))

    @staticmethod
    def _translate_schema(schema: Any, whitespace: str, property_order: str, strict: bool, registry: Any) -> tuple:
        """``(loaded, translation, cfg, lexer)``, relaxing string constraints level by level while
        the lexer is over ``Limits.max_json_lexer_states``; long strings lexed in pieces unless
        another lexeme could run past their first piece where it is expected
        (``json_schema.translate.piece_conflicts``): when those are unconstrained or length-only
        strings, they are lexed in pieces too (a second translation), else the long strings are
        whole lexemes."""
        from ..errors import GrammarError, LimitError, SchemaError, SchemaLimitError
        from ..json_schema import schema_to_ir
        from ..json_schema.translate import MAX_LEVEL, piece_conflicts
        from .cfg import lower
        from .lexer import build_lexer

        level, pieces, split = 0, True, False
        while True:
            loaded, tr = schema_to_ir(schema, whitespace=whitespace, property_order=property_order, strict=strict,
                                      registry=registry, level=level, pieces=pieces, split=split)
            try:
                cfg = lower(tr.ir, warn=False)
            except LimitError as e:
                raise _as_schema_limit(e) from None
            except GrammarError as e:
                if "language is empty" in e.reason:
                    raise SchemaError("no JSON document satisfies this schema", pointer="") from None
                raise
            try:
                lexer = build_lexer(cfg, limit="max_json_lexer_states")
            except LimitError as e:
                if e.limit != "max_json_lexer_states":
                    raise _as_schema_limit(e) from None
                if pieces and not split and tr.split_terms:
                    split = True  # the other long strings in pieces too: a smaller lexer
                    continue
                if level < MAX_LEVEL:
                    level += 1
                    continue
                raise SchemaLimitError("the schema's string and number constraints need too large a lexer "
                                       f"(more than {e.value} states, even with every relaxation level)",
                                       limit=e.limit, value=e.value, pointer="") from None
            if pieces:
                conflicts = piece_conflicts(tr, cfg, lexer)
                if conflicts:
                    if not split and set(conflicts) <= tr.split_terms:
                        split = True  # the strings expected there are lexed in pieces too
                    else:
                        pieces = False  # long strings as whole lexemes: past the level's cap, relaxed (reported)
                    continue
            return loaded, tr, cfg, lexer

    @classmethod
    def from_recognizer(cls, recognizer: Any, *, name: str | None = None) -> "Grammar":
        """A constraint written in Python (``logitgate.recognizers``): a FunctionalRecognizer
        (``initial``, ``append``, ``byte_allowed``, ``special_allowed``), a CharRecognizer
        (``initial``, ``add_char``, ``allowed_chars``, ``can_end``) or a StringRecognizer
        (``initial``, ``append``, ``allowed``, ``special_allowed``). States must be immutable and
        hashable. ``name`` labels it in reprs (default: its class). Each recognizer object is its
        own constraint for the compile cache. Raises ``TypeError`` for an object that is none of these."""
        from ..recognizers import as_functional

        functional = as_functional(recognizer)
        label = name or f"{type(recognizer).__module__}.{type(recognizer).__qualname__}"
        return cls("recognizer", label, 0, (("object", id(recognizer)),), _rec=(recognizer, functional))

    @classmethod
    def json(cls, *, whitespace: str = "compact") -> "Grammar":
        """Any JSON value (``from_json_schema(True)``)."""
        return cls.from_json_schema(True, whitespace=whitespace)

    @property
    def relaxed(self) -> list[tuple[str, str]]:
        """For ``from_json_schema(..., strict=False)``: ``(JSON pointer, what was relaxed)`` for
        every construct compiled as an over-approximation."""
        return list(self._relaxed)

    @classmethod
    def _composed(cls, kind: str, text: str, options: tuple, ir: GrammarIR, subs: dict) -> "Grammar":
        for name, sub in subs.items():
            if not isinstance(sub, Grammar):
                raise TypeError(f"subgrammars[{name!r}] must be a logitgate.Grammar, not {type(sub).__name__}")
        if subs:
            from .compose import embed

            ir = embed(ir, subs)
            options = options + (("subgrammars", tuple(sorted((n, g.cache_key) for n, g in subs.items()))),)
        return cls(kind, text, 0, options, _ir=ir)

    @property
    def notes(self) -> list[str]:
        """What the front end read but does not need for the language, or rewrote, each named
        (e.g. Lark rule priorities and yacc precedence declarations, which only choose among
        parse trees; a lookbehind string terminal replaced by an equivalent automaton)."""
        return list(self._ir.notes) if self._ir is not None else []

    @property
    def ir(self) -> GrammarIR:
        """The grammar's intermediate representation (context-free grammars only)."""
        if self._ir is None:
            raise ValueError(f"a {self.kind} grammar has no grammar IR")
        return self._ir

    @property
    def cache_key(self) -> tuple:
        """Identity of the constraint for the compile cache."""
        return (self.kind, self.source, self.flags, self.options)

    @property
    def tree(self) -> Node:
        """The parsed regex syntax tree (regex grammars only)."""
        if self._tree is None:
            raise ValueError(f"a {self.kind} grammar has no regex tree")
        return self._tree


def _as_schema_limit(e: LimitError) -> LimitError:
    """A cap hit while building a schema's grammar, as a ``SchemaLimitError`` (pointer: the schema)."""
    from ..errors import SchemaError, SchemaLimitError

    if isinstance(e, SchemaError):
        return e
    reason = getattr(e, "reason", None) or str(e)
    return SchemaLimitError(f"the schema's grammar is too large ({reason.split(': exceeds Limits.')[0]})",
                            limit=e.limit, value=e.value, pointer="")
