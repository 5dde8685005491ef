"""JSON Schema -> grammar IR.

A schema position is translated as a *conjunction* of subschemas (``allOf`` members, ``$ref``
targets, the branches chosen so far). Combinators are first expanded into a disjunction of such
conjunctions (``anyOf``/``oneOf`` branches, ``if``/``then``/``else``, ``dependentSchemas``), then
each conjunction is split by JSON type and every type is built from the keywords of all members:

* strings, numbers, booleans and null become one lexeme each (a regex terminal: the escape-aware
  language of the string values, the exact decimal range, ...);
* objects and arrays become rules over key and punctuation lexemes.

Each conjunction gets one rule (memoised), so recursive schemas give recursive rules. What cannot
be enforced is collected with its JSON pointer: in strict mode it is an error, otherwise it is
relaxed (an over-approximation) and reported in ``relaxed``.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import RegexError, SchemaError, SchemaLimitError
from ..limits import check_deadline, get_limits
from ..grammar.cfg import literal_node
from ..grammar.ir import (
    Alt,
    Empty,
    Expr,
    GrammarIR,
    Ref,
    Rep,
    RuleDef,
    Seq,
    TerminalDef,
    rename_refs,
)
from ..regex.ast import Automaton, CharClass, Concat, Node, Repeat
from .loader import Loaded, escape_pointer, lookup, lookup_recursive

__all__ = ["MAX_WHITESPACE", "PROPERTY_ORDERS", "WHITESPACE_MODES", "Translation", "build_ir"]

WHITESPACE_MODES = ("compact", "pretty", "flexible")
PROPERTY_ORDERS = ("schema", "any")
MAX_WHITESPACE = 64
"""Longest whitespace run between two tokens with ``whitespace="flexible"``."""
PRETTY_INDENT = 2
PRETTY_MAX_DEPTH = 32
"""With ``whitespace="pretty"``, nesting deeper than this keeps this depth's indentation."""
MAX_ALTERNATIVES = 256
"""Default of ``Limits.max_schema_alternatives``."""
"""Most alternatives one schema position may expand into (anyOf x oneOf x if/then/else ...)."""
MAX_OBJECT_STATES = 4096
MAX_ANY_ORDER_TRACKED = 8
"""With ``property_order="any"``: objects with at most this many properties are exact (each at
most once); bigger ones track only required properties (if at most this many) and let optional
ones repeat."""
MAX_UNIQUE_DOMAIN = 8
MAX_PATTERN_CLASSES = 5
MAX_LEXEME_STATES = 20_000
"""Largest character-level automaton built for one string or number lexeme (pattern and length
together, key classes, ...); beyond it the combination is relaxed and reported."""
PAIRED_STATES = 40_000
"""Per translation, the states of the string automata built by pairing their operands'
minimal DFAs (``automata.boolean.paired``), where one construction over them all exceeds
``MAX_LEXEME_STATES``: such an automaton (a ``format`` and a ``maxLength`` of 255) is large, and
many of them make a lexer that takes too long to build; past the budget they are relaxed. A
failed pairing costs ``MAX_LEXEME_STATES``; translations at a lower level (``build_ir``) pair
nothing."""
MAX_EXACT_LENGTH = 256
PIECE_LENGTH = 64
"""Past ``MAX_EXACT_LENGTH``, a string value with only length bounds is lexed in pieces of this
many code points (``Translator.length_string``): a counter costs lexer states per character."""
MIN_PIECE_LENGTH = 32
"""Shortest pieces a relaxation level may lex long strings in (its cap, when below
``PIECE_LENGTH``); below it, lengths past the cap are relaxed: in pieces of 16 code points most
tokens cross a boundary, and a mask inside one cost about 0.4 ms on tekken (winget's locale
manifest)."""
PIECE_EXPLORE_ROWS = 1_000
PIECE_EXPLORE_RULES = 3_000
"""Parser rows explored at most to tell that no lexeme that runs past a long string's first piece
is expected beside it, and the largest grammar (BNF rules) explored (``piece_conflicts``: tens
of milliseconds at most). A schema's object states multiply along the rows, so a large one
rarely fits; ``json_schema.paths`` decides most of those first."""
_DISJOINT_DEPTH = 3
"""How many property levels down the ``oneOf`` disjointness check compares subschemas."""
MAX_EXISTS = 5
"""Most members one object must have because of negated ``patternProperties``,
``additionalProperties`` or ``propertyNames`` (each doubles the object's states)."""
MAX_CONTAINS = 3
"""Most ``contains`` one array position tracks (their counts multiply its states)."""
MAX_NEGATED_ANY_OF = 64
"""Most alternatives the negation of an ``anyOf`` may expand into (not (A or B) = not A and not B,
each negation a union: one alternative per choice of one part of each)."""
MAX_LEVEL = 6
"""Largest minLength/maxLength enforced exactly (a counter costs states per character)."""

TYPES = ("null", "boolean", "object", "array", "number", "string")
_JSON_TYPES = set(TYPES) | {"integer"}

ANNOTATIONS = {
    "title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly", "$comment",
    "contentEncoding", "contentMediaType", "contentSchema", "$schema", "$id", "id", "$anchor",
    "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "$defs", "definitions", "format",
}
_STRING_KW = {"minLength", "maxLength", "pattern", "format"}
_NUMBER_KW = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_OBJECT_KW = {
    "properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
    "maxProperties", "unevaluatedProperties",
}
_ARRAY_KW = {
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains", "maxContains",
    "uniqueItems", "unevaluatedItems",
}
_COMBINATORS = {"$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
                "dependentSchemas", "dependentRequired", "dependencies"}
KNOWN = ANNOTATIONS | _STRING_KW | _NUMBER_KW | _OBJECT_KW | _ARRAY_KW | _COMBINATORS | {"type", "enum", "const"}
_KEYWORD_TYPES: dict[str, set[str]] = {
    **{k: {"string"} for k in _STRING_KW},
    **{k: {"number", "integer"} for k in _NUMBER_KW},
    **{k: {"object"} for k in _OBJECT_KW | {"dependentRequired", "dependentSchemas", "dependencies"}},
    **{k: {"array"} for k in _ARRAY_KW},
}
"""The types whose values a keyword constrains (the keywords not here constrain every type)."""


class _Never:
    """No value satisfies this (an empty language)."""

    def __repr__(self) -> str:
        return "NEVER"


NEVER: Any = _Never()


class Sub:
    """One member of a conjunction: a subschema with the resolver of its resource and its pointer."""

    __slots__ = ("draft", "dyn", "entered", "pointer", "resolver", "schema", "scope")

    def __init__(self, schema: Any, resolver: Any, pointer: str, draft: str, scope: tuple = (),
                 entered: bool = False, dyn: tuple = ()) -> None:
        self.schema = schema
        self.resolver = resolver
        self.pointer = pointer
        self.draft = draft
        self.entered = entered
        """The resolver is already inside this subschema's own resource (a $ref target)."""
        self.scope = scope
        """Keys of the subschemas this one was reached from in place (allOf, $ref, branches), for
        the scope of ``unevaluated*``."""
        self.dyn = dyn
        """What the resolver's dynamic scope decides (``Translator._binding``): part of the key, so
        a subschema reached through scopes that bind ``$dynamicRef``/``$recursiveRef`` differently
        is translated once per binding."""

    @property
    def key(self) -> tuple:
        s = self.schema
        return (id(s) if isinstance(s, (dict, list)) else repr(s), str(self.resolver._base_uri), self.dyn)

    def child(self, schema: Any, *path: str | int) -> Sub:
        ptr = self.pointer + "".join("/" + escape_pointer(str(p)) for p in path)
        return Sub(schema, self.resolver, ptr, self.draft, dyn=self.dyn)

    def get(self, key: str, default: Any = None) -> Any:
        return self.schema.get(key, default) if isinstance(self.schema, dict) else default


class Translation:
    """The result: a grammar IR plus what was relaxed and noted."""

    def __init__(self, ir: GrammarIR, relaxed: list[tuple[str, str]], notes: list[str],
                 key_terms: frozenset[str] = frozenset(), head_term: str | None = None,
                 value_rules: frozenset[str] = frozenset(), split_terms: frozenset[str] = frozenset()) -> None:
        self.ir = ir
        self.relaxed = relaxed
        self.notes = notes
        self.key_terms = key_terms  # the terminals of keys
        self.head_term = head_term  # the first piece of long strings (``Translator.length_string``)
        self.value_rules = value_rules  # the rules of whole JSON values
        # string terminals that could be lexed in pieces too (``_split_strings``); not split unless
        # they may be expected where a long string's first piece is
        self.split_terms = split_terms


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, Decimal)) and isinstance(b, (int, Decimal)):
        return Decimal(a) == Decimal(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, Decimal)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(type(v).__name__)


def _is_integral(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, Decimal) and v == v.to_integral_value()


def _types_of(vals: list[Any]) -> set[str]:
    """The ``type`` names the values ``vals`` have ("integer" too for a whole number)."""
    return {_type_of(v) for v in vals} | ({"integer"} if any(_is_integral(v) for v in vals) else set())


@functools.lru_cache(maxsize=4096)
def _word(hint: str) -> str:
    """``hint`` as a name: runs of other characters than ASCII letters, digits and ``_`` become
    one ``_``, trimmed, cut to 40 characters."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", hint).strip("_")[:40]


def _sanitize(hint: str) -> str:
    """A terminal's name stem."""
    return _word(hint).upper() or "T"


def _rule_base(hint: str) -> str:
    """A rule's name stem."""
    return "r_" + _word(hint).lower()


_LIT_HINTS = {"{": "LBRACE", "}": "RBRACE", "[": "LSQB", "]": "RSQB", ",": "COMMA", ":": "COLON"}


@functools.lru_cache(maxsize=1024)
def _literal(text: str) -> tuple[Node, str]:
    """A literal terminal's tree and name hint (cached: the same punctuation recurs in every
    schema)."""
    return literal_node(text), _LIT_HINTS.get(text.strip(), text.strip() or "WS")


