"""The ProgramFunction interface (paper App. B.1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from hasp.pf.intervention import Intervention


class Teacher(Protocol):
    """What a teacher-assisted PF may call. ``hasp.llm.client.LLMClient`` satisfies it."""

    def generate(self, messages: list[dict[str, str]], max_tokens: int = 256,
                 temperature: float = 0.0) -> str: ...


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
