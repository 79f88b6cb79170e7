"""Applies PFs to one proposed action: the intervention operator Γ (paper §3.1).

One ``Dispatcher`` lives for one episode. It enforces the runtime limits of App.
B.1 (at most ``max_modify_fires`` MODIFY_ACTION fires per PF, the per-skill caps
``ProgramFunction.max_fires``) and isolates faults: a PF that raises is disabled
for the rest of the episode and the error is recorded, never propagated. A PF that
raises because its *teacher* call failed is not at fault: it is re-run once without the
teacher (its deterministic path, App. G "PF only") and stays enabled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hasp.pf.base import ProgramFunction, Teacher, watched_types
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.teacher import teacher_errors

log = logging.getLogger(__name__)
_TYPE_NAME = {t: t.value for t in InterventionType}  # a dict read, not the Enum .value descriptor, per fire


@dataclass(slots=True)
class Fired:
    """One PF that activated on this step."""

    skill_id: str
    type: str
    reason: str = ""
    applied: bool = True  # False when a MODIFY_ACTION was suppressed (limit / already modified)
    context_text: str = ""


@dataclass(slots=True)
class DispatchResult:
    action_type: str
    arg: str
    contexts: list[str] = field(default_factory=list)
    fired: list[Fired] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    teacher_fallbacks: list[str] = field(default_factory=list)  # PFs re-run without a failed teacher
    elapsed_s: float = 0.0

    @property
    def modified(self) -> bool:
        return any(f.type == InterventionType.MODIFY_ACTION.value and f.applied for f in self.fired)

    @property
    def mode(self) -> str:
        """κ_t's intervention mode: the strongest applied intervention on this step."""
        if self.modified:
            return InterventionType.MODIFY_ACTION.value
        if self.contexts:
            return InterventionType.INJECT_CONTEXT.value
        return InterventionType.NOOP.value if self.fired else "none"


@dataclass(frozen=True)
class DispatchPlan:
    """The per-PF facts dispatch reads on every step — id, cap, watched types, the bound
    ``should_activate`` — gathered once per PF set. A harness builds one per selected set and
    reuses it for every episode that selects the same PFs; a ``Dispatcher`` keeps only the
    per-episode counters."""

    pfs: tuple[ProgramFunction, ...]
    entries: tuple[tuple[ProgramFunction, str, int | None, frozenset[str] | None, Any], ...]

    @classmethod
    def of(cls, pfs: Sequence[ProgramFunction], *, skip_unwatched: bool = True) -> "DispatchPlan":
        """``skip_unwatched=False`` asks every PF on every action type, ignoring ``watches``
        (to check a library's declarations against its behaviour)."""
        pfs = tuple(pfs)
        return cls(pfs, tuple((pf, pf.skill_id, pf.max_fires, _watches(pf) if skip_unwatched else None,
                               pf.should_activate) for pf in pfs))


class Dispatcher:
    def __init__(self, pfs: Sequence[ProgramFunction] | DispatchPlan, *, teacher: Teacher | None = None,
                 max_modify_fires: int = 2, skip_unwatched: bool = True) -> None:
        plan = pfs if isinstance(pfs, DispatchPlan) else DispatchPlan.of(pfs, skip_unwatched=skip_unwatched)
        self.pfs = list(plan.pfs)
        self._plan = plan.entries
        self.teacher = teacher
        self.max_modify_fires = max_modify_fires
        # plain dicts: a Counter's __init__ and __missing__ are Python calls on this per-episode path
        self.fire_counts: dict[str, int] = {}
        self.modify_counts: dict[str, int] = {}
        self.disabled: dict[str, str] = {}

    def _disable(self, pf: ProgramFunction, where: str, exc: BaseException, res: DispatchResult) -> None:
        msg = f"{pf.skill_id}.{where} raised {type(exc).__name__}: {exc}"
        self.disabled[pf.skill_id] = msg
        res.errors.append(msg)
        log.warning("PF disabled for this episode: %s", msg)

    def dispatch(self, ctx: dict[str, Any], action_type: str, arg: str) -> DispatchResult:
        """Run every active PF on (ctx, action); return the final action and injected context.

        PFs run in the given (priority) order and each sees the action as modified by
        earlier ones; at most one MODIFY_ACTION is applied per step.
        """
        t0 = time.perf_counter()
        res = DispatchResult(action_type=action_type, arg=arg)
        disabled, fires = self.disabled, self.fire_counts
        for pf, sid, cap, watches, should_activate in self._plan:
            if watches is not None and res.action_type not in watches:
                continue
            if sid in disabled or (cap is not None and fires.get(sid, 0) >= cap):
                continue
            try:
                active = bool(should_activate(ctx, res.action_type, res.arg))
            except Exception as e:  # noqa: BLE001 - fault isolation is the point
                self._disable(pf, "should_activate", e, res)
                continue
            if not active:
                continue
            iv = self._intervene(pf, ctx, res)
            if iv is None:
                continue
            iv.skill_id = iv.skill_id or sid
            fired = Fired(skill_id=sid, type=_TYPE_NAME[iv.type], reason=iv.reason)
            if iv.type is InterventionType.MODIFY_ACTION:
                if res.modified or self.modify_counts.get(sid, 0) >= self.max_modify_fires:
                    fired.applied = False
                else:
                    self.modify_counts[sid] = self.modify_counts.get(sid, 0) + 1
                    res.action_type = (iv.new_action_type or res.action_type).upper()
                    res.arg = iv.new_action_arg if iv.new_action_arg is not None else res.arg
                    if iv.context_text:
                        res.contexts.append(iv.context_text)
                        fired.context_text = iv.context_text
            elif iv.type is InterventionType.INJECT_CONTEXT and iv.context_text:
                res.contexts.append(iv.context_text)
                fired.context_text = iv.context_text
            if fired.applied:
                fires[sid] = fires.get(sid, 0) + 1
            res.fired.append(fired)
        res.elapsed_s = time.perf_counter() - t0
        return res

    def _intervene(self, pf: ProgramFunction, ctx: dict[str, Any], res: DispatchResult) -> Intervention | None:
        """``pf.intervene`` with fault isolation; a teacher failure falls back to ``teacher=None``."""
        teacher = self.teacher if getattr(pf, "needs_teacher", False) else None
        before = teacher_errors(teacher) if teacher is not None else 0
        try:
            return _checked(pf.intervene(ctx, res.action_type, res.arg, teacher))
        except Exception as e:  # noqa: BLE001 - fault isolation is the point
            if teacher is None or teacher_errors(teacher) == before:
                self._disable(pf, "intervene", e, res)
                return None
        res.teacher_fallbacks.append(pf.skill_id)
        log.info("teacher failed inside %s; using its deterministic path", pf.skill_id)
        try:
            return _checked(pf.intervene(ctx, res.action_type, res.arg, None))
        except Exception as e:  # noqa: BLE001
            self._disable(pf, "intervene", e, res)
            return None


def _watches(pf: ProgramFunction) -> frozenset[str] | None:
    """The PF's watched action types; an unusable declaration means "every type" (logged)."""
    try:
        return watched_types(getattr(pf, "watches", None))
    except ValueError as e:
        log.warning("%s: %s; it will be asked on every action type", pf.skill_id, e)
        return None


def _checked(iv: object) -> Intervention:
    if not isinstance(iv, Intervention):
        raise TypeError(f"intervene returned {type(iv).__name__}, not Intervention")
    return iv
