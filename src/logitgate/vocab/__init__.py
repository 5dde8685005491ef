"""Vocabulary: exact token bytes (``Tokenizer``) and the flat token trie (``TokenTrie``)."""
from __future__ import annotations

from .tokenizer import Tokenizer
from .trie import TokenTrie

__all__ = ["Tokenizer", "TokenTrie"]
