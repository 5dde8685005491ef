"""Grammar checks (undefined, unproductive, unused rules, empty language), GBNF lexeme merging
and grammar composition."""
from __future__ import annotations

from tests.conftest import SHARED_DATA

import itertools
import warnings

import pytest

import logitgate as lg
from logitgate.grammar.cfg import lower
from logitgate.grammar.lexemes import merge_lexemes


@pytest.fixture(scope="module")
def byte_tok() -> lg.Tokenizer:
    return lg.Tokenizer.from_bytes([bytes([i]) for i in range(256)] + [b""], eos_token_id=256, special_ids=[256])


def accepts(compiled: lg.CompiledGrammar, text: str) -> bool:
    m = lg.Matcher(compiled)
    return m.accept_string(text) and m.is_accepting()


def test_undefined_reference_names_rule_and_line() -> None:
    with pytest.raises(lg.GrammarError) as e:
        lg.compile(lg.Grammar.from_gbnf('root ::= "a" b\nb ::= "x" c\n'), lg.Tokenizer.from_bytes([b"a"], eos_token_id=0))
    assert "'c'" in str(e.value) and "'b'" in str(e.value) and e.value.line == 2


def test_empty_language_is_an_error() -> None:
    g = lg.Grammar.from_gbnf('root ::= "a" root\n')
    with pytest.raises(lg.GrammarError, match="empty"):
        lower(g.ir)


def test_unproductive_and_unused_rules_are_warned_by_name() -> None:
    g = lg.Grammar.from_gbnf('root ::= "a" | "b" loop\nloop ::= "c" loop\nspare ::= "d"\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = lower(g.ir)
    text = " ".join(str(w.message) for w in caught)
    assert all(issubclass(w.category, lg.GrammarWarning) for w in caught)
    assert "loop" in text and "spare" in text
    assert len(cfg.warnings) == 2


def test_unproductive_alternative_is_dropped_so_masks_stay_exact(byte_tok) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lg.GrammarWarning)
        c = lg.compile(lg.Grammar.from_gbnf('root ::= "a" | "b" loop\nloop ::= "c" loop\n'), byte_tok)
    m = lg.Matcher(c)
    assert m.allowed_token_ids().tolist() == [ord("a")]  # "b" could never be completed


def test_json_gbnf_merges_into_lexemes() -> None:
    src = open_data("llama-cpp-grammars/json.gbnf")
    _, cfg, _ = merge_lexemes(lg.Grammar.from_gbnf(src).ir)
    names = {t.name for t in cfg.terminals}
    assert {"<string>", "<number>", "<ws>"} <= names
    assert all(len(n) > 3 or n.startswith("'") for n in names)


def test_c_gbnf_demotes_the_largest_conflicting_lexemes_first() -> None:
    """Runs such as ``identifier ws "="`` conflict with ``identifier`` itself; opening up the run
    (and ``dataType ::= "int" ws``) is enough, so ``identifier`` stays one lexeme instead of being
    parsed a character at a time."""
    src = open_data("llama-cpp-grammars/c.gbnf")
    _, cfg, _ = merge_lexemes(lg.Grammar.from_gbnf(src).ir)
    names = {t.name for t in cfg.terminals}
    assert {"<identifier>", "<number>", "<ws>", "'while'", "'int'"} <= names
    assert "<dataType>" not in names  # "int" ws: the ws would swallow a space before "="


@pytest.mark.parametrize("src, alphabet", [
    ('root ::= [a-z]+ "b"\n', "ab"),
    ('root ::= "a" | "ab" "c"\n', "abc"),
    ('root ::= x "\\n"\nx ::= [a-z]+ ws\nws ::= [ \\n]*\n', "a \n"),
    ('root ::= "int" ws | id ws "=" \nid ::= [a-z]+\nws ::= " "+\n', "int= "),
    ('root ::= s ";" | s ";" root\ns ::= "int" [a-z]+ | [a-z] [a-z0-9]* "="\n', "int=;x"),
])
def test_gbnf_language_is_exact_where_greedy_lexing_would_differ(src, alphabet, byte_tok) -> None:
    """Every string up to length 5 over the alphabet: accepted iff the rules derive it."""
    import re

    c = lg.compile(lg.Grammar.from_gbnf(src), byte_tok)
    oracle = {
        '[a-z]+ "b"': r"[a-z]+b",
        '"a" | "ab" "c"': r"a|abc",
        'x "\\n"': r"[a-z]+[ \n]*\n",
        '"int" ws': r"int +|[a-z]+ +=",
        's ";" root': r"((int[a-z]+|[a-z][a-z0-9]*=);)+",
    }
    pattern = next(v for k, v in oracle.items() if k in src)
    for n in range(1, 6):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            assert accepts(c, s) == bool(re.fullmatch(pattern, s)), s


