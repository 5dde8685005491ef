"""JSON for a Pydantic model, written by the embedded model in logitgate's generation loop.

    python examples/pydantic_json.py

The schema comes from the Pydantic class (``Grammar.from_json_schema`` accepts the class itself);
every token the model samples is masked so that the text stays a valid ``City`` document, and the
loop appends the bytes the schema forces (``{"name":"``, ``","country":"``, ...) without a
forward pass per token (fast-forward). The result is parsed back with Pydantic.
"""
from __future__ import annotations

import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import logitgate
from logitgate.integrations.generation import generate
from logitgate.integrations.models import load_model


class City(BaseModel):
    # Without extra="forbid" Pydantic's schema allows other keys (JSON Schema's default), and a small
    # model happily invents some; forbidding them gives "additionalProperties": false.
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population: int = Field(ge=0, le=50_000_000)       # bounds keep a small model from writing digits for ever
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]
    capital: bool


def main() -> int:
    model = load_model()                                 # the embedded SmolLM2-135M-Instruct (GGUF)
    grammar = logitgate.Grammar.from_json_schema(City)   # strict=True: refuses what it cannot enforce exactly
    messages = [{"role": "user", "content": "Describe the city of Paris as JSON."}]

    print("streamed: ", end="", flush=True)
    res = generate(model, messages, grammar, max_tokens=120, on_text=lambda piece: print(piece, end="", flush=True))
    print()

    city = City.model_validate_json(res.text)            # raises if the text is not a valid City
    assert res.stop_reason == "eos", res.stop_reason     # the document was complete before max_tokens
    print("parsed:   ", repr(city))
    print(f"tokens: {len(res.tokens)} ({res.n_forced} fast-forwarded), {res.tokens_per_s:.0f} tokens/s, "
          f"mask share {res.mask_share:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
