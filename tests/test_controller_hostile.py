"""Hostile controllers (issue 9, item 4): Wasm modules that loop, recurse, bomb memory, fork without
end, pass hostile arguments to the host, or are malformed; Python controllers in worker processes
that recurse, bomb memory or fork OS processes. Each ends only its own sequence (or is refused at
load) with the cause in its error and log, while the well-behaved sequence beside it finishes; and
the server hands those logs and errors to its client (item 6).

Most Wasm modules are one WAT template (fast to compile): at its first ``pre_process`` it forks in
two; sequence 0 splices " ok" and stops, sequence 1 runs the hostile code in ``mid_process``."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from logitgate.controllers import ControllerError, ControllerStartError, Limits, VariableStore, run_controller, scripting

from .test_generation import ScriptedModel

wasm = pytest.importorskip("logitgate.controllers.wasm")
wasmtime = pytest.importorskip("wasmtime")
WasmLimits, WasmModule, WasmLoadError = wasm.WasmLimits, wasm.WasmModule, wasm.WasmLoadError

IMPORTS = "".join(f'(import "logitgate" "{name}" (func ${name} (param {" i32" * p}) (result{" i32" * r})))'
                  for name, (p, r) in wasm._IMPORTS.items())

DATA = {16: " ok", 32: "a(b", 40: "ab", 1000: "\\ff\\fe"}


def hostile_wat(bad: str = "", *, funcs: str = "", memory: str = "2", pre: str = "", alloc: str = "(i32.const 4096)"
                ) -> str:
    """The template: ``bad`` runs in sequence 1's ``mid_process`` (then it stops); ``pre`` at the
    start of every ``pre_process``; ``alloc`` is ``lg_alloc``'s body."""
    data = " ".join(f'(data (i32.const {at}) "{text}")' for at, text in DATA.items())
    return f"""(module {IMPORTS}
  (memory (export "memory") {memory})
  (global $forked (mut i32) (i32.const 0)) (export "forked" (global $forked))
  (global $done (mut i32) (i32.const 0)) (export "done" (global $done))
  {data}
  (func (export "lg_alloc") (param i32) (result i32) {alloc})
  (func (export "lg_init_prompt") (param i32 i32))
  (func (export "lg_pre_process") (result i32)
    {pre}
    (if (i32.eqz (global.get $forked)) (then (global.set $forked (i32.const 1)) (return (i32.const 2))))
    (if (result i32) (global.get $done) (then (i32.const 0)) (else (i32.const 1))))
  (func (export "lg_mid_process") (param $g i32) (param $n i32) (result i32)
    (if (i32.eq (call $self_seq_id) (i32.load (local.get $g)))
      (then (return (call $splice (i32.const 0) (i32.const 256)
                          (call $tokenize (i32.const 16) (i32.const 3) (i32.const 256) (i32.const 16))))))
    {bad}
    (i32.const 0))
  (func (export "lg_post_process") (param i32 i32 i32) (result i32) (global.set $done (i32.const 1)) (i32.const 0))
  {funcs})"""


FAST = WasmLimits(fuel_mid_process=20_000_000, memory_bytes=4 << 20)


def run_wat(tok, source: str, wasm_limits: WasmLimits = FAST, **kw):
    module = WasmModule.from_wat(source)
    return run_controller(module.controller_factory(wasm_limits), ScriptedModel(tok, b"", strict=False), "p",
                          max_tokens=kw.pop("max_tokens", 20), **kw)


def good_and_bad(res):
    good, bad = res.sequences
    assert (good.error, good.text, good.stop_reason) == (None, " ok", "stop"), good
    return bad


def assert_ended(bad, needle: str) -> None:
    assert bad.stop_reason == "error" and needle in bad.error, bad.error
    assert f"[logitgate] sequence {bad.seq_id} ended: " in bad.log and needle in bad.log


