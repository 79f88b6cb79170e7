"""The task an evolution epoch runs (``evolve.domain``) and its train / val / test items.

Why one place: Phase A, the val gate, the anchors and judge runs, Phases B-F (the library of the
task's domain) and the epoch's evaluation all ask the same two questions, which domain and which items
of a split, so a user's task or math or code evolves through the very functions search does.

Search keeps its split files (``outputs/data/{train,val,test}.jsonl``, written by ``hasp data
prepare``). Math, code and user tasks have a pool of items without splits (``hasp eval --dataset``
names them, ``evolve.dataset`` here): the pool is put in an order drawn from a hash of each item's id
and ``data.seed``, cut to ``data.n_questions`` and split by ``data.fractions``, so a split is the same
on every machine and an item never moves between splits when the pool grows elsewhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.episode.domains import BUILT_IN, Domain, domain_named

__all__ = ["EpochTask", "epoch_task", "reads_split_files", "domain_name", "task_code_key", "too_small", "default_library", "epoch_domain", "SPLITS"]

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class EpochTask:
    """The domain of an epoch and, for a domain without split files, its whole pool of items."""

    domain: Domain
    #: the pool (an ``hasp.eval.datasets.EvalDataset`` of every item); None: the domain reads split files
    pool: Any = None
    seed: int = 0
    n_questions: int = 0
    fractions: tuple[float, float, float] = (0.35, 0.15, 0.5)

    @property
    def name(self) -> str:
        return self.domain.name

    def items(self, split: str, limit: int | None = None) -> list[Any]:
        """The items of ``split`` (train, val or test), cut to ``limit``."""
        if self.pool is None:
            return self.domain.items(split, limit)  # type: ignore[attr-defined]
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: a {self.name} epoch has {', '.join(SPLITS)}")
        ordered = sorted(self.pool.questions, key=lambda it: self._rank(it))[: self.n_questions or None]
        n = len(ordered)
        a = round(n * self.fractions[0])
        b = a + round(n * self.fractions[1])
        part = {"train": ordered[:a], "val": ordered[a:b], "test": ordered[b:]}[split]
        return part[:limit] if limit else part

    def _rank(self, item: Any) -> str:
        qid = self.domain.identity(item)[0]
        return hashlib.sha256(f"{self.seed}:{qid}".encode()).hexdigest()

    def dataset(self, params: Params, data_dir: Path, split: str) -> Any:
        """The evaluation dataset of ``split`` (what ``hasp.eval.runner.run_eval`` takes)."""
        from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec

        if self.pool is None:
            return load_eval_dataset(parse_dataset_spec("generated"), params, split=split, data_dir=data_dir)
        items = self.items(split)
        return replace(self.pool, split=split, questions=items, n_split=len(items))


def default_library(params: Params) -> Path | None:
    """The skill folder an epoch starts from when none is named: a built-in domain's seeds, a user task's
    ``Task.library`` (None when it declares none)."""
    from hasp.seeds import seed_library

    name = params.evolve.domain
    if name in BUILT_IN:
        return seed_library(name)
    from hasp.episode.task import load_task

    lib = load_task(name).library
    return Path(lib) if lib is not None else None


def too_small(task: EpochTask) -> str | None:
    """Why a pool cannot feed an epoch (a split without items), or None; search's split files are checked
    where they are written."""
    if task.pool is None:
        return None
    empty = [s for s in SPLITS if not task.items(s)]
    if not empty:
        return None
    return (f"evolve.domain {task.name}: {len(task.pool.questions)} items leave the {', '.join(empty)} split(s) empty "
            f"at data.n_questions={task.n_questions} and data.fractions={list(task.fractions)}; give more items "
            "or change the fractions")


def epoch_task(params: Params, data_dir: Path) -> EpochTask:
    """The ``EpochTask`` of ``evolve.domain`` (and ``evolve.dataset``); a task that cannot be loaded is
    one ``TaskError`` / ``DatasetSpecError`` line naming it. Kept per setting: every phase asks, and a
    pool such as every solvable 24-game takes seconds to build."""
    name, source = params.evolve.domain, params.evolve.dataset.strip()
    return _epoch_task(name, source, params.data.seed, params.data.n_questions, tuple(params.data.fractions),
                       str(data_dir), params)


def reads_split_files(params: Params) -> bool:
    """Whether the epoch's domain reads the split files ``hasp data prepare`` writes (search); math, code and
    a user task split their own items, so an epoch of theirs writes no search benchmark."""
    kind = BUILT_IN.get(params.evolve.domain)
    return kind is not None and hasattr(kind, "items")


def epoch_domain(params: Params) -> Domain:
    """The epoch's domain alone (its traits: detectors, actions, vocabulary), for phases that read no items."""
    return epoch_task(params, Path(".")).domain


def domain_name(params: Params) -> str:
    """The name of the epoch's domain (a user task's own ``name``): the library Phases B-F read and write."""
    name = params.evolve.domain
    if name in BUILT_IN:
        return name
    from hasp.episode.task import load_task

    return load_task(name).name


def task_code_key(params: Params) -> str:
    """The content hash of the files that declare a user task (empty for a built-in domain): a cached phase
    of a user task's epoch goes stale when the task's code (its tools, scorer, items) changes, as it does
    for an edit to the agent loop."""
    name = params.evolve.domain
    if name in BUILT_IN:
        return ""
    import inspect

    from hasp.episode.task import Task, load_task
    from hasp.fingerprint import content_hash, key_of

    task = load_task(name)
    if isinstance(task, Task):
        files = {inspect.getsourcefile(f) for f in (task.scorer, *(t.run for t in task.tools),
                                                     *((task.items,) if callable(task.items) else ()))
                 if inspect.isfunction(f) or inspect.ismethod(f)}
    else:  # a user's Domain: the file of its class
        files = {inspect.getsourcefile(type(task))}
    return key_of(*(content_hash(f) for f in sorted(f for f in files if f)))


_CACHE: dict[tuple[Any, ...], EpochTask] = {}


def _epoch_task(name: str, source: str, seed: int, n_questions: int, fractions: tuple[float, ...], data_dir: str,
                params: Params) -> EpochTask:
    from hasp.eval.datasets import default_dataset, load_single_step_dataset, task_dataset
    from hasp.eval.runner import domain_of

    key = (name, source, seed, n_questions, fractions, data_dir)
    if key in _CACHE:
        return _CACHE[key]
    split = dict(seed=seed, n_questions=n_questions, fractions=fractions)
    kind = BUILT_IN.get(name)
    if reads_split_files(params):
        task = EpochTask(domain_named(name, data_dir=Path(data_dir)))
    else:
        if kind is not None:
            pool = load_single_step_dataset(name, source or default_dataset(name), params)
        else:
            from hasp.episode.task import load_task

            pool = task_dataset(load_task(name), Path(source) if source else None)
        task = EpochTask(domain_of(pool), pool, **split)  # type: ignore[arg-type]
    _CACHE[key] = task
    return task