class Translator:
    """Builds the IR for one loaded schema (see the module docstring)."""

    def __init__(self, loaded: Loaded, whitespace: str, property_order: str, strict: bool,
                 max_length: int = 256, string_constraints: bool = True, pieces: bool = True,
                 paired_states: int = 0) -> None:
        self.loaded = loaded
        self.max_length = max_length
        self.pieces = pieces
        self.key_terms: set[str] = set()  # the terminals of keys (with their colon)
        self.head_term: str | None = None  # the first piece of long strings, once one is made
        self.value_rules: set[str] = set()  # the rules of whole JSON values
        self.counted: dict[str, tuple[int, int | None]] = {}  # length-only string terminals: bounds
        self.string_constraints = string_constraints
        self.whitespace = whitespace
        self.property_order = property_order
        self.strict = strict
        self.rules: dict[str, RuleDef] = {}
        self.terminals: dict[str, TerminalDef] = {}
        self._term_names: dict[Node, str] = {}
        self._memo: dict[tuple, Expr] = {}
        self._in_progress: set[tuple] = set()
        self.problems: list[tuple[str, str]] = []  # unsupported: errors in strict mode
        self.notes: list[str] = []
        self._counter = itertools.count()
        self._dfa_cache: dict[Node, Any] = {}
        self._skip_conditionals = False
        self._branch_cap = 0  # see ``expand``: 0 when every disjunction is expanded
        self._paired_left = paired_states
        """States that ``boolean`` may still build by pairing operands (``PAIRED_STATES``)."""
        self._uri_flags: dict[str, tuple[bool, bool]] = {}
        self._ref_only: dict[tuple, dict] = {}
        """Before 2019-09 a subschema with ``$ref`` is the target alone: one empty stand-in per
        such subschema, so that a ``$ref`` cycle through it is recognised."""
        self._parts: dict[tuple, dict] = {}
        """Schemas made of some of a subschema's keywords (``_part_of``), kept while translating."""
        self._negations: dict[tuple, tuple[Any, list[Any] | None]] = {}
        """``negate``'s memo: (the subschema, kept alive, and its negation)."""
        self._negating: set[tuple] = set()  # the subschemas being negated (a cycle: not negated)
        self._signatures: dict[tuple, tuple[Any, _Signature | None]] = {}
        """``_signature``'s memo: (the subschema, kept alive, and its signature)."""
        self._conjunctions: list[tuple[Sub, ...]] = []
        """Every conjunction ``value`` translated: the memo keys hold the ids of their schemas, some
        of them made while translating (negations), so those stay alive and their ids unique."""

    # -- reporting ---------------------------------------------------------------------------

    def unsupported(self, pointer: str, message: str) -> None:
        item = (pointer, message)
        if item not in self.problems:
            self.problems.append(item)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    # -- terminals and layout ----------------------------------------------------------------

    def term(self, node: Node, hint: str) -> Ref:
        """The terminal for regex tree ``node`` (one per distinct tree)."""
        name = self._term_names.get(node)
        if name is None:
            base = _sanitize(hint)
            name = base
            while name in self.terminals or name in self.rules:
                name = f"{base}_{next(self._counter)}"
            self.terminals[name] = TerminalDef(name, node)
            self._term_names[node] = name
        return Ref(name)

    def lit(self, text: str) -> Ref:
        return self.term(*_literal(text))

    def ws(self) -> Expr:
        """Optional whitespace (flexible mode only)."""
        if self.whitespace != "flexible":
            return Empty()
        ws = Repeat(CharClass(((9, 10), (13, 13), (32, 32))), 1, MAX_WHITESPACE)
        return Rep(self.term(ws, "WS"), 0, 1)

    def _indent(self, depth: int) -> str:
        return "\n" + " " * (PRETTY_INDENT * min(depth, PRETTY_MAX_DEPTH))

    def open_(self, ch: str, depth: int) -> Expr:
        if self.whitespace == "pretty":
            return self.lit(ch + self._indent(depth + 1))
        return Seq((self.lit(ch), self.ws()))

    def sep(self, depth: int) -> Expr:
        if self.whitespace == "pretty":
            return self.lit("," + self._indent(depth + 1))
        return Seq((self.lit(","), self.ws()))

    def close(self, ch: str, depth: int) -> Expr:
        if self.whitespace == "pretty":
            return self.lit(self._indent(depth) + ch)
        return self.lit(ch)

    def empty(self, pair: str, depth: int) -> Expr:
        if self.whitespace == "flexible":
            return Seq((self.lit(pair[0]), self.ws(), self.lit(pair[1])))
        return self.lit(pair)

    def member_value(self, value: Expr) -> Expr:
        """A value inside a container (followed by optional whitespace in flexible mode)."""
        return Seq((value, self.ws())) if self.whitespace == "flexible" else value

    def key_node(self, key: Node) -> Node:
        """A key lexeme: ``key`` (JSON string texts, quotes included), then the colon and the
        whitespace around it."""
        if self.whitespace == "pretty":
            colon: Node = literal_node(": ")
        elif self.whitespace == "flexible":
            colon = Concat((Repeat(CharClass(((9, 10), (13, 13), (32, 32))), 0, MAX_WHITESPACE), literal_node(":")))
        else:
            colon = literal_node(":")
        return Concat((key, colon))

    def key_term(self, key: Node, hint: str) -> Ref:
        """The terminal of a key lexeme (:meth:`key_node`), remembered as a key's."""
        ref = self.term(self.key_node(key), hint)
        self.key_terms.add(ref.name)
        return ref

    # -- rules -------------------------------------------------------------------------------

    def new_rule(self, hint: str) -> str:
        base = _rule_base(hint)
        name = base
        while name in self.rules or name in self.terminals:
            name = f"{base}_{next(self._counter)}"
        self.rules[name] = RuleDef(name, Empty())  # placeholder until defined (recursion)
        return name

    def define(self, name: str, body: Expr) -> None:
        self.rules[name] = RuleDef(name, body)

    def state_rule(self, memo: dict, key: Any, hint: str, build: Any, inline: bool = False) -> Expr:
        """The rule of one state of an object/array state machine, memoised in ``memo`` by
        ``key``; ``build()`` gives its body and may refer to states being built (recursion goes
        through the rule name). NEVER when the body is; with ``inline`` (only for machines without
        cycles but a state's loop on itself, which keeps its rule) a body that is not a choice is
        returned as is, without a rule."""
        if key in memo:
            return memo[key]
        name = self.new_rule(hint)
        memo[key] = Ref(name)
        body = build()
        looping = isinstance(body, Seq) and bool(body.items) and isinstance(body.items[0], Rep) \
            and body.items[0].max is None
        if body is NEVER or (inline and not isinstance(body, Alt) and not looping):
            del self.rules[name]
            memo[key] = body
            return body
        self.define(name, body)
        return Ref(name)

    # -- values ------------------------------------------------------------------------------

    def value(self, conj: tuple[Sub, ...], depth: int) -> Expr:
        """The expression for a value satisfying every member of ``conj`` (NEVER if none can)."""
        dkey = min(depth, PRETTY_MAX_DEPTH) if self.whitespace == "pretty" else 0
        key = (tuple(s.key for s in conj), dkey)
        found = self._memo.get(key)
        if found is not None:
            return found
        self._conjunctions.append(conj)
        hint = conj[-1].pointer.rsplit("/", 1)[-1] if conj else "any"
        name = self.new_rule(hint or "root")
        self.value_rules.add(name)
        self._memo[key] = Ref(name)
        body = self._value_body(conj, depth)
        if body is NEVER:
            self._memo[key] = NEVER
            del self.rules[name]
            return NEVER
        self.define(name, body)
        return Ref(name)

    def _value_body(self, conj: tuple[Sub, ...], depth: int) -> Expr:
        check_deadline("translating the schema")
        alts = []
        for branch in self.expand(list(conj)):
            e = self.typed(branch, depth)
            if e is not NEVER:
                alts.append(e)
        if not alts:
            return NEVER
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    # -- combinators -> disjunction of conjunctions -------------------------------------------

    def expand(self, conj: list[Sub]) -> list[list[Sub]]:
        """Disjunctive normal form: a list of conjunctions without combinators. When the
        combinations exceed ``Limits.max_schema_alternatives``, ``if``/``then``/``else`` at this position are
        relaxed (not enforced, reported), overlapping ``oneOf`` branches are read as ``anyOf``
        (reported), and the expansion is tried once more. If that is still too many, a lenient
        translation (``strict=False``) expands each path's disjunctions only while the product of
        their branch counts stays within the cap, and leaves the rest out (reported): a
        conjunction with a member left out lets more values on, never fewer, and the paths
        together are then at most the cap (each path keeps at least 1/cap of the whole)."""
        out: list[list[Sub]] = []
        try:
            self._expand(list(conj), [], out, 0)  # _expand consumes its work list: give it a copy
        except _TooManyAlternatives:
            if self._skip_conditionals or self._branch_cap:
                raise
            out = []
            self._skip_conditionals = True
            try:
                self._expand(list(conj), [], out, 0)
            except _TooManyAlternatives:
                if self.strict:
                    raise
                out = []
                self._skip_conditionals = False
                self._branch_cap = get_limits().max_schema_alternatives
                try:
                    self._expand(list(conj), [], out, 0)
                finally:
                    self._branch_cap = 0
            finally:
                self._skip_conditionals = False
        return out

    def _expand(self, todo: list[Any], done: list[Sub], out: list[list[Sub]], steps: int, paths: int = 1) -> None:
        """Appends to ``out`` the conjunctions of ``done`` with each way through ``todo``;
        ``paths``: the product of the branch counts of the disjunctions expanded on this path
        (bounded by ``_branch_cap`` when that is set, see ``expand``)."""
        if steps > 20_000:
            raise SchemaError("the schema's combinators expand too far (an allOf/$ref loop?)",
                              pointer=done[-1].pointer if done else "")
        while todo:
            item = todo.pop(0)
            steps += 1
            if steps > 20_000:
                raise SchemaError("the schema's combinators expand too far (an allOf/$ref loop?)",
                                  pointer=done[-1].pointer if done else "")
            if isinstance(item, _BranchSet):
                if self._branch_cap and len(item.options) > 1 and paths * len(item.options) > self._branch_cap:
                    self.unsupported(item.pointer or (done[-1].pointer if done else ""),
                                     f"{_branch_keyword(item.pointer)} not enforced: with the other combinators "
                                     f"here the alternatives would be more than {self._branch_cap} "
                                     "(Limits.max_schema_alternatives)")
                    continue
                for option in item.options:
                    members = option.members if isinstance(option, _Group) else [option]
                    self._expand(list(members) + todo, list(done), out, steps, paths * len(item.options))
                    cap = get_limits().max_schema_alternatives
                    if len(out) > cap:
                        raise _TooManyAlternatives(f"the combinators here expand into more than {cap} alternatives",
                                                   limit="max_schema_alternatives", value=cap,
                                                   pointer=done[-1].pointer if done else "")
                return
            if isinstance(item, _Group):
                todo = list(item.members) + todo
                continue
            sub = item
            s = sub.schema
            if isinstance(s, _NotSchema):
                done.append(sub)
                continue
            if s is True or (isinstance(s, dict) and not s):
                continue
            if s is False:
                return
            if not isinstance(s, dict):
                raise SchemaError(f"a schema must be an object or a boolean, not {type(s).__name__}",
                                  pointer=sub.pointer)
            stand_in = self._ref_only.get(sub.key)
            if any(sub.key == d.key or (stand_in is not None and d.schema is stand_in) for d in done):
                continue  # the same subschema twice (a $ref cycle through allOf): once is enough
            scope = sub.scope
            sub = self._enter(sub)
            sub.scope = scope
            s = sub.schema
            extra: list[Any] = []
            for kw in ("$ref", "$dynamicRef", "$recursiveRef"):
                if kw not in s:
                    continue
                extra.append(self._deref(sub, kw))
                if sub.draft in ("draft4", "draft6", "draft7") and kw == "$ref":
                    s = self._ref_only.setdefault(sub.key, {})  # before 2019-09, keywords beside $ref are ignored
                    sub = Sub(s, sub.resolver, sub.pointer, sub.draft, sub.scope, dyn=sub.dyn)
                    break
            for i, member in enumerate(_list(s["allOf"], sub, "allOf") if "allOf" in s else ()):
                extra.append(sub.child(member, "allOf", i))
            branches: list[_BranchSet] = []
            if "anyOf" in s:  # a negation's union may hold its parts as they are (``negate``: contains)
                branches.append(_BranchSet([m if isinstance(m, (Sub, _Group)) else sub.child(m, "anyOf", i)
                                 for i, m in enumerate(_list(s["anyOf"], sub, "anyOf"))],
                                           sub.pointer + "/anyOf"))
            if "oneOf" in s:
                members = [sub.child(m, "oneOf", i) for i, m in enumerate(_list(s["oneOf"], sub, "oneOf"))]
                excluded = self._overlap_types(members, _type_set(s))
                if excluded:  # two branches accept every value of these types: no value has one
                    extra.append(_negated(sub, {"type": sorted(excluded)}))
                elif excluded is None:
                    exclusive = None if self._skip_conditionals else self._exclusive(members)
                    if exclusive is None:
                        self.unsupported(sub.pointer + "/oneOf",
                                         "oneOf whose branches may overlap (enforced as anyOf: a value matching "
                                         "several branches is not rejected)")
                    else:
                        members = exclusive
                branches.append(_BranchSet(members, sub.pointer + "/oneOf"))
            if "if" in s and ("then" in s or "else" in s) and self._skip_conditionals:
                self.unsupported(sub.pointer + "/if", "if/then/else not enforced: with the other combinators "
                                 f"here they expand into more than {get_limits().max_schema_alternatives} "
                                 "alternatives")
            elif "if" in s and ("then" in s or "else" in s):
                cond = sub.child(s["if"], "if")
                then = sub.child(s.get("then", True), "then")
                els = sub.child(s.get("else", True), "else")
                neg = self.negate(cond)
                if neg is None:
                    self.unsupported(sub.pointer + "/if", "if/then/else whose 'if' cannot be negated "
                                     "(enforced as: (if and then) or else)")
                    branches.append(_BranchSet([_Group([cond, then]), els], sub.pointer + "/if"))
                else:
                    branches.append(_BranchSet([_Group([cond, then])] + [_Group([n, els]) for n in neg],
                                               sub.pointer + "/if"))
            branches.extend(self._dependencies(sub))
            if "not" in s:
                neg = self.negate(sub.child(s["not"], "not"))
                if neg is None:
                    self.unsupported(sub.pointer + "/not", "'not' of this schema cannot be enforced (ignored)")
                elif not neg:
                    return
                else:
                    branches.append(_BranchSet(neg, sub.pointer + "/not"))
            if _contradicts(done, sub):
                return  # no value satisfies this conjunction: drop the path before it multiplies
            done.append(sub)
            scope = sub.scope + (sub.key,)
            _set_scope(extra, scope)
            for b in branches:
                _set_scope(b.options, scope)
            todo = extra + branches + todo
        out.append(done)

    def _enter(self, sub: Sub) -> Sub:
        """Switch to the resource (and draft) a subschema with its own ``$id``/``$schema`` starts."""
        s = sub.schema
        spec = self.loaded.spec_of(s)
        if isinstance(s, dict):
            for key in ("$id", "id"):
                if key in s and not isinstance(s[key], str) and (key == "$id" or sub.draft == "draft4"):
                    raise SchemaError(f"{key} must be a string, not {type(s[key]).__name__}",
                                      pointer=f"{sub.pointer}/{key}")
        sid = spec.id_of(s) if isinstance(s, dict) else None
        if sub.entered:
            return sub
        if isinstance(s, dict) and (sid or "$schema" in s):
            try:
                resolver = sub.resolver.in_subresource(spec.create_resource(s))
            except Exception:  # noqa: BLE001
                resolver = sub.resolver
            draft = self._draft_name(spec)
            return Sub(s, resolver, sub.pointer, draft, dyn=self._binding(resolver, sub.pointer))
        return sub

    def _draft_name(self, spec: Any) -> str:
        from .loader import _SPECS

        for name, sp in _SPECS.items():
            if sp is spec:
                return name
        return self.loaded.draft

    def _deref(self, sub: Sub, kw: str) -> Sub:
        ref = sub.schema[kw]
        if not isinstance(ref, str):
            raise SchemaError(f"{kw} must be a string", pointer=sub.pointer + "/" + kw)
        if kw == "$recursiveRef" and ref == "#":
            resolved = lookup_recursive(sub.resolver, sub.pointer + "/" + kw)
        else:
            if kw == "$recursiveRef":
                self.unsupported(sub.pointer + "/" + kw, f"$recursiveRef {ref!r} is resolved like $ref (2019-09 "
                                 "defines only '#')")
            # a $dynamicRef (or $ref) to a $dynamicAnchor resolves in the dynamic scope the
            # resolver carries (``referencing``, as ``jsonschema`` does)
            resolved = lookup(sub.resolver, ref, sub.pointer + "/" + kw)
        target = resolved.contents
        spec = self.loaded.spec_of(target)
        draft = self._draft_name(spec) if isinstance(target, dict) and "$schema" in target else sub.draft
        return Sub(target, resolved.resolver, ref, draft, entered=True,
                   dyn=self._binding(resolved.resolver, sub.pointer + "/" + kw))

    def _binding(self, resolver: Any, pointer: str) -> tuple:
        """What the dynamic scope of ``resolver`` decides for any ``$dynamicRef``/``$recursiveRef``
        below it: the resources in scope that define a ``$dynamicAnchor``, outermost first, each
        once (a dynamic anchor resolves to the outermost of them defining its name), and where a
        ``$recursiveRef`` walk (outward through resources whose root has ``$recursiveAnchor``)
        ends. Empty for a scope without such resources: most schemas, translated as before."""
        scope = [uri for uri, _ in resolver.dynamic_scope()]  # innermost first
        if not scope:
            return ()
        dynamic: list[str] = []
        for uri in reversed(scope):
            if uri not in dynamic and self._resource_flags(resolver, uri, pointer)[0]:
                dynamic.append(uri)
        walk_end = None
        for uri in scope:
            if not self._resource_flags(resolver, uri, pointer)[1]:
                break
            walk_end = uri
        return () if not dynamic and walk_end is None else (tuple(dynamic), walk_end)

    def _resource_flags(self, resolver: Any, uri: str, pointer: str) -> tuple[bool, bool]:
        """``(defines a $dynamicAnchor somewhere, its root has $recursiveAnchor: true)`` for the
        resource at ``uri`` (cached; the first counts anchors of embedded resources too, which
        only splits translations more finely). A scope entry always resolves (the resolver was
        there); were it not to, the error names ``pointer`` rather than a binding going wrong."""
        flags = self._uri_flags.get(uri)
        if flags is None:
            contents = lookup(resolver, uri, pointer).contents
            flags = (_has_key(contents, "$dynamicAnchor"),
                     isinstance(contents, dict) and contents.get("$recursiveAnchor") is True)
            self._uri_flags[uri] = flags
        return flags

    def _dependencies(self, sub: Sub) -> list[_BranchSet]:
        """``dependentRequired``/``dependentSchemas`` (and draft 7 ``dependencies``) as branches:
        the property is absent, or it is present and the dependency holds."""
        s = sub.schema
        out: list[_BranchSet] = []
        items: list[tuple[str, Any, str]] = []
        for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            d = s.get(kw)
            if d is None:
                continue
            if not isinstance(d, dict):
                raise SchemaError(f"{kw} must be an object", pointer=f"{sub.pointer}/{kw}")
            for name, dep in d.items():
                items.append((name, dep, kw))
        for name, dep, kw in items:
            where = sub.child(dep, kw, name)
            absent = sub.child({"properties": {name: False}}, kw, name)
            if isinstance(dep, list):
                present = sub.child({"required": [name, *dep]}, kw, name)
            else:
                present = _Group([sub.child({"required": [name]}, kw, name), where])
            out.append(_BranchSet([absent, present], where.pointer))
        return out

    # -- negation ----------------------------------------------------------------------------

    def negate(self, sub: Sub) -> list[Sub] | None:
        """Schemas whose union is the complement of ``sub`` (None: not decidable here, or a
        reference cycle: a recursive schema is not negated). Memoised per subschema."""
        key = sub.key
        known = self._negations.get(key)
        if known is not None:  # fresh Subs: expanding a conjunction sets their scope
            return None if known[1] is None else [_fresh(x) for x in known[1]]
        if key in self._negating:
            return None
        self._negating.add(key)
        try:
            out = self._negate(sub)
        finally:
            self._negating.discard(key)
        self._negations[key] = (sub.schema, out)  # the schema is kept: its id is in the key
        return out

    def _negate(self, sub: Sub) -> list[Sub] | None:
        s = sub.schema
        if s is True:
            return []
        if s is False:
            return [sub.child(True)]
        if not isinstance(s, dict):
            return None
        sub = self._enter(sub)
        if "$ref" in s:
            others = {k: v for k, v in s.items() if k != "$ref" and _asserts(k)}
            if others and sub.draft not in ("draft4", "draft6", "draft7"):
                return None
            return self.negate(self._deref(sub, "$ref"))
        keys = {k for k in s if _asserts(k)}
        combo = keys & {"allOf", "anyOf", "oneOf", "not"}
        if combo and keys != {"anyOf"}:  # a conjunction of parts (a double not, an allOf, ...)
            return self._negate_parts(sub, s, combo)
        if keys == {"anyOf"}:
            # not (A or B) = not A and not B, each a union: the union of the pairs' conjunctions
            negs = [self.negate(sub.child(m, "anyOf", i)) for i, m in enumerate(s["anyOf"])]
            if any(n == [] for n in negs):
                return []  # a member every value satisfies
            if any(n is None for n in negs):
                return None
            combos: list[list[Any]] = [[]]
            for n in negs:
                combos = [c + [x] for c in combos for x in n]  # type: ignore[union-attr]
                if len(combos) > MAX_NEGATED_ANY_OF:
                    return None
            return [c[0] if len(c) == 1 else _Group(c) for c in combos]
        if keys <= _STRING_KW | _NUMBER_KW | {"type", "enum", "const"}:
            return [_negated(sub, s)]
        if keys <= _NEGATABLE_STRUCTURE:
            # S = type and K1 and K2 ..., each K constraining values of one type only (others meet
            # it): not S = (not type) or (not K1) or ..., not K = the values of K's type that break it
            if not isinstance(s.get("required", []), list) or not isinstance(s.get("properties", {}), dict):
                return None  # malformed: the keyword check reports it where the schema is used
            counts = {k: _count(s[k]) for k in keys & _COUNT_NEGATION.keys()}
            if None in counts.values():
                return None  # malformed, as above
            out = []
            types: Any = None
            if "type" in s:
                out.append(_negated(sub, {"type": s["type"]}))
                types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            for kw, n in counts.items():
                json_type, other, delta = _COUNT_NEGATION[kw]
                if (types is None or json_type in types) and n + delta >= 0:
                    out.append(sub.child({"type": json_type, other: n + delta}, kw))
            if "items" in keys and (types is None or "array" in types):
                if not isinstance(s["items"], dict) and not isinstance(s["items"], bool):
                    return None  # the positional form: not negated here
                # not (every item is S) = some item is not S
                negs = self.negate(sub.child(s["items"], "items"))
                if negs is None:
                    return None
                out.extend(sub.child({"type": "array", "contains": n}, "items") for n in negs)
            if "contains" in keys and (types is None or "array" in types):
                # not (some item is S) = every item is not S (the union of S's negation's parts)
                negs = self.negate(sub.child(s["contains"], "contains"))
                if negs is None:
                    return None
                items = False if not negs else negs[0] if len(negs) == 1 else {"anyOf": negs}
                out.append(sub.child({"type": "array", "items": items}, "contains"))
            if types is not None and "object" not in types:
                return out
            for r in s.get("required", []):
                out.append(sub.child({"type": "object", "properties": {r: False}}, "required"))
            for p, ps in (s.get("properties") or {}).items():
                negs = self.negate(sub.child(ps, "properties", p))
                if negs is None:
                    return None
                for n in negs:
                    out.append(_Group([sub.child({"type": "object", "required": [p]}, "properties", p),
                                       sub.child({"type": "object", "properties": {p: n}}, "properties", p)]))
            members = self._negate_members(sub, s)
            return None if members is None else out + members
        return None

    def _negate_members(self, sub: Sub, s: dict) -> list[Sub] | None:
        """The negations of ``s``'s ``patternProperties``, ``additionalProperties`` and
        ``propertyNames``: objects with some member that breaks one (``_Exists``): a key a
        pattern matches with a value its schema refuses, a key neither named nor matched with a
        value ``additionalProperties`` refuses, a key ``propertyNames`` refuses. None where the
        keys are not known exactly (a pattern or name schema relaxed) or a value schema cannot be
        negated."""
        from .strings import any_string_node, literal_string_node

        pats = s.get("patternProperties") or {}
        if not isinstance(pats, dict):
            return None  # malformed: the keyword check reports it where the schema is used
        out: list[Sub] = []
        pattern_nodes = []
        for pat, ps in pats.items():
            try:
                keys = _pattern_string(pat)
            except RegexError:
                return None  # not supported exactly here (or malformed, reported where it is used)
            pattern_nodes.append(keys)
            negs = self.negate(sub.child(ps, "patternProperties", pat))
            if negs is None:
                return None
            out.extend(self._exists(sub, keys, n, "patternProperties", pat) for n in negs)
        if "additionalProperties" in s:
            negs = self.negate(sub.child(s["additionalProperties"], "additionalProperties"))
            if negs is None:
                return None
            if negs:
                from ..regex.ast import Alt as RxAlt

                known = [literal_string_node(p) for p in (s.get("properties") or {})] + pattern_nodes
                keys = any_string_node()
                if known:
                    keys = self._exactly(lambda: self.boolean(
                        "difference", [keys, known[0] if len(known) == 1 else RxAlt(tuple(known))], sub.pointer,
                        "keys other than the named and matched ones"))
                    if keys is None:
                        return None
                out.extend(self._exists(sub, keys, n, "additionalProperties") for n in negs)
        if "propertyNames" in s:
            allowed = self._exactly(lambda: self.key_language(sub.child(s["propertyNames"], "propertyNames")))
            if allowed is None:
                return None
            keys = any_string_node() if allowed is NEVER else self._exactly(lambda: self.boolean(
                "difference", [any_string_node(), allowed], sub.pointer, "keys propertyNames refuses"))
            if keys is None:
                return None
            out.append(self._exists(sub, keys, None, "propertyNames"))
        return [x for x in out if x is not None]

    def _exists(self, sub: Sub, keys: Node, value: Any, *path: str) -> Sub | None:
        """An object with a member whose key text is in ``keys`` and whose value satisfies
        ``value`` (a negation's part; None: any value); None when no key is in ``keys``."""
        if _known_empty(keys):
            return None
        values = () if value is None else tuple(subschemas(value, sub, *path))
        return sub.child(_Exists(keys, values), *path)

    def _exactly(self, build: Any) -> Any:
        """``build()``, or None when it relaxed something (what it reported is withdrawn: the
        caller does without it)."""
        n = len(self.problems)
        out = build()
        if len(self.problems) > n or out is None:
            del self.problems[n:]
            return None
        return out

    def _negate_parts(self, sub: Sub, s: dict, combo: set[str]) -> list[Any] | None:
        """``negate`` of a schema with combinators (``combo``), alone or beside other keywords: it
        is the conjunction of its other keywords, its ``allOf`` members, its ``anyOf`` and its
        ``not``, so its negation is the union of theirs (not (not A) = A; None when a part cannot
        be negated). A ``oneOf`` is its ``anyOf`` where its branches are apart but for the types
        two of them accept whole (``_overlap_types``), and those types are then in the union;
        otherwise None."""
        parts: list[Sub] = []
        rest = {k: v for k, v in s.items() if k not in combo}
        if any(_asserts(k) for k in rest):
            parts.append(self._part_of(sub, "rest", rest))
        out: list[Any] = []
        for kw in ("allOf", "anyOf", "oneOf"):
            if kw not in combo:
                continue
            members = s[kw]
            if not isinstance(members, list) or not (members or kw == "allOf"):
                return None  # malformed: the keyword check reports it where the schema is used
            if kw == "allOf" or len(members) == 1:
                parts.extend(sub.child(m, kw, i) for i, m in enumerate(members))
            elif kw == "anyOf":
                parts.append(self._part_of(sub, kw, {"anyOf": members}))
            else:
                # oneOf = anyOf, less the types two branches accept whole, when the rest is apart
                excluded = self._overlap_types([sub.child(m, kw, i) for i, m in enumerate(members)])
                if excluded is None:
                    return None
                parts.append(self._part_of(sub, kw, {"anyOf": members}))
                if excluded:
                    out.append(sub.child({"type": sorted(excluded)}, kw))
        if "not" in combo:
            out.append(sub.child(s["not"], "not"))  # not (not A) = A
        for part in parts:
            negs = self.negate(part)
            if negs is None:
                return None
            out.extend(negs)
        return out

    def _part_of(self, sub: Sub, name: str, schema: dict) -> Sub:
        """A schema made of some of ``sub``'s keywords, at its pointer; kept for the translation's
        lifetime (a subschema's memo key is its object's ``id``)."""
        kept = self._parts.setdefault((sub.key, name), schema)
        return Sub(kept, sub.resolver, sub.pointer, sub.draft, sub.scope, entered=sub.entered, dyn=sub.dyn)

    def _exclusive(self, members: list[Sub]) -> list[Any] | None:
        """``oneOf`` exactly: one option per branch, the branch and the negation of every other
        (None when a branch cannot be negated). The options are disjoint by construction."""
        negs = [self.negate(m) for m in members]
        if any(n is None for n in negs):
            return None
        return [_Group([m] + [_BranchSet(list(negs[j]), members[j].pointer) for j in range(len(members))  # type: ignore[arg-type]
                           if j != i])
                for i, m in enumerate(members)]

    def _overlap_types(self, members: list[Sub], within: set[str] | None = None, depth: int = 0) -> set[str] | None:
        """For the branches of a ``oneOf`` whose own schema lets only the types ``within`` on (None:
        any): the types no valid value can have because two branches accept every value of it
        (``_whole_types``: ``[array, null]`` beside ``null``), or None when two branches may
        share a value of another type. An empty set: the branches are disjoint, and ``oneOf`` is
        ``anyOf``. Values of a type both branches allow are proved apart for objects, by a
        property one branch requires that the other forbids (``false``, or left out under
        ``additionalProperties: false`` with no ``patternProperties``), or whose values the two
        restrict apart (``const``/``enum`` values, types, ``additionalProperties``' types, or, a
        few levels down, subschemas disjoint in the same sense), or by property counts; a branch
        that is itself a union (``anyOf``/``oneOf``) is apart from another when each of its
        members is. Values of any other type they share are taken to overlap."""
        excluded: set[str] = set()
        for wx, wy in itertools.combinations([self._whole_types(m) for m in members], 2):
            excluded |= wx & wy if within is None else wx & wy & within
        for x, y in itertools.combinations(members, 2):
            if not self._apart(x, y, within, depth, excluded):
                return None
        return excluded

    def _pairwise_disjoint(self, members: list[Sub], within: set[str] | None = None, depth: int = 0) -> bool:
        """Whether no value satisfies two of ``members`` (see ``_overlap_types``)."""
        return self._overlap_types(members, within, depth) == set()

    def _apart(self, x: Sub, y: Sub, within: set[str] | None, depth: int, skip: set[str] = frozenset()) -> bool:
        """Whether no value of the types ``within`` (None: any), less ``skip``, satisfies both ``x``
        and ``y`` (see ``_overlap_types``)."""
        a, b = self._signature(x), self._signature(y)
        if a is None or b is None:
            return False
        common = (a.types & b.types) - skip
        if within is not None:
            common &= within
        if not common:
            return True
        if a.own is not None and b.own is not None and \
                not any(_json_equal(u, v) for u, v in itertools.product(a.own, b.own)):
            return True  # their const/enum values differ (annotations beside them, say)
        if common <= {"object"} and (self._objects_apart(a, b, depth) or self._objects_apart(b, a, depth)):
            return True
        if depth < _DISJOINT_DEPTH:
            for one, other in ((x, b), (y, a)):
                for members in other.unions:
                    if all(self._apart(one, m, common, depth + 1) for m in members):
                        return True
        return False

    def _whole_types(self, sub: Sub, depth: int = 0) -> set[str]:
        """The JSON types (``integer`` apart from ``number``) every value of which ``sub`` accepts:
        the types it allows whose values none of its other keywords constrains."""
        s = sub.schema
        if s is True:
            return set(_JSON_TYPES)
        if not isinstance(s, dict) or depth > 8:
            return set()
        if "$ref" in s:
            target = self._deref_or_none(sub)
            if target is None:
                return set()
            out = self._whole_types(target, depth + 1)
            if sub.draft in ("draft4", "draft6", "draft7"):
                return out  # the keywords beside $ref are ignored
            rest = {k: v for k, v in s.items() if k != "$ref"}
            return out & self._whole_types(self._part_of(sub, "beside $ref", rest), depth + 1)
        return _unconstrained_types(s)

    def _deref_or_none(self, sub: Sub) -> Sub | None:
        try:
            return self._deref(sub, "$ref")
        except SchemaError:
            return None

    def _objects_apart(self, a: _Signature, b: _Signature, depth: int) -> bool:
        """Whether no object satisfies both: ``a`` needs more properties than ``b`` allows, or some
        property ``a`` requires is one ``b`` forbids, or one whose values the two restrict apart."""
        if b.max_props is not None and max(a.min_props, len(a.required)) > b.max_props:
            return True
        for p in a.required:
            if b.closed is not None and p not in b.closed:
                return True
            if p in a.values and p in b.values and \
                    not any(_json_equal(x, y) for x, y in itertools.product(a.values[p], b.values[p])):
                return True
            ta = a.types_of(p)
            tb = b.types_of(p)
            if (ta is not None and not ta) or (tb is not None and not tb):
                return True  # false: no value of p at all
            if ta is not None and tb is not None and not (ta & tb):
                return True
            if depth < _DISJOINT_DEPTH:
                for xs, x in a.prop_subs.get(p, ()):
                    for ys, y in b.prop_subs.get(p, ()):
                        if self._pairwise_disjoint([xs.child(x, "properties", p), ys.child(y, "properties", p)], None,
                                                   depth + 1):
                            return True
        return False

    def _signature(self, sub: Sub, depth: int = 0) -> _Signature | None:
        """What the ``oneOf`` disjointness check reads of a branch (see :class:`_Signature`): its
        own keywords, with those of its ``allOf`` members (each of which holds too); None when
        unknown. Memoised per subschema (None while it is being read: a reference cycle)."""
        key = sub.key
        known = self._signatures.get(key)
        if known is not None:
            return known[1]
        self._signatures[key] = (sub.schema, None)  # the schema is kept: its id is in the key
        sig = self._read_signature(sub, depth)
        self._signatures[key] = (sub.schema, sig)
        return sig

    def _read_signature(self, sub: Sub, depth: int) -> _Signature | None:
        s = sub.schema
        if s is True or s is False:
            return _Signature(set(_JSON_TYPES) if s else set(), set(), {}, {}, {}, None)
        if not isinstance(s, dict) or depth > 8:
            return None
        if "$ref" in s:
            target = self._deref_or_none(sub)
            return None if target is None else self._signature(target, depth + 1)
        types = _type_set(s)
        if types is None:
            return None
        if "const" in s:
            types &= _types_of([s["const"]])
        if isinstance(s.get("enum"), list):
            types &= _types_of(s["enum"])
        required, props = s.get("required") or [], s.get("properties") or {}
        if not isinstance(required, list) or not isinstance(props, dict):
            return None  # malformed: the keyword check reports it where the schema is used
        values: dict[str, list[Any]] = {}
        prop_types: dict[str, set[str]] = {}
        prop_subs = {p: [(sub, ps)] for p, ps in props.items() if isinstance(ps, dict)}
        for p, ps in props.items():
            if ps is False:
                prop_types[p] = set()
            elif isinstance(ps, dict) and "$ref" not in ps:
                vals = _values_of(ps)
                if vals is not None:
                    values[p] = vals
                t = _type_set(ps)
                if t is not None:
                    if p in values:
                        t &= _types_of(values[p])
                    prop_types[p] = t
        closed = s.get("additionalProperties") is False and not s.get("patternProperties")
        extras: tuple[tuple[frozenset[str], frozenset[str]], ...] = ()
        extra = s.get("additionalProperties")
        if isinstance(extra, dict) and "$ref" not in extra and not s.get("patternProperties"):
            t = _type_set(extra)
            vals = _values_of(extra)
            if t is not None:
                extras = ((frozenset(props), frozenset(t & _types_of(vals) if vals is not None else t)),)
        min_props = _count(s.get("minProperties", 0)) or 0
        max_props = _count(s["maxProperties"]) if "maxProperties" in s else None
        unions: list[list[Sub]] = []
        for kw in ("anyOf", "oneOf"):
            members = s.get(kw)
            if isinstance(members, list) and members:
                subs = [sub.child(m, kw, i) for i, m in enumerate(members)]
                unions.append(subs)
                msigs = [self._signature(m, depth + 1) for m in subs]
                if all(m is not None for m in msigs):
                    types &= set().union(*(m.types for m in msigs))  # type: ignore[union-attr]
        sig = _Signature(types, {r for r in required if isinstance(r, str)}, values, prop_types, prop_subs,
                         set(props) if closed else None, extras, min_props, max_props, tuple(unions), _values_of(s))
        members = s.get("allOf")
        if isinstance(members, list):
            for i, m in enumerate(members):
                part = self._signature(sub.child(m, "allOf", i), depth + 1)
                if part is not None:
                    sig = sig.both(part)
        return sig

    # -- per type ----------------------------------------------------------------------------

    def typed(self, conj: list[Sub], depth: int) -> Expr:
        """A conjunction without combinators, split by type."""
        nots: list[Sub] = []
        plain: list[Sub] = []
        for sub in conj:
            if isinstance(sub.schema, _NotSchema):
                nots.append(sub)
            else:
                self._check_keywords(sub)
                plain.append(sub)
        types, consts = types_and_consts(plain)
        for n in nots:  # a negated schema that accepts every value of a type excludes that type
            for t in list(types):
                if _covers_type(n.schema.inner, t):
                    types.discard(t)
        alts: list[Expr] = []
        for t in TYPES:
            integer = t == "number" and "number" not in types
            if t not in types and not (t == "number" and "integer" in types):
                continue
            if consts is not None:
                vals = [v for v in consts if _type_of(v) == t and (not integer or _is_integral(v))]
                if not vals:
                    continue
                e = self.const_values(t, vals, plain, nots, depth, integer)
            else:
                e = self.type_expr(t, integer, plain, nots, depth)
            if e is not NEVER:
                alts.append(e)
        if not alts:
            return NEVER
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def _check_keywords(self, sub: Sub) -> None:
        """Keyword shapes the draft fixes (unknown keywords are annotations: ignored)."""
        s = sub.schema
        if sub.draft == "draft4":
            for k in ("exclusiveMinimum", "exclusiveMaximum"):
                if k in s and not isinstance(s[k], bool):
                    raise SchemaError(f"{k} must be a boolean in draft 4", pointer=f"{sub.pointer}/{k}")

    def type_expr(self, t: str, integer: bool, conj: list[Sub], nots: list[Sub], depth: int) -> Expr:
        if t == "null":
            return NEVER if self._excluded_literal(None, nots) else self.lit("null")
        if t == "boolean":
            opts = [self.lit(w) for w, v in (("true", True), ("false", False)) if not self._excluded_literal(v, nots)]
            return NEVER if not opts else opts[0] if len(opts) == 1 else Alt(tuple(opts))
        if t == "string":
            counted = self.length_string(conj, nots)
            if counted is not None:
                return counted
            node = self.string_language(conj, nots)
            if node is NEVER:
                return NEVER
            return self.term(node, "STRING")
        if t == "number":
            node = self.number_language(conj, nots, integer)
            if node is not NEVER and integer and any(sub.draft == "draft4" for sub in conj):
                from .numbers import PLAIN_INTEGER  # draft 4: 3.0 is a number but not an integer

                node = self.boolean("intersect", [node, PLAIN_INTEGER], conj[0].pointer, "draft-4 integer") or node
            return NEVER if node is NEVER else self.term(node, "INTEGER" if integer else "NUMBER")
        if t == "object":
            from .objects import object_expr

            return object_expr(self, conj, nots, depth)
        if t == "array":
            from .arrays import array_expr

            return array_expr(self, conj, nots, depth)
        raise AssertionError(t)

    def _excluded_literal(self, v: Any, nots: list[Sub]) -> bool:
        for n in nots:
            inner = n.schema.inner
            if _schema_accepts_primitive(inner, v):
                return True
        return False

    def unevaluated(self, subs: list[Sub], kw: str, also: str = "") -> list[tuple[Sub, list[Sub]]]:
        """``(unevaluated* schema, the subschemas in its scope)`` pairs: the schema applies to the
        keys (items) none of those covers. Relaxed (ignored, reported) where a branch below it
        (anyOf/oneOf/if/not/dependentSchemas, or ``also``: ``contains``) may evaluate more than the
        chosen one shows."""
        out: list[tuple[Sub, list[Sub]]] = []
        for u in subs:
            if kw not in u.schema or u.schema[kw] is True:
                continue
            cover = [s for s in subs if s is u or u.key in s.scope]
            if any(s is not u and kw in s.schema and s.schema[kw] is not False for s in cover):
                continue  # a nested unevaluated* evaluates everything it sees
            branching = ("anyOf", "oneOf", "if", "not", "dependentSchemas", "dependencies") + ((also,) if also else ())
            if any(k in s.schema for s in cover for k in branching):
                self.unsupported(u.pointer + "/" + kw, f"{kw} over branches (anyOf/oneOf/if/not/dependentSchemas"
                                 f"{'/' + also if also else ''}) is not checked")
                continue
            out.append((u.child(u.schema[kw], kw), cover))
        return out

    # -- helpers for objects -----------------------------------------------------------------

    def dfa(self, node: Node) -> Any:
        """The byte DFA of ``node`` (cached per translation)."""
        from ..automata.dfa import regex_dfa

        d = self._dfa_cache.get(node)
        if d is None:
            d = self._dfa_cache[node] = regex_dfa(node)
        return d

    def cached_difference(self, node: Node, exclude: Node, pointer: str) -> Node | None:
        """``difference(node, exclude)``, cached across translations (the "other keys" of objects
        with the same property names recur)."""
        key = (node, exclude)
        found = _DIFF_CACHE.get(key)
        if found is None:
            found = self.boolean("difference", [node, exclude], pointer, "keys other than the named properties")
            if found is None:
                return None
            if len(_DIFF_CACHE) > 512:
                _DIFF_CACHE.clear()
            _DIFF_CACHE[key] = found
        return found

    def key_language(self, sub: Sub) -> Node | Any:
        """The JSON string texts a ``propertyNames`` schema allows as keys (NEVER: none)."""
        from ..regex.ast import Alt as RxAlt
        from .strings import any_string_node

        if sub.schema is True:
            return any_string_node()
        langs: list[Node] = []
        for branch in self.expand([sub]):
            plain = [b for b in branch if not isinstance(b.schema, _NotSchema)]
            nots = [b for b in branch if isinstance(b.schema, _NotSchema)]
            types, consts = types_and_consts(plain)
            if "string" not in types or any(_covers_type(n.schema.inner, "string") for n in nots):
                continue
            lang = self.string_language(plain, nots)
            if lang is NEVER:
                continue
            if consts is not None:
                lits = [self._string_literal(v) for v in _dedupe(consts) if isinstance(v, str)]
                if not lits:
                    continue
                both = self.boolean("intersect", [lits[0] if len(lits) == 1 else RxAlt(tuple(lits)), lang],
                                    sub.pointer, "propertyNames")
                lang = lang if both is None else both
                if _known_empty(lang):
                    continue
            langs.append(lang)
        if not langs:
            return NEVER
        return langs[0] if len(langs) == 1 else RxAlt(tuple(langs))

    # -- primitive languages -----------------------------------------------------------------

    def boolean(self, op: str, nodes: list[Node], pointer: str, what: str) -> Node | None:
        """``intersect``/``difference`` of regex trees, or None (reported) when the automaton
        would be too large; results are minimal, so an empty language is ``NOTHING``."""
        from ..automata import boolean
        from ..errors import CompileError

        try:
            return getattr(boolean, op)(*nodes, max_states=MAX_LEXEME_STATES, pair=False)
        except CompileError:
            pass
        if self._paired_left > 0:  # the operands' minimal DFAs paired may fit (boolean.paired)
            try:
                found = boolean.paired(op, nodes, max_states=MAX_LEXEME_STATES)
            except CompileError:
                self._paired_left -= MAX_LEXEME_STATES  # a failed pairing costs as much as a large success
            else:
                self._paired_left -= len(found.accepting) if isinstance(found, Automaton) else 1
                return found
        self.unsupported(pointer, f"{what}: the combined automaton exceeds {MAX_LEXEME_STATES} states "
                         f"(not checked)")
        return None

    def length_string(self, conj: list[Sub], nots: list[Sub]) -> Expr | None:
        """A string value whose only constraints are a length range, exactly; None when there is
        no range, or other string keywords (a pattern, an asserted format, a ``not``) need the
        whole string as one lexeme (then bounds past ``self.max_length`` are relaxed, reported).

        Within ``self.max_length`` code points (256) the string is one lexeme. A longer one would
        need a counter of ``maxLength`` states (a 4096-character description: about 40k lexer
        states), so it is lexed in pieces of ``k = PIECE_LENGTH`` (64): ``"`` and exactly ``k``
        code points, then pieces of exactly ``k``, then the last 1 to ``k`` and the closing quote
        (or the whole string, up to ``k``, as one lexeme). The lexer ends a lexeme only where it
        cannot go on, so a piece of ``k`` ends exactly where the next code point starts and the
        split is unique: the grammar counts the pieces, and each count allows the lengths of the
        last piece that keep the total in range."""
        cap = self.max_length
        bounds = self._length_only(conj, nots) if cap >= 1 else None
        if bounds is None:
            return None
        lo, hi = bounds
        if hi is not None and hi < lo:
            return NEVER
        from .strings import counted_string_node

        if lo <= cap and (hi is None or hi <= cap):
            ref = self.term(counted_string_node(lo, hi), "STRING")
            self.counted[ref.name] = (lo, hi)
            return ref
        if not self.pieces or cap < MIN_PIECE_LENGTH:
            return None  # (shorter pieces put a boundary in too many tokens: slow masks)
        return self.pieces_rule(lo, hi)

    def pieces_rule(self, lo: int, hi: int | None) -> Ref:
        """A rule for the JSON strings of ``lo`` to ``hi`` code points (``None``: unbounded) in
        pieces of ``k`` (see :meth:`length_string`): a unit for ``piece_conflicts``."""
        from .strings import counted_string_node, string_end, string_pieces

        k = min(self.max_length, PIECE_LENGTH)
        opts: list[Expr] = []
        if lo <= k:  # at most k code points: one lexeme
            opts.append(self.term(counted_string_node(lo, k if hi is None else min(hi, k)), "STRING"))
        # m pieces of k, then the last piece of t code points (1 <= t <= k): length m*k + t
        first = max(1, -(-lo // k) - 1)
        last = None if hi is None else (hi - 1) // k
        if last is None or last >= first:
            def last_piece(m: int) -> tuple[int, int]:
                return max(1, lo - k * m), k if hi is None else min(k, hi - k * m)

            # runs of piece counts whose last piece may have the same lengths: only the first
            # and the last count can differ from 1..k
            groups: list[list[Any]] = [[first, first, last_piece(first)]]
            if last is None or last > first:
                mid_end = None if last is None else last - 1
                if mid_end is None or mid_end > first:
                    groups.append([first + 1, mid_end, (1, k)])
                if last is not None:
                    groups.append([last, last, last_piece(last)])
            merged: list[list[Any]] = []
            for g in groups:
                if merged and merged[-1][2] == g[2]:
                    merged[-1][1] = g[1]
                else:
                    merged.append(g)
            head_node, piece_node = string_pieces(k)
            piece = self.term(piece_node, "STRING_PIECE")
            tails: list[Expr] = []
            for m_lo, m_hi, (t_lo, t_hi) in merged:
                end = self.term(string_end(t_lo, t_hi), "STRING_END")
                reps = Rep(piece, m_lo - 1, None if m_hi is None else m_hi - 1)
                tails.append(end if reps.max == 0 else Seq((reps, end)))
            head = self.term(head_node, "STRING_HEAD")
            self.head_term = head.name
            opts.append(Seq((head, tails[0] if len(tails) == 1 else Alt(tuple(tails)))))
        name = self.new_rule("long_string")
        self.define(name, opts[0] if len(opts) == 1 else Alt(tuple(opts)))
        self.value_rules.add(name)
        return Ref(name)

    def _length_only(self, conj: list[Sub], nots: list[Sub]) -> tuple[int, int | None] | None:
        """``(minLength, maxLength)`` of the strings ``conj`` allows when lengths are its only
        string constraints (formats it does not assert aside: noted), else None (also without
        any length bound)."""
        if nots:
            return None
        lo, hi = 0, None
        unasserted = []
        for sub in conj:
            s = sub.schema
            if "pattern" in s:
                return None
            fmt = s.get("format")
            if isinstance(fmt, str):
                from .formats import format_node

                if format_node(fmt) is not None:
                    return None
                unasserted.append(fmt)
            if "minLength" in s:
                lo = max(lo, _nonneg_int(s["minLength"], sub, "minLength"))
            if "maxLength" in s:
                v = _nonneg_int(s["maxLength"], sub, "maxLength")
                hi = v if hi is None else min(hi, v)
        if lo == 0 and hi is None:
            return None
        for fmt in unasserted:
            self.note(f"format {fmt!r} is not asserted (an annotation only)")
        return lo, hi

    def string_language(self, conj: list[Sub], nots: list[Sub]) -> Node | Any:
        """The JSON string texts (quotes included) allowed by the string keywords of ``conj``."""
        from .strings import any_string_node

        parts: list[Node] = []
        for sub in conj:
            p = self._string_parts(sub.schema, sub)
            if p is NEVER:
                return NEVER
            parts.extend(p)
        where = conj[0].pointer if conj else ""
        node: Node = any_string_node()
        if len(parts) == 1:
            node = parts[0]
        elif parts:
            both = self.boolean("intersect", parts, where, "string constraints together (pattern, format, "
                                "length)")
            node = both if both is not None else max(parts, key=_priority)
        for n in nots:
            inner = n.schema.inner
            t = _type_set(inner)
            if t is not None and "string" not in t:
                continue
            ex = self._string_parts(inner, n)
            if ex is NEVER:
                continue
            excl = self.boolean("intersect", ex, n.pointer, "'not'") if len(ex) > 1 else ex[0] if ex \
                else any_string_node()
            if "enum" in inner or "const" in inner:
                vals = [inner["const"]] if "const" in inner else inner["enum"]
                lits = [self._string_literal(v) for v in vals if isinstance(v, str)]
                if not lits:
                    continue
                from ..regex.ast import Alt as RxAlt
                lit_node = lits[0] if len(lits) == 1 else RxAlt(tuple(lits))
                excl = lit_node if excl is None else self.boolean("intersect", [excl, lit_node], n.pointer, "'not'")
            if excl is None:
                continue
            rest = self.boolean("difference", [node, excl], n.pointer, "'not'")
            if rest is not None:
                node = rest
        if _known_empty(node):
            return NEVER
        return node

    def _string_literal(self, v: str) -> Node:
        from .strings import literal_string_node

        return literal_string_node(v)

    def _string_parts(self, s: dict, sub: Sub) -> list[Node] | Any:
        from .strings import length_node, string_node

        parts: list[Node] = []
        lo = s.get("minLength")
        hi = s.get("maxLength")
        if lo is not None or hi is not None:
            lo_i = _nonneg_int(lo, sub, "minLength") if lo is not None else 0
            hi_i = _nonneg_int(hi, sub, "maxLength") if hi is not None else None
            if hi_i is not None and hi_i < lo_i:
                return NEVER
            cap = self.max_length
            if lo_i > cap or (hi_i is not None and hi_i > cap):
                self.unsupported(sub.pointer, f"minLength/maxLength above {cap} are not enforced here "
                                 f"(longer strings are allowed)")
                lo_i = min(lo_i, cap)
                hi_i = None
            if lo_i or hi_i is not None:
                parts.append(string_node(length_node(lo_i, hi_i)))
        if not self.string_constraints and ("pattern" in s or "format" in s):
            self.unsupported(sub.pointer, "pattern/format not enforced: together with the schema's other string "
                             "constraints they need too large a lexer (over Limits.max_json_lexer_states)")
            return parts
        pat = s.get("pattern")
        if pat is not None:
            if not isinstance(pat, str):
                raise SchemaError("pattern must be a string", pointer=sub.pointer + "/pattern")
            node = self.pattern_string(pat, sub.pointer + "/pattern")
            if node is not None:
                parts.append(node)
        fmt = s.get("format")
        if isinstance(fmt, str):
            from .formats import APPROXIMATE_FORMATS, format_node

            node = format_node(fmt)
            if node is None:
                self.note(f"format {fmt!r} is not asserted (an annotation only)")
            else:
                if fmt in APPROXIMATE_FORMATS:
                    self.note(f"format {fmt!r} is checked from above (see FORMAT_NOTES)")
                parts.append(string_node(node))
        return parts

    def pattern_exact(self, pattern: str, pointer: str) -> bool:
        """Whether ``pattern`` is enforced exactly (else it is reported; malformed: an error)."""
        try:
            _pattern_string(pattern)
            return True
        except RegexError as e:
            if "not supported" not in e.reason:
                raise SchemaError(f"pattern: {e}", pointer=pointer) from None
            self.unsupported(pointer, f"patternProperties pattern {pattern!r}: {e.reason} (the keys of this "
                             f"subschema are not checked against its patternProperties/additionalProperties)")
            return False

    def pattern_string(self, pattern: str, pointer: str) -> Node | None:
        """The JSON strings ``pattern`` (ECMA-262, search semantics) matches somewhere. A regular
        construct the regex engine lacks (a nested lookahead, lookbehind, backreference, word
        boundary) is relaxed: the pattern is read without lookarounds and word boundaries,
        backreferences as any text (reported); None when even that fails (the pattern is not
        enforced). Malformed patterns are errors."""
        try:
            return _pattern_string(pattern)
        except RegexError as e:
            if "not supported" not in e.reason:
                raise SchemaError(f"pattern: {e}", pointer=pointer) from None
            self.unsupported(pointer, f"pattern {pattern!r}: {e.reason} at offset {e.offset} (checked without it)")
        try:
            return _pattern_string(_approximate_pattern(pattern))
        except RegexError:
            return None

    def number_language(self, conj: list[Sub], nots: list[Sub], integer: bool) -> Node | Any:
        """The number texts allowed by the numeric keywords of ``conj`` (and not by ``nots``)."""
        from .numbers import number_node

        bounds = _Bounds()
        for sub in conj:
            bounds.add(sub)
        if bounds.empty:
            return NEVER
        where = conj[0].pointer if conj else ""
        node = self._bounds_node(bounds, integer, where)
        if node is NEVER:
            return NEVER
        for n in nots:
            inner = n.schema.inner
            t = _type_set(inner)
            if t is not None and "number" not in t and "integer" not in t:
                continue
            if "enum" in inner or "const" in inner:
                vals = [inner["const"]] if "const" in inner else inner["enum"]
                for v in vals:
                    if _type_of(v) == "number":
                        rest = self.boolean("difference", [node, number_node(minimum=v, maximum=v)], n.pointer,
                                            "'not'")
                        node = node if rest is None else rest
                continue
            b = _Bounds()
            b.add(n.child(inner))
            if b.empty:
                continue
            excl = self._bounds_node(b, t is not None and "integer" in t and "number" not in t, n.pointer)
            if excl is NEVER:
                continue
            rest = self.boolean("difference", [node, excl], n.pointer, "'not'")
            node = node if rest is None else rest
        return NEVER if _known_empty(node) else node

    def _bounds_node(self, bounds: _Bounds, integer: bool, pointer: str) -> Node | Any:
        """``bounds`` as a number lexeme: NEVER when no number satisfies them; a multipleOf too
        fine to enforce is relaxed (reported)."""
        try:
            return bounds.node(integer)
        except ValueError as e:
            if str(e).startswith("no number satisfies"):
                return NEVER
            if not bounds.multiples:
                raise SchemaError(f"numeric bounds: {e}", pointer=pointer) from None
            self.unsupported(pointer + "/multipleOf", f"multipleOf not enforced: {e}")
            bounds.multiples = []
            return self._bounds_node(bounds, integer, pointer)

    # -- enum / const ------------------------------------------------------------------------

    def const_values(self, t: str, vals: list[Any], conj: list[Sub], nots: list[Sub], depth: int,
                     integer: bool = False) -> Expr:
        """The values ``vals`` (all of type ``t``) that the other keywords of ``conj`` allow."""
        if t in ("null", "boolean"):
            opts = [self.lit(json.dumps(v)) for v in _dedupe(vals) if not self._excluded_literal(v, nots)]
            return NEVER if not opts else opts[0] if len(opts) == 1 else Alt(tuple(opts))
        if t in ("string", "number"):
            from ..regex.ast import Alt as RxAlt
            from .numbers import number_node

            if t == "string":
                bounds = self._length_only(conj, nots)
                if bounds is not None:  # lengths only: counted here, whatever the bounds
                    lo, hi = bounds
                    vals = [v for v in vals if lo <= len(v) and (hi is None or len(v) <= hi)]
                    if not vals:
                        return NEVER
                    conj, nots = [], []
                lits = [self._string_literal(v) for v in _dedupe(vals)]
                lang = self.string_language(conj, nots)
            else:
                lits = [number_node(minimum=v, maximum=v) for v in _dedupe(vals)]
                lang = self.number_language(conj, nots, integer)
            if lang is NEVER:
                return NEVER
            node = lits[0] if len(lits) == 1 else RxAlt(tuple(lits))
            # every literal is a valid string: intersecting with the unconstrained language would
            # only cost time (a 50k-value enum)
            both = None if t == "string" and lang == _any_string() else \
                self.boolean("intersect", [node, lang], conj[0].pointer if conj else "", "enum/const")
            if both is not None:
                node = both
                if _known_empty(node):
                    return NEVER
            return self.term(node, "ENUM" if len(lits) > 1 else "CONST")
        # objects and arrays: each value as a fixed structure
        if any(set(s.schema) & (_OBJECT_KW | _ARRAY_KW) for s in conj if isinstance(s.schema, dict)):
            self.note("enum/const object or array values are not checked against sibling keywords")
        opts = [self.fixed_value(v, depth) for v in _dedupe(vals)]
        return opts[0] if len(opts) == 1 else Alt(tuple(opts))

    def _fixed_member(self, v: Any, depth: int) -> Expr:
        """``fixed_value`` of a member or item: a non-empty object or array gets a rule of its own,
        a whole JSON value (``json_schema.paths`` pairs the values that enclose each point)."""
        inner = self.fixed_value(v, depth)
        if not isinstance(v, (dict, list)) or not v:
            return inner
        name = self.new_rule("const")
        self.define(name, inner)
        self.value_rules.add(name)
        return Ref(name)

    def fixed_value(self, v: Any, depth: int) -> Expr:
        """Exactly the JSON value ``v`` (any spelling of its strings and numbers)."""
        from .numbers import number_node

        t = _type_of(v)
        if t in ("null", "boolean"):
            return self.lit(json.dumps(v))
        if t == "string":
            return self.term(self._string_literal(v), "CONST")
        if t == "number":
            return self.term(number_node(minimum=v, maximum=v), "CONST")
        if t == "array":
            if not v:
                return self.empty("[]", depth)
            items: list[Expr] = [self.open_("[", depth)]
            for i, x in enumerate(v):
                if i:
                    items.append(self.sep(depth))
                items.append(self.member_value(self._fixed_member(x, depth + 1)))
            items.append(self.close("]", depth))
            return Seq(tuple(items))
        if not v:
            return self.empty("{}", depth)
        from .strings import literal_string_node

        orders = [list(v)]
        if self.property_order == "any" and len(v) <= 4:
            orders = [list(p) for p in itertools.permutations(v)]
        alts = []
        for order in orders:
            items = [self.open_("{", depth)]
            for i, k in enumerate(order):
                if i:
                    items.append(self.sep(depth))
                items.append(self.key_term(literal_string_node(k), "KEY_" + k))
                items.append(self.ws())
                items.append(self.member_value(self._fixed_member(v[k], depth + 1)))
            items.append(self.close("}", depth))
            alts.append(Seq(tuple(items)))
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))


