"""The rewards of ``hasp.train.rewards`` that no recipe test pins on its own numbers.

(The composite and StepEconomy are pinned in test_recipes, the outcome reward and the skill-integrated
reward in test_policy_gradient and test_sequential_rollout, r_skill in test_evolve_modes.)
"""

from __future__ import annotations

import pytest

from hasp.config import RSParams
from hasp.records import Trajectory
from hasp.signals.coarse import SignalWeights, TrajectoryScore
from hasp.train.rewards import blended_reward, loss_weight, pf_score, reaches_floor, success_reward


def test_success_reward_is_the_episode_em() -> None:
    t = Trajectory(qid="q", question="q?", answers=["a"], variant="pf", em=1.0)
    assert success_reward(t) == 1.0 and isinstance(success_reward(t), float)


def test_pf_score_weighs_success_and_the_trajectory_score() -> None:
    cfg = RSParams(beta_success=0.6, beta_pf=0.4)
    assert pf_score(True, 0.5, cfg) == pytest.approx(0.6 + 0.4 * 0.5)
    assert pf_score(False, 0.5, cfg) == pytest.approx(0.4 * 0.5)


def test_blended_reward_mixes_a_and_em_by_the_blend_weight() -> None:
    score = TrajectoryScore(steps=[], A=0.4, em=1.0)
    assert blended_reward(score) == pytest.approx(0.5 * 0.4 + 0.5 * 1.0)  # App. E: 50/50
    assert blended_reward(score, SignalWeights(episode_em_blend=0.25)) == pytest.approx(0.75 * 0.4 + 0.25 * 1.0)


def test_reaches_floor_and_loss_weight() -> None:
    assert reaches_floor(0.25, 0.25) and not reaches_floor(0.2499, 0.25) and not reaches_floor(None, -1.0)
    assert loss_weight(-0.3) == 0.0 and loss_weight(0.7) == 0.7
