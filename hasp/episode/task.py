"""A user's own task, declared in their code: items, tools as actions, a prompt, a scorer.

Why: search, math and code are built in, but the user of an agent framework has a task of their
own. ``Task`` holds what the runner needs, in the user's terms, and ``TaskDomain`` makes it a domain
like the built-in ones, so ``hasp eval --domain pkg.module:attr``, ``hasp.api.evaluate`` and the
harness (PF selection, dispatch, audit records, MLflow cells) run it unchanged. Items are rows
``{question, answers[, id]}`` (dicts or objects with those attributes); the scorer is
``scorer(prediction, answers) -> score`` (a float in [0, 1], or an ``(em, f1)`` pair), exact match by
default. A scorer that raises is the task's failure: the episode is recorded as failed with one
line naming the task and the scorer, and the other episodes are still scored.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasp.agent.loop import AgentConfig, Environment, agent_config
from hasp.agent.tool_env import Tool, ToolEnvironment, check_tools
from hasp.agent.variants import Variant
from hasp.episode.domains import Domain
from hasp.config import HarnessParams, Params
from hasp.records import Trajectory

__all__ = ["Item", "Task", "TaskDomain", "TaskError", "as_domain", "check_task", "exact_match", "load_task",
           "registered_tasks", "task_items"]

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


class TaskError(ValueError):
    """A task object or one of its items or attributes that cannot run; the message names it."""


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s.]", " ", str(text).lower())).strip()


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the prediction equals one answer after lower-casing and dropping punctuation but '.'."""
    return float(any(_norm(prediction) == _norm(a) for a in answers))


@dataclass(frozen=True)
class Item:
    """One question of a task and the answers that count as right."""

    id: str
    question: str
    answers: list[str]


@dataclass(frozen=True)
class Task:
    """A task declared in user code (see the module doc).

    ``name``: lower-case, the dataset and domain label in tables and MLflow. ``items``: the rows, or a
    callable returning them. ``instructions``: the system prompt's first line (the action list follows).
    ``demo``: optional demonstration turns. ``ceiling``: optional ``ceiling(items) -> float``, the
    score a deterministic extractor reaches, reported beside the agent's. ``max_steps``: the step
    budget (``agent.max_steps`` when None). ``library``: the task's default skill folder."""

    name: str
    tools: Sequence[Tool]
    items: Sequence[Any] | Callable[[], Sequence[Any]] = ()
    instructions: str = ""
    scorer: Callable[[str, list[str]], Any] = exact_match
    demo: Sequence[dict[str, str]] = ()
    ceiling: Callable[[list[Item]], float] | None = None
    max_steps: int | None = None
    library: str | Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str = "task") -> None:
        """One ``TaskError`` naming ``where`` and the attribute for a task that cannot run."""
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise TaskError(f"{where}.name: {self.name!r} must be a lower-case word ({_NAME.pattern})")
        if self.name in ("search", "math", "code"):
            raise TaskError(f"{where}.name: {self.name!r} is a built-in domain's name")
        try:
            check_tools(list(self.tools), where)
        except ValueError as e:
            raise TaskError(str(e)) from None
        if not callable(self.scorer):
            raise TaskError(f"{where}.scorer: not callable")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise TaskError(f"{where}.max_steps: must be a whole number >= 1 (got {self.max_steps!r})")


def task_items(task: Task, where: str = "task") -> list[Item]:
    """The task's rows as ``Item``s; a row without a question or answers is one ``TaskError`` naming it."""
    rows = task.items() if callable(task.items) else task.items
    out, seen = [], set()
    for i, row in enumerate(rows or ()):
        get = row.get if isinstance(row, dict) else (lambda k, d=None, r=row: getattr(r, k, d))
        q, answers = get("question"), get("answers", None)
        if answers is None and get("answer") is not None:
            answers = [get("answer")]
        if not isinstance(q, str) or not q.strip():
            raise TaskError(f"{where}.items[{i}]: field 'question' must be a non-empty string")
        if isinstance(answers, str) or not isinstance(answers, (list, tuple)) or not answers:
            raise TaskError(f"{where}.items[{i}]: field 'answers' must be a non-empty list of strings")
        qid = str(get("id") or f"{task.name}-{i}")
        if qid in seen:
            raise TaskError(f"{where}.items[{i}]: duplicate id {qid!r}")
        seen.add(qid)
        out.append(Item(qid, q.strip(), [str(a) for a in answers]))
    return out


#: the entry point group a package registers its tasks under, so ``--domain NAME`` finds them:
#: ``[project.entry-points."hasp.tasks"] unit_convert = "mypkg.task:unit_task"``
TASK_ENTRY_POINTS = "hasp.tasks"


