"""Custom recognizers (``Grammar.from_recognizer``) against independent oracles.

* Languages: the example recognizers of ``examples/recognizers.py`` against plain Python checks:
  ``WordList`` against set membership (and the set of prefixes), ``Luhn`` against the textbook
  Luhn function, ``Brackets`` against a stack checker, ``CharJSON`` against ``json.loads`` (plus
  its whitespace, depth and alphabet rules), ``Choices`` against the strings it should spell.
* Masks: at states along random valid walks, ``Matcher.allowed_token_ids()`` equals a brute-force
  mask over the whole vocabulary of both mistral-common tokenizers, computed without a trie: every
  token's bytes fed one by one through the recognizer's own ``byte_allowed``/``append`` (byte-level
  recognizers), decoded with the text so far and fed character by character through
  ``allowed_chars``/``add_char`` (the character parser), or matched against the set of prefixes of
  the language (the string recognizer).
* The matcher: rollback, fork and fresh matchers agree; ``find_jump_forward_bytes`` returns a
  forced continuation; a broken recognizer gives a ``RecognizerError`` naming the method.
"""
from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import random
import string
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import logitgate
from logitgate.recognizers import RecognizerError

ROOT = Path(__file__).resolve().parents[1]


def _load_example():
    name = "logitgate_example_recognizers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "recognizers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


ex = _load_example()
EOS = "eos"
HYP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def words() -> tuple[str, ...]:
    return tuple(ex.make_words())


@functools.cache
def word_list():
    return ex.WordList(words())


@functools.cache
def word_prefixes() -> frozenset[str]:
    return frozenset(w[:k] for w in words() for k in range(len(w) + 1))


def feed(rec, data: bytes):
    """The recognizer's state after ``data`` (byte level), or None where a byte is refused."""
    state = rec.initial()
    for b in data:
        if not rec.byte_allowed(state, b):
            return None
        state = rec.append(state, b)
    return state


def accepts(rec, data: bytes) -> bool:
    state = feed(rec, data)
    return state is not None and rec.special_allowed(state, EOS)


# ---------------------------------------------------------------------------------------------
# languages
# ---------------------------------------------------------------------------------------------
def test_make_words_is_deterministic_distinct_lowercase() -> None:
    ws = ex.make_words()
    assert len(ws) == 50_000 and len(set(ws)) == 50_000
    assert ws == sorted(ws)
    assert all(w and set(w) <= set(string.ascii_lowercase) for w in ws)
    assert ex.make_words() == ws
    assert ex.make_words(1000, seed=0) != ex.make_words(1000, seed=1)
    assert len(ex.make_words(10, seed=3)) == 10


def test_word_list_states_are_small_ints() -> None:
    rec = word_list()
    assert rec.n_words == 50_000
    state = feed(rec, words()[123].encode())
    assert type(state) is int and rec.special_allowed(state, EOS)


@HYP
@given(st.one_of(
    st.text(alphabet="abcdeilmnorstu", max_size=10),
    st.sampled_from(sorted(ex.make_words(2000, seed=0))),
    st.tuples(st.sampled_from(sorted(ex.make_words(2000, seed=0))), st.integers(0, 12), st.text("abz", max_size=2))
    .map(lambda t: t[0][: t[1]] + t[2]),
))
def test_word_list_is_set_membership(text: str) -> None:
    rec = word_list()
    data = text.encode()
    event(f"prefix: {text in word_prefixes()}, word: {text in set(words())}")
    assert (feed(rec, data) is not None) == (text in word_prefixes()), text
    assert accepts(rec, data) == (text in set(words())), text
    assert not rec.special_allowed(feed(rec, b""), EOS)


def test_word_list_utf8_and_byte_prefixes() -> None:
    vocab = ["né", "ne", "naïve", "日本", "日本語", "a"]
    rec = ex.WordList(vocab)
    encoded = {w.encode() for w in vocab}
    prefixes = {w[:k] for w in encoded for k in range(len(w) + 1)}
    # every byte string of up to 3 bytes over the bytes that occur, plus each word +/- a byte
    alphabet = sorted({b for w in encoded for b in w}) + [ord("z")]
    cases = {bytes(p) for n in range(4) for p in itertools.product(alphabet, repeat=n)}
    cases |= encoded | {w[:-1] for w in encoded} | {w + b"e" for w in encoded}
    for data in cases:
        assert (feed(rec, data) is not None) == (data in prefixes), data
        assert accepts(rec, data) == (data in encoded), data
    with pytest.raises(ValueError):
        ex.WordList([])
    with pytest.raises(ValueError):
        ex.WordList(["a", ""])


