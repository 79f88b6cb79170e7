"""The one chain runner: the SAGE training sampler and ``hasp evolve sage`` both run their chains through
``hasp.train.chains.run_chain`` and write one record format.

Real components throughout (prepared data, the search agent, the seed library, proposal, Phase D and
admission through ``chain_grower``); the policy and the student are a scripted double that keeps
searching, so every episode fails and is proposed from.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble

from hasp.config import Params
from hasp.domains.search.prepare import prepare_data
from hasp.episode.seeding import Seeded, sampling_seed
from hasp.evolve.chain_skill import chain_grower
from hasp.evolve.sequential import sage_run
from hasp.records import Trajectory
from hasp.train.chains import SAGE_KEY, ChainGrowth, run_chain, training_chains
from hasp.train.inputs import recipe_inputs
from hasp.train.rounds import RecipeError
from hasp.train.sage_sampler import SageSampler
from hasp.train.sampler import training_questions
from traj_builders import search_task

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"
SEARCHING = "Thought: look again\nAction: SEARCH[who founded it]"
RECORD_KEYS = {"chain", "position", "outcome", "reward", "created", "used_positions", "used_skills",
               "used_earlier_skill", "refusals", "proposal"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("chain_data")
    prepare_data(Params.model_validate({"data": {"n_questions": 24, "hop_weights": {1: 1.0}}}), d)
    return d


def _params() -> Params:
    return Params.model_validate({"agent": {"max_steps": 3}, "llm": {"max_concurrency": 1},
                                  "train": {"recipe": "sage", "rollout": {"max_steps": 3}}})


def _records(trajs: list[Trajectory]) -> list[dict]:
    return [t.harness.postprocess[SAGE_KEY] for t in trajs]


def test_the_sage_sampler_and_hasp_evolve_sage_write_one_record_format(data: Path, tmp_path: Path) -> None:
    p = _params()
    policy = ScriptedPolicyDouble(default=SEARCHING)
    chain = training_chains(training_questions(search_task(data)), p.data.seed)[0]
    sampler = SageSampler(p, search_task(data).domain, SEED, train=p.train, work_dir=tmp_path / "chains",
                          grower=chain_grower(p, gold=True), policy_for=lambda _: contextlib.nullcontext(policy))
    sampled = _records(sampler([Seeded(chain, 7)], tmp_path / "ckpt"))
    seeds = {kw.get("seed") for kw in policy.calls}
    assert {7, sampling_seed(7, 1), sampling_seed(7, "proposal")} <= seeds  # task 1, task 2, the proposal
    assert not (tmp_path / "chains" / "rollout_0000").exists()  # a rollout's library is removed after it

    student = ScriptedPolicyDouble(default=SEARCHING)
    sage_run(p, data, SEED, tmp_path / "sage", policy=ScriptedPolicyDouble(default=SEARCHING), student=student,
             chain_length=2)
    from hasp.agent.rollout import read_trajectories

    ran = _records(read_trajectories(tmp_path / "sage" / "sequential.jsonl"))
    assert (tmp_path / "sage" / "chain_000" / "library").is_dir()  # hasp evolve sage keeps its chains' libraries
    assert ran and sampled
    for rec in sampled + ran:
        assert set(rec) == RECORD_KEYS
        assert all(isinstance(x, int) for x in rec["used_positions"])
        assert all(isinstance(x, str) for x in rec["used_skills"] + rec["created"] + rec["refusals"])
        assert rec["proposal"] is None or set(rec["proposal"]) == {"messages", "reply"}
    assert [r["position"] for r in sampled] == [0, 1] and {r["chain"] for r in sampled} == {chain.id}
    assert sampled[0]["proposal"] is not None and sampled[1]["proposal"] is None  # proposed after task 1 only
    assert all(r["reward"] == r["outcome"] == 0.0 for r in sampled + ran)  # every episode failed


def _first_solved(item, lib_dir):  # noqa: ANN001 - run_task double: q0 is solved, every other task fails
    from hasp.records import HarnessRecord

    return Trajectory(qid=str(item.id), question="q", answers=["a"], variant="pf",
                      em=1.0 if item.id == "q0" else 0.0, harness=HarnessRecord())


@pytest.mark.parametrize("grow_after,grown", [("every", [0, 1]), ("failed", [1])])
def test_a_chain_grows_after_every_task_but_its_last(grow_after: str, grown: list[int], tmp_path: Path) -> None:
    from types import SimpleNamespace

    asked: list[tuple[str, int | None]] = []

    def grow(traj, lib_dir, seed):  # noqa: ANN001 - grow double: records what it was asked, admits nothing
        asked.append((traj.qid, seed))
        return ChainGrowth(refusals=["double"])

    items = [SimpleNamespace(id=f"q{i}") for i in range(3)]
    tasks = run_chain("c", items, base_library=SEED, chain_dir=tmp_path / "c", run_task=_first_solved, grow=grow,
                      grow_after=grow_after, bonus="repair")  # type: ignore[arg-type]
    assert [t.position for t in tasks if t.growth is not None] == grown
    assert asked == [(f"q{k}", None) for k in grown]  # unseeded chain: the server's own draws
    assert [t.traj.harness.postprocess[SAGE_KEY]["refusals"] for t in tasks] == [
        ["double"] if k in grown else [] for k in range(3)]


def test_recipe_inputs_of_sage_need_the_growing_step(data: Path, tmp_path: Path) -> None:
    p = _params()
    with pytest.raises(RecipeError, match="proposes skills along each chain"):
        recipe_inputs(p, p.train, search_task(data), SEED, out_dir=tmp_path)
    got = recipe_inputs(p, p.train, search_task(data), SEED, out_dir=tmp_path, grower=chain_grower(p, gold=True))
    assert isinstance(got["sample"], SageSampler) and got["questions"]
