"""Turn a small model's free text into one action, tolerating sloppy formats.

A 135M-parameter policy writes "Action: Search[x]", "SEARCH: x", "search(x)",
"Final Answer: x" or nothing usable at all. Anything we cannot read becomes a
``ParseFailure`` that the loop records and shows to the model; it never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hasp.textutil import balanced

ACTIONS = ("SEARCH", "READ", "FINAL")
_ALIASES = {"ANSWER": "FINAL", "FINISH": "FINAL", "FINAL ANSWER": "FINAL", "FINAL_ANSWER": "FINAL",
            "LOOKUP": "SEARCH", "QUERY": "SEARCH", "OPEN": "READ"}
_NAME = r"(SEARCH|READ|FINAL[ _]ANSWER|FINAL|ANSWER|FINISH|LOOKUP|QUERY|OPEN)"
_OPEN = re.compile(_NAME + r"\s*([\[\(\{<])", re.I)
_CLOSE = {"[": "]", "(": ")", "{": "}", "<": ">"}
_COLON = re.compile(r"(?:^|\n|Action\s*:\s*)" + _NAME + r"\s*[:=\-]\s*(.+?)\s*(?:\n|$)", re.I)
_STATED = re.compile(r"\bthe (?:final )?answer is\s*:?\s*(.+?)\s*(?:\n|$)", re.I)
_THOUGHT = re.compile(r"Thought\s*:\s*(.*?)(?=\n\s*(?:Action|SEARCH|READ|FINAL)\b|\Z)", re.I | re.S)


@dataclass
class _Match:
    """Position, action name and argument of one bracketed action."""

    pos: int
    name: str
    arg: str

    def start(self) -> int:
        return self.pos

    def group(self, i: int) -> str:
        return self.name if i == 1 else self.arg


def _bracketed(text: str) -> _Match | None:
    """First NAME[...] with *balanced* brackets, so FINAL[(1+1+1)*8] keeps its parentheses."""
    for m in _OPEN.finditer(text):
        opener = m.group(2)
        closed = balanced(text, m.end() - 1, opener, _CLOSE[opener])
        if closed is not None:
            return _Match(m.start(), m.group(1), closed[0])
        line_end = text.find("\n", m.end())  # unclosed: take the rest of the line
        arg = text[m.end(): line_end if line_end >= 0 else len(text)]
        return _Match(m.start(), m.group(1), arg)
    return None


@dataclass
class ParsedAction:
    type: str
    arg: str
    thought: str


@dataclass
class ParseFailure:
    reason: str
    thought: str


def _norm(name: str) -> str:
    n = re.sub(r"[ _]+", " ", name.upper()).strip()
    return _ALIASES.get(n, n)


def parse_action(text: str) -> ParsedAction | ParseFailure:
    """Return the first well-formed action in ``text`` (bracketed form preferred)."""
    text = text or ""
    m_t = _THOUGHT.search(text)
    thought = (m_t.group(1) if m_t else text.split("\n", 1)[0]).strip()[:1000]
    candidates: list[tuple[int, Any]] = []
    for m in (_bracketed(text), _COLON.search(text)):
        if m:
            candidates.append((m.start(), m))
    if not candidates:
        m = _STATED.search(text)  # "The answer is: X" is an explicit final answer, not a guess
        if m and m.group(1).strip(" .:"):
            return ParsedAction("FINAL", re.sub(r"\s+", " ", m.group(1)).strip(" .\"'")[:500], thought)
        return ParseFailure("no SEARCH[...], READ[...] or FINAL[...] action found", thought)
    _, m = min(candidates, key=lambda c: c[0])
    kind, arg = _norm(m.group(1)), m.group(2).strip().strip("\"'` ").strip()
    arg = re.sub(r"\s+", " ", arg)[:500]
    if not arg:
        return ParseFailure(f"{kind} has an empty argument", thought)
    return ParsedAction(kind, arg, thought)
