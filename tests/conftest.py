"""Shared fixtures: the two real tokenizers mistral-common ships, loaded once per session."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


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


@pytest.fixture(scope="session", params=["spm", "tekken"])
def real_tok(request, tok_spm, tok_tekken):
    return tok_spm if request.param == "spm" else tok_tekken


def outlines_regexes() -> dict[str, str]:
    """outlines-core's benchmark regexes from ../shared/data ({} when the data is not there)."""
    path = SHARED_DATA / "outlines-core" / "regex_samples.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())
