"""Hindsight rows: answer a training question at the first state whose observation held its gold answer.

The untrained embedded agent almost never succeeds, so rejection sampling keeps nothing; yet the answer
often reaches its context and the agent fails to stop and say it. Such a trajectory still teaches the
missing step: at the state after that observation the right action is FINAL[gold]. The gold label is a
training label, so these rows are built on the train split only, never on val or test questions, and
every row says ``source: hindsight`` so runs report them apart from the recipe's own rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hasp.agent.loop import load_prompts
from hasp.domains.search.metrics import normalize_answer
from hasp.records import Action, StepRecord, Trajectory
from hasp.train.rounds import RecipeError, question_id

SOURCE = "hindsight"


def check_split(split: str, key: str) -> None:
    """Hindsight reads gold answers: refuse anything but the training split."""
    if split != "train":
        raise RecipeError(f"{key}: hindsight rows read gold answers, so they are built on the train split "
                          f"only, not on {split!r}")


def answer_seen(text: str, golds: Sequence[str]) -> str | None:
    """The first gold alias that occurs in ``text`` as whole words after SQuAD normalisation."""
    hay = f" {normalize_answer(text)} "
    for g in golds:
        n = normalize_answer(g)
        if n and f" {n} " in hay:
            return g
    return None


def _row(traj: Trajectory, j: int, gold: str, weight: float) -> dict[str, Any] | None:
    step = traj.steps[j]
    nxt = traj.steps[j + 1] if j + 1 < len(traj.steps) else None
    if nxt is not None and nxt.prompt_messages:
        prompt, thought = [dict(m) for m in nxt.prompt_messages], nxt.thought
    elif step.prompt_messages:
        prompt, thought = [dict(m) for m in step.prompt_messages] + step.to_messages(load_prompts()), ""
    else:
        return None
    target = StepRecord(index=j + 1, raw_output="", thought=thought).assistant_message(Action("FINAL", gold))
    return {"messages": prompt + [target], "sample_weight": weight, "source": SOURCE, "qid": traj.qid,
            "step": j + 1, "variant": traj.variant, "em": traj.em, "answer_seen_at": j}


def hindsight_rows(trajs: Iterable[Trajectory], *, weight: float, questions: Sequence[Any] = (),
                   skip_qids: Iterable[str] = ()) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """At most one row per failed training question whose gold answer appeared in an observation.

    ``questions`` (when their ids are known) bounds which trajectories may contribute: a trajectory of a
    question not asked is ignored and counted. ``skip_qids`` are questions that already have rows."""
    allowed = {question_id(q) for q in questions} - {None}
    skip = set(skip_qids)
    rows: list[dict[str, Any]] = []
    stats = {"failed": 0, "answer_seen": 0, "rows": 0, "not_asked": 0}
    for t in trajs:
        if allowed and t.qid not in allowed:
            stats["not_asked"] += 1
            continue
        if t.em >= 1.0:
            continue
        stats["failed"] += 1
        if t.qid in skip:
            continue
        for j, step in enumerate(t.steps):
            gold = answer_seen(step.observation, t.answers)
            if gold is None:
                continue
            stats["answer_seen"] += 1
            row = _row(t, j, gold, weight)
            if row is not None:
                rows.append(row)
                skip.add(t.qid)
            break
    stats["rows"] = len(rows)
    return rows, stats
