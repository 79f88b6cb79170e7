"""``hasp evolve sage``: sequential rollout over chains of similar tasks, compared with plain rollouts.

Why: whether a generated skill is any good shows only on a later task it applies to. The chains
(same-template tasks, ``hasp.train.chains.build_chains``) run through the one chain runner
(``hasp.train.chains.run_chain``), each against its own copy of the library; after each failed task
the student proposes a declared repair from that episode's failing steps, and a repair that passes
Phase D is admitted at once, so the next task of the chain runs with it.

Skill-integrated reward of task k in a chain of K (outcomes r in {0, 1}):

    R_k = r_k + max_{i>k} 1[r_i = 1]·used(i, k)  +  1[r_k = 1]·used(k, <k)

``used(i, k)``: a PF admitted after task k fired in task i. The second term rewards generating a
skill a later task succeeds with, the third using earlier skills to succeed. SAGE also asks
``r_k = 1`` for the generation term (``evolve.sage_bonus: seed``); HASP mines repairs from *failed*
tasks, so by default it does not (``repair``: ``hasp.train.rewards.skill_integrated_rewards``).
The reward is written per trajectory in the chain record the SAGE recipe reads too
(``hasp.train.chains.SAGE_KEY``), for rejection sampling to rank by. The summary scores both
arms, sequential and plain (base library, same chains), with SAGE's chain metrics
(``hasp.eval.chain_metrics``: TGC, SGC, skill use, steps and generated tokens per task).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp.eval.chain_metrics import ChainRecord, chain_differences, chain_metrics
from hasp.records import Trajectory
from hasp.stats import paired_difference, rate
from hasp.train.chains import Grow, RunTask, build_chains, run_chain, run_in_chain
from hasp.train.rewards import Bonus


@dataclass
class ComparedTask:
    """One task of a chain: its outcome and cost, the skills it created and the earlier ones it used,
    and the same task's outcome and cost in the plain rollout (base library) when there is one."""

    chain: int
    position: int
    qid: str
    em: float
    created: list[str] = field(default_factory=list)
    used_from: list[int] = field(default_factory=list)  # positions whose skills fired here
    used_skills: list[str] = field(default_factory=list)
    reward: float = 0.0
    steps: int = 0
    completion_tokens: int = 0
    plain_em: float | None = None
    plain_steps: int | None = None
    plain_completion_tokens: int | None = None

    def record(self) -> ChainRecord:
        return ChainRecord(chain=self.chain, position=self.position, em=self.em,
                           used_earlier_skill=bool(self.used_from), steps=self.steps,
                           completion_tokens=self.completion_tokens)

    def plain_record(self) -> ChainRecord | None:
        """The plain rollout's side; its base library holds no skill of the chain, so none is used."""
        if self.plain_em is None:
            return None
        return ChainRecord(chain=self.chain, position=self.position, em=self.plain_em, used_earlier_skill=False,
                           steps=self.plain_steps or 0, completion_tokens=self.plain_completion_tokens or 0)


@dataclass
class SequentialResult:
    tasks: list[ComparedTask]
    refusals: list[str]

    def summary(self) -> dict[str, Any]:
        seq = [t.em for t in self.tasks]
        plain = [t.plain_em for t in self.tasks if t.plain_em is not None]
        created = [s for t in self.tasks for s in t.created]
        reused = {s for t in self.tasks for s in t.used_skills}
        out: dict[str, Any] = {
            "chains": len({t.chain for t in self.tasks}), "tasks": len(self.tasks),
            "skills_created": len(created), "skills_reused_later": len(reused & set(created)),
            "tasks_using_earlier_skills": sum(1 for t in self.tasks if t.used_from),
            "em_sequential": rate(seq).to_dict(),
            "mean_reward": round(sum(t.reward for t in self.tasks) / max(1, len(self.tasks)), 4),
            "proposal_refusals": len(self.refusals),
        }
        seq_records = [t.record() for t in self.tasks]
        out["sequential"] = chain_metrics(seq_records)
        if len(plain) == len(seq):
            out["em_plain"] = rate(plain).to_dict()
            out["em_difference"] = paired_difference(plain, seq).to_dict()
            plain_records = [r for t in self.tasks if (r := t.plain_record()) is not None]
            out["plain"] = chain_metrics(plain_records)
            out["sequential_minus_plain"] = chain_differences(plain_records, seq_records)
        by_pos: dict[int, list[float]] = defaultdict(list)
        for t in self.tasks:
            by_pos[t.position].append(t.em)
        out["em_by_position"] = {str(p): rate(v).to_dict() for p, v in sorted(by_pos.items())}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "tasks": [asdict(t) for t in self.tasks], "refusals": self.refusals}