def luhn_oracle(number: str) -> bool:
    """Straight from the definition: double every second digit from the right, sum the digits."""
    total = 0
    for i, c in enumerate(reversed(number)):
        d = int(c)
        if i % 2 == 1:
            d *= 2
            d = d // 10 + d % 10
        total += d
    return total % 10 == 0


def luhn_expected(text: str, lo: int, hi: int) -> tuple[bool, bool]:
    """(may be fed, is in the language) for Luhn(lo, hi). A digit string can be completed while it
    is shorter than ``hi`` (zeros up to ``max(len+1, lo)`` digits and a check digit)."""
    if not all(c in "0123456789" for c in text):
        return False, False
    valid = lo <= len(text) <= hi and luhn_oracle(text)
    return len(text) < hi or (len(text) == hi and valid), valid


@HYP
@given(st.one_of(st.text(alphabet="0123456789", max_size=22), st.text(alphabet="0123456789 -a", max_size=20)))
def test_luhn_against_the_definition(text: str) -> None:
    rec = ex.Luhn()
    fed, valid = luhn_expected(text, 13, 19)
    event(f"fed: {fed}, valid: {valid}")
    assert (feed(rec, text.encode()) is not None) == fed, text
    assert accepts(rec, text.encode()) == valid, text


def test_luhn_valid_numbers_and_small_bounds_exhaustively() -> None:
    rng = random.Random(1)
    rec = ex.Luhn()
    for _ in range(300):
        body = "".join(rng.choice("0123456789") for _ in range(rng.randint(12, 18)))
        check = next(d for d in "0123456789" if luhn_oracle(body + d))
        assert accepts(rec, (body + check).encode()), body + check
        assert not accepts(rec, (body + str((int(check) + rng.randint(1, 9)) % 10)).encode())
    assert accepts(rec, b"4111111111111111") and accepts(rec, b"79927398713" + b"00")
    for lo, hi in ((1, 3), (2, 4), (4, 4)):
        rec = ex.Luhn(lo, hi)
        for n in range(hi + 2):
            for digits in itertools.product("0123456789", repeat=n):
                text = "".join(digits)
                fed, valid = luhn_expected(text, lo, hi)
                assert (feed(rec, text.encode()) is not None) == fed, (lo, hi, text)
                assert accepts(rec, text.encode()) == valid, (lo, hi, text)
    with pytest.raises(ValueError):
        ex.Luhn(5, 4)


