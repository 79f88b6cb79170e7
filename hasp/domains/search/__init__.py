"""Search domain: generated multi-hop benchmark, BM25 retrieval, SEARCH/READ tools, EM/F1.

Import retrieval from ``hasp.domains.search.retriever`` and the tools from ``.tools``; this
package root stays light (no bm25s/numpy) so the CLI starts fast.
"""

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
    "DEFAULT_FRACTIONS", "Benchmark", "BenchmarkFormatError", "QAItem", "exact_match", "f1",
    "generate_benchmark", "load_corpus", "load_questions", "normalize_answer", "split", "write_benchmark",
]
