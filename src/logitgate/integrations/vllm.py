"""vLLM adapter: logitgate as a vLLM V1 structured-output backend, as a V1 batch logits processor,
and as a per-request ``(token_ids, logits) -> logits`` logits processor.

``import logitgate.integrations.vllm`` never imports vLLM (nor torch). The classes that subclass
vLLM's own interfaces -- ``LogitgateBackend``, ``LogitgateGrammar`` and
``LogitgateBatchLogitsProcessor`` -- are built on first access, importing vLLM then; without vLLM
that access raises ``ImportError`` naming the extra: ``pip install 'logitgate[vllm]'``. (They are
left out of ``__all__`` so that ``import *`` and ``help()`` work without vLLM.)
``LogitgateLogitsProcessor`` (the per-request processor) and the helpers need no vLLM at all.

Written against these vLLM (>= 0.10, V1 engine) interfaces:

* ``vllm/v1/structured_output/backend_types.py``: ``StructuredOutputBackend`` (a dataclass with
  ``vllm_config``, ``tokenizer``, ``vocab_size``; ``compile_grammar(request_type, grammar_spec)``,
  ``allocate_token_bitmask(max_num_seqs)``, ``destroy()``), ``StructuredOutputGrammar``
  (``accept_tokens``, ``validate_tokens``, ``rollback``, ``fill_bitmask``, ``is_terminated``,
  ``reset``) and ``StructuredOutputOptions`` (JSON, JSON_OBJECT, REGEX, GRAMMAR, CHOICE,
  STRUCTURAL_TAG). The bitmask is an int32 CPU tensor of shape ``(rows, ceil(vocab/32))``, bit
  ``t % 32`` of word ``t // 32`` allowing token ``t`` -- the same layout as ``logitgate.bitmask``.
* ``vllm/v1/sample/logits_processor/interface.py``: ``LogitsProcessor`` (``__init__(vllm_config,
  device, is_pin_memory)``, ``validate_params``, ``is_argmax_invariant``, ``update_state``,
  ``apply``, ``needs_output_token_ids`` in newer versions) and ``BatchUpdate`` (``removed``,
  ``added``, ``moved``, processed in that order; see ``docs/design/logits_processors.md``).

Request mapping (same as vLLM's xgrammar/guidance backends where they agree):

===============  ==========================================================================
JSON             ``Grammar.from_json_schema(spec, whitespace=...)``
JSON_OBJECT      ``Grammar.from_json_schema({"type": "object"})`` -- an object, as vLLM's
                 xgrammar and guidance backends compile it (OpenAI ``json_object`` mode)
REGEX            ``Grammar.from_regex(spec)`` (Python ``re`` syntax, full match)
GRAMMAR          GBNF (``Grammar.from_gbnf``, start rule ``root``) when a line, with ``#`` and
                 ``//`` comments removed, contains ``::=``; otherwise Lark
                 (``Grammar.from_lark``, start rule ``start``). This is vLLM's own
                 ``grammar_is_likely_lark`` rule, so a grammar is read the same way as by the
                 xgrammar backend.
CHOICE           a regex alternation of the ``re.escape``-d choices (the spec is the JSON list
                 vLLM sends; a Python literal list is accepted too, as the outlines backend does)
STRUCTURAL_TAG   not supported: ``StructuralTagNotSupportedError`` (a ``NotImplementedError``
                 and a ``ValueError``, so vLLM answers the request with an error)
===============  ==========================================================================

JSON whitespace is ``"flexible"`` (vLLM's default: any JSON whitespace, at most 64 characters a
run), or ``"compact"`` when vLLM's ``disable_any_whitespace`` is set.

Wiring 1: the structured-output backend
---------------------------------------
vLLM has no registry for third-party structured-output backends: the backend name is validated
against a fixed ``Literal`` (``vllm/config/structured_outputs.py``), the front end validates
requests per name (``_validate_structured_output`` in ``vllm/v1/engine/input_processor.py``, or
``processor.py`` before 0.11) and the engine core builds the backend in a hard-coded ``if``
chain (``StructuredOutputManager.grammar_init`` in ``vllm/v1/structured_output/__init__.py``).
``install(replace=...)`` therefore patches those two methods (idempotently):

* front end: when the engine-level backend is one of ``replace``, the request's backend is set to
  ``"logitgate"`` and its constraint is checked with logitgate (a bad regex/schema/grammar is a
  ``ValueError``, answered as a bad request) instead of with the replaced library;
* engine core: a request whose backend is ``"logitgate"`` (or one of ``replace``) makes the
  manager build a ``LogitgateBackend`` from its own tokenizer and the model's vocabulary size.

``"logitgate"`` itself cannot be put in vLLM's config (the ``Literal`` rejects it), so pick a
name to take over -- ``"auto"`` (vLLM's default, so every structured request goes to logitgate) or
e.g. ``"guidance"`` -- and select it as usual. Both patches must be in the front-end process and
in the engine-core process (a separate process by default). vLLM runs every
``vllm.general_plugins`` entry point in each of its processes, so declare one in a package you
install; logitgate declares it (inert unless ``$LOGITGATE_VLLM_REPLACE`` is set)::

    [project.entry-points."vllm.general_plugins"]
    logitgate = "logitgate.integrations.vllm:vllm_general_plugin"

and choose the name with ``LOGITGATE_VLLM_REPLACE=auto`` (comma-separated names). Then::

    LLM(model=..., structured_outputs_config={"backend": "auto"})        # vLLM >= 0.11
    LLM(model=..., guided_decoding_backend="auto")                       # vLLM 0.10.x
    vllm serve MODEL --structured-outputs-config.backend auto            # or --guided-decoding-backend

and send ordinary structured-output requests (``StructuredOutputsParams(regex=...)``,
``response_format``, ``structured_outputs={"json": ...}``). Without the plugin, calling
``install(replace=...)`` before building the engine works when the engine core runs in the same
process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). If only the front end is patched, the engine core
fails loudly ("Unsupported structured output backend: logitgate"). vLLM applies the masks with its
own (xgrammar) kernel; the layout is the same.

Wiring 2: the V1 logits processor
---------------------------------
Load the class by its qualified name (or an object; or a ``vllm.logits_processors`` entry point
in your own package)::

    LLM(model=..., logits_processors=["logitgate.integrations.vllm:LogitgateBatchLogitsProcessor"])
    vllm serve MODEL --logits-processors logitgate.integrations.vllm:LogitgateBatchLogitsProcessor

and put the constraint in the request's ``SamplingParams.extra_args`` (``vllm_xargs`` over HTTP):

* ``{"logitgate": {"regex": r"\\d+"}}`` -- exactly one of ``json_schema`` (dict or JSON text),
  ``json_object`` (true), ``regex``, ``lark``, ``gbnf``, ``grammar`` (GBNF or Lark, detected as
  above) or ``choice`` (a list of strings), plus optionally ``whitespace`` (``"flexible"``,
  ``"compact"`` or ``"pretty"``) for the JSON kinds. The value may also be that dict as JSON text.
* flat keys, for ``vllm_xargs`` (whose values must be strings or numbers):
  ``{"logitgate_regex": "\\\\d+"}``, ``{"logitgate_json_schema": "<schema JSON>"}``,
  ``logitgate_lark``, ``logitgate_gbnf``, ``logitgate_grammar``, ``logitgate_choice``,
  ``logitgate_json_object``, ``logitgate_whitespace``.

``validate_params`` rejects a bad constraint when the request arrives (vLLM versions that call it).
One ``Matcher`` follows each batch row; ``update_state`` applies removed, added, then moved
entries (unidirectional moves and swaps) and advances each row's matcher over the new tokens of
its (live) output token list. The processor is not argmax-invariant and asks for real output
token ids (``needs_output_token_ids``). A row whose sampled token the constraint refuses (or whose
constraint cannot be compiled, on vLLM versions without ``validate_params``) is logged and then
allowed only EOS.

Wiring 3: the per-request processor
-----------------------------------
``LogitgateLogitsProcessor(constraint, tokenizer)`` is a ``fn(token_ids, logits) -> logits``
callable for vLLM V0's ``SamplingParams.logits_processors`` (V1 rejects per-request callables; wrap
it in a ``vllm.v1.sample.logits_processor.AdapterLogitsProcessor`` there), or any loop that calls
processors that way. It has ``clone()``, which V0's ``SamplingParams.clone()`` calls to give each
sequence its own processor.

Untested here (vLLM cannot be installed on this CPU-only machine; the tests run the classes on
stand-ins for vLLM's base classes): everything inside a real vLLM engine -- both ``install``
patches and the plugin, the front-end/engine process split, tokenizer loading from a
``VllmConfig``, GPU tensors, speculative decoding (vLLM rejects custom logits processors with it;
the backend keeps ``max(16, 2 * (num_speculative_tokens + 1))`` rollback steps), async
scheduling, reasoning parsers, and vLLM's Model Runner V2 (whose logits-processor interface is
different; the V1 one applies with ``VLLM_USE_V2_MODEL_RUNNER=0`` there).
"""
from __future__ import annotations

