"""The Python front door: declare a task in your code, evaluate it, or run an agent on one question.

    from hasp.api import Task, Tool, evaluate, agent

    task = Task(name="unit_convert", tools=[Tool("CONVERT", convert, "converts a length")],
                items=[{"question": "How many km is 3 miles?", "answers": ["4.828"]}], scorer=my_score)
    metrics = evaluate(task, ["react", "pf"], library="skills/")    # the same cells as `hasp eval`
    with agent(task, library="skills/") as a:
        print(a.run("How many feet are 2 m?").prediction)

``evaluate`` writes what ``hasp eval`` writes (trajectories, ``metrics.json``, one MLflow parent run
with a nested run per cell) and returns the metrics; a built-in domain is named by a string
(``"search"`` with ``datasets=["mine/"]``, the plain data format of ``hasp.domains.search.plain_data``).
``agent`` starts the configured policy (the embedded model by default) once and runs questions
through the same episode recipe. A task that tools and a scorer cannot say (state across steps, its
own step budget) subclasses ``Domain``, whose instances search, math and code are too, and is passed
wherever a ``Task`` is. Every call reads ``params`` like the CLI does: a path, or None for
``./params.yaml`` when there is one, else the defaults.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hasp.agent.tool_env import Tool, ToolEnvironment
from hasp.episode.domains import Domain
from hasp.episode.task import Item, Task, TaskError, exact_match
from hasp.records import Trajectory

__all__ = ["Domain", "Item", "Task", "TaskError", "Tool", "ToolEnvironment", "agent", "evaluate", "exact_match"]


def _params(params: str | Path | None, overrides: dict[str, Any] | None = None) -> Any:
    from hasp.config import load_params, params_file

    return load_params(params_file(Path(params) if params is not None else None), overrides)


def evaluate(task: Task | Domain | str, variants: Sequence[str] = ("react", "pf"), *, library: str | Path | None = None,
             datasets: Sequence[str] = (), params: str | Path | None = None, limit: int | None = None,
             out: str | Path = "outputs/evaluations", skills: Sequence[str] = (), run_name: str | None = None,
             traces: bool = False, progress: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """Evaluate ``variants`` on a task (a ``Task``, a ``Domain`` of the user's, or a built-in domain's name
    with ``datasets``);
    returns ``{dataset: {variant: summary}}`` as in ``metrics.json``. ``skills`` restricts the library
    to those ids (``hasp eval --skills``)."""
    from hasp.agent.variants import get_variant
    from hasp.eval.cli import _run, run_provenance, task_inputs
    from hasp.eval.datasets import load_datasets
    from hasp.eval.runner import check_teacher_needs, check_variants
    from hasp.seeds import seed_library

    p = _params(params, {"harness.only_skills": list(skills)} if skills else None)
    if isinstance(task, (Task, Domain)):
        lib = Path(library) if library is not None else (Path(task.library) if task.library is not None else None)
        sets, _ = task_inputs(task, list(variants), list(datasets), limit, lib, p)
    else:
        vs = [get_variant(v) for v in variants]
        check_teacher_needs(vs, judge=False, snippets=False, have_teacher=p.teacher.configured)
        sets = load_datasets(task, list(datasets), p, limit=limit)
        lib = Path(library) if library is not None else seed_library(task)
        check_variants(task, vs)
        if not lib.is_dir():
            raise FileNotFoundError(f"skill library {lib} is not a folder")
    data = Path("outputs/data")
    prov = run_provenance(p, sets, data, lib, None)
    res, _ = _run(p, sets, list(variants), lib, Path(out), None, None, False, False, traces, run_name, progress,
                  limit, prov)
    return res.metrics()


class _Agent:
    """One variant of a task's agent with a live policy; ``run(question)`` is one episode."""

    def __init__(self, task: Task | Domain, spec: Any, policy: Any, lib: Any) -> None:
        self.task, self._spec, self._policy, self._lib = task, spec, policy, lib
        self._run = spec.runner(policy=policy, library=lib)

    def run(self, question: str, answers: Sequence[str] = ("",)) -> Trajectory:
        """One episode on ``question`` (``answers``, when known, grade it); the trajectory has every
        step, the PF fires with their reasons and the prediction."""
        record = self._run(Item(f"{self.task.name}-ask", question, list(answers)))
        if record.error:
            raise RuntimeError(f"episode failed: {record.error}")
        return record.traj


@contextlib.contextmanager
def agent(task: Task | Domain, variant: str = "pf", *, library: str | Path | None = None,
          params: str | Path | None = None) -> Iterator[_Agent]:
    """A task's agent with the configured policy started once (stopped on exit)."""
    from hasp.episode.spec import episode_spec
    from hasp.episode.task import as_domain, check_task
    from hasp.llm.endpoints import policy_client
    from hasp.pf.library import load_library

    check_task(task, task.name)
    p = _params(params)
    domain = as_domain(task)
    root = Path(library) if library is not None else (Path(task.library) if task.library is not None else None)
    spec = episode_spec(p, domain, variant, library=root)
    lib = load_library(root, task.name, sandbox=p.sandbox) if root is not None else None
    try:
        with policy_client(p.llm, max_tokens=spec.agent.max_tokens) as pol:
            yield _Agent(task, spec, pol, lib)
    finally:
        if lib is not None:
            lib.close()
