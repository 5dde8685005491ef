"""JSON number texts under numeric constraints, as exact regular languages.

:func:`number_node` turns the JSON Schema keywords ``type: integer``, ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum`` and ``multipleOf`` into a regex syntax tree
(:mod:`logitgate.regex.ast`) matching exactly the JSON number texts (RFC 8259:
``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``) of the *allowed forms* below whose
mathematical value satisfies every constraint. Bounds and ``multipleOf`` are ``int`` or
:class:`~decimal.Decimal` of any size; all arithmetic is exact.

Allowed forms (the policy):

* ``integer=True``: ``-?(0|[1-9][0-9]*)(\\.0+)?`` (``3.0`` is an integer for JSON Schema); no
  exponent forms (a model could otherwise write ``1e999``, which a JSON reader turns into a float,
  or infinity).
* ``integer=False``, no bounds and no ``multipleOf``: the full JSON number syntax.
* ``integer=False`` with bounds: every plain decimal ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` in range
  (any number of fraction digits, trailing zeros, ``-0``, ``-0.0``), plus the normalized
  scientific forms that Python's ``repr``/``json.dumps`` and JavaScript print,
  ``-?[1-9](\\.[0-9]*[1-9])?[eE][+-]?[0-9]+`` (``1e-05``, ``1.5e+20``, ``2.5E-7``; the exponent
  may have leading zeros), in range. Other exponent forms (``10e2``, ``0.5e1``, ``1.0e3``) are
  not produced: with arbitrary mantissas and exponents, "value in range" is not a regular
  language in general.
* With ``multipleOf``: plain decimal forms only (the ``integer=True`` forms when ``integer``).

``-0`` and ``-0.0`` are the value 0. Every constraint is applied exactly: the result matches a
text of an allowed form if and only if its value satisfies all of them.

Construction: the sign splits the range into a range of magnitudes for unsigned texts and one for
texts after ``-``. Integer parts use the classic digit-range decomposition; fraction digits (and
scientific mantissas) are compared with the bound's digits from the left, the first differing
digit deciding; a scientific text ``m e k`` is compared by the exponent first (only the bounds'
own exponents need a mantissa comparison, the exponent digits go through an integer range).
``multipleOf = a * 10**-s`` is an explicit residue automaton (an :class:`Automaton` node) with
about ``a * (s + 1)`` states, intersected with the range (:func:`logitgate.automata.boolean.intersect`,
itself an :class:`Automaton`) when there are bounds.

Limits (:class:`ValueError` beyond them): ``a * (s + 1) <= MAX_MULTIPLE_STATES``; bounds with at
most ``MAX_SIGNIFICANT_DIGITS`` significant digits and ``|log10 |x|| <= MAX_MAGNITUDE_DIGITS``;
bounds with ``multipleOf`` within the state limit of ``intersect`` (the minimal automaton has
about ``digits of the bounds * a`` states).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

from ..automata.boolean import NOTHING, intersect
from ..errors import CompileError
from ..regex.ast import Alt, Automaton, CharClass, Concat, Empty, Node, Repeat

__all__ = ["number_node"]

Number = int | Decimal

MAX_MULTIPLE_STATES = 10_000
"""``multipleOf = a * 10**-s`` is refused when ``a * (s + 1)`` exceeds this (automaton states)."""

MAX_SIGNIFICANT_DIGITS = 100
"""Bounds with more significant digits are refused (the tree nests once per run of equal digits)."""

MAX_MAGNITUDE_DIGITS = 1_000
"""Bounds ``x`` with ``|log10 |x|| >`` this are refused: plain forms must count that many digits."""

_EMPTY = Empty()


# -- tree building ---------------------------------------------------------------------------------


def _chars(*ranges: tuple[str, str]) -> CharClass:
    return CharClass(tuple((ord(lo), ord(hi)) for lo, hi in ranges))


def _digit(lo: int, hi: int) -> Node:
    """One digit in ``lo..hi`` (nothing when the range is empty)."""
    lo, hi = max(lo, 0), min(hi, 9)
    return CharClass(((48 + lo, 48 + hi),)) if lo <= hi else NOTHING


def _lit(text: str) -> Node:
    return _cat(*(_chars((c, c)) for c in text))


def _cat(*items: Node) -> Node:
    """Concatenation, flattened; nothing if an item matches nothing."""
    out: list[Node] = []
    for item in items:
        if item == NOTHING:
            return NOTHING
        if isinstance(item, Concat):
            out += item.items
        elif not isinstance(item, Empty):
            out.append(item)
    if not out:
        return _EMPTY
    return out[0] if len(out) == 1 else Concat(tuple(out))


def _alt(*items: Node) -> Node:
    """Alternation, flattened, without duplicates or empty languages; classes are merged."""
    out: list[Node] = []
    chars: set[int] = set()
    for item in items:
        for sub in item.items if isinstance(item, Alt) else (item,):
            if isinstance(sub, CharClass):
                for lo, hi in sub.ranges:
                    chars.update(range(lo, hi + 1))
            elif sub not in out:
                out.append(sub)
    if chars:
        out.insert(0, _class_of(chars))
    if not out:
        return NOTHING
    return out[0] if len(out) == 1 else Alt(tuple(out))


def _class_of(chars: set[int]) -> CharClass:
    ranges: list[tuple[int, int]] = []
    for c in sorted(chars):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    return CharClass(tuple(ranges))


def _rep(item: Node, lo: int, hi: int | None) -> Node:
    """``item{lo,hi}`` (``hi`` None: unbounded), simplified."""
    if hi == 0 or (item == NOTHING and lo == 0):
        return _EMPTY
    if item == NOTHING:
        return NOTHING
    return item if lo == hi == 1 else Repeat(item, lo, hi)


def _opt(item: Node) -> Node:
    return _alt(_EMPTY, item)


def _runs(s: str, split: int = -1) -> list[tuple[int, int, int]]:
    """``(start, digit, length)`` of the runs of equal digits of ``s``, also cut at ``split``."""
    runs: list[tuple[int, int, int]] = []
    for k, ch in enumerate(s):
        if runs and runs[-1][1] == int(ch) and k != split:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((k, int(ch), 1))
    return runs


_DIGIT = _digit(0, 9)
_NONZERO = _digit(1, 9)
_ZERO = _digit(0, 0)
_MINUS = _lit("-")
_POINT = _lit(".")
_E = _chars(("E", "E"), ("e", "e"))
_UINT = _alt(_ZERO, _cat(_NONZERO, _rep(_DIGIT, 0, None)))
_POINT_ZEROS = _opt(_cat(_POINT, _rep(_ZERO, 1, None)))
_NUMBER_SYNTAX = _cat(
    _opt(_MINUS),
    _UINT,
    _opt(_cat(_POINT, _rep(_DIGIT, 1, None))),
    _opt(_cat(_E, _opt(_chars(("+", "+"), ("-", "-"))), _rep(_DIGIT, 1, None))),
)
_INTEGER_SYNTAX = _cat(_opt(_MINUS), _UINT, _POINT_ZEROS)
PLAIN_INTEGER = _cat(_opt(_MINUS), _UINT)
"""Integer texts without a fraction: draft 4's integers (it does not count ``3.0`` as one)."""


