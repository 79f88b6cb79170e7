"""Search domain: generated multi-hop benchmark, BM25 retrieval, SEARCH/READ tools, EM/F1.

Only the generator and metrics are imported eagerly; retrieval pulls in ``bm25s``/numpy, so it is
imported on first attribute access to keep ``import hasp.domains.search`` cheap."""

from __future__ import annotations

from typing import Any

from .generator import (
    DEFAULT_FRACTIONS,
    Benchmark,
    BenchmarkFormatError,
    QAItem,
    generate_benchmark,
    load_corpus,
    load_questions,
    split,
    write_benchmark,
)
from .metrics import exact_match, f1, normalize_answer

__all__ = [
    "DEFAULT_FRACTIONS",
    "BM25Retriever",
    "Benchmark",
    "BenchmarkFormatError",
    "Hit",
    "QAItem",
    "SearchEnvironment",
    "exact_match",
    "f1",
    "generate_benchmark",
    "load_corpus",
    "load_questions",
    "normalize_answer",
    "split",
    "write_benchmark",
]

_LAZY = {"BM25Retriever": "retriever", "Hit": "retriever", "SearchEnvironment": "tools"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
