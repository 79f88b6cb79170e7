"""Metrics of one (dataset, variant) cell, on top of the rollout summary every phase shares."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from hasp.records import Trajectory
from hasp.eval.records import EpisodeRecord

#: intervention types by level (paper §3: action-level rewrite vs context-level injection)
ACTION_LEVEL = "MODIFY_ACTION"
CONTEXT_LEVEL = "INJECT_CONTEXT"


def intervention_levels(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Applied PF fires split into action-level and context-level, with their shares."""
    types = Counter(f.get("type") for t in trajs for a in t.audits() for f in a.fired if f.get("applied", True))
    action, context = types.get(ACTION_LEVEL, 0), types.get(CONTEXT_LEVEL, 0)
    both = action + context
    return {"pf_action_fires": action, "pf_context_fires": context,
            "pf_other_fires": sum(types.values()) - both,
            "pf_action_share": action / both if both else 0.0,
            "pf_context_share": context / both if both else 0.0}


def summarize_cell(records: Sequence[EpisodeRecord], wall_s: float) -> dict[str, Any]:
    """``summarize_rollout`` + intervention levels, teacher tokens, judge accuracy, errors, time."""
    from hasp.evolve.epoch import summarize_rollout

    trajs = [r.traj for r in records]
    s = summarize_rollout(trajs)
    s.update(intervention_levels(trajs))
    n = max(1, len(records))
    s["episodes_with_fires"] = sum(1 for t in trajs if t.fired_skills()) / n
    s["teacher_prompt_tokens"] = sum(r.teacher_prompt_tokens for r in records)
    s["teacher_completion_tokens"] = sum(r.teacher_completion_tokens for r in records)
    s["teacher_tokens"] = s["teacher_prompt_tokens"] + s["teacher_completion_tokens"]
    s["episode_errors"] = sum(1 for r in records if r.error)
    snippets = [r.snippet for r in records if r.snippet is not None]
    if snippets:
        s["snippet_calls"] = sum(x.calls for x in snippets)
        s["snippet_fallbacks"] = sum(x.fallbacks for x in snippets)
    verdicts = [r.judge for r in records if r.judge is not None]
    if verdicts:
        judged = [v for v in verdicts if v.correct is not None]
        s["judge_n"] = len(judged)
        s["judge_errors"] = len(verdicts) - len(judged)
        if judged:  # no usable verdict at all: no accuracy, rather than a made-up 0
            s["judge_acc"] = sum(1 for v in judged if v.correct) / len(judged)
        s["judge_tokens"] = sum(v.prompt_tokens + v.completion_tokens for v in verdicts)
    s["wall_s"] = wall_s
    s["episode_wall_s_mean"] = s["wall_s_sum"] / n
    return s
