"""Chains of same-template tasks and the one runner of a chain (SAGE, seed 001 §3).

Why: whether a generated skill is any good shows only on a later task it applies to. A chain holds
tasks that share a question template (same relation in the generated benchmark; same question type in
real files). ``run_chain`` runs them in order against the chain's own copy of a library and grows that
copy between tasks, so a later task runs with the skills the earlier ones left; it is the runner of the
SAGE training sampler (``hasp.train.sage_sampler``: a proposal after task 1 of every two-task chain)
and of ``hasp evolve sage`` (``hasp.evolve.sequential``: a proposal after every failed task). Growing
is an evolution step (proposal, Phase D, admission), so the caller passes it in as ``grow``.

Every task's record, under ``harness.postprocess[SAGE_KEY]``, has one format whichever caller ran it
(``ChainTask.record``); every key is always there:

- ``chain`` (str): the chain's id; ``position`` (int): the task's place in it, from 0
- ``outcome`` (float): the task's EM; ``reward`` (float): its skill-integrated reward R_k
  (``hasp.train.rewards.skill_integrated_rewards`` over the caller's outcome rewards)
- ``created`` (list of skill ids): admitted into the chain's library after this task
- ``used_positions`` (list of int): earlier positions whose admitted skills fired in this task;
  ``used_skills`` (list of skill ids): those skills; ``used_earlier_skill`` (bool): either is non-empty
- ``refusals`` (list of str): why growing after this task admitted nothing
- ``proposal``: the student's proposal turn after this task, ``{"messages", "reply"}``, or None when
  none was asked (SAGE trains it with the task's advantage)

SAGE's rows and stats (``hasp.train.sage``) and rejection sampling's ranking (``chain_reward``) read it.
"""

from __future__ import annotations

import random
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hasp.episode.seeding import Seeded, sampling_seed
from hasp.pf.folder_files import copy_folder
from hasp.records import Trajectory
from hasp.train.rewards import Bonus, skill_integrated_rewards, success_reward

#: where a chain task's record sits in ``harness.postprocess`` (the format: the module docstring)
SAGE_KEY = "sage"

_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")
_NUMBER = re.compile(r"\b\d+\b")


def template_key(question: str) -> str:
    """The question with its names and numbers masked: questions of one relation share it
    ("In what year was X founded?")."""
    q = question.strip()
    head, rest = q[:1], q[1:]  # the capitalised first word is the question's own, not a name
    return head + _NUMBER.sub("N", _NAME.sub("X", rest))


#: an item's ``(id, question, gold answers)``: a domain's ``identity`` (``hasp.episode.domains``)
Identity = Callable[[Any], tuple[str, str, list[str]]]


def _search_identity(item: Any) -> tuple[str, str, list[str]]:
    """A search item's identity, read here rather than from ``SearchDomain``: importing the episode domains
    would put the agent loop into the code key of every phase that trains (SFT runs no episode)."""
    return str(item.id), str(item.question), list(getattr(item, "answers", []))


def build_chains(items: Sequence[Any], length: int, seed: int = 0, key: Callable[[Any], str] | None = None, *,
                 identity: Identity | None = None) -> list[list[Any]]:
    """Chains of ``length`` items sharing ``key`` (default: the template of the question ``identity``
    reads, a domain's own, so any task's items chain), shuffled with ``seed`` inside each group;
    leftovers shorter than two tasks are dropped (nothing to carry)."""
    if length < 2:
        raise ValueError("a chain needs at least two tasks")
    ident = identity or _search_identity
    key = key or (lambda it: template_key(ident(it)[1]))
    groups: dict[str, list[Any]] = defaultdict(list)
    for it in items:
        groups[key(it)].append(it)
    rng = random.Random(seed)
    chains = []
    for k in sorted(groups):
        g = sorted(groups[k], key=lambda it: ident(it)[0])
        rng.shuffle(g)
        chains += [g[i:i + length] for i in range(0, len(g), length) if len(g[i:i + length]) >= 2]
    return chains


@dataclass(frozen=True)
class Chain:
    """Two same-template questions: what one SAGE group is sampled on (its ``id`` names the group)."""

    id: str
    items: tuple[Any, ...]


def training_chains(items: Sequence[Any], seed: int, identity: Identity | None = None) -> list[Chain]:
    """Chains of two same-template questions, as the SAGE recipe samples them (``identity``: the task's)."""
    ident = identity or _search_identity
    return [Chain(id="+".join(ident(it)[0] for it in c), items=tuple(c))
            for c in build_chains(items, 2, seed=seed, identity=ident)]


@dataclass
class ChainGrowth:
    """What growing a chain's library after one task gave: admitted skill ids, refusal reasons, and the
    student's proposal turn (empty when nothing was asked: no failure pattern in the episode)."""

    admitted: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    reply: str = ""