import ast
import importlib
import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, get_bitmask_shape
from ..compiler import CompiledGrammar
from ..compiler import compile as _compile
from ..errors import LogitgateError, TokenizerError
from ..grammar import Grammar
from ..matcher import Matcher, fill_next_token_bitmasks
from ..vocab import Tokenizer

# LogitgateBackend, LogitgateGrammar and LogitgateBatchLogitsProcessor are public too, but built on
# first access (importing vLLM), so they are left out of __all__ and dir(): ``import *``, help()
# and other tools that walk the module work without vLLM.
__all__ = [
    "BACKEND_NAME",
    "EXTRA_ARGS_KEY",
    "LogitgateLogitsProcessor",
    "LogitgateConstraint",
    "StructuralTagNotSupportedError",
    "constraint_from_extra_args",
    "grammar_for_request",
    "grammar_is_gbnf",
    "to_logitgate_tokenizer",
    "install",
    "vllm_general_plugin",
]

logger = logging.getLogger(__name__)

BACKEND_NAME = "logitgate"
"""The structured-output backend name logitgate answers to (see ``install``)."""

EXTRA_ARGS_KEY = "logitgate"
"""The ``SamplingParams.extra_args`` key (and ``logitgate_*`` prefix) the V1 logits processor reads."""

_EXTRA_HINT = "pip install 'logitgate[vllm]'"
_JSON_WHITESPACE = ("flexible", "compact", "pretty")
_CONSTRAINT_KINDS = ("json_schema", "json_object", "regex", "lark", "gbnf", "grammar", "choice")
_OPTIONS: dict[str, Any] = {"json_strict": True}
_ROUTED: set[str] = {BACKEND_NAME}


class StructuralTagNotSupportedError(LogitgateError, NotImplementedError, ValueError):
    """A vLLM ``structural_tag`` request: logitgate's vLLM backend does not implement structural tags."""