# -- integers --------------------------------------------------------------------------------------


def _uint_range(lo: int, hi: int | None) -> Node:
    """Canonical texts (``0|[1-9][0-9]*``) of the integers in ``lo..hi`` (``0 <= lo``; ``hi`` None:
    no upper bound)."""
    if hi is not None and lo > hi:
        return NOTHING
    parts: list[Node] = []
    if lo == 0:
        parts.append(_ZERO)
        if hi == 0:
            return _ZERO
        lo = 1
    n_lo = len(str(lo))
    n_hi = None if hi is None else len(str(hi))
    if n_lo == n_hi:
        parts.append(_fixed_range(str(lo), str(hi)))
    else:
        parts.append(_fixed_range(str(lo), "9" * n_lo))
        if n_hi is None:
            parts.append(_cat(_NONZERO, _rep(_DIGIT, n_lo, None)))
        else:
            parts.append(_cat(_NONZERO, _rep(_DIGIT, n_lo, n_hi - 2)) if n_hi - n_lo >= 2 else NOTHING)
            parts.append(_fixed_range("1" + "0" * (n_hi - 1), str(hi)))
    return _alt(*parts)


def _fixed_range(a: str, b: str) -> Node:
    """Digit strings of length ``len(a) == len(b)`` from ``a`` to ``b`` (``a <= b``)."""
    i = next((k for k in range(len(a)) if a[k] != b[k]), len(a))
    if i == len(a):
        return _lit(a)
    ca, cb, rest_a, rest_b = int(a[i]), int(b[i]), a[i + 1 :], b[i + 1 :]
    parts = []
    if rest_a.strip("0"):  # with a's digit, the rest must be >= a's rest
        parts.append(_cat(_digit(ca, ca), _fixed_ge(rest_a)))
        ca += 1
    if rest_b.strip("9"):  # with b's digit, the rest must be <= b's rest
        parts.append(_cat(_digit(cb, cb), _fixed_le(rest_b)))
        cb -= 1
    parts.append(_cat(_digit(ca, cb), _rep(_DIGIT, len(rest_a), len(rest_a))))
    return _cat(_lit(a[:i]), _alt(*parts))


