"""The controller protocol and the in-process runner, on a deterministic scripted model: forced
tokens, bitmask sampling, forks with shared variables, splices with backtrack, suspension,
isolation of a failing controller, and the limits."""
from __future__ import annotations

import copy
import time

import numpy as np
import pytest

import logitgate
from logitgate.controllers import (
    Continue, Controller, ControllerHost, Fork, Limits, SampleWithBias, Splice, Stop, Suspend, run_controller,
)

from .test_generation import ScriptedModel


class Steps(Controller):
    """A controller that follows a list of steps: ("text", s) splices s in; ("regex", r, n) samples
    up to n tokens under regex r; ("fork", n); ("store", name) stores the text since the last
    mark; ("mark",); ("back_to_mark", s) backtracks to the mark and splices s; ("wait", name);
    ("raise",); ("sleep", seconds)."""

    def __init__(self, host: ControllerHost, steps: list[tuple]) -> None:
        self.host = host
        self.steps = list(steps)
        self.i = 0
        self.mark = len(host.tokens)
        self.matcher: logitgate.Matcher | None = None
        self.left = 0
        self.branch = 0

    def fork(self, host: ControllerHost) -> "Steps":
        twin = copy.copy(self)
        twin.host = host
        twin.steps = list(self.steps)
        twin.matcher = self.matcher.fork() if self.matcher is not None else None
        return twin

    def _step(self) -> tuple:
        return self.steps[self.i] if self.i < len(self.steps) else ("end",)

    def pre_process(self):
        return self._control()

    def _control(self):
        """Run the steps that are not token steps; the result pre_process gives."""
        while True:
            step = self._step()
            if step[0] == "end":
                return Stop()
            if step[0] == "fork":
                self.i += 1
                return Fork(step[1])
            if step[0] == "mark":
                self.mark = len(self.host.tokens)
                self.i += 1
                continue
            if step[0] == "store":
                self.host.variables.set(step[1] + str(self.branch),
                                        self.host.detokenize(self.host.tokens[self.mark:]))
                self.i += 1
                continue
            if step[0] == "wait":
                if self.host.variables.get(step[1]) is None:
                    return Suspend()
                self.i += 1
                continue
            if step[0] == "raise":
                raise ValueError("this controller fails on purpose")
            if step[0] == "sleep":
                time.sleep(step[1])
                self.i += 1
                continue
            return Continue()

    def mid_process(self, fork_group):
        self.branch = fork_group.index(self.host.seq_id)
        ctl = self._control()  # steps right after a fork
        if isinstance(ctl, Suspend):
            return Splice(0, [])  # nothing this round
        if not isinstance(ctl, Continue):
            return Stop()
        step = self._step()
        if step[0] == "text":
            return Splice(0, self.host.tokenize_bytes(step[1].encode()))
        if step[0] == "back_to_mark":
            return Splice(len(self.host.tokens) - self.mark, self.host.tokenize_bytes(step[1].encode()))
        if step[0] == "regex":
            if self.matcher is None:
                compiled = logitgate.compile(logitgate.Grammar.from_regex(step[1]), self.host.tokenizer)
                self.matcher = logitgate.Matcher(compiled)
                self.left = step[2]
            bm = logitgate.allocate_token_bitmask(1, self.host.tokenizer.vocab_size)
            self.matcher.fill_next_token_bitmask(bm, 0)
            return SampleWithBias(bm[0])
        return Stop()

    def post_process(self, tokens, backtrack=0):
        step = self._step()
        if step[0] == "wait":
            return Continue()
        if step[0] == "regex":
            for t in tokens:
                assert self.matcher.accept_token(t)
            self.left -= 1
            if self.matcher.is_terminated() or self.left == 0:
                if self.matcher.is_terminated():
                    del self.host.tokens[-1]  # keep the EOS out of the text (the runner appended it)
                self.matcher = None
                self.i += 1
        else:
            self.i += 1
        return Continue()


def run(tok, target: bytes, steps, **kw):
    model = ScriptedModel(tok, target, strict=False)
    return run_controller(lambda host: Steps(host, steps), model, "prompt", **kw)


def test_splice_and_constrained_sampling(tok_spm):
    res = run(tok_spm, b"Answer: 42 is right", [("text", "Answer:"), ("mark",), ("regex", " [0-9]+", 5),
                                                  ("store", "n")])
    (seq,) = res.sequences
    assert seq.text.startswith("Answer: 42") and seq.error is None
    assert res.variables["n0"] == b" 42"


