"""Sandboxed WebAssembly controllers (AICI's model): one wasmtime instance per sequence.

    module = WasmModule.from_file("yesno.wasm")                  # validated, compiled once
    run_controller(module.controller_factory(WasmLimits()), model, prompt)

A module can only call the host functions below: any other import (WASI's ``fd_write``,
``path_open``, ...) is refused at load time, so it can read no file, open no socket and see no
clock. Every call into it runs on a fuel budget (about one unit per Wasm instruction) and its
memory is capped; running out, trapping, or passing a bad pointer to a host function ends only
that sequence, with the cause in its log. ``build_c`` compiles C controllers (``wasm_src/``).

ABI (version 1; all values i32; pointers are offsets in the module's exported ``memory``)
-------------------------------------------------------------------------------------------

Exports the module must have::

    memory                                   its linear memory (one, 32-bit)
    lg_alloc(size) -> ptr                    a buffer of `size` bytes for the host to copy arrays
                                             into; the host owns it from then on (the module must
                                             not use it) and asks again only for a bigger one
    lg_init_prompt(prompt_ptr, n)            once: the n prompt token ids (i32)
    lg_pre_process() -> r                    1 continue, 0 stop, -1 suspend (skip this round),
                                             n >= 2 fork into n sequences (this one + n-1 clones)
    lg_mid_process(group_ptr, n) -> r        the fork group's n sequence ids; 0 stop, 1 go on
                                             with what the call asked for (below); none: sample
                                             any token
    lg_post_process(tokens_ptr, n, backtrack) -> r   the tokens appended (sampled or spliced)
                                             after removing `backtrack`; 1 continue, 0 stop

Optional: ``_initialize()``, called once after instantiation (not in forks).

Imports, module ``"logitgate"`` (each may be left out)::

    vocab_size() -> n                        token ids are 0 .. n-1; masks have ceil(n/32) words
    eos_token() -> id
    token_bytes(tok, out, cap) -> len        the token's bytes (special tokens: their name); the
                                             first `cap` are copied; -1 for an id out of range
    tokenize(ptr, len, out, cap) -> n        the model's token ids for `len` bytes (the first
                                             `cap` copied); -1 (logged) if it cannot
    self_seq_id() -> id
    module_arg(out, cap) -> len              the bytes given as ``controller_factory(arg=...)``
    var_get(name, name_len, out, cap) -> len     a shared variable (first `cap` bytes), -1 unset
    var_set(name, name_len, val, len)
    var_append(name, name_len, val, len)
    log(ptr, len)                            append to this sequence's log (its stdout)
    regex_new(ptr, len) -> h                 a host constraint for a logitgate regex; < 0 on an
                                             error (logged)
    constraint_mask(h, out) -> words         the allowed tokens now (bit t%32 of word t/32; EOS
                                             once the text is complete) into `out`
    constraint_accept(h, tok) -> 1|0         advance by a token (0: refused, no change)
    constraint_rollback(h, n) -> 1|0         undo n accepted tokens
    constraint_is_accepting(h) -> 1|0        the text so far is complete
    constraint_free(h)
    dfa_mask(table, n_states, accept, state, out) -> words
                                             the mask of the module's own DFA: `table` holds
                                             n_states*256 next states (-1 dead), `accept`
                                             n_states bytes; the host walks the token trie
    sample_mask(words_ptr) -> 1              mid_process: sample under this mask (copied)
    sample_constraint(h) -> 1                mid_process: sample under h's current mask
    splice(backtrack, tokens_ptr, n) -> 1    mid_process: remove `backtrack` tokens, append these

In ``lg_mid_process`` the last ``sample_*``/``splice`` call wins (elsewhere they are ignored); each
returns 1, so a module can ``return lg_splice(...)``. A bad pointer or length, an unknown handle,
or a value over its limit traps the call (the sequence ends). Host functions cost fuel too: one
unit per byte they copy (``dfa_mask``: also one per token), plus ``WasmLimits.fuel_per_host_call``
per call and ``fuel_per_host_second`` for the CPU time the host worked (a regex compile, a mask), so a
loop of host calls runs out of fuel like a loop of instructions.

Fork: the runtime clones the instance: a fresh instance of the same module gets a copy of the
memory, of every mutable global (all must be exported: C built by ``build_c`` exports its stack
pointer) and of the constraint handles. Tables are not copied (C never changes them); a start
function runs again in the clone before its memory is overwritten.

wasmtime-py hands a host function's exception back through a global: run one controller call at
a time per process (as ``run_controller`` does).
"""
from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..compiler import compile as compile_grammar
from ..errors import LogitgateError
from ..grammar import Grammar
from ..kernels import compile_cpu_seconds, trie_kernels
from ..matcher import Matcher
from .protocol import (
    Continue,
    Controller,
    ControllerError,
    ControllerHost,
    Fork,
    MidResult,
    PostResult,
    PreResult,
    SampleWithBias,
    Splice,
    Stop,
    Suspend,
)

_IDENTITY_CLASSES = np.arange(256, dtype=np.int32)  # dfa_mask tables have a column per byte
_IDENTITY_CLASSES.setflags(write=False)

__all__ = [
    "ABI_VERSION",
    "C_SOURCES",
    "WasmBuildError",
    "WasmController",
    "WasmError",
    "WasmHostError",
    "WasmLimits",
    "WasmLoadError",
    "WasmModule",
    "WasmTrap",
    "build_c",
]

ABI_VERSION = 1
"""Version of the host ABI a module is built against (see ``wasm_src/logitgate_ctrl.h``)."""
C_SOURCES = Path(__file__).resolve().parent / "wasm_src"
"""The C header (``logitgate_ctrl.h``) and the example controllers."""
DEFAULT_MAX_MODULE_BYTES = 16 << 20

