"""Glue between the search domain and the agent loop: data → episodes → scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hasp.agent.loop import AgentConfig, Policy, episode_runner
from hasp.records import Trajectory
from hasp.agent.variants import Variant
from hasp.domains.search.generator import QAItem, load_corpus, load_questions
from hasp.domains.search.metrics import exact_match, f1
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.tools import SearchEnvironment
from hasp.config import HarnessParams
from hasp.pf.base import Teacher
from hasp.pf.library import SkillLibrary


def score(pred: str, golds: list[str]) -> tuple[float, float]:
    return exact_match(pred, golds), f1(pred, golds)


@dataclass
class SearchTask:
    """A prepared data directory (corpus.jsonl + split files) with its BM25 index."""

    data_dir: Path
    retriever: BM25Retriever

    @classmethod
    def load(cls, data_dir: Path) -> "SearchTask":
        return cls(data_dir=data_dir, retriever=BM25Retriever.from_corpus(load_corpus(data_dir / "corpus.jsonl")))

    def questions(self, split: str, limit: int | None = None) -> list[QAItem]:
        items = load_questions(self.data_dir / f"{split}.jsonl")
        return items[:limit] if limit else items

    def episode_fn(self, *, policy: Policy, library: SkillLibrary | None, cfg: AgentConfig,
                   variant: Variant, top_k: int = 3, snippet_chars: int = 200, read_chars: int = 2000,
                   teacher: Teacher | None = None, label: str | None = None,
                   harness: HarnessParams | None = None) -> Callable[[QAItem], Trajectory]:
        """``item -> Trajectory`` for ``variant`` through the harness (``hasp.agent.loop.episode_runner``)."""

        def make_env() -> SearchEnvironment:
            return SearchEnvironment(self.retriever, top_k=top_k, snippet_chars=snippet_chars,
                                     read_chars=read_chars)

        return episode_runner(policy=policy, library=library, cfg=cfg, variant=variant, params=harness,
                              make_env=make_env, teacher=teacher, scorer=score, label=label)