def registered_tasks() -> dict[str, str]:
    """``{name: "pkg.module:attr"}`` of every task installed packages register (``TASK_ENTRY_POINTS``)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=TASK_ENTRY_POINTS)}


def load_task(ref: str) -> Task | Domain:
    """The ``Task`` or user ``Domain`` at ``pkg.module:attr`` (the current folder is importable, as for
    ``python -m``), or the one an installed package registers as ``ref`` (``TASK_ENTRY_POINTS``);
    ``attr`` may be a function or class returning one."""
    if ":" not in ref:
        found = registered_tasks()
        if ref not in found:
            raise TaskError(f"--domain {ref!r}: not a built-in domain (search, math, code), not pkg.module:attr, "
                            f"and no installed package registers a task of that name under the "
                            f"{TASK_ENTRY_POINTS!r} entry points (registered: {', '.join(sorted(found)) or 'none'})")
        try:
            return load_task(found[ref])
        except TaskError as e:
            raise TaskError(f"{e} (the {TASK_ENTRY_POINTS!r} entry point {ref!r})") from None
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise TaskError(f"--domain {ref!r}: a task is named pkg.module:attr")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise TaskError(f"--domain {ref!r}: cannot import {mod_name}: {e}") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise TaskError(f"--domain {ref!r}: {mod_name} has no attribute {attr!r}")
    task = obj
    if callable(obj) and not isinstance(obj, (Task, Domain)):
        try:
            takes_none = not any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                 for p in inspect.signature(obj).parameters.values())
        except (TypeError, ValueError):
            takes_none = False
        task = obj() if takes_none else obj
    if not isinstance(task, (Task, Domain)):
        raise TaskError(f"--domain {ref!r}: {attr} is a {type(task).__name__}, not a hasp Task or Domain")
    check_task(task, ref)
    return task


def check_task(task: Task | Domain, where: str = "task") -> None:
    """One ``TaskError`` naming ``where`` and the attribute for a ``Task`` or a user's ``Domain`` that
    cannot run: a domain needs a lower-case ``name`` of its own, ``action_types`` of upper-case words
    ending in FINAL, and its own ``environment``."""
    if isinstance(task, Task):
        task.check(where)
        return
    name = getattr(task, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TaskError(f"{where}.name: {name!r} must be a lower-case word ({_NAME.pattern})")
    if name in ("search", "math", "code") and type(task).__module__.split(".")[0] != "hasp":
        raise TaskError(f"{where}.name: {name!r} is a built-in domain's name")
    acts = task.action_types
    from hasp.agent.parser import ACTION_NAME

    if (not isinstance(acts, tuple) or not acts or acts[-1] != "FINAL"
            or not all(isinstance(a, str) and ACTION_NAME.fullmatch(a) for a in acts) or len(set(acts)) != len(acts)):
        raise TaskError(f"{where}.action_types: {acts!r} must be distinct upper-case action names ending in 'FINAL'")
    if type(task).environment is Domain.environment:
        raise TaskError(f"{where}.environment: {type(task).__name__} does not define it (each item's environment)")


def as_domain(task: Task | Domain) -> Domain:
    """The domain a task's episodes run in: a ``Task`` through ``TaskDomain``, a ``Domain`` as it is."""
    return task if isinstance(task, Domain) else TaskDomain(task)


@dataclass(frozen=True)
class TaskDomain(Domain):
    """A ``Task`` as a domain of the episode recipe (``hasp.episode.domains``); a task reports its own
    ceiling (``Task.ceiling``), not the vocabulary extractor's."""

    task: Task

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.task.name

    @property
    def library(self) -> str | Path | None:  # type: ignore[override]
        return self.task.library

    @property
    def action_types(self) -> tuple[str, ...]:
        return (*(t.name for t in self.task.tools), "FINAL")

    @property
    def action_forms(self) -> tuple[str, ...]:
        return (*(f"{t.name}[{t.argument}]" for t in self.task.tools), "FINAL[answer]")

    def load_items(self) -> list[Any] | None:
        return task_items(self.task, self.name) if self.task.items else None

    def config(self, params: Params, variant: Variant) -> AgentConfig:
        cfg = agent_config(params)
        if self.task.max_steps is not None:
            cfg.max_steps = self.task.max_steps
        return cfg

    def harness(self, params: Params) -> HarnessParams:
        """FINAL-time handler votes send the agent back to SEARCH: off unless the task has that tool."""
        if "SEARCH" in self.action_types:
            return params.harness
        return params.harness.model_copy(update={"enable_skill_handlers": False})

    def environment(self, item: Any, opened: Any, *, params: Params, cfg: AgentConfig, teacher: Any,
                    snippets: bool) -> Environment:
        return ToolEnvironment(self.task.tools, instructions=self.task.instructions, demo=self.task.demo,
                               scorer=self.score)

    def score(self, traj: Trajectory) -> tuple[float, float]:
        """The task's scorer on the episode's answer; ``(em, f1)`` (a single score stands for both)."""
        try:
            got = self.task.scorer(traj.prediction or "", list(traj.answers))
        except Exception as e:  # noqa: BLE001 - named and re-raised: the episode is recorded as failed
            raise TaskError(f"task {self.name}.scorer raised {type(e).__name__}: {e}"[:300]) from e
        if isinstance(got, tuple) and len(got) == 2:
            return float(got[0]), float(got[1])
        return float(got), float(got)
