"""MkDocs hook: pages whose content comes from the code at build time, so they cannot go stale.

A page asks for a generated block with an HTML comment on its own line::

    <!-- generated: json-schema-keywords -->   the keyword table (logitgate.json_schema.keywords)
    <!-- generated: json-schema-formats -->    the format notes (logitgate.json_schema.formats)
    <!-- generated: limits -->                 every logitgate.Limits field, default and docstring
    <!-- generated: error-gallery -->          real error messages for real bad inputs
    <!-- generated: api-index -->              logitgate.__all__ and the reference page of each name

It also turns the Sphinx roles left in docstrings (``:class:`~a.B```) into plain code in the
rendered API pages.
"""
from __future__ import annotations

import ast
import functools
import html
import os
import re
import sys
import warnings
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "src"))

_MARKER = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->[ \t]*$", re.M)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- JSON Schema -------------------------------------------------------------------------------------

def _keywords() -> str:
    from logitgate.json_schema.keywords import KEYWORDS, STATUSES

    order = {"any": 0, "string": 1, "number": 2, "object": 3, "array": 4}
    lines = ["| status | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {_cell(v)} |" for k, v in STATUSES.items()]
    lines += ["", "| keyword | applies to | status | drafts | notes |", "|---|---|---|---|---|"]
    rank = {s: i for i, s in enumerate(STATUSES)}
    for kw in sorted(KEYWORDS.values(), key=lambda k: (rank[k.status], order[k.applies_to])):
        lines.append(f"| `{kw.name}` | {kw.applies_to} | `{kw.status}` | {kw.drafts} | {_cell(kw.notes)} |")
    return "\n".join(lines)


def _formats() -> str:
    from logitgate.json_schema.formats import APPROXIMATE_FORMATS, FORMAT_NOTES, SUPPORTED_FORMATS

    lines = ["| format | enforced | notes |", "|---|---|---|"]
    for name in sorted(set(SUPPORTED_FORMATS) | set(FORMAT_NOTES)):
        how = "from above" if name in APPROXIMATE_FORMATS else "exactly" if name in SUPPORTED_FORMATS else "no"
        lines.append(f"| `{name}` | {how} | {_cell(FORMAT_NOTES.get(name, ''))} |")
    return "\n".join(lines)


# -- Limits ------------------------------------------------------------------------------------------

def _limits() -> str:
    import logitgate
    from logitgate import limits

    tree = ast.parse(open(limits.__file__, encoding="utf-8").read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Limits")
    docs: dict[str, str] = {}
    body = cls.body
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr) \
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
            docs[a.target.id] = " ".join(b.value.value.split())
    default = logitgate.Limits()
    lines = ["| field | default | what it bounds |", "|---|---:|---|"]
    import dataclasses

    for f in dataclasses.fields(default):
        v = getattr(default, f.name)
        shown = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else repr(v)
        lines.append(f"| `{f.name}` | {shown} | {_cell(docs.get(f.name, ''))} |")
    return "\n".join(lines)


# -- error gallery -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _byte_tokenizer() -> Any:
    import logitgate

    return logitgate.Tokenizer.from_bytes([b"</s>"] + [bytes([i]) for i in range(256)], eos_token_id=0,
                                          special_ids=[0])


_SETUP = '''import logitgate
from logitgate import Grammar
tok = logitgate.Tokenizer.from_bytes([b"</s>"] + [bytes([i]) for i in range(256)],
                                     eos_token_id=0, special_ids=[0])
'''

# (section, title, code run with `tok` and `Grammar` in scope)
_GALLERY: list[tuple[str, str, str]] = [
    ("Regex", "A backreference (not a regular language)", r'Grammar.from_regex(r"(\d+)-\1")'),
    ("Regex", "An unterminated character set", r'Grammar.from_regex(r"[a-z")'),
    ("Regex", "A lookahead", r'Grammar.from_regex(r"price: (?=\d)\w+")'),
    ("Regex", "Repetition bounds the wrong way round", r'Grammar.from_regex(r"[0-9]{3,2}")'),
    ("Regex", "A repetition bound over a cap", r'Grammar.from_regex(r"x{5000}")'),
    ("Regex", "A regex whose DFA is too large", r'logitgate.compile(Grammar.from_regex(r"(a|b)*a(a|b){30}"), tok)'),
    ("Regex", "A regex that matches nothing", r'logitgate.compile(Grammar.from_regex(r"[^\x00-\U0010ffff]"), tok)'),
    ("Lark", "An undefined rule", 'Grammar.from_lark("start: greeting NAME\\nNAME: /[a-z]+/")'),
    ("Lark", "A syntax error", 'Grammar.from_lark(\'start: "a" (b\\nb: "b"\')'),
    ("GBNF", "`=` instead of `::=`", 'Grammar.from_gbnf(\'root = "yes" | "no"\')'),
    ("GBNF", "An unterminated literal", 'Grammar.from_gbnf(\'root ::= "yes\')'),
    ("GBNF", "An undefined rule (found when compiled)",
     'logitgate.compile(Grammar.from_gbnf(\'root ::= "a" item\'), tok)'),
    ("yacc", "A rule without its `;`", 'Grammar.from_yacc(\'%start s\\n%%\\ns: "a"\\n\')'),
    ("yacc", "An undefined symbol (found when compiled)",
     'logitgate.compile(Grammar.from_yacc(\'%start s\\n%%\\ns: "a" t ;\\n\'), tok)'),
    ("JSON Schema", "A misspelt type", 'Grammar.from_json_schema({"type": "object", "properties": {"age": {"type": "int"}}})'),
    ("JSON Schema", "A keyword that cannot be enforced exactly (strict mode)",
     'Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})'),
    ("JSON Schema", "A bad `pattern`", 'Grammar.from_json_schema({"type": "string", "pattern": "[a-"})'),
    ("JSON Schema", "A `$ref` to nothing", 'Grammar.from_json_schema({"$ref": "#/$defs/missing"})'),
    ("JSON Schema", "A schema no document satisfies",
     'Grammar.from_json_schema({"type": "integer", "minimum": 5, "maximum": 3})'),
    ("JSON Schema", "A JSON text that is not JSON", 'Grammar.from_json_schema(\'{"type": "object",}\')'),
    ("JSON Schema", "A draft 3 schema",
     'Grammar.from_json_schema({"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"})'),
    ("Limits", "A schema nested deeper than a cap", '''schema = {"type": "null"}
for _ in range(600):
    schema = {"type": "array", "items": schema}
Grammar.from_json_schema(schema)'''),
    ("Limits", "A misspelt cap", "logitgate.using_limits(max_dfa=10).__enter__()"),
    ("Limits", "A cap that is not positive", "logitgate.Limits(max_dfa_states=0)"),
    ("Tokenizer", "An EOS id outside the vocabulary", 'logitgate.Tokenizer.from_bytes([b"a", b"b"], eos_token_id=5)'),
    ("Tokenizer", "A token given as str instead of bytes",
     'logitgate.Tokenizer.from_bytes([b"</s>", "b"], eos_token_id=0)'),
    ("Matcher", "A bitmask of the wrong width", '''import numpy as np
m = logitgate.Matcher(logitgate.compile(Grammar.from_regex("[0-9]+"), tok))
m.fill_next_token_bitmask(np.zeros((1, 4), dtype=np.int32), 0)'''),
]


