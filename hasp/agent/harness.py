"""The inference-time harness of the agent: from a Variant + HarnessParams to one episode.

Three levels, each built once at its own scope so the per-step path stays cheap:

* ``Harness`` — once per (library, variant, params): which surfaces exist (the variant's, unless
  ``harness.skills_enabled`` is off), keyword patterns, the PF selector, compiled phase rules (an invalid SKILL.md phase
  condition fails here, loudly).
* ``EpisodeHarness`` — once per question: the counting teacher, the difficulty gate, the PF
  selection, the system-prompt skills, the episode's phase rules, dispatcher and handler voter.
* per step — ``decide`` (dispatch, then FINAL-time handler votes) and ``reminders`` (phase
  instructions for the next observation).

The loop (``hasp.agent.loop``) calls the episode harness; this module never calls the loop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hasp.agent.context import EpisodeState
from hasp.agent.postprocess import postprocess_final
from hasp.records import Action, AuditEvent, HarnessRecord, Trajectory
from hasp.agent.variants import Variant
from hasp.config import AgentParams, HarnessParams, default_of
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.conditions import ConditionEnv
from hasp.pf.difficulty import assess_difficulty
from hasp.pf.dispatcher import DispatchPlan, Dispatcher, Fired
from hasp.pf.handlers import HandlerOutcome, HandlerVoter
from hasp.pf.library import Skill, SkillLibrary
from hasp.pf.phases import PhaseRule, PhaseRules
from hasp.pf.question import QuestionFeatures
from hasp.pf.selection import PFSelector, SkillSelector, render_skill_lines
from hasp.pf.teacher import CountingTeacher

log = logging.getLogger(__name__)

_EVIDENCE_CHARS = 800


@dataclass(frozen=True)
class Surfaces:
    """Which harness surfaces are on: the variant's surfaces, when the library exists and
    ``harness.skills_enabled`` (the one master switch) is on."""

    pfs: bool
    handlers: bool
    system_skills: bool
    phases: bool
    teacher: bool
    postprocess: bool

    @classmethod
    def of(cls, v: Variant, hp: HarnessParams, has_library: bool) -> "Surfaces":
        sk = hp.skills_enabled and has_library
        pfs = sk and v.use_pfs
        return cls(pfs=pfs, handlers=pfs and hp.enable_skill_handlers, system_skills=sk and v.skills_in_prompt,
                   phases=sk and v.phase_instructions, teacher=v.use_teacher, postprocess=v.teacher_postprocess)

    @property
    def any_skill(self) -> bool:
        return self.pfs or self.system_skills or self.phases


#: HarnessParams keys that list PF skill ids for the selector
PF_ID_KEYS = ("mandatory_pfs", "light_pfs", "decomposition_pfs", "entity_pfs")


def _fired_entry(f: Fired) -> dict[str, Any]:
    """κ_t's record of one fire; ``source`` only when a declared PF's rewrite names one, so the
    records of every other PF keep their shape."""
    entry = {"skill_id": f.skill_id, "type": f.type, "reason": f.reason, "applied": f.applied}
    if f.source:
        entry["source"] = f.source
    return entry


def check_pf_ids(hp: HarnessParams, library: SkillLibrary) -> list[str]:
    """Ids the ``harness`` lists name that ``library`` does not have: one warning per (library, list,
    ids) and process, never an error. The lists only boost selection (``hasp.pf.selection``), and a
    params file written by ``hasp params`` names the seed ids explicitly, so a user's own library
    lacks them by design; a typo still shows up once, in the log. Returns the warnings."""
    known = library.known_ids()
    out = []
    for key in PF_ID_KEYS:
        unknown = tuple(x for x in getattr(hp, key) if x not in known)
        if not unknown or (str(library.root), key, unknown) in _WARNED:
            continue
        _WARNED.add((str(library.root), key, unknown))
        msg = (f"harness.{key}: skill id(s) {', '.join(unknown)} are not in the {library.domain} library at "
               f"{library.root}; the list boosts the others only")
        if key in hp.model_fields_set:
            log.warning(msg)
        out.append(msg)
    return out


#: (library root, list, ids) already warned about in this process
_WARNED: set[tuple[str, str, tuple[str, ...]]] = set()


class Harness:
    """Everything about a (library, variant, params) that does not depend on the question."""

    def __init__(self, library: SkillLibrary | None, variant: Variant, params: HarnessParams | None = None, *,
                 max_modify_fires: int = default_of(AgentParams, "max_modify_fires"),
                 prompt_skills: str = "ranked", action_types: tuple[str, ...] | None = None) -> None:
        """``prompt_skills``: which skills the system prompt lists — ``ranked`` (the best
        ``max_skills_in_prompt`` by mode and keywords), or ``all`` in library order (single-step
        domains, whose skills are checks that apply to every answer). ``action_types``: the actions a
        PF may rewrite to (a task's own tools plus FINAL; the search agent's when None)."""
        self.variant, self.hp = variant, params or HarnessParams()
        self.action_types = frozenset(action_types) if action_types else None
        self.max_modify_fires, self.prompt_skills = max_modify_fires, prompt_skills
        self.surfaces = Surfaces.of(variant, self.hp, library is not None)
        if library is not None:
            check_pf_ids(self.hp, library)
        skills: list[Skill] = list(library.skills) if library is not None else []
        if self.hp.only_skills:  # one skill (or a few) measured alone against the same questions
            skills = [s for s in skills if s.skill_id in set(self.hp.only_skills)]
        # prompt-only skills (no pf.py) add text only when enabled
        self.text_skills = [s for s in skills if s.pf is not None or self.hp.enable_prompt_only_skills]
        self.prompt_only_ids = [s.skill_id for s in self.text_skills if s.pf is None]
        self.pf_by_id: dict[str, ProgramFunction] = {s.skill_id: s.pf for s in skills if s.pf is not None}
        self.skill_selector = SkillSelector(self.text_skills)
        hp = self.hp
        self.pf_selector = PFSelector(skills, mandatory=hp.mandatory_pfs, light=hp.light_pfs,
                                      decomposition=hp.decomposition_pfs, entity=hp.entity_pfs,
                                      top_k=hp.pf_top_k, mode=hp.pf_selection, max_tokens=hp.teacher_max_tokens)
        domain = library.domain if library is not None else "search"
        self.phase_rules = PhaseRules.compile(self.text_skills, domain) if self.surfaces.phases else PhaseRules([])
        self._wirings: dict[tuple[str, ...], _Wiring] = {}
        self._no_rules = PhaseRules([])

    def _wiring(self, ids: tuple[str, ...]) -> _Wiring:
        """Dispatch plan, FINAL handlers and phase rules of one selected PF set, built on first use.

        Selection yields few distinct sets (all, one per heuristic branch, the teacher's
        picks), so episodes after the first skip re-reading 26 PFs' declarations."""
        hit = self._wirings.get(ids)
        if hit is None:
            pfs = [self.pf_by_id[i] for i in ids]
            hit = _Wiring(DispatchPlan.of(pfs), HandlerVoter.handlers_of(pfs),
                          self.phase_rules.restricted([*ids, *self.prompt_only_ids]))
            if len(self._wirings) < 1024:
                self._wirings[ids] = hit
        return hit

    def episode(self, question: str, teacher: Teacher | None = None) -> "EpisodeHarness":
        """Plan one question: gate, select, and wire the per-step collaborators."""
        t0 = time.perf_counter()
        s, hp = self.surfaces, self.hp
        tw = CountingTeacher(teacher) if (s.teacher and teacher is not None) else None
        q = QuestionFeatures.of(question)
        rec = HarnessRecord(skills_active=s.any_skill)
        if s.any_skill and hp.enable_difficulty_gating:
            d = assess_difficulty(question, q, tw, max_tokens=8)
            rec.difficulty, rec.difficulty_source, rec.difficulty_note = d.score, d.source, d.note
            rec.skills_active = d.score >= hp.difficulty_threshold
        on = rec.skills_active
        wiring = self._wiring(())
        if on and s.pfs:
            sel = self.pf_selector.select(question, q, tw)
            wiring = self._wiring(sel.ids)
            rec.selected_pfs, rec.pf_selection_source = list(sel.ids), sel.source
            rec.pf_selection_branch, rec.pf_selection_note = sel.branch, sel.note
        system_text = ""
        if on and s.system_skills:
            chosen = (self.text_skills if self.prompt_skills == "all"
                      else self.skill_selector.select(question, q, hp.max_skills_in_prompt))
            rec.prompt_skills, system_text = [x.skill_id for x in chosen], render_skill_lines(chosen)
        rules = self._no_rules
        if on and s.phases:
            rules = (wiring.rules if s.pfs else
                     self.phase_rules.restricted([x.skill_id for x in self.text_skills]))
        dispatcher = Dispatcher(wiring.plan, teacher=tw, max_modify_fires=self.max_modify_fires,
                                action_types=self.action_types)
        voter = (HandlerVoter(wiring.handlers, threshold=hp.handler_vote_threshold, max_overrides=hp.max_final_overrides,
                              teacher=tw, disabled=dispatcher.disabled) if (on and s.handlers) else None)
        rec.selection_s = time.perf_counter() - t0
        return EpisodeHarness(dispatcher=dispatcher, voter=voter, rules=rules, question=q, record=rec,
                              system_text=system_text, teacher=tw, postprocess=s.postprocess and tw is not None,
                              timeout_s=hp.timeout_seconds, max_phase_instructions=hp.max_phase_instructions,
                              pre_final_step_threshold=hp.pre_final_step_threshold,
                              teacher_max_tokens=hp.teacher_max_tokens, t_start=t0)