def _fixed_ge(s: str) -> Node:
    """Digit strings of length ``len(s)`` that are ``>= s``."""
    return _fixed_compare(s, up=True)


def _fixed_le(s: str) -> Node:
    """Digit strings of length ``len(s)`` that are ``<= s``."""
    return _fixed_compare(s, up=False)


def _fixed_compare(s: str, up: bool) -> Node:
    """Digit strings of length ``len(s)`` that are ``>= s`` (``up``) or ``<= s``, one run of equal
    digits of ``s`` at a time: beyond ``s`` at a digit of the run, or equal to the run and then on."""
    node: Node = _EMPTY
    free = "0" if up else "9"  # a suffix of these digits lets everything of its length through
    for start, c, r in reversed(_runs(s)):
        rest = len(s) - start - r
        after = _rep(_DIGIT, rest, rest)
        run = _rep(_digit(c, c), r, r)
        if s[start + r :].strip(free) == "":
            node = _cat(_alt(run, _beyond(c, r, up)), after)
        else:
            node = _alt(_cat(_beyond(c, r, up), after), _cat(run, node))
    return node


def _beyond(c: int, r: int, up: bool) -> Node:
    """Strings of ``r`` digits whose first digit other than ``c`` is above ``c`` (``up``) or below;
    halved recursively, so the tree is ``log r`` deep."""
    if r == 1:
        return _digit(c + 1, 9) if up else _digit(0, c - 1)
    half = r // 2
    return _alt(
        _cat(_beyond(c, half, up), _rep(_DIGIT, r - half, r - half)),
        _cat(_rep(_digit(c, c), half, half), _beyond(c, r - half, up)),
    )


# -- fraction digits -------------------------------------------------------------------------------
#
# A set of digit strings x, compared by the value 0.x, is a pair (the empty string is in it, the
# node of its non-empty strings). With ``norm`` (scientific mantissas) non-empty strings must end
# in a non-zero digit. Bound digits are given without trailing zeros.

_Tails = tuple[bool, Node]


def _any_tails(norm: bool) -> _Tails:
    return True, _cat(_rep(_DIGIT, 0, None), _NONZERO) if norm else _rep(_DIGIT, 1, None)


def _zero_tails(norm: bool) -> _Tails:
    return True, NOTHING if norm else _rep(_ZERO, 1, None)


def _positive_tails(norm: bool) -> _Tails:
    return False, _cat(_rep(_DIGIT, 0, None), _NONZERO, _EMPTY if norm else _rep(_DIGIT, 0, None))


def _lead(lo: int, hi: int, tails: _Tails, norm: bool) -> Node:
    """Non-empty strings: a digit in ``lo..hi``, then a string of ``tails``."""
    alone = _digit(max(lo, 1) if norm else lo, hi) if tails[0] else NOTHING
    return _alt(_cat(_digit(lo, hi), tails[1]), alone)


def _wrap(c: int, r: int, end_inside: bool, tails: _Tails, norm: bool) -> Node:
    """Non-empty strings: ``r`` digits ``c``, then a string of ``tails``; with ``end_inside`` also
    ``1 .. r-1`` digits ``c`` alone."""
    run, can_end = _rep(_digit(c, c), r, r), not norm or c != 0
    return _alt(
        _cat(run, tails[1]),
        run if tails[0] and can_end else NOTHING,
        _rep(_digit(c, c), 1, r - 1) if end_inside and can_end and r > 1 else NOTHING,
    )