def _run_case(code: str) -> tuple[str, str]:
    import logitgate

    ns: dict[str, Any] = {"logitgate": logitgate, "Grammar": logitgate.Grammar, "tok": _byte_tokenizer()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, "<gallery>", "exec"), ns)
    except Exception as e:  # noqa: BLE001 - the point is to show it
        return f"{type(e).__module__}.{type(e).__qualname__}".replace("builtins.", ""), str(e)
    raise RuntimeError(f"error gallery: no error raised by {code!r}; fix the case in docs/hooks/generated.py")


def _gallery() -> str:
    out = ["All cases below run with this set-up (a byte-level vocabulary):", "", "```python", _SETUP.rstrip(),
           "```", ""]
    section = None
    for sec, title, code in _GALLERY:
        if sec != section:
            out += [f"## {sec}", ""]
            section = sec
        kind, msg = _run_case(code)
        out += [f"### {title}", "", "```python", code, "```", "", f"`{kind}`:", "", "```text", msg, "```", ""]
    return "\n".join(out)


# -- API index ---------------------------------------------------------------------------------------

_PAGES = {
    "logitgate.grammar": "grammar.md",
    "logitgate.compiler": "compiler.md",
    "logitgate.matcher": "matcher.md",
    "logitgate.vocab": "tokenizer.md",
    "logitgate.bitmask": "bitmask.md",
    "logitgate.limits": "limits.md",
    "logitgate.errors": "errors.md",
}


def api_page(name: str) -> str | None:
    """The API page (relative to docs/api) documenting ``logitgate.<name>``, None for data."""
    import logitgate

    mod = getattr(getattr(logitgate, name), "__module__", None) or ""
    for prefix, page in _PAGES.items():
        if mod == prefix or mod.startswith(prefix + "."):
            return page
    return None


def _api_index() -> str:
    import logitgate

    lines = ["| name | kind | summary | page |", "|---|---|---|---|"]
    for name in logitgate.__all__:
        obj = getattr(logitgate, name)
        if name == "__version__":
            lines.append(f"| `__version__` | str | the installed version (`{obj}` here) | |")
            continue
        page = api_page(name)
        if page is None:
            raise RuntimeError(f"api-index: no API page for logitgate.{name}; add its module to _PAGES")
        kind = "class" if isinstance(obj, type) else "function"
        doc = (obj.__doc__ or "").strip().split("\n\n")[0]
        summary = " ".join(doc.split())
        lines.append(f"| [`{name}`]({page}) | {kind} | {_cell(summary)} | [{page[:-3]}]({page}) |")
    return "\n".join(lines)


_GENERATORS: dict[str, Callable[[], str]] = {
    "json-schema-keywords": _keywords,
    "json-schema-formats": _formats,
    "limits": _limits,
    "error-gallery": _gallery,
    "api-index": _api_index,
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def sub(m: re.Match) -> str:
        gen = _GENERATORS.get(m.group(1))
        if gen is None:
            raise RuntimeError(f"{page.file.src_path}: unknown generated block {m.group(1)!r}")
        return gen()

    return _MARKER.sub(sub, markdown)


_ROLE_FULL = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):(<code>)([\w.]+)(</code>)")


def on_page_content(content: str, page: Any, config: Any, files: Any) -> str:
    if not page.file.src_path.startswith("api/"):
        return content
    # `:class:`~a.b.C`` renders as ":class:<code>~a.b.C</code>": keep the code, drop the role
    content = re.sub(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>~(?:[\w.]*\.)?(\w+)</code>",
                     lambda m: f"<code>{html.escape(m.group(1))}</code>", content)
    return _ROLE_FULL.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}", content)