# -- loops, recursion, traps, memory bombs ---------------------------------------------------------------------
@pytest.mark.parametrize("bad, needle", [
    ("(loop $l (br $l))", "ran out of fuel (20000000) in mid_process"),
    ("(call $rec)", "trap in mid_process: call stack exhausted"),
    ("(loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))"
     "(i32.store (i32.const 0x7fffff0) (i32.const 1))", "near the memory limit of 4194304 bytes"),
    ("(drop (i32.div_s (i32.const 1) (i32.const 0)))", "integer divide by zero"),
    ("(call_indirect (type $v) (i32.const 99))", "out of bounds table access"),
    ("(return (i32.const 7))", "lg_mid_process returned 7: not 1 (go on) or 0 (stop)"),
])
def test_loops_recursion_traps_and_memory_bombs_end_only_their_sequence(tok_spm, bad, needle):
    t = time.perf_counter()
    res = run_wat(tok_spm, hostile_wat(bad, funcs="(func $rec (call $rec)) (type $v (func)) (table 1 funcref)"))
    assert time.perf_counter() - t < 5
    assert_ended(good_and_bad(res), needle)


def test_an_infinite_loop_in_lg_alloc_or_a_bad_buffer_ends_the_sequence(tok_spm):
    # lg_alloc is asked for the first buffer (the fork group, in mid_process): loop there
    res = run_wat(tok_spm, hostile_wat(alloc="(loop $l (br $l)) (i32.const 0)"))
    (seq,) = res.sequences  # the root's pre_process forked, its mid_process asked for a buffer
    assert "ran out of fuel (20000000) in mid_process" in seq.error or "ran out of fuel" in seq.error
    res = run_wat(tok_spm, hostile_wat(alloc="(i32.const -8)"))
    assert "lg_alloc's buffer: 4 bytes at 0xfffffff8 are outside the module's memory" in res.sequences[0].error


# -- host functions with hostile arguments -----------------------------------------------------------------------
@pytest.mark.parametrize("bad, needle", [
    ("(call $log (i32.const 16) (i32.const -1))", "log: negative length -1"),
    ("(call $log (i32.const 16) (i32.const 0x7fffffff))", "log: 2147483647 bytes at 0x10 are outside the module's memory"),
    ("(call $log (i32.const -16) (i32.const 8))", "log: 8 bytes at 0xfffffff0 are outside"),
    ("(drop (call $token_bytes (i32.const 300) (i32.const 0x7ffffff0) (i32.const 100)))", "token_bytes: "),
    ("(drop (call $tokenize (i32.const 16) (i32.const -3) (i32.const 256) (i32.const 16)))",
     "tokenize: negative length -3"),
    ("(call $var_set (i32.const 1000) (i32.const 2) (i32.const 16) (i32.const 3))", "var_set: b'\\xff\\xfe' is not UTF-8"),
    ("(drop (call $var_get (i32.const 0) (i32.const 0x7fffffff) (i32.const 0) (i32.const 0)))",
     "var_get: a name of 2147483647 bytes, over the limit"),
    ("(drop (call $constraint_mask (i32.const -1) (i32.const 0)))", "constraint_mask: -1 is not a live constraint"),
    ("(drop (call $constraint_accept (i32.const 7) (i32.const 0)))", "constraint_accept: 7 is not a live constraint"),
    ("(call $constraint_free (i32.const 0))", "constraint_free: 0 is not a live constraint"),
    ("(drop (call $dfa_mask (i32.const 0) (i32.const 0x7fffffff) (i32.const 0) (i32.const 0) (i32.const 0)))",
     "dfa_mask: 2147483647 states, not in [1, 65536]"),
    ("(drop (call $dfa_mask (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 5) (i32.const 0)))",
     "dfa_mask: state 5 is not in [0, 1)"),
    ("(drop (call $sample_mask (i32.const 131068)))", "sample_mask: 4000 bytes at 0x1fffc are outside"),
    ("(return (call $splice (i32.const 0) (i32.const 0) (i32.const -1)))", "splice: negative length -4"),
    ("(return (call $splice (i32.const -2) (i32.const 0) (i32.const 0)))", "splice: backtrack -2 is negative"),
    ("(return (call $splice (i32.const 99) (i32.const 0) (i32.const 0)))",
     "Splice backtracks 99 tokens but only 0 were generated"),
    ("(i32.store (i32.const 0) (i32.const -7)) (return (call $splice (i32.const 0) (i32.const 0) (i32.const 1)))",
     "Splice has 1 token ids outside the vocabulary [0, 32000): [-7]"),
    ("(i32.store (i32.const 0) (i32.const 0x7fffffff)) (return (call $sample_constraint (i32.const 3)))",
     "sample_constraint: 3 is not a live constraint handle"),
])
def test_hostile_host_calls_trap_only_their_sequence(tok_spm, bad, needle):
    assert_ended(good_and_bad(run_wat(tok_spm, hostile_wat(bad))), needle)


