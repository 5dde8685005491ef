"""The ``logitgate`` command line.

    logitgate demo                      # the embedded model under a schema, a regex and a grammar
    logitgate generate --schema person.json --prompt "A person as JSON"
    logitgate check --schema person.json        # what compiles, what is unsupported, and where
    logitgate bench json --plot                 # the side-by-side benchmarks (source checkout)
    logitgate run script.py                     # a controller script (AICI pyctrl style)
    logitgate serve --port 8000                 # the OpenAI-compatible server
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .demo import DEMO_TOKENIZERS, _mistral_data_file, model_demo, tokenizer_demo  # noqa: F401 (re-export)

__all__ = ["main", "constraint_from_args"]

_CONSTRAINT_FLAGS = ("schema", "pydantic", "regex", "lark", "gbnf", "yacc", "json", "recognizer")


def _text_or_file(value: str, what: str) -> str:
    """``value`` itself, or the content of the file it names (``@path`` forces a file)."""
    path = Path(value[1:] if value.startswith("@") else value)
    if value.startswith("@") or (len(value) < 4096 and "\n" not in value and path.is_file()):
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"cannot read the {what} file {path}: {exc.strerror}") from exc
    return value


def _import_object(spec: str, flag: str = "--pydantic") -> Any:
    """The object ``module:name`` (the module is imported from the current folder or sys.path) or
    ``file.py:name`` names; a bad spec exits naming ``flag``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not attr:
        raise SystemExit(f"{flag} wants module:Class (or file.py:Class), not {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        loader_spec = importlib.util.spec_from_file_location(path.stem, path)
        if loader_spec is None or loader_spec.loader is None or not path.is_file():
            raise SystemExit(f"{flag}: no Python file {path}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[path.stem] = module
        loader_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise SystemExit(f"{flag}: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"{flag}: module {module_name!r} has no {attr!r}") from None


def recognizer_from_spec(spec: str, flag: str = "--recognizer") -> Any:
    """A custom recognizer named ``module:attr`` or ``file.py:attr``: an instance, or a class (or
    any callable) called without arguments to make one."""
    from .recognizers import as_functional

    obj = _import_object(spec, flag)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "initial")):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - the user's constructor
            raise SystemExit(f"{flag} {spec}: calling it with no arguments failed: {type(exc).__name__}: {exc}") from exc
    try:
        as_functional(obj)
    except TypeError as exc:
        raise SystemExit(f"{flag} {spec}: {exc}") from None
    return obj


def constraint_from_args(args: argparse.Namespace, *, strict: bool | None = None) -> Any:
    """The ``Grammar`` the constraint flags describe (``None`` when none is given)."""
    from . import Grammar

    given = [f for f in _CONSTRAINT_FLAGS if getattr(args, f, None)]
    if len(given) > 1:
        raise SystemExit("give one constraint: " + ", ".join("--" + f for f in given))
    if not given:
        return None
    kind = given[0]
    strict = (not args.no_strict) if strict is None else strict
    if kind == "json":
        return Grammar.json(whitespace=args.whitespace)
    if kind in ("schema", "pydantic"):
        schema: Any = _import_object(args.pydantic) if kind == "pydantic" else _text_or_file(args.schema, "schema")
        return Grammar.from_json_schema(schema, whitespace=args.whitespace, property_order=args.property_order,
                                        strict=strict)
    if kind == "regex":
        return Grammar.from_regex(args.regex)
    if kind == "recognizer":
        return Grammar.from_recognizer(recognizer_from_spec(args.recognizer))
    text = _text_or_file(getattr(args, kind), kind)
    return {"lark": Grammar.from_lark, "gbnf": Grammar.from_gbnf, "yacc": Grammar.from_yacc}[kind](text)


def _add_constraint_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("constraint (one of)")
    g.add_argument("--schema", metavar="FILE|JSON", help="a JSON Schema file or text")
    g.add_argument("--pydantic", metavar="MODULE:CLASS", help="a Pydantic model (module:Class or file.py:Class)")
    g.add_argument("--regex", metavar="PATTERN", help="a regex (Python re syntax) the output must fully match")
    g.add_argument("--lark", metavar="FILE|TEXT", help="a Lark grammar")
    g.add_argument("--gbnf", metavar="FILE|TEXT", help="a GBNF grammar (llama.cpp)")
    g.add_argument("--yacc", metavar="FILE|TEXT", help="a yacc-style grammar with inline lexemes (AICI)")
    g.add_argument("--json", action="store_true", help="any JSON value")
    g.add_argument("--recognizer", metavar="MODULE:OBJ",
                   help="a custom recognizer (logitgate.recognizers): an instance, or a class made with no arguments "
                        "(module:name or file.py:name)")
    s = p.add_argument_group("JSON Schema options")
    s.add_argument("--whitespace", choices=["compact", "pretty", "flexible"], default="compact")
    s.add_argument("--property-order", choices=["schema", "any"], default="schema")
    s.add_argument("--no-strict", action="store_true",
                   help="relax unsupported schema keywords (reported) instead of refusing the schema")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="PATH", default=None,
                   help="a .gguf file or a transformers model folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--runtime", choices=["auto", "llama-cpp", "transformers"], default="auto",
                   help="auto: llama-cpp-python for GGUF files when installed, else transformers")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)


