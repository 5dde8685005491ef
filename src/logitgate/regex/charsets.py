"""Unicode character sets and case folding, exactly as Python's ``re`` defines them.

A character set is a ``Ranges`` value: a tuple of inclusive ``(lo, hi)`` code point pairs, sorted,
disjoint and non-adjacent, never containing the surrogates U+D800..U+DFFF (the form of
:attr:`logitgate.regex.ast.CharClass.ranges`). :func:`normalize` turns any list of pairs into that
form; :func:`union`, :func:`intersection`, :func:`difference` and :func:`complement` (over
U+0000..U+10FFFF minus the surrogates) combine them.

The Unicode sets are taken from the running Python so that they agree with its ``re``:

* ``\\d``: ``str.isdecimal()`` characters; ``\\s``: ``str.isspace()`` characters; ``\\w``:
  ``str.isalnum()`` characters and ``_``. They are found once, on first use, by running ``re``
  itself over a string of every code point (about 20 ms each), and cached.
* With ``re.ASCII`` they are ``[0-9]``, ``[ \\t\\n\\r\\f\\v]`` and ``[a-zA-Z0-9_]``.
* ``.`` is every character but ``\\n`` (every character with ``re.DOTALL``).

Case-insensitive matching (``re.IGNORECASE``) follows the rules ``re`` compiles to: a character
``ch`` matches the literal ``c`` when ``lower(ch)`` is ``lower(c)`` or one of the few extra
equivalents ``re`` knows for it (``'s'``/``'ſ'``, ``'i'``/``'ı'``, ``'µ'``/``'μ'``, ...), where
``lower`` is the single-character lowercase mapping ``re`` uses (so ``'K'`` KELVIN SIGN matches
``k`` and ``K``, and ``'İ'`` matches ``i`` and ``I``). A class matches the union of those
equivalence classes. With ``re.ASCII`` only ASCII letters fold. The case table is built on the first
case-insensitive use (about 40 ms) and cached. :func:`charset_ranges` also reproduces ``re``'s
quirks for classes that mention characters outside the Basic Multilingual Plane, e.g.
``(?i)[\\U00010400a]`` does *not* match U+10400 in ``re`` (an uppercase non-BMP letter listed in a
class of several items matches nothing), so it does not here either.
"""

from __future__ import annotations

import bisect
import importlib
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from functools import cache, lru_cache
from typing import Any

import numpy as np

from .._cachedir import cached_json

__all__ = [
    "Ranges",
    "MAX_CODE_POINT",
    "SURROGATE_LO",
    "SURROGATE_HI",
    "ANY",
    "EMPTY",
    "normalize",
    "from_code_points",
    "union",
    "intersection",
    "difference",
    "complement",
    "contains",
    "size",
    "dot",
    "category",
    "digit",
    "space",
    "word",
    "ignorecase_literal",
    "case_closure",
    "charset_ranges",
    "ClassItem",
    "all_characters",
    "ranges_matching",
]

Ranges = tuple[tuple[int, int], ...]

ClassItem = tuple[str, Any]
"""A class member: ``("LITERAL", cp)``, ``("RANGE", (lo, hi))``, ``("CATEGORY", name)`` or a leading
``("NEGATE", None)``."""

MAX_CODE_POINT = 0x10FFFF
SURROGATE_LO = 0xD800
SURROGATE_HI = 0xDFFF

EMPTY: Ranges = ()
ANY: Ranges = ((0, SURROGATE_LO - 1), (SURROGATE_HI + 1, MAX_CODE_POINT))
"""Every character that can appear in a (UTF-8 encodable) string."""

_BMP_MAX = 0xFFFF


