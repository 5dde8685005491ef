"""ECMA-262 schema patterns (``logitgate.json_schema.ecma``).

* the official JSON-Schema-Test-Suite cases about ``pattern``/``patternProperties`` (drafts 7 and
  2020-12) and about the validity of ECMA regexes (``format: regex``);
* hypothesis: random patterns of a subset where ECMA-262 and Python agree (with ``re.ASCII``),
  anchors anywhere, against ``re.search``; random patterns with ECMA-only constructs against
  ``re.search`` of their translation, on strings with ECMA's special characters;
* hand-checked ECMA semantics, and errors naming the construct's offset in the ECMA pattern.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logitgate.automata.dfa import ByteDFA, regex_dfa
from logitgate.errors import RegexError
from logitgate.json_schema.ecma import ecma_to_python, pattern_node
from tests.conftest import SHARED_DATA

SUITE = SHARED_DATA / "json-schema-test-suite"
SUITE_FILES = ("draft2020-12.jsonl", "draft7.jsonl")


@functools.cache
def search_dfa(pattern: str) -> ByteDFA:
    return regex_dfa(pattern_node(pattern))


def matches(pattern: str, s: str) -> bool:
    return search_dfa(pattern).matches(s.encode())


# ---------------------------------------------------------------------------------------------
# JSON-Schema-Test-Suite
# ---------------------------------------------------------------------------------------------


@functools.cache
def suite_groups() -> list[dict[str, Any]]:
    groups = []
    for name in SUITE_FILES:
        path = SUITE / name
        if path.exists():  # one group per line; not splitlines(): U+2028 occurs inside lines
            lines = path.read_text(encoding="utf-8").split("\n")
            groups += [json.loads(line) for line in lines if line.strip()]
    return groups


def bare(schema: Any) -> Any:
    return {k: v for k, v in schema.items() if k != "$schema"} if isinstance(schema, dict) else schema


def string_pattern(schema: Any) -> str | None:
    """p for ``{"pattern": p}`` or ``{"type": "string", "pattern": p}``."""
    schema = bare(schema)
    if (
        isinstance(schema, dict)
        and set(schema) - {"type"} == {"pattern"}
        and schema.get("type", "string") == "string"
    ):
        return schema["pattern"]
    return None


def key_patterns(schema: Any) -> tuple[set[str], list[str]] | None:
    """(declared names, patterns) when an object is valid iff each key is declared or matches a
    pattern: ``patternProperties`` and ``properties`` with ``true``/``{}`` subschemas and
    ``additionalProperties: false``."""
    schema = bare(schema)
    if not isinstance(schema, dict) or schema.get("additionalProperties") is not False:
        return None
    if set(schema) - {"type", "properties", "patternProperties", "additionalProperties"}:
        return None
    if schema.get("type", "object") != "object" or "patternProperties" not in schema:
        return None
    subs = [*schema.get("properties", {}).values(), *schema["patternProperties"].values()]
    if any(sub not in (True, {}) for sub in subs):
        return None
    return set(schema.get("properties", {})), list(schema["patternProperties"])


def all_patterns(schema: Any) -> list[str]:
    """Every ``pattern`` and ``patternProperties`` key anywhere in a schema."""
    found: list[str] = []
    if isinstance(schema, dict):
        if isinstance(schema.get("pattern"), str):
            found.append(schema["pattern"])
        if isinstance(schema.get("patternProperties"), dict):
            found += list(schema["patternProperties"])
        for value in schema.values():
            found += all_patterns(value)
    elif isinstance(schema, list):
        for value in schema:
            found += all_patterns(value)
    return found


UNSUPPORTED_SUITE_CASES: dict[str, str] = {}
"""Suite case id -> why it cannot be supported (none at present)."""

STRING_CASES = [
    pytest.param(string_pattern(g["schema"]), t["data"], t["valid"], id=f"{g['id']}:{t['description']}")
    for g in suite_groups()
    if string_pattern(g["schema"]) is not None
    for t in g["tests"]
    if isinstance(t["data"], str)
]
KEY_CASES = [
    pytest.param(*key_patterns(g["schema"]), t["data"], t["valid"], id=f"{g['id']}:{t['description']}")
    for g in suite_groups()
    if key_patterns(g["schema"]) is not None
    for t in g["tests"]
    if isinstance(t["data"], dict)
]
REGEX_FORMAT_CASES = [
    pytest.param(t["data"], t["valid"], id=f"{g['id']}:{t['description']}")
    for g in suite_groups()
    if g["file"].endswith("format/ecmascript-regex.json")
    for t in g["tests"]
]
SUITE_PATTERNS = sorted({p for g in suite_groups() for p in all_patterns(g["schema"])})


def skip_unsupported(case_id: str) -> None:
    if case_id in UNSUPPORTED_SUITE_CASES:
        pytest.skip(UNSUPPORTED_SUITE_CASES[case_id])


def test_suite_is_there() -> None:
    if not suite_groups():
        pytest.skip(f"JSON-Schema-Test-Suite not found under {SUITE}")
    assert len(STRING_CASES) >= 40 and len(KEY_CASES) >= 20 and len(REGEX_FORMAT_CASES) >= 10


@pytest.mark.parametrize(("pattern", "data", "valid"), STRING_CASES)
def test_suite_string_pattern(request: pytest.FixtureRequest, pattern: str, data: str, valid: bool) -> None:
    skip_unsupported(request.node.callspec.id)
    assert matches(pattern, data) == valid
    assert (re.search(ecma_to_python(pattern), data) is not None) == valid


@pytest.mark.parametrize(("names", "patterns", "data", "valid"), KEY_CASES)
def test_suite_property_names(
    request: pytest.FixtureRequest, names: set[str], patterns: list[str], data: dict, valid: bool
) -> None:
    skip_unsupported(request.node.callspec.id)
    assert all(k in names or any(matches(p, k) for p in patterns) for k in data) == valid


@pytest.mark.parametrize(("pattern", "valid"), REGEX_FORMAT_CASES)
def test_suite_regex_validity(pattern: str, valid: bool) -> None:
    """Invalid ECMA regexes are refused as such; valid ones compile or are refused as
    unsupported (lookbehind, backreferences)."""
    try:
        ecma_to_python(pattern)
    except RegexError as e:
        assert e.pattern == pattern and e.offset is not None
        assert ("not supported" in e.reason) == valid, e.reason
    else:
        assert valid


@pytest.mark.parametrize("pattern", SUITE_PATTERNS)
def test_suite_patterns_compile(pattern: str) -> None:
    search_dfa(pattern)
    re.compile(ecma_to_python(pattern))


# ---------------------------------------------------------------------------------------------
# Hypothesis: random patterns
# ---------------------------------------------------------------------------------------------

SAFE_ATOMS = ["a", "b", "c", "1", "_", "-", "\\-", ".", "\\.", " ", "[ab]", "[^a]", "[a-c]",
              "[_-]", "[.é]", "é", "😀", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\t"]
SAFE_ALPHABET = "abc1_- é😀\t."
QUANTIFIERS = ["*", "+", "?", "{2}", "{0,2}", "{1,}", "{2,3}", "*?", "+?", "??", "{1,2}?"]


def pattern_strategy(atoms: list[str]) -> st.SearchStrategy[str]:
    leaves = st.one_of(st.sampled_from(atoms), st.sampled_from(["^", "$"]))

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        seq = st.lists(children, min_size=2, max_size=3).map("".join)
        alt = st.lists(children, min_size=2, max_size=3).map(lambda xs: "(?:" + "|".join(xs) + ")")
        group = st.tuples(st.sampled_from(["(", "(?:", "(?<g>"]), children).map(lambda t: t[0] + t[1] + ")")
        quantified = st.tuples(children, st.sampled_from(QUANTIFIERS)).map(lambda t: f"(?:{t[0]}){t[1]}")
        return st.one_of(seq, alt, group, quantified)

    def no_duplicate_names(p: str) -> str:
        parts = p.split("(?<g>")
        return parts[0] + "".join(f"(?<g{i}>" + part for i, part in enumerate(parts[1:]))

    return st.recursive(leaves, extend, max_leaves=8).map(no_duplicate_names)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(SAFE_ATOMS), texts=st.lists(st.text(SAFE_ALPHABET, max_size=6), min_size=10, max_size=10))
def test_safe_subset_against_re_search(pattern: str, texts: list[str]) -> None:
    python = re.compile(pattern.replace("(?<g", "(?P<g"), re.ASCII)
    translated = re.compile(ecma_to_python(pattern))
    dfa = regex_dfa(pattern_node(pattern))
    for s in texts:
        expected = python.search(s) is not None
        assert dfa.matches(s.encode()) == expected, (pattern, s)
        assert (translated.search(s) is not None) == expected, (pattern, s)


SHORT_STRINGS = ["".join(p) for n in range(4) for p in itertools.product("ab", repeat=n)]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(["a", "b", "^$", "(?:)", "[^\\s\\S]"]))
def test_anchors_anywhere_against_re_search(pattern: str) -> None:
    """Anchor-dense patterns (in alternatives, optional and repeated groups) on every short
    string: the flavour bookkeeping of :func:`pattern_node` against ``re``'s backtracking."""
    python = re.compile(pattern.replace("(?<g", "(?P<g"))
    dfa = regex_dfa(pattern_node(pattern))
    for s in SHORT_STRINGS:
        assert dfa.matches(s.encode()) == (python.search(s) is not None), (pattern, s)


