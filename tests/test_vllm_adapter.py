"""The vLLM adapter (logitgate.integrations.vllm), tested short of vLLM itself.

vLLM is not installed here (CUDA-only), so a minimal stand-in ``vllm`` package is put in
``sys.modules`` with the few interfaces the adapter subclasses or patches, copied in shape from
vLLM's ``vllm/v1/structured_output/backend_types.py`` and
``vllm/v1/sample/logits_processor/interface.py``. The tokenizers are real: mistral-common's
``tokenizer.model.v1`` loaded by transformers (the kind of object vLLM hands a backend), by
mistral-common (wrapped like vLLM's ``MistralTokenizer``) and by logitgate.
"""
from __future__ import annotations

import enum
import importlib
import inspect
import pickle
import re
import shutil
import subprocess
import sys
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import pytest

import logitgate
from logitgate import Grammar, Matcher, bitmask_to_bool
from logitgate.integrations import vllm as adapter

from .conftest import mistral_file

torch = pytest.importorskip("torch")

MODEL_VOCAB = 32064  # the model's logits are wider than the tokenizer's 32000 ids (padding)


# ---------------------------------------------------------------------------------------------
# stand-ins for vLLM
# ---------------------------------------------------------------------------------------------
def _fake_vllm_modules() -> dict[str, types.ModuleType]:
    mods: dict[str, types.ModuleType] = {}

    def module(name: str, package: bool = False) -> types.ModuleType:
        m = types.ModuleType(name)
        if package:
            m.__path__ = []  # type: ignore[attr-defined]
        mods[name] = m
        return m

    module("vllm", True)
    module("vllm.v1", True)
    so_pkg = module("vllm.v1.structured_output", True)
    bt = module("vllm.v1.structured_output.backend_types")
    module("vllm.v1.sample", True)
    lp = module("vllm.v1.sample.logits_processor")
    module("vllm.v1.engine", True)
    ip = module("vllm.v1.engine.input_processor")

    class StructuredOutputOptions(enum.Enum):
        JSON = enum.auto()
        JSON_OBJECT = enum.auto()
        REGEX = enum.auto()
        GRAMMAR = enum.auto()
        CHOICE = enum.auto()
        STRUCTURAL_TAG = enum.auto()

    class StructuredOutputGrammar(ABC):
        @abstractmethod
        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool: ...
        @abstractmethod
        def validate_tokens(self, tokens: list[int]) -> list[int]: ...
        @abstractmethod
        def rollback(self, num_tokens: int) -> None: ...
        @abstractmethod
        def fill_bitmask(self, bitmask: Any, batch_index: int) -> None: ...
        @abstractmethod
        def is_terminated(self) -> bool: ...
        @abstractmethod
        def reset(self): ...

    @dataclass
    class StructuredOutputBackend(ABC):
        vllm_config: Any
        tokenizer: Any
        vocab_size: int

        @abstractmethod
        def compile_grammar(self, request_type: Any, grammar_spec: str) -> StructuredOutputGrammar: ...
        @abstractmethod
        def allocate_token_bitmask(self, max_num_seqs: int) -> Any: ...
        @abstractmethod
        def destroy(self): ...

    bt.StructuredOutputOptions = StructuredOutputOptions
    bt.StructuredOutputGrammar = StructuredOutputGrammar
    bt.StructuredOutputBackend = StructuredOutputBackend

    class MoveDirectionality(enum.Enum):
        UNIDIRECTIONAL = enum.auto()
        SWAP = enum.auto()

    @dataclass(frozen=True)
    class BatchUpdate:
        batch_size: int
        removed: Sequence[int]
        added: Sequence[tuple]
        moved: Sequence[tuple]

    class LogitsProcessor(ABC):
        @classmethod
        def validate_params(cls, sampling_params: Any):
            return None

        @abstractmethod
        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None: ...
        @abstractmethod
        def apply(self, logits: Any) -> Any: ...
        @abstractmethod
        def is_argmax_invariant(self) -> bool: ...
        @abstractmethod
        def update_state(self, batch_update: Any) -> None: ...

    lp.MoveDirectionality = MoveDirectionality
    lp.BatchUpdate = BatchUpdate
    lp.LogitsProcessor = LogitsProcessor

    # the two methods install() wraps, reduced to what matters: the manager only knows its own
    # backends; the input processor validates with (and sets) the configured backend
    class StructuredOutputManager:
        def __init__(self, vllm_config: Any, tokenizer: Any) -> None:
            self.vllm_config = vllm_config
            self.tokenizer = tokenizer
            self.backend = None

        def grammar_init(self, request: Any) -> None:
            if self.backend is None:
                name = request.sampling_params.structured_outputs._backend
                raise ValueError(f"Unsupported structured output backend: {name}")
            key = request.structured_output_request.structured_output_key
            request.structured_output_request.grammar = self.backend.compile_grammar(*key)

    so_pkg.StructuredOutputManager = StructuredOutputManager

    class InputProcessor:
        def __init__(self, backend: str) -> None:
            self.structured_outputs_config = SimpleNamespace(backend=backend, disable_any_whitespace=False)
            self.model_config = SimpleNamespace(skip_tokenizer_init=False)
            self.original_calls = 0

        def _validate_structured_output(self, params: Any) -> None:
            self.original_calls += 1
            if not params.structured_outputs:
                return
            backend = self.structured_outputs_config.backend
            params.structured_outputs._backend = "xgrammar" if backend == "auto" else backend

    ip.InputProcessor = InputProcessor
    return mods


