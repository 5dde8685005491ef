"""Wasm controllers (logitgate.controllers.wasm): the C controllers of wasm_src/ run end to end
through run_controller on a scripted model, the host masks against brute force, fork cloning, and
hostile modules (infinite loop, memory bomb, fork bomb, WASI imports, bad pointers, oversized or
invalid binaries) that must end only their own sequence or be refused at load."""
from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

import logitgate
from logitgate.controllers import (
    Continue,
    ControllerError,
    ControllerHost,
    Limits,
    SampleWithBias,
    VariableStore,
    run_controller,
)

from .test_generation import ScriptedModel

wasm = pytest.importorskip("logitgate.controllers.wasm")
pytest.importorskip("wasmtime")
WasmLimits, WasmModule = wasm.WasmLimits, wasm.WasmModule

# One module whose argument picks its misbehaviour. It forks into two first (except the fork
# bombs): branch 0 behaves (splices " ok", stops), branch 1 misbehaves in mid_process.
HOSTILE_C = r"""
#include "logitgate_ctrl.h"
static char mode[32];
static int32_t forked, spliced, tokens[16];
static char junk[1000];

static int is(const char *m) {
  int i = 0;
  for (; m[i]; i++) if (mode[i] != m[i]) return 0;
  return mode[i] == 0;
}
LG_EXPORT("lg_init_prompt") void lg_init_prompt(const int32_t *p, int32_t n) {
  int32_t len = lg_module_arg(mode, 31);
  mode[len < 31 ? len : 31] = 0;
}
LG_EXPORT("lg_pre_process") int32_t lg_pre_process(void) {
  if (is("forkbomb")) return LG_FORK(2);
  if (is("bigfork")) return LG_FORK(100000);
  if (!forked) { forked = 1; return LG_FORK(2); }
  return spliced ? LG_STOP : LG_CONTINUE;
}
LG_EXPORT("lg_mid_process") int32_t lg_mid_process(const int32_t *group, int32_t n) {
  if (lg_self_seq_id() == group[0] || is("forkbomb")) {
    int32_t k = lg_tokenize(" ok", 3, tokens, 16);
    return lg_splice(0, tokens, k);
  }
  if (is("loop")) { volatile int32_t x = 0; for (;;) x++; }
  if (is("membomb"))
    for (;;) {
      int32_t page = __builtin_wasm_memory_grow(0, 16);
      ((volatile char *)(uintptr_t)((uint32_t)page * 65536u))[0] = 1;
    }
  if (is("badptr")) lg_log((const char *)0x7ffffff0, 100);
  if (is("badhandle")) return lg_sample_constraint(12345);
  if (is("trap")) lg_fail("giving up");
  if (is("logbomb")) for (int i = 0; i < 5000; i++) lg_log(junk, sizeof junk);
  if (is("varbomb")) for (;;) lg_var_append("v", 1, junk, sizeof junk);
  return LG_STOP;
}
LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *t, int32_t n, int32_t b) {
  spliced = 1;
  return is("forkbomb") ? LG_CONTINUE : LG_STOP;
}
"""

# Counts its pre_process calls in memory, logs the count, forks at 3; the prompt it is given can
# be large, which grows its memory (lg_alloc) before the fork.
COUNTER_C = r"""
#include "logitgate_ctrl.h"
static int32_t counter;
LG_EXPORT("lg_init_prompt") void lg_init_prompt(const int32_t *p, int32_t n) {}
LG_EXPORT("lg_pre_process") int32_t lg_pre_process(void) {
  char buf[16];
  int32_t n = lg_itoa(++counter, buf);
  buf[n++] = '\n';
  lg_log(buf, n);
  return LG_CONTINUE;
}
LG_EXPORT("lg_mid_process") int32_t lg_mid_process(const int32_t *g, int32_t n) {
  char buf[16];
  int32_t len = lg_itoa(n, buf);
  lg_var_set("group", 5, buf, len);
  return lg_sample_any();
}
LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *t, int32_t n, int32_t b) { return LG_CONTINUE; }
"""