def test_regex_subgrammar_in_lark(byte_tok) -> None:
    email = lg.Grammar.from_regex(r"[a-z]+@[a-z]+\.com")
    g = lg.Grammar.from_lark('start: "to: " EMAIL ("," EMAIL)*\n%declare EMAIL\n', subgrammars={"EMAIL": email})
    c = lg.compile(g, byte_tok)
    assert accepts(c, "to: ab@cd.com,x@y.com")
    assert not accepts(c, "to: ab@cd.org")
    m = lg.Matcher(c)
    assert m.accept_string("to: ab@") and not m.accept_string("@")


def test_grammar_subgrammar_gbnf_in_gbnf_and_lark(byte_tok) -> None:
    j = lg.Grammar.from_gbnf(open_data("llama-cpp-grammars/json.gbnf"))
    host = lg.Grammar.from_gbnf('root ::= "Answer: " answer "!"\n', subgrammars={"answer": j})
    c = lg.compile(host, byte_tok)
    assert accepts(c, 'Answer: {"a": [1, 2]}!')
    assert not accepts(c, 'Answer: {"a": [1, 2}!')
    lark_host = lg.Grammar.from_lark('start: "x=" JSON\n%declare JSON\n', subgrammars={"JSON": j})
    assert accepts(lg.compile(lark_host, byte_tok), 'x={"a":1}')
    assert host.cache_key != lg.Grammar.from_gbnf('root ::= "Answer: " answer "!"\n', subgrammars={
        "answer": lg.Grammar.from_regex("[0-9]+")}).cache_key


JSON_SUB_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"enum": ["a", "bc"]},
                                                                      "maxItems": 2},
                   "name": {"type": "string", "maxLength": 3}},
    "required": ["id"],
    "additionalProperties": False,
}
JSON_SUB_DOCS = ['{"id":1}', '{"id":12,"tags":["bc","a"]}', '{"id":3,"name":"abc"}', '{"id":0}', '{"id":1,"x":2}',
                 '{"tags":["a"]}', '{"id":2,"tags":["a","a","a"]}', '{"id":2,"name":"abcd"}', '{"id":2,"tags":["b"]}',
                 '{"id":-1}', '{"id":1.5}', '{"id":1}x']


@pytest.mark.parametrize("host", ["lark", "gbnf"])
def test_json_schema_subgrammar(host, byte_tok) -> None:
    """A JSON Schema as a sub-rule: the host's text around a document is accepted exactly when
    ``jsonschema`` accepts the document, and every mask on the way equals a brute-force check of
    each token (bytes, plus tokens that cross the document's start and end)."""
    import json

    import jsonschema

    from tests.grammar_oracles import brute_force_allowed

    sub = lg.Grammar.from_json_schema(JSON_SUB_SCHEMA)
    if host == "lark":
        g = lg.Grammar.from_lark('start: "Answer: " DOC "\\n"\n%declare DOC\n', subgrammars={"DOC": sub})
    else:
        g = lg.Grammar.from_gbnf('root ::= "Answer: " doc "\\n"\n', subgrammars={"doc": sub})
    assert "sub-grammar" in " ".join(g.ir.notes)
    pieces = [bytes([i]) for i in range(256)] + [b" {", b'":', b'}\n', b"1,", b'"a', b'["', b'c"]', b"12"]
    tok = lg.Tokenizer.from_bytes(pieces + [b""], eos_token_id=len(pieces), special_ids=[len(pieces)])
    c = lg.compile(g, tok, cache=False)
    ids_of = {p: i for i, p in enumerate(pieces)}
    for doc in JSON_SUB_DOCS:
        try:
            ok = jsonschema.Draft202012Validator(JSON_SUB_SCHEMA).is_valid(json.loads(doc))
        except json.JSONDecodeError:
            ok = False
        assert accepts(c, f"Answer: {doc}\n") == ok, doc
        if not ok:
            continue
        m = lg.Matcher(c)
        text = f"Answer: {doc}\n".encode()
        k = 0
        while k < len(text):
            allowed = set(m.allowed_token_ids().tolist())
            assert allowed == brute_force_allowed(m, tok), (doc, text[:k])
            two = ids_of.get(text[k:k + 2])
            t = two if two is not None and k % 2 else text[k]  # some steps by a two-byte token
            assert m.accept_token(t)
            k += len(pieces[t])
        assert m.is_accepting()


