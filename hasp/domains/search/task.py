"""Glue between the search domain and the agent loop: data → episodes → scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hasp.agent.loop import AgentConfig, Policy, run_episode
from hasp.agent.records import Trajectory
from hasp.agent.variants import Variant
from hasp.domains.search.generator import QAItem, load_corpus, load_questions
from hasp.domains.search.metrics import exact_match, f1
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.tools import SearchEnvironment
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
                   teacher: Teacher | None = None,
                   label: str | None = None) -> Callable[[QAItem], Trajectory]:
        pfs = library.pfs() if (library is not None and variant.use_pfs) else []
        skills_text = skills_prompt(library) if (library is not None and variant.skills_in_prompt) else ""
        vcfg = AgentConfig(**{**cfg.__dict__, "use_pfs": variant.use_pfs,
                              "skills_in_prompt": variant.skills_in_prompt})

        def run(item: QAItem) -> Trajectory:
            env = SearchEnvironment(self.retriever, top_k=top_k, snippet_chars=snippet_chars,
                                    read_chars=read_chars)
            return run_episode(qid=item.id, question=item.question, answers=item.answers,
                               policy=policy, env=env, pfs=pfs, cfg=vcfg, variant=label or variant.name,
                               teacher=teacher, skills_text=skills_text, scorer=score)

        return run


def skills_prompt(library: SkillLibrary, limit: int = 8) -> str:
    """Prompt-only rendering of the library: one line per skill summary."""
    lines = [f"- {s.spec.system_summary or s.spec.description}" for s in library.skills[:limit]]
    return "\n".join(lines)