class _Wiring(NamedTuple):
    plan: DispatchPlan
    handlers: list[ProgramFunction]
    rules: PhaseRules  # phase rules of the selected PFs plus the prompt-only skills


@dataclass
class EpisodeHarness:
    """The per-question collaborators the loop calls; built by ``Harness.episode`` (or ``plain``)."""

    dispatcher: Dispatcher
    voter: HandlerVoter | None = None
    rules: PhaseRules = field(default_factory=lambda: PhaseRules([]))
    question: QuestionFeatures | None = None
    record: HarnessRecord | None = None
    system_text: str = ""
    teacher: CountingTeacher | None = None
    postprocess: bool = False
    timeout_s: float | None = None
    max_phase_instructions: int = 0
    pre_final_step_threshold: int = default_of(HarnessParams, "pre_final_step_threshold")
    teacher_max_tokens: int = default_of(HarnessParams, "teacher_max_tokens")
    t_start: float = field(default_factory=time.perf_counter)

    @classmethod
    def plain(cls, pfs: list[ProgramFunction], *, teacher: Teacher | None = None, skills_text: str = "",
              max_modify_fires: int = default_of(AgentParams, "max_modify_fires")) -> "EpisodeHarness":
        """No selection layers: the given PFs, the given prompt text (``run_episode``'s old contract)."""
        tw = CountingTeacher(teacher) if teacher is not None else None
        return cls(dispatcher=Dispatcher(pfs, teacher=tw, max_modify_fires=max_modify_fires),
                   system_text=skills_text, teacher=tw)

    def out_of_time(self) -> bool:
        return self.timeout_s is not None and time.perf_counter() - self.t_start > self.timeout_s

    def decide(self, ctx: dict[str, Any], state: EpisodeState, action_type: str, arg: str, *,
               snapshot: dict[str, Any] | None = None) -> AuditEvent:
        """Dispatch the proposed action; on a FINAL, let the handlers vote. Returns e_t without Δ_t;
        its s_t is ``snapshot`` (the environment's view of the state), else ``state.snapshot()``."""
        d = self.dispatcher.dispatch(ctx, action_type, arg)
        final = Action(d.action_type, d.arg)
        contexts = list(d.contexts)
        handlers: dict[str, Any] = {}
        if self.voter is not None and final.type == "FINAL":
            out: HandlerOutcome = self.voter.vote(ctx, final.arg, state.queries)
            handlers = out.to_dict()
            if self.record is not None:
                self.record.handler_votes += len(out.votes)
            if out.overridden:
                final = Action("SEARCH", out.query)
                contexts.append("[CHECK] The answer was not accepted yet: "
                                + "; ".join(v["reason"] for v in out.votes[:3]))
                if self.record is not None:
                    self.record.handler_overrides += 1
        if self.record is not None:
            self.record.teacher_fallbacks += len(d.teacher_fallbacks)
        return AuditEvent(state=state.snapshot() if snapshot is None else snapshot, a_orig=Action(action_type, arg), a_final=final,
                          context=contexts, mode=d.mode, errors=list(d.errors) + handlers.get("errors", []),
                          fired=[_fired_entry(f) for f in d.fired],
                          dispatch_s=d.elapsed_s, handlers=handlers)

    def reminders(self, state: EpisodeState, audit: AuditEvent) -> list[PhaseRule]:
        """Phase instructions for the observation of this step (after the action was executed)."""
        if not len(self.rules) or self.question is None:
            return []
        phases = []
        if audit.a_final.type == "SEARCH":
            phases.append("post_search")
        elif audit.a_final.type == "READ":
            phases.append("post_read")
        if state.step_count + 1 >= self.pre_final_step_threshold or audit.a_orig.type == "FINAL":
            phases.append("pre_final")
        env = ConditionEnv(state, self.question, self.pre_final_step_threshold)
        chosen = self.rules.select(phases, env, self.max_phase_instructions)
        audit.phases = [r.label for r in chosen]
        return chosen

    def finish(self, traj: Trajectory, state: EpisodeState) -> None:
        """Teacher-only post-processing, then teacher accounting and the harness record."""
        if self.postprocess and self.teacher is not None:
            evidence = ("\n".join(state.read_contents) or state.last_search_results_text)[:_EVIDENCE_CHARS]
            res = postprocess_final(self.teacher, traj.question, traj.prediction, evidence,
                                    max_tokens=self.teacher_max_tokens)
            if self.record is not None:
                self.record.postprocess = {"agent_answer": traj.prediction, **res.to_dict()}
            traj.prediction = res.answer
        t = self.teacher
        if t is not None:
            traj.teacher_calls, traj.teacher_errors = t.calls, t.errors
            traj.teacher_prompt_tokens, traj.teacher_completion_tokens = t.prompt_tokens, t.completion_tokens
        traj.harness = self.record
