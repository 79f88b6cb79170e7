"""What a training recipe that samples its own rollouts trains on: the questions and the sampler.

rs and opd sample the PF agent, grpo the agent ``train.grpo.agent`` names, on the training split; sage
samples sequential rollouts over chains of two same-template training questions. Those grow a chain's
library with an evolution step (proposal, Phase D, admission), which lives a layer above training:
the caller passes it in as ``grower`` (``hasp.evolve.chain_skill.chain_grower``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hasp.config import Params, TrainParams
from hasp.train.chains import Grower, training_chains
from hasp.train.rounds import RecipeError
from hasp.train.run import teacher_fn
from hasp.train.sage_sampler import SageSampler
from hasp.train.sampler import PFRolloutSampler, TaskSplits, training_questions

SAMPLING_RECIPES = ("rs", "opd", "grpo", "sage")


def recipe_inputs(p: Params, train: TrainParams, task: TaskSplits, library: Path | None, *, out_dir: Path,
                  grower: Grower | None = None, policy_for: Any = None, teacher: Any = None,
                  executor: Any = None) -> dict[str, Any]:
    """What ``run_recipe`` needs beyond the knobs for a recipe that samples its own rollouts: the
    training questions (SAGE: chains of two same-template questions) and the sampler (the PF agent for
    rs/opd, ``train.grpo.agent`` for grpo, sequential chain rollouts for sage, which need ``grower``),
    plus the OPD teacher. ``task`` is the epoch's (``hasp.evolve.epoch_task.epoch_task``): its domain
    and its training split, so any task trains as search does. sft and dpo read a rows file instead:
    nothing here."""
    recipe = train.recipe
    if recipe not in SAMPLING_RECIPES:
        return {}
    questions = training_questions(task)
    if recipe == "sage":
        if library is None:
            raise RecipeError("train.recipe sage grows a skill library along each chain: it needs a library")
        if grower is None:
            raise RecipeError("train.recipe sage proposes skills along each chain: its caller passes the "
                              "evolution step (grower=hasp.evolve.chain_skill.chain_grower(params, gold=True))")
        chains = training_chains(questions, p.data.seed, task.domain.identity)
        if not chains:
            raise RecipeError(f"{task.domain.name}: no two training questions share a template; SAGE has no chain "
                              "to run")
        return {"questions": chains,
                "sample": SageSampler(p, task.domain, library, train=train, work_dir=Path(out_dir) / "chains",
                                      grower=grower, policy_for=policy_for)}
    variant = train.grpo.agent if recipe == "grpo" else "pf"
    return {"questions": questions,
            "sample": PFRolloutSampler(p, task.domain, library, rollout=train.rollout, policy_for=policy_for,
                                       teacher=teacher, executor=executor, variant=variant),
            "teacher": teacher_fn(teacher) if recipe == "opd" else None}
