"""Builders for hand-made trajectories shared by the evolution tests, and a clock-free view of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hasp.records import Action, AuditEvent, StepRecord, Trajectory


def scripted_traj(qid: str, actions: list[tuple[str, str]], *, question: str = "q?", answers=("x",),
                  em: float = 0.0, prediction: str = "") -> Trajectory:
    """A PF-variant trajectory whose steps executed exactly ``actions`` (no PF changed anything)."""
    steps = []
    for i, (typ, arg) in enumerate(actions):
        fb = ({"n_hits": 1, "hit_ids": [f"d{i}"]} if typ == "SEARCH" else
              {"found": True, "doc_id": f"d{i}"} if typ == "READ" else {"final": True})
        steps.append(StepRecord(index=i, raw_output="", observation=f"text {i}",
                                audit=AuditEvent(state={}, a_orig=Action(typ, arg), a_final=Action(typ, arg),
                                                 feedback=fb)))
    return Trajectory(qid=qid, question=question, answers=list(answers), variant="pf", steps=steps,
                      prediction=prediction, em=em)


def timeless(d: Any) -> Any:
    """A trajectory dict without its clock readings (wall, LLM, step, selection seconds): what two runs
    of the same episodes must agree on wherever they ran."""
    if isinstance(d, dict):
        return {k: timeless(v) for k, v in d.items() if not (k.endswith("_s") and isinstance(v, float))}
    if isinstance(d, list):
        return [timeless(v) for v in d]
    return d


def search_task(data: Path) -> Any:
    """The search task over a prepared data folder, as the samplers take a task (its split files)."""
    from hasp.episode.domains import SearchDomain
    from hasp.evolve.epoch_task import EpochTask

    return EpochTask(SearchDomain(data_dir=Path(data)))
