"""SAGE (seed 001): GRPO over chains of two same-template training questions (``train.recipe: sage``).

A chain is two training questions that share a question template (``hasp.train.chains``). For every chain a
round runs G sequential rollouts from the checkpoint it starts from; one rollout is

1. task 1 with the run's library (a fresh copy per rollout),
2. the policy itself proposes a declared skill from that episode's failing steps, which is admitted
   into the rollout's library when it passes Phase D and its trigger fires on the episode (no val
   gate: task 2 is the skill's test),
3. task 2 with the library and that skill.

Skill-integrated reward, in our words: task 2 earns one extra point when it is solved *and* it used
the skill task 1 left; under the seed's rule (``bonus: seed``) task 1 earns the same extra point only
when it was itself solved as well, i.e. a skill counts as well made when it came from a success and
carried a later success. HASP proposes skills from failed episodes, so under the seed's rule a solved
task 1 has no skill to be credited for; ``bonus: repair`` pays task 1 its point whenever its skill
carried task 2 to success, solved or not. Both are reported apart.

Advantages are group-relative per chain and task position (the G rollouts of a chain's task 1 form
one group, its task 2 another), not divided by the std. Rows: every turn of task 1 and the proposal
turn (the student's prompt and its reply: the skill is part of task 1's output) with task 1's
advantage; every turn of task 2 with task 2's. The update is the GRPO one (``hasp.train.losses``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hasp.config import TrainParams
from hasp.records import Trajectory
from hasp.train.chains import SAGE_KEY
from hasp.train.grpo import group_advantages, turn_rows
from hasp.train.rounds import LogCallback, RecipeError, RecipeResult, Sampler, run_rounds


def chain_record(t: Trajectory) -> dict[str, Any]:
    rec = (t.harness.postprocess.get(SAGE_KEY) if t.harness is not None else None) or {}
    if not rec:
        raise RecipeError(f"{t.qid}: a SAGE trajectory without its chain record")
    return rec


def round_rows(trajs: list[Trajectory], rnd: int, train: TrainParams) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of one SAGE round: advantages per (chain, position) group; task 1's proposal turn takes
    task 1's advantage."""
    recs = [chain_record(t) for t in trajs]
    rewards = [float(r["reward"]) for r in recs]
    adv = group_advantages(rewards, [f"{r['chain']}#{r['position']}" for r in recs],
                           scale_by_std=train.sage.scale_by_std)
    rows: list[dict[str, Any]] = []
    for t, r, a in zip(trajs, recs, adv):
        if a == 0.0:
            continue
        extra = {"chain": r["chain"], "position": r["position"], "reward": round(float(r["reward"]), 6)}
        rows += turn_rows(t, a, source="sage", **extra)
        prop = r.get("proposal")
        if prop and prop.get("reply", "").strip():
            rows.append({"messages": [dict(m) for m in prop["messages"]]
                         + [{"role": "assistant", "content": prop["reply"].strip()}],
                         "sample_weight": round(a, 6), "source": "sage_proposal", "qid": t.qid, "step": -1,
                         **extra})
    first = [r for r in recs if r["position"] == 0]
    second = [r for r in recs if r["position"] == 1]
    stats = {"sampled": len(trajs), "rollouts": len(first), "rows": len(rows),
             "proposal_rows": sum(r["source"] == "sage_proposal" for r in rows),
             "negative_rows": sum(r["sample_weight"] < 0 for r in rows),
             "task1_solved": sum(r["outcome"] >= 1 for r in first),
             "task2_solved": sum(r["outcome"] >= 1 for r in second),
             "both_solved": sum(a["outcome"] >= 1 and b["outcome"] >= 1 for a, b in zip(first, second)),
             "skills_admitted": sum(bool(r["created"]) for r in first),
             "task2_used_skill": sum(r["used_earlier_skill"] for r in second),
             "mean_reward": round(statistics.fmean(rewards), 6) if rewards else 0.0}
    return rows, stats


def train_sage(model_dir: Path, chains: Sequence[Any], sample: Sampler, out_dir: Path, train: TrainParams, *,
               log_callback: LogCallback | None = None, inputs_key: str | None = None) -> RecipeResult:
    """``train.sage.iterations`` SAGE rounds from ``model_dir`` over ``chains`` (objects with an ``id``),
    ``sample`` running the sequential rollouts (``hasp.train.sage_sampler.SageSampler``)."""
    cfg = train.sage
    return run_rounds("sage", Path(model_dir), chains, sample, Path(out_dir), train, rounds=cfg.iterations,
                      build_rows=lambda trajs, i: round_rows(trajs, i, train), log_callback=log_callback,
                      inputs_key=inputs_key, repeats=cfg.group_size, policy_gradient=True, kl_beta=cfg.beta,
                      per_round=cfg.questions_per_round)