# host functions: name -> (number of i32 params, number of i32 results)
_IMPORTS: dict[str, tuple[int, int]] = {
    "vocab_size": (0, 1), "eos_token": (0, 1), "token_bytes": (3, 1), "tokenize": (4, 1),
    "self_seq_id": (0, 1), "module_arg": (2, 1),
    "var_get": (4, 1), "var_set": (4, 0), "var_append": (4, 0), "log": (2, 0),
    "regex_new": (2, 1), "constraint_mask": (2, 1), "constraint_accept": (2, 1), "constraint_rollback": (2, 1),
    "constraint_is_accepting": (1, 1), "constraint_free": (1, 0), "dfa_mask": (5, 1),
    "sample_mask": (1, 1), "sample_constraint": (1, 1), "splice": (3, 1),
}
_EXPORTS: dict[str, tuple[int, int]] = {
    "lg_alloc": (1, 1), "lg_init_prompt": (2, 0), "lg_pre_process": (0, 1), "lg_mid_process": (2, 1),
    "lg_post_process": (3, 1),
}
_PAGE = 65536


class WasmError(ControllerError):
    """A Wasm controller failed."""


class WasmLoadError(WasmError):
    """A module was refused: not Wasm, too large, invalid, or with imports/exports outside the ABI."""


class WasmTrap(WasmError):
    """The module trapped: out of fuel, out of bounds, ``unreachable``, its memory limit, ..."""


class WasmHostError(WasmError):
    """The module called a host function wrongly (a bad pointer, an unknown handle, a value over a limit)."""


class WasmBuildError(WasmError):
    """C sources could not be compiled to Wasm (no compiler, or a compile error)."""


@dataclass(frozen=True)
class WasmLimits:
    """What one sequence's instance may use. Fuel is about one unit per Wasm instruction (roughly
    0.3-1 ns each): the defaults allow ~1 s for ``init_prompt``, ~100 ms for ``mid_process`` and
    ~10 ms for ``pre_process``/``post_process`` (AICI: 1000/20/1/1 ms)."""

    fuel_init_prompt: int = 2_000_000_000
    """Also covers instantiation (a start function) and ``_initialize``."""
    fuel_pre_process: int = 20_000_000
    fuel_mid_process: int = 200_000_000
    fuel_post_process: int = 20_000_000
    fuel_fork: int = 200_000_000
    """A clone's instantiation: its start function, if the module has one, runs again there (so
    that a fork bomb cannot spend ``fuel_init_prompt`` per fork)."""
    memory_bytes: int = 64 << 20
    """Linear memory cap of one instance: ``memory.grow`` past it fails (returns -1)."""
    request_memory_bytes: int = 256 << 20
    """Linear memory of all the live instances of one ``controller_factory`` (one run: a sequence
    and its forks) together: ``memory.grow`` past it fails, and so does a fork whose copy would
    not fit (it ends the forking sequence). Without it, forks multiply ``memory_bytes`` by
    ``Limits.max_sequences``."""
    table_elements: int = 100_000
    max_constraints: int = 64
    """Live host constraint handles per instance."""
    max_dfa_states: int = 1 << 16
    max_log_bytes: int = 1 << 20
    """Log output kept per sequence; the rest is dropped (with a note)."""
    max_variable_bytes: int = 1 << 20
    """Largest value ``var_set``/``var_append`` may leave in a variable."""
    fuel_per_host_call: int = 2_000
    """What every host function call costs (about the time its Python wrapper takes)."""
    fuel_per_host_second: int = 2_000_000_000
    """What host work costs per second of CPU time it took (compiling a regex in ``regex_new``, a
    mask; the calling thread's time, so a busy machine's waits are not charged), on top of the
    bytes it copies: the rate of the Wasm instructions the fuel stands for, so a module
    cannot stretch a call by having the host work for it (one compile is bounded by the regex
    compiler's own state cap)."""

    def fuel(self, call: str) -> int:
        """The fuel budget of ``call`` (``init_prompt``, ``pre_process``, ``mid_process``, ``post_process``
        or ``fork``): the ``fuel_<call>`` field."""
        return int(getattr(self, "fuel_" + call))


def _wasmtime() -> Any:
    try:
        import wasmtime
    except ImportError as exc:  # pragma: no cover - the wasm extra is not installed
        raise WasmError("Wasm controllers need wasmtime: pip install 'logitgate[wasm]'") from exc
    return wasmtime


_engine: Any = None
_engine_lock = threading.Lock()


def _shared_engine() -> Any:
    """The engine every module compiles with: fuel metering on; threads, 64-bit and multiple
    memories, GC and exceptions off (features that would put state where forking cannot copy it);
    SIMD off (wasmtime-py aborts the whole process when it reads a ``v128`` in a function's
    signature, so a module with one must be refused by the compiler, before we look at it)."""
    global _engine
    with _engine_lock:
        if _engine is None:
            w = _wasmtime()
            cfg = w.Config()
            cfg.consume_fuel = True
            for feature in ("wasm_threads", "wasm_memory64", "wasm_multi_memory", "wasm_gc",
                            "wasm_function_references", "wasm_exceptions", "wasm_stack_switching",
                            "wasm_relaxed_simd", "wasm_simd"):
                try:
                    setattr(cfg, feature, False)
                except (AttributeError, w.WasmtimeError):  # pragma: no cover - older wasmtime
                    pass
            _engine = w.Engine(cfg)
            atexit.register(_drop_engine)
        return _engine


