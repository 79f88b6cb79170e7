"""The ReAct loop with the PF harness around it.

One step: the policy proposes an action, the harness (``hasp.agent.harness``:
PF dispatch, then FINAL-time handler votes) may rewrite it or add context, the
environment executes the final action, phase reminders are added to the next
observation, and the step record with its audit event is appended. The step renders
the turns it adds to the prompt itself (``StepRecord.to_messages``), the rendering
training rows use too. Model mistakes (unparseable output) are recorded and shown to
the model; harness bugs raise. Where the engine constrains decoding (``llm.constrained``),
every policy step carries the action grammar (``hasp.agent.parser.action_grammar``) and the
answer-only turn after the budget a FINAL-only one, so a step the parser refuses cannot be written.

``episode_runner`` is the one function rollouts and evaluations use to get ``item -> Trajectory``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


from hasp.agent.context import EpisodeState
from hasp.agent.harness import EpisodeHarness, Harness
from hasp.agent.parser import ParseFailure, action_grammar, parse_action
from hasp.agent.variants import Variant
from hasp.config import AgentParams, HarnessParams, LLMParams, Params, default_of
from hasp.llm.cancel import call_deadline
from hasp.llm.client import LLMDeadlineExceeded
from hasp.llm.structured import constrains_actions, dialect_of
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.library import SkillLibrary
from hasp.prompts import load_prompts as prompt_file
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

log = logging.getLogger(__name__)


class ChatReply(Protocol):
    text: str
    prompt_tokens: int
    completion_tokens: int


class Policy(Protocol):
    """Anything that answers chat messages; ``hasp.llm.client.LLMClient`` or a test double. ``grammar``
    is passed only when the step is constrained, so a double without it still serves unconstrained runs."""

    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None, stop: list[str] | None = None,
             seed: int | None = None, grammar: str | None = None) -> ChatReply: ...


class Environment(Protocol):
    def search(self, query: str) -> tuple[str, list[Any]]: ...
    def read(self, ref: str) -> tuple[str, dict[str, Any] | None]: ...


def _agent(name: str) -> Any:
    return default_of(AgentParams, name)


@dataclass
class AgentConfig:
    """Episode budgets and sampling; one object so a variant is plain data. Defaults and help text of
    the shared knobs are the ``agent`` section's (``hasp.config.AgentParams``)."""

    max_steps: int = _agent("max_steps")
    max_search_calls: int = _agent("max_search_calls")
    max_read_calls: int = _agent("max_read_calls")
    temperature: float = _agent("temperature")
    max_tokens: int = _agent("max_tokens")
    use_pfs: bool = True
    skills_in_prompt: bool = False
    max_modify_fires: int = _agent("max_modify_fires")
    seed: int | None = 0
    final_on_budget: bool = _agent("final_on_budget")
    #: wall budget of one single-step episode, enforced during its model calls (None: none); the
    #: search loop takes the same budget from its harness (``harness.timeout_seconds``)
    timeout_s: float | None = None
    #: ``llm.constrained``: whether policy steps carry their reply grammar, resolved against the
    #: policy's dialect when an episode starts (``step_grammar``)
    constrained: str = default_of(LLMParams, "constrained")


def agent_config(params: Params) -> AgentConfig:
    """The episode budgets of ``params.agent``: rollouts, the val gate and evaluations build their
    config here so a budget set in params.yaml means the same thing in every phase."""
    a = params.agent
    return AgentConfig(max_steps=a.max_steps, max_search_calls=a.max_search_calls,
                       max_read_calls=a.max_read_calls, temperature=a.temperature,
                       max_tokens=a.max_tokens, max_modify_fires=a.max_modify_fires,
                       final_on_budget=a.final_on_budget, constrained=params.llm.constrained)


def step_grammar(cfg: AgentConfig, policy: Any, grammar: str) -> dict[str, str]:
    """``{"grammar": grammar}`` when ``cfg.constrained`` resolves to actions for the policy's dialect,
    else ``{}``: the keyword arguments a policy call adds, so an unconstrained call is unchanged."""
    return {"grammar": grammar} if constrains_actions(cfg.constrained, dialect_of(policy)) else {}


def load_prompts(name: str = "search_react") -> Mapping[str, Any]:
    """The search agent's prompt entries (``hasp/agent/prompts/<name>.yaml``)."""
    return prompt_file("hasp.agent", name)


def _hit_dict(h: Any) -> dict[str, str]:
    if isinstance(h, dict):
        return {"id": str(h.get("id", "")), "title": str(h.get("title", ""))}
    return {"id": str(getattr(h, "id", "")), "title": str(getattr(h, "title", ""))}


