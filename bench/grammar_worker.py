"""Measure ONE engine on ONE tokenizer over context-free grammars, in its own process
(started by bench_grammar.py; the grammar counterpart of regex_worker.py).

Protocol: reads a job JSON file (argv[1]); writes one JSON object per line to stdout:
  {"event": "setup", ...}              once, after the tokenizer and the engine are ready
  {"event": "start", "grammar": name}  before each grammar (the parent's timeout clock)
  {"event": "result", ...}             after each grammar
The masks of the first walk (one per step, int32 [steps, W]) are saved as .npy files in
job["mask_dir"] for the parent's cross-engine comparison (up to MAX_SAVED_STEPS steps).

Engines: the peers.py adapters (same tokenizer set-up from the same vocabulary bytes),
extended with ``compile_grammar(fmt, text)`` for fmt in gbnf / lark / yacc. A format an
engine has no reader for raises ``Unsupported`` and the row is reported as "unsupported".
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers import (  # noqa: E402
    LLGuidanceEngine,
    LogitgateEngine,
    XGrammarEngine,
    allocate_bitmask,
    is_allowed,
)
from vocab import load_vocab  # noqa: E402

MAX_SAVED_STEPS = 4000  # masks kept for the comparison (c.y --c-y-full has ~10k steps)
# Warm-up (not reported): a tiny grammar in the engine's first readable format.
WARMUP = {"gbnf": ('root ::= "n=" [0-9]+', "n=42"), "lark": ('start: "n=" /[0-9]+/', "n=42")}
WARMUP_REGEX = "[0-9]+(\\.[0-9]+)?"


class Unsupported(Exception):
    """The engine has no reader for this grammar format (or the API is not there yet)."""


# --------------------------------------------------------------------------- engines


class LogitgateGrammarEngine(LogitgateEngine):
    """``logitgate.Grammar.from_gbnf / from_lark / from_yacc`` + ``logitgate.compile`` (its
    compile cache off, as for regexes). A missing constructor is "unsupported"."""

    CTORS = {"gbnf": "from_gbnf", "lark": "from_lark", "yacc": "from_yacc"}
    CTOR_KW: dict = {}

    def compile_grammar(self, fmt, text):
        ctor_name = self.CTORS[fmt]
        ctor = getattr(self.lg.Grammar, ctor_name, None)
        if ctor is None:
            raise Unsupported(f"AttributeError: logitgate.Grammar has no {ctor_name}")
        try:
            grammar = ctor(text, **self.CTOR_KW.get(fmt, {}))
        except NotImplementedError as e:
            raise Unsupported(f"NotImplementedError: {e}") from e
        try:
            return self.lg.compile(grammar, self.tok, **self._compile_kw)
        except NotImplementedError as e:
            raise Unsupported(f"NotImplementedError: {e}") from e

    def warmup(self, bm):
        for fmt, (src, _) in WARMUP.items():
            if hasattr(self.lg.Grammar, self.CTORS[fmt]):
                m = self.matcher(self.compile_grammar(fmt, src))
                m.fill(bm)
                # load every kernel once (numba's cache is on disk, loading it takes a few ms
                # per kernel in a new process): a few masks at lexeme boundaries and inside
                g = self.lg.Grammar.from_lark('start: "n=" NUM ("," NUM)*\nNUM: /[0-9]+/\n%ignore " "\n')
                lm = self.lg.Matcher(self.lg.compile(g, self.tok))
                for piece in ["n", "=", "4", "2", ",", " ", "7"]:
                    lm.fill_next_token_bitmask(bm, 0)
                    lm.accept_string(piece)
                lm.find_jump_forward_bytes()
                lm.is_accepting()
                # the kernels of the start state's recorded walk (an engine records it only once
                # its plain walks have taken a while, so a warm-up this short needs it at once)
                import logitgate.grammar.engine as engine_mod

                after, engine_mod.START_WALK_AFTER_S = engine_mod.START_WALK_AFTER_S, 0.0
                try:
                    g = self.lg.Grammar.from_lark('start: (NAME ";")+\nNAME: /[a-z]+/\n%ignore " "\n')
                    sm = self.lg.Matcher(self.lg.compile(g, self.tok, cache=False))
                    for piece in ["ab", ";", " cd", ";"]:
                        sm.fill_next_token_bitmask(bm, 0)
                        sm.accept_string(piece)
                finally:
                    engine_mod.START_WALK_AFTER_S = after
                # and inside a string body (its kernels load on the first string state met)
                js = self.lg.Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}}})
                jm = self.lg.Matcher(self.lg.compile(js, self.tok))
                for piece in ['{"', 'a', '":"', 'hello', ' world', '"}']:
                    jm.fill_next_token_bitmask(bm, 0)
                    jm.accept_string(piece)
                return f"{fmt} grammar"
        self.matcher(self.compile(WARMUP_REGEX)).fill(bm)  # still JIT-compiles the kernels
        return "regex (no grammar reader yet)"


class LLGuidanceGrammarEngine(LLGuidanceEngine):
    """``llguidance.grammar_from("lark" | "gbnf", text)`` (GBNF goes through llguidance's own
    Python converter ``gbnf_to_lark``, timed as part of compile) + ``LLMatcher(tokenizer,
    grammar)``, where the grammar is really compiled."""

    def compile_grammar(self, fmt, text):
        if fmt not in ("gbnf", "lark"):
            raise Unsupported(f"llguidance {self.version} has no reader for the {fmt} format")
        grammar = self.llg.grammar_from(fmt, text)
        m = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(m.get_error())
        return {"grammar": grammar, "first": m}

    def warnings(self, handle):
        try:
            _, msgs = self.llg.LLMatcher.validate_grammar_with_warnings(handle["grammar"], self.tokenizer)
            return list(msgs)
        except Exception:
            return []

    def warmup(self, bm):
        src = WARMUP["lark"][0]
        self.matcher(self.compile_grammar("lark", src)).fill(bm)
        return "lark grammar"


class XGrammarGrammarEngine(XGrammarEngine):
    """GBNF: ``xgrammar.Grammar.from_ebnf(text, root_rule_name="root")`` (xgrammar's own EBNF
    dialect, close to GBNF); Lark: ``xgrammar.Grammar.from_lark(text)`` where the installed
    xgrammar has it; then ``GrammarCompiler.compile_grammar`` (cache off)."""

    def compile_grammar(self, fmt, text):
        xgr = self.xgr
        if fmt == "gbnf":
            grammar = xgr.Grammar.from_ebnf(text, root_rule_name="root")
        elif fmt == "lark":
            if not hasattr(xgr.Grammar, "from_lark"):
                raise Unsupported(f"xgrammar {self.version} has no Lark reader")
            grammar = xgr.Grammar.from_lark(text)
        else:
            raise Unsupported(f"xgrammar {self.version} has no reader for the {fmt} format")
        return self.compiler.compile_grammar(grammar)

    def warmup(self, bm):
        self.matcher(self.compile_grammar("gbnf", WARMUP["gbnf"][0])).fill(bm)
        return "gbnf grammar"


class LogitgateGreedyGrammarEngine(LogitgateGrammarEngine):
    """logitgate with ``Grammar.from_gbnf(text, lexing="greedy")``: GBNF lexed the way
    llguidance does (every terminal-only rule a greedy lexeme), for a like-for-like comparison;
    Lark and yacc grammars are the same as ``logitgate``."""

    CTOR_KW = {"gbnf": {"lexing": "greedy"}}


GRAMMAR_ENGINES = {
    "logitgate": LogitgateGrammarEngine,
    "logitgate[greedy]": LogitgateGreedyGrammarEngine,
    "llguidance": LLGuidanceGrammarEngine,
    "xgrammar": XGrammarGrammarEngine,
}


# --------------------------------------------------------------------------- measuring


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def popcount(bm: np.ndarray) -> int:
    return int(np.bitwise_count(bm.view(np.uint32)).sum())


def walk(m, ids, offsets, bm, eos_id, times_ns, masks=None, counts=None):
    """Feed ids to matcher m (its step-0 mask already in bm); time every fill after a token.

    Returns a dict: ok (whole path taken), tokens_accepted, rejected (None or a text saying
    where), is_accepting and eos_allowed at the end (None when the walk stopped early)."""
    perf = time.perf_counter_ns
    for k, t in enumerate(ids):
        why = None
        if not is_allowed(bm, t):
            why = "not in mask"
        elif not m.advance(t):
            why = "refused by accept"
        if why:
            return {"ok": False, "tokens_accepted": k, "rejected_at_byte": offsets[k],
                    "rejected": f"rejected at byte {offsets[k]} (token {k}, id {t}: {why})",
                    "is_accepting": None, "eos_allowed": None}
        t0 = perf()
        m.fill(bm)
        t1 = perf()
        times_ns.append(t1 - t0)
        if masks is not None and len(masks) < MAX_SAVED_STEPS:
            masks.append(bm[0].copy())
        if counts is not None:
            counts.append(popcount(bm))
    return {"ok": True, "tokens_accepted": len(ids), "rejected_at_byte": None, "rejected": None,
            "is_accepting": bool(m.is_accepting()), "eos_allowed": is_allowed(bm, eos_id)}


def run_grammar(eng, vocab, item, job):
    """All measurements for one grammar. item: name, fmt, text, ids, offsets."""
    res = {"event": "result", "grammar": item["name"], "status": "ok"}
    perf = time.perf_counter_ns
    bm = allocate_bitmask(vocab.vocab_size)

    # 1. compile (grammar text -> compiled for this vocabulary), then matcher + first mask.
    eng.fresh()
    gc.collect()
    gc.disable()
    rss0 = proc_status_kb("VmRSS")
    peak_ok = reset_peak_rss()
    t0 = perf()
    try:
        handle = eng.compile_grammar(item["fmt"], item["text"])
        t1 = perf()
        m = eng.matcher(handle)
        m.fill(bm)
        t2 = perf()
    except Unsupported as e:
        gc.enable()
        res.update(status="unsupported", error=str(e))
        return res
    except Exception as e:  # the engine refuses the grammar, or fails on it
        gc.enable()
        res.update(status="error", error=f"{type(e).__name__}: {' '.join(str(e).split())}")
        return res
    res["compile_ms"] = (t1 - t0) / 1e6
    res["first_mask_ms"] = (t2 - t1) / 1e6
    res["rss_peak_delta_kb"] = (proc_status_kb("VmHWM") - rss0) if peak_ok else None
    res["engine_reported_bytes"] = eng.index_bytes(handle) if not isinstance(handle, dict) else None

    # 2. first walk along the sample's token path (masks kept), then warm walks.
    budget_end = time.monotonic() + job["walk_budget_s"]
    ids, offsets = item["ids"], item["offsets"]
    times_first, masks, counts = [], [bm[0].copy()], [popcount(bm)]
    first = walk(m, ids, offsets, bm, vocab.eos_id, times_first, masks, counts)
    np.save(os.path.join(job["mask_dir"], f"{item['name']}.npy"), np.stack(masks))
    res.update({f"walk_{k}": v for k, v in first.items()})
    res["allowed_counts"] = counts
    res["walks"] = 1
    times_warm = []
    for _ in range(job["repeat"] - 1):
        if time.monotonic() > budget_end:
            break
        mw = eng.matcher(handle)
        t0 = perf()
        mw.fill(bm)
        times_warm.append(perf() - t0)
        walk(mw, ids, offsets, bm, vocab.eos_id, times_warm)
        res["walks"] += 1
    gc.enable()
    res["mask_ns_first_walk"] = times_first
    res["mask_ns_warm"] = times_warm
    if not isinstance(handle, dict):
        res["engine_reported_bytes_after_walks"] = eng.index_bytes(handle)
    warn = getattr(eng, "warnings", None)
    if warn is not None:
        res["engine_warnings"] = warn(handle)
    return res


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    os.makedirs(job["mask_dir"], exist_ok=True)
    vocab = load_vocab(job["tokenizer"], job["vocab_source"])
    setup = {"event": "setup", "vocab_load_s": vocab.load_s, "vocab_source": vocab.source}
    eng = GRAMMAR_ENGINES[job["engine"]](vocab)
    setup.update(engine_setup_s=eng.setup_s, import_s=eng.import_s, version=eng.version)

    t0 = time.perf_counter()
    try:
        setup["warmup_with"] = eng.warmup(allocate_bitmask(vocab.vocab_size))
        setup["warmup_error"] = None
    except Exception as e:
        setup["warmup_error"] = f"{type(e).__name__}: {e}"
    setup["warmup_s"] = time.perf_counter() - t0
    emit(setup)

    for item in job["items"]:
        emit({"event": "start", "grammar": item["name"]})
        emit(run_grammar(eng, vocab, item, job))


if __name__ == "__main__":
    main()
