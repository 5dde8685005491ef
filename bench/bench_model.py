"""Model benchmark: tokens per second with the embedded model (SmolLM2-135M-Instruct GGUF),
unconstrained vs constrained, on llama-cpp-python and on transformers, with the share of time spent
in masks.

    python bench/bench_model.py                  # both runtimes, 3 rounds
    python bench/bench_model.py --runtimes llama-cpp --rounds 5

Rows, per runtime and task (a JSON Schema, a regex, a Lark grammar):
  llama-cpp:    logitgate's loop unconstrained / constrained (by default with fast-forward and the
                next mask computed during the forward pass; each turned off in turn); llama-cpp-python's own create_completion unconstrained,
                with logitgate's logits processor, and with llama.cpp's own grammar sampler (the peer:
                its JSON-Schema-to-GBNF converter, its GBNF for the regex and grammar tasks).
  transformers: model.generate() unconstrained, with logitgate's LogitsProcessor, and with
                xgrammar's transformers LogitsProcessor when xgrammar is installed (the peer).
Each mode runs once to warm up (compile, first visits of grammar states), then --rounds times,
modes interleaved (in reverse order every other round). Unconstrained baselines write as many tokens as the constrained run (EOS and
other special tokens banned), since the cost of a token grows with the context; tokens/s is
output tokens over decoding time summed over rounds, and
"vs unconstrained" the median over rounds of the ratio to the unconstrained run of the same round,
with the quartiles of those ratios in brackets.
"mask share" is the time the loop waited for masks (or spent in the logits processor) over the
decoding time. "cold" rows are the first run after compiling, with and without overlap.
"""
from __future__ import annotations

import argparse
import json
import numpy as np
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import logitgate  # noqa: E402
from logitgate.integrations.generation import generate  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 40},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 5},
        "bio": {"type": "string", "maxLength": 200},
    },
    "required": ["name", "age", "city", "hobbies", "bio"],
    "additionalProperties": False,
}
STORY = r"[A-Za-z0-9 ,.'\n-]{1,1000}"
STORY_GBNF = r"""root ::= [A-Za-z0-9 ,.'\n-]{1,1000}"""
LIST_LARK = r"""
start: item+
item: "- " SENTENCE "\n"
SENTENCE: /[A-Z][A-Za-z ,']{0,100}[.!]/
"""
LIST_GBNF = r"""
root ::= item+
item ::= "- " [A-Z] [A-Za-z ,']{0,100} [.!] "\n"
"""
TASKS = {
    "json": ("Describe a fictional person as JSON with name, age, city, hobbies and a short bio.",
             lambda: logitgate.Grammar.from_json_schema(PERSON)),
    "regex": ("Tell me a long story about a dragon and a knight.", lambda: logitgate.Grammar.from_regex(STORY)),
    "grammar": ("List ten facts about the ocean, one per line.", lambda: logitgate.Grammar.from_lark(LIST_LARK)),
}


def machine() -> str:
    import platform

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


class NoStop:
    """A model whose special tokens (EOS included) are never sampled: the unconstrained baseline
    then writes exactly max_tokens tokens, as many as the constrained run it is compared with."""

    def __init__(self, model) -> None:
        self._m = model
        self._special = np.array(sorted(model.tokenizer.special_ids), dtype=np.int64)

    def __getattr__(self, name):
        return getattr(self._m, name)

    def forward(self, tokens):
        logits = self._m.forward(tokens)
        logits[self._special] = -np.inf
        return logits


def ban_special(special: np.ndarray):
    """A llama-cpp-python logits processor that bans the special tokens (same-length baseline)."""
    def proc(_ids, scores):
        scores[special] = -np.inf
        return scores
    return proc


