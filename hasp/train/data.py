"""Phase H, Objective A ("use PFs"): scored steps → SFT / DPO jsonl rows (paper App. D.6).

Layer 1 scores each trajectory once with the four-signal aggregator (``score_all``: Phase G's summary,
the SFT and DPO rows, RS's filter and OPD's rows all read that one score) and drops rows under the
reward floor (0.25); both the 15-dim fine breakdown and the 4 coarse signals are stored on every row so an
offline re-scorer can re-weight without rerunning rollouts. Layer 2 renders a row:

- SFT: ``messages`` = the chat messages the policy saw at that step + the assistant target
  ``"Thought: <thought>\\nAction: <a_final>"`` (the PF-corrected action), rendered by the step
  record itself (``StepRecord.assistant_message``), the method the loop uses to extend the prompt;
  ``sample_weight`` = A_t.
- DPO: only steps with ``was_modified``; ``prompt`` = the messages, ``chosen`` = corrected action,
  ``rejected`` = the policy's original action (TRL's conversational preference format).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from hasp.config import SignalParams, default_of
from hasp.records import StepRecord, Trajectory
from hasp.signals.coarse import SignalWeights, StepScore, TrajectoryScore, score_trajectory
from hasp.train.rewards import reaches_floor, skill_author_reward

DEFAULT_REWARD_FLOOR = default_of(SignalParams, "reward_floor")
#: an episode with em at least this is a success (the scorer's own threshold)
SUCCESS_EM = SignalWeights().success_em


@dataclass(frozen=True)
class Scored:
    """A trajectory with its four-signal score, so that no consumer scores it again."""

    traj: Trajectory
    score: TrajectoryScore

    @property
    def success(self) -> bool:
        return self.traj.em >= SUCCESS_EM


def score_all(trajs: Iterable[Trajectory | dict[str, Any]]) -> list[Scored]:
    """Each trajectory (a record or its jsonl dict) scored once."""
    out = []
    for t in trajs:
        traj = t if isinstance(t, Trajectory) else Trajectory.from_dict(t)
        out.append(Scored(traj, score_trajectory(traj)))
    return out


def pf_applied(step: StepRecord) -> bool:
    """A PF fired *and* changed something: an applied MODIFY_ACTION or injected context."""
    a = step.audit
    if a is None:
        return False
    return a.was_modified or bool(a.context) or any(
        f.get("applied", True) and f.get("type") in ("MODIFY_ACTION", "INJECT_CONTEXT") for f in a.fired)


def _iter_scored(scored: Iterable[Scored], *, reward_floor: float,
                 only_modified: bool) -> Iterator[tuple[Trajectory, StepRecord, StepScore]]:
    """The steps where a PF fired and was applied (and, with ``only_modified``, rewrote the action)
    whose step advantage reaches ``reward_floor``. Whole successful trajectories are rejection
    sampling's rows (``hasp.train.rs``), not these."""
    for item in scored:
        traj = item.traj
        for step, sc in zip(traj.steps, item.score.steps):
            a = step.audit
            if a is None or not step.prompt_messages:
                continue
            if only_modified and not a.was_modified:
                continue
            if not pf_applied(step):
                continue
            if not reaches_floor(sc.A, reward_floor):
                continue
            yield traj, step, sc


def _meta(traj: Trajectory, step: StepRecord, sc: StepScore) -> dict[str, Any]:
    a = step.audit
    assert a is not None
    return {
        "sample_weight": round(sc.A, 6),
        "coarse": {k: round(v, 6) for k, v in sc.coarse().items()},
        "fine": {k: round(v, 6) for k, v in sc.fine.items()},
        "qid": traj.qid,
        "step": step.index,
        "was_modified": a.was_modified,
        "skill_ids": [f["skill_id"] for f in a.fired if f.get("applied", True)],
        "mode": a.mode,
        "variant": traj.variant,
        "em": traj.em,
        "a_orig": a.a_orig.render(),
        "a_final": a.a_final.render(),
        "target_type": a.a_final.type,
    }


def build_sft_rows(scored: Iterable[Scored], *, reward_floor: float = DEFAULT_REWARD_FLOOR) -> list[dict[str, Any]]:
    """SFT rows for Objective A from scored trajectories (``score_all``).

    Candidates are the steps where a PF fired and was applied. Rows with A_t < ``reward_floor``
    are dropped. Steps without an audit event (unparseable output) or without recorded prompt
    messages are skipped.
    """
    rows = []
    for traj, step, sc in _iter_scored(scored, reward_floor=reward_floor, only_modified=False):
        a = step.audit
        assert a is not None
        messages = [dict(m) for m in step.prompt_messages] + [step.assistant_message()]
        rows.append({"messages": messages, **_meta(traj, step, sc)})
    return rows


