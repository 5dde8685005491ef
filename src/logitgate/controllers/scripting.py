"""AICI's pyctrl scripting API on logitgate: ``import pyaici.server as aici`` scripts run unchanged.

A script is a Python file that defines an ``async`` function and hands its coroutine to
``aici.start(coro)`` (or ``aici.test(coro)``, which prints ``TEST OK`` when it ends) at import::

    import pyaici.server as aici

    async def main():
        prompt = await aici.GetPrompt()                 # the prompt tokens
        await aici.FixedTokens("The answer is")         # splice text in
        await aici.gen_text(regex=r" \\d+", store_var="n", max_tokens=5)

    aici.start(main())

``load_script(path)`` returns a controller factory for ``logitgate.controllers.run_controller``:
``factory(host)`` executes the file in a fresh module namespace with ``host`` current and returns a
``ScriptController`` that drives the captured coroutine through the controller protocol
(``init_prompt``/``pre_process``/``mid_process``/``post_process``), as AICI's ``AiciAsync`` does:

* the coroutine runs to its first ``await``; ``await GetPrompt()`` is answered at ``init_prompt``;
* every ``await`` of a ``NextToken`` is one step: its ``pre_process`` (continue, suspend, fork),
  ``mid_process`` (a ``MidProcessResult``: a token set to sample under, a splice, a stop) and
  ``post_process`` (the tokens appended), after which the coroutine runs to its next ``await``;
* a ``PreToken`` (``fork``, ``wait_vars``) only has a ``pre_process``: its ``mid_process`` says
  "skip me" and the next awaited object gives the step's result; a skip that lands on a suspension
  or a second fork in the same step splices nothing this round (an empty splice, AICI's later
  ``MidProcessResult.noop()``; AICI's first ``AiciAsync`` spliced a fake ``" "`` token there) and
  the suspension or fork happens at the next ``pre_process``; a NextToken that is awaited again
  after it saw EOS is replaced by ``StopToken``; when the coroutine ends, ``StopToken`` for ever;
* ``FixedTokens`` splices in ``mid_process`` (the controller protocol has no fast-forward in
  ``pre_process``); ``FixedTokens(text, following=label)`` first backtracks to the label;
* ``ConstrainedToken`` samples under its constraint's token set (EOS alone when the constraint
  allows nothing, as AICI does) and ``gen_tokens`` loops over it.

``print`` output of the script, and AICI's own log lines at ``log_level >= 1`` (``FIXED ...``,
``GEN ...``, ``BACKTRACK ...``; ``ALLOW:``/``GEN-STEP:`` at 2) go to the sequence's ``host.log``
(``sys.stdout`` is redirected during each call into the script). ``aici.log_level`` is per script
(each script gets its own ``pyaici.server`` module object; the default is this module's
``log_level``). ``check_var``/``check_vars`` raise ``AssertionError`` as AICI does; set
``scripting.CHECKS = "report"`` to log ``CHECK FAILED ...`` lines instead.

Constraints (AICI's native ones, computed with logitgate matchers on ``host.tokenizer``; grammars
and compiled grammars are cached, each constraint object compiles once):

* ``RegexConstraint(pattern)``: the whole output matches ``pattern`` (``Grammar.from_regex``:
  Python ``re`` syntax, which covers the common part of the Rust syntax AICI used);
* ``CfgConstraint(yacc)``: AICI's yacc-like grammar format (``Grammar.from_yacc``);
* ``SubStrConstraint(text, end)``: AICI's word-substring matcher, exactly: the output is a
  substring of ``text + " "`` that starts at the beginning of ``text`` or after a space and ends
  before a space (whole words, split at spaces only), followed by ``end``; it switches to ``end``
  at the first byte of ``end`` where the substring may end (as AICI's matcher does); EOS only
  after all of ``end`` (with an empty ``end``: wherever the substring may end). Built as a byte
  DFA compiled against the vocabulary;
* ``ChooseConstraint(options)``: one of the options' token sequences (AICI's Python class);
* ``Constraint()``: anything (every text token and EOS);
* logitgate extensions: ``GrammarConstraint(grammar)`` for any ``logitgate.Grammar``,
  ``JsonSchemaConstraint(schema)``, ``LarkConstraint(text)``, ``GbnfConstraint(text)``,
  ``RecognizerConstraint(rec)`` for a custom recognizer (``logitgate.recognizers``), and the
  matching ``gen_tokens``/``gen_text`` keywords ``json_schema=``, ``lark=``, ``gbnf=``,
  ``grammar=``, ``recognizer=``.

``eos_forced()`` of a grammar constraint: EOS is allowed and no other token is (AICI checks "no
byte is allowed"; the two agree for vocabularies with a token per byte).

FORK. CPython cannot copy a running coroutine, so ``ScriptController.fork(host)`` replays: the
new controller executes the script again from the start (fresh namespace, its own host) and
feeds it a journal of everything the original received through this API -- the prompt, every
call of the protocol with its arguments (fork groups, appended tokens, backtracks), every
``get_var`` value (``wait_vars`` polls included), every ``self_seq_id`` -- until it stands where
the original stood (right after the ``pre_process`` that returned ``Fork``), with its log
suppressed and its ``set_var``/``append_var`` calls skipped (the original already made them).
From there it runs live (and keeps the journal, so forks of forks work too). Each replayed call's
result is checked against the original's, and a difference raises ``ControllerError``.

The requirement this puts on a script: **given the same API results, it must behave the same**:
no unseeded randomness, no clock, no reading of files or other state that can change between
the original run and the replay, no use of the host outside this API. (AICI's pyctrl has no
clock, file or network access either.)

Not supported (raise ``NotImplementedError`` with the reason): fast-forward tokens returned by
``pre_process`` (``PreProcessResult.ff_tokens_pre``; splice in ``mid_process`` instead), AICI's
later multi-branch results (several ``Branch`` objects, or a ``Splice`` with ``when_sampled``, in
a ``MidProcessResult`` or ``fork([...])``).
"""
from __future__ import annotations

import builtins
import contextlib
import contextvars
import inspect
import io
import json
import re
import types
from collections import OrderedDict
from collections.abc import Sequence as _SequenceABC
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from ..compiler import CompiledGrammar
from ..compiler import compile as _lg_compile
from ..grammar import Grammar as _Grammar
from ..matcher import Matcher as _Matcher
from ..vocab import Tokenizer as _Tokenizer
from .protocol import (
    Continue, Controller, ControllerError, ControllerHost, Fork, SampleWithBias, Stop, Suspend,
)
from .protocol import Splice as _ProtoSplice

Token = int
"""A token id."""
SeqId = int
"""A sequence id."""

log_level = 1
"""The default ``aici.log_level`` of a script (each script then has its own)."""

CHECKS = "assert"
"""``"assert"``: ``check_var``/``check_vars`` raise ``AssertionError`` (AICI). ``"report"``: they
print ``CHECK FAILED ...`` to the sequence's log and go on."""

# ------------------------------------------------------------------------------------------------
# sessions: the script state of one controller, made current around every call into the script
# ------------------------------------------------------------------------------------------------

_current: contextvars.ContextVar["_Session | None"] = contextvars.ContextVar("logitgate_aici_session", default=None)


class _ReplayDiverged(ControllerError):
    """The replayed script did not repeat what the original did."""


