"""An example of a user's own task: unit conversion with a calculator tool and a tolerance scorer.

Run it (from this folder) through the CLI or the Python API:

    hasp eval --domain task:unit_task --variants react,pf
    python -c "import hasp.api as h, task; print(h.evaluate(task.unit_task, ['react', 'pf']))"

The task has one tool, ``CONVERT[<number> <unit> to <unit>]``, its own scorer (a numeric answer
within 1 % of the gold one counts), a deterministic ceiling (the tool applied to the question's own
numbers) and a skill library ``skills/`` with one code PF of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from hasp.api import Task, Tool

#: metres per unit
LENGTH = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "mile": 1609.344, "miles": 1609.344, "mi": 1609.344,
          "ft": 0.3048, "foot": 0.3048, "feet": 0.3048, "in": 0.0254, "inch": 0.0254, "inches": 0.0254,
          "yd": 0.9144, "yard": 0.9144, "yards": 0.9144}
_QUERY = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)\s+(?:to|in|into)\s+([a-z]+)", re.I)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def convert(arg: str) -> str:
    """``3 miles to km`` -> ``4.828 km``; an argument it cannot read raises (shown to the agent)."""
    m = _QUERY.search(arg)
    if not m:
        raise ValueError("write CONVERT[<number> <unit> to <unit>], e.g. CONVERT[3 miles to km]")
    value, src, dst = float(m.group(1)), m.group(2).lower(), m.group(3).lower()
    if src not in LENGTH or dst not in LENGTH:
        raise ValueError(f"unknown unit {src if src not in LENGTH else dst!r}; known: {', '.join(sorted(LENGTH))}")
    return f"{value * LENGTH[src] / LENGTH[dst]:.4g} {dst}"


def within_one_percent(prediction: str, answers: list[str]) -> float:
    """1.0 when the first number of the prediction is within 1 % of the gold number."""
    got, gold = _NUMBER.search(prediction or ""), _NUMBER.search(answers[0])
    if got is None or gold is None:
        return 0.0
    g, a = float(got.group()), float(gold.group())
    return float(abs(g - a) <= 0.01 * max(abs(a), 1e-9))


#: the unit words a generated question uses, by unit
_WORDS = {"km": "km", "mi": "miles", "m": "m", "ft": "feet", "in": "inches", "cm": "cm", "yd": "yards", "mm": "mm"}
_PHRASINGS = ("How many {dst} is {v} {src}?", "Convert {v} {src} to {dst}.", "What is {v} {src} in {dst}?")


def _generated() -> list[tuple[str, float, str, str]]:
    """42 more questions (7 values x 6 unit pairs, phrasings in turn): enough items to split for an epoch."""
    pairs = [("km", "mi"), ("m", "ft"), ("in", "cm"), ("yd", "m"), ("ft", "in"), ("cm", "mm")]
    out = []
    for i, v in enumerate((1.5, 7, 12, 25, 40, 120, 250)):
        for j, (src, dst) in enumerate(pairs):
            text = _PHRASINGS[(i + j) % len(_PHRASINGS)].format(v=v, src=_WORDS[src], dst=_WORDS[dst])
            out.append((text, v, src, dst))
    return out


QUESTIONS = [("How many km is 3 miles?", 3, "mile", "km"), ("How many feet are 2 m?", 2, "m", "ft"),
             ("Convert 10 inches to cm.", 10, "in", "cm"), ("How many yards is 50 m?", 50, "m", "yd"),
             ("What is 5 km in miles?", 5, "km", "mi"), ("How many mm are 4 inches?", 4, "in", "mm"),
             *_generated()]


def items() -> list[dict]:
    return [{"id": f"u{i}", "question": q, "answers": [f"{v * LENGTH[s] / LENGTH[d]:.4g}"]}
            for i, (q, v, s, d) in enumerate(QUESTIONS)]


def tool_ceiling(rows: list) -> list[float]:
    """The score of the tool applied to the question's own number and units (what a perfect caller gets)."""
    by_text = {q: (v, s, d) for q, v, s, d in QUESTIONS}
    out = []
    for row in rows:
        v, s, d = by_text[row.question]
        out.append(within_one_percent(convert(f"{v} {s} to {d}"), row.answers))
    return out


unit_task = Task(
    name="unit_convert",
    instructions="You convert lengths between units with the CONVERT tool, then answer with the number.",
    tools=[Tool("CONVERT", convert, "converts a length, e.g. CONVERT[3 miles to km]", argument="number unit to unit")],
    items=items,
    scorer=within_one_percent,
    ceiling=tool_ceiling,
    max_steps=4,
    library=Path(__file__).with_name("skills"),
    demo=[{"role": "user", "content": "Question: How many m is 2 km?\nNext Thought and Action:"},
          {"role": "assistant", "content": "Thought: Convert 2 km to m.\nAction: CONVERT[2 km to m]"},
          {"role": "user", "content": "Observation: 2000 m\nNext Thought and Action:"},
          {"role": "assistant", "content": "Thought: 2 km is 2000 m.\nAction: FINAL[2000]"}],
)
