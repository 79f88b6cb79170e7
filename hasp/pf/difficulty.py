"""The difficulty gate (App. B.6 (1)): the one master switch that flips per question.

Easy questions do not need skills, and every surfaced skill costs prompt tokens and risks a
needless rewrite. The teacher rates the question 1–5; its reply must be exactly one digit (a
chatty or out-of-range reply is not guessed at). Without a teacher, or when its reply cannot be
read or the call fails, a heuristic over the question's surface cues scores it instead, and the
source is recorded so an evaluation can tell the two apart.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from hasp.pf.base import Teacher
from hasp.pf.question import QuestionFeatures
from hasp.pf.teacher import teacher_prompt

log = logging.getLogger(__name__)

_DIGIT = re.compile(r"^\s*([1-5])\s*\.?\s*$")


@dataclass(frozen=True)
class Difficulty:
    score: int  # 1 (one lookup) … 5 (many dependent lookups with constraints)
    source: str  # "teacher" | "heuristic"
    note: str = ""  # why the heuristic was used (no teacher / unparseable reply / teacher error)


def heuristic_difficulty(q: QuestionFeatures) -> int:
    """1 plus one point each for: length, multi-hop, a long chain, constraints or arithmetic."""
    score = 1 + (q.n_words >= 10) + q.multi_hop + (q.hop_markers >= 3 or q.n_words >= 18)
    score += bool(q.constraint_phrases or q.computation)
    return max(1, min(5, int(score)))


def parse_difficulty(reply: str) -> int | None:
    """The score if ``reply`` is exactly one digit 1–5 (optionally with a trailing period), else None."""
    m = _DIGIT.match(reply or "")
    return int(m.group(1)) if m else None


def assess_difficulty(question: str, q: QuestionFeatures, teacher: Teacher | None = None, *,
                      max_tokens: int = 8) -> Difficulty:
    """Teacher score when available and readable, else the heuristic (never raises)."""
    if teacher is None:
        return Difficulty(heuristic_difficulty(q), "heuristic", "no teacher")
    try:
        reply = teacher.generate(teacher_prompt("difficulty", question=question), max_tokens=max_tokens,
                                 temperature=0.0)
    except Exception as e:  # noqa: BLE001 - TeacherError or a raw teacher's failure; heuristic fallback
        return Difficulty(heuristic_difficulty(q), "heuristic", f"teacher error: {e}")
    score = parse_difficulty(reply)
    if score is None:
        log.info("difficulty gate: unreadable teacher reply %r; using the heuristic", reply[:80])
        return Difficulty(heuristic_difficulty(q), "heuristic", f"unparseable teacher reply: {reply[:80]!r}")
    return Difficulty(score, "teacher")
