"""The one agent loop, with the PF harness around it, over any environment.

One step: the policy replies, the environment reads the reply as an action, the harness
(``hasp.agent.harness``: PF dispatch, then FINAL-time handler votes) may rewrite it or add context,
the environment executes the final action, phase reminders are added to the observation, and the
step record with its audit event is appended. The environment decides what the domain needs: the
search agent's ReAct turns over SEARCH / READ tools (``hasp.agent.react``), or one answer with at
most one PF-triggered revision for math and code (``hasp.agent.single_step``). Model mistakes
(unparseable output) are recorded; harness bugs raise; a model call that fails after the client's
retries, or that the episode's wall budget ends, ends the episode as ``terminated="error"``. Where
the engine constrains decoding (``llm.constrained``), every policy call carries the environment's
reply grammar, so a reply the environment refuses cannot be written.

``episode_runner`` is the one function episode specs use to get ``item -> Trajectory``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hasp.agent.context import EpisodeState
from hasp.agent.harness import EpisodeHarness, Harness
from hasp.agent.parser import ParseFailure, ParsedAction
from hasp.agent.react import ReactEnvironment, load_prompts  # noqa: F401 - the search prompts training renders too
from hasp.agent.variants import Variant
from hasp.config import AgentParams, HarnessParams, LLMParams, Params, default_of
from hasp.llm.cancel import call_deadline
from hasp.llm.client import LLMDeadlineExceeded, LLMError
from hasp.llm.structured import constrains_actions, dialect_of
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.library import SkillLibrary
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
    """What the loop drives (``hasp.agent.react.ReactEnvironment``, ``hasp.agent.single_step.SingleStepEnvironment``)."""

    stop: list[str] | None
    retries_unparsed: bool  # a reply without an action is shown its error (True) or ends the episode
    budget_prompt: str  # the answer-only turn after the step budget ("" = none)
    stats: Any  # what the environment counted, for the evaluation record (None = nothing)

    def opening(self, question: str, system_text: str) -> list[dict[str, str]]: ...
    def grammar(self, max_tokens: int, final_only: bool = False) -> str | None: ...
    def parse(self, text: str) -> ParsedAction | ParseFailure: ...
    def unparsed(self, reason: str) -> str: ...
    def context(self, state: EpisodeState, thought: str) -> dict[str, Any]: ...
    def snapshot(self, state: EpisodeState, ctx: dict[str, Any]) -> dict[str, Any]: ...
    def execute(self, a: Action, state: EpisodeState, audit: AuditEvent, last_step: bool) -> tuple[str, bool]: ...
    def turns(self, step: StepRecord) -> list[dict[str, str]]: ...
    def score(self, traj: Trajectory) -> tuple[float, float] | None: ...


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
    max_modify_fires: int = _agent("max_modify_fires")
    seed: int | None = 0
    final_on_budget: bool = _agent("final_on_budget")
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


def as_environment(env: Any, cfg: AgentConfig, scorer: Any = None) -> Environment:
    """``env`` itself when it is a loop environment, else SEARCH / READ tools in the ReAct environment."""
    if hasattr(env, "opening"):
        return env
    return ReactEnvironment(env, max_search_calls=cfg.max_search_calls, max_read_calls=cfg.max_read_calls,
                            scorer=scorer)


def run_episode(*, qid: str, question: str, answers: list[str], policy: Policy, env: Any,
                pfs: list[ProgramFunction] | None = None, cfg: AgentConfig, variant: str,
                teacher: Teacher | None = None, skills_text: str = "", scorer: Any = None,
                harness: EpisodeHarness | None = None) -> Trajectory:
    """Run one question to its end (FINAL, the step budget, the wall budget); return the trajectory.

    ``env`` is a loop environment, or SEARCH / READ tools (run in ``ReactEnvironment`` with ``scorer``).
    ``harness`` (from ``hasp.agent.harness``) carries the selection layers, handlers and phase
    reminders. Without it, ``pfs``/``teacher``/``skills_text`` are used as given (no selection).
    """
    h = harness or EpisodeHarness.plain(list(pfs or []), teacher=teacher, skills_text=skills_text,
                                        max_modify_fires=cfg.max_modify_fires)
    environment = as_environment(env, cfg, scorer)
    traj = Trajectory(qid=qid, question=question, answers=list(answers), variant=variant)
    messages = environment.opening(question, h.system_text)
    state = EpisodeState(question=question, max_steps=cfg.max_steps)
    traj.terminated = "max_steps"
    left = None if h.timeout_s is None else h.timeout_s - (time.perf_counter() - h.t_start)
    try:
        with call_deadline(left):  # the wall budget also ends a model call that hangs
            _steps(traj, messages, state, h, policy, environment, cfg)
    except LLMError as e:
        # the endpoint failed after the client's retries, or did not answer within the episode's budget:
        # an infrastructure failure, not an answer of the agent's (the runner counts it in n_failed, not as EM 0)
        traj.terminated = "error"
        if isinstance(e, LLMDeadlineExceeded):
            traj.pf_errors.append(f"{type(e).__name__}: wall budget of {h.timeout_s}s ended a model call: {e}"[:500])
            log.warning("episode %s: wall budget of %ss ended a model call: %s", qid, h.timeout_s, e)
        else:
            traj.pf_errors.append(f"{type(e).__name__}: {e}"[:500])
            log.warning("episode %s: model call failed: %s", qid, e)
    h.finish(traj, state)
    graded = environment.score(traj)
    if graded is not None:
        traj.em, traj.f1 = graded
    traj.wall_s = time.perf_counter() - h.t_start
    return traj


def _steps(traj: Trajectory, messages: list[dict[str, str]], state: EpisodeState, h: EpisodeHarness,
           policy: Policy, env: Environment, cfg: AgentConfig) -> None:
    grammar = env.grammar(cfg.max_tokens)
    constraint = step_grammar(cfg, policy, grammar) if grammar else {}
    for i in range(cfg.max_steps):
        if h.out_of_time():
            traj.terminated = "timeout"
            break
        ts = time.perf_counter()
        state.step_count = i
        reply = policy.chat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            stop=env.stop, seed=cfg.seed, **constraint)
        traj.prompt_tokens += int(getattr(reply, "prompt_tokens", 0) or 0)
        traj.completion_tokens += int(getattr(reply, "completion_tokens", 0) or 0)
        step = StepRecord(index=i, raw_output=reply.text or "", llm_s=time.perf_counter() - ts,
                          prompt_messages=[dict(m) for m in messages])
        traj.steps.append(step)
        parsed = env.parse(step.raw_output)
        if isinstance(parsed, ParseFailure):
            step.parse_error, step.thought = parsed.reason, parsed.thought
            state.parse_failures += 1
            if not env.retries_unparsed:
                step.step_s = time.perf_counter() - ts
                break
            step.observation = env.unparsed(parsed.reason)
            messages += env.turns(step)
            step.step_s = time.perf_counter() - ts
            continue
        step.thought = parsed.thought
        th = time.perf_counter()
        ctx = env.context(state, parsed.thought)
        audit = h.decide(ctx, state, parsed.type, parsed.arg, snapshot=env.snapshot(state, ctx))
        state.absorb(ctx)
        harness_s = time.perf_counter() - th
        traj.pf_errors += audit.errors
        obs, done = env.execute(audit.a_final, state, audit, i == cfg.max_steps - 1)
        state.note_outcome(_failed(audit.feedback))
        if audit.a_final.type == "FINAL":
            traj.prediction, traj.terminated = audit.a_final.arg, "final"
        if audit.context:
            obs = obs + "\n" + "\n".join(audit.context)
        step.audit, step.observation = audit, obs
        th = time.perf_counter()
        step.reminders = [r.text for r in h.reminders(state, audit)]
        audit.harness_s = harness_s + time.perf_counter() - th
        state.action_history.append(audit.a_final.render())
        if done:
            step.step_s = time.perf_counter() - ts
            break
        messages += env.turns(step)
        step.step_s = time.perf_counter() - ts
    if traj.terminated == "max_steps" and cfg.final_on_budget and env.budget_prompt:
        _final_on_budget(traj, messages, policy, env, cfg)


def _final_on_budget(traj: Trajectory, messages: list[dict[str, str]], policy: Policy, env: Environment,
                     cfg: AgentConfig) -> None:
    """The step budget ran out without FINAL: one extra turn that may only answer.

    Without it a policy that is still exploring at the last step (often because PFs sent it back
    to search) scores as unanswered although it has gathered evidence. The turn has no audit
    event (no PF ran, no tool ran), so signals and training data ignore it; the episode is marked
    ``budget_final`` when it produced an answer.
    """
    ts = time.perf_counter()
    messages.append({"role": "user", "content": env.budget_prompt})
    answer_only = step_grammar(cfg, policy, env.grammar(cfg.max_tokens, final_only=True))
    reply = policy.chat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                        stop=env.stop, seed=cfg.seed, **answer_only)
    traj.prompt_tokens += reply.prompt_tokens
    traj.completion_tokens += reply.completion_tokens
    step = StepRecord(index=len(traj.steps), raw_output=reply.text, llm_s=time.perf_counter() - ts,
                      prompt_messages=[dict(m) for m in messages])
    parsed = env.parse(reply.text)
    if isinstance(parsed, ParseFailure) or parsed.type != "FINAL":
        step.parse_error = parsed.reason if isinstance(parsed, ParseFailure) else f"{parsed.type} after the budget"
    else:
        step.thought = parsed.thought
        traj.prediction, traj.terminated = parsed.arg, "budget_final"
    step.step_s = time.perf_counter() - ts
    traj.steps.append(step)


def _failed(feedback: dict[str, Any]) -> bool:
    """Did the executed action fail, by its feedback Δ_t (``ReactEnvironment.execute``)?"""
    return (bool(feedback.get("budget_exhausted")) or feedback.get("n_hits") == 0 or feedback.get("found") is False
            or bool(feedback.get("tool_error")))


def episode_runner(*, policy: Any, library: SkillLibrary | None, cfg: AgentConfig, variant: Variant,
                   params: HarnessParams | None, make_env: Callable[[Any], Environment],
                   identity: Callable[[Any], tuple[str, str, list[str]]], teacher: Teacher | None = None,
                   label: str | None = None, prompt_skills: str = "ranked",
                   action_types: tuple[str, ...] | None = None) -> Callable[..., Trajectory]:
    """``item -> Trajectory`` for one variant: ``identity(item)`` is its (qid, question, answers),
    ``make_env(item)`` its environment, ``prompt_skills`` the harness's choice of prompt skills.

    The harness is compiled here, once; each call plans its question and runs the loop."""
    harness = Harness(library, variant, params, max_modify_fires=cfg.max_modify_fires, prompt_skills=prompt_skills,
                      action_types=action_types)
    used_teacher = teacher if variant.use_teacher else None
    if teacher is not None and used_teacher is None:
        log.info("variant %s runs without the teacher (use pf_teacher or teacher_only to give it one)",
                 variant.name)

    def run(item: Any, env: Environment | None = None, seed: int | None = None) -> Trajectory:
        """One episode; ``env`` overrides ``make_env(item)`` when the caller needs to keep the environment,
        ``seed`` the config's sampling seed for this episode (``hasp.episode.spec.Seeded``)."""
        qid, question, answers = identity(item)
        return run_episode(qid=qid, question=question, answers=answers, policy=policy,
                           env=env if env is not None else make_env(item),
                           cfg=cfg if seed is None else replace(cfg, seed=seed),
                           variant=label or variant.name, harness=harness.episode(question, used_teacher))

    return run
