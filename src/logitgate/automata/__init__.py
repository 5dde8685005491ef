"""Regex syntax tree -> minimal byte-level DFA.

:func:`build_dfa` compiles one or more patterns (``logitgate.regex.ast`` nodes) into a single
:class:`ByteDFA` over UTF-8 bytes; :func:`regex_dfa` is the one-pattern shortcut.
:mod:`~logitgate.automata.utf8` turns code point ranges into UTF-8 byte automata,
:mod:`~logitgate.automata.nfa` builds the position NFA, :mod:`~logitgate.automata.dfa`
determinises and minimises it.
"""
from __future__ import annotations

from .dfa import ByteDFA, build_dfa, regex_dfa
from .utf8 import class_automaton, utf8_sequences

__all__ = ["ByteDFA", "build_dfa", "regex_dfa", "utf8_sequences", "class_automaton"]
