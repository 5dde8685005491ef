"""Pathological constraints and long generations: compiled (how fast, how much memory) or refused (by which cap).

    .venv/bin/python bench/bench_reliability.py            # every case, one table
    .venv/bin/python bench/bench_reliability.py --case enum-50k --tokens 20000

Each case runs in a fresh subprocess, so "peak MiB" is that process's peak RSS (tokenizer
included: the baseline row shows what loading the tokenizer alone costs). Tokenizer: mistral-common's
tekken (131k tokens), as in tests/conftest.py. Long generations: a random allowed token each step,
bitmask filled each step, RSS sampled every 10k tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _tokenizer():
    import importlib.util

    import logitgate

    spec = importlib.util.find_spec("mistral_common")
    assert spec is not None and spec.submodule_search_locations, "pip install 'logitgate[dev]'"
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "tekken_240911.json"
    return logitgate.Tokenizer.from_mistral(path)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def nested(depth: int, kind: str) -> dict:
    """A schema of objects (``{"a": ...}``) or arrays nested ``depth`` deep around an integer."""
    s: dict = {"type": "integer"}
    for _ in range(depth):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]} if kind == "object" else \
            {"type": "array", "items": s}
    return s


def ref_chain(n: int) -> dict:
    """A schema whose ``$defs`` chain ``n`` ``$ref``s, d0 -> d1 -> ... -> an integer."""
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def chain_rules(n: int, gbnf: bool) -> str:
    """A chain of ``n`` rules, ``r{i}: "k{i}" r{i+1} | "e{i}"``, in Lark or GBNF syntax."""
    arrow, start = (" ::= ", "root") if gbnf else (": ", "start")
    lines = [f"{start}{arrow}r0"] + [f'r{i}{arrow}"k{i}" r{i + 1} | "e{i}"' for i in range(n - 1)]
    return "\n".join(lines + [f'r{n - 1}{arrow}"end"'])


def case_grammar(name: str):
    """``(callable making the Grammar, limits changes)`` of a case."""
    from logitgate import Grammar

    props = lambda n: {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}  # noqa: E731
    cases = {
        "regex-explosion": (lambda: Grammar.from_regex("(a|b)*a(a|b){30}"), {}),
        "alternation-50k": (lambda: Grammar.from_regex("|".join(f"word{i}x" for i in range(50_000))), {}),
        "enum-50k": (lambda: Grammar.from_json_schema({"enum": [f"value{i}" for i in range(50_000)]}), {}),
        "schema-objects-depth-1000": (lambda: Grammar.from_json_schema(nested(1000, "object")), {}),
        "schema-arrays-depth-1000": (lambda: Grammar.from_json_schema(nested(1000, "array")), {}),
        "schema-objects-depth-1000-raised": (lambda: Grammar.from_json_schema(nested(1000, "object")),
                                             {"max_schema_depth": 2100}),
        "schema-arrays-depth-1000-raised": (lambda: Grammar.from_json_schema(nested(1000, "array")),
                                            {"max_schema_depth": 1100}),
        "schema-ref-chain-1000": (lambda: Grammar.from_json_schema(ref_chain(1000)), {}),
        "schema-2000-properties": (lambda: Grammar.from_json_schema(props(2000)), {}),
        "schema-5000-properties": (lambda: Grammar.from_json_schema(props(5000)), {}),
        "lark-3000-rules": (lambda: Grammar.from_lark(chain_rules(3000, gbnf=False)), {}),
        "gbnf-3000-rules": (lambda: Grammar.from_gbnf("root ::= " + " | ".join(f"r{i}" for i in range(3000)) + "\n"
                                                      + "\n".join(f'r{i} ::= "k{i}" [0-9]+' for i in range(3000))), {}),
        "gbnf-3000-rule-chain": (lambda: Grammar.from_gbnf(chain_rules(3000, gbnf=True)), {}),
        "gbnf-nested-repeat": (lambda: Grammar.from_gbnf('root ::= ("ab"{5000}){5000}'), {}),
        "gen-regex-100k": (lambda: Grammar.from_regex(r'(\{"id":[0-9]+,"ok":(true|false)\}\n)*'), {}),
        "gen-json-array-100k": (lambda: Grammar.from_gbnf(
            'root ::= "[" item ("," item)* "]"\nitem ::= "{\\"id\\":" [0-9]{1,6} ",\\"ok\\":" ("true" | "false") "}"'),
            {}),
    }
    return cases[name]


CASES = ["baseline", "regex-explosion", "alternation-50k", "enum-50k", "schema-objects-depth-1000",
         "schema-arrays-depth-1000", "schema-objects-depth-1000-raised", "schema-arrays-depth-1000-raised",
         "schema-ref-chain-1000", "schema-2000-properties", "schema-5000-properties", "lark-3000-rules",
         "gbnf-3000-rules", "gbnf-3000-rule-chain", "gbnf-nested-repeat", "gen-regex-100k", "gen-json-array-100k"]


def generate(compiled, n_tokens: int, seed: int = 0) -> tuple[list[float], int]:
    """One sequence of ``n_tokens`` random allowed tokens (bitmask filled every step), steering away
    from tokens after which only EOS is left (undone with ``rollback``), so the generation keeps
    growing. Returns (RSS MiB every 10k tokens, tokens accepted)."""
    import logitgate

    tok = compiled.tokenizer
    rng = random.Random(seed)
    m = logitgate.Matcher(compiled)
    bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
    eos = set(tok.eos_token_ids)
    samples = [_rss_mib()]
    done = 0
    m.fill_next_token_bitmask(bm)
    while done < n_tokens:
        allowed = np.flatnonzero(logitgate.bitmask_to_bool(bm[0], tok.vocab_size))
        picks = [int(allowed[i]) for i in rng.sample(range(len(allowed)), min(16, len(allowed)))]
        picks = [t for t in picks if t not in eos]
        assert picks, "only EOS is allowed"
        for k, t in enumerate(picks):
            assert m.accept_token(t), "a token of the mask was refused"
            m.fill_next_token_bitmask(bm)
            if k == len(picks) - 1 or bm[0].any() and set(np.flatnonzero(
                    logitgate.bitmask_to_bool(bm[0], tok.vocab_size)).tolist()) - eos:
                break
            m.rollback(1)
        done += 1
        if done % 10_000 == 0:
            samples.append(_rss_mib())
    return samples, done


def run_case(name: str, n_tokens: int) -> dict:
    import logitgate

    tok = _tokenizer()
    row: dict = {"case": name, "rss_start": round(_rss_mib(), 1)}
    if name == "baseline":
        row.update(outcome="tokenizer loaded", seconds=0.0)
    else:
        make, changes = case_grammar(name)
        t0 = time.perf_counter()
        try:
            with logitgate.using_limits(**changes):
                compiled = logitgate.compile(make(), tok, cache=False)
            row["outcome"] = "compiled"
        except logitgate.LimitError as e:
            compiled = None
            row["outcome"] = f"refused: {e.limit}={e.value}"
        except logitgate.LogitgateError as e:
            compiled = None
            row["outcome"] = f"error: {str(e)[:60]}"
        row["seconds"] = round(time.perf_counter() - t0, 3)
        if compiled is not None:
            m = logitgate.Matcher(compiled)
            bm = logitgate.allocate_token_bitmask(1, tok.vocab_size)
            t1 = time.perf_counter()
            m.fill_next_token_bitmask(bm)
            row["first_mask_ms"] = round(1000 * (time.perf_counter() - t1), 1)
            if name.startswith("gen-"):
                t2 = time.perf_counter()
                samples, done = generate(compiled, n_tokens)
                row["tokens"] = done
                row["tok_per_s"] = round(done / (time.perf_counter() - t2))
                row["rss_samples"] = [round(x, 1) for x in samples]
    row["peak_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=CASES, help="run one case in this process and print its JSON row")
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens per long generation")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.tokens)))
        return
    rows = []
    print(f"{'case':36} {'outcome':44} {'compile s':>9} {'peak MiB':>9}  notes", flush=True)
    for name in CASES:
        proc = subprocess.run([sys.executable, __file__, "--case", name, "--tokens", str(args.tokens)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            row = {"case": name, "outcome": f"CRASHED rc={proc.returncode}: {proc.stderr.strip()[-300:]}",
                   "seconds": float("nan"), "peak_mib": float("nan")}
        else:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        notes = []
        if "first_mask_ms" in row:
            notes.append(f"first mask {row['first_mask_ms']} ms")
        if "rss_samples" in row:
            s = row["rss_samples"]
            notes.append(f"{row['tokens']} tokens at {row['tok_per_s']}/s, RSS {s[0]} -> {s[-1]} MiB (every 10k: {s})")
        print(f"{name:36} {row['outcome'][:44]:44} {row['seconds']:>9} {row['peak_mib']:>9}  {'; '.join(notes)}",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
