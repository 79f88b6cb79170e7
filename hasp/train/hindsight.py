"""Hindsight rows: answer a training question at the states after an observation that held its gold answer.

The untrained embedded agent almost never succeeds, so rejection sampling keeps nothing; yet the answer
often reaches its context and the agent fails to stop and say it. Such a trajectory still teaches the
missing step: at the state after that observation the right action is FINAL[gold]. The gold label is a
training label, so these rows are built on the train split only, never on val or test questions, and
every row says ``source: hindsight`` so runs report them apart from the recipe's own rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hasp.agent.react import load_prompts
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


def _state(traj: Trajectory, k: int) -> list[dict[str, Any]] | None:
    """The context the policy saw before step ``k``; past the last step, the last one's context and turns."""
    if k < len(traj.steps) and traj.steps[k].prompt_messages:
        return [dict(m) for m in traj.steps[k].prompt_messages]
    last = traj.steps[k - 1]
    if k == len(traj.steps) and last.prompt_messages:
        return [dict(m) for m in last.prompt_messages] + last.to_messages(load_prompts())
    return None


def _row(traj: Trajectory, k: int, seen_at: int, gold: str, weight: float) -> dict[str, Any] | None:
    """Answer ``gold`` at the state before step ``k``. The thought is the prompts file's neutral one, not
    the thought the policy wrote there: that one led to another action ("read the document to be
    sure"), and pairing it with FINAL would teach a thought that contradicts its action."""
    prompt = _state(traj, k)
    if prompt is None:
        return None
    thought = str(load_prompts()["answer_thought"])
    target = StepRecord(index=k, raw_output="", thought=thought).assistant_message(Action("FINAL", gold))
    return {"messages": prompt + [target], "sample_weight": weight, "source": SOURCE, "target_type": "FINAL",
            "qid": traj.qid, "step": k, "variant": traj.variant, "em": traj.em, "answer_seen_at": seen_at}


def hindsight_rows(trajs: Iterable[Trajectory], *, weight: float, questions: Sequence[Any] = (),
                   skip_qids: Iterable[str] = (), states: str = "first") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows for failed training questions whose gold answer appeared in an observation.

    ``states="first"``: at most one row per question, at the first state after the observation.
    ``states="after"``: a row at every state from there to the end of each failed sample, so the
    re-reads and extra searches a small policy makes with the answer in view all become answer rows.
    ``questions`` (when their ids are known) bounds which trajectories may contribute: a trajectory of a
    question not asked is ignored and counted. ``skip_qids`` are questions that already have rows."""
    if states not in ("first", "after"):
        raise RecipeError(f"hindsight.states: expected 'first' or 'after', got {states!r}")
    allowed = {question_id(q) for q in questions} - {None}
    skip = set(skip_qids)
    answered: set[str] = set()
    rows: list[dict[str, Any]] = []
    stats = {"failed": 0, "answer_seen": 0, "rows": 0, "not_asked": 0}
    for t in trajs:
        if allowed and t.qid not in allowed:
            stats["not_asked"] += 1
            continue
        if t.em >= 1.0:
            continue
        stats["failed"] += 1
        if t.qid in skip or (states == "first" and t.qid in answered):
            continue
        for j, step in enumerate(t.steps):
            gold = answer_seen(step.observation, t.answers)
            if gold is None:
                continue
            stats["answer_seen"] += 1
            last = j + 1 if states == "first" else max(j + 1, len(t.steps) - 1)
            for k in range(j + 1, last + 1):
                row = _row(t, k, j, gold, weight)
                if row is not None:
                    rows.append(row)
                    answered.add(t.qid)
            break
    stats["rows"] = len(rows)
    return rows, stats