def test_lenient_json_schema_subgrammar_lists_what_it_relaxed(byte_tok) -> None:
    sub = lg.Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                                      strict=False)
    assert sub.relaxed
    g = lg.Grammar.from_gbnf('root ::= "x=" v\n', subgrammars={"v": sub})
    assert any("relaxed" in n and "uniqueItems" in n for n in g.ir.notes)
    assert accepts(lg.compile(g, byte_tok), "x=[1,2]")


def test_lark_subgrammar_needs_an_uppercase_declared_name() -> None:
    with pytest.raises(lg.GrammarError, match="UPPERCASE"):
        lg.Grammar.from_lark('start: "x" json\n', subgrammars={"json": lg.Grammar.from_regex("a")})


def test_subgrammar_with_its_own_ignored_terminals_is_refused() -> None:
    inner = lg.Grammar.from_lark('start: "a" "b"\n%ignore " "\n')
    with pytest.raises(lg.GrammarError, match="ignore"):
        lg.Grammar.from_gbnf('root ::= "x" sub\n', subgrammars={"sub": inner})


def open_data(rel: str) -> str:

    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"{rel} not available")
    return path.read_text(encoding="utf-8")


def _char_level(grammar: lg.Grammar, tok: lg.Tokenizer) -> lg.CompiledGrammar:
    """The grammar parsed character by character, no lexemes merged: exact by construction."""
    from logitgate.compiler import CompiledCFG

    return CompiledCFG(grammar, tok, lower(grammar.ir, warn=False))


def _prefix_verdicts(compiled: lg.CompiledGrammar, text: str) -> tuple[int, bool]:
    """(bytes accepted before the first refusal, accepting at the end)."""
    m = lg.Matcher(compiled)
    data = text.encode()
    for k in range(len(data)):
        if not m.accept_bytes(data[k:k + 1]):
            return k, False
    return len(data), m.is_accepting()


C_PROGRAM = (  # c.gbnf wants whitespace exactly where it writes ws
    "int sumSquares(int n){// sum of squares\n"
    "int total = 0;int i = 1;while(i<=n){if(i-( i/7 )*7==0){i = i+1;}else{total = total+i*i;"
    "i = i+1;}}for(int k = 0; k<3; k = k+1){total = total-k;}/* done */log (total, n);return total;}"
)


@pytest.mark.parametrize("name, text", [
    ("c.gbnf", C_PROGRAM),
    ("arithmetic.gbnf", "a+b*2=c\n(x-1)/z=y\n"),
    ("json.gbnf", '{"a": [1, -2.5e3, true, null], "b": {"c": "d\\u00e9"}, "e": []}'),
])
def test_merged_lexemes_match_character_level_parsing(name, text, byte_tok) -> None:
    """Merging lexemes never changes the language: on the text and 300 random mutations of it,
    the merged grammar refuses at exactly the byte where character-level parsing does."""
    import random

    g = lg.Grammar.from_gbnf(open_data(f"llama-cpp-grammars/{name}"))
    merged, chars = lg.compile(g, byte_tok), _char_level(g, byte_tok)
    assert _prefix_verdicts(merged, text) == (len(text.encode()), True)
    rng = random.Random(name)
    alphabet = sorted(set(text)) + [" ", "\n", "9", "_"]
    for _ in range(300):
        s = list(text)
        for _ in range(rng.randint(1, 3)):
            op, k = rng.randrange(3), rng.randrange(len(s))
            if op == 0:
                del s[k]
            elif op == 1:
                s.insert(k, rng.choice(alphabet))
            else:
                s[k] = rng.choice(alphabet)
        mutated = "".join(s)
        assert _prefix_verdicts(merged, mutated) == _prefix_verdicts(chars, mutated), mutated