# ---------------------------------------------------------------------------------------------
# vLLM imports (lazy)
# ---------------------------------------------------------------------------------------------
def _import_vllm(module: str) -> Any:
    """Import a vLLM module, with an install hint when vLLM is missing."""
    try:
        importlib.import_module("vllm")
    except ImportError as e:
        raise ImportError(
            f"logitgate.integrations.vllm needs vLLM (>= 0.10, V1 engine) for this: {_EXTRA_HINT} ({e})"
        ) from e
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"this vLLM has no {module} ({e}); logitgate's adapter is written for vLLM >= 0.10 (V1 engine): "
            f"{_EXTRA_HINT}"
        ) from e


_LAZY_NAMES = ("LogitgateBackend", "LogitgateGrammar", "LogitgateBatchLogitsProcessor")
_classes: dict[str, type] | None = None
_classes_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        return _vllm_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _vllm_classes() -> dict[str, type]:
    """Build (once) the classes that subclass vLLM's interfaces."""
    global _classes
    with _classes_lock:
        if _classes is None:
            _classes = _build_vllm_classes()
        return _classes


def _build_vllm_classes() -> dict[str, type]:
    bt = _import_vllm("vllm.v1.structured_output.backend_types")
    lp = _import_vllm("vllm.v1.sample.logits_processor")

    class LogitgateGrammar(_GrammarLogic, bt.StructuredOutputGrammar):
        """A ``StructuredOutputGrammar`` over one logitgate ``Matcher``."""

        def __init__(self, compiled: CompiledGrammar, *, max_rollback: int = 16) -> None:
            self._init_grammar(compiled, max_rollback)

    @dataclass
    class LogitgateBackend(_BackendLogic, bt.StructuredOutputBackend):
        """A ``StructuredOutputBackend`` compiling requests with logitgate (see the module docs)."""

        _grammar_cls = LogitgateGrammar

        def __post_init__(self) -> None:
            self._setup_backend()

    class LogitgateBatchLogitsProcessor(_BatchLogic, lp.LogitsProcessor):
        """A V1 ``LogitsProcessor`` enforcing the logitgate constraint in each request's
        ``SamplingParams.extra_args`` (see the module docs)."""

        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
            vocab_size = int(vllm_config.model_config.get_vocab_size())
            tok = to_logitgate_tokenizer(_load_vllm_tokenizer(vllm_config), vocab_size)
            max_num_seqs = int(getattr(getattr(vllm_config, "scheduler_config", None), "max_num_seqs", 0) or 256)
            self._init_batch(tok, max_num_seqs=max_num_seqs)

    for cls in (LogitgateGrammar, LogitgateBackend, LogitgateBatchLogitsProcessor):
        # importable (and picklable) as logitgate.integrations.vllm:<name>, via __getattr__
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    return {
        "LogitgateGrammar": LogitgateGrammar,
        "LogitgateBackend": LogitgateBackend,
        "LogitgateBatchLogitsProcessor": LogitgateBatchLogitsProcessor,
    }


def _load_vllm_tokenizer(vllm_config: Any) -> Any:
    """The model's tokenizer, loaded the way vLLM loads it (the API moved between versions)."""
    model_config = vllm_config.model_config
    errors = []
    for module in ("vllm.tokenizers", "vllm.transformers_utils.tokenizer"):
        try:
            fn = importlib.import_module(module).cached_tokenizer_from_config
        except (ImportError, AttributeError) as e:
            errors.append(f"{module}: {e}")
            continue
        for cfg in (model_config, getattr(vllm_config, "renderer_config", None)):
            if cfg is None:
                continue
            try:
                tok = fn(cfg)
            except (TypeError, AttributeError) as e:
                errors.append(f"{module}.cached_tokenizer_from_config: {e}")
                continue
            if tok is None:
                raise ValueError("logitgate needs the model's tokenizer, but vLLM runs with skip_tokenizer_init")
            return tok
    raise ImportError("cannot load the model's tokenizer from this vLLM's config (" + "; ".join(errors) + ")")


# ---------------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------------
_tok_cache: "weakref.WeakKeyDictionary[Any, dict[int | None, Tokenizer]]" = weakref.WeakKeyDictionary()
_tok_cache_lock = threading.Lock()


def _resize(tok: Tokenizer, vocab_size: int | None) -> Tokenizer:
    if vocab_size is None or vocab_size == tok.vocab_size:
        return tok
    return Tokenizer(tok.tokens, eos_token_ids=tok.eos_token_ids, special_ids=tok.special_ids,
                     bos_token_id=tok.bos_token_id, vocab_size=max(int(vocab_size), tok.n_tokens), name=tok.name)


def _is_mistral(tokenizer: Any) -> bool:
    for obj in (tokenizer, getattr(tokenizer, "mistral", None)):
        if obj is not None and type(obj).__module__.startswith("mistral_common"):
            return True
    return type(tokenizer).__name__ == "MistralTokenizer" and hasattr(tokenizer, "tokenizer")


def to_logitgate_tokenizer(tokenizer: Any, vocab_size: int | None = None) -> Tokenizer:
    """A ``logitgate.Tokenizer`` for a vLLM tokenizer: a transformers tokenizer
    (``Tokenizer.from_huggingface(tokenizer, vocab_size=vocab_size)``), vLLM's ``MistralTokenizer``
    or a mistral-common tokenizer (``Tokenizer.from_mistral``), or a ``logitgate.Tokenizer``.

    ``vocab_size`` is the model's (logits) width; when the tokenizer has more tokens than that, the
    tokenizer's own count is used (as vLLM's guidance backend does). Cached per tokenizer object.
    """
    if isinstance(tokenizer, Tokenizer):
        return _resize(tokenizer, vocab_size)
    key = None if vocab_size is None else int(vocab_size)
    try:
        with _tok_cache_lock:
            hit = _tok_cache.get(tokenizer, {}).get(key)
    except TypeError:  # not weak-referenceable or not hashable: no cache
        hit = None
    if hit is not None:
        return hit
    if _is_mistral(tokenizer):
        tok = _resize(Tokenizer.from_mistral(getattr(tokenizer, "mistral", tokenizer)), key)
    else:
        try:
            tok = Tokenizer.from_huggingface(tokenizer, vocab_size=key)
        except TokenizerError as e:
            if key is None or "smaller than the number of tokens" not in str(e):
                raise
            tok = _resize(Tokenizer.from_huggingface(tokenizer), key)
    try:
        with _tok_cache_lock:
            _tok_cache.setdefault(tokenizer, {})[key] = tok
    except TypeError:
        pass
    return tok


