"""The JSON Schema keywords logitgate knows, and how far each is enforced.

:data:`KEYWORDS` is the machine-readable form of the keyword list in the documentation (the docs
build renders it as a table) and is checked against the translator by
``tests/test_json_schema_keywords.py``: every keyword the translator reads is listed, each
``exact`` or ``bounded`` keyword is enforced on a sample schema in strict mode, each ``bounded``
or ``partial`` keyword has a case that strict mode refuses, and each ``annotation`` changes
nothing.

A keyword not in the table is an annotation too (ignored), as the drafts require of unknown
keywords.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STATUSES", "Keyword", "KEYWORDS"]

STATUSES: dict[str, str] = {
    "exact": "enforced exactly",
    "bounded": "enforced exactly up to a size bound; beyond it relaxed (reported)",
    "partial": "enforced exactly in the cases named; in the others relaxed (reported)",
    "reference": "locates or identifies schemas; constrains nothing by itself",
    "annotation": "ignored",
}
"""What each ``Keyword.status`` means. A relaxation is an over-approximation: ``strict=True`` (the
default) refuses it with a ``SchemaError`` naming its JSON pointer; ``strict=False`` compiles it
and lists it in ``Grammar.relaxed``."""


@dataclass(frozen=True)
class Keyword:
    """One JSON Schema keyword: the values it applies to, its status (a key of :data:`STATUSES`),
    the drafts that define it, and notes on what is and is not enforced."""

    name: str
    applies_to: str
    """``"any"`` or the JSON type(s) the keyword constrains (``"string"``, ``"number"``, ...)."""
    status: str
    drafts: str
    """The drafts that define the keyword: ``"all"`` (4 to 2020-12), ``"6+"``, ``"2019-09+"``, ``"4-7"``..."""
    notes: str = ""


def _k(name: str, applies_to: str, status: str, drafts: str, notes: str = "") -> tuple[str, Keyword]:
    return name, Keyword(name, applies_to, status, drafts, notes)


KEYWORDS: dict[str, Keyword] = dict([
    # -- any type ---------------------------------------------------------------------------
    _k("type", "any", "exact", "all", "A type name or a list of them; `integer` excludes `1.5` but allows `3.0` "
       "from draft 6 on (draft 4 integers have no fraction)."),
    _k("enum", "any", "exact", "all", "Numbers compare by value (`1` and `1.0` are equal)."),
    _k("const", "any", "exact", "6+", "Numbers compare by value (`1` and `1.0` are equal)."),
    # -- combinators ------------------------------------------------------------------------
    _k("allOf", "any", "exact", "all", "The members are merged into one conjunction."),
    _k("anyOf", "any", "exact", "all", "Combinations past `Limits.max_schema_alternatives` at one position: "
       "an error in strict mode; a lenient translation expands the disjunctions on each path while the "
       "product of their branch counts stays within the cap and leaves the rest (`anyOf`, `oneOf`, `not`, "
       "`if`, dependencies) out, reported."),
    _k("oneOf", "any", "partial", "all", "Exact when the branches are disjoint (by type; for objects by a "
       "required property's `const`/`enum` values or types, `additionalProperties`' types or property counts; "
       "a branch that is an `anyOf`/`oneOf` member by member), when two branches accept every value of a type "
       "(that type is then excluded), or when every branch can be negated (as for `not`: each branch is then "
       "taken with the negation of all the others); otherwise enforced as `anyOf` (reported)."),
    _k("not", "any", "partial", "all", "Exact where the negation is decidable: types, primitive constraints, "
       "`properties`/`required`, `minItems`/`maxItems`/`minProperties`/`maxProperties`, `items`, `contains`, "
       "`patternProperties`/`additionalProperties`/`propertyNames` (a member that breaks them, at most five "
       "per object), `anyOf`/`allOf`/`oneOf` of those, a double `not`; otherwise ignored."),
    _k("if", "any", "partial", "7+", "With `then`/`else`: exact when `if` can be negated (as for `not`); "
       "otherwise enforced as (if and then) or else; also relaxed when the combinators at one position "
       "expand into more than `Limits.max_schema_alternatives` branches."),
    _k("then", "any", "partial", "7+", "See `if`."),
    _k("else", "any", "partial", "7+", "See `if`."),
    _k("dependentRequired", "object", "exact", "2019-09+"),
    _k("dependentSchemas", "object", "exact", "2019-09+"),
    _k("dependencies", "object", "exact", "4-7", "Both forms: a list of property names or a schema."),
    # -- references and identifiers ---------------------------------------------------------
    _k("$ref", "any", "exact", "all", "Local, relative and remote references (remote documents through "
       "`registry=`), recursion included. Before 2019-09 keywords beside `$ref` are ignored, as the "
       "drafts say."),
    _k("$dynamicRef", "any", "exact", "2020-12", "Resolved in the dynamic scope (the outermost resource "
       "on the way that defines the `$dynamicAnchor`), as `jsonschema` does; a subschema reached through "
       "scopes that bind it differently is translated once per binding."),
    _k("$recursiveRef", "any", "partial", "2019-09", "`\"#\"` (the only value 2019-09 defines) is resolved in "
       "the dynamic scope, through `$recursiveAnchor`; any other value is resolved like `$ref` (reported)."),
    _k("$defs", "any", "reference", "2019-09+", "Holds subschemas for `$ref`."),
    _k("definitions", "any", "reference", "all", "Holds subschemas for `$ref`."),
    _k("$id", "any", "reference", "6+", "Base URI of a schema resource."),
    _k("id", "any", "reference", "4", "Draft 4's `$id`."),
    _k("$anchor", "any", "reference", "2019-09+"),
    _k("$dynamicAnchor", "any", "reference", "2020-12", "A target of `$dynamicRef`. As in `jsonschema` (the "
       "`referencing` library), a `$ref` to it resolves in the dynamic scope too."),
    _k("$recursiveAnchor", "any", "reference", "2019-09"),
    _k("$schema", "any", "reference", "all", "Selects the draft (the default is 2020-12)."),
    _k("$vocabulary", "any", "reference", "2019-09+"),
    # -- strings ----------------------------------------------------------------------------
    _k("minLength", "string", "bounded", "all", "In code points, exact at any bound when lengths are a "
       "string's only constraints (past 256, the string is lexed in pieces of 64; where another value "
       "lexeme that could run on past the first piece, such as a pattern's, may start a value at the same "
       "point of a document, the schema's lengths fall back to the rule below). Together with a pattern or an asserted format: exact up to 256, not enforced "
       "above (reported)."),
    _k("maxLength", "string", "bounded", "all", "As `minLength`."),
    _k("pattern", "string", "partial", "all", "ECMA-262 syntax with search semantics (unanchored). Lookaheads "
       "in the pattern's top-level sequence (`^(?!@@)\\w+$`, `^(?=.*\\d).{8,}$`) and tempered repetitions "
       "before the final `$` (`^((?!foo).)*$`) are exact. A pattern with other lookaheads, lookbehinds or "
       "backreferences is not enforced (reported with its offset). The string "
       "constraints of one position (pattern, format, lengths) together may need at most 20,000 automaton "
       "states (a format with a `maxLength` of 255, such as `email`'s, fits; `uri`'s does not), those built "
       "by pairing the constraints' own automata at most 40,000 per schema, and those of a whole schema at "
       "most `Limits.max_json_lexer_states` lexer states; beyond that, lengths, then patterns and formats "
       "are dropped (reported)."),
    _k("format", "string", "partial", "all", "Enforced: date-time, date, time, duration, email, idn-email, "
       "hostname, idn-hostname, ipv4, ipv6, uri, uri-reference, iri, iri-reference, uri-template, uuid, "
       "json-pointer, relative-json-pointer, regex. date-time, time, email, idn-email, hostname, "
       "idn-hostname and regex (its structure only: balanced groups, closed classes) are checked from "
       "above (some invalid values pass; listed in `Grammar.notes`, not a relaxation): see "
       "`logitgate.json_schema.formats.FORMAT_NOTES`. Other names are annotations (also listed in "
       "`Grammar.notes`). "
       "Size bounds as for `pattern`."),
    # -- numbers ----------------------------------------------------------------------------
    _k("minimum", "number", "exact", "all", "Integers and decimals of any size, compared exactly."),
    _k("maximum", "number", "exact", "all", "As `minimum`."),
    _k("exclusiveMinimum", "number", "exact", "all", "A number from draft 6 on, a boolean modifier of "
       "`minimum` in draft 4."),
    _k("exclusiveMaximum", "number", "exact", "all", "As `exclusiveMinimum`."),
    _k("multipleOf", "number", "bounded", "all", "Decimal divisors too; a divisor too fine for its digit "
       "automaton is relaxed (reported)."),
    # -- objects ----------------------------------------------------------------------------
    _k("properties", "object", "exact", "all", "Members come in the schema's order with "
       "`property_order=\"schema\"` (the default), in any order with `\"any\"`."),
    _k("required", "object", "bounded", "all", "Exact in schema order. With `property_order=\"any\"`: exact up "
       "to 8 required properties; beyond that, not enforced (reported)."),
    _k("additionalProperties", "object", "exact", "all", "Allowed by default (as the drafts say); "
       "`false` closes the object."),
    _k("patternProperties", "object", "exact", "all", "Patterns as for `pattern`."),
    _k("propertyNames", "object", "exact", "6+"),
    _k("minProperties", "object", "bounded", "all", "Relaxed (reported) where the count cannot be tracked "
       "together with the object's named properties."),
    _k("maxProperties", "object", "bounded", "all", "As `minProperties`."),
    _k("unevaluatedProperties", "object", "partial", "2019-09+", "Exact where no branch below it (`anyOf`, "
       "`oneOf`, `if`, `not`, `dependentSchemas`) could evaluate more properties; relaxed otherwise."),
    # -- arrays -----------------------------------------------------------------------------
    _k("items", "array", "exact", "all", "A schema, or (before 2020-12) an array of schemas with "
       "`additionalItems`."),
    _k("prefixItems", "array", "exact", "2020-12"),
    _k("additionalItems", "array", "exact", "4-2019-09"),
    _k("minItems", "array", "exact", "all"),
    _k("maxItems", "array", "exact", "all"),
    _k("contains", "array", "bounded", "6+", "Up to three `contains` per position (an `allOf` of them, or one "
       "beside a negated `items`); item counts too large to track are relaxed (reported)."),
    _k("minContains", "array", "bounded", "2019-09+", "As `contains`."),
    _k("maxContains", "array", "partial", "2019-09+", "Exact when the `contains` schema can be negated."),
    _k("uniqueItems", "array", "partial", "all", "Exact over small finite item sets (enums, booleans, up to "
       "8 values); on open item types, not enforced (reported)."),
    _k("unevaluatedItems", "array", "partial", "2019-09+", "As `unevaluatedProperties`."),
    # -- annotations ------------------------------------------------------------------------
    _k("title", "any", "annotation", "all"),
    _k("description", "any", "annotation", "all"),
    _k("default", "any", "annotation", "all"),
    _k("examples", "any", "annotation", "6+"),
    _k("example", "any", "annotation", "OpenAPI"),
    _k("deprecated", "any", "annotation", "2019-09+"),
    _k("readOnly", "any", "annotation", "7+"),
    _k("writeOnly", "any", "annotation", "7+"),
    _k("$comment", "any", "annotation", "7+"),
    _k("contentEncoding", "string", "annotation", "7+"),
    _k("contentMediaType", "string", "annotation", "7+"),
    _k("contentSchema", "string", "annotation", "2019-09+"),
])
"""Every keyword the translator reads, by name."""
