"""Objects: the members a conjunction of schemas allows, in schema order or in any order.

Every key the schemas name (``properties``, ``required``) gets its own key lexeme (the key string
in any JSON spelling, then the colon); every other key falls in a *key class*: the strings
matching exactly a given subset of the ``patternProperties`` patterns, minus the named keys, and
inside ``propertyNames``. A member's value must satisfy, per schema of the conjunction, the
``properties`` entry, else the matching patterns, else ``additionalProperties`` (and
``unevaluatedProperties`` where nothing else applies).

``property_order="schema"``: named members in the order the schemas list them (each optional
unless required), then the other members. ``"any"``: members in any order; objects with few
named properties track which were used (each at most once); bigger ones track only the
required ones and let optional named keys repeat.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import SchemaError
from ..grammar.ir import Alt, Empty, Expr, Rep, Seq
from ..regex.ast import Node
from .translate import (
    MAX_ANY_ORDER_TRACKED,
    MAX_EXISTS,
    MAX_OBJECT_STATES,
    MAX_PATTERN_CLASSES,
    NEVER,
    Sub,
    _Exists,
)

if TYPE_CHECKING:
    from .translate import Translator

__all__ = ["object_expr"]


class _Named:
    __slots__ = ("key", "name", "required", "value", "variants")

    def __init__(self, name: str, key: Expr, value: Expr, required: bool,
                 variants: list[tuple[int, Expr]] | None = None) -> None:
        self.name = name
        self.key = key
        self.value = value
        self.required = required
        self.variants = [(0, value)] if variants is None else variants
        """``(flags, value)``: the values it may take, each with the ``_Exists`` members it is
        (bit j: the j-th), the plain value first (flags 0)."""


def _alt(alts: list[Expr]) -> Expr:
    if not alts:
        return NEVER
    return alts[0] if len(alts) == 1 else Alt(tuple(alts))


def _int_kw(sub: Sub, kw: str) -> int | None:
    v = sub.get(kw)
    if v is None:
        return None
    from .translate import _nonneg_int

    return _nonneg_int(v, sub, kw)


def _members(v: Any, sub: Sub, name: str) -> list[Sub]:
    """The subschemas a ``properties`` entry stands for (negations put Subs and groups there)."""
    from .translate import subschemas

    return subschemas(v, sub, "properties", name)


def object_expr(tr: Translator, conj: list[Sub], nots: list[Sub], depth: int) -> Expr:
    """The object values allowed by ``conj`` (NEVER if none)."""
    from ..automata.dfa import regex_dfa
    from .strings import literal_string_node

    subs = [s for s in conj if isinstance(s.schema, dict)]
    exists = _dedupe_exists([s.schema for s in subs if isinstance(s.schema, _Exists)])
    if len(exists) > MAX_EXISTS:
        tr.unsupported(subs[0].pointer, f"more than {MAX_EXISTS} members required by negated keywords "
                       "(patternProperties/additionalProperties/propertyNames under 'not'): the others are not "
                       "checked")
        exists = exists[:MAX_EXISTS]
    names: list[str] = []  # every `properties` key in schema order, then required-only names
    required: set[str] = set()
    required_order: list[str] = []
    lo, hi = 0, None
    patterns: list[tuple[int, str, Sub]] = []
    open_subs: set[int] = set()  # subschemas whose patternProperties cannot be matched exactly
    for i, sub in enumerate(subs):
        props = sub.get("properties") or {}
        if not isinstance(props, dict):
            raise SchemaError("properties must be an object", pointer=sub.pointer + "/properties")
        for name in props:
            if name not in names:
                names.append(name)
        req = sub.get("required") or []
        if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
            if sub.draft == "draft4" or isinstance(req, bool):
                req = []
            else:
                raise SchemaError("required must be an array of strings", pointer=sub.pointer + "/required")
        required_order.extend(r for r in req if r not in required)
        required.update(req)
        pp = sub.get("patternProperties") or {}
        for pat, ps in pp.items():
            if not tr.pattern_exact(pat, f"{sub.pointer}/patternProperties"):
                open_subs.add(i)  # which keys it matches is not known exactly: no key constraint here
                continue
            patterns.append((i, pat, sub.child(ps, "patternProperties", pat)))
        mn = _int_kw(sub, "minProperties")
        if mn is not None:
            lo = max(lo, mn)
        mx = _int_kw(sub, "maxProperties")
        if mx is not None:
            hi = mx if hi is None else min(hi, mx)
    names.extend(r for r in required_order if r not in names)
    if hi is not None and (hi < lo or hi < len(required)):
        return NEVER
    pattern_dfas = {}

    def pattern_matches(pat: str, name: str, where: Sub) -> bool:
        dfa = pattern_dfas.get(pat)
        if dfa is None:
            from ..errors import RegexError
            from .ecma import pattern_node

            try:
                dfa = pattern_dfas[pat] = regex_dfa(pattern_node(pat))
            except RegexError as e:  # checked when collected: cannot happen
                raise SchemaError(f"patternProperties: {e}", pointer=where.pointer) from None
        return dfa.matches(name.encode("utf-8", "surrogatepass"))

    name_langs = [tr.key_language(sub.child(sub.get("propertyNames"), "propertyNames"))
                  for sub in subs if "propertyNames" in sub.schema]
    if any(lang is NEVER for lang in name_langs):
        return NEVER if required or lo > 0 or exists else tr.empty("{}", depth)

    def covered(sub: Sub, name: str | None, chosen: list[int] | None) -> list[Sub]:
        """The schemas one subschema imposes on the value of key ``name`` (or a key class)."""
        props = sub.get("properties") or {}
        if name is not None and name in props:
            return _members(props[name], sub, name)
        idx = subs.index(sub)
        if idx in open_subs:
            return []
        if name is not None:
            pats = [p for (i, pat, p) in patterns if i == idx and pattern_matches(pat, name, p)]
        else:
            pats = [patterns[j][2] for j in (chosen or []) if patterns[j][0] == idx]
        if pats:
            return pats
        if "additionalProperties" in sub.schema:
            return [sub.child(sub.schema["additionalProperties"], "additionalProperties")]
        return []

    def value_conj(name: str | None, chosen: list[int] | None) -> tuple[Sub, ...]:
        out: list[Sub] = []
        for sub in subs:
            out.extend(covered(sub, name, chosen))
        for schema, cover in uneval:
            if not any(covered(s, name, chosen) for s in cover):
                out.append(schema)
        return tuple(out)

    uneval = tr.unevaluated(subs, "unevaluatedProperties")
    named: list[_Named] = []
    for name in names:
        allowed = True
        text = json.dumps(name, ensure_ascii=False).encode("utf-8", "surrogatepass")
        for lang in name_langs:
            if not tr.dfa(lang).matches(text):
                allowed = False
        base = value_conj(name, None)
        value = tr.value(base, depth + 1) if allowed else NEVER
        if value is NEVER and name in required:
            return NEVER
        key = tr.key_term(literal_string_node(name), "KEY_" + name)
        hits = [j for j, e in enumerate(exists) if tr.dfa(e.keys).matches(text)]
        variants = [(0, value)] if value is not NEVER else []
        for flags in range(1, 1 << len(exists)) if value is not NEVER else ():
            if any(flags >> j & 1 and j not in hits for j in range(len(exists))):
                continue
            v = tr.value(base + tuple(x for j in hits if flags >> j & 1 for x in exists[j].values), depth + 1)
            if v is not NEVER:
                variants.append((flags, v))
        named.append(_Named(name, key, value, name in required, variants))

    extras = _extra_members(tr, subs, patterns, names, name_langs, value_conj, depth, exists)
    full = (1 << len(exists)) - 1
    pointer = subs[0].pointer if subs else ""
    if tr.property_order == "any":
        return _any_order(tr, named, extras, lo, hi, depth, pointer, full)
    listed = {nm for sub in subs for nm in (sub.get("properties") or {})}
    ordered = [m for m in named if m.name in listed]
    free = [m for m in named if m.name not in listed]  # required but not listed: any order, at the end
    return _schema_order(tr, ordered, free, extras, lo, hi, depth, pointer, full)


def _dedupe_exists(exists: list[_Exists]) -> list[_Exists]:
    """``exists`` less repeats (the same keys and value schemas)."""
    out: list[_Exists] = []
    seen: set[tuple] = set()
    for e in exists:
        key = (e.keys, tuple(v.key for v in e.values))
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _extra_members(tr: Translator, subs: list[Sub], patterns: list, names: list[str], name_langs: list[Node],
                   value_conj: Any, depth: int, exists: list[_Exists]) -> list[tuple[int, Expr]]:
    """``(flags, member expression)`` (key class lexeme + value) per key class that allows some
    value: flags 0 for the class itself, and for each set of the ``_Exists`` members (bit j: the
    j-th) its keys in all of theirs with a value satisfying all of theirs."""
    from ..regex.ast import Alt as RxAlt
    from .strings import any_string_node, literal_string_node, other_keys_node
    from .translate import MAX_LEXEME_STATES, _known_empty, _pattern_string

    out: list[Expr] = []
    n = len(patterns)
    classes = [[j] for j in range(n)] + [[]] if n > MAX_PATTERN_CLASSES else \
        [[j for j in range(n) if mask >> j & 1] for mask in range(1 << n)]
    exclude = [literal_string_node(nm) for nm in names]
    exclude_node = None if not exclude else exclude[0] if len(exclude) == 1 else RxAlt(tuple(exclude))
    for chosen in classes:
        value = tr.value(value_conj(None, chosen), depth + 1)
        if value is NEVER:
            continue
        parts = [_pattern_string(patterns[j][1]) for j in chosen] + list(name_langs)
        where = subs[0].pointer if subs else ""
        node = any_string_node() if not parts else parts[0]
        if len(parts) > 1:
            node = tr.boolean("intersect", parts, where, "patternProperties/propertyNames") or parts[0]
        if n <= MAX_PATTERN_CLASSES:
            for j in range(n):
                if j not in chosen:
                    rest = tr.boolean("difference", [node, _pattern_string(patterns[j][1])], where,
                                      "patternProperties")
                    node = node if rest is None else rest
        if exclude_node is not None:
            fast = other_keys_node(names) if node is any_string_node() and \
                sum(map(len, names)) < MAX_LEXEME_STATES // 2 else None
            if fast is not None:  # the usual case: any key but the named ones, built directly
                node = fast
            else:
                rest = tr.cached_difference(node, exclude_node, where)
                node = node if rest is None else rest
        if _known_empty(node):
            continue
        key = tr.key_term(node, "KEY")
        out.append((0, Seq((key, tr.ws(), tr.member_value(value)))))
        for flags in range(1, 1 << len(exists)):
            chosen_exists = [e for j, e in enumerate(exists) if flags >> j & 1]
            both = tr.boolean("intersect", [node] + [e.keys for e in chosen_exists], where,
                              "keys of a member a negated keyword requires")
            if both is None:
                both = node  # too large: reported, and any key of the class taken (an over-approximation)
            if _known_empty(both):
                continue  # no such key here
            v = tr.value(value_conj(None, chosen) + tuple(x for e in chosen_exists for x in e.values), depth + 1)
            if v is not NEVER:
                out.append((flags, Seq((tr.key_term(both, "KEY"), tr.ws(), tr.member_value(v)))))
    return out


def _schema_order(tr: Translator, named: list[_Named], free: list[_Named], extras: list[tuple[int, Expr]],
                  lo: int, hi: int | None, depth: int, pointer: str, full: int = 0) -> Expr:
    """Named members in order, then the extra ones (and the required unlisted ones, any order);
    ``full``: the flags of the ``_Exists`` members the object must have had by its end."""
    n = len(named)
    counting = lo > 0 or hi is not None
    cap = max(lo, (hi + 1) if hi is not None else 0, 1) if counting else 1
    if counting and (n + 1) * (cap + 1) * (full + 1) > MAX_OBJECT_STATES:
        tr.unsupported(pointer, "minProperties/maxProperties too large to enforce with this many properties "
                       "(not checked)")
        counting, cap, lo, hi = False, 1, 0, None
    memo: dict[tuple[int, int, int], Expr] = {}
    extra = _alt([x for _, x in extras]) if extras else NEVER
    by_flags = _by_flags(extras)

    def sep(c: int) -> tuple[Expr, ...]:
        return (tr.sep(depth),) if c > 0 else ()

    free_state = _any_order_machine(tr, free, extras, lo, hi, depth, pointer, full)[0] if free else None

    def tail(c: int, f: int) -> Expr:
        """Extra members after the named ones; ``c`` members so far (c == 0: at least one), the
        ``_Exists`` members in ``f`` met."""
        if free_state is not None:
            return free_state(0, c, f)
        alts: list[Expr] = []
        if c > 0 and c >= lo and f == full:
            alts.append(Empty())
        if extra is NEVER:
            return _alt(alts)
        if f == full and (not counting or (hi is None and c >= lo)):
            more = Rep(Seq((tr.sep(depth), extra)), 0, None)
            return Seq((extra, more)) if c == 0 else _alt([Empty(), Seq((tr.sep(depth), extra, more))]) \
                if c >= lo else NEVER
        loops: list[Expr] = []  # extra members that lead back here: a repetition
        if hi is None or c < hi:
            for flags, x in by_flags:
                if (min(c + 1, cap), f | flags) == (c, f):
                    loops.append(Seq((*sep(c), x)))
                    continue
                nxt = chain(n, min(c + 1, cap), f | flags)
                if nxt is not NEVER:
                    alts.append(Seq((*sep(c), x, nxt)))
        return _looping(loops, _alt(alts))

    def chain(i: int, c: int, f: int) -> Expr:
        name = f"obj_{i}_{c}" if not full else f"obj_{i}_{c}_{f}"
        return tr.state_rule(memo, (i, c, f), name, lambda: chain_body(i, c, f), inline=True)

    def chain_body(i: int, c: int, f: int) -> Expr:
        if i == n:
            return tail(c, f)
        m = named[i]
        alts: list[Expr] = []
        if hi is None or c < hi:
            for flags, value in m.variants:
                nxt = chain(i + 1, min(c + 1, cap), f | flags)
                if nxt is not NEVER:
                    alts.append(Seq((*sep(c), m.key, tr.ws(), tr.member_value(value), nxt)))
        if not m.required:
            nxt = chain(i + 1, c, f)
            if nxt is not NEVER:
                alts.append(nxt)
        return _alt(alts)

    can_be_empty = lo == 0 and not full and not any(m.required for m in named + free)
    body = chain(0, 0, 0)
    alts = []
    if can_be_empty:
        alts.append(tr.empty("{}", depth))
    if body is not NEVER:
        alts.append(Seq((tr.open_("{", depth), body, tr.close("}", depth))))
    return _alt(alts)


def _looping(loops: list[Expr], rest: Expr) -> Expr:
    """A state ``S: loop S | rest`` as ``loop* rest``: a repetition, which an Earley parser reads
    in rows that do not grow (right recursion stacks one more item per member)."""
    if not loops or rest is NEVER:
        return rest
    return Seq((Rep(_alt(loops), 0, None), rest))


def _by_flags(extras: list[tuple[int, Expr]]) -> list[tuple[int, Expr]]:
    """The extra members grouped by their flags: one alternative per set of flags."""
    groups: dict[int, list[Expr]] = {}
    for flags, x in extras:
        groups.setdefault(flags, []).append(x)
    return [(flags, _alt(xs)) for flags, xs in groups.items()]


def _any_order(tr: Translator, named: list[_Named], extras: list[tuple[int, Expr]], lo: int, hi: int | None,
               depth: int, pointer: str, full: int = 0) -> Expr:
    state, can_be_empty = _any_order_machine(tr, named, extras, lo, hi, depth, pointer, full)
    body = state(0, 0, 0)
    alts: list[Expr] = []
    if can_be_empty:
        alts.append(tr.empty("{}", depth))
    if body is not NEVER:
        alts.append(Seq((tr.open_("{", depth), body, tr.close("}", depth))))
    return _alt(alts)


def _any_order_machine(tr: Translator, named: list[_Named], extras: list[tuple[int, Expr]], lo: int,
                       hi: int | None, depth: int, pointer: str, full: int = 0) -> tuple[Any, bool]:
    """``(state, can_be_empty)``: ``state(mask, c, f)`` is the rule for the rest of an object whose
    tracked properties in ``mask`` were used, which has ``c`` members so far (``c == 0``: at
    least one more) and met the ``_Exists`` members in ``f`` (all of ``full`` by its end)."""
    n = len(named)
    if n <= MAX_ANY_ORDER_TRACKED:
        tracked = [i for i in range(n)]
    else:
        tracked = [i for i in range(n) if named[i].required]
        if len(tracked) > MAX_ANY_ORDER_TRACKED:
            tr.unsupported(pointer, f"property_order='any' with more than {MAX_ANY_ORDER_TRACKED} required "
                           f"properties: required properties are not enforced")
            tracked = []
    bit = {i: 1 << k for k, i in enumerate(tracked)}
    need = sum(bit[i] for i in tracked if named[i].required)
    untracked_required = any(m.required and i not in bit for i, m in enumerate(named))
    counting = lo > 0 or hi is not None
    cap = max(lo, (hi + 1) if hi is not None else 0, 1) if counting else 1
    if (1 << len(tracked)) * (cap + 1) * (full + 1) > MAX_OBJECT_STATES:
        tr.unsupported(pointer, "minProperties/maxProperties too large to enforce in any order (not checked)")
        counting, cap, lo, hi = False, 1, 0, None
    memo: dict[tuple[int, int, int], Expr] = {}
    by_flags = _by_flags(extras)

    def state(mask: int, c: int, f: int) -> Expr:
        name = f"obj_any_{mask}_{c}" if not full else f"obj_any_{mask}_{c}_{f}"
        return tr.state_rule(memo, (mask, c, f), name, lambda: state_body(mask, c, f))

    def state_body(mask: int, c: int, f: int) -> Expr:
        alts: list[Expr] = []
        loops: list[Expr] = []  # members that lead back to this state: a repetition, not right recursion
        if c > 0 and mask & need == need and c >= lo and f == full:
            alts.append(Empty())
        if hi is None or c < hi:
            s = (tr.sep(depth),) if c > 0 else ()
            nc = min(c + 1, cap)
            for i, m in enumerate(named):
                if i in bit and mask & bit[i]:
                    continue
                for flags, value in m.variants:
                    if (mask | bit.get(i, 0), nc, f | flags) == (mask, c, f):
                        loops.append(Seq((*s, m.key, tr.ws(), tr.member_value(value))))
                        continue
                    nxt = state(mask | bit.get(i, 0), nc, f | flags)
                    if nxt is not NEVER:
                        alts.append(Seq((*s, m.key, tr.ws(), tr.member_value(value), nxt)))
            for flags, x in (by_flags if full else [(0, x) for _, x in extras]):
                if (nc, f | flags) == (c, f):
                    loops.append(Seq((*s, x)))
                    continue
                nxt = state(mask, nc, f | flags)
                if nxt is not NEVER:
                    alts.append(Seq((*s, x, nxt)))
        return _looping(loops, _alt(alts))

    return state, lo == 0 and need == 0 and not untracked_required and not full
