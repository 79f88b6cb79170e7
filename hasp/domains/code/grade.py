"""Grade code-domain items: a dataset item's tests against a candidate program.

The isolation itself is ``hasp.sandbox.program.run_program`` (shared with every
other untrusted-code path); this module only knows ``CodeItem`` and how many
programs to grade at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from hasp.llm.cancel import worker_pool
from hasp.sandbox.program import TestResult, run_program

if TYPE_CHECKING:
    from hasp.domains.code.datasets import CodeItem


def pass_at_1(results: Iterable[TestResult | bool]) -> float:
    """Fraction of problems solved with one sample each (0.0 for no results)."""
    vals = [r.passed if isinstance(r, TestResult) else bool(r) for r in results]
    return sum(vals) / len(vals) if vals else 0.0


def run_tests(solution_code: str, item: CodeItem, *, timeout_s: float = 10.0, memory_mb: int = 512,
              **kw: Any) -> TestResult:
    """Run ``item.tests`` against a complete program ``solution_code`` in the sandbox. The item's
    own code (``prefix``: HumanEval's prompt) runs on the checker's side too, so the helpers the
    tests call (``poly`` in HumanEval/32) are the problem's, whatever the program redefines."""
    return run_program(solution_code, item.tests, item.entry_point, prefix=item.prefix, timeout_s=timeout_s,
                       memory_mb=memory_mb, **kw)


def run_many(jobs: Sequence[tuple[str, CodeItem]], *, workers: int = 2, **kw: Any) -> list[TestResult]:
    """``run_tests`` over (solution, item) pairs with bounded parallelism, in input order."""
    if workers <= 1 or len(jobs) <= 1:
        return [run_tests(s, it, **kw) for s, it in jobs]
    with worker_pool(workers, "hasp-code-sbx") as ex:
        return list(ex.map(lambda j: run_tests(j[0], j[1], **kw), jobs))
