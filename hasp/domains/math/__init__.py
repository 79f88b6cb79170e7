"""Math domain: Game of 24 (exact solver, generator, verifier), AIME/AMC/AgentFlow loaders,
answer extraction and equivalence, and the single-step environment the ``pre_final`` PFs hook.

The package root re-exports the data-side API; the environment (which imports the PF dispatcher)
lives in ``hasp.domains.math.task``.
"""

from .answers import (
    answers_equivalent,
    arithmetic_claims,
    clean_answer,
    extract_final_answer,
    is_equivalent_any,
    normalize_answer,
    parse_number,
)
from .datasets import (
    MathDataError,
    MathItem,
    game24_items,
    load_agentflow,
    load_aime24,
    load_amc23,
    load_game24_csv,
    load_math_dataset,
    load_math_jsonl,
)
from .game24 import (
    Verdict,
    all_tuples,
    evaluate_arithmetic,
    is_solvable,
    numbers_from_text,
    solvable_tuples,
    solve,
    verify_expression,
)

__all__ = [
    "MathDataError", "MathItem", "Verdict", "all_tuples", "answers_equivalent", "arithmetic_claims",
    "clean_answer", "evaluate_arithmetic", "extract_final_answer", "game24_items", "is_equivalent_any",
    "is_solvable", "load_agentflow", "load_aime24", "load_amc23", "load_game24_csv", "load_math_dataset",
    "load_math_jsonl", "normalize_answer", "numbers_from_text", "parse_number", "solvable_tuples", "solve",
    "verify_expression",
]
