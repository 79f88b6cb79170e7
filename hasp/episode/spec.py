"""One episode recipe for every caller: ``EpisodeSpec``, made by ``episode_spec``, run by ``run_episodes``.

The spec is plain picklable data — params, the domain, the variant and label, the agent's budgets,
the library folder, the snippet and judge flags and, when it travels to a worker process, the
endpoints of the policy and the teacher. ``runner`` gives ``item -> EpisodeRecord`` with live clients
and a library in this process; ``build`` makes the same function in a worker from the endpoints
(``hasp.agent.remote``); ``failed`` is the one record of an episode that did not run to its end.
Every episode is contained: one that raises (an endpoint down after the client's retries, a harness
bug) becomes a ``terminated="error"`` record, counted apart from wrong answers, never an exception
that discards the other episodes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hasp.agent.loop import AgentConfig, episode_runner
from hasp.agent.remote import BuiltEpisode, EpisodeExecutor, endpoint_of
from hasp.agent.rollout import run_many
from hasp.agent.variants import Variant, get_variant
from hasp.config import Params, RolloutParams
from hasp.episode.domains import Domain
from hasp.episode.judge import judge_answer
from hasp.episode.records import EpisodeRecord
from hasp.episode.seeding import Seeded, sampling_seed, unseeded
from hasp.llm.client import LLMConfig, LLMError
from hasp.records import Trajectory

log = logging.getLogger(__name__)


def pipeline_variant(variant: str, teacher: Any, params: Params) -> str:
    """The variant the pipeline (Phase A, the val gate, the RS/OPD sampler, the grid's PF arm) runs:
    its PF agent is ``pf_teacher`` when a teacher is configured, so a configured teacher is never ignored,
    unless ``teacher.assist_agent`` is false (the teacher then reviews, distils and judges only)."""
    assist = teacher is not None and params.teacher.assist_agent
    return "pf_teacher" if assist and variant == "pf" else variant


@dataclass(frozen=True)
class EpisodeSpec:
    """Picklable recipe of one kind of episode; made by ``episode_spec``."""

    params: Params
    domain: Domain
    variant: Variant
    label: str
    agent: AgentConfig
    library: Path | None = None
    snippets: bool = False
    judge: bool = False
    policy: LLMConfig | None = None
    teacher: LLMConfig | None = None

    def runner(self, *, policy: Any, teacher: Any = None, library: Any = None,
               opened: Any = None) -> Callable[[Any], EpisodeRecord]:
        """``item -> EpisodeRecord`` in this process with live ``policy``, ``teacher`` and ``library``
        (``self.library`` as the caller loaded it; None: no skills); ``opened`` is what the domain
        opens (the search index), opened here when None."""
        d, p = self.domain, self.params
        opened = d.open(p) if opened is None else opened
        episode = episode_runner(policy=policy, library=library, cfg=self.agent, variant=self.variant,
                                 params=d.harness(p), identity=d.identity, teacher=teacher, label=self.label,
                                 prompt_skills=d.prompt_skills, action_types=getattr(d, "action_types", None),
                                 make_env=lambda item: d.environment(item, opened, params=p, cfg=self.agent,
                                                                     teacher=teacher, snippets=self.snippets))

        def run(item: Any) -> EpisodeRecord:
            start_ns = time.time_ns()
            item, seed = unseeded(item)
            try:
                env = d.environment(item, opened, params=p, cfg=self.agent, teacher=teacher, snippets=self.snippets)
                traj = episode(item, env, seed=seed)
            except Exception as exc:  # noqa: BLE001 - contained per episode and counted; see the module doc
                error = f"{type(exc).__name__}: {exc}"
                wall = (time.time_ns() - start_ns) / 1e9
                if infrastructure(exc):
                    log.warning("%s %s: episode failed: %s", self.label, d.identity(item)[0], error)
                    return self.failed(item, error, wall_s=wall, start_ns=start_ns)
                log.warning("%s %s: episode crashed (scored as a wrong answer): %s", self.label,
                            d.identity(item)[0], error)
                return self.crashed(item, error, wall_s=wall, start_ns=start_ns)
            verdict = None
            if self.judge:
                _, question, answers = d.identity(item)
                verdict = judge_answer(teacher, question, answers, traj.prediction,
                                       max_tokens=p.eval.judge_max_tokens)
            return EpisodeRecord(traj, start_ns, env.stats, verdict)

        return run

    def build(self) -> BuiltEpisode:
        """The episode function in a worker process, with clients and a library of its own."""
        from hasp.llm.client import LLMClient
        from hasp.pf.library import load_library

        assert self.policy is not None, "a spec travels with its policy endpoint (EpisodeSpec.shipped)"
        lib = (load_library(self.library, self.domain.name, sandbox=self.params.sandbox)
               if self.library is not None else None)
        policy = LLMClient(self.policy)
        teacher = LLMClient(self.teacher) if self.teacher is not None else None
        return BuiltEpisode.holding(self.runner(policy=policy, teacher=teacher, library=lib), lib, policy, teacher)

    def failed(self, item: Any, error: str, *, wall_s: float = 0.0, start_ns: int | None = None) -> EpisodeRecord:
        """The record of an episode that did not run to its end: an infrastructure failure, not the agent's."""
        qid, question, answers = self.domain.identity(unseeded(item)[0])
        traj = Trajectory(qid=qid, question=question, answers=answers, variant=self.label, terminated="error",
                          pf_errors=[error[:500]], wall_s=wall_s)
        return EpisodeRecord(traj, time.time_ns() if start_ns is None else start_ns, error=error[:500])

    def crashed(self, item: Any, error: str, *, wall_s: float = 0.0, start_ns: int | None = None) -> EpisodeRecord:
        """The record of an episode the agent's own run ended with an exception (not the endpoint's,
        not the sandbox's): a wrong answer, scored (``terminated="crash"``, EM and F1 0), so a reply
        that makes the episode raise can never raise the score by leaving the denominator."""
        qid, question, answers = self.domain.identity(unseeded(item)[0])
        traj = Trajectory(qid=qid, question=question, answers=answers, variant=self.label, terminated="crash",
                          pf_errors=[error[:500]], wall_s=wall_s)
        return EpisodeRecord(traj, time.time_ns() if start_ns is None else start_ns)

    def shipped(self, policy: Any, teacher: Any = None) -> EpisodeSpec:
        """The spec as a worker receives it: with the endpoints of the live clients."""
        return replace(self, policy=endpoint_of(policy, "policy"), teacher=endpoint_of(teacher, "teacher"))


def infrastructure(exc: BaseException) -> bool:
    """An exception that says nothing about the agent: the model endpoint (after the client's
    retries), the sandbox refusing to run, the machine (files, memory) or the task's own code (a
    scorer or item that raises). Such an episode is left out of the scores and counted apart;
    every other exception ends the episode as the agent's failure (``EpisodeSpec.crashed``)."""
    from hasp.episode.task import TaskError
    from hasp.sandbox.worker import SandboxError

    return isinstance(exc, (LLMError, SandboxError, TaskError, OSError, MemoryError))


def episode_spec(params: Params, domain: Domain, variant: str | Variant, *, label: str | None = None,
                 library: Path | None = None, teacher: Any = None, pipeline: bool = False,
                 rollout: RolloutParams | None = None, snippets: bool = False, judge: bool = False) -> EpisodeSpec:
    """The one factory of episode specs.

    ``pipeline``: the variant named is the pipeline's (``pipeline_variant``: ``pf`` runs as
    ``pf_teacher`` when ``teacher`` is given). ``rollout`` overrides the agent's budgets and sampling with a training
    rollout's (step, SEARCH and READ caps, temperature; no fixed seed, so k samples of one question
    differ). ``label`` names the trajectories (default: the variant's name)."""
    if isinstance(variant, str):
        variant = pipeline_variant(variant, teacher, params) if pipeline else variant
    v = get_variant(variant) if isinstance(variant, str) else variant
    domain.check(v)
    cfg = domain.config(params, v)
    if rollout is not None:
        cfg = replace(cfg, max_steps=rollout.max_steps, max_search_calls=rollout.max_search_calls,
                      max_read_calls=rollout.max_read_calls, temperature=rollout.temperature, seed=None)
    return EpisodeSpec(params=params, domain=domain, variant=v, label=label or v.name, agent=cfg,
                       library=Path(library) if library is not None else None, snippets=snippets, judge=judge)


def run_episodes(spec: EpisodeSpec, items: Sequence[Any], *, policy: Any, teacher: Any = None, library: Any = None,
                 opened: Any = None, executor: EpisodeExecutor | None = None, desc: str = "episodes",
                 progress: bool = True,
                 on_record: Callable[[int, EpisodeRecord], None] | None = None) -> list[EpisodeRecord]:
    """Every item's record, in input order: on threads here (``run_many`` with the live ``policy``,
    ``teacher``, ``library`` and ``opened``), or through ``executor`` (``runner.kind``) in worker
    processes that build the episode function from the spec and reach the models over HTTP.
    ``on_record`` sees each (item index, record) as it finishes on threads; through an executor, once all
    are back."""
    if executor is not None:
        records = executor.run(spec.shipped(policy, teacher), list(items), desc=desc, progress=progress)
        for i, r in enumerate(records if on_record is not None else ()):
            on_record(i, r)
        return records
    run = spec.runner(policy=policy, teacher=teacher, library=library, opened=opened)
    return run_many(list(items), run, concurrency=spec.params.llm.in_flight, desc=desc, progress=progress,
                    on_result=on_record)
