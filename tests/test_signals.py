"""Four-signal scoring (paper App. E) on hand-built trajectories."""

from __future__ import annotations

import math

import pytest

from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from hasp.signals import FAMILIES, FINE_KEYS, SignalWeights, fine_score, score_step, score_trajectory
from hasp.train.rewards import blended_reward


def step(i: int, orig: tuple[str, str], final: tuple[str, str] | None = None, *, fired: list[dict] | None = None,
         context: list[str] | None = None, has_read: bool = False, empty: bool = False) -> StepRecord:
    a_orig = Action(*orig)
    a_final = Action(*(final or orig))
    audit = AuditEvent(state={"step_count": i, "has_read": has_read, "search_count": 0, "read_count": int(has_read),
                              "empty_results": empty, "n_seen_docs": 0},
                       a_orig=a_orig, a_final=a_final, context=list(context or []), fired=list(fired or []))
    return StepRecord(index=i, raw_output="", thought=f"t{i}", audit=audit,
                      prompt_messages=[{"role": "user", "content": f"q{i}"}])


def traj(steps: list[StepRecord], em: float) -> Trajectory:
    return Trajectory(qid="q", question="Q?", answers=["a"], variant="pf", steps=steps, em=em)


MODIFY = {"skill_id": "premature_final", "type": "MODIFY_ACTION", "reason": "no read", "applied": True}
INJECT = {"skill_id": "decompose", "type": "INJECT_CONTEXT", "reason": "", "applied": True}


def rescue_traj(em: float = 1.0) -> Trajectory:
    """Step 0: FINAL with nothing read (risky) rewritten to READ; step 1: FINAL after the read."""
    return traj([step(0, ("FINAL", "x"), ("READ", "d1"), fired=[MODIFY]),
                 step(1, ("FINAL", "a"), has_read=True)], em)


def test_weights_defaults_match_paper() -> None:
    w = SignalWeights()
    assert w.coarse_weights() == {"timing": 0.15, "modality": 0.10, "correctness": 0.25, "outcome": 0.50}
    assert math.isclose(sum(w.coarse_weights().values()), 1.0)
    fw = w.fine_weights()
    assert list(fw) == list(FINE_KEYS) and len(FINE_KEYS) == 15
    assert fw["s1.tp"] == 0.25 and fw["s1.fp"] == -0.10 and fw["s1.fn"] == -0.10 and fw["s1.phase"] == 0.05
    assert fw["s2.pre_action"] == fw["s2.post_obs"] == 0.35 and fw["s2.pre_reasoning"] > 0
    assert (fw["s3.syntactic"], fw["s3.semantic"], fw["s3.domain"]) == (0.20, 0.50, 0.30)
    assert (fw["s4.local"], fw["s4.downstream"], fw["s4.cost"], fw["s4.side_effect"]) == (0.4, 0.4, -0.1, -0.1)
    from dataclasses import fields

    assert all(f.metadata.get("help") for f in fields(SignalWeights))


def test_rescue_step_matches_hand_computation() -> None:
    s = score_step(rescue_traj(), 0)
    assert s.risky and s.has_audit
    assert s.fine["s1.tp"] == 1 and s.fine["s1.fn"] == 0 and s.fine["s1.phase"] == 1.0
    assert s.fine["s2.pre_action"] == 1 and s.fine["s2.post_obs"] == 0
    assert s.fine["s3.semantic"] == 0.7 and s.fine["s4.local"] == 0.8 and s.fine["s4.downstream"] == 1.0
    # family-normalised coarse signals: Σw·v / Σ|w|
    t = (0.25 * 1 + 0.05 * 1) / (0.25 + 0.10 + 0.10 + 0.05)  # 0.6
    m = (0.35 * 1) / (0.35 + 0.35 + 0.15 + 0.15)  # 0.35
    q = (0.20 * 1 + 0.50 * 0.7 + 0.30 * 0) / 1.0  # 0.55
    o = (0.40 * 0.8 + 0.40 * 1.0) / 1.0  # 0.72
    assert (s.timing, s.modality, s.correctness, s.outcome) == pytest.approx((t, m, q, o))
    assert s.A == pytest.approx(0.15 * t + 0.10 * m + 0.25 * q + 0.50 * o)
    assert s.A == pytest.approx(0.6225)


