"""bench/plots.py: PNG plots of the benchmark result files.

The result files here are small but have the layout the benchmarks write (bench_regex.py,
bench_grammar.py, bench_json_schema.py and their workers); the JSON Schema rows are made by
bench_json_schema.summarize itself. A slow test runs bench_regex.py --quick --plot for real.
"""
from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from .conftest import SHARED_DATA

BENCH = Path(__file__).resolve().parent.parent / "bench"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MACHINE = {"cpu": "Test CPU 9000", "cores": 2, "cores_usable": 2, "memory_gb": 23.5,
           "platform": "Linux-test", "python": "3.11.7"}
TOKENIZERS = ("spm32k", "tekken131k")
VOCAB = {"spm32k": {"source": "logitgate", "n_tokens": 32000, "vocab_size": 32000, "load_s": 0.09,
                    "n_special": 3, "eos": [2], "crosscheck": "identical"},
         "tekken131k": {"source": "logitgate", "n_tokens": 131072, "vocab_size": 131072, "load_s": 0.8,
                        "n_special": 1000, "eos": [2], "crosscheck": "identical"}}


@pytest.fixture(scope="module")
def plots():
    spec = importlib.util.spec_from_file_location("bench_plots_under_test", BENCH / "plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_json_schema():
    """bench_json_schema.py (numpy and the standard library only), for its ``summarize``."""
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        import bench_json_schema
    finally:
        sys.path[:] = saved
    return bench_json_schema


def _setup(**extra):
    return {"event": "setup", "vocab_load_s": 0.09, "vocab_source": "logitgate", "engine_setup_s": 0.03,
            "import_s": 0.01, "version": "1.0", "warmup_error": None, "warmup_s": 0.02, **extra}


def _ns(base_us, n):
    return [int(base_us * 1000 * (1 + (k % 5) / 4)) for k in range(n)]


# --------------------------------------------------------------------------- result files


def regex_result(engines=("logitgate", "logitgate[index]", "llguidance", "outlines-core"),
                 regexes=("date", "ip", "url"), started="2026-11-23T13:41:51+00:00"):
    """What bench_regex.py writes (regex_worker.py result events; one failure of each kind)."""
    tokenizers = {}
    for t, tname in enumerate(TOKENIZERS):
        results = {}
        for k, e in enumerate(engines):
            results[e] = {}
            for j, r in enumerate(regexes):
                if e == "outlines-core" and r == "url":
                    results[e][r] = {"status": "timeout", "error": "over 30 s"}
                    continue
                if e == "llguidance" and r == "ip" and tname == "tekken131k":
                    results[e][r] = {"event": "result", "regex": r, "status": "error",
                                     "error": "ValueError: unsupported"}
                    continue
                compile_ms = (1.5 + j) * (10 ** k) * (1 + t)
                results[e][r] = {
                    "event": "result", "regex": r, "status": "ok", "compile_ms": compile_ms * 0.9,
                    "compile_first_mask_ms": compile_ms,
                    "full_index_ms": compile_ms * 0.9 if e in ("logitgate[index]", "outlines-core") else None,
                    "rss_peak_delta_kb": 80, "rss_retained_delta_kb": 80, "engine_reported_bytes": 40960,
                    "valid_ok": True, "valid_detail": "", "steps_walked": 11, "walks": 2,
                    "engine_reported_bytes_after_walks": 80960,
                    "mask_ns_first_walk": _ns(5 * (k + 1), 10), "mask_ns_warm": _ns(2 * (k + 1), 11),
                    "invalid_rejected": True, "invalid_detail": "token 6 (28770) not in mask",
                }
        tokenizers[tname] = {
            "vocab": VOCAB[tname],
            "paths": {r: {"valid": [1, 2, 3], "invalid": [4, 5]} for r in regexes},
            "setup": {e: _setup() for e in engines}, "results": results, "comparisons": [],
        }
    meta = {"started": started, "command": "bench_regex.py --quick", "machine": MACHINE,
            "versions": {"logitgate": "0.1.0"}, "engines": list(engines), "repeat": 2, "walk_budget_s": 2.0,
            "timeout_s": 30.0, "regex_file": "/x/regex_samples.json", "runtime_s": 12.5}
    return {"meta": meta, "tokenizers": tokenizers}


def grammar_result(engines=("logitgate", "logitgate[greedy]", "llguidance", "xgrammar"),
                   grammars=("json.gbnf", "calc.lark", "c.y")):
    """What bench_grammar.py writes (grammar_worker.py result events)."""
    tokenizers = {}
    for tname in TOKENIZERS:
        results = {}
        for k, e in enumerate(engines):
            results[e] = {}
            for j, g in enumerate(grammars):
                if g == "c.y" and e in ("llguidance", "xgrammar"):
                    results[e][g] = {"event": "result", "grammar": g, "status": "unsupported",
                                     "error": f"{e} has no reader for the yacc format"}
                    continue
                first, warm = _ns(20 + 30 * k, 40), _ns(8 + 10 * k, 41)
                results[e][g] = {
                    "event": "result", "grammar": g, "status": "ok", "compile_ms": (3 + 4 * j) * (k + 1),
                    "first_mask_ms": 0.3, "rss_peak_delta_kb": 1040, "engine_reported_bytes": 273892,
                    "walk_ok": True, "walk_tokens_accepted": 40, "walk_rejected_at_byte": None,
                    "walk_rejected": None, "walk_is_accepting": True, "walk_eos_allowed": True,
                    "allowed_counts": [10] * 41, "walks": 2, "mask_ns_first_walk": first, "mask_ns_warm": warm,
                    "engine_reported_bytes_after_walks": 669892,
                }
                if e == "llguidance":
                    results[e][g]["engine_warnings"] = []
        tokenizers[tname] = {
            "vocab": VOCAB[tname],
            "paths": {g: {"text": "x" * 40, "ids": list(range(40))} for g in grammars},
            "setup": {e: _setup(warmup_with="gbnf grammar") for e in engines}, "results": results,
            "comparisons": [],
        }
    meta = {"started": "2026-11-23T13:40:09+00:00", "command": "bench_grammar.py --quick", "machine": MACHINE,
            "versions": {"logitgate": "0.1.0"}, "engines": list(engines), "repeat": 2, "walk_budget_s": 1.0,
            "timeout_s": 60.0, "data_dir": "/x", "grammar_files": {g: f"/x/{g}" for g in grammars},
            "sample_validation": [], "runtime_s": 30.0}
    return {"meta": meta, "tokenizers": tokenizers}


def json_schema_result(bjs, engines=("logitgate", "logitgate[strict]", "llguidance", "xgrammar",
                                     "lm-format-enforcer")):
    """What bench_json_schema.py writes: per-schema results (fill_ns replaced by mask_us) and the
    rows of bench_json_schema.summarize per subset, ALL, SUITE and suite keyword file."""
    subsets = ["Github_easy", "Kubernetes"]
    schemas = {f"{s}--{i}": {"group": s, "suite": False} for s in subsets for i in range(3)}
    schemas.update({f"draft7/type#{i}": {"group": "draft7/type", "suite": True} for i in range(2)})
    for v in schemas.values():
        v.update(schema_bytes=300, instances=[{"i": 0, "valid": True}, {"i": 1, "valid": False}])
    tokenizers = {}
    for t, tname in enumerate(TOKENIZERS):
        t_engines = [e for e in engines if e != "logitgate[strict]" or t == 0]  # strict: first tokenizer only
        results, fills, rows = {}, {}, {}
        for k, e in enumerate(t_engines):
            results[e], fills[e] = {}, {}
            names = [n for n in schemas if e != "lm-format-enforcer" or n.endswith("0")]
            for j, n in enumerate(names):
                if e == "xgrammar" and n == "Kubernetes--2":
                    results[e][n] = {"event": "result", "schema": n, "status": "error",
                                     "error": "RuntimeError: bad schema"}
                    continue
                if e == "logitgate[strict]" and n.startswith("Kubernetes"):
                    results[e][n] = {"event": "result", "schema": n, "status": "unsupported",
                                     "error": "SchemaError", "keywords": ["format"]}
                    continue
                insts = [] if e == "logitgate[strict]" else [
                    {"i": 0, "valid": True, "outcome": "accepted", "tokens": 12, "taken": 12},
                    {"i": 1, "valid": False, "outcome": "accepted" if (e == "llguidance" and j == 1) else "rejected",
                     "tokens": 15, "taken": 9, "why": "not in mask"}]
                results[e][n] = {"event": "result", "schema": n, "status": "ok", "compile_ms": (2 + j) * 3 ** k,
                                 "compile_only_ms": 1.5 + j, "first_mask_us": 300.0, "first_mask_allowed": 80,
                                 "instances": insts}
                fills[e][n] = [] if e == "logitgate[strict]" else _ns(20 + 50 * k, 30)

            def ctx(name, o):
                return "… ^ …"

            ran = [n for n in schemas if n in results[e]]
            for s in subsets:
                rows.setdefault(e, {})[s] = bjs.summarize(results[e], [n for n in ran if schemas[n]["group"] == s],
                                                         ctx, fills[e])
            rows[e]["ALL"] = bjs.summarize(results[e], [n for n in ran if not schemas[n]["suite"]], ctx,
                                           fills[e], lists=False)
            suite = [n for n in ran if schemas[n]["suite"]]
            rows[e]["SUITE"] = dict(bjs.summarize(results[e], suite, ctx, fills[e], lists=False), tests=4)
            rows[e]["suite:draft7/type"] = dict(bjs.summarize(results[e], suite, ctx, fills[e]), tests=4)
            for n in ran:
                if fills[e].get(n):
                    us = [x / 1e3 for x in fills[e][n]]
                    results[e][n]["mask_us"] = {"n": len(us), "mean": sum(us) / len(us), "p50": us[0],
                                                "p99": max(us), "max": max(us)}
        common_names = [n for n in schemas if not schemas[n]["suite"] and n != "Kubernetes--2"]
        full = [e for e in t_engines if e not in ("logitgate[strict]", "lm-format-enforcer")]
        tokenizers[tname] = {
            "vocab": VOCAB[tname], "path_failures": [], "setup": {e: _setup(warmup_with="schema") for e in t_engines},
            "results": results, "rows": rows, "runtime": {e: 10.0 for e in t_engines},
            "suite_tests": 4, "suite_group_tests": {"draft7/type": 4},
            "common_bench": {"engines": full, "names": common_names,
                             "rows": {e: {"compile_p50_ms": 3.0 * (i + 1), "compile_p99_ms": 9.0 * (i + 1),
                                          "mask_mean_us": 20.0 * (i + 1), "mask_p99_us": 90.0 * (i + 1)}
                                      for i, e in enumerate(full)}},
            "common_suite": {"engines": [], "names": [], "rows": {}},
        }
    meta = {"started": "2026-11-23T15:38:26+00:00", "command": "bench_json_schema.py --quick", "machine": MACHINE,
            "versions": {"logitgate": "0.1.0"}, "engines": list(engines), "subsets": subsets, "n_per_subset": 3,
            "lmfe_n_per_subset": 1, "suite": True, "suite_n_per_draft": 2, "lmfe_suite_n_per_draft": 1,
            "max_valid": 3, "max_invalid": 3, "timeout_s": 30.0, "walk_budget_s": 21.0, "engine_budget_s": 120,
            "data_dir": "/x", "tokenizers": list(TOKENIZERS), "runtime_s": 100.0}
    return {"meta": meta, "schemas": schemas, "tokenizers": tokenizers}


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=1))
    return path


