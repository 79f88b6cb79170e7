"""The episode function of one evaluation cell, built in this process or in a worker.

``cell_episode`` wraps a domain's episode (``hasp.eval.episodes``) with what every evaluated
episode gets: its start time, error containment (an episode that raises becomes a
``terminated="error"`` record, counted apart) and the judge. The threaded runner calls it with live
clients; ``EvalCellSpec`` is the same cell as picklable data, from which a worker process of a
task runner builds it with clients, a library and a retriever of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasp.agent.remote import BuiltEpisode
from hasp.agent.variants import Variant
from hasp.config import Params
from hasp.eval.datasets import EvalDataset
from hasp.eval.episodes import episodes, item_identity
from hasp.eval.judge import judge_answer
from hasp.eval.records import EpisodeRecord
from hasp.llm.client import LLMConfig
from hasp.records import Trajectory

log = logging.getLogger(__name__)


def cell_episode(params: Params, ds: EvalDataset, variant: Variant, label: str, *, policy: Any, lib: Any,
                 teacher: Any, judge: bool, snippets: bool) -> Callable[[Any], EpisodeRecord]:
    episode = episodes(params, ds, variant, policy=policy, library=lib, teacher=teacher, snippets=snippets,
                       label=label)

    def run(item: Any) -> EpisodeRecord:
        start_ns = time.time_ns()
        error, stats = "", None
        try:
            traj, stats = episode(item)
        except Exception as exc:  # noqa: BLE001 - contained per episode, counted; all-failed cells raise
            error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("%s/%s %s: episode failed: %s", ds.name, label, item_identity(item)[0], error)
            traj = failed_trajectory(item, label, (time.time_ns() - start_ns) / 1e9)
        verdict = None
        if judge and not error:
            _, question, answers = item_identity(item)
            verdict = judge_answer(teacher, question, answers, traj.prediction,
                                   max_tokens=params.eval.judge_max_tokens)
        return EpisodeRecord(traj, start_ns, stats, verdict, error)

    return run


def failed_trajectory(item: Any, label: str, wall_s: float = 0.0) -> Trajectory:
    """The trajectory of an episode that did not run to its end: an infrastructure error, not a PF's."""
    qid, question, answers = item_identity(item)
    return Trajectory(qid=qid, question=question, answers=answers, variant=label, terminated="error", wall_s=wall_s)


@dataclass(frozen=True)
class EvalCellSpec:
    """One cell as a worker needs it: the dataset without its items (``EvalDataset.shipped``), the
    arm's label and variant, the library folder (None: no skills) and the endpoints."""

    params: Params
    dataset: EvalDataset
    label: str
    variant: Variant
    library_root: Path | None
    policy: LLMConfig
    teacher: LLMConfig | None
    judge: bool
    snippets: bool

    def build(self) -> BuiltEpisode:
        from hasp.llm.client import LLMClient
        from hasp.pf.library import load_library

        ds = self.dataset.with_retriever(self.params)
        lib = (load_library(self.library_root, ds.domain, sandbox=self.params.sandbox)
               if self.library_root is not None else None)
        policy = LLMClient(self.policy)
        teacher = LLMClient(self.teacher) if self.teacher is not None else None
        run = cell_episode(self.params, ds, self.variant, self.label, policy=policy, lib=lib, teacher=teacher,
                           judge=self.judge, snippets=self.snippets)
        return BuiltEpisode.holding(run, lib, policy, teacher)

    def failed(self, item: Any, error: str) -> EpisodeRecord:
        log.warning("%s/%s %s: episode lost: %s", self.dataset.name, self.label, item_identity(item)[0], error)
        return EpisodeRecord(failed_trajectory(item, self.label), time.time_ns(), None, None, error[:500])
