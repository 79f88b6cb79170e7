"""Teacher-only answer post-processing (App. G "Teacher only", App. B.6 outer loop).

Without PFs, the teacher's only entry point is the end of the episode: it turns the agent's
FINAL (or, when the agent never answered, its trace) into a short answer span. Its reply must be
one ``ANSWER: <span>`` line; an unreadable reply gets one retry round with a format reminder,
after which the agent's own answer stands. A failing teacher call also leaves the agent's answer.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.pf.base import Teacher
from hasp.pf.teacher import teacher_prompt

log = logging.getLogger(__name__)

_ANSWER = re.compile(r"^ANSWER\s*:\s*(\S.*?)\s*$", re.I)
MAX_SPAN_WORDS = 20


@dataclass
class PostprocessResult:
    answer: str
    ok: bool  # True when the teacher's span replaced the agent's answer
    rounds: int = 0  # teacher calls made (1, or 2 with the retry round)
    replies: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_answer_span(reply: str) -> str | None:
    """The span of a reply that is exactly one ``ANSWER: <span>`` line of ≤ 20 words, else None."""
    text = (reply or "").strip()
    if "\n" in text:
        return None
    m = _ANSWER.match(text)
    if not m:
        return None
    span = m.group(1).strip().strip("\"'").strip()
    return span if span and len(span.split()) <= MAX_SPAN_WORDS else None


def postprocess_final(teacher: Teacher, question: str, answer: str, evidence: str, *,
                      max_tokens: int = 64) -> PostprocessResult:
    """Ask the teacher for the short span; never raises."""
    msgs = teacher_prompt("postprocess", question=question, answer=answer or "(no answer)",
                          evidence=evidence or "(none)")
    res = PostprocessResult(answer=answer, ok=False)
    for round_ in range(2):
        try:
            reply = teacher.generate(msgs, max_tokens=max_tokens, temperature=0.0)
        except Exception as e:  # noqa: BLE001 - the agent's own answer is the fallback
            res.note = f"teacher error: {e}"
            return res
        res.rounds, res.replies = round_ + 1, [*res.replies, reply[:300]]
        span = parse_answer_span(reply)
        if span is not None:
            res.answer, res.ok = span, True
            return res
        msgs = [*msgs, {"role": "assistant", "content": reply[:300]}, *teacher_prompt("postprocess_retry")]
    res.note = "unparseable teacher reply after retry"
    log.info("teacher post-processing: %s; keeping the agent's answer", res.note)
    return res
