"""Arrays: positional item schemas, item counts, ``contains`` counts and ``uniqueItems``.

Item ``i`` must satisfy, per schema of the conjunction, its ``prefixItems[i]`` (draft 2019-09
and earlier: ``items[i]`` of an ``items`` array), else its ``items`` (earlier: ``additionalItems``)
schema, and ``unevaluatedItems`` where nothing else applies. Counts (``minItems``/``maxItems``,
``minContains``/``maxContains``) are tracked in the rule states; ``uniqueItems`` is enforced where
the items come from a small finite set of values (each used at most once).
"""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

from ..errors import SchemaError
from ..grammar.ir import Alt, Empty, Expr, Ref, Rep, Seq
from .translate import (
    MAX_CONTAINS,
    MAX_OBJECT_STATES,
    MAX_UNIQUE_DOMAIN,
    NEVER,
    Sub,
    _dedupe,
    _NotSchema,
    subschemas,
    types_and_consts,
)

if TYPE_CHECKING:
    from .translate import Translator

__all__ = ["array_expr"]


def _alt(alts: list[Expr]) -> Expr:
    alts = [a for a in alts if a is not NEVER]
    if not alts:
        return NEVER
    return alts[0] if len(alts) == 1 else Alt(tuple(alts))


def _positional(sub: Sub) -> tuple[list[Sub], list[Sub] | None]:
    """(prefix item schemas, schemas of the items after them or None) of one subschema (the
    latter several where a negation put a group there)."""
    s = sub.schema
    old = sub.draft in ("draft4", "draft6", "draft7", "draft2019-09")
    if not old:
        prefix = s.get("prefixItems")
        if prefix is not None and not isinstance(prefix, list):
            raise SchemaError("prefixItems must be an array", pointer=sub.pointer + "/prefixItems")
        items = s.get("items")
        if isinstance(items, list):  # the old form under a 2020-12 $schema: read it as the old form
            return [sub.child(x, "items", i) for i, x in enumerate(items)], \
                [sub.child(s["additionalItems"], "additionalItems")] if "additionalItems" in s else None
        return [sub.child(x, "prefixItems", i) for i, x in enumerate(prefix or [])], \
            subschemas(items, sub, "items") if "items" in s else None
    items = s.get("items")
    if isinstance(items, list):
        rest = [sub.child(s["additionalItems"], "additionalItems")] if "additionalItems" in s else None
        return [sub.child(x, "items", i) for i, x in enumerate(items)], rest
    return [], subschemas(items, sub, "items") if "items" in s else None


def array_expr(tr: Translator, conj: list[Sub], nots: list[Sub], depth: int) -> Expr:
    """The array values allowed by ``conj`` (NEVER if none)."""
    from .objects import _int_kw

    subs = [s for s in conj if isinstance(s.schema, dict)]
    pos = [_positional(s) for s in subs]
    P = max((len(p) for p, _ in pos), default=0)
    lo, hi = 0, None
    unique = False
    contains: list[tuple[tuple[Sub, ...], int, int | None]] = []
    for sub in subs:
        mn = _int_kw(sub, "minItems")
        if mn is not None:
            lo = max(lo, mn)
        mx = _int_kw(sub, "maxItems")
        if mx is not None:
            hi = mx if hi is None else min(hi, mx)
        if sub.get("uniqueItems") is True:
            unique = True
        if "contains" in sub.schema:
            cmin = _int_kw(sub, "minContains") if sub.draft not in ("draft4", "draft6", "draft7") else None
            cmax = _int_kw(sub, "maxContains") if sub.draft not in ("draft4", "draft6", "draft7") else None
            contains.append((tuple(subschemas(sub.schema["contains"], sub, "contains")), 1 if cmin is None else cmin,
                             cmax))
    if hi is not None and hi < lo:
        return NEVER
    uneval = tr.unevaluated(subs, "unevaluatedItems", also="contains")

    def conj_at(i: int | None) -> tuple[Sub, ...]:
        out: list[Sub] = []
        covering: set[int] = set()
        for k, (prefix, rest) in enumerate(pos):
            if i is not None and i < len(prefix):
                out.append(prefix[i])
                covering.add(k)
            elif rest is not None:
                out.extend(rest)
                covering.add(k)
        for schema, cover in uneval:
            if not any(id(s) in {id(subs[k]) for k in covering} for s in cover):
                out.append(schema)
        return tuple(out)

    pointer = subs[0].pointer if subs else ""
    contains = [c for c in contains if not (c[1] == 0 and c[2] is None)]
    if len(contains) > MAX_CONTAINS:
        tr.unsupported(pointer + "/contains", f"more than {MAX_CONTAINS} 'contains' in one conjunction (only the "
                       f"first {MAX_CONTAINS} are enforced)")
        contains = contains[:MAX_CONTAINS]
    if unique and (hi is None or hi > 1):
        domain = _finite_domain(tr, conj_at(None)) if P == 0 and not contains else None
        if domain is None:
            tr.unsupported(pointer + "/uniqueItems", "uniqueItems on items that are not a small finite set of "
                           "values (not checked)")
        else:
            return _unique(tr, domain, conj_at(None), lo, hi, depth)
    if contains:
        return _with_contains(tr, conj_at, P, lo, hi, contains, depth, pointer)
    return _plain(tr, conj_at, P, lo, hi, depth)