def _drop_engine() -> None:
    """Let the engine go before interpreter shutdown tears down wasmtime's bindings (its
    finalizer would fail then)."""
    global _engine
    _engine = None


# -- reading a module's binary: the globals fork must copy ---------------------------------------
def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, pos


def _skip_const_expr(data: bytes, pos: int) -> int:
    """Skip a constant expression (a global's initializer) up to and including its ``end``."""
    while True:
        op = data[pos]
        pos += 1
        if op == 0x0B:
            return pos
        if op in (0x41, 0x42, 0x23, 0xD0, 0xD2):  # i32/i64.const, global.get, ref.null, ref.func
            _, pos = _uleb(data, pos)
        elif op == 0x43:
            pos += 4
        elif op == 0x44:
            pos += 8
        elif op == 0xFD:  # v128.const
            _, pos = _uleb(data, pos)
            pos += 16
        elif op not in (0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E):  # extended-const add/sub/mul
            raise WasmLoadError(f"unsupported instruction 0x{op:02x} in a global's initializer")


_NUMERIC = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64"}


def _mutable_global_exports(data: bytes, name: str) -> list[str]:
    """The export names of the module's mutable globals (one per global); refuses a mutable global
    that is not exported, or not a number (fork could not copy it)."""
    pos = 8
    mutable: dict[int, int] = {}
    exported: dict[int, str] = {}
    while pos < len(data):
        section = data[pos]
        size, pos = _uleb(data, pos + 1)
        end = pos + size
        if section == 6:  # globals
            count, p = _uleb(data, pos)
            for i in range(count):
                valtype = data[p]
                p += 1
                if valtype in (0x63, 0x64):  # (ref null? heaptype)
                    _, p = _uleb(data, p)
                if data[p]:
                    mutable[i] = valtype
                p = _skip_const_expr(data, p + 1)
        elif section == 7:  # exports
            count, p = _uleb(data, pos)
            for _ in range(count):
                n, p = _uleb(data, p)
                export = data[p:p + n].decode("utf-8")
                kind = data[p + n]
                index, p = _uleb(data, p + n + 1)
                if kind == 3:
                    exported.setdefault(index, export)
        pos = end
    names = []
    for index, valtype in sorted(mutable.items()):
        if valtype not in _NUMERIC:
            raise WasmLoadError(f"{name}: mutable global #{index} is not a number: a fork could not copy it")
        if index not in exported:
            raise WasmLoadError(f"{name}: mutable global #{index} is not exported, so a fork could not copy it "
                                "(link with -Wl,--export-dynamic, as build_c does)")
        names.append(exported[index])
    return names


def _signature(ty: Any) -> tuple[int, int] | None:
    """(params, results) of a function type whose values are all i32, else None."""
    kinds = [str(t) for t in (*ty.params, *ty.results)]
    if any(k != "i32" for k in kinds):
        return None
    return len(ty.params), len(ty.results)


def _describe_signature(sig: tuple[int, int]) -> str:
    return f"({', '.join(['i32'] * sig[0])}) -> ({', '.join(['i32'] * sig[1])})"


class WasmModule:
    """A validated, compiled controller module, shared by every sequence that runs it."""

    def __init__(self, data: bytes, *, name: str = "<module>", max_bytes: int = DEFAULT_MAX_MODULE_BYTES) -> None:
        w = _wasmtime()
        data = bytes(data)
        if len(data) > max_bytes:
            raise WasmLoadError(f"{name}: {len(data)} bytes, over the limit of {max_bytes} bytes for a module")
        if data[:4] != b"\0asm":
            raise WasmLoadError(f"{name}: not a WebAssembly binary (it does not start with \\0asm)")
        if data[4:8] != b"\x01\0\0\0":
            raise WasmLoadError(f"{name}: not a core WebAssembly module of version 1 (a component?)")
        self.name = name
        self.size = len(data)
        self.engine = _shared_engine()
        try:
            self.module = w.Module(self.engine, data)
        except w.WasmtimeError as exc:
            raise WasmLoadError(f"{name}: invalid WebAssembly module: {_first_lines(str(exc))}") from None
        self.import_names: list[str] = []
        for imp in self.module.imports:
            where = f"{imp.module}.{imp.name}"
            if imp.module != "logitgate":
                raise WasmLoadError(f"{name}: imports {where}, but a controller may only import the host functions "
                                    f"of module 'logitgate' ({', '.join(_IMPORTS)})")
            want = _IMPORTS.get(imp.name)
            if want is None:
                raise WasmLoadError(f"{name}: imports {where}, which is not a host function "
                                    f"(they are: {', '.join(_IMPORTS)})")
            if not isinstance(imp.type, w.FuncType) or _signature(imp.type) != want:
                raise WasmLoadError(f"{name}: imports {where} with the wrong type; it is {_describe_signature(want)}")
            self.import_names.append(imp.name)
        exports = {e.name: e.type for e in self.module.exports}
        memory = exports.get("memory")
        if not isinstance(memory, w.MemoryType):
            raise WasmLoadError(f"{name}: does not export its memory as 'memory'")
        if memory.is_64 or memory.is_shared:
            raise WasmLoadError(f"{name}: its memory must be a 32-bit, unshared memory")
        missing = [e for e in _EXPORTS if e not in exports]
        if missing:
            raise WasmLoadError(f"{name}: does not export {', '.join(missing)} (a controller exports "
                                f"memory, {', '.join(_EXPORTS)})")
        for export, want in _EXPORTS.items():
            ty = exports[export]
            if not isinstance(ty, w.FuncType) or _signature(ty) != want:
                raise WasmLoadError(f"{name}: exports {export} with the wrong type; it is {_describe_signature(want)}")
        self.has_initialize = isinstance(exports.get("_initialize"), w.FuncType)
        self.mutable_globals = _mutable_global_exports(data, name)

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "<bytes>",
                   max_bytes: int = DEFAULT_MAX_MODULE_BYTES) -> WasmModule:
        """A module from its bytes (validated; refused over ``max_bytes``)."""
        return cls(data, name=name, max_bytes=max_bytes)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_MODULE_BYTES) -> WasmModule:
        """A module from a ``.wasm`` file (validated; refused over ``max_bytes``)."""
        path = Path(path)
        size = path.stat().st_size
        if size > max_bytes:
            raise WasmLoadError(f"{path.name}: {size} bytes, over the limit of {max_bytes} bytes for a module")
        return cls(path.read_bytes(), name=path.name, max_bytes=max_bytes)

    @classmethod
    def from_wat(cls, text: str, *, name: str = "<wat>", max_bytes: int = DEFAULT_MAX_MODULE_BYTES) -> WasmModule:
        """A module from WebAssembly text (handy for small tests)."""
        w = _wasmtime()
        try:
            data = w.wat2wasm(text)
        except w.WasmtimeError as exc:
            raise WasmLoadError(f"{name}: invalid WebAssembly text: {_first_lines(str(exc))}") from None
        return cls(data, name=name, max_bytes=max_bytes)

    def controller_factory(self, limits: WasmLimits = WasmLimits(), arg: bytes | str = b"",
                           ) -> Callable[[ControllerHost], WasmController]:
        """``host -> WasmController``: the ``controller_factory`` of ``run_controller``."""
        data = arg.encode() if isinstance(arg, str) else bytes(arg)

        budget = _MemoryBudget(limits.request_memory_bytes)

        def factory(host: ControllerHost) -> WasmController:
            return WasmController(self, host, limits, data, budget=budget)

        return factory

    def __repr__(self) -> str:
        return f"WasmModule({self.name!r}, {self.size} bytes, imports={self.import_names})"