EXPORTS_WAT = """
  (func (export "lg_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "lg_init_prompt") (param i32 i32))
  (func (export "lg_mid_process") (param i32 i32) (result i32) (i32.const 1))
  (func (export "lg_post_process") (param i32 i32 i32) (result i32) (i32.const 1))
"""


def wat(body: str, exports: str = EXPORTS_WAT, imports: str = "",
        pre: str = '(func (export "lg_pre_process") (result i32) (i32.const 1))') -> str:
    return f'(module {imports} (memory (export "memory") 1) {exports} {pre} {body})'


class MultiTargetModel(ScriptedModel):
    """A scripted model for several branches: it writes whichever target the sequence so far is a
    prefix of (flat logits when none: a pass the runner runs ahead and a splice then wastes)."""

    def __init__(self, tokenizer: logitgate.Tokenizer, *targets: bytes) -> None:
        super().__init__(tokenizer, targets[0])
        self.targets = targets

    def forward(self, tokens):
        self.forwards += 1
        self._ids.extend(tokens)
        done = self.tokenizer.decode_bytes(self._ids[self.prompt_len:])
        logits = np.full(self.tokenizer.vocab_size, -10.0, dtype=np.float32)
        target = next((t for t in self.targets if t.startswith(done)), None)
        if target is None:
            return logits
        rest = target[len(done):]
        if not rest:
            logits[self.tokenizer.eos_token_ids[0]] = 10.0
        for tid, b in enumerate(self.tokenizer.tokens):
            if rest and tid not in self.tokenizer.special_ids and b and rest.startswith(b):
                logits[tid] = len(b)
        return logits


@pytest.fixture(scope="session")
def wasm_modules(tmp_path_factory) -> dict[str, WasmModule]:
    """The C controllers and the hostile modules, built once per session."""
    out = tmp_path_factory.mktemp("wasm")
    (out / "hostile.c").write_text(HOSTILE_C)
    (out / "counter.c").write_text(COUNTER_C)
    sources = {name: wasm.C_SOURCES / f"{name}.c" for name in ("yesno", "forks", "digits")}
    sources.update(hostile=out / "hostile.c", counter=out / "counter.c")
    modules = {}
    t = time.perf_counter()
    for name, src in sources.items():
        try:
            path = wasm.build_c([src], out / f"{name}.wasm")
        except wasm.WasmBuildError as exc:
            if "no C compiler" in str(exc):
                pytest.skip(str(exc))
            raise
        modules[name] = WasmModule.from_file(path)
    print(f"built {len(sources)} C controllers in {time.perf_counter() - t:.2f} s")
    return modules


def host_for(tok: logitgate.Tokenizer, seq_id: int = 0) -> ControllerHost:
    model = ScriptedModel(tok, b"")
    return ControllerHost(tok, lambda data: model.encode_bytes(data) or [], VariableStore(), seq_id)


# -- the C controllers, end to end -------------------------------------------------------------------
@pytest.mark.parametrize("answer", ["yes", "no"])
def test_yesno_forces_the_prefix_and_answers_under_the_regex(tok_spm, wasm_modules, answer):
    model = ScriptedModel(tok_spm, f"Answer: {answer}".encode())
    res = run_controller(wasm_modules["yesno"].controller_factory(), model, "Is it?")
    (seq,) = res.sequences
    assert seq.error is None and seq.stop_reason == "stop", seq.log
    assert seq.text == f"Answer: {answer}"
    assert res.variables == {"answer": f" {answer}".encode()}
    assert seq.log == f"answer: {answer}\n"
    # the prefix was spliced as the model's own tokens, the answer sampled, then EOS
    prefix = model.encode_bytes(b"Answer:")
    assert seq.tokens[:len(prefix)] == prefix and seq.tokens[-1] == tok_spm.eos_token_ids[0]


