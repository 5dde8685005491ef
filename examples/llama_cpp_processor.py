"""llama-cpp-python's own generation calls, constrained by logitgate.

    python examples/llama_cpp_processor.py

Two ways: ``lg.chat`` (``create_chat_completion`` with the processor built for you) under a JSON
Schema, and a ``LlamaCppLogitsProcessor`` passed by hand to ``create_completion`` under a regex.
The vocabulary comes from the GGUF file's own tokenizer metadata (``lg.tokenizer_for(llm)``).
``LlamaCppModel`` runs the same model in logitgate's loop instead, which adds fast-forward.
"""
from __future__ import annotations

import json
import re
import sys

import llama_cpp
from llama_cpp import Llama

import logitgate
from logitgate.integrations import llama_cpp as lg
from logitgate.integrations.models import embedded_model_path

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30},
                   "year": {"type": "integer", "minimum": 1800, "maximum": 2100}},
    "required": ["city", "year"],
    "additionalProperties": False,
}


def main() -> int:
    llm = Llama(str(embedded_model_path()), chat_format="chatml", n_ctx=2048, n_threads=1, verbose=False)

    # 1. chat completion under a JSON Schema (a dict, a JSON text or a Pydantic class)
    text = lg.chat(llm, [{"role": "user", "content": "Where and when were the first modern Olympic Games held? "
                                                     "Answer as JSON."}],
                   logitgate.Grammar.from_json_schema(SCHEMA), max_tokens=60, temperature=0.0)
    print("chat:", text)
    answer = json.loads(text)
    assert set(answer) == {"city", "year"} and 1800 <= answer["year"] <= 2100, answer

    # 2. a processor passed by hand: one instance per generation (it follows one sequence)
    compiled = logitgate.compile(logitgate.Grammar.from_regex(r" (Yes|No)\."), lg.tokenizer_for(llm))
    proc = lg.LlamaCppLogitsProcessor(compiled)
    out = llm.create_completion("Q: Is water wet?\nA:", max_tokens=8, temperature=0.0,
                                logits_processor=llama_cpp.LogitsProcessorList([proc]))
    completion = out["choices"][0]["text"]
    print("completion:", repr(completion), "finish:", out["choices"][0]["finish_reason"])
    assert re.fullmatch(r" (Yes|No)\.", completion), completion
    print(f"time in the processor: {proc.elapsed_s * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
