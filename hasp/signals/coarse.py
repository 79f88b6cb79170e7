"""Four-signal scoring of PF audit events (paper §3.2, Alg. 1 l.20-22, App. E, Table 15).

Every audited step gets 15 fine sub-signals in four families; each family is reduced to one coarse
signal (timing t_t, modality m_t, correctness q_t, outcome o_t) and the coarse signals are combined as
``A_t = λ_t t_t + λ_m m_t + λ_q q_t + λ_o o_t`` with (0.15, 0.10, 0.25, 0.50). The trajectory score
is ``A(τ) = mean A_t`` over the steps that carry an audit event (a step whose output could not be
parsed has no proposed action, hence nothing to score).

Sub-signal values (App. E) — all in [0, 1]; penalties carry negative *weights*, not negative values:

- timing      s1.tp    risky proposed action and some PF activated
              s1.fp    not risky but some PF activated
              s1.fn    risky and no PF activated
              s1.phase 1 - index/(T-1) when a PF activated (earlier interventions score higher), else 0
              "risky" is judged on the *proposed* action and the pre-step state: FINAL with no prior
              READ, FINAL at step_count < 3, SEARCH after empty results.
- modality    s2.pre_action   an applied MODIFY_ACTION (changed the action before it ran)
              s2.post_obs     an applied INJECT_CONTEXT (text appended to the observation)
              s2.pre_reasoning, s2.post_action  reserved slots, always 0 (weights registered anyway)
- correctness s3.syntactic    executed action has a known type and a non-empty argument
              s3.semantic     by transition: 0.7 FINAL→READ rescue, 0.5 other modification, 0.3
                              otherwise (the paper's teacher step judge is not part of this scorer:
                              Phase G runs without a teacher)
              s3.domain       reserved slot, always 0 (no domain quality function is defined for the
                              search domain); its weight stays registered so A_t keeps the paper's scale
- outcome     s4.local        by transition: 0.8 FINAL→READ, 0.7 FINAL→SEARCH, 0.5 SEARCH→SEARCH
                              rewrite, 0.3 any other modification, 0 unmodified
              s4.downstream   episode EM
              s4.cost         clip((T - 15) / 10, 0, 1), T = number of steps in the episode
              s4.side_effect  action modified but the episode still failed

Coarse reduction ("coarse mode"): ``family = Σ w·v / Σ|w|`` over the family's sub-signals
(family-internal normalisation keeps the sign of penalties); with ``normalize_families=False`` it is
the plain weighted sum ``Σ w·v``. Both are weighted sums within the family; only the scale differs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, make_dataclass, replace
from typing import Any, Mapping

from hasp.records import AuditEvent, Trajectory

# Every weight of the scorer, each written once (defaults: paper App. E, Table 15):
# family -> (coarse weight λ, what it weighs, {sub-signal -> (weight, what it measures)}).
# A negative weight makes the sub-signal a penalty; the values themselves stay in [0, 1].
SIGNALS: dict[str, tuple[float, str, dict[str, tuple[float, str]]]] = {
    "timing": (0.15, "λ_t: weight of the timing signal in A_t.", {
        "s1.tp": (0.25, "risky proposed action and a PF activated."),
        "s1.fp": (-0.10, "a PF activated on a non-risky step."),
        "s1.fn": (-0.10, "risky step but no PF activated."),
        "s1.phase": (0.05, "1 - index/(T-1) when a PF activated."),
    }),
    "modality": (0.10, "λ_m: weight of the modality signal in A_t.", {
        "s2.pre_action": (0.35, "an applied MODIFY_ACTION."),
        "s2.post_obs": (0.35, "an applied INJECT_CONTEXT."),
        "s2.pre_reasoning": (0.15, "reserved slot (value always 0), weight kept registered."),
        "s2.post_action": (0.15, "reserved slot (value always 0), weight kept registered."),
    }),
    "correctness": (0.25, "λ_q: weight of the correctness signal in A_t.", {
        "s3.syntactic": (0.20, "executed action type valid, arg non-empty."),
        "s3.semantic": (0.50, "value of the action transition (heuristic semantic score)."),
        "s3.domain": (0.30, "reserved slot (value always 0), weight kept registered."),
    }),
    "outcome": (0.50, "λ_o: weight of the outcome signal in A_t.", {
        "s4.local": (0.40, "value of the action transition a_orig→a_final."),
        "s4.downstream": (0.40, "episode exact match."),
        "s4.cost": (-0.10, "clip((T-cost_free_steps)/cost_ramp_steps)."),
        "s4.side_effect": (-0.10, "modified but episode failed."),
    }),
}
FAMILIES: dict[str, tuple[str, ...]] = {family: tuple(subs) for family, (_, _, subs) in SIGNALS.items()}
FINE_KEYS: tuple[str, ...] = tuple(k for keys in FAMILIES.values() for k in keys)  # the 15 dims
VALID_ACTIONS: frozenset[str] = frozenset({"SEARCH", "READ", "FINAL"})


def _h(text: str) -> dict[str, str]:
    return {"help": text}


def _weight_fields() -> list[tuple[str, type, Any]]:
    """The dataclass fields of ``SIGNALS``: the coarse weights (``timing``…), then the fine ones (``s1_tp``…)."""
    coarse = [(family, float, field(default=lam, metadata=_h(text))) for family, (lam, text, _) in SIGNALS.items()]
    fine = [(key.replace(".", "_"), float,
             field(default=w, metadata=_h(f"{key}{' (penalty)' if w < 0 else ''}: {text}")))
            for _, _, subs in SIGNALS.values() for key, (w, text) in subs.items()]
    return coarse + fine


_Weights = make_dataclass("_Weights", _weight_fields(), frozen=True, namespace={"__module__": __name__})


@dataclass(frozen=True)
class SignalWeights(_Weights):
    """Every weight and heuristic constant of the four-signal scorer (defaults: paper App. E, Table 15).

    The weights are the fields ``SIGNALS`` declares: the coarse ``timing`` … ``outcome`` and the fine
    ``s<k>_<name>``, which map to the sub-signal key ``s<k>.<name>``. They are code, not params: every
    consumer (Phase G, RS, OPD) scores with the defaults, and ``without`` builds an ablation.
    """

    # reduction
    normalize_families: bool = field(
        default=True, metadata=_h("Coarse mode: divide each family's Σw·v by Σ|w| (paper App. E); else raw Σw·v."))
    # heuristic constants
    semantic_rescue: float = field(default=0.7, metadata=_h("s3.semantic for a FINAL→READ rescue."))
    semantic_modified: float = field(default=0.5, metadata=_h("s3.semantic for any other modification."))
    semantic_other: float = field(default=0.3, metadata=_h("s3.semantic for an unmodified step."))
    local_final_read: float = field(default=0.8, metadata=_h("s4.local for FINAL→READ."))
    local_final_search: float = field(default=0.7, metadata=_h("s4.local for FINAL→SEARCH."))
    local_search_rewrite: float = field(default=0.5, metadata=_h("s4.local for a SEARCH→SEARCH query rewrite."))
    local_other: float = field(default=0.3, metadata=_h("s4.local for any other modification."))
    risky_final_before_step: int = field(
        default=3, metadata=_h("A FINAL proposed at step_count < this is risky (0-based step_count)."))
    cost_free_steps: int = field(default=15, metadata=_h("s4.cost is 0 up to this many steps."))
    cost_ramp_steps: int = field(default=10, metadata=_h("s4.cost reaches 1 this many steps after cost_free_steps."))
    success_em: float = field(default=1.0, metadata=_h("An episode with em >= this counts as successful."))
    episode_em_blend: float = field(
        default=0.5, metadata=_h("b of App. E's episode reward (1-b)·A(τ) + b·EM (50/50 blend; "
                                 "hasp.train.rewards.blended_reward)."))

    # -- views -------------------------------------------------------------------------------
    def fine_weights(self) -> dict[str, float]:
        """Sub-signal key (``s1.tp``) → weight, for the 15 registered sub-signals."""
        return {k: float(getattr(self, k.replace(".", "_"))) for k in FINE_KEYS}

    def coarse_weights(self) -> dict[str, float]:
        return {f: float(getattr(self, f)) for f in FAMILIES}

    def without(self, *families: str) -> "SignalWeights":
        """Signal ablation (App. G.2): zero the named families and renormalise the rest to sum to 1."""
        unknown = set(families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown signal families {sorted(unknown)}; expected {list(FAMILIES)}")
        kept = {f: (0.0 if f in families else w) for f, w in self.coarse_weights().items()}
        total = sum(kept.values())
        if total <= 0:
            raise ValueError("cannot drop every signal family")
        return replace(self, **{f: w / total for f, w in kept.items()})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepScore:
    timing: float
    modality: float
    correctness: float
    outcome: float
    A: float
    fine: dict[str, float]
    step: int = 0
    has_audit: bool = True
    risky: bool = False

    def coarse(self) -> dict[str, float]:
        return {"timing": self.timing, "modality": self.modality,
                "correctness": self.correctness, "outcome": self.outcome}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrajectoryScore:
    steps: list[StepScore]
    A: float  # mean A_t over audited steps
    em: float = 0.0  # episode EM clipped to [0, 1] (App. E's blend of the two: hasp.train.rewards.blended_reward)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- sub-signals ----------------------------------------------------------------------------------

def is_risky(audit: AuditEvent, w: SignalWeights = SignalWeights()) -> bool:
    """Risk of the *proposed* action given the pre-step state (App. E, S1)."""
    s, a = audit.state, audit.a_orig
    kind = a.type.upper()
    if kind == "FINAL":
        return (not s.get("has_read", False)) or int(s.get("step_count", 0)) < w.risky_final_before_step
    if kind == "SEARCH":
        return bool(s.get("empty_results", False))
    return False


def _applied(audit: AuditEvent, kind: str) -> bool:
    return any(f.get("type") == kind and f.get("applied", True) for f in audit.fired)


def _local(audit: AuditEvent, w: SignalWeights) -> float:
    if not audit.was_modified:
        return 0.0
    o, f = audit.a_orig.type.upper(), audit.a_final.type.upper()
    if o == "FINAL" and f == "READ":
        return w.local_final_read
    if o == "FINAL" and f == "SEARCH":
        return w.local_final_search
    if o == "SEARCH" and f == "SEARCH":
        return w.local_search_rewrite
    return w.local_other


def _semantic(audit: AuditEvent, w: SignalWeights) -> float:
    if audit.was_modified:
        if audit.a_orig.type.upper() == "FINAL" and audit.a_final.type.upper() == "READ":
            return w.semantic_rescue
        return w.semantic_modified
    return w.semantic_other


def _clip01(x: float) -> float:
    return 0.0 if math.isnan(x) else min(1.0, max(0.0, float(x)))


def fine_signals(traj: Trajectory, step_index: int, w: SignalWeights = SignalWeights(), *,
                 valid_actions: frozenset[str] = VALID_ACTIONS) -> dict[str, float] | None:
    """The 15 sub-signal values of one step (``None`` when the step has no audit event)."""
    step = traj.steps[step_index]
    audit = step.audit
    if audit is None:
        return None
    n_steps = len(traj.steps)
    activated = bool(audit.fired)
    risky = is_risky(audit, w)
    em = _clip01(traj.em)
    failed = traj.em < w.success_em
    v = dict.fromkeys(FINE_KEYS, 0.0)
    # S1 timing
    v["s1.tp"] = float(risky and activated)
    v["s1.fp"] = float(activated and not risky)
    v["s1.fn"] = float(risky and not activated)
    v["s1.phase"] = (1.0 - step_index / (n_steps - 1) if n_steps > 1 else 1.0) if activated else 0.0
    # S2 modality (pre_reasoning / post_action stay 0: no such intervention types)
    v["s2.pre_action"] = float(_applied(audit, "MODIFY_ACTION") and audit.was_modified)
    v["s2.post_obs"] = float(_applied(audit, "INJECT_CONTEXT") and bool(audit.context))
    # S3 correctness
    a = audit.a_final
    v["s3.syntactic"] = float(a.type.upper() in valid_actions and bool(str(a.arg).strip()))
    v["s3.semantic"] = _semantic(audit, w)  # s3.domain stays 0 (reserved)
    # S4 outcome
    v["s4.local"] = _local(audit, w)
    v["s4.downstream"] = em
    v["s4.cost"] = _clip01((n_steps - w.cost_free_steps) / max(1, w.cost_ramp_steps))
    v["s4.side_effect"] = float(audit.was_modified and failed)
    return v


def reduce_family(fine: Mapping[str, float], family: str, w: SignalWeights = SignalWeights()) -> float:
    """One coarse signal: Σ w·v over the family, divided by Σ|w| when ``normalize_families``."""
    fw = w.fine_weights()
    keys = FAMILIES[family]
    total = sum(fw[k] * fine.get(k, 0.0) for k in keys)
    if w.normalize_families:
        denom = sum(abs(fw[k]) for k in keys)
        return total / denom if denom > 0 else 0.0
    return total


def fine_score(fine: Mapping[str, float], w: SignalWeights = SignalWeights(), *, normalize: bool = False) -> float:
    """Fine mode (App. E): Σ_sub w_sub·value_sub over all 15 sub-signals, optionally / Σ|w_sub|."""
    fw = w.fine_weights()
    total = sum(fw[k] * fine.get(k, 0.0) for k in FINE_KEYS)
    if normalize:
        denom = sum(abs(x) for x in fw.values())
        return total / denom if denom > 0 else 0.0
    return total


def score_step(traj: Trajectory, step_index: int, weights: SignalWeights | None = None) -> StepScore:
    """z_t = (t_t, m_t, q_t, o_t) and A_t for one step; an unaudited step scores all zeros."""
    w = weights or SignalWeights()
    fine = fine_signals(traj, step_index, w)
    if fine is None:
        return StepScore(0.0, 0.0, 0.0, 0.0, 0.0, dict.fromkeys(FINE_KEYS, 0.0), step=step_index,
                         has_audit=False)
    coarse = {f: reduce_family(fine, f, w) for f in FAMILIES}
    A = sum(getattr(w, f) * coarse[f] for f in FAMILIES)
    audit = traj.steps[step_index].audit
    return StepScore(timing=coarse["timing"], modality=coarse["modality"], correctness=coarse["correctness"],
                     outcome=coarse["outcome"], A=A, fine=fine, step=step_index,
                     risky=is_risky(audit, w) if audit else False)


def score_trajectory(traj: Trajectory, weights: SignalWeights | None = None) -> TrajectoryScore:
    """Score every step; A(τ) is the mean A_t over steps with an audit event (0.0 if none)."""
    w = weights or SignalWeights()
    steps = [score_step(traj, i, w) for i in range(len(traj.steps))]
    audited = [s.A for s in steps if s.has_audit]
    A = sum(audited) / len(audited) if audited else 0.0
    return TrajectoryScore(steps=steps, A=A, em=_clip01(traj.em))
