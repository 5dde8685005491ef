"""Packaging: one version, a changelog entry for it, package data covering what the code reads at
run time, the numba cache location, and (slow) the built wheel and sdist in a clean virtualenv."""
from __future__ import annotations

import fnmatch
import importlib.metadata
import importlib.util
import io
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import logitgate

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _tasks():
    spec = importlib.util.spec_from_file_location("logitgate_tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


tasks = _tasks()


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_version_is_written_once(pyproject):
    version = pyproject["project"]["version"]
    assert "version" not in pyproject["project"].get("dynamic", [])
    assert tasks.project_version() == version
    # logitgate.__version__ is the installed metadata's, which pyproject.toml wrote
    assert importlib.metadata.version("logitgate") == version
    assert logitgate.__version__ == version
    # nothing else in the package spells a version out
    for path in (SRC / "logitgate").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^__version__\s*=\s*['\"]", text, re.MULTILINE), path


def test_changelog_has_the_current_version(pyproject):
    version = pyproject["project"]["version"]
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n")
    sections = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert sections, "no '## [version] - date' sections"
    released = [v for v, _ in sections if v != "Unreleased"]
    assert released[0] == version, f"the newest CHANGELOG.md entry is {released[0]}, pyproject.toml says {version}"
    assert all(date for v, date in sections if v != "Unreleased"), "every released version needs a date"


def test_docs_changelog_is_a_copy():
    # docs/changelog.md is what the documentation site shows; keep it equal: cp CHANGELOG.md docs/changelog.md
    assert (ROOT / "docs" / "changelog.md").read_text(encoding="utf-8") == \
        (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_package_data_covers_the_non_python_files(pyproject):
    """Every file of the package that is not Python source must be matched by package-data,
    or the wheel would lack it (the Wasm C sources are read by controllers.wasm, py.typed by type
    checkers)."""
    globs = pyproject["tool"]["setuptools"]["package-data"]["logitgate"]
    pkg = SRC / "logitgate"
    data = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "py.typed" in data
    missing = [f for f in data if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not missing, f"files not in [tool.setuptools.package-data]: {missing}"
    from logitgate.controllers import wasm

    sources = sorted(p.name for p in wasm.C_SOURCES.iterdir() if p.suffix in (".c", ".h"))
    assert "logitgate_ctrl.h" in sources and len(sources) >= 4
    # what tasks.py package requires in the wheel exists in the source tree
    for name in tasks.WHEEL_REQUIRED:
        assert (SRC / name).is_file(), name
    assert sorted(tasks.WHEEL_TOP) == sorted(p.name for p in SRC.iterdir()
                                             if p.is_dir() and (p / "__init__.py").is_file())


def test_sdist_and_dev_configuration(pyproject):
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8")
    assert "CHANGELOG.md" in manifest and "graft tests" in manifest and "prune bench/results" in manifest
    extras = pyproject["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0].lower() for r in extras["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= names
    assert "logitgate[docs]" in extras["dev"] and any(r.startswith("build") for r in extras["dev"])
    assert "Typing :: Typed" in pyproject["project"]["classifiers"]
    # CI runs the README's test command first, then the docs and the packages
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.startswith("python3 ")]
    assert ci == ["python3 tasks.py test", "python3 tasks.py docs", "python3 tasks.py package"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python3 tasks.py test" in readme


def _zip(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n in names:
            z.writestr(n, "")
    return buf.getvalue()


def test_archive_checks_refuse_strays_and_gaps(tmp_path):
    good = [*tasks.WHEEL_REQUIRED, "logitgate-0.1.0.dist-info/METADATA"]
    wheel = tmp_path / "good.whl"
    wheel.write_bytes(_zip(good))
    assert tasks.check_wheel(wheel) == good
    for bad in ([*good, "tests/test_x.py"], [*good, "logitgate/__pycache__/x.pyc"],
                [n for n in good if n != "logitgate/py.typed"]):
        wheel.write_bytes(_zip(bad))
        with pytest.raises(SystemExit):
            tasks.check_wheel(wheel)

    def sdist(names: list[str]) -> Path:
        path = tmp_path / "x-0.1.0.tar.gz"
        with tarfile.open(path, "w:gz") as t:
            for n in names:
                info = tarfile.TarInfo(f"x-0.1.0/{n}")
                t.addfile(info, io.BytesIO(b""))
        return path

    assert tasks.check_sdist(sdist(list(tasks.SDIST_REQUIRED))) == list(tasks.SDIST_REQUIRED)
    for bad in ([*tasks.SDIST_REQUIRED, ".venv/bin/python"], [*tasks.SDIST_REQUIRED, "bench/results/x.json"],
                [n for n in tasks.SDIST_REQUIRED if n != "CHANGELOG.md"]):
        with pytest.raises(SystemExit):
            tasks.check_sdist(sdist(bad))


def test_cache_dir_is_configurable(tmp_path, monkeypatch):
    from logitgate._cachedir import cache_dir

    monkeypatch.setenv("LOGITGATE_CACHE_DIR", str(tmp_path / "lg"))
    assert cache_dir("numba") == str(tmp_path / "lg" / "numba") and (tmp_path / "lg" / "numba").is_dir()
    monkeypatch.delenv("LOGITGATE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("unicode") == str(tmp_path / "xdg" / "logitgate" / "unicode")


def test_numba_uses_the_cache_dir():
    """The kernels' numba cache is the one _cachedir chose (or $NUMBA_CACHE_DIR). A fresh process
    with an empty $LOGITGATE_CACHE_DIR compiles every kernel (about 10 s), so that end-to-end check
    is in the smoke test of `tasks.py package`."""
    import numba

    from logitgate import kernels

    # kernels sets $NUMBA_CACHE_DIR to its choice unless the user had set it (then that is its choice)
    assert numba.config.CACHE_DIR == kernels.CACHE_DIR == os.environ["NUMBA_CACHE_DIR"]


@pytest.mark.slow
def test_package_task_builds_and_smoke_tests():
    """`python3 tasks.py package`: wheel + sdist, each installed into a clean virtualenv and
    smoke-tested there (about a minute; needs PyPI or pip's cache for numpy and numba)."""
    res = subprocess.run([sys.executable, str(ROOT / "tasks.py"), "package"], cwd=ROOT, capture_output=True,
                         text=True, check=False, timeout=1200)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "wheel and sdist pass in a clean virtualenv" in res.stdout
