"""Rollouts through a Prefect task runner on a real Dask LocalCluster (two worker processes).

The runner changes where episodes run, never what they do: the same questions against the same
greedy endpoint give the trajectories the threaded run gives, and a worker that dies costs its
episodes a re-run, not the run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from doubles import KillOnceSpecDouble, OpenAIEndpointDouble, ReadThenAnswerReplyDouble, SlowBuildSpecDouble
from traj_builders import timeless, search_task

from hasp.config import Params, ParamsError, RunnerParams, load_params
from hasp.llm.client import LLMClient, LLMConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, prefect_harness: Path) -> Any:
    """Prepared data, a greedy endpoint double, and a dask executor (cluster started on first use)."""
    from hasp.domains.search.prepare import prepare_data
    from hasp.tasks.episodes import make_executor

    data = tmp_path_factory.mktemp("runner_data")
    params = Params.model_validate({"data": {"n_questions": 10, "hop_weights": {1: 1.0}},
                                    "agent": {"max_steps": 4}})
    prepare_data(params, data)
    with OpenAIEndpointDouble(reply=ReadThenAnswerReplyDouble()) as endpoint, \
            make_executor(RunnerParams(kind="dask", n_workers=2, threads_per_worker=2, episodes_per_task=2)) as executor:
        yield params, data, endpoint, executor


def test_dask_runner_gives_the_threaded_trajectories_of_phase_a_and_eval(world: Any, tmp_path: Path) -> None:
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
    from hasp.eval.runner import run_eval
    from hasp.evolve.epoch import rollout
    from hasp.agent.rollout import read_trajectories

    params, data, endpoint, executor = world
    policy = LLMClient(LLMConfig(base_url=endpoint.base_url, model="m", max_tokens=params.agent.max_tokens))
    runs = {}
    for kind, ex in (("threads", None), ("dask", executor)):
        s = rollout(params, data, ROOT / "hasp" / "skills" / "search", "train", tmp_path / kind / "rollout.jsonl",
                    policy=policy, variant="pf", executor=ex)
        assert s["n"] == 4 and "failure" not in s
        runs[kind] = [timeless(t.to_dict()) for t in read_trajectories(tmp_path / kind / "rollout.jsonl")]
    assert runs["dask"] == runs["threads"]
    assert all(len(t["steps"]) >= 2 for t in runs["dask"])  # searched and read: the worker's index was used

    ds = load_eval_dataset(parse_dataset_spec("generated"), params, split="val", data_dir=data)
    cells = {kind: run_eval(params, [ds], ["react"], policy=policy, library_root=None, out_dir=tmp_path / f"e_{kind}",
                            progress=False, executor=ex).cells[0]
             for kind, ex in (("threads", None), ("dask", executor))}
    assert [timeless(r.traj.to_dict()) for r in cells["dask"].records] == \
        [timeless(r.traj.to_dict()) for r in cells["threads"].records]
    assert cells["dask"].summary["em"] == cells["threads"].summary["em"]


def test_dask_runner_gives_the_threaded_trajectories_of_the_training_sampler(world: Any) -> None:
    """RS/OPD sampling (k samples per question, PFs on, the rollout's budgets) through the runner:
    workers reach the served checkpoint over HTTP and return the threaded sampler's trajectories."""
    import contextlib

    from hasp.config import RolloutParams
    from hasp.train.sampler import PFRolloutSampler, training_questions

    params, data, endpoint, executor = world
    cfg = LLMConfig(base_url=endpoint.base_url, model="m", max_tokens=params.agent.max_tokens)

    @contextlib.contextmanager
    def served(model_dir: Path):  # the checkpoint "served" by the endpoint double
        with LLMClient(cfg) as client:
            yield client

    questions = [q for q in training_questions(search_task(data)) for _ in range(2)]  # k = 2
    runs = {}
    for kind, ex in (("threads", None), ("dask", executor)):
        sampler = PFRolloutSampler(params, search_task(data).domain, ROOT / "hasp" / "skills" / "search", rollout=RolloutParams(),
                                   policy_for=served, executor=ex)
        runs[kind] = [timeless(t.to_dict()) for t in sampler(questions, Path("ckpt"))]
    assert len(runs["dask"]) == len(questions) and runs["dask"] == runs["threads"]
    assert {t["variant"] for t in runs["dask"]} == {"train_rollout"}
    assert all(t["terminated"] != "error" for t in runs["dask"])


def test_a_worker_that_dies_costs_a_rerun_not_the_run(world: Any, tmp_path: Path) -> None:
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec
    from hasp.llm.client import LLMConfig

    params, data, endpoint, executor = world
    domain = SearchDomain(data_dir=data)
    items = domain.items("test")
    cfg = LLMConfig(base_url=endpoint.base_url, model="m", max_tokens=params.agent.max_tokens)
    plain = replace(episode_spec(params, domain, "react"), policy=cfg)
    marker = tmp_path / "killed"
    recs = executor.run(KillOnceSpecDouble(plain, items[1].id, marker), items, desc="kill", progress=False)

    assert marker.exists()  # the worker running items[1] was killed
    assert [r.traj.qid for r in recs] == [it.id for it in items]
    assert all(r.traj.terminated != "error" for r in recs)  # re-run on a live worker, not lost
    again = executor.run(plain, items, desc="again", progress=False)
    assert [timeless(r.traj.to_dict()) for r in recs] == [timeless(r.traj.to_dict()) for r in again]


def test_a_worker_builds_a_spec_once_however_many_threads_ask(tmp_path: Path) -> None:
    """Episodes of one spec start together on a worker's threads; building the skill library in several
    threads at once races on the process-wide PF registry, so one builds and the others wait."""
    from concurrent.futures import ThreadPoolExecutor

    from hasp.agent.remote import run_spec, spec_key

    spec = SlowBuildSpecDouble(tmp_path / "builds")
    with ThreadPoolExecutor(max_workers=4) as pool:
        out = list(pool.map(lambda i: run_spec(spec_key(spec), spec, i), range(8)))
    assert out == list(range(8))
    assert (tmp_path / "builds").read_text().count("built") == 1


def test_a_lost_episode_is_recorded_failed_not_raised() -> None:
    from hasp.domains.math.datasets import MathItem
    from hasp.domains.search.generator import QAItem
    from hasp.episode.domains import MathDomain, SearchDomain
    from hasp.episode.spec import episode_spec

    spec = episode_spec(Params(), SearchDomain(data_dir=Path(".")), "react", label="val")
    r = spec.failed(QAItem(id="q1", question="Who?", answers=["A"], hops=1, support=["d1"]), "KilledWorker: gone")
    t = r.traj
    assert (t.qid, t.variant, t.terminated, t.pf_errors, r.error) == ("q1", "val", "error", ["KilledWorker: gone"],
                                                                      "KilledWorker: gone")
    m = episode_spec(Params(), MathDomain(), "pf").failed(MathItem(id="m1", problem="1+1?", answers=["2"]), "gone")
    assert (m.traj.qid, m.traj.question, m.traj.answers, m.traj.variant) == ("m1", "1+1?", ["2"], "pf")


def test_an_episode_spec_pickles_and_its_worker_build_runs_the_threaded_episode(world: Any) -> None:
    """The spec a worker receives is plain data: pickled and built in this process from its endpoints,
    it gives the trajectory the threaded runner gives with a live client."""
    import pickle

    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec
    from hasp.pf.library import load_library

    params, data, endpoint, _ = world
    domain = SearchDomain(data_dir=data)
    item = domain.items("test")[0]
    policy = LLMClient(LLMConfig(base_url=endpoint.base_url, model="m", max_tokens=params.agent.max_tokens))
    spec = episode_spec(params, domain, "pf", library=ROOT / "hasp" / "skills" / "search")
    lib = load_library(ROOT / "hasp" / "skills" / "search", "search")
    try:
        threaded = spec.runner(policy=policy, library=lib)(item)
    finally:
        lib.close()
    built = pickle.loads(pickle.dumps(spec.shipped(policy))).build()
    try:
        remote = built.run(item)
    finally:
        built.close()
    assert timeless(remote.traj.to_dict()) == timeless(threaded.traj.to_dict()) and remote.error == ""
    assert len(remote.traj.steps) >= 2 and remote.traj.harness.selected_pfs  # the worker loaded the library


@pytest.mark.parametrize("key,value,says", [("runner.kind", "ray", "runner.kind"),
                                            ("runner.address", "tcp://10.0.0.1:8786", "kind: dask"),
                                            ("runner.n_workers", 0, "runner.n_workers")])
def test_bad_runner_settings_fail_with_one_line(key: str, value: Any, says: str) -> None:
    with pytest.raises(ParamsError) as e:
        load_params(ROOT / "params.yaml", {key: value})
    assert says in str(e.value) and "\n" not in str(e.value)