def build_dpo_rows(scored: Iterable[Scored], *, reward_floor: float = DEFAULT_REWARD_FLOOR) -> list[dict[str, Any]]:
    """Preference rows (chosen = PF-corrected action, rejected = original) on ``was_modified`` steps only."""
    rows = []
    for traj, step, sc in _iter_scored(scored, reward_floor=reward_floor, only_modified=True):
        a = step.audit
        assert a is not None
        rows.append({"prompt": [dict(m) for m in step.prompt_messages],
                     "chosen": [step.assistant_message()],
                     "rejected": [step.assistant_message(a.a_orig)],
                     **_meta(traj, step, sc)})
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and weight statistics for MLflow (the ``per_*`` counts are nested dicts; the rest are scalars)."""
    weights = [float(r.get("sample_weight", 0.0)) for r in rows]
    skills: Counter[str] = Counter(s for r in rows for s in r.get("skill_ids", []))
    modes: Counter[str] = Counter(str(r.get("mode", "")) for r in rows)
    targets: Counter[str] = Counter(str(r.get("target_type", "")) for r in rows)
    n = len(rows)
    out: dict[str, Any] = {
        "n_rows": n,
        "n_modified": sum(bool(r.get("was_modified")) for r in rows),
        "n_qids": len({r.get("qid") for r in rows}),
        "mean_weight": sum(weights) / n if n else 0.0,
        "min_weight": min(weights) if n else 0.0,
        "max_weight": max(weights) if n else 0.0,
        "per_skill": dict(sorted(skills.items())),
        "per_mode": dict(sorted(modes.items())),
        # SEARCH/READ/FINAL count of the targets: a set whose PFs only ever defer the answer
        # (no FINAL target) can train a policy that stops answering
        "per_target_type": dict(sorted(targets.items())),
    }
    for sig in ("timing", "modality", "correctness", "outcome"):
        vals = [float(r.get("coarse", {}).get(sig, 0.0)) for r in rows]
        out[f"mean_{sig}"] = sum(vals) / n if n else 0.0
    return out


def signal_summary(scored: list[Scored]) -> dict[str, Any]:
    """Phase G's numbers: mean A(τ) over trajectories and the mean coarse signals over every step."""
    steps = [s for item in scored for s in item.score.steps]
    n = max(1, len(steps))
    return {"trajectory_A_mean": sum(item.score.A for item in scored) / max(1, len(scored)),
            "step_mean": {k: sum(getattr(s, k) for s in steps) / n
                          for k in ("timing", "modality", "correctness", "outcome", "A")},
            "scored_steps": len(steps)}


# ----------------------------------------------------------------------------- Objective B ("evolve")
# The skill author is trained on its own proposals: the prompt is the Phase-C proposal prompt
# for the cluster, the completion the candidate's SKILL.md + PF code in the two-block format the
# proposal parser reads (a declared PF: the reply that declares it, given as ``targets``), and the
# reward r_skill = Q_skill + λ·ΔEM_val (App. D.6, E).

_EXEC_CHECKS = ("syntax", "policy", "interface", "mock_exec", "return_types")
_REVIEW_DIMS = ("q_concept", "q_trigger", "q_intervene", "q_exec", "q_val")


def skill_completion(skill_md: str, code: str) -> str:
    """The assistant target for a skill-authoring row (the format ``parse_proposal`` expects)."""
    return f"```markdown\n{skill_md.rstrip()}\n```\n\n```python\n{code.rstrip()}\n```"