def test_the_regex_holds_when_the_model_wants_something_else(tok_spm, wasm_modules):
    model = MultiTargetModel(tok_spm, b"Colour: purple")
    arg = "Colour:\n (red|green|blue)"
    res = run_controller(wasm_modules["yesno"].controller_factory(arg=arg), model, "Pick one.")
    (seq,) = res.sequences
    assert seq.error is None, seq.log
    assert re.fullmatch(r" (red|green|blue)", res.variables["answer"].decode())
    assert seq.text == "Colour:" + res.variables["answer"].decode()


def test_a_module_argument_that_does_not_compile_ends_the_sequence(tok_spm, wasm_modules):
    factory = wasm_modules["yesno"].controller_factory(arg="A:\n(unclosed")
    res = run_controller(factory, ScriptedModel(tok_spm, b""), "p")
    (seq,) = res.sequences
    assert seq.stop_reason == "error" and "unreachable" in seq.error
    assert "regex_new: RegexError" in seq.log and "does not compile" in seq.log


def test_forks_backtrack_share_variables_and_wait(tok_spm, wasm_modules):
    model = MultiTargetModel(tok_spm, b" 0=11; got 333333", b" 1=22;", b" 2=333333;")
    res = run_controller(wasm_modules["forks"].controller_factory(), model, "p")
    zero, one, two = res.sequences
    for seq in res.sequences:
        assert seq.error is None and seq.stop_reason == "stop", seq.log
    # each branch replaced the parent's draft (a splice with backtrack: its length was in the
    # parent's memory before the fork) by its own label, then generated under the cloned constraint
    assert zero.text == " 0=11; got 333333"
    assert one.text == " 1=22;"
    assert two.text == " 2=333333;"
    assert res.variables["b0"] == b"11" and res.variables["b1"] == b"22" and res.variables["b2"] == b"333333"
    assert sorted(res.variables["results"].decode().split(";")) == ["", "0=11", "1=22", "2=333333"]
    # branch 0 finished its digits first and suspended until branch 2 set b2
    assert zero.log == "branch 0 waits for b2\n" and one.log == "" and two.log == ""
    assert res.variables["results"].decode().index("0=11") < res.variables["results"].decode().index("2=333333")


def test_the_host_masks_equal_brute_force(tok_spm, wasm_modules):
    res = run_controller(wasm_modules["digits"].controller_factory(), ScriptedModel(tok_spm, b" 2024"), "p")
    (seq,) = res.sequences
    assert seq.error is None and seq.text == " 2024", seq.log
    dfa = np.frombuffer(res.variables["dfa_mask"], dtype="<i4")
    regex = np.frombuffer(res.variables["regex_mask"], dtype="<i4")
    # brute force: a non-special token is allowed first iff its bytes are a prefix of " [0-9]+"
    expected = np.array([t not in tok_spm.special_ids and bool(re.fullmatch(rb" [0-9]*", b))
                         for t, b in enumerate(tok_spm.tokens)])
    assert expected.sum() > 1
    for mask in (dfa, regex):
        assert np.array_equal(logitgate.bitmask_to_bool(mask, tok_spm.vocab_size), expected)
    matcher = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex(" [0-9]+"), tok_spm))
    bm = logitgate.allocate_token_bitmask(1, tok_spm.vocab_size)
    matcher.fill_next_token_bitmask(bm, 0)
    assert np.array_equal(bm[0], regex)


def test_a_fork_copies_memory_then_diverges(tok_spm, wasm_modules):
    factory = wasm_modules["counter"].controller_factory()
    parent = factory(host_for(tok_spm, 0))
    parent.init_prompt(list(range(100_000)))  # 400 kB through lg_alloc: the memory grows first
    for _ in range(3):
        parent.pre_process()
    twin = parent.fork(host_for(tok_spm, 1))
    twin.pre_process()
    twin.pre_process()
    parent.pre_process()
    assert parent.host.log.getvalue() == "1\n2\n3\n4\n"
    assert twin.host.log.getvalue() == "4\n5\n"  # its own log, counting on from the parent's 3
    # the clone's lg_alloc buffer lies in the grown part of its copied memory
    assert isinstance(twin.mid_process([0, 1]), SampleWithBias)
    assert twin.host.variables.get("group") == b"2"
    parent.close()
    twin.pre_process()  # closing the parent leaves the clone alone
    assert twin.host.log.getvalue().endswith("6\n")
    with pytest.raises(wasm.WasmError, match="closed"):
        parent.pre_process()


