"""Phase H, Objective A ("use PFs"): scored steps → SFT / DPO jsonl rows (paper App. D.6).

Layer 1 scores each step with the four-signal aggregator and drops rows under the reward floor
(0.25); both the 15-dim fine breakdown and the 4 coarse signals are stored on every row so an
offline re-scorer can re-weight without rerunning rollouts. Layer 2 renders a row:

- SFT: ``messages`` = the chat messages the policy saw at that step + the assistant target
  ``"Thought: <thought>\\nAction: <a_final>"`` (the PF-corrected action, rendered exactly as the
  loop writes it into the history), ``sample_weight`` = A_t.
- DPO: only steps with ``was_modified``; ``prompt`` = the messages, ``chosen`` = corrected action,
  ``rejected`` = the policy's original action (TRL's conversational preference format).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator

from hasp.agent.records import Action, StepRecord, Trajectory
from hasp.signals.coarse import SemanticJudge, SignalWeights, StepScore, score_trajectory

DEFAULT_REWARD_FLOOR = 0.25


def _as_traj(t: Trajectory | dict[str, Any]) -> Trajectory:
    return t if isinstance(t, Trajectory) else Trajectory.from_dict(t)


def assistant_turn(thought: str, action: Action) -> dict[str, str]:
    """The assistant message for one step, identical to what ``run_episode`` appends to the history."""
    return {"role": "assistant", "content": f"Thought: {thought}\nAction: {action.render()}"}


def pf_applied(step: StepRecord) -> bool:
    """A PF fired *and* changed something: an applied MODIFY_ACTION or injected context."""
    a = step.audit
    if a is None:
        return False
    return a.was_modified or bool(a.context) or any(
        f.get("applied", True) and f.get("type") in ("MODIFY_ACTION", "INJECT_CONTEXT") for f in a.fired)


def _iter_scored(trajs: Iterable[Trajectory | dict[str, Any]], *, reward_floor: float, only_pf_steps: bool,
                 only_modified: bool, weights: SignalWeights | None,
                 semantic_judge: SemanticJudge | None) -> Iterator[tuple[Trajectory, StepRecord, StepScore]]:
    w = weights or SignalWeights()
    for t in trajs:
        traj = _as_traj(t)
        success = traj.em >= w.success_em
        scores = score_trajectory(traj, w, semantic_judge=semantic_judge)
        for step, sc in zip(traj.steps, scores.steps):
            a = step.audit
            if a is None or not step.prompt_messages:
                continue
            if only_modified and not a.was_modified:
                continue
            if not (pf_applied(step) or (not only_pf_steps and success)):
                continue
            if sc.A < reward_floor:
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
    }


def build_sft_rows(trajs: Iterable[Trajectory | dict[str, Any]], *, reward_floor: float = DEFAULT_REWARD_FLOOR,
                   only_pf_steps: bool = True, weights: SignalWeights | None = None,
                   semantic_judge: SemanticJudge | None = None) -> list[dict[str, Any]]:
    """SFT rows for Objective A.

    Candidates are the steps where a PF fired and was applied; with ``only_pf_steps=False`` every
    audited step of a successful trajectory (em >= ``weights.success_em``) is added as well. Rows
    with A_t < ``reward_floor`` are dropped. Steps without an audit event (unparseable output) or
    without recorded prompt messages are skipped.
    """
    rows = []
    for traj, step, sc in _iter_scored(trajs, reward_floor=reward_floor, only_pf_steps=only_pf_steps,
                                       only_modified=False, weights=weights, semantic_judge=semantic_judge):
        a = step.audit
        assert a is not None
        messages = [dict(m) for m in step.prompt_messages] + [assistant_turn(step.thought, a.a_final)]
        rows.append({"messages": messages, **_meta(traj, step, sc)})
    return rows


def build_dpo_rows(trajs: Iterable[Trajectory | dict[str, Any]], *, reward_floor: float = DEFAULT_REWARD_FLOOR,
                   weights: SignalWeights | None = None,
                   semantic_judge: SemanticJudge | None = None) -> list[dict[str, Any]]:
    """Preference rows (chosen = PF-corrected action, rejected = original) on ``was_modified`` steps only."""
    rows = []
    for traj, step, sc in _iter_scored(trajs, reward_floor=reward_floor, only_pf_steps=True,
                                       only_modified=True, weights=weights, semantic_judge=semantic_judge):
        a = step.audit
        assert a is not None
        rows.append({"prompt": [dict(m) for m in step.prompt_messages],
                     "chosen": [assistant_turn(step.thought, a.a_final)],
                     "rejected": [assistant_turn(step.thought, a.a_orig)],
                     **_meta(traj, step, sc)})
    return rows


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows atomically: a temp file beside ``path``, fsync, then ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and weight statistics for MLflow (``per_skill`` is a nested dict; the rest are scalars)."""
    weights = [float(r.get("sample_weight", 0.0)) for r in rows]
    skills: Counter[str] = Counter(s for r in rows for s in r.get("skill_ids", []))
    modes: Counter[str] = Counter(str(r.get("mode", "")) for r in rows)
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
    }
    for sig in ("timing", "modality", "correctness", "outcome"):
        vals = [float(r.get("coarse", {}).get(sig, 0.0)) for r in rows]
        out[f"mean_{sig}"] = sum(vals) / n if n else 0.0
    return out
