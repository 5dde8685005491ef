"""Tests for ``logitgate.json_schema.numbers.number_node``.

Oracle: ``re.fullmatch`` of the allowed-form regexes of the module's policy, then exact
``Decimal``/``Fraction`` arithmetic on the text's value. Each constraint set is checked on a
generated set of candidate texts: integers, decimals near the bounds at several scales (with
trailing zeros and ``-0`` variants), normalized and non-normalized scientific texts, malformed texts.
"""
from __future__ import annotations

import decimal
import functools
import itertools
import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata.dfa import ByteDFA, regex_dfa
from logitgate.json_schema.numbers import MAX_MULTIPLE_STATES, number_node
from logitgate.regex.ast import Node

D = Decimal
EXACT = decimal.Context(prec=5000)  # arithmetic on candidate values never rounds

PLAIN = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"
SCIENTIFIC = r"-?[1-9](?:\.[0-9]*[1-9])?[eE][+-]?[0-9]+"
INTEGER = r"-?(?:0|[1-9][0-9]*)(?:\.0+)?"
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"

MALFORMED = [
    "", "-", "+", "01", "-01", "00", "1.", "-1.", ".5", "-.5", "+1", "1e", "1e+", "1E-", "--1",
    "1.5.2", " 1", "1 ", "0x10", "1_000", "1.e5", "e5", "1e5.0", "-0-", "1,5", "∞", "NaN",
    "Infinity", "1ee2",
]
NON_NORMALIZED = [
    "10e2", "0.5e1", "1.0e3", "1.50e1", "0e0", "-0e0", "00e1", "12e-1", "0.0e0", "100E-2", "-10e1",
]


@functools.cache
def dfa(node: Node) -> ByteDFA:
    return regex_dfa(node)


def case_id(case: dict) -> str:
    return ",".join(f"{k}={str(v)[:16]}" for k, v in case.items())


def kwargs(lo=None, lo_x=False, hi=None, hi_x=False, integer=False, multiple=None) -> dict:
    out: dict = {"integer": integer}
    if lo is not None:
        out["exclusive_minimum" if lo_x else "minimum"] = lo
    if hi is not None:
        out["exclusive_maximum" if hi_x else "maximum"] = hi
    if multiple is not None:
        out["multiple_of"] = multiple
    return out


@functools.cache
def parsed(text: str) -> tuple[frozenset[str], Decimal | None]:
    """The allowed-form regexes ``text`` fully matches, and its value (None: not a JSON number)."""
    forms = frozenset(name for name, pattern in FORMS.items() if pattern.fullmatch(text))
    return forms, Decimal(text) if forms else None


FORMS = {
    name: re.compile(pattern)
    for name, pattern in [
        ("plain", PLAIN), ("scientific", SCIENTIFIC), ("integer", INTEGER), ("json", JSON_NUMBER)
    ]
}


def expected(text: str, lo=None, lo_x=False, hi=None, hi_x=False, integer=False, multiple=None) -> bool:
    forms, value = parsed(text)
    if integer:
        allowed = "integer" in forms
    elif multiple is not None:
        allowed = "plain" in forms
    elif lo is not None or hi is not None:
        allowed = "plain" in forms or "scientific" in forms
    else:
        allowed = "json" in forms
    if not allowed:
        return False
    if lo is not None and not (value > lo if lo_x else value >= lo):
        return False
    if hi is not None and not (value < hi if hi_x else value <= hi):
        return False
    return multiple is None or (Fraction(value) / Fraction(multiple)).denominator == 1


def check(texts, **case) -> None:
    machine = dfa(number_node(**kwargs(**case)))
    wrong = [t for t in texts if machine.matches(t.encode()) != expected(t, **case)]
    assert not wrong, f"{case}: {len(wrong)} wrong, e.g. " + ", ".join(
        f"{t!r} (expected {expected(t, **case)})" for t in wrong[:8]
    )


# -- candidate texts -------------------------------------------------------------------------------