class _Exists(dict):
    """Marker schema for an object with at least one member whose key's JSON text is in ``keys``
    and whose value satisfies every schema of ``values`` (``Translator._negate_members``); as a
    schema it is ``{"type": "object"}``, and :func:`~logitgate.json_schema.objects.object_expr`
    tracks the member."""

    def __init__(self, keys: Node, values: tuple[Sub, ...]) -> None:
        super().__init__(type="object")
        self.keys = keys
        self.values = values


class _NotSchema(dict):
    """Marker schema ``{"not": inner}`` for a primitive-only negation, handled per type."""

    @property
    def inner(self) -> dict:
        return self["not"]


_ABSENT = object()
"""A property's "value" when the object does not have it (see ``_contradicts``)."""


def _value_constraints(schema: Any, allowed: dict[str, set], excluded: dict[str, set]) -> bool:
    """Record what ``schema`` (one member of a conjunction) says about the values of object
    properties: ``const``/``enum``/``false`` property schemas narrow ``allowed[p]`` (``_json_key``s
    of the values, and ``_ABSENT`` unless ``p`` is required there), a negated ``const``/``enum`` and
    ``required`` add to ``excluded[p]``. Returns whether ``schema`` forces the value to be an object."""
    if not isinstance(schema, dict):
        return False
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    for p in required:
        if isinstance(p, str):
            excluded.setdefault(p, set()).add(_ABSENT)
    props = schema.get("properties")
    if isinstance(props, dict):
        for p, ps in props.items():
            if isinstance(ps, Sub):
                ps = ps.schema
            values: list[Any] | None = None
            if ps is False:
                values = []
            elif isinstance(ps, _NotSchema):
                inner = ps.inner
                if isinstance(inner, dict) and len(inner) == 1 and ("const" in inner or isinstance(inner.get("enum"), list)):
                    vals = [inner["const"]] if "const" in inner else inner["enum"]
                    excluded.setdefault(p, set()).update(_json_key(v) for v in vals)
                continue
            elif isinstance(ps, dict) and "const" in ps:
                values = [ps["const"]]
            elif isinstance(ps, dict) and isinstance(ps.get("enum"), list):
                values = ps["enum"]
            if values is None:
                continue
            domain = {_json_key(v) for v in values}
            if p not in required:
                domain.add(_ABSENT)
            allowed[p] = domain if p not in allowed else allowed[p] & domain
    t = schema.get("type")
    return t == "object" or t == ["object"]


