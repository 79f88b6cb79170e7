"""Four-signal scoring of PF audit events (timing, modality, correctness, outcome; paper §3.2, App. E)."""

from hasp.signals.coarse import (
    FAMILIES,
    FINE_KEYS,
    SignalWeights,
    StepScore,
    TrajectoryScore,
    fine_score,
    fine_signals,
    is_risky,
    reduce_family,
    score_step,
    score_trajectory,
)

__all__ = [
    "FAMILIES",
    "FINE_KEYS",
    "SignalWeights",
    "StepScore",
    "TrajectoryScore",
    "fine_score",
    "fine_signals",
    "is_risky",
    "reduce_family",
    "score_step",
    "score_trajectory",
]
