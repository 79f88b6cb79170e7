"""The search PF shape "a wrong FINAL becomes a SEARCH (or READ)", shared by the seed PFs that redirect.

Why a base: the redirect is only allowed while the episode has room for it
(``can_redirect_final``) and must be recorded (``note_final_redirect``); written out in
each PF, that bookkeeping was where copies could drift apart.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hasp.pf.search_support import can_redirect_final, note_final_redirect
from hasp.pf.base import Teacher
from hasp.pf.base import FinalCheckPF
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.teacher import teacher_directive


class FinalRedirectPF(FinalCheckPF):
    """On a FINAL with a ``problem``, run ``redirect`` on ``target`` instead (when there is one)."""

    redirect: ClassVar[str] = "SEARCH"

    def target(self, ctx: dict[str, Any], arg: str) -> str | None:
        """The query (or document, for a READ) to run instead of the FINAL; None when there is none."""
        raise NotImplementedError

    def why(self, ctx: dict[str, Any], arg: str) -> str:
        return f"answer {arg[:60]!r}: {self.objection(self.problem(ctx, arg))}"

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return (action_type == "FINAL" and can_redirect_final(ctx) and self.problem(ctx, arg) is not None
                and self.target(ctx, arg) is not None)

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        note_final_redirect(ctx)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type=self.redirect,
                            new_action_arg=self.target(ctx, arg), reason=self.why(ctx, arg))


def teacher_repair(ctx: dict[str, Any], reply: str | None, *, answered: str, searched: str) -> Intervention | None:
    """The teacher's ``ANSWER:`` (at most 8 words) as a new FINAL, or its ``SEARCH:`` (at most 12
    words, while a redirect is allowed) as a SEARCH; None for anything else, so the PF falls back.
    ``answered`` / ``searched`` are the reasons recorded for each."""
    directive = teacher_directive(reply)
    if directive is None:
        return None
    kind, value = directive
    words = len(value.split())
    if kind == "ANSWER" and 0 < words <= 8:
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="FINAL", new_action_arg=value,
                            reason=answered)
    if kind == "SEARCH" and 0 < words <= 12 and can_redirect_final(ctx):
        note_final_redirect(ctx)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH", new_action_arg=value,
                            reason=searched)
    return None