def _contradicts(done: list[Sub], sub: Sub) -> bool:
    """Whether ``done`` and ``sub`` together certainly allow no value: every member forces an object
    (or one does) and some property can take none of its values (two different ``const``s, a
    ``const`` and its negation, ``required`` and ``false``...). Used to prune the disjunctive normal
    form early (an ``allOf`` of ``if``/``then`` on one discriminator property has few consistent
    combinations among exponentially many); a conjunction it does not catch is still found empty
    later, so this is only about speed and the alternatives cap."""
    allowed: dict[str, set] = {}
    excluded: dict[str, set] = {}
    is_object = False
    for member in (*done, sub):
        is_object |= _value_constraints(member.schema, allowed, excluded)
    if not is_object:
        return False
    return any(not (domain - excluded.get(p, set())) for p, domain in allowed.items())


_COUNT_NEGATION = {  # keyword -> (the type it constrains, the keyword of its negation, bound shift)
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1),
    "maxProperties": ("object", "minProperties", 1),
}
_NEGATABLE_STRUCTURE = {"type", "properties", "required", "items", "contains", "patternProperties",
                        "additionalProperties", "propertyNames", *_COUNT_NEGATION}
"""Keywords of a schema ``Translator.negate`` negates keyword by keyword (with their subschemas)."""


