"""The skill-integrated reward of a chain of tasks, and where each task's record of it is kept.

Why a module of its own: three readers need it (the SAGE recipe's rows, rejection sampling's ranking,
the sequential-rollout run) and the recipes that read it import one another's helpers, so the one
definition sits below all of them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from hasp.records import Trajectory

#: where a chain task's record sits in ``harness.postprocess``: a dict with at least ``chain``,
#: ``position``, ``outcome`` and ``reward`` (the skill-integrated reward), written by every chain runner
#: (the SAGE sampler and ``hasp evolve sage``) and read by SAGE's rows and rejection sampling's ranking
SAGE_KEY = "sage"


def skill_integrated_rewards(outcomes: Sequence[float], used: Sequence[Collection[int]], *, bonus: str = "seed",
                             solved: Sequence[bool] | None = None) -> list[float]:
    """R_k of every task of one chain from its outcome rewards; ``used[i]`` holds the positions k < i whose
    skills fired in task i, ``solved`` which tasks were solved (default: outcome reward 1, the seed's
    ``1[r = 1]``). A solved task that used an earlier skill earns one point; a task whose skill a later
    solved task used earns one point, under ``bonus`` "seed" (seed 001) only when it was solved itself,
    under "repair" whether or not (``hasp.train.sage`` says why both). Every chain runner computes its rewards here."""
    ok = list(solved) if solved is not None else [r >= 1 for r in outcomes]
    out = []
    for k, r in enumerate(outcomes):
        carried = any(ok[i] and k in used[i] for i in range(k + 1, len(outcomes)))
        made = 1.0 if carried and (ok[k] or bonus == "repair") else 0.0
        out.append(float(r) + made + (1.0 if ok[k] and used[k] else 0.0))
    return out


def chain_task_record(chain: str, position: int, outcome: float, reward: float, *, created: Sequence[str] = (),
                      used: Sequence[int] = (), **extra: Any) -> dict[str, Any]:
    """The record a chain runner keeps under ``SAGE_KEY`` for one task: its chain and position, its outcome
    and skill-integrated reward, the skills it created and what it used of the earlier tasks' skills (the
    skill ids in the SAGE sampler, the earlier positions in ``hasp evolve sage``)."""
    return {"chain": chain, "position": position, "outcome": float(outcome), "reward": float(reward),
            "created": list(created), "used": list(used), "used_earlier_skill": bool(used), **extra}


def chain_reward(t: Trajectory) -> float | None:
    """The skill-integrated reward a chain runner recorded for ``t``; None for an episode outside a chain."""
    rec = t.harness.postprocess.get(SAGE_KEY) if t.harness is not None else None
    r = rec.get("reward") if isinstance(rec, dict) else None
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else None
