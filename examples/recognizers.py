"""Custom constraints written in Python: recognizers as an extension point.

    python examples/recognizers.py

A constraint that is no regex, grammar or schema can be written as a small Python object and
compiled with ``logitgate.Grammar.from_recognizer``; logitgate walks the tokenizer's trie with it
(memoised per recognizer state) to compute the token masks. Three interfaces are accepted
(``logitgate.recognizers``):

* ``FunctionalRecognizer`` (byte level): ``initial()``, ``byte_allowed(state, byte)``,
  ``append(state, byte)``, ``special_allowed(state, "eos")``: ``WordList``, ``Luhn``, ``Brackets``;
* ``CharRecognizer`` (lm-format-enforcer style, character level): ``initial()``,
  ``allowed_chars(state)``, ``add_char(state, ch)``, ``can_end(state)``: ``CharJSON``;
* ``StringRecognizer`` (whole strings): ``initial()``, ``allowed(state)``, ``append(state, text)``,
  ``special_allowed(state)``: ``Choices``.

Every state is immutable, hashable and small (an int or a short tuple), since logitgate memoises
per state. None of these recognizers has a dead end: from every state they can reach, the text can
still be finished, so a model under them always has a way to stop.

As a script it runs each recognizer under the embedded model (SmolLM2-135M) and checks what it
generated, then the Luhn recognizer as a sub-rule of a Lark grammar. The module is importable too (``tests/test_recognizers.py`` checks each recognizer
against an independent oracle).
"""
from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Iterable, Sequence

__all__ = ["EOS", "Brackets", "CharJSON", "Choices", "Luhn", "WordList", "luhn_valid", "make_words"]

EOS = "eos"


# ---------------------------------------------------------------------------------------------
# WordList: one word of a (large) list
# ---------------------------------------------------------------------------------------------
class WordList:
    """FunctionalRecognizer: the text is exactly one word of ``words``.

    The words' UTF-8 bytes are stored once in a byte trie in flat arrays, nodes numbered
    breadth-first so that the children of a node have consecutive ids: ``labels[n]`` holds the
    bytes of node ``n``'s children (ascending) and ``first[n]`` the id of its first child. The
    state is a node id (an int); ``final[n]`` says whether a word ends there. No dead ends: every
    node lies on the path of some word.
    """

    def __init__(self, words: Iterable[str]) -> None:
        encoded = sorted({w.encode("utf-8") for w in words})
        if not encoded:
            raise ValueError("WordList needs at least one word")
        if encoded[0] == b"":
            raise ValueError("WordList: the empty word is not allowed (the text must be non-empty)")
        root: dict = {}
        for w in encoded:  # a temporary dict-of-dicts trie, flattened below
            node = root
            for b in w:
                node = node.setdefault(b, {})
            node[-1] = True
        labels: list[bytes] = []
        first = array("i")
        final = bytearray()
        order = [root]
        i = 0
        while i < len(order):
            node = order[i]
            kids = sorted(k for k in node if k >= 0)
            labels.append(bytes(kids))
            first.append(len(order))
            final.append(1 if -1 in node else 0)
            order.extend(node[k] for k in kids)
            order[i] = None  # type: ignore[call-overload]  # free the temporary trie as we go
            i += 1
        self._labels = labels
        self._first = first
        self._final = bytes(final)
        self.n_words = len(encoded)

    @property
    def n_nodes(self) -> int:
        return len(self._labels)

    def initial(self) -> int:
        return 0

    def byte_allowed(self, state: int, byte: int) -> bool:
        return byte in self._labels[state]

    def append(self, state: int, byte: int) -> int:
        return self._first[state] + self._labels[state].index(byte)

    def special_allowed(self, state: int, token: str) -> bool:
        return token == EOS and self._final[state] == 1


_ONSETS = ("", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
           "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "oo", "ou")
_CODAS = ("", "", "", "n", "r", "s", "l", "m", "t", "ck", "nd", "st")


def make_words(n: int = 50_000, seed: int = 0) -> list[str]:
    """``n`` distinct lowercase pseudo-words (1 to 4 syllables), sorted; the same for the same
    ``n`` and ``seed`` on every machine (there is no dictionary file to read here)."""
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < n:
        k = rng.choice((1, 2, 2, 3, 3, 3, 4))
        out.add("".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(k)))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# Luhn: a card number with a valid checksum
