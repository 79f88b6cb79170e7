"""The search rollout of Phase A and the val gate, as an episode spec a worker process can build.

``rollout_episode`` is the one place the episode function of a pipeline rollout is put together:
the threaded run calls it with the live policy, teacher and library, and ``SearchRolloutSpec.build``
calls it in a worker with clients and a library of its own, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasp.agent.loop import agent_config
from hasp.agent.remote import BuiltEpisode
from hasp.agent.variants import get_variant
from hasp.config import Params
from hasp.domains.search.task import SearchTask
from hasp.llm.client import LLMConfig
from hasp.records import Trajectory


def rollout_episode(params: Params, task: SearchTask, library: Any, variant: str, label: str | None, *,
                    policy: Any, teacher: Any) -> Callable[[Any], Trajectory]:
    """``item -> Trajectory`` of ``variant`` under the params' agent budgets and harness."""
    a = params.agent
    return task.episode_fn(policy=policy, library=library, cfg=agent_config(params), variant=get_variant(variant),
                           top_k=a.top_k, snippet_chars=a.snippet_chars, read_chars=a.read_chars,
                           teacher=teacher, label=label, harness=params.harness)


@dataclass(frozen=True)
class SearchRolloutSpec:
    """What a worker needs to run the rollout: params, the data folder, the library folder (None:
    no skills), the variant and label, and the endpoints of the policy and teacher."""

    params: Params
    data_dir: Path
    library_root: Path | None
    variant: str
    label: str | None
    policy: LLMConfig
    teacher: LLMConfig | None = None

    def build(self) -> BuiltEpisode:
        from hasp.llm.client import LLMClient
        from hasp.pf.library import load_library

        task = SearchTask.load(self.data_dir)
        lib = (load_library(self.library_root, "search", sandbox=self.params.sandbox)
               if self.library_root is not None else None)
        policy = LLMClient(self.policy)
        teacher = LLMClient(self.teacher) if self.teacher is not None else None
        run = rollout_episode(self.params, task, lib, self.variant, self.label, policy=policy, teacher=teacher)
        return BuiltEpisode.holding(run, lib, policy, teacher)

    def failed(self, item: Any, error: str) -> Trajectory:
        """An episode the runner lost: an infrastructure failure, counted apart from wrong answers."""
        return Trajectory(qid=item.id, question=item.question, answers=list(item.answers),
                          variant=self.label or self.variant, terminated="error", pf_errors=[error[:500]])
