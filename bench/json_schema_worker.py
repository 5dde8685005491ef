"""Measure ONE engine on ONE tokenizer over JSON schemas, in its own process (started by
bench_json_schema.py through ``runner.run_worker``; the JSON Schema counterpart of grammar_worker.py).

Protocol: reads a job JSON file (argv[1]); writes one JSON object per line to stdout:
  {"event": "setup", ...}             once, after the tokenizer and the engine are ready
  {"event": "start", "schema": id}    before each schema (the parent's timeout clock)
  {"event": "result", ...}            after each schema
Progress lines ("progress <schema id>") go to stderr, which the parent tails for its log.

Per schema: compile (schema text -> compiled for the vocabulary) + a new matcher + the first mask
= "compile ms" (the first mask alone is "first mask µs"); then each labelled instance's token path
is fed token by token: fill the mask (timed), check the token is in it, advance. A valid instance
is accepted iff every token was allowed and taken and at the end the matcher is accepting with EOS
in the mask; an invalid one is rejected iff some token was refused or the end is not accepting.
A walk stops at its first refused token.

Engines: the peers.py adapters (same tokenizer set-up from the same vocabulary bytes), extended
with ``compile_schema(item)``, plus lm-format-enforcer. ``Unsupported`` = the engine says it
cannot handle the schema (logitgate ``SchemaError``, a peer's unsupported/unimplemented-keyword
error); any other exception is a compile error.
"""
from __future__ import annotations

import gc
import inspect
import json
import logging
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers import (  # noqa: E402
    Engine,
    LLGuidanceEngine,
    LogitgateEngine,
    OutlinesCoreEngine,
    XGrammarEngine,
    allocate_bitmask,
    is_allowed,
)
from vocab import load_vocab  # noqa: E402

WARMUP_SCHEMA = '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"]}'
WARMUP_TEXT = '{"a":12,"b":"xy"}'
WARMUP_REGEX = "[0-9]+(\\.[0-9]+)?"

# A peer's error message that says "this schema uses something I do not implement".
UNSUPPORTED_RX = re.compile(
    r"unimplemented|not supported|unsupported|not implemented|not yet supported|is not allowed in|"
    r"only supported|cannot handle|unknown format|invalid reference path|does not support|"
    r"not present in a registry|retrieving it failed",
    re.IGNORECASE)


class Unsupported(Exception):
    """The engine cannot handle this schema (or the API is not there yet)."""

    def __init__(self, msg, keywords=None):
        super().__init__(msg)
        self.keywords = keywords or []


def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:2000]


# --------------------------------------------------------------------------- logitgate

KNOWN_KEYWORDS = {
    "$ref", "$defs", "definitions", "$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
    "$recursiveAnchor", "$schema", "$vocabulary", "$comment", "type", "enum", "const", "properties",
    "patternProperties", "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "required",
    "propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
    "dependencies", "items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
    "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf", "anyOf", "oneOf", "not",
    "if", "then", "else", "contentEncoding", "contentMediaType", "contentSchema", "default", "examples",
    "title", "description", "readOnly", "writeOnly", "deprecated",
}
_QUOTED = re.compile(r"""['"`]([$A-Za-z][A-Za-z0-9_$-]*)['"`]""")


def schema_error_keywords(err) -> list:
    """Keyword names a logitgate SchemaError is about (see ``problem_keywords``)."""
    problems = list(getattr(err, "problems", None) or []) or [(getattr(err, "pointer", None), str(err))]
    return problem_keywords(problems)


NAME_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies",
             "dependentRequired"}
GENERIC_WORDS = {"type", "title", "description", "default", "examples", "items", "properties", "required"}
_KW_WORDS = re.compile(r"\$?[A-Za-z]+")


