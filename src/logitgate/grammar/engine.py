"""A context-free grammar bound to a vocabulary: lexer + Earley tables, the per-sequence parse
state, and token masks.

The mask at a position depends only on the lexer state and the parser's future, and the chart's
last-row fingerprint identifies that future exactly (see ``kernels.earley_kernels``), so masks are
memoised by ``(lexer state, fingerprint)``: the first visit walks the token trie with the lexer and
parser together (a byte the lexer or parser refuses prunes its whole subtree; the parser is
consulted only where a lexeme ends), later visits are a row copy. Inside a string body (a lexer
state whose plain characters lead along one chain of states), the plain tokens are taken from a
table by length (``TokenTrie.string_body``) and only the other tokens are walked. The walk from
the lexer's start state is recorded once per class of expected sets (``_StartWalk``) when it
recurs, and later read off the record.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from ..kernels import DirectCalls
from ..kernels import body_kernels as bk
from ..kernels import earley_kernels as ek
from ..kernels import trie_kernels
from ..limits import check_deadline, get_limits
from .cfg import CFG, nullable_nonterminals
from .lexer import LexerTables, bits_of, build_lexer

# the kernels a step calls, without numba's per-call type dispatch (see kernels.DirectCalls)
_EK = DirectCalls(ek, ("advance_bytes", "end_and_push", "eos_allowed", "group_walk", "lexeme_signature", "lexer_walk",
                       "merge_packed", "next_bytes", "push_row", "split_boundaries", "start_walk_apply",
                       "start_walk_class", "start_walk_index", "viable_bytes"))
_TK = DirectCalls(trie_kernels, ("copy_dups",))
_BK = DirectCalls(bk, ("body_entry", "body_steps", "parts_alike", "parts_closed", "parts_text", "plain_chain",
                      "plain_closure"))

__all__ = ["ParserTables", "CFGEngine", "ParseState", "MASK_CACHE_BYTES", "MAX_FORCED_BYTES"]

MASK_CACHE_BYTES = 256 * 2**20
"""Default memory a compiled grammar may spend on memoised masks (least recently used are dropped);
the cap in force when the engine is built: ``get_limits().mask_cache_bytes``."""

MAX_FORCED_BYTES = 1024
"""Default longest jump-forward string ``forced_bytes`` returns in one call (``get_limits().max_forced_bytes``)."""

FEW_BYTES = 4
"""A lexer state with at most this many viable next bytes (a key's next letters) is walked in the
trie directly: the walk prunes at once, so string-body tables and the cross-grammar walk cache
would cost more than they save."""

MERGE_LIMIT = 8192
"""Boundary groups whose subtrees hold more trie nodes than this (or beyond four times this in
all) are walked in the token trie itself instead of being merged: merging costs far more per node
than walking and pays off on small, repetitive groups (the tokens that close a JSON string). Groups left unmerged are merged
when the entry is used for the ``MERGE_AFTER_USES``-th time, which amortises the cost."""

MERGE_AFTER_USES = 3

START_WALK_AFTER_S = 0.0015
"""Seconds the walks from the lexer's start state for one class of expected sets may take the
plain way before the engine records that walk for the whole class (``CFGEngine._start_walk``);
later ones read that record instead of walking the trie."""

START_WALK_RECORDS = 16
"""Most records of the start state's walk one engine keeps (each is about the size of the part
of the token trie the lexer can start in: under 1 MB for a 131k vocabulary)."""


class _StartWalk:
    """The lexer-only walk from the start state for all expected sets (kernel
    ``start_walk_index``), arranged for ``start_walk_apply``: the tokens it reaches sorted by the
    lexer state they end in, its boundaries as groups merged per (lexer state, first byte), and
    the places a lexeme may stop early by the state before them."""

    def __init__(self, engine: "CFGEngine", kind: np.ndarray, stop: np.ndarray, follow: np.ndarray) -> None:
        trie = engine.trie
        n = trie.n_nodes
        in_tok, in_state, bnd_node, bnd_state, div_node, div_state, div_next = (np.empty(n, np.int32)
                                                                                for _ in range(7))
        in_first, bnd_first, div_first = (np.empty(n, np.uint8) for _ in range(3))
        n_in, n_bnd, n_div = _EK.start_walk_index(trie.nodes, trie.subtree_end, trie.max_depth, engine.L, kind, stop,
                                                  follow, in_tok, in_state, in_first, bnd_node, bnd_state, bnd_first,
                                                  div_node, div_state, div_next, div_first)
        n_states = engine.lexer.n_states
        order, uniq, self.st_ptr = ek.group_by_key(in_state[:n_in], n_states)
        self.st_state = uniq.astype(np.int32)
        self.in_tok = in_tok[:n_in][order]
        self.in_first = in_first[:n_in][order]
        # boundaries, one group per (state, first byte): a step keeps or drops whole groups (by
        # state, stably: the walk met them in trie order, so by first byte within a state)
        order = ek.group_by_key(bnd_state[:n_bnd], n_states)[0]
        key = bnd_state[:n_bnd][order] * 256 + bnd_first[:n_bnd][order]
        self.groups = _EK.merge_packed(trie.nodes, trie.subtree_end, bnd_node[:n_bnd][order], key, MERGE_LIMIT)[0]
        self.g_state = self.groups[0] >> 8
        self.g_first = (self.groups[0] & 255).astype(np.uint8)
        # where a lexeme may stop early, by the state before
        order, uniq, self.d_ptr = ek.group_by_key(div_state[:n_div], n_states)
        self.d_state = uniq.astype(np.int32)
        self.div_node = div_node[:n_div][order]
        self.div_next = div_next[:n_div][order]
        self.div_first = div_first[:n_div][order]
        self.nbytes = sum(a.nbytes for a in (self.st_state, self.st_ptr, self.in_tok, self.in_first, self.g_state,
                                             self.g_first, self.d_ptr, self.d_state, self.div_node, self.div_next,
                                             self.div_first)) + sum(a.nbytes for a in self.groups)


_THREAD_SCRATCH = threading.local()
"""Per-thread scratch shared by every engine (``CFGEngine._boundary_scratch``)."""

_NO_STATES = np.zeros(0, np.int32)
_NO_STATES.setflags(write=False)


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _last_terminals(rules: list, t: int, n_nt: int, nullable: list[bool]) -> np.ndarray:
    """Per terminal, whether a whole text can end with it: the last symbol of a rule of the
    start symbol, and the symbol before it while those after are nullable, through nonterminals
    (terminals are ``0..t-1``, nonterminal ``k`` is symbol ``t + k``, the start is ``k = 0``)."""
    rules_of: list[list[tuple]] = [[] for _ in range(n_nt)]
    for lhs, rhs in rules:
        rules_of[lhs].append(rhs)
    last = np.zeros(t, np.bool_)
    seen = [False] * n_nt
    seen[0] = True
    stack = [0]
    while stack:
        for rhs in rules_of[stack.pop()]:
            for sym in reversed(rhs):
                if sym < t:
                    last[sym] = True
                    break
                nt = sym - t
                if not seen[nt]:
                    seen[nt] = True
                    stack.append(nt)
                if not nullable[nt]:
                    break
    return last


class ParserTables:
    """Flat Earley tables of a BNF grammar (see ``kernels.earley_kernels`` for the layout)."""

    def __init__(self, cfg: CFG) -> None:
        t = cfg.n_terminals
        n_nt = len(cfg.nonterminals)
        base: list[int] = []
        dr_next: list[int] = []
        dr_lhs: list[int] = []
        for lhs, rhs in cfg.rules:
            base.append(len(dr_next))
            dr_next.extend(rhs)
            dr_next.append(-1)
            dr_lhs.extend([lhs] * (len(rhs) + 1))
        preds: list[list[int]] = [[] for _ in range(n_nt)]
        check_deadline("building the parser tables")
        for r, (lhs, _) in enumerate(cfg.rules):
            preds[lhs].append(base[r])
        nullable = nullable_nonterminals(cfg.rules, t, n_nt)
        self.n_term = t
        self.n_words = max(1, (t + 63) // 64)
        self.dr_next = _ro(np.asarray(dr_next, dtype=np.int32))
        self.dr_lhs = _ro(np.asarray(dr_lhs, dtype=np.int32))
        self.pred_ptr = _ro(np.cumsum([0] + [len(p) for p in preds]).astype(np.int32))
        self.pred_dr = _ro(np.asarray([d for p in preds for d in p], dtype=np.int32))
        self.nullable = _ro(np.asarray(nullable, dtype=np.uint8))
        assert cfg.rules[0][0] == 0 and len(cfg.rules[0][1]) == 1
        self.accept_dr = base[0] + 1
        self.last = _ro(_last_terminals(cfg.rules, t, n_nt, nullable))

    def args(self) -> tuple:
        return (self.dr_next, self.dr_lhs, self.pred_ptr, self.pred_dr, self.nullable, self.n_term, self.accept_dr)


class _Chart:
    """Growable chart arrays (see ``kernels.earley_kernels``)."""

    __slots__ = ("it_dr", "it_org", "row_ptr", "row_exp", "row_acc", "row_fp", "hkey", "hgen", "meta")

    def __init__(self, n_words: int, items: int = 1024, rows: int = 256, hash_size: int = 1024) -> None:
        self.it_dr = np.zeros(items, np.int32)
        self.it_org = np.zeros(items, np.int32)
        self.row_ptr = np.zeros(rows + 1, np.int32)
        self.row_exp = np.zeros((rows, n_words), np.uint64)
        self.row_acc = np.zeros(rows, np.uint8)
        self.row_fp = np.zeros((rows, 2), np.uint64)
        self.hkey = np.zeros(hash_size, np.int64)
        self.hgen = np.zeros(hash_size, np.int32)
        self.meta = np.zeros(2, np.int64)

    def args(self) -> tuple:
        return (self.it_dr, self.it_org, self.row_ptr, self.row_exp, self.row_acc, self.row_fp, self.hkey,
                self.hgen, self.meta)

    @property
    def n_rows(self) -> int:
        return int(self.meta[0])

    def grow(self, code: int) -> None:
        if code == ek.FULL_ROWS:
            n = self.row_acc.shape[0] * 2
            self.row_ptr = np.concatenate([self.row_ptr, np.zeros(n + 1 - self.row_ptr.shape[0], np.int32)])
            self.row_exp = np.vstack([self.row_exp, np.zeros_like(self.row_exp)])
            self.row_acc = np.concatenate([self.row_acc, np.zeros_like(self.row_acc)])
            self.row_fp = np.vstack([self.row_fp, np.zeros_like(self.row_fp)])
        else:  # items or the per-row hash table
            self.it_dr = np.concatenate([self.it_dr, np.zeros_like(self.it_dr)])
            self.it_org = np.concatenate([self.it_org, np.zeros_like(self.it_org)])
            self.hkey = np.zeros(self.hkey.shape[0] * 2, np.int64)
            self.hgen = np.zeros(self.hgen.shape[0] * 2, np.int32)

    def copy(self) -> "_Chart":
        twin = _Chart.__new__(_Chart)
        rows = self.n_rows
        items = int(self.row_ptr[rows])
        twin.it_dr = self.it_dr.copy() if items * 2 > self.it_dr.shape[0] else _copy_prefix(self.it_dr, items)
        twin.it_org = _copy_prefix(self.it_org, items, twin.it_dr.shape[0])
        twin.row_ptr = self.row_ptr.copy()
        twin.row_exp = self.row_exp.copy()
        twin.row_acc = self.row_acc.copy()
        twin.row_fp = self.row_fp.copy()
        twin.hkey = np.zeros_like(self.hkey)
        twin.hgen = np.zeros_like(self.hgen)
        twin.meta = self.meta.copy()
        return twin


def _copy_prefix(a: np.ndarray, n: int, size: int | None = None) -> np.ndarray:
    out = np.zeros(size if size is not None else a.shape[0], a.dtype)
    out[:n] = a[:n]
    return out


SHARED_MAX_STATES = 1024
"""Largest lexer part (states reachable within the trie's depth) whose walks are shared across
grammars; bigger ones are walked per grammar."""
CLOSED_BODY = (None, None, None, None, np.zeros(256, np.uint8), False)
"""``CFGEngine._body_shape`` of a state no plain text leaves the lexeme from (nothing elsewhere)."""
CLOSED_BODY[4].setflags(write=False)
CLOSED_SETS = 256
"""Expected sets a grammar keeps its lexer states closed under plain text for (see
``CFGEngine._plain_closed``); the memo starts over when full."""
CHAIN_SIGS_AFTER_NS = 100_000
"""A string-body chain that took this long to follow is also memoised by its states' part states
(``CFGEngine._plain_chain``): the few that cost that much (a long counter beside other patterns)
would otherwise be followed again at every step; a cheap one is not worth the lookup."""
ALIKE_TRIES = 2
"""States walked in full lately that a new state, for the same expected set, is compared with
before it walks (``CFGEngine._alike_entry``)."""
ALIKE_WORTH_NS = 150_000
"""A full walk at least this long is one whose state later states are compared with
(``CFGEngine._alike_entry``): a cheaper one costs little more than the comparison."""
ALIKE_GIVE_UP = 8
"""Failed comparisons in a row after which an expected set stops comparing its states."""
ALIKE_PAIRS_KEPT = 1 << 16
"""Pairs of part states a grammar remembers as alike or not (``CFGEngine._alike``); the memo
starts over when full."""
PLAIN_ROWS_CACHED = 256
"""Rows of plain tokens a vocabulary keeps for string-body walks (``CFGEngine._plain_row``; 16 KB
each on a 131k vocabulary); the cache starts over when full."""
SHARED_CACHE_BYTES = 256 * 2**20


class _SharedWalks:
    """Per-vocabulary LRU of lexer-only walks, keyed by lexeme signature (thread-safe)."""

    def __init__(self) -> None:
        self._d: OrderedDict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple | None:
        with self._lock:
            hit = self._d.get(key)
            if hit is not None:
                self._d.move_to_end(key)
            return hit

    def put(self, key: tuple, value: tuple) -> None:
        size = sum(a.nbytes for a in value)
        with self._lock:
            if key in self._d:
                return
            self._d[key] = value
            self._bytes += size
            while self._bytes > SHARED_CACHE_BYTES and len(self._d) > 1:
                _, old = self._d.popitem(last=False)
                self._bytes -= sum(a.nbytes for a in old)


_shared_lock = threading.Lock()


def _shared_walks(trie) -> _SharedWalks:
    cache = getattr(trie, "_shared_walks", None)
    if cache is None:
        with _shared_lock:
            cache = getattr(trie, "_shared_walks", None)
            if cache is None:
                cache = _SharedWalks()
                trie._shared_walks = cache
    return cache


class CFGEngine:
    """Everything about one grammar and one vocabulary that all its parse states share."""

    def __init__(self, cfg: CFG, trie, vocab_words: int, eos_mask: np.ndarray,
                 lexer: LexerTables | None = None) -> None:
        self.cfg = cfg
        lim = get_limits()  # runtime caps are fixed when the engine is built
        self.mask_cache_bytes = lim.mask_cache_bytes
        self.max_forced_bytes = lim.max_forced_bytes
        self.lexer: LexerTables = lexer if lexer is not None else build_lexer(cfg)
        self.tables = ParserTables(cfg)
        self.trie = trie
        self.mask_words = vocab_words
        self.eos_mask = eos_mask
        # the words of the EOS bits: a mask gets them alone (an OR over the whole row costs more)
        self._eos_at = [(int(w), eos_mask[w]) for w in np.flatnonzero(eos_mask)]
        lx = self.lexer
        self.L = (lx.trans, lx.start, lx.acc_bits, lx.acc_ptr, lx.acc_list, lx.reach_bits, lx.lazy_bits,
                  lx.ignore_bits, lx.rank, lx.mode, lx.has_lazy)
        self.G = self.tables.args()
        self._no_memo = ek.new_memo(self.tables.n_words, 0, 1, slots=2)  # a placeholder: byte steps use none
        self._masks: OrderedDict[tuple[int, bytes], np.ndarray] = OrderedDict()
        # lexer-level partial masks: (lexer state, expected set) -> (inside mask, boundary nodes, states)
        self._partial: OrderedDict[tuple, tuple[np.ndarray, ...]] = OrderedDict()
        self._partial_bytes = 0
        self._all_bytes = np.ones(256, np.uint8)
        # lexer states inside a lexeme that cannot be an ignored one (see _partial_mask)
        reduce = ~(lx.reach_bits & lx.ignore_bits).any(axis=1)
        reduce[lx.start] = False
        self._reduce = reduce.tolist()
        ends = lx.acc_bits.any(axis=1)  # lexer states where some lexeme ends
        # lexer states where a lexeme the text can end with (or an ignored one) ends: elsewhere
        # EOS needs no parser check (inside a lexeme; a key's `":`, a number inside an object)
        last = bits_of(self.tables.last, lx.acc_bits.shape[1])[0] | lx.ignore_bits
        self._may_end = ((lx.acc_bits & last).any(axis=1)).tolist()
        # lexer states no byte goes on from, where a lexeme the parser sees ends (a key's closing
        # `":`, a `}`), in a lexer with no ignored terminals: every token's first byte ends that
        # lexeme, so the mask is the start state's after it (``token_mask``), without a walk
        final = (lx.trans < 0).all(axis=1) & ends
        final[lx.start] = False
        if lx.ignore_bits.any():
            final[:] = False
        self._final = final.tolist()
        # the bytes a lexeme can start with: the first bytes of the tokens after such a state
        self._start_bytes = (lx.trans[lx.start] >= 0).astype(np.uint8)
        self._mask_bytes = 0
        self._lock = threading.Lock()
        self._tls = threading.local()  # per-thread scratch (the boundary walk's row memo)
        self.n_walks = 0
        self._runs = None  # the lexer rows as runs, for lexeme_signature (ek.new_row_runs, when first needed)
        self._sig_lock = threading.Lock()
        self._start_walks: dict[bytes, _StartWalk] = {}  # see _start_record, by class of expected sets
        self._start_plain: dict[bytes, float] = {}  # seconds of plain start-state walks, per class
        self._start_class: tuple | None = None  # (mixed states, fork states, kind per state): _start_walk_applies
        self._chain_memo: dict[tuple[int, bytes], Any] = {}  # see _plain_chain
        self._chain_bases = 0  # chains computed since the memo was last emptied
        self._chain_by_sig: dict[bytes, dict[Any, Any]] = {}  # per expected set: costly chains' suffixes
        # per expected set: lexer states known closed under plain text, and known not (_closure_closed)
        self._closed: dict[bytes, tuple[set[int], set[int]]] = {}
        # per state of the terminals' own DFAs, how plain text runs from it (_plain_closed): whether
        # none is refused, and whether the DFA accepts on the way (-1: not known yet)
        self._part_closed = np.full(lx.part_table.shape[0], -1, np.int8)
        self._part_ends = np.full(lx.part_table.shape[0], -1, np.int8)
        # whether the lexer's states are known by their terminals' own DFA states (comp_*, part_*)
        self._has_parts = lx.comp_off.shape[0] > 0 and lx.part_table.shape[0] > 0
        # per (expected set, first bytes): the last lexer states walked in full, whose entries a state
        # that behaves alike over any token's bytes shares (_alike_entry); and pairs of part states
        # known alike or not over that many bytes
        self._walked: dict[tuple[bytes, bytes | None], list[int]] = {}
        self._parts_alike: dict[tuple[int, int], bool] = {}
        self._alike_fails: dict[tuple[bytes, bytes | None], int] = {}  # failed tries in a row, per key
        self._flags: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # per expected set: _term_flags
        # the vocabulary's StringBodySplit (built once per vocabulary, at the first grammar's
        # compile rather than in the middle of a generation); small vocabularies walk in full
        self._string_body = trie.string_body if trie.n_tokens >= 1024 else None
        self._n_nodes = trie.n_nodes
        probe = self.new_state()
        if not probe.chart.row_exp[0].any() and not probe.chart.row_acc[0]:
            from ..errors import GrammarError

            raise GrammarError("the grammar's language is empty")

    def new_state(self) -> "ParseState":
        st = ParseState(self, _Chart(self.tables.n_words), self.lexer.start)
        self._retry(lambda: _EK.push_row(self.G, st.chart.args(), np.zeros(self.tables.n_words, np.uint64), True),
                    st.chart)
        if self.cfg.prefix:
            pre = np.frombuffer(self.cfg.prefix.encode("utf-8"), dtype=np.uint8)
            st.advance(pre, 0, pre.shape[0])  # a grammar that cannot lex it starts plainly
        return st

    @staticmethod
    def _retry(fn, chart: _Chart) -> int:
        """Run a chart kernel, growing the chart while it reports FULL_*."""
        while True:
            rows = chart.n_rows
            r = int(fn())
            if r >= 0:
                return r
            chart.meta[0] = rows
            chart.grow(r)

    # -- masks --------------------------------------------------------------------------------
    def token_mask(self, st: "ParseState") -> np.ndarray:
        key = st.key
        if key is None:
            key = st.key = st.mask_key()
        mask = self._masks.get(key)
        if mask is not None:
            return mask
        ch = st.chart
        trie = self.trie
        if self._final[st.lex]:  # the lexeme ends before any token: no walk from this state
            out = np.zeros(self.mask_words, np.uint32)
            self._after_first_byte(st, self._start_bytes, out)
        else:
            hit = self._partial_mask(st.lex, ch.row_exp[ch.n_rows - 1])
            if hit[7] != st.lex:  # shared with a state that behaves alike (_alike_entry): so is the mask
                twin = self._masks.get((hit[7], key[1]))
                if twin is not None:
                    self._keep_mask(key, twin)
                    return twin
            first_bytes = hit[2]
            out = hit[0].copy()
            self._boundaries(out, hit, ch)
            if first_bytes is not None:
                self._after_first_byte(st, first_bytes, out)
        self.n_walks += 1
        # tokens with the same bytes as an earlier id
        if trie.dup_first.size:
            _TK.copy_dups(out, trie.dup_first, trie.dup_other)
        words = out.view(np.int32)
        if st.eos_allowed():
            for w, bits in self._eos_at:
                words[w] |= bits
        words.setflags(write=False)
        self._keep_mask(key, words)
        return words

    def _keep_mask(self, key: tuple[int, bytes], words: np.ndarray) -> None:
        """Memoise ``words`` under ``key``, dropping the oldest masks past ``mask_cache_bytes`` (a
        mask shared by two keys counts twice: the size stays an upper bound)."""
        with self._lock:
            self._masks[key] = words
            self._mask_bytes += words.nbytes
            while self._mask_bytes > self.mask_cache_bytes and len(self._masks) > 1:
                _, old = self._masks.popitem(last=False)
                self._mask_bytes -= old.nbytes

    def _keep_partial(self, key: tuple, hit: tuple) -> None:
        """Memoise the partial mask ``hit`` under ``key``, dropping the oldest entries past half of
        ``mask_cache_bytes`` (an entry shared by two keys counts twice)."""
        with self._lock:
            self._partial[key] = hit
            self._partial_bytes += _entry_bytes(hit)
            while self._partial_bytes > self.mask_cache_bytes // 2 and len(self._partial) > 1:
                _, old = self._partial.popitem(last=False)
                self._partial_bytes -= _entry_bytes(old)

    def _boundaries(self, out: np.ndarray, hit: tuple, ch: _Chart) -> None:
        """``_boundary`` for a partial mask's groups, and for those of the part of it walked in
        another trie (``hit[6]``: see ``_partial_mask``)."""
        while hit is not None:
            if hit[1][0].shape[0]:
                self._boundary(out, hit[1], ch, hit[4])
            hit = hit[6]

    def _boundary(self, out: np.ndarray, groups: tuple, ch: _Chart, trie: Any = None) -> None:
        """OR into ``out`` the tokens crossing the boundaries of ``groups`` (parser at ``ch``'s
        last row; ``groups`` are nodes of ``trie``, default the vocabulary's). Bits are only ever
        added, so a retry after growing the chart is safe."""
        if groups[0].shape[0] == 0:
            return
        trie = self.trie if trie is None else trie
        rows = ch.n_rows
        memo = getattr(self._tls, "memo", None)
        if memo is None:  # sized for the vocabulary's trie: the others (string_body.rest) are subsets of it
            memo = self._tls.memo = ek.new_memo(self.tables.n_words, self.trie.max_depth, self.lexer.n_states,
                                                 ek.memo_slots(len(self.cfg.rules)))
        while True:
            r = int(_EK.group_walk(trie.nodes, trie.subtree_end, trie.max_depth, *groups, self.L, self.G, ch.args(),
                                   memo, out))
            ch.meta[0] = rows
            if r == ek.OK:
                return
            ch.grow(r)

    def _after_first_byte(self, st: "ParseState", first_bytes: np.ndarray, out: np.ndarray) -> None:
        """The tokens whose first byte ends the current lexeme (``first_bytes[b]`` set): push the
        row for that lexeme, then the lexer-only walk from the start state over those tokens only,
        plus its own boundaries, under the new row."""
        ch = st.chart
        rows = ch.n_rows
        while True:
            r = int(_EK.end_and_push(self.L, self.G, ch.args(), st.lex))
            if r >= 0:
                break
            ch.meta[0] = rows
            ch.grow(r)
        if r != ek.OK:
            return
        try:
            hit = self._partial_mask(self.lexer.start, ch.row_exp[rows], first_bytes)
            out |= hit[0]
            # from the start state no boundary is at the first byte (lexemes are never empty)
            self._boundaries(out, hit, ch)
        finally:
            ch.meta[0] = rows

    def _partial_mask(self, lex: int, exp: np.ndarray, first: np.ndarray | None = None
                      ) -> tuple:
        # Inside a lexeme that is not an ignored one, the walk only ever asks about terminals still
        # reachable from the lexer state (it stops at the lexeme's end), so the rest of the
        # expected set does not matter: more states share one entry (e.g. a JSON string as a key
        # and as a value).
        if self._reduce[lex]:
            exp = exp & self.lexer.reach_bits[lex]
        key = (lex, exp.tobytes(), None if first is None else first.tobytes())
        hit = self._partial.get(key)
        if hit is not None:
            if hit[5] is not None:
                uses = hit[5][2] = hit[5][2] + 1
                if uses == MERGE_AFTER_USES:
                    # reused: merging its big groups too now pays for itself
                    # the same kernel as a first walk (its boundaries are all deep, so no first
                    # byte is set), with no size limit
                    groups = _EK.split_boundaries(hit[4].nodes, hit[4].subtree_end, hit[5][0], hit[5][1], 1 << 30,
                                                  np.zeros(256, np.uint8))[0]
                    hit = (hit[0], groups, hit[2], hit[3], hit[4], None, hit[6], hit[7])
                    with self._lock:
                        self._partial_bytes += _entry_bytes(hit) - _entry_bytes(self._partial[key])
                        self._partial[key] = hit
            return hit
        first_ok = self._all_bytes if first is None else first
        exp = np.ascontiguousarray(exp)
        inner = lex != self.lexer.start
        rec, cls = self._start_record(exp) if not inner and self._start_walk_applies() else (None, None)
        t0 = time.perf_counter() if cls is not None else 0.0
        if rec is not None:
            hit = self._start_walk(rec, exp, first_ok)
            self._keep_partial(key, hit)
            return hit
        few = inner and int(_EK.viable_bytes(self.L, lex, exp, FEW_BYTES + 1)) <= FEW_BYTES
        body = self._body_walk(lex, exp) if first is None and inner and not few else None
        t_walk = 0
        chained = None
        if few:  # a key's next letters, say: walking the trie costs less than any table or cache
            inside, bnd_node, bnd_state, trie = self._direct_walk(lex, exp, first_ok)
        elif body is not None:
            # plain tokens from a table, the others walked in their own trie; the tokens starting
            # with a byte that leaves the body another way, in the full trie (a chained entry)
            inside, bnd_node, bnd_state, trie, elsewhere = body
            if np.count_nonzero(elsewhere):  # (ndarray.any costs ~2 us)
                chained = self._partial_mask(lex, exp, elsewhere)
                inside = inside | chained[0]
        else:
            if inner:  # a walk of the whole vocabulary, unless a state walked lately behaves alike
                twin = self._alike_entry(lex, key)
                if twin is not None:
                    self._keep_partial(key, twin)
                    return twin
                t_walk = time.perf_counter_ns()
            inside, bnd_node, bnd_state, trie = self._lexer_walk(lex, exp, first_ok)
        # boundaries at the first byte (the current lexeme ends before the token) are finished by
        # _after_first_byte; the rest, grouped by lexer state, by the boundary walk
        first_bytes = None
        if bnd_node.shape[0]:
            first_bytes = np.zeros(256, np.uint8)
            groups, dn, ds, n_first, any_raw = _EK.split_boundaries(trie.nodes, trie.subtree_end, bnd_node, bnd_state,
                                                                    MERGE_LIMIT, first_bytes)
            pending = [dn, ds, 0] if any_raw else None  # big groups left raw: merge once reused
        else:  # no token leaves the lexeme (a key's middle letters): nothing for the boundary walk
            groups, pending, n_first = _no_groups(trie), None, 0
        if chained is not None and chained[2] is not None:  # kept only when some bit is set
            first_bytes = chained[2].copy() if first_bytes is None else first_bytes | chained[2]
            n_first = 1
        hit = (inside, groups, first_bytes if n_first else None, bnd_node, trie, pending, chained, lex)
        if t_walk and time.perf_counter_ns() - t_walk >= ALIKE_WORTH_NS:
            # a costly walk: a state like it later shares its entry rather than walking again
            walked = self._walked.setdefault(key[1:], [])
            walked.insert(0, lex)
            del walked[ALIKE_TRIES:]
        self._keep_partial(key, hit)
        if cls is not None:
            with self._lock:
                self._start_plain[cls] = self._start_plain.get(cls, 0.0) + time.perf_counter() - t0
        return hit

    def _alike_entry(self, lex: int, key: tuple) -> tuple | None:
        """The entry of a state walked in full lately for the same expected set and first bytes
        (``key[1:]``) that behaves like ``lex`` over every token's bytes, if any; None: walk.

        Alike when the terminals the walk looks at (those of ``key``'s expected set and the
        ignored ones) run in both states, each in states of its own DFA that nothing of at most
        the longest token's length tells apart (``body_kernels.parts_alike``): then every token
        stays inside, ends its lexeme as the same terminals at the same bytes, or dies, alike, so
        the walk, its boundaries and the mask are the same. A length counter far from its limit
        is the common case: each of its steps (a ``maxLength``, a ``{1,255}``) would otherwise
        walk the whole vocabulary again."""
        owners = self._walked.get(key[1:])
        if not owners or not self._has_parts:
            return None
        fails = self._alike_fails.get(key[1:], 0)
        if fails >= ALIKE_GIVE_UP:
            return None
        sel = self._term_flags(np.frombuffer(key[1], np.uint64))[0]
        terms, parts = self._looked_parts(lex, sel)
        for other in owners:
            hit = self._partial.get((other, key[1], key[2]))
            if hit is None:
                continue
            terms2, parts2 = self._looked_parts(other, sel)
            if np.array_equal(terms, terms2) and all(self._alike(a, b) for a, b in zip(parts.tolist(),
                                                                                        parts2.tolist())):
                self._alike_fails[key[1:]] = 0
                return hit
        self._alike_fails[key[1:]] = fails + 1
        return None

    def _looked_parts(self, lex: int, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The terminals flagged in ``sel`` that lexer state ``lex`` runs, and their part states
        (``LexerTables.comp_*``)."""
        lx = self.lexer
        lo, hi = int(lx.comp_off[lex]), int(lx.comp_off[lex + 1])
        terms = lx.comp_term[lo:hi]
        on = sel[terms]
        return terms[on], lx.comp_part[lo:hi][on]

    def _alike(self, p: int, q: int) -> bool:
        """``body_kernels.parts_alike`` over the longest token's bytes, memoised per pair."""
        if p == q:
            return True
        pair = (p, q) if p < q else (q, p)
        known = self._parts_alike.get(pair)
        if known is None:
            scratch = getattr(self._tls, "alike", None)
            if scratch is None:
                cap = bk.PARTS_ALIKE_PAIRS
                scratch = self._tls.alike = (np.full(4 * cap, -1, np.int64), np.empty(cap, np.int64),
                                             np.empty(cap, np.int64))
            lx = self.lexer
            known = bool(_BK.parts_alike(lx.part_table, lx.part_acc, pair[0], pair[1], int(self.trie.max_depth),
                                         *scratch))
            if len(self._parts_alike) >= ALIKE_PAIRS_KEPT:
                self._parts_alike.clear()
            self._parts_alike[pair] = known
        return known

    def _start_walk_applies(self) -> bool:
        """Whether the walk from the start state can be read off records made for classes of
        expected sets (``_StartWalk``). How a lexeme ends at a state depends on the expected set
        only at states where both an ignored terminal and another one end (``mixed``), and
        whether an ignored lexeme goes on into a state depends on it only for states from which
        no ignored terminal is reachable (``fork``, contextual lexing); a class fixes both, and
        the lazy terminals in force. With more than 12 such states, the classic walk is kept."""
        if self._start_class is None:
            lx = self.lexer
            ign = lx.ignore_bits
            if not ign.any():  # nothing ignored (JSON Schema): no mixed or fork states
                self._start_class = (_NO_STATES, _NO_STATES, None)
                return True
            ends_ign = (lx.acc_bits & ign).any(axis=1)
            ends_other = (lx.acc_bits & ~ign).any(axis=1)
            ends_ign[lx.start] = ends_other[lx.start] = False
            mixed = np.flatnonzero(ends_ign & ends_other).astype(np.int32)
            fork = np.zeros(0, np.int32)
            if lx.mode == 0 and ends_ign.any():
                nxt = np.unique(lx.trans[ends_ign])
                nxt = nxt[nxt >= 0]
                fork = nxt[~(lx.reach_bits[nxt] & ign).any(axis=1)].astype(np.int32)
            kind = np.where(ends_ign, 1, np.where(ends_other, 2, 0)).astype(np.uint8)
            self._start_class = (mixed, fork, kind)
        mixed, fork, _ = self._start_class
        return mixed.shape[0] + fork.shape[0] <= 12

    def _start_record(self, exp: np.ndarray) -> tuple["_StartWalk | None", bytes]:
        """The record of the start state's walk for the class of ``exp`` (see
        ``_start_walk_applies``), made once the plain walks of that class have taken
        ``START_WALK_AFTER_S`` in all (rent or buy: a record costs about as much as four plain
        walks of a big lexer, and cheap walks are not worth one), else None; and the class."""
        lx = self.lexer
        mixed, fork, base_kind = self._start_class
        lazy_on = lx.lazy_bits & (exp | lx.ignore_bits) if lx.has_lazy else None
        cls = np.zeros(mixed.shape[0] + fork.shape[0], np.uint8)
        if cls.shape[0]:
            _EK.start_walk_class(self.L, exp, mixed, fork, cls)
        key = (b"" if lazy_on is None else lazy_on.tobytes()) + cls.tobytes()  # one lazy class when none is lazy
        rec = self._start_walks.get(key)
        if rec is not None:
            return rec, key
        if self._start_plain.get(key, 0.0) < START_WALK_AFTER_S or len(self._start_walks) >= START_WALK_RECORDS:
            return None, key
        if base_kind is None:  # nothing ignored: a state ends a lexeme (2) or not (0)
            base_kind = np.where((lx.acc_bits != 0).any(axis=1), 2, 0).astype(np.uint8)
            base_kind[lx.start] = 0
        kind = base_kind.copy()
        kind[mixed] = np.array([0, 2, 1], np.uint8)[cls[:mixed.shape[0]]]
        follow = np.ones(lx.n_states, np.uint8)
        follow[fork] = cls[mixed.shape[0]:]
        stop = np.zeros(lx.n_states, np.uint8) if lazy_on is None else \
            (lx.acc_bits & lazy_on).any(axis=1).astype(np.uint8)
        rec = _StartWalk(self, kind, stop, follow)
        with self._lock:
            self._start_walks[key] = rec
        return rec, key

    def _start_walk(self, rec: "_StartWalk", exp: np.ndarray, first_ok: np.ndarray) -> tuple:
        """``_partial_mask``'s entry for the start state, read off ``rec`` (the record for the
        class of ``exp``), not walked: the tokens inside lexemes, the recorded boundary groups
        that end a lexeme ``exp`` has (the others marked -1), and, chained, the few boundaries
        where a lexeme stops because ``exp`` has nothing it could go on to."""
        trie = self.trie
        inside = np.zeros(self.mask_words, dtype=np.uint32)
        g_on = np.empty_like(rec.g_state)
        dyn_node = np.empty(rec.div_node.shape[0], np.int32)
        dyn_state = np.empty(rec.div_node.shape[0], np.int32)
        nd = int(_EK.start_walk_apply(self.L, exp, first_ok, rec.st_ptr, rec.st_state, rec.in_tok, rec.in_first,
                                      rec.g_state, rec.g_first, g_on, rec.d_ptr, rec.d_state, rec.div_node,
                                      rec.div_next, rec.div_first, inside, dyn_node, dyn_state))
        groups = (g_on,) + rec.groups[1:]
        chained = None
        if nd:
            dn, ds = dyn_node[:nd].copy(), dyn_state[:nd].copy()
            dyn = _EK.split_boundaries(trie.nodes, trie.subtree_end, dn, ds, MERGE_LIMIT, np.zeros(256, np.uint8))[0]
            chained = (inside, dyn, None, dn, trie, None, None, self.lexer.start)
        return inside, groups, None, np.zeros(0, np.int32), trie, None, chained, self.lexer.start

    def _direct_walk(self, lex: int, exp: np.ndarray, first_ok: np.ndarray) -> tuple[Any, ...]:
        """The lexer-only walk from ``lex`` itself (``_lexer_walk`` without its shared cache: for
        states with few viable bytes, and for what that cache misses)."""
        trie = self.trie
        inside = np.zeros(self.mask_words, dtype=np.uint32)
        bnd_node, bnd_state = self._boundary_scratch()
        nb = int(_EK.lexer_walk(trie.nodes, trie.subtree_end, trie.max_depth, self.L, lex, exp, first_ok, inside,
                                bnd_node, bnd_state))
        if nb == 0:  # a key's middle letters, say: no kernel is handed empty boundaries
            return inside, _NO_STATES, _NO_STATES, trie
        return inside, bnd_node[:nb].copy(), bnd_state[:nb].copy(), trie

    def _boundary_scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """This thread's scratch for a lexer walk's boundary nodes and states: room for every node
        of the vocabulary's trie (the string bodies' ``rest`` tries are subsets of it). A walk
        copies out what it found before the scratch is used again, so every engine of the thread
        shares it (a new compiled grammar's first mask does not allocate its own)."""
        n = self._n_nodes
        scratch = getattr(_THREAD_SCRATCH, "boundaries", None)
        if scratch is None or scratch[0].shape[0] < n:
            scratch = _THREAD_SCRATCH.boundaries = (np.empty(n, np.int32), np.empty(n, np.int32))
        return scratch

    def _lexer_walk(self, lex: int, exp: np.ndarray, first_ok: np.ndarray) -> tuple[Any, ...]:
        """``(inside mask, boundary nodes, boundary states, the trie they are nodes of)`` of the
        lexer-only walk from ``lex``.

        Inside a lexeme, a walk over all first bytes is shared across grammars over the same
        vocabulary: its result depends only on the part of the lexer reachable within the trie's
        depth, so it is keyed by :func:`~logitgate.kernels.earley_kernels.lexeme_signature` in a
        per-vocabulary cache (the states of JSON's numbers and keys, say, are walked once per
        process)."""
        trie = self.trie
        order = None
        # a walk over some first bytes only (the part of a string body's state that leaves it,
        # chained by _partial_mask) rarely recurs in another grammar: its fingerprint would cost
        # more than the hits it finds
        if lex != self.lexer.start and first_ok is self._all_bytes:
            order = np.empty(SHARED_MAX_STATES, np.int32)
            with self._sig_lock:  # the rows as runs, made as read, and the scratch numbering
                if self._runs is None:
                    self._runs = ek.new_row_runs(self.lexer.n_states)
                while True:
                    h1, h2, n = _EK.lexeme_signature(self.L, self._runs, lex, exp, first_ok, trie.max_depth, order)
                    if n != -2:
                        break
                    self._runs = ek.grow_row_runs(self._runs)
            if n > 0:
                skey = (int(h1), int(h2), int(n))
                found = _shared_walks(trie).get(skey)
                if found is not None:
                    # a writable copy of the shared nodes: the kernels then always see one array
                    # type (a read-only one is a second specialization, loaded on first use)
                    return found[0], found[1].copy(), order[found[2]], trie
            else:
                order = None
        inside, bnd_node, bnd_state, _ = self._direct_walk(lex, exp, first_ok)
        if order is not None:
            # canonical numbers of the boundary states; number 0 is the root row, so lex met
            # again deeper in the walk has its own number (the first one after 0, if any)
            pos = np.full(self.lexer.n_states, -1, np.int32)
            pos[order[1:n][::-1]] = np.arange(n - 1, 0, -1, dtype=np.int32)
            canon = pos[bnd_state]
            canon[trie.node_depth[bnd_node] == 1] = 0
            if (canon >= 0).all():
                inside.setflags(write=False)
                bnd_node.setflags(write=False)
                _shared_walks(trie).put(skey, (inside, bnd_node, canon))
        return inside, bnd_node, bnd_state, trie

    # -- string bodies: plain tokens by length, the rest walked -----------------------------------

    def _restriction(self, exp: np.ndarray) -> tuple:
        """The body kernels' view of the lexer for expected set ``exp`` (``body_kernels.R``): the
        terminals a walk looks at are ``exp`` and the ignored ones (all of them, for a global
        lexer, where any match ends a lexeme)."""
        lx = self.lexer
        sel = exp | lx.ignore_bits if lx.mode == 0 else np.full(exp.shape[0], ~np.uint64(0))
        return (lx.trans, lx.acc_bits, lx.reach_bits, exp, lx.ignore_bits, sel, lx.comp_off, lx.comp_term,
                lx.comp_part)

    def _plain_chain(self, R: tuple, key: bytes, lex: int, limit: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
        """``(states, mids, off, accepts)``: the states plain characters lead through from ``lex``
        (at most ``limit``, ending before the first refused character or at the first state where
        a lexeme ends: then ``accepts``), and the states inside multi-byte characters on the way
        to ``states[k]``, ``mids[off[k]:off[k + 1]]``; None when some state on the way is not a
        string body for the restriction ``R`` (see ``body_kernels.plain_chain``).

        Memoised per (state, ``key``: the expected set ``R`` is for) together with the suffixes of
        its first ``limit`` states: a string's next state continues the chain of the one before,
        so a length counter (a ``maxLength``) is walked once per ``limit`` characters rather
        than once per token. The states of a costly chain are also known by the part states of
        the terminals ``R`` looks at (``_chain_sigs``), as the chain is: the text read may lead
        elsewhere than the chain's characters in terminals the walk ignores (another property's
        pattern), not in these, and would otherwise miss at every step."""
        memo = self._chain_memo
        limit = max(limit, 0)
        hit = memo.get((lex, key))
        by_sig = self._chain_by_sig.get(key)
        if hit is None and by_sig:
            hit = by_sig.get(self._chain_sig(lex, R[3]))
        if hit is False:
            return None
        if hit is None:
            t0 = time.perf_counter_ns()
            base = self._chain_steps(R, lex, limit)
            if base is None:
                memo[(lex, key)] = False
                return None
            costly = time.perf_counter_ns() - t0 >= CHAIN_SIGS_AFTER_NS
            k = 0
        else:
            base, k = hit
        states, mids, off, end = base
        if hit is None:  # a new chain: the suffix of every state on it
            self._chain_bases += 1
            if self._chain_bases > 2048:  # at most ~20 MB of chains (150 states and their mids each)
                memo.clear()
                self._chain_by_sig.clear()
                self._chain_bases = 1
            todo: list[tuple[bool, list]] = [(False, states.tolist())]
            if costly:
                todo.append((True, self._chain_sigs(states, R[3])))
            for by_sigs, ids in todo:
                first: dict[Any, int] = {}  # a repeated state: its first suffix (a whole chain past it)
                final = ids[-1] if end == "loops" else None
                # a state where a lexeme ends is no chain's start (plain_chain refuses it)
                for j, s in enumerate(ids[:min(limit, len(ids) - (end == "accepts"))]):
                    if s not in first:
                        first[s] = j
                    elif s == final:
                        break  # the loop: nothing new after it
                if by_sigs:
                    self._chain_by_sig.setdefault(key, {}).update((s, (base, j + 1)) for s, j in first.items())
                else:
                    memo.update(((s, key), (base, j + 1)) for s, j in first.items())
            memo[(lex, key)] = (base, 0)
        # a stored chain is twice ``limit`` long unless it ends, and suffixes are only kept for
        # its first ``limit`` states: a suffix is a whole chain
        n = min(states.shape[0] - k, limit)
        accepts = end == "accepts" and k + n == states.shape[0]
        return states[k:k + n], mids[off[k]:off[k + n]], off[k:k + n + 1] - off[k], accepts

    def _chain_sig(self, lex: int, exp: np.ndarray) -> Any:
        """``_chain_sigs`` of one state."""
        return self._looked_parts(lex, self._term_flags(exp)[0])[1].tobytes() if self._has_parts else lex

    def _chain_sigs(self, states: np.ndarray, exp: np.ndarray) -> list:
        """Per lexer state, what ``_plain_chain`` knows it by for expected set ``exp``: the part
        states of the terminals a walk looks at, as bytes (the state itself for a lexer without
        components)."""
        if not self._has_parts:
            return states.tolist()
        lx = self.lexer
        sel = self._term_flags(exp)[0]
        lo = lx.comp_off[states]
        lens = lx.comp_off[states + 1] - lo
        ends = np.cumsum(lens)
        idx = np.arange(int(ends[-1]) if ends.shape[0] else 0) + np.repeat(lo - (ends - lens), lens)
        on = sel[lx.comp_term[idx]]
        parts = lx.comp_part[idx][on]
        owner = np.repeat(np.arange(states.shape[0]), lens)[on]
        cut = [0] + np.cumsum(np.bincount(owner, minlength=states.shape[0])).tolist()
        return [parts[cut[j]:cut[j + 1]].tobytes() for j in range(states.shape[0])]

    @staticmethod
    def _chain_steps(R: tuple, lex: int, limit: int) -> tuple | None:
        """``body_kernels.plain_chain`` from ``lex``, twice ``limit`` steps long when it goes on
        that far (so that the suffix of each state met in its first half is a whole chain too):
        ``(states, mids, off, end)``, ``end`` what comes after its last step: "accepts" (a lexeme
        ends in the last state: what goes on leaves it), "ends" (no plain character goes on),
        "loops" (the last step again: a state repeated at the end) or "more"; None: not a string
        body."""
        cap = 2 * limit
        states = np.empty(cap, np.int64)
        mids = np.empty(16 * cap + 256, np.int64)
        off = np.zeros(cap + 1, np.int64)
        stop = np.zeros(1, np.int64)
        n = _BK.plain_chain(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, int(lex), cap, states, mids, off, stop)
        if n < 0:
            return None
        end = "accepts" if stop[0] else "ends" if n < cap else \
            "loops" if n >= 2 and states[n - 1] == states[n - 2] else "more"
        return states[:n], mids[:off[n]], off[:n + 1], end

    def _body_shape(self, lex: int, exp: np.ndarray, split: Any) -> tuple | None:
        """What ``_body_walk`` needs of lexer state ``lex`` for the expected set ``exp``: the chain
        ``every`` (the state after one plain character, then along its chain), the states inside
        multi-byte characters on the way to each (``first_mids`` into ``every[0]``, then the
        chain's ``mids``/``off``), the first bytes ``elsewhere``, and whether a lexeme ends in the
        chain's last state (``_plain_chain``'s ``accepts``); ``CLOSED_BODY`` when no plain
        text leaves the lexeme whichever way it goes (``_plain_closed``: asked when plain
        characters go several ways, before the chain); None: not a string body."""
        if split.max_chars == 0:
            return None
        R = self._restriction(exp)
        elsewhere = np.zeros(256, np.uint8)
        first_mids = np.empty(256, np.int64)
        succ, n_first = _BK.body_entry(R, bk.PLAIN_ASCII, bk.UTF8_FORMS, int(lex), elsewhere, first_mids)
        if succ < 0:
            return None  # a lexeme ends here, or most plain characters do: the full walk is short
        several = bool(np.count_nonzero(elsewhere))
        if several and self._plain_closed(lex, exp):
            return CLOSED_BODY  # a key's first letters where any key may follow, say
        chain = self._plain_chain(R, exp.tobytes(), succ, split.max_chars - 1)
        if chain is None:
            # the characters go several ways further on (an unanchored pattern before its match)
            return CLOSED_BODY if not several and self._plain_closed(lex, exp) else None
        states, mids, off, accepts = chain
        every = np.concatenate(([succ], states))
        return every, first_mids[:n_first].copy(), mids, off, elsewhere, accepts

    def _plain_row(self, split: Any, n: int, elsewhere: np.ndarray) -> np.ndarray:
        """The plain tokens of at most ``n`` characters (``split.cumulative[n]``) less those whose
        first byte is in ``elsewhere`` (a non-ASCII lead byte there stands for all of them):
        read-only, cached per vocabulary (``split.plain_rows``), as the same few byte sets (a
        schema's key letters, say) recur in every grammar."""
        key = (n, elsewhere.tobytes() if np.count_nonzero(elsewhere) else b"")
        row = split.plain_rows.get(key)
        if row is None:
            row = split.cumulative[n]
            if key[1]:
                leaving = np.flatnonzero(elsewhere[:0x80])
                drop = np.bitwise_or.reduce(self.trie.first_byte_masks[leaving], axis=0) if leaving.size else \
                    np.zeros(split.cumulative.shape[1], np.uint32)
                if elsewhere[0xC2]:
                    drop = drop | split.non_ascii_first
                row = row & ~drop
                row.setflags(write=False)
            if len(split.plain_rows) >= PLAIN_ROWS_CACHED:
                split.plain_rows.clear()
            split.plain_rows[key] = row
        return row

    def _body_walk(self, lex: int, exp: np.ndarray) -> tuple[Any, ...] | None:
        """The lexer-only walk from a state inside a string body, in parts; None when ``lex`` is not
        one. Returns ``(inside, boundary nodes, boundary states, trie, elsewhere)``.

        Most plain characters (see ``TokenTrie.string_body``) lead from ``lex`` to one state, and
        from there every plain character leads on along one chain of states (a string body, a
        length counter). "One state" is up to the terminals the walk looks at: states that run
        the same states of ``exp``'s terminals (a string value's body, beside the prefixes of
        keys it cannot be here) count as one (``body_kernels.same_for``). A plain token of ``n``
        characters that starts that way stays inside the lexeme exactly when the first ``n``
        states of the chain (and the states inside its multi-byte characters) are viable for
        ``exp``; it never meets a lexeme's end, which no chain state accepts. So those tokens are
        one row of the table of plain tokens by length, the other tokens starting that way are
        walked in their own small trie, and the bytes ``elsewhere`` (plain characters that lead to
        another state, e.g. the first letters of a schema's keys) are left to the full walk (the
        caller chains it).

        A chain may end in a state where a lexeme ends (a piece of a long string, exactly so many
        characters long): the plain tokens longer than the chain then go on into the next lexeme,
        so they are walked with the others (in ``StringBodySplit.beyond``'s trie)."""
        split = self._string_body
        if split is None:
            return None
        lx = self.lexer
        shape = self._body_shape(lex, exp, split)
        if shape is None:
            return None
        rest = split.rest
        if shape is CLOSED_BODY:  # every plain token stays inside, none walked in the full trie
            n, elsewhere = split.max_chars, shape[4]
        else:
            every, first_mids, mids, off, elsewhere, accepts = shape
            # steps the walk goes on through; -1: ASCII goes on, some multi-byte characters stop there
            n = int(_BK.body_steps(lx.reach_bits, exp, lx.ignore_bits, every, first_mids, mids, off))
            if n < 0:
                return None
            if accepts and n == every.shape[0]:  # longer plain tokens leave the lexeme at its end
                rest = split.beyond(n)
                if rest is None:
                    return None
        # longer plain tokens die at step n: at a refused byte, or where the walk stops and would
        # end the lexeme, which no chain state (nor a state inside a character) accepts; or they
        # leave it at the chain's end and are walked in ``rest``
        row = self._plain_row(split, n, elsewhere)
        if row.shape[0] == self.mask_words:
            inside = row.copy()
        else:
            inside = np.zeros(self.mask_words, dtype=np.uint32)
            inside[:row.shape[0]] = row
        first_ok = np.ascontiguousarray(1 - elsewhere)
        bnd_node, bnd_state = self._boundary_scratch()
        nb = int(_EK.lexer_walk(rest.nodes, rest.subtree_end, rest.max_depth, self.L, lex, exp, first_ok, inside,
                                bnd_node, bnd_state))
        return inside, bnd_node[:nb].copy(), bnd_state[:nb].copy(), rest, elsewhere

    def _plain_closed(self, lex: int, exp: np.ndarray) -> bool:
        """Whether no string of plain characters leaves the lexeme from ``lex`` for the expected set
        ``exp``: then every plain token stays inside it, whichever states its characters lead to
        (an unanchored ``pattern`` before its match; a key's first letters where any key may
        follow, the keys still allowed changing from one property to the next).

        Read off the terminals' own DFAs that ``lex`` runs (``LexerTables.comp_*``): closed when
        none of them that the walk looks at accepts on the way, and one that it looks for goes on
        through any plain text, keeping every state on the way viable (``body_kernels.parts_text``,
        which answers the part states its search passes too, so a string's next states are
        known). A lexer without components asks ``_closure_closed``."""
        if not self._has_parts:
            return self._closure_closed(lex, exp)
        lx = self.lexer
        sel, look = self._term_flags(exp)
        return bool(_BK.parts_closed(lx.part_table, lx.part_column, lx.part_acc, bk.PLAIN_ASCII, bk.UTF8_FORMS,
                                     lx.comp_off, lx.comp_term, lx.comp_part, sel, look, int(lex), self._part_closed,
                                     self._part_ends))

    def _term_flags(self, exp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per terminal, for the expected set ``exp``: whether a lexeme of it ends a walk (the
        restriction's ``sel``) and whether the walk looks for it (``exp`` or ignored); cached."""
        key = exp.tobytes()
        flags = self._flags.get(key)
        if flags is None:
            lx = self.lexer
            n_terms = lx.rank.shape[0]

            def unpack(words: np.ndarray) -> np.ndarray:
                return np.unpackbits(words.astype("<u8").view(np.uint8), bitorder="little")[:n_terms].astype(np.bool_)

            look = unpack(exp | lx.ignore_bits)
            sel = look if lx.mode == 0 else np.ones(n_terms, np.bool_)
            if len(self._flags) >= CLOSED_SETS:
                self._flags.clear()
            flags = self._flags[key] = (sel, look)
        return flags

    def _closure_closed(self, lex: int, exp: np.ndarray) -> bool:
        """``_plain_closed`` by following the lexer's own states (``body_kernels.plain_closure``),
        for a lexer whose states' components are unknown (one terminal, or custom recognizers).
        The states plain text leads to are closed too: they are remembered per expected set."""
        key = exp.tobytes()
        known = self._closed.get(key)
        if known is None:
            if len(self._closed) >= CLOSED_SETS:
                self._closed.clear()
            known = self._closed[key] = (set(), set())
        if lex in known[0]:
            return True
        if lex in known[1]:
            return False
        members = np.empty(bk.CLOSURE_CAP, np.int64)
        n = int(_BK.plain_closure(self._restriction(exp), bk.PLAIN_ASCII, bk.UTF8_FORMS, int(lex), members))
        if n < 0:
            known[1].add(lex)
            return False
        known[0].update(members[:n].tolist())
        return True

    @property
    def n_masks_computed(self) -> int:
        return len(self._masks)

    @property
    def index_nbytes(self) -> int:
        lx, tb = self.lexer, self.tables
        tables = sum(a.nbytes for a in (lx.trans, lx.acc_bits, lx.reach_bits, tb.dr_next, tb.dr_lhs, tb.pred_dr))
        return self._mask_bytes + tables + sum(r.nbytes for r in list(self._start_walks.values()))


_NO_GROUPS: list[tuple] = []


def _no_groups(trie: Any) -> tuple:
    """The (empty) boundary groups of a walk with no boundary, built once per process."""
    if not _NO_GROUPS:
        none = np.zeros(0, np.int32)
        _NO_GROUPS.append(_EK.split_boundaries(trie.nodes, trie.subtree_end, none, none.copy(), MERGE_LIMIT,
                                               np.zeros(256, np.uint8))[0])
    return _NO_GROUPS[0]


def _entry_bytes(entry: tuple) -> int:
    inside, groups, first_bytes, bnd_node, _, pending = entry[:6]
    n = inside.nbytes + bnd_node.nbytes + 256
    for a in groups:
        n += a.nbytes
    if pending is not None:
        n += pending[0].nbytes + pending[1].nbytes
    return n


class ParseState:
    """Where one sequence is: the lexer state inside the current lexeme and the Earley chart.
    Mutable; ``snapshot``/``restore`` give cheap rollback (rows are never changed once pushed)."""

    __slots__ = ("engine", "chart", "lex", "key")

    def __init__(self, engine: CFGEngine, chart: _Chart, lex: int) -> None:
        self.engine = engine
        self.chart = chart
        self.lex = lex
        self.key: tuple[int, bytes] | None = None  # mask_key(), kept until the state changes

    def mask_key(self) -> tuple[int, bytes]:
        """What the mask here depends on: the lexer state and the last row's fingerprint (its two
        words as bytes: built in ~0.2 us, on every step)."""
        ch = self.chart
        return (self.lex, ch.row_fp[ch.meta.item(0) - 1].tobytes())

    def snapshot(self) -> tuple[int, int]:
        return (self.lex, self.chart.n_rows)

    def restore(self, snap: tuple[int, int]) -> None:
        self.lex, self.chart.meta[0] = snap[0], snap[1]
        self.key = None

    def copy(self) -> "ParseState":
        twin = ParseState(self.engine, self.chart.copy(), self.lex)
        twin.key = self.key
        return twin

    def advance(self, flat: np.ndarray, start: int, stop: int) -> bool:
        """Feed ``flat[start:stop]``; on refusal nothing changes and False is returned."""
        eng = self.engine
        ch = self.chart
        rows0 = ch.n_rows
        while True:
            s = int(_EK.advance_bytes(eng.L, eng.G, ch.args(), eng._no_memo, flat, start, stop, self.lex))
            if s >= 0:
                self.lex = s
                self.key = None
                return True
            ch.meta[0] = rows0
            if s == -1:
                return False
            ch.grow(s - ek._LEX_FULL)

    def eos_allowed(self) -> bool:
        eng = self.engine
        ch = self.chart
        if self.lex == eng.lexer.start:  # between lexemes: whether the last row accepts
            return bool(ch.row_acc[ch.meta.item(0) - 1])
        if not eng._may_end[self.lex]:
            return False  # inside a lexeme that cannot end here, or not the text with it
        scan = np.zeros(eng.tables.n_words, np.uint64)
        rows0 = ch.n_rows
        while True:
            r = int(_EK.eos_allowed(eng.L, eng.G, ch.args(), self.lex, scan))
            if r >= 0:
                return r == 1
            ch.meta[0] = rows0
            ch.grow(r)

    def allowed_bytes(self) -> list[int]:
        """Every byte that may come next (0-255)."""
        eng = self.engine
        ch = self.chart
        out = np.zeros(256, np.uint8)
        while True:
            r = int(_EK.next_bytes(eng.L, eng.G, ch.args(), eng._no_memo, self.lex, out))
            if r == ek.OK:
                return np.flatnonzero(out).tolist()
            ch.grow(r)

    def forced_bytes(self) -> bytes:
        """The bytes every valid continuation starts with (empty when there is a choice, stopping
        included). Works on a copy; the state is unchanged."""
        probe = self.copy()
        out = bytearray()
        one = np.zeros(1, np.uint8)
        cap = self.engine.max_forced_bytes
        while len(out) < cap and not probe.eos_allowed():
            nxt = probe.allowed_bytes()
            if len(nxt) != 1:
                break
            one[0] = nxt[0]
            probe.advance(one, 0, 1)
            out.append(nxt[0])
        return bytes(out)