@pytest.fixture
def fake_vllm(monkeypatch):
    """The stand-in ``vllm`` package, with the adapter's lazily built classes rebuilt from it."""
    mods = _fake_vllm_modules()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(adapter, "_classes", None)
    monkeypatch.setattr(adapter, "_ROUTED", {adapter.BACKEND_NAME})
    monkeypatch.setattr(adapter, "_OPTIONS", {"json_strict": True})
    return SimpleNamespace(**{name.rsplit(".", 1)[-1]: mod for name, mod in mods.items()})


def vllm_config(*, disable_any_whitespace: bool = False, num_speculative_tokens: int | None = None,
                max_num_seqs: int = 4) -> SimpleNamespace:
    return SimpleNamespace(
        structured_outputs_config=SimpleNamespace(backend="auto", disable_any_whitespace=disable_any_whitespace),
        speculative_config=None if num_speculative_tokens is None
        else SimpleNamespace(num_speculative_tokens=num_speculative_tokens),
        model_config=SimpleNamespace(get_vocab_size=lambda: MODEL_VOCAB, skip_tokenizer_init=False),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
    )


# ---------------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_tok(tmp_path_factory):
    """A transformers tokenizer built offline from mistral-common's SentencePiece model."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf_llama_tok")
    shutil.copy(mistral_file("tokenizer.model.v1"), folder / "tokenizer.model")
    tok = transformers.LlamaTokenizer.from_pretrained(str(folder))
    assert len(tok) == 32000
    return tok


class VllmMistralLike:
    """Shaped like vLLM's ``MistralTokenizer`` wrapper: ``.mistral`` and ``.tokenizer``."""

    def __init__(self, mistral: Any) -> None:
        self.mistral = mistral
        self.tokenizer = mistral.instruct_tokenizer.tokenizer

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_id


@pytest.fixture(scope="module")
def mistral_tok():
    mt = pytest.importorskip("mistral_common.tokens.tokenizers.mistral")
    return VllmMistralLike(mt.MistralTokenizer.from_file(str(mistral_file("tokenizer.model.v1"))))


@pytest.fixture(scope="module")
def tok(tok_spm):
    """logitgate's own reading of the same vocabulary, at the model's width."""
    return adapter.to_logitgate_tokenizer(tok_spm, MODEL_VOCAB)


def tid(tok: logitgate.Tokenizer, text: str) -> int:
    data = text.encode()
    for i, t in enumerate(tok.tokens):
        if t == data and i not in tok.special_ids:
            return i
    raise AssertionError(f"no token for {text!r}")