def _count(v: Any) -> int | None:
    """A count keyword's value (a non-negative integer, ``2.0`` too), else None."""
    return int(v) if _is_integral(v) and v >= 0 else None


def _fresh(x: Any) -> Any:
    """A copy of a negation's part (a Sub, or a group of them) with no scope set."""
    if isinstance(x, Sub):
        return Sub(x.schema, x.resolver, x.pointer, x.draft, entered=x.entered, dyn=x.dyn)
    if isinstance(x, _Group):
        return _Group([_fresh(m) for m in x.members])
    return x


def subschemas(v: Any, sub: Sub, *path: str | int) -> list[Sub]:
    """The subschemas the value ``v`` of one of ``sub``'s keywords (at ``path``) stands for: a
    schema, or what a negation put there (``negate``: a Sub, or a group of them)."""
    if isinstance(v, Sub):
        return [v]
    if isinstance(v, _Group):
        return [m for x in v.members for m in subschemas(x, sub, *path)]
    return [sub.child(v, *path)]


def _negated(sub: Sub, inner: dict) -> Sub:
    """The primitive-only negation of ``inner`` (a schema of ``sub``'s resource)."""
    return Sub(_NotSchema({"not": inner}), sub.resolver, sub.pointer + "/not", sub.draft, dyn=sub.dyn)