def problem_keywords(problems) -> list:
    """For each (JSON pointer, message): the last keyword of the pointer (property names after
    ``properties`` / ``$defs`` / ... and array indexes skipped; a pointer may start with a URI and
    ``#``); when the pointer ends at a property name, or has no keyword, the first keyword named
    in the message (``minLength/maxLength above 256`` -> minLength); else 'other'."""
    out = []
    for ptr, msg in problems:
        frag = (ptr or "").split("#", 1)[1] if "#" in (ptr or "") else (ptr or "")
        toks = [t.replace("~1", "/").replace("~0", "~") for t in frag.split("/") if t != ""]
        kw, at_name, i = None, False, 0
        while i < len(toks):
            t = toks[i]
            at_name = False
            if t in NAME_MAPS and i + 1 < len(toks):
                kw, at_name, i = t, True, i + 2
                continue
            if t in KNOWN_KEYWORDS:
                kw = t
            i += 1
        if kw is None or at_name:
            for w in _KW_WORDS.findall(str(msg)):
                if w in KNOWN_KEYWORDS and w not in GENERIC_WORDS:
                    kw = w
                    break
        out.append(kw or "other")
    return out


class LogitgateSchemaEngine(LogitgateEngine):
    """``Grammar.from_json_schema(text, whitespace="compact", property_order=..., strict=...)`` +
    ``logitgate.compile(g, tok, cache=False)``. A missing ``from_json_schema`` or a
    ``SchemaError`` is "unsupported"."""

    PROPERTY_ORDER = "schema"
    STRICT = False
    order = "schema"  # instances fed with keys in schema order
    walks = True

    def _setup(self):
        super()._setup()
        try:
            import logitgate.errors as lge

            self.SchemaError = lge.SchemaError
        except (ImportError, AttributeError):
            self.SchemaError = ()
        ctor = getattr(self.lg.Grammar, "from_json_schema", None)
        try:
            self._ctor_params = set(inspect.signature(ctor).parameters) if ctor else set()
        except (TypeError, ValueError):
            self._ctor_params = set()

    def compile_schema(self, item):
        ctor = getattr(self.lg.Grammar, "from_json_schema", None)
        if ctor is None:
            raise Unsupported("AttributeError: logitgate.Grammar has no from_json_schema", ["(no API)"])
        kw = dict(whitespace="compact", property_order=self.PROPERTY_ORDER, strict=self.STRICT)
        if item.get("remotes") and "registry" in self._ctor_params:
            kw["registry"] = item["remotes"]
        self.last_relaxed = None
        try:
            grammar = ctor(item["schema_text"], **kw)
            self.last_relaxed = list(getattr(grammar, "relaxed", None) or [])
            return self.lg.compile(grammar, self.tok, **self._compile_kw)
        except self.SchemaError as e:
            raise Unsupported(one_line(e), schema_error_keywords(e)) from e
        except NotImplementedError as e:
            raise Unsupported(one_line(e), ["(not implemented)"]) from e

    def warmup(self, bm):
        if hasattr(self.lg.Grammar, "from_json_schema"):
            return warmup_schema(self, bm)
        self.matcher(self.compile(WARMUP_REGEX)).fill(bm)  # still loads / JIT-compiles the kernels
        return "regex (no from_json_schema yet)"


class LogitgateAnyOrderEngine(LogitgateSchemaEngine):
    PROPERTY_ORDER = "any"
    order = "original"


class LogitgateStrictEngine(LogitgateSchemaEngine):
    """strict=True (the library default), ``Grammar.from_json_schema`` only (no token-level
    compile, no walks): counts what strict mode refuses and why. Its "compile ms" is the time to
    build the Grammar."""

    STRICT = True
    walks = False

    def compile_schema(self, item):
        ctor = getattr(self.lg.Grammar, "from_json_schema", None)
        if ctor is None:
            raise Unsupported("AttributeError: logitgate.Grammar has no from_json_schema", ["(no API)"])
        kw = dict(whitespace="compact", property_order=self.PROPERTY_ORDER, strict=True)
        if item.get("remotes") and "registry" in self._ctor_params:
            kw["registry"] = item["remotes"]
        try:
            return ctor(item["schema_text"], **kw)
        except self.SchemaError as e:
            raise Unsupported(one_line(e), schema_error_keywords(e)) from e
        except NotImplementedError as e:
            raise Unsupported(one_line(e), ["(not implemented)"]) from e

    def warmup(self, bm):
        if hasattr(self.lg.Grammar, "from_json_schema"):
            self.compile_schema({"schema_text": WARMUP_SCHEMA})
            return "schema (Grammar only)"
        return "nothing (no from_json_schema yet)"


# --------------------------------------------------------------------------- peers


