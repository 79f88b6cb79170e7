"""One guarded teacher call for PFs: ``intervene`` / ``check_final`` helpers.

Why: every teacher-assisted PF must degrade to its deterministic path when the
teacher is absent or fails (App. B.1). Doing the call, the exception containment
and the logging in one place keeps each PF's fallback a plain ``if reply is None``.
"""

from __future__ import annotations

import logging
import re

from hasp.pf.base import Teacher

log = logging.getLogger(__name__)

_PROBLEM = re.compile(r"^\W*problem\W*[:\-]?\s*(?P<why>.*)$", re.I | re.S)
_OK = re.compile(r"^\W*ok\b", re.I)


def ask_teacher(teacher: Teacher | None, prompt: str, *, max_tokens: int = 64, who: str = "pf") -> str | None:
    """The teacher's stripped reply to one user turn, or None (no teacher, error, empty reply).

    A failure is logged with ``who`` (the skill id) and never raised: the caller falls back.
    """
    if teacher is None:
        return None
    try:
        reply = teacher.generate(messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                                 temperature=0.0)
    except Exception as e:  # noqa: BLE001 - contained: the PF's deterministic path takes over
        log.warning("%s: teacher call failed (%s: %s); using the deterministic fallback", who,
                    type(e).__name__, e)
        return None
    reply = str(reply or "").strip()
    return reply or None


def teacher_objection(teacher: Teacher | None, prompt: str, *, who: str = "pf",
                      default_reason: str = "teacher flagged the answer") -> str | None:
    """Ask a check question whose reply must be ``OK`` or ``PROBLEM: <reason>``.

    Returns the reason for PROBLEM, None for OK, no teacher, a failed call or a reply of
    neither shape (an unclear reply is no evidence, so it must not count as a vote).
    """
    reply = ask_teacher(teacher, prompt + "\nReply with exactly OK, or PROBLEM: <one short reason>.",
                        max_tokens=48, who=who)
    if reply is None or _OK.match(reply):
        return None
    m = _PROBLEM.match(reply)
    if not m:
        return None
    why = " ".join(m.group("why").split())[:200]
    return why or default_reason


_DIRECTIVE = re.compile(r"^\s*(ANSWER|SEARCH)\s*:\s*(.+)$", re.I | re.M)


def teacher_directive(reply: str | None) -> tuple[str, str] | None:
    """``("ANSWER" | "SEARCH", value)`` from the first ``ANSWER: ...`` / ``SEARCH: ...`` line of a
    reply (value without quotes or brackets), or None: one reading of the repair replies
    that teacher-assisted PFs ask for."""
    m = _DIRECTIVE.search(reply or "")
    return (m.group(1).upper(), m.group(2).strip().strip("'\"[]")) if m else None