def mask_of(m: Matcher) -> np.ndarray:
    bm = logitgate.allocate_token_bitmask(1, m.compiled.tokenizer.vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    return bm[0].copy()


def allowed_of(m: Matcher) -> np.ndarray:
    return bitmask_to_bool(mask_of(m), MODEL_VOCAB)


# ---------------------------------------------------------------------------------------------
# import behaviour
# ---------------------------------------------------------------------------------------------
def test_importing_logitgate_and_the_adapter_never_imports_vllm():
    code = ("import sys, logitgate, logitgate.integrations.vllm as v; "
            "assert 'vllm' not in sys.modules, 'vllm imported'; "
            "assert callable(v.LogitgateLogitsProcessor); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_vllm_classes_without_vllm_raise_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # "import vllm" now fails
    monkeypatch.setattr(adapter, "_classes", None)
    for name in ("LogitgateBackend", "LogitgateGrammar", "LogitgateBatchLogitsProcessor"):
        with pytest.raises(ImportError, match=re.escape("pip install 'logitgate[vllm]'")):
            getattr(adapter, name)
    with pytest.raises(ImportError, match=re.escape("logitgate[vllm]")):
        adapter.install()
    with pytest.raises(AttributeError):
        adapter.NoSuchThing  # noqa: B018
    assert adapter._classes is None
    # tools that walk the module still work without vLLM
    import pydoc

    assert "LogitgateLogitsProcessor" in pydoc.render_doc(adapter)
    namespace: dict[str, Any] = {}
    exec("from logitgate.integrations.vllm import *", namespace)
    assert "install" in namespace and "LogitgateBackend" not in namespace


def test_lazy_classes_subclass_vllm_interfaces_and_resolve_by_qualified_name(fake_vllm):
    bt, lp = fake_vllm.backend_types, fake_vllm.logits_processor
    backend_cls = adapter.LogitgateBackend
    assert issubclass(backend_cls, bt.StructuredOutputBackend)
    assert issubclass(adapter.LogitgateGrammar, bt.StructuredOutputGrammar)
    assert issubclass(adapter.LogitgateBatchLogitsProcessor, lp.LogitsProcessor)
    for cls in (backend_cls, adapter.LogitgateGrammar, adapter.LogitgateBatchLogitsProcessor):
        assert not getattr(cls, "__abstractmethods__", None), cls
        # what vLLM does with "logitgate.integrations.vllm:LogitgateBatchLogitsProcessor"
        module, qualname = f"{cls.__module__}:{cls.__qualname__}".split(":")
        assert getattr(importlib.import_module(module), qualname) is cls
        assert pickle.loads(pickle.dumps(cls)) is cls
    assert adapter.__all__ and "LogitgateBackend" not in adapter.__all__  # reachable, but not for import *


# ---------------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------------
def test_tokenizer_from_vllm_tokenizers(hf_tok, mistral_tok, tok_spm):
    from_hf = adapter.to_logitgate_tokenizer(hf_tok, MODEL_VOCAB)
    assert from_hf.vocab_size == MODEL_VOCAB and from_hf.n_tokens == 32000
    assert from_hf.tokens == tok_spm.tokens and from_hf.eos_token_ids == tok_spm.eos_token_ids
    assert adapter.to_logitgate_tokenizer(hf_tok, MODEL_VOCAB) is from_hf  # cached per tokenizer
    from_mistral = adapter.to_logitgate_tokenizer(mistral_tok, MODEL_VOCAB)
    assert from_mistral.tokens == tok_spm.tokens and from_mistral.vocab_size == MODEL_VOCAB
    assert from_mistral.fingerprint == from_hf.fingerprint
    # a model narrower than the tokenizer keeps every token id
    assert adapter.to_logitgate_tokenizer(tok_spm, 100).vocab_size == 32000
    assert adapter.to_logitgate_tokenizer(tok_spm) is tok_spm


# ---------------------------------------------------------------------------------------------
# the structured-output backend
# ---------------------------------------------------------------------------------------------
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer"}}, "required": ["name", "age"]}
LARK = 'start: "a"+ NUM\nNUM: /[0-9]+/'
GBNF = 'root ::= "(" [0-9]+ ")"  # a GBNF comment\n'

CASES = [
    ("JSON", '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": '
             '{"type": "integer"}}, "required": ["name", "age"]}',
     lambda: Grammar.from_json_schema(SCHEMA, whitespace="flexible")),
    ("JSON_OBJECT", "", lambda: Grammar.from_json_schema({"type": "object"}, whitespace="flexible")),
    ("REGEX", r"[0-9]{2}-[a-z]{2,5}", lambda: Grammar.from_regex(r"[0-9]{2}-[a-z]{2,5}")),
    ("GRAMMAR", GBNF, lambda: Grammar.from_gbnf(GBNF)),
    ("GRAMMAR", LARK, lambda: Grammar.from_lark(LARK)),
]


@pytest.mark.parametrize("request_type, spec, expected", CASES, ids=["json", "json_object", "regex", "gbnf", "lark"])
def test_backend_masks_equal_a_plain_matcher(fake_vllm, hf_tok, tok, request_type, spec, expected):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(), tokenizer=hf_tok, vocab_size=MODEL_VOCAB)
    grammar = backend.compile_grammar(options[request_type], spec)
    assert isinstance(grammar, fake_vllm.backend_types.StructuredOutputGrammar)
    plain = Matcher(logitgate.compile(expected(), tok))

    bitmask = backend.allocate_token_bitmask(4)
    assert bitmask.dtype == torch.int32 and tuple(bitmask.shape) == (4, (MODEL_VOCAB + 31) // 32)
    assert bool((bitmask == -1).all())
    eos = tok.eos_token_ids[0]
    rng = np.random.default_rng(7)
    for step in range(10):
        grammar.fill_bitmask(bitmask, 2)
        got = bitmask[2].numpy().copy()
        assert np.array_equal(got, mask_of(plain)), f"step {step}"
        assert bool((bitmask[[0, 1, 3]] == -1).all())  # other rows untouched
        allowed = np.flatnonzero(bitmask_to_bool(got, MODEL_VOCAB))
        assert allowed.size and allowed.max() < 32000  # padding ids never allowed
        choices = [t for t in allowed if t != eos] or [eos]
        t = int(rng.choice(choices))
        assert grammar.accept_tokens("req", [t]) and plain.accept_token(t)
        assert grammar.num_processed_tokens == step + 1
        if plain.is_terminated():
            break
    assert grammar.is_terminated() == plain.is_terminated()


def test_backend_choice_and_whitespace(fake_vllm, hf_tok):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(), tokenizer=hf_tok, vocab_size=MODEL_VOCAB)
    choice = backend.compile_grammar(options.CHOICE, '["yes", "no", "a+b", "x y.z"]')
    for text in ("yes", "no", "a+b", "x y.z"):
        m = choice.matcher.fork()
        assert m.accept_string(text) and m.is_accepting(), text
    for text in ("ab", "a", "x yz", "yesno", "x y.zz"):
        m = choice.matcher.fork()
        assert not (m.accept_string(text) and m.is_accepting()), text
    # a Python-literal list, as the outlines backend accepts
    assert backend.compile_grammar(options.CHOICE, "['yes', 'no']").matcher.fork().accept_string("no")
    # vLLM's default: any JSON whitespace; disable_any_whitespace: compact
    flexible = backend.compile_grammar(options.JSON, '{"type": "object"}')
    assert flexible.matcher.fork().accept_string('{ "a" : 1 }')
    compact_backend = adapter.LogitgateBackend(vllm_config(disable_any_whitespace=True), tokenizer=hf_tok,
                                               vocab_size=MODEL_VOCAB)
    compact = compact_backend.compile_grammar(options.JSON_OBJECT, "")
    assert not compact.matcher.fork().accept_string("{ ")
    assert compact.matcher.fork().accept_string('{"a":1}')
    # JSON_OBJECT is an object (as in vLLM's xgrammar/guidance backends), not any JSON value
    assert not compact.matcher.fork().accept_string("[")


def test_grammar_accept_validate_rollback_terminate(fake_vllm, hf_tok, tok):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(), tokenizer=hf_tok, vocab_size=MODEL_VOCAB)
    g = backend.compile_grammar(options.REGEX, "[0-9]{3}")
    d1, d2, d3, a = tid(tok, "1"), tid(tok, "2"), tid(tok, "3"), tid(tok, "a")
    eos = tok.eos_token_ids[0]
    compiled = logitgate.compile(Grammar.from_regex("[0-9]{3}"), tok)

    def after(*ids: int) -> np.ndarray:
        m = Matcher(compiled)
        for t in ids:
            assert m.accept_token(t)
        return mask_of(m)

    def mask() -> np.ndarray:
        bm = backend.allocate_token_bitmask(1)
        g.fill_bitmask(bm, 0)
        return bm[0].numpy().copy()

    initial = mask()
    assert np.array_equal(initial, after())
    # validate: longest accepted prefix, stops after EOS, at -1 padding, at a refused or out-of-range id
    assert g.validate_tokens([d1, d2, d3, eos, d1]) == [d1, d2, d3, eos]
    assert g.validate_tokens([d1, a, d2]) == [d1]
    assert g.validate_tokens([d1, -1, d2]) == [d1]
    assert g.validate_tokens([MODEL_VOCAB + 5]) == []
    assert g.validate_tokens([eos]) == []
    assert g.num_processed_tokens == 0 and np.array_equal(mask(), initial)  # nothing changed
    # accept
    assert g.accept_tokens("r", [d1, d2])
    assert g.num_processed_tokens == 2 and not g.is_terminated()
    assert np.array_equal(mask(), after(d1, d2))
    assert not g.accept_tokens("r", [d3, a])  # refused: no partial advance
    assert not g.accept_tokens("r", [MODEL_VOCAB + 1])
    assert g.num_processed_tokens == 2 and np.array_equal(mask(), after(d1, d2))
    assert g.find_jump_string() is None
    assert g.accept_tokens("r", [d3, eos, d1])  # tokens after EOS are ignored
    assert g.is_terminated() and g.num_processed_tokens == 4
    assert g.accept_tokens("r", [d1]) and g.num_processed_tokens == 4  # after termination: a no-op
    assert g.validate_tokens([d1]) == []
    # rollback undoes EOS too
    g.rollback(1)
    assert not g.is_terminated() and g.num_processed_tokens == 3
    assert np.array_equal(mask(), after(d1, d2, d3))
    assert bitmask_to_bool(mask(), MODEL_VOCAB)[eos]
    g.rollback(2)
    assert g.num_processed_tokens == 1 and np.array_equal(mask(), after(d1))
    g.rollback(0)
    assert g.num_processed_tokens == 1
    with pytest.raises(ValueError, match="cannot roll back"):
        g.rollback(5)
    g.reset()
    assert g.num_processed_tokens == 0 and not g.is_terminated() and np.array_equal(mask(), initial)
    # jump-forward text
    assert backend.compile_grammar(options.REGEX, "hello[0-9]").find_jump_string() == "hello"