class _Session:
    """One script instance: its host, registered callbacks, token list and journal."""

    def __init__(self, host: ControllerHost) -> None:
        self.host = host
        self.callbacks: AiciCallbacks | None = None
        self.tokens: list[int] = []
        self.prompt: list[int] | None = None
        self.fork_group: list[int] = []
        self.log_level = log_level
        self.journal: list[list] = []
        self.replay: list[list] | None = None  # the journal being replayed, None when live
        self.pos = 0
        self.module: _ApiModule | None = None

    @property
    def replaying(self) -> bool:
        return self.replay is not None

    def api(self, name: str, args: tuple, live: Callable[[], Any]) -> Any:
        """A value from the host: taken live and journaled, or read back from the journal."""
        if self.replay is not None:
            if self.pos >= len(self.replay):
                raise _ReplayDiverged(f"replay: the script called {name}{args!r}, which the original did not")
            ev = self.replay[self.pos]
            if ev[0] != "api" or ev[1] != name or ev[2] != args:
                raise _ReplayDiverged(f"replay: the script called {name}{args!r} where the original did {ev[:3]!r}")
            self.pos += 1
            return ev[3]
        value = live()
        self.journal.append(["api", name, args, value])
        return value


def _session() -> _Session:
    s = _current.get()
    if s is None:
        raise RuntimeError(
            "pyaici.server works only inside a script run by logitgate (logitgate.controllers.scripting."
            "load_script, the `logitgate` command line) or inside scripting.host_context(host)"
        )
    return s


def current_host() -> ControllerHost:
    """The host of the script being called now."""
    return _session().host


def _tok() -> _Tokenizer:
    return _session().host.tokenizer


def _log_level() -> int:
    s = _current.get()
    return s.log_level if s is not None else log_level


@contextlib.contextmanager
def host_context(host: ControllerHost) -> Iterator[None]:
    """Make ``host`` current outside a script, to use this API directly (``TokenSet``,
    constraints, ``tokenize``, variables ...). Output is not redirected."""
    token = _current.set(_Session(host))
    try:
        yield
    finally:
        _current.reset(token)


# ------------------------------------------------------------------------------------------------
# the native part (AICI's pyaici.server_native)
# ------------------------------------------------------------------------------------------------


def register(cb: "AiciCallbacks") -> None:
    """Register the callbacks object of this script (``start``/``test`` do it; AiciAsync)."""
    s = _session()
    if s.callbacks is not None and s.callbacks is not cb:
        raise RuntimeError("a script can register only one callbacks object (call aici.start()/aici.test() once)")
    s.callbacks = cb


_special_patterns: Dict[int, tuple] = {}  # id(tokenizer) -> (tokenizer, pattern, ids)


def _special_markers(tok: _Tokenizer) -> tuple[Optional["re.Pattern[bytes]"], Dict[bytes, int]]:
    """A pattern matching the names of the vocabulary's special tokens (``<|im_start|>``, ``</s>``;
    names of three bytes or more), and the id of each name."""
    hit = _special_patterns.get(id(tok))
    if hit is None or hit[0] is not tok:
        ids: Dict[bytes, int] = {}
        for t in sorted(tok.special_ids):
            name = tok.tokens[t] if t < tok.n_tokens else b""
            if len(name) >= 3:
                ids.setdefault(name, t)
        names = sorted(ids, key=len, reverse=True)
        pattern = re.compile(b"|".join(re.escape(n) for n in names)) if names else None
        if len(_special_patterns) > 16:
            _special_patterns.clear()
        hit = _special_patterns[id(tok)] = (tok, pattern, ids)
    return hit[1], hit[2]