class _MemoryBudget:
    """The linear memory the live instances of one factory hold together
    (``WasmLimits.request_memory_bytes``)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.lock = threading.Lock()

    def change(self, delta: int) -> None:
        with self.lock:
            self.used += delta


def _first_lines(text: str, n: int = 4) -> str:
    """The first ``n`` lines of a wasmtime error, its cause included ("Caused by:" and the
    numbering of its chain left out), on one line."""
    lines = []
    for line in text.strip().splitlines():
        line = line.strip()
        if line and line != "Caused by:":
            lines.append(line.split(": ", 1)[1] if line[:1].isdigit() and ": " in line else line)
    return ": ".join(lines[:n])[:1000]


def _trap_cause(exc: Exception) -> str:
    """The "wasm trap: ..." part of a wasmtime error (its backtrace left out)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "wasm trap:" in line:
            return line.split("wasm trap:", 1)[1].strip()
    return lines[-1] if lines else type(exc).__name__


def _fast_caller(store: Any, func: Any, n_params: int, n_results: int) -> Callable[..., Any] | None:
    """``func(store, *ints)`` for an exported function of i32 parameters and results, through
    wasmtime's C API with argument arrays built once: wasmtime-py's ``Func.__call__`` reads the
    function's type and converts each argument through ``Val`` objects on every call (about 10 µs,
    most of a ``pre_process``). Traps and host errors surface as they do there (its
    ``enter_wasm``). None where this wasmtime-py lacks what it needs (the caller then uses
    ``Func.__call__``)."""
    try:
        from wasmtime import WasmtimeError
        from wasmtime import _ffi as ffi
        from wasmtime._func import enter_wasm
        params = (ffi.wasmtime_val_t * max(n_params, 1))()
        results = (ffi.wasmtime_val_t * max(n_results, 1))()
        kind = ffi.WASMTIME_I32.value
        for i in range(n_params):
            params[i].kind = kind
        ref = ctypes.byref(func._func)
        call_c = ffi.wasmtime_func_call
        context = store._context
    except (ImportError, AttributeError, TypeError):  # pragma: no cover (another wasmtime-py)
        return None

    def call(_store: Any, *args: int) -> Any:
        if len(args) != n_params:
            raise TypeError(f"expected {n_params} arguments, got {len(args)}")
        for i, a in enumerate(args):
            params[i].of.i32 = a
        with enter_wasm(_store) as trap:
            error = call_c(context(), ref, params, n_params, results, n_results, trap)
            if error:
                raise WasmtimeError._from_ptr(error)
        return results[0].of.i32 if n_results else None

    return call