def run_episode(*, qid: str, question: str, answers: list[str], policy: Policy, env: Environment,
                pfs: list[ProgramFunction] | None = None, cfg: AgentConfig, variant: str,
                teacher: Teacher | None = None, skills_text: str = "", scorer: Any = None,
                harness: EpisodeHarness | None = None) -> Trajectory:
    """Run one question to FINAL, the step budget or the wall budget; return the trajectory.

    ``harness`` (from ``hasp.agent.harness``) carries the selection layers, handlers and phase
    reminders. Without it, ``pfs``/``teacher``/``skills_text`` are used as given (no selection).
    """
    h = harness or EpisodeHarness.plain(list(pfs or []) if cfg.use_pfs else [], teacher=teacher,
                                        skills_text=skills_text, max_modify_fires=cfg.max_modify_fires)
    p = load_prompts()
    traj = Trajectory(qid=qid, question=question, answers=list(answers), variant=variant)
    system = p["system"] + (f"\n{p['skills_header']}\n{h.system_text}" if h.system_text else "")
    messages = [{"role": "system", "content": system}, *[dict(m) for m in p.get("demo", [])],
                {"role": "user", "content": p["question"].format(question=question)}]
    state = EpisodeState(question=question, max_steps=cfg.max_steps)
    traj.terminated = "max_steps"
    left = None if h.timeout_s is None else h.timeout_s - (time.perf_counter() - h.t_start)
    try:
        with call_deadline(left):  # the wall budget also ends a model call that hangs
            _steps(traj, messages, state, h, policy, env, cfg, p)
    except LLMDeadlineExceeded as e:
        # the endpoint did not answer within the episode's budget: an infrastructure failure, not an
        # answer of the agent's (the runner counts it in n_failed, not as EM 0)
        traj.terminated = "error"
        traj.pf_errors.append(f"{type(e).__name__}: wall budget of {h.timeout_s}s ended a model call: {e}"[:500])
        log.warning("episode %s: wall budget of %ss ended a model call: %s", qid, h.timeout_s, e)
    h.finish(traj, state)
    if scorer is not None:
        traj.em, traj.f1 = scorer(traj.prediction, traj.answers)
    traj.wall_s = time.perf_counter() - h.t_start
    return traj


def _steps(traj: Trajectory, messages: list[dict[str, str]], state: EpisodeState, h: EpisodeHarness,
           policy: Policy, env: Environment, cfg: AgentConfig, p: Mapping[str, Any]) -> None:
    constraint = step_grammar(cfg, policy, action_grammar(max_tokens=cfg.max_tokens))
    for i in range(cfg.max_steps):
        if h.out_of_time():
            traj.terminated = "timeout"
            break
        ts = time.perf_counter()
        state.step_count = i
        reply = policy.chat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            stop=["Observation:"], seed=cfg.seed, **constraint)
        traj.prompt_tokens += reply.prompt_tokens
        traj.completion_tokens += reply.completion_tokens
        step = StepRecord(index=i, raw_output=reply.text, llm_s=time.perf_counter() - ts,
                          prompt_messages=[dict(m) for m in messages])
        traj.steps.append(step)
        parsed = parse_action(reply.text)
        if isinstance(parsed, ParseFailure):
            step.parse_error, step.thought = parsed.reason, parsed.thought
            state.parse_failures += 1
            step.observation = p["parse_error"].format(reason=parsed.reason)
            messages += step.to_messages(p)
            step.step_s = time.perf_counter() - ts
            continue
        step.thought = parsed.thought
        th = time.perf_counter()
        ctx = state.to_ctx(parsed.thought)
        audit = h.decide(ctx, state, parsed.type, parsed.arg)
        state.absorb(ctx)
        harness_s = time.perf_counter() - th
        traj.pf_errors += audit.errors
        obs, done = _execute(audit.a_final, state, env, cfg, audit, p)
        state.note_outcome(_failed(audit.feedback))
        if audit.context:
            obs = obs + "\n" + "\n".join(audit.context)
        step.audit, step.observation = audit, obs
        th = time.perf_counter()
        step.reminders = [r.text for r in h.reminders(state, audit)]
        audit.harness_s = harness_s + time.perf_counter() - th
        state.action_history.append(audit.a_final.render())
        messages += step.to_messages(p)
        step.step_s = time.perf_counter() - ts
        if done:
            traj.prediction, traj.terminated = audit.a_final.arg, "final"
            break
    if traj.terminated == "max_steps" and cfg.final_on_budget:
        _final_on_budget(traj, messages, policy, cfg, p)