# ---------------------------------------------------------------------------------------------
# Range arithmetic
# ---------------------------------------------------------------------------------------------


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort, merge overlapping/adjacent pairs, clip to [0, 0x10FFFF] and drop the surrogates.

    A set that is already normalized comes back as it is, after one pass; big unsorted inputs
    (unions of Unicode classes) are merged with numpy.
    """
    pairs = ranges if isinstance(ranges, tuple) else tuple(ranges)
    if _is_normalized(pairs):
        return pairs
    if len(pairs) > _NUMPY_MIN:
        return _normalize_numpy(pairs)
    out: list[list[int]] = []
    for lo, hi in sorted((lo, hi) for lo, hi in pairs):
        if lo < 0:
            lo = 0
        if hi > MAX_CODE_POINT:
            hi = MAX_CODE_POINT
        if hi < lo:
            continue
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    result: list[tuple[int, int]] = []
    for lo, hi in out:
        if hi < SURROGATE_LO or lo > SURROGATE_HI:
            result.append((lo, hi))
            continue
        if lo < SURROGATE_LO:
            result.append((lo, SURROGATE_LO - 1))
        if hi > SURROGATE_HI:
            result.append((SURROGATE_HI + 1, hi))
    return tuple(result)


_NUMPY_MIN = 48  # below this many pairs the plain loop is faster than numpy's set-up


def _is_normalized(pairs: tuple[tuple[int, int], ...]) -> bool:
    nxt = 0  # the lowest code point the next pair may start at
    for pair in pairs:
        if type(pair) is not tuple:
            return False
        lo, hi = pair
        if lo < nxt or hi < lo or (lo <= SURROGATE_HI and hi >= SURROGATE_LO):
            return False
        nxt = hi + 2
    return nxt <= MAX_CODE_POINT + 2


def _normalize_numpy(pairs: tuple[tuple[int, int], ...]) -> Ranges:
    a = np.array(pairs, np.int64).reshape(-1, 2)
    lo = np.maximum(a[:, 0], 0)
    hi = np.minimum(a[:, 1], MAX_CODE_POINT)
    keep = lo <= hi
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return ()
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)  # the end of the run each pair belongs to, so far
    starts = np.empty(len(lo), np.bool_)
    starts[0] = True
    starts[1:] = lo[1:] > reach[:-1] + 1
    first = np.flatnonzero(starts)
    run_lo = lo[first]
    run_hi = reach[np.append(first[1:] - 1, len(lo) - 1)]
    # cut the surrogates out of the runs that overlap them
    cut = (run_lo <= SURROGATE_HI) & (run_hi >= SURROGATE_LO)
    if cut.any():
        left_lo, left_hi = run_lo[cut], np.full(int(cut.sum()), SURROGATE_LO - 1)
        right_lo, right_hi = np.full(int(cut.sum()), SURROGATE_HI + 1), run_hi[cut]
        run_lo = np.concatenate((run_lo[~cut], left_lo, right_lo))
        run_hi = np.concatenate((run_hi[~cut], left_hi, right_hi))
        ok = run_lo <= run_hi
        run_lo, run_hi = run_lo[ok], run_hi[ok]
        order = np.argsort(run_lo, kind="stable")
        run_lo, run_hi = run_lo[order], run_hi[order]
    return tuple(zip(run_lo.tolist(), run_hi.tolist()))


def from_code_points(code_points: Iterable[int]) -> Ranges:
    """The set of the given code points (surrogates dropped)."""
    return normalize((c, c) for c in code_points)


def union(*sets: Ranges) -> Ranges:
    """Union of range sets."""
    if len(sets) == 1:
        return sets[0]
    return normalize(pair for s in sets for pair in s)


def add_ranges(base: Ranges, extra: Ranges) -> Ranges:
    """The union of two normalized sets, by inserting ``extra``'s ranges into ``base`` one by one
    (binary search and list splicing: for a few ranges added to a big Unicode class, cheaper than
    normalizing both together)."""
    if not extra:
        return base
    if not base:
        return extra
    starts = [lo for lo, _ in base]
    ends = [hi for _, hi in base]
    for lo, hi in extra:
        i = bisect.bisect_left(ends, lo - 1)  # the first range ending at or after lo - 1
        j = bisect.bisect_right(starts, hi + 1)  # past the last range starting at or before hi + 1
        if i < j:  # ranges i..j-1 overlap or touch [lo, hi]
            lo = min(lo, starts[i])
            hi = max(hi, ends[j - 1])
        starts[i:j] = [lo]
        ends[i:j] = [hi]
    return tuple(zip(starts, ends))


def complement(ranges: Ranges) -> Ranges:
    """Every character (surrogates excluded) not in ``ranges`` (which must be normalized)."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return normalize(out)