# each answers a hostile argument with a value (the sequence then stops normally): -1 / 0, never a guess
@pytest.mark.parametrize("bad", [
    "(if (i32.ne (call $token_bytes (i32.const -5) (i32.const 0) (i32.const 10)) (i32.const -1)) (then unreachable))",
    "(if (i32.ne (call $token_bytes (i32.const 5) (i32.const 0) (i32.const -10)) (i32.const 1)) (then unreachable))",
    "(if (i32.ne (call $regex_new (i32.const 32) (i32.const 3)) (i32.const -1)) (then unreachable))",
    "(if (call $constraint_accept (call $regex_new (i32.const 40) (i32.const 2)) (i32.const -1)) (then unreachable))",
    "(if (call $constraint_accept (call $regex_new (i32.const 40) (i32.const 2)) (i32.const 0x7fffffff))"
    " (then unreachable))",
    "(if (call $constraint_rollback (call $regex_new (i32.const 40) (i32.const 2)) (i32.const 5)) (then unreachable))",
])
def test_out_of_range_values_get_an_answer_not_a_crash(tok_spm, bad):
    bad_seq = good_and_bad(run_wat(tok_spm, hostile_wat(bad), WasmLimits(memory_bytes=4 << 20)))
    assert bad_seq.error is None and bad_seq.stop_reason == "stop", bad_seq.error


def test_an_invalid_regex_is_logged_with_its_cause(tok_spm):
    bad = "(drop (call $regex_new (i32.const 32) (i32.const 3)))"
    seq = good_and_bad(run_wat(tok_spm, hostile_wat(bad), WasmLimits()))
    assert seq.error is None and "regex_new: RegexError: missing ), unterminated subpattern" in seq.log


def test_a_huge_splice_is_cut_at_max_tokens(tok_spm):
    # 30000 token ids (zeros: <unk>, in the vocabulary) in one splice: 5 are kept
    seq = good_and_bad(run_wat(tok_spm, hostile_wat("(return (call $splice (i32.const 0) (i32.const 8192) "
                                                    "(i32.const 30000)))"), max_tokens=5))
    assert seq.error is None and seq.tokens == [0] * 5  # its post_process saw 5 tokens, then stopped


def test_the_variables_of_a_request_are_bounded(tok_spm):
    # a new 64 KiB variable per loop: the request's variables fill up, not the process's memory
    bad = """(loop $l (i32.store8 (i32.const 100) (i32.add (i32.load8_u (i32.const 100)) (i32.const 1)))
               (call $var_set (i32.const 100) (i32.const 1) (i32.const 0) (i32.const 65536)) (br $l))"""
    res = run_wat(tok_spm, hostile_wat(bad), WasmLimits(), limits=Limits(max_variables_bytes=1 << 20))
    assert_ended(good_and_bad(res), "over their limit of 1048576 bytes")
    assert sum(len(k) + len(v) for k, v in res.variables.items()) <= 1 << 20
    store = VariableStore(10)
    store.set("ab", b"1234")
    with pytest.raises(ControllerError, match="would hold 11 bytes, over their limit of 10 bytes"):
        store.append("ab", b"12345")
    assert store.get("ab") == b"1234"


# -- fork bombs ------------------------------------------------------------------------------------------------------
def test_a_fork_bomb_is_capped_by_max_sequences(tok_spm):
    # every pre_process forks in two, for ever; every sequence samples and goes on
    bomb = """(module (memory (export "memory") 1)
      (func (export "lg_alloc") (param i32) (result i32) (i32.const 1024))
      (func (export "lg_init_prompt") (param i32 i32))
      (func (export "lg_pre_process") (result i32) (i32.const 2))
      (func (export "lg_mid_process") (param i32 i32) (result i32) (i32.const 1))
      (func (export "lg_post_process") (param i32 i32 i32) (result i32) (i32.const 1)))"""
    res = run_wat(tok_spm, bomb, limits=Limits(max_sequences=8))
    assert len(res.sequences) == 8
    assert any("fork(2) would exceed 8 sequences for this request" in (s.error or "") for s in res.sequences)