def test_fork_shares_variables_and_waits(tok_spm):
    steps = [("text", "Go"), ("fork", 3), ("mark",), ("text", " on"), ("store", "v")]
    res = run(tok_spm, b"Go on", steps)
    assert [s.seq_id for s in res.sequences] == [0, 1, 2]
    assert {k: v for k, v in res.variables.items()} == {"v0": b" on", "v1": b" on", "v2": b" on"}
    for s in res.sequences:
        assert s.text == "Go on" and s.stop_reason == "stop"


def test_backtrack_to_a_mark_replaces_the_text(tok_spm):
    steps = [("text", "The word is"), ("mark",), ("text", " first"), ("store", "a"),
             ("back_to_mark", " second"), ("store", "b")]
    res = run(tok_spm, b"The word is", steps)
    (seq,) = res.sequences
    assert seq.text == "The word is second"
    assert res.variables == {"a0": b" first", "b0": b" second"}


def test_suspended_branch_resumes_when_the_variable_appears(tok_spm):
    class Waiter(Steps):
        def _control(self):
            step = self._step()
            if step[0] == "branch0_waits":
                self.i += 1
                if self.host.seq_id == 0:
                    self.steps[self.i:self.i] = [("wait", "x1"), ("mark",), ("text", " after"), ("store", "y")]
                else:
                    self.steps[self.i:self.i] = [("mark",), ("text", " one"), ("text", " two"), ("store", "x")]
            return super()._control()

    model = ScriptedModel(tok_spm, b"", strict=False)
    res = run_controller(lambda h: Waiter(h, [("fork", 2), ("branch0_waits",)]), model, "p")
    zero, one = res.sequences
    assert res.variables == {"x1": b" one two", "y0": b" after"}
    assert zero.text == " after" and one.text == " one two"
    # deadlock: every sequence waits forever
    res = run(tok_spm, b"", [("wait", "never")], limits=Limits(max_suspended_rounds=3))
    assert res.sequences[0].stop_reason == "error" and "deadlock" in res.sequences[0].error


def test_a_failing_branch_ends_alone(tok_spm):
    class Flaky(Steps):
        def pre_process(self):
            if self.host.seq_id == 1 and self.i >= 2:
                raise RuntimeError("branch 1 breaks")
            return super().pre_process()

    model = ScriptedModel(tok_spm, b"", strict=False)
    res = run_controller(lambda h: Flaky(h, [("fork", 2), ("text", " a"), ("text", " b"), ("mark",)]), model, "p")
    ok, bad = res.sequences
    assert ok.error is None and ok.text == " a b"
    assert bad.stop_reason == "error" and "branch 1 breaks" in bad.error and "RuntimeError" in bad.log


def test_limits_end_a_slow_controller_and_cap_forks(tok_spm):
    res = run(tok_spm, b"", [("sleep", 0.05), ("text", "x")], limits=Limits(pre_process=0.01))
    assert res.sequences[0].stop_reason == "error" and "over its limit" in res.sequences[0].error
    res = run(tok_spm, b"", [("fork", 5), ("text", "x")], limits=Limits(max_sequences=3))
    assert len(res.sequences) == 1 and "exceed 3 sequences" in res.sequences[0].error


def test_sampled_and_spliced_tokens_are_counted_apart(tok_spm):
    events = []
    res = run(tok_spm, b"Answer: 42 is right", [("text", "Answer:"), ("regex", " [0-9]+", 5)],
              on_event=lambda i, kind, data: events.append((kind, data)))
    (seq,) = res.sequences
    spliced = sum(int(d) for k, d in events if k == "spliced")
    assert seq.text.startswith("Answer: 42") and spliced > 0
    # every token not spliced was sampled (a sampled EOS that ends the sequence counts too)
    assert len(seq.tokens) - spliced <= seq.sampled_tokens <= len(seq.tokens) - spliced + 1
    assert sum(int(d) for k, d in events if k == "sampled") == seq.sampled_tokens


def test_a_whole_run_is_bounded_by_max_run_seconds(tok_spm):
    """Every call within its own limit, but many of them: the run's wall-time cap ends it."""
    t = time.perf_counter()
    res = run(tok_spm, b"", [("sleep", 0.05), ("text", "x")] * 40, limits=Limits(max_run_seconds=0.3),
              max_tokens=100)
    took = time.perf_counter() - t
    (seq,) = res.sequences
    assert seq.stop_reason == "error" and "max_run_seconds=0.3" in seq.error and "max_run_seconds" in seq.log
    assert 0 < seq.text.count("x") < 40 and took < 1.5