def _plain(tr: Translator, conj_at: Any, P: int, lo: int, hi: int | None, depth: int) -> Expr:
    elems = [tr.value(conj_at(i), depth + 1) for i in range(P)]
    rest = tr.value(conj_at(None), depth + 1)

    def item(e: Expr) -> Expr:
        return tr.member_value(e)

    def sep() -> Expr:
        return tr.sep(depth)

    # after the prefix: n items so far (n == P)
    def tail(n: int) -> Expr:
        if rest is NEVER or (hi is not None and n >= hi):
            return Empty() if n >= lo and n > 0 else NEVER
        more_min = max(lo - n - (1 if n == 0 else 0), 0)
        more_max = None if hi is None else hi - n - (1 if n == 0 else 0)
        reps = Rep(Seq((sep(), item(rest))), more_min, more_max)
        if n == 0:
            return Seq((item(rest), reps))
        return reps

    body: Expr = tail(P)
    for i in range(P - 1, -1, -1):
        alts: list[Expr] = []
        if i > 0 and i >= lo:
            alts.append(Empty())
        if elems[i] is not NEVER and (hi is None or i < hi) and body is not NEVER:
            alts.append(Seq(((sep(),) if i > 0 else ()) + (item(elems[i]), body)))
        body = _alt(alts)
    out = []
    if lo == 0:
        out.append(tr.empty("[]", depth))
    if body is not NEVER:
        out.append(Seq((tr.open_("[", depth), body, tr.close("]", depth))))
    return _alt(out)


