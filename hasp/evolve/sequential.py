"""Sequential rollout over chains of similar tasks, with the skill-integrated reward (SAGE, seed 001 §3).

Why: whether a generated skill is any good shows only on a later task it applies to. A chain holds
tasks that share a question template (same relation in the generated benchmark; same question type
in real files). The tasks of a chain run in order against the chain's own copy of the library; after
each failed task the student proposes a declared repair from that episode's failing steps, and a
repair that passes Phase D is admitted at once, so the next task of the chain runs with it.

Skill-integrated reward of task k in a chain of K (outcomes r in {0, 1}):

    R_k = r_k + max_{i>k} 1[r_i = 1]·used(i, k)  +  1[r_k = 1]·used(k, <k)

``used(i, k)``: a PF admitted after task k fired in task i. The second term rewards generating a
skill a later task succeeds with, the third using earlier skills to succeed. SAGE also asks
``r_k = 1`` for the generation term; HASP mines repairs from *failed* tasks, so it does not: the
``repair`` rule of ``hasp.train.chain_rewards.skill_integrated_rewards``, the one definition the SAGE
recipe uses as well.
The reward is written per trajectory in the chain record the SAGE recipe reads too
(``hasp.train.chain_rewards.SAGE_KEY``), for rejection sampling to rank by. The summary scores both
arms, sequential and plain (base library, same chains), with SAGE's chain metrics
(``hasp.eval.chain_metrics``: TGC, SGC, skill use, steps and generated tokens per task).
"""

from __future__ import annotations

import random
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp.eval.chain_metrics import ChainRecord, chain_differences, chain_metrics
from hasp.pf.folder_files import copy_folder
from hasp.records import Trajectory
from hasp.stats import paired_difference, rate
from hasp.train.chain_rewards import SAGE_KEY, chain_task_record, skill_integrated_rewards

_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")
_NUMBER = re.compile(r"\b\d+\b")


def template_key(question: str) -> str:
    """The question with its names and numbers masked: questions of one relation share it
    ("In what year was X founded?")."""
    q = question.strip()
    head, rest = q[:1], q[1:]  # the capitalised first word is the question's own, not a name
    return head + _NUMBER.sub("N", _NAME.sub("X", rest))


def build_chains(items: Sequence[Any], length: int, seed: int = 0, key: Callable[[Any], str] | None = None
                 ) -> list[list[Any]]:
    """Chains of ``length`` items sharing ``key`` (default: the question template), shuffled with
    ``seed`` inside each group; leftovers shorter than two tasks are dropped (nothing to carry)."""
    if length < 2:
        raise ValueError("a chain needs at least two tasks")
    key = key or (lambda it: template_key(it.question))
    groups: dict[str, list[Any]] = defaultdict(list)
    for it in items:
        groups[key(it)].append(it)
    rng = random.Random(seed)
    chains = []
    for k in sorted(groups):
        g = sorted(groups[k], key=lambda it: it.id)
        rng.shuffle(g)
        chains += [g[i:i + length] for i in range(0, len(g), length) if len(g[i:i + length]) >= 2]
    return chains


@dataclass
class ChainTask:
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
    tasks: list[ChainTask]
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


def fired_skills(traj: Trajectory) -> set[str]:
    """Skills whose PF acted (was applied) at some step of ``traj``."""
    return {str(f.get("skill_id")) for s in traj.steps if s.audit for f in s.audit.fired if f.get("applied", True)}


#: (item, library folder) -> trajectory of that task
RunTask = Callable[[Any, Path], Trajectory]
#: (failed trajectory, library folder) -> (admitted skill ids, refusal reasons)
GrowLibrary = Callable[[Trajectory, Path], tuple[list[str], list[str]]]


