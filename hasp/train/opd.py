"""On-policy distillation (paper §3.3, App. D.4; E3 and E6).

Per round: roll out the current checkpoint with PFs active, and at the states it visited where a PF
corrected it, train L = −Σ_t ŵ_t log π(ã_t | s_t). The state s_t is the prompt the policy saw; ŵ_t is
the step's intervention score A_t (the four-signal weight ``hasp.train.data`` puts on every row, with
the same reward floor); the corrected action ã_t comes from the teacher when one is given (it sees the
same state and answers with its own Thought/Action, ≤ ``teacher_max_tokens``, at most
``teacher_concurrency`` calls in flight), else from the PF correction. Every row records its
``target_source`` and the round records the counts, so a run says which supervision it trained on.

A teacher reply without a readable action falls back to the PF target (counted); a teacher that raises
stops the round with one line, leaving earlier rounds' checkpoints in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hasp.agent.parser import ParsedAction, parse_action
from hasp.config import TrainParams
from hasp.llm.cancel import worker_pool
from hasp.records import Action, StepRecord, Trajectory
from hasp.train.data import build_sft_rows, score_all
from hasp.train.hindsight import check_split, hindsight_rows
from hasp.train.rounds import LogCallback, NoRowsError, RecipeError, RecipeResult, Sampler, run_rounds

#: (state messages, max_tokens) -> the teacher's reply text
Teacher = Callable[[list[dict[str, str]], int], str]


def target_source(train: TrainParams, teacher: Teacher | None) -> str:
    """``teacher`` or ``pf``: what supplies ã_t under ``train.opd.target``."""
    t = train.opd.target
    if t == "teacher" and teacher is None:
        raise RecipeError("train.opd.target is teacher but no teacher is configured (set teacher.embedded or teacher.base_url, "
                          "or train.opd.target: auto)")
    return "teacher" if teacher is not None and t != "pf" else "pf"


def _teacher_target(reply: str) -> dict[str, str] | None:
    parsed = parse_action(reply)
    if not isinstance(parsed, ParsedAction):
        return None
    return StepRecord(index=0, raw_output="", thought=parsed.thought).assistant_message(
        Action(parsed.type, parsed.arg))


def opd_rows(trajs: Sequence[Trajectory], train: TrainParams, *, reward_floor: float,
             teacher: Teacher | None = None, rnd: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows at the PF-corrected visited states, weighted by A_t, with the chosen target source."""
    cfg = train.opd
    source = target_source(train, teacher)
    rows = build_sft_rows(score_all(trajs), reward_floor=reward_floor)
    for r in rows:
        r["source"] = "opd"
        r["target_source"] = "pf"
    fallbacks = 0
    if source == "teacher" and rows:
        states = [r["messages"][:-1] for r in rows]
        try:
            with worker_pool(min(cfg.teacher_concurrency, len(states)), "opd-teacher") as pool:
                replies = list(pool.map(lambda m: teacher(m, cfg.teacher_max_tokens), states))  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - any teacher failure ends the round with one line
            raise RecipeError(f"OPD round {rnd + 1}: teacher failed on {len(states)} states: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        for r, reply in zip(rows, replies):
            target = _teacher_target(reply or "")
            if target is None:
                fallbacks += 1
                continue
            r["messages"] = r["messages"][:-1] + [target]
            r["target_source"] = "teacher"
    stats: dict[str, Any] = {"target": source, "opd_rows": len(rows),
                             "target_sources": dict(Counter(r["target_source"] for r in rows)),
                             "teacher_unreadable": fallbacks, "reward_floor": reward_floor}
    return rows, stats


def round_rows(trajs: list[Trajectory], rnd: int, train: TrainParams, *, reward_floor: float,
               teacher: Teacher | None, questions: Sequence[Any] = ()) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows, stats = opd_rows(trajs, train, reward_floor=reward_floor, teacher=teacher, rnd=rnd)
    hs: list[dict[str, Any]] = []
    if train.opd.hindsight.enabled:
        hs, stats["hindsight"] = hindsight_rows(trajs, weight=train.opd.hindsight.weight, questions=questions,
                                              states=train.opd.hindsight.states)
    stats["hindsight_rows"] = len(hs)
    if not rows and not hs:
        extra = "" if train.opd.hindsight.enabled else "; set train.opd.hindsight.enabled to add hindsight rows"
        raise NoRowsError(f"OPD round {rnd + 1}: no PF-corrected state with A_t >= {reward_floor} in "
                          f"{len(trajs)} rollouts{extra}")
    return rows + hs, stats


def train_opd(model_dir: Path, questions: Sequence[Any], sample: Sampler, out_dir: Path, train: TrainParams, *,
              reward_floor: float, teacher: Teacher | None = None, split: str = "train",
              log_callback: LogCallback | None = None, inputs_key: str | None = None) -> RecipeResult:
    """``train.opd.iterations`` rounds of on-policy distillation from ``model_dir``.

    ``reward_floor`` is ``train.opd.reward_floor`` when set, else the caller's ``signals.reward_floor``."""
    if train.opd.hindsight.enabled:
        check_split(split, "train.opd.hindsight")
    target_source(train, teacher)  # refuse a missing teacher before any rollout
    floor = train.opd.reward_floor if train.opd.reward_floor is not None else reward_floor
    return run_rounds("opd", Path(model_dir), questions, sample, Path(out_dir), train,
                      rounds=train.opd.iterations,
                      build_rows=lambda trajs, i: round_rows(trajs, i, train, reward_floor=floor, teacher=teacher,
                                                             questions=questions),
                      log_callback=log_callback, inputs_key=inputs_key)
