"""JSON string texts from constraints on their decoded content.

A JSON Schema constrains the *decoded* value of a string (its code points); the model writes the
*text* between the quotes, where a character may appear raw or escaped. :func:`encode_content`
turns a tree over decoded content into the tree of every JSON text that decodes to a string it
matches, allowing every valid encoding (RFC 8259):

* a raw character, except ``"``, ``\\`` and the controls U+0000..U+001F, which must be escaped;
* a two-character escape: ``\\"`` ``\\\\`` ``\\/`` ``\\b`` ``\\f`` ``\\n`` ``\\r`` ``\\t``;
* ``\\u`` and four hex digits (either case, per digit) for a character of the BMP outside
  printable ASCII (U+0020..U+007E): controls, DEL and non-ASCII characters, as ``json.dumps``
  writes them with ``ensure_ascii=True``. No serializer escapes a printable ASCII character this
  way, and allowing it would multiply the size of every constrained string's automaton, so
  ``"\\u0041"`` is not accepted for ``"A"``;
* a surrogate pair ``\\uD8xx\\uDCxx`` (high U+D800..U+DBFF, low U+DC00..U+DFFF) for a character
  above U+FFFF.

Strings are sequences of Unicode scalar values: a lone surrogate escape (``"\\ud800"``, which some
JSON parsers accept) is never produced, nor is a pair in the wrong order. A
:class:`~logitgate.regex.ast.Automaton` node is encoded into an automaton that reads the escapes
through extra states (:func:`encode_automaton`).
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable
from functools import cache, lru_cache

from ..regex import charsets
from ..regex.ast import Alt, Automaton, CharClass, Concat, Empty, Group, Node, Repeat, TableAutomaton

__all__ = [
    "any_char",
    "any_string_node",
    "encode_automaton",
    "encode_char",
    "encode_content",
    "length_node",
    "literal_string_node",
    "other_keys_node",
    "string_node",
]

Ranges = charsets.Ranges
_Segments = tuple[tuple[int, int, int], ...]
"""Sorted disjoint ``(lo, hi, dest)`` triples: values ``lo..hi`` lead to state ``dest``."""

_QUOTE = CharClass(((0x22, 0x22),))
_BACKSLASH = CharClass(((0x5C, 0x5C),))
_U = CharClass(((0x75, 0x75),))
_EMPTY = Empty()
_NOTHING = CharClass(())

_MUST_ESCAPE: Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_SHORT_ESCAPES: dict[int, int] = {
    0x22: ord('"'),
    0x5C: ord("\\"),
    0x2F: ord("/"),
    0x08: ord("b"),
    0x0C: ord("f"),
    0x0A: ord("n"),
    0x0D: ord("r"),
    0x09: ord("t"),
}
"""Decoded character -> the letter after the backslash."""

_BMP_MAX = 0xFFFF
_U_ESCAPABLE_BMP: Ranges = ((0x00, 0x1F), (0x7F, 0xD7FF), (0xE000, 0xFFFF))
"""Characters of the BMP that may be written ``\\uXXXX``: all but printable ASCII."""
_ASTRAL_MIN = 0x10000
_HIGH_MIN = 0xD800
_LOW_MIN = 0xDC00
_LOW_MAX = 0x3FF  # low surrogate offsets 0..0x3FF


def any_char() -> CharClass:
    """One code point, any (surrogates excluded)."""
    return CharClass(charsets.ANY)


# ---------------------------------------------------------------------------------------------
# Tree helpers
# ---------------------------------------------------------------------------------------------


def _cat(*items: Node) -> Node:
    """Concatenation, flattened, with Empty dropped (``_NOTHING`` if an item is ``_NOTHING``)."""
    flat: list[Node] = []
    for item in items:
        if isinstance(item, Concat):
            flat.extend(item.items)
        elif item == _NOTHING:
            return _NOTHING
        elif not isinstance(item, Empty):
            flat.append(item)
    if not flat:
        return _EMPTY
    return flat[0] if len(flat) == 1 else Concat(tuple(flat))


def _alt(items: Iterable[Node]) -> Node:
    """Alternation of the items that can match something (``_NOTHING`` if none can)."""
    flat: list[Node] = []
    for item in items:
        if isinstance(item, Alt):
            flat.extend(item.items)
        elif not (isinstance(item, CharClass) and not item.ranges):
            flat.append(item)
    if not flat:
        return _NOTHING
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


@cache
def _hex_digit_class(digits: frozenset[int]) -> CharClass:
    """One hex digit whose value is in ``digits``, in either case."""
    pairs: list[tuple[int, int]] = []
    for d in digits:
        if d < 10:
            pairs.append((0x30 + d, 0x30 + d))
        else:
            pairs += [(0x61 + d - 10, 0x61 + d - 10), (0x41 + d - 10, 0x41 + d - 10)]
    return CharClass(charsets.normalize(pairs))


_ALL_DIGITS = frozenset(range(16))


def _clip(values: Ranges, lo: int, hi: int) -> Ranges:
    """``values`` (sorted disjoint pairs) within ``lo..hi``, shifted down by ``lo``."""
    out = []
    for a, b in values:
        a, b = max(a, lo), min(b, hi)
        if a <= b:
            out.append((a - lo, b - lo))
    return tuple(out)


@lru_cache(maxsize=65536)
def _hex_tree(values: Ranges, width: int) -> Node:
    """``width`` hex digits (either case) whose value is in ``values`` (sorted disjoint pairs of
    integers, surrogate values allowed: this is arithmetic, not characters). Leading digits with
    the same set of continuations share one branch, so the tree stays proportional to the number
    of range boundaries."""
    if not values:
        return _NOTHING
    if width == 0:
        return _EMPTY
    step = 16 ** (width - 1)
    if values == ((0, 16 * step - 1),):
        return _cat(*(_hex_digit_class(_ALL_DIGITS),) * width)
    branches: dict[Ranges, set[int]] = {}
    for d in range(values[0][0] // step, values[-1][1] // step + 1):
        rest = _clip(values, d * step, d * step + step - 1)
        if rest:
            branches.setdefault(rest, set()).add(d)
    return _alt(
        _cat(_hex_digit_class(frozenset(digits)), _hex_tree(rest, width - 1))
        for rest, digits in branches.items()
    )


def _surrogate_pairs(segments: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, _Segments]]:
    """Astral ``(lo, hi, tag)`` segments (sorted, disjoint) as surrogate pairs: sorted
    ``(high_lo, high_hi, lows)`` where every high surrogate offset (from U+D800) in
    ``high_lo..high_hi`` takes exactly the low offsets (from U+DC00) ``lows``, as ``(lo, hi, tag)``
    triples. Neighbouring high offsets with the same lows are merged."""
    pieces: dict[int, list[tuple[int, int, int]]] = {}  # high offset -> its lows, partial blocks
    runs: list[tuple[int, int, _Segments]] = []  # blocks fully inside one segment
    for lo, hi, tag in segments:
        lo, hi = max(lo, _ASTRAL_MIN) - _ASTRAL_MIN, hi - _ASTRAL_MIN
        if lo > hi:
            continue
        h_lo, l_lo = divmod(lo, _LOW_MAX + 1)
        h_hi, l_hi = divmod(hi, _LOW_MAX + 1)
        if h_lo == h_hi:
            pieces.setdefault(h_lo, []).append((l_lo, l_hi, tag))
            continue
        pieces.setdefault(h_lo, []).append((l_lo, _LOW_MAX, tag))
        pieces.setdefault(h_hi, []).append((0, l_hi, tag))
        if h_hi > h_lo + 1:
            runs.append((h_lo + 1, h_hi - 1, ((0, _LOW_MAX, tag),)))
    out: list[tuple[int, int, _Segments]] = []
    for h_lo, h_hi, lows in sorted(runs + [(h, h, tuple(ls)) for h, ls in pieces.items()]):
        if out and out[-1][2] == lows and out[-1][1] + 1 == h_lo:
            out[-1] = (out[-1][0], h_hi, lows)
        else:
            out.append((h_lo, h_hi, lows))
    return out


def _shift(pairs: Iterable[tuple[int, int]], by: int) -> Ranges:
    return tuple((lo + by, hi + by) for lo, hi in pairs)


# ---------------------------------------------------------------------------------------------
# Encoding trees
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def encode_char(ranges: Ranges) -> Node:
    """Every JSON text of one character of ``ranges`` (a CharClass's ranges): raw, short escape,
    ``\\uXXXX`` or surrogate pair. Escapes share the backslash (and ``u``) prefix."""
    raw = CharClass(charsets.difference(ranges, _MUST_ESCAPE))
    letters = charsets.from_code_points(
        letter for cp, letter in _SHORT_ESCAPES.items() if charsets.contains(ranges, cp)
    )
    bmp = charsets.intersection(ranges, _U_ESCAPABLE_BMP)
    unicode_escapes = [_hex_tree(bmp, 4)]
    highs_by_lows: dict[_Segments, list[tuple[int, int]]] = {}
    for h_lo, h_hi, lows in _surrogate_pairs((lo, hi, 0) for lo, hi in ranges):
        highs_by_lows.setdefault(lows, []).append((h_lo, h_hi))
    for lows, highs in highs_by_lows.items():
        unicode_escapes.append(
            _cat(
                _hex_tree(_shift(highs, _HIGH_MIN), 4),
                _BACKSLASH,
                _U,
                _hex_tree(_shift(((lo, hi) for lo, hi, _ in lows), _LOW_MIN), 4),
            )
        )
    escaped = _alt([CharClass(letters), _cat(_U, _alt(unicode_escapes))])
    return _alt([raw, _cat(_BACKSLASH, escaped)])


def encode_content(node: Node) -> Node:
    """The JSON texts (between the quotes) of the strings ``node`` matches, every encoding
    allowed. Concat/Alt/Repeat/Group/Empty keep their shape; each CharClass becomes
    :func:`encode_char`; an Automaton becomes :func:`encode_automaton`."""
    if isinstance(node, CharClass):
        return encode_char(node.ranges)
    if isinstance(node, Concat):
        return Concat(tuple(encode_content(item) for item in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(encode_content(item) for item in node.items))
    if isinstance(node, Repeat):
        return Repeat(encode_content(node.item), node.min, node.max)
    if isinstance(node, Group):
        return Group(encode_content(node.item), node.index, node.name)
    if isinstance(node, Empty):
        return node
    if isinstance(node, Automaton):
        return encode_automaton(node)
    raise TypeError(f"not a regex syntax node: {node!r}")


# ---------------------------------------------------------------------------------------------
# Encoding automata
# ---------------------------------------------------------------------------------------------


class _AutomatonEncoder:
    """Builds the encoded automaton: the original states keep their numbers, escapes are read
    through new states. Hex-digit tries are shared between states (memoized by what they lead
    to), so the automaton stays proportional to the number of range boundaries."""

    def __init__(self, node: Automaton) -> None:
        self.accepting = list(node.accepting)
        self.edges: list[list[tuple[Ranges, int]]] = [[] for _ in node.edges]
        self.tries: dict[tuple[_Segments, int], int] = {}
        self.pairs: dict[_Segments, int] = {}

    def new_state(self, edges: list[tuple[Ranges, int]]) -> int:
        self.accepting.append(False)
        self.edges.append(edges)
        return len(self.edges) - 1

    def hex_trie(self, segments: _Segments, width: int) -> int:
        """The state reading ``width`` hex digits of a value ``v``, then in ``dest(v)``."""
        if width == 0:
            return segments[0][2]
        key = (segments, width)
        state = self.tries.get(key)
        if state is None:
            step = 16 ** (width - 1)
            children: dict[int, set[int]] = {}
            for d in range(segments[0][0] // step, segments[-1][1] // step + 1):
                base = d * step
                rest = tuple(
                    (max(lo, base) - base, min(hi, base + step - 1) - base, dest)
                    for lo, hi, dest in segments
                    if lo < base + step and hi >= base
                )
                if rest:
                    children.setdefault(self.hex_trie(rest, width - 1), set()).add(d)
            state = self.tries[key] = self.new_state(
                [(_hex_digit_class(frozenset(ds)).ranges, child) for child, ds in children.items()]
            )
        return state

    def pair(self, lows: _Segments) -> int:
        """The state after a high surrogate escape: ``\\u`` and the low surrogate's digits."""
        state = self.pairs.get(lows)
        if state is None:
            digits = self.hex_trie(tuple((lo + _LOW_MIN, hi + _LOW_MIN, t) for lo, hi, t in lows), 4)
            u = self.new_state([(_U.ranges, digits)])
            state = self.pairs[lows] = self.new_state([(_BACKSLASH.ranges, u)])
        return state

    def encode_state(self, state: int, moves: tuple[tuple[Ranges, int], ...]) -> None:
        segments = sorted((lo, hi, t) for ranges, t in moves for lo, hi in ranges)
        starts = [lo for lo, _, _ in segments]

        def target(cp: int) -> int | None:
            i = bisect.bisect_right(starts, cp) - 1
            return segments[i][2] if i >= 0 and segments[i][1] >= cp else None

        out = self.edges[state]
        for ranges, t in moves:
            raw = charsets.difference(ranges, _MUST_ESCAPE)
            if raw:
                out.append((raw, t))
        after_backslash: dict[int, list[tuple[int, int]]] = {}
        for cp, letter in _SHORT_ESCAPES.items():
            t = target(cp)
            if t is not None:
                after_backslash.setdefault(t, []).append((letter, letter))
        values = [(max(lo, a), min(hi, b), t) for lo, hi, t in segments for a, b in _U_ESCAPABLE_BMP
                  if max(lo, a) <= min(hi, b)]
        values += [
            (h_lo + _HIGH_MIN, h_hi + _HIGH_MIN, self.pair(lows))
            for h_lo, h_hi, lows in _surrogate_pairs(s for s in segments if s[1] >= _ASTRAL_MIN)
        ]
        escape_edges = [(charsets.normalize(ls), t) for t, ls in after_backslash.items()]
        if values:
            escape_edges.append((_U.ranges, self.hex_trie(tuple(sorted(values)), 4)))
        if escape_edges:
            out.append((_BACKSLASH.ranges, self.new_state(escape_edges)))

    def result(self, start: int) -> Automaton:
        return Automaton(
            start,
            tuple(self.accepting),
            tuple(tuple(edges) for edges in self.edges),
        )


@lru_cache(maxsize=256)
def encode_automaton(node: Automaton) -> Automaton:
    """The automaton of the JSON texts of the strings ``node`` accepts (every encoding allowed).

    Deterministic and live like its input (each state's raw, short-escape and hex-digit moves
    are disjoint, and every new state leads to an original one), but not minimal."""
    encoder = _AutomatonEncoder(node)
    for state, moves in enumerate(node.edges):
        encoder.encode_state(state, moves)
    return encoder.result(node.start)


# ---------------------------------------------------------------------------------------------
# Whole strings
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def string_node(content: Node) -> Node:
    """A JSON string token: ``"``, the encoded ``content``, ``"`` (cached: formats, key names and
    patterns recur across schemas)."""
    return _cat(_QUOTE, encode_content(content), _QUOTE)


@cache
def any_string_node() -> Node:
    """Every JSON string (any sequence of code points, every encoding)."""
    return string_node(Repeat(any_char(), 0, None))


@lru_cache(maxsize=8192)
def literal_string_node(value: str) -> Node:
    """The JSON texts that decode to exactly ``value`` (every encoding)."""
    cps = [ord(ch) for ch in value]
    if all(cp in _PLAIN_KEY_SET for cp in cps):  # one spelling: the characters themselves
        return Concat((_QUOTE, *(CharClass(((cp, cp),)) for cp in cps), _QUOTE))
    if any(0xD800 <= cp <= 0xDFFF for cp in cps):
        raise ValueError(f"{value!r} contains a lone surrogate: not a sequence of scalar values")
    return string_node(_cat(*(CharClass(((cp, cp),)) for cp in cps)))


def length_node(min_len: int, max_len: int | None) -> Node:
    """Content of ``min_len`` to ``max_len`` code points (``None``: unbounded), any characters;
    matches nothing when ``max_len < min_len``. Wrap it in :func:`string_node`."""
    if min_len < 0 or (max_len is not None and max_len < 0):
        raise ValueError(f"negative string length bound: {min_len}..{max_len}")
    if max_len is not None and max_len < min_len:
        return _NOTHING
    if max_len == 0:
        return _EMPTY
    if min_len == max_len == 1:
        return any_char()
    return Repeat(any_char(), min_len, max_len)


def counted_string_node(min_len: int, max_len: int | None, opening: bool = True, closing: bool = True) -> Node:
    """The JSON texts of the strings of ``min_len`` to ``max_len`` code points (``None``:
    unbounded), every encoding, with the opening and/or closing quote (without them: a piece of
    a string's text, see ``Translator.length_string``). The same language as
    ``string_node(length_node(...))`` built directly as a :class:`TableAutomaton`: copies of the
    string body's states, one per count, rather than a position automaton of ``max_len`` copies
    of a character's encodings (about 0.15 ms per count)."""
    if min_len < 0 or (max_len is not None and max_len < min_len):
        raise ValueError(f"bad string length bounds: {min_len}..{max_len}")
    args = (min_len, max_len, opening, closing)
    # without the closing quote, a literal after it would need a subset construction: the DFA
    # builder expands the character table instead
    return TableAutomaton(_counted_chars, args, _counted_bytes if closing else None)


def string_pieces(k: int) -> tuple[Node, Node]:
    """The first and the middle pieces of a string lexed in pieces of ``k`` code points (see
    ``Translator.length_string``): ``"`` and exactly ``k`` code points, then exactly ``k``."""
    return counted_string_node(k, k, True, False), counted_string_node(k, k, False, False)


def string_end(min_len: int, max_len: int) -> Node:
    """The last piece of a string lexed in pieces: ``min_len`` to ``max_len`` code points and
    the closing quote."""
    return counted_string_node(min_len, max_len, False, True)


def _counted_table(template, body: int, end: int, quote: int, min_len: int, max_len: int | None,
                   opening: bool, closing: bool) -> tuple:
    """``(table, accepting)`` of :func:`counted_string_node` from a DFA of any JSON string
    (``template``: start 0, ``body`` the state between characters, ``end`` after the closing
    quote, ``quote`` its column). Every path from ``body`` back to it reads one character's
    encoding (a minimal DFA: after a whole character the future is the body's), through the other
    states (inside a multi-byte character or an escape). Count ``i`` has a copy of the body and
    of those states; a move back to the body goes to the next count's. The last count of a bounded
    range keeps its body only (a character started there could not end); an unbounded range's
    last count (``min_len``) moves back to itself. Every state is live."""
    import numpy as np

    n_t, n_cols = template.shape
    mids = [q for q in range(n_t) if q not in (0, body, end)]
    size = 1 + len(mids)
    local = np.full(n_t + 1, -1, np.int64)  # index -1 (no move) maps to -1
    local[body] = 0
    local[mids] = np.arange(1, size)
    sub = template[[body] + mids]
    to_mid = local[sub] > 0
    to_body = sub == body
    to_end = sub == end
    counts = (max_len if max_len is not None else min_len) + 1
    off = 1 if opening else 0
    last_base = off + (counts - 1) * size
    n = last_base + (1 if max_len is not None else size) + (1 if closing else 0)
    end_id = n - 1 if closing else -1
    table = np.full((n, n_cols), -1, np.int32)
    for i in range(counts):
        base = off + i * size
        rows = np.full((size, n_cols), -1, np.int32)
        last = i == counts - 1
        if max_len is not None and last:  # the body only, which moves on the closing quote alone
            if closing and i >= min_len:
                table[base][to_end[0]] = end_id
            break
        rows[to_mid] = base + local[sub[to_mid]]
        rows[to_body] = base if last else base + size
        if closing and i >= min_len:
            rows[to_end] = end_id
        table[base:base + size] = rows
    if opening:
        table[0, quote] = off
    accepting = np.zeros(n, np.bool_)
    if closing:
        accepting[end_id] = True
    else:
        accepting[[off + i * size for i in range(min_len, counts)]] = True
    return table, accepting


def _counted_chars(min_len: int, max_len: int | None, opening: bool, closing: bool) -> tuple:
    """``TableAutomaton.chars`` of :func:`counted_string_node` (minimised)."""
    import numpy as np

    from ..automata.dfa import _minimize_chars

    template, _, atoms, quote_atom, _, body = _any_string_template()
    end = int(template[body, quote_atom])
    table, accepting = _counted_table(template, body, end, quote_atom, min_len, max_len, opening, closing)
    minimal = _minimize_chars(table, np.ascontiguousarray(accepting[:, None]))
    assert minimal is not None
    table, accepting_min = minimal
    return table, np.ascontiguousarray(accepting_min[:, 0]), atoms


def _counted_bytes(min_len: int, max_len: int | None, opening: bool, closing: bool, tail: bytes) -> tuple:
    """``TableAutomaton.byte_build`` of :func:`counted_string_node` with its closing quote,
    followed by ``tail`` (chained from the end state, which has no moves)."""
    import numpy as np

    assert closing
    template, template_column, body, end = _any_string_bytes()
    quote = int(template_column[0x22])
    table, accepting = _counted_table(template, body, end, quote, min_len, max_len, opening, closing)
    if not tail:
        return table, template_column, accepting
    special = sorted(set(tail))
    byte_column = template_column.copy()
    c0 = table.shape[1]
    byte_column[special] = np.arange(c0, c0 + len(special), dtype=np.int32)
    n = table.shape[0]
    ext = np.full((n + len(tail), c0 + len(special)), -1, np.int32)
    ext[:n, :c0] = table
    ext[:n, c0:] = table[:, template_column[special]]
    col = {b: c0 + i for i, b in enumerate(special)}
    chain = [n - 1] + list(range(n, n + len(tail)))
    ext[chain[:-1], [col[b] for b in tail]] = chain[1:]
    acc = np.zeros(ext.shape[0], np.bool_)
    acc[-1] = True
    return ext, byte_column, acc


# ---------------------------------------------------------------------------------------------
# Keys other than a set of names
# ---------------------------------------------------------------------------------------------

_PLAIN_KEY_CHARS: Ranges = ((0x20, 0x21), (0x23, 0x2E), (0x30, 0x5B), (0x5D, 0x7E))
"""Printable ASCII except ``"``, ``/`` and ``\\``: the characters that have no escaped form."""
_PLAIN_KEY_SET = frozenset(cp for lo, hi in _PLAIN_KEY_CHARS for cp in range(lo, hi + 1))


def other_keys_node(names: Iterable[str]) -> Node | None:
    """The JSON string texts (quotes included, every encoding) of the strings other than
    ``names``: ``difference(any_string_node(), literal_string_node(n) for n in names)``, built
    directly as a :class:`~logitgate.regex.ast.TableAutomaton` (an object's keys beside its named
    properties; the boolean difference costs about a millisecond per object). None when a name
    has a character outside printable ASCII or one of ``"``, ``/``, ``\\``: these have escaped
    forms, which the direct construction does not follow (use the difference)."""
    key = tuple(sorted(set(names)))
    if any(ord(ch) not in _PLAIN_KEY_SET for name in key for ch in name):
        return None
    return TableAutomaton(_other_keys_dfa, (key,), _other_keys_bytes)


@cache
def _any_string_template() -> tuple:
    """The minimal character-level DFA of :func:`any_string_node` refined to atoms that give
    each plain key character its own column: ``(table, accepting, atoms, quote_atom, char_atom,
    body)``, ``char_atom[cp]`` the atom of plain character ``cp``, ``body`` the state inside the
    quotes (the start is state 0)."""
    import numpy as np

    from ..automata.boolean import intersect
    from ..automata.nfa import AtomPartition

    node = intersect(any_string_node())
    assert isinstance(node, Automaton) and node.chars is not None
    table, accepting, atoms = node.chars
    classes = [atoms.ranges([a]) for a in range(atoms.n_atoms)]
    classes += [((cp, cp),) for cp in sorted(_PLAIN_KEY_SET | {0x22})]
    fine = AtomPartition(classes)
    # each fine atom lies inside one template atom: the one holding its first code point
    first_interval = np.full(fine.n_atoms, -1, np.int64)
    for i in range(len(fine.interval_atom) - 1, -1, -1):
        a = fine.interval_atom[i]
        if a >= 0:
            first_interval[a] = i
    first_cp = fine.starts[first_interval]
    coarse = atoms.interval_atom[np.searchsorted(atoms.starts, first_cp, side="right") - 1]
    assert (coarse >= 0).all()
    refined = np.ascontiguousarray(table[:, coarse])

    def atom_of(cp: int) -> int:
        return int(fine.interval_atom[np.searchsorted(fine.starts, cp, side="right") - 1])

    quote_atom = atom_of(0x22)
    char_atom = {cp: atom_of(cp) for cp in _PLAIN_KEY_SET}
    body = int(refined[0, quote_atom])
    assert not accepting[0] and body >= 0
    return refined, np.asarray(accepting, np.bool_), fine, quote_atom, char_atom, body


def _key_trie(names: tuple[str, ...]) -> tuple[list[dict[int, int]], list[int]]:
    """The trie of ``names`` over code points: ``(children, ends)``, node 0 the root,
    ``children[q]`` code point -> child, ``ends[k]`` the node where ``names[k]`` ends."""
    children: list[dict[int, int]] = [{}]
    ends: list[int] = []
    for name in names:
        node = 0
        for ch in name:
            cp = ord(ch)
            nxt = children[node].get(cp)
            if nxt is None:
                nxt = children[node][cp] = len(children)
                children.append({})
            node = nxt
        ends.append(node)
    return children, ends


def _put_trie(table, children: list[dict[int, int]], m: int, column: dict[int, int]) -> None:
    """Write the trie's moves into ``table``, its node ``q`` as row ``m + q`` (a move on ``cp``
    in column ``column[cp]``)."""
    rows: list[int] = []
    cols: list[int] = []
    targets: list[int] = []
    for q, kids in enumerate(children):
        for cp, child in kids.items():
            rows.append(m + q)
            cols.append(column[cp])
            targets.append(m + child)
    if rows:
        table[rows, cols] = targets


def _other_keys_dfa(names: tuple[str, ...]) -> tuple:
    """The ``TableAutomaton.chars`` of :func:`other_keys_node`: the DFA of any JSON string with
    the trie of ``names`` in front of its body state (a trie state moves on a name's next
    character to the child, on anything else, escapes included, as the body does; its closing
    quote is refused where a name ends), then minimised."""
    import numpy as np

    from ..automata.dfa import _minimize_chars

    template, template_accepting, atoms, quote_atom, char_atom, body = _any_string_template()
    children, ends = _key_trie(names)
    m = template.shape[0]
    table = np.empty((m + len(children), template.shape[1]), np.int32)
    table[:m] = template
    table[m:] = template[body]
    table[0, quote_atom] = m  # the trie's root
    _put_trie(table, children, m, char_atom)
    table[[m + q for q in ends], quote_atom] = -1  # a name is not another key
    accepting = np.zeros((table.shape[0], 1), np.bool_)
    accepting[:m, 0] = template_accepting
    minimal = _minimize_chars(table, accepting)
    assert minimal is not None  # keys longer than every name remain
    table, accepting = minimal
    return table, np.ascontiguousarray(accepting[:, 0]), atoms


@cache
def _any_string_bytes() -> tuple:
    """The minimal byte DFA of :func:`any_string_node` as ``(columns, byte_column, body, end)``:
    the move of state ``q`` on byte ``b`` is ``columns[q, byte_column[b]]`` (start 0), ``body``
    the state inside the quotes, ``end`` the accepting state (after the closing quote, where
    nothing follows)."""
    import numpy as np

    from ..automata.dfa import regex_dfa

    dfa = regex_dfa(any_string_node())
    n = dfa.class_transitions.shape[0]
    order = [dfa.start] + [q for q in range(n) if q != dfa.start]  # the start first
    renumber = np.full(n + 1, -1, np.int32)
    renumber[order] = np.arange(n, dtype=np.int32)
    columns = np.ascontiguousarray(renumber[dfa.class_transitions[order]])
    byte_column = dfa.byte_classes.astype(np.int32)
    body = int(columns[0, byte_column[0x22]])
    ends = np.flatnonzero(dfa.accepting[order, 0])
    assert body > 0 and len(ends) == 1 and (columns[ends[0]] < 0).all()
    return columns, byte_column, body, int(ends[0])


def _other_keys_bytes(names: tuple[str, ...], tail: bytes) -> tuple:
    """``TableAutomaton.byte_build`` of :func:`other_keys_node`: the byte DFA of
    :func:`_other_keys_dfa`'s language followed by ``tail``, not minimised. Names are ASCII, so
    the trie's states share the body's multi-byte and escape states; each byte of a name or of
    ``tail`` gets a column of its own."""
    import numpy as np

    template, template_column, body, end = _any_string_bytes()
    children, name_ends = _key_trie(names)  # ASCII: code points are the bytes
    special = sorted({b for kids in children for b in kids} | set(tail) | {0x22})
    byte_column = template_column.copy()
    c0 = template.shape[1]
    byte_column[special] = np.arange(c0, c0 + len(special), dtype=np.int32)
    m = template.shape[0]
    n = m + len(children)
    table = np.empty((n + len(tail), c0 + len(special)), np.int32)
    table[:m, :c0] = template
    table[:m, c0:] = template[:, template_column[special]]
    table[m:n] = table[body]
    table[n:] = -1
    col = {b: c0 + i for i, b in enumerate(special)}
    quote = col[0x22]
    table[0, quote] = m  # the trie's root
    _put_trie(table, children, m, col)
    table[[m + q for q in name_ends], quote] = -1  # a name is not another key
    if tail:
        chain = [end] + list(range(n, n + len(tail)))
        table[chain[:-1], [col[b] for b in tail]] = chain[1:]
    accepting = np.zeros(table.shape[0], np.bool_)
    accepting[n + len(tail) - 1 if tail else end] = True
    return table, byte_column, accepting
