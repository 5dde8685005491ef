"""The out-of-process controller runtime (``logitgate.controllers.process``, POSIX only): the
scripts of test_controller_scripting and the Steps controllers of test_controller_runner give the
same sequences, variables and logs through worker processes as in-process; hangs, sleeps and
crashes end only their own sequence; fork bombs are refused; no worker process or shared-memory
block is left behind; and the per-token round trip is measured against in-process."""
from __future__ import annotations

import os
import sys
import re
import textwrap
import time
from pathlib import Path

import pytest

from logitgate.controllers import (
    ControllerHost,
    Limits,
    VariableStore,
    run_controller,
    scripting,
)

from .test_controller_runner import ScriptedModel, Steps
from .test_controller_scripting import FORKING, LABEL, WishModel

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/dev/shm").is_dir(),
                                reason="the process runtime needs os.fork and POSIX shared memory")

if hasattr(os, "fork"):
    from logitgate.controllers.process import ProcessControllers, remote_factory


@pytest.fixture(autouse=True)
def _checks_assert():
    scripting.CHECKS = "assert"
    yield
    scripting.CHECKS = "assert"


class Tracked:
    """Runs through ProcessControllers and, at the end, checks that every worker was reaped and
    every shared-memory block unlinked."""

    def __init__(self) -> None:
        self.runtimes: list[ProcessControllers] = []

    def factory(self, factory, limits: Limits | None = None, **kw) -> ProcessControllers:
        rt = remote_factory(factory, limits, **kw)
        self.runtimes.append(rt)
        return rt

    def check_clean(self) -> None:
        for rt in self.runtimes:
            rt.close()
            assert rt.live_workers() == []
            assert rt.ended, "no worker was started"
            shm = set(os.listdir("/dev/shm"))
            for w in rt.ended:
                assert w.shm_name.lstrip("/") not in shm
                assert w.pid and not Path(f"/proc/{w.pid}").exists(), f"worker {w.pid} is still there (or a zombie)"


@pytest.fixture
def tracked():
    t = Tracked()
    yield t
    t.check_clean()


def both(tracked, tok, source: str, rules, prompt: str = "Hi", max_tokens: int = 400,
         limits: Limits | None = None):
    limits = limits or Limits()
    source = textwrap.dedent(source)
    local = run_controller(scripting.script_factory(source, "<test-script>"), WishModel(tok, rules), prompt,
                           max_tokens=max_tokens, limits=limits)
    with tracked.factory(scripting.script_factory(source, "<test-script>"), limits) as rt:
        remote = run_controller(rt, WishModel(tok, rules), prompt, max_tokens=max_tokens, limits=limits)
    return local, remote


def same(local, remote) -> None:
    assert remote.variables == local.variables
    assert len(remote.sequences) == len(local.sequences)
    for a, b in zip(local.sequences, remote.sequences):
        assert (b.seq_id, b.tokens, b.text, b.stop_reason, b.error) == (a.seq_id, a.tokens, a.text, a.stop_reason,
                                                                        a.error)


REGEX = """
    import pyaici.server as aici
    async def main():
        await aici.FixedTokens("Phone:")
        await aici.gen_text(regex=r" \\d{3}-\\d{4}", store_var="good", max_tokens=10)
        await aici.FixedTokens(" Other:")
        await aici.gen_text(regex=r" \\d{3}-\\d{4}", store_var="forced", max_tokens=10)
    aici.start(main())
"""

NESTED = """
    import pyaici.server as aici
    async def main():
        aici.append_var("count", "c")
        await aici.FixedTokens("root")
        i = await aici.fork(2)
        await aici.FixedTokens(f" a{i}")
        if i == 1:
            j = await aici.fork(2)
            await aici.FixedTokens(f" b{j}")
            k = await aici.fork(2)
            await aici.FixedTokens(f" c{k}")
            aici.set_var(f"leaf{j}{k}", str(aici.self_seq_id()))
        else:
            aici.set_var("left", "done")
    aici.start(main())
"""

RECOGNIZER = """
    import pyaici.server as aici
    class Pin:                       # a custom recognizer: exactly four ASCII digits
        def initial(self): return 0
        def byte_allowed(self, n, b): return 48 <= b <= 57 and n < 4
        def append(self, n, b): return n + 1
        def special_allowed(self, n, token): return token == "eos" and n == 4
    async def main():
        await aici.FixedTokens("PIN:")
        i = await aici.fork(2)
        await aici.gen_text(recognizer=Pin(), store_var=f"pin{i}", max_tokens=8)
    aici.start(main())
"""