def _generate(args: argparse.Namespace) -> int:
    from . import LogitgateError, compile
    from .integrations.generation import generate
    from .integrations.models import load_model
    from .progress import progress

    try:
        grammar = constraint_from_args(args)
    except LogitgateError as exc:
        print(f"logitgate: {exc}", file=sys.stderr)
        return 2
    for pointer, what in getattr(grammar, "relaxed", []):
        print(f"logitgate: relaxed at {pointer or '/'}: {what}", file=sys.stderr)
    with progress("loading the model") as say:
        model = load_model(args.model, runtime=args.runtime, progress=say)
    compiled = None
    if grammar is not None:
        with progress("compiling the constraint"):
            compiled = compile(grammar, model.tokenizer)
    prompt: Any = args.prompt if args.raw else [{"role": "user", "content": args.prompt}]
    if args.system and not args.raw:
        prompt = [{"role": "system", "content": args.system}] + prompt
    res = generate(model, prompt, compiled, max_tokens=args.max_tokens, temperature=args.temperature,
                   seed=args.seed, fast_forward=not args.no_fast_forward,
                   on_text=lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    sys.stdout.write("\n")
    if args.stats:
        print(json.dumps({"tokens": len(res.tokens), "sampled": res.n_sampled, "fast_forwarded": res.n_forced,
                          "stop_reason": res.stop_reason, "tokens_per_s": round(res.tokens_per_s, 2),
                          "mask_share": round(res.mask_share, 4), "prefill_s": round(res.prefill_s, 3)}),
              file=sys.stderr)
    if res.stop_reason == "length" and compiled is not None and not res.text == "":
        print(f"logitgate: stopped at --max-tokens {args.max_tokens}; the output may be incomplete",
              file=sys.stderr)
    return 0


def _check_tokenizer(name: str) -> Any:
    from . import Tokenizer

    if name in DEMO_TOKENIZERS:
        return Tokenizer.from_mistral(_mistral_data_file(DEMO_TOKENIZERS[name]))
    if name == "embedded":
        from .integrations.models import embedded_model_path

        return Tokenizer.from_gguf(embedded_model_path())
    path = Path(name)
    if path.suffix == ".gguf":
        return Tokenizer.from_gguf(path)
    if path.suffix == ".json":
        return Tokenizer.from_tokenizers_json(path)
    raise SystemExit(f"--tokenizer: give spm, tekken, embedded, a .gguf file or a tokenizer.json, not {name!r}")


def _check(args: argparse.Namespace) -> int:
    """Exit 0: compiles exactly; 1: compiles only with relaxations (listed); 2: refused (error)."""
    from . import LogitgateError, SchemaError, compile
    from .progress import progress

    try:
        try:
            grammar = constraint_from_args(args, strict=True)
            relaxed: list[tuple[str, str]] = []
        except SchemaError as exc:
            if not exc.problems:
                raise
            print(f"not supported exactly ({len(exc.problems)}):")
            for pointer, what in exc.problems:
                print(f"  {pointer or '/'}: {what}")
            grammar = constraint_from_args(args, strict=False)
            relaxed = grammar.relaxed
            print("with --no-strict these are relaxed (the output may then violate them).")
        if grammar is None:
            raise SystemExit("logitgate check: give a constraint (--schema, --pydantic, --regex, --lark, --gbnf, --yacc)")
        for note in grammar.notes if grammar.kind != "regex" else []:
            print(f"note: {note}")
        if args.tokenizer:
            tok = _check_tokenizer(args.tokenizer)
            with progress(f"compiling for {tok.name or args.tokenizer}"):
                t0 = time.perf_counter()
                compiled = compile(grammar, tok)
                from .matcher import Matcher

                Matcher(compiled).allowed_token_ids()
                dt = time.perf_counter() - t0
            print(f"compiled for {tok.name or args.tokenizer} ({tok.n_tokens} tokens): "
                  f"{compiled.n_states} states, first mask after {dt * 1e3:.1f} ms")
    except LogitgateError as exc:
        print(f"error: {exc}")
        return 2
    print(f"ok: the {grammar.kind.replace('_', ' ')} constraint compiles"
          + (" with relaxations" if relaxed else " exactly"))
    return 1 if relaxed else 0


def _bench(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parents[2]
    bench = Path(args.bench_dir) if args.bench_dir else root / "bench"
    scripts = {"regex": "bench_regex.py", "grammar": "bench_grammar.py", "json": "bench_json_schema.py",
               "model": "bench_model.py", "controllers": "bench_controllers.py", "server": "bench_server.py",
               "server-load": "bench_server_load.py", "reliability": "bench_reliability.py",
               "recognizers": "bench_recognizers.py"}
    if not (bench / scripts["regex"]).is_file():
        raise SystemExit(f"logitgate bench runs the benchmarks of a source checkout; no bench/ folder at {bench} "
                         "(clone the repository, or pass --bench-dir)")
    which = [args.which] if args.which != "all" else ["regex", "grammar", "json"]
    rc = 0
    for name in which:
        cmd = [sys.executable, str(bench / scripts[name]), *(["--plot"] if args.plot and name in ("regex", "grammar", "json") else []),
               *args.rest]
        print("+", " ".join(cmd), flush=True)
        rc |= subprocess.call(cmd, cwd=bench.parent)
    return rc


def _wasm_factory(path: Path, args: argparse.Namespace) -> Any:
    """The controller factory of a Wasm module (``.wasm``, ``.wat`` text, or a ``.c`` source built
    with ``wasm.build_c`` into a temporary file)."""
    import tempfile

    from .controllers import wasm

    try:
        if path.suffix == ".c":
            with tempfile.TemporaryDirectory() as tmp:
                module = wasm.WasmModule.from_file(wasm.build_c([path], Path(tmp) / (path.stem + ".wasm")))
        elif path.suffix == ".wat":
            module = wasm.WasmModule.from_wat(path.read_text(encoding="utf-8"), name=path.name)
        else:
            module = wasm.WasmModule.from_file(path)
    except wasm.WasmError as exc:
        raise SystemExit(f"logitgate run: {exc}") from None
    return module.controller_factory(wasm.WasmLimits(), arg=args.arg.encode())


def _run(args: argparse.Namespace) -> int:
    """Run a controller script (AICI pyctrl style) on a model; exit 1 if any sequence failed."""
    from .controllers import run_controller, scripting
    from .integrations.models import load_model
    from .progress import progress

    path = Path(args.script)
    if not path.is_file():
        raise SystemExit(f"logitgate run: no script {path}")
    scripting.CHECKS = args.checks
    wasm = path.suffix in (".wasm", ".wat", ".c")
    if wasm:  # a sandboxed Wasm controller (C is built first), bounded by fuel
        factory = _wasm_factory(path, args)
    else:
        factory = scripting.load_script(path)
    with progress("loading the model") as say:
        model = load_model(args.model, runtime=args.runtime, progress=say)

    def on_event(seq_id: int, kind: str, data: str) -> None:
        if kind == "log":
            for line in data.rstrip("\n").splitlines():
                print(f"[{seq_id}] {line}", file=sys.stderr, flush=True)
        elif kind == "fork":
            print(f"[{seq_id}] forked: {data}", file=sys.stderr, flush=True)
        elif kind == "text" and args.stream:
            print(f"[{seq_id}] + {data!r}", file=sys.stderr, flush=True)

    prompt: Any = args.prompt if args.raw else ([{"role": "user", "content": args.prompt}] if args.prompt else "")
    if args.in_process or os.name != "posix":
        res = run_controller(factory, model, prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                             seed=args.seed, on_event=on_event)
    else:  # each sequence's controller in its own worker process, with hard time limits
        from .controllers.process import ProcessControllers

        with ProcessControllers(factory) as remote:
            res = run_controller(remote, model, prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                                 seed=args.seed, on_event=on_event)
    failed = False
    for seq in res.sequences:
        print(f"== sequence {seq.seq_id} ({seq.stop_reason}{': ' + seq.error if seq.error else ''})")
        print(seq.text)
        failed |= seq.error is not None
    if res.variables:
        print("== variables")
        for name, value in sorted(res.variables.items()):
            print(f"{name} = {value.decode('utf-8', errors='replace')!r}")
    return 1 if failed else 0


def _serve(args: argparse.Namespace) -> int:
    """Run the OpenAI-compatible server on a model (the embedded one by default) until interrupted."""
    for name, extra in (("fastapi", "server"), ("uvicorn", "server")):
        if importlib.util.find_spec(name) is None:
            raise SystemExit(f"logitgate serve needs {name}: pip install 'logitgate[{extra}]'")
    import uvicorn

    from .integrations.models import load_model
    from .progress import progress
    from .server import create_app
    from .server.engine import Engine

    api_key = args.api_key or os.environ.get("LOGITGATE_API_KEY") or None
    recognizers: dict[str, Any] = {}
    for item in args.recognizer:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec:
            raise SystemExit(f"--recognizer wants NAME=module:obj, not {item!r}")
        recognizers[name] = recognizer_from_spec(spec, f"--recognizer {name}")
    with progress("loading the model") as say:
        model = load_model(args.model, runtime=args.runtime, progress=say)
        # /v1/run (controllers) runs on a second instance of the model, one run at a time
        controller_model = None if args.no_controllers else load_model(args.model, runtime=args.runtime)
    from .kernels import load_all

    with progress("loading the compiled kernels"):
        load_all()  # now, so that no first request pays a kernel's first load (5-40 ms each)
    engine = Engine(model, max_batch=args.max_batch)
    from .server.app import DEFAULT_LIMITS

    limits = DEFAULT_LIMITS.replace(max_compile_seconds=args.max_compile_seconds or None)
    # the app starts and closes the engine in its lifespan: uvicorn runs that shutdown on SIGINT and
    # SIGTERM alike (after SIGTERM it re-raises the signal, so a `finally` here would never run)
    app = create_app(engine, api_key=api_key, controller_model=controller_model, limits=limits, manage_engine=True,
                     recognizers=recognizers)
    where = f"http://{args.host}:{args.port}/v1"
    print(f"logitgate serve: {model.name} at {where}" + (" (API key required)" if api_key else ""), file=sys.stderr,
          flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        engine.close()  # no-op after the lifespan closed it; covers a failure before startup
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="logitgate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the embedded model answering under a schema, a regex and a grammar")
    _add_model_flags(demo)
    demo.add_argument("--tokenizer", choices=sorted(DEMO_TOKENIZERS), default=None,
                      help="instead: the model-free walk over a bundled tokenizer (random choices among allowed tokens)")
    demo.add_argument("--max-steps", type=int, default=80, help="with --tokenizer: steps per text")

    gen = sub.add_parser("generate", help="generate text under a constraint, streaming it to stdout")
    _add_constraint_flags(gen)
    _add_model_flags(gen)
    gen.add_argument("--prompt", required=True, help="the user message (or the raw prompt with --raw)")
    gen.add_argument("--system", default=None, help="a system message")
    gen.add_argument("--raw", action="store_true", help="send --prompt as is, without the chat template")
    gen.add_argument("--no-fast-forward", action="store_true", help="one forward pass per token, even where forced")
    gen.add_argument("--stats", action="store_true", help="print token counts, tokens/s and mask share to stderr")

    chk = sub.add_parser("check", help="compile a schema or grammar; report unsupported parts with their positions")
    _add_constraint_flags(chk)
    chk.add_argument("--tokenizer", default=None,
                     help="also compile for a tokenizer: spm, tekken, embedded, a .gguf file or a tokenizer.json")

    run = sub.add_parser("run", help="run a controller script (AICI pyctrl style: import pyaici.server as aici)")
    run.add_argument("script", help="the script file (it calls aici.start(main()) or aici.test(main())), or a Wasm "
                                    "controller: a .wasm module, .wat text, or a .c source (built with zig's clang)")
    run.add_argument("--arg", default="", help="Wasm controllers: the bytes their module_arg() host call returns")
    _add_model_flags(run)
    run.add_argument("--prompt", default="", help="the user message (default: none; the script forces its text)")
    run.add_argument("--raw", action="store_true", help="send --prompt as is, without the chat template")
    run.add_argument("--checks", choices=["assert", "report"], default="assert",
                     help="aici.check_vars: fail the sequence (assert) or only log the mismatch (report)")
    run.add_argument("--stream", action="store_true", help="also print each sequence's text as it grows (stderr)")
    run.add_argument("--in-process", action="store_true",
                     help="run the controllers in this process (default: one worker process per sequence)")

    serve = sub.add_parser("serve", help="the OpenAI-compatible server (structured outputs, controllers)")
    serve.add_argument("--model", metavar="PATH", default=None,
                       help="a .gguf file or a transformers model folder (default: the embedded SmolLM2-135M-Instruct)")
    serve.add_argument("--runtime", choices=["auto", "llama-cpp", "transformers"], default="auto")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", default=None,
                       help="require 'Authorization: Bearer KEY' (default: $LOGITGATE_API_KEY, else no key)")
    serve.add_argument("--max-batch", type=int, default=64, help="requests decoded together at most")
    serve.add_argument("--no-controllers", action="store_true", help="no /v1/run (no second model instance)")
    serve.add_argument("--max-compile-seconds", type=float, default=10.0,
                       help="compile deadline of a request's constraint (default 10; 0: none)")
    serve.add_argument("--recognizer", metavar="NAME=MODULE:OBJ", action="append", default=[],
                       help="serve a custom recognizer under NAME: requests ask for it with the extra body field "
                            "'recognizer': NAME (repeatable)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])

    bench = sub.add_parser("bench", help="the side-by-side benchmarks against the peer engines (source checkout)")
    bench.add_argument("which", nargs="?", choices=["all", "regex", "grammar", "json", "model", "controllers", "server",
                                                      "server-load", "reliability", "recognizers"], default="all")
    bench.add_argument("--plot", action="store_true", help="write PNG plots next to the results")
    bench.add_argument("--bench-dir", default=None, help="the bench/ folder (default: the source checkout's)")
    bench.epilog = "Other options are passed on to the benchmark script (see bench/*.py --help)."

    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "bench":
        parser.error("unrecognized arguments: " + " ".join(unknown))
    args.rest = unknown
    if args.command == "demo":
        return tokenizer_demo(args) if args.tokenizer else model_demo(args)
    if args.command == "generate":
        return _generate(args)
    if args.command == "check":
        return _check(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "run":
        return _run(args)
    if args.command == "serve":
        return _serve(args)
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