def _with_contains(tr: Translator, conj_at: Any, P: int, lo: int, hi: int | None,
                   contains: list[tuple[tuple[Sub, ...], int, int | None]], depth: int, pointer: str) -> Expr:
    """Arrays counting, per ``contains`` of the conjunction, the items that satisfy it (up to its
    ``minContains``, or one past its ``maxContains``). An item may count for any of those it
    satisfies; under a ``maxContains`` it counts exactly when it satisfies the schema, the other
    items satisfying its negation."""
    specs: list[tuple[tuple[Sub, ...], int, int | None, list[Any] | None]] = []
    for csubs, cmin, cmax in contains:
        neg = tr.negate(csubs[0]) if cmax is not None and len(csubs) == 1 else None
        if cmax is not None and neg is None:
            tr.unsupported(pointer + "/maxContains", "maxContains with a 'contains' schema that cannot be negated "
                           "(not checked)")
            cmax = None
        specs.append((csubs, cmin, cmax, neg))
    kcaps = [max(cmin, (cmax + 1) if cmax is not None else 0, 1) for _, cmin, cmax, _ in specs]
    ncap = max(lo, (hi + 1) if hi is not None else 0, P, 1)
    if (ncap + 1) * math.prod(k + 1 for k in kcaps) > MAX_OBJECT_STATES:
        tr.unsupported(pointer + "/contains", "item counts too large to track with 'contains' (counts not checked)")
        return _plain(tr, conj_at, P, 0, None, depth)

    def options(csubs: tuple[Sub, ...], cmax: int | None, neg: list[Any] | None) -> list[tuple[tuple[Sub, ...], int]]:
        """(schemas an item meets, whether it counts) for one ``contains``."""
        if cmax is None:
            return [(csubs, 1), ((), 0)]
        return [(csubs, 1)] + [(tuple(subschemas(n, csubs[0], "contains")), 0) for n in neg or []]

    def kinds(i: int | None) -> list[tuple[Expr, tuple[int, ...]]]:
        """(element expression, what it adds to each count) for position i."""
        base = conj_at(i)
        out: list[tuple[Expr, tuple[int, ...]]] = []
        for choice in itertools.product(*(options(c, cmax, neg) for c, _, cmax, neg in specs)):
            e = tr.value(base + tuple(x for subs, _ in choice for x in subs), depth + 1)
            if e is not NEVER:
                out.append((e, tuple(inc for _, inc in choice)))
        return out

    memo: dict[tuple[int, tuple[int, ...]], Expr] = {}
    kinds_at = {i: kinds(i) for i in range(P)}
    kinds_rest = kinds(None)
    mins = [cmin for _, cmin, _, _ in specs]
    maxs = [cmax for _, _, cmax, _ in specs]

    def state(n: int, ks: tuple[int, ...]) -> Expr:
        return tr.state_rule(memo, (n, ks), f"arr_{n}_" + "_".join(map(str, ks)), lambda: state_body(n, ks))

    def state_body(n: int, ks: tuple[int, ...]) -> Expr:
        alts: list[Expr] = []
        if n > 0 and n >= lo and all(k >= m for k, m in zip(ks, mins)):
            alts.append(Empty())
        if hi is None or n < hi:
            s = (tr.sep(depth),) if n > 0 else ()
            for e, incs in (kinds_at[n] if n < P else kinds_rest):
                nks = tuple(min(k + inc, cap) for k, inc, cap in zip(ks, incs, kcaps))
                if any(mx is not None and k > mx for k, mx in zip(nks, maxs)):
                    continue
                nxt = state(min(n + 1, max(ncap, P)), nks)
                if nxt is not NEVER:
                    alts.append(Seq((*s, tr.member_value(e), nxt)))
        return _alt(alts)

    out = []
    if lo == 0 and all(m == 0 for m in mins):
        out.append(tr.empty("[]", depth))
    body = state(0, tuple(0 for _ in specs))
    if body is not NEVER:
        out.append(Seq((tr.open_("[", depth), body, tr.close("]", depth))))
    return _alt(out)


def _finite_domain(tr: Translator, conj: tuple[Sub, ...]) -> list[Any] | None:
    """The values of a small finite item domain (enum/const, booleans, null), or None."""
    values: list[Any] = []
    for branch in tr.expand(list(conj)):
        types, consts = types_and_consts([b for b in branch if not isinstance(b.schema, _NotSchema)])
        if consts is None:
            if types - {"null", "boolean"}:
                return None
            consts = ([None] if "null" in types else []) + ([True, False] if "boolean" in types else [])
        values.extend(consts)
        if len(_dedupe(values)) > MAX_UNIQUE_DOMAIN:
            return None
    return _dedupe(values)


def _unique(tr: Translator, domain: list[Any], conj: tuple[Sub, ...], lo: int, hi: int | None, depth: int) -> Expr:
    branches = tr.expand(list(conj))
    exprs: list[Expr] = []
    for v in domain:
        const = Sub({"const": v}, conj[0].resolver, conj[0].pointer, conj[0].draft, dyn=conj[0].dyn)
        exprs.append(_alt([tr.typed(list(b) + [const], depth + 1) for b in branches]))
    memo: dict[int, Expr] = {}

    def state(mask: int) -> Expr:
        if mask in memo:
            return memo[mask]
        n = bin(mask).count("1")
        alts: list[Expr] = []
        if n > 0 and n >= lo:
            alts.append(Empty())
        if hi is None or n < hi:
            s = (tr.sep(depth),) if n > 0 else ()
            for j, e in enumerate(exprs):
                if e is NEVER or mask >> j & 1:
                    continue
                nxt = state(mask | 1 << j)
                if nxt is not NEVER:
                    alts.append(Seq((*s, tr.member_value(e), nxt)))
        body = _alt(alts)
        if isinstance(body, Alt):
            name = tr.new_rule(f"uniq_{mask}")
            tr.define(name, body)
            body = Ref(name)
        memo[mask] = body
        return body

    out = []
    if lo == 0:
        out.append(tr.empty("[]", depth))
    body = state(0)
    if body is not NEVER:
        out.append(Seq((tr.open_("[", depth), body, tr.close("]", depth))))
    return _alt(out)
