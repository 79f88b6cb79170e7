"""Search episodes keep their trajectories: Phase A (the PF agent, ``pf_teacher`` with a teacher), a
val-gate run, two evaluation cells and the RS/OPD sampler, each on a greedy scripted policy, give
exactly the trajectories recorded in ``tests/data/search_episode_trajectories.json``.

The fixture is a recorded reference (``HASP_WRITE_FIXTURES=1`` rewrites it): a change to the episode
recipe that renders another prompt, shows other tool output, selects other PFs or grades differently
fails here with the first step that differs. The keys the environment adds to Δ_t for the replay
(``RECORDED_FOR_REPLAY``: the titles of a SEARCH's hits, the contents of the document a READ opened)
are checked for presence, not compared, since the reference does not hold them.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from doubles import ReadThenAnswerPolicyDouble, ScriptedTeacherDouble
from traj_builders import timeless, search_task

from hasp.agent.rollout import read_trajectories
from hasp.config import Params, RolloutParams

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "hasp" / "skills" / "search"
FIXTURE = Path(__file__).parent / "data" / "search_episode_trajectories.json"
RUNS = ("phase_a", "val_gate", "eval_react", "eval_pf", "sampler")
RECORDED_FOR_REPLAY = ("hit_titles", "contents")


def _without_replay_keys(traj: dict[str, Any]) -> dict[str, Any]:
    """The trajectory without the Δ_t keys the fixture predates (asserted present below)."""
    steps = []
    for s in traj["steps"]:
        if s["audit"]:
            fb = {k: v for k, v in s["audit"]["feedback"].items() if k not in RECORDED_FOR_REPLAY}
            s = {**s, "audit": {**s["audit"], "feedback": fb}}
        steps.append(s)
    return {**traj, "steps": steps}


def _runs(tmp: Path) -> dict[str, list[dict[str, Any]]]:
    from hasp.domains.search.prepare import prepare_data
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
    from hasp.eval.runner import run_eval
    from hasp.evolve.epoch import rollout
    from hasp.train.sampler import PFRolloutSampler, training_questions

    data = tmp / "data"
    params = Params.model_validate({"data": {"n_questions": 12}, "agent": {"max_steps": 4},
                                    "llm": {"max_concurrency": 2}})
    prepare_data(params, data)
    policy, teacher = ReadThenAnswerPolicyDouble(), ScriptedTeacherDouble("retrieval_failure")
    out: dict[str, list[dict[str, Any]]] = {}
    rollout(params, data, SEED, "train", tmp / "a.jsonl", policy=policy, variant="pf", teacher=teacher)
    out["phase_a"] = [t.to_dict() for t in read_trajectories(tmp / "a.jsonl")]
    rollout(params, data, SEED, "val", tmp / "v.jsonl", policy=policy, variant="pf", label="library+cand", limit=3)
    out["val_gate"] = [t.to_dict() for t in read_trajectories(tmp / "v.jsonl")]
    ds = load_eval_dataset(parse_dataset_spec("generated"), params, split="test", data_dir=data)
    res = run_eval(params, [ds], ["react", "pf"], policy=policy, library_root=SEED, out_dir=tmp / "eval",
                   progress=False)
    for cell in res.cells:
        out[f"eval_{cell.variant}"] = [r.traj.to_dict() for r in cell.records]

    @contextlib.contextmanager
    def served(model_dir: Path):
        yield policy

    sampler = PFRolloutSampler(params, search_task(data).domain, SEED, rollout=RolloutParams(max_steps=3, max_search_calls=2),
                               policy_for=served, teacher=teacher)
    out["sampler"] = [t.to_dict() for t in sampler(training_questions(search_task(data))[:4], tmp / "ckpt")]
    return {k: timeless(v) for k, v in out.items()}


def test_search_episodes_give_the_recorded_trajectories(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    assert set(runs) == set(RUNS)
    if os.environ.get("HASP_WRITE_FIXTURES") == "1":
        kept = {name: [_without_replay_keys(t) for t in trajs] for name, trajs in runs.items()}
        FIXTURE.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"wrote {FIXTURE}")
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for name in RUNS:
        got, want = runs[name], recorded[name]
        assert [t["qid"] for t in got] == [t["qid"] for t in want], name
        for g, w in zip(got, want):
            assert _without_replay_keys(g) == w, f"{name} {w['qid']}: the trajectory differs from the recorded one"
    feedback = [s["audit"]["feedback"] for name in RUNS for t in runs[name] for s in t["steps"] if s["audit"]]
    assert all("hit_titles" in fb for fb in feedback if "n_hits" in fb)
    assert all("contents" in fb for fb in feedback if fb.get("found"))
    steps = [s for name in RUNS for t in recorded[name] for s in t["steps"]]
    kinds = {s["audit"]["a_final"]["type"] for s in steps if s["audit"]}
    assert kinds == {"SEARCH", "READ", "FINAL"}  # the recorded runs exercise every tool
    assert any(s["audit"]["fired"] for s in steps if s["audit"])  # and PFs that fired
    assert {t["variant"] for t in recorded["phase_a"]} == {"pf_teacher"}
    assert {t["variant"] for t in recorded["sampler"]} == {"train_rollout"}