class Acc:
    """Output tokens and decoding seconds summed over rounds, and per-step mask times."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self.mask_s = 0.0
        self.steps: list[float] = []
        self.forced = 0
        self.texts: list[str] = []
        self.rounds: list[float] = []  # tokens/s of each round

    def add(self, tokens: int, seconds: float, mask_s: float = 0.0, steps=(), forced: int = 0, text: str = "") -> None:
        self.tokens += tokens
        self.seconds += seconds
        self.mask_s += mask_s
        self.steps.extend(steps)
        self.forced += forced
        self.texts.append(text)
        self.rounds.append(tokens / seconds if seconds else 0.0)

    def row(self, base: "Acc | None") -> dict:
        tps = self.tokens / self.seconds if self.seconds else 0.0
        out = {"tokens": self.tokens, "seconds": round(self.seconds, 3), "tokens_per_s": round(tps, 2),
               "mask_share": round(self.mask_s / self.seconds, 4) if self.seconds and self.mask_s else None,
               "fast_forwarded": self.forced}
        if self.steps:
            s = sorted(self.steps)
            out["mask_mean_us"] = round(statistics.fmean(s) * 1e6, 1)
            out["mask_p99_us"] = round(s[min(len(s) - 1, int(0.99 * len(s)))] * 1e6, 1)
        if base is not None and base.rounds:
            # the median over rounds of this mode's tokens/s over the baseline's in the same round
            # (modes are interleaved, so a drift of the machine's speed cancels out)
            ratios = [a / b for a, b in zip(self.rounds, base.rounds) if b]
            out["vs_unconstrained"] = round(statistics.median(ratios) - 1, 4)
            if len(ratios) >= 2:  # the spread of the paired ratios: their quartiles
                q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
                out["vs_unconstrained_iqr"] = [round(q1 - 1, 4), round(q3 - 1, 4)]
        return out


def in_turn(modes: dict, k: int) -> list:
    """The modes of round ``k``, in reverse order every other round, so that a drift of the
    machine's speed during a round does not always favour the same mode."""
    items = list(modes.items())
    return items[::-1] if k % 2 else items