def test_backend_rollback_window_follows_speculative_tokens(fake_vllm, hf_tok, tok):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(num_speculative_tokens=20), tokenizer=hf_tok,
                                       vocab_size=MODEL_VOCAB)
    g = backend.compile_grammar(options.REGEX, "[0-9]{0,60}")
    d = tid(tok, "7")
    assert g.accept_tokens("r", [d] * 40)
    g.rollback(40)
    assert g.num_processed_tokens == 0
    # a batch longer than the rollback window is still all-or-nothing
    assert not g.accept_tokens("r", [d] * 50 + [tid(tok, "a")])
    assert g.num_processed_tokens == 0 and g.validate_tokens([d]) == [d]


def test_backend_stop_token_override(fake_vllm, hf_tok, tok):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(), tokenizer=hf_tok, vocab_size=MODEL_VOCAB)
    stop = tid(tok, "!")
    g = backend.compile_grammar(options.REGEX, "[0-9]", stop_token_ids={stop})
    assert g.accept_tokens("r", [tid(tok, "4")])
    bm = backend.allocate_token_bitmask(1)
    g.fill_bitmask(bm, 0)
    allowed = bitmask_to_bool(bm[0].numpy(), MODEL_VOCAB)
    assert allowed[stop] and not allowed[tok.eos_token_ids[0]] and allowed.sum() == 1
    assert g.accept_tokens("r", [stop]) and g.is_terminated()


