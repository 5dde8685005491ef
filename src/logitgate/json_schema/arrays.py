"""Arrays: positional item schemas, item counts, ``contains`` counts and ``uniqueItems``.

Item ``i`` must satisfy, per schema of the conjunction, its ``prefixItems[i]`` (draft 2019-09
and earlier: ``items[i]`` of an ``items`` array), else its ``items`` (earlier: ``additionalItems``)
schema, and ``unevaluatedItems`` where nothing else applies. Counts (``minItems``/``maxItems``,
``minContains``/``maxContains``) are tracked in the rule states; ``uniqueItems`` is enforced where
the items come from a small finite set of values (each used at most once).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SchemaError
from ..grammar.ir import Alt, Empty, Expr, Ref, Rep, Seq
from .translate import (
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
    if len(contains) > 1:
        tr.unsupported(pointer + "/contains", "several 'contains' in one conjunction (only the first is enforced)")
        contains = contains[:1]
    if unique and (hi is None or hi > 1):
        domain = _finite_domain(tr, conj_at(None)) if P == 0 and not contains else None
        if domain is None:
            tr.unsupported(pointer + "/uniqueItems", "uniqueItems on items that are not a small finite set of "
                           "values (not checked)")
        else:
            return _unique(tr, domain, conj_at(None), lo, hi, depth)
    if contains:
        return _with_contains(tr, conj_at, P, lo, hi, contains[0], depth, pointer)
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
                   contains: tuple[tuple[Sub, ...], int, int | None], depth: int, pointer: str) -> Expr:
    csubs, cmin, cmax = contains
    neg = tr.negate(csubs[0]) if cmax is not None and len(csubs) == 1 else None
    if cmax is not None and neg is None:
        tr.unsupported(pointer + "/maxContains", "maxContains with a 'contains' schema that cannot be negated "
                       "(not checked)")
        cmax = None
    kcap = max(cmin, (cmax + 1) if cmax is not None else 0, 1)
    ncap = max(lo, (hi + 1) if hi is not None else 0, P, 1)
    if (ncap + 1) * (kcap + 1) > MAX_OBJECT_STATES:
        tr.unsupported(pointer + "/contains", "item counts too large to track with 'contains' (counts not checked)")
        return _plain(tr, conj_at, P, 0, None, depth)

    def kinds(i: int | None) -> list[tuple[Expr, int]]:
        """(element expression, how much it adds to the contains count) for position i."""
        base = conj_at(i)
        out: list[tuple[Expr, int]] = []
        yes = tr.value(base + csubs, depth + 1)
        if yes is not NEVER:
            out.append((yes, 1))
        if cmax is None:
            any_ = tr.value(base, depth + 1)
            if any_ is not NEVER:
                out.append((any_, 0))
        else:
            for n in neg or []:
                no = tr.value(base + tuple(subschemas(n, csubs[0], "contains")), depth + 1)
                if no is not NEVER:
                    out.append((no, 0))
        return out

    memo: dict[tuple[int, int], Expr] = {}
    kinds_at = {i: kinds(i) for i in range(P)}
    kinds_rest = kinds(None)

    def state(n: int, k: int) -> Expr:
        return tr.state_rule(memo, (n, k), f"arr_{n}_{k}", lambda: state_body(n, k))

    def state_body(n: int, k: int) -> Expr:
        alts: list[Expr] = []
        if n > 0 and n >= lo and k >= cmin:
            alts.append(Empty())
        if hi is None or n < hi:
            s = (tr.sep(depth),) if n > 0 else ()
            for e, inc in (kinds_at[n] if n < P else kinds_rest):
                nk = min(k + inc, kcap)
                if cmax is not None and nk > cmax:
                    continue
                nxt = state(min(n + 1, max(ncap, P)), nk)
                if nxt is not NEVER:
                    alts.append(Seq((*s, tr.member_value(e), nxt)))
        return _alt(alts)

    out = []
    if lo == 0 and cmin == 0:
        out.append(tr.empty("[]", depth))
    body = state(0, 0)
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