#: (item, library folder) -> trajectory of that task
RunTask = Callable[[Any, Path], Trajectory]
#: (episode, library folder, the proposal's sampling seed or None) -> what was admitted into the folder
Grow = Callable[[Trajectory, Path, int | None], ChainGrowth]
#: (student, domain name, reply budget or None) -> ``Grow``: how the layer above builds the growing step
#: once a student is at hand (``hasp.evolve.chain_skill.chain_grower``)
Grower = Callable[[Any, str, int | None], Grow]
#: after which tasks a chain's library grows (never after the last: no later task to help): every one
#: (the SAGE sampler), or the failed ones (``hasp evolve sage``: repairs are mined from failures)
GrowAfter = Literal["every", "failed"]


@dataclass
class ChainTask:
    """One task of a chain as the runner saw it: its trajectory, what growing after it gave (None: the
    library was not grown), the earlier positions and skill ids it used, and its skill-integrated reward."""

    position: int
    traj: Trajectory
    growth: ChainGrowth | None = None
    used_positions: list[int] = field(default_factory=list)
    used_skills: list[str] = field(default_factory=list)
    reward: float = 0.0

    @property
    def created(self) -> list[str]:
        return list(self.growth.admitted) if self.growth is not None else []

    def record(self, chain: str) -> dict[str, Any]:
        """The task's record under ``SAGE_KEY`` (the format: the module docstring)."""
        g = self.growth
        return {"chain": chain, "position": self.position, "outcome": float(self.traj.em),
                "reward": float(self.reward), "created": self.created, "used_positions": list(self.used_positions),
                "used_skills": list(self.used_skills), "used_earlier_skill": bool(self.used_positions),
                "refusals": list(g.refusals) if g is not None else [],
                "proposal": {"messages": g.prompt_messages, "reply": g.reply} if g is not None and g.reply else None}


def chain_reward(t: Trajectory) -> float | None:
    """The skill-integrated reward a chain runner recorded for ``t``; None for an episode outside a chain."""
    rec = t.harness.postprocess.get(SAGE_KEY) if t.harness is not None else None
    r = rec.get("reward") if isinstance(rec, dict) else None
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else None


def run_in_chain(spec: Any, item: Any, lib_dir: Path, *, params: Any, policy: Any, opened: Any) -> Trajectory:
    """One task of a chain with the chain's library folder as it is now (skills admitted by earlier
    tasks included), loaded for this task and closed after it."""
    from hasp.pf.library import load_library

    lib = load_library(lib_dir, spec.domain.name, sandbox=params.sandbox)
    try:
        return spec.runner(policy=policy, library=lib, opened=opened)(item).traj
    finally:
        lib.close()


def _task_seed(seed: int | None, position: int) -> int | None:
    """Task 1 samples with the rollout's seed, a later task with one derived from it and its position."""
    if seed is None:
        return None
    return seed if position == 0 else sampling_seed(seed, position)


def _proposal_seed(seed: int | None, position: int) -> int | None:
    if seed is None:
        return None
    return sampling_seed(seed, "proposal") if position == 0 else sampling_seed(seed, "proposal", position)


def run_chain(chain: str, items: Sequence[Any], *, base_library: Path, chain_dir: Path, run_task: RunTask,
              grow: Grow, grow_after: GrowAfter, bonus: Bonus,
              outcome: Callable[[Trajectory], float] = success_reward, seed: int | None = None,
              keep_library: bool = True, on_task: Callable[[], None] | None = None) -> list[ChainTask]:
    """Run ``items`` in order against a fresh copy of ``base_library`` in ``chain_dir/library``, growing
    it after the tasks ``grow_after`` names; give every task its skill-integrated reward (``outcome``: the
    outcome reward it starts from; ``bonus``: the rule for a skill's maker) and its record under
    ``SAGE_KEY``, named ``chain``. ``seed`` (None: the server's own draws) seeds every task and proposal
    of the chain; ``keep_library`` False removes ``chain_dir`` afterwards."""
    chain_dir = Path(chain_dir)
    lib = chain_dir / "library"
    if chain_dir.exists():
        shutil.rmtree(chain_dir)
    copy_folder(base_library, lib, skip=("snapshots", ".*"))
    owner: dict[str, int] = {}  # admitted skill id -> position that created it
    tasks: list[ChainTask] = []
    try:
        for pos, item in enumerate(items):
            s = _task_seed(seed, pos)
            traj = run_task(item if s is None else Seeded(item, s), lib)
            used = sorted(set(traj.fired_skills()) & owner.keys())
            task = ChainTask(position=pos, traj=traj, used_positions=sorted({owner[sk] for sk in used}),
                             used_skills=used)
            if pos < len(items) - 1 and (grow_after == "every" or not traj.em):
                task.growth = grow(traj, lib, _proposal_seed(seed, pos))
                owner.update({sk: pos for sk in task.growth.admitted})
            tasks.append(task)
            if on_task is not None:
                on_task()
    finally:
        if not keep_library:
            shutil.rmtree(chain_dir, ignore_errors=True)
    rewards = skill_integrated_rewards([outcome(t.traj) for t in tasks], [set(t.used_positions) for t in tasks],
                                       bonus=bonus, solved=[t.traj.em >= 1 for t in tasks])
    for t, r in zip(tasks, rewards):
        t.reward = r
        if t.traj.harness is not None:
            t.traj.harness.postprocess[SAGE_KEY] = t.record(chain)
    return tasks