def test_a_clone_reruns_its_start_function_on_the_fork_budget(tok_spm):
    # the start function burns 5e7 fuel: fine for the root (fuel_init_prompt), too much for a clone
    funcs = """(func $burn (local $i i32) (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1)))
                 (br_if $l (i32.lt_u (local.get $i) (i32.const 10000000))))) (start $burn)"""
    t = time.perf_counter()
    res = run_wat(tok_spm, hostile_wat(funcs=funcs), WasmLimits(fuel_fork=1_000_000))
    assert time.perf_counter() - t < 5
    (root,) = res.sequences
    assert "fork raised WasmTrap: ran out of fuel (1000000) in fork" in root.error


def test_forks_share_one_memory_budget(tok_spm):
    # 4 MiB per instance, 3 MiB for the request: the bomb in sequence 1 gets what sequence 0 leaves
    bad = "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) (i32.store (i32.const 0x2ffff0) (i32.const 1))"
    limits = WasmLimits(fuel_mid_process=20_000_000, memory_bytes=4 << 20, request_memory_bytes=3 << 20)
    module = WasmModule.from_wat(hostile_wat(bad))
    factory = module.controller_factory(limits)
    res = run_controller(factory, ScriptedModel(tok_spm, b"", strict=False), "p", max_tokens=20)
    bad_seq = good_and_bad(res)
    # two pages for sequence 0 (alive while sequence 1 grows), the rest for sequence 1
    assert "request's Wasm memory budget (request_memory_bytes=3145728)" in bad_seq.error, bad_seq.error
    assert "out of bounds memory access" in bad_seq.error
    # a fork that does not fit ends the forking sequence; the budget is given back as instances close
    big = hostile_wat(memory="40")  # 40 pages = 2.5 MiB: two do not fit in 4 MiB
    factory = WasmModule.from_wat(big).controller_factory(WasmLimits(request_memory_bytes=4 << 20))
    (root,) = run_controller(factory, ScriptedModel(tok_spm, b"", strict=False), "p").sequences
    needle = "fork raised WasmTrap: <wat> could not be instantiated: memory minimum size of 40 pages exceeds"
    assert needle in root.error and "(limits: 1572864 bytes of memory" in root.error
    (root,) = run_controller(factory, ScriptedModel(tok_spm, b"", strict=False), "p").sequences  # again: all given back
    assert needle in root.error and "(limits: 1572864 bytes of memory" in root.error


# -- refused at load, or at instantiation ------------------------------------------------------------------------
@pytest.mark.parametrize("module, name", [
    ("wasi_snapshot_preview1", "fd_write"), ("wasi_snapshot_preview1", "sock_accept"),
    ("wasi_snapshot_preview1", "path_open"), ("env", "abort"), ("env", "emscripten_memcpy_big"),
    ("logitgate", "open"), ("logitgate", "system"),
])
def test_no_import_outside_the_abi_is_accepted(module, name):
    imports = f'(import "{module}" "{name}" (func (param i32) (result i32)))'
    with pytest.raises(WasmLoadError, match=f"imports {module}.{name}"):
        WasmModule.from_wat(hostile_wat().replace("(module ", f"(module {imports}", 1))