# ---------------------------------------------------------------------------------------------
# constraints -> Grammar
# ---------------------------------------------------------------------------------------------
_COMMENT = re.compile(r"(#|//).*$")


def grammar_is_gbnf(text: str) -> bool:
    """True when ``text`` is read as GBNF: some line, with ``#``/``//`` comments removed, contains
    ``::=`` (vLLM's ``grammar_is_likely_lark`` rule, negated). Otherwise it is read as Lark."""
    return any("::=" in _COMMENT.sub("", line) for line in text.split("\n"))


def _choices(spec: Any) -> list[str]:
    if isinstance(spec, str):
        try:
            value = json.loads(spec)
        except json.JSONDecodeError:
            try:
                value = ast.literal_eval(spec)
            except (ValueError, SyntaxError):
                raise ValueError(f"a choice constraint must be a list of strings (or its JSON text), not {spec!r}") \
                    from None
    else:
        value = spec
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"a choice constraint must be a list of strings, not {type(value).__name__}")
    if not value:
        raise ValueError("a choice constraint needs at least one choice")
    return [str(c) for c in value]


def _json_schema_arg(spec: Any) -> Any:
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode("utf-8")
    return spec


@lru_cache(maxsize=256)
def _cached_grammar(kind: str, text: str, whitespace: str, strict: bool) -> Grammar:
    if kind == "json_schema":
        return Grammar.from_json_schema(text, whitespace=whitespace, strict=strict)
    if kind == "json_object":
        return Grammar.from_json_schema({"type": "object"}, whitespace=whitespace, strict=strict)
    if kind == "regex":
        return Grammar.from_regex(text)
    if kind == "lark":
        return Grammar.from_lark(text)
    if kind == "gbnf":
        return Grammar.from_gbnf(text)
    if kind == "choice":
        return Grammar.from_regex("(?:" + "|".join(re.escape(c) for c in json.loads(text)) + ")")
    raise ValueError(f"unknown constraint kind {kind!r}")


def _grammar(kind: str, spec: Any, *, whitespace: str = "flexible", json_strict: bool | None = None) -> Grammar:
    """The ``Grammar`` for one constraint; ``kind`` is one of ``_CONSTRAINT_KINDS``."""
    strict = _OPTIONS["json_strict"] if json_strict is None else bool(json_strict)
    if whitespace not in _JSON_WHITESPACE:
        raise ValueError(f"whitespace must be one of {', '.join(map(repr, _JSON_WHITESPACE))}, not {whitespace!r}")
    if kind == "json_schema":
        spec = _json_schema_arg(spec)
        text = spec if isinstance(spec, str) else json.dumps(spec)
        return _cached_grammar("json_schema", text, whitespace, strict)
    if kind == "json_object":
        return _cached_grammar("json_object", "", whitespace, strict)
    if kind == "choice":
        return _cached_grammar("choice", json.dumps(_choices(spec)), "flexible", True)
    if kind in ("regex", "lark", "gbnf", "grammar"):
        if not isinstance(spec, str):
            raise ValueError(f"a {kind} constraint must be a str, not {type(spec).__name__}")
        if kind == "grammar":
            if not spec.strip():
                raise ValueError("a grammar constraint cannot be empty")
            kind = "gbnf" if grammar_is_gbnf(spec) else "lark"
        return _cached_grammar(kind, spec, "flexible", True)
    raise ValueError(f"unknown constraint kind {kind!r}; expected one of {', '.join(_CONSTRAINT_KINDS)}")


def grammar_for_request(request_type: Any, grammar_spec: Any, *, whitespace: str = "flexible",
                        json_strict: bool | None = None) -> Grammar:
    """The ``Grammar`` for a vLLM structured-output request: ``request_type`` is a
    ``StructuredOutputOptions`` member (or its name), ``grammar_spec`` the spec vLLM passes
    (see the table in the module docs)."""
    name = str(getattr(request_type, "name", request_type)).upper()
    if name.startswith("STRUCTUREDOUTPUTOPTIONS."):
        name = name.split(".", 1)[1]
    if name == "STRUCTURAL_TAG":
        raise StructuralTagNotSupportedError(
            "logitgate's vLLM backend does not support structural tags (StructuredOutputOptions.STRUCTURAL_TAG); "
            "send structural_tag requests to a vLLM engine using the 'xgrammar' or 'guidance' backend")
    kind = {"JSON": "json_schema", "JSON_OBJECT": "json_object", "REGEX": "regex", "GRAMMAR": "grammar",
            "CHOICE": "choice"}.get(name)
    if kind is None:
        raise ValueError(f"unknown structured output request type {request_type!r}")
    return _grammar(kind, grammar_spec, whitespace=whitespace, json_strict=json_strict)


