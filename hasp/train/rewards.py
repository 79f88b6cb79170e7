"""Every reward HASP gives a trajectory, a chain of trajectories or a skill proposal, each defined once.

Why one module: the recipes read one another's rewards (GRPO's composite outcome is rejection
sampling's filter value, SAGE's outcome term is GRPO's, RS ranks by the chain reward, Phase H and the
val gate pay a skill author the same r_skill), and a reward written beside its first reader was written
again by the next one. Each function is named for what it is; every reader imports it from here.

The per-step intervention score A_t and its trajectory mean A(τ) are the four-signal scorer's
(``hasp.signals.coarse``); the rewards below that use them take the score as input.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

from hasp.config import PolicyGradientParams, RSParams, TrainParams
from hasp.records import Trajectory
from hasp.signals.coarse import SignalWeights, TrajectoryScore

#: the skill-integrated reward's rule for the task that made a skill (``skill_integrated_rewards``)
Bonus = Literal["seed", "repair"]


def success_reward(traj: Trajectory) -> float:
    """Task success as a number: the episode's exact match."""
    return float(traj.em)


def step_economy(traj: Trajectory, max_steps: int) -> float:
    """Share of the step budget left when FINAL was given, (max_steps - steps + 1) / max_steps; 0 when
    the episode ended without one. The paper names StepEconomy without defining it: this is HASP's."""
    if traj.terminated != "final" or not traj.steps:
        return 0.0
    return max(0.0, min(1.0, (max_steps - len(traj.steps) + 1) / max_steps))


def composite_reward(traj: Trajectory, cfg: RSParams, max_steps: int) -> float:
    """App. D.4's step-economy-shaped reward: em_weight·EM + f1_weight·F1 + economy_weight·StepEconomy
    (rejection sampling's admission filter, GRPO's and SAGE's ``reward: composite``)."""
    return (cfg.em_weight * traj.em + cfg.f1_weight * traj.f1
            + cfg.economy_weight * step_economy(traj, max_steps))


def outcome_reward(traj: Trajectory, cfg: PolicyGradientParams, train: TrainParams) -> float:
    """A policy-gradient episode's outcome reward under ``cfg.reward`` (success, or the composite with
    ``train.rs``'s weights), minus ``cfg.no_answer_penalty`` when the episode never gave a FINAL."""
    if cfg.reward == "composite":
        r = composite_reward(traj, train.rs, train.rollout.max_steps)
    else:
        r = success_reward(traj)
    return r - (cfg.no_answer_penalty if traj.terminated != "final" else 0.0)


def pf_score(success: bool, pf_a: float, cfg: RSParams) -> float:
    """Score(τ) = β1·TaskSuccess(τ) + β2·A(τ) (paper §3.3): how rejection sampling ranks the admitted
    trajectories of one question, so the better-intervened of two correct samples is trained on."""
    return cfg.beta_success * (1.0 if success else 0.0) + cfg.beta_pf * pf_a


def blended_reward(score: TrajectoryScore, w: SignalWeights = SignalWeights()) -> float:
    """App. E's episode reward (1-b)·A(τ) + b·EM, b = ``w.episode_em_blend`` (the paper's 50/50)."""
    return (1 - w.episode_em_blend) * score.A + w.episode_em_blend * score.em


def skill_integrated_rewards(outcomes: Sequence[float], used: Sequence[Collection[int]], *, bonus: Bonus = "seed",
                             solved: Sequence[bool] | None = None) -> list[float]:
    """R_k of every task of one chain (SAGE, seed 001 §3) from its outcome rewards; ``used[i]`` holds the
    positions k < i whose skills fired in task i, ``solved`` which tasks were solved (default: outcome
    reward 1, the seed's ``1[r = 1]``). A solved task that used an earlier skill earns one point; a task
    whose skill a later solved task used earns one point, under ``bonus`` "seed" (seed 001) only when it
    was solved itself, under "repair" whether or not (``hasp.train.sage`` says why both)."""
    ok = list(solved) if solved is not None else [r >= 1 for r in outcomes]
    out = []
    for k, r in enumerate(outcomes):
        carried = any(ok[i] and k in used[i] for i in range(k + 1, len(outcomes)))
        made = 1.0 if carried and (ok[k] or bonus == "repair") else 0.0
        out.append(float(r) + made + (1.0 if ok[k] and used[k] else 0.0))
    return out


def skill_author_reward(q_skill: float | None, delta_em: float | None, lam: float = 0.5) -> float | None:
    """r_skill = Q_skill + λ·ΔEM_val (App. E), rounded to 6 places as records keep it: the skill author's
    reward (Objective B rows, the val gate's record). None without a review score; an unmeasured ΔEM
    counts 0."""
    if q_skill is None:
        return None
    return round(q_skill + lam * float(delta_em or 0.0), 6)


def reaches_floor(reward: float | None, floor: float) -> bool:
    """Whether a row's reward (a step's A_t, a proposal's r_skill) is high enough to train on: at least
    ``signals.reward_floor``; an unscored one (None) never is."""
    return reward is not None and reward >= floor


def loss_weight(reward: float) -> float:
    """The SFT loss weight a reward gives its row: the reward, never negative (the weighted SFT trainer
    scales a row's loss by it; a negative weight would train away from the target)."""
    return max(0.0, float(reward))