# (\0 in a group: before a digit atom it would read as the legacy octal escape \01, which is refused)
ECMA_ATOMS = SAFE_ATOMS + ["[^]", "[]", "\\cJ", "\\cm", "(?:\\0)", "\\/", "\\u{e9}", "\\u00E9",
                           "\\uD83D\\uDE00", "\\x0a", "\\p{L}", "\\P{Ll}", "\\p{Zs}", "[\\s\\d]",
                           "[^\\s]", "[\\w-.]", "\\n", "\\r", "\\v", "\\f", "[\\b]", "]", "{", "a{,2}"]
ECMA_ALPHABET = SAFE_ALPHABET + "\n\r\u2028\u2029\u00a0\ufeff\u000b\x0c\x08\x00/Aπ]{,\u0085\x1c"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=pattern_strategy(ECMA_ATOMS), texts=st.lists(st.text(ECMA_ALPHABET, max_size=6), min_size=10, max_size=10))
def test_ecma_constructs_against_translation(pattern: str, texts: list[str]) -> None:
    translated = re.compile(ecma_to_python(pattern))
    dfa = regex_dfa(pattern_node(pattern))
    for s in texts:
        assert dfa.matches(s.encode()) == (translated.search(s) is not None), (pattern, s)


# ---------------------------------------------------------------------------------------------
# ECMA semantics, by hand
# ---------------------------------------------------------------------------------------------