@dataclass(frozen=True)
class LogitgateConstraint:
    """A constraint read from ``SamplingParams.extra_args``: ``kind`` (one of ``json_schema``,
    ``json_object``, ``regex``, ``lark``, ``gbnf``, ``grammar``, ``choice``), ``spec`` and, for the
    JSON kinds, ``whitespace``."""

    kind: str
    spec: Any
    whitespace: str = "flexible"

    def grammar(self) -> Grammar:
        """The ``logitgate.Grammar`` this constraint describes."""
        return _grammar(self.kind, self.spec, whitespace=self.whitespace)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def constraint_from_extra_args(extra_args: Mapping[str, Any] | None) -> LogitgateConstraint | None:
    """The logitgate constraint in a request's ``extra_args`` (``None`` when it has none).

    Reads ``extra_args["logitgate"]`` (a dict, or its JSON text) and the flat ``logitgate_<key>``
    entries; exactly one constraint kind must be given. Raises ``ValueError`` for anything else.
    """
    if not extra_args:
        return None
    options: dict[str, Any] = {}
    raw = extra_args.get(EXTRA_ARGS_KEY)
    if raw is not None:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}] must be a dict or its JSON text: {e}") from None
        if not isinstance(raw, Mapping):
            raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}] must be a dict, not {type(raw).__name__}")
        options.update(raw)
    prefix = EXTRA_ARGS_KEY + "_"
    for key, value in extra_args.items():
        if isinstance(key, str) and key.startswith(prefix):
            sub = key[len(prefix):]
            if sub in options:
                raise ValueError(f"the logitgate option {sub!r} is given twice (in extra_args[{EXTRA_ARGS_KEY!r}] "
                                 f"and as {key!r})")
            options[sub] = value
    if not options:
        return None
    unknown = sorted(set(options) - set(_CONSTRAINT_KINDS) - {"whitespace"})
    if unknown:
        raise ValueError(f"unknown logitgate option(s) {unknown}; expected one of {', '.join(_CONSTRAINT_KINDS)} "
                         "(and 'whitespace' for JSON)")
    kinds = [k for k in _CONSTRAINT_KINDS if k in options
             and (_truthy(options[k]) if k == "json_object" else options[k] is not None)]
    if len(kinds) != 1:
        raise ValueError(f"give exactly one logitgate constraint ({', '.join(_CONSTRAINT_KINDS)}); got "
                         f"{kinds or 'none'}")
    kind = kinds[0]
    whitespace = options.get("whitespace")
    if whitespace is not None and kind not in ("json_schema", "json_object"):
        raise ValueError(f"the logitgate option 'whitespace' applies to json_schema/json_object, not {kind}")
    whitespace = "flexible" if whitespace is None else str(whitespace)
    if whitespace not in _JSON_WHITESPACE:
        raise ValueError(f"whitespace must be one of {', '.join(map(repr, _JSON_WHITESPACE))}, not {whitespace!r}")
    return LogitgateConstraint(kind, options[kind], whitespace)


def _eos_mask(tokenizer: Tokenizer) -> np.ndarray:
    """A bitmask row allowing only the tokenizer's EOS ids."""
    words = np.zeros(get_bitmask_shape(1, tokenizer.vocab_size)[1], dtype=np.uint32)
    for e in tokenizer.eos_token_ids:
        words[e >> 5] |= np.uint32(1 << (e & 31))
    return words.view(np.int32)


# ---------------------------------------------------------------------------------------------
# structured-output backend logic (mixed into the vLLM subclasses)
# ---------------------------------------------------------------------------------------------
def _structured_outputs_config(vllm_config: Any) -> Any:
    return (getattr(vllm_config, "structured_outputs_config", None)
            or getattr(vllm_config, "decoding_config", None))


class _GrammarLogic:
    """The ``StructuredOutputGrammar`` methods over a ``Matcher``.

    Mirrors vLLM's xgrammar backend: tokens after EOS (termination) are ignored and
    ``accept_tokens`` then answers True; ``-1`` entries (speculative padding) end a token list;
    ``rollback`` undoes tokens, EOS included. Unlike xgrammar, a refused token leaves the grammar
    unchanged (no partial advance).
    """

    compiled: CompiledGrammar
    matcher: Matcher
    num_processed_tokens: int

    def _init_grammar(self, compiled: CompiledGrammar, max_rollback: int) -> None:
        self.compiled = compiled
        self.matcher = Matcher(compiled, max_rollback=max_rollback)
        self.vocab_size = compiled.tokenizer.vocab_size
        self.num_processed_tokens = 0

    @staticmethod
    def _step(m: Matcher, token: int) -> bool:
        try:
            return m.accept_token(token)
        except IndexError:
            return False

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        m = self.matcher
        if m.is_terminated():
            return True
        # atomic: on a refused token undo the accepted ones (by rollback when the history holds
        # them, else by working on a fork)
        work = m if 0 <= len(tokens) <= m.max_rollback or m.max_rollback < 0 else m.fork()
        done = 0
        for t in tokens:
            t = int(t)
            if t < 0:
                break
            if not self._step(work, t):
                if work is m and done:
                    m.rollback(done)
                logger.warning("logitgate: request %s: token %d is not allowed by its constraint", request_id, t)
                return False
            done += 1
            if work.is_terminated():
                break
        self.matcher = work
        self.num_processed_tokens += done
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        if self.matcher.is_terminated():
            return []
        trial = self.matcher.fork()
        accepted: list[int] = []
        for t in tokens:
            t = int(t)
            if t < 0 or not self._step(trial, t):
                break
            accepted.append(t)
            if trial.is_terminated():
                break
        return accepted

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        self.matcher.rollback(num_tokens)
        self.num_processed_tokens = max(0, self.num_processed_tokens - num_tokens)

    def fill_bitmask(self, bitmask: Any, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, idx)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.num_processed_tokens = 0

    def find_jump_string(self) -> str | None:
        """The text every continuation starts with (None when there is a choice)."""
        data = self.matcher.find_jump_forward_bytes()
        text = data.decode("utf-8", errors="ignore")
        return text or None


