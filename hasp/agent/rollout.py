"""Run many episodes concurrently and persist trajectories as JSON lines.

Episodes are independent, so a thread pool keeps the (continuous-batching)
model server busy; the LLM client bounds in-flight requests itself. Results
come back in input order so a rollout file is deterministic for a given policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, TypeVar

from hasp.llm.cancel import worker_pool
from hasp.progress import Progress
from hasp.records import Trajectory

T = TypeVar("T")


def run_many(items: Sequence[Any], episode: Callable[[Any], T], *, concurrency: int = 8,
             desc: str = "rollout", progress: bool = True,
             on_result: Callable[[int, T], None] | None = None) -> list[T]:
    """Apply ``episode`` to every item with bounded concurrency, keeping order (any result type:
    trajectories, or evaluation records that wrap one). Progress counts episodes as they finish,
    not in submission order, so the count and ETA move with every finished episode; ``on_result``
    sees each (item index, result) then, on the calling thread (an evaluation's journal appends it there)."""
    out: list[Any] = [None] * len(items)
    with Progress(desc, len(items), unit="episodes", enabled=None if progress else False) as bar, \
            worker_pool(concurrency, "episode") as pool:
        index = {pool.submit(episode, it): i for i, it in enumerate(items)}
        for f in as_completed(index):
            out[index[f]] = f.result()
            if on_result is not None:
                on_result(index[f], out[index[f]])
            bar.advance()
    return out


def write_trajectories(trajs: Sequence[Trajectory], path: Path) -> None:
    """Atomic write: a killed run never leaves a half-written trajectory file."""
    from hasp.atomic import write_jsonl

    write_jsonl((t.to_dict() for t in trajs), path)


def read_trajectories(path: Path) -> list[Trajectory]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(Trajectory.from_dict(json.loads(line)))
                except (json.JSONDecodeError, TypeError, KeyError) as e:
                    raise ValueError(f"{path}:{n}: not a trajectory record: {e}") from e
    return out