def test_protocol_errors_are_reported(tok_spm):
    class Bad(Steps):
        def mid_process(self, fork_group):
            return Splice(5, [])

    res = run_controller(lambda h: Bad(h, [("text", "x")]), ScriptedModel(tok_spm, b"", strict=False), "p")
    assert "backtracks 5 tokens" in res.sequences[0].error

    class Wrong(Steps):
        def mid_process(self, fork_group):
            return SampleWithBias(np.zeros(3, dtype=np.int32))

    res = run_controller(lambda h: Wrong(h, [("text", "x")]), ScriptedModel(tok_spm, b"", strict=False), "p")
    assert "bitmask" in res.sequences[0].error


def test_events_stream_text_logs_and_ends(tok_spm):
    events = []

    class Talker(Steps):
        def post_process(self, tokens, backtrack=0):
            print("posted", len(tokens), file=self.host.log)
            return super().post_process(tokens, backtrack)

    model = ScriptedModel(tok_spm, b"", strict=False)
    run_controller(lambda h: Talker(h, [("text", "Hi"), ("fork", 2), ("text", "!")]), model, "p",
                   on_event=lambda i, k, d: events.append((i, k, d)))
    kinds = {(i, k) for i, k, _ in events}
    assert (0, "text") in kinds and (0, "log") in kinds and (0, "fork") in kinds and (1, "end") in kinds
    assert "".join(d for i, k, d in events if i == 0 and k == "text") == "Hi!"


def test_forks_splices_and_backtracks_on_the_embedded_model(llama_model):
    model = llama_model
    steps = [("text", "Two colours:"), ("fork", 2), ("mark",),
             ("regex", r" (red|green|blue|yellow)", 4), ("store", "c"),
             ("back_to_mark", " my favourite is"), ("regex", r" [a-z]{2,8}\.", 6), ("store", "fav")]
    res = run_controller(lambda h: Steps(h, steps), model, [{"role": "user", "content": "Name colours."}])
    assert len(res.sequences) == 2
    import re

    for seq in res.sequences:
        assert seq.error is None, seq.log
        branch = str(seq.seq_id)
        colour = res.variables["c" + branch].decode()
        assert re.fullmatch(r" (red|green|blue|yellow)", colour)
        assert re.fullmatch(r" my favourite is [a-z]{2,8}\.", res.variables["fav" + branch].decode())
        # the backtrack removed the first answer from the sequence
        assert seq.text == "Two colours:" + res.variables["fav" + branch].decode()
        assert colour not in seq.text.replace(res.variables["fav" + branch].decode(), "")


class SlowModel(ScriptedModel):
    """A ScriptedModel whose forward pass sleeps (releasing the GIL, as native code does) and
    records when it ran."""

    def __init__(self, tok, target: bytes, seconds: float) -> None:
        super().__init__(tok, target, strict=False)
        self.seconds = seconds
        self.spans: list[tuple[float, float]] = []

    def forward(self, tokens):
        t = time.perf_counter()
        time.sleep(self.seconds)
        out = super().forward(tokens)
        self.spans.append((t, time.perf_counter()))
        return out


class SlowRegex(Steps):
    """Steps whose mid_process sleeps and records when it ran."""

    spans: list[tuple[float, float]] = []

    def mid_process(self, fork_group):
        t = time.perf_counter()
        time.sleep(0.02)
        out = super().mid_process(fork_group)
        SlowRegex.spans.append((t, time.perf_counter()))
        return out


def _overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> int:
    return sum(1 for s, e in a for s2, e2 in b if s < e2 and s2 < e)


@pytest.mark.parametrize("overlap", [True, False])
def test_mid_process_overlaps_the_forward_pass(tok_spm, overlap):
    """With overlap, mid_process runs while the model computes (the same text either way)."""
    SlowRegex.spans = []
    model = SlowModel(tok_spm, b"Answer: 1234567 is right", 0.02)
    steps = [("text", "Answer:"), ("mark",), ("regex", " [0-9]+", 6), ("store", "n")]
    res = run_controller(lambda h: SlowRegex(h, steps), model, "prompt", overlap=overlap)
    (seq,) = res.sequences
    assert seq.error is None and seq.text == "Answer: 12345" and res.variables["n0"] == b" 12345"
    n = _overlaps(SlowRegex.spans, model.spans)
    if overlap:
        assert n >= 4, (SlowRegex.spans, model.spans)
    else:
        assert n == 0