class WasmController(Controller):
    """One sequence's controller: a wasmtime store and instance of ``module`` (see the module
    docstring for the ABI)."""

    def __init__(self, module: WasmModule, host: ControllerHost, limits: WasmLimits = WasmLimits(),
                 arg: bytes = b"", *, budget: _MemoryBudget | None = None,
                 _parent: WasmController | None = None) -> None:
        w = _wasmtime()
        self._w = w
        self.module = module
        self.host = host
        self.limits = limits
        self.arg = bytes(arg)
        self._call_name = "instantiation" if _parent is None else "fork"
        self._fuel_given = limits.fuel_init_prompt if _parent is None else limits.fuel_fork
        self._budget = (_parent._budget if _parent is not None else
                        budget if budget is not None else _MemoryBudget(limits.request_memory_bytes))
        self._held = 0  # bytes of linear memory counted in the budget
        self._memory_cap = -1  # the store's memory limit now
        self._mid: MidResult | None = None
        self._log_bytes = 0
        self._dead: str | None = None
        self._buffer = _parent._buffer if _parent is not None else (0, 0)  # lg_alloc's: (address, size)
        self._constraints: list[Matcher | None] = (
            [m.fork() if m is not None else None for m in _parent._constraints] if _parent is not None else [])
        tok = host.tokenizer
        self._mask_words = (tok.vocab_size + 31) // 32
        self._memory: Any = None  # set once instantiated (a start function reaches it through its caller)
        store = self._store = w.Store(module.engine)
        self._set_memory_cap()
        funcs = []
        for name in module.import_names:
            params, results = _IMPORTS[name]
            ty = w.FuncType([w.ValType.i32()] * params, [w.ValType.i32()] * results)
            funcs.append(w.Func(store, ty, self._host(name), access_caller=True))
        store.set_fuel(self._fuel_given)
        try:
            instance = w.Instance(store, module.module, funcs)
        except w.Trap as exc:
            raise WasmTrap(self._trap_message(exc)) from None
        except w.WasmtimeError as exc:
            raise WasmTrap(f"{module.name} could not be instantiated: {_trap_cause(exc)} (limits: "
                           f"{self._memory_cap} bytes of memory, {limits.table_elements} table elements)") from None
        self._instance = instance
        ex = instance.exports(store)
        self._memory = ex["memory"]
        self._account()
        self._exports = {name: _fast_caller(store, ex[name], *_EXPORTS[name]) or ex[name] for name in _EXPORTS}
        self._globals = [ex[name] for name in module.mutable_globals]
        if _parent is not None:
            try:
                self._copy_state(_parent)
            except BaseException:
                self.close()
                raise
        elif module.has_initialize:
            self._begin("init_prompt")
            self._invoke(ex["_initialize"])

    # -- the controller protocol ---------------------------------------------------------------
    def init_prompt(self, prompt: list[int]) -> None:
        self._begin("init_prompt")
        ptr = self._pass_ints(prompt)
        self._invoke(self._exports["lg_init_prompt"], ptr, len(prompt))

    def pre_process(self) -> PreResult:
        self._begin("pre_process")
        r = self._invoke(self._exports["lg_pre_process"])
        if r == 1:
            return Continue()
        if r == 0:
            return Stop()
        if r == -1:
            return Suspend()
        if r >= 2:
            return Fork(r)
        raise self._fail(WasmError(f"lg_pre_process returned {r}: not 1 (continue), 0 (stop), -1 (suspend) "
                                   "or n >= 2 (fork)"))

    def mid_process(self, fork_group: list[int]) -> MidResult:
        self._begin("mid_process")
        self._mid = None
        ptr = self._pass_ints(fork_group)
        r = self._invoke(self._exports["lg_mid_process"], ptr, len(fork_group))
        mid, self._mid = self._mid, None
        if r == 0:
            return Stop()
        if r == 1:
            return mid if mid is not None else SampleWithBias(None)
        raise self._fail(WasmError(f"lg_mid_process returned {r}: not 1 (go on) or 0 (stop)"))

    def post_process(self, tokens: list[int], backtrack: int = 0) -> PostResult:
        self._begin("post_process")
        ptr = self._pass_ints(tokens)
        r = self._invoke(self._exports["lg_post_process"], ptr, len(tokens), backtrack)
        if r == 1:
            return Continue()
        if r == 0:
            return Stop()
        raise self._fail(WasmError(f"lg_post_process returned {r}: not 1 (continue) or 0 (stop)"))

    def fork(self, host: ControllerHost) -> WasmController:
        if self._dead is not None:
            raise WasmError(f"cannot fork a failed controller ({self._dead})")
        return WasmController(self.module, host, self.limits, self.arg, _parent=self)

    def close(self) -> None:
        """Drop the instance (its memory) and the constraint handles."""
        self._budget.change(-self._held)
        self._held = 0
        self._constraints = []
        self._exports = {}
        self._instance = None
        self._globals = []
        if self._dead is None:
            self._dead = "closed"
        store, self._store = self._store, None
        if store is not None:
            store.close()

    # -- calling the module ----------------------------------------------------------------------
    def _begin(self, call: str) -> None:
        if self._dead is not None:
            raise WasmError(f"the controller cannot run {call}: {self._dead}")
        self._call_name = call
        self._fuel_given = self.limits.fuel(call)
        self._store.set_fuel(self._fuel_given)
        self._set_memory_cap()

    def _set_memory_cap(self) -> None:
        """Let the memory grow up to ``memory_bytes``, or what the request's budget has left."""
        budget = self._budget
        cap = max(min(self.limits.memory_bytes, self._held + budget.total - budget.used), 0)
        if cap != self._memory_cap:
            self._memory_cap = cap
            self._store.set_limits(memory_size=cap, table_elements=self.limits.table_elements, instances=1,
                                   tables=4, memories=1)

    def _account(self) -> None:
        """Count the memory's size now in the request's budget."""
        if self._memory is not None and self._store is not None:
            size = self._memory.data_len(self._store)
            self._budget.change(size - self._held)
            self._held = size

    def _invoke(self, func: Any, *args: int) -> Any:
        w = self._w
        try:
            return func(self._store, *args)  # a wasmtime Func, or a _fast_caller
        except w.Trap as exc:
            raise self._fail(WasmTrap(self._trap_message(exc))) from None
        except w.WasmtimeError as exc:
            raise self._fail(WasmTrap(f"{self._call_name} failed: {_trap_cause(exc)}{self._memory_note()}")) from None
        except Exception as exc:  # a host function's error: it ends the sequence too
            self._dead = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._account()

    def _fail(self, exc: WasmError) -> WasmError:
        self._dead = str(exc)
        return exc

    def _trap_message(self, exc: Any) -> str:
        w = self._w
        if getattr(exc, "trap_code", None) == w.TrapCode.OUT_OF_FUEL:
            msg = f"ran out of fuel ({self._fuel_given}) in {self._call_name}"
        else:
            msg = f"trap in {self._call_name}: {_trap_cause(exc)}"
        return msg + self._memory_note()

    def _memory_note(self) -> str:
        """A note on the memory when it is near its limit (within 1/8 of it, or 1 MiB): a
        ``memory.grow`` past the limit fails (-1), so a module that ignores that traps later."""
        memory = self._memory
        if memory is None:
            return ""
        used, limit = memory.data_len(self._store), self._memory_cap
        if limit - used <= max(limit // 8, 1 << 20):
            which = ("the memory limit" if limit >= self.limits.memory_bytes else
                     f"what the request's Wasm memory budget (request_memory_bytes={self._budget.total}) left it")
            return f" (its memory is {used} bytes, near {which} of {limit} bytes: memory.grow fails past it)"
        return ""

    def _pass_ints(self, values: Sequence[int]) -> int:
        """Copy int32 values into the host's buffer in the module (from ``lg_alloc``, asked again
        only when it is too small); their address (0 when empty)."""
        if not values:
            return 0
        data = np.asarray(values, dtype="<i4").tobytes()
        if len(data) > self._buffer[1]:
            ptr = self._invoke(self._exports["lg_alloc"], len(data))
            self._buffer = (ptr & 0xFFFFFFFF, len(data))
        ptr = self._buffer[0]
        try:
            addr = self._span(self._store, ptr, len(data), "lg_alloc's buffer")
        except WasmHostError as exc:
            raise self._fail(exc) from None
        ctypes.memmove(addr, data, len(data))
        return ptr

    def _copy_state(self, parent: WasmController) -> None:
        src, dst = parent._memory, self._memory
        pages = src.size(parent._store) - dst.size(self._store)
        n = src.data_len(parent._store)
        try:
            grown = pages <= 0 or dst.grow(self._store, pages) >= 0
        except self._w.WasmtimeError:  # wasmtime-py raises where the limit refuses it
            grown = False
        if not grown:
            raise WasmTrap(f"fork: the clone's memory cannot grow to {n} bytes: the request's Wasm memory "
                           f"budget (request_memory_bytes={self._budget.total}) has {self._memory_cap} bytes left")
        self._account()
        ctypes.memmove(self._base(self._store), parent._base(parent._store), n)
        for theirs, mine in zip(parent._globals, self._globals):
            mine.set_value(self._store, theirs.value(parent._store))

    # -- memory access for host functions ---------------------------------------------------------
    def _memory_of(self, caller: Any) -> Any:
        return self._memory if self._memory is not None else caller.get("memory")

    def _base(self, store: Any) -> int:
        return ctypes.cast(self._memory_of(store).data_ptr(store), ctypes.c_void_p).value or 0

    def _span(self, caller: Any, ptr: int, n: int, what: str) -> int:
        """The host address of ``n`` bytes at ``ptr`` in the module's memory; bounds-checked."""
        if n < 0:
            raise WasmHostError(f"{what}: negative length {n}")
        ptr &= 0xFFFFFFFF
        size = self._memory_of(caller).data_len(caller)
        if ptr + n > size:
            raise WasmHostError(f"{what}: {n} bytes at {ptr:#x} are outside the module's memory of {size} bytes")
        return self._base(caller) + ptr

    def _read(self, caller: Any, ptr: int, n: int, what: str) -> bytes:
        addr = self._span(caller, ptr, n, what)
        self._charge(caller, n)
        return ctypes.string_at(addr, n) if n else b""

    def _write(self, caller: Any, ptr: int, data: bytes, what: str) -> None:
        addr = self._span(caller, ptr, len(data), what)
        self._charge(caller, len(data))
        if data:
            ctypes.memmove(addr, data, len(data))

    def _write_capped(self, caller: Any, out: int, cap: int, data: bytes, what: str) -> int:
        """Copy the first ``cap`` bytes of ``data`` to ``out``; ``len(data)``."""
        self._write(caller, out, data[:max(cap, 0)], what)
        return len(data)

    def _write_ints(self, caller: Any, out: int, cap: int, values: Sequence[int], what: str) -> int:
        data = np.asarray(values[:max(cap, 0)], dtype="<i4").tobytes()
        self._write(caller, out, data, what)
        return len(values)

    def _host(self, name: str) -> Callable[..., Any]:
        """Host function ``name`` as the module calls it: its work is paid in fuel, a flat
        ``fuel_per_host_call`` plus ``fuel_per_host_second`` for the CPU time it took (on top of
        the bytes it copies), so a module cannot stretch a call by making the host work for it.
        The calling thread's CPU time, not the wall clock: a thread the OS set aside for a while
        did no work (on a busy machine a 0.3 ms call measured 10-20 ms of wall time, which
        exhausted a 10 ms budget). Not the time numba spent compiling or loading a kernel on its
        first use (``kernels.compile_cpu_seconds``): that is the host's set-up, not the call's work."""
        fn = getattr(self, "_h_" + name)
        flat = self.limits.fuel_per_host_call
        rate = self.limits.fuel_per_host_second

        def call(caller: Any, *args: int) -> Any:
            t, k = time.thread_time(), compile_cpu_seconds()
            out = fn(caller, *args)
            worked = (time.thread_time() - t) - (compile_cpu_seconds() - k)
            self._charge(caller, flat + int(max(worked, 0.0) * rate))
            return out

        return call

    def _charge(self, caller: Any, units: int) -> None:
        """Take ``units`` of fuel for host work (bytes copied, calls, time: see ``_host``); a trap
        when the call's budget cannot pay."""
        if units <= 0:
            return
        store_type = self._w.Store
        left = store_type.get_fuel(caller)
        if units > left:
            raise WasmTrap(f"ran out of fuel ({self._fuel_given}) in {self._call_name} (in a host function)")
        store_type.set_fuel(caller, left - units)

    def _text(self, caller: Any, ptr: int, n: int, what: str) -> str:
        data = self._read(caller, ptr, n, what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WasmHostError(f"{what}: {data[:40]!r} is not UTF-8") from None

    def _matcher(self, h: int, what: str) -> Matcher:
        m = self._constraints[h] if 0 <= h < len(self._constraints) else None
        if m is None:
            raise WasmHostError(f"{what}: {h} is not a live constraint handle")
        return m

    def _log(self, text: str) -> None:
        limit = self.limits.max_log_bytes
        if self._log_bytes > limit:  # already cut off
            return
        data = text.encode("utf-8", errors="replace")
        if self._log_bytes + len(data) > limit:
            text = data[:limit - self._log_bytes].decode("utf-8", errors="ignore") + (
                f"\n[logitgate] log truncated at {limit} bytes\n")
            self._log_bytes = limit + 1
        else:
            self._log_bytes += len(data)
        self.host.log.write(text)

    def _mask_out(self, caller: Any, out: int, words: np.ndarray, what: str) -> int:
        self._write(caller, out, np.ascontiguousarray(words, dtype="<i4").tobytes(), what)
        return self._mask_words

    # -- host functions (see the module docstring) ---------------------------------------------
    def _h_vocab_size(self, caller: Any) -> int:
        return self.host.tokenizer.vocab_size

    def _h_eos_token(self, caller: Any) -> int:
        return self.host.eos_token

    def _h_token_bytes(self, caller: Any, tok: int, out: int, cap: int) -> int:
        t = self.host.tokenizer
        if not 0 <= tok < t.vocab_size:
            return -1
        return self._write_capped(caller, out, cap, t.tokens[tok] if tok < t.n_tokens else b"", "token_bytes")

    def _h_tokenize(self, caller: Any, ptr: int, n: int, out: int, cap: int) -> int:
        data = self._read(caller, ptr, n, "tokenize")
        try:
            ids = self.host.tokenize_bytes(data)
        except ControllerError as exc:
            self._log(f"tokenize: {exc}\n")
            return -1
        return self._write_ints(caller, out, cap, ids, "tokenize")

    def _h_self_seq_id(self, caller: Any) -> int:
        return self.host.seq_id

    def _h_module_arg(self, caller: Any, out: int, cap: int) -> int:
        return self._write_capped(caller, out, cap, self.arg, "module_arg")

    def _h_var_get(self, caller: Any, name_ptr: int, name_len: int, out: int, cap: int) -> int:
        value = self.host.variables.get(self._var_name(caller, name_ptr, name_len, "var_get"))
        if value is None:
            return -1
        return self._write_capped(caller, out, cap, value, "var_get")

    def _var_name(self, caller: Any, ptr: int, n: int, what: str) -> str:
        if n > self.limits.max_variable_bytes:
            raise WasmHostError(f"{what}: a name of {n} bytes, over the limit of {self.limits.max_variable_bytes} bytes")
        return self._text(caller, ptr, n, what)

    def _h_var_set(self, caller: Any, name_ptr: int, name_len: int, val_ptr: int, val_len: int) -> None:
        name = self._var_name(caller, name_ptr, name_len, "var_set")
        if val_len > self.limits.max_variable_bytes:
            raise WasmHostError(f"var_set: {val_len} bytes for {name[:40]!r}, over the limit of "
                                f"{self.limits.max_variable_bytes} bytes per variable")
        try:
            self.host.variables.set(name, self._read(caller, val_ptr, val_len, "var_set"))
        except ControllerError as exc:  # the request's variables are full
            raise WasmHostError(f"var_set: {exc}") from None

    def _h_var_append(self, caller: Any, name_ptr: int, name_len: int, val_ptr: int, val_len: int) -> None:
        name = self._var_name(caller, name_ptr, name_len, "var_append")
        value = self._read(caller, val_ptr, val_len, "var_append")
        old = self.host.variables.get(name) or b""
        if len(old) + len(value) > self.limits.max_variable_bytes:
            raise WasmHostError(f"var_append: {name[:40]!r} would hold {len(old) + len(value)} bytes, over the "
                                f"limit of {self.limits.max_variable_bytes} bytes per variable")
        try:
            self.host.variables.append(name, value)
        except ControllerError as exc:
            raise WasmHostError(f"var_append: {exc}") from None

    def _h_log(self, caller: Any, ptr: int, n: int) -> None:
        self._log(self._read(caller, ptr, n, "log").decode("utf-8", errors="replace"))

    def _h_regex_new(self, caller: Any, ptr: int, n: int) -> int:
        try:
            regex = self._read(caller, ptr, n, "regex_new").decode("utf-8")
        except UnicodeDecodeError:
            self._log("regex_new: the regex is not UTF-8\n")
            return -1
        live = sum(m is not None for m in self._constraints)
        if live >= self.limits.max_constraints:
            self._log(f"regex_new: {live} constraints are live, the limit is {self.limits.max_constraints}\n")
            return -2
        try:
            compiled = compile_grammar(Grammar.from_regex(regex), self.host.tokenizer)
        except LogitgateError as exc:
            self._log(f"regex_new: {type(exc).__name__}: {exc}\n")
            return -1
        matcher = Matcher(compiled, max_rollback=-1)
        for h, m in enumerate(self._constraints):
            if m is None:
                self._constraints[h] = matcher
                return h
        self._constraints.append(matcher)
        return len(self._constraints) - 1

    def _constraint_words(self, h: int, what: str) -> np.ndarray:
        """The current mask of constraint ``h``, as int32 words."""
        bm = np.empty((1, self._mask_words), dtype=np.int32)
        self._matcher(h, what).fill_next_token_bitmask(bm, 0)
        return bm[0]

    def _h_constraint_mask(self, caller: Any, h: int, out: int) -> int:
        return self._mask_out(caller, out, self._constraint_words(h, "constraint_mask"), "constraint_mask")

    def _h_constraint_accept(self, caller: Any, h: int, tok: int) -> int:
        m = self._matcher(h, "constraint_accept")
        try:
            return int(m.accept_token(tok))
        except (IndexError, LogitgateError):
            return 0

    def _h_constraint_rollback(self, caller: Any, h: int, n: int) -> int:
        m = self._matcher(h, "constraint_rollback")
        try:
            m.rollback(n)
        except ValueError:
            return 0
        return 1

    def _h_constraint_is_accepting(self, caller: Any, h: int) -> int:
        return int(self._matcher(h, "constraint_is_accepting").is_accepting())

    def _h_constraint_free(self, caller: Any, h: int) -> None:
        self._matcher(h, "constraint_free")
        self._constraints[h] = None

    def _h_dfa_mask(self, caller: Any, table_ptr: int, n_states: int, accept_ptr: int, state: int, out: int) -> int:
        if not 1 <= n_states <= self.limits.max_dfa_states:
            raise WasmHostError(f"dfa_mask: {n_states} states, not in [1, {self.limits.max_dfa_states}]")
        if not 0 <= state < n_states:
            raise WasmHostError(f"dfa_mask: state {state} is not in [0, {n_states})")
        raw = self._read(caller, table_ptr, n_states * 256 * 4, "dfa_mask table")
        table = np.frombuffer(raw, dtype="<i4").astype(np.int32, copy=False).reshape(n_states, 256)
        if int(table.min()) < -1 or int(table.max()) >= n_states:
            raise WasmHostError(f"dfa_mask: the table has a next state outside [-1, {n_states})")
        accept = self._read(caller, accept_ptr, n_states, "dfa_mask accept")
        tok = self.host.tokenizer
        trie = tok.trie
        self._charge(caller, trie.n_tokens)
        buf = np.empty((1, self._mask_words + 1), dtype=np.uint32)  # + the walk's spare word
        rows = np.array([state * 256], np.int32)
        live = (table >= 0).sum(axis=1, dtype=np.int32)
        live.setflags(write=False)
        trie_kernels.fill_masks_dfa(trie_kernels.class_table(table), _IDENTITY_CLASSES, rows, trie.root_child,
                                    trie.nodes, trie.subtree_end, trie.dup_first, trie.dup_other, trie.max_depth,
                                    buf, 0, trie.root_fanout, trie.root_grand, live, 256)
        words = buf[0, :-1]
        if accept[state]:
            for t in tok.eos_token_ids:
                words[t >> 5] |= np.uint32(1 << (t & 31))
        return self._mask_out(caller, out, words.view(np.int32), "dfa_mask")

    def _h_sample_mask(self, caller: Any, ptr: int) -> int:
        raw = self._read(caller, ptr, self._mask_words * 4, "sample_mask")
        self._mid = SampleWithBias(np.frombuffer(raw, dtype="<i4").astype(np.int32))
        return 1

    def _h_sample_constraint(self, caller: Any, h: int) -> int:
        self._mid = SampleWithBias(self._constraint_words(h, "sample_constraint"))
        return 1

    def _h_splice(self, caller: Any, backtrack: int, ptr: int, n: int) -> int:
        if backtrack < 0:
            raise WasmHostError(f"splice: backtrack {backtrack} is negative")
        raw = self._read(caller, ptr, 4 * n, "splice")
        self._mid = Splice(backtrack, np.frombuffer(raw, dtype="<i4").astype(np.int32))  # no list: n can be 16M
        return 1

    def __repr__(self) -> str:
        return f"WasmController({self.module.name!r}, seq_id={self.host.seq_id})"


# -- building C controllers ------------------------------------------------------------------------
def _c_compiler() -> list[str]:
    """The command that compiles C to wasm32: zig's clang (the ``ziglang`` package), else a clang
    with a wasm32 target and wasm-ld on PATH."""
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc", "--target=wasm32-freestanding"]
    clang = shutil.which("clang")
    if clang is not None and shutil.which("wasm-ld") is not None:
        return [clang, "--target=wasm32"]
    raise WasmBuildError("no C compiler for wasm32: pip install ziglang (or install clang and lld)")


def build_c(sources: Iterable[str | os.PathLike[str]], out_path: str | os.PathLike[str], *,
            include_dirs: Iterable[str | os.PathLike[str]] = (), flags: Iterable[str] = ("-O2",),
            timeout: float = 300.0) -> Path:
    """Compile C ``sources`` (with ``logitgate_ctrl.h`` on the include path) into the controller
    module ``out_path``: freestanding wasm32, no libc, every non-static symbol and the stack
    pointer exported, a 64 KiB stack."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [*_c_compiler(), *flags, "-nostdlib", "-mbulk-memory", "-Wl,--no-entry", "-Wl,--export-dynamic",
           "-Wl,-z,stack-size=65536", "-I", str(C_SOURCES), *(f"-I{d}" for d in include_dirs), "-o", str(out),
           *(str(s) for s in sources)]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WasmBuildError(f"{' '.join(cmd)}: {exc}") from exc
    if proc.returncode != 0:
        raise WasmBuildError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    return out
