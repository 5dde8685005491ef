"""OpenAI's request and response shapes, and how a request maps to a logitgate constraint.

Requests are validated with pydantic (unknown fields are accepted and ignored, as OpenAI's
clients send many); everything that cannot be honoured is refused with an :class:`APIError`
naming the parameter. One constraint per request at most:

* ``response_format``: ``json_schema`` (``Grammar.from_json_schema(schema, strict=strict)``),
  ``json_object`` (any JSON object, as OpenAI's JSON mode), ``text`` (none);
* extra body fields (the OpenAI client's ``extra_body``): ``regex``, ``lark``, ``gbnf``, and
  ``recognizer`` (the name of a custom recognizer the server was started with:
  ``create_app(recognizers={name: obj})``, ``logitgate serve --recognizer NAME=module:obj``);
* ``tools`` with ``tool_choice`` ``"required"`` or a named function: the output is a JSON object
  ``{"name": <a tool>, "arguments": <its parameters>}`` (one ``anyOf`` branch per tool), returned
  as ``message.tool_calls``. ``"auto"`` does not constrain the output (the model answers in text,
  and the tools are not described to it); ``"none"`` is plain text.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import logitgate

from ..errors import CompileError, GrammarError, LimitError, LogitgateError, RegexError, SchemaError
from .engine import SamplingParams

__all__ = [
    "APIError",
    "ChatCompletionRequest",
    "CompletionRequest",
    "ConstraintSpec",
    "RunRequest",
    "TagRequest",
    "ToolCallStream",
    "chat_chunk",
    "chat_messages",
    "chat_response",
    "compile_constraint",
    "completion_chunk",
    "completion_prompt",
    "completion_response",
    "constraint_spec",
    "new_id",
    "parse_request",
    "sampling_params",
    "split_tool_call",
    "sse",
    "usage",
]

MAX_STOP_SEQUENCES = 16
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RELATIVE_IMPORT = re.compile(r"^[ \t]*%import[ \t]+\.", re.MULTILINE)


# -- errors ----------------------------------------------------------------------------------------
class APIError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, logs: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.logs = logs
        """A failed controller's log (logitgate's extension, in ``error.logs``)."""

    def body(self) -> dict[str, Any]:
        out = error_body(self.message, self.type, self.param, self.code)
        if self.logs is not None:
            out["error"]["logs"] = self.logs
        return out


_ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def _loc(loc: tuple[Any, ...]) -> str:
    """A pydantic location as a parameter path: ``messages[0].content``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validation_error(exc: ValidationError) -> APIError:
    """The first problem of a pydantic validation error, naming its field."""
    err = exc.errors(include_url=False)[0]
    param = _loc(tuple(err["loc"])) or None
    if err["type"] == "missing":
        return APIError(400, f"missing required parameter '{param}'", param=param, code="missing_required_parameter")
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {json.dumps(got)[:80]})"
    where = f"invalid value for '{param}': " if param else "invalid request: "
    return APIError(400, f"{where}{err['msg']}{shown}", param=param, code="invalid_value")


