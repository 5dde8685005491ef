"""``compile(grammar, tokenizer)``: a constraint bound to one vocabulary, with its token masks.

A ``CompiledGrammar`` is immutable from the outside, thread-safe and shared by every
``Matcher`` built on it. For a regex it holds the minimal byte DFA and memoises the token mask of
each DFA state the first time any matcher needs it (a trie walk in compiled code); after that a
mask is a row copy. ``build_index()`` computes every state's mask ahead of time instead.

Compiled grammars are cached by (grammar, tokenizer fingerprint); ``clear_cache()`` empties it.

Index modes of ``compile``: ``"lazy"`` (default) computes each state's mask when a matcher first
needs it (the first request also computes, in the same kernel call, the masks of the states an
ASCII text meets next, within a small trie-walk budget, ``FIRST_BATCH_STATES`` and
``FIRST_BATCH_VISITS``: the usual states of a short pattern such as a date or a phone number then
cost one kernel call of tens of microseconds instead of one walk each as they are met);
``"background"`` computes the remaining states' masks on a background thread right after
compiling (the kernels release the GIL, so this can overlap a model's forward pass; skipped
when all masks would exceed ``BACKGROUND_INDEX_BUDGET`` bytes); ``"eager"`` computes all of them
before ``compile`` returns. In a tight loop with no forward pass to hide behind, "background"
measured slower than "lazy" on 2 cores (the two threads compete), hence the default.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .automata import ByteDFA, regex_dfa
from .errors import CompileError, LimitError, RecognizerError, RegexError, RegexLimitError
from .grammar import Grammar
from .limits import compile_deadline, get_limits
from .kernels import DirectCalls, recognizer_kernels, trie_kernels
from .vocab import Tokenizer

if TYPE_CHECKING:
    from .grammar.cfg import CFG

# a regex's compile and step kernels, without numba's per-call type dispatch (see kernels.DirectCalls)
_TK = DirectCalls(trie_kernels, ("dfa_walk", "first_batch_masks", "state_mask", "walk_tables"))

__all__ = ["CompiledGrammar", "CompiledCFG", "CompiledRecognizer", "compile", "clear_cache", "CACHE_SIZE", "BACKGROUND_INDEX_BUDGET", "IndexMode"]

CACHE_SIZE = 128
"""How many compiled grammars the process-wide cache keeps (least recently used are dropped)."""

BACKGROUND_INDEX_BUDGET = 64 * 2**20
"""Largest total mask memory (bytes) that ``index="background"`` precomputes for one grammar."""

FIRST_BATCH_STATES = 128
"""How many states a regex's first mask request may fill in one kernel call: the requested one,
then those an ASCII text meets next (breadth-first over ASCII bytes)."""

FIRST_BATCH_VISITS = 16_384
"""Trie nodes the first mask request may visit in all, its first state's included (each state
also counts ``16 + words / 4`` for its fixed work, mostly the page faults of fresh memory); the
state that would pass the budget, and those after it, are left for later. At most about 50 us on
the 131k-token tekken vocabulary, where it fills a dozen cheap states."""

ALIKE_MASKS = 4
"""How many masks of recent *heavy* regex states (a walk over half of the vocabulary's trie or
more: a free-text span) a compiled regex keeps to derive the masks of alike states from
(see ``trie_kernels.state_mask``): the states of one span that differ only in what its end
looks like share nearly all their tokens."""

IndexMode = Literal["background", "lazy", "eager"]
"""When ``compile`` computes token masks: ``"lazy"`` (on first use), ``"eager"`` (all states
before returning) or ``"background"`` (on a background thread)."""

_indexer: ThreadPoolExecutor | None = None
_indexer_lock = threading.Lock()


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


_NO_BATCH = np.zeros((0, 0), dtype=np.int32)  # a compiled regex's batch before its first mask
_NO_ALIKE_ROWS = np.zeros(0, np.int32)  # state_mask without kept masks
_NO_ALIKE_REACH = np.zeros(0, np.int64)
_NO_ALIKE_MASKS = np.zeros((0, 0), np.uint32)

_LAYOUTS: dict[tuple[int, tuple[int, ...]], tuple[int, np.ndarray, np.ndarray]] = {}


def _mask_layout(tokenizer: Tokenizer) -> tuple[int, np.ndarray, np.ndarray]:
    """``(words per mask, the read-only mask of the EOS tokens only, the same as uint32)`` for
    ``tokenizer`` (shared by the tokenizers with its width and EOS ids)."""
    key = (tokenizer.vocab_size, tuple(tokenizer.eos_token_ids))
    layout = _LAYOUTS.get(key)
    if layout is None:
        words = (tokenizer.vocab_size + 31) // 32
        eos = np.zeros(words, dtype=np.uint32)
        for t in tokenizer.eos_token_ids:
            eos[t >> 5] |= np.uint32(1 << (t & 31))
        layout = words, _readonly(eos.view(np.int32)), _readonly(eos)
        if len(_LAYOUTS) >= 64:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    return layout


class CompiledGrammar:
    """A grammar compiled against a tokenizer. States are opaque to users; ``Matcher`` drives them.

    Regex constraints: a state is a DFA state number; ``-1`` never appears as a state (a byte that
    leads to it is rejected).
    """

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer, dfa: ByteDFA) -> None:
        if dfa.start < 0:
            raise CompileError(f"the {grammar.kind} {grammar.source!r} matches no string at all")
        self.grammar = grammar
        self.tokenizer = tokenizer
        self.dfa = dfa
        self.trie = tokenizer.trie
        n_states, self._n_classes = dfa.class_transitions.shape
        if n_states * self._n_classes >= 2**31:  # row offsets are int32
            raise CompileError(f"the {grammar.kind}'s DFA is too large ({n_states} states)")
        # the walk's form of the DFA: a flat class table of row offsets (see class_table)
        table, byte_class, self._accepting, self._live = _TK.walk_tables(
            dfa.class_transitions, dfa.byte_classes, dfa.accepting)
        self._table, self._byte_class, self._live = _readonly(table), _readonly(byte_class), _readonly(self._live)
        self.mask_words, self.eos_mask, self._eos_words = _mask_layout(tokenizer)
        self._masks: dict[int, np.ndarray] = {}
        # memoised masks are capped by Limits.mask_cache_bytes (oldest dropped first)
        self._max_masks = max(1, get_limits().mask_cache_bytes // (4 * self.mask_words))
        self._forced: dict[int, bytes] = {}
        # a grammar compiled as its DFA (see _whole_text_dfa) keeps a grammar's jump-forward cap
        self._max_forced = None if grammar.kind == "regex" else get_limits().max_forced_bytes
        self._lock = threading.Lock()
        self._indexing_started = False
        # the first mask request's batch (see token_mask): masks [k, mask_words], state -> row
        self._batch = _NO_BATCH
        self._batch_row: dict[int, int] = {}
        self._walk_args: tuple | None = None  # the trie's arrays for _state_mask, gathered on first use
        # the masks of recent heavy states, to derive alike ones from (see ALIKE_MASKS): created on
        # first use; one thread at a time uses them (another walks plainly meanwhile)
        self._alike: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._alike_next = 0
        self._alike_lock = threading.Lock()
        self.n_alike_masks = 0
        """How many masks were derived from an alike state's (for tests and benchmarks)."""

    # -- states -------------------------------------------------------------------------------
    @property
    def initial_state(self) -> int:
        """The state a new ``Matcher`` starts in (opaque)."""
        return int(self.dfa.start)

    @property
    def n_states(self) -> int:
        """Number of DFA states (lexer states for a grammar)."""
        return int(self.dfa.n_states)

    def advance_token(self, state: int, token_id: int) -> int:
        """The state after ``token_id``'s bytes, or -1 if they are not allowed (EOS and special
        tokens are the matcher's business and give -1 here)."""
        if token_id >= self.trie.n_tokens or self.trie.token_node[token_id] < 0:
            return -1
        start, end = self.trie.token_span(token_id)
        row = _TK.dfa_walk(self._table, self._byte_class, state * self._n_classes, self.trie.token_flat,
                           start, end)
        return -1 if row < 0 else int(row) // self._n_classes

    def advance_bytes(self, state: int, data: bytes) -> int:
        """The state after ``data``, or -1 if some byte is rejected."""
        if not data:
            return state
        flat = _readonly(np.frombuffer(data, dtype=np.uint8).copy())
        row = _TK.dfa_walk(self._table, self._byte_class, state * self._n_classes, flat, 0, len(data))
        return -1 if row < 0 else int(row) // self._n_classes

    def is_accepting(self, state: int) -> bool:
        """Whether the text so far is complete (EOS allowed)."""
        return bool(self._accepting[state])

    def forced_bytes(self, state: int) -> bytes:
        """The bytes every valid continuation from ``state`` starts with ('' at an accepting state)."""
        forced = self._forced.get(state)
        if forced is None:
            forced = self.dfa.forced_bytes(state)
            if self._max_forced is not None:
                forced = forced[:self._max_forced]
            self._forced[state] = forced
        return forced

    # -- masks --------------------------------------------------------------------------------
    def token_mask(self, state: int) -> np.ndarray:
        """The allowed-token mask at ``state``: a read-only int32 row in the bitmask layout
        (bit ``t % 32`` of word ``t // 32`` = token ``t``; EOS bits set exactly when the state is
        accepting). Memoised per state; the first request also fills the states an ASCII text
        meets next, as far as ``FIRST_BATCH_VISITS`` allows."""
        mask = self._masks.get(state)
        if mask is None:
            k = self._batch_row.get(state)
            if k is not None:
                mask = self._batch[k]
            elif self._batch_row:  # a later state alone (batches of the next ones measured no better)
                mask = self._state_mask(state)
            else:  # the first request: one kernel call for the state and those an ASCII text meets next
                rows, batch = self._batch_masks(state, max(1, min(FIRST_BATCH_STATES, self._max_masks // 2)),
                                                FIRST_BATCH_VISITS)
                with self._lock:
                    if not self._batch_row:
                        self._batch = batch
                        states = (rows // self._n_classes).tolist()
                        self._batch_row = dict(zip(states, range(len(batch))))
                mask = batch[0]
            with self._lock:
                mask = self._masks.setdefault(state, mask)
                # the batch is memory held too: together they stay within Limits.mask_cache_bytes
                while len(self._masks) > max(1, self._max_masks - len(self._batch)):
                    del self._masks[next(iter(self._masks))]
        return mask

    def _batch_masks(self, state: int, limit: int, budget: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, masks)``: the masks of ``state`` and of up to ``limit - 1`` states an ASCII text
        meets next (breadth-first), as far as ``budget`` trie visits allow, in one kernel call."""
        trie = self.trie
        rows, out = _TK.first_batch_masks(
            self._table, self._byte_class, self._n_classes, np.int32(state * self._n_classes), limit,
            trie.root_child, trie.nodes, trie.subtree_end, trie.dup_first, trie.dup_other, trie.max_depth, budget,
            self._accepting, self._eos_words, trie.root_fanout, trie.root_grand, self._live)  # EOS bits set by the kernel
        return rows, _readonly(out[:, :self.mask_words].view(np.int32))

    def _state_mask(self, state: int) -> np.ndarray:
        """The read-only mask of ``state`` alone (a request after the first): one kernel call on
        arguments gathered once, as each later miss of a walk costs a few microseconds in all."""
        args = self._walk_args
        if args is None:
            trie = self.trie
            args = self._walk_args = (trie.root_child, trie.nodes, trie.subtree_end, trie.dup_first, trie.dup_other,
                                      trie.max_depth, trie.root_fanout, trie.root_grand, self._live)
        out = np.empty(self.mask_words + 1, np.int32)  # + the walk's spare word
        # the kept masks of heavy states, unless another thread holds them (then a plain walk)
        held = self._alike_lock.acquire(blocking=False)
        try:
            if held:
                if self._alike is None:
                    self._alike = (np.full(ALIKE_MASKS, -1, np.int32), np.zeros(ALIKE_MASKS, np.int64),
                                   np.empty((ALIKE_MASKS, out.shape[0]), np.uint32))
                kept = (*self._alike, self._alike_next, max(8192, self.trie.nodes.shape[0] // 2))
            else:
                kept = (_NO_ALIKE_ROWS, _NO_ALIKE_REACH, _NO_ALIKE_MASKS, -1, 0)
            how = _TK.state_mask(self._table, self._byte_class, self._n_classes, state * self._n_classes, *args,
                                 self._accepting[state], self._eos_words, out, *kept)
            if how:  # a heavy state's mask was kept
                self._alike_next = (self._alike_next + 1) % ALIKE_MASKS
                self.n_alike_masks += how == 2
        finally:
            if held:
                self._alike_lock.release()
        mask = out[:-1]
        mask.flags.writeable = False
        return mask

    def build_index(self) -> "CompiledGrammar":
        """Compute the mask of every state now (instead of on first use); returns ``self``."""
        for state in range(self.n_states):
            self.token_mask(state)
        return self

    @property
    def n_masks_computed(self) -> int:
        """How many states' masks are memoised so far (the first request's batch included)."""
        return len(self._masks.keys() | self._batch_row.keys())

    def start_background_index(self) -> bool:
        """Compute the masks of all states on a background thread (once); the start state is left
        for last, as a matcher asks for it first. Returns False when skipped because the masks
        would exceed ``BACKGROUND_INDEX_BUDGET``."""
        global _indexer
        if self.n_states * self.mask_words * 4 > BACKGROUND_INDEX_BUDGET:
            return False
        with self._lock:
            if self._indexing_started:
                return True
            self._indexing_started = True
        with _indexer_lock:
            if _indexer is None:
                _indexer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logitgate-index")
        _indexer.submit(self._index_all_from, 1)
        return True

    def _index_all_from(self, first: int) -> None:
        for state in [*range(first, self.n_states), *range(first)]:
            if state not in self._masks:
                self.token_mask(state)

    @property
    def index_nbytes(self) -> int:
        """Memory held by the masks computed so far and the DFA tables (the shared trie excluded)."""
        masks = sum(m.nbytes for m in list(self._masks.values()) if m.base is not self._batch.base)
        alike = self._alike
        return masks + self._batch.nbytes + self._table.nbytes + (0 if alike is None else alike[2].nbytes)

    def __repr__(self) -> str:
        what = f"={self.grammar.source!r}" if self.grammar.kind == "regex" else " compiled as one DFA"
        return (f"CompiledGrammar({self.grammar.kind}{what}, states={self.n_states}, "
                f"tokenizer={self.tokenizer.name or self.tokenizer.fingerprint[:12]!r})")


_cache: "OrderedDict[tuple, CompiledGrammar]" = OrderedDict()
_cache_lock = threading.Lock()
_key_locks: dict[tuple, threading.Lock] = {}


class CompiledCFG(CompiledGrammar):
    """A context-free grammar compiled against a tokenizer: lexer DFA + Earley tables
    (``logitgate.grammar.engine``). Its states are mutable parse states owned by matchers."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer, cfg: "CFG", lexer=None) -> None:
        from .grammar.engine import CFGEngine

        self.grammar = grammar
        self.tokenizer = tokenizer
        self.trie = tokenizer.trie
        self.cfg = cfg
        self.mask_words, self.eos_mask, _ = _mask_layout(tokenizer)
        self.engine = CFGEngine(cfg, self.trie, self.mask_words, self.eos_mask, lexer)
        self.token_mask = self.engine.token_mask  # type: ignore[method-assign]  (one call less per step)
        self._lock = threading.Lock()
        if cfg.lex_mode != "chars" and cfg.kind != "json_schema":  # JSON lexemes end unambiguously
            from .grammar.lexemes import swallowed_pairs

            pairs = swallowed_pairs(cfg, self.engine.lexer)
            if pairs:
                import warnings

                from .errors import GrammarWarning

                shown = ", ".join(f"{x} then {y}" for x, y in pairs[:6]) + (" ..." if len(pairs) > 6 else "")
                msg = (f"greedy lexing never produces these terminal pairs (every complete lexeme of the first "
                       f"is extended by whatever starts the second): {shown}")
                cfg.warnings.append(msg)
                warnings.warn(msg, GrammarWarning, stacklevel=5)

    @property
    def initial_state(self):  # type: ignore[override]
        """A fresh parse state at the start of the text (opaque)."""
        return self.engine.new_state()

    @property
    def n_states(self) -> int:
        """Number of lexer DFA states."""
        return self.engine.lexer.n_states

    def token_mask(self, state) -> np.ndarray:  # type: ignore[override]
        return self.engine.token_mask(state)

    def is_accepting(self, state) -> bool:  # type: ignore[override]
        return state.eos_allowed()

    def forced_bytes(self, state) -> bytes:  # type: ignore[override]
        return state.forced_bytes()

    def build_index(self) -> "CompiledCFG":
        """Grammar masks depend on the parse, so they are memoised as met; nothing to precompute."""
        return self

    def start_background_index(self) -> bool:
        return False

    @property
    def n_masks_computed(self) -> int:
        return self.engine.n_masks_computed

    @property
    def index_nbytes(self) -> int:
        return self.engine.index_nbytes

    def __repr__(self) -> str:
        return (f"CompiledGrammar({self.grammar.kind}, terminals={self.cfg.n_terminals}, "
                f"rules={len(self.cfg.rules)}, lexer_states={self.n_states}, "
                f"tokenizer={self.tokenizer.name or self.tokenizer.fingerprint[:12]!r})")


def _compile_uncached(grammar: Grammar, tokenizer: Tokenizer) -> CompiledGrammar:
    try:
        with compile_deadline():
            return _build(grammar, tokenizer)
    except RecursionError:  # a backstop: recursive passes over a very deeply nested constraint
        raise CompileError(f"the {grammar.kind} nests too deeply to compile (groups or rules within each other, "
                           f"or a long chain of rules each referring to the next)") from None


class CompiledRecognizer(CompiledGrammar):
    """A Python recognizer (``Grammar.from_recognizer``) bound to a tokenizer. Its states are
    interned as integers as they are met; byte transitions, end checks and token masks are
    memoised per state, so a state met again costs a dictionary lookup (thread-safe: one lock)."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer, recognizer: Any) -> None:
        self.grammar = grammar
        self.tokenizer = tokenizer
        self.trie = tokenizer.trie
        self.recognizer = recognizer  # a FunctionalRecognizer raising RecognizerError on failure
        self.mask_words, self.eos_mask, _ = _mask_layout(tokenizer)
        self._lock = threading.RLock()
        self._ids: dict[Any, int] = {}
        self._states: list[Any] = []
        self._next: dict[int, int] = {}  # state id * 256 + byte -> next id, -1 when refused
        self._ends: dict[int, bool] = {}
        self._byte_sets: dict[int, frozenset[int]] = {}  # from the optional allowed_bytes(state)
        self._masks: dict[int, np.ndarray] = {}
        self._forced: dict[int, bytes] = {}
        self._max_masks = max(1, get_limits().mask_cache_bytes // (4 * self.mask_words))
        self._max_forced = get_limits().max_forced_bytes
        self._max_seconds = get_limits().max_recognizer_seconds or float("inf")
        self._ht_keys = np.full(1 << 12, recognizer_kernels.EMPTY, np.int64)  # explored transitions
        self._ht_vals = np.empty(1 << 12, np.int32)
        self._ht_shift = 64 - 12
        self._ht_used = 0
        self._miss_node: np.ndarray | None = None  # scratch of the walk (under the lock)
        self._miss_state: np.ndarray | None = None
        from .recognizers import NumbaRecognizer

        native = grammar._rec[0]
        self._numba = native if isinstance(native, NumbaRecognizer) else None  # walks in compiled code
        self._start = self._intern(recognizer.initial())

    def _intern(self, state: Any) -> int:
        sid = self._ids.get(state)
        if sid is None:
            sid = self._ids[state] = len(self._states)
            self._states.append(state)
        return sid

    def _step(self, sid: int, byte: int) -> int:
        key = sid * 256 + byte
        nxt = self._next.get(key)
        if nxt is None:
            state = self._states[sid]
            rec = self.recognizer
            if rec.allowed_bytes is not None:  # one call per state rather than one per (state, byte)
                allowed = self._byte_sets.get(sid)
                if allowed is None:
                    allowed = self._byte_sets[sid] = rec.allowed_bytes(state)
                ok = byte in allowed
            else:
                ok = rec.byte_allowed(state, byte)
            nxt = self._intern(rec.append(state, byte)) if ok else -1
            self._next[key] = nxt
        return nxt

    def state_of(self, sid: int) -> Any:
        """The recognizer's own state behind a matcher state."""
        return self._states[sid]

    @property
    def initial_state(self) -> int:  # type: ignore[override]
        return self._start

    @property
    def n_states(self) -> int:  # type: ignore[override]
        """Recognizer states met so far."""
        return len(self._states)

    def advance_token(self, state: int, token_id: int) -> int:  # type: ignore[override]
        if token_id >= self.trie.n_tokens or self.trie.token_node[token_id] < 0:
            return -1
        start, end = self.trie.token_span(token_id)
        return self.advance_bytes(state, self.trie.token_flat[start:end].tobytes())

    def advance_bytes(self, state: int, data: bytes) -> int:  # type: ignore[override]
        with self._lock:
            for b in data:
                state = self._step(state, b)
                if state < 0:
                    return -1
        return state

    def is_accepting(self, state: int) -> bool:  # type: ignore[override]
        end = self._ends.get(state)
        if end is None:
            with self._lock:
                end = self._ends[state] = self.recognizer.special_allowed(self._states[state], "eos")
        return end

    def forced_bytes(self, state: int) -> bytes:  # type: ignore[override]
        """The bytes every continuation starts with: followed while exactly one byte is allowed
        and the text may not end (256 ``byte_allowed`` calls per byte, memoised)."""
        forced = self._forced.get(state)
        if forced is None:
            out = bytearray()
            s = state
            with self._lock:
                while len(out) < self._max_forced and not self.is_accepting(s):
                    live = [(b, n) for b in range(256) if (n := self._step(s, b)) >= 0]
                    if len(live) != 1:
                        break
                    out.append(live[0][0])
                    s = live[0][1]
                forced = self._forced[state] = bytes(out)
        return forced

    def token_mask(self, state: int) -> np.ndarray:  # type: ignore[override]
        mask = self._masks.get(state)
        if mask is None:
            with self._lock:
                mask = self._masks.get(state)
                if mask is None:
                    mask = self._compute_mask(state)
                    self._masks[state] = mask
                    if len(self._masks) > self._max_masks:
                        del self._masks[next(iter(self._masks))]
        return mask

    def _compute_mask(self, state: int) -> np.ndarray:
        """The token mask at ``state``: a walk of the token trie over the transitions explored so
        far (compiled code, ``recognizer_kernels.walk_ranges``), stopping at each unexplored one;
        those are asked of the recognizer (one ``byte_allowed``/``append`` per new (state, byte),
        memoised for the constraint's lifetime) and the walk resumes below them. A
        ``NumbaRecognizer`` walks in compiled code instead."""
        if self._numba is not None:
            return self._compute_mask_numba(self._numba, state)
        trie = self.trie
        nodes, subtree_end = trie.nodes, trie.subtree_end
        if self._miss_node is None:
            self._miss_node = np.empty(trie.n_nodes, np.int64)
            self._miss_state = np.empty(trie.n_nodes, np.int64)
        miss_node, miss_state = self._miss_node, self._miss_state
        out = np.zeros(self.mask_words, dtype=np.uint32)
        r_lo = np.array([1], np.int64)
        r_hi = np.array([trie.n_nodes], np.int64)
        r_state = np.array([state], np.int64)
        deadline = time.monotonic() + self._max_seconds
        step = self._step
        while len(r_lo):
            n_miss = recognizer_kernels.walk_ranges(self._ht_keys, self._ht_vals, self._ht_shift, nodes, subtree_end,
                                                    trie.max_depth, r_lo, r_hi, r_state, out, miss_node, miss_state)
            if not n_miss:
                break
            at = miss_node[:n_miss]
            parents = miss_state[:n_miss]
            byte_of = nodes[at] & 0xFF
            nxt = []
            for k, (p, b) in enumerate(zip(parents.tolist(), byte_of.tolist())):
                if not k & 1023 and time.monotonic() > deadline:
                    raise RecognizerError(
                        f"the token mask at state {self._states[state]!r} took over "
                        f"Limits.max_recognizer_seconds={self._max_seconds:g} s (byte_allowed/append too slow?); "
                        "raise it with logitgate.using_limits(max_recognizer_seconds=...)",
                        method="byte_allowed", state=self._states[state])
                nxt.append(step(p, b))
            nxt_a = np.asarray(nxt, np.int64)
            self._ht_add(parents * 256 + byte_of, nxt_a.astype(np.int32))
            live = nxt_a >= 0
            r_lo = at[live].copy()
            r_hi = subtree_end[r_lo].astype(np.int64)
            r_state = parents[live].copy()
        trie_kernels.copy_dups(out, trie.dup_first, trie.dup_other)
        words = out.view(np.int32)
        if self.is_accepting(state):
            words |= self.eos_mask
        return _readonly(words)

    def _ht_add(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Add explored transitions to the hash table the compiled walk reads (load kept <= 1/2)."""
        need = self._ht_used + len(keys)
        cap = self._ht_keys.shape[0]
        if 2 * need > cap:
            while 2 * need > cap:
                cap *= 2
            new_keys = np.full(cap, recognizer_kernels.EMPTY, np.int64)
            new_vals = np.empty(cap, np.int32)
            shift = 64 - (cap.bit_length() - 1)
            recognizer_kernels.ht_rehash(self._ht_keys, self._ht_vals, new_keys, new_vals, shift)
            self._ht_keys, self._ht_vals, self._ht_shift = new_keys, new_vals, shift
        self._ht_used += recognizer_kernels.ht_insert(self._ht_keys, self._ht_vals, self._ht_shift, keys, vals)

    def _forget(self) -> None:
        """Drop every memoised mask and explored transition (benchmarks: the cost without memo).
        States stay interned, so matchers keep working."""
        with self._lock:
            self._masks.clear()
            self._next.clear()
            self._byte_sets.clear()
            self._ht_keys = np.full(self._ht_keys.shape[0], recognizer_kernels.EMPTY, np.int64)
            self._ht_used = 0

    def _compute_mask_numba(self, rec: Any, state: int) -> np.ndarray:
        out = np.zeros(self.mask_words, dtype=np.uint32)
        trie = self.trie
        value = np.int64(self._states[state])
        try:
            if rec.jitclass is not None:
                accepting = recognizer_kernels.jitclass_walk(rec.jitclass, value, trie.nodes, trie.subtree_end,
                                                             trie.max_depth, trie.dup_first, trie.dup_other, out)
            else:
                accepting = recognizer_kernels.step_walker(rec.step, rec.accepting)(
                    0, value, trie.nodes, trie.subtree_end, trie.max_depth, trie.dup_first, trie.dup_other, out)
        except Exception as exc:  # a typing error in the user's function, found when the walk compiles
            raise RecognizerError(f"the numba walk over step() failed at state {self._states[state]!r}: "
                                  f"{type(exc).__name__}: {exc}", method="step", state=self._states[state]) from exc
        self._ends[state] = accepting
        words = out.view(np.int32)
        if accepting:
            words |= self.eos_mask
        return _readonly(words)

    def build_index(self) -> "CompiledRecognizer":
        """A recognizer's states are only known as they are met: nothing to precompute."""
        return self

    def start_background_index(self) -> bool:
        return False

    @property
    def n_masks_computed(self) -> int:
        return len(self._masks)

    @property
    def index_nbytes(self) -> int:
        return sum(m.nbytes for m in list(self._masks.values()))

    def __repr__(self) -> str:
        return (f"CompiledGrammar(recognizer={self.grammar.source!r}, states met={self.n_states}, "
                f"tokenizer={self.tokenizer.name or self.tokenizer.fingerprint[:12]!r})")


def _whole_text_dfa(cfg: "CFG", lexer: Any) -> ByteDFA | None:
    """The DFA of a grammar whose text is always one lexeme, else None: one terminal, a regex
    that is neither ignored nor lazy, and only unit rules (``root ::= "1. " move ...`` with every
    rule merged into one lexeme, ``start: /[a-z]+/``). Its language is the terminal's (a longest
    match reads the whole text, as nothing may follow it), so it compiles as a regex does: masks
    from the DFA alone, no parser."""
    if cfg.n_terminals != 1 or cfg.prefix or lexer.dfa is None:
        return None
    term = cfg.terminals[0]
    if term.ignore or term.lazy or term.automaton is not None:
        return None
    if any(len(rhs) != 1 for _, rhs in cfg.rules):
        return None
    return lexer.dfa


def _build(grammar: Grammar, tokenizer: Tokenizer) -> CompiledGrammar:
    if grammar.kind == "recognizer":
        return CompiledRecognizer(grammar, tokenizer, grammar._rec[1])
    if grammar.kind == "regex":
        try:
            dfa = regex_dfa(grammar.tree)
        except LimitError as e:
            if isinstance(e, RegexError):
                raise
            src = grammar.source if len(grammar.source) <= 80 else grammar.source[:77] + "..."
            err = RegexLimitError(f"regex {src!r}: {e}")  # name the input; the message names the cap
            err.limit, err.value = e.limit, e.value
            raise err from None
        return CompiledGrammar(grammar, tokenizer, dfa)
    if grammar.kind in ("lark", "gbnf", "yacc"):
        from .grammar.cfg import lower
        from .grammar.lexemes import merge_lexemes
        from .grammar.lexer import build_lexer

        ir = grammar.ir
        if ir.lex_mode == "chars":
            _, cfg, lexer = merge_lexemes(ir, greedy=dict(grammar.options).get("lexing") == "greedy")
        else:
            cfg = lower(ir)
            lexer = build_lexer(cfg)
        dfa = _whole_text_dfa(cfg, lexer)
        if dfa is not None:
            return CompiledGrammar(grammar, tokenizer, dfa)
        return CompiledCFG(grammar, tokenizer, cfg, lexer)
    if grammar.kind == "json_schema":
        cfg, lexer = grammar._cfg
        return CompiledCFG(grammar, tokenizer, cfg, lexer)
    raise CompileError(f"grammars of kind {grammar.kind!r} are not supported yet")


def compile(
    grammar: Grammar, tokenizer: Tokenizer, *, cache: bool = True, index: IndexMode = "lazy"
) -> CompiledGrammar:
    """Compile ``grammar`` for ``tokenizer``. Reusable and thread-safe; cached by content.

    Concurrent first uses of the same (grammar, tokenizer) compile it once. ``index`` says when
    the token masks of the grammar's states are computed (see the module docstring).
    """
    if not isinstance(grammar, Grammar):
        raise TypeError(f"compile() expects a logitgate.Grammar, not {type(grammar).__name__}")
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"compile() expects a logitgate.Tokenizer, not {type(tokenizer).__name__}")
    if index not in ("background", "lazy", "eager"):
        raise ValueError(f"index must be 'background', 'lazy' or 'eager', not {index!r}")
    compiled = _compile_cached(grammar, tokenizer) if cache else _compile_uncached(grammar, tokenizer)
    if index == "eager":
        compiled.build_index()
    elif index == "background":
        compiled.start_background_index()
    return compiled


def _compile_cached(grammar: Grammar, tokenizer: Tokenizer) -> CompiledGrammar:
    key = (grammar.cache_key, tokenizer.fingerprint)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        with _cache_lock:
            hit = _cache.get(key)
        if hit is not None:
            return hit
        try:
            hit = _compile_uncached(grammar, tokenizer)
        except BaseException:
            with _cache_lock:  # drop the key's lock on failure too: no lock left behind per bad input
                if _key_locks.get(key) is key_lock:
                    del _key_locks[key]
            raise
        with _cache_lock:  # insert, then drop the lock, at once: a later caller finds the entry
            _cache[key] = hit
            _cache.move_to_end(key)
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
            if _key_locks.get(key) is key_lock:
                del _key_locks[key]
        return hit


def clear_cache() -> None:
    """Drop every cached compiled grammar, and every grammar cached by the ``Grammar.from_*``
    constructors (``logitgate.grammar.spec.clear_grammar_cache``)."""
    from .grammar.spec import clear_grammar_cache

    with _cache_lock:
        _cache.clear()
    clear_grammar_cache()