def sequential_rollout(chains: Sequence[Sequence[Any]], *, base_library: Path, work_dir: Path, run_task: RunTask,
                       grow: GrowLibrary, plain: dict[str, Trajectory] | None = None,
                       on_task: Callable[[], None] | None = None) -> tuple[SequentialResult, list[Trajectory]]:
    """Run every chain in order, growing a per-chain copy of ``base_library`` after each failed task.

    ``plain`` (qid -> trajectory with the base library) adds the comparison columns. Returns the
    result and every sequential trajectory (the skill-integrated reward in ``harness.postprocess``).
    """
    tasks: list[ChainTask] = []
    trajs: list[Trajectory] = []
    refusals: list[str] = []
    for c, chain in enumerate(chains):
        lib = work_dir / f"chain_{c:03d}" / "library"
        if lib.exists():
            shutil.rmtree(lib)
        copy_folder(base_library, lib, skip=("snapshots", ".*"))
        owner: dict[str, int] = {}  # admitted skill id -> position that created it
        row: list[ChainTask] = []
        chain_trajs = []
        for pos, item in enumerate(chain):
            traj = run_task(item, lib)
            fired = fired_skills(traj)
            used = sorted({owner[s] for s in fired if s in owner})
            base = plain.get(item.id) if plain else None
            task = ChainTask(chain=c, position=pos, qid=item.id, em=float(traj.em), used_from=used,
                             used_skills=sorted(s for s in fired if s in owner), steps=len(traj.steps),
                             completion_tokens=traj.completion_tokens,
                             plain_em=float(base.em) if base is not None else None,
                             plain_steps=len(base.steps) if base is not None else None,
                             plain_completion_tokens=base.completion_tokens if base is not None else None)
            if not traj.em and pos < len(chain) - 1:  # a skill from the last task has no later task to help
                admitted, why = grow(traj, lib)
                task.created = admitted
                refusals += [f"chain {c} task {pos} ({item.id}): {w}" for w in why]
                owner.update({s: pos for s in admitted})
            row.append(task)
            chain_trajs.append(traj)
            if on_task is not None:
                on_task()
        # skills here come from failed tasks only, so the repair rule is the one that can pay their makers
        rewards = skill_integrated_rewards([t.em for t in row], [set(t.used_from) for t in row], bonus="repair")
        for t, r, traj in zip(row, rewards, chain_trajs):
            t.reward = r
            if traj.harness is not None:
                traj.harness.postprocess[SAGE_KEY] = chain_task_record(str(c), t.position, t.em, r, created=t.created,
                                                                       used=t.used_from)
        tasks += row
        trajs += chain_trajs
    return SequentialResult(tasks=tasks, refusals=refusals), trajs


# --------------------------------------------------------------------------- the run, on real components

def sage_run(params: Any, data_dir: Path, library: Path, out_dir: Path, *, policy: Any, student: Any,
             split: str = "train", chain_length: int = 3, limit: int | None = None) -> dict[str, Any]:
    """Plain rollouts and sequential rollouts on the same chained questions of ``split``; writes
    ``sequential.json``, ``sequential.jsonl`` (trajectories with their reward) and ``plain.jsonl``."""
    from hasp.agent.rollout import write_trajectories
    from hasp.atomic import write_json
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.evolve.chain_skill import chain_reply_format, propose_into_chain, run_in_chain
    from hasp.pf.library import load_library
    from hasp.progress import Progress

    domain = SearchDomain(data_dir=Path(data_dir))
    chains = build_chains(domain.items(split, limit), chain_length, seed=params.data.seed)
    items = [it for chain in chains for it in chain]
    reply_format = chain_reply_format(params, student)
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

    def grow(traj: Trajectory, lib_dir: Path) -> tuple[list[str], list[str]]:
        made = propose_into_chain(traj, lib_dir, params=params, student=student, domain=domain.name,
                                  gold=split == "train", reply_format=reply_format)
        return made.admitted, made.refusals

    with Progress("sequential", len(items), unit="tasks") as bar:
        result, seq_trajs = sequential_rollout(chains, base_library=library, work_dir=out_dir, run_task=run_task,
                                               grow=grow, plain=plain, on_task=bar.advance)
    write_trajectories(seq_trajs, out_dir / "sequential.jsonl")
    write_trajectories(plain_trajs, out_dir / "plain.jsonl")
    out = {**result.to_dict(), "split": split, "chain_length": chain_length}
    write_json(out, out_dir / "sequential.json")
    return out["summary"]
