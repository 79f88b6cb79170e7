"""PF-guided rejection sampling (paper §3.3, App. D.4, D.7; E2 and E5).

Per round: sample k trajectories per training question from the current checkpoint (PFs active), score
each with Score(τ) = β1·TaskSuccess(τ) + β2·A(τ) — or with the SAGE skill-integrated reward when the
trajectory carries one — keep those whose composite 0.7·EM + 0.2·F1 + 0.1·StepEconomy reaches
``min_score``, keep the top-scoring ones per question, and LoRA-SFT on the steps of the kept
trajectories (the action that ran, i.e. the PF-corrected one). The next round samples from the new
checkpoint.

Selection uses two numbers on purpose: the composite is App. D.4's admission filter (a partial answer
can pass it), Score(τ) ranks the admitted trajectories of one question, so among equally correct
samples the one whose PF interventions scored better is the one trained on.

The composite, StepEconomy (not defined in the paper: the share of the step budget left when the agent
answered) and Score(τ) are defined in ``hasp.train.rewards``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hasp.config import RSParams, TrainParams
from hasp.records import Trajectory
from hasp.train.chains import chain_reward
from hasp.train.data import Scored, score_all
from hasp.train.hindsight import check_split, hindsight_rows
from hasp.train.rewards import composite_reward, loss_weight, pf_score, step_economy
from hasp.train.rounds import LogCallback, NoRowsError, RecipeError, RecipeResult, Sampler, run_rounds

SKILL_REWARD_KEY = "skill_integrated_reward"  # the score source a chain's reward ranks under


@dataclass
class Verdict:
    """One sampled trajectory as the filter saw it."""

    index: int
    qid: str
    em: float
    f1: float
    step_economy: float
    composite: float
    task_success: float
    pf_score: float  # A(τ)
    score: float  # what ranked it
    score_source: str  # "score" (β1·TaskSuccess + β2·A) | "skill_integrated_reward"
    passed: bool = False
    kept: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rs_score(item: Scored, cfg: RSParams) -> tuple[float, str, float, float]:
    """(score, its source, TaskSuccess, A(τ)): Score(τ), or the skill-integrated reward when present."""
    traj = item.traj
    success = 1.0 if item.success else 0.0
    a = item.score.A
    chained = chain_reward(traj) if cfg.skill_reward else None
    if chained is not None:
        return chained, SKILL_REWARD_KEY, success, a
    return pf_score(item.success, a, cfg), "score", success, a


def select(scored: Sequence[Scored], cfg: RSParams, max_steps: int) -> list[Verdict]:
    """A verdict per scored trajectory: passed the composite filter, and kept among its question's top N."""
    verdicts = []
    for i, item in enumerate(scored):
        t = item.traj
        score, source, success, a = rs_score(item, cfg)
        comp = composite_reward(t, cfg, max_steps)
        verdicts.append(Verdict(index=i, qid=t.qid, em=t.em, f1=t.f1, step_economy=step_economy(t, max_steps),
                                composite=comp, task_success=success, pf_score=a, score=score,
                                score_source=source, passed=comp >= cfg.min_score))
    by_q: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if v.passed:
            by_q[v.qid].append(v)
    for group in by_q.values():
        group.sort(key=lambda v: (-v.score, -v.composite, v.index))
        for v in group[: cfg.keep_per_question or len(group)]:
            v.kept = True
    return verdicts


def kept_rows(scored: Sequence[Scored], verdicts: Sequence[Verdict], cfg: RSParams) -> list[dict[str, Any]]:
    """SFT rows on every audited step of the kept trajectories; the target is the action that ran."""
    rows = []
    for v in verdicts:
        if not v.kept:
            continue
        t = scored[v.index].traj
        for step, sc in zip(t.steps, scored[v.index].score.steps):
            if step.audit is None or not step.prompt_messages:
                continue
            weight = {"uniform": 1.0, "score": v.score, "step": sc.A}[cfg.row_weight]
            rows.append({"messages": [dict(m) for m in step.prompt_messages] + [step.assistant_message()],
                         "sample_weight": round(loss_weight(weight), 6), "source": "rs", "qid": t.qid,
                         "step": step.index, "score": round(v.score, 6), "score_source": v.score_source,
                         "composite": round(v.composite, 6), "was_modified": step.audit.was_modified,
                         "a_orig": step.audit.a_orig.render(), "a_final": step.audit.a_final.render()})
    return rows


def round_rows(trajs: list[Trajectory], rnd: int, train: TrainParams,
               questions: Sequence[Any] = ()) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One RS round's rows and what the filter did (each trajectory scored once, for both); an empty
    kept set is an error unless hindsight rows (an option apart from the paper's recipe) supply material."""
    cfg = train.rs
    scored = score_all(trajs)
    verdicts = select(scored, cfg, train.rollout.max_steps)
    rows = kept_rows(scored, verdicts, cfg)
    kept_q = {v.qid for v in verdicts if v.kept}
    stats: dict[str, Any] = {
        "sampled": len(trajs), "passed": sum(v.passed for v in verdicts), "kept": sum(v.kept for v in verdicts),
        "kept_questions": len(kept_q), "rs_rows": len(rows),
        "score_sources": sorted({v.score_source for v in verdicts}),
        "verdicts": [v.to_dict() for v in verdicts]}
    hs: list[dict[str, Any]] = []
    if cfg.hindsight.enabled:
        hs, hstats = hindsight_rows(trajs, weight=cfg.hindsight.weight, questions=questions, skip_qids=kept_q,
                                    states=cfg.hindsight.states)
        stats["hindsight"] = hstats
    stats["hindsight_rows"] = len(hs)
    if not rows and not hs:
        extra = "" if cfg.hindsight.enabled else "; set train.rs.hindsight.enabled to add hindsight rows"
        raise NoRowsError(
            f"RS round {rnd + 1}: kept set is empty: 0 of {len(trajs)} sampled trajectories reached "
            f"train.rs.min_score {cfg.min_score} on {cfg.em_weight}*EM + {cfg.f1_weight}*F1 + "
            f"{cfg.economy_weight}*StepEconomy{extra}")
    return rows + hs, stats


def train_rs(model_dir: Path, questions: Sequence[Any], sample: Sampler, out_dir: Path, train: TrainParams, *,
             split: str = "train", log_callback: LogCallback | None = None,
             inputs_key: str | None = None) -> RecipeResult:
    """``train.rs.iterations`` rounds of rejection sampling from ``model_dir``; see the module docstring.

    ``sample(questions, model_dir)`` gets every question ``train.rollout.k`` times and returns their
    trajectories, sampled with ``train.rollout``'s settings and PFs active."""
    if train.rs.hindsight.enabled:
        check_split(split, "train.rs.hindsight")
    return run_rounds("rs", Path(model_dir), questions, sample, Path(out_dir), train,
                      rounds=train.rs.iterations,
                      build_rows=lambda trajs, i: round_rows(trajs, i, train, questions),
                      log_callback=log_callback, inputs_key=inputs_key)
