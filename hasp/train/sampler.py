"""The rollout sampler of RS and OPD: the PF agent on training questions, run by a served checkpoint.

``run_rounds`` asks ``sample(questions, model_dir)`` for trajectories of the checkpoint a round starts
from. Here that is: serve ``model_dir`` as a sampling policy (``train.rollout``'s temperature and
top-p), then run the search agent with PFs active on every asked question (each question arrives k
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

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ContextManager

from hasp.agent.loop import AgentConfig, Policy, agent_config, episode_runner
from hasp.agent.remote import BuiltEpisode, EpisodeExecutor
from hasp.agent.rollout import run_many
from hasp.agent.variants import get_variant
from hasp.config import Params, RolloutParams
from hasp.llm.client import LLMConfig
from hasp.records import Trajectory
from hasp.train.rounds import RecipeError

log = logging.getLogger(__name__)

PolicyFor = Callable[[Path], ContextManager[Policy]]
#: port offset of the sampling server from ``llm.port`` (greedy policy +0, trained +1, student +2)
SAMPLER_PORT_OFFSET = 3
LABEL = "train_rollout"


def rollout_config(params: Params, rollout: RolloutParams) -> AgentConfig:
    """The agent's config with the rollout's budgets and temperature; no fixed seed, so the k samples
    of one question differ (a per-request seed would reseed the server's shared generator)."""
    return replace(agent_config(params), max_steps=rollout.max_steps, max_search_calls=rollout.max_search_calls,
                   max_read_calls=rollout.max_read_calls, temperature=rollout.temperature, use_pfs=True,
                   seed=None)


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


def training_questions(data_dir: Path, split: str = "train") -> list[Any]:
    """The questions RS and OPD sample on (the generated benchmark's train split)."""
    from hasp.domains.search.task import SearchTask

    path = Path(data_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise RecipeError(f"{path}: no such file; prepare the data first (hasp data prepare --out {data_dir})")
    return SearchTask.load(Path(data_dir)).questions(split)


class PFRolloutSampler:
    """``sample(questions, model_dir) -> trajectories`` over a prepared data folder and a skill library.

    ``teacher`` (an LLM client) makes the agent ``pf_teacher`` and supplies snippets when
    ``rollout.teacher_snippets`` is on; snippets without a teacher are refused before any server starts.
    ``calls`` records (model folder, questions, trajectories) per call, for the run's summary."""

    def __init__(self, params: Params, data_dir: Path, library: Path | None, *, rollout: RolloutParams,
                 policy_for: PolicyFor | None = None, teacher: Any = None,
                 executor: EpisodeExecutor | None = None) -> None:
        if rollout.teacher_snippets and teacher is None:
            raise RecipeError("train.rollout.teacher_snippets needs a teacher: set teacher.base_url and "
                              "teacher.model, or train.rollout.teacher_snippets: false")
        from hasp.domains.search.task import SearchTask

        self.params, self.rollout, self.teacher, self.executor = params, rollout, teacher, executor
        self.data_dir = Path(data_dir)
        self.library = Path(library) if library is not None else None
        self.task = SearchTask.load(self.data_dir)
        self.policy_for = policy_for or served_policy(params, rollout)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, questions: Sequence[Any], model_dir: Path) -> list[Trajectory]:
        """The trajectories of ``questions`` sampled from ``model_dir``: on threads here, or through
        ``executor`` (``runner.kind``) in worker processes that reach the served checkpoint over HTTP."""
        from hasp.agent.remote import endpoint_of

        desc = f"{LABEL}: {Path(model_dir).name}"
        with self.policy_for(Path(model_dir)) as policy:
            if self.executor is None:
                with _library(self.params, self.library) as lib:
                    episode = contained(sample_episode(self.params, self.rollout, self.task, lib, policy=policy,
                                                       teacher=self.teacher))
                    trajs = run_many(list(questions), episode, concurrency=self.params.llm.max_concurrency,
                                     desc=desc)
            else:
                spec = TrainingSampleSpec(self.params, self.rollout, self.data_dir, self.library,
                                          endpoint_of(policy, "policy"), endpoint_of(self.teacher, "teacher"))
                trajs = self.executor.run(spec, list(questions), desc=desc)
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


def failed_sample(item: Any, error: str) -> Trajectory:
    """An episode that did not run to its end (the endpoint failed after the client's retries, a harness
    bug): an infrastructure failure, not a sample of the checkpoint, so it never becomes a row."""
    return Trajectory(qid=item.id, question=item.question, answers=list(item.answers), variant=LABEL,
                      terminated="error", pf_errors=[error[:500]])


def contained(episode: Callable[[Any], Trajectory]) -> Callable[[Any], Trajectory]:
    """``episode`` with its exceptions turned into ``failed_sample`` trajectories, so one episode whose
    endpoint gave up cannot discard every other sample of the round (as the evaluation runner does)."""

    def run(item: Any) -> Trajectory:
        try:
            return episode(item)
        except Exception as exc:  # noqa: BLE001 - contained per episode, counted; an all-failed round raises
            log.warning("%s %s: sampled episode failed: %s: %s", LABEL, getattr(item, "id", "?"),
                        type(exc).__name__, exc)
            return failed_sample(item, f"{type(exc).__name__}: {exc}")

    return run


def sample_episode(params: Params, rollout: RolloutParams, task: Any, library: Any, *, policy: Policy,
                   teacher: Any) -> Callable[[Any], Trajectory]:
    """``item -> Trajectory``: the PF agent (``pf_teacher`` with a teacher) under the rollout's budgets
    and sampling, in teacher-snippet mode when the rollout asks for it. The threaded sampler and a
    worker's ``TrainingSampleSpec`` both build it here, so the two cannot drift apart."""
    from hasp.domains.search.task import score
    from hasp.domains.search.teacher_snippets import TeacherSnippetEnvironment
    from hasp.domains.search.tools import SearchEnvironment

    a, e = params.agent, params.eval

    def make_env() -> Any:
        env: Any = SearchEnvironment(task.retriever, top_k=a.top_k, snippet_chars=a.snippet_chars,
                                     read_chars=a.read_chars)
        if rollout.teacher_snippets:
            env = TeacherSnippetEnvironment(env, teacher, max_tokens=e.snippet_max_tokens,
                                            doc_chars=e.snippet_doc_chars)
        return env

    variant = get_variant("pf_teacher" if teacher is not None else "pf")
    return episode_runner(policy=policy, library=library, cfg=rollout_config(params, rollout), variant=variant,
                          params=params.harness, make_env=make_env, teacher=teacher, scorer=score, label=LABEL)


@contextlib.contextmanager
def _library(params: Params, root: Path | None) -> Iterator[Any]:
    from hasp.pf.library import load_library

    lib = load_library(root, "search", sandbox=params.sandbox) if root else None
    try:
        for err in (lib.load_errors if lib is not None else []):
            log.warning("skill library: %s", err)
        yield lib
    finally:
        if lib is not None:
            lib.close()


@dataclass(frozen=True)
class TrainingSampleSpec:
    """What a worker process needs to sample training trajectories: params, the rollout settings, the
    data and library folders, and the endpoints of the served checkpoint and the teacher."""

    params: Params
    rollout: RolloutParams
    data_dir: Path
    library: Path | None
    policy: LLMConfig
    teacher: LLMConfig | None = None

    def build(self) -> BuiltEpisode:
        from hasp.domains.search.task import SearchTask
        from hasp.llm.client import LLMClient

        policy = LLMClient(self.policy)
        teacher = LLMClient(self.teacher) if self.teacher is not None else None
        stack = contextlib.ExitStack()
        lib = stack.enter_context(_library(self.params, self.library))
        run = contained(sample_episode(self.params, self.rollout, SearchTask.load(self.data_dir), lib,
                                       policy=policy, teacher=teacher))
        return BuiltEpisode.holding(run, stack, policy, teacher)

    def failed(self, item: Any, error: str) -> Trajectory:
        """An episode the runner lost: an infrastructure failure, not a sample of the checkpoint."""
        return failed_sample(item, error)
