"""Fuzzing the front ends (issue 9, item 1): regex, Lark, GBNF, yacc and JSON Schema, each through
its ``Grammar.from_*`` constructor and ``logitgate.compile``.

Inputs: hypothesis-generated syntax soup and random grammar structures (the generators of
``tests/grammar_oracles.py``), and mutations of the real inputs in ``../shared/data``
(``tests/fuzz_inputs.py``: span deletion/duplication/swaps, metacharacters, truncation, line
edits; for schemas wrong-typed keyword values, unknown keywords, bogus ``$ref``, huge and
negative numbers and counts, deep nesting). Properties, for every case:

1. only documented errors escape (``LogitgateError`` subclasses), and an error about the input
   says where: ``RegexError.offset``, ``GrammarError.line``/``.rule``, ``SchemaError.pointer``;
2. nothing hangs: each case runs under a SIGALRM time limit (``LOGITGATE_FUZZ_SECONDS``, 10 s);
3. what compiles agrees with an oracle: regex masks and acceptance against an NFA read by
   Python's own ``re`` parser and ``re.fullmatch`` (small vocabulary and the real mistral
   SentencePiece vocabulary); random Lark/yacc/GBNF grammars (mutated) against the references of
   ``tests/grammar_oracles.py`` on every string up to 4 characters; schemas: documents produced
   by walking the matcher validate with ``jsonschema``, and labelled valid instances (that
   ``jsonschema`` also finds valid) are accepted.

Default run: a small sample (~25 s). ``pytest -m slow tests/test_fuzz_frontends.py -s``: thousands
of cases; ``LOGITGATE_FUZZ_SCALE`` multiplies the slow counts (``LOGITGATE_FUZZ_CASES`` fixes the
count per test). With ``-s`` a summary of cases and outcomes per front end is printed at the end;
``LOGITGATE_FUZZ_REPORT=path.json`` writes it as JSON.
"""
from __future__ import annotations

import json
import os
import random
import re
import re._constants as C
import warnings
from decimal import Decimal
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logitgate as lg

from . import fuzz_inputs as fi
from .grammar_oracles import (
    SAMPLE_POOL,
    CharRegex,
    GbnfOracle,
    GreedyReference,
    LarkInfo,
    YaccInfo,
    YaccReference,
    mutate,
    random_gbnf_grammar,
    random_lark_grammar,
    random_yacc_grammar,
)
from .json_schema_helpers import byte_tokenizer, dumps
from .test_grammar_engine import exhaustive_against_reference, exhaustive_compare, synthetic_tokenizer

pytest.importorskip("lark")

