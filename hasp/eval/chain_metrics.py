"""SAGE's metrics over chains of similar tasks (seed 001, §4.1 and §4.3), from per-task records.

Why: a skill is only worth something on a later task of the same chain, so a chain run is judged
per task and per chain. TGC (task goal completion) is the share of tasks solved; SGC (scenario
goal completion) the share of chains whose every task is solved, which rewards carrying a skill
from one task to the next. Skill use counts the tasks that could use a skill made earlier in their
chain (every task but the chain's first) and did; success with and without that use says whether
the skills help. Steps and generated tokens per task measure the cost. Any producer of chain runs
(the sequential rollout, a training recipe over chains) builds ``ChainRecord`` rows and gets the
same numbers from ``chain_metrics`` and, for two arms on the same chains, ``chain_differences``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hasp.stats import bootstrap_mean, paired_difference, rate


@dataclass(frozen=True)
class ChainRecord:
    """One task of one chain, as the metrics need it."""

    chain: int | str
    position: int
    em: float
    #: a skill created by an earlier task of the same chain fired in this task
    used_earlier_skill: bool
    #: the policy's steps (turns) in the episode
    steps: int
    #: tokens the policy generated over the episode (teacher calls not included)
    completion_tokens: int

    @property
    def solved(self) -> bool:
        return self.em > 0


def _by_chain(tasks: Sequence[ChainRecord]) -> dict[int | str, list[ChainRecord]]:
    """Each chain's tasks in position order, chains in a fixed order, so the bootstrap intervals do
    not depend on the order the records came in."""
    chains: dict[int | str, list[ChainRecord]] = defaultdict(list)
    for t in tasks:
        chains[t.chain].append(t)
    return {c: sorted(chains[c], key=lambda t: t.position) for c in sorted(chains, key=str)}


def _later(chains: Mapping[int | str, Sequence[ChainRecord]]) -> list[ChainRecord]:
    """The tasks that had an earlier task of their chain, hence a chance to use its skill."""
    return [t for rows in chains.values() for t in rows[1:]]


def _flag(ok: bool) -> float:
    return 1.0 if ok else 0.0


def chain_metrics(tasks: Sequence[ChainRecord]) -> dict[str, Any]:
    """TGC, SGC, skill use, success with and without a used skill, and mean steps and generated
    tokens per task of one arm; rates carry their Wilson 95 % interval, means a bootstrap one."""
    chains = _by_chain(tasks)
    ordered = [t for rows in chains.values() for t in rows]
    later = _later(chains)
    used = [t for t in later if t.used_earlier_skill]
    unused = [t for t in later if not t.used_earlier_skill]
    return {
        "tasks": len(ordered), "chains": len(chains),
        "tgc": rate([_flag(t.solved) for t in ordered]).to_dict(),
        "sgc": rate([_flag(all(t.solved for t in rows)) for rows in chains.values()]).to_dict(),
        "skill_use": rate([_flag(t.used_earlier_skill) for t in later]).to_dict(),
        "success_when_used": rate([_flag(t.solved) for t in used]).to_dict(),
        "success_when_not_used": rate([_flag(t.solved) for t in unused]).to_dict(),
        "mean_steps": bootstrap_mean([t.steps for t in ordered]).to_dict(),
        "mean_completion_tokens": bootstrap_mean([t.completion_tokens for t in ordered]).to_dict(),
    }


def chain_differences(before: Sequence[ChainRecord], after: Sequence[ChainRecord]) -> dict[str, Any]:
    """``after - before`` on the same chains: TGC, steps and generated tokens per task present in
    both arms (matched by chain and position), SGC per chain whose tasks are the same in both."""
    b = {(t.chain, t.position): t for t in before}
    a = {(t.chain, t.position): t for t in after}
    common = sorted(set(a) & set(b), key=lambda k: (str(k[0]), k[1]))
    b_chains, a_chains = _by_chain(before), _by_chain(after)
    same = [c for c in a_chains
            if c in b_chains and [t.position for t in a_chains[c]] == [t.position for t in b_chains[c]]]

    def paired(value: Callable[[ChainRecord], float]) -> dict[str, Any]:
        return paired_difference([value(b[k]) for k in common], [value(a[k]) for k in common]).to_dict()

    def chain_solved(rows: Sequence[ChainRecord]) -> float:
        return _flag(all(t.solved for t in rows))

    return {
        "tgc": paired(lambda t: _flag(t.solved)),
        "sgc": paired_difference([chain_solved(b_chains[c]) for c in same],
                                 [chain_solved(a_chains[c]) for c in same]).to_dict(),
        "mean_steps": paired(lambda t: t.steps),
        "mean_completion_tokens": paired(lambda t: t.completion_tokens),
    }


def _rate_text(r: Mapping[str, Any]) -> str:
    if not r["n"]:
        return "n/a (0/0)"
    lo, hi = r["ci95"]
    return f"{r['p']:.3f} [{lo:.3f}, {hi:.3f}] ({r['k']:g}/{r['n']})"


def _mean_text(d: Mapping[str, Any], fmt: str = ".2f") -> str:
    lo, hi = d["ci95"]
    return f"{d['mean']:{fmt}} [{lo:{fmt}}, {hi:{fmt}}] (n={d['n']})"


def metric_lines(arms: Mapping[str, Mapping[str, Any]], difference: Mapping[str, Any] | None = None,
                 difference_label: str = "difference") -> list[str]:
    """Readable lines of ``chain_metrics`` outputs (one per arm, keyed by the arm's name) and of a
    ``chain_differences`` output: one line per metric, arms side by side."""
    lines = []
    for metric, label in (("tgc", "TGC (tasks solved)"), ("sgc", "SGC (chains fully solved)"),
                          ("skill_use", "skill use (later tasks using an earlier skill)"),
                          ("success_when_used", "EM when an earlier skill was used"),
                          ("success_when_not_used", "EM when none was used")):
        arms_text = "; ".join(f"{name} {_rate_text(m[metric])}" for name, m in arms.items())
        lines.append(f"{label}: {arms_text}")
    for metric, label, fmt in (("mean_steps", "steps per task", ".2f"),
                               ("mean_completion_tokens", "generated tokens per task", ".1f")):
        arms_text = "; ".join(f"{name} {_mean_text(m[metric], fmt)}" for name, m in arms.items())
        lines.append(f"{label}: {arms_text}")
    if difference is not None:
        lines.append(f"{difference_label}: " + "; ".join(
            f"{name} {_mean_text(difference[key], fmt)}" for key, name, fmt in (
                ("tgc", "TGC", "+.3f"), ("sgc", "SGC", "+.3f"), ("mean_steps", "steps", "+.2f"),
                ("mean_completion_tokens", "tokens", "+.1f"))))
    return lines