def bench_llama(args: argparse.Namespace) -> dict:
    import llama_cpp

    from logitgate.integrations import llama_cpp as lg
    from logitgate.integrations.llama_cpp import LlamaCppModel
    from logitgate.integrations.models import embedded_model_path

    model = LlamaCppModel.from_path(embedded_model_path(), n_threads=args.threads)
    llm = model.llm
    results: dict = {}
    for task, (prompt, make) in TASKS.items():
        if args.tasks and task not in args.tasks:
            continue
        grammar = make()
        t0 = time.perf_counter()
        compiled = logitgate.compile(grammar, model.tokenizer)
        compile_s = time.perf_counter() - t0
        if task == "json":
            native = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(PERSON), verbose=False)
        else:
            native = llama_cpp.LlamaGrammar.from_string(STORY_GBNF if task == "regex" else LIST_GBNF, verbose=False)
        msgs = [{"role": "user", "content": prompt}]
        # cold: the first run after compiling, every state visited for the first time (overlapped
        # first, so that anything a second compile could reuse favours the plain run)
        cold_overlap = generate(model, msgs, compiled, max_tokens=args.max_tokens)
        logitgate.clear_cache()
        compiled = logitgate.compile(grammar, model.tokenizer)
        cold = generate(model, msgs, compiled, max_tokens=args.max_tokens, overlap=False)
        # the unconstrained baselines write as many tokens as the constrained run without
        # fast-forward (EOS banned), so that tokens/s compares equal lengths; fast-forward's own
        # tokenization (healed, so often fewer and longer tokens) is compared with that as well
        n_same = len(generate(model, msgs, compiled, max_tokens=args.max_tokens, fast_forward=False).tokens)
        free = NoStop(model)
        special = np.array(sorted(model.tokenizer.special_ids), dtype=np.int64)
        modes = {
            "loop: unconstrained": lambda: generate(free, msgs, None, max_tokens=n_same),
            "loop: logitgate": lambda: generate(model, msgs, compiled, max_tokens=args.max_tokens),
            "loop: logitgate, not overlapped": lambda: generate(model, msgs, compiled, max_tokens=args.max_tokens,
                                                                overlap=False),
            "loop: logitgate, no fast-forward": lambda: generate(model, msgs, compiled, max_tokens=args.max_tokens,
                                                                 fast_forward=False),
        }

        def completion(max_tokens=args.max_tokens, **kw):
            def run():
                t = time.perf_counter()
                out = llm.create_chat_completion(messages=msgs, max_tokens=max_tokens, temperature=0.0, **kw)
                return out["usage"]["completion_tokens"], time.perf_counter() - t, out["choices"][0]["message"]["content"]
            return run

        procs: list = []

        def with_processor():
            procs.append(lg.LlamaCppLogitsProcessor(compiled))
            n_tok, secs, text = completion(logits_processor=llama_cpp.LogitsProcessorList([procs[-1]]))()
            return n_tok, secs, text, procs[-1].elapsed_s

        llm_modes = {
            "llama-cpp-python: unconstrained": lambda: completion(
                max_tokens=n_same, logits_processor=llama_cpp.LogitsProcessorList([ban_special(special)]))(),
            "llama-cpp-python: logitgate processor": with_processor,
            "llama-cpp-python: llama.cpp grammar (peer)": completion(grammar=native),
        }
        accs = {name: Acc() for name in [*modes, *llm_modes]}
        for name, fn in [*modes.items(), *llm_modes.items()]:
            fn()  # warm-up
        for k in range(args.rounds):
            for name, fn in in_turn(modes, k):
                r = fn()
                accs[name].add(len(r.tokens), r.decode_s, r.mask_s, r.mask_step_s, r.n_forced, r.text)
            for name, fn in in_turn(llm_modes, k):
                n, secs, text, *proc_s = fn()
                # includes the prompt: llama-cpp-python caches it after the warm-up
                accs[name].add(n, secs, proc_s[0] if proc_s else 0.0, text=text)
        base = accs["loop: unconstrained"]
        lbase = accs["llama-cpp-python: unconstrained"]
        rows = {name: acc.row(None if name in ("loop: unconstrained", "llama-cpp-python: unconstrained")
                              else lbase if name.startswith("llama-cpp-python") else base)
                for name, acc in accs.items()}
        for label, run in (("cold: logitgate (first run after compile)", cold_overlap),
                           ("cold: logitgate, not overlapped", cold)):
            rows[label] = {
                "tokens": len(run.tokens), "tokens_per_s": round(run.tokens_per_s, 2),
                "mask_share": round(run.mask_share, 4),
                "mask_mean_us": round(run.mask_s / max(len(run.mask_step_s), 1) * 1e6, 1),
                "mask_p99_us": round(sorted(run.mask_step_s)[int(0.99 * (len(run.mask_step_s) - 1))] * 1e6, 1)
                if run.mask_step_s else None,
            }
        results[task] = {"compile_ms": round(compile_s * 1e3, 1), "rows": rows,
                         "sample": accs["loop: logitgate"].texts[0][:160]}
        print_task("llama-cpp", task, results[task])
    return results