def _tails_ge(d: str, strict: bool, norm: bool) -> _Tails:
    """Strings x with ``0.x >= 0.d`` (``>`` when ``strict``)."""
    tails = _positive_tails(norm) if strict else _any_tails(norm)
    for _, c, r in reversed(_runs(d)):  # above d: greater at some digit of this run, or equal to it
        up = _cat(_rep(_digit(c, c), 0, r - 1), _lead(c + 1, 9, _any_tails(norm), norm))
        tails = False, _alt(up, _wrap(c, r, False, tails, norm))
    return tails


def _tails_le(d: str, strict: bool, norm: bool) -> _Tails:
    """Strings x with ``0.x <= 0.d`` (``<`` when ``strict``)."""
    tails = (False, NOTHING) if strict else _zero_tails(norm)
    for _, c, r in reversed(_runs(d)):  # below d: smaller at a digit of this run, ended in it, or equal
        down = _cat(_rep(_digit(c, c), 0, r - 1), _lead(0, c - 1, _any_tails(norm), norm))
        tails = True, _alt(down, _wrap(c, r, True, tails, norm))
    return tails


def _tails_between(a: str, b: str, strict_a: bool, strict_b: bool, norm: bool) -> _Tails:
    """Strings x with ``0.a <= 0.x <= 0.b`` (strict as told); requires ``0.a <= 0.b``."""
    n = max(len(a), len(b))
    pa, pb = a.ljust(n, "0"), b.ljust(n, "0")
    i = next((k for k in range(n) if pa[k] != pb[k]), n)
    if i == n:
        tails = (False, NOTHING) if strict_a or strict_b else _zero_tails(norm)
    else:
        ca, cb = int(pa[i]), int(pb[i])
        tails = len(a) <= i and not strict_a, _alt(
            _lead(ca, ca, _tails_ge(a[i + 1 :], strict_a, norm), norm),
            _lead(ca + 1, cb - 1, _any_tails(norm), norm),
            _lead(cb, cb, _tails_le(b[i + 1 :], strict_b, norm), norm),
        )
    # the common prefix: x may end in it past the digits of a (x is then 0.a, below 0.b)
    for start, c, r in reversed(_runs(pb[:i], split=len(a))):
        may_end = start >= len(a) and not strict_a
        tails = may_end, _wrap(c, r, may_end, tails, norm)
    return tails


# -- magnitudes ------------------------------------------------------------------------------------

_Bound = tuple[Decimal, bool]  # (value >= 0, exclusive)
_Split = tuple[int, str, bool]  # (integer part, fraction digits without trailing zeros, exclusive)


def _interval(
    lo: _Split, hi: _Split | None, whole: Callable[[int, int | None], Node], norm: bool
) -> Node:
    """Texts ``W(.F)?`` with value in ``[lo, hi]``: ``whole(i, j)`` gives the integer parts
    ``i..j``, the fraction digits F are ``[0-9]+`` (``norm``: ``[0-9]*[1-9]``)."""
    li, lf, ls = lo
    if hi is not None and hi[0] == li:
        return _fraction(whole(li, li), _tails_between(lf, hi[1], ls, hi[2], norm))
    return _alt(
        _fraction(whole(li, li), _tails_ge(lf, ls, norm)),
        _fraction(whole(li + 1, None if hi is None else hi[0] - 1), _any_tails(norm)),
        NOTHING if hi is None else _fraction(whole(hi[0], hi[0]), _tails_le(hi[1], hi[2], norm)),
    )


def _fraction(whole: Node, tails: _Tails) -> Node:
    return _cat(whole, _alt(_EMPTY if tails[0] else NOTHING, _cat(_POINT, tails[1])))


def _plain_split(bound: _Bound) -> _Split:
    _, digits, exp = bound[0].as_tuple()
    text = "".join(map(str, digits))
    if exp >= 0:
        return int(text) * 10**exp, "", bound[1]
    text = text.rjust(1 - exp, "0")
    return int(text[:exp]), text[exp:].rstrip("0"), bound[1]