def _final_on_budget(traj: Trajectory, messages: list[dict[str, str]], policy: Policy, cfg: AgentConfig,
                     p: dict[str, str]) -> None:
    """The step budget ran out without FINAL: one extra turn that may only answer.

    Without it a policy that is still exploring at the last step (often because PFs sent it back
    to search) scores as unanswered although it has gathered evidence. The turn has no audit
    event (no PF ran, no tool ran), so signals and training data ignore it; the episode is marked
    ``budget_final`` when it produced an answer.
    """
    ts = time.perf_counter()
    messages.append({"role": "user", "content": p["budget_final"]})
    answer_only = step_grammar(cfg, policy, action_grammar(("FINAL",), cfg.max_tokens))
    reply = policy.chat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                        stop=["Observation:"], seed=cfg.seed, **answer_only)
    traj.prompt_tokens += reply.prompt_tokens
    traj.completion_tokens += reply.completion_tokens
    step = StepRecord(index=len(traj.steps), raw_output=reply.text, llm_s=time.perf_counter() - ts,
                      prompt_messages=[dict(m) for m in messages])
    parsed = parse_action(reply.text)
    if isinstance(parsed, ParseFailure) or parsed.type != "FINAL":
        step.parse_error = parsed.reason if isinstance(parsed, ParseFailure) else f"{parsed.type} after the budget"
    else:
        step.thought = parsed.thought
        traj.prediction, traj.terminated = parsed.arg, "budget_final"
    step.step_s = time.perf_counter() - ts
    traj.steps.append(step)


def _execute(a: Action, state: EpisodeState, env: Environment, cfg: AgentConfig,
             audit: AuditEvent, p: dict[str, str]) -> tuple[str, bool]:
    """Execute the final action; fill Δ_t (``audit.feedback``). Returns (observation, done)."""
    if a.type == "FINAL":
        audit.feedback = {"final": True}
        return "", True
    if a.type == "SEARCH":
        if state.search_count >= cfg.max_search_calls:
            audit.feedback = {"budget_exhausted": "search"}
            return p["budget_exhausted"].format(kind="search"), False
        obs, hits = env.search(a.arg)
        state.search_count += 1
        state.queries.append(a.arg)
        state.empty_results = not hits
        state.last_search_results_text = obs
        state.last_search_hits = [_hit_dict(h) for h in hits]
        known = {h["id"] for h in state.seen_hits}
        state.seen_hits += [h for h in state.last_search_hits if h["id"] not in known]
        audit.feedback = {"n_hits": len(hits), "hit_ids": [h["id"] for h in state.last_search_hits]}
        return obs, False
    if a.type == "READ":
        if state.read_count >= cfg.max_read_calls:
            audit.feedback = {"budget_exhausted": "read"}
            return p["budget_exhausted"].format(kind="read"), False
        obs, doc = env.read(a.arg)
        if doc is not None:
            state.read_count += 1
            state.read_ids.append(str(doc.get("id", "")))
            state.read_contents.append(str(doc.get("contents", "")))
        audit.feedback = {"found": doc is not None, "doc_id": (doc or {}).get("id")}
        return obs, False
    raise ValueError(f"unknown action type {a.type!r}")  # the parser/dispatcher only emit the three


def _failed(feedback: dict[str, Any]) -> bool:
    """Did the executed action fail, by its feedback Δ_t (``_execute``)?"""
    return bool(feedback.get("budget_exhausted")) or feedback.get("n_hits") == 0 or feedback.get("found") is False


def episode_runner(*, policy: Any, library: SkillLibrary | None, cfg: Any, variant: Variant,
                   params: HarnessParams | None, make_env: Callable[[], Any], teacher: Teacher | None = None,
                   scorer: Any = None, label: str | None = None) -> Callable[[Any], Trajectory]:
    """``item -> Trajectory`` for one variant (items have ``id``, ``question``, ``answers``).

    The harness is compiled here, once; each call plans its question and runs the loop."""
    harness = Harness(library, variant, params, max_modify_fires=cfg.max_modify_fires)
    used_teacher = teacher if variant.use_teacher else None
    if teacher is not None and used_teacher is None:
        log.info("variant %s runs without the teacher (use pf_teacher or teacher_only to give it one)",
                 variant.name)

    def run(item: Any, env: Any = None) -> Trajectory:
        """One episode; ``env`` overrides ``make_env()`` when the caller needs to keep the environment."""
        return run_episode(qid=item.id, question=item.question, answers=item.answers, policy=policy,
                           env=env if env is not None else make_env(), pfs=[], cfg=cfg,
                           variant=label or variant.name, scorer=scorer,
                           harness=harness.episode(item.question, used_teacher))

    return run
