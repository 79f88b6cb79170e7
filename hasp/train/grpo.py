"""GRPO on agent episodes (``train.recipe: grpo``; seed 001's baseline, "GRPO without a library").

Each round samples G episodes of every training question from the checkpoint the round starts from
(``train.rollout``'s temperature, top-p and budgets; ``train.grpo.agent`` picks the PF agent or the
plain ReAct agent), gives each episode its outcome reward (``hasp.train.rewards.outcome_reward``:
success = EM, or App. D.4's composite, minus ``no_answer_penalty`` when it never answered), and gives
every turn of an episode the same advantage: its reward minus the mean reward of its group (divided by
the group's std only with ``scale_by_std``). The rows are the model's own replies at those turns; the update is one
strictly on-policy optimizer step (``hasp.train.losses``), so a below-average episode pushes its
replies down as much as an above-average one pushes its own up. A group whose rewards are all equal
carries no signal and adds no row.

The replies trained on are what the model generated (``raw_output``), not a PF's rewrite of them: the
gradient is the policy's own. A PF's rewrite and the observation it produced are part of the next
turn's prompt, as the policy saw them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hasp.config import TrainParams
from hasp.records import Trajectory
from hasp.train.rewards import outcome_reward
from hasp.train.rounds import LogCallback, RecipeResult, Sampler, run_rounds


def group_advantages(rewards: Sequence[float], groups: Sequence[str], *, scale_by_std: bool = False
                     ) -> list[float]:
    """``r_i - mean(r of i's group)``; with ``scale_by_std`` divided by the group's population std
    (a group of equal rewards gets 0 either way)."""
    by: dict[str, list[float]] = defaultdict(list)
    for r, g in zip(rewards, groups, strict=True):
        by[g].append(float(r))
    mean = {g: statistics.fmean(v) for g, v in by.items()}
    std = {g: statistics.pstdev(v) for g, v in by.items()}
    out = []
    for r, g in zip(rewards, groups):
        a = float(r) - mean[g]
        if scale_by_std:
            a = a / std[g] if std[g] > 0 else 0.0
        out.append(a)
    return out


def turn_rows(traj: Trajectory, advantage: float, *, source: str, **extra: Any) -> list[dict[str, Any]]:
    """One row per turn the model generated: the prompt it saw, its own reply as the target, the
    episode's advantage as the row weight."""
    rows = []
    for step in traj.steps:
        if not step.prompt_messages or not step.raw_output.strip():
            continue
        rows.append({"messages": [dict(m) for m in step.prompt_messages]
                     + [{"role": "assistant", "content": step.raw_output.strip()}],
                     "sample_weight": round(advantage, 6), "source": source, "qid": traj.qid, "step": step.index,
                     **extra})
    return rows


def round_rows(trajs: list[Trajectory], rnd: int, train: TrainParams) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One round's rows and what they were made of: rewards, groups with signal, the advantage range."""
    cfg = train.grpo
    rewards = [outcome_reward(t, cfg, train) for t in trajs]
    adv = group_advantages(rewards, [t.qid for t in trajs], scale_by_std=cfg.scale_by_std)
    rows = []
    for t, r, a in zip(trajs, rewards, adv):
        if a != 0.0:
            rows += turn_rows(t, a, source="grpo", reward=round(r, 6))
    groups = {t.qid for t in trajs}
    live = {t.qid for t, a in zip(trajs, adv) if a != 0.0}
    stats = {"sampled": len(trajs), "groups": len(groups), "groups_with_signal": len(live),
             "mean_reward": round(statistics.fmean(rewards), 6) if rewards else 0.0,
             "success": sum(t.em >= 1 for t in trajs), "rows": len(rows),
             "positive_rows": sum(r["sample_weight"] > 0 for r in rows),
             "negative_rows": sum(r["sample_weight"] < 0 for r in rows),
             "max_abs_advantage": round(max((abs(a) for a in adv), default=0.0), 6)}
    return rows, stats


def train_grpo(model_dir: Path, questions: Sequence[Any], sample: Sampler, out_dir: Path, train: TrainParams, *,
               log_callback: LogCallback | None = None, inputs_key: str | None = None) -> RecipeResult:
    """``train.grpo.iterations`` rounds of GRPO from ``model_dir``; see the module docstring.
    ``sample(questions, model_dir)`` gets every question ``train.grpo.group_size`` times."""
    cfg = train.grpo
    return run_rounds("grpo", Path(model_dir), questions, sample, Path(out_dir), train, rounds=cfg.iterations,
                      build_rows=lambda trajs, i: round_rows(trajs, i, train), log_callback=log_callback,
                      inputs_key=inputs_key, repeats=cfg.group_size, policy_gradient=True, kl_beta=cfg.beta,
                      per_round=cfg.questions_per_round)