def _has_key(value: Any, key: str) -> bool:
    """Whether ``key`` is a key of some object inside the JSON value ``value``."""
    if isinstance(value, dict):
        return key in value or any(_has_key(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, key) for v in value)
    return False


def _set_scope(items: list[Any], scope: tuple) -> None:
    for x in items:
        if isinstance(x, Sub):
            if not x.scope:
                x.scope = scope
        elif isinstance(x, _Group):
            _set_scope(x.members, scope)
        elif isinstance(x, _BranchSet):
            _set_scope(x.options, scope)


def _branch_keyword(pointer: str) -> str:
    """The keyword of the disjunction at ``pointer`` (a ``_BranchSet``'s), for a report."""
    parts = pointer.rsplit("/", 2)
    if parts[-1] in ("anyOf", "oneOf", "not", "if"):
        return f"'{parts[-1]}'" if parts[-1] != "if" else "if/then/else"
    if len(parts) == 3 and parts[1] in ("dependencies", "dependentRequired", "dependentSchemas"):
        return f"{parts[1]} of {parts[2]!r}"
    return "a branch's negation of the others" if pointer else "a disjunction"


class _TooManyAlternatives(SchemaLimitError):
    """The DNF of a position's combinators is over ``Limits.max_schema_alternatives``."""