def plain_text(v: Decimal) -> str:
    return format(v, "f")


def scientific_text(v: Decimal, e: str = "e", exp_format: str = "{:+d}") -> str:
    """Normalized scientific text of ``v != 0`` (``1.5e+20``)."""
    digits = "".join(map(str, v.as_tuple().digits)).rstrip("0")
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return ("-" if v < 0 else "") + mantissa + e + exp_format.format(v.adjusted())


def variants(v: Decimal) -> set[str]:
    """Texts of the value ``v`` (and its negation): plain, with trailing zeros, scientific."""
    out = set()
    for w in (v, v.copy_negate()):
        p = plain_text(w)
        out |= {p, p + ("0" if "." in p else ".0"), p + ("000" if "." in p else ".000")}
        if w:
            sci = scientific_text(w)
            out |= {sci, scientific_text(w, "E", "{:d}"), scientific_text(w, "e", "{:+04d}")}
            out.add(sci.replace("e", "0e", 1) if "." in sci else p + "e0")  # not normalized
            if w.adjusted() == 0:
                out.add(scientific_text(w, "e", "-{:02d}"))
    return out


def near(b: Decimal) -> set[Decimal]:
    """Values around ``b`` at the scale of its last digit, finer, and a few fixed scales."""
    last = b.as_tuple().exponent if b else 0
    out = set()
    with decimal.localcontext(EXACT):
        for e in {last, last - 1, last - 2, 0, -1, -3}:
            out |= {b + k * Decimal(f"1e{e}") for k in range(-3, 4)}
        return out | {b.scaleb(1), b.scaleb(-1)}


@functools.cache
def candidates(bounds: tuple[Decimal, ...] = ()) -> tuple[str, ...]:
    texts = {str(i) for i in range(-1200, 1201)} | set(MALFORMED) | set(NON_NORMALIZED)
    texts |= {"-0", "-0.0", "0.0", "0.000", "-0.000"}
    for m, e in itertools.product(["1", "1.5", "2.5", "9.99", "1.25", "5", "1.001"], range(-30, 31)):
        texts |= {f"{m}e{e}", f"-{m}E{e:+d}"}
    for m in ["1", "-1", "9.5", "-2.5"]:  # zero exponents with a sign and leading zeros
        texts |= {f"{m}e-0", f"{m}E-00", f"{m}e+000", f"{m}e00"}
    for b in bounds:
        with decimal.localcontext(EXACT):
            for k in range(-40, 41):  # a window of 3-digit decimals
                v = b.quantize(D("0.001")) + D(k) / 1000
                texts |= {plain_text(v), format(v, ".1f"), format(v, ".2f"), format(v, ".4f")}
        for v in near(b):
            texts |= variants(v)
    return tuple(sorted(texts))


# -- (a) bounds, exhaustive-ish ---------------------------------------------------------------------