# --------------------------------------------------------------------------- checks


def check_png(path: Path, min_w=500, min_h=350):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 8000, f"{path} is suspiciously small ({len(data)} bytes)"
    assert data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    assert w >= min_w and h >= min_h, (path, w, h)


def colour_pixels(path: Path, hex_colour: str) -> int:
    """How many pixels of the PNG have exactly this colour (the bars are drawn opaque)."""
    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(path)[..., :3]
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255.0
    return int((np.abs(img - rgb).max(axis=-1) < 1.5 / 255).sum())


def expected_names(stem: str, kind: str, tokenizers=TOKENIZERS) -> set:
    metrics = ("compile", "mask", "coverage") if kind == "json-schema" else ("compile", "mask")
    return {f"{stem}-{t}-{m}.png" for t in tokenizers for m in metrics}


# --------------------------------------------------------------------------- tests


def test_one_png_per_kind_tokenizer_metric(plots, bench_json_schema, tmp_path, capsys):
    res = tmp_path / "results"
    res.mkdir()
    files = {
        "regex": write(res / "regex-20261123-134151.json", regex_result()),
        "grammar": write(res / "grammar-20261123-134009-quick.json", grammar_result()),
        "json-schema": write(res / "json-schema-20261123-153826-quick.json", json_schema_result(bench_json_schema)),
    }
    out = tmp_path / "png"
    written = plots.plot_results(list(files.values()), out)

    expected = set()
    for kind, f in files.items():
        expected |= expected_names(f.stem, kind)
    assert len(written) == len(expected) == 2 * 2 + 2 * 2 + 2 * 3
    assert {p.name for p in written} == expected
    assert {p.name for p in out.iterdir()} == expected  # nothing else written
    assert all(p.parent == out for p in written)
    for p in written:
        check_png(p)
    printed = capsys.readouterr().out.split()
    assert printed == [str(p) for p in written]

    # bars are there, in the engines' own colours, logitgate in every plot
    lg = plots.engine_colour("logitgate")
    for p in written:
        assert colour_pixels(p, lg) > 200, p
    assert colour_pixels(out / "regex-20261123-134151-spm32k-compile.png", plots.engine_colour("outlines-core")) > 200
    assert colour_pixels(out / "grammar-20261123-134009-quick-tekken131k-mask.png",
                         plots.engine_colour("xgrammar")) > 200
    cov = out / "json-schema-20261123-153826-quick-spm32k-coverage.png"
    for e in ("llguidance", "xgrammar", "lm-format-enforcer", "logitgate[strict]"):
        assert colour_pixels(cov, plots.engine_colour(e)) > 200, e
    # logitgate[strict] does not walk: no mask bars (and no legend entry) in the mask plot
    assert colour_pixels(out / "json-schema-20261123-153826-quick-spm32k-mask.png",
                         plots.engine_colour("logitgate[strict]")) == 0