# ---------------------------------------------------------------------------------------------
def _doubled(d: int) -> int:
    return 2 * d - 9 if d > 4 else 2 * d


def luhn_valid(number: str) -> bool:
    """The textbook Luhn check (from the right, every second digit doubled)."""
    if not number or not all(c in "0123456789" for c in number):
        return False
    total = 0
    for i, c in enumerate(reversed(number)):
        d = ord(c) - 48
        total += _doubled(d) if i % 2 == 1 else d
    return total % 10 == 0


class Luhn:
    """FunctionalRecognizer: ``min_digits`` to ``max_digits`` ASCII digits whose Luhn checksum is
    valid.

    The state is ``(count, sum_if_even, sum_if_odd)``: the digits read so far, and the Luhn sum
    (mod 10) the number would have if its final length were even, or odd (a digit at position
    ``i`` from the left is doubled iff ``i`` and the final length have the same parity). So the
    checksum is known wherever the text ends. At the last possible position only the check digit
    is allowed (the last digit is never doubled, so exactly one works): no dead end.
    """

    def __init__(self, min_digits: int = 13, max_digits: int = 19) -> None:
        if not 1 <= min_digits <= max_digits:
            raise ValueError("need 1 <= min_digits <= max_digits")
        self.min_digits = min_digits
        self.max_digits = max_digits

    def initial(self) -> tuple[int, int, int]:
        return (0, 0, 0)

    @staticmethod
    def _add(state: tuple[int, int, int], d: int) -> tuple[int, int, int]:
        n, even, odd = state
        if n % 2 == 0:
            return (n + 1, (even + _doubled(d)) % 10, (odd + d) % 10)
        return (n + 1, (even + d) % 10, (odd + _doubled(d)) % 10)

    def _valid(self, state: tuple[int, int, int]) -> bool:
        n, even, odd = state
        return self.min_digits <= n <= self.max_digits and (even if n % 2 == 0 else odd) == 0

    def byte_allowed(self, state: tuple[int, int, int], byte: int) -> bool:
        if not 48 <= byte <= 57 or state[0] >= self.max_digits:
            return False
        if state[0] == self.max_digits - 1:  # the last possible digit: only the check digit
            return self._valid(self._add(state, byte - 48))
        return True

    def append(self, state: tuple[int, int, int], byte: int) -> tuple[int, int, int]:
        return self._add(state, byte - 48)

    def special_allowed(self, state: tuple[int, int, int], token: str) -> bool:
        return token == EOS and self._valid(state)


# ---------------------------------------------------------------------------------------------
# Brackets: balanced ()[]{} with letters
# ---------------------------------------------------------------------------------------------
_CLOSER = {ord("("): ")", ord("["): "]", ord("{"): "}"}
_CLOSERS = {ord(")"), ord("]"), ord("}")}


class Brackets:
    """FunctionalRecognizer: a non-empty text of ``()[]{}`` and letters ``a-z``, the brackets
    balanced and nested at most ``max_depth`` deep (``"a(b[c]){}"``).

    The state is ``(closers, started)``: the closing brackets still owed, innermost last (a str
    used as an immutable stack), and whether any character was written. The text may end when
    nothing is owed and it is not empty.
    """

    def __init__(self, max_depth: int = 8) -> None:
        if max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        self.max_depth = max_depth

    def initial(self) -> tuple[str, bool]:
        return ("", False)

    def byte_allowed(self, state: tuple[str, bool], byte: int) -> bool:
        if 97 <= byte <= 122:
            return True
        closers = state[0]
        if byte in _CLOSER:
            return len(closers) < self.max_depth
        if byte in _CLOSERS:
            return bool(closers) and ord(closers[-1]) == byte
        return False

    def append(self, state: tuple[str, bool], byte: int) -> tuple[str, bool]:
        closers = state[0]
        if byte in _CLOSER:
            return (closers + _CLOSER[byte], True)
        if byte in _CLOSERS:
            return (closers[:-1], True)
        return (closers, True)

    def special_allowed(self, state: tuple[str, bool], token: str) -> bool:
        return token == EOS and state[1] and not state[0]


