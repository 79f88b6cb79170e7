"""What a training recipe that samples its own rollouts trains on: the questions and the sampler.

rs and opd sample the PF agent, grpo the agent ``train.grpo.agent`` names, on the training split;
sage samples sequential rollouts over chains of two same-template training questions, which needs
the evolution steps (proposal, Phase D, admission into a chain's library): that is why the one
factory of these inputs sits here, above both training and evolution.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasp.config import Params, TrainParams
from hasp.episode.seeding import Seeded, sampling_seed, unseeded
from hasp.evolve.chain_skill import chain_reply_format, propose_into_chain, run_in_chain
from hasp.evolve.sequential import build_chains, fired_skills
from hasp.records import Trajectory
from hasp.train.grpo import episode_reward
from hasp.train.rounds import RecipeError
from hasp.train.run import teacher_fn
from hasp.train.chain_rewards import SAGE_KEY, chain_task_record, skill_integrated_rewards
from hasp.train.sampler import PFRolloutSampler, PolicyFor, sample_spec, served_policy, training_questions

SAMPLING_RECIPES = ("rs", "opd", "grpo", "sage")


@dataclass(frozen=True)
class Chain:
    """Two same-template questions: what one SAGE group is sampled on (its ``id`` names the group)."""

    id: str
    items: tuple[Any, ...]


def training_chains(items: Sequence[Any], seed: int) -> list[Chain]:
    """Chains of two same-template questions (the sequential rollout's chain builder)."""
    return [Chain(id="+".join(str(it.id) for it in c), items=tuple(c)) for c in build_chains(items, 2, seed=seed)]


class SageSampler:
    """``sample(chains, model_dir) -> trajectories``: one sequential rollout per asked chain (each chain
    arrives G times), both tasks' trajectories returned with their chain record in
    ``harness.postprocess["sage"]`` (outcome, reward, created and used skills, the proposal turn)."""

    def __init__(self, params: Params, data_dir: Path, library: Path, *, train: TrainParams, work_dir: Path,
                 policy_for: PolicyFor | None = None) -> None:
        self.params, self.train, self.cfg, self.library = params, train, train.sage, Path(library)
        self.spec = sample_spec(params, train.rollout, Path(data_dir), self.library, None)
        self.index = self.spec.domain.open(params)
        self.policy_for = policy_for or served_policy(params, train.rollout)
        self.work_dir = Path(work_dir)
        self.calls: list[dict[str, Any]] = []

    def _task(self, policy: Any, item: Any, lib_dir: Path) -> Trajectory:
        return run_in_chain(self.spec, item, lib_dir, params=self.params, policy=policy, opened=self.index)

    def _rollout(self, policy: Any, asked: Any, j: int, reply_format: Any) -> list[Trajectory]:
        from hasp.pf.folder_files import copy_folder

        chain, seed = unseeded(asked)
        lib_dir = self.work_dir / f"rollout_{j:04d}" / "library"
        if lib_dir.parent.exists():
            shutil.rmtree(lib_dir.parent)
        copy_folder(self.library, lib_dir, skip=("snapshots", ".*"))
        item1, item2 = chain.items
        if seed is not None:  # the rollout's seed, and the next one for its second task
            item1, item2 = Seeded(item1, seed), Seeded(item2, sampling_seed(seed, 1))
        t1 = self._task(policy, item1, lib_dir)
        made = propose_into_chain(t1, lib_dir, params=self.params, student=policy, domain=self.spec.domain.name,
                                  gold=True, reply_format=reply_format, max_tokens=self.cfg.proposal_max_tokens,
                                  seed=None if seed is None else sampling_seed(seed, "proposal"))
        t2 = self._task(policy, item2, lib_dir)
        used = sorted(set(made.admitted) & fired_skills(t2))
        shutil.rmtree(lib_dir.parent, ignore_errors=True)
        r1, r2 = (episode_reward(t, self.cfg, self.train) for t in (t1, t2))
        R1, R2 = skill_integrated_rewards([r1, r2], [(), (0,) if used else ()], bonus=self.cfg.bonus,
                                          solved=[t1.em >= 1, t2.em >= 1])
        for pos, t, reward in ((0, t1, R1), (1, t2, R2)):
            rec = chain_task_record(chain.id, pos, t.em, reward, created=made.admitted, used=used if pos == 1 else (),
                                    refusals=made.refusals)
            if pos == 0 and made.reply:
                rec["proposal"] = {"messages": made.prompt_messages, "reply": made.reply}
            if t.harness is not None:
                t.harness.postprocess[SAGE_KEY] = rec
        return [t1, t2]

    def __call__(self, chains: Sequence[Chain], model_dir: Path) -> list[Trajectory]:
        out: list[Trajectory] = []
        with self.policy_for(Path(model_dir)) as policy:
            reply_format = chain_reply_format(self.params, policy)
            workers = max(1, min(len(chains), self.params.llm.max_concurrency))
            with ThreadPoolExecutor(workers) as pool:
                for pair in pool.map(lambda a: self._rollout(policy, a[1], a[0], reply_format), enumerate(chains)):
                    out += pair
        failed = [t for t in out if t.terminated == "error"]
        if out and len(failed) == len(out):
            raise RecipeError(f"sage: all {len(out)} sampled episodes failed; first: "
                              f"{(failed[0].pf_errors or ['no error recorded'])[0]}")
        self.calls.append({"model_dir": str(model_dir), "n": len(out), "failed": len(failed)})
        return out



def recipe_inputs(p: Params, train: TrainParams, data_dir: Path, library: Path | None, *, out_dir: Path,
                  policy_for: Any = None, teacher: Any = None, executor: Any = None) -> dict[str, Any]:
    """What ``run_recipe`` needs beyond the knobs for a recipe that samples its own rollouts: the
    training questions (SAGE: chains of two same-template questions) and the sampler (the PF agent for
    rs/opd, ``train.grpo.agent`` for grpo, sequential chain rollouts for sage), plus the OPD teacher.
    sft and dpo read a rows file instead: nothing here."""
    recipe = train.recipe
    if recipe not in SAMPLING_RECIPES:
        return {}
    questions = training_questions(data_dir)
    if recipe == "sage":
        if library is None:
            raise RecipeError("train.recipe sage grows a skill library along each chain: it needs a library")
        chains = training_chains(questions, p.data.seed)
        if not chains:
            raise RecipeError(f"{data_dir}: no two training questions share a template; SAGE has no chain to run")
        return {"questions": chains,
                "sample": SageSampler(p, data_dir, library, train=train, work_dir=Path(out_dir) / "chains",
                                      policy_for=policy_for)}
    variant = train.grpo.agent if recipe == "grpo" else "pf"
    return {"questions": questions,
            "sample": PFRolloutSampler(p, data_dir, library, rollout=train.rollout, policy_for=policy_for,
                                       teacher=teacher, executor=executor, variant=variant),
            "teacher": teacher_fn(teacher) if recipe == "opd" else None}