def test_backend_errors_are_clear(fake_vllm, hf_tok):
    options = fake_vllm.backend_types.StructuredOutputOptions
    backend = adapter.LogitgateBackend(vllm_config(), tokenizer=hf_tok, vocab_size=MODEL_VOCAB)
    with pytest.raises(logitgate.RegexError, match="unterminated character set .* at offset 0"):
        backend.compile_grammar(options.REGEX, "[0-9(")
    with pytest.raises(logitgate.RegexError, match="unterminated subpattern at offset 2"):
        backend.compile_grammar(options.REGEX, "ab(cd")
    with pytest.raises(logitgate.SchemaError, match="not valid JSON"):
        backend.compile_grammar(options.JSON, '{"type": "object",')
    with pytest.raises(logitgate.SchemaError, match="/type"):
        backend.compile_grammar(options.JSON, '{"type": "nonsense"}')
    with pytest.raises(logitgate.GrammarError):
        backend.compile_grammar(options.GRAMMAR, "root ::= (")
    with pytest.raises(ValueError, match="at least one choice"):
        backend.compile_grammar(options.CHOICE, "[]")
    with pytest.raises(NotImplementedError, match="structural tags") as info:
        backend.compile_grammar(options.STRUCTURAL_TAG, '{"structures": [], "triggers": []}')
    assert isinstance(info.value, ValueError)  # so vLLM answers a bad request, not a crash
    assert "STRUCTURAL_TAG" in str(info.value)
    with pytest.raises(ValueError, match="unknown structured output request type"):
        adapter.grammar_for_request("SOMETHING_ELSE", "x")


def test_grammar_kind_detection():
    assert adapter.grammar_is_gbnf('root ::= "a"')
    assert adapter.grammar_is_gbnf('# a comment\nroot ::= x\nx ::= "b"')
    assert not adapter.grammar_is_gbnf('start: "a"')
    assert not adapter.grammar_is_gbnf('// root ::= "a" in a comment\nstart: "a"')
    assert not adapter.grammar_is_gbnf('start: "a" # x ::= y')
    assert adapter.grammar_for_request("GRAMMAR", 'root ::= "a"').kind == "gbnf"
    assert adapter.grammar_for_request("GRAMMAR", 'start: "a"').kind == "lark"


# ---------------------------------------------------------------------------------------------
# the V1 batch logits processor
# ---------------------------------------------------------------------------------------------
def params(**extra: Any) -> SimpleNamespace:
    return SimpleNamespace(extra_args=extra or None)


def test_extra_args_parsing_and_validate_params(fake_vllm):
    parse = adapter.constraint_from_extra_args
    assert parse(None) is None and parse({}) is None and parse({"other": 1}) is None
    assert parse({"logitgate": {"regex": "[0-9]+"}}) == adapter.LogitgateConstraint("regex", "[0-9]+")
    assert parse({"logitgate": '{"gbnf": "root ::= \\"a\\""}'}).kind == "gbnf"
    assert parse({"logitgate_json_schema": '{"type": "integer"}', "logitgate_whitespace": "compact"}) == \
        adapter.LogitgateConstraint("json_schema", '{"type": "integer"}', "compact")
    assert parse({"logitgate_json_object": 1}).kind == "json_object"
    assert parse({"logitgate_choice": ["a", "b"]}).kind == "choice"
    bad = [
        ({"logitgate": {"regex": "a", "lark": "start: X"}}, "exactly one"),
        ({"logitgate": {}, "logitgate_regex": "a", "logitgate_gbnf": "root ::= x"}, "exactly one"),
        ({"logitgate": {"regex": "a"}, "logitgate_regex": "b"}, "given twice"),
        ({"logitgate": {"pattern": "a"}}, "unknown logitgate option"),
        ({"logitgate_typo": "a"}, "unknown logitgate option"),
        ({"logitgate": "{not json"}, "JSON text"),
        ({"logitgate": ["regex"]}, "must be a dict"),
        ({"logitgate": {"regex": "a", "whitespace": "compact"}}, "applies to json"),
        ({"logitgate": {"json_object": True, "whitespace": "wide"}}, "whitespace must be"),
        ({"logitgate_json_object": "false"}, "exactly one"),
    ]
    for extra, message in bad:
        with pytest.raises(ValueError, match=message):
            parse(extra)
    cls = adapter.LogitgateBatchLogitsProcessor
    assert cls.validate_params(params()) is None
    assert cls.validate_params(params(logitgate={"regex": "[0-9]+"})) is None
    with pytest.raises(logitgate.RegexError, match="offset"):
        cls.validate_params(params(logitgate_regex="(unclosed"))
    with pytest.raises(logitgate.SchemaError):
        cls.validate_params(params(logitgate={"json_schema": {"type": "nonsense"}}))
    with pytest.raises(logitgate.GrammarError):
        cls.validate_params(params(logitgate={"lark": "start: ("}))
    with pytest.raises(ValueError, match="exactly one"):
        cls.validate_params(params(logitgate={"regex": "a"}, logitgate_gbnf='root ::= "a"'))


@pytest.fixture
def batch_proc(fake_vllm, monkeypatch, mistral_tok):
    monkeypatch.setattr(adapter, "_load_vllm_tokenizer", lambda cfg: mistral_tok)
    proc = adapter.LogitgateBatchLogitsProcessor(vllm_config(max_num_seqs=4), torch.device("cpu"), False)
    assert proc.tokenizer.vocab_size == MODEL_VOCAB
    return proc


