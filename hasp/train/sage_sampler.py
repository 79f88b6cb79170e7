"""The SAGE recipe's sampler: G sequential rollouts per chain of two same-template training questions.

One rollout is ``hasp.train.chains.run_chain`` over the chain with a fresh copy of the run's library:
task 1, the policy itself proposes a skill from that episode with the gold answer in view (the
training split), task 2 with whatever was admitted. Proposing is an evolution step, so the sampler is
handed a ``Grower`` by the layer above (``hasp.evolve.chain_skill.chain_grower``) and never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hasp.config import Params, TrainParams
from hasp.episode.domains import Domain
from hasp.episode.seeding import unseeded
from hasp.records import Trajectory
from hasp.train.chains import Chain, Grow, Grower, run_chain, run_in_chain
from hasp.train.rewards import outcome_reward
from hasp.train.rounds import RecipeError
from hasp.train.sampler import PolicyFor, sample_spec, served_policy


class SageSampler:
    """``sample(chains, model_dir) -> trajectories``: one sequential rollout per asked chain (each chain
    arrives G times, seeded or not), both tasks' trajectories returned with their chain record in
    ``harness.postprocess[SAGE_KEY]`` (the format: ``hasp.train.chains``). Each task's outcome reward is
    ``train.sage``'s (``outcome_reward``), the maker's bonus rule ``train.sage.bonus``."""

    def __init__(self, params: Params, domain: Domain, library: Path, *, train: TrainParams, work_dir: Path,
                 grower: Grower, policy_for: PolicyFor | None = None) -> None:
        self.params, self.train, self.cfg, self.library = params, train, train.sage, Path(library)
        self.spec = sample_spec(params, train.rollout, domain, self.library, None)
        self.index = self.spec.domain.open(params)
        self.grower = grower
        self.policy_for = policy_for or served_policy(params, train.rollout)
        self.work_dir = Path(work_dir)
        self.calls: list[dict[str, Any]] = []

    def _rollout(self, policy: Any, grow: Grow, asked: Any, j: int) -> list[Trajectory]:
        chain, seed = unseeded(asked)
        tasks = run_chain(chain.id, chain.items, base_library=self.library,
                          chain_dir=self.work_dir / f"rollout_{j:04d}",
                          run_task=lambda item, lib: run_in_chain(self.spec, item, lib, params=self.params,
                                                                  policy=policy, opened=self.index),
                          grow=grow, grow_after="every", bonus=self.cfg.bonus,
                          outcome=lambda t: outcome_reward(t, self.cfg, self.train), seed=seed,
                          keep_library=False)
        return [t.traj for t in tasks]

    def __call__(self, chains: Sequence[Chain], model_dir: Path) -> list[Trajectory]:
        out: list[Trajectory] = []
        with self.policy_for(Path(model_dir)) as policy:
            grow = self.grower(policy, self.spec.domain.name, self.cfg.proposal_max_tokens)
            workers = max(1, min(len(chains), self.params.llm.in_flight))
            with ThreadPoolExecutor(workers) as pool:
                for pair in pool.map(lambda a: self._rollout(policy, grow, a[1], a[0]), enumerate(chains)):
                    out += pair
        failed = [t for t in out if t.terminated == "error"]
        if out and len(failed) == len(out):
            raise RecipeError(f"sage: all {len(out)} sampled episodes failed; first: "
                              f"{(failed[0].pf_errors or ['no error recorded'])[0]}")
        self.calls.append({"model_dir": str(model_dir), "n": len(out), "failed": len(failed)})
        return out