def test_a_fork_copies_the_mutable_globals(tok_spm):
    # pre_process: g += 1; fork at g == 3, stop at g == 6. A clone that did not get g == 3 would fork
    # again.
    pre = """(func (export "lg_pre_process") (result i32)
        (global.set $g (i32.add (global.get $g) (i32.const 1)))
        (if (result i32) (i32.eq (global.get $g) (i32.const 3)) (then (i32.const 2))
          (else (if (result i32) (i32.ge_s (global.get $g) (i32.const 6))
                  (then (i32.const 0)) (else (i32.const 1))))))"""
    module = WasmModule.from_wat(wat('(global $g (export "g") (mut i32) (i32.const 0))', pre=pre))
    assert module.mutable_globals == ["g"]
    res = run_controller(module.controller_factory(), MultiTargetModel(tok_spm, b"abcdefghijkl"), "p")
    assert [s.seq_id for s in res.sequences] == [0, 1]
    assert [len(s.tokens) for s in res.sequences] == [5, 5]
    assert all(s.error is None for s in res.sequences)


def test_constraint_handles_are_cloned_with_the_instance(tok_spm, wasm_modules):
    factory = wasm_modules["yesno"].controller_factory(arg="Go:\n [0-9]{3}")
    parent = factory(host_for(tok_spm))
    parent.init_prompt([1])
    parent.mid_process([0])
    parent.post_process(parent.host.tokenize_bytes(b"Go:"))  # the prefix is in
    digit = {d: parent.host.tokenize_bytes(d.encode())[-1] for d in "0123456789"}
    space = parent.host.tokenize_bytes(b" ")[0]
    parent.post_process([space])
    parent.post_process([digit["1"]])
    twin = parent.fork(host_for(tok_spm, 1))
    parent.post_process([digit["2"]])
    # the twin's constraint is still after " 1": two digits to go; the parent's after " 12": one
    for ctrl, left in ((parent, 1), (twin, 2)):
        for _ in range(left):
            mask = ctrl.mid_process([0]).bitmask
            allowed = np.flatnonzero(logitgate.bitmask_to_bool(mask, tok_spm.vocab_size))
            assert digit["7"] in allowed and space not in allowed
            assert isinstance(ctrl.post_process([digit["7"]]), Continue)
        mask = ctrl.mid_process([0]).bitmask
        assert list(np.flatnonzero(logitgate.bitmask_to_bool(mask, tok_spm.vocab_size))) == [tok_spm.eos_token_ids[0]]


# -- hostile modules: each ends only its own sequence ----------------------------------------------------
FAST = WasmLimits(fuel_mid_process=20_000_000, memory_bytes=4 << 20)


def run_hostile(tok, module, mode, wasm_limits=FAST, **kw):
    return run_controller(module.controller_factory(wasm_limits, arg=mode), MultiTargetModel(tok, b""), "p", **kw)


def test_an_infinite_loop_runs_out_of_fuel_and_its_sibling_finishes(tok_spm, wasm_modules):
    t = time.perf_counter()
    res = run_hostile(tok_spm, wasm_modules["hostile"], "loop")
    assert time.perf_counter() - t < 5
    good, bad = res.sequences
    assert good.error is None and good.text == " ok" and good.stop_reason == "stop"
    assert bad.stop_reason == "error"
    assert "ran out of fuel (20000000) in mid_process" in bad.error and "fuel" in bad.log


def test_a_memory_bomb_hits_the_memory_limit(tok_spm, wasm_modules):
    good, bad = run_hostile(tok_spm, wasm_modules["hostile"], "membomb").sequences
    assert good.error is None and good.text == " ok"
    assert "memory limit of 4194304 bytes" in bad.error and "out of bounds" in bad.error