def test_batch_processor_follows_batch_updates(fake_vllm, batch_proc, tok):
    lp = fake_vllm.logits_processor
    BU, SWAP, UNI = lp.BatchUpdate, lp.MoveDirectionality.SWAP, lp.MoveDirectionality.UNIDIRECTIONAL
    proc = batch_proc
    assert proc.is_argmax_invariant() is False and proc.needs_output_token_ids() is True
    eos = tok.eos_token_ids[0]
    digits = logitgate.compile(Grammar.from_regex("[0-9]{2,4}"), tok)
    letters = logitgate.compile(Grammar.from_regex("[a-z]+!"), tok)
    json_int = logitgate.compile(Grammar.from_json_schema({"type": "integer"}, whitespace="flexible"), tok)

    def expect(compiled: Any, ids: Sequence[int] = ()) -> np.ndarray:
        m = Matcher(compiled)
        for t in ids:
            assert m.accept_token(t)
        return allowed_of(m)

    def check(rows: dict[int, np.ndarray | None], n: int) -> None:
        """Apply to random logits; row r must be masked to ``rows[r]`` (None: untouched)."""
        logits = torch.randn(n, MODEL_VOCAB)
        original = logits.clone()
        out = proc.apply(logits)
        assert out is logits
        for r in range(n):
            allowed = rows.get(r)
            if allowed is None:
                assert torch.equal(out[r], original[r]), f"row {r} should be untouched"
            else:
                keep = torch.from_numpy(allowed)
                assert torch.equal(out[r][keep], original[r][keep]), f"row {r}: allowed logits changed"
                assert bool(torch.isneginf(out[r][~keep]).all()), f"row {r}: disallowed logits not -inf"

    out_a: list[int] = []
    out_b: list[int] = []
    out_c: list[int] = []
    proc.update_state(BU(batch_size=3, removed=[], moved=[], added=[
        (0, params(logitgate={"regex": "[0-9]{2,4}"}), [1, 2], out_a),
        (1, params(), [1], out_b),  # no constraint
        (2, params(logitgate_regex="[a-z]+!"), None, out_c),
    ]))
    assert sorted(proc.rows) == [0, 2]
    check({0: expect(digits), 1: None, 2: expect(letters)}, 3)

    # new tokens arrive through the live output lists; no batch change
    d1, d2, x, y = tid(tok, "1"), tid(tok, "2"), tid(tok, "x"), tid(tok, "y")
    out_a.append(d1)
    out_b.append(tid(tok, "z"))
    out_c += [x, y]
    proc.update_state(None)
    check({0: expect(digits, [d1]), 1: None, 2: expect(letters, [x, y])}, 3)

    # swap 0 <-> 2
    proc.update_state(BU(batch_size=3, removed=[], added=[], moved=[(0, 2, SWAP)]))
    check({0: expect(letters, [x, y]), 1: None, 2: expect(digits, [d1])}, 3)

    # the unconstrained request at 1 finishes: remove 1, condense with a move 2 -> 1
    out_a.append(d2)
    proc.update_state(BU(batch_size=2, removed=[1], added=[], moved=[(2, 1, UNI)]))
    assert sorted(proc.rows) == [0, 1]
    check({0: expect(letters, [x, y]), 1: expect(digits, [d1, d2])}, 2)
    assert bool(expect(digits, [d1, d2])[eos])  # two digits: EOS allowed

    # a new unconstrained request replaces the one at 0; a JSON request is appended at 2
    # (the old three-element form of an added request is read too)
    out_d: list[int] = []
    out_e: list[int] = []
    proc.update_state(BU(batch_size=3, removed=[], moved=[], added=[
        (0, params(), [5], out_e),
        (2, params(logitgate={"json_schema": {"type": "integer"}}), out_d),
    ]))
    assert sorted(proc.rows) == [1, 2]
    check({0: None, 1: expect(digits, [d1, d2]), 2: expect(json_int)}, 3)

    # a unidirectional move onto an occupied slot discards what was there (the digits request)
    proc.update_state(BU(batch_size=2, removed=[], added=[], moved=[(2, 1, UNI)]))
    assert sorted(proc.rows) == [1]
    check({0: None, 1: expect(json_int)}, 2)

    # a swap with an unconstrained row, then moving an unconstrained request onto a constrained one
    proc.update_state(BU(batch_size=2, removed=[], added=[], moved=[(0, 1, SWAP)]))
    check({0: expect(json_int), 1: None}, 2)
    proc.update_state(BU(batch_size=1, removed=[], added=[], moved=[(1, 0, UNI)]))
    assert proc.rows == {}
    logits = torch.randn(1, MODEL_VOCAB)
    assert torch.equal(proc.apply(logits.clone()), logits)