CASES = {
    "custom_recognizer_forked": (RECOGNIZER, [("PIN:", "12ab3456")]),
    "fixed_tokens_and_regex": (REGEX, [("Phone:", " 555-1234 and more"), ("Other:", " call me maybe")]),
    "fork3_wait_vars": (FORKING, [(" German is", ' "hallo"'), (" French is", ' "bonjour"'),
                                  ('"hallo".', " Yes.")]),
    "label_backtrack": (LABEL, [(" French is", ' "bonjour"'), (" German is", ' "hallo"')]),
    "nested_forks": (NESTED, []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scripts_give_the_same_results_as_in_process(tok_spm, tracked, case):
    source, rules = CASES[case]
    local, remote = both(tracked, tok_spm, source, rules)
    assert all(s.error is None for s in local.sequences), [s.log for s in local.sequences]
    same(local, remote)
    if case == "custom_recognizer_forked":
        assert local.variables["pin0"] == local.variables["pin1"] and re.fullmatch(rb"12[0-9]{2}",
                                                                                    local.variables["pin0"])
    if case == "fork3_wait_vars":
        # in-process the forks replayed the script with their logs off; here the OS copied the
        # worker, so the logs agree too
        assert [s.log for s in remote.sequences] == [s.log for s in local.sequences]
    if case == "nested_forks":
        assert remote.variables["count"] == b"c"


def test_steps_controllers_with_token_edits_and_variables(tok_spm, tracked):
    """A plain (non-script) controller: host.tokens kept in step both ways (Steps deletes the EOS
    it sampled from host.tokens), variables set through the parent, forks."""
    cases = [
        (b"Answer: 42 is right", [("text", "Answer:"), ("mark",), ("regex", " [0-9]+", 5), ("store", "n")]),
        (b"Go on", [("text", "Go"), ("fork", 3), ("mark",), ("text", " on"), ("store", "v")]),
        (b"The word is", [("text", "The word is"), ("mark",), ("text", " first"), ("store", "a"),
                          ("back_to_mark", " second"), ("store", "b")]),
    ]
    for target, steps in cases:
        local = run_controller(lambda h, s=steps: Steps(h, s), ScriptedModel(tok_spm, target, strict=False), "prompt")
        with tracked.factory(lambda h, s=steps: Steps(h, s)) as rt:
            remote = run_controller(rt, ScriptedModel(tok_spm, target, strict=False), "prompt")
        same(local, remote)


def test_logs_prints_and_file_descriptors_reach_the_host_log(tok_spm, tracked):
    src = """
        import os, sys
        import pyaici.server as aici
        async def main():
            print("from print")
            os.write(1, b"from fd 1\\n")
            os.write(2, b"from fd 2\\n")
            await aici.FixedTokens("Hi")
            sys.stderr.write("from stderr\\n")
        aici.start(main())
    """
    events = []
    with tracked.factory(scripting.script_factory(textwrap.dedent(src), "<t>")) as rt:
        res = run_controller(rt, WishModel(tok_spm, []), "x", on_event=lambda i, k, d: events.append((i, k, d)))
    (seq,) = res.sequences
    assert seq.error is None and seq.text == "Hi"
    for text in ("from print", "from fd 1", "from fd 2", "FIXED 'Hi'"):
        assert text in seq.log
    assert "from fd 1" in "".join(d for i, k, d in events if k == "log")


HANG = """
    import os, time
    import pyaici.server as aici
    async def main():
        await aici.FixedTokens("start")
        i = await aici.fork(3)
        if i == 1:
            while True:
                pass
        if i == 2:
            time.sleep(30)
        await aici.FixedTokens(" fine")
        await aici.gen_text(regex=r" [a-z]+", max_tokens=5, store_var="w")
    aici.start(main())
"""


def test_a_hanging_or_sleeping_controller_is_killed_at_its_limit(tok_spm, tracked):
    limits = Limits(pre_process=1.0, mid_process=1.0, post_process=1.0)
    t = time.perf_counter()
    with tracked.factory(scripting.script_factory(textwrap.dedent(HANG), "<t>"), limits) as rt:
        res = run_controller(rt, WishModel(tok_spm, [(" fine", " ok")]), "Hi", limits=limits)
        ok, spin, sleeper = res.sequences
        assert rt.live_workers() == []  # the killed ones were reaped, the others ended on Stop
    assert time.perf_counter() - t < 10
    assert ok.error is None and ok.text == "start fine ok" and res.variables == {"w": b" ok"}
    for bad in (spin, sleeper):
        assert bad.stop_reason == "error"
        assert "did not return within its limit of 1000 ms" in bad.error
        assert bad.error.split(" raised ")[0] in ("pre_process", "mid_process", "post_process")
        assert "was killed" in bad.log


CRASH = """
    import os, signal
    import pyaici.server as aici
    async def main():
        await aici.FixedTokens("start")
        i = await aici.fork(3)
        if i == 1:
            os._exit(3)
        if i == 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        await aici.FixedTokens(" fine")
    aici.start(main())
"""


def test_a_crashing_worker_ends_only_its_sequence(tok_spm, tracked):
    with tracked.factory(scripting.script_factory(textwrap.dedent(CRASH), "<t>")) as rt:
        res = run_controller(rt, WishModel(tok_spm, []), "Hi")
        subreaper = rt.subreaper
    ok, exited, segv = res.sequences
    assert ok.error is None and ok.text == "start fine"
    assert exited.stop_reason == "error" and "died during" in exited.error
    assert segv.stop_reason == "error" and "died during" in segv.error
    if subreaper:  # Linux: the forked workers are this process's children, their status is known
        assert "exit status 3" in exited.error and "exit status 3" in exited.log
        assert "killed by signal" in segv.error and "SIGSEGV" in segv.error


def test_a_raising_script_and_a_load_error(tok_spm, tracked):
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
    local, remote = both(tracked, tok_spm, src, [])
    same(local, remote)
    bad = remote.sequences[1]
    assert "boom in branch one" in bad.error and "ValueError: boom in branch one" in bad.log
    local, remote = both(tracked, tok_spm, "import pyaici.server as aici\nraise KeyError('at import')\n", [])
    same(local, remote)


def test_fork_bombs_are_refused(tok_spm, tracked):
    wide = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("go")
            await aici.fork(100)
            await aici.FixedTokens(" never")
        aici.start(main())
    """
    deep = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("go")
            while True:
                await aici.fork(2)
        aici.start(main())
    """
    limits = Limits(max_sequences=8)
    local, remote = both(tracked, tok_spm, wide, [], limits=limits)
    same(local, remote)
    assert len(remote.sequences) == 1 and "exceed 8 sequences" in remote.sequences[0].error
    with tracked.factory(scripting.script_factory(textwrap.dedent(deep), "<t>"), limits) as rt:
        res = run_controller(rt, WishModel(tok_spm, []), "Hi", limits=limits)
        assert len(rt.live_workers()) + len(rt.ended) == len(res.sequences) <= 8
    assert any("exceed 8 sequences" in (s.error or "") for s in res.sequences)


def test_memory_limit_is_a_memory_error_in_the_worker(tok_spm, tracked):
    src = """
        import pyaici.server as aici
        async def main():
            await aici.FixedTokens("a")
            i = await aici.fork(2)
            if i == 1:
                hog = bytearray(4 << 30)
            await aici.FixedTokens("b")
        aici.start(main())
    """
    with tracked.factory(scripting.script_factory(textwrap.dedent(src), "<t>"), memory_limit=512 << 20) as rt:
        ok, bad = run_controller(rt, WishModel(tok_spm, []), "Hi").sequences
    assert ok.error is None and ok.text == "ab"
    assert bad.stop_reason == "error" and "MemoryError" in bad.error


def test_per_token_overhead_against_in_process(tok_spm, tracked):
    """Measured and printed, not asserted: a 60-token regex generation on an instant model."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        from bench_controllers import FixedModel
    finally:
        sys.path.pop(0)
    src = ("import pyaici.server as aici\nasync def main():\n    await aici.FixedTokens('Say:')\n"
           "    await aici.gen_tokens(regex=r'[a-z]{1,12}( [a-z]{1,12}){0,80}\\.', max_tokens=60)\n"
           "aici.start(main())\n")
    factory = scripting.script_factory(src, "<bench>")

    def timed(f):
        best = None
        for _ in range(3):
            t = time.perf_counter()
            res = run_controller(f, FixedModel(tok_spm), "x", max_tokens=61)
            dt = time.perf_counter() - t
            n = len(res.sequences[0].tokens)
            best = dt / n if best is None else min(best, dt / n)
        return best, res

    local_s, local = timed(factory)
    with tracked.factory(factory) as rt:
        remote_s, remote = timed(rt)
        t = time.perf_counter()
        for _ in range(5):  # the cost of starting (fork, build the script controller) and ending a worker
            host = ControllerHost(tok_spm, FixedModel(tok_spm).encode_bytes, VariableStore(), 0, tokens=[1])
            proxy = rt(host)
            proxy.init_prompt([1])
            rt.close()
        start_s = (time.perf_counter() - t) / 5
    same(local, remote)
    n = len(remote.sequences[0].tokens)
    per_token = remote_s - start_s / n
    print(f"\n{n}-token regex generation, per token: in-process {local_s * 1e6:.0f} us, worker process "
          f"{remote_s * 1e6:.0f} us with the worker's start ({start_s * 1e3:.1f} ms a worker), "
          f"{per_token * 1e6:.0f} us without it: overhead {(per_token - local_s) * 1e6:.0f} us/token")


def test_workers_compute_during_the_forward_pass(tok_spm, tracked):
    """Each chain is sent before the model runs and collected after: the workers' mid_process
    (which records its span in a variable) overlaps the model's forward passes."""
    from .test_controller_runner import SlowModel

    class Timed(Steps):
        def mid_process(self, fork_group):
            t = time.perf_counter()
            time.sleep(0.02)
            out = super().mid_process(fork_group)
            self.host.variables.append("spans", f"{t},{time.perf_counter()};")
            return out

    steps = [("text", "Answer:"), ("fork", 2), ("mark",), ("regex", " [0-9]+", 6), ("store", "n")]
    model = SlowModel(tok_spm, b"Answer: 1234567 is right", 0.02)
    with tracked.factory(lambda h: Timed(h, steps)) as rt:
        res = run_controller(rt, model, "prompt")
    assert [s.text for s in res.sequences] == ["Answer: 12345"] * 2 and res.variables["n1"] == b" 12345"
    spans = [tuple(map(float, x.split(","))) for x in res.variables["spans"].decode().strip(";").split(";")]
    overlapping = sum(1 for s, e in spans for s2, e2 in model.spans if s < e2 and s2 < e)
    assert overlapping >= 6, (spans, model.spans)


def test_replies_read_late_do_not_count_against_the_limits(tok_spm, tracked):
    """A slow forward pass delays the collection of the workers' replies past their calls' limits:
    the calls finished in time, so nothing is killed (and the runner does not spin)."""
    import signal

    from .test_controller_runner import SlowModel

    limits = Limits(pre_process=0.25, mid_process=0.25, post_process=0.25)
    steps = [("text", "Answer:"), ("fork", 2), ("regex", " [0-9]+", 3), ("store", "n")]
    model = SlowModel(tok_spm, b"Answer: 1234567 is right", 0.6)
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("the runner hangs")))
    signal.alarm(30)
    try:
        with tracked.factory(lambda h: Steps(h, steps), limits) as rt:
            res = run_controller(rt, model, "prompt", limits=limits)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [s.error for s in res.sequences] == [None, None]
    assert [s.text for s in res.sequences] == ["Answer: 12"] * 2



class _SlowStart(Steps):
    """init_prompt takes 0.3 s (the runtime goes to sleep on its 10 s limit), then pre_process hangs."""

    def init_prompt(self, prompt: list[int]) -> None:
        time.sleep(0.3)


def test_a_later_call_of_a_chain_gets_its_own_shorter_limit(tok_spm):
    """init_prompt (10 s limit) returns, then pre_process hangs in the same chain: it is killed near
    pre_process's 0.3 s limit, not at init_prompt's 10 s, and the error names pre_process."""
    from logitgate.controllers import Limits, run_controller
    from logitgate.controllers.process import ProcessControllers

    limits = Limits(init_prompt=10.0, pre_process=0.3)
    t = time.perf_counter()
    with ProcessControllers(lambda host: _SlowStart(host, [("sleep", 60)]), limits) as remote:
        res = run_controller(remote, ScriptedModel(tok_spm, b"", strict=False), "p", limits=limits)
    took = time.perf_counter() - t
    (seq,) = res.sequences
    assert seq.stop_reason == "error" and seq.error.startswith("pre_process raised ControllerTimeout"), seq.error
    assert took < 5