@pytest.mark.parametrize("mode, needle", [
    ("badptr", "log: 100 bytes at 0x7ffffff0 are outside the module's memory"),
    ("badhandle", "sample_constraint: 12345 is not a live constraint handle"),
    ("trap", "unreachable"),
    ("varbomb", "over the limit of 1048576 bytes per variable"),
])
def test_a_bad_host_call_or_trap_ends_only_that_sequence(tok_spm, wasm_modules, mode, needle):
    # the variable bomb's host work (copying the growing value) is paid in fuel: give it enough
    # to reach the variable limit first
    limits = WasmLimits(fuel_mid_process=4_000_000_000, memory_bytes=4 << 20) if mode == "varbomb" else FAST
    good, bad = run_hostile(tok_spm, wasm_modules["hostile"], mode, wasm_limits=limits).sequences
    assert good.error is None and good.text == " ok"
    assert bad.stop_reason == "error" and needle in bad.error, bad.error


def test_host_work_is_paid_in_fuel(tok_spm, wasm_modules):
    """A loop of host calls (each cheap for the module, not for the host) runs out of fuel: the
    variable bomb under the default budget, and any host call at a high price per call."""
    good, bad = run_hostile(tok_spm, wasm_modules["hostile"], "varbomb").sequences
    assert good.error is None and good.text == " ok"
    assert "ran out of fuel" in bad.error and "in a host function" in bad.error
    pricey = WasmLimits(fuel_per_host_call=10_000_000)  # pre_process's whole budget is 2e7
    res = run_controller(wasm_modules["yesno"].controller_factory(pricey), ScriptedModel(tok_spm, b"Answer: yes", strict=False), "p")
    assert "ran out of fuel" in res.sequences[0].error


def test_the_log_is_capped(tok_spm, wasm_modules):
    # 5,000 log calls: their host time is paid in fuel (about 10-20 us of CPU each on a slow
    # machine, which can exhaust the default 2e8 of mid_process); give them a budget that any
    # machine meets, since what is tested here is the cap, not the fuel
    limits = WasmLimits(max_log_bytes=10_000, fuel_mid_process=4_000_000_000)
    good, bad = run_hostile(tok_spm, wasm_modules["hostile"], "logbomb", wasm_limits=limits).sequences
    assert bad.error is None and good.error is None
    assert len(bad.log) < 10_200 and "log truncated at 10000 bytes" in bad.log


def test_fork_bombs_are_bounded_by_max_sequences(tok_spm, wasm_modules):
    res = run_hostile(tok_spm, wasm_modules["hostile"], "forkbomb", limits=Limits(max_sequences=8))
    assert 2 <= len(res.sequences) <= 8
    assert any("would exceed 8 sequences" in (s.error or "") for s in res.sequences)
    res = run_hostile(tok_spm, wasm_modules["hostile"], "bigfork", limits=Limits(max_sequences=8))
    (seq,) = res.sequences
    assert "fork(100000) would exceed 8 sequences" in seq.error


def test_start_functions_run_on_fuel_and_may_call_the_host(tok_spm):
    module = WasmModule.from_wat(wat('(func $start (loop $l (br $l))) (start $start)'))
    with pytest.raises(ControllerError, match="ran out of fuel"):
        run_controller(module.controller_factory(WasmLimits(fuel_init_prompt=10_000_000)),
                       MultiTargetModel(tok_spm, b""), "p")
    imports = '(import "logitgate" "log" (func $log (param i32 i32)))'
    body = '(data (i32.const 16) "started") (func $start (call $log (i32.const 16) (i32.const 7))) (start $start)'
    module = WasmModule.from_wat(wat(body, imports=imports))
    res = run_controller(module.controller_factory(), MultiTargetModel(tok_spm, b"x"), "p", max_tokens=1)
    assert res.sequences[0].log == "started" and res.sequences[0].stop_reason == "length"


# -- refused at load ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fd_write", "path_open", "sock_open"])
def test_wasi_imports_are_refused(name):
    imports = f'(import "wasi_snapshot_preview1" "{name}" (func (param i32 i32 i32 i32) (result i32)))'
    with pytest.raises(wasm.WasmLoadError, match=f"imports wasi_snapshot_preview1.{name}, but a controller may only"):
        WasmModule.from_wat(wat("", imports=imports))