def test_panels_follow_the_results(plots, bench_json_schema):
    data = regex_result()
    tdata = data["tokenizers"]["tekken131k"]
    engines = plots.order_engines(data["meta"]["engines"])
    comp, mean, p99 = plots.items_panels(tdata, engines, "compile_first_mask_ms", "regexes")
    assert comp.groups[:3] == ["date", "ip", "url"] and comp.n_summary == 1
    assert comp.groups[3] == "median\n(same 1 regexes)"  # url timed out on one engine, ip failed on another
    assert comp.values["logitgate"][0] == tdata["results"]["logitgate"]["date"]["compile_first_mask_ms"]
    assert comp.values["outlines-core"][2] is None and comp.notes["outlines-core"][2] == "timeout"
    assert comp.notes["llguidance"][1] == "error" and mean.notes["llguidance"][1] == "error"
    assert comp.values["logitgate"][3] == comp.values["logitgate"][0]  # median over the same 1 regex
    assert 0 < mean.values["logitgate"][0] < p99.values["logitgate"][0]

    js = json_schema_result(bench_json_schema)["tokenizers"]["spm32k"]
    engines = plots.order_engines(js["results"])
    comp, mean, p99 = plots.json_panels(js, engines)
    assert comp.groups == ["Github_easy", "Kubernetes", "ALL", "JSONSchemaBench\nsame set (5)", "SUITE"]
    assert comp.n_summary == 3
    assert comp.values["xgrammar"][2] == js["rows"]["xgrammar"]["ALL"]["compile_p50_ms"]
    assert comp.notes["logitgate[strict]"][1] == "none compiled"
    assert comp.notes["lm-format-enforcer"][3] == "not run"
    assert mean.values["logitgate[strict]"][0] is None and mean.notes["logitgate[strict]"][0] == "no fills"
    cov_all, cov_suite = plots.coverage_panels(js, engines)
    assert cov_suite.title == "JSON Schema Test Suite"
    assert cov_all.groups == ["compiled", "valid accepted", "invalid rejected"]
    assert cov_all.values["xgrammar"][0] == pytest.approx(100 * 5 / 6)
    assert cov_all.labels["xgrammar"][0] == "5/6"
    assert cov_all.values["llguidance"][2] == pytest.approx(100 * 5 / 6)  # one invalid instance accepted
    assert cov_all.labels["llguidance"][2] == "5/6"
    assert cov_all.values["logitgate[strict]"][1] is None  # compiled only, never walked


