"""Kernels called without numba's type dispatch (``kernels.DirectCalls``) always get one set of
argument types: a step's workload (regex, grammars, JSON Schema, on a real tokenizer) run with
``LOGITGATE_KERNEL_DISPATCH=1`` calls each such kernel from Python with one memory layout
(dtypes, dimensions and layouts; read-only and writable arrays unbox alike).

A call site that passed another dtype, dimension or layout would make the dispatcher compile a
second one here, and would hand the entry point the wrong memory layout in normal runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from logitgate.errors import LimitError
from logitgate.kernels import DirectCalls

from .conftest import mistral_file

WORKLOAD = r'''
import json, sys
import numpy as np
import logitgate as lg
from logitgate import compiler
from logitgate.automata import dfa
from logitgate.grammar import engine
from logitgate.kernels import DISPATCH_ONLY

from numba import typeof
from numba.core import types


def layout(t):
    """An argument type as the entry point sees it: a read-only array unboxes like a writable one."""
    if isinstance(t, types.Array):
        return f"{t.dtype}[{t.ndim}d {t.layout}]"
    if isinstance(t, types.BaseTuple):
        return "(" + ", ".join(layout(x) for x in t.types) + ")"
    return str(t)


assert DISPATCH_ONLY
# the argument types of every call from Python (a kernel's compile may add specialisations of
# the kernels it calls, with their own types: those calls never go through DirectCalls)
seen = {}
for holder in (compiler._TK, dfa._AK, engine._EK, engine._BK, engine._TK):
    for name, fn in list(vars(holder).items()):
        def record(*args, _fn=fn, _name=name):
            seen.setdefault(_name, set()).add(tuple(layout(typeof(a)) for a in args))
            return _fn(*args)
        setattr(holder, name, record)
tok = lg.Tokenizer.from_mistral(sys.argv[1])
vocab = [tok.token_bytes(t) for t in range(tok.vocab_size)]
by_first = {}
for t, b in enumerate(vocab):
    if b and not tok.is_special(t):
        by_first.setdefault(b[0], []).append(t)
bm = lg.allocate_token_bitmask(1, tok.vocab_size)


def drive(grammar, text):
    """Walk ``text`` greedily (the longest allowed token that is a prefix of the rest), filling
    masks, then roll back and take the same text byte by byte."""
    m = lg.Matcher(lg.compile(grammar, tok, cache=False), max_rollback=1000)
    data = text.encode()
    pos = steps = 0
    while pos < len(data):
        m.fill_next_token_bitmask(bm, 0)
        allowed = lambda t: (bm[0, t >> 5] >> (t & 31)) & 1
        cands = [t for t in by_first.get(data[pos], ()) if data.startswith(vocab[t], pos) and allowed(t)]
        assert cands, (text, pos)
        t = max(cands, key=lambda t: len(vocab[t]))
        assert m.accept_token(t)
        pos += len(vocab[t])
        steps += 1
    m.fill_next_token_bitmask(bm, 0)
    assert m.is_accepting(), text
    m.rollback(steps)
    assert m.accept_bytes(data) and m.is_accepting()
    m.find_jump_forward_bytes()


drive(lg.Grammar.from_regex(r"\+?\d{1,3} \(\d{3}\) \d{3}-\d{4}"), "+1 (555) 123-4567")
drive(lg.Grammar.from_regex(r"[a-z]+@[a-z]+\.(com|org)"), "someone@example.org")
drive(lg.Grammar.from_gbnf('root ::= "(" expr ")"\nexpr ::= [0-9]+ (" + " [0-9]+)*'), "(12 + 345 + 6)")
drive(lg.Grammar.from_lark('start: pair ("," pair)*\npair: WORD "=" NUMBER\n%import common.WORD\n'
                           '%import common.NUMBER'), "alpha=1,beta=22,gamma=333")
schema = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "id": {"type": "string", "format": "uuid"},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
    "score": {"type": "number", "minimum": 0}, "kind": {"enum": ["a", "bb", "ccc"]},
    "meta": {"type": "object", "additionalProperties": {"type": "integer"}}},
    "required": ["name", "id"]}
doc = {"name": "Ada Lovelace \u00e9\u4e2d \"q\"", "id": "123e4567-e89b-12d3-a456-426614174000",
       "tags": ["x", "yz"], "score": 12.5, "kind": "bb", "meta": {"k": 3, "other key": -4}}
for ws in ("compact", "pretty"):
    drive(lg.Grammar.from_json_schema(schema, whitespace=ws),
          json.dumps(doc, ensure_ascii=False, separators=(",", ":")) if ws == "compact"
          else json.dumps(doc, ensure_ascii=False, indent=2))
drive(lg.Grammar.json(), '{"a":[1,2.5,true,null,"s"],"b":{}}')
print(json.dumps({name: len(sigs) for name, sigs in seen.items()}))
'''


def test_direct_call_kernels_get_one_set_of_argument_types():
    path = mistral_file("tokenizer.model.v1")
    env = dict(os.environ, LOGITGATE_KERNEL_DISPATCH="1")
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, str(path)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    several = {name: n for name, n in counts.items() if n > 1}
    assert not several, f"kernels called with several sets of argument types from Python: {several}"
    used = {name for name, n in counts.items() if n == 1}
    # the workload reaches the kernels of every kind of step (a kernel it misses is not checked)
    assert {"dfa_walk", "first_batch_masks", "state_mask", "walk_tables", "regex_byte_dfa",
            "utf8_byte_dfa", "advance_bytes", "group_walk", "lexer_walk",
            "eos_allowed", "push_row", "body_entry", "plain_chain", "copy_dups"} <= used, sorted(set(counts) - used)


def _calls_to(kernel):
    """``DirectCalls`` over a module holding ``kernel`` as ``add``."""
    module = types.SimpleNamespace(add=kernel)
    return DirectCalls(module, ("add",))


def test_direct_calls_switch_to_the_compiled_entry_point_after_the_first_call():
    from numba import njit

    @njit
    def add(a, b):
        return a[0] + b

    calls = _calls_to(add)
    first = calls.add
    x = np.arange(3, dtype=np.int64)
    assert first(x, 2) == 2
    if calls.add is add:  # LOGITGATE_KERNEL_DISPATCH=1 in this process: stays on the dispatcher
        pytest.skip("dispatch-only mode")
    assert calls.add is not first and calls.add is not add
    assert calls.add(x + 5, 1) == 6
    with pytest.raises(TypeError):  # the entry point checks item sizes (not dtypes: the other test's job)
        calls.add(x.astype(np.int32), 1)


def test_direct_calls_bind_a_typed_kernel_at_once():
    from numba import njit
    from numba import types as nt

    @njit(nt.int64(nt.Array(nt.int64, 1, "C"), nt.int64))
    def add(a, b):
        return a[0] + b

    calls = _calls_to(add)
    if calls.add is add:  # LOGITGATE_KERNEL_DISPATCH=1 in this process: stays on the dispatcher
        pytest.skip("dispatch-only mode")
    # compiled at decoration: the entry point from the start (no dispatcher call, whose first
    # call with a set of types costs numba hundreds of microseconds)
    assert calls.add is add.overloads[add.signatures[0]].entry_point
    assert calls.add(np.arange(3, dtype=np.int64) + 4, 1) == 5


def _signed_add():
    from numba import types as nt

    from logitgate.kernels import njit

    @njit(nt.int64(nt.Array(nt.int64, 1, "C"), nt.int64), nogil=True)
    def add(a, b):
        return a[0] + b

    return add


def test_a_signed_kernel_compiles_its_signature_on_first_use_and_only_it():
    add = _signed_add()
    assert not add.overloads  # nothing compiled at decoration (import)
    x = np.arange(3, dtype=np.int64)
    assert add(x + 7, 2) == 9
    assert [tuple(map(str, s)) for s in add.signatures] == [("array(int64, 1d, C)", "int64")]
    with pytest.raises(TypeError, match="No matching definition"):
        add(x.astype(np.int32), 2)  # numba's eager signatures refuse it too
    with pytest.raises(TypeError, match="No matching definition"):
        add(x.reshape(1, 3), 2)
    assert len(add.overloads) == 1  # and no second specialisation was compiled


def test_a_signed_kernel_compiles_when_another_kernel_calls_it():
    from numba import njit as plain

    add = _signed_add()

    @plain
    def twice(a):
        return add(a, 1) * 2

    assert twice(np.arange(4, dtype=np.int64) + 3) == 8
    assert len(add.overloads) == 1 and not add._can_compile


def test_a_signed_kernel_s_first_calls_from_several_threads():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    add = _signed_add()
    together = threading.Barrier(8)  # all eight make the first call at once

    def call(k):
        together.wait(timeout=60)
        return add(np.full(2, k, dtype=np.int64), k)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))  # re-raises any thread's error
    assert results == [2 * k for k in range(8)]
    assert len(add.overloads) == 1


def test_direct_calls_bind_a_signed_kernel_after_its_first_call():
    add = _signed_add()
    calls = _calls_to(add)
    if calls.add is add:  # LOGITGATE_KERNEL_DISPATCH=1 in this process: stays on the dispatcher
        pytest.skip("dispatch-only mode")
    assert calls.add(np.arange(3, dtype=np.int64) + 4, 1) == 5
    assert calls.add is add.overloads[add.signatures[0]].entry_point


IMPORT_ONLY = r'''
import json, sys
import logitgate
from logitgate.kernels import _SignedKernel
signed = loaded = 0
for name, module in list(sys.modules.items()):
    if name.startswith("logitgate.kernels."):
        for value in vars(module).values():
            if isinstance(value, _SignedKernel):
                signed += 1
                loaded += bool(value.overloads)
print(json.dumps([signed, loaded]))
'''


def test_importing_logitgate_compiles_or_loads_no_kernel():
    # each kernel costs 5-40 ms to load from numba's cache (the first ~200 ms), so the import
    # leaves them all to their first use
    proc = subprocess.run([sys.executable, "-c", IMPORT_ONLY], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    signed, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert signed >= 20 and loaded == 0


def test_kernel_compiles_are_off_the_compile_clock():
    import time

    from logitgate.kernels import compile_cpu_seconds
    from logitgate.kernels import njit as lg_njit
    from logitgate.limits import _deadline, check_deadline, compile_deadline, using_limits

    add = _signed_add()

    @lg_njit(nogil=True)
    def twice(a):  # an unsigned kernel whose compile also compiles the signed one
        return add(a, 1) * 2

    x = np.arange(3, dtype=np.int64)
    with using_limits(max_compile_seconds=0.05), compile_deadline():
        end0 = _deadline.get()
        cpu0, t0 = compile_cpu_seconds(), time.monotonic()
        assert twice(x) == 2 and add(x, 5) == 5  # compiles take far longer than 50 ms
        elapsed = time.monotonic() - t0
        check_deadline("after the kernels")  # no LimitError: the clock stood still
        moved = _deadline.get() - end0
        assert elapsed - 0.05 < moved <= elapsed  # moved once, by the nested compiles' time
        assert compile_cpu_seconds() > cpu0
        time.sleep(0.06)  # ...while ordinary time still counts
        with pytest.raises(LimitError, match="max_compile_seconds"):
            check_deadline("after sleeping")


def test_direct_calls_bind_the_specialisation_for_the_first_call_s_types():
    from numba import njit

    @njit
    def add(a, b):
        return a[0] + b

    add(np.zeros(2, dtype=np.float64), 1)  # another specialisation first (a test's, or from the cache)
    calls = _calls_to(add)
    x = np.arange(3, dtype=np.int64)
    assert calls.add(x + 2, 1) == 3
    if calls.add is add:  # LOGITGATE_KERNEL_DISPATCH=1 in this process: stays on the dispatcher
        pytest.skip("dispatch-only mode")
    assert len(add.overloads) == 2
    sig = (add.typeof_pyval(x), add.typeof_pyval(1))
    assert calls.add is add.overloads[sig].entry_point
    assert calls.add(x + 5, 1) == 6


FIRST_RUN = r'''
import logitgate as lg
tok = lg.Tokenizer.from_bytes([bytes([b]) for b in range(32, 127)] + [b'{"', b'":', b"</s>"], eos_token_id=97,
                              special_ids=[97])
m = lg.Matcher(lg.compile(lg.Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}}}),
                          tok, cache=False))
assert m.accept_string('{"a":"x') and m.accept_string('y"}')
'''

LATER_RUN = r'''
import json
from logitgate import kernels
from logitgate.kernels import earley_kernels as ek
before = len(ek.advance_bytes.overloads)
kernels.load_all()
print(json.dumps([before, len(ek.advance_bytes.overloads), len(kernels._cached_signatures(ek.advance_bytes))]))
'''


def test_load_all_loads_the_cached_specialisations_of_kernels_compiled_on_first_use():
    # a kernel without a signature is compiled on its first use for that call's types and
    # cached (here, in the tests' usual cache: compiled unless an earlier run left it there); a
    # later process's load_all() loads it from the cache before any call
    first = subprocess.run([sys.executable, "-c", FIRST_RUN], capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    later = subprocess.run([sys.executable, "-c", LATER_RUN], capture_output=True, text=True, timeout=900)
    assert later.returncode == 0, later.stderr[-3000:]
    before, after, cached = json.loads(later.stdout.strip().splitlines()[-1])
    assert before == 0 and cached >= 1 and after == cached