def test_batch_processor_resumed_refused_and_wide_batches(fake_vllm, batch_proc, tok):
    lp = fake_vllm.logits_processor
    BU = lp.BatchUpdate
    proc = batch_proc
    eos = tok.eos_token_ids[0]
    digits = logitgate.compile(Grammar.from_regex("[0-9]{2,4}"), tok)
    d1, d2 = tid(tok, "1"), tid(tok, "2")
    # a resumed (preempted) request comes back with output tokens already generated;
    # index 5 is beyond max_num_seqs=4, so the processor's bitmask has to grow
    resumed = [d1, d2]
    bad: list[int] = []
    proc.update_state(BU(batch_size=6, removed=[], moved=[], added=[
        (5, params(logitgate={"regex": "[0-9]{2,4}"}), [], resumed),
        (3, params(logitgate={"regex": "[0-9]{2,4}"}), [], bad),
        (1, params(logitgate={"regex": "(unclosed"}), [], []),  # would be refused by validate_params
    ]))
    m = Matcher(digits)
    m.accept_token(d1)
    m.accept_token(d2)
    logits = torch.zeros(6, MODEL_VOCAB)
    proc.apply(logits)
    assert np.array_equal(torch.isfinite(logits[5]).numpy(), allowed_of(m))
    # a token the constraint refuses (say, sampled while another processor changed the row):
    # from then on only EOS
    bad.append(tid(tok, "a"))
    proc.update_state(None)
    logits = torch.zeros(6, MODEL_VOCAB)
    proc.apply(logits)
    for row in (1, 3):
        finite = torch.isfinite(logits[row])
        assert finite.sum().item() == 1 and finite[eos].item(), row
    for row in (0, 2, 4):
        assert bool(torch.isfinite(logits[row]).all()), row
    assert proc.rows[3].error is not None and proc.rows[1].error is not None
    # finished requests at the tail are removed without a condensing move
    proc.update_state(BU(batch_size=5, removed=[5], added=[], moved=[]))
    assert sorted(proc.rows) == [1, 3]
    # removed entries are applied before added ones (vLLM's documented order), so a slot that is
    # both freed and refilled in one update holds the new request
    fresh: list[int] = []
    proc.update_state(BU(batch_size=5, removed=[3], moved=[], added=[
        (3, params(logitgate={"regex": "[0-9]{2,4}"}), [], fresh)]))
    assert sorted(proc.rows) == [1, 3] and proc.rows[3].error is None and proc.rows[3].output_ids is fresh
    logits = torch.zeros(5, MODEL_VOCAB)
    proc.apply(logits)
    assert np.array_equal(torch.isfinite(logits[3]).numpy(), allowed_of(Matcher(digits)))


# ---------------------------------------------------------------------------------------------
# the per-request processor
# ---------------------------------------------------------------------------------------------
def test_per_request_processor_regex_walk(hf_tok, tok):
    pattern = r"[0-9]{2}-[a-z]{2}"
    proc = adapter.LogitgateLogitsProcessor({"regex": pattern}, hf_tok, vocab_size=MODEL_VOCAB)
    assert len(inspect.signature(proc).parameters) == 2  # vLLM then passes (output_ids, logits)
    plain = Matcher(logitgate.compile(Grammar.from_regex(pattern), tok))
    eos = tok.eos_token_ids[0]
    gen = torch.Generator().manual_seed(3)
    ids: list[int] = []
    for _ in range(20):
        logits = torch.randn(MODEL_VOCAB, generator=gen)
        original = logits.clone()
        out = proc(list(ids), logits)
        assert out is logits
        allowed = torch.from_numpy(allowed_of(plain))
        assert torch.equal(out[allowed], original[allowed])
        assert bool(torch.isneginf(out[~allowed]).all())
        assert not bool(torch.isinf(original).any())
        t = int(torch.argmax(out))
        assert allowed[t]
        if t == eos:
            break
        assert plain.accept_token(t)
        ids.append(t)
    else:
        pytest.fail("the walk did not reach EOS")
    text = tok.decode_bytes(ids).decode()
    assert re.fullmatch(pattern, text), text
    # at the end only EOS is left
    finite = torch.isfinite(proc(ids, torch.zeros(MODEL_VOCAB)))
    assert finite.sum().item() == 1 and finite[eos].item()


def test_per_request_processor_restarts_clones_and_refusals(tok):
    compiled = logitgate.compile(Grammar.from_regex("[0-9]+"), tok)
    proc = adapter.LogitgateLogitsProcessor(compiled)
    d, a = tid(tok, "5"), tid(tok, "a")
    eos = tok.eos_token_ids[0]
    initial = allowed_of(Matcher(compiled))
    one_digit = Matcher(compiled)
    one_digit.accept_token(d)
    after_digit = allowed_of(one_digit)
    assert not np.array_equal(initial, after_digit)  # EOS becomes allowed
    # numpy logits work too
    logits = np.zeros(MODEL_VOCAB, dtype=np.float32)
    assert np.array_equal(np.isfinite(proc([d], logits)), after_digit)
    # another (shorter) sequence: the processor starts over
    assert np.array_equal(torch.isfinite(proc([], torch.zeros(MODEL_VOCAB))).numpy(), initial)
    # clone() starts fresh
    proc([d, d], torch.zeros(MODEL_VOCAB))
    twin = proc.clone()
    assert twin.compiled is compiled
    assert np.array_equal(torch.isfinite(twin([], torch.zeros(MODEL_VOCAB))).numpy(), initial)
    # a refused token: only EOS from then on
    finite = torch.isfinite(proc([d, d, a], torch.zeros(MODEL_VOCAB)))
    assert finite.sum().item() == 1 and finite[eos].item() and proc.error
    # back to a valid history clears it
    assert np.array_equal(torch.isfinite(proc([d], torch.zeros(MODEL_VOCAB))).numpy(), after_digit)
    assert proc.error is None
    with pytest.raises(TypeError, match="needs a tokenizer"):
        adapter.LogitgateLogitsProcessor({"regex": "a"})
    with pytest.raises(logitgate.RegexError):
        adapter.LogitgateLogitsProcessor({"regex": "a("}, tok)
    with pytest.raises(NotImplementedError):
        adapter.grammar_for_request("STRUCTURAL_TAG", "{}")