# Every grammar of the three corpora compiles, or fails with a GrammarError naming the
# unsupported construct. Expected failures, and why:
EXPECTED_FAILURES = {
    # indentation tokens come from Lark's Indenter postlexer, which constrained decoding cannot run
    "lark-grammars/examples/advanced/python2.lark": "_INDENT, _DEDENT are declared without a pattern",
    "lark-grammars/lark/grammars/python.lark": "_INDENT, _DEDENT are declared without a pattern",
    "syncode-grammars/python.lark": "_INDENT, _DEDENT are declared without a pattern",
    # lookahead in a terminal's regex: terminals are finite automata
    "lark-grammars/examples/advanced/template_lark.lark": "lookahead",
    "lark-grammars/lark/grammars/lark.lark": "lookahead",
    "lark-grammars/examples/grammars/verilog.lark": "lookahead",
    # terminal libraries meant to be imported: no rules, no start rule
    "lark-grammars/lark/grammars/common.lark": "start rule 'start' is not defined",
    "lark-grammars/lark/grammars/unicode.lark": "start rule 'start' is not defined",
}


def _corpus() -> list[str]:

    root = SHARED_DATA
    files = [*root.glob("llama-cpp-grammars/*.gbnf"), *root.glob("lark-grammars/**/*.lark"),
             *root.glob("syncode-grammars/*.lark")]
    return sorted(str(f.relative_to(root)) for f in files)


@pytest.mark.parametrize("rel", _corpus() or ["(corpus missing)"])
def test_every_corpus_grammar_compiles_or_names_what_is_unsupported(rel, byte_tok) -> None:
    import os

    if rel == "(corpus missing)":
        pytest.skip("shared/data not available")
    path = SHARED_DATA / rel
    src = path.read_text(encoding="utf-8")
    start = "file_input" if path.name in ("python.lark", "python2.lark") else "start"

    def build() -> lg.CompiledGrammar:
        if rel.endswith(".gbnf"):
            return lg.compile(lg.Grammar.from_gbnf(src), byte_tok)
        return lg.compile(lg.Grammar.from_lark(src, start=start, import_paths=[os.path.dirname(path)]), byte_tok)

    if rel in EXPECTED_FAILURES:
        with pytest.raises(lg.GrammarError, match=EXPECTED_FAILURES[rel]):
            build()
    else:
        m = lg.Matcher(build())
        assert m.allowed_token_ids().size > 0  # the language is not empty


@pytest.mark.parametrize("name, text", [
    ("c.gbnf", C_PROGRAM),
    ("arithmetic.gbnf", "a+b*2=c\n(x-1)/z=y\n"),
    ("json.gbnf", '{"a": [1, -2.5e3, true, null], "b": {"c": "d\\u00e9"}, "e": []}'),
])
def test_greedy_gbnf_lexing_only_loses_texts(name, text, byte_tok) -> None:
    """lexing="greedy" (llguidance's way) accepts a subset of the exact language: whatever it
    accepts, exact parsing accepts too; on json.gbnf, where no lexeme can be cut short, they agree."""
    import random

    src = open_data(f"llama-cpp-grammars/{name}")
    exact = lg.compile(lg.Grammar.from_gbnf(src), byte_tok)
    greedy = lg.compile(lg.Grammar.from_gbnf(src, lexing="greedy"), byte_tok)
    rng = random.Random(name)
    alphabet = sorted(set(text)) + [" ", "\n", "9"]
    differ = 0
    for _ in range(200):
        s = list(text)
        for _ in range(rng.randint(0, 2)):
            k = rng.randrange(len(s))
            s[k:k + rng.randint(0, 1)] = [rng.choice(alphabet)]
        mutated = "".join(s)
        g, e = _prefix_verdicts(greedy, mutated), _prefix_verdicts(exact, mutated)
        if g[1]:
            assert e[1], mutated
        differ += g != e
    if name == "json.gbnf":
        assert differ == 0
    if name == "arithmetic.gbnf":
        assert differ > 0  # its ws swallows the newline a line must end with
    with pytest.raises(ValueError, match="lexing"):
        lg.Grammar.from_gbnf(src, lexing="lazy")