def _scientific_split(bound: _Bound) -> tuple[int, _Split]:
    """``(exponent, mantissa)`` of a bound > 0: value = mantissa * 10**exponent, 1 <= mantissa < 10."""
    text = "".join(map(str, bound[0].as_tuple().digits)).rstrip("0")
    return bound[0].adjusted(), (int(text[0]), text[1:], bound[1])


def _mantissa_digit(lo: int, hi: int | None) -> Node:
    return _digit(max(lo, 1), 9 if hi is None else hi)


def _exponent(lo: int | None, hi: int | None) -> Node:
    """``[eE][+-]?[0-9]+`` with value in ``lo..hi`` (None: unbounded)."""
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    zeros = _rep(_ZERO, 0, None)
    plus = NOTHING if hi is not None and hi < 0 else _cat(
        _opt(_lit("+")), zeros, _uint_range(0 if lo is None else max(lo, 0), hi)
    )
    minus = NOTHING if lo is not None and lo > 0 else _cat(
        _MINUS, zeros, _uint_range(0 if hi is None else max(-hi, 0), None if lo is None else -lo)
    )
    return _cat(_E, _alt(plus, minus))


def _plain(lo: _Bound, hi: _Bound | None) -> Node:
    """Unsigned plain decimal texts with value in ``[lo, hi]``."""
    return _interval(_plain_split(lo), None if hi is None else _plain_split(hi), _uint_range, False)


def _scientific(lo: _Bound, hi: _Bound | None) -> Node:
    """Unsigned normalized scientific texts with value in ``[lo, hi]`` (their values are > 0)."""
    if hi is not None and hi[0] == 0:
        return NOTHING
    e_lo, m_lo = (None, (1, "", False)) if lo[0] == 0 else _scientific_split(lo)
    e_hi, m_hi = (None, None) if hi is None else _scientific_split(hi)

    def mantissa(m_from: _Split, m_to: _Split | None) -> Node:
        return _interval(m_from, m_to, _mantissa_digit, True)

    if e_lo is not None and e_lo == e_hi:
        return _cat(mantissa(m_lo, m_hi), _exponent(e_lo, e_lo))
    # exponents strictly between the bounds' exponents take any mantissa
    between = _exponent(None if e_lo is None else e_lo + 1, None if e_hi is None else e_hi - 1)
    return _alt(
        NOTHING if e_lo is None else _cat(mantissa(m_lo, None), _exponent(e_lo, e_lo)),
        _cat(mantissa((1, "", False), None), between),
        NOTHING if e_hi is None else _cat(mantissa((1, "", False), m_hi), _exponent(e_hi, e_hi)),
    )


def _decimal_magnitude(lo: _Bound, hi: _Bound | None) -> Node:
    return _alt(_plain(lo, hi), _scientific(lo, hi))


def _integer_magnitude(lo: _Bound, hi: _Bound | None) -> Node:
    first = _least_above(Fraction(lo[0]), lo[1])
    last = None if hi is None else _greatest_below(Fraction(hi[0]), hi[1])
    return _cat(_uint_range(first, last), _POINT_ZEROS)


def _signed(
    magnitude: Callable[[_Bound, _Bound | None], Node], lo: _Bound | None, hi: _Bound | None
) -> Node:
    """Texts ``-?M`` with value in ``[lo, hi]`` (None: unbounded), ``M`` from ``magnitude``."""
    zero: _Bound = (Decimal(0), False)
    positive = NOTHING
    if hi is None or hi[0] > 0 or (hi[0] == 0 and not hi[1]):
        positive = magnitude(lo if lo is not None and lo[0] >= 0 else zero, hi)
    negative = NOTHING
    if lo is None or lo[0] < 0 or (lo[0] == 0 and not lo[1]):
        m_lo = (hi[0].copy_negate(), hi[1]) if hi is not None and hi[0] <= 0 else zero
        negative = _cat(_MINUS, magnitude(m_lo, None if lo is None else (lo[0].copy_negate(), lo[1])))
    return _alt(positive, negative)


# -- multipleOf ------------------------------------------------------------------------------------