def test_unnormalised_reduction_is_plain_weighted_sum() -> None:
    w = SignalWeights(normalize_families=False)
    s = score_step(rescue_traj(), 0, w)
    assert (s.timing, s.modality, s.correctness, s.outcome) == pytest.approx((0.30, 0.35, 0.55, 0.72))
    assert s.A == pytest.approx(0.15 * 0.30 + 0.10 * 0.35 + 0.25 * 0.55 + 0.50 * 0.72)
    # fine mode over all 15 sub-signals
    assert fine_score(s.fine, w) == pytest.approx(0.30 + 0.35 + 0.55 + 0.72)


def test_rescue_beats_spurious_inject() -> None:
    rescue = rescue_traj(em=1.0)
    # a reminder injected on a plain, non-risky SEARCH: a false-positive activation
    spurious = traj([step(0, ("SEARCH", "q"), fired=[INJECT], context=["Remember to decompose."]),
                     step(1, ("FINAL", "a"), has_read=True)], em=1.0)
    r, s = score_step(rescue, 0), score_step(spurious, 0)
    assert not s.risky and s.fine["s1.fp"] == 1 and s.fine["s2.post_obs"] == 1
    assert s.timing < 0 < r.timing
    assert r.A > s.A
    assert score_trajectory(rescue).A > score_trajectory(spurious).A


def test_missed_risky_step_is_penalised() -> None:
    missed = score_step(traj([step(0, ("FINAL", "x"))], em=0.0), 0)
    assert missed.risky and missed.fine["s1.fn"] == 1 and missed.timing < 0
    search_after_empty = score_step(traj([step(1, ("SEARCH", "q"), empty=True)], em=0.0), 0)
    assert search_after_empty.risky


def test_side_effect_when_modified_but_failed() -> None:
    ok, bad = score_step(rescue_traj(1.0), 0), score_step(rescue_traj(0.0), 0)
    assert bad.fine["s4.side_effect"] == 1 and ok.fine["s4.side_effect"] == 0
    assert bad.outcome == pytest.approx(0.4 * 0.8 - 0.1)
    assert ok.A > bad.A


@pytest.mark.parametrize("n,expected", [(15, 0.0), (16, 0.1), (20, 0.5), (25, 1.0), (40, 1.0)])
def test_cost_kicks_in_past_15_steps(n: int, expected: float) -> None:
    steps = [step(i, ("SEARCH", f"q{i}"), has_read=True) for i in range(n - 1)] + [
        step(n - 1, ("FINAL", "a"), has_read=True)]
    s = score_step(traj(steps, em=1.0), 0)
    assert s.fine["s4.cost"] == pytest.approx(expected)
    base = score_step(traj(steps[:1] + steps[-1:], em=1.0), 0)  # same step in a 2-step episode
    assert base.A - s.A == pytest.approx(0.5 * 0.1 * expected)  # λ_o · |w_cost| · cost (Σ|w| of S4 = 1)


def test_trajectory_mean_over_audited_steps_and_episode_blend() -> None:
    t = rescue_traj(1.0)
    t.steps.insert(1, StepRecord(index=1, raw_output="???", parse_error="no action"))  # no audit
    sc = score_trajectory(t)
    audited = [s.A for s in sc.steps if s.has_audit]
    assert len(sc.steps) == 3 and len(audited) == 2 and not sc.steps[1].has_audit and sc.steps[1].A == 0.0
    assert sc.A == pytest.approx(sum(audited) / 2)
    assert blended_reward(sc) == pytest.approx(0.5 * sc.A + 0.5 * 1.0)
    assert score_trajectory(traj([], em=0.0)).A == 0.0


def test_semantic_is_the_transition_heuristic_domain_is_reserved_and_ablation() -> None:
    s = score_step(rescue_traj(), 0)
    assert s.fine["s3.semantic"] == 0.7 and s.fine["s3.domain"] == 0.0  # a FINAL→READ rescue
    assert s.correctness == pytest.approx(0.2 + 0.5 * 0.7)
    w = SignalWeights().without("timing")
    assert w.timing == 0 and math.isclose(sum(w.coarse_weights().values()), 1.0)
    assert w.outcome == pytest.approx(0.50 / 0.85)
    assert set(FAMILIES) == {"timing", "modality", "correctness", "outcome"}
