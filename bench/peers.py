"""One adapter per engine, all built from the same token bytes (``vocab.Vocab``).

Common interface:

    eng = ENGINES[name](vocab)       # tokenizer setup; its time is eng.setup_s
    handle = eng.compile(regex)      # raise on an unsupported regex
    m = eng.matcher(handle)
    m.fill(bitmask)                  # bitmask: int32 [1, ceil(V/32)], bit set = allowed
    m.advance(token_id) -> bool      # False: token rejected
    m.is_accepting() -> bool         # the text so far is a full match (EOS allowed)
    eng.index_bytes(handle)          # engine-reported size of the compiled grammar, or None

The peer engines (outlines-core, llguidance, xgrammar) are opponents: they are imported
here, inside bench/, and never by the library.

How each peer is fed the vocabulary (the same bytes for all; differences are forced by the
engines' APIs):

* xgrammar: ``TokenizerInfo(tokens, VocabType.RAW, vocab_size=V, stop_token_ids=[eos])``.
  Special tokens are passed as b"" (xgrammar treats empty tokens as special; their display
  text such as b"<s>" would otherwise be matched as ordinary text).
* llguidance: a minimal TokenizerWrapper (tokens, special_token_ids, eos/bos).
  llguidance prefixes special tokens with the byte 0xFF (TokTrie::SPECIAL_TOKEN_MARKER), so
  any token whose bytes start with 0xFF is taken as special. In both mistral vocabularies
  that is exactly the lone byte token 0xFF (spm32k "<0xFF>" = id 258, tekken id 1255):
  llguidance sees it as a special token and never allows it as text. 0xFF never occurs in
  UTF-8, so no regex over text can allow it anyway; a mask difference there is expected.
  llguidance also calls the wrapper to tokenize text (forced bytes) while it computes
  masks; it gets the same mistral-common encoder that makes the samples' token paths
  (``vocab.TextEncoder``, without SentencePiece's dummy-prefix space).
* outlines-core: ``Vocabulary(eos, {token_bytes: [ids]})``. It refuses the EOS id inside the
  dict ("EOS token should not be inserted into Vocabulary"), so special tokens and empty
  tokens are left out of the dict (they can never be allowed by a regex anyway); tokens
  with identical bytes (spm "<0x41>" and "A") share one key with several ids. Keys are
  bytes, taken as the exact token bytes.
"""
from __future__ import annotations

import inspect
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np