def parse_request(raw: bytes, cls: type[BaseModel]) -> Any:
    """A JSON body validated as ``cls``; malformed JSON and wrong types are 400s naming the field."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # json's C scanner stops at the interpreter's recursion limit
        raise APIError(400, "the request body cannot be read: its JSON arrays and objects nest deeper than about "
                            f"{sys.getrecursionlimit()} levels", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, f"the request body must be a JSON object, not {type(data).__name__}",
                       code="invalid_json")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


# -- requests ----------------------------------------------------------------------------------------
class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class StreamOptions(_Lenient):
    include_usage: bool = False


class JsonSchemaFormat(_Lenient):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Any = None
    """A string, a list of text parts, or None (an assistant message with tool calls)."""
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _GenerationRequest(_Lenient):
    """What chat and text completions share."""

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    stop: list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    """vLLM's extra field: with no constraint, EOS is never sampled (write max_tokens tokens)."""
    # logitgate's constraints, as extra body fields
    regex: str | None = None
    lark: str | None = None
    gbnf: str | None = None
    recognizer: str | None = None
    """The name of a custom recognizer registered with the server."""

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("stop")
    @classmethod
    def _stop_sane(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if len(v) > MAX_STOP_SEQUENCES:
                raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
            if any(not s for s in v):
                raise ValueError("a stop sequence cannot be empty")
        return v


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    controller: str | None = None
    """logitgate's extra field: an uploaded controller (module id or tag) writes the answer."""
    controller_arg: Any = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Any = None
    """``"none"``, ``"auto"``, ``"required"`` or ``{"type": "function", "function": {"name": ...}}``."""
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(_GenerationRequest):
    prompt: Any
    """A string or a list of token ids (or a list holding one of those)."""
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None


class RunRequest(_Lenient):
    """``POST /v1/run`` (AICI): a controller (module id or tag) and its argument."""

    controller: str
    controller_arg: Any = ""
    prompt: str = ""
    max_tokens: int = Field(default=200, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = 0
    model: str | None = None


class TagRequest(_Lenient):
    module_id: str
    tags: list[str] = Field(min_length=1)


# -- request -> prompt, parameters, constraint ---------------------------------------------------------
def refuse_unsupported(req: ChatCompletionRequest | CompletionRequest) -> None:
    """400 for the options that would change the answer's shape: ``n`` > 1, logprobs, echo, ..."""
    if req.n not in (None, 1):
        raise APIError(400, f"n={req.n} is not supported: this server returns one choice per request (n=1)",
                       param="n", code="unsupported_parameter")
    if isinstance(req, ChatCompletionRequest):
        if req.logprobs or req.top_logprobs:
            raise APIError(400, "logprobs are not supported", param="logprobs", code="unsupported_parameter")
    else:
        if req.best_of not in (None, 1):
            raise APIError(400, "best_of > 1 is not supported", param="best_of", code="unsupported_parameter")
        if req.logprobs:
            raise APIError(400, "logprobs are not supported", param="logprobs", code="unsupported_parameter")
        if req.echo:
            raise APIError(400, "echo is not supported", param="echo", code="unsupported_parameter")
        if req.suffix:
            raise APIError(400, "suffix (insertion) is not supported", param="suffix", code="unsupported_parameter")


def sampling_params(req: ChatCompletionRequest | CompletionRequest) -> SamplingParams:
    params = SamplingParams()
    limit = getattr(req, "max_completion_tokens", None) or req.max_tokens
    if limit is not None:
        params.max_tokens = limit
    if req.temperature is not None:
        params.temperature = req.temperature
    if req.top_p is not None:
        params.top_p = req.top_p
    params.seed = None if req.seed is None else req.seed % (1 << 64)  # numpy wants a seed >= 0
    params.stop = list(req.stop or [])
    params.ignore_eos = bool(getattr(req, "ignore_eos", False))
    return params


def _text_content(content: Any, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise APIError(400, f"{param}[{j}]: only text content parts ({{'type': 'text', 'text': ...}}) "
                                    f"are supported, not {kind!r}", param=f"{param}[{j}]", code="invalid_value")
            parts.append(part["text"])
        return "".join(parts)
    raise APIError(400, f"invalid value for '{param}': a string or a list of text parts",
                   param=param, code="invalid_value")


def chat_messages(req: ChatCompletionRequest, spec: ConstraintSpec | None) -> list[dict[str, str]]:
    """The messages as ``{"role", "content"}`` strings for ``model.chat_prompt``: text parts joined,
    an assistant's tool calls written as their JSON, ``developer`` as ``system``; with a tool call
    required, the tools are described in the system message."""
    out: list[dict[str, str]] = []
    for i, m in enumerate(req.messages):
        text = _text_content(m.content, f"messages[{i}].content")
        if m.role == "assistant" and m.tool_calls and not text:
            calls = [{"name": (c.get("function") or {}).get("name"),
                      "arguments": _arguments_value((c.get("function") or {}).get("arguments"))}
                     for c in m.tool_calls]
            text = json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
        role = "system" if m.role == "developer" else ("tool" if m.role == "function" else m.role)
        out.append({"role": role, "content": text})
    if spec is not None and spec.kind == "tools":
        described = [{"name": t.function.name, "description": t.function.description or "",
                      "parameters": t.function.parameters or {}} for t in spec.tools]
        note = ("You can call these functions. Call one by answering with a JSON object "
                '{"name": <function name>, "arguments": <its arguments>}.\n'
                + json.dumps(described, ensure_ascii=False))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + note}
        else:
            out.insert(0, {"role": "system", "content": note})
    return out


def _arguments_value(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def completion_prompt(req: CompletionRequest, vocab_size: int) -> str | list[int]:
    """The prompt: a string, or token ids (checked against the vocabulary)."""
    p = req.prompt
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(type(t) is int for t in p):
        bad = [t for t in p if not 0 <= t < vocab_size]
        if bad:
            raise APIError(400, f"prompt token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}",
                           param="prompt", code="invalid_value")
        return list(p)
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, (str, list)) for x in p):
        raise APIError(400, "one prompt per request: batches of prompts are not supported",
                       param="prompt", code="unsupported_parameter")
    raise APIError(400, "invalid value for 'prompt': a string or a list of token ids", param="prompt",
                   code="invalid_value")


@dataclass
class ConstraintSpec:
    """The one constraint of a request, before it is compiled."""

    kind: Literal["json_schema", "json_object", "regex", "lark", "gbnf", "tools", "recognizer"]
    param: str
    """The request parameter it came from (named in errors)."""
    value: Any = None
    """The schema, pattern or grammar text; for ``recognizer``, the registered recognizer object."""
    strict: bool = False
    tools: list[Tool] = field(default_factory=list)
    tool_index: list[int] = field(default_factory=list)
    """For ``tools``: the index in ``tools`` of each ``anyOf`` branch."""


def _tool_spec(req: ChatCompletionRequest) -> ConstraintSpec | None:
    tools = req.tools or []
    names = [t.function.name for t in tools]
    for i, name in enumerate(names):
        if not _TOOL_NAME.fullmatch(name):
            raise APIError(400, f"tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-', "
                                f"not {name!r}", param=f"tools[{i}].function.name", code="invalid_value")
        if name in names[:i]:
            raise APIError(400, f"two tools are named {name!r}", param=f"tools[{i}].function.name",
                           code="invalid_value")
    choice = req.tool_choice
    if choice is None:
        return None  # "auto" with tools, "none" without
    if isinstance(choice, str):
        if choice in ("none", "auto"):
            return None
        if choice != "required":
            raise APIError(400, f"invalid value for 'tool_choice': 'none', 'auto', 'required' or "
                                f"{{'type': 'function', 'function': {{'name': ...}}}}, not {choice!r}",
                           param="tool_choice", code="invalid_value")
        if not tools:
            raise APIError(400, "tool_choice 'required' needs at least one tool in 'tools'", param="tool_choice",
                           code="invalid_value")
        picked = list(range(len(tools)))
    elif isinstance(choice, dict) and choice.get("type", "function") == "function" \
            and isinstance(choice.get("function"), dict) and isinstance(choice["function"].get("name"), str):
        name = choice["function"]["name"]
        if name not in names:
            raise APIError(400, f"tool_choice names the function {name!r}, which is not in 'tools'",
                           param="tool_choice", code="invalid_value")
        picked = [names.index(name)]
    else:
        raise APIError(400, "invalid value for 'tool_choice': 'none', 'auto', 'required' or "
                            "{'type': 'function', 'function': {'name': ...}}", param="tool_choice",
                       code="invalid_value")
    strict = any(tools[i].function.strict for i in picked)
    return ConstraintSpec("tools", "tools", strict=strict, tools=tools, tool_index=picked)


def constraint_spec(req: ChatCompletionRequest | CompletionRequest,
                    recognizers: dict[str, Any] | None = None) -> ConstraintSpec | None:
    """The request's constraint (not compiled yet); 400 when it asks for more than one, or for a
    recognizer not in ``recognizers`` (the server's, by name)."""
    found: list[ConstraintSpec] = []
    rf = getattr(req, "response_format", None)
    if rf is not None and rf.type == "json_schema":
        if rf.json_schema is None:
            raise APIError(400, "response_format of type 'json_schema' needs a 'json_schema' object "
                                "({'name', 'schema', 'strict'})", param="response_format.json_schema",
                           code="missing_required_parameter")
        found.append(ConstraintSpec("json_schema", "response_format.json_schema.schema", rf.json_schema.schema_,
                                    strict=bool(rf.json_schema.strict)))
    elif rf is not None and rf.type == "json_object":
        found.append(ConstraintSpec("json_object", "response_format"))
    for kind in ("regex", "lark", "gbnf"):
        value = getattr(req, kind)
        if value is not None:
            found.append(ConstraintSpec(kind, kind, value))  # type: ignore[arg-type]
    if req.recognizer is not None:
        known = recognizers or {}
        if req.recognizer not in known:
            names = ", ".join(repr(n) for n in sorted(known)) or "none"
            raise APIError(400, f"no recognizer named {req.recognizer!r} on this server (it has: {names})",
                           param="recognizer", code="unknown_recognizer")
        found.append(ConstraintSpec("recognizer", "recognizer", known[req.recognizer]))
    if isinstance(req, ChatCompletionRequest):
        tool = _tool_spec(req)
        if tool is not None:
            found.append(tool)
    if len(found) > 1:
        raise APIError(400, "at most one constraint per request; this one has "
                            + ", ".join(s.param for s in found), param=found[1].param, code="too_many_constraints")
    return found[0] if found else None


def tool_call_schema(spec: ConstraintSpec) -> dict[str, Any]:
    """``{"name": <tool>, "arguments": <its parameters>}``, one ``anyOf`` branch per tool. Each
    tool's parameters are their own schema resource (a ``$id``), so their ``#/$defs/...``
    references still resolve."""
    branches = []
    for i in spec.tool_index:
        fn = spec.tools[i].function
        params: dict[str, Any] = dict(fn.parameters) if fn.parameters is not None else {
            "type": "object", "properties": {}, "additionalProperties": False}
        if "$id" not in params and "id" not in params:
            params = {"$id": f"urn:logitgate:tool:{i}", **params}
        branches.append({"type": "object", "properties": {"name": {"const": fn.name}, "arguments": params},
                         "required": ["name", "arguments"], "additionalProperties": False})
    return {"anyOf": branches}


_TOOL_POINTER = re.compile(r"^/anyOf/(\d+)(?:/properties/(name|arguments)(/.*)?)?$")


def _tool_location(spec: ConstraintSpec, pointer: str | None) -> str:
    """A pointer into the tool-call schema as the request's parameter it came from."""
    m = _TOOL_POINTER.match(pointer or "")
    if not m:
        return f"tools (at {pointer or '/'})"
    i = spec.tool_index[int(m.group(1))]
    if m.group(2) != "arguments":
        return f"tools[{i}].function"
    return f"tools[{i}].function.parameters at {m.group(3) or '/'}"


def _schema_error(exc: SchemaError, spec: ConstraintSpec) -> APIError:
    if spec.kind == "tools":
        lines = [f"  {_tool_location(spec, ptr)}: {msg}" for ptr, msg in exc.problems]
        head = exc.reason if not (len(exc.problems) == 1 and exc.problems[0][1] == exc.reason) else \
            "invalid function parameters schema"
        message = f"{head}\n" + "\n".join(lines) if lines else exc.reason
        param = _tool_location(spec, exc.pointer).split(" at ")[0] if exc.problems else "tools"
        return APIError(400, message, param=param, code="invalid_schema")
    return APIError(400, f"invalid JSON Schema in '{spec.param}': {exc}", param=spec.param, code="invalid_schema")


def build_grammar(spec: ConstraintSpec) -> logitgate.Grammar:
    """The grammar of a constraint; a bad schema, regex or grammar is a 400 naming where."""
    try:
        if spec.kind == "json_schema":
            return logitgate.Grammar.from_json_schema(spec.value, strict=spec.strict)
        if spec.kind == "json_object":  # OpenAI's JSON mode: a JSON object
            return logitgate.Grammar.from_json_schema({"type": "object"})
        if spec.kind == "tools":
            return logitgate.Grammar.from_json_schema(tool_call_schema(spec), strict=spec.strict)
        if spec.kind == "regex":
            return logitgate.Grammar.from_regex(spec.value)
        if spec.kind == "recognizer":
            return logitgate.Grammar.from_recognizer(spec.value)
        if spec.kind == "lark":
            m = _RELATIVE_IMPORT.search(spec.value)
            if m:  # it would read .lark files of the server's working directory
                line = spec.value.count("\n", 0, m.start()) + 1
                raise APIError(400, f"invalid lark grammar in 'lark': a relative %import (line {line}) cannot be "
                                    "used on the server; only Lark's own grammars (%import common.*) can",
                               param="lark", code="invalid_grammar")
            return logitgate.Grammar.from_lark(spec.value)
        return logitgate.Grammar.from_gbnf(spec.value)
    except LimitError as exc:  # before the kinds: a cap refusal is also a RegexError/GrammarError/SchemaError
        raise _too_large(exc, spec) from None
    except SchemaError as exc:
        raise _schema_error(exc, spec) from None
    except RegexError as exc:
        raise APIError(400, f"invalid regex in '{spec.param}': {exc}", param=spec.param, code="invalid_regex") from None
    except GrammarError as exc:
        raise APIError(400, f"invalid {spec.kind} grammar in '{spec.param}': {exc}", param=spec.param,
                       code="invalid_grammar") from None
    except (LogitgateError, ValueError, TypeError, RecursionError) as exc:
        raise APIError(400, f"invalid constraint in '{spec.param}': {exc}", param=spec.param,
                       code="invalid_constraint") from None


def _too_large(exc: LimitError, spec: ConstraintSpec) -> APIError:
    """A constraint refused by one of the server's compile caps (``logitgate.Limits``)."""
    return APIError(400, f"the constraint in '{spec.param}' is over the server's limit {exc.limit}={exc.value}: "
                         f"{exc}", param=spec.param, code="constraint_too_large")


_GRAMMARS: OrderedDict[str, logitgate.Grammar] = OrderedDict()
_GRAMMARS_LOCK = threading.Lock()
_GRAMMARS_MAX = 256


def _grammar_key(spec: ConstraintSpec) -> str | None:
    """A content key for a constraint's grammar (None: not cached)."""
    if spec.kind == "recognizer":  # one Grammar per registered object: its compiled memo is shared by requests
        return f"recognizer:{id(spec.value)}"
    try:
        value = tool_call_schema(spec) if spec.kind == "tools" else spec.value
        return json.dumps([spec.kind, spec.strict, value], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def cached_grammar(spec: ConstraintSpec) -> logitgate.Grammar:
    """``build_grammar``, memoised by content (building a JSON Schema's grammar takes milliseconds,
    every request; ``logitgate.compile`` caches the compiled form itself)."""
    key = _grammar_key(spec)
    if key is not None:
        with _GRAMMARS_LOCK:
            hit = _GRAMMARS.get(key)
            if hit is not None:
                _GRAMMARS.move_to_end(key)
                return hit
    grammar = build_grammar(spec)
    if key is not None:
        with _GRAMMARS_LOCK:
            _GRAMMARS[key] = grammar
            while len(_GRAMMARS) > _GRAMMARS_MAX:
                _GRAMMARS.popitem(last=False)
    return grammar


def compile_constraint(spec: ConstraintSpec, tokenizer: logitgate.Tokenizer) -> logitgate.CompiledGrammar:
    """``logitgate.compile`` of the constraint (cached by content there)."""
    grammar = cached_grammar(spec)
    try:
        return logitgate.compile(grammar, tokenizer)
    except LimitError as exc:
        raise _too_large(exc, spec) from None
    except (CompileError, LogitgateError, ValueError) as exc:
        raise APIError(400, f"the constraint in '{spec.param}' cannot be compiled: {exc}", param=spec.param,
                       code="invalid_constraint") from None


# -- responses -----------------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


def sse(obj: Any) -> str:
    """One server-sent event: ``data: {json}`` (or ``data: [DONE]``)."""
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"data: {data}\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def split_tool_call(text: str) -> tuple[str, str] | None:
    """``(name, arguments JSON text)`` of a complete tool-call object, else None."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
        return None
    m = _TOOL_HEAD.match(text)
    raw = text[m.end():-1] if m and text.endswith("}") else json.dumps(obj["arguments"], ensure_ascii=False)
    return obj["name"], raw


def tool_call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def controller_chat_response(*, rid: str, created: int, model: str, result: Any, prompt_tokens: int) -> dict[str, Any]:
    """A ``chat.completion`` for a controller run: one choice per sequence (fork), in order, and
    logitgate's ``controller`` field with each sequence's log and error and the variables."""
    choices = []
    for s in result.sequences:
        finish = {"stop": "stop", "length": "length"}.get(s.stop_reason, "error")
        choices.append({"index": s.seq_id, "message": {"role": "assistant", "content": s.text, "refusal": None},
                        "logprobs": None, "finish_reason": finish})
    completion = sum(len(s.tokens) for s in result.sequences)
    return {"id": rid, "object": "chat.completion", "created": created, "model": model, "system_fingerprint": None,
            "choices": choices, "usage": usage(prompt_tokens, completion),
            "controller": {"sequences": [{"index": s.seq_id, "logs": s.log, "error": s.error or ""}
                                         for s in result.sequences],
                           "variables": {k: bytes(v).decode("utf-8", errors="replace")
                                         for k, v in sorted(result.variables.items())}}}


def chat_response(*, rid: str, created: int, model: str, text: str, finish_reason: str, usage_: dict[str, int],
                  tool_call_id: str | None = None) -> dict[str, Any]:
    """A ``chat.completion``; with ``tool_call_id``, a complete tool-call object becomes
    ``message.tool_calls`` (finish_reason ``tool_calls``)."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    call = split_tool_call(text) if tool_call_id is not None and finish_reason == "stop" else None
    if call is not None:
        message = {"role": "assistant", "content": None, "refusal": None,
                   "tool_calls": [tool_call(call[0], call[1], tool_call_id)]}  # type: ignore[arg-type]
        finish_reason = "tool_calls"
    return {"id": rid, "object": "chat.completion", "created": created, "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage_}


def chat_chunk(*, rid: str, created: int, model: str, delta: dict[str, Any] | None,
               finish_reason: str | None = None, usage_: dict[str, int] | None = None,
               with_usage: bool = False) -> dict[str, Any]:
    """A ``chat.completion.chunk``; ``delta=None`` makes the final usage chunk (no choices)."""
    chunk: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "system_fingerprint": None,
                             "choices": [] if delta is None else
                             [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    if with_usage:
        chunk["usage"] = usage_
    return chunk


def completion_response(*, rid: str, created: int, model: str, text: str, finish_reason: str,
                        usage_: dict[str, int]) -> dict[str, Any]:
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "system_fingerprint": None,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage_}


def completion_chunk(*, rid: str, created: int, model: str, text: str | None, finish_reason: str | None = None,
                     usage_: dict[str, int] | None = None, with_usage: bool = False) -> dict[str, Any]:
    """A streamed ``text_completion``; ``text=None`` makes the final usage chunk (no choices)."""
    chunk: dict[str, Any] = {"id": rid, "object": "text_completion", "created": created, "model": model,
                             "system_fingerprint": None,
                             "choices": [] if text is None else
                             [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}]}
    if with_usage:
        chunk["usage"] = usage_
    return chunk


_TOOL_HEAD = re.compile(r'\{"name":("(?:[^"\\]|\\.)*"),"arguments":')


class ToolCallStream:
    """Turns the streamed text of a tool-call object (compact JSON, ``name`` first, as the
    constraint writes it) into OpenAI's ``tool_calls`` deltas: the name once it is complete, then
    the arguments as they come (the object's closing ``}`` held back)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.text = ""
        self.head_end: int | None = None
        self.sent = 0  # characters of the arguments sent

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Deltas (each a ``tool_calls`` list entry) for newly generated text."""
        self.text += text
        out = []
        if self.head_end is None:
            m = _TOOL_HEAD.match(self.text)
            if m is None:
                return []
            self.head_end = m.end()
            out.append({"index": 0, "id": self.call_id, "type": "function",
                        "function": {"name": json.loads(m.group(1)), "arguments": ""}})
        args = self.text[self.head_end:-1]  # hold back the last character: it may be the closing brace
        if len(args) > self.sent:
            out.append({"index": 0, "function": {"arguments": args[self.sent:]}})
            self.sent = len(args)
        return out

    def finish(self, finish_reason: str) -> tuple[list[dict[str, Any]], str | None]:
        """The last deltas and, if the text never became a tool call, the text to send as content."""
        if self.head_end is None:
            return [], self.text
        args = self.text[self.head_end:]
        if finish_reason == "stop" and args.endswith("}"):
            args = args[:-1]
        rest = args[self.sent:]
        self.sent = len(args)
        return ([{"index": 0, "function": {"arguments": rest}}] if rest else []), None