VALUES = [
    0, 1, -1, 7, -7, 100, -100, 1000, D("0.5"), D("-0.5"), D("1.25"), D("-1.25"), D("0.001"),
    D("123.456"), D("-99.99"), D("2.50"), D("1e-6"), D("-3E+2"), D("9.999"),
]
PAIRS = [
    (0, 1), (-1, 1), (-100, 7), (D("0.5"), D("1.25")), (D("-1.25"), D("-0.5")),
    (D("1.25"), D("1.2501")), (D("0.001"), 1000), (D("-99.99"), D("123.456")), (0, 0),
    (D("9.99"), 10), (D("1e-6"), D("2e-6")), (D("1.2"), D("1.8")), (D("-0.001"), D("0.001")),
]


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("side", ["lower", "upper"])
@pytest.mark.parametrize("bound", VALUES, ids=str)
def test_one_bound(bound, side, exclusive, integer):
    case = {"lo": bound, "lo_x": exclusive} if side == "lower" else {"hi": bound, "hi_x": exclusive}
    check(candidates((D(bound),)), integer=integer, **case)


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("lo_x,hi_x", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("lo,hi", PAIRS, ids=str)
def test_two_bounds(lo, hi, lo_x, hi_x, integer):
    case = {"lo": lo, "lo_x": lo_x, "hi": hi, "hi_x": hi_x, "integer": integer}
    texts = candidates((D(lo), D(hi)))
    if not any(expected(t, **case) for t in texts):
        with pytest.raises(ValueError, match="no number satisfies"):
            number_node(**kwargs(**case))
    else:
        check(texts, **case)


def test_unconstrained():
    texts = candidates((D("1.5"), D("-250.125")))
    check(texts)
    check(texts, integer=True)


INTEGER_EXPONENT_TEXTS = [
    "1e+308", "-1e+308", "1e999", "1.5e+20", "1.5E1", "2.0e1", "0e5", "7e0", "1e-2", "15e-1", "3", "3.0", "-0",
]


@pytest.mark.parametrize("multiple", [None, D("0.5"), 1, 3])
def test_integers_have_no_exponent_forms(multiple):
    """An integer is never written with an exponent, even a whole one (``1e+308``) with nothing
    but a ``multipleOf`` every integer meets: a model could write ``1e999``, which a JSON reader
    turns into a float, or infinity (a random-weights model did, in the server's tests)."""
    for case in ({}, {"lo": 0}):
        machine = dfa(number_node(**kwargs(integer=True, multiple=multiple, **case)))
        assert not any(machine.matches(t.encode()) for t in INTEGER_EXPONENT_TEXTS if "e" in t.lower())
        check(INTEGER_EXPONENT_TEXTS, integer=True, multiple=multiple, **case)


def test_all_bounds_at_once_take_the_tightest():
    node = number_node(minimum=-5, exclusive_minimum=D("-2.5"), maximum=10, exclusive_maximum=10)
    assert node == number_node(exclusive_minimum=D("-2.5"), exclusive_maximum=10)
    node = number_node(minimum=3, exclusive_minimum=3, maximum=D("4.5"), exclusive_maximum=100)
    assert node == number_node(exclusive_minimum=3, maximum=D("4.5"))


@pytest.mark.parametrize(
    "case",
    [
        {"lo": -(2**63), "hi": 2**64, "integer": True},
        {"lo": -(2**63), "hi_x": True, "hi": 2**64},
        {"lo": D("1e400"), "lo_x": True},
        {"hi": D("-1.5e400")},
        {"lo": D("1e-300"), "hi": D("1.0000001e-300")},
        {"lo": D("-1e-300"), "lo_x": True, "hi": D("1e-301"), "hi_x": True},
        {"lo": D("0.000001"), "lo_x": True, "hi": D("0.1")},
        {"lo": D("12345678901234567890.0987654321"), "hi": D("12345678901234567891.5")},
        # 100 significant digits (the limit): deep comparisons, long common prefixes
        {"lo": D("1" + "0123456789" * 9 + "012345678"), "lo_x": True, "integer": True},
        {"lo": D("0." + "9" * 99), "hi": D("0." + "9" * 99 + "1"), "hi_x": True},
        {"lo": D("1." + "0123456789" * 9 + "12345678e-900"), "hi": D("1." + "0123456789" * 9 + "2e-900")},
        {"lo": D("-" + "12" * 45 + "." + "34" * 5), "hi": D("12" * 45 + "." + "34" * 4 + "35")},
    ],
    ids=case_id,
)
def test_huge_and_tiny_bounds(case):
    bounds = tuple(D(case[k]) for k in ("lo", "hi") if k in case)
    texts = {t for b in bounds for v in near(b) for t in variants(v)} | set(candidates()[:500])
    check(sorted(texts), **case)


# -- (b) random bounds -----------------------------------------------------------------------------


def decimals(max_digits: int = 12) -> st.SearchStrategy[Decimal]:
    coefficient = st.integers(-(10**max_digits), 10**max_digits)
    exponent = st.one_of(st.integers(-12, 12), st.integers(-400, 400))
    return st.builds(lambda c, e: Decimal(f"{c}e{e}"), coefficient, exponent)


def last_digit(x: Decimal) -> Decimal:
    """The value of one unit in the last digit of ``x``."""
    return Decimal(f"1e{x.as_tuple().exponent if x else 0}")


def check_random_bounds(a, other, a_x, b_x, lower_first, integer, extra):
    with decimal.localcontext(EXACT):
        b = other[1] if other and other[0] == "far" else None
        if other and other[0] == "near":  # a second bound sharing most digits with a
            b = a + other[1][0] * last_digit(a).scaleb(other[1][1])
    if b is None:
        case = {"lo": a, "lo_x": a_x} if lower_first else {"hi": a, "hi_x": a_x}
    else:
        lo, hi = sorted((a, b))
        case = {"lo": lo, "lo_x": a_x, "hi": hi, "hi_x": b_x}
    case["integer"] = integer
    bounds = [a] if b is None else [a, b]
    values = {v for x in bounds for v in near(x)} | {D(0), D(1), D("0.5")}
    with decimal.localcontext(EXACT):  # offsets around the bound's last digit
        for x, (k, shift) in itertools.product(bounds, extra):
            values.add(x + k * last_digit(x).scaleb(shift))
    texts = sorted({t for v in values for t in variants(v)})
    try:
        node = number_node(**kwargs(**case))
    except ValueError as err:
        assert "no number satisfies" in str(err)
        lo, hi = Fraction(case["lo"]), Fraction(case["hi"])
        if integer:
            assert (math.floor(lo) + 1 if case["lo_x"] else math.ceil(lo)) > (
                math.ceil(hi) - 1 if case["hi_x"] else math.floor(hi)
            )
        else:
            assert lo > hi or (lo == hi and (case["lo_x"] or case["hi_x"]))
        return
    machine = dfa(node)
    wrong = [t for t in texts if machine.matches(t.encode()) != expected(t, **case)]
    assert not wrong, f"{case}: {wrong[:8]}"


random_bounds = given(
    a=decimals(),
    other=st.one_of(
        st.none(),
        decimals().map(lambda d: ("far", d)),
        st.tuples(st.integers(-(10**6), 10**6), st.integers(-8, 2)).map(lambda t: ("near", t)),
    ),
    a_x=st.booleans(),
    b_x=st.booleans(),
    lower_first=st.booleans(),
    integer=st.booleans(),
    extra=st.lists(st.tuples(st.integers(-999, 999), st.integers(-3, 3)), max_size=8),
)
test_random_bounds = settings(max_examples=100, deadline=None)(random_bounds(check_random_bounds))
test_random_bounds_many = pytest.mark.slow(
    settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])(
        random_bounds(check_random_bounds)
    )
)


