"""Applies PFs to one proposed action: the intervention operator Γ (paper §3.1).

One ``Dispatcher`` lives for one episode. It enforces the runtime limits of App.
B.1 (at most ``max_modify_fires`` MODIFY_ACTION fires per PF, the per-skill caps
``ProgramFunction.max_fires``) and isolates faults: a PF that raises is disabled
for the rest of the episode and the error is recorded, never propagated. A PF that
raises because its *teacher* call failed is not at fault: it is re-run once without the
teacher (its deterministic path, App. G "PF only") and stays enabled.

Every value a PF hands back is checked here, at the boundary, before it can reach the
loop: a rewrite must name an action type of the domain (``action_types``) with a string
argument, else the PF is disabled for the episode (an unknown type would otherwise
abort the rollout); an argument or injected text over its cap (``sandbox`` params) is
cut and the cut recorded on the step; a PF that reports its CPU time (a sandboxed one)
is disabled once it has spent its per-episode budget. A sandboxed PF carries the caps and
budget of the ``sandbox`` params it was loaded with (``boundary_limits``), so the values a
user sets hold wherever the dispatcher is built; other PFs get the schema defaults. A
value passed to the dispatcher itself holds for every PF.

Every text a PF hands back — injected context, a rewritten argument, the fire's reason —
goes on only through ``shown_text`` (its cap; no control or bidi characters; no line that
imitates the agent's own turns), so what a model reads of a PF is filtered in one place.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

from hasp.pf.base import ProgramFunction, Teacher, watched_types
from hasp.config import AgentParams, SandboxParams, default_of
from hasp.pf.intervention import MAX_REASON_CHARS, Intervention, InterventionType, error_text, shown_text
from hasp.pf.teacher import teacher_errors

log = logging.getLogger(__name__)
_TYPE_NAME = {t: t.value for t in InterventionType}  # a dict read, not the Enum .value descriptor, per fire
_MODIFY, _INJECT = InterventionType.MODIFY_ACTION, InterventionType.INJECT_CONTEXT
#: the action vocabulary of the PF interface (a domain may pass a smaller set)
ACTION_TYPES: frozenset[str] = frozenset({"SEARCH", "READ", "FINAL"})
#: (argument cap, injected-text cap, CPU budget per episode) of a PF that brings none
DEFAULT_LIMITS: tuple[int, int, float] = (default_of(SandboxParams, "max_action_arg_chars"),
                                          default_of(SandboxParams, "max_context_chars"),
                                          default_of(SandboxParams, "pf_cpu_budget_s"))


@dataclass(slots=True)
class Fired:
    """One PF that activated on this step."""

    skill_id: str
    type: str
    reason: str = ""
    applied: bool = True  # False when a MODIFY_ACTION was suppressed (limit / already modified)
    context_text: str = ""
    source: str = ""  # the vocabulary source of a declared PF's rewrite ("" for any other PF)


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


class _Entry(NamedTuple):
    """What dispatch reads of one PF on every step, gathered once."""

    pos: int  # priority position in the plan
    pf: ProgramFunction
    skill_id: str
    cap: int | None
    should_activate: Any
    intervene: Any
    needs_teacher: bool
    modify_only: bool  # skipped once a rewrite was applied on the step (``ProgramFunction.modify_only``)
    cpu: Any  # ``last_call_cpu_s`` of a PF that reports its CPU time (a sandboxed one), else None
    limits: tuple[int, int, float] | None  # the PF's own (arg cap, text cap, CPU budget), else None


_pos = attrgetter("pos")


@dataclass(frozen=True)
class DispatchPlan:
    """The per-PF facts dispatch reads on every step — id, cap, watched types, the bound
    methods — gathered once per PF set, with the PFs that watch each action type listed
    apart (in priority order), so a step walks only those. A harness builds one per selected
    set and reuses it for every episode that selects the same PFs; a ``Dispatcher`` keeps
    only the per-episode counters."""

    pfs: tuple[ProgramFunction, ...]
    entries: tuple[_Entry, ...]
    watches: tuple[frozenset[str] | None, ...]  # per entry; None = every action type
    _by_type: dict[str, tuple[_Entry, ...]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, pfs: Sequence[ProgramFunction], *, skip_unwatched: bool = True) -> "DispatchPlan":
        """``skip_unwatched=False`` asks every PF on every action type, ignoring ``watches`` and
        ``modify_only`` (to check a library's declarations and the analysis against behaviour)."""
        pfs = tuple(pfs)
        entries = tuple(_Entry(i, pf, pf.skill_id, pf.max_fires, pf.should_activate, pf.intervene,
                               bool(getattr(pf, "needs_teacher", False)),
                               skip_unwatched and getattr(pf, "modify_only", False) is True,
                               getattr(pf, "last_call_cpu_s", None), getattr(pf, "boundary_limits", None))
                        for i, pf in enumerate(pfs))
        return cls(pfs, entries, tuple(_watches(pf) if skip_unwatched else None for pf in pfs))

    def for_type(self, action_type: str) -> tuple[_Entry, ...]:
        """The entries to ask when the action has this type (built on first use per type)."""
        hit = self._by_type.get(action_type)
        if hit is None:
            hit = tuple(e for e, w in zip(self.entries, self.watches) if w is None or action_type in w)
            if len(self._by_type) < 64:  # action types come from model output: bound the memo
                self._by_type[action_type] = hit
        return hit

    def resume(self, action_type: str, after: int) -> tuple[tuple[_Entry, ...], int]:
        """Where a walk continues when the PF at position ``after`` changed the action's type:
        the entries of the new type and the index of the first one after that PF."""
        seq = self.for_type(action_type)
        return seq, bisect_right(seq, after, key=_pos)


class Dispatcher:
    def __init__(self, pfs: Sequence[ProgramFunction] | DispatchPlan, *, teacher: Teacher | None = None,
                 max_modify_fires: int = default_of(AgentParams, "max_modify_fires"), skip_unwatched: bool = True,
                 action_types: frozenset[str] | None = None,
                 max_arg_chars: int | None = None, max_context_chars: int | None = None,
                 cpu_budget_s: float | None = None) -> None:
        plan = pfs if isinstance(pfs, DispatchPlan) else DispatchPlan.of(pfs, skip_unwatched=skip_unwatched)
        self.pfs = list(plan.pfs)
        self._plan = plan
        self.teacher = teacher
        self.max_modify_fires = max_modify_fires
        # plain dicts: a Counter's __init__ and __missing__ are Python calls on this per-episode path
        self.fire_counts: dict[str, int] = {}
        self.modify_counts: dict[str, int] = {}
        self.disabled: dict[str, str] = {}
        self.action_types = frozenset(a.upper() for a in action_types) if action_types else ACTION_TYPES
        # (arg cap, text cap, CPU budget): set here = for every PF; None = the PF's own, else the default
        self._forced = (max_arg_chars, max_context_chars, cpu_budget_s)
        self.cpu_spent: dict[str, float] = {}

    def _charge(self, e: _Entry, res: DispatchResult) -> bool:
        """Add the PF's last call to its episode CPU; False (and disabled) once over budget."""
        spent = self.cpu_spent.get(e.skill_id, 0.0) + e.cpu()
        self.cpu_spent[e.skill_id] = spent
        budget = self._limits(e)[2]
        if spent <= budget:
            return True
        msg = (f"{e.skill_id} used {spent:.2f} s of CPU in this episode (budget {budget:g} s); "
               "disabled for the episode")
        self.disabled[e.skill_id] = msg
        res.errors.append(msg)
        log.warning("PF disabled for this episode: %s", msg)
        return False

    def _limits(self, e: _Entry) -> tuple[int, int, float]:
        own = e.limits if e.limits is not None else DEFAULT_LIMITS
        return tuple(f if f is not None else o for f, o in zip(self._forced, own))  # type: ignore[return-value]

    def _refuse(self, e: _Entry, why: str, res: DispatchResult) -> None:
        msg = f"{e.skill_id}.intervene returned {why}; disabled for the episode"
        self.disabled[e.skill_id] = msg
        res.errors.append(msg)
        log.warning("PF disabled for this episode: %s", msg)

    def _cut(self, e: _Entry, what: str, text: str, cap: int, res: DispatchResult) -> str:
        res.errors.append(f"{e.skill_id}: {what} cut to {cap} characters (returned {len(text)}+)")
        return text[:cap]

    def _disable(self, pf: ProgramFunction, where: str, exc: BaseException, res: DispatchResult) -> None:
        # the message is the PF's text too: it reaches failure summaries a model reads
        msg = f"{pf.skill_id}.{where} raised {type(exc).__name__}: {error_text(exc)}"
        self.disabled[pf.skill_id] = msg
        res.errors.append(msg)
        log.warning("PF disabled for this episode: %s", msg)

    def dispatch(self, ctx: dict[str, Any], action_type: str, arg: str) -> DispatchResult:
        """Run every active PF on (ctx, action); return the final action and injected context.

        PFs run in the given (priority) order and each sees the action as modified by
        earlier ones; at most one MODIFY_ACTION is applied per step. Only PFs whose
        ``watches`` include the current action type are asked; when a rewrite changes the
        type, the walk goes on with the later PFs that watch the new type, minus those that
        can only rewrite (``modify_only``): their rewrite could no longer be applied.
        """
        t0 = time.perf_counter()
        res = DispatchResult(action_type=action_type, arg=arg)
        disabled, fires, teacher = self.disabled, self.fire_counts, self.teacher
        seq = self._plan.for_type(action_type)
        k, modified = 0, False
        while k < len(seq):
            e = seq[k]
            k += 1
            sid, cap = e.skill_id, e.cap
            if sid in disabled or (cap is not None and fires.get(sid, 0) >= cap) or (modified and e.modify_only):
                continue
            try:
                active = e.should_activate(ctx, res.action_type, res.arg)
            except Exception as exc:  # noqa: BLE001 - fault isolation is the point
                self._disable(e.pf, "should_activate", exc, res)
                continue
            if e.cpu is not None and not self._charge(e, res):
                continue
            if not active:
                continue
            if teacher is not None and e.needs_teacher:
                iv = self._intervene(e, ctx, res)
                if iv is None:
                    continue
            else:  # the common path, inline: a fire's cost is mostly Python frames on cold caches
                try:
                    iv = e.intervene(ctx, res.action_type, res.arg, None)
                    if iv.__class__ is not Intervention:
                        _checked(iv)
                except Exception as exc:  # noqa: BLE001
                    self._disable(e.pf, "intervene", exc, res)
                    continue
            if e.cpu is not None and not self._charge(e, res):
                continue
            kind, text = iv.type, iv.context_text
            if kind.__class__ is not InterventionType:
                self._refuse(e, f"an intervention of type {kind!r}", res)
                continue
            arg_cap, text_cap, _ = self._limits(e)
            if text:
                if len(text) > text_cap:
                    text = self._cut(e, "injected text", text, text_cap, res)
                text = shown_text(text, text_cap)
            applied, shown = True, ""
            if kind is _MODIFY:
                if modified or self.modify_counts.get(sid, 0) >= self.max_modify_fires:
                    applied = False
                else:
                    new_type = (iv.new_action_type or res.action_type)
                    new_type = new_type.upper() if isinstance(new_type, str) else new_type
                    new_arg = iv.new_action_arg
                    if new_type not in self.action_types:
                        self._refuse(e, f"a rewrite to action type {str(new_type)[:40]!r} "
                                        f"(legal: {', '.join(sorted(self.action_types))})", res)
                        continue
                    if new_arg is not None and not isinstance(new_arg, str):
                        self._refuse(e, f"a {type(new_arg).__name__} action argument", res)
                        continue
                    if new_arg is not None:
                        if len(new_arg) > arg_cap:
                            new_arg = self._cut(e, "action argument", new_arg, arg_cap, res)
                        new_arg = shown_text(new_arg, arg_cap, one_line=True)
                    modified = True
                    self.modify_counts[sid] = self.modify_counts.get(sid, 0) + 1
                    res.arg = new_arg if new_arg is not None else res.arg
                    if text:
                        res.contexts.append(text)
                        shown = text
                    if new_type != res.action_type:  # go on with the later PFs watching the new type
                        res.action_type = new_type
                        seq, k = self._plan.resume(new_type, e.pos)
            elif kind is _INJECT and text:
                res.contexts.append(text)
                shown = text
            if applied:
                fires[sid] = fires.get(sid, 0) + 1
            reason = shown_text(iv.reason, MAX_REASON_CHARS, one_line=True) if iv.reason else ""
            source = getattr(iv, "source", "")
            source = source if source.__class__ is str else ""
            res.fired.append(Fired(sid, _TYPE_NAME[kind], reason, applied, shown, source))
        res.elapsed_s = time.perf_counter() - t0
        return res

    def _intervene(self, e: _Entry, ctx: dict[str, Any], res: DispatchResult) -> Intervention | None:
        """``pf.intervene`` with fault isolation; a teacher failure falls back to ``teacher=None``."""
        teacher = self.teacher if e.needs_teacher else None
        before = teacher_errors(teacher) if teacher is not None else 0
        try:
            return _checked(e.intervene(ctx, res.action_type, res.arg, teacher))
        except Exception as exc:  # noqa: BLE001 - fault isolation is the point
            if teacher is None or teacher_errors(teacher) == before:
                self._disable(e.pf, "intervene", exc, res)
                return None
        res.teacher_fallbacks.append(e.skill_id)
        log.info("teacher failed inside %s; using its deterministic path", e.skill_id)
        try:
            return _checked(e.intervene(ctx, res.action_type, res.arg, None))
        except Exception as exc:  # noqa: BLE001
            self._disable(e.pf, "intervene", exc, res)
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
