"""A prepared search data folder (questions and the BM25 index of its corpus) and the search score."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hasp.domains.search.generator import QAItem, load_corpus, load_questions, load_template_seen
from hasp.domains.search.metrics import exact_match, f1
from hasp.domains.search.retriever import BM25Retriever


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

    def template_seen(self, split: str) -> dict[str, bool]:
        """Benchmark v2: whether train/val use each question's template (empty for version 1)."""
        return load_template_seen(self.data_dir / f"{split}.jsonl")
