"""AICI's pyctrl scripting API (``import pyaici.server as aici``) on logitgate's controller runner:
scripts driven by ``run_controller`` over a deterministic wishful model on the SentencePiece
vocabulary, the constraints (checked against ``re``, the options, a word-substring oracle), labels
and backtracking, forks by replay (nested ones too), variables, checks, logs, and AICI's samples."""
from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import logitgate
from logitgate.controllers import ControllerHost, VariableStore, run_controller
from logitgate.controllers import scripting

from .conftest import SHARED_DATA

SAMPLES = SHARED_DATA / "aici" / "pyctrl-samples"


class WishModel:
    """A ``Model`` with wishes: ``rules`` are (trigger, answer) texts; after the last occurrence of
    a trigger in the whole sequence (prompt included) it wants to write the answer, then EOS. Of
    the rules whose answer still fits what follows its trigger, the latest trigger wins; with no
    such rule it wants EOS. Each step it prefers the longest token that continues the wish;
    the texts in ``prefer`` come next; everything else gets the same low logit (so under a mask
    that refuses all of these, the lowest allowed id wins: deterministic). Text is tokenized by
    greedy longest match."""

    def __init__(self, tokenizer: logitgate.Tokenizer, rules: list[tuple[str, str]],
                 prefer: tuple[str, ...] = ()) -> None:
        self.name = "wish"
        self.tokenizer = tokenizer
        self.rules = [(a.encode(), b.encode()) for a, b in rules]
        self.prefer = [p.encode() for p in prefer]
        self._ids: list[int] = []
        self._by: dict[bytes, int] = {}
        for i in range(tokenizer.n_tokens - 1, -1, -1):  # the highest id of equal bytes: not byte fallback
            t = tokenizer.tokens[i]
            if i not in tokenizer.special_ids and t:
                self._by.setdefault(t, i)
        self._maxlen = max(map(len, self._by))
        self.forwards = 0

    @property
    def n_past(self) -> int:
        return len(self._ids)

    def encode(self, text: str) -> list[int]:
        return self.encode_bytes(text.encode()) or []

    def encode_bytes(self, data: bytes) -> list[int] | None:
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._maxlen, len(data) - i), 0, -1):
                t = self._by.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                return None
        return out

    def chat_prompt(self, messages):
        return self.encode(" ".join(m["content"] for m in messages))

    def reset(self) -> None:
        self._ids = []

    def truncate(self, n: int) -> None:
        del self._ids[n:]

    def wish(self) -> bytes:
        text = self.tokenizer.decode_bytes(self._ids)
        best: tuple[int, bytes] | None = None
        for trigger, answer in self.rules:
            k = text.rfind(trigger)
            if k < 0:
                continue
            end = k + len(trigger)
            done = text[end:]
            if answer.startswith(done) and (best is None or end > best[0]):
                best = (end, answer[len(done):])
        return b"" if best is None else best[1]

    def forward(self, tokens) -> np.ndarray:
        self.forwards += 1
        self._ids.extend(int(t) for t in tokens)
        rest = self.wish()
        logits = np.full(self.tokenizer.vocab_size, -10.0, dtype=np.float32)
        for p in self.prefer:
            logits[self._by[p]] = -5.0
        if not rest:
            logits[self.tokenizer.eos_token_ids[0]] = 10.0
            return logits
        for n in range(1, min(self._maxlen, len(rest)) + 1):
            t = self._by.get(rest[:n])
            if t is not None:
                logits[t] = n
        return logits


@pytest.fixture(autouse=True)
def _checks_assert():
    scripting.CHECKS = "assert"
    yield
    scripting.CHECKS = "assert"


def run(tok, source: str, rules, prompt: str = "Hi", max_tokens: int = 400, **kw):
    source = textwrap.dedent(source)
    return run_controller(scripting.script_factory(source, "<test-script>"), WishModel(tok, rules), prompt,
                          max_tokens=max_tokens, **kw)


def run_file(tok, path: Path, rules, prompt: str = "Hi", max_tokens: int = 2000, prefer: tuple[str, ...] = ()):
    return run_controller(scripting.load_script(path), WishModel(tok, rules, prefer), prompt, max_tokens=max_tokens)