def _residue_automaton(a: int, s: int) -> Automaton:
    """Plain decimal texts whose value is a multiple of ``a * 10**-s``.

    The state after the integer part and ``j <= s`` fraction digits is those digits read as one
    integer, mod ``a``; the text is a multiple when that residue times ``10**(s-j)`` is 0 mod
    ``a``. After ``s`` fraction digits only zeros may follow.
    """
    minus, zero, tail = 1, 2, 3  # state 0: the start
    n = 4 + a * (1 + max(s, 1))

    def whole(y: int) -> int:  # integer digits read, residue y
        return 4 + y

    def fraction(y: int, j: int) -> int:  # j < max(s, 1) fraction digits read (0: just the point)
        return 4 + a * (j + 1) + y

    moves: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (character, target)
    accepting = [False] * n
    accepting[zero] = accepting[tail] = True
    first_digits = [(48, zero)] + [(48 + d, whole(d % a)) for d in range(1, 10)]
    moves[0] = [(45, minus)] + first_digits
    moves[minus] = first_digits
    moves[zero] = [(46, fraction(0, 0))]
    moves[tail] = [(48, tail)]
    for y in range(a):
        moves[whole(y)] = [(48 + d, whole((10 * y + d) % a)) for d in range(10)] + [(46, fraction(y, 0))]
        accepting[whole(y)] = y * 10**s % a == 0
        for j in range(max(s, 1)):
            q = fraction(y, j)
            accepting[q] = j > 0 and y * 10 ** (s - j) % a == 0
            if s == 0:  # only zeros may follow the point, if the integer part is a multiple
                moves[q] = [(48, tail)] if y == 0 else []
            elif j == s - 1:  # the last digit that counts: then zeros only
                moves[q] = [(48 + d, tail) for d in range(10) if (10 * y + d) % a == 0]
            else:
                moves[q] = [(48 + d, fraction((10 * y + d) % a, j + 1)) for d in range(10)]
    return _trimmed_automaton(moves, accepting)


def _trimmed_automaton(moves: list[list[tuple[int, int]]], accepting: list[bool]) -> Automaton:
    """The live states reachable from state 0, numbered breadth-first, as an :class:`Automaton`."""
    predecessors: list[list[int]] = [[] for _ in moves]
    for q, out in enumerate(moves):
        for _, t in out:
            predecessors[t].append(q)
    live = list(accepting)
    pending = [q for q, ok in enumerate(accepting) if ok]
    while pending:
        for p in predecessors[pending.pop()]:
            if not live[p]:
                live[p] = True
                pending.append(p)
    order, index = [0], {0: 0}
    for q in order:
        for _, t in sorted(moves[q]):
            if live[t] and t not in index:
                index[t] = len(order)
                order.append(t)
    edges = []
    for q in order:
        ranges: dict[int, list[tuple[int, int]]] = {}  # target -> character ranges
        for ch, t in sorted(moves[q]):
            if live[t]:
                out = ranges.setdefault(index[t], [])
                if out and out[-1][1] == ch - 1:
                    out[-1] = (out[-1][0], ch)
                else:
                    out.append((ch, ch))
        edges.append(tuple((tuple(r), target) for target, r in ranges.items()))
    return Automaton(0, tuple(accepting[q] for q in order), tuple(edges))


def _multiple_of(step: Decimal, integer: bool) -> tuple[Automaton, Fraction]:
    """The residue automaton for ``multipleOf = step`` and the step of the allowed values (the
    least integer multiple when ``integer``)."""
    if step <= 0:
        raise ValueError(f"multipleOf must be > 0, got {step}")
    _, digits, exp = step.as_tuple()
    a = int("".join(map(str, digits)))
    a, s = (a * 10**exp, 0) if exp >= 0 else (a, -exp)
    while s and a % 10 == 0:
        a, s = a // 10, s - 1
    if integer:
        a, s = a // math.gcd(a, 10**s), 0
    if a * (s + 1) > MAX_MULTIPLE_STATES:
        raise ValueError(
            f"multipleOf={step} is too fine (or too coarse) to enforce: it needs about "
            f"{a * (s + 1)} automaton states (limit {MAX_MULTIPLE_STATES})"
        )
    return _residue_automaton(a, s), Fraction(a, 10**s)


