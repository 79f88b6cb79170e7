"""One self-improvement epoch as file-to-file phase functions (paper App. C, Phases A–H).

Each function reads its inputs from files, writes its outputs atomically and
returns a small summary dict. The same functions back the ``hasp`` CLI (and so
the ``dvc.yaml`` stages) and the Prefect tasks, so the two orchestrations can
never drift apart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from hasp.agent.loop import AgentConfig, Policy
from hasp.agent.records import Trajectory
from hasp.agent.rollout import read_trajectories, run_many, write_trajectories
from hasp.agent.variants import get_variant
from hasp.config import Params
from hasp.pf.base import Teacher
from hasp.pf.library import load_library

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- io helpers
def _jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(obj: Any, path: Path) -> None:
    """Atomic JSON write (temp file + os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=_jsonable)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def agent_config(params: Params) -> AgentConfig:
    a = params.agent
    return AgentConfig(max_steps=a.max_steps, max_search_calls=a.max_search_calls,
                       max_read_calls=a.max_read_calls, temperature=a.temperature,
                       max_tokens=a.max_tokens, max_modify_fires=a.max_modify_fires)


# ----------------------------------------------------------------------------- data
def prepare_data(params: Params, out_dir: Path) -> dict[str, Any]:
    """Generate the multi-hop benchmark (2–3 hops) and write corpus + splits."""
    from hasp.domains.search.generator import generate_benchmark, write_benchmark

    d = params.data
    bench = generate_benchmark(d.seed, d.n_questions, hop_weights={2: 0.7, 3: 0.3})
    paths = write_benchmark(bench, out_dir, seed=d.seed, fractions=tuple(d.fractions))
    counts = {k: sum(1 for _ in open(p, encoding="utf-8")) for k, p in paths.items()}
    return {"counts": counts, "hops": dict(Counter(q.hops for q in bench.questions))}


# ----------------------------------------------------------------------------- rollouts
def rollout(params: Params, data_dir: Path, library_root: Path | None, split: str, out_path: Path,
            *, policy: Policy, variant: str = "pf", teacher: Teacher | None = None,
            limit: int | None = None, label: str | None = None) -> dict[str, Any]:
    """Phase A (and evaluation): run ``variant`` on a split, write trajectories, return metrics."""
    from hasp.domains.search.task import SearchTask

    task = SearchTask.load(data_dir)
    items = task.questions(split, limit)
    lib = load_library(library_root, "search") if library_root is not None else None
    try:
        fn = task.episode_fn(policy=policy, library=lib, cfg=agent_config(params),
                             variant=get_variant(variant), top_k=params.agent.top_k,
                             teacher=teacher, label=label)
        trajs = run_many(items, fn, concurrency=params.llm.max_concurrency,
                         desc=f"{label or variant}:{split}")
    finally:
        if lib is not None:
            lib.close()
    write_trajectories(trajs, out_path)
    summary = summarize_rollout(trajs)
    if lib is not None:
        summary["library_size"] = len(lib.skills)
        summary["library_load_errors"] = lib.load_errors
    return summary


def summarize_rollout(trajs: list[Trajectory]) -> dict[str, Any]:
    n = max(1, len(trajs))
    fires = Counter(trajs_fired for t in trajs for trajs_fired in t.fired_skills())
    audits = [a for t in trajs for a in t.audits()]
    steps = [len(t.steps) for t in trajs]
    return {
        "n": len(trajs),
        "em": sum(t.em for t in trajs) / n,
        "f1": sum(t.f1 for t in trajs) / n,
        "mean_steps": sum(steps) / n,
        "parse_error_rate": sum(1 for t in trajs for s in t.steps if s.parse_error)
        / max(1, sum(steps)),
        "answered_rate": sum(1 for t in trajs if t.terminated == "final") / n,
        "pf_fires": dict(fires),
        "pf_fires_total": sum(fires.values()),
        "modified_steps": sum(1 for a in audits if a.was_modified),
        "inject_steps": sum(1 for a in audits if a.context),
        "pf_errors": sum(len(t.pf_errors) for t in trajs),
        "prompt_tokens": sum(t.prompt_tokens for t in trajs),
        "completion_tokens": sum(t.completion_tokens for t in trajs),
        "wall_s_sum": sum(t.wall_s for t in trajs),
    }
