"""logitgate: which tokens of the vocabulary keep the output valid, answered fast at every step.

    tok = logitgate.Tokenizer.from_huggingface(hf_tok)   # or from_mistral / from_tiktoken / from_bytes ...
    g = logitgate.Grammar.from_regex(r"\\d{3}-\\d{4}")   # or from_lark / from_gbnf / from_yacc
    compiled = logitgate.compile(g, tok)                  # reusable, thread-safe, cached
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    logitgate.apply_token_bitmask_inplace(logits, bm)
    m.accept_token(sampled)
"""
from __future__ import annotations

from .bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, bitmask_to_bool, get_bitmask_shape
from .compiler import CompiledGrammar, clear_cache, compile
from .errors import (
    CompileError,
    GrammarError,
    GrammarWarning,
    LimitError,
    RecognizerError,
    LogitgateError,
    RegexError,
    SchemaError,
    TokenizerError,
)
from .grammar import Grammar
from .limits import Limits, get_limits, set_limits, using_limits
from .matcher import Matcher, fill_next_token_bitmasks
from .vocab import Tokenizer

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("logitgate")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "Tokenizer",
    "Grammar",
    "CompiledGrammar",
    "compile",
    "clear_cache",
    "Matcher",
    "allocate_token_bitmask",
    "get_bitmask_shape",
    "apply_token_bitmask_inplace",
    "bitmask_to_bool",
    "fill_next_token_bitmasks",
    "LogitgateError",
    "RegexError",
    "GrammarError",
    "GrammarWarning",
    "SchemaError",
    "TokenizerError",
    "CompileError",
    "LimitError",
    "RecognizerError",
    "Limits",
    "get_limits",
    "set_limits",
    "using_limits",
    "__version__",
]