ECMA_SPACES = "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2005\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
SEMANTICS = [
    ("^abc$", ["abc"], ["abc\n", "xabc", "ab"]),
    ("a.c", ["abc", "a😀c", "a\x0bc"], ["a\nc", "a\rc", "a\u2028c", "a\u2029c", "ac"]),
    ("^[^]$", ["\n", "😀", "\u2028"], ["", "ab"]),
    ("[]", [], ["", "a"]),
    ("^[]?$", [""], ["a"]),
    ("^\\s$", list(ECMA_SPACES), ["\x1c", "\u200b", "\u0085", "\u180e", "a", ""]),
    ("^\\S$", ["\x1c", "\u0085", "a"], list(ECMA_SPACES)),
    ("^\\w+$", ["aZ_09"], ["é", "ſ", "\u212a"]),
    ("^\\d$", ["0", "9"], ["٣", "a"]),
    ("^\\D$", ["٣", "a"], ["0"]),
    ("^\\cJ\\cj$", ["\n\n"], ["cJcj"]),
    ("^\\0$", ["\x00"], ["0"]),
    ("^\\/\\-\\.$", ["/-."], []),
    ("^(?<year>\\d{4})-(?<$m>\\d{2})$", ["2024-01"], ["24-01"]),
    ("^\\u{1F600}$", ["😀"], ["u{1F600}"]),
    ("^\\uD83D\\uDE00$", ["😀"], ["\\uD83D\\uDE00"]),
    ("^[\\uD83D\\uDE00-\\uD83D\\uDE02]$", ["😀", "😂"], ["😃"]),
    ("^\\uD83D$", [], ["😀", "\ufffd", ""]),
    ("^.$", ["😀", "a"], ["😀😀", "\n"]),
    ("^\\p{Lu}\\P{Lu}$", ["Ab", "É1"], ["AB", "ab"]),
    ("^\\p{L}$", ["π", "a"], ["1"]),
    ("^\\p{gc=Nd}$", ["৪", "1"], ["a"]),
    ("^\\p{General_Category=Letter}$", ["a"], ["1"]),
    ("^\\p{Any}$", ["😀"], [""]),
    ("^\\p{ASCII}+$", ["abc"], ["é"]),
    ("^[\\w-.]+$", ["-.a"], ["+"]),
    ("^a{,2}$", ["a{,2}"], ["a", "aa"]),
    ("^]}{$", ["]}{"], []),
    ("^x{$", ["x{"], ["x"]),
    ("^[\\b]$", ["\b"], ["b"]),
    ("(?:^|,)a(?:,|$)", ["a", "x,a", "a,y", "x,a,y"], ["ba", "ab", "x,ab"]),
    ("^(a|$)", ["a", "", "ab"], ["b"]),
    ("a$|^b", ["xa", "bx"], ["ax", "xb"]),
    ("(a$)(^b)", [], ["ab", "a", "b", ""]),
    ("$^", [""], ["a"]),
    ("(?:a|^)b", ["b", "ab", "xab"], ["xb"]),
    ("x(^)?y", ["xy"], ["x"]),
    ("(^a|b)+c$", ["ac", "abbc", "bc", "xbc"], ["xac", "ca"]),
    ("(?:^)*a", ["a", "ba"], ["b"]),
    ("(^$|a){2}", ["", "aa", "xaa"], ["a", "b"]),
    ("a+?$", ["aa"], ["ab"]),
]