# ---------------------------------------------------------------------------------------------
# install(): the routing patches, on the stand-in vLLM
# ---------------------------------------------------------------------------------------------
def so_params(**kw: Any) -> SimpleNamespace:
    fields = dict(json=None, json_object=None, regex=None, choice=None, grammar=None, structural_tag=None,
                  _backend=None)
    fields.update(kw)
    return SimpleNamespace(**fields)


def test_install_routes_backend_selection(fake_vllm, hf_tok, tok):
    so_pkg, ip = fake_vllm.structured_output, fake_vllm.input_processor
    original_init = so_pkg.StructuredOutputManager.grammar_init
    original_validate = ip.InputProcessor._validate_structured_output
    assert adapter.install(replace="auto") == {"engine": True, "frontend": True}
    assert adapter.install(replace="auto") == {"engine": True, "frontend": True}  # idempotent
    assert so_pkg.StructuredOutputManager.grammar_init.__wrapped__ is original_init
    assert ip.InputProcessor._validate_structured_output.__wrapped__ is original_validate

    # front end: a routed engine-level backend marks the request and validates it with logitgate
    front = ip.InputProcessor("auto")
    sampling = SimpleNamespace(structured_outputs=so_params(regex="[0-9]{2}"))
    front._validate_structured_output(sampling)
    assert sampling.structured_outputs._backend == "logitgate" and front.original_calls == 0
    with pytest.raises(logitgate.RegexError):
        front._validate_structured_output(SimpleNamespace(structured_outputs=so_params(regex="[0-9")))
    with pytest.raises(NotImplementedError):
        front._validate_structured_output(SimpleNamespace(structured_outputs=so_params(structural_tag="{}")))
    other = ip.InputProcessor("xgrammar")  # not routed: vLLM's own validation runs
    plain = SimpleNamespace(structured_outputs=so_params(regex="[0-9]{2}"))
    other._validate_structured_output(plain)
    assert plain.structured_outputs._backend == "xgrammar" and other.original_calls == 1
    front._validate_structured_output(SimpleNamespace(structured_outputs=None))  # no constraint: vLLM's path
    assert front.original_calls == 1
    assert other.original_calls == 1

    # engine core: a request marked "logitgate" makes the manager build a LogitgateBackend
    manager = so_pkg.StructuredOutputManager(vllm_config(), hf_tok)
    key = (fake_vllm.backend_types.StructuredOutputOptions.REGEX, "[0-9]{2}")
    request = SimpleNamespace(sampling_params=sampling,
                              structured_output_request=SimpleNamespace(structured_output_key=key, grammar=None))
    manager.grammar_init(request)
    assert isinstance(manager.backend, adapter.LogitgateBackend)
    grammar = request.structured_output_request.grammar
    assert isinstance(grammar, adapter.LogitgateGrammar)
    assert grammar.accept_tokens("r", [tid(tok, "4"), tid(tok, "2"), tok.eos_token_ids[0]]) and grammar.is_terminated()
    # an unrouted name still reaches vLLM's own (here: failing) chain
    fresh = so_pkg.StructuredOutputManager(vllm_config(), hf_tok)
    request.sampling_params = SimpleNamespace(structured_outputs=so_params(regex="a", _backend="xgrammar"))
    with pytest.raises(ValueError, match="Unsupported structured output backend: xgrammar"):
        fresh.grammar_init(request)


def test_general_plugin_is_inert_without_the_env_var(fake_vllm, monkeypatch):
    so_pkg, ip = fake_vllm.structured_output, fake_vllm.input_processor
    before = (so_pkg.StructuredOutputManager.grammar_init, ip.InputProcessor._validate_structured_output)
    monkeypatch.delenv("LOGITGATE_VLLM_REPLACE", raising=False)
    adapter.vllm_general_plugin()
    assert (so_pkg.StructuredOutputManager.grammar_init, ip.InputProcessor._validate_structured_output) == before
    monkeypatch.setenv("LOGITGATE_VLLM_REPLACE", "auto")
    adapter.vllm_general_plugin()
    assert so_pkg.StructuredOutputManager.grammar_init.__wrapped__ is before[0]


def test_the_plugin_entry_point_is_declared():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    plugin = meta["project"]["entry-points"]["vllm.general_plugins"]["logitgate"]
    module, _, func = plugin.partition(":")
    assert module == adapter.__name__ and callable(getattr(adapter, func))