def brackets_expected(text: str, max_depth: int) -> tuple[bool, bool]:
    """(may be fed: some completion exists, is in the language), with a plain stack."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for c in text:
        if c in "([{":
            stack.append(c)
            if len(stack) > max_depth:
                return False, False
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False, False
        elif c not in string.ascii_lowercase:
            return False, False
    return True, bool(text) and not stack


@HYP
@given(st.text(alphabet="()[]{}ab", max_size=24) | st.text(alphabet="(([[{{}])az A1", max_size=12),
       st.integers(0, 9))
def test_brackets_against_a_stack(text: str, depth: int) -> None:
    rec = ex.Brackets(max_depth=depth)
    fed, valid = brackets_expected(text, depth)
    event(f"fed: {fed}, valid: {valid}")
    assert (feed(rec, text.encode()) is not None) == fed, (text, depth)
    assert accepts(rec, text.encode()) == valid, (text, depth)


def test_brackets_exhaustively_up_to_six_characters() -> None:
    rec = ex.Brackets(max_depth=2)
    n_valid = 0
    for n in range(7):
        for chars in itertools.product("()[{}a", repeat=n):
            text = "".join(chars)
            fed, valid = brackets_expected(text, 2)
            assert (feed(rec, text.encode()) is not None) == fed, text
            assert accepts(rec, text.encode()) == valid, text
            n_valid += valid
    assert n_valid > 100
    assert accepts(ex.Brackets(), b"a(b[c]){}")
    assert not accepts(ex.Brackets(), b"")


# -- CharJSON -----------------------------------------------------------------------------------
def json_expected(text: str, max_depth: int = 8, max_ws: int = 2, alphabet: str = ex.DEFAULT_ALPHABET) -> bool:
    """``json.loads`` (no NaN/Infinity) plus CharJSON's own rules, checked separately: raw
    characters from the alphabet (or whitespace), whitespace outside strings only " " and "\\n" in
    runs of at most ``max_ws``, containers nested at most ``max_depth`` deep."""

    def no_constants(name: str):
        raise ValueError(name)

    try:
        value = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return False
    allowed = set(alphabet) | {" ", "\n"}
    if any(c not in allowed for c in text):
        return False
    in_string = escaped = False
    run = 0
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c in " \t\n\r":
            run += 1
            if c in "\t\r" or run > max_ws:
                return False
            continue
        run = 0
        in_string = c == '"'

    def depth(v) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0

    return depth(value) <= max_depth


def char_accepts(rec, text: str) -> tuple[bool, bool]:
    """(every character was allowed, can end) for a CharRecognizer."""
    state = rec.initial()
    for ch in text:
        if ch not in set(rec.allowed_chars(state)):
            return False, False
        state = rec.add_char(state, ch)
    return True, bool(rec.can_end(state))


JSON_TEXT_CHARS = "aZ \"\\/é😀日'\t\u2028"
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=JSON_TEXT_CHARS + "\n\x01", max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet=JSON_TEXT_CHARS, max_size=4), inner,
                                                               max_size=3),
    max_leaves=8,
)


def dump_with_ws(value, rng: random.Random, ensure_ascii: bool) -> str:
    """``json.dumps`` with random whitespace runs (0-3 of " ", "\\n", sometimes "\\t") wherever
    JSON allows whitespace."""

    def ws() -> str:
        k = rng.choice((0, 0, 0, 1, 1, 2, 3))
        return "".join(rng.choice("  \n\n\t") if k == 3 else rng.choice(" \n") for _ in range(k))

    def go(v) -> str:
        if isinstance(v, dict):
            if not v:
                return "{" + ws() + "}"
            items = [ws() + json.dumps(k, ensure_ascii=ensure_ascii) + ws() + ":" + ws() + go(x) + ws()
                     for k, x in v.items()]
            return "{" + ",".join(items) + "}"
        if isinstance(v, list):
            if not v:
                return "[" + ws() + "]"
            return "[" + ",".join(ws() + go(x) + ws() for x in v) + "]"
        return json.dumps(v, ensure_ascii=ensure_ascii)

    return ws() + go(value) + ws()


MUTATION_CHARS = ' \n\t,:]}[{"\\e.-+0x😀u'


def mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        i = rng.randint(0, len(chars))
        if op == 0 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op == 1:
            chars.insert(i, rng.choice(MUTATION_CHARS))
        elif op == 2 and chars:
            chars[min(i, len(chars) - 1)] = rng.choice(MUTATION_CHARS)
        elif chars:
            j = rng.randint(0, len(chars))
            chars[i:i] = chars[min(i, j):max(i, j)][:6]
    return "".join(chars)


@HYP
@given(json_values, st.randoms(use_true_random=False), st.booleans())
def test_char_json_against_json_loads(value, rng: random.Random, ensure_ascii: bool) -> None:
    rec = ex.CharJSON()
    text = dump_with_ws(value, rng, ensure_ascii)
    expected = json_expected(text)
    fed, ends = char_accepts(rec, text)
    event(f"generated text in the language: {expected}")
    assert ends == expected, text
    assert fed or not expected, text
    if expected:  # every prefix of a text of the language is fed, and ends exactly where json does
        for k in range(len(text)):
            assert char_accepts(rec, text[:k]) == (True, json_expected(text[:k])), (text, k)
    for _ in range(5):
        bad = mutate(text, rng)
        ok = json_expected(bad)
        event(f"mutant in the language: {ok}")
        assert char_accepts(rec, bad)[1] == ok, bad


JSON_CASES = [
    "0", "-0", "-", "01", "1.", ".5", "1.5", "1e5", "1E+5", "1e", "1e+", "-1.0e-10", "1.5e999",
    "NaN", "Infinity", "-Infinity", "nan", "tru", "true", "truex", "null", "nul", "false", "true false",
    '""', '"', '"\\"', '"\\x"', '"\\u12"', '"\\u12g4"', '"\\u00e9"', '"\\uD800"', '"\\/\\b\\f\\n\\r\\t"',
    '"a\nb"', '"\x01"', '"tab\there"', '"é😀日本語"', '"ŝ"', '"\u2028"',
    "[]", "[ ]", "[  ]", "[   ]", "[1,]", "[,1]", "[1 , 2]", "[1,  2]", "[1,   2]", "[1\n,\n2]",
    "{}", "{ }", '{"a":1}', '{"a" : 1 }', '{"a":1,}', '{a:1}', '{"a"}', '{"a":}', '{"a":1 "b":2}',
    '{"a":1,"b":[true,{"c":null}]}', "[1]]", "[[1]", "{}}", "  1  ", "   1", "1   ", "\t1", "1\r", "\n1\n",
    "[" * 8 + "]" * 8, "[" * 9 + "]" * 9, '{"a":' * 8 + "1" + "}" * 8, '{"a":' * 9 + "1" + "}" * 9,
    "", " ", "1 2", "[1 2]", "'a'", '"a" "b"',
]


@pytest.mark.parametrize("text", JSON_CASES)
def test_char_json_cases(text: str) -> None:
    assert char_accepts(ex.CharJSON(), text)[1] == json_expected(text), text


def test_char_json_options_and_states() -> None:
    rec = ex.CharJSON(max_depth=1, max_ws=0, alphabet=string.ascii_letters + string.digits + " {}[]\",:.-+")
    for text in ("[1]", "[[1]]", "[ 1]", '{"a b":1}', '{"é":1}', '"ab"', "[1,2]"):
        ok = json_expected(text, max_depth=1, max_ws=0, alphabet=string.ascii_letters + string.digits + " {}[]\",:.-+")
        assert char_accepts(rec, text)[1] == ok, text
    rec = ex.CharJSON()
    state = rec.initial()
    for ch in '{"k": [1, "x\\u00':
        state = rec.add_char(state, ch)
        hash(state)
        assert isinstance(state, tuple) and len(state) == 3


# -- Choices (StringRecognizer) ---------------------------------------------------------------------
CHOICE_OPTIONS = ["no", "not sure", "yes", "maybe so", "né"]


def choices_language(options, sep: str, max_items: int) -> set[str]:
    return {sep.join(p) for n in range(1, max_items + 1) for p in itertools.product(options, repeat=n)}


def string_language(rec, limit: int = 10_000) -> set[str]:
    """Every text the StringRecognizer spells (a search over allowed/append; finite languages)."""
    out: set[str] = set()
    todo = [(rec.initial(), "")]
    while todo:
        state, text = todo.pop()
        if EOS in set(rec.special_allowed(state)):
            out.add(text)
        for piece in rec.allowed(state):
            assert isinstance(piece, str) and piece
            todo.append((rec.append(state, piece), text + piece))
        assert len(out) < limit
    return out


@pytest.mark.parametrize("max_items", [1, 2, 3])
def test_choices_spells_its_language(max_items: int) -> None:
    rec = ex.Choices(CHOICE_OPTIONS, sep=", ", max_items=max_items)
    assert string_language(rec) == choices_language(CHOICE_OPTIONS, ", ", max_items)
    with pytest.raises(ValueError):
        rec.append(rec.initial(), ", ")
    with pytest.raises(ValueError):
        ex.Choices(["a", ", "], max_items=2)


# ---------------------------------------------------------------------------------------------
# masks against brute force over the whole vocabulary
# ---------------------------------------------------------------------------------------------
class ByteOracle:
    """The mask of a byte-level recognizer: every token's bytes fed through ``byte_allowed`` and
    ``append`` from the state after the text so far (memoised per (state, byte); no trie)."""

    def __init__(self, rec, tok) -> None:
        self.rec, self.tok = rec, tok
        self.by_first: list[list[tuple[int, bytes]]] = [[] for _ in range(256)]
        for i, b in enumerate(tok.tokens):
            if b and i not in tok.special_ids:
                self.by_first[b[0]].append((i, b))
        self._next: dict = {}

    def step(self, state, b: int):
        key = (state, b)
        try:
            return self._next[key]
        except KeyError:
            nxt = self.rec.append(state, b) if self.rec.byte_allowed(state, b) else None
            self._next[key] = nxt
            return nxt

    def state(self, text: bytes):
        state = self.rec.initial()
        for b in text:
            state = self.step(state, b)
            assert state is not None, f"the walk left the language at {text!r}"
        return state

    def can_end(self, text: bytes) -> bool:
        return bool(self.rec.special_allowed(self.state(text), EOS))

    def allowed(self, text: bytes) -> set[int]:
        start = self.state(text)
        out = set(self.tok.eos_token_ids) if self.rec.special_allowed(start, EOS) else set()
        step = self.step
        for b0 in range(256):
            first = step(start, b0)
            if first is None:
                continue
            for i, data in self.by_first[b0]:
                state = first
                for b in data[1:]:
                    state = step(state, b)
                    if state is None:
                        break
                else:
                    out.add(i)
        return out

    def forced(self, text: bytes, limit: int = 1024) -> bytes:
        state, out = self.state(text), bytearray()
        while len(out) < limit and not self.rec.special_allowed(state, EOS):
            live = [b for b in range(256) if self.step(state, b) is not None]
            if len(live) != 1:
                break
            out.append(live[0])
            state = self.step(state, live[0])
        return bytes(out)


class CharOracle:
    """The mask of a character parser: the text so far plus the token's bytes decoded as UTF-8;
    every complete character must be in ``allowed_chars`` (then ``add_char``), and an unfinished
    character at the end must begin the encoding of an allowed one."""

    def __init__(self, rec, tok) -> None:
        self.rec, self.tok = rec, tok
        self.regular = [(i, b) for i, b in enumerate(tok.tokens) if b and i not in tok.special_ids]
        self._chars: dict = {}
        self._next: dict = {}

    def chars(self, state) -> frozenset[str]:
        got = self._chars.get(state)
        if got is None:
            got = self._chars[state] = frozenset(self.rec.allowed_chars(state))
        return got

    def feed(self, state, text: str):
        for ch in text:
            key = (state, ch)
            nxt = self._next.get(key, False)
            if nxt is False:
                nxt = self._next[key] = self.rec.add_char(state, ch) if ch in self.chars(state) else None
            if nxt is None:
                return None
            state = nxt
        return state

    @staticmethod
    def split(data: bytes) -> tuple[str, bytes] | None:
        """(the complete characters, the bytes of an unfinished last one); None if not UTF-8."""
        try:
            return data.decode("utf-8"), b""
        except UnicodeDecodeError as exc:
            if exc.reason != "unexpected end of data":
                return None
            return data[: exc.start].decode("utf-8"), data[exc.start:]

    def _viable(self, state, data: bytes) -> bool:
        parts = self.split(data)
        if parts is None:
            return False
        state = self.feed(state, parts[0])
        if state is None:
            return False
        return not parts[1] or any(c.encode("utf-8").startswith(parts[1]) for c in self.chars(state))

    def state(self, text: bytes):
        parts = self.split(text)
        assert parts is not None and self._viable(self.rec.initial(), text), text
        return self.feed(self.rec.initial(), parts[0]), parts[1]

    def can_end(self, text: bytes) -> bool:
        state, pending = self.state(text)
        return not pending and bool(self.rec.can_end(state))

    def allowed(self, text: bytes) -> set[int]:
        state, pending = self.state(text)
        out = set(self.tok.eos_token_ids) if self.can_end(text) else set()
        for i, data in self.regular:
            if self._viable(state, pending + data):
                out.add(i)
        return out


class StringOracle:
    """The mask of a finite string language: text so far + token must begin some text of it."""

    def __init__(self, language: set[str], tok) -> None:
        self.tok = tok
        self.language = {t.encode("utf-8") for t in language}
        self.prefixes = {t[:k] for t in self.language for k in range(len(t) + 1)}
        self.regular = [(i, b) for i, b in enumerate(tok.tokens) if b and i not in tok.special_ids]

    def can_end(self, text: bytes) -> bool:
        return text in self.language

    def allowed(self, text: bytes) -> set[int]:
        assert text in self.prefixes, text
        out = set(self.tok.eos_token_ids) if text in self.language else set()
        out.update(i for i, b in self.regular if text + b in self.prefixes)
        return out


_oracles: dict = {}


def oracle_for(name: str, tok):
    key = (name, id(tok))
    if key not in _oracles:
        rec = recognizer(name)
        if name == "CharJSON":
            _oracles[key] = CharOracle(rec, tok)
        elif name == "Choices":
            _oracles[key] = StringOracle(choices_language(CHOICE_OPTIONS, ", ", 3), tok)
        else:
            _oracles[key] = ByteOracle(rec, tok)
    return _oracles[key]


@functools.cache
def recognizer(name: str):
    return {
        "WordList": word_list,
        "Luhn": ex.Luhn,
        "Brackets": ex.Brackets,
        "CharJSON": ex.CharJSON,
        "Choices": lambda: ex.Choices(CHOICE_OPTIONS, sep=", ", max_items=3),
    }[name]()


def compiled_for(name: str, tok):
    return logitgate.compile(logitgate.Grammar.from_recognizer(recognizer(name)), tok)


# valid starting texts per recognizer (bytes; they may end inside a character)
START_TEXTS = {
    "WordList": [b"", b"br", b"tho"],
    "Luhn": [b"", b"411111111111", b"412345678901234567"],
    "Brackets": [b"", b"([{a", b"(((((((("],
    "CharJSON": [b"", b'{"k\xc3', b'{"a": [1, -2.5e', b'[{"x": "\\u00'],
    "Choices": [b"", b"no", b"maybe so, n"],
}
NAMES = list(START_TEXTS)


def describe(tok, ids) -> str:
    return ", ".join(f"{i}={tok.tokens[i]!r}" for i in sorted(ids)[:12]) + (" ..." if len(ids) > 12 else "")


def check_mask(m: logitgate.Matcher, oracle, text: bytes, tok, label: str) -> set[int]:
    expected = oracle.allowed(text)
    got = set(m.allowed_token_ids().tolist())
    if got != expected:
        pytest.fail(f"{label}: mask differs after {text!r}\n  allowed but should not be: "
                    f"{describe(tok, got - expected)}\n  refused but should be allowed: "
                    f"{describe(tok, expected - got)}", pytrace=False)
    assert m.is_accepting() == oracle.can_end(text), (label, text)
    return expected


def walk(name: str, tok, seed: int, steps: int, starts=None) -> int:
    """From each start text, ``steps`` random tokens among the allowed ones, checking the mask at
    every state and that one refused token is refused. Returns the number of masks checked."""
    rng = random.Random(seed)
    compiled = compiled_for(name, tok)
    oracle = oracle_for(name, tok)
    eos = set(tok.eos_token_ids)
    checked = 0
    for start in starts if starts is not None else START_TEXTS[name]:
        m = logitgate.Matcher(compiled, max_rollback=-1)
        assert m.accept_bytes(start), (name, start)
        text = start
        for _ in range(steps + 1):
            expected = check_mask(m, oracle, text, tok, f"{name} on {tok.name or tok.n_tokens}")
            checked += 1
            refused = [i for i in rng.sample(range(tok.n_tokens), 50) if i not in expected and i not in tok.special_ids]
            if refused:
                assert not m.accept_token(refused[0]), (name, text, refused[0])
            choices = sorted(expected - eos)
            if not choices:
                break
            t = rng.choice(choices)
            assert m.accept_token(t), (name, text, t)
            text += tok.tokens[t]
    return checked


@pytest.mark.parametrize("name", NAMES)
def test_masks_match_brute_force(name: str, real_tok) -> None:
    assert walk(name, real_tok, seed=NAMES.index(name), steps=2) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", NAMES)
def test_masks_match_brute_force_long_walks(name: str, real_tok, seed: int) -> None:
    walk(name, real_tok, seed=100 + seed, steps=12)


def test_small_tokenizer_masks_exhaustive_walks() -> None:
    """A vocabulary of single bytes and a few merges: every state up to depth 4 of each
    recognizer, all masks against the oracle."""
    pieces = [bytes([b]) for b in range(256)] + [b"(a", b"a)", b"{}", b"no", b"not", b" sure", b"ma", b"ybe",
                                                 b", ", b"12", b"99", b"br", b"oo", b'{"', b'":', b"\xc3\xa9",
                                                 b"\xc3", b"\xa9\"", b"\\u", b"tr", b"ue"]
    tok = logitgate.Tokenizer.from_bytes([b""] + pieces, eos_token_id=0)
    for name in ("Luhn", "Brackets", "CharJSON", "Choices", "WordList"):
        rec = recognizer(name)
        compiled = logitgate.compile(logitgate.Grammar.from_recognizer(rec), tok)
        oracle = (CharOracle(rec, tok) if name == "CharJSON" else
                  StringOracle(choices_language(CHOICE_OPTIONS, ", ", 3), tok) if name == "Choices" else
                  ByteOracle(rec, tok))
        frontier = [b""]
        seen = {b""}
        for _depth in range(3):
            nxt = []
            for text in frontier:
                m = logitgate.Matcher(compiled)
                assert m.accept_bytes(text)
                allowed = check_mask(m, oracle, text, tok, f"{name} (small vocabulary)")
                for t in sorted(allowed - {0}):
                    new = text + tok.tokens[t]
                    if new not in seen and len(nxt) < 200:
                        seen.add(new)
                        nxt.append(new)
            frontier = nxt


# ---------------------------------------------------------------------------------------------
# matcher behaviour
# ---------------------------------------------------------------------------------------------
def fresh_mask(name: str, tok, text: bytes, new_recognizer: bool = False) -> list[int]:
    if new_recognizer:  # a separate recognizer object: nothing memoised is shared
        rec = {"WordList": lambda: ex.WordList(words()), "Luhn": ex.Luhn, "Brackets": ex.Brackets,
               "CharJSON": ex.CharJSON, "Choices": lambda: ex.Choices(CHOICE_OPTIONS, sep=", ", max_items=3)}[name]()
        compiled = logitgate.compile(logitgate.Grammar.from_recognizer(rec), tok)
    else:
        compiled = compiled_for(name, tok)
    m = logitgate.Matcher(compiled)
    assert m.accept_bytes(text), (name, text)
    return m.allowed_token_ids().tolist()


@pytest.mark.parametrize("name", NAMES)
def test_rollback_and_fork_agree_with_fresh_matchers(name: str, tok_spm) -> None:
    tok = tok_spm
    rng = random.Random(7)
    eos = set(tok.eos_token_ids)
    m = logitgate.Matcher(compiled_for(name, tok), max_rollback=-1)
    texts, masks, accepting = [b""], [m.allowed_token_ids().tolist()], [m.is_accepting()]
    for _ in range(6):
        choices = [t for t in masks[-1] if t not in eos]
        if not choices:
            break
        t = rng.choice(choices)
        assert m.accept_token(t)
        texts.append(texts[-1] + tok.tokens[t])
        masks.append(m.allowed_token_ids().tolist())
        accepting.append(m.is_accepting())
    for i, text in enumerate(texts):
        assert fresh_mask(name, tok, text) == masks[i], (name, text)
    assert fresh_mask(name, tok, texts[-1], new_recognizer=True) == masks[-1], (name, texts[-1])

    # fork in the middle: the twin goes its own way, the original is untouched
    mid = len(texts) // 2
    m.rollback(len(texts) - 1 - mid)
    assert m.allowed_token_ids().tolist() == masks[mid] and m.is_accepting() == accepting[mid]
    twin = m.fork()
    choices = [t for t in masks[mid] if t not in eos]
    if choices:
        t = choices[-1]
        assert twin.accept_token(t)
        assert twin.allowed_token_ids().tolist() == fresh_mask(name, tok, texts[mid] + tok.tokens[t])
    assert m.allowed_token_ids().tolist() == masks[mid]
    twin.rollback(twin.num_rollback_steps)
    assert twin.allowed_token_ids().tolist() == masks[0]

    # EOS where the text may end, then back
    for i in reversed(range(mid + 1)):
        if i < mid:
            m.rollback(1)
        assert m.allowed_token_ids().tolist() == masks[i], (name, texts[i])
        if accepting[i]:
            assert m.accept_token(tok.eos_token_ids[0]) and m.is_terminated()
            assert m.allowed_token_ids().tolist() == list(tok.eos_token_ids)
            m.rollback(1)
            assert not m.is_terminated() and m.allowed_token_ids().tolist() == masks[i]
        else:
            assert not m.accept_token(tok.eos_token_ids[0])


def test_jump_forward_bytes(tok_spm) -> None:
    def jf(rec, text: bytes) -> bytes:
        m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_recognizer(rec), tok_spm))
        assert m.accept_bytes(text), text
        before = m.allowed_token_ids().tolist()
        out = m.find_jump_forward_bytes()
        assert m.allowed_token_ids().tolist() == before  # does not move the matcher
        return out

    # WordList: the rest of a word once its prefix is unique (and the word extends no further)
    ws = words()
    prefixes_of: dict[str, int] = {}
    for w in ws:
        for k in range(len(w) + 1):
            prefixes_of[w[:k]] = prefixes_of.get(w[:k], 0) + 1
    rec = word_list()
    oracle = ByteOracle(rec, tok_spm)
    checked = 0
    for w in ws[::997]:
        if prefixes_of[w] > 1:  # a prefix of another word: the choice to stop remains
            assert jf(rec, w.encode()) == b"", w
            continue
        k = min(k for k in range(len(w) + 1) if prefixes_of[w[:k]] == 1)
        expected = w[k:].encode()
        assert oracle.forced(w[:k].encode()) == expected  # the oracle agrees with the set
        assert jf(rec, w[:k].encode()) == expected, w
        if k > 0:
            assert jf(rec, w[: k - 1].encode()) == oracle.forced(w[: k - 1].encode()), w
        checked += bool(expected)
    assert checked > 10
    assert jf(rec, b"") == b""

    # Luhn: the check digit at the last possible position
    luhn = ex.Luhn()
    for body in ("412345678901234567", "000000000000000001", "99999999999999999"):
        text = body.encode()
        expected = ByteOracle(luhn, tok_spm).forced(text)
        if len(body) == 18 and not luhn_oracle(body):
            assert len(expected) == 1 and luhn_oracle(body + expected.decode())
        assert jf(luhn, text) == expected, body
    assert jf(ex.Luhn(16, 16), b"411111111111111") == b"1"
    assert jf(luhn, b"") == b""

    # CharJSON: the rest of a literal, the last byte of a character begun, a colon without whitespace
    cj = ex.CharJSON()
    assert jf(cj, b"t") == b"rue"
    assert jf(cj, b"[n") == b"ull"
    assert jf(cj, b'"\xe2\x82') == b"\xac"  # only the euro sign starts with these bytes in the alphabet
    assert jf(cj, b'"\xe2') == b""
    assert jf(cj, b'"\\u') == b""
    assert jf(ex.CharJSON(max_ws=0), b'{"a"') == b":"
    assert jf(ex.CharJSON(max_ws=0), b'{"a":1') == b""
    assert jf(ex.CharJSON(max_ws=0, max_depth=0), b"") == b""

    # Choices: the rest of the only option with this prefix; none where one may stop
    ch = recognizer("Choices")
    assert jf(ch, b"may") == b"be so"
    assert jf(ch, b"not") == b" sure"
    assert jf(ch, b"no") == b""
    assert jf(ch, b"yes,") == b" "
    assert jf(ex.Choices(["only"]), b"") == b"only"

    # Brackets: never forced (letters may always come)
    assert jf(ex.Brackets(), b"((") == b""


# ---------------------------------------------------------------------------------------------
# broken recognizers
# ---------------------------------------------------------------------------------------------
class _Counter:
    """Up to three bytes a/b, may end after one; the state ("st", n) is easy to find in a message."""

    def initial(self):
        return ("st", 0)

    def byte_allowed(self, state, byte):
        return byte in (97, 98) and state[1] < 3

    def append(self, state, byte):
        return ("st", state[1] + 1)

    def special_allowed(self, state, token):
        return token == EOS and state[1] > 0


def _broken(method: str, behaviour):
    """A _Counter whose ``method`` misbehaves at state ("st", 1)."""

    class Broken(_Counter):
        pass

    original = getattr(_Counter, method)

    def wrapper(self, state, *args):
        if state == ("st", 1):
            return behaviour()
        return original(self, state, *args)

    setattr(Broken, method, wrapper)
    Broken.__name__ = f"Broken_{method}"
    return Broken()


def _raise():
    raise KeyError("boom")


def drive(rec, tok, data: bytes = b"ab") -> None:
    """Everything a generation loop would ask, along ``data``."""
    m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_recognizer(rec), tok), max_rollback=-1)
    m.allowed_token_ids()
    m.is_accepting()
    m.find_jump_forward_bytes()
    for b in data:
        m.accept_bytes(bytes([b]))
        m.allowed_token_ids()
        m.is_accepting()
        m.find_jump_forward_bytes()


BROKEN_FUNCTIONAL = [
    ("byte_allowed", _raise), ("byte_allowed", lambda: None), ("byte_allowed", lambda: "yes"),
    ("byte_allowed", lambda: 1), ("special_allowed", _raise), ("special_allowed", lambda: None),
    ("special_allowed", lambda: "eos"), ("append", _raise), ("append", lambda: ["st", 2]),
]


@pytest.mark.parametrize("method,behaviour", BROKEN_FUNCTIONAL,
                         ids=[f"{m}-{i}" for i, (m, _) in enumerate(BROKEN_FUNCTIONAL)])
def test_broken_functional_recognizer(method: str, behaviour, tok_spm) -> None:
    drive(_Counter(), tok_spm)  # the unbroken one is fine
    with pytest.raises(RecognizerError) as info:
        drive(_broken(method, behaviour), tok_spm)
    message = str(info.value)
    assert method in message, message
    assert "('st', 1)" in message, message


def test_broken_initial(tok_spm) -> None:
    class BadInitial(_Counter):
        def initial(self):
            raise RuntimeError("no start")

    with pytest.raises(RecognizerError, match="initial"):
        drive(BadInitial(), tok_spm)


class _Chars:
    """CharRecognizer: up to three of "a", "é"; may end after one. State ("st", n)."""

    def initial(self):
        return ("st", 0)

    def allowed_chars(self, state):
        return "aé" if state[1] < 3 else ""

    def add_char(self, state, ch):
        return ("st", state[1] + 1)

    def can_end(self, state):
        return state[1] > 0


class _Strings:
    """StringRecognizer: up to three of "ab", "c"; may end after one. State ("st", n)."""

    def initial(self):
        return ("st", 0)

    def allowed(self, state):
        return ("ab", "c") if state[1] < 3 else ()

    def append(self, state, text):
        return ("st", state[1] + 1)

    def special_allowed(self, state):
        return (EOS,) if state[1] > 0 else ()


BROKEN_OTHER = [
    (_Chars, "allowed_chars", _raise), (_Chars, "allowed_chars", lambda: ["ab"]), (_Chars, "add_char", _raise),
    (_Chars, "can_end", _raise), (_Chars, "can_end", lambda: None), (_Chars, "can_end", lambda: "yes"),
    (_Strings, "allowed", _raise), (_Strings, "allowed", lambda: [""]), (_Strings, "append", _raise),
    (_Strings, "special_allowed", _raise),
]


@pytest.mark.parametrize("base,method,behaviour", BROKEN_OTHER,
                         ids=[f"{b.__name__}-{m}-{i}" for i, (b, m, _) in enumerate(BROKEN_OTHER)])
def test_broken_char_and_string_recognizers(base, method: str, behaviour, tok_spm) -> None:
    drive(base(), tok_spm, b"ab" if base is _Strings else "aé".encode())

    class Broken(base):
        pass

    original = getattr(base, method)

    def wrapper(self, state, *args):
        return behaviour() if state == ("st", 1) else original(self, state, *args)

    setattr(Broken, method, wrapper)
    with pytest.raises(RecognizerError) as info:
        drive(Broken(), tok_spm, b"abab" if base is _Strings else "aéa".encode())
    message = str(info.value)
    assert method in message, message
    assert "('st', 1)" in message, message


def test_not_a_recognizer() -> None:
    with pytest.raises(TypeError):
        logitgate.Grammar.from_recognizer(object())