@pytest.mark.parametrize(("pattern", "good", "bad"), SEMANTICS)
def test_ecma_semantics(pattern: str, good: list[str], bad: list[str]) -> None:
    translated = re.compile(ecma_to_python(pattern))
    for s in good:
        assert matches(pattern, s) and translated.search(s), (pattern, s)
    for s in bad:
        assert not matches(pattern, s) and not translated.search(s), (pattern, s)


def test_property_letter_is_unicode_letters() -> None:
    letters = {chr(c) for c in range(0x3000) if unicodedata.category(chr(c)).startswith("L")}
    translated = re.compile(ecma_to_python("^\\p{Letter}$"))
    assert {chr(c) for c in range(0x3000) if translated.match(chr(c))} == letters


def test_translation_examples() -> None:
    assert ecma_to_python("^abc$") == "\\Aabc\\Z"
    assert ecma_to_python("(?<name>x)") == "(?P<name>x)"
    assert ecma_to_python("\\d{2,3}?") == "[0-9]{2,3}?"
    assert ecma_to_python("[^]") == "(?s:.)"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

ERRORS = [
    ("x(?<!a)b", 1, "lookbehind"),
    ("(?<=a)b", 0, "lookbehind"),
    ("(a)\\1", 3, "backreference"),
    ("a\\01", 1, "octal"),
    ("(?<n>a)\\k<n>", 7, "backreference"),
    ("a\\bc", 1, "word boundary"),
    ("a\\B", 1, "word boundary"),
    ("[z-a]", 1, "out of order"),
    ("a{3,2}", 1, "out of order"),
    ("abc)", 3, "unmatched"),
    ("a(bc", 1, "unterminated group"),
    ("a[bc", 1, "unterminated character class"),
    ("a\\", 1, "end of pattern"),
    ("*a", 0, "nothing to repeat"),
    ("a{2}", None, None),
    ("{2}", 0, "nothing to repeat"),
    ("a**", 2, "nothing to repeat"),
    ("a^*", 2, "nothing to repeat"),
    ("\\p{Foo}", 0, "property"),
    ("x\\p{Script=Latin}", 1, "property"),
    ("x\\pL", 1, "\\p must be followed"),
    ("(?<1a>x)", 0, "group name"),
    ("(?<a>x)(?<a>y)", 7, "duplicate"),
    ("a{1001}", 1, "MAX_REPEAT"),
    ("(?P<n>x)", 0, "Python syntax"),
    ("a(?i)b", 1, "inline flags"),
    ("a(?i:b)", 1, "modifier"),
    ("(?#c)", 0, "comments"),
    ("\\u{110000}", 0, "code point"),
    ("ab\\q", 2, "invalid escape"),
    ("\\Z", 0, "invalid escape"),
    ("\\c1", 0, "\\c"),
    ("\\x4", 0, "incomplete"),
    ("é\\u12", 1, "incomplete"),
]