def intersection(a: Ranges, b: Ranges) -> Ranges:
    """Characters in both normalized sets."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def difference(a: Ranges, b: Ranges) -> Ranges:
    """Characters of ``a`` not in ``b`` (both normalized)."""
    return intersection(a, complement(b))


def contains(ranges: Ranges, code_point: int) -> bool:
    """Whether ``code_point`` is in the normalized set (binary search)."""
    i = bisect.bisect_right(ranges, (code_point, MAX_CODE_POINT + 1)) - 1
    return i >= 0 and ranges[i][0] <= code_point <= ranges[i][1]


def size(ranges: Ranges) -> int:
    """Number of code points in the set."""
    return sum(hi - lo + 1 for lo, hi in ranges)


# ---------------------------------------------------------------------------------------------
# `.` and the \d \s \w categories
# ---------------------------------------------------------------------------------------------

_NOT_NEWLINE: Ranges = ((0, 9), (11, SURROGATE_LO - 1), (SURROGATE_HI + 1, MAX_CODE_POINT))


def dot(dotall: bool = False) -> Ranges:
    """The set of ``.``: every character but ``\\n`` (every character with DOTALL)."""
    return ANY if dotall else _NOT_NEWLINE


_ASCII_CATEGORIES: dict[str, Ranges] = {
    "DIGIT": ((0x30, 0x39),),
    "SPACE": ((0x09, 0x0D), (0x20, 0x20)),
    "WORD": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
}
_UNICODE_PATTERNS = {"DIGIT": r"\d+", "SPACE": r"\s+", "WORD": r"\w+"}

_all_chars: str | None = None


def all_characters() -> str:
    """A string of every code point except the surrogates, in order (built once, cached).

    Position ``p`` holds code point ``p`` below U+D800 and ``p + 0x800`` above.
    """
    global _all_chars
    if _all_chars is None:
        try:
            import numpy as np

            codes = np.concatenate(
                [
                    np.arange(SURROGATE_LO, dtype="<u4"),
                    np.arange(SURROGATE_HI + 1, MAX_CODE_POINT + 1, dtype="<u4"),
                ]
            )
            _all_chars = codes.tobytes().decode("utf-32-le")
        except ImportError:  # pragma: no cover - numpy is a dependency of logitgate
            _all_chars = "".join(map(chr, range(SURROGATE_LO))) + "".join(
                map(chr, range(SURROGATE_HI + 1, MAX_CODE_POINT + 1))
            )
    return _all_chars


def _position_to_code_point(p: int) -> int:
    return p if p < SURROGATE_LO else p + (SURROGATE_HI - SURROGATE_LO + 1)


def ranges_matching(pattern: str, flags: int = 0) -> Ranges:
    """The characters ``re`` matches with ``pattern`` (a single-character construct followed by
    ``+``), found by scanning :func:`all_characters`."""
    text = all_characters()
    return normalize(
        (_position_to_code_point(m.start()), _position_to_code_point(m.end() - 1))
        for m in re.finditer(pattern, text, flags)
    )


@cache
def category(name: str, ascii: bool = False) -> Ranges:
    """The set of ``\\d`` (``"DIGIT"``), ``\\s`` (``"SPACE"``), ``\\w`` (``"WORD"``) or of their
    negations (``"NOT_DIGIT"``, ...), Unicode by default, ASCII with ``ascii=True``."""
    if name.startswith("NOT_"):
        return complement(category(name[4:], ascii))
    if ascii:
        return _ASCII_CATEGORIES[name]
    # Runs of matching characters; the pattern is a single-character class repeated. The scan
    # costs tens of ms, so its result is kept on disk per Python and Unicode database version.
    rows = cached_json("unicode", _table_file(name), lambda: ranges_matching(_UNICODE_PATTERNS[name]))
    return tuple((int(lo), int(hi)) for lo, hi in rows)


def _table_file(name: str) -> str:
    """File name of a persisted table: ``re``'s behaviour depends on these versions."""
    return f"py{sys.version_info[0]}.{sys.version_info[1]}-ucd{unicodedata.unidata_version}-{name}.json"


def digit(ascii: bool = False) -> Ranges:
    """``\\d``: Unicode decimal digits (``[0-9]`` with ``ascii``)."""
    return category("DIGIT", ascii)


def space(ascii: bool = False) -> Ranges:
    """``\\s``: Unicode whitespace (``[ \\t\\n\\r\\f\\v]`` with ``ascii``)."""
    return category("SPACE", ascii)


def word(ascii: bool = False) -> Ranges:
    """``\\w``: Unicode alphanumerics and ``_`` (``[a-zA-Z0-9_]`` with ``ascii``)."""
    return category("WORD", ascii)


# ---------------------------------------------------------------------------------------------
# Case folding
# ---------------------------------------------------------------------------------------------


def _sre_functions() -> tuple[Callable[[int], int], Callable[[int], bool]]:
    """(lower, iscased) as ``re`` uses them for Unicode patterns."""
    try:
        sre = importlib.import_module("_sre")
        return sre.unicode_tolower, sre.unicode_iscased
    except (ImportError, AttributeError):  # pragma: no cover - non-CPython fallback

        def lower(c: int) -> int:
            return ord(chr(c).lower()[0])

        def iscased(c: int) -> bool:
            s = chr(c)
            return ord(s.lower()[0]) != c or ord(s.upper()[0]) != c

        return lower, iscased