def only(res):
    (seq,) = res.sequences
    assert seq.error is None, seq.log
    return seq


def word_substrings(text: str) -> set[str]:
    words = text.split(" ")
    return {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}


# -- generation under constraints --------------------------------------------------------------


def test_fixed_tokens_and_regex(tok_spm):
    src = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("Phone:")
            await aici.gen_text(regex=r" \\d{3}-\\d{4}", store_var="good", max_tokens=10)
            await aici.FixedTokens(" Other:")
            await aici.gen_text(regex=r" \\d{3}-\\d{4}", store_var="forced", max_tokens=10)
        aici.start(main())
    """
    res = run(tok_spm, src, [("Phone:", " 555-1234 and more"), ("Other:", " call me maybe")])
    seq = only(res)
    assert res.variables["good"] == b" 555-1234"
    forced = res.variables["forced"].decode()
    assert re.fullmatch(r" \d{3}-\d{4}", forced) and forced != " call me maybe"
    assert seq.text == "Phone: 555-1234 Other:" + forced
    assert tok_spm.eos_token_ids[0] not in seq.tokens  # the regex forced the end: no EOS step was sampled
    assert "FIXED 'Phone:'" in seq.log and "GEN ' 555-1234'" in seq.log


def test_options_yacc_and_max_tokens(tok_spm):
    src = """
        import pyaici.server as aici
        G = '''
        %start expr
        %%
        expr: term | expr "+" term ;
        term: "/[0-9]+/" ;
        '''
        async def main():
            await aici.FixedTokens("Five")
            await aici.gen_tokens(options=[" pounds", " euros", " dollars"], store_var="a")
            await aici.FixedTokens(" or")
            await aici.gen_tokens(options=[" pounds", " euros", " dollars"], store_var="b")
            await aici.FixedTokens(" Sum:")
            await aici.gen_text(yacc=G, store_var="sum", max_tokens=20)
            await aici.FixedTokens(" Bad:")
            await aici.gen_text(yacc=G, store_var="bad", max_tokens=6)
            await aici.FixedTokens(" Long:")
            toks = await aici.gen_tokens(max_tokens=3, store_var="long")
            aici.set_var("n_long", str(len(toks)))
        aici.start(main())
    """
    rules = [("Five", " euros"), (" or", " yen"), ("Sum:", "12+345"), ("Bad:", "1+x"),
             ("Long:", " one two three four five six seven")]
    res = run(tok_spm, src, rules)
    only(res)
    v = res.variables
    assert v["a"] == b" euros"
    assert v["b"].decode() in {" pounds", " euros", " dollars"}
    assert v["sum"] == b"12+345"
    assert re.fullmatch(r"\d+(\+\d+)*\+?", v["bad"].decode()) and b"x" not in v["bad"]
    assert v["n_long"] == b"3" and v["long"] == b" one two three"


def test_substring_and_stop_at(tok_spm):
    src = """
        import pyaici.server as aici
        TEXT = "the quick brown fox jumps over the lazy dog"
        async def main():
            await aici.FixedTokens("Say:")
            await aici.gen_text(stop_at="\\n", max_tokens=20, store_var="line")
            await aici.FixedTokens("Quote: \\"")
            await aici.gen_text(substring=TEXT, store_var="q1", max_tokens=30)
            await aici.FixedTokens(" Again: \\"")
            await aici.gen_text(substring=TEXT, store_var="q2", max_tokens=60)
        aici.start(main())
    """
    rules = [("Say:", " abc\ndef ghi"), ('Quote: "', 'brown fox jumps"'), ('Again: "', 'quick red fox"')]
    res = run(tok_spm, src, rules)
    only(res)
    v = res.variables
    assert v["line"].startswith(b" abc\n") and b"def" not in v["line"]
    assert v["q1"] == b'brown fox jumps"'
    q2 = v["q2"].decode()
    subs = word_substrings("the quick brown fox jumps over the lazy dog")
    assert q2.endswith('"') and q2[:-1] in subs and q2.startswith("quick ") and "red" not in q2


def test_json_schema_and_lark_extensions(tok_spm):
    src = """
        import pyaici.server as aici
        SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                  "additionalProperties": False}
        async def main():
            await aici.FixedTokens("JSON:")
            await aici.gen_text(json_schema=SCHEMA, store_var="doc", max_tokens=20)
            await aici.FixedTokens(" Lark:")
            await aici.gen_text(lark='start: "yes" | "no"', store_var="yn", max_tokens=5)
        aici.start(main())
    """
    res = run(tok_spm, src, [("JSON:", '{"a":12}'), ("Lark:", "maybe")])
    only(res)
    assert json.loads(res.variables["doc"]) == {"a": 12}
    assert res.variables["yn"] in (b"yes", b"no")


def test_a_custom_recognizer_in_gen_text_and_a_failing_one_ends_only_its_branch(tok_spm):
    src = """
        import pyaici.server as aici
        class Pin:                       # exactly four ASCII digits
            def initial(self): return 0
            def byte_allowed(self, n, b): return 48 <= b <= 57 and n < 4
            def append(self, n, b): return n + 1
            def special_allowed(self, n, token): return token == "eos" and n == 4
        class Broken(Pin):
            def byte_allowed(self, n, b): raise ValueError("no bytes today")
        async def main():
            await aici.FixedTokens("PIN:")
            i = await aici.fork(2)
            if i == 0:
                await aici.gen_text(recognizer=Pin(), store_var="pin", max_tokens=8)
            else:
                await aici.gen_text(recognizer=Broken(), store_var="never", max_tokens=8)
        aici.start(main())
    """
    res = run(tok_spm, src, [("PIN:", "12ab3456")])
    ok, bad = res.sequences
    assert ok.error is None, ok.log
    pin = res.variables["pin"]  # the model wants "12ab...": the recognizer keeps it to four digits
    assert re.fullmatch(rb"[0-9]{4}", pin) and pin.startswith(b"12") and ok.text.endswith(pin.decode()), pin
    assert "never" not in res.variables
    assert bad.stop_reason == "error" and "Broken.byte_allowed() raised ValueError: no bytes today" in bad.error


# -- labels, prompt, noop, checks, logs ----------------------------------------------------------


LABEL = """
    import pyaici.server as aici
    async def main():
        await aici.FixedTokens("The word 'hello' in")
        l = aici.Label()
        await aici.FixedTokens(" French is", following=l)
        await aici.gen_tokens(regex=r' "[^"]+"', store_var="french", max_tokens=5)
        aici.set_var("since", l.text_since())
        await aici.FixedTokens(" German is", following=l)
        await aici.gen_tokens(regex=r' "[^"]+"', store_var="german", max_tokens=5)
    aici.start(main())
"""


def test_label_backtracking_replaces_the_first_answer(tok_spm):
    res = run(tok_spm, LABEL, [(" French is", ' "bonjour"'), (" German is", ' "hallo"')])
    seq = only(res)
    assert res.variables["french"] == b' "bonjour"' and res.variables["german"] == b' "hallo"'
    assert res.variables["since"] == b' French is "bonjour"'
    assert seq.text == "The word 'hello' in German is \"hallo\""
    assert "bonjour" not in seq.text and "BACKTRACK" in seq.log


def test_get_prompt_noop_and_tokens(tok_spm):
    src = """
        import pyaici.server as aici
        async def main():
            p = await aici.GetPrompt()
            aici.set_var("prompt", aici.detokenize(p))
            aici.set_var("plen", str(aici.get_prompt_len()))
            assert aici.AiciAsync.instance is not None
            await aici.FixedTokens("a")
            await aici.Noop()
            await aici.Noop()
            n = len(aici.get_tokens())
            await aici.Noop()
            await aici.FixedTokens("b")
            aici.set_var("grew", str(len(aici.get_tokens()) - n))
        aici.start(main())
    """
    model_prompt = "Tell me something"
    res = run(tok_spm, src, [], prompt=model_prompt)
    seq = only(res)
    assert res.variables["prompt"] == model_prompt.encode()
    assert int(res.variables["plen"]) == len(WishModel(tok_spm, []).encode(model_prompt))
    assert seq.text == "ab" and res.variables["grew"] == b"1"


@pytest.mark.parametrize("mode", ["assert", "report"])
def test_check_vars_assert_or_report(tok_spm, mode):
    src = """
        import pyaici.server as aici
        async def main():
            aici.set_var("x", "1")
            await aici.FixedTokens("go")
            aici.check_vars({"x": "1"})
            aici.check_vars({"x": "2"})
            aici.check_var("nope", "3")
            print("after checks")
        aici.test(main())
    """
    scripting.CHECKS = mode
    (seq,) = run(tok_spm, src, []).sequences
    if mode == "assert":
        assert seq.stop_reason == "error" and "AssertionError: Variable x: '1' != '2'" in seq.log
        assert "after checks" not in seq.log and "TEST OK" not in seq.log
    else:
        assert seq.error is None
        assert "CHECK FAILED Variable x: '1' != '2'" in seq.log and "CHECK FAILED Variable nope is unset" in seq.log
        assert "CHECK FAILED Variable x: '1' != '1'" not in seq.log
        assert seq.log.index("after checks") < seq.log.index("TEST OK")


def test_print_goes_to_the_log_not_stdout(tok_spm, capsys):
    src = """
        import pyaici.server as aici
        print("loading the script")
        async def main():
            print("inside the coroutine")
            await aici.FixedTokens("x")
            print("after a step")
        aici.start(main())
    """
    seq = only(run(tok_spm, src, []))
    out = capsys.readouterr().out
    for line in ("loading the script", "inside the coroutine", "after a step", "FIXED 'x'"):
        assert line in seq.log and line not in out


def test_log_level_is_per_script(tok_spm):
    noisy = """
        import pyaici.server as aici
        aici.log_level = 2
        async def main():
            await aici.gen_text(regex="a", max_tokens=2)
        aici.start(main())
    """
    quiet = """
        import pyaici.server as aici
        async def main():
            aici.set_var("level", str(aici.log_level))
            await aici.gen_text(regex="a", max_tokens=2)
        aici.start(main())
    """
    assert "ALLOW:" in only(run(tok_spm, noisy, [])).log
    res = run(tok_spm, quiet, [])
    assert "ALLOW:" not in only(res).log and "GEN 'a'" in res.sequences[0].log
    assert res.variables["level"] == b"1" and scripting.log_level == 1


def test_a_raising_script_ends_only_its_sequence(tok_spm):
    src = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("start")
            i = await aici.fork(2)
            if i == 1:
                raise ValueError("boom in branch one")
            await aici.FixedTokens(" fine")
        aici.start(main())
    """
    ok, bad = run(tok_spm, src, []).sequences
    assert ok.error is None and ok.text == "start fine"
    assert bad.stop_reason == "error" and "boom in branch one" in bad.error
    assert "Traceback" in bad.log and 'File "<test-script>"' in bad.log and "ValueError: boom in branch one" in bad.log


def test_script_errors_at_load_are_the_sequence_error(tok_spm, tmp_path):
    (seq,) = run(tok_spm, "import pyaici.server as aici\nraise KeyError('at import')\n", []).sequences
    assert seq.stop_reason == "error" and "KeyError" in seq.error and "at import" in seq.log
    (seq,) = run(tok_spm, "import pyaici.server as aici\n", []).sequences
    assert seq.stop_reason == "error" and "did not call aici.start()" in seq.error
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(SyntaxError):
        scripting.load_script(bad)


# -- forks ---------------------------------------------------------------------------------------

FORKING = """
    import pyaici.server as aici
    async def forking():
        await aici.FixedTokens("The word 'hello' in")
        id = await aici.fork(3)
        if id == 0:
            french, german = await aici.wait_vars("french", "german")
            await aici.FixedTokens(f"{french.decode()} is the same as {german.decode()}.")
            await aici.gen_tokens(max_tokens=5, store_var="end")
        elif id == 1:
            await aici.FixedTokens(" German is")
            await aici.gen_tokens(regex=r' "[^"]+"', store_var="german", max_tokens=5)
        elif id == 2:
            await aici.FixedTokens(" French is")
            await aici.gen_tokens(regex=r' "[^"]+"', store_var="french", max_tokens=5)
    aici.start(forking)
"""


def test_fork_three_with_wait_vars(tok_spm):
    res = run(tok_spm, FORKING, [(" German is", ' "hallo"'), (" French is", ' "bonjour"'), ('"hallo".', " Yes.")])
    zero, one, two = res.sequences
    assert [s.seq_id for s in res.sequences] == [0, 1, 2]
    assert all(s.error is None and s.stop_reason == "stop" for s in res.sequences), [s.log for s in res.sequences]
    assert res.variables == {"german": b' "hallo"', "french": b' "bonjour"', "end": b" Yes."}
    assert zero.text == "The word 'hello' in \"bonjour\" is the same as  \"hallo\". Yes."
    assert one.text == "The word 'hello' in German is \"hallo\""
    assert two.text == "The word 'hello' in French is \"bonjour\""
    # the clones replayed the part before the fork with their logs off
    assert "FIXED \"The word 'hello' in\"" in zero.log
    assert "The word" not in one.log and "The word" not in two.log
    assert one.log.startswith("FIXED ' German is'")


def test_nested_forks(tok_spm):
    src = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("root")
            i = await aici.fork(2)
            await aici.FixedTokens(f" a{i}")
            if i == 1:
                j = await aici.fork(2)
                await aici.FixedTokens(f" b{j}")
                k = await aici.fork(2)
                l = await aici.fork(2)          # a fork right after a fork
                await aici.FixedTokens(f" c{k}{l}")
                aici.set_var(f"leaf{j}{k}{l}", str(aici.self_seq_id()))
            else:
                aici.set_var("left", "done")
        aici.start(main())
    """
    res = run(tok_spm, src, [])
    seqs = res.sequences
    assert all(s.error is None for s in seqs), [s.log for s in seqs]
    assert len(seqs) == 1 + 8 and len({s.seq_id for s in seqs}) == 9
    assert res.variables["left"] == b"done"
    leaves = {k: int(v) for k, v in res.variables.items() if k.startswith("leaf")}
    assert sorted(leaves) == [f"leaf{j}{k}{m}" for j in "01" for k in "01" for m in "01"]
    by_id = {s.seq_id: s for s in seqs}
    for name, sid in leaves.items():
        j, k, m = name[4:]
        assert by_id[sid].text == f"root a1 b{j} c{k}{m}"
    assert sorted(s.text for s in seqs if "a0" in s.text) == ["root a0"]


def test_fork_after_waiting_replays_the_variables_it_saw(tok_spm):
    src = """
        import pyaici.server as aici
        async def main():
            aici.append_var("count", "c")           # the replays must not append again
            await aici.FixedTokens("go")
            i = await aici.fork(2)
            if i == 0:
                aici.set_var("early", str(aici.get_var("x")))
                (x,) = await aici.wait_vars("x")    # suspended until branch 1 sets it
                j = await aici.fork(2)
                await aici.FixedTokens(f" got {x.decode()} {j}")
            else:
                await aici.FixedTokens(" one")
                await aici.FixedTokens(" two")
                aici.set_var("x", "X")
        aici.start(main())
    """
    res = run(tok_spm, src, [])
    assert all(s.error is None for s in res.sequences), [s.log for s in res.sequences]
    assert sorted(s.text for s in res.sequences) == ["go got X 0", "go got X 1", "go one two"]
    assert res.variables == {"count": b"c", "early": b"None", "x": b"X"}


def test_a_nondeterministic_script_cannot_fork(tok_spm):
    src = """
        import sys
        import pyaici.server as aici
        runs = sys.modules.setdefault("_logitgate_test_counter", [])
        runs.append(1)
        async def main():
            await aici.FixedTokens(f"run {len(runs)}")
            await aici.fork(2)
            await aici.FixedTokens(" after")
        aici.start(main())
    """
    try:
        res = run(tok_spm, src, [])
    finally:
        sys.modules.pop("_logitgate_test_counter", None)
    (seq,) = res.sequences
    assert seq.stop_reason == "error" and "replay" in seq.error and "splice" in seq.error


# -- AICI's samples ------------------------------------------------------------------------------


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


@pytest.fixture
def report_checks():
    scripting.CHECKS = "report"


def test_sample_yesno(tok_spm, report_checks):
    seq = only(run_file(tok_spm, sample("yesno.py"), [("?\n", "No")], prompt="Is the sky green?"))
    assert seq.text == "\nNo"
    seq = only(run_file(tok_spm, sample("yesno.py"), [("?\n", "Maybe")], prompt="Is the sky green?"))
    assert seq.text in ("\nYes", "\nNo")
    (seq,) = run_file(tok_spm, sample("yesno.py"), [], prompt="Hi").sequences  # asserts a longer prompt
    assert seq.stop_reason == "error" and "prompt too short" in seq.log


def test_sample_warsaw(tok_spm, report_checks):
    res = run_file(tok_spm, sample("warsaw.py"), [("<|im_start|>assistant\n", "The capital of Poland is Warsaw.")])
    seq = only(res)
    assert res.variables["capital"] == b"The capital of Poland is Warsaw."
    assert seq.text.endswith("<|im_start|>assistant\nThe capital of Poland is Warsaw.")


def test_sample_phi(tok_spm, report_checks):
    seq = only(run_file(tok_spm, sample("phi.py"), [("everything is", " 42.")]))
    assert "TEST OK" in seq.log and "CHECK FAILED" not in seq.log
    res = run_file(tok_spm, sample("phi.py"), [("everything is", " 7 or so")])
    seq = only(res)
    assert re.fullmatch(r" \d+\.", res.variables["x"].decode())
    assert "CHECK FAILED Variable x" in seq.log and "TEST OK" in seq.log


def test_sample_substr(tok_spm, report_checks):
    path = sample("substr.py")
    earth = re.search(r'earth = """(.*?)"""', path.read_text(), re.DOTALL).group(1)
    quote = "Earth's axis of rotation is tilted with respect to the perPendicular to its orbital plane"
    rules = [("[/INST]\n", 'No, it is tilted. Source: "'), ('Source: "', quote + " (made up)\""),
             ("\nThe tilt is", " about 23 degrees.")]
    res = run_file(tok_spm, path, rules, prefer=('"',))  # the model closes the quote where it can
    seq = only(res)
    v = res.variables
    assert v["answer"] == b'No, it is tilted. Source: "'
    source = v["source"].decode()
    assert source == quote + ' around"'  # not " (made up)": the text goes on with " around the Sun"
    assert source[:-1] in earth and source[:-1] in word_substrings(earth)
    assert v["tilt"] == b" about 23 degrees." and "TEST OK" in seq.log


def test_sample_forkbomb(tok_spm, report_checks):
    res = run_file(tok_spm, sample("forkbomb.py"), [("everything is ", "42")])
    seqs = res.sequences
    assert len(seqs) == 10 and all(s.error is None for s in seqs), [s.log for s in seqs]
    assert res.variables == {f"foo{i}": b"42" for i in range(10)}
    texts = sorted(s.text for s in seqs)
    assert texts == sorted(f"The value of {i} in the universe is and everything is 42" for i in range(10))
    assert all(s.log.count("TEST OK") == 1 for s in seqs)


def test_sample_test_noop(tok_spm, report_checks):
    res = run_file(tok_spm, sample("test.py"), [("2 + 2 = ", "4"), ("2 + 22 = ", "2"), ("\n2 + 2", " = 4")])
    seq = only(res)
    assert res.variables == {"r4": b"4", "r2": b"2", "r4p": b" = 4"}
    assert "CHECK FAILED" not in seq.log and "TEST OK" in seq.log and "ALLOW:" in seq.log  # log_level = 10
    assert seq.text == "2 + 2 = 4\n2 + 2 = 4"


# -- the native objects, directly ----------------------------------------------------------------


@pytest.fixture
def host(tok_spm):
    model = WishModel(tok_spm, [])
    return ControllerHost(tok_spm, model.encode_bytes, VariableStore(), 7)


def test_tokenset_and_basic_functions(tok_spm, host):
    import pyaici.server as aici

    with scripting.host_context(host):
        ts = aici.TokenSet()
        assert len(ts) == tok_spm.vocab_size and ts.num_set() == 0
        ts[5] = True
        ts[tok_spm.vocab_size - 1] = True
        assert ts[5] and not ts[6] and ts.num_set() == 2 and ts.token_ids() == [5, tok_spm.vocab_size - 1]
        ts[5] = False
        assert not ts[5] and ts.num_set() == 1
        for bad in (-1, tok_spm.vocab_size):
            with pytest.raises(IndexError):
                ts[bad]
        ts.set_all(True)
        assert ts.num_set() == tok_spm.vocab_size == aici.all_tokens().num_set()
        ids = aici.tokenize("Hello world")
        assert aici.detokenize(ids) == b"Hello world" and aici.tokenize(b"") == []
        assert aici.eos_token() == tok_spm.eos_token_ids[0] and aici.self_seq_id() == 7
        assert aici.token_repr(ids[0]) == json.dumps(tok_spm.tokens[ids[0]].decode())
        assert aici.token_repr(aici.eos_token()) == "</s>"
        aici.set_var("v", "a")
        aici.append_var("v", b"b")
        assert aici.get_var("v") == b"ab" and aici.get_var("none") is None
        assert aici.fork_supported() and aici.is_server_side()


def test_constraints_directly(tok_spm, host):
    import pyaici.server as aici

    with scripting.host_context(host):
        c = aici.RegexConstraint(r"ab|ac")
        ts = aici.TokenSet()
        c.allow_tokens(ts)
        allowed = {tok_spm.tokens[t] for t in ts.token_ids()}
        assert allowed == {b"a", b"ab", b"ac"}
        assert not c.eos_allowed() and not c.eos_forced()
        a = aici.tokenize("a")[0]
        c.append_token(a)
        assert c.token_allowed(aici.tokenize("b")[0]) and not c.token_allowed(a)
        c.append_token(aici.tokenize("c")[0])
        assert c.eos_allowed() and c.eos_forced()
        c.append_token(a)  # refused: nothing is allowed after it
        ts = aici.TokenSet()
        c.allow_tokens(ts)
        assert ts.num_set() == 0 and not c.eos_allowed()

        ch = aici.ChooseConstraint([" pounds", " euros"])
        ts = aici.TokenSet()
        ch.allow_tokens(ts)
        assert set(ts.token_ids()) == {aici.tokenize(" pounds")[0], aici.tokenize(" euros")[0]}
        for t in aici.tokenize(" euros"):
            assert ch.token_allowed(t)
            ch.append_token(t)
        assert ch.eos_allowed() and ch.eos_forced()

        anything = aici.Constraint()
        ts = aici.TokenSet()
        anything.allow_tokens(ts)
        assert ts[aici.eos_token()] and not ts[tok_spm.bos_token_id] and anything.eos_allowed()
        assert ts.num_set() == int((tok_spm.trie.token_node >= 0).sum()) + 1


def dfa_language(dfa) -> set[bytes]:
    """Every string a finite-language DFA accepts."""
    out: set[bytes] = set()
    stack = [(dfa.start, b"")]
    while stack:
        s, text = stack.pop()
        assert len(text) < 400, "the language should be finite"
        if dfa.accepting[s, 0]:
            out.add(text)
        for b in np.flatnonzero(dfa.transitions[s] >= 0):
            stack.append((int(dfa.transitions[s, b]), text + bytes([int(b)])))
    return out


@pytest.mark.parametrize("text", ["the cat sat on the mat", "a  b c", "zażółć gęślą jaźń, the end.", "x"])
@pytest.mark.parametrize("end", ['"', "", "END"])
def test_substring_dfa_is_exactly_word_substrings(text, end):
    want = {(s + end).encode() for s in word_substrings(text)}
    assert dfa_language(scripting.substring_dfa(text, end)) == want


def test_substring_dfa_switches_to_the_end_like_aici():
    # AICI's matcher takes the end string's first byte as the end at a word end, even a space
    assert dfa_language(scripting.substring_dfa("a b", " END")) == {b"a END", b"b END"}


def test_substring_constraint_masks_match_the_oracle(tok_spm, host):
    text = "Earth is rounded into an ellipsoid. It is the densest planet."
    full = {(s + '"').encode() for s in word_substrings(text)}
    prefixes = {w[:i] for w in full for i in range(len(w) + 1)}
    with scripting.host_context(host):
        c = scripting.SubStrConstraint(text, '"')
        done = b""
        for step in ("Earth", " is", " the"):  # "Earth is the" is not in the text
            ts = scripting.TokenSet()
            c.allow_tokens(ts)
            got = set(ts.token_ids())
            expect = {t for t in range(tok_spm.n_tokens)
                      if t not in tok_spm.special_ids and done + tok_spm.tokens[t] in prefixes}
            assert got == expect
            t = host.tokenize_bytes(step.encode())[0]
            c.append_token(t)
            done += tok_spm.tokens[t]
        assert c._dead  # the matcher refused " the"


# -- compatibility edges --------------------------------------------------------------------------


def test_custom_next_token_and_raw_callbacks(tok_spm):
    src = """
        import pyaici.server as aici
        class Twice(aici.NextToken):
            def __init__(self, text):
                super().__init__()
                self.toks = aici.tokenize(text)
            def mid_process(self):
                return aici.MidProcessResult.splice(0, self.toks + self.toks)
            def post_process(self, backtrack, tokens):   # AICI's later signature
                aici.set_var("seen", str(len(tokens)))
        async def main():
            got = await Twice("ab")
            aici.set_var("got", aici.detokenize(got))
        aici.start(main())
    """
    res = run(tok_spm, src, [])
    assert only(res).text == "abab" and res.variables == {"seen": b"2", "got": b"abab"}

    raw = """
        from pyaici.server import AiciCallbacks, MidProcessResult, register, tokenize
        class CB(AiciCallbacks):
            def __init__(self):
                self.n = 0
            def mid_process(self, fork_group):
                self.n += 1
                if self.n > 2:
                    return MidProcessResult.stop()
                return MidProcessResult.splice(0, tokenize("hi"))
        register(CB())
    """
    assert only(run(tok_spm, raw, [])).text == "hihi"


def test_unsupported_features_say_so(tok_spm):
    src = """
        import pyaici.server as aici
        class Pre(aici.NextToken):
            def pre_process(self):
                return aici.PreProcessResult.ff_tokens_pre(aici.tokenize("x"))
        async def main():
            await Pre()
        aici.start(main())
    """
    (seq,) = run(tok_spm, src, []).sequences
    assert seq.stop_reason == "error" and "NotImplementedError" in seq.error and "ff_tokens_pre" in seq.log
    src = """
        import pyaici.server as aici
        async def main():
            await aici.fork([aici.Branch(splices=[aici.Splice(ff_tokens=aici.tokenize("a"))]), aici.Branch.noop()])
        aici.start(main())
    """
    (seq,) = run(tok_spm, src, []).sequences
    assert seq.stop_reason == "error" and "NotImplementedError" in seq.error


def test_pyaici_imports_outside_a_script():
    import pyaici.server as aici

    assert set(scripting.API) <= set(dir(aici)) and aici.__all__ == scripting.API
    with pytest.raises(RuntimeError, match="only inside a script"):
        aici.get_var("x")


def test_special_token_names_in_fixed_tokens_become_the_special_tokens(embedded_gguf):
    """As AICI's tokenizer does: '<|im_start|>' in a FixedTokens text is the special token, the
    rest is text (SmolLM2's ChatML markers)."""
    tok = logitgate.Tokenizer.from_gguf(embedded_gguf)
    start = next(t for t in tok.special_ids if tok.tokens[t] == b"<|im_start|>")
    end = next(t for t in tok.special_ids if tok.tokens[t] == b"<|im_end|>")
    src = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n")
            aici.set_var("ids", ",".join(map(str, aici.tokenize("a<|im_end|>"))))
        aici.start(main())
    """
    res = run(tok, src, [])
    (seq,) = res.sequences
    assert seq.error is None, seq.log
    assert seq.tokens.count(start) == 2 and seq.tokens.count(end) == 1
    assert seq.tokens[0] == start and tok.decode_bytes(seq.tokens) == b"user\nHi\nassistant\n"
    ids = [int(x) for x in res.variables["ids"].decode().split(",")]
    assert ids[-1] == end and tok.decode_bytes(ids[:-1]) == b"a"
