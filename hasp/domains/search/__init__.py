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
    # the generated benchmark: its types, how it is made, split and written, and how files are read back
    "DEFAULT_FRACTIONS", "Benchmark", "BenchmarkFormatError", "QAItem",
    "generate_benchmark", "split", "write_benchmark", "load_corpus", "load_questions",
    # answer scoring
    "exact_match", "f1", "normalize_answer",
]