class LLGuidanceSchemaEngine(LLGuidanceEngine):
    """``LLMatcher.grammar_from_json_schema(text, defaults={whitespace_flexible: False,
    item_separator: ",", key_separator: ":"})`` + ``LLMatcher(tokenizer, grammar)`` (where
    llguidance really compiles; ``lenient`` left at its default False, so unknown keywords are
    errors)."""

    order = "schema"
    walks = True
    OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}

    def compile_schema(self, item):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(item["schema_text"], defaults=dict(self.OPTIONS))
        m = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return {"grammar": grammar, "first": m}

    def warmup(self, bm):
        return warmup_schema(self, bm)


class XGrammarSchemaEngine(XGrammarEngine):
    """``GrammarCompiler(cache_enabled=False).compile_json_schema(text, any_whitespace=False,
    separators=(",", ":"), strict_mode=False)``: compact output; strict_mode off so that properties
    and items the schema does not forbid stay allowed, as JSON Schema says (xgrammar's default
    strict_mode=True forbids every property not listed)."""

    order = "schema"
    walks = True

    def compile_schema(self, item):
        return self.compiler.compile_json_schema(item["schema_text"], any_whitespace=False,
                                                 separators=(",", ":"), strict_mode=False)

    def warmup(self, bm):
        return warmup_schema(self, bm)


class OutlinesCoreSchemaEngine(OutlinesCoreEngine):
    """``outlines_core.json_schema.build_regex_from_schema(text)`` (its default whitespace ``[ ]?``
    between tokens, so compact text fits) + ``Index(regex, vocabulary)`` + ``Guide``."""

    order = "schema"
    walks = True

    def _import(self):
        super()._import()
        from outlines_core.json_schema import build_regex_from_schema

        self.build_regex = build_regex_from_schema

    def compile_schema(self, item):
        return self.oc.Index(self.build_regex(item["schema_text"]), self.vocabulary)

    def warmup(self, bm):
        return warmup_schema(self, bm)


# --------------------------------------------------------------------------- lm-format-enforcer


def lmfe_tokenizer_data(data_cls, tokens, skip_ids, eos_id: int, vocab_size: int):
    """lm-format-enforcer's ``TokenEnforcerTokenizerData`` (``data_cls``) from token bytes: every
    token not in ``skip_ids`` and not empty as ``(id, text, is_new_word)`` (see ``LMFEEngine``)."""
    regular = []
    for i, t in enumerate(tokens):
        if i in skip_ids or not t:
            continue
        try:
            regular.append((i, t.decode("utf-8"), True))
        except UnicodeDecodeError:
            regular.append((i, t.decode("utf-8", "replace"), False))

    def decoder(ids):
        return b"".join(tokens[i] for i in ids).decode("utf-8", "replace").rstrip("\ufffd")

    return data_cls(regular, decoder, eos_id, False, vocab_size)


class LMFEEngine(Engine):
    """lm-format-enforcer: ``JsonSchemaParser(schema_dict)`` + ``TokenEnforcer(tokenizer_data,
    parser)``; the mask is ``get_allowed_tokens(prefix)`` (a list of ids, ``use_bitmask=False``)
    turned into the int32 bitmask inside the timed fill.

    Tokenizer data from the same token bytes: every non-special, non-empty token as
    ``(id, text, is_new_word)``, text = its UTF-8 decoding (``errors="replace"`` for tokens that
    are not whole UTF-8, e.g. byte-fallback pieces); ``is_new_word`` = the bytes are whole UTF-8
    (then LMFE takes the token's text as is); the decoder joins the bytes, decodes with
    ``errors="replace"`` and strips trailing U+FFFD (as LMFE's own transformers integration), so
    multi-token characters come out right. LMFE accepts object keys in any order."""

    name = "lm-format-enforcer"
    dist = "lm-format-enforcer"
    order = "original"
    walks = True

    def _import(self):
        # (imports torch when it is installed)
        from lmformatenforcer import JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData

        self.JsonSchemaParser, self.TokenEnforcer = JsonSchemaParser, TokenEnforcer
        self.TokenEnforcerTokenizerData = TokenEnforcerTokenizerData
        # LMFE logs every internal parser exception (with a traceback) on the root logger.
        root = logging.getLogger()
        root.addHandler(logging.NullHandler())
        root.setLevel(logging.CRITICAL)

    def _setup(self):
        v = self.vocab
        self.data = lmfe_tokenizer_data(self.TokenEnforcerTokenizerData, v.tokens, set(v.special_ids) | set(v.eos_ids),
                                        v.eos_id, v.vocab_size)
        self.width = (v.vocab_size + 31) // 32

    def compile_schema(self, item):
        schema = json.loads(item["schema_text"])
        if not isinstance(schema, dict):
            raise Unsupported(f"lm-format-enforcer takes a schema object, not {type(schema).__name__}")
        enforcer = self.TokenEnforcer(self.data, self.JsonSchemaParser(schema))
        return {"schema": schema, "first": enforcer}

    def matcher(self, handle):
        e = handle.pop("first", None)
        if e is None:
            e = self.TokenEnforcer(self.data, self.JsonSchemaParser(handle["schema"]))
        return LMFEMatcher(e, self.width, self.vocab.eos_id)

    def warmup(self, bm):
        return warmup_schema(self, bm)