def tokenize(text: Union[bytes, str]) -> List[Token]:
    """Token ids of ``text`` (a str is UTF-8 encoded) in the model's tokenization. The names of
    special tokens in the text (``<|im_start|>``) become those tokens, as AICI's tokenizer (Hugging
    Face ``tokenizers``) does; everything else is plain text."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if not data:
        return []
    host = _session().host
    pattern, ids = _special_markers(host.tokenizer)
    if pattern is None:
        return [int(t) for t in host.tokenize_bytes(data)]
    out: List[int] = []
    pos = 0
    for m in pattern.finditer(data):
        if m.start() > pos:
            out += [int(t) for t in host.tokenize_bytes(data[pos:m.start()])]
        out.append(ids[m.group()])
        pos = m.end()
    if pos < len(data):
        out += [int(t) for t in host.tokenize_bytes(data[pos:])]
    return out


def detokenize(tokens: Sequence[Token]) -> bytes:
    """The bytes of ``tokens`` (special tokens contribute nothing)."""
    return _tok().decode_bytes([int(t) for t in tokens])


def self_seq_id() -> int:
    """The id of this sequence (see ``fork``)."""
    s = _session()
    return s.api("self_seq_id", (), lambda: int(s.host.seq_id))


def get_var(name: str) -> Optional[bytes]:
    """The value of the shared variable ``name``, or None."""
    s = _session()
    return s.api("get_var", (str(name),), lambda: s.host.variables.get(str(name)))


def set_var(name: str, value: Union[bytes, str]) -> None:
    """Set the shared variable ``name`` (a str is stored UTF-8 encoded)."""
    s = _session()
    _check_var_value(value)
    if not s.replaying:
        s.host.variables.set(str(name), value)


def append_var(name: str, value: Union[bytes, str]) -> None:
    """Append to the shared variable ``name`` (created empty if unset)."""
    s = _session()
    _check_var_value(value)
    if not s.replaying:
        s.host.variables.append(str(name), value)


def _check_var_value(value: object) -> None:
    if not isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"a variable value must be str or bytes, not {type(value).__name__}")


def eos_token() -> Token:
    """The end-of-sequence token id."""
    return int(_session().host.eos_token)


def token_repr(token: Token) -> str:
    """A readable form of one token: its text quoted, or its name for a special token."""
    tok = _tok()
    t = int(token)
    if t >= tok.n_tokens:
        return f"<[{t}]>"
    data = tok.tokens[t]
    if t in tok.special_ids:
        return data.decode("utf-8", errors="replace") or f"<[{t}]>"
    try:
        return json.dumps(data.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        return repr(data)


def tokens_repr(tokens: Sequence[Token]) -> str:
    """``token_repr`` of each token, in brackets."""
    return "[" + ", ".join(token_repr(t) for t in tokens) + "]"


def get_config(name: str) -> int:
    """Host configuration (AICI): ``"fork"`` is 1 (forking is supported); unknown names give 0."""
    return {"fork": 1}.get(name, 0)


def is_server_side() -> bool:
    """True: the script is running (the stub of AICI's package returns False)."""
    return True


class TokenSet(_SequenceABC):
    """A set of token ids, as a bitmask over the vocabulary (``len()`` is the vocabulary size):
    ``ts[t] = True`` adds token ``t``. The bits use logitgate's layout (bit ``t % 32`` of int32
    word ``t // 32``); ``bitmask`` is that row."""

    __slots__ = ("_words", "_n")

    def __init__(self) -> None:
        tok = _tok()
        self._n = int(tok.vocab_size)
        self._words = np.zeros((self._n + 31) // 32, dtype=np.int32)

    def _index(self, i: int) -> int:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"TokenSet indices must be int, not {type(i).__name__}")
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError("index out of range")
        return i

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        i = self._index(i)
        return bool((int(self._words[i >> 5]) >> (i & 31)) & 1)

    def __setitem__(self, i: int, v: bool) -> None:
        i = self._index(i)
        w = self._words.view(np.uint32)
        if v:
            w[i >> 5] |= np.uint32(1 << (i & 31))
        else:
            w[i >> 5] &= np.uint32(~(1 << (i & 31)) & 0xFFFFFFFF)

    def __len__(self) -> int:
        return self._n

    def set_all(self, value: bool) -> None:
        """Include (True) or exclude (False) every token id."""
        if value:
            self._words.view(np.uint32)[:] = np.uint32(0xFFFFFFFF)
            extra = len(self._words) * 32 - self._n
            if extra:
                self._words.view(np.uint32)[-1] = np.uint32(0xFFFFFFFF >> extra)
        else:
            self._words[:] = 0

    def num_set(self) -> int:
        """How many tokens are in the set."""
        return int(np.unpackbits(self._words.view(np.uint8)).sum())

    # logitgate extensions
    @property
    def bitmask(self) -> np.ndarray:
        """The int32 words (a view: writing to it changes the set)."""
        return self._words

    def token_ids(self) -> List[int]:
        """The ids in the set, ascending."""
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")[: self._n]
        return [int(i) for i in np.flatnonzero(bits)]

    def __repr__(self) -> str:
        ids = self.token_ids()
        shown = ", ".join(token_repr(t) for t in ids[:12]) + (", ..." if len(ids) > 12 else "")
        return f"TokenSet({len(ids)}/{self._n}: {shown})"


def all_tokens() -> TokenSet:
    """A TokenSet with every token id."""
    ts = TokenSet()
    ts.set_all(True)
    return ts


# ------------------------------------------------------------------------------------------------
# constraints
# ------------------------------------------------------------------------------------------------

_text_masks: dict[str, np.ndarray] = {}


def _anything_mask(tok: _Tokenizer) -> np.ndarray:
    """Every text token (in the vocabulary's trie) and the EOS ids."""
    m = _text_masks.get(tok.fingerprint)
    if m is None:
        bits = np.zeros(((tok.vocab_size + 31) // 32) * 32, dtype=np.uint8)
        bits[np.flatnonzero(tok.trie.token_node >= 0)] = 1
        for e in tok.eos_token_ids:
            bits[e] = 1
        m = np.packbits(bits, bitorder="little").view(np.int32).copy()
        m.setflags(write=False)
        _text_masks[tok.fingerprint] = m
    return m


class Constraint:
    """A constraint on the generated tokens; the base class allows anything (every text token,
    and EOS). Subclasses override the five methods."""

    def __init__(self) -> None:
        pass

    def eos_allowed(self) -> bool:
        """Whether generation may end here."""
        return True

    def eos_forced(self) -> bool:
        """Whether generation must end here."""
        return False

    def token_allowed(self, t: int) -> bool:
        """Whether token ``t`` may come next."""
        m = _anything_mask(_tok())
        t = int(t)
        return 0 <= t < len(m) * 32 and bool((int(m[t >> 5]) >> (t & 31)) & 1)

    def append_token(self, t: int) -> None:
        """Token ``t`` was appended."""

    def allow_tokens(self, ts: TokenSet) -> None:
        """Add the tokens that may come next (and EOS where allowed) to ``ts``."""
        ts._words |= _anything_mask(_tok())


class GrammarConstraint(Constraint):
    """Any ``logitgate.Grammar`` as a constraint (a logitgate extension): a matcher on the current
    host's tokenizer. The base of RegexConstraint, CfgConstraint, SubStrConstraint and the JSON
    Schema, Lark and GBNF constraints."""

    def __init__(self, grammar: Union[_Grammar, CompiledGrammar]) -> None:
        tok = _tok()
        if isinstance(grammar, CompiledGrammar):
            compiled = grammar
        elif isinstance(grammar, _Grammar):
            compiled = _lg_compile(grammar, tok)
        else:
            raise TypeError(f"GrammarConstraint needs a logitgate.Grammar, not {type(grammar).__name__}")
        if compiled.tokenizer.fingerprint != tok.fingerprint:
            raise ValueError("the compiled grammar is for another tokenizer")
        self.compiled = compiled
        self.matcher = _Matcher(compiled, max_rollback=0)
        self._dead = False
        self._mask: np.ndarray | None = None

    def _current_mask(self) -> np.ndarray:
        if self._mask is None:
            row = np.zeros(self.compiled.mask_words, dtype=np.int32)
            self.matcher.fill_next_token_bitmask(row, 0)
            self._mask = row
        return self._mask

    def eos_allowed(self) -> bool:
        return not self._dead and self.matcher.is_accepting()

    def eos_forced(self) -> bool:
        if not self.eos_allowed():
            return False
        others = self._current_mask() & ~self.compiled.eos_mask
        return not others.any()

    def token_allowed(self, t: int) -> bool:
        if self._dead:
            return False
        t = int(t)
        m = self._current_mask()
        return 0 <= t < len(m) * 32 and bool((int(m[t >> 5]) >> (t & 31)) & 1)

    def append_token(self, t: int) -> None:
        if self._dead:
            return
        self._mask = None
        if not self.matcher.accept_token(int(t)):
            self._dead = True  # as AICI's recognizers: nothing is allowed after a refused token

    def allow_tokens(self, ts: TokenSet) -> None:
        if self._dead:
            return
        m = self._current_mask()
        if ts._words.shape != m.shape:
            raise ValueError(f"TokenSet of {len(ts._words)} words, the grammar's masks have {len(m)}")
        ts._words |= m


_grammars: "OrderedDict[tuple, _Grammar]" = OrderedDict()
_GRAMMAR_CACHE = 128


def _grammar(kind: str, key: Any, build: Callable[[], _Grammar]) -> _Grammar:
    k = (kind, key)
    g = _grammars.get(k)
    if g is None:
        g = build()
        _grammars[k] = g
        while len(_grammars) > _GRAMMAR_CACHE:
            _grammars.popitem(last=False)
    else:
        _grammars.move_to_end(k)
    return g


class RegexConstraint(GrammarConstraint):
    """The whole generated text matches ``pattern`` (``re.fullmatch``; Python ``re`` syntax)."""

    def __init__(self, pattern: str) -> None:
        key = pattern if isinstance(pattern, str) else (pattern.pattern, pattern.flags)
        super().__init__(_grammar("regex", key, lambda: _Grammar.from_regex(pattern)))


class CfgConstraint(GrammarConstraint):
    """The generated text is in the language of a yacc-like grammar (AICI's format)."""

    def __init__(self, yacc_grammar: str) -> None:
        super().__init__(_grammar("yacc", yacc_grammar, lambda: _Grammar.from_yacc(yacc_grammar)))


class LarkConstraint(GrammarConstraint):
    """A Lark grammar (logitgate extension)."""

    def __init__(self, lark_grammar: str, start: str = "start") -> None:
        super().__init__(_grammar("lark", (lark_grammar, start), lambda: _Grammar.from_lark(lark_grammar, start=start)))


class GbnfConstraint(GrammarConstraint):
    """A GBNF grammar, llama.cpp's format (logitgate extension)."""

    def __init__(self, gbnf_grammar: str, start: str = "root") -> None:
        super().__init__(_grammar("gbnf", (gbnf_grammar, start), lambda: _Grammar.from_gbnf(gbnf_grammar, start=start)))


class JsonSchemaConstraint(GrammarConstraint):
    """A JSON document valid under ``schema`` (dict, JSON text or Pydantic model; compact
    whitespace; logitgate extension)."""

    def __init__(self, schema: Any) -> None:
        if isinstance(schema, (dict, list, bool, str)):
            key = schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True)
            grammar = _grammar("json_schema", key, lambda: _Grammar.from_json_schema(schema))
        else:  # a Pydantic model: compiled grammars are still cached by content
            grammar = _Grammar.from_json_schema(schema)
        super().__init__(grammar)


class RecognizerConstraint(GrammarConstraint):
    """A custom recognizer written in Python (``logitgate.recognizers``: a FunctionalRecognizer,
    CharRecognizer, StringRecognizer or NumbaRecognizer; logitgate extension). A recognizer that
    fails raises ``RecognizerError``, which ends this controller's sequence with the error logged."""

    def __init__(self, recognizer: Any) -> None:
        super().__init__(_grammar("recognizer", id(recognizer), lambda: _Grammar.from_recognizer(recognizer)))


# -- SubStrConstraint: AICI's word-substring matcher as a byte DFA ------------------------------

_substr_compiled: "OrderedDict[tuple, CompiledGrammar]" = OrderedDict()


def substring_dfa(source: str, end: str):
    """The byte DFA of ``SubStrConstraint(source, end)`` (see the module docstring): AICI's
    ``SubStrMatcher`` state machine determinized, states that cannot reach acceptance removed."""
    from ..automata.dfa import ByteDFA

    src = (source + " ").encode("utf-8")
    end_b = end.encode("utf-8")
    n = len(src)
    starts = frozenset([0] + [i + 1 for i in range(n - 1) if src[i] == 0x20])
    ids: dict[tuple, int] = {}
    keys: list[tuple] = []
    edges: list[dict[int, int]] = []

    def state(key: tuple) -> int:
        sid = ids.get(key)
        if sid is None:
            sid = ids[key] = len(keys)
            keys.append(key)
            edges.append({})
        return sid

    state(("s", starts))
    i = 0
    while i < len(keys):
        kind, val = keys[i]
        out: dict[int, int] = {}
        if kind == "s":
            groups: dict[int, set[int]] = {}
            can_end = False
            for e in val:
                if e < n:
                    groups.setdefault(src[e], set()).add(e + 1)
                    can_end |= src[e] == 0x20
            for b, nxt in groups.items():
                out[b] = state(("s", frozenset(nxt)))
            if end_b and can_end:
                out[end_b[0]] = state(("e", 1))  # AICI switches to the end string first
        elif val < len(end_b):
            out[end_b[val]] = state(("e", val + 1))
        edges[i] = out
        i += 1

    def accepting(key: tuple) -> bool:
        kind, val = key
        if kind == "e":
            return val == len(end_b)
        return not end_b and any(e < n and src[e] == 0x20 for e in val)

    acc = [accepting(k) for k in keys]
    rev: list[list[int]] = [[] for _ in keys]
    for s, out in enumerate(edges):
        for t in out.values():
            rev[t].append(s)
    live = [False] * len(keys)
    stack = [s for s, a in enumerate(acc) if a]
    for s in stack:
        live[s] = True
    while stack:
        t = stack.pop()
        for s in rev[t]:
            if not live[s]:
                live[s] = True
                stack.append(s)
    if not live[0]:
        raise ValueError(f"SubStrConstraint({source[:40]!r}, {end!r}) allows no text at all")
    order: list[int] = [0]
    new_id = {0: 0}
    for s in order:
        for b in sorted(edges[s]):
            t = edges[s][b]
            if live[t] and t not in new_id:
                new_id[t] = len(order)
                order.append(t)
    trans = np.full((len(order), 256), -1, dtype=np.int32)
    accepting_arr = np.zeros((len(order), 1), dtype=bool)
    for s in order:
        row = new_id[s]
        accepting_arr[row, 0] = acc[s]
        for b, t in edges[s].items():
            if live[t]:
                trans[row, b] = new_id[t]
    classes = np.arange(256, dtype=np.uint8)
    for a in (trans, accepting_arr, classes):
        a.setflags(write=False)
    return ByteDFA(trans, 0, accepting_arr, np.ones_like(accepting_arr), classes, trans)


def _substring_compiled(tok: _Tokenizer, source: str, end: str) -> CompiledGrammar:
    key = (source, end, tok.fingerprint)
    c = _substr_compiled.get(key)
    if c is None:
        g = _Grammar("substring", source, 0, (("end", end),))
        c = CompiledGrammar(g, tok, substring_dfa(source, end))
        _substr_compiled[key] = c
        while len(_substr_compiled) > 32:
            _substr_compiled.popitem(last=False)
    else:
        _substr_compiled.move_to_end(key)
    return c


class SubStrConstraint(GrammarConstraint):
    """Whole words of ``template`` (a substring starting and ending at spaces), then ``stop_at``."""

    def __init__(self, template: str, stop_at: str) -> None:
        super().__init__(_substring_compiled(_tok(), str(template), str(stop_at)))


class ChooseConstraint(Constraint):
    """Exactly one of ``options`` (each as the model tokenizes it)."""

    def __init__(self, options: List[str]):
        self.ptr = 0
        self.options = [tokenize(o) for o in options]

    def eos_allowed(self) -> bool:
        return any(len(o) == self.ptr for o in self.options)

    def eos_forced(self) -> bool:
        return len(self.options) == 1 and len(self.options[0]) == self.ptr

    def token_allowed(self, t: int) -> bool:
        return any(self.ptr < len(o) and o[self.ptr] == t for o in self.options)

    def append_token(self, t: int):
        self.options = [o for o in self.options if self.ptr < len(o) and o[self.ptr] == t]
        self.ptr += 1

    def allow_tokens(self, ts: TokenSet):
        for o in self.options:
            if self.ptr < len(o):
                ts[o[self.ptr]] = True
            elif self.ptr == len(o):
                ts[eos_token()] = True


# ------------------------------------------------------------------------------------------------
# results (AICI's pre/mid/post API, with the constructors of its later Branch API)
# ------------------------------------------------------------------------------------------------


class Splice:
    """AICI's later API: remove ``backtrack`` tokens, append ``ff_tokens`` (``when_sampled``
    conditional splices are not supported)."""

    def __init__(self, *, when_sampled: List[Token] = [], backtrack: int = 0, ff_tokens: List[Token]):  # noqa: B006
        self.when_sampled = list(when_sampled)
        self.backtrack = backtrack
        self.ff_tokens = list(ff_tokens)

    def add_splice(self, other: "Splice") -> None:
        """Merge ``other`` (applied after this splice) into this one."""
        assert other.when_sampled == []
        if other.backtrack >= len(self.ff_tokens):
            self.backtrack += other.backtrack - len(self.ff_tokens)
            self.ff_tokens = other.ff_tokens[:]
        else:
            if other.backtrack > 0:
                del self.ff_tokens[-other.backtrack:]
            self.ff_tokens += other.ff_tokens


class Branch:
    """AICI's later API: sample under ``sample_mask``, or apply ``splices``."""

    def __init__(self, *, splices: List[Splice] = [], sample_mask: Optional[TokenSet] = None) -> None:  # noqa: B006
        self.sample_mask = sample_mask
        self.splices = list(splices)

    def is_splice(self) -> bool:
        """Whether the branch is a single unconditional splice."""
        return len(self.splices) == 1 and self.splices[0].when_sampled == []

    @classmethod
    def noop(cls) -> "Branch":
        """A branch that splices nothing."""
        return cls(splices=[Splice(ff_tokens=[])])


class MidProcessResult:
    """What ``mid_process`` returns: a token set to sample under (``bias``), a ``splice``,
    ``stop``, ``noop`` (an empty splice) or ``skip`` (PreToken: go on with the next awaited object).
    ``MidProcessResult(branches)`` takes AICI's later form: ``[]`` stops, one branch samples or
    splices."""

    def __init__(self, branches: Optional[List[Branch]] = None, *, stop: bool = False, skip_me: bool = False):
        self.stop = stop
        self.skip_me = skip_me
        self.logit_bias: Optional[TokenSet] = None
        self.backtrack = 0
        self.ff_tokens: List[Token] = []
        self.is_splice_ = False
        if branches is not None:
            branches = list(branches)
            if not branches:
                self.stop = True
            elif len(branches) > 1:
                raise NotImplementedError("MidProcessResult with several branches (AICI's fork-in-mid_process) "
                                          "is not supported: fork with aici.fork(n) (PreProcessResult.fork)")
            else:
                br = branches[0]
                if br.splices:
                    if br.sample_mask is not None or not br.is_splice():
                        raise NotImplementedError("conditional splices (Splice(when_sampled=...)) are not supported")
                    spl = br.splices[0]
                    self.backtrack, self.ff_tokens, self.is_splice_ = int(spl.backtrack), list(spl.ff_tokens), True
                else:
                    self.logit_bias = br.sample_mask if br.sample_mask is not None else all_tokens()

    @property
    def branches(self) -> List[Branch]:
        """The result as AICI branches (none for a stop or a skip)."""
        if self.stop or self.skip_me:
            return []
        if self.is_splice_:
            return [Branch(splices=[Splice(backtrack=self.backtrack, ff_tokens=self.ff_tokens)])]
        return [Branch(sample_mask=self.logit_bias)]

    def is_splice(self) -> bool:
        """Whether the result splices tokens (and neither stops nor skips)."""
        return self.is_splice_ and not self.stop and not self.skip_me

    @classmethod
    def bias(cls, bias: TokenSet) -> "MidProcessResult":
        """Sample the next token among the tokens of ``bias``."""
        res = cls()
        res.logit_bias = bias
        return res

    @classmethod
    def splice(cls, backtrack: int, tokens: Optional[List[Token]] = None, *,
               ff_tokens: Optional[List[Token]] = None) -> "MidProcessResult":
        """Remove ``backtrack`` tokens, then append ``tokens`` without sampling."""
        toks = ff_tokens if tokens is None else tokens
        assert backtrack >= 0
        assert isinstance(toks, list)
        res = cls()
        res.backtrack = int(backtrack)
        res.ff_tokens = list(toks)
        res.is_splice_ = True
        return res

    @classmethod
    def stop(cls) -> "MidProcessResult":  # type: ignore[no-redef]  # instances shadow it with the flag
        """Stop the sequence."""
        return cls(stop=True)

    @classmethod
    def noop(cls) -> "MidProcessResult":
        """A splice of nothing."""
        return cls.splice(0, [])

    @classmethod
    def skip(cls) -> "MidProcessResult":
        """No result of this callback: go on to the next one."""
        return cls(skip_me=True)


class PreProcessResult:
    """What ``pre_process`` returns: ``continue_()``, ``suspend()`` or ``fork(n)``."""

    def __init__(self, *, suspended: bool = False):
        self.suspended = suspended
        self.ff_tokens: List[Token] = []
        self.num_forks = 1

    @classmethod
    def continue_(cls) -> "PreProcessResult":
        """Go on to ``mid_process``."""
        return cls()

    @classmethod
    def suspend(cls) -> "PreProcessResult":
        """Wait (for variables another sequence sets) before the next step."""
        return cls(suspended=True)

    @classmethod
    def fork(cls, num_forks: int) -> "PreProcessResult":
        """Fork the sequence into ``num_forks`` sequences."""
        res = cls()
        res.num_forks = num_forks
        return res

    @classmethod
    def ff_tokens_pre(cls, toks: List[Token]) -> "PreProcessResult":
        """Append ``toks`` before the step (fast-forward)."""
        res = cls()
        res.ff_tokens = list(toks)
        return res


class PostProcessResult:
    """What ``post_process`` returns: ``continue_()`` or ``stop()``."""

    def __init__(self, *, stop_seq: bool = False):
        self.stop_seq = stop_seq

    @classmethod
    def continue_(cls) -> "PostProcessResult":
        """Go on generating."""
        return cls()

    @classmethod
    def stop(cls) -> "PostProcessResult":
        """End the sequence."""
        return cls(stop_seq=True)

    @classmethod
    def from_tokens(cls, tokens: List[int]) -> "PostProcessResult":
        """Stop when ``tokens`` contain EOS, else continue."""
        return cls(stop_seq=(eos_token() in tokens))


# ------------------------------------------------------------------------------------------------
# awaitables
# ------------------------------------------------------------------------------------------------

_post_arity: dict[type, int] = {}


def _post_takes_backtrack(obj: "NextToken") -> bool:
    """AICI's first API: ``post_process(tokens)``; its later one: ``post_process(backtrack, tokens)``."""
    cls = type(obj)
    n = _post_arity.get(cls)
    if n is None:
        try:
            params = inspect.signature(obj.post_process).parameters.values()
            n = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        except (TypeError, ValueError):
            n = 1
        _post_arity[cls] = n
    return n >= 2


class NextToken:
    """Awaiting this returns the tokens of one step (the sampled token, or the spliced ones).
    Subclasses override ``pre_process``, ``mid_process`` and ``post_process``."""

    # to be overridden
    def pre_process(self) -> PreProcessResult:
        """Suspend (or fork) here; the default goes on."""
        return PreProcessResult.continue_()

    def mid_process(self) -> MidProcessResult:
        """A token set to sample under, a splice, a stop; the default samples any token."""
        return MidProcessResult.bias(all_tokens())

    def post_process(self, tokens: List[Token]) -> PostProcessResult:
        """After the step's tokens were appended (``post_process(backtrack, tokens)`` works too)."""
        return PostProcessResult.continue_()

    def is_fixed(self) -> bool:
        """Whether the token is forced (``FixedTokens``)."""
        return False

    # internals
    def __init__(self) -> None:
        self.finished = False
        self._reset()

    def _reset(self) -> None:
        self.curr_tokens: Optional[List[Token]] = None
        self.value: Optional[List[Token]] = None
        self.fork_group: List[SeqId] = []

    def _pre_process(self) -> PreProcessResult:
        self._reset()
        return self.pre_process()

    def _mid_process(self, fork_group: List[SeqId]) -> MidProcessResult:
        self.fork_group = list(fork_group)
        return self.mid_process()

    def _post_process(self, backtrack: int, tokens: List[Token]) -> PostProcessResult:
        self.curr_tokens = tokens
        self.value = tokens
        self.finished = eos_token() in tokens
        if _post_takes_backtrack(self):
            r = self.post_process(backtrack, tokens)  # type: ignore[call-arg]
        else:
            r = self.post_process(tokens)
        return PostProcessResult.continue_() if r is None else r

    def __await__(self):
        yield self
        assert self.curr_tokens is not None
        return self.curr_tokens


class Noop(NextToken):
    """A step that appends nothing."""

    def mid_process(self) -> MidProcessResult:
        return MidProcessResult.noop()


class _Deferred(Noop):
    """An empty step standing in for a PreToken whose suspension or fork waits for the next round."""


class FixedTokens(NextToken):
    def __init__(self, text: Union[str, bytes], following: Optional["Label"] = None):
        """Forces next tokens to be exactly the given text.
        If following is given, the text replaces everything that follows the label."""
        super().__init__()
        self.fixed_tokens: List[Token] = tokenize(text)
        if _log_level() >= 1:
            print("FIXED", repr(detokenize(self.fixed_tokens).decode(errors="replace")))
        self.following = following

    def is_fixed(self) -> bool:
        """Always True: these tokens are forced."""
        return True

    def mid_process(self) -> MidProcessResult:
        backtrack = 0
        if self.following is not None:
            backtrack = len(get_tokens()) - self.following.ptr
            assert backtrack >= 0, "FixedTokens(following=label): the label is past the end of the sequence"
            if _log_level() >= 1:
                print("BACKTRACK", backtrack)
        return MidProcessResult.splice(backtrack, self.fixed_tokens)


class StopToken(NextToken):
    def __init__(self) -> None:
        """Indicates that the generation should stop."""
        super().__init__()

    def mid_process(self) -> MidProcessResult:
        return MidProcessResult(stop=True)

    def post_process(self, tokens: List[Token]) -> PostProcessResult:
        self.finished = False  # we're never finished, just keep yelling STOP!
        return PostProcessResult.stop()


class ConstrainedToken(NextToken):
    def __init__(self, mk_constraint: Callable[[], Constraint]):
        """Generates a token that satisfies the given constraint (built lazily, in mid_process)."""
        super().__init__()
        self.mk_constraint = mk_constraint
        self._constraint: Optional[Constraint] = None

    def mid_process(self) -> MidProcessResult:
        if self._constraint is None:
            self._constraint = self.mk_constraint()
        bias = TokenSet()
        self._constraint.allow_tokens(bias)
        if _log_level() >= 2:
            print("ALLOW:", bias)
        if not bias.bitmask.any():  # num_set() == 0, without counting
            if _log_level() >= 1:
                print("Constraint doesn't allow any tokens; adding EOS")
            bias[eos_token()] = True
        return MidProcessResult.bias(bias)

    def post_process(self, tokens: List[Token]) -> PostProcessResult:
        assert self._constraint is not None
        for t in tokens:
            self._constraint.append_token(t)
        if self._constraint.eos_forced():
            self.finished = True
        return PostProcessResult.continue_()


class PreToken(NextToken):
    """A step with only a ``pre_process``: awaiting it gives None."""

    def __await__(self):
        yield self
        return None

    def mid_process(self) -> MidProcessResult:
        return MidProcessResult(skip_me=True)


class _Fork(PreToken):
    def __init__(self, num_forks: int):
        super().__init__()
        self.num_forks = num_forks

    def pre_process(self) -> PreProcessResult:
        return PreProcessResult.fork(self.num_forks)


def fork_supported() -> bool:
    """Whether the host can fork (it can)."""
    return get_config("fork") != 0


async def fork(num_forks: Union[int, List[Branch]]) -> int:
    """Forks the execution into ``num_forks`` branches.
    Returns a number from 0 to ``num_forks``-1, indicating the branch."""
    if not isinstance(num_forks, int):
        branches = list(num_forks)
        if any(not (b.is_splice() and not b.splices[0].ff_tokens and not b.splices[0].backtrack) for b in branches):
            raise NotImplementedError("fork([...]) with branches other than Branch.noop() is not supported; "
                                      "fork(n) and then FixedTokens/gen in each branch")
        num_forks = len(branches)
    f = _Fork(num_forks)
    await f
    return f.fork_group.index(self_seq_id())


class _WaitVars(PreToken):
    def __init__(self, vars: List[str]):
        super().__init__()
        self.vars = vars
        self.values: List[bytes] = []

    def pre_process(self) -> PreProcessResult:
        values = [get_var(v) for v in self.vars]
        if None in values:
            return PreProcessResult.suspend()
        self.values = values  # type: ignore[assignment]
        return PreProcessResult.continue_()


async def wait_vars(*vars: str) -> List[bytes]:
    """Suspends execution until all variables are available. Returns values of the variables."""
    w = _WaitVars(list(vars))
    if not w.vars:
        return []
    await w
    return w.values


class GetPrompt:
    """Awaiting this returns the prompt tokens (answered at ``init_prompt``)."""

    def __init__(self) -> None:
        self.prompt: Optional[list[Token]] = None

    def __await__(self):
        yield self
        assert self.prompt is not None
        return self.prompt


CbType = Union[GetPrompt, NextToken]
"""What a script may ``await``: ``GetPrompt`` or a ``NextToken``."""


# ------------------------------------------------------------------------------------------------
# callbacks
# ------------------------------------------------------------------------------------------------


class _InstanceMeta(type):
    @property
    def instance(cls) -> Any:
        """The current script's callbacks object if it is one of these (AICI's class attribute)."""
        s = _current.get()
        cb = s.callbacks if s is not None else None
        return cb if isinstance(cb, cls) else None


class AiciCallbacks(metaclass=_InstanceMeta):
    """Low-level interface (the protocol's four calls with AICI's result types).
    Use ``start()`` to wrap a coroutine; or subclass and ``register()`` an instance."""

    def init_prompt(self, prompt: List[Token]) -> None:
        """Called once with the prompt tokens."""
        pass

    def pre_process(self) -> PreProcessResult:
        """Called before each step: continue, suspend or fork."""
        return PreProcessResult()

    def mid_process(self, fork_group: List[SeqId]) -> MidProcessResult:
        """Called for each step: the tokens to sample among, a splice, or a stop."""
        return MidProcessResult.bias(all_tokens())

    def post_process(self, backtrack: int, tokens: List[Token]) -> PostProcessResult:
        """Called after each step with the tokens appended (and how many were backtracked)."""
        return PostProcessResult.from_tokens(tokens)


async def _stop_forever():
    while True:
        await StopToken()


class AiciAsync(AiciCallbacks):
    """Turns a coroutine into AiciCallbacks (see the module docstring)."""

    def __init__(self, f: Coroutine[CbType, None, None]):
        s = _session()
        if s.callbacks is not None:
            raise RuntimeError("aici.start()/aici.test() may be called only once per script")
        if not inspect.iscoroutine(f):
            raise TypeError(f"aici.start() needs a coroutine (call your async function: start(main())), "
                            f"not {type(f).__name__}")
        self._coro = f
        self._cb: Optional[NextToken] = None
        self._pending_cb: Optional[NextToken] = None
        self._prompt_cb: Optional[GetPrompt] = None
        self.fork_group: List[SeqId] = []
        register(self)
        cb = self._step_core()
        if isinstance(cb, GetPrompt):
            self._prompt_cb = cb
        else:
            self._cb = cb

    @property
    def _tokens(self) -> List[Token]:
        return _session().tokens

    def _step_core(self) -> CbType:
        while True:
            try:
                cb = self._coro.send(None)
            except StopIteration:
                self._coro = _stop_forever()
                continue
            if isinstance(cb, GetPrompt):
                prompt = _session().prompt
                if prompt is not None:  # awaited after init_prompt: answer at once
                    cb.prompt = list(prompt)
                    continue
                return cb
            if not isinstance(cb, NextToken):
                raise TypeError(f"a script may await only pyaici.server objects (NextToken, GetPrompt, gen_*, fork, "
                                f"wait_vars, ...), not {cb!r}")
            return cb

    def step(self) -> None:
        """Run the script's coroutine to its next ``await`` of a ``NextToken``."""
        if self._pending_cb is not None:
            self._cb, self._pending_cb = self._pending_cb, None
            return
        cb = self._step_core()
        assert isinstance(cb, NextToken)
        self._cb = cb

    def _current_cb(self) -> NextToken:
        if self._cb is None:
            raise ControllerError("the script awaits GetPrompt() but init_prompt was not called")
        return self._cb

    def init_prompt(self, prompt: List[Token]) -> None:
        """Hand the prompt to the script's ``GetPrompt`` and run it to its first token."""
        if self._prompt_cb is not None:
            self._prompt_cb.prompt = list(prompt)
            self._prompt_cb = None
            self.step()

    def pre_process(self) -> PreProcessResult:
        """The current ``NextToken``'s ``pre_process``."""
        cb = self._current_cb()
        if cb.finished:
            self._cb = cb = StopToken()
        return cb._pre_process()

    def mid_process(self, fork_group: List[SeqId]) -> MidProcessResult:
        """The current ``NextToken``'s ``mid_process``."""
        self.fork_group = list(fork_group)
        r = self._current_cb()._mid_process(fork_group)
        while r.skip_me:
            self.step()
            cb = self._current_cb()
            r2 = cb._pre_process()
            if r2.suspended or r2.num_forks != 1:
                # the suspension (or a second fork) belongs to a pre_process: splice nothing now,
                # ask again at the next pre_process
                self._pending_cb = cb
                self._cb = _Deferred()
            elif r2.ff_tokens:
                raise NotImplementedError(_FF_PRE)
            r = self._current_cb()._mid_process(fork_group)
        return r

    def post_process(self, backtrack: int, tokens: List[Token]) -> PostProcessResult:
        """The current ``NextToken``'s ``post_process``; then the script runs on."""
        r = self._current_cb()._post_process(backtrack, tokens)
        self.step()
        return r


_FF_PRE = ("fast-forward tokens from pre_process (PreProcessResult.ff_tokens_pre) are not supported by the "
           "controller protocol: return MidProcessResult.splice(0, tokens) from mid_process")


def start(f: Coroutine[CbType, None, None]) -> AiciAsync:
    """Starts the AICI loop with the coroutine ``f`` (an async function is called first)."""
    if not inspect.iscoroutine(f) and callable(f):
        f = f()
    return AiciAsync(f)


def test(f: Coroutine[CbType, None, None]) -> AiciAsync:
    """Runs the loop as a test: prints ``TEST OK`` when ``f`` ends."""
    if not inspect.iscoroutine(f) and callable(f):
        f = f()

    async def wrap():
        await f
        print("TEST OK")

    return AiciAsync(wrap())


# ------------------------------------------------------------------------------------------------
# the high-level API
# ------------------------------------------------------------------------------------------------


def get_tokens() -> List[Token]:
    """The tokens of the current sequence, prompt included (a live list)."""
    return _session().tokens


def get_prompt_len() -> int:
    """The length of the prompt of the current sequence."""
    p = _session().prompt
    return len(p) if p is not None else 0


class Label:
    def __init__(self):
        """A mark at the current position of the sequence, for ``FixedTokens(following=)``."""
        self.ptr = len(get_tokens())

    def tokens_since(self) -> List[Token]:
        """The tokens generated since the label."""
        return get_tokens()[self.ptr:]

    def text_since(self) -> str:
        """The text generated since the label."""
        return detokenize(self.tokens_since()).decode(errors="replace")


async def gen_tokens(
    regex: Optional[str] = None,
    yacc: Optional[str] = None,
    substring: Optional[str] = None,
    substring_end: str = '"',
    options: Optional[List[str]] = None,
    store_var: Optional[str] = None,
    stop_at: Optional[str] = None,
    max_tokens: int = 20,
    *,
    json_schema: Any = None,
    lark: Optional[str] = None,
    gbnf: Optional[str] = None,
    grammar: Optional[_Grammar] = None,
    recognizer: Any = None,
) -> List[Token]:
    """Generates tokens under at most one constraint: ``regex`` (full match), ``yacc`` (AICI's
    grammar format), ``substring`` (whole words of the text, then ``substring_end``), ``options``
    (one of the strings), and logitgate's ``json_schema``, ``lark``, ``gbnf``, ``grammar`` (a
    ``logitgate.Grammar``) and ``recognizer`` (a custom recognizer, ``logitgate.recognizers``). Stops after ``max_tokens`` tokens, when the constraint forces the end
    or EOS comes, or once the text contains ``stop_at`` (which stays in the result). ``store_var``
    stores the generated text in that variable."""
    res: List[Token] = []
    given = [x for x in (regex, options, yacc, substring, json_schema, lark, gbnf, grammar, recognizer)
             if x is not None]
    assert len(given) <= 1, ("gen_tokens takes at most one of "
                             "regex/options/yacc/substring/json_schema/lark/gbnf/grammar/recognizer")
    if regex is not None:
        next_token = ConstrainedToken(lambda: RegexConstraint(regex))
    elif substring is not None:
        next_token = ConstrainedToken(lambda: SubStrConstraint(substring, substring_end))
    elif yacc is not None:
        next_token = ConstrainedToken(lambda: CfgConstraint(yacc))
    elif options is not None:
        next_token = ConstrainedToken(lambda: ChooseConstraint(options))
    elif json_schema is not None:
        next_token = ConstrainedToken(lambda: JsonSchemaConstraint(json_schema))
    elif lark is not None:
        next_token = ConstrainedToken(lambda: LarkConstraint(lark))
    elif gbnf is not None:
        next_token = ConstrainedToken(lambda: GbnfConstraint(gbnf))
    elif grammar is not None:
        next_token = ConstrainedToken(lambda: GrammarConstraint(grammar))
    elif recognizer is not None:
        next_token = ConstrainedToken(lambda: RecognizerConstraint(recognizer))
    else:
        next_token = ConstrainedToken(lambda: Constraint())
    for _ in range(max_tokens):
        tokens = await next_token
        if tokens:
            res += tokens
            if _log_level() >= 2:
                print("GEN-STEP:", ", ".join(token_repr(t) for t in tokens))
            if stop_at is not None:
                if stop_at in detokenize(res).decode(errors="replace"):
                    break
        if next_token.finished:
            break
    if store_var is not None:
        set_var(store_var, detokenize(res))
    if _log_level() >= 1:
        print("GEN", repr(detokenize(res).decode(errors="replace")))
    return res


async def gen_text(**kwargs: Any) -> str:
    """Same as gen_tokens(), but decodes the output as text."""
    tokens = await gen_tokens(**kwargs)
    return detokenize(tokens).decode(errors="replace")


def _check_failed(msg: str) -> None:
    if CHECKS == "report":
        print("CHECK FAILED", msg)
    elif CHECKS == "assert":
        raise AssertionError(msg)
    else:
        raise ValueError(f"scripting.CHECKS must be 'assert' or 'report', not {CHECKS!r}")


def check_var(name: str, value: str) -> None:
    """Check that the variable has the given value (AssertionError, or a log line; see CHECKS)."""
    v = get_var(name)
    if v is None:
        _check_failed(f"Variable {name} is unset")
        return
    text = v.decode(errors="replace")
    if text != value:
        _check_failed(f"Variable {name}: {text!r} != {value!r}")


def check_vars(d: Dict[str, str]) -> None:
    """Check all the variables have the given values."""
    for k, v in d.items():
        check_var(k, v)


# ------------------------------------------------------------------------------------------------
# the per-script module object, and the controller
# ------------------------------------------------------------------------------------------------

API = [
    # native
    "TokenSet", "tokenize", "detokenize", "RegexConstraint", "CfgConstraint", "SubStrConstraint", "Constraint",
    "get_var", "set_var", "append_var", "eos_token", "token_repr", "tokens_repr", "get_config", "self_seq_id",
    "register", "is_server_side",
    # server.py
    "Token", "SeqId", "log_level", "all_tokens", "get_tokens", "get_prompt_len", "Splice", "Branch",
    "MidProcessResult", "PreProcessResult", "PostProcessResult", "NextToken", "Noop", "FixedTokens", "StopToken",
    "ConstrainedToken", "PreToken", "fork_supported", "fork", "wait_vars", "AiciCallbacks", "GetPrompt", "CbType",
    "AiciAsync", "start", "test", "Label", "ChooseConstraint", "gen_tokens", "gen_text", "check_var", "check_vars",
    # logitgate extensions
    "GrammarConstraint", "JsonSchemaConstraint", "LarkConstraint", "GbnfConstraint", "RecognizerConstraint",
    "current_host",
]
"""The names ``pyaici.server`` exports."""


class _ApiModule(types.ModuleType):
    """``pyaici.server`` as a script sees it: ``log_level`` reads and writes the script's own."""

    @property
    def log_level(self) -> int:
        s = self.__dict__.get("_lg_session") or _current.get()
        return s.log_level if s is not None else globals()["log_level"]

    @log_level.setter
    def log_level(self, value: int) -> None:
        s = self.__dict__.get("_lg_session") or _current.get()
        if s is not None:
            s.log_level = value
        else:
            globals()["log_level"] = value


_PUBLIC = {name: globals()[name] for name in API if name != "log_level"}


def _script_modules(session: _Session) -> tuple[types.ModuleType, types.ModuleType]:
    server = _ApiModule("pyaici.server", "AICI's pyctrl API on logitgate (this script's instance)")
    server.__dict__.update(_PUBLIC)
    server.__dict__["_lg_session"] = session
    server.__dict__["__all__"] = list(API)
    pkg = types.ModuleType("pyaici")
    pkg.__path__ = []  # type: ignore[attr-defined]
    pkg.server = server  # type: ignore[attr-defined]
    pkg.server_native = server  # type: ignore[attr-defined]
    return server, pkg


def _script_builtins(server: types.ModuleType, pkg: types.ModuleType) -> dict:
    real_import = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "pyaici" or name.startswith("pyaici.")):
            if name in ("pyaici.server", "pyaici.server_native"):
                return server if fromlist else pkg
            if name == "pyaici":
                return pkg
        return real_import(name, globals, locals, fromlist, level)

    b = dict(builtins.__dict__)
    b["__import__"] = _import
    return b


@dataclass(frozen=True)
class _Program:
    code: types.CodeType
    filename: str


class _Discard(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


def _summary(r: object) -> tuple:
    if isinstance(r, SampleWithBias):
        return ("sample", None if r.bitmask is None else hash(np.asarray(r.bitmask).tobytes()))
    if isinstance(r, _ProtoSplice):
        return ("splice", r.backtrack, tuple(int(t) for t in r.ff_tokens))
    if isinstance(r, Fork):
        return ("fork", r.num_forks)
    return (type(r).__name__,)


class ScriptController(Controller):
    """Drives one script instance through the controller protocol (see the module docstring)."""

    def __init__(self, host: ControllerHost, program: _Program, *, _journal: list | None = None) -> None:
        self.host = host
        self._program = program
        self._session = _Session(host)
        self._error: BaseException | None = None
        if _journal is None:
            try:
                with self._active():
                    self._exec()
            except Exception as exc:  # reported at init_prompt: it ends only this sequence
                self._error = exc
        else:
            self._replay(_journal)

    # -- plumbing -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _active(self) -> Iterator[None]:
        s = self._session
        token = _current.set(s)
        try:
            with contextlib.redirect_stdout(_Discard() if s.replaying else self.host.log):
                yield
        finally:
            _current.reset(token)

    def _exec(self) -> None:
        s = self._session
        server, pkg = _script_modules(s)
        s.module = server  # type: ignore[assignment]
        ns = {"__name__": "__main__", "__file__": self._program.filename, "__builtins__": _script_builtins(server, pkg)}
        exec(self._program.code, ns)  # noqa: S102 - running the user's script is the point
        if s.callbacks is None:
            raise ControllerError(f"{self._program.filename}: the script did not call aici.start() or aici.test()")

    def _cb(self) -> AiciCallbacks:
        if self._error is not None:
            raise self._error
        cb = self._session.callbacks
        assert cb is not None
        return cb

    # -- the protocol -------------------------------------------------------------------------
    def init_prompt(self, prompt: list[int]) -> None:
        ev = ["init", tuple(int(t) for t in prompt)]
        self._session.journal.append(ev)
        with self._active():
            self._do_init(list(ev[1]))

    def pre_process(self):
        ev: list = ["pre", None]
        self._session.journal.append(ev)
        with self._active():
            r = self._do_pre()
        ev[1] = _summary(r)
        return r

    def mid_process(self, fork_group: list[int]):
        ev: list = ["mid", tuple(int(i) for i in fork_group), None]
        self._session.journal.append(ev)
        with self._active():
            r = self._do_mid(list(ev[1]))
        ev[2] = _summary(r)
        return r

    def post_process(self, tokens: list[int], backtrack: int = 0):
        s = self._session
        ev: list = ["post", tuple(int(t) for t in tokens), int(backtrack), None, None]
        s.journal.append(ev)
        self._apply(ev[1], ev[2])
        if s.tokens != self.host.tokens:  # the runtime's list is the truth
            ev[3] = tuple(self.host.tokens)
            s.tokens[:] = ev[3]
        with self._active():
            r = self._do_post(list(ev[1]), ev[2])
        ev[4] = _summary(r)
        return r

    def fork(self, host: ControllerHost) -> "ScriptController":
        return ScriptController(host, self._program, _journal=list(self._session.journal))

    # -- the calls, shared by live runs and replays -------------------------------------------
    def _apply(self, tokens: Sequence[int], backtrack: int) -> None:
        toks = self._session.tokens
        if backtrack > 0:
            del toks[len(toks) - backtrack:]
        toks.extend(tokens)

    def _do_init(self, prompt: list[int]) -> None:
        s = self._session
        cb = self._cb()
        s.prompt = list(prompt)
        s.tokens[:] = prompt
        cb.init_prompt(list(prompt))

    def _do_pre(self):
        r = self._cb().pre_process()
        if isinstance(r, (Continue, Stop, Suspend, Fork)):
            return r
        if not isinstance(r, PreProcessResult):
            raise ControllerError(f"pre_process returned {r!r}, not a PreProcessResult")
        if r.ff_tokens:
            raise NotImplementedError(_FF_PRE)
        if r.suspended:
            return Suspend()
        if r.num_forks != 1:
            return Fork(r.num_forks)
        return Continue()

    def _do_mid(self, fork_group: list[int]):
        self._session.fork_group = list(fork_group)
        r = self._cb().mid_process(list(fork_group))
        if isinstance(r, (SampleWithBias, _ProtoSplice, Stop)):
            return r
        if not isinstance(r, MidProcessResult):
            raise ControllerError(f"mid_process returned {r!r}, not a MidProcessResult")
        if r.stop:
            return Stop()
        if r.skip_me:
            raise ControllerError("mid_process returned MidProcessResult.skip() outside AiciAsync")
        if r.is_splice_ or r.ff_tokens or r.backtrack:
            return _ProtoSplice(int(r.backtrack), [int(t) for t in r.ff_tokens])
        if r.logit_bias is None:
            return SampleWithBias(None)
        if not isinstance(r.logit_bias, TokenSet):
            raise ControllerError(f"MidProcessResult.bias needs a TokenSet, not {type(r.logit_bias).__name__}")
        return SampleWithBias(r.logit_bias.bitmask.copy())

    def _do_post(self, tokens: list[int], backtrack: int):
        r = self._cb().post_process(backtrack, list(tokens))
        if r is None:
            return Continue()
        if isinstance(r, (Continue, Stop)):
            return r
        if not isinstance(r, PostProcessResult):
            raise ControllerError(f"post_process returned {r!r}, not a PostProcessResult")
        return Stop() if r.stop_seq else Continue()

    # -- fork by replay -----------------------------------------------------------------------
    def _replay(self, journal: list[list]) -> None:
        s = self._session
        s.replay = journal
        s.pos = 0
        try:
            with self._active():
                self._exec()
                while s.pos < len(journal):
                    ev = journal[s.pos]
                    s.pos += 1
                    kind = ev[0]
                    if kind == "init":
                        self._do_init(list(ev[1]))
                    elif kind == "pre":
                        self._expect(ev, _summary(self._do_pre()), ev[1])
                    elif kind == "mid":
                        self._expect(ev, _summary(self._do_mid(list(ev[1]))), ev[2])
                    elif kind == "post":
                        self._apply(ev[1], ev[2])
                        if ev[3] is not None:
                            s.tokens[:] = ev[3]
                        self._expect(ev, _summary(self._do_post(list(ev[1]), ev[2])), ev[4])
                    else:
                        raise _ReplayDiverged(f"replay: the original called {ev[1]}{ev[2]!r} here, the replay did not")
        except _ReplayDiverged:
            raise
        except Exception as exc:
            raise ControllerError(f"forking {self._program.filename} by replaying it failed "
                                  f"(is the script deterministic?): {type(exc).__name__}: {exc}") from exc
        finally:
            s.replay = None
        s.journal = list(journal)
        if s.tokens != self.host.tokens:
            raise _ReplayDiverged(f"replay: the script's tokens ({len(s.tokens)}) differ from the sequence's "
                                  f"({len(self.host.tokens)})")

    @staticmethod
    def _expect(ev: list, got: tuple, want: tuple | None) -> None:
        if want is not None and got != want:
            raise _ReplayDiverged(f"replay: {ev[0]}_process gave {got!r}, the original gave {want!r}")


def script_factory(source: str, filename: str = "<script>") -> Callable[[ControllerHost], Controller]:
    """A controller factory for the script text ``source`` (compiled once)."""
    program = _Program(compile(source, filename, "exec", dont_inherit=True), filename)

    def factory(host: ControllerHost) -> Controller:
        return ScriptController(host, program)

    factory.program = program  # type: ignore[attr-defined]
    return factory


def load_script(path: Union[str, Path]) -> Callable[[ControllerHost], Controller]:
    """A controller factory for the script file ``path``: ``factory(host)`` runs the script with
    ``host`` current and returns its ``ScriptController``. Raises ``SyntaxError`` at once."""
    p = Path(path)
    return script_factory(p.read_text(encoding="utf-8"), str(p))


__all__ = [*API, "CHECKS", "API", "ScriptController", "load_script", "script_factory", "host_context",
           "substring_dfa"]
