"""The ProgramFunction interface (paper App. B.1) and the shared PF shapes built on it.

Why the shapes live here: most seed PFs are one of a few shapes (a fixed hint, findings of a scan, a
check of the proposed answer, a teacher vote, an audit mark), and writing the shape out in every
pf.py made the files differ only where they should not. A subclass says what to look for and what
to say; the base does the rest. The static analyses (``hasp.pf.equivalence``) read these bases as
part of each subclass, so a ``HintPF`` whose ``hint`` is a literal is prompt-equivalent (A+B)
exactly as if it had written ``intervene`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.teacher import Teacher, teacher_objection


class ProgramFunction:
    """A skill as code: decides *when* to fire and *how* to repair the next action.

    ``ctx`` is the step context dict (App. C.5 field names). PFs may keep private
    per-episode counters in ``ctx`` under keys starting with ``_``; the runtime
    carries those across steps of one episode.
    """

    skill_id: ClassVar[str] = ""
    needs_teacher: ClassVar[bool] = False
    #: per-episode cap on how often this PF may fire (None = only the runtime limits)
    max_fires: ClassVar[int | None] = None
    #: FINAL-time handler (App. B.2): None = no handler, "code" = deterministic check,
    #: "llm" = asks the teacher and is skipped when no teacher is configured.
    handler_kind: ClassVar[str | None] = None
    #: the proposed action types ``should_activate`` can return True for; None = any type.
    #: A promise the dispatcher relies on: it never calls the PF on another type, which is
    #: most of the per-step cost of a large library (most PFs are about one action type).
    #: Evolution's exec check verifies the promise on its test contexts.
    watches: ClassVar[Iterable[str] | None] = None
    #: not a declaration: the library loader sets it from the PF's source
    #: (``hasp.pf.equivalence.only_modifies``): every value ``intervene`` can return is a
    #: MODIFY_ACTION. After another PF's rewrite was applied on a step, the dispatcher does not
    #: ask such a PF: at most one rewrite applies per step, so its own could only be discarded
    #: (and asking would still spend time, teacher calls and ctx counters).
    modify_only: bool = False
    #: the string class attributes that are user-facing text, which a seed skill's hasp.yaml
    #: may set under ``texts:`` (``hasp.pf.texts``); each class lists its own, bases' add up
    text_attrs: ClassVar[tuple[str, ...]] = ()

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        raise NotImplementedError

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        raise NotImplementedError

    def check_final(self, ctx: dict[str, Any], answer: str,
                    teacher: Teacher | None = None) -> str | None:
        """FINAL-time handler vote: a short reason to send the agent back to SEARCH, or None.

        Only called when ``handler_kind`` is set and handlers are enabled. Votes of all
        handlers on one FINAL are counted; the runtime overrides FINAL only when the
        count reaches the domain's vote threshold, and at most once per episode, so a
        single noisy handler can never loop the agent.
        """
        return None


def watched_types(value: object) -> frozenset[str] | None:
    """``watches`` as an upper-case frozenset (None = every action type).

    Raises ``ValueError`` for anything but None, a string or a collection of strings, so a
    typo such as ``watches = "FINAL"`` (one string, not a tuple) is read as ``{"FINAL"}``, not
    as five one-letter types.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"watches must be None or a collection of action-type strings, not {value!r}")
    return frozenset(x.strip().upper() for x in value)


# ----------------------------------------------------------------------------- shared PF shapes
class HintPF(ProgramFunction):
    """Fires on a condition (``should_activate``) and injects one fixed ``hint``."""

    text_attrs = ("hint", "why")
    hint: ClassVar[str] = ""
    #: the event's reason, shown in traces
    why: ClassVar[str] = ""

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=self.hint, reason=self.why)


class FindingsPF(ProgramFunction):
    """Scans the ``trigger`` action; when ``scan`` lists problems, injects them as one text.

    By default the text is ``label``, the findings and ``closing`` joined by spaces;
    ``render`` builds it otherwise, ``reason`` the event's reason. ``applies`` rules out
    contexts the scan is not meant for. A check that finds at most one problem defines
    ``check`` (the finding or None) instead of ``scan``; a skill made of several such checks
    lists them in ``checks`` (each ``(ctx, arg) -> finding or None``), found in that order.
    """

    text_attrs = ("label", "closing", "noun", "quiet")
    trigger: ClassVar[str] = "FINAL"
    label: ClassVar[str] = ""
    closing: ClassVar[str] = ""
    #: what one finding is, for the event's reason ("3 sign problem(s)")
    noun: ClassVar[str] = "finding(s)"
    #: the reason when asked to intervene with nothing found
    quiet: ClassVar[str] = "nothing found"

    #: named single checks, each ``(ctx, arg) -> finding or None`` (plain functions, not methods)
    checks: ClassVar[tuple[Callable[[dict[str, Any], str], Any], ...]] = ()

    def scan(self, ctx: dict[str, Any], arg: str) -> list[Any]:
        if self.checks:
            return [f for f in (c(ctx, arg) for c in self.checks) if f is not None]
        found = self.check(ctx, arg)
        return [] if found is None else [found]

    def check(self, ctx: dict[str, Any], arg: str) -> Any:
        """One finding or None: what a PF that finds at most one problem defines instead of ``scan``."""
        raise NotImplementedError

    def applies(self, ctx: dict[str, Any]) -> bool:
        return True

    def render(self, ctx: dict[str, Any], arg: str, found: list[Any]) -> str:
        return " ".join(part for part in (self.label, *found, self.closing) if part)

    def reason(self, ctx: dict[str, Any], arg: str, found: list[Any]) -> str:
        return f"{len(found)} {self.noun}"

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return action_type == self.trigger and self.applies(ctx) and bool(self.scan(ctx, arg))

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        found = self.scan(ctx, arg)
        if not found:
            return Intervention(type=InterventionType.NOOP, reason=self.quiet)
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=self.render(ctx, arg, found),
                            reason=self.reason(ctx, arg, found))