class LMFEMatcher:
    __slots__ = ("e", "prefix", "width", "eos", "eos_ok")

    def __init__(self, enforcer, width, eos):
        self.e, self.prefix, self.width, self.eos, self.eos_ok = enforcer, [], width, eos, False

    def fill(self, bm):
        allowed = self.e.get_allowed_tokens(self.prefix).allowed_tokens  # list of ids
        bits = np.zeros(self.width * 32, dtype=np.uint8)
        if allowed:
            bits[np.fromiter(allowed, dtype=np.int64, count=len(allowed))] = 1
        bm[0] = np.packbits(bits, bitorder="little").view(np.int32)
        self.eos_ok = bool(bits[self.eos])

    def advance(self, token_id):
        self.prefix.append(int(token_id))
        return True  # LMFE has no refusal of its own: the caller checks the mask first

    def is_accepting(self):
        return self.eos_ok


SCHEMA_ENGINES = {
    "logitgate": LogitgateSchemaEngine,
    "logitgate[any]": LogitgateAnyOrderEngine,
    "logitgate[strict]": LogitgateStrictEngine,
    "llguidance": LLGuidanceSchemaEngine,
    "xgrammar": XGrammarSchemaEngine,
    "outlines-core": OutlinesCoreSchemaEngine,
    "lm-format-enforcer": LMFEEngine,
}


# --------------------------------------------------------------------------- measuring


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def progress(text):
    sys.stderr.write(f"progress {text}\n")
    sys.stderr.flush()


def warmup_schema(eng, bm):
    """Compile a tiny schema and walk one instance (not reported): lazy imports, JIT, caches."""
    from vocab import TextEncoder

    m = eng.matcher(eng.compile_schema({"schema_text": WARMUP_SCHEMA}))
    m.fill(bm)
    try:
        ids = TextEncoder(eng.vocab.name, eng.vocab.tokens).encode(WARMUP_TEXT)
    except Exception:  # noqa: BLE001 - the warm-up walk is optional
        ids = []
    for t in ids:
        if not is_allowed(bm, t) or not m.advance(t):
            break
        m.fill(bm)
    return "schema"


def walk(m, ids, bm, eos_id, times_ns):
    """Feed ids to m (its step-0 mask already in bm), timing each fill after a token.
    Returns (all taken, tokens taken, why it stopped or None, accepting at the end, EOS in mask)."""
    perf = time.perf_counter_ns
    for k, t in enumerate(ids):
        if not is_allowed(bm, t):
            return False, k, "not in mask", None, None
        try:
            ok = m.advance(t)
        except Exception as e:  # noqa: BLE001 - an engine error on a token counts as a refusal
            return False, k, f"advance raised {one_line(e)[:200]}", None, None
        if not ok:
            return False, k, "refused by advance", None, None
        t0 = perf()
        try:
            m.fill(bm)
        except Exception as e:  # noqa: BLE001
            times_ns.append(perf() - t0)
            return False, k + 1, f"fill raised {one_line(e)[:200]}", None, None
        times_ns.append(perf() - t0)
    try:
        acc = bool(m.is_accepting())
    except Exception:  # noqa: BLE001
        acc = False
    return True, len(ids), None, acc, is_allowed(bm, eos_id)