# -- (c) multipleOf --------------------------------------------------------------------------------

STEPS = [3, 7, D("0.5"), D("0.01"), D("2.5"), D("1e-3"), D("0.07"), 12, D("1.5E+2")]


@functools.cache
def multiple_candidates(step: Decimal) -> tuple[str, ...]:
    texts = {str(i) for i in range(-400, 401)} | set(MALFORMED) | set(NON_NORMALIZED)
    texts |= {plain_text(D(k) / 1000) for k in range(-3000, 3001, 7)}
    texts |= {"-0", "-0.0", "0.000", "1e3", "3e0", "7E1", "1.5e1"}
    for k in [1, 2, 3, 10, 13, 99, 12345, 10**20 + 1, 3**40, 7**30]:
        with decimal.localcontext(EXACT):
            v = step * k
            near_multiple = (v, v + D("0.001"), v + D("1e-9"), v + 1, v * 10, v - step / 2)
        for w in near_multiple:
            p = plain_text(w)
            texts |= {p, "-" + p, p + ("0" if "." in p else ".0"), p + ("000" if "." in p else ".000")}
    return tuple(sorted(texts))


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("step", STEPS, ids=str)
def test_multiple_of(step, integer):
    check(multiple_candidates(D(step)), multiple=step, integer=integer)