class _Group:
    """Several subschemas that together form one branch."""

    __slots__ = ("members",)

    def __init__(self, members: list[Any]) -> None:
        self.members = members


class _BranchSet:
    """A pending disjunction inside a conjunction being expanded; ``pointer``: the keyword it
    stands for (``/anyOf``, ``/if``, ...)."""

    __slots__ = ("options", "pointer")

    def __init__(self, options: list[Any], pointer: str = "") -> None:
        self.options = options
        self.pointer = pointer


def _list(v: Any, sub: Sub, kw: str) -> list:
    if not isinstance(v, list):
        raise SchemaError(f"{kw} must be an array", pointer=f"{sub.pointer}/{kw}")
    if kw in ("allOf", "anyOf", "oneOf") and not v:
        raise SchemaError(f"{kw} must not be empty", pointer=f"{sub.pointer}/{kw}")
    return v


def types_and_consts(plain: list[Sub]) -> tuple[set[str], list[Any] | None]:
    """The types a conjunction allows (``type`` keywords intersected; "integer" apart) and the
    values its ``const``/``enum`` keywords leave (None: no such keyword)."""
    types = set(_JSON_TYPES)
    consts: list[Any] | None = None
    for b in plain:
        t = _type_set(b.schema)
        if t is None:
            raise SchemaError("'type' must be a type name or a list of them", pointer=b.pointer + "/type")
        types &= t
        for kw in ("const", "enum"):
            if kw in b.schema:
                vals = [b.schema["const"]] if kw == "const" else _list(b.schema["enum"], b, "enum")
                consts = vals if consts is None else _keep_in(consts, vals)
    return types, consts


@functools.lru_cache(maxsize=1)
def _any_string() -> Node:
    from .strings import any_string_node

    return any_string_node()


def _json_key(v: Any) -> Any:
    """A hashable key equal for exactly the values :func:`_json_equal` calls equal."""
    if isinstance(v, bool) or v is None:
        return ("c", v)
    if isinstance(v, (int, Decimal)):
        return ("n", Decimal(v))
    if isinstance(v, dict):
        return ("o", tuple(sorted((k, _json_key(x)) for k, x in v.items())))
    if isinstance(v, list):
        return ("a", tuple(_json_key(x) for x in v))
    return (type(v).__name__, v)


def _dedupe(vals: list[Any]) -> list[Any]:
    """``vals`` without repeats (JSON equality), in first-seen order; linear time."""
    seen: set[Any] = set()
    out: list[Any] = []
    for v in vals:
        k = _json_key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def _keep_in(vals: list[Any], allowed: list[Any]) -> list[Any]:
    """The members of ``vals`` JSON-equal to some member of ``allowed`` (linear time)."""
    keys = {_json_key(w) for w in allowed}
    return [v for v in vals if _json_key(v) in keys]


@dataclass(frozen=True)
class _Signature:
    """A ``oneOf`` branch as its disjointness check sees it: the JSON types it allows, the
    properties it requires, the ``const``/``enum`` values and the types it allows each property
    (an empty set: ``false``), each property's subschemas, under ``additionalProperties: false``
    with no ``patternProperties`` the only property names it lets on (else None), the types
    ``additionalProperties`` allows the properties not named (per schema merged: the names, the
    types), the property counts it allows, and its ``anyOf``/``oneOf`` members (one of each list
    holds)."""

    types: set[str]
    required: set[str]
    values: dict[str, list[Any]]
    prop_types: dict[str, set[str]]
    prop_subs: dict[str, list[tuple[Sub, dict]]]  # (the schema holding it, the property's subschema)
    closed: set[str] | None
    extras: tuple[tuple[frozenset[str], frozenset[str]], ...] = ()
    min_props: int = 0
    max_props: int | None = None
    unions: tuple[list[Sub], ...] = ()
    own: list[Any] | None = None  # the values its own ``const``/``enum`` allows (None: no such bound)

    def types_of(self, p: str) -> set[str] | None:
        """The types property ``p``'s value may have (None: any)."""
        out = self.prop_types.get(p)
        for named, types in self.extras:
            if p not in named:
                out = set(types) if out is None else out & types
        return out

    def both(self, other: "_Signature") -> "_Signature":
        """What a value satisfying both knows (an ``allOf``): each restriction of either holds."""
        prop_types = dict(self.prop_types)
        for p, t in other.prop_types.items():
            prop_types[p] = prop_types[p] & t if p in prop_types else t
        values = dict(other.values)
        values.update(self.values)  # either list bounds the values: keep one
        prop_subs = {p: self.prop_subs.get(p, []) + other.prop_subs.get(p, [])
                     for p in self.prop_subs.keys() | other.prop_subs.keys()}
        closed = self.closed if other.closed is None else other.closed if self.closed is None else \
            self.closed & other.closed
        max_props = self.max_props if other.max_props is None else other.max_props if self.max_props is None else \
            min(self.max_props, other.max_props)
        return _Signature(self.types & other.types, self.required | other.required, values, prop_types, prop_subs,
                          closed, self.extras + other.extras, max(self.min_props, other.min_props), max_props,
                          self.unions + other.unions, self.own if self.own is not None else other.own)


def _asserts(keyword: str) -> bool:
    """Whether a keyword constrains values: a known one other than the annotations (``format``
    does); unknown keywords are annotations, as the spec says."""
    return keyword in KNOWN and (keyword not in ANNOTATIONS or keyword == "format")


def _values_of(s: dict) -> list[Any] | None:
    """The values a subschema's ``const`` or ``enum`` allows (None: no such bound)."""
    if "const" in s:
        return [s["const"]]
    if isinstance(s.get("enum"), list):
        return list(s["enum"])
    return None


def _type_set(s: Any) -> set[str] | None:
    """The JSON types a schema's ``type`` keyword allows ("integer" and "number" kept apart)."""
    if not isinstance(s, dict) or "type" not in s:
        return set(_JSON_TYPES)
    t = s["type"]
    names = t if isinstance(t, list) else [t]
    if not all(isinstance(n, str) and n in _JSON_TYPES for n in names):
        return None
    out = set(names)
    if "number" in out:
        out.add("integer")
    return out


def _nonneg_int(v: Any, sub: Sub, kw: str) -> int:
    if isinstance(v, bool) or not _is_integral(v) or v < 0:
        raise SchemaError(f"{kw} must be a non-negative integer", pointer=f"{sub.pointer}/{kw}")
    return int(v)


_DIFF_CACHE: dict[tuple[Node, Node], Node] = {}


def _known_empty(node: Node) -> bool:
    """Whether a lexeme language is empty. Boolean results are trimmed minimal automata, so only
    ``NOTHING`` is empty; the other trees (lengths, formats, literals, patterns, whose emptiness
    :func:`_pattern_string` checks once per pattern) match something."""
    return isinstance(node, CharClass) and not node.ranges


