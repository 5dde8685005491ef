"""One realistic valid and one invalid sample per outlines-core benchmark regex.

The regexes themselves are read at run time from
shared/data/outlines-core/regex_samples.json; only the samples live here.
``check_samples`` verifies them with Python's ``re.fullmatch`` and raises if any is wrong.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

REGEX_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "outlines-core" / "regex_samples.json"

# name -> (valid sample, invalid sample)
SAMPLES = {
    "email": (
        "jane.doe+newsletter@mail.example-corp.com",
        "jane.doe@@example.com",
    ),
    "complex_phone": (
        "+1 (555) 123-4567",
        "+1 (555) CALL-NOW",
    ),
    "simple_phone": (
        "+442071838750",
        "+0442071838750",
    ),
    "date": (
        "31/12/2023",
        "2023/13/45",
    ),
    "time": (
        "11:45 pm",
        "25:61 am",
    ),
    "ip": (
        "192.168.10.254",
        "256.1.1.1",
    ),
    "url": (
        "https://www.example.com/docs/getting-started.html",
        "ftp://example.com",
    ),
    "ssn": (
        "123-45-6789",
        "123-456-789",
    ),
    "complex_span_constrained_relation_extraction": (
        "altruism | is the opposite of | selfishness\n"
        "religions | practice | altruism | (moral | virtue)\n",
        "altruism | is the opposite of\n",
    ),
}


def load_regexes(path: Path = REGEX_FILE) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_samples(regexes: dict) -> None:
    """Fail loudly if a sample is missing or does not (not) match its regex."""
    problems = []
    for name, pattern in regexes.items():
        if name not in SAMPLES:
            problems.append(f"{name}: no sample in bench/samples.py")
            continue
        valid, invalid = SAMPLES[name]
        if not re.fullmatch(pattern, valid):
            problems.append(f"{name}: valid sample {valid!r} does not match")
        if re.fullmatch(pattern, invalid):
            problems.append(f"{name}: invalid sample {invalid!r} matches")
    if problems:
        raise SystemExit("bad benchmark samples:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    check_samples(load_regexes())
    print("all samples ok")