class FinalCheckPF(ProgramFunction):
    """One check of a proposed answer that serves both the FINAL hook and the handler vote.

    ``problem`` returns what is wrong with an answer (None when nothing is); the PF fires on
    FINAL when there is a problem, and ``check_final`` votes with ``objection(problem)``.
    When it fires it injects ``warning(ctx, arg, problem)``, recorded with ``reason(problem)``.
    """

    watches: ClassVar[tuple[str, ...]] = ("FINAL",)
    max_fires: ClassVar[int | None] = 1
    handler_kind: ClassVar[str | None] = "code"

    def problem(self, ctx: dict[str, Any], answer: str) -> Any:
        raise NotImplementedError

    def objection(self, problem: Any) -> str:
        return str(problem)

    def warning(self, ctx: dict[str, Any], arg: str, problem: Any) -> str:
        raise NotImplementedError

    def reason(self, problem: Any) -> str:
        return self.objection(problem)

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return action_type == "FINAL" and self.problem(ctx, arg) is not None

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        found = self.problem(ctx, arg)
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=self.warning(ctx, arg, found),
                            reason=self.reason(found))

    def check_final(self, ctx: dict[str, Any], answer: str, teacher: Teacher | None = None) -> str | None:
        found = self.problem(ctx, answer)
        return None if found is None else self.objection(found)


class TeacherVotePF(ProgramFunction):
    """Fires on a FINAL when ``fires``; its handler vote asks the teacher to confirm ("llm" handler).

    ``fires(ctx, answer)`` decides both; the vote asks the teacher ``teacher_question`` and
    objects only when the teacher does, so a cheap heuristic never overrides an answer alone.
    The question is laid out once here: the question, ``evidence`` (if any), the proposed
    answer, then ``ask``.
    """

    watches: ClassVar[tuple[str, ...]] = ("FINAL",)
    max_fires: ClassVar[int | None] = 1
    handler_kind: ClassVar[str | None] = "llm"

    def fires(self, ctx: dict[str, Any], answer: str) -> bool:
        raise NotImplementedError

    text_attrs = ("ask",)
    #: what the teacher is asked to confirm about the answer
    ask: ClassVar[str] = ""

    def evidence(self, ctx: dict[str, Any], answer: str) -> str:
        """What the teacher reads before the answer, ending in a newline ("" for nothing)."""
        return ""

    def teacher_question(self, ctx: dict[str, Any], answer: str) -> str:
        return (f"Question: {ctx.get('question', '')}\n{self.evidence(ctx, answer)}"
                f"Proposed answer: {answer[:200]}\n{self.ask}")

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return action_type == "FINAL" and bool(self.fires(ctx, arg))

    def check_final(self, ctx: dict[str, Any], answer: str, teacher: Teacher | None = None) -> str | None:
        if teacher is None or not self.fires(ctx, answer):
            return None
        return teacher_objection(teacher, self.teacher_question(ctx, answer), who=self.skill_id)


class FinalHintPF(TeacherVotePF, HintPF):
    """A ``TeacherVotePF`` whose intervention is one fixed ``hint``."""


class AuditOnlyPF(ProgramFunction):
    """Fires on a FINAL when ``fires``, and only records that it did: a NOOP with reason ``why``.

    A prompt-equivalent skill changes behaviour through its SKILL.md text; its PF marks the
    steps that text was meant for, so the audit trail shows where the reminder applied.
    """

    max_fires: ClassVar[int | None] = 1
    text_attrs = ("why",)
    why: ClassVar[str] = ""

    def fires(self, ctx: dict[str, Any], arg: str) -> bool:
        raise NotImplementedError

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        return action_type == "FINAL" and bool(self.fires(ctx, arg))

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        return Intervention(type=InterventionType.NOOP, reason=self.why)