class _BackendLogic:
    """The ``StructuredOutputBackend`` methods; expects ``vllm_config``, ``tokenizer`` and
    ``vocab_size`` (the dataclass fields of vLLM's base class)."""

    vllm_config: Any
    tokenizer: Any
    vocab_size: int
    _grammar_cls: type

    def _setup_backend(self) -> None:
        self.lg_tokenizer = to_logitgate_tokenizer(self.tokenizer, self.vocab_size)
        so_config = _structured_outputs_config(self.vllm_config)
        self.json_whitespace = "compact" if getattr(so_config, "disable_any_whitespace", False) else "flexible"
        spec = getattr(self.vllm_config, "speculative_config", None)
        num_spec = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
        self.max_rollback = max(16, 2 * (num_spec + 1))
        self._stop_variants: dict[frozenset[int], Tokenizer] = {}

    def _tokenizer_for(self, stop_token_ids: Any) -> Tokenizer:
        tok = self.lg_tokenizer
        if not stop_token_ids:
            return tok
        stops = frozenset(int(t) for t in stop_token_ids if 0 <= int(t) < tok.n_tokens)
        if not stops or stops == frozenset(tok.eos_token_ids):
            return tok
        hit = self._stop_variants.get(stops)
        if hit is None:
            hit = Tokenizer(tok.tokens, eos_token_ids=sorted(stops), special_ids=tok.special_ids,
                            bos_token_id=tok.bos_token_id, vocab_size=tok.vocab_size, name=tok.name)
            self._stop_variants[stops] = hit
        return hit

    def compile_grammar(self, request_type: Any, grammar_spec: Any, stop_token_ids: Any = None) -> Any:
        grammar = grammar_for_request(request_type, grammar_spec, whitespace=self.json_whitespace)
        compiled = _compile(grammar, self._tokenizer_for(stop_token_ids))
        return self._grammar_cls(compiled, max_rollback=self.max_rollback)

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        import torch

        return torch.full(get_bitmask_shape(max_num_seqs, self.lg_tokenizer.vocab_size), -1, dtype=torch.int32)

    def destroy(self) -> None:
        self._stop_variants = {}


# ---------------------------------------------------------------------------------------------
# V1 batch logits processor logic
# ---------------------------------------------------------------------------------------------
class _RowState:
    """One batch row: its matcher and the live list of its output tokens."""

    __slots__ = ("matcher", "output_ids", "consumed", "error")

    def __init__(self, matcher: Matcher | None, output_ids: Sequence[int], error: str | None = None) -> None:
        self.matcher = matcher
        self.output_ids = output_ids
        self.consumed = 0
        self.error = error

    def sync(self) -> None:
        """Advance the matcher over the output tokens it has not seen yet."""
        if self.error is not None or self.matcher is None:
            return
        ids = self.output_ids
        n = len(ids)
        if n < self.consumed:  # the list was replaced or cut: start over
            self.matcher.reset()
            self.consumed = 0
        m = self.matcher
        while self.consumed < n:
            t = int(ids[self.consumed])
            if t < 0:  # a placeholder (async scheduling): wait for the real token
                return
            try:
                ok = m.accept_token(t)
            except IndexError:
                ok = False
            if not ok:
                self.error = f"token {t} at output position {self.consumed} is not allowed by the constraint"
                logger.warning("logitgate: %s; only EOS is allowed from now on", self.error)
                return
            self.consumed += 1


def _is_swap(direction: Any) -> bool:
    return str(getattr(direction, "name", direction)).upper().endswith("SWAP")


class _BatchLogic:
    """The V1 ``LogitsProcessor`` methods; ``_init_batch`` sets the state."""

    tokenizer: Tokenizer
    rows: dict[int, _RowState]

    def _init_batch(self, tokenizer: Tokenizer, *, max_num_seqs: int = 256) -> None:
        self.tokenizer = tokenizer
        self.rows = {}
        self._bitmask = allocate_token_bitmask(max(1, int(max_num_seqs)), tokenizer.vocab_size)
        self._eos_only = _eos_mask(tokenizer)

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Raise ``ValueError`` when the request's logitgate constraint is malformed."""
        constraint = constraint_from_extra_args(getattr(sampling_params, "extra_args", None))
        if constraint is not None:
            constraint.grammar()

    def is_argmax_invariant(self) -> bool:
        return False  # masking can remove the most likely token

    def needs_output_token_ids(self) -> bool:
        return True  # the matchers follow the actual sampled tokens

    def _new_row(self, params: Any, output_ids: Sequence[int]) -> _RowState | None:
        try:
            constraint = constraint_from_extra_args(getattr(params, "extra_args", None))
            if constraint is None:
                return None
            compiled = _compile(constraint.grammar(), self.tokenizer)
        except Exception as e:  # noqa: BLE001 -- vLLM versions without validate_params let bad requests
            # through, and raising here would stop the whole engine
            logger.error("logitgate: bad constraint (%s); the request will be ended with EOS", e)
            return _RowState(None, output_ids, error=str(e))
        return _RowState(Matcher(compiled, max_rollback=0), output_ids)

    def update_state(self, batch_update: Any) -> None:
        """Apply a ``BatchUpdate`` (removed, then added, then moved, as vLLM documents), then
        advance every row's matcher over its new output tokens."""
        rows = self.rows
        if batch_update is not None:
            for index in batch_update.removed:
                rows.pop(index, None)
            for added in batch_update.added:
                # (index, params, prompt_ids, output_ids); older vLLM (0.9.x docs): (index, params, output_ids)
                index, params, output_ids = added[0], added[1], added[-1]
                state = self._new_row(params, output_ids) if params is not None else None
                if state is None:
                    rows.pop(index, None)  # the new request replaces whatever was there
                else:
                    rows[index] = state
            for a, b, direction in batch_update.moved:
                state_a = rows.pop(a, None)
                state_b = rows.pop(b, None)
                if state_a is not None:
                    rows[b] = state_a
                if state_b is not None and _is_swap(direction):
                    rows[a] = state_b
        for state in rows.values():
            state.sync()

    def apply(self, logits: Any) -> Any:
        if not self.rows:
            return logits
        n = int(logits.shape[0])
        active = sorted(i for i in self.rows if i < n)
        if not active:
            return logits
        if self._bitmask.shape[0] < n:
            self._bitmask = allocate_token_bitmask(n, self.tokenizer.vocab_size)
        bm = self._bitmask
        matchers, indices = [], []
        for i in active:
            state = self.rows[i]
            if state.error is not None or state.matcher is None:
                bm[i] = self._eos_only
            else:
                matchers.append(state.matcher)
                indices.append(i)
        if matchers:
            fill_next_token_bitmasks(matchers, bm, indices)
        apply_token_bitmask_inplace(logits, bm[:n], indices=active)
        return logits