def bench_transformers(args: argparse.Namespace) -> dict:
    import torch

    from logitgate.integrations.models import embedded_model_path
    from logitgate.integrations.transformers import LogitgateLogitsProcessor, TransformersModel

    model = TransformersModel.from_gguf(embedded_model_path(), n_threads=args.threads)
    hf, hf_tok = model.model, model.hf_tokenizer
    try:
        import xgrammar as xgr

        xinfo = xgr.TokenizerInfo.from_huggingface(hf_tok, vocab_size=hf.config.vocab_size)
        xcomp = xgr.GrammarCompiler(xinfo)
    except Exception as exc:  # xgrammar missing or failing: say so in the table
        xgr, xcomp = None, None
        print(f"xgrammar unavailable: {exc}", file=sys.stderr)
    results: dict = {}
    eos = list(model.tokenizer.eos_token_ids)
    n = args.max_tokens_tf
    for task, (prompt, make) in TASKS.items():
        if args.tasks and task not in args.tasks:
            continue
        compiled = logitgate.compile(make(), model.tokenizer)
        text = hf_tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                          add_generation_prompt=True)
        batch = hf_tok([text], return_tensors="pt", add_special_tokens=False)
        plen = batch["input_ids"].shape[1]

        def run(processors, min_new=0):
            t = time.perf_counter()
            with torch.inference_mode():
                out = hf.generate(**batch, logits_processor=processors, max_new_tokens=min_new or n, do_sample=False,
                                  min_new_tokens=min_new or None, eos_token_id=eos, pad_token_id=eos[0], top_p=None,
                                  top_k=None, temperature=None)
            dt = time.perf_counter() - t
            new = [int(x) for x in out[0, plen:] if int(x) not in eos]
            return len(new), dt, model.tokenizer.decode_bytes(new).decode(errors="replace")

        def ours():
            proc = LogitgateLogitsProcessor(compiled)
            return (*run([proc]), proc.elapsed_s)

        n_same = run([LogitgateLogitsProcessor(compiled)])[0]  # the unconstrained baseline writes as many tokens
        modes = {"generate: unconstrained": lambda: run([], min_new=n_same),
                 "generate: logitgate LogitsProcessor": ours}
        if xcomp is not None:
            if task == "json":
                xg = xcomp.compile_json_schema(json.dumps(PERSON), any_whitespace=False)
            elif task == "regex":
                xg = xcomp.compile_regex(STORY)
            else:
                xg = xcomp.compile_grammar(LIST_GBNF)
            modes["generate: xgrammar LogitsProcessor (peer)"] = lambda: run([xgr.contrib.hf.LogitsProcessor(xg)])
        accs = {name: Acc() for name in modes}
        for fn in modes.values():
            fn()
        for i in range(args.rounds_tf):
            for name, fn in in_turn(modes, i):
                k, secs, out_text, *proc_s = fn()
                accs[name].add(k, secs, proc_s[0] if proc_s else 0.0, text=out_text)
        base = accs["generate: unconstrained"]
        rows = {name: acc.row(None if name == "generate: unconstrained" else base) for name, acc in accs.items()}
        results[task] = {"rows": rows, "sample": accs["generate: logitgate LogitsProcessor"].texts[0][:160]}
        print_task("transformers", task, results[task])
    return results


def print_task(runtime: str, task: str, res: dict) -> None:
    print(f"\n### {runtime}: {task}" + (f" (compile {res['compile_ms']} ms)" if "compile_ms" in res else ""))
    print("| mode | tokens | tokens/s | vs unconstrained (median of rounds [quartiles]) | mask share | mask mean µs "
          "| mask p99 µs "
          "| fast-forwarded |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in res["rows"].items():
        vs = r.get("vs_unconstrained")
        iqr = r.get("vs_unconstrained_iqr")
        vs_text = "" if vs is None else f"{vs:+.1%}" + (f" [{iqr[0]:+.1%}, {iqr[1]:+.1%}]" if iqr else "")
        share = r.get("mask_share")
        print(f"| {name} | {r.get('tokens', '')} | {r['tokens_per_s']:.1f} | "
              f"{vs_text} | {'' if not share else f'{share:.2%}'} | "
              f"{r.get('mask_mean_us', '')} | {r.get('mask_p99_us', '')} | {r.get('fast_forwarded', '') or ''} |")
    print(f"sample: {res['sample']!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default="llama-cpp,transformers")
    ap.add_argument("--tasks", default="", help="comma-separated subset of json,regex,grammar")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per mode on llama-cpp")
    ap.add_argument("--rounds-tf", type=int, default=2, help="rounds per mode on transformers")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--max-tokens-tf", type=int, default=80)
    ap.add_argument("--threads", type=int, default=1, help="model threads (1 is fastest for this model on 2 cores)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    print(f"# Model benchmark {stamp} UTC — SmolLM2-135M-Instruct Q4_1 (embedded), {machine()}, "
          f"logitgate {logitgate.__version__}")
    out: dict = {"kind": "model", "stamp": stamp, "machine": machine(), "args": vars(args)}
    runtimes = args.runtimes.split(",")
    if "llama-cpp" in runtimes:
        out["llama-cpp"] = bench_llama(args)
    if "transformers" in runtimes:
        out["transformers"] = bench_transformers(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"model-{stamp}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