def test_a_v128_signature_is_refused_and_does_not_abort_the_process():
    """wasmtime-py aborts the process when it reads a v128 parameter's type: SIMD is off, so the
    compiler refuses such a module first (run in a child process: a regression would abort it)."""
    code = textwrap.dedent("""
        from logitgate.controllers.wasm import WasmModule, WasmLoadError
        src = '(module (import "logitgate" "log" (func (param v128))) (memory (export "memory") 1))'
        try:
            WasmModule.from_wat(src)
        except WasmLoadError as exc:
            print("refused:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and "SIMD support is not enabled" in out.stdout


@pytest.mark.parametrize("change, needle", [
    ('(func (export "lg_alloc") (param i32) (result i32) (i32.const 4096))', "does not export lg_alloc"),
    ('(func (export "lg_init_prompt") (param i32 i32))|(func (export "lg_init_prompt") (param i64 i32))',
     r"exports lg_init_prompt with the wrong type; it is (i32, i32) -> ()"),
    ('(func (export "lg_post_process") (param i32 i32 i32) (result i32)|'
     '(func (export "lg_post_process") (param i32 i32 i32) (result i32 i32) (i32.const 0)',
     "exports lg_post_process with the wrong type"),
    ('(func (export "lg_alloc") (param i32) (result i32) (i32.const 4096))|(global (export "lg_alloc") i32 (i32.const 0))',
     "exports lg_alloc with the wrong type"),
    ('(memory (export "memory") 2)|(memory (export "memory") 2) (memory 1)', "invalid WebAssembly module"),
])
def test_modules_with_wrong_exports_are_refused(change, needle):
    old, _, new = change.partition("|")
    source = hostile_wat()
    assert old in source
    with pytest.raises(WasmLoadError) as info:
        WasmModule.from_wat(source.replace(old, new))
    assert needle in str(info.value)


@pytest.mark.parametrize("change, needle", [
    ("memory=65536", "memory minimum size of 65536 pages exceeds memory limits"),
    ("memory=1025", "limits: 67108864 bytes of memory"),
    ("funcs=(table 10000000 funcref)", "table minimum size of 10000000 elements exceeds table limits"),
    ("funcs=(table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref)",
     "table count too high"),
    ("funcs=(func $s (call $log (i32.const 16) (i32.const 3)) unreachable) (start $s)",
     "trap in instantiation: wasm `unreachable` instruction executed"),
    ("funcs=(func $s (loop $l (br $l))) (start $s)", "ran out of fuel (10000000) in instantiation"),
])
def test_instantiation_failures_are_a_start_error_with_the_log(tok_spm, change, needle):
    key, _, value = change.partition("=")
    module = WasmModule.from_wat(hostile_wat(**{key: value}))
    with pytest.raises(ControllerStartError) as info:
        run_controller(module.controller_factory(WasmLimits(fuel_init_prompt=10_000_000)),
                       ScriptedModel(tok_spm, b"", strict=False), "p")
    assert needle in str(info.value) and str(info.value).startswith("the controller could not be created: WasmTrap")
    if "$log" in value:  # what the start function logged before it trapped reaches the caller
        assert info.value.log == " ok"


def test_truncated_random_and_corrupted_modules_are_refused_or_contained(tok_spm):
    raw = wasmtime.wat2wasm(hostile_wat())
    for cut in (0, 4, 8, 9, 20, len(raw) // 3, len(raw) // 2, len(raw) - 1):
        with pytest.raises(WasmLoadError, match="^<bytes>: (not a WebAssembly binary|not a core WebAssembly module|"
                                                "invalid WebAssembly module: failed|does not export its memory)"):
            WasmModule.from_bytes(raw[:cut])
    rng = random.Random(9)
    for _ in range(5):
        junk = b"\0asm\x01\0\0\0" + rng.randbytes(300)
        with pytest.raises(WasmLoadError, match="invalid WebAssembly module: failed to parse WebAssembly module: .+"):
            WasmModule.from_bytes(junk)
    outcomes = {"refused": 0, "start error": 0, "ran": 0}
    for _ in range(300):  # one byte changed: refused with a cause, refused at start, or run and contained
        data = bytearray(raw)
        data[rng.randrange(8, len(data))] = rng.randrange(256)
        try:
            module = WasmModule.from_bytes(bytes(data))
        except WasmLoadError as exc:
            assert str(exc).startswith("<bytes>: ") and len(str(exc)) > 30
            outcomes["refused"] += 1
            continue
        try:
            res = run_controller(module.controller_factory(FAST), ScriptedModel(tok_spm, b"", strict=False), "p",
                                 max_tokens=5)
        except ControllerStartError:
            outcomes["start error"] += 1
            continue
        outcomes["ran"] += 1
        assert res.sequences and all(s.stop_reason in ("stop", "length", "error") for s in res.sequences)
    assert outcomes["refused"] > 100 and outcomes["ran"] > 10, outcomes


# -- Python controllers in worker processes (trusted code: best-effort containment) --------------------------
posix_only = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/dev/shm").is_dir(),
                                reason="the process runtime needs os.fork and POSIX shared memory")


def run_script(tok, source: str, limits: Limits | None = None, **kw):
    limits = limits or Limits()
    from logitgate.controllers.process import ProcessControllers

    with ProcessControllers(scripting.script_factory(textwrap.dedent(source), "<hostile>"), limits, **kw) as rt:
        res = run_controller(rt, ScriptedModel(tok, b"", strict=False), "Hi", limits=limits)
        assert rt.live_workers() == []
        ended = list(rt.ended)
    for w in ended:
        assert not Path(f"/proc/{w.pid}").exists(), f"worker {w.pid} left behind"
    return res


BRANCH = """
    import os, sys, time
    import pyaici.server as aici
    async def main():
        await aici.FixedTokens("a")
        i = await aici.fork(2)
        if i == 1:
            print("hostile branch starts")
{bad}
        await aici.FixedTokens("b")
    aici.start(main())
"""


def branch(bad: str) -> str:
    return BRANCH.format(bad=textwrap.indent(textwrap.dedent(bad), " " * 12))


@posix_only
@pytest.mark.parametrize("bad, needle", [
    ("def f(n):\n    return f(n + 1) + 1\nf(0)", "RecursionError: maximum recursion depth exceeded"),
    ("hog = []\nwhile True:\n    hog.append(bytearray(16 << 20))", "MemoryError"),
    ("while True:\n    pass", "did not return within its limit of 500 ms (the worker was killed)"),
    ("os.kill(os.getpid(), 9)", "killed by signal 9 (SIGKILL)"),
])
def test_a_hostile_python_branch_in_a_worker_ends_alone(tok_spm, bad, needle):
    # the memory bomb gets time to reach its cap on a loaded machine; the loop must hit the time limit
    t = 5.0 if needle == "MemoryError" else 0.5
    limits = Limits(pre_process=t, mid_process=t, post_process=t)
    ok, hostile = run_script(tok_spm, branch(bad), limits, memory_limit=128 << 20).sequences
    assert (ok.error, ok.text) == (None, "ab")
    assert hostile.stop_reason == "error" and needle in hostile.error, hostile.error
    assert "hostile branch starts" in hostile.log and needle.split(" (")[0] in hostile.log


@posix_only
def test_processes_a_script_forks_are_killed_and_reaped_with_its_worker(tok_spm):
    bad = """
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        aici.set_var("child", str(pid))
        time.sleep(5)
    """
    limits = Limits(pre_process=0.5, mid_process=0.5, post_process=0.5)
    res = run_script(tok_spm, branch(bad), limits)
    ok, hostile = res.sequences
    assert ok.error is None and "did not return within its limit" in hostile.error
    child = int(res.variables["child"])
    assert not Path(f"/proc/{child}").exists(), "the script's child is still there (or a zombie)"


@posix_only
def test_a_worker_gets_the_variables_limit_as_an_error(tok_spm):
    bad = """
        for k in range(100):
            aici.set_var(f"v{k}", "x" * 100_000)
    """
    ok, hostile = run_script(tok_spm, branch(bad), Limits(max_variables_bytes=1 << 20)).sequences
    assert ok.error is None
    assert "ControllerError" in hostile.error and "over their limit of 1048576 bytes" in hostile.error


# -- the server: errors and logs reach the client (item 6) ------------------------------------------------------
@pytest.fixture(scope="module")
def server(tok_spm):
    pytest.importorskip("fastapi")
    from logitgate.server import create_app

    from .test_server_api import FakeEngine, FakeModel, _serve

    url, srv, thread = _serve(create_app(FakeEngine(FakeModel(tok_spm)),
                                         controller_model=ScriptedModel(tok_spm, b"", strict=False)))
    yield url
    srv.should_exit = True
    thread.join(timeout=10)


def upload(url: str, source: str | bytes) -> str:
    import httpx

    data = source if isinstance(source, bytes) else bytes(wasmtime.wat2wasm(source))
    r = httpx.post(f"{url}/v1/controllers", content=data, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["module_id"]


def test_the_server_refuses_bad_modules_with_the_cause(server):
    import httpx

    wasi = hostile_wat().replace("(module ", '(module (import "wasi_snapshot_preview1" "fd_write" '
                                            '(func (param i32 i32 i32 i32) (result i32)))', 1)
    for data, needle in [(bytes(wasmtime.wat2wasm(wasi)), "imports wasi_snapshot_preview1.fd_write"),
                         (bytes(wasmtime.wat2wasm(hostile_wat()))[:-3], "invalid WebAssembly module: failed to parse"),
                         (b"\0asm\x01\0\0\0" + bytes(range(256)), "invalid WebAssembly module")]:
        r = httpx.post(f"{server}/v1/controllers", content=data, timeout=60)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text


def test_a_run_reports_the_failed_fork_with_its_log_and_the_good_one_finishes(server):
    import httpx

    bad = "(call $log (i32.const 16) (i32.const 3)) (loop $l (br $l))"
    module_id = upload(server, hostile_wat(bad))
    t = time.perf_counter()
    with httpx.stream("POST", f"{server}/v1/run", json={"controller": module_id, "max_tokens": 10}, timeout=60) as r:
        assert r.status_code == 200
        raw = r.read().decode()
    assert time.perf_counter() - t < 10
    events = [e[len("data: "):] for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    forks: dict[int, dict] = {}
    for e in events[1:-1]:
        for f in json.loads(e)["forks"]:
            seen = forks.setdefault(f["index"], {"text": "", "logs": "", "error": "", "finish_reason": None})
            seen["text"] += f["text"]
            seen["logs"] += f["logs"]
            seen["error"] = f["error"] or seen["error"]
            seen["finish_reason"] = f.get("finish_reason") or seen["finish_reason"]
    assert forks[0]["text"] == " ok" and forks[0]["error"] == "" and forks[0]["finish_reason"] == "aici-stop"
    assert forks[1]["finish_reason"] == "fail" and "ran out of fuel" in forks[1]["error"]
    assert forks[1]["logs"].startswith(" ok") and "ran out of fuel" in forks[1]["logs"]


def test_a_chat_completion_returns_each_forks_log_and_error(server):
    import httpx

    module_id = upload(server, hostile_wat("(call $log (i32.const 16) (i32.const 3)) (call $rec)",
                                           funcs="(func $rec (call $rec))"))
    r = httpx.post(f"{server}/v1/chat/completions", timeout=60, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "controller": module_id, "max_tokens": 10})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["message"]["content"] for c in body["choices"]] == [" ok", ""]
    seqs = body["controller"]["sequences"]
    assert seqs[0]["error"] == "" and "call stack exhausted" in seqs[1]["error"]
    assert seqs[1]["logs"].startswith(" ok") and "call stack exhausted" in seqs[1]["logs"]


def test_a_controller_that_fails_to_start_reaches_the_client_with_its_log(server):
    import httpx

    module_id = upload(server, hostile_wat(funcs="(func $s (call $log (i32.const 16) (i32.const 3)) unreachable) "
                                                 "(start $s)"))
    r = httpx.post(f"{server}/v1/chat/completions", timeout=60, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "controller": module_id, "max_tokens": 5})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "controller_failed" and "unreachable" in err["message"] and err["logs"] == " ok"
    with httpx.stream("POST", f"{server}/v1/run", json={"controller": module_id, "max_tokens": 5}, timeout=60) as r:
        assert r.status_code == 200
        events = [e[len("data: "):] for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])["forks"][0]
    assert last["finish_reason"] == "fail" and "unreachable" in last["error"] and last["logs"] == " ok"


def test_the_server_stores_at_most_max_modules(tok_spm):
    pytest.importorskip("fastapi")
    import httpx

    from logitgate.server import create_app

    from .test_server_api import FakeEngine, FakeModel, _serve

    url, srv, thread = _serve(create_app(FakeEngine(FakeModel(tok_spm)), max_modules=2))
    try:
        modules = [bytes(wasmtime.wat2wasm(hostile_wat(f"(drop (i32.const {i}))"))) for i in range(3)]
        codes = [httpx.post(f"{url}/v1/controllers", content=m, timeout=60).status_code for m in modules]
        assert codes == [200, 200, 507]
        again = httpx.post(f"{url}/v1/controllers", content=modules[0], timeout=60)  # stored already: fine
        assert again.status_code == 200
        r = httpx.post(f"{url}/v1/controllers", content=modules[2], timeout=60)
        assert r.json()["error"]["code"] == "too_many_modules" and "2" in r.json()["error"]["message"]
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
