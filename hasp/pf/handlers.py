"""FINAL-time handler votes (App. B.2, B.6 (3)): may send a FINAL back to SEARCH, once.

When the action that survives dispatch is FINAL, every live PF with a ``handler_kind`` is asked
``check_final``; a non-None reason is a vote against finishing. Only when the votes reach the
threshold, and the episode has overrides left, does FINAL become a SEARCH for question keywords
the agent has not searched yet. The threshold makes one noisy handler harmless; the override cap
makes a FINAL→SEARCH→FINAL→SEARCH loop impossible (the second FINAL is accepted).

``llm`` handlers need the teacher and are skipped without one. A handler that raises is disabled
for the episode (shared with the dispatcher's ``disabled`` map) and recorded, like a raising PF;
one whose teacher call failed simply does not vote.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.intervention import MAX_REASON_CHARS, error_text, shown_text
from hasp.pf.teacher import teacher_errors
from hasp.textutil import keyword_query, tokens

log = logging.getLogger(__name__)


@dataclass
class HandlerOutcome:
    """What the handlers said about one FINAL (stored in the step's audit event)."""

    votes: list[dict[str, str]] = field(default_factory=list)  # skill_id, kind, reason
    asked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # llm handlers without a teacher
    errors: list[str] = field(default_factory=list)
    threshold: int = 0
    overridden: bool = False
    query: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unsearched_query(question: str, searched: Sequence[str], max_words: int = 8) -> str:
    """Question keywords, those not used in any earlier query first (so the search differs)."""
    used = {t for q in searched for t in tokens(q)}
    words = keyword_query(question, max_words=32).split()
    fresh = [w for w in words if w.lower() not in used]
    ordered = fresh + [w for w in words if w not in fresh]
    return " ".join(ordered[:max_words]) or question


class HandlerVoter:
    """Per episode: counts handler votes on FINAL and applies at most ``max_overrides`` flips."""

    def __init__(self, pfs: Sequence[ProgramFunction], *, threshold: int, max_overrides: int = 1,
                 teacher: Teacher | None = None, disabled: dict[str, str] | None = None) -> None:
        self.handlers = self.handlers_of(pfs)
        self.threshold, self.max_overrides, self.teacher = threshold, max_overrides, teacher
        self.disabled = disabled if disabled is not None else {}
        self.overrides = 0

    @staticmethod
    def handlers_of(pfs: Sequence[ProgramFunction]) -> list[ProgramFunction]:
        """The PFs with a FINAL-time handler, in dispatch order."""
        return [p for p in pfs if getattr(p, "handler_kind", None) in ("code", "llm")]

    def vote(self, ctx: dict[str, Any], answer: str, searched: Sequence[str] = ()) -> HandlerOutcome:
        out = HandlerOutcome(threshold=self.threshold)
        for pf in self.handlers:
            sid, kind = pf.skill_id, pf.handler_kind
            if sid in self.disabled:
                continue
            if kind == "llm" and self.teacher is None:
                out.skipped.append(sid)
                continue
            teacher = self.teacher if kind == "llm" else None
            before = teacher_errors(teacher)
            out.asked.append(sid)
            try:
                reason = pf.check_final(ctx, answer, teacher)
            except Exception as e:  # noqa: BLE001 - a handler never crashes the episode
                if teacher is not None and teacher_errors(teacher) > before:
                    out.errors.append(f"{sid}.check_final: teacher failed, no vote")
                    continue
                msg = f"{sid}.check_final raised {type(e).__name__}: {error_text(e)}"
                self.disabled[sid] = msg
                out.errors.append(msg)
                log.warning("handler disabled for this episode: %s", msg)
                continue
            if reason is not None:
                out.votes.append({"skill_id": sid, "kind": str(kind),
                                  "reason": shown_text(reason, MAX_REASON_CHARS, one_line=True)})
        if len(out.votes) >= self.threshold and self.overrides < self.max_overrides:
            self.overrides += 1
            out.overridden = True
            out.query = unsearched_query(str(ctx.get("question", "")), searched)
        return out
