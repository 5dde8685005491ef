"""The token trie: every non-special token's bytes in one flat pre-order prefix tree.

A mask is computed by walking the trie under a byte recognizer: a byte the recognizer rejects
prunes the whole subtree below it, so shared prefixes are checked once for all the tokens that
start with them. The arrays are plain numpy (read-only), ready for the numba kernels in
``logitgate.kernels.trie_kernels``.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from ..kernels import trie_kernels

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = ["TokenTrie"]


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class TokenTrie:
    """Flat pre-order trie over token bytes (special tokens and padding ids excluded).

    Attributes (read-only numpy arrays):
      ``nodes`` (int64): one packed record per node in pre-order (root first): edge byte (bits
      0-7), depth (bits 8-23, root 0), first token id ending here + 1 (bits 24-55, 0 = none);
      ``subtree_end`` (int32): the index just past each node's subtree;
      ``dup_first``/``dup_other`` (int32): token ``dup_other[k]`` has the same bytes as the
      earlier id ``dup_first[k]`` (several ids can share bytes, e.g. SentencePiece byte fallback);
      ``token_flat`` (uint8) and ``token_off`` (int64, n_tokens + 1): every token's bytes, for
      stepping a recognizer over one token;
      ``token_node`` (int32): the node where each token ends, -1 for tokens not in the trie.
    """

    def __init__(self, token_bytes: list[bytes] | tuple[bytes, ...], excluded: frozenset[int] | set[int] = frozenset()) -> None:
        n = len(token_bytes)
        lengths = np.fromiter((len(b) for b in token_bytes), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise ValueError("token bytes exceed 2 GiB in total")
        flat = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
        members = [t for t in range(n) if t not in excluded and lengths[t] > 0]
        members.sort(key=token_bytes.__getitem__)
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

    @property
    def node_depth(self) -> np.ndarray:
        """Depth of every node (decoded from ``nodes``)."""
        return ((self.nodes >> trie_kernels.NODE_DEPTH_SHIFT) & trie_kernels.NODE_DEPTH_MASK).astype(np.int32)

    @property
    def nbytes(self) -> int:
        """Memory held by the trie's arrays."""
        return sum(
            a.nbytes
            for a in (self.nodes, self.subtree_end, self.dup_first, self.dup_other, self.token_node,
                      self.token_flat, self.token_off)
        )

    def token_span(self, token_id: int) -> tuple[int, int]:
        """``(start, end)`` of the token's bytes in ``token_flat``."""
        return int(self.token_off[token_id]), int(self.token_off[token_id + 1])