def test_imports_outside_the_abi_are_refused():
    with pytest.raises(wasm.WasmLoadError, match="imports logitgate.open_file, which is not a host function"):
        WasmModule.from_wat(wat("", imports='(import "logitgate" "open_file" (func (param i32) (result i32)))'))
    wrong_type = r"imports logitgate.log with the wrong type; it is \(i32, i32\) -> \(\)"
    with pytest.raises(wasm.WasmLoadError, match=wrong_type):
        WasmModule.from_wat(wat("", imports='(import "logitgate" "log" (func (param i32) (result i32)))'))
    with pytest.raises(wasm.WasmLoadError, match="imports env.memory"):
        WasmModule.from_wat('(module (import "env" "memory" (memory 1)))')


def test_missing_exports_and_uncopyable_globals_are_refused():
    with pytest.raises(wasm.WasmLoadError, match="does not export lg_alloc, lg_init_prompt"):
        WasmModule.from_wat('(module (memory (export "memory") 1))')
    with pytest.raises(wasm.WasmLoadError, match="does not export its memory"):
        WasmModule.from_wat(f"(module {EXPORTS_WAT})")
    with pytest.raises(wasm.WasmLoadError, match="exports lg_pre_process with the wrong type"):
        WasmModule.from_wat(wat("", pre='(func (export "lg_pre_process") (param i32) (result i32) (i32.const 1))'))
    with pytest.raises(wasm.WasmLoadError, match="mutable global #0 is not exported"):
        WasmModule.from_wat(wat("(global $hidden (mut i32) (i32.const 0))"))
    # an immutable one needs no copy
    assert WasmModule.from_wat(wat("(global $c i64 (i64.const 7))")).mutable_globals == []


def test_oversized_and_invalid_modules_are_refused(tmp_path):
    with pytest.raises(wasm.WasmLoadError, match="over the limit of 1000 bytes"):
        WasmModule.from_bytes(b"\0asm\x01\0\0\0" + b"\0" * 2000, max_bytes=1000)
    big = tmp_path / "big.wasm"
    with big.open("wb") as f:
        f.truncate(wasm.DEFAULT_MAX_MODULE_BYTES + 1)
    too_big = f"big.wasm: {wasm.DEFAULT_MAX_MODULE_BYTES + 1} bytes, over the limit"
    with pytest.raises(wasm.WasmLoadError, match=too_big):
        WasmModule.from_file(big)
    with pytest.raises(wasm.WasmLoadError, match="not a WebAssembly binary"):
        WasmModule.from_bytes(b"#!/bin/sh\nrm -rf /\n")
    with pytest.raises(wasm.WasmLoadError, match="invalid WebAssembly module"):
        WasmModule.from_bytes(b"\0asm\x01\0\0\0\x01\xff\xff")
    with pytest.raises(wasm.WasmLoadError, match="not a core WebAssembly module"):
        WasmModule.from_bytes(b"\0asm\x0d\0\x01\0")


def test_build_errors_are_clear(tmp_path, monkeypatch):
    bad = tmp_path / "bad.c"
    bad.write_text("int main( {")
    try:
        with pytest.raises(wasm.WasmBuildError, match="failed"):
            wasm.build_c([bad], tmp_path / "bad.wasm")
    except wasm.WasmBuildError as exc:  # pragma: no cover - no compiler here
        pytest.skip(str(exc))
    import importlib.util
    import shutil

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(wasm.WasmBuildError, match="pip install ziglang"):
        wasm.build_c([bad], tmp_path / "bad.wasm")


# -- the embedded model --------------------------------------------------------------------------------
def test_yesno_on_the_embedded_model(llama_model, wasm_modules):
    messages = [{"role": "user", "content": "Is the sky blue on a clear day? Answer yes or no."}]
    res = run_controller(wasm_modules["yesno"].controller_factory(), llama_model, messages)
    (seq,) = res.sequences
    assert seq.error is None and seq.stop_reason == "stop", seq.log
    answer = res.variables["answer"].decode()
    assert re.fullmatch(r" (yes|no)", answer)
    assert seq.text == "Answer:" + answer