# ---------------------------------------------------------------------------------------------
# CharJSON: a character-level JSON parser in lm-format-enforcer's style
# ---------------------------------------------------------------------------------------------
DEFAULT_ALPHABET = "".join(chr(c) for c in range(0x20, 0x7F)) + "éèêàâçôöüäßñ°€’“”…—–中文日本語😀"
"""The characters CharJSON allows (printable ASCII and a few others), as lm-format-enforcer's
parsers draw from a configured alphabet rather than all of Unicode."""

_WS = frozenset(" \n")
_DIGITS = "0123456789"
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
# number sub-states: after "-", "0", [1-9][0-9]*, ".", fraction digits, e/E, exponent sign, exponent digits
N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP = range(8)
_NUMBER_COMPLETE = frozenset({N_ZERO, N_INT, N_FRAC, N_EXP})
_NUMBER_NEXT: dict[int, dict[str, int]] = {
    N_MINUS: {"0": N_ZERO, **{d: N_INT for d in "123456789"}},
    N_ZERO: {".": N_DOT, "e": N_E, "E": N_E},
    N_INT: {**{d: N_INT for d in _DIGITS}, ".": N_DOT, "e": N_E, "E": N_E},
    N_DOT: {d: N_FRAC for d in _DIGITS},
    N_FRAC: {**{d: N_FRAC for d in _DIGITS}, "e": N_E, "E": N_E},
    N_E: {"+": N_ESIGN, "-": N_ESIGN, **{d: N_EXP for d in _DIGITS}},
    N_ESIGN: {d: N_EXP for d in _DIGITS},
    N_EXP: {d: N_EXP for d in _DIGITS},
}

JSONState = tuple  # (stack: str of "o"/"a", mode: str, aux: int | str)