# ---------------------------------------------------------------------------------------------
# per-request processor
# ---------------------------------------------------------------------------------------------
class LogitgateLogitsProcessor:
    """A per-request logits processor ``fn(token_ids, logits) -> logits``.

    ``constraint``: a ``CompiledGrammar`` (then ``tokenizer`` is not needed), a ``Grammar``, a
    ``LogitgateConstraint``, or a dict like ``{"regex": ...}`` (the ``extra_args["logitgate"]``
    format). ``tokenizer``: a ``logitgate.Tokenizer`` or a vLLM/transformers/mistral-common
    tokenizer; ``vocab_size``: the logits width when it differs from the tokenizer's.

    ``token_ids`` are the tokens generated so far; the processor advances over the new ones (and
    starts over when they do not extend what it saw), then sets the logits of every token the
    constraint does not allow next to ``-inf`` in place (torch tensor or numpy array, one row).
    A token the constraint refuses is logged and from then on only EOS is allowed.
    """

    def __init__(self, constraint: Any, tokenizer: Any = None, *, vocab_size: int | None = None) -> None:
        if isinstance(constraint, CompiledGrammar):
            compiled = constraint
        else:
            if tokenizer is None:
                raise TypeError("LogitgateLogitsProcessor needs a tokenizer unless the constraint is a CompiledGrammar")
            if isinstance(constraint, Grammar):
                grammar = constraint
            elif isinstance(constraint, LogitgateConstraint):
                grammar = constraint.grammar()
            elif isinstance(constraint, Mapping):
                parsed = constraint_from_extra_args({EXTRA_ARGS_KEY: dict(constraint)})
                if parsed is None:
                    raise ValueError("the constraint dict is empty")
                grammar = parsed.grammar()
            else:
                raise TypeError(f"unsupported constraint type {type(constraint).__name__}: give a CompiledGrammar, "
                                "a Grammar, a LogitgateConstraint or a dict like {'regex': ...}")
            compiled = _compile(grammar, to_logitgate_tokenizer(tokenizer, vocab_size))
        self.compiled = compiled
        self.matcher = Matcher(compiled, max_rollback=0)
        self._bitmask = allocate_token_bitmask(1, compiled.tokenizer.vocab_size)
        self._eos_only = _eos_mask(compiled.tokenizer)
        self._seen = 0
        self._last: int | None = None
        self.error: str | None = None

    def clone(self) -> "LogitgateLogitsProcessor":
        """A fresh processor for another sequence (same compiled constraint)."""
        return LogitgateLogitsProcessor(self.compiled)

    def reset(self) -> None:
        """Start over: a fresh matcher state, no tokens seen, no error."""
        self.matcher.reset()
        self._seen = 0
        self._last = None
        self.error = None

    def _sync(self, token_ids: Any) -> None:
        ids = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        n = len(ids)
        # the tokens extend what was seen (checked by length and the last seen token), or start over
        if n < self._seen or (self._seen and int(ids[self._seen - 1]) != self._last):
            self.reset()
        m = self.matcher
        while self._seen < n and self.error is None:
            t = int(ids[self._seen])
            try:
                ok = m.accept_token(t)
            except IndexError:
                ok = False
            if not ok:
                self.error = f"token {t} at position {self._seen} is not allowed by the constraint"
                logger.warning("logitgate: %s; only EOS is allowed from now on", self.error)
                break
            self._seen += 1
            self._last = t

    def __call__(self, token_ids: Any, logits: Any) -> Any:
        self._sync(token_ids)
        if self.error is not None:
            self._bitmask[0] = self._eos_only
        else:
            self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        apply_token_bitmask_inplace(logits, self._bitmask[0])
        return logits


# ---------------------------------------------------------------------------------------------
# install(): route vLLM's structured-output backend selection to logitgate
# ---------------------------------------------------------------------------------------------
_install_lock = threading.Lock()