pytestmark = [pytest.mark.filterwarnings("ignore::logitgate.errors.GrammarWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

CASE_SECONDS = float(os.environ.get("LOGITGATE_FUZZ_SECONDS", "10"))
TALLY = fi.TALLY


@pytest.fixture(scope="module", autouse=True)
def _summary():
    yield
    print("\n" + TALLY.summary())
    out = os.environ.get("LOGITGATE_FUZZ_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(TALLY.as_json(), f, indent=1)


# -- the harness ------------------------------------------------------------------------------


def check_position(e: lg.LogitgateError, front: str, source: str) -> None:
    """An error about the input must say where (CompileError, e.g. a cap, is about the result)."""
    if isinstance(e, lg.LimitError):  # a cap on the result (DFA states, lexer size): no position to give
        assert e.limit, f"LimitError without the cap it hit: {e}"
    elif isinstance(e, lg.RegexError):
        assert e.offset is not None and 0 <= e.offset <= len(source), f"RegexError without a valid offset: {e}"
    elif isinstance(e, lg.GrammarError):
        assert e.line is not None or e.rule is not None, f"GrammarError without line or rule: {e}"
        if e.line is not None:
            assert 1 <= e.line <= source.count("\n") + 1, f"line {e.line} outside the grammar: {e}"
    elif isinstance(e, lg.SchemaError):
        assert e.pointer is not None or re.search(r"line \d+", e.reason), f"SchemaError without a pointer: {e}"


def run_case(front: str, build: Callable[[], lg.Grammar], tok: lg.Tokenizer, source: str,
             shown: Any = None) -> tuple[lg.Grammar, lg.CompiledGrammar] | None:
    """Build and compile one input under the time limit. Returns the grammar and its compiled
    form, or None after a documented error (tallied); anything else fails, naming the input."""
    shown = source if shown is None else shown
    try:
        with fi.time_limit(CASE_SECONDS, f"{front} input {shown!r:.2000}"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = build()
            compiled = lg.compile(g, tok)
    except lg.LogitgateError as e:
        check_position(e, front, source)
        TALLY.record(front, type(e).__name__)
        return None
    except Exception as e:  # noqa: BLE001 - the property under test
        raise AssertionError(f"{front}: {type(e).__name__} escaped ({e}) for input\n{shown!r:.3000}") from e
    TALLY.record(front, "ok")
    return g, compiled


# -- regexes: oracle --------------------------------------------------------------------------


class ReOracle(CharRegex):
    """``CharRegex`` (Python's ``re`` parser, own NFA) with anchors as no-ops (logitgate accepts
    them only where they are, under full matching) and dead states pruned, so that ``viable``
    is exact: some string of the language starts with the text."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        super().__init__(pattern, flags)
        probe = [chr(c) for c in range(0x800)] + SAMPLE_POOL
        rev: list[list[int]] = [[] for _ in self.edges]
        for s, outs in enumerate(self.edges):
            for cs, t in outs:
                if not cs.negate or any(ch in cs for ch in probe):
                    rev[t].append(s)
            for t in self.eps[s]:
                rev[t].append(s)
        live, todo = {self.final}, [self.final]
        while todo:
            for s in rev[todo.pop()]:
                if s not in live:
                    live.add(s)
                    todo.append(s)
        self.live = frozenset(live)

    def _build_one(self, op, av, flags):
        if op == C.AT:
            a = self._new()
            return a, a
        return super()._build_one(op, av, flags)

    def viable(self, states: frozenset[int]) -> bool:
        return bool(states & self.live)


def regex_mask_check(compiled: lg.CompiledGrammar, pattern: str, flags: int, rng: random.Random,
                     ids: list[int] | None = None, steps: int = 6) -> int:
    """Walk random allowed tokens; at each step the mask equals the oracle's (over ``ids``, or the
    whole vocabulary of decodable tokens) and acceptance equals ``re.fullmatch``. Returns the
    number of token verdicts compared."""
    try:
        oracle = ReOracle(pattern, flags)
    except (NotImplementedError, re.error):  # a construct the oracle NFA does not model
        return 0
    tok = compiled.tokenizer
    texts = {}
    for t in (range(tok.n_tokens) if ids is None else ids):
        b = tok.token_bytes(t)
        if b and t not in tok.special_ids:
            try:
                texts[t] = b.decode("utf-8")
            except UnicodeDecodeError:
                pass
    m = lg.Matcher(compiled)
    prefix, states, n = "", oracle.start, 0
    eos = set(tok.eos_token_ids)
    for _ in range(steps):
        allowed = set(m.allowed_token_ids().tolist())
        accepting = re.fullmatch(pattern, prefix, flags) is not None
        assert m.is_accepting() == accepting, f"acceptance of {prefix!r} under {pattern!r}"
        assert bool(allowed & eos) == accepting, f"EOS after {prefix!r} under {pattern!r}"
        want = set()
        for t, s in texts.items():
            st_ = states
            for ch in s:
                st_ = oracle.step(st_, ch)
                if not st_:
                    break
            if st_ and oracle.viable(st_):
                want.add(t)
        got = allowed & set(texts)
        assert got == want, (f"mask after {prefix!r} under {pattern!r}: extra "
                             f"{[texts[t] for t in sorted(got - want)][:5]}, missing {[texts[t] for t in sorted(want - got)][:5]}")
        n += len(texts)
        choices = sorted(got)
        if not choices:
            break
        t = rng.choice(choices)
        assert m.accept_token(t)
        prefix += texts[t]
        states = oracle.run(prefix)
    return n


REGEX_TOKENS = ["a", "b", "(", ")", "|", "*", "+", "?", "{", "}", ",", "1", "0", "[", "]", "^", "-", "$", ".",
                "\\", ":", "P", "<", ">", "=", "!", "#", "i", " ", "\n", r"\d", r"\w", r"\s", r"\D", r"\b",
                r"\1", "(?:", "(?i)", "(?P<n>", "(?#", r"\x61", r"\A", r"\Z", "(?x)", "(?-i:", r"\0", r"\u0061",
                "{1,2}", "{,", "{99999}", "(?P=n)", "(?<=", "(?s)", "(?a)", "(?i:", "é", "中", "[^", "[a-", "*?",
                "++", r"\p{L}", r"\N{LATIN SMALL LETTER A}", "\x00", "(?>", "(?(1)", "{2,1}"]

SMALL_VOCAB_ALPHABET = "ab01 \n-.é中"


_SMALL_TOK = lg.Tokenizer.from_bytes(
    [b"</s>"] + [c.encode() for c in SMALL_VOCAB_ALPHABET + "AB(){}[]:,\\\t"]
    + [(a + b).encode() for a in "ab01 " for b in "ab01 -."] + ["aé".encode(), "中a".encode(), b"\xc3", b"\xa9"],
    eos_token_id=0, special_ids=[0])


def regex_case(pattern: str, rng: random.Random, front: str = "regex") -> None:
    flags = rng.choice([0, 0, 0, re.IGNORECASE, re.DOTALL, re.VERBOSE, re.ASCII])
    got = run_case(front, lambda: lg.Grammar.from_regex(pattern, flags), _SMALL_TOK, pattern,
                   shown=(pattern, flags))
    if got is None:
        return
    try:
        re.compile(pattern, flags)
    except re.error as e:
        raise AssertionError(f"{pattern!r} (flags {flags}) compiled but re rejects it: {e}") from None
    with fi.time_limit(CASE_SECONDS, f"oracle for {pattern!r}"):
        TALLY.check(front, regex_mask_check(got[1], pattern, flags, rng))


def regex_soup(n_soup: int, n_text: int) -> None:
    """Hypothesis: token soup of regex syntax, and arbitrary text."""

    @settings(max_examples=n_soup, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(REGEX_TOKENS), max_size=10).map("".join), st.randoms(use_true_random=False))
    def soup(pattern, rng):
        regex_case(pattern, rng, "regex (soup)")

    @settings(max_examples=n_text, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
           st.randoms(use_true_random=False))
    def text(pattern, rng):
        regex_case(pattern, rng, "regex (text)")

    soup()
    text()


def test_regex_soup():
    regex_soup(120, 40)


@pytest.mark.slow
def test_regex_soup_many():
    regex_soup(fi.fuzz_cases(1500), fi.fuzz_cases(500))


def regex_mutations(n: int, seed: int) -> None:
    reals = fi.real_regexes()
    if not reals:
        pytest.skip("outlines-core data not found")
    rng = random.Random(f"regex-mut-{seed}")
    for _ in range(n):
        regex_case(fi.mutate_text(rng.choice(reals), rng, fi.REGEX_META), rng, "regex (mutated)")


def test_regex_mutations():
    regex_mutations(80, 0)


@pytest.mark.slow
def test_regex_mutations_many():
    regex_mutations(fi.fuzz_cases(3000), 1)


def regex_real_vocab(tok, n: int, seed: int) -> None:
    """Real and mutated outlines-core regexes on the mistral SentencePiece vocabulary: masks on the
    allowed tokens plus a random sample of the vocabulary, against the oracle."""
    reals = fi.real_regexes()
    if not reals:
        pytest.skip("outlines-core data not found")
    rng = random.Random(f"regex-real-{seed}")
    done = 0
    for i in range(20 * n):
        if done >= n:
            break
        pattern = reals[i % len(reals)] if i < len(reals) and seed == 0 else fi.mutate_text(rng.choice(reals), rng, fi.REGEX_META)
        got = run_case("regex (mistral vocab)", lambda: lg.Grammar.from_regex(pattern), tok, pattern)
        if got is None:
            continue
        m = lg.Matcher(got[1])
        sample = set(rng.sample(range(tok.n_tokens), 400))
        # the ids allowed at the start and after one token are always in the compared set
        sample |= set(m.allowed_token_ids().tolist())
        with fi.time_limit(4 * CASE_SECONDS, f"oracle for {pattern!r}"):
            TALLY.check("regex (mistral vocab)", regex_mask_check(got[1], pattern, 0, rng, ids=sorted(sample), steps=4))
        done += 1
    assert done == n


def test_regex_real_vocabulary(tok_spm):
    regex_real_vocab(tok_spm, 6, 0)


@pytest.mark.slow
def test_regex_real_vocabulary_many(tok_spm):
    regex_real_vocab(tok_spm, fi.fuzz_cases(150), 1)


# -- grammars ---------------------------------------------------------------------------------

GRAMMAR_TOKENS = {
    "lark": ["start", ":", "|", "x", "A", "B", '"a"', '"b"', "/a+/", "/[ab]/i", "(", ")", "[", "]", "*", "+", "?",
             "~", "2", "..", ".2", "->", "%ignore", "%import common.WS", "%declare", "\n", " ", "_r", "?start",
             "A.-1", "{", "}", "//c", "/(?<=a)b/", '"\\x"', "start{x}", "x{a, b}", "%override", "%extend"],
    "gbnf": ["root", "::=", "|", "x", '"a"', '"b"', "[a-c]", "[^a]", "(", ")", "*", "+", "?", "{1,2}", "{0,}", "{3}",
             "\n", " ", "#c", '"\\x41"', '"\\u00e9"', "[\\]]", '"', "[", "{", "}", ".", "-", "\\", "ws", "{2,1}"],
    "yacc": ["%start", "start", "%%", ":", "|", ";", "x", '"a"', '"/a+/"', "'b'", "SKIP", '"/[ ]+/"', "%token", "A",
             "%prec", "%empty", "%left", "\n", " ", "/*", "*/", "//", '"/(/"', "{", "}", "error"],
}
GRAMMAR_BUILD = {"lark": lg.Grammar.from_lark, "gbnf": lg.Grammar.from_gbnf, "yacc": lg.Grammar.from_yacc}


def grammar_soup(kind: str, n: int) -> None:
    """Hypothesis: token soup of one grammar syntax, half of it after a rule head."""

    @settings(max_examples=n, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.sampled_from(GRAMMAR_TOKENS[kind]), max_size=14).map(" ".join))
    def soup(text):
        if kind == "lark" and rng_bool(text):
            text = "start: " + text
        if kind == "gbnf" and rng_bool(text):
            text = "root ::= " + text
        if kind == "yacc" and rng_bool(text):
            text = "%%\nstart : " + text + " ;"
        run_case(f"{kind} (soup)", lambda: GRAMMAR_BUILD[kind](text), SMALL_GRAMMAR_TOK, text)

    soup()


@pytest.mark.parametrize("kind", sorted(GRAMMAR_TOKENS))
def test_grammar_token_soup(kind):
    grammar_soup(kind, 60)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(GRAMMAR_TOKENS))
def test_grammar_token_soup_many(kind):
    grammar_soup(kind, fi.fuzz_cases(1000))


def rng_bool(text: str) -> bool:
    return len(text) % 2 == 0


SMALL_GRAMMAR_TOK = synthetic_tokenizer("abc ")


def grammar_oracle_check(kind: str, src: str, compiled: lg.CompiledGrammar) -> int:
    """Every string over "abc " up to 4 characters against the reference of ``kind`` (0 when the
    reference's own reader cannot read the mutated grammar)."""
    try:
        if kind == "gbnf":
            oracle = GbnfOracle(src)
        elif kind == "lark":
            ref = GreedyReference(LarkInfo(src))
        else:
            ref = YaccReference(YaccInfo(src))
    except Exception:  # noqa: BLE001 - the references' readers only cover the generators' output
        return 0
    if kind == "gbnf":
        return exhaustive_compare(compiled, oracle, "abc ", 4, mask_depth=2)
    return exhaustive_against_reference(compiled, ref, "abc ", 4, mask_depth=2)


RANDOM_GRAMMAR = {"lark": lambda r: random_lark_grammar(r)[0], "yacc": lambda r: random_yacc_grammar(r)[0],
                  "gbnf": random_gbnf_grammar}
MUTATION_ALPHABET = {"lark": list("abc |:[]+*?\"/") + ['"a"', "/a/", "x", "T0"],
                     "gbnf": list("abc |()[]+*?\"") + ['"a"', "x", "{1,2}"],
                     "yacc": list("abc |;:\"") + ['"a"', "x", '"/b+/"']}


def grammar_fuzz(kind: str, n: int, seed: int) -> None:
    """Half: random grammars, mutated (small alphabet: still in the references' reach), checked
    against the reference when they compile. Half: mutated real grammars (properties 1 and 2)."""
    reals = fi.real_grammars(kind)
    if not reals:
        pytest.skip(f"no {kind} grammars in the shared data")
    rng = random.Random(f"{kind}-{seed}")
    names = sorted(reals)
    for i in range(n):
        if i % 2 == 0:
            src = RANDOM_GRAMMAR[kind](rng)
            if rng.random() < 0.7:
                src = mutate(src, rng, MUTATION_ALPHABET[kind])
            got = run_case(f"{kind} (random)", lambda: GRAMMAR_BUILD[kind](src), SMALL_GRAMMAR_TOK, src)
            if got is not None:
                with fi.time_limit(3 * CASE_SECONDS, f"oracle for {kind} grammar {src!r}"):
                    try:
                        TALLY.check(f"{kind} (random)", grammar_oracle_check(kind, src, got[1]))
                    except AssertionError as e:
                        raise AssertionError(f"{kind} grammar:\n{src}\n{e}") from None
        else:
            base = reals[names[rng.randrange(len(names))]]
            src = fi.mutate_lines(base, rng) if rng.random() < 0.3 else fi.mutate_text(base, rng, fi.GRAMMAR_META)
            run_case(f"{kind} (mutated real)", lambda: GRAMMAR_BUILD[kind](src), SMALL_GRAMMAR_TOK, src)


@pytest.mark.parametrize("kind", ["lark", "gbnf", "yacc"])
def test_grammar_mutations(kind):
    grammar_fuzz(kind, {"lark": 24, "gbnf": 40, "yacc": 24}[kind], 0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lark", "gbnf", "yacc"])
def test_grammar_mutations_many(kind):
    grammar_fuzz(kind, fi.fuzz_cases(1000), 1)


# -- JSON Schema ------------------------------------------------------------------------------


def _validator(schema: Any):
    """A ``jsonschema`` validator of the schema's draft, or None when jsonschema finds the schema
    itself invalid or cannot use it (then there is no oracle)."""
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    except Exception:  # noqa: BLE001 - a mutated schema is often not a valid schema
        return None


def _is_valid(validator, doc: Any) -> bool | None:
    try:
        return validator.is_valid(doc)
    except Exception:  # noqa: BLE001 - unresolvable $ref, recursion, Decimal/float mixing, ...
        return None


_WEIGHTS = np.ones(257)
_WEIGHTS[0] = 60.0
for _c in b'"}],':
    _WEIGHTS[_c + 1] = 12.0
for _c in b"{[:":
    _WEIGHTS[_c + 1] = 0.5


def walk_document(compiled: lg.CompiledGrammar, rng: random.Random, max_bytes: int = 400) -> bytes | None:
    """Random allowed bytes (biased towards closing and ending) until EOS; None if too long."""
    m = lg.Matcher(compiled)
    out = bytearray()
    for _ in range(max_bytes):
        allowed = m.allowed_token_ids()
        assert allowed.size, f"empty mask after {bytes(out)!r}"
        w = _WEIGHTS[allowed]
        t = int(allowed[rng.choices(range(allowed.size), weights=w.tolist())[0]])
        if t == 0:
            assert m.is_accepting()
            return bytes(out)
        assert m.accept_token(t)
        out.append(t - 1)
    return None


def schema_oracle_check(g: lg.Grammar, compiled: lg.CompiledGrammar, schema: Any, tests: list[dict],
                        rng: random.Random, front: str, walks: int) -> None:
    validator = _validator(schema)
    if validator is None:
        return
    exact = not g.relaxed

    def number(text: str) -> Decimal | int:
        # 1.0 is an integer from draft 6 on (jsonschema knows that of floats only, not of Decimals);
        # under draft 4 logitgate never writes "3.0" for an integer (test_json_schema checks that).
        d = Decimal(text)
        return int(d) if d.is_finite() and d == d.to_integral_value() else d

    for _ in range(walks):
        doc = walk_document(compiled, rng)
        if doc is None:
            continue
        value = json.loads(doc.decode("utf-8"), parse_float=number)
        ok = _is_valid(validator, value)
        if ok is False and not doc.isascii() and '"pattern' in json.dumps(schema, default=str):
            # patterns are ECMA-262 (\\w, \\d, \\s are ASCII-only there); jsonschema uses Python's
            # re, where they are Unicode: no oracle for non-ASCII text under a pattern
            ok = None
        if exact and ok is not None:
            assert ok, f"generated document {doc[:500]!r} is invalid under {json.dumps(schema, default=str)[:1500]}"
            TALLY.check(front)
    if not dict(g.options).get("strict"):
        return
    fmt = None
    try:
        import jsonschema

        checker = jsonschema.FormatChecker()
        fmt = validator.__class__(schema, format_checker=checker)
    except Exception:  # noqa: BLE001
        return
    used = set(re.findall(r'"format":\s*"([^"]*)"', json.dumps(schema, default=str)))
    if used - set(checker.checkers):  # jsonschema cannot check one (a missing optional package): no oracle
        return
    for test in tests:
        if not test["valid"] or _is_valid(fmt, test["data"]) is not True:
            continue
        m = lg.Matcher(compiled)
        text = dumps(test["data"])
        accepted = m.accept_bytes(text.encode("utf-8", "surrogatepass")) and m.is_accepting()
        assert accepted, f"valid instance {text[:300]!r} rejected by {json.dumps(schema, default=str)[:1500]}"
        TALLY.check(front)


def schema_fuzz(n: int, seed: int, walks: int = 3) -> None:
    rng = random.Random(f"schema-{seed}")
    pool = fi.real_schemas(rng, max(200, n))
    if not pool:
        pytest.skip("no schemas in the shared data")
    tok = byte_tokenizer()
    for i in range(n):
        sid, base, tests = pool[i % len(pool)]
        strict = rng.random() < 0.5
        if i % 5 == 4:  # JSON text with character-level edits
            text = fi.mutate_schema_text(base, rng)
            front = "json_schema (text)"
            run_case(front, lambda: lg.Grammar.from_json_schema(text, strict=strict), tok, text, shown=(sid, text))
            continue
        if i % 5 == 3:  # unmutated: labelled instances apply
            schema, front, order = base, "json_schema (real)", "any"
        else:
            schema, front, order = fi.mutate_schema(base, rng), "json_schema (mutated)", "schema"
            tests = []
        shown = (sid, json.dumps(schema, default=str))
        got = run_case(front, lambda: lg.Grammar.from_json_schema(schema, strict=strict, property_order=order),
                       tok, "", shown=shown)
        if got is not None:
            with fi.time_limit(3 * CASE_SECONDS, f"oracle for {shown!r:.2000}"):
                schema_oracle_check(got[0], got[1], schema, tests, rng, front, walks)


def test_json_schema_mutations():
    schema_fuzz(60, 0)


@pytest.mark.slow
def test_json_schema_mutations_many():
    schema_fuzz(fi.fuzz_cases(2500), 1)


# -- regressions: inputs the fuzzing found ------------------------------------------------------


@pytest.mark.parametrize("schema", [
    # draft 7 ignores keywords beside $ref: a subschema that refers to itself looped forever
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"a": {"type": "string", "$ref": "#/properties/a"}}},
])
def test_schema_self_reference_terminates(schema):
    g = run_case("json_schema (regression)", lambda: lg.Grammar.from_json_schema(schema), byte_tokenizer(), "")
    assert g is not None  # {"$ref": itself} is the true schema, as in 2020-12


def test_schema_ref_that_is_not_a_uri_is_a_schema_error():
    schema = {"allOf": [{"$ref": "http://example.[om/b/d.json"}]}
    with pytest.raises(lg.SchemaError) as e:
        lg.Grammar.from_json_schema(schema)
    assert e.value.pointer == "/allOf/0/$ref"


@pytest.mark.parametrize("src,line,rule", [
    ('start: A\nA: "a" x\nx: "b"', 2, "x"),                      # a rule inside a terminal
    ('start: "a"\n%ignore x\nx: "b"', 2, "x"),                   # ... inside an inline %ignore
    ('start: x\nx: | [A] [A] B+\nA: "a"\nB: "b"', 2, "x"),       # rules defined twice (Lark)
    ('start: "a"\n%import commo (WS)', 2, None),                 # nothing imported
    ('start: "{\\x"', 1, None),                                  # bad escape in a literal
    ('start: "a" WS', 1, "WS"),                                 # a terminal used but not defined
    ('start: "a"\n%ignore', 2, None),                           # an empty %ignore
])
def test_lark_errors_have_positions(src, line, rule):
    with pytest.raises(lg.GrammarError) as e:
        lg.Grammar.from_lark(src)
    assert e.value.line == line, str(e.value)
    if rule is not None:
        assert e.value.rule == rule, str(e.value)