def build_skill_records(candidates: Iterable[dict[str, Any]], *, reviews: Iterable[dict[str, Any]] = (),
                        exec_reports: Iterable[dict[str, Any]] = (), val_results: Iterable[dict[str, Any]] = (),
                        decisions: Iterable[dict[str, Any]] = (), lam: float = 0.5,
                        targets: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One scored record per candidate that has a proposal prompt and a target: its code, or for a
    declared PF (no code) ``targets[skill_id]``, the reply that declares it (Phase C's format).

    ``fine`` holds every measured sub-score (five review dimensions, Phase-D checks, val
    deltas); ``coarse`` the three numbers the reward is made of. A candidate never reviewed
    (lite mode) has ``r_skill = None`` and is kept as a record but gets no training row.
    """
    rv = {r["skill_id"]: r for r in reviews}
    ex = {r["skill_id"]: r for r in exec_reports}
    va = {r["skill_id"]: r for r in val_results}
    dec = {r["skill_id"]: r for r in decisions}
    out = []
    for c in candidates:
        sid = c["skill_id"]
        code = c.get("code", "")
        completion = skill_completion(c.get("skill_md", ""), code) if code.strip() else (targets or {}).get(sid)
        if not completion or not c.get("prompt_messages"):
            continue
        r, e, v, d = rv.get(sid), ex.get(sid), va.get(sid), dec.get(sid, {})
        reviewed = r is not None and r.get("decided_by") != "not_reviewed"
        q_skill = float(r["q_skill"]) if reviewed else None
        d_em = v.get("delta_em") if v else None
        d_f1 = v.get("delta_f1") if v else None
        r_skill = skill_author_reward(q_skill, d_em, lam)
        fine: dict[str, float | None] = {k: (float(r[k]) if reviewed else None) for k in _REVIEW_DIMS}
        checks = (e or {}).get("checks") or {}
        fine.update({f"exec.{k}": (float(bool(checks[k])) if k in checks else None) for k in _EXEC_CHECKS})
        fine.update({"delta_em_val": d_em, "delta_f1_val": d_f1})
        out.append({
            "skill_id": sid, "category": c.get("cluster_category", ""), "epoch": c.get("epoch", 0),
            "prompt": [dict(m) for m in c["prompt_messages"]],
            "completion": completion,
            "admitted": bool(d.get("admitted", False)), "decision_reasons": d.get("reason", ""),
            "q_skill": q_skill, "r_skill": r_skill,
            "coarse": {"q_skill": q_skill, "delta_em_val": d_em, "r_skill": r_skill},
            "fine": fine,
        })
    return out


def build_skill_sft_rows(records: Iterable[dict[str, Any]], *,
                         reward_floor: float = DEFAULT_REWARD_FLOOR) -> list[dict[str, Any]]:
    """SFT rows for the skill author; ``sample_weight = r_skill``, rows under the floor dropped."""
    rows = []
    for r in records:
        if not reaches_floor(r["r_skill"], reward_floor):
            continue
        rows.append({"objective": "B", "messages": r["prompt"] + [{"role": "assistant", "content": r["completion"]}],
                     "sample_weight": r["r_skill"], "coarse": r["coarse"], "fine": r["fine"],
                     "skill_id": r["skill_id"], "category": r["category"], "epoch": r["epoch"],
                     "admitted": r["admitted"]})
    return rows


def build_skill_dpo_rows(records: Iterable[dict[str, Any]], *, earlier: Iterable[dict[str, Any]] = (),
                         reward_floor: float = DEFAULT_REWARD_FLOOR) -> list[dict[str, Any]]:
    """Preference pairs for one failure cluster (category): an admitted candidate (chosen,
    r_skill >= floor) against a refused one (rejected). ``earlier`` records (previous epochs)
    may supply either side, so a cluster proposed once per epoch still yields pairs; every
    pair involves at least one record of ``records``. The prompt is the chosen one's."""
    current = list(records)
    pool = current + list(earlier)
    cur_ids = {id(r) for r in current}
    rows = []
    for ch in pool:
        if not ch["admitted"] or not reaches_floor(ch["r_skill"], reward_floor):
            continue
        for rj in pool:
            if rj["admitted"] or rj["category"] != ch["category"]:
                continue
            if id(ch) not in cur_ids and id(rj) not in cur_ids:
                continue
            rows.append({"objective": "B", "prompt": ch["prompt"],
                         "chosen": [{"role": "assistant", "content": ch["completion"]}],
                         "rejected": [{"role": "assistant", "content": rj["completion"]}],
                         "sample_weight": ch["r_skill"],
                         "coarse": {"chosen": ch["coarse"], "rejected": rj["coarse"]},
                         "fine": {"chosen": ch["fine"], "rejected": rj["fine"]},
                         "category": ch["category"], "chosen_skill_id": ch["skill_id"],
                         "rejected_skill_id": rj["skill_id"], "epochs": [ch["epoch"], rj["epoch"]]})
    return rows