@pytest.mark.parametrize(("pattern", "offset", "fragment"), ERRORS)
def test_errors_name_the_construct(pattern: str, offset: int | None, fragment: str | None) -> None:
    if fragment is None:
        ecma_to_python(pattern)
        return
    for convert in (ecma_to_python, pattern_node):
        with pytest.raises(RegexError) as info:
            convert(pattern)
        assert info.value.pattern == pattern
        assert info.value.offset == offset
        assert fragment in info.value.reason


# ---------------------------------------------------------------------------------------------
# Lookaheads (top-level, and tempered repetitions before the final '$'), against re.search
# ---------------------------------------------------------------------------------------------

LOOKAHEAD_PATTERNS = [
    # from JSONSchemaBench schemas
    r"^(?!@@)[\w@]+$",
    r"^(?![i|I][o|O][b|B][r|R][o|O][k|K][e|E][r|R])",
    r"^(?!^lucene\.|builtin\.|mongodb\.).*",
    r"^(?!interactive|name|style).+$",
    r"^((?!mode)(?!Mode).)*$",
    r"^(?!tag|category)$",
    r"^(?=[^=]+$)(?!\s+$)(.|\n)+$",
    r"((?:[^/]*/)*)(?=\.(yaml|yml|json))",
    r"^(?!org\.bukkit\.)([a-zA-Z_$][a-zA-Z\d_$]*\.)*[a-zA-Z_$][a-zA-Z\d_$]*$",
    r"^((?!(c|C)(l|L)(y|Y)(d|D)(e|E)).)*$",
    # more shapes
    r"^(?=.*\d)(?=.*[a-z]).{3,}$",
    r"a(?!b)",
    r"(?=ab)a",
    r"x(?=y$)",
    r"^(?:(?=a).)*$",
    r"x((?!ab).)*$",
    r"^((?!a$).)*$",
    r"^(?!(False|None|and)$)[a-z]+$",
    r"a^(?=b)",
]


@pytest.mark.parametrize("pattern", LOOKAHEAD_PATTERNS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lookaheads_against_re_search(pattern: str, data: st.DataObject) -> None:
    alphabet = sorted(set(pattern) | set("ab .\nxyz/@-"))
    texts = data.draw(st.lists(st.text(alphabet=alphabet, max_size=14), min_size=1, max_size=20))
    translated = re.compile(ecma_to_python(pattern))
    for text in texts:
        assert matches(pattern, text) == (translated.search(text) is not None), text


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a(?=b))", "top-level sequence"),
    (r"^(a|(?!b)c)$", "top-level sequence"),
    (r"a(?=b)*", "cannot follow a lookahead"),
    (r"^a$(?=b)", "anchor before a lookahead"),
    (r"a(?=^b)", "'^' beside a lookahead"),
    (r"(?<=a)b", "lookbehind"),
])
def test_lookaheads_that_are_not_supported_say_where(pattern: str, reason: str) -> None:
    with pytest.raises(RegexError) as e:
        pattern_node(pattern)
    assert reason in e.value.reason and e.value.pattern == pattern and e.value.offset is not None
    if "cannot follow" not in reason:
        assert "not supported" in e.value.reason  # so that a schema relaxes it (reported) rather than failing


def test_a_schema_with_a_lookahead_pattern_is_exact(tok_spm) -> None:
    import logitgate

    schema = {"type": "object", "patternProperties": {r"^(?!@@)[\w@]+$": {"type": "integer"}},
              "additionalProperties": False}
    g = logitgate.Grammar.from_json_schema(schema, strict=True)
    assert not g.relaxed
    compiled = logitgate.compile(g, tok_spm)
    for text, ok in ((b'{"a@b":1}', True), (b'{"@@x":1}', False), (b'{"@x":2}', True)):
        m = logitgate.Matcher(compiled)
        assert (m.accept_bytes(text) and m.is_accepting()) == ok, text