class CharJSON:
    """CharRecognizer: one JSON value, character by character, as an lm-format-enforcer
    ``CharacterLevelParser`` would parse it (objects, arrays, strings with every escape, numbers,
    ``true``/``false``/``null``).

    Limits that keep each state small: containers nest at most ``max_depth`` deep; whitespace
    (``" "`` and ``"\\n"`` only) comes in runs of at most ``max_ws`` characters wherever JSON
    allows it (before and after the value too); raw characters come from ``alphabet``.

    The state is ``(stack, mode, aux)``: ``stack`` a str of the open containers (``"o"`` object,
    ``"a"`` array, innermost last); ``mode`` what comes next: ``"V"`` a value (``"VC"``: or ``]``,
    right after ``[``), ``"K"`` a key (``"KC"``: or ``}``, right after ``{``), ``":"`` the colon,
    ``"A"`` after a value (``,``, a closing bracket or, at the top, the end), ``"S"``/``"SK"``
    inside a string value / key, ``"N"`` inside a number, ``"L"`` inside a literal; ``aux`` the
    whitespace run so far (V, VC, K, KC, :, A), the escape position in a string (0 none, 1 after
    ``\\``, 2-5 after ``\\u`` and 0-3 hex digits), the number sub-state, or the rest of a literal.
    """

    def __init__(self, max_depth: int = 8, max_ws: int = 2, alphabet: str = DEFAULT_ALPHABET) -> None:
        if max_depth < 0 or max_ws < 0:
            raise ValueError("max_depth and max_ws must be >= 0")
        self.max_depth = max_depth
        self.max_ws = max_ws
        self.alphabet = frozenset(alphabet)
        self._string_chars = frozenset(c for c in alphabet if c not in '"\\' and ord(c) >= 0x20) | {'"', "\\"}
        value_start = frozenset('"-tfn' + _DIGITS)
        self._value_start = value_start
        self._value_start_open = value_start | {"{", "["}

    def initial(self) -> JSONState:
        return ("", "V", 0)

    # -- allowed characters ---------------------------------------------------------------------
    def allowed_chars(self, state: JSONState) -> frozenset[str]:
        stack, mode, aux = state
        if mode == "S" or mode == "SK":
            if aux == 0:
                return self._string_chars
            return _ESCAPES if aux == 1 else _HEX
        if mode == "N":
            out = frozenset(_NUMBER_NEXT[aux])
            return out | self.allowed_chars((stack, "A", 0)) if aux in _NUMBER_COMPLETE else out
        if mode == "L":
            return frozenset(aux[0])
        ws = _WS if aux < self.max_ws else frozenset()
        if mode == "V" or mode == "VC":
            out = self._value_start_open if len(stack) < self.max_depth else self._value_start
            out = out | ws
            return out | {"]"} if mode == "VC" else out
        if mode == "K":
            return ws | {'"'}
        if mode == "KC":
            return ws | {'"', "}"}
        if mode == ":":
            return ws | {":"}
        if mode == "A":
            if not stack:
                return ws
            return ws | {",", "}" if stack[-1] == "o" else "]"}
        raise ValueError(f"CharJSON: not a state: {state!r}")

    # -- transitions ----------------------------------------------------------------------------
    def add_char(self, state: JSONState, ch: str) -> JSONState:
        stack, mode, aux = state
        if mode == "S" or mode == "SK":
            if aux == 0:
                if ch == '"':
                    return (stack, ":" if mode == "SK" else "A", 0)
                return (stack, mode, 1) if ch == "\\" else state
            if aux == 1:
                return (stack, mode, 2 if ch == "u" else 0)
            return (stack, mode, aux + 1 if aux < 5 else 0)
        if mode == "N":
            nxt = _NUMBER_NEXT[aux].get(ch)
            if nxt is not None:
                return (stack, "N", nxt)
            return self.add_char((stack, "A", 0), ch)  # the number ended: ch follows it
        if mode == "L":
            return (stack, "A", 0) if len(aux) == 1 else (stack, "L", aux[1:])
        if ch in _WS:
            return (stack, mode, aux + 1)
        if mode == "V" or mode == "VC":
            if ch == "]":
                return (stack[:-1], "A", 0)
            if ch == "{":
                return (stack + "o", "KC", 0)
            if ch == "[":
                return (stack + "a", "VC", 0)
            if ch == '"':
                return (stack, "S", 0)
            if ch == "-":
                return (stack, "N", N_MINUS)
            if ch in _DIGITS:
                return (stack, "N", N_ZERO if ch == "0" else N_INT)
            return (stack, "L", _LITERALS[ch])
        if mode == "K" or mode == "KC":
            return (stack, "SK", 0) if ch == '"' else (stack[:-1], "A", 0)
        if mode == ":":
            return (stack, "V", 0)
        if mode == "A":
            if ch == ",":
                return (stack, "K" if stack[-1] == "o" else "V", 0)
            return (stack[:-1], "A", 0)
        raise ValueError(f"CharJSON: not a state: {state!r}")

    def can_end(self, state: JSONState) -> bool:
        stack, mode, aux = state
        return not stack and (mode == "A" or (mode == "N" and aux in _NUMBER_COMPLETE))

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is in the language (fed character by character)."""
        state = self.initial()
        for ch in text:
            if ch not in self.allowed_chars(state):
                return False
            state = self.add_char(state, ch)
        return self.can_end(state)


# ---------------------------------------------------------------------------------------------
# Choices: whole strings
# ---------------------------------------------------------------------------------------------
class Choices:
    """StringRecognizer: one of ``options``, or up to ``max_items`` of them joined by ``sep``
    (``"no, maybe so"``).

    The state is ``(items, after_sep)``: the options written so far, and whether a separator was
    just written (then an option must follow).
    """

    def __init__(self, options: Sequence[str], *, sep: str = ", ", max_items: int = 1) -> None:
        self.options = tuple(dict.fromkeys(options))
        if not self.options or any(not o for o in self.options):
            raise ValueError("Choices needs non-empty options")
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        if max_items > 1 and (not sep or sep in self.options):
            raise ValueError("the separator must be non-empty and not an option")
        self.sep = sep
        self.max_items = max_items

    def initial(self) -> tuple[int, bool]:
        return (0, False)

    def allowed(self, state: tuple[int, bool]) -> tuple[str, ...]:
        items, after_sep = state
        if items == 0 or after_sep:
            return self.options
        return (self.sep,) if items < self.max_items else ()

    def append(self, state: tuple[int, bool], text: str) -> tuple[int, bool]:
        if text not in self.allowed(state):
            raise ValueError(f"Choices: {text!r} is not allowed at {state!r}")
        items, after_sep = state
        if items == 0 or after_sep:
            return (items + 1, False)
        return (items, True)

    def special_allowed(self, state: tuple[int, bool]) -> tuple[str, ...]:
        items, after_sep = state
        return (EOS,) if items > 0 and not after_sep else ()


# ---------------------------------------------------------------------------------------------
# the script: each recognizer under the embedded model
# ---------------------------------------------------------------------------------------------
COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white", "brown", "pink"]


def _balanced(text: str, max_depth: int) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for c in text:
        if c in "([{":
            stack.append(c)
            if len(stack) > max_depth:
                return False
        elif c in pairs:
            if not stack or stack.pop() != pairs[c]:
                return False
        elif not "a" <= c <= "z":
            return False
    return bool(text) and not stack


def main() -> int:
    import json
    import time

    import logitgate
    from logitgate.integrations.generation import generate
    from logitgate.integrations.models import load_model

    model = load_model()
    t = time.perf_counter()
    words = make_words()
    vocabulary = set(words) | set(COLORS)
    word_list = WordList(sorted(vocabulary))
    print(f"WordList: {word_list.n_words} words, {word_list.n_nodes} trie nodes "
          f"(built in {time.perf_counter() - t:.2f} s)")

    def check_word(text: str) -> bool:
        return text in vocabulary

    def check_luhn(text: str) -> bool:
        return 13 <= len(text) <= 19 and luhn_valid(text)

    def check_json(text: str) -> bool:
        json.loads(text)
        return CharJSON().accepts(text)

    cases = [
        ("WordList", word_list, "Pick a color: red, green or blue.", check_word, 8),
        ("Luhn", Luhn(), "Write a 16-digit credit card number for testing.", check_luhn, 24),
        ("Brackets", Brackets(max_depth=4), "Write a short balanced bracket expression such as (a[b]).",
         lambda s: _balanced(s, 4), 40),
        ("CharJSON", CharJSON(), "Return a JSON object with two keys: name and age of a cat.", check_json, 80),
        ("Choices", Choices(["yes", "no", "maybe so"]), "Is the sky blue? Answer yes, no or maybe so.",
         lambda s: s in ("yes", "no", "maybe so"), 8),
    ]
    for name, rec, question, check, max_tokens in cases:
        t = time.perf_counter()
        compiled = logitgate.compile(logitgate.Grammar.from_recognizer(rec), model.tokenizer)
        res = generate(model, [{"role": "user", "content": question}], compiled, max_tokens=max_tokens)
        dt = time.perf_counter() - t
        print(f"{name}: {question}\n  -> {res.text!r}  ({len(res.tokens)} tokens, {res.n_forced} forced, "
              f"{dt:.2f} s, {res.mask_s:.2f} s in masks)")
        assert res.stop_reason == "eos", (name, res.stop_reason, res.text)
        assert check(res.text), (name, res.text)
    # A finite-state recognizer can also be a sub-rule of a grammar (its automaton is explored once)
    t = time.perf_counter()
    grammar = logitgate.Grammar.from_lark('start: "Card: " CARD "\\n"\n%declare CARD',
                                          subgrammars={"CARD": logitgate.Grammar.from_recognizer(Luhn())})
    res = generate(model, [{"role": "user", "content": "Write a test credit card number."}],
                   logitgate.compile(grammar, model.tokenizer), max_tokens=32)
    print(f"Luhn inside a Lark grammar -> {res.text!r}  ({time.perf_counter() - t:.2f} s, compile included)")
    assert res.stop_reason == "eos" and res.text.startswith("Card: ") and check_luhn(res.text[6:-1]), res.text
    print("all recognizers: valid outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