@pytest.mark.parametrize(
    "case",
    [
        {"multiple": 7, "lo": 0, "hi": 100},
        {"multiple": D("0.5"), "lo": -2, "lo_x": True, "hi": D("3.25")},
        {"multiple": D("0.01"), "lo": D("0.005"), "hi": D("0.1"), "hi_x": True},
        {"multiple": D("2.5"), "lo": -20, "hi": 20, "integer": True},
        {"multiple": 3, "lo": D("-1e25"), "hi": D("1e25"), "hi_x": True},
        {"multiple": D("1e-3"), "lo": D("-0.0015"), "hi": D("0.0035")},
        {"multiple": 7, "lo": 50},
        {"multiple": D("0.25"), "hi": -1, "hi_x": True},
    ],
    ids=case_id,
)
def test_multiple_of_with_bounds(case):
    bounds = tuple(D(case[k]) for k in ("lo", "hi") if k in case)
    texts = set(multiple_candidates(D(case["multiple"])))
    texts |= {t for b in bounds for v in near(b) for t in variants(v)}
    check(sorted(texts), **case)


@settings(max_examples=40, deadline=None)
@given(
    coefficient=st.integers(1, 60),
    exponent=st.integers(-5, 2),
    integer=st.booleans(),
    ks=st.lists(st.integers(-(10**30), 10**30), min_size=1, max_size=10),
)
def test_random_multiple_of(coefficient, exponent, integer, ks):
    step = Decimal(f"{coefficient}e{exponent}")
    with decimal.localcontext(EXACT):
        values = {step * k + offset for k in ks for offset in (0, D("1e-6"), step / 3, -step / 2)}
    texts = sorted({t for v in values for t in variants(v)} | {str(i) for i in range(-100, 101)})
    check(texts, multiple=step, integer=integer)


# -- (d) errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"minimum": 2, "maximum": 1},
        {"minimum": 1, "exclusive_maximum": 1},
        {"exclusive_minimum": D("0.5"), "maximum": D("0.5")},
        {"minimum": D("1.2"), "maximum": D("1.8"), "integer": True},
        {"exclusive_minimum": 1, "exclusive_maximum": 2, "integer": True},
        {"minimum": 1, "maximum": 6, "multiple_of": 7},
        {"exclusive_minimum": 1, "exclusive_maximum": D("1.5"), "multiple_of": D("0.5")},
        {"minimum": 1, "maximum": 4, "multiple_of": D("2.5"), "integer": True},
    ],
    ids=case_id,
)
def test_unsatisfiable(kw):
    with pytest.raises(ValueError, match="no number satisfies"):
        number_node(**kw)


@pytest.mark.parametrize("step", [0, -3, D("-0.5"), D("0")], ids=str)
def test_multiple_of_not_positive(step):
    with pytest.raises(ValueError, match="multipleOf must be > 0"):
        number_node(multiple_of=step)


def test_limits():
    fine = D("0.00012345")  # 12345 * 10**-8: 12345 * 9 states
    assert 12345 * 9 > MAX_MULTIPLE_STATES
    with pytest.raises(ValueError, match="too fine"):
        number_node(multiple_of=fine)
    number_node(multiple_of=D("1e-20"))  # a = 1: cheap however many fraction digits
    with pytest.raises(ValueError, match="too large to enforce"):  # ~31 digits x 9999 residues
        number_node(multiple_of=9999, minimum=-(10**30), maximum=10**30)
    with pytest.raises(ValueError, match="significant digits"):
        number_node(minimum=D("1." + "1" * 120))
    with pytest.raises(ValueError, match="beyond"):
        number_node(maximum=D("1e-5000"))
    with pytest.raises(ValueError, match="finite"):
        number_node(minimum=D("Infinity"))
    for bad in (1.5, True, "3"):
        with pytest.raises(TypeError):
            number_node(minimum=bad)