def test_engine_order_and_colours(plots):
    order = plots.order_engines(["xgrammar", "llguidance", "logitgate[index]", "new-engine", "logitgate"])
    assert order == ["logitgate", "logitgate[index]", "llguidance", "xgrammar", "new-engine"]
    colours = [plots.engine_colour(e) for e in plots.ENGINE_COLOURS]
    assert len(set(colours)) == len(colours)
    assert plots.engine_colour("new-engine") == plots.engine_colour("new-engine")


def test_titles_carry_date_machine_and_tokenizer(plots, tmp_path):
    data = regex_result(started="2026-11-23T13:41:51+00:00")
    sub = plots.run_subtitle(data, tmp_path / "regex-20261123-134151-quick.json", data["tokenizers"]["spm32k"])
    assert "2026-11-23 13:41 UTC" in sub and "Test CPU 9000, 2 cores, 23.5 GB" in sub
    assert "32,000 tokens" in sub and "quick run" in sub
    del data["meta"]["started"], data["meta"]["machine"]
    sub = plots.run_subtitle(data, tmp_path / "regex-20261124-101500.json", {})
    assert sub == "run 2026-11-24 10:15"


def test_cli_defaults_to_the_newest_result_of_each_kind(plots, tmp_path, monkeypatch, capsys):
    res = tmp_path / "results"
    res.mkdir()
    write(res / "regex-20261123-094735.json", regex_result(engines=("logitgate",), regexes=("date",)))
    newest = write(res / "regex-20261123-133127-quick.json", regex_result(engines=("logitgate",), regexes=("ip",)))
    grammar = write(res / "grammar-20261123-120859.json", grammar_result(engines=("logitgate",), grammars=("c.y",)))
    (res / "regex-20261123-133127-quick.md").write_text("# not a result")
    monkeypatch.setattr(plots, "RESULTS_DIR", res)
    assert plots.newest_results() == [newest, grammar]
    assert plots.main([]) == 0
    pngs = {p.name for p in res.glob("*.png")}
    assert pngs == expected_names(newest.stem, "regex") | expected_names(grammar.stem, "grammar")
    assert len(capsys.readouterr().out.split()) == len(pngs)

    out = tmp_path / "elsewhere"
    assert plots.main([str(grammar), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == expected_names(grammar.stem, "grammar")


def test_failed_everything_still_gives_every_png(plots, tmp_path):
    data = regex_result(engines=("logitgate",), regexes=("date",))
    data["tokenizers"] = {"spm32k": data["tokenizers"]["spm32k"]}
    data["tokenizers"]["spm32k"]["results"]["logitgate"]["date"] = {"status": "timeout", "error": "over 30 s"}
    f = write(tmp_path / "regex-20261123-094735.json", data)
    written = plots.plot_results([f], tmp_path)
    assert {p.name for p in written} == expected_names(f.stem, "regex", ("spm32k",))
    for p in written:
        check_png(p, min_h=300)


@pytest.mark.slow
def test_real_quick_regex_run_with_plot(tmp_path):
    """bench_regex.py --quick --plot for real: logitgate alone on two regexes, one tokenizer."""
    pytest.importorskip("mistral_common")
    pytest.importorskip("regex")
    if not (SHARED_DATA / "outlines-core" / "regex_samples.json").exists():
        pytest.skip("benchmark regexes not found")
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_regex.py"), "--quick", "--engines", "logitgate", "--regexes", "date,ip",
         "--tokenizer", "spm32k", "--no-tracemalloc", "--out", str(out), "--plot"],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (result,) = out.glob("regex-*-quick.json")
    data = json.loads(result.read_text())
    assert set(data["tokenizers"]["spm32k"]["results"]["logitgate"]) == {"date", "ip"}
    pngs = sorted(out.glob("*.png"))
    assert {p.name for p in pngs} == expected_names(result.stem, "regex", ("spm32k",))
    for p in pngs:
        check_png(p)
        assert str(p) in proc.stdout