def _request_backend(request: Any) -> str | None:
    sp = getattr(request, "sampling_params", None)
    so = getattr(sp, "structured_outputs", None) or getattr(sp, "guided_decoding", None)
    if so is None:
        return None
    return getattr(so, "_backend", None) or getattr(so, "backend", None)


def _structured_output_key(so: Any) -> tuple[str, Any]:
    """(request type name, spec) of vLLM structured-output params, in vLLM's own precedence."""
    if getattr(so, "json", None) is not None:
        return "JSON", so.json
    if getattr(so, "json_object", None):
        return "JSON_OBJECT", ""
    if getattr(so, "regex", None) is not None:
        return "REGEX", so.regex
    if getattr(so, "choice", None) is not None:
        return "CHOICE", so.choice
    if getattr(so, "grammar", None) is not None:
        return "GRAMMAR", so.grammar
    if getattr(so, "structural_tag", None) is not None:
        return "STRUCTURAL_TAG", so.structural_tag
    raise ValueError("the request has no structured output constraint")


def _patch_engine() -> bool:
    mod = _import_vllm("vllm.v1.structured_output")
    manager = getattr(mod, "StructuredOutputManager", None)
    original = getattr(manager, "grammar_init", None)
    if original is None:
        logger.warning("logitgate.install: this vLLM has no StructuredOutputManager.grammar_init; engine not patched")
        return False
    if getattr(original, "_logitgate", False):
        return True

    def grammar_init(self: Any, request: Any) -> Any:
        if (self.backend is None and getattr(request, "structured_output_request", None) is not None
                and _request_backend(request) in _ROUTED):
            tokenizer = getattr(self, "tokenizer", None)
            if tokenizer is None:
                tokenizer = _load_vllm_tokenizer(self.vllm_config)
            self.backend = _vllm_classes()["LogitgateBackend"](
                self.vllm_config, tokenizer=tokenizer, vocab_size=self.vllm_config.model_config.get_vocab_size())
        return original(self, request)

    grammar_init._logitgate = True  # type: ignore[attr-defined]
    grammar_init.__wrapped__ = original  # type: ignore[attr-defined]
    manager.grammar_init = grammar_init
    return True


def _patch_frontend() -> bool:
    patched = False
    candidates = (("vllm.v1.engine.input_processor", "InputProcessor"),  # vLLM >= 0.11
                  ("vllm.v1.engine.processor", "Processor"))  # vLLM 0.10.x
    for module, name in candidates:
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        original = getattr(cls, "_validate_structured_output", None)
        if original is None:
            continue
        patched = True
        if getattr(original, "_logitgate", False):
            continue

        def _validate_structured_output(self: Any, params: Any, _original: Any = original) -> Any:
            cfg = (getattr(self, "structured_outputs_config", None) or getattr(self, "decoding_config", None)
                   or _structured_outputs_config(getattr(self, "vllm_config", None)))
            engine_backend = getattr(cfg, "backend", None) or getattr(cfg, "guided_decoding_backend", None)
            so = getattr(params, "structured_outputs", None)
            field = "_backend"
            if so is None and hasattr(params, "guided_decoding"):
                so, field = params.guided_decoding, "backend"
            if not so or engine_backend not in _ROUTED:
                return _original(self, params)
            if getattr(getattr(self, "model_config", None), "skip_tokenizer_init", False):
                raise ValueError("Structured outputs requires a tokenizer so it can't be used with "
                                 "'skip_tokenizer_init'")
            ws = "compact" if getattr(cfg, "disable_any_whitespace", False) else "flexible"
            grammar_for_request(*_structured_output_key(so), whitespace=ws)  # raises ValueError when bad
            setattr(so, field, BACKEND_NAME)
            post_init = getattr(so, "__post_init__", None)
            if callable(post_init):
                post_init()
            return None

        _validate_structured_output._logitgate = True  # type: ignore[attr-defined]
        _validate_structured_output.__wrapped__ = original  # type: ignore[attr-defined]
        cls._validate_structured_output = _validate_structured_output
    if not patched:
        logger.warning("logitgate.install: no vLLM input processor with _validate_structured_output found; requests "
                       "are validated by vLLM's rules for the configured backend name")
    return patched


def install(*, replace: str | Sequence[str] = (), json_strict: bool = True) -> dict[str, bool]:
    """Route vLLM's structured-output backend selection to logitgate, in this process.

    ``replace``: vLLM backend names (``"auto"``, ``"xgrammar"``, ``"guidance"``, ...) whose
    requests logitgate takes over; requests already marked with the backend ``"logitgate"`` are
    always routed. ``json_strict``: compile JSON schemas with ``strict=True`` (refuse what cannot be
    enforced exactly) or ``False`` (over-approximate). Idempotent; see the module docs for where it
    must run. Returns which patches were applied: ``{"engine": ..., "frontend": ...}``.
    """
    names = {replace} if isinstance(replace, str) else set(replace)
    with _install_lock:
        _vllm_classes()  # fails early, with the install hint, when vLLM is missing
        _ROUTED.update(str(n) for n in names)
        _OPTIONS["json_strict"] = bool(json_strict)
        return {"engine": _patch_engine(), "frontend": _patch_frontend()}


def vllm_general_plugin() -> None:
    """Entry point for vLLM's ``vllm.general_plugins`` group (run by vLLM in each of its
    processes): ``install(replace=...)`` with the comma-separated names in
    ``$LOGITGATE_VLLM_REPLACE``. Unset or empty: nothing is patched, so having logitgate installed
    never changes a vLLM that was not asked to use it."""
    names = [n.strip() for n in os.environ.get("LOGITGATE_VLLM_REPLACE", "").split(",") if n.strip()]
    if names:
        install(replace=names)