def sequential_rollout(chains: Sequence[Sequence[Any]], *, base_library: Path, work_dir: Path, run_task: RunTask,
                       grow: Grow, bonus: Bonus, plain: dict[str, Trajectory] | None = None,
                       on_task: Callable[[], None] | None = None) -> tuple[SequentialResult, list[Trajectory]]:
    """Run every chain through ``run_chain``, growing a per-chain copy of ``base_library`` after each
    failed task (``work_dir/chain_<c>/library``, kept); ``bonus`` is the maker's rule of the reward.

    ``plain`` (qid -> trajectory with the base library) adds the comparison columns. Returns the
    result and every sequential trajectory (the chain record in ``harness.postprocess``).
    """
    tasks: list[ComparedTask] = []
    trajs: list[Trajectory] = []
    refusals: list[str] = []
    for c, chain in enumerate(chains):
        for t in run_chain(str(c), chain, base_library=base_library, chain_dir=work_dir / f"chain_{c:03d}",
                           run_task=run_task, grow=grow, grow_after="failed", bonus=bonus, on_task=on_task):
            qid = t.traj.qid
            base = plain.get(qid) if plain else None
            tasks.append(ComparedTask(
                chain=c, position=t.position, qid=qid, em=float(t.traj.em), created=t.created,
                used_from=t.used_positions, used_skills=t.used_skills, reward=t.reward, steps=len(t.traj.steps),
                completion_tokens=t.traj.completion_tokens,
                plain_em=float(base.em) if base is not None else None,
                plain_steps=len(base.steps) if base is not None else None,
                plain_completion_tokens=base.completion_tokens if base is not None else None))
            refusals += [f"chain {c} task {t.position} ({qid}): {w}"
                         for w in (t.growth.refusals if t.growth is not None else [])]
            trajs.append(t.traj)
    return SequentialResult(tasks=tasks, refusals=refusals), trajs


# --------------------------------------------------------------------------- the run, on real components

def sage_run(params: Any, data_dir: Path, library: Path, out_dir: Path, *, policy: Any, student: Any,
             split: str = "train", chain_length: int = 3, limit: int | None = None) -> dict[str, Any]:
    """Plain rollouts and sequential rollouts on the same chained questions of ``split``; writes
    ``sequential.json``, ``sequential.jsonl`` (trajectories with their reward) and ``plain.jsonl``."""
    from hasp.agent.rollout import write_trajectories
    from hasp.atomic import write_json
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.evolve.chain_skill import chain_grower
    from hasp.evolve.epoch_task import epoch_task
    from hasp.pf.library import load_library
    from hasp.progress import Progress

    task = epoch_task(params, Path(data_dir))  # evolve.domain's items: search's split files or a task's pool
    domain = task.domain
    chains = build_chains(task.items(split, limit), chain_length, seed=params.data.seed, identity=domain.identity)
    items = [it for chain in chains for it in chain]
    spec, index = episode_spec(params, domain, "pf"), domain.open(params)

    base = load_library(library, domain.name, sandbox=params.sandbox)
    try:
        plain_trajs = [r.traj for r in run_episodes(spec, items, policy=policy, library=base, opened=index,
                                                    desc="plain")]
    finally:
        base.close()
    plain = {t.qid: t for t in plain_trajs}

    def run_task(item: Any, lib_dir: Path) -> Trajectory:
        return run_in_chain(spec, item, lib_dir, params=params, policy=policy, opened=index)

    grow = chain_grower(params, gold=split == "train")(student, domain.name, None)
    with Progress("sequential", len(items), unit="tasks") as bar:
        result, seq_trajs = sequential_rollout(chains, base_library=library, work_dir=out_dir, run_task=run_task,
                                               grow=grow, bonus=params.evolve.sage_bonus, plain=plain,
                                               on_task=bar.advance)
    write_trajectories(seq_trajs, out_dir / "sequential.jsonl")
    write_trajectories(plain_trajs, out_dir / "plain.jsonl")
    out = {**result.to_dict(), "split": split, "chain_length": chain_length}
    write_json(out, out_dir / "sequential.json")
    return out["summary"]
