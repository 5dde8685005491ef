"""transformers ``model.generate()`` with logitgate's ``LogitsProcessor``: a batch of two prompts,
each under its own constraint (a date regex for one row, a JSON Schema for the other).

    python examples/transformers_logits_processor.py

The model is the embedded SmolLM2 GGUF file loaded with transformers: the first load dequantizes
it (about a minute on 2 cores) and keeps a float32 copy in ``$LOGITGATE_CACHE_DIR/models``
(default ``~/.cache/logitgate/models``); later runs load that copy in seconds. With your own
model, build the same pieces from ``AutoModelForCausalLM`` / ``AutoTokenizer`` and
``logitgate.Tokenizer.from_huggingface(hf_tokenizer, vocab_size=model.config.vocab_size)``.
"""
from __future__ import annotations

import json
import re
import sys

import logitgate
from logitgate.integrations.models import embedded_model_path
from logitgate.integrations.transformers import LogitgateLogitsProcessor, TransformersModel

DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def main() -> int:
    lm = TransformersModel.from_gguf(embedded_model_path(), progress=print)
    model, hf_tok, tok = lm.model, lm.hf_tokenizer, lm.tokenizer     # torch model, HF tokenizer, logitgate Tokenizer

    # one compiled constraint per prompt, in the batch's row order
    constraints = [logitgate.compile(logitgate.Grammar.from_regex(DATE), tok),
                   logitgate.compile(logitgate.Grammar.from_json_schema(PERSON), tok)]
    prompts = ["When did the Berlin Wall fall? Answer as YYYY-MM-DD.",
               "Describe a person as JSON with a name and an age."]

    hf_tok.padding_side = "left"                                     # decoder-only models pad on the left
    if hf_tok.pad_token_id is None:
        hf_tok.pad_token = hf_tok.eos_token
    texts = [hf_tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts]
    batch = hf_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    proc = LogitgateLogitsProcessor(constraints)                     # masks both rows in one call per step
    eos = list(tok.eos_token_ids)
    out = model.generate(**batch, logits_processor=[proc], max_new_tokens=60, do_sample=False,
                         eos_token_id=eos, pad_token_id=hf_tok.pad_token_id)

    new = out[:, batch["input_ids"].shape[1]:]
    answers = [tok.decode_bytes([int(t) for t in row if int(t) not in eos]).decode() for row in new]
    for prompt, answer in zip(prompts, answers):
        print(f"{prompt}\n  -> {answer}")
    assert re.fullmatch(DATE, answers[0]), answers[0]
    person = json.loads(answers[1])
    assert set(person) == {"name", "age"} and 0 <= person["age"] <= 120, person
    print(f"time in the processor: {proc.elapsed_s * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