def run_schema(eng, vocab, item, job):
    res = {"event": "result", "schema": item["name"], "status": "ok"}
    perf = time.perf_counter_ns
    bm = allocate_bitmask(vocab.vocab_size)
    eng.fresh()
    gc.collect()
    gc.disable()
    try:
        t0 = perf()
        try:
            handle = eng.compile_schema(item)
            t1 = perf()
            if not eng.walks:  # logitgate[strict]: the Grammar alone
                res["compile_ms"] = res["compile_only_ms"] = (t1 - t0) / 1e6
                return res
            m = eng.matcher(handle)
            t2 = perf()
            m.fill(bm)
            t3 = perf()
        except Unsupported as e:
            res.update(status="unsupported", error=str(e)[:2000], keywords=e.keywords)
            return res
        except Exception as e:  # noqa: BLE001 - the engine refuses the schema or fails on it
            msg = one_line(e)
            res.update(status="unsupported" if UNSUPPORTED_RX.search(msg) else "error", error=msg)
            return res
        res["compile_ms"] = (t3 - t0) / 1e6
        res["compile_only_ms"] = (t1 - t0) / 1e6
        res["first_mask_us"] = (t3 - t2) / 1e3
        res["first_mask_allowed"] = int(np.bitwise_count(bm.view(np.uint32)).sum())
        relaxed = getattr(eng, "last_relaxed", None)
        if relaxed:  # logitgate strict=False: the constructs it over-approximated
            res["relaxed"] = [f"{p or '/'}: {' '.join(str(m).split())}"[:300] for p, m in relaxed[:50]]
            res["relaxed_keywords"] = problem_keywords(relaxed)
        if not eng.walks:
            return res

        budget_end = time.monotonic() + job["walk_budget_s"]
        fills, outs = [], []
        for k, inst in enumerate(item["instances"]):
            if time.monotonic() > budget_end:
                outs.append({"i": inst["i"], "valid": inst["valid"], "outcome": "skipped",
                             "why": "walk budget spent"})
                continue
            if k > 0:
                try:
                    m = eng.matcher(handle)
                    t0 = perf()
                    m.fill(bm)
                    fills.append(perf() - t0)
                except Exception as e:  # noqa: BLE001
                    outs.append({"i": inst["i"], "valid": inst["valid"], "outcome": "error",
                                 "why": f"new matcher failed: {one_line(e)[:300]}"})
                    continue
            ids = inst["ids"]
            ok, taken, why, acc, eos_ok = walk(m, ids, bm, vocab.eos_id, fills)
            if ok and not (acc and eos_ok):
                why = "not accepting at the end" if not acc else "EOS not in the mask at the end"
            passed_whole = ok and acc and eos_ok
            outcome = "accepted" if passed_whole else "rejected"
            o = {"i": inst["i"], "valid": inst["valid"], "outcome": outcome, "tokens": len(ids), "taken": taken}
            if why:
                o["why"] = why
            outs.append(o)
        res["instances"] = outs
        res["fill_ns"] = fills
        return res
    finally:
        gc.enable()


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    vocab = load_vocab(job["tokenizer"], job["vocab_source"])
    setup = {"event": "setup", "vocab_load_s": vocab.load_s, "vocab_source": vocab.source}
    eng = SCHEMA_ENGINES[job["engine"]](vocab)
    setup.update(engine_setup_s=eng.setup_s, import_s=eng.import_s, version=eng.version)
    t0 = time.perf_counter()
    try:
        setup["warmup_with"] = eng.warmup(allocate_bitmask(vocab.vocab_size))
        setup["warmup_error"] = None
    except Exception as e:  # noqa: BLE001
        setup["warmup_error"] = one_line(e)
    setup["warmup_s"] = time.perf_counter() - t0
    # Everything loaded so far (vocabulary, token tables, LMFE's prefix tree) lives to the end:
    # keep it out of the collections run before each schema.
    gc.collect()
    gc.freeze()
    emit(setup)

    deadline = job.get("deadline")  # the engine's time budget (epoch seconds), None: unlimited
    for item in job["items"]:
        if deadline is not None and time.time() > deadline:
            emit({"event": "result", "schema": item["name"], "status": "skipped",
                  "error": "not run: the engine's time budget was spent"})
            continue
        progress(item["name"])
        emit({"event": "start", "schema": item["name"]})
        emit(run_schema(eng, vocab, item, job))


if __name__ == "__main__":
    main()