def test_greedy_lexing_dead_pairs_are_warned(byte_tok) -> None:
    """`start: /[a-z]+/ "b"`: the b always extends the word, so no text can ever end; the grammar
    compiles with a GrammarWarning naming the pair (early detection of it is a known limit)."""
    with pytest.warns(lg.GrammarWarning, match="'b'"):
        lg.compile(lg.Grammar.from_lark('start: /[a-z]+/ "b"'), byte_tok, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", lg.GrammarWarning)  # a separator that ends the word: no warning
        lg.compile(lg.Grammar.from_lark('start: WORD+\nWORD: /[a-z]+/\n%ignore " "'), byte_tok, cache=False)


def test_unused_rules_are_named_in_every_syntax():
    """Lark's loader and GBNF lexeme merging drop rules the start cannot reach: each is named in a
    GrammarWarning and in Grammar.notes (yacc's are reported by the lowering)."""
    import warnings as _warnings

    import logitgate as lg

    tok = lg.Tokenizer.from_bytes([bytes([i]) for i in range(256)] + [b""], eos_token_id=256)
    cases = [
        (lambda: lg.Grammar.from_lark('start: a\na: "x"\nunused_one: "y"\n'), "unused_one (line 3)"),
        (lambda: lg.Grammar.from_gbnf('root ::= a\na ::= "x"\nb ::= "y"\nc ::= "(" c ")" | "z"\n'), "dropped: b, c"),
    ]
    for make, needle in cases:
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter("always")
            g = make()
            lg.compile(g, tok, cache=False)
        assert any(issubclass(w.category, lg.GrammarWarning) and needle in str(w.message) for w in caught), needle
        assert sum(needle in n for n in g.notes) == 1


# -- grammars whose whole text is one lexeme compile as their DFA --------------------------------

ONE_LEXEME = [
    ("gbnf", None, "llama-cpp-grammars/chess.gbnf", ["1. e4 e5\n2. Nf3 Nc6\n3. O-O-O+ exd8=Q#\n", "1. e4 e5\n"]),
    ("gbnf", None, "llama-cpp-grammars/list.gbnf", ["- apples\n- 東京 x\n", "- a\n"]),
    ("gbnf", 'root ::= ("ab" | [0-9]{2,3})+ "!"?\n', None, ["ab12ab999!", "12"]),
    ("lark", 'start: word\nword: WORD\nWORD: /[a-z]+(-[a-z]+)*/\n', None, ["well-being", "abc"]),
]


@pytest.mark.parametrize("fmt,src,rel,texts", ONE_LEXEME, ids=["chess", "list", "counted", "lark-unit-rules"])
def test_one_lexeme_grammars_compile_as_their_dfa_with_the_parsers_masks(fmt, src, rel, texts, tok_spm) -> None:
    """A grammar that is one lexeme end to end is served by its DFA (no parser); its masks, EOS,
    forced bytes and refusals equal those of the character-level parse, token by token along
    canonical and random tokenizations of valid texts and of texts cut or changed."""
    import random

    from logitgate.compiler import CompiledCFG
    from tests.oracles import random_split_ids

    src = src if src is not None else open_data(rel)
    grammar = getattr(lg.Grammar, "from_" + fmt)(src)
    fast = lg.compile(grammar, tok_spm, cache=False)
    assert type(fast) is lg.CompiledGrammar and not isinstance(fast, CompiledCFG)
    assert f"CompiledGrammar({fmt} compiled as one DFA, states=" in repr(fast)
    exact = _char_level(grammar, tok_spm) if fmt == "gbnf" else CompiledCFG(grammar, tok_spm, lower(grammar.ir))
    rng = random.Random(7)
    bm = lg.allocate_token_bitmask(2, tok_spm.vocab_size)
    for text in texts + [texts[0][:-1], texts[0].replace("e", "%", 1)]:
        for _ in range(3):
            ids = random_split_ids(tok_spm, text.encode(), rng)
            a, b = lg.Matcher(fast), lg.Matcher(exact)
            for t in ids + [tok_spm.eos_token_ids[0]]:
                a.fill_next_token_bitmask(bm, 0)
                b.fill_next_token_bitmask(bm, 1)
                assert (bm[0] == bm[1]).all(), (text, ids, t)
                assert a.is_accepting() == b.is_accepting()
                assert a.find_jump_forward_bytes() == b.find_jump_forward_bytes()
                ok = a.accept_token(t)
                assert ok == b.accept_token(t)
                if not ok:
                    break


@pytest.mark.parametrize("fmt,src", [
    ("gbnf", 'root ::= "(" root ")" | "x"\n'),  # not regular
    ("lark", 'start: A B\nA: /a+/\nB: /b+/\n'),  # two lexemes
    ("lark", 'start: WORD\nWORD: /[a-z]+/\n%ignore " "\n'),  # an ignored terminal around it
    ("gbnf", 'root ::= ""\n'),  # the empty text: no lexeme
])
def test_grammars_of_more_than_one_lexeme_keep_the_parser(fmt, src, byte_tok) -> None:
    from logitgate.compiler import CompiledCFG

    assert isinstance(lg.compile(getattr(lg.Grammar, "from_" + fmt)(src), byte_tok, cache=False), CompiledCFG)
