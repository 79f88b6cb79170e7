"""The rollout sampler of RS and OPD: the PF agent on training questions, run by a served checkpoint.

``run_rounds`` asks ``sample(questions, model_dir)`` for trajectories of the checkpoint a round starts
from. Here that is: serve ``model_dir`` as a sampling policy (``train.rollout``'s temperature and
top-p), then run the task's agent with PFs active on every asked question (each question arrives k
times) under the rollout's budgets — step, SEARCH and READ caps — and, when configured, in
teacher-snippet mode (App. D.4). The same episode runner as Phase A and evaluation is used, so a
training trajectory renders into the prompts the policy sees at test time.

Serving is passed in (``policy_for(model_dir)`` is a context manager yielding a policy), so the
sampler never owns a server it cannot stop, and tests can hand in a scripted policy. The default,
``served_policy``, follows ``llm.backend``. With ``transformers`` it starts ``transformers serve`` on
the merged folder for the duration of one call: the server freezes the sampling mode of its first
request, so it is warmed with the rollout temperature and top-p, and each new checkpoint gets a fresh
server. With ``vllm`` the checkpoint's LoRA adapter is served on the base it was trained on (no merge),
the adapter's name is the model the agent sends, and temperature and top-p go with every request; when
``llm.base_url`` names a running vLLM server, the adapter is loaded into it at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ContextManager, Protocol

from hasp.agent.loop import Policy
from hasp.agent.remote import EpisodeExecutor
from hasp.config import Params, RolloutParams
from hasp.episode.domains import Domain
from hasp.episode.spec import EpisodeSpec, episode_spec, run_episodes
from hasp.pf.library import load_library
from hasp.records import Trajectory
from hasp.train.rounds import RecipeError

log = logging.getLogger(__name__)

PolicyFor = Callable[[Path], ContextManager[Policy]]
#: port offset of the sampling server from ``llm.port`` (greedy policy +0, trained +1, student +2)
SAMPLER_PORT_OFFSET = 3
LABEL = "train_rollout"


def served_policy(params: Params, rollout: RolloutParams, *, port: int | None = None) -> PolicyFor:
    """``model_dir -> context manager`` serving the folder at the rollout's sampling settings."""
    from hasp.llm.endpoints import policy_client

    llm = params.llm
    if llm.backend != "vllm" or not llm.base_url:  # a checkpoint is served from its folder...
        llm = llm.model_copy(update={"base_url": None})  # ...unless a running vLLM server can load it

    def open_policy(model_dir: Path) -> ContextManager[Policy]:
        return policy_client(llm, model_dir=Path(model_dir), port=port or params.llm.port + SAMPLER_PORT_OFFSET,
                             max_tokens=params.agent.max_tokens, temperature=rollout.temperature,
                             top_p=rollout.top_p)

    return open_policy


class TaskSplits(Protocol):
    """What a sampler reads of a task: its domain and the items of a split. The caller builds it (the
    epoch's task, ``hasp.evolve.epoch_task.EpochTask``: search's split files, or a math, code or user
    task's pool split by hash), so RS, OPD, GRPO and SAGE sample any task the way evolution runs it."""

    domain: Domain

    def items(self, split: str, limit: int | None = None) -> list[Any]: ...


def training_questions(task: TaskSplits, split: str = "train") -> list[Any]:
    """The items RS, OPD, GRPO and SAGE sample on: the task's training split."""
    try:
        items = task.items(split)
    except FileNotFoundError as e:
        raise RecipeError(f"{e.filename}: no such file; prepare the data first (hasp data prepare)") from None
    if not items:
        raise RecipeError(f"{task.domain.name}: the {split} split has no items to sample on")
    return items


def sample_spec(params: Params, rollout: RolloutParams, domain: Domain, library: Path | None,
                teacher: Any, variant: str = "pf") -> EpisodeSpec:
    """The PF agent (``pf_teacher`` with a teacher), or ``variant`` (``react``: no skills), under the
    rollout's budgets and sampling, in teacher-snippet mode when the rollout asks for it."""
    return episode_spec(params, domain, variant, label=LABEL, library=library, teacher=teacher, pipeline=True,
                        rollout=rollout, snippets=rollout.teacher_snippets)


class PFRolloutSampler:
    """``sample(questions, model_dir) -> trajectories`` of a task's domain with a skill library.

    ``teacher`` (an LLM client) makes the agent ``pf_teacher`` and supplies snippets when
    ``rollout.teacher_snippets`` is on; snippets without a teacher are refused before any server starts.
    ``calls`` records (model folder, questions, trajectories) per call, for the run's summary."""

    def __init__(self, params: Params, domain: Domain, library: Path | None, *, rollout: RolloutParams,
                 policy_for: PolicyFor | None = None, teacher: Any = None,
                 executor: EpisodeExecutor | None = None, variant: str = "pf") -> None:
        if rollout.teacher_snippets and teacher is None:
            raise RecipeError("train.rollout.teacher_snippets needs a teacher: set teacher.embedded, or "
                              "teacher.base_url and teacher.model, or train.rollout.teacher_snippets: false")
        self.params, self.rollout, self.teacher, self.executor = params, rollout, teacher, executor
        self.library = Path(library) if library is not None else None
        self.spec = sample_spec(params, rollout, domain, self.library, teacher, variant)
        self.index = self.spec.domain.open(params) if executor is None else None
        self.policy_for = policy_for or served_policy(params, rollout)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, questions: Sequence[Any], model_dir: Path) -> list[Trajectory]:
        """The trajectories of ``questions`` sampled from ``model_dir``: on threads here, or through
        ``executor`` (``runner.kind``) in worker processes that reach the served checkpoint over HTTP."""
        desc = f"{LABEL}: {Path(model_dir).name}"
        with self.policy_for(Path(model_dir)) as policy:
            lib = (load_library(self.library, self.spec.domain.name, sandbox=self.params.sandbox)
                   if self.library is not None and self.executor is None else None)
            try:
                for err in (lib.load_errors if lib is not None else []):
                    log.warning("skill library: %s", err)
                trajs = [r.traj for r in run_episodes(self.spec, questions, policy=policy, teacher=self.teacher,
                                                      library=lib, opened=self.index, executor=self.executor,
                                                      desc=desc)]
            finally:
                if lib is not None:
                    lib.close()
        failed = [t for t in trajs if t.terminated == "error"]
        first = (failed[0].pf_errors or ["no error recorded"])[0] if failed else ""
        if trajs and len(failed) == len(trajs):
            raise RecipeError(f"{desc}: all {len(trajs)} sampled episodes failed; first: {first}")
        if failed:
            log.warning("%s: %d of %d sampled episodes failed and are left out of the rows; first: %s", desc,
                        len(failed), len(trajs), first)
        trajs = [t for t in trajs if t.terminated != "error"]
        self.calls.append({"model_dir": str(model_dir), "n": len(trajs), "failed": len(failed),
                           "em": sum(t.em for t in trajs) / len(trajs) if trajs else 0.0})
        return trajs