@functools.lru_cache(maxsize=1024)
def _pattern_string(pattern: str) -> Node:
    """The JSON string texts whose value ``pattern`` matches (``NOTHING`` if none)."""
    from ..automata.boolean import NOTHING, is_empty
    from .ecma import pattern_node
    from .strings import string_node

    content = pattern_node(pattern)
    return NOTHING if is_empty(content) else string_node(content)


def _approximate_pattern(pattern: str) -> str:
    """A pattern matching a superset of ``pattern``'s strings: lookaround groups and word
    boundaries removed (they only restrict), backreferences read as any text."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if not in_class and nxt in "bB":
                i += 2
                continue
            if not in_class and (nxt.isdigit() and nxt != "0" or nxt == "k"):
                j = i + 2
                if nxt == "k" and j < n and pattern[j] == "<":
                    j = pattern.find(">", j) + 1 or n
                while nxt != "k" and j < n and pattern[j].isdigit():
                    j += 1
                out.append("[\\s\\S]*")
                i = j
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
        elif pattern.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            depth, j, cls = 0, i, False
            while j < n:  # skip to the group's closing parenthesis
                ch = pattern[j]
                if ch == "\\":
                    j += 2
                    continue
                if cls:
                    cls = ch != "]"
                elif ch == "[":
                    cls = True
                elif ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _priority(node: Node) -> int:
    """Which constraint to keep when a combination is too large: patterns and formats first."""
    return 0 if isinstance(node, Concat) and len(node.items) == 3 and isinstance(node.items[1], Repeat) else 1


def _covers_type(inner: dict, t: str) -> bool:
    """Whether the primitive-only schema ``inner`` accepts every value of type ``t``."""
    return t in _unconstrained_types(inner)


def _unconstrained_types(s: dict) -> set[str]:
    """The JSON types (``integer`` apart from ``number``) that schema ``s`` allows and none of
    its own keywords constrains, read without references: every value of them is accepted."""
    types = _type_set(s)
    if types is None:
        return set()
    for k in s:
        if k == "type" or not _asserts(k):
            continue
        applies = _KEYWORD_TYPES.get(k)
        if applies is None:  # a combinator, enum, const: taken to constrain every type
            return set()
        types -= applies
    return types


def _schema_accepts_primitive(inner: dict, v: Any) -> bool:
    """Whether a primitive-only schema (type/enum/const) accepts the null/boolean ``v``."""
    t = _type_set(inner)
    if t is not None and _type_of(v) not in t:
        return False
    if "const" in inner and not _json_equal(inner["const"], v):
        return False
    if "enum" in inner and not any(_json_equal(x, v) for x in inner["enum"]):
        return False
    return True


class _Bounds:
    """The tightest numeric bounds of several schemas."""

    def __init__(self) -> None:
        self.lo: Decimal | None = None
        self.lo_excl = False
        self.hi: Decimal | None = None
        self.hi_excl = False
        self.multiples: list[Decimal] = []
        self.empty = False

    def _lower(self, v: Any, excl: bool) -> None:
        v = Decimal(v)
        if self.lo is None or v > self.lo or (v == self.lo and excl):
            self.lo, self.lo_excl = v, excl

    def _upper(self, v: Any, excl: bool) -> None:
        v = Decimal(v)
        if self.hi is None or v < self.hi or (v == self.hi and excl):
            self.hi, self.hi_excl = v, excl

    def add(self, sub: Sub) -> None:
        s = sub.schema
        for kw in _NUMBER_KW:
            if kw in s and kw not in ("exclusiveMinimum", "exclusiveMaximum"):
                v = s[kw]
                if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
                    raise SchemaError(f"{kw} must be a number", pointer=f"{sub.pointer}/{kw}")
        if sub.draft == "draft4":
            if "minimum" in s:
                self._lower(s["minimum"], bool(s.get("exclusiveMinimum", False)))
            if "maximum" in s:
                self._upper(s["maximum"], bool(s.get("exclusiveMaximum", False)))
        else:
            if "minimum" in s:
                self._lower(s["minimum"], False)
            if "maximum" in s:
                self._upper(s["maximum"], False)
            for kw, fn in (("exclusiveMinimum", self._lower), ("exclusiveMaximum", self._upper)):
                if kw in s:
                    v = s[kw]
                    if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
                        raise SchemaError(f"{kw} must be a number", pointer=f"{sub.pointer}/{kw}")
                    fn(v, True)
        if "multipleOf" in s:
            m = Decimal(s["multipleOf"])
            if m <= 0:
                raise SchemaError("multipleOf must be greater than 0", pointer=f"{sub.pointer}/multipleOf")
            self.multiples.append(m)
        if self.lo is not None and self.hi is not None and (
                self.lo > self.hi or (self.lo == self.hi and (self.lo_excl or self.hi_excl))):
            self.empty = True

    def node(self, integer: bool) -> Node:
        from .numbers import number_node

        kw: dict[str, Any] = {"integer": integer}
        if self.lo is not None:
            kw["exclusive_minimum" if self.lo_excl else "minimum"] = self.lo
        if self.hi is not None:
            kw["exclusive_maximum" if self.hi_excl else "maximum"] = self.hi
        if not self.multiples:
            return number_node(**kw)
        from ..automata.boolean import intersect

        nodes = [number_node(multiple_of=m, **kw) for m in _dedupe(self.multiples)]
        return nodes[0] if len(nodes) == 1 else intersect(*nodes)


def build_ir(loaded: Loaded, *, whitespace: str, property_order: str, strict: bool, level: int = 0,
             pieces: bool = True, split: bool = False) -> Translation:
    """Translate a loaded schema into a grammar IR (raises SchemaError: see the module docstring).

    ``level`` (0 to ``MAX_LEVEL``) > 0 simplifies string lexemes when the exact ones need too
    large a lexer: lengths are enforced exactly only up to 128, 64, 32, 16, then not at all, and
    at the last level patterns and formats are dropped too (all reported). ``pieces``: strings
    with only length bounds beyond ``PIECE_LENGTH`` are lexed in pieces (see
    ``Translator.length_string``; the caller checks that no other lexeme runs past the first
    piece where it is expected, see ``piece_conflicts``). ``split``: the other unconstrained and
    length-only strings are lexed in pieces too (``_split_strings``), which the caller asks for
    when they are what may be expected there: a string in pieces costs more per mask than one
    lexeme that loops on itself."""
    caps = (MAX_EXACT_LENGTH, 128, 64, 32, 16, 0, 0)
    # pairing (``Translator.boolean``) only at the first level: a later one is for a lexer that was
    # too large, which the large automata pairing builds make larger
    tr = Translator(loaded, whitespace, property_order, strict, max_length=caps[level],
                    string_constraints=level < MAX_LEVEL, pieces=pieces,
                    paired_states=PAIRED_STATES if level == 0 else 0)
    root = Sub(loaded.root, loaded.resolver, "", loaded.draft)
    body = tr.value((root,), 0)
    if body is NEVER:
        raise SchemaError("no JSON document satisfies this schema", pointer="")
    if strict and tr.problems:
        raise SchemaError(
            f"the schema uses {len(tr.problems)} construct(s) that cannot be enforced exactly "
            f"(pass strict=False to compile an over-approximation)", tr.problems)
    start = tr.new_rule("start")
    tr.define(start, Seq((tr.ws(), body, tr.ws())) if whitespace == "flexible" else body)
    split_terms: frozenset[str] = frozenset()
    if tr.head_term is not None:
        if split:
            _split_strings(tr)
        else:
            split_terms = frozenset(_split_targets(tr))
    ir = GrammarIR(rules=tr.rules, terminals=tr.terminals, start=start, lex_mode="contextual", kind="json_schema",
                   notes=list(tr.notes))
    relaxed = [] if strict else list(tr.problems)
    return Translation(ir, relaxed, list(tr.notes), frozenset(tr.key_terms), tr.head_term, frozenset(tr.value_rules),
                       split_terms)


def _split_targets(tr: Translator) -> dict[str, tuple[int, int | None]]:
    """The string terminals ``_split_strings`` lexes in pieces, with their length bounds: the
    unconstrained string and those with only length bounds past a piece."""
    from .strings import any_string_node

    k = min(tr.max_length, PIECE_LENGTH)
    targets: dict[str, tuple[int, int | None]] = {}
    name = tr._term_names.get(any_string_node())
    if name is not None:
        targets[name] = (0, None)
    for term, (lo, hi) in tr.counted.items():
        if hi is None or hi > k:
            targets[term] = (lo, hi)
    return targets


def _split_strings(tr: Translator) -> None:
    """Lex the other string values that can run past a first piece in pieces too, sharing the
    long strings' pieces: the unconstrained ones and those with only length bounds. Where one is
    expected beside a long string, both read the same first piece (a whole string lexeme would
    run on past it, and the lexer would end neither there)."""
    targets = _split_targets(tr)
    if not targets:
        return
    swap = {term: tr.pieces_rule(lo, hi).name for term, (lo, hi) in targets.items()}
    for r in list(tr.rules.values()):
        if r.name not in swap.values():
            tr.rules[r.name] = RuleDef(r.name, rename_refs(r.body, swap), r.line)
    for term in targets:
        node = tr.terminals.pop(term).node
        tr._term_names.pop(node, None)


def piece_runners(tr: Translation, cfg: Any, lexer: Any) -> list[int]:
    """The value terminals that go on past a first piece of a long string: in the lexer, after
    the opening quote and ``PIECE_LENGTH`` code points, on a byte other than the closing quote
    (keys aside: never expected where a value is). Empty when there is no long string."""
    import numpy as np

    if tr.head_term is None:
        return []
    names = [t.name for t in cfg.terminals]
    n = len(names)
    h = names.index(tr.head_term)
    acc = lexer.acc_bits[:, h >> 6] >> np.uint64(h & 63) & np.uint64(1)
    cols = np.ones(256, bool)
    cols[0x22] = False
    nxt = lexer.trans[np.flatnonzero(acc)][:, cols].ravel()
    nxt = np.unique(nxt[nxt >= 0])
    if not nxt.size:
        return []
    reach = np.bitwise_or.reduce(lexer.reach_bits[nxt], axis=0)
    return [t for t in np.flatnonzero(np.unpackbits(reach.view(np.uint8), bitorder="little")[:n]).tolist()
            if t != h and names[t] not in tr.key_terms]


def piece_conflicts(tr: Translation, cfg: Any, lexer: Any) -> list[str]:
    """The value terminals that go on past a first piece of a long string (``piece_runners``)
    and may be expected where the first piece is: there the lexer would end neither, and a long
    string could be refused. Empty when there is no long string.

    The pieces' other terminals need a ``"`` there. Whether the others are expected there is
    decided by three tests in turn, each a necessary condition for being expected together:
    both come right after what one lexeme matched (``grammar.expected``); both start values
    that can start at one point of a document (``json_schema.paths``); the parser's rows,
    explored with each JSON value on its own (``grammar.expected``). In a grammar of over
    ``PIECE_EXPLORE_RULES`` rules, past ``PIECE_EXPLORE_ROWS`` rows, or where a value read whole
    may run beside another reading of the same text, the conflict stands."""
    from ..grammar.expected import expected_together, not_apart_by_predecessors, preceding_terminals
    from .paths import values_apart

    running = piece_runners(tr, cfg, lexer)
    if not running:
        return []
    names = [t.name for t in cfg.terminals]
    h = names.index(tr.head_term)
    before = preceding_terminals(cfg)  # once, for both tests that use it
    running = not_apart_by_predecessors(cfg, lexer, h, running, before)
    units = frozenset(i for i, name in enumerate(cfg.nonterminals) if name in tr.value_rules)
    running = values_apart(cfg, lexer, units, h, running)
    if not running:
        return []
    if len(cfg.rules) > PIECE_EXPLORE_RULES:
        return [names[t] for t in running]
    if expected_together(cfg, lexer, h, running, units=units, max_rows=PIECE_EXPLORE_ROWS, before=before) is False:
        return []
    return [names[t] for t in running]
    if expected_together(cfg, lexer, h, running, units=units, max_rows=PIECE_EXPLORE_ROWS, before=before) is False:
        return []
    return [names[t] for t in running]