def pkg_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def allocate_bitmask(vocab_size: int) -> np.ndarray:
    return np.full((1, (vocab_size + 31) // 32), -1, dtype=np.int32)


def bitmask_to_bool(bm: np.ndarray, vocab_size: int) -> np.ndarray:
    """Bool array [vocab_size] from an int32 [1, W] bitmask (bit i of word i//32)."""
    bits = np.unpackbits(bm.reshape(-1).view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def is_allowed(bm: np.ndarray, token_id: int) -> bool:
    return bool((int(bm[0, token_id >> 5]) >> (token_id & 31)) & 1)


class Engine:
    name = "?"
    dist = "?"  # distribution name, for the version
    builds_full_index = False  # compile() already builds a mask for every automaton state

    def __init__(self, vocab):
        self.vocab = vocab
        self.version = pkg_version(self.dist)
        t0 = time.perf_counter()
        self._import()
        t1 = time.perf_counter()
        self._setup()
        self.import_s = t1 - t0
        self.setup_s = time.perf_counter() - t1

    def _import(self):
        """Import the engine's modules (timed apart from the tokenizer setup)."""

    def _setup(self):
        """Build the engine's tokenizer object from self.vocab."""

    def compile(self, regex: str):
        raise NotImplementedError

    def fresh(self):
        """Called before each item's timed build, outside the timing: drop what the engine
        keeps from earlier builds that would make this one a cache hit (nothing by default)."""

    def matcher(self, handle):
        raise NotImplementedError

    def index_bytes(self, handle):
        return None


# --------------------------------------------------------------------------- logitgate


class LogitgateEngine(Engine):
    """logitgate as shipped (``index="lazy"``): each state's mask is computed when a matcher
    first reaches the state, then memoised."""

    name = "logitgate"
    dist = "logitgate"
    full_index = False
    index_mode = "lazy"

    def _import(self):
        from vocab import import_logitgate

        self.lg = import_logitgate()

    def _setup(self):
        if self.vocab.lg_tokenizer is None:
            raise RuntimeError("logitgate engine needs the vocabulary from logitgate.Tokenizer")
        self.tok = self.vocab.lg_tokenizer
        if self.version == "not installed":
            self.version = getattr(self.lg, "__version__", "src checkout")
        # The token trie is built once per tokenizer, like the peers' own tokenizer tables:
        # count it as tokenizer setup, not as the first compile.
        getattr(self.tok, "trie", None)
        # Like the peers' native libraries, loaded whole before anything is timed: logitgate's
        # numba kernels otherwise load on first use (bench/cold_start.py measures that).
        kernels = getattr(self.lg, "kernels", None)
        if hasattr(kernels, "load_all"):
            kernels.load_all()
        # Like xgrammar's cache_enabled=False: every compile must really compile.
        try:
            params = inspect.signature(self.lg.compile).parameters
        except (TypeError, ValueError):
            params = {}
        self._compile_kw = {"cache": False} if "cache" in params else {}
        if "index" in params:
            self._compile_kw["index"] = self.index_mode
        self._clear_cache = getattr(self.lg, "clear_cache", None)

    def fresh(self):
        """Empty logitgate's caches of grammars built from text and of compiled grammars, so that
        the next build really builds (the workers call it before each item, outside the timing:
        what the caches held is freed there, not in the timed build)."""
        if self._clear_cache is not None:
            self._clear_cache()

    def compile(self, regex):
        compiled = self.lg.compile(self.lg.Grammar.from_regex(regex), self.tok, **self._compile_kw)
        if self.full_index:
            build = getattr(compiled, "build_index", None)
            if build is None:
                raise NotImplementedError("this logitgate has no CompiledGrammar.build_index()")
            build()
        return compiled

    def matcher(self, handle):
        return LogitgateMatcher(self.lg.Matcher(handle))

    def index_bytes(self, handle):
        for attr in ("index_nbytes", "memory_size_bytes", "nbytes"):
            val = getattr(handle, attr, None)
            if val is not None:
                return int(val() if callable(val) else val)
        return None


class LogitgateBackgroundEngine(LogitgateEngine):
    """logitgate with ``index="background"``: the states' masks are computed on a background
    thread after compile, while the walk runs (a state reached first is computed on the spot)."""

    name = "logitgate[background]"
    index_mode = "background"


class LogitgateIndexEngine(LogitgateEngine):
    """logitgate with ``compiled.build_index()`` done as part of compile (all masks up front)."""

    name = "logitgate[index]"
    full_index = True
    builds_full_index = True
    index_mode = "lazy"


class LogitgateMatcher:
    __slots__ = ("m", "fill")

    def __init__(self, m):
        self.m = m
        fill = m.fill_next_token_bitmask
        self.fill = lambda bm: fill(bm, 0)

    def advance(self, token_id):
        return bool(self.m.accept_token(token_id))

    def is_accepting(self):
        return bool(self.m.is_accepting())


# --------------------------------------------------------------------------- xgrammar


class XGrammarEngine(Engine):
    name = "xgrammar"
    dist = "xgrammar"

    def _import(self):
        import xgrammar  # imports torch

        self.xgr = xgrammar

    def _setup(self):
        xgr = self.xgr
        v = self.vocab
        encoded = [b"" if i in v.special_ids else t for i, t in enumerate(v.tokens)]
        self.info = xgr.TokenizerInfo(
            encoded, xgr.VocabType.RAW, vocab_size=v.vocab_size, stop_token_ids=list(v.eos_ids)
        )
        # No cache: every compile in the benchmark must really compile.
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)

    def compile(self, regex):
        return self.compiler.compile_regex(regex)

    def matcher(self, handle):
        return XGrammarMatcher(self.xgr.GrammarMatcher(handle))

    def index_bytes(self, handle):
        return int(handle.memory_size_bytes)


class XGrammarMatcher:
    __slots__ = ("m", "fill")

    def __init__(self, m):
        self.m = m
        fill = m.fill_next_token_bitmask
        self.fill = lambda bm: fill(bm, 0)  # numpy goes in through DLPack

    def advance(self, token_id):
        return bool(self.m.accept_token(token_id))

    def is_accepting(self):
        return bool(self.m.is_completed())


# --------------------------------------------------------------------------- llguidance


class _TokenBytesWrapper:
    """The duck type llguidance.LLTokenizer accepts: token bytes + special ids + eos/bos,
    and a text -> ids function (llguidance tokenizes forced text while computing masks)."""

    is_tokenizer_wrapper = True

    def __init__(self, vocab, encode):
        self.tokens = list(vocab.tokens)
        self.special_token_ids = sorted(vocab.special_ids)
        self.eos_token_id = vocab.eos_id
        self.bos_token_id = None
        self._encode = encode

    def __call__(self, text):
        return self._encode(text.decode("utf-8") if isinstance(text, bytes) else text)


class LLGuidanceEngine(Engine):
    name = "llguidance"
    dist = "llguidance"

    def _import(self):
        import llguidance
        import llguidance.numpy

        self.llg = llguidance

    def _setup(self):
        llguidance = self.llg
        v = self.vocab
        if v.vocab_size != len(v.tokens):
            raise RuntimeError("llguidance adapter: padded vocabularies not handled")
        from vocab import TextEncoder

        encoder = TextEncoder(v.name, v.tokens)
        self.tokenizer = llguidance.LLTokenizer(_TokenBytesWrapper(v, encoder.encode_unchecked))
        self._fill = llguidance.numpy.fill_next_token_bitmask

    def compile(self, regex):
        grammar = self.llg.LLMatcher.grammar_from_regex(regex)
        m = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        # The grammar is compiled inside the LLMatcher; hand that first matcher out first.
        return {"grammar": grammar, "first": m}

    def matcher(self, handle):
        m = handle.pop("first", None)
        if m is None:
            m = self.llg.LLMatcher(self.tokenizer, handle["grammar"], log_level=0)
        return LLGuidanceMatcher(m, self._fill)


class LLGuidanceMatcher:
    __slots__ = ("m", "fill")

    def __init__(self, m, fill_fn):
        self.m = m
        self.fill = lambda bm: fill_fn(m, bm, 0)

    def advance(self, token_id):
        return bool(self.m.consume_token(token_id))

    def is_accepting(self):
        return bool(self.m.is_accepting())


# --------------------------------------------------------------------------- outlines-core


class OutlinesCoreEngine(Engine):
    name = "outlines-core"
    dist = "outlines-core"
    builds_full_index = True  # Index() computes the transitions of every state up front

    def _import(self):
        import outlines_core

        self.oc = outlines_core

    def _setup(self):
        outlines_core = self.oc
        v = self.vocab
        by_bytes = {}
        for i, t in enumerate(v.tokens):
            if i in v.special_ids or i in v.eos_ids or not t:
                continue
            by_bytes.setdefault(bytes(t), []).append(i)
        self.skipped = len(v.tokens) - sum(len(ids) for ids in by_bytes.values())
        self.vocabulary = outlines_core.Vocabulary(v.eos_id, by_bytes)

    def compile(self, regex):
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, handle):
        return OutlinesCoreMatcher(self.oc.Guide(handle))


class OutlinesCoreMatcher:
    __slots__ = ("g", "fill")

    def __init__(self, guide):
        self.g = guide
        write = guide.write_mask_into
        self.fill = lambda bm: write(bm.ctypes.data, bm.size, 4)

    def advance(self, token_id):
        try:
            self.g.advance(token_id, return_tokens=False)
            return True
        except ValueError:  # "No next state found for the current state ..."
            return False

    def is_accepting(self):
        return bool(self.g.is_finished())


ENGINES = {
    "logitgate": LogitgateEngine,
    "logitgate[background]": LogitgateBackgroundEngine,
    "logitgate[index]": LogitgateIndexEngine,
    "outlines-core": OutlinesCoreEngine,
    "llguidance": LLGuidanceEngine,
    "xgrammar": XGrammarEngine,
}
PEERS = ("outlines-core", "llguidance", "xgrammar")
