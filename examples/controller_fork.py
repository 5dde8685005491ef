"""A controller program with forks and shared variables (AICI's pyctrl API), run with
``run_controller`` on the embedded model.

    python examples/controller_fork.py

The script forces a prefix, forks into three sequences, lets two of them each answer under a
regex (storing the answer in a shared variable) while the third waits for both variables and then
writes a summary line from them. The same file runs with ``logitgate run script.py`` (there the
sequences run in worker processes by default).
"""
from __future__ import annotations

import re
import sys

from logitgate.controllers import run_controller
from logitgate.controllers.scripting import script_factory
from logitgate.integrations.models import load_model

SCRIPT = r'''
import pyaici.server as aici

async def main():
    await aici.FixedTokens("The word 'hello' in")
    branch = await aici.fork(3)
    if branch < 2:
        lang = ["French", "German"][branch]
        await aici.FixedTokens(f" {lang} is")
        # one quoted word: the constraint ends the answer at the closing quote
        await aici.gen_text(regex=r' "[A-Za-z]+"', store_var=lang, max_tokens=8)
    else:
        french, german = await aici.wait_vars("French", "German")   # suspended until both exist
        await aici.FixedTokens(f" two languages:{french.decode()} and{german.decode()}.")

aici.start(main())
'''


def main() -> int:
    model = load_model()
    res = run_controller(script_factory(SCRIPT, "hello_forks.py"), model, "", max_tokens=40)
    for seq in res.sequences:
        print(f"sequence {seq.seq_id} ({seq.stop_reason}): {seq.text!r}")
        assert seq.error is None, seq.error
    print("variables:", {k: v.decode() for k, v in res.variables.items()})
    print(f"{res.steps} steps, {res.seconds:.2f} s")

    assert len(res.sequences) == 3
    word = r' "[A-Za-z]+"'
    for name in ("French", "German"):
        assert re.fullmatch(word, res.variables[name].decode()), res.variables
    summary = next(s.text for s in res.sequences if "two languages" in s.text)
    assert summary.endswith(f"two languages:{res.variables['French'].decode()} and{res.variables['German'].decode()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