def _extra_cases() -> dict[int, tuple[int, ...]]:
    """The extra equivalences ``re`` adds on top of ``lower`` (``'s'`` ~ ``'ſ'``, ...)."""
    for module, name in (("re._casefix", "_EXTRA_CASES"), ("sre_compile", "_ignorecase_fixes")):
        try:  # Python 3.11+, then 3.10 (newer versions fold everything through lower())
            return dict(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return {}


def _simple_upper(c: int) -> int:
    """The uppercase ``re``'s engine uses (the first character of the full mapping)."""
    return ord(chr(c).upper()[0])


class _CaseTable:
    """How one flavour of ``re`` (Unicode or ASCII) folds case."""

    def __init__(self, ascii: bool) -> None:
        self.ascii = ascii
        if ascii:
            self.lower_map = {c: c + 32 for c in range(0x41, 0x5B)}
            self.cased = tuple(range(0x41, 0x5B)) + tuple(range(0x61, 0x7B))
            self.fixes: dict[int, tuple[int, ...]] = {}
        else:
            lower, iscased = _sre_functions()

            def scan() -> list[list[int]]:
                # [c, lower(c)] for every cased c (lower(c) != c implies that c is cased)
                return [[c, lower(c)] for c in range(MAX_CODE_POINT + 1) if iscased(c)]

            pairs = cached_json("unicode", _table_file("CASED"), scan)
            self.cased = tuple(int(c) for c, _ in pairs)
            self.lower_map = {int(c): int(lc) for c, lc in pairs if lc != c}
            self.fixes = _extra_cases()
        self.cased_set = frozenset(self.cased)
        self.changed = tuple(sorted(self.lower_map))
        inverse: dict[int, list[int]] = {}
        for c, lc in self.lower_map.items():
            inverse.setdefault(lc, []).append(c)
        self.inverse = inverse
        self.inverse_keys = tuple(sorted(inverse))
        self._upper_pairs: list[tuple[int, int]] | None = None

    def lower(self, c: int) -> int:
        return self.lower_map.get(c, c)

    def is_cased(self, c: int) -> bool:
        return c in self.cased_set

    def any_cased(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_left(self.cased, lo)
        return i < len(self.cased) and self.cased[i] <= hi

    def targets_of_literal(self, c: int) -> list[int]:
        """The lowered codes a case-insensitive literal accepts."""
        lc = self.lower(c)
        return [lc, *self.fixes.get(lc, ())]

    def lower_image(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``{lower(x) for x in [lo, hi]}`` plus their extra equivalents, as pairs."""
        out: list[tuple[int, int]] = [(lo, hi)]  # unchanged members (changed ones removed below)
        i = bisect.bisect_left(self.changed, lo)
        j = bisect.bisect_right(self.changed, hi)
        removed = self.changed[i:j]
        if removed:
            out = list(difference(normalize(out), from_code_points(removed)))
            out.extend((self.lower_map[c], self.lower_map[c]) for c in removed)
        if self.fixes:
            image = normalize(out)
            for k, extra in self.fixes.items():
                if contains(image, k):
                    out.extend((e, e) for e in extra)
        return out

    def upper_preimage(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Codes ``v`` whose uppercase is in ``[lo, hi]``."""
        if self._upper_pairs is None:
            pairs = []
            # uppercase differs only for cased codes (in re's Unicode sense, whatever the mode)
            for v in _case_table(False).cased:
                u = _simple_upper(v)
                if u != v:
                    pairs.append((u, v))
            pairs.sort()
            self._upper_pairs = pairs
        pairs = self._upper_pairs
        i = bisect.bisect_left(pairs, (lo, -1))
        out = []
        while i < len(pairs) and pairs[i][0] <= hi:
            out.append((pairs[i][1], pairs[i][1]))
            i += 1
        return out

    def pre_lower(self, targets: Ranges) -> Ranges:
        """``{ch : lower(ch) in targets}`` for a normalized set of targets."""
        remove: list[int] = []
        add: list[int] = []
        changed = self.changed
        for lo, hi in targets:
            i = bisect.bisect_left(changed, lo)
            j = bisect.bisect_right(changed, hi)
            for c in changed[i:j]:
                if not contains(targets, self.lower_map[c]):
                    remove.append(c)
            keys = self.inverse_keys
            i = bisect.bisect_left(keys, lo)
            j = bisect.bisect_right(keys, hi)
            for t in keys[i:j]:
                add.extend(self.inverse[t])
        result = targets
        if remove:
            result = difference(result, from_code_points(remove))
        if add:
            result = union(result, from_code_points(add))
        return result


_case_tables: dict[bool, _CaseTable] = {}


def _case_table(ascii: bool) -> _CaseTable:
    table = _case_tables.get(ascii)
    if table is None:
        table = _case_tables[ascii] = _CaseTable(ascii)
    return table


@lru_cache(maxsize=4096)
def ignorecase_literal(code_point: int, ascii: bool = False) -> Ranges:
    """The characters a literal matches under IGNORECASE (``ascii``: with ``re.ASCII`` too)."""
    table = _case_table(ascii)
    if not table.is_cased(code_point):
        return normalize([(code_point, code_point)])
    return table.pre_lower(from_code_points(table.targets_of_literal(code_point)))


def case_closure(ranges: Ranges, ascii: bool = False) -> Ranges:
    """The union of the case-equivalence classes (per ``re``) of the members of ``ranges``."""
    table = _case_table(ascii)
    targets: list[tuple[int, int]] = []
    for lo, hi in ranges:
        targets.extend(table.lower_image(lo, hi))
    return union(ranges, table.pre_lower(normalize(targets)))


def charset_ranges(
    items: Sequence[ClassItem], ignorecase: bool = False, ascii: bool = False
) -> Ranges:
    """The characters a ``re`` character class matches.

    ``items`` are ``("LITERAL", code_point)``, ``("RANGE", (lo, hi))`` and ``("CATEGORY", name)``
    (``name`` as in :func:`category`), optionally preceded by ``("NEGATE", None)``. This follows
    the way ``re`` compiles a class, including under IGNORECASE (see the module docstring).
    """
    items = tuple(items)
    negate = bool(items) and items[0][0] == "NEGATE"
    body = items[1:] if negate else items
    if ignorecase:
        result = _ignorecase_charset(body, ascii)
    else:
        result = _plain_charset(body, ascii)
    return complement(result) if negate else result


def _item_ranges(op: str, av: Any, ascii: bool) -> Ranges:
    if op == "LITERAL":
        return normalize([(av, av)])
    if op == "RANGE":
        return normalize([av])
    if op == "CATEGORY":
        return category(av, ascii)
    raise ValueError(f"unknown class item {op!r}")


@lru_cache(maxsize=1024)
def _plain_charset(body: tuple[ClassItem, ...], ascii: bool) -> Ranges:
    if len(body) == 1:
        return _item_ranges(body[0][0], body[0][1], ascii)
    categories = [av for op, av in body if op == "CATEGORY"]
    if len(categories) == 1:  # one class such as \w plus a few characters: insert them into it
        extra = normalize([(av, av) if op == "LITERAL" else av for op, av in body if op != "CATEGORY"])
        return add_ranges(category(categories[0], ascii), extra)
    pairs: list[tuple[int, int]] = []
    for op, av in body:
        if op == "CATEGORY":
            pairs.extend(category(av, ascii))
        elif op == "LITERAL":
            pairs.append((av, av))
        else:
            pairs.append(av)
    return normalize(pairs)


@lru_cache(maxsize=1024)
def _ignorecase_charset(body: tuple[ClassItem, ...], ascii: bool) -> Ranges:
    """Emulates ``re``'s ``_optimize_charset`` + ``IN_UNI_IGNORE``/``IN_IGNORE``: the class is a
    set of lowered *targets* and a character matches when its lowercase is a target. Non-BMP
    literals stay unlowered targets, non-BMP ranges also accept codes whose uppercase is inside,
    and a class without cased members is matched as written."""
    table = _case_table(ascii)
    targets: list[tuple[int, int]] = []
    has_cased = False
    for op, av in body:
        if op == "LITERAL":
            c: int = av
            if table.lower(c) <= _BMP_MAX:
                targets.extend((t, t) for t in table.targets_of_literal(c))
                has_cased = has_cased or table.is_cased(c)
            else:
                targets.append((c, c))
                has_cased = True
        elif op == "RANGE":
            lo: int = av[0]
            hi: int = av[1]
            if lo <= _BMP_MAX:
                top = min(hi, _BMP_MAX)
                targets.extend(table.lower_image(lo, top))
                has_cased = has_cased or table.any_cased(lo, top)
            if hi > _BMP_MAX:
                has_cased = True
                targets.append((lo, hi))
                targets.extend(table.upper_preimage(lo, hi))
        else:  # CATEGORY: tested on the lowered character
            targets.extend(category(av, ascii))
    if not has_cased:
        return _plain_charset(body, ascii)
    return table.pre_lower(normalize(targets))