def test_cli_runs_c_wat_and_wasm_controllers_on_the_embedded_model(llama_model, wasm_modules, tmp_path, capsys):
    """`logitgate run` builds a .c controller, reads .wat text, loads .wasm, passes --arg, prints
    each sequence and the variables, and exits 1 when a sequence failed."""
    from logitgate.cli import main

    arg = "Is ice cold? Answer:\n (yes|no)"
    rc = main(["run", str(wasm.C_SOURCES / "yesno.c"), "--arg", arg, "--runtime", "llama-cpp", "--prompt", "Answer."])
    out = capsys.readouterr().out
    assert rc == 0, out
    m = re.search(r"== sequence 0 \(stop\)\nIs ice cold\? Answer:( yes| no)\n== variables\nanswer = '( yes| no)'", out)
    assert m and m.group(1) == m.group(2), out
    wasm_file = tmp_path / "forks.wasm"
    wasm.build_c([wasm.C_SOURCES / "forks.c"], wasm_file)
    rc = main(["run", str(wasm_file), "--runtime", "llama-cpp", "--max-tokens", "12"])
    out = capsys.readouterr().out
    assert out.count("== sequence") == 3
    for k in range(3):
        assert re.search(rf"== sequence {k} \(\w+(: .*)?\)\n {k}=", out), out
    bad = tmp_path / "bad.wat"
    bad.write_text('(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))')
    with pytest.raises(SystemExit, match="fd_write"):
        main(["run", str(bad), "--runtime", "llama-cpp"])


def test_calls_take_the_c_api_path_and_give_the_same_results(tok_spm, wasm_modules):
    """The exports are called through wasmtime's C API (wasmtime-py's Func.__call__ costs ~10 µs a
    call); the same calls through Func.__call__ give the same results and logs."""
    import wasmtime

    factory = wasm_modules["counter"].controller_factory()
    fast, slow = factory(host_for(tok_spm, 0)), factory(host_for(tok_spm, 0))
    assert not any(isinstance(f, wasmtime.Func) for f in fast._exports.values()), "the C API path is not in use"
    plain = slow._instance.exports(slow._store)
    slow._exports = {name: plain[name] for name in slow._exports}
    assert all(isinstance(f, wasmtime.Func) for f in slow._exports.values())
    for c in (fast, slow):
        c.init_prompt([1, 2, 3])
    for _ in range(4):
        assert fast.pre_process() == slow.pre_process()
    assert fast.host.log.getvalue() == slow.host.log.getvalue() != ""
    assert type(fast.mid_process([0, 1])) is type(slow.mid_process([0, 1]))
    assert fast.host.variables.get("group") == slow.host.variables.get("group") == b"2"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes need os.fork")
def test_wasm_controllers_in_worker_processes_match_in_process(tok_spm, wasm_modules):
    """The worker runtime runs Wasm controllers too (a fork of the worker copies the instance):
    the same texts and variables as in process, and a hostile module still ends alone."""
    from logitgate.controllers.process import ProcessControllers

    for name, target in (("yesno", b"Answer: yes"), ("forks", b" 1=42;")):
        factory = wasm_modules[name].controller_factory()
        local = run_controller(factory, ScriptedModel(tok_spm, target, strict=False), "p", max_tokens=20)
        with ProcessControllers(factory) as rt:
            remote = run_controller(rt, ScriptedModel(tok_spm, target, strict=False), "p", max_tokens=20)
            assert rt.live_workers() == []
        assert [(s.text, s.error) for s in remote.sequences] == [(s.text, s.error) for s in local.sequences]
        assert remote.variables == local.variables
    factory = wasm_modules["hostile"].controller_factory(FAST, arg="loop")
    with ProcessControllers(factory) as rt:
        good, bad = run_controller(rt, ScriptedModel(tok_spm, b"", strict=False), "p").sequences
    assert good.error is None and good.text == " ok"
    assert "ran out of fuel" in bad.error
