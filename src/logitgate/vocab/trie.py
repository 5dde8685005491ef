"""The token trie: every non-special token's bytes in one flat pre-order prefix tree.

A mask is computed by walking the trie under a byte recognizer: a byte the recognizer rejects
prunes the whole subtree below it, so shared prefixes are checked once for all the tokens that
start with them. The arrays are plain numpy (read-only), ready for the numba kernels in
``logitgate.kernels.trie_kernels``.
"""
from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

import numpy as np

from ..kernels import trie_kernels

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = ["TokenTrie", "WIDE_CHILDREN"]

WIDE_CHILDREN = 32
"""A first byte with this many second bytes or more is a wide node: mask walks index its children
(``TokenTrie.root_grand``) instead of scanning them (92 nodes in a 131k vocabulary, 29 in a 32k one)."""

BEYOND_TIERS = (8, 12, 16, 24, 32, 48)
"""Lengths in characters past which ``StringBodySplit.beyond`` adds plain tokens to its tries. None
below 8: such a trie would hold most of the vocabulary (tekken: 78k of 131k tokens past 4
characters, 88 ms to build), so those few states walk the vocabulary itself."""


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class TokenTrie:
    """Flat pre-order trie over token bytes (special tokens and padding ids excluded).

    Attributes (read-only numpy arrays):
      ``nodes`` (int64): one packed record per node in pre-order (root first): edge byte (bits
      0-7), depth (bits 8-23, root 0), first token id ending here + 1 (bits 24-55, 0 = none);
      ``subtree_end`` (int32): the index just past each node's subtree;
      ``root_child`` (int32, 256): the root's child on each byte, -1 where no token starts with it;
      ``root_fanout`` (int32, 256): the number of children of the root's child on byte ``b`` when
      it has at least ``WIDE_CHILDREN``, else 0; ``root_grand`` (int32, 256 * 256): the child on
      byte ``c`` of the root's child on byte ``b`` at ``b * 256 + c``, -1 where none (a walk
      enters a wide node through it, reading only the children on bytes its state allows);
      ``dup_first``/``dup_other`` (int32): token ``dup_other[k]`` has the same bytes as the
      earlier id ``dup_first[k]`` (several ids can share bytes, e.g. SentencePiece byte fallback);
      ``token_flat`` (uint8) and ``token_off`` (int64, n_tokens + 1): every token's bytes, for
      stepping a recognizer over one token;
      ``token_node`` (int32): the node where each token ends, -1 for tokens not in the trie.
    """

    def __init__(self, token_bytes: list[bytes] | tuple[bytes, ...], excluded: frozenset[int] | set[int] = frozenset()) -> None:
        n = len(token_bytes)
        lengths = np.fromiter(map(len, token_bytes), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise ValueError("token bytes exceed 2 GiB in total")
        flat = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
        keep = lengths > 0
        gone = [t for t in excluded if 0 <= t < n]
        keep[gone] = False
        members = sorted(np.flatnonzero(keep).tolist(), key=token_bytes.__getitem__)
        order = np.asarray(members, dtype=np.int32)
        node_byte, node_depth, subtree_end, tok_off, node_tokens, token_node = trie_kernels.build_trie(
            _readonly(flat.copy()), _readonly(offsets.astype(np.int32)), _readonly(order)
        )
        max_depth = int(node_depth.max()) if node_depth.size else 0
        if max_depth > trie_kernels.NODE_DEPTH_MASK:
            raise ValueError("a token longer than 65535 bytes cannot be stored in the trie")
        counts = np.diff(tok_off)
        first = np.where(counts > 0, node_tokens[np.minimum(tok_off[:-1], max(len(node_tokens) - 1, 0))], -1)
        self.nodes = _readonly(
            node_byte.astype(np.int64)
            | (node_depth.astype(np.int64) << trie_kernels.NODE_DEPTH_SHIFT)
            | ((first.astype(np.int64) + 1) << trie_kernels.NODE_TOKEN_SHIFT)
        )
        dup_first: list[int] = []
        dup_other: list[int] = []
        for node in np.nonzero(counts > 1)[0]:
            ids = node_tokens[tok_off[node]:tok_off[node + 1]]
            dup_first.extend([int(ids[0])] * (len(ids) - 1))
            dup_other.extend(int(t) for t in ids[1:])
        self.dup_first = _readonly(np.asarray(dup_first, dtype=np.int32))
        self.dup_other = _readonly(np.asarray(dup_other, dtype=np.int32))
        self.subtree_end = _readonly(subtree_end)
        root_child = np.full(256, -1, dtype=np.int32)
        children = np.flatnonzero(node_depth == 1)
        root_child[node_byte[children]] = children
        self.root_child = _readonly(root_child)
        grand = np.full(256 * 256, -1, dtype=np.int32)
        second = np.flatnonzero(node_depth == 2)
        parent_byte = node_byte[children[np.searchsorted(children, second) - 1]].astype(np.int64)
        grand[parent_byte * 256 + node_byte[second]] = second
        fanout = np.bincount(parent_byte, minlength=256).astype(np.int32)
        fanout[fanout < WIDE_CHILDREN] = 0
        self.root_grand = _readonly(grand)
        self.root_fanout = _readonly(fanout)
        self.token_node = _readonly(token_node)
        self.token_flat = _readonly(flat.copy())
        self.token_off = _readonly(offsets)
        self.max_depth = max_depth
        self.n_tokens = n

    @functools.cached_property
    def first_byte_masks(self) -> np.ndarray:
        """``[256, ceil(n_tokens/32)]`` uint32: bit t of row b is set when token t (in the trie)
        starts with byte b."""
        words = (self.n_tokens + 31) // 32
        out = np.zeros((256, words), dtype=np.uint32)
        ids = np.flatnonzero(self.token_node >= 0)
        first = self.token_flat[self.token_off[ids]]
        np.bitwise_or.at(out, (first, ids >> 5), (np.uint32(1) << (ids & 31).astype(np.uint32)))
        out.setflags(write=False)
        return out

    @functools.cached_property
    def node_first_byte(self) -> np.ndarray:
        """For every node, the first byte of the path to it (uint8; 0 for the root)."""
        out = np.zeros(self.n_nodes, dtype=np.uint8)
        depth = self.node_depth
        for i in np.flatnonzero(depth == 1):
            out[i:self.subtree_end[i]] = self.nodes[i] & 0xFF
        out.setflags(write=False)
        return out

    @functools.cached_property
    def string_body(self) -> "StringBodySplit":
        """The tokens that are plain text inside a JSON-style string, apart (see
        :class:`StringBodySplit`); built on first use (a pass over the vocabulary)."""
        return StringBodySplit.of(self)

    @classmethod
    def from_tokenizer(cls, tok: "Tokenizer") -> "TokenTrie":
        """The trie of ``tok``'s non-special tokens."""
        return cls(tok.tokens, tok.special_ids)

    @property
    def n_nodes(self) -> int:
        """Number of nodes in the trie."""
        return int(self.nodes.shape[0])

    @property
    def node_byte(self) -> np.ndarray:
        """Edge byte of every node (decoded from ``nodes``)."""
        return (self.nodes & trie_kernels.NODE_BYTE_MASK).astype(np.uint8)

    @functools.cached_property
    def node_depth(self) -> np.ndarray:
        """Depth of every node (decoded from ``nodes`` once; read-only)."""
        return _readonly(((self.nodes >> trie_kernels.NODE_DEPTH_SHIFT) & trie_kernels.NODE_DEPTH_MASK)
                         .astype(np.int32))

    @property
    def nbytes(self) -> int:
        """Memory held by the trie's arrays."""
        return sum(
            a.nbytes
            for a in (self.nodes, self.subtree_end, self.root_child, self.dup_first, self.dup_other, self.token_node,
                      self.token_flat, self.token_off)
        )

    def token_span(self, token_id: int) -> tuple[int, int]:
        """``(start, end)`` of the token's bytes in ``token_flat``."""
        return int(self.token_off[token_id]), int(self.token_off[token_id + 1])


class StringBodySplit:
    """The vocabulary split for lexer states inside a string body: *plain* tokens (complete UTF-8
    text of characters other than ``"``, ``\\``, U+0000-U+001F and U+007F: the body of a JSON string) by
    their length in characters, and a trie of all the others.

    ``cumulative[n]`` (uint32 words): the plain tokens of at most ``n`` characters, ``n`` up to
    ``max_chars``; ``rest``: a trie of the other tokens, with their own ids. A lexer state that
    moves every plain character to one same state (a string body, a length counter) needs a walk
    of ``rest`` only: the plain tokens that fit are one row of ``cumulative``.
    """

    __slots__ = ("cumulative", "max_chars", "rest", "n_plain", "non_ascii_first", "plain_rows", "lengths", "_source",
                 "_beyond", "_lock")

    def __init__(self, cumulative: np.ndarray, max_chars: int, rest: "TokenTrie", n_plain: int,
                 non_ascii_first: np.ndarray, lengths: np.ndarray, source: "TokenTrie") -> None:
        self.cumulative = cumulative
        self.max_chars = max_chars
        self.rest = rest
        self.lengths = lengths
        """Per token, its length in characters when it is plain, else -1."""
        self._source = (source.token_flat, source.token_off)  # every token's bytes (read-only arrays)
        self._beyond: dict[int, TokenTrie] = {}
        self._lock = threading.Lock()
        self.n_plain = n_plain
        self.non_ascii_first = non_ascii_first
        """The tokens (of the trie) whose first byte is a UTF-8 lead byte, 0xC2-0xF4."""
        self.plain_rows: dict[tuple[int, bytes], np.ndarray] = {}
        """A cache for the string-body walk: rows of ``cumulative`` less the plain tokens that start
        with some bytes (``CFGEngine._body_walk``), shared by every grammar over the vocabulary."""

    @classmethod
    def of(cls, trie: "TokenTrie") -> "StringBodySplit":
        n = trie.n_tokens
        words = (n + 31) // 32
        lengths = trie_kernels.plain_text_lengths(trie.token_flat, trie.token_off, trie.token_node)
        plain = np.flatnonzero(lengths >= 0)
        max_chars = int(lengths.max(initial=0))
        # cumulative[k]: the plain tokens of at most k characters (bits little-endian in uint32 words)
        shortest = np.where(lengths >= 0, lengths, max_chars + 1)
        fits = shortest[None, :] <= np.arange(max_chars + 1)[:, None]
        packed = np.packbits(fits, axis=1, bitorder="little")
        cumulative = np.zeros((max_chars + 1, words * 4), np.uint8)
        cumulative[:, :packed.shape[1]] = packed
        cumulative = np.ascontiguousarray(cumulative).view("<u4").astype(np.uint32)
        cumulative.setflags(write=False)
        others = np.flatnonzero((lengths < 0) & (trie.token_node >= 0))
        non_ascii_first = np.bitwise_or.reduce(trie.first_byte_masks[0xC2:0xF5], axis=0)
        non_ascii_first.setflags(write=False)
        lengths.setflags(write=False)
        rest = _subset_trie(trie.token_flat, trie.token_off, n, others)
        return cls(cumulative, max_chars, rest, int(plain.size), non_ascii_first, lengths, trie)

    def beyond(self, n: int) -> "TokenTrie | None":
        """A trie of the tokens a walk must look at when plain tokens of more than ``n``
        characters may leave the lexeme (a piece of a long string ends after ``n`` more): ``rest``
        and the plain tokens longer than some tier ``t <= n`` (``BEYOND_TIERS``; those of ``t``
        to ``n`` characters are walked too, which finds what their row says). ``rest`` itself
        when no plain token is longer than ``n``; None below the smallest tier (the walk would
        be most of the vocabulary). Built on first use per tier, shared by every grammar."""
        if n >= self.max_chars:
            return self.rest
        tier = max((t for t in BEYOND_TIERS if t <= n), default=None)
        if tier is None:
            return None
        trie = self._beyond.get(tier)
        if trie is None:
            with self._lock:
                trie = self._beyond.get(tier)
                if trie is None:
                    keep = np.flatnonzero((self.lengths > tier) | (self.rest.token_node >= 0))
                    trie = self._beyond[tier] = _subset_trie(*self._source, self.rest.n_tokens, keep)
        return trie


def _subset_trie(flat: np.ndarray, off: np.ndarray, n: int, ids: np.ndarray) -> TokenTrie:
    """A trie over the ids ``0..n-1`` of a vocabulary whose bytes are ``flat``/``off`` (a
    ``TokenTrie``'s), holding only the tokens ``ids``: the others are left out (empty)."""
    tokens = [b""] * n
    for t in ids.tolist():
        tokens[t] = flat[off[t]:off[t + 1]].tobytes()
    return TokenTrie(tokens)