# -- the entry point -------------------------------------------------------------------------------


def _decimal(value: Number, name: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise TypeError(f"{name} must be an int or a Decimal, got {value!r}")
    value = Decimal(value)
    if not value.is_finite():
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _bound(value: Number | None, name: str, exclusive: bool) -> _Bound | None:
    if value is None:
        return None
    value = _decimal(value, name)
    if value:
        if len("".join(map(str, value.as_tuple().digits)).rstrip("0")) > MAX_SIGNIFICANT_DIGITS:
            raise ValueError(f"{name}={value} has more than {MAX_SIGNIFICANT_DIGITS} significant digits")
        if abs(value.adjusted()) > MAX_MAGNITUDE_DIGITS:
            raise ValueError(f"{name}={value} is beyond 1e±{MAX_MAGNITUDE_DIGITS}: too many digits")
    return value, exclusive


def _tightest(a: _Bound | None, b: _Bound | None, lower: bool) -> _Bound | None:
    """The tighter of two bounds (None: absent); the exclusive one on a tie."""
    if a is None or b is None:
        return a if b is None else b
    if a[0] == b[0]:
        return a if a[1] else b
    return a if (a[0] > b[0]) == lower else b


def _least_above(x: Fraction, exclusive: bool) -> int:
    return math.floor(x) + 1 if exclusive else math.ceil(x)


def _greatest_below(x: Fraction, exclusive: bool) -> int:
    return math.ceil(x) - 1 if exclusive else math.floor(x)


def _has_value(lo: _Bound | None, hi: _Bound | None, step: Fraction | None) -> bool:
    """Whether some value in ``[lo, hi]`` exists (a multiple of ``step`` if given)."""
    if lo is None or hi is None:
        return True
    if step is None:
        return lo[0] < hi[0] or (lo[0] == hi[0] and not lo[1] and not hi[1])
    return _least_above(Fraction(lo[0]) / step, lo[1]) <= _greatest_below(Fraction(hi[0]) / step, hi[1])


def number_node(
    *,
    integer: bool = False,
    minimum: Number | None = None,
    maximum: Number | None = None,
    exclusive_minimum: Number | None = None,
    exclusive_maximum: Number | None = None,
    multiple_of: Number | None = None,
) -> Node:
    """A regex tree matching exactly the JSON number texts of the allowed forms (module docstring)
    whose value satisfies every given constraint (None: not given).

    Raises :class:`ValueError` when no number satisfies them, when ``multiple_of <= 0``, or when a
    constraint is too fine or too large to enforce (see the ``MAX_*`` limits); :class:`TypeError`
    for values that are not ``int`` or :class:`~decimal.Decimal`.
    """
    lo = _tightest(
        _bound(minimum, "minimum", False),
        _bound(exclusive_minimum, "exclusiveMinimum", True),
        lower=True,
    )
    hi = _tightest(
        _bound(maximum, "maximum", False),
        _bound(exclusive_maximum, "exclusiveMaximum", True),
        lower=False,
    )
    multiple, step = None, Fraction(1) if integer else None
    if multiple_of is not None:
        multiple, step = _multiple_of(_decimal(multiple_of, "multipleOf"), integer)
        if integer and step == 1:
            multiple = None  # every integer is a multiple (0.5, 0.25, 1)
    if not _has_value(lo, hi, step):
        given = {
            "type": "integer" if integer else None,
            "minimum": minimum,
            "exclusiveMinimum": exclusive_minimum,
            "maximum": maximum,
            "exclusiveMaximum": exclusive_maximum,
            "multipleOf": multiple_of,
        }
        described = ", ".join(f"{name}={value}" for name, value in given.items() if value is not None)
        raise ValueError(f"no number satisfies {described}")
    if lo is None and hi is None:
        if multiple is not None:
            return multiple
        return _INTEGER_SYNTAX if integer else _NUMBER_SYNTAX
    ranged = _signed(_integer_magnitude if integer else _decimal_magnitude, lo, hi)
    if multiple is None:
        return ranged
    try:
        return intersect(ranged, multiple)
    except CompileError as err:
        raise ValueError(
            f"multipleOf={multiple_of} within these bounds is too large to enforce: {err}"
        ) from err
