"""Cached tasks check that their outputs exist and read whole, and re-run when they do not.

The val rollout is the case that bit: keyed on the library's skills, a second run into a fresh
``--out`` was served from the cache and never got its ``val_baseline.jsonl``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from doubles import SearchingPolicyDouble

from hasp.config import load_params
from hasp.domains.search.prepare import prepare_data
from hasp.progress import Pipeline
from hasp.tasks.cache import output_complete, outputs_complete

ROOT = Path(__file__).resolve().parents[1]


def test_output_complete_reads_the_file(tmp_path: Path) -> None:
    good = tmp_path / "a.jsonl"
    good.write_text('{"a": 1}\n{"b": 2}\n')
    cut = tmp_path / "b.jsonl"
    cut.write_text('{"a": 1}\n{"b": ')
    bad_json = tmp_path / "c.json"
    bad_json.write_text('{"a": [1, 2')
    binary = tmp_path / "d.json"
    binary.write_bytes(b"\xff\xfe\x00")
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "x").write_text("x")
    assert output_complete(good) and output_complete(tmp_path / "dir")
    for p in (cut, bad_json, binary, tmp_path / "empty_dir", tmp_path / "missing.json"):
        assert not output_complete(p), p
    assert not outputs_complete(good, cut)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    work = tmp_path_factory.mktemp("cached_outputs")
    params = load_params(ROOT / "params.yaml", {"data.n_questions": 10, "agent.max_steps": 2,
                                                "llm.max_concurrency": 2, "evolve.val_limit": 4})
    prepare_data(params, work / "data")
    shutil.copytree(ROOT / "hasp" / "skills" / "search", work / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    return work, params


def test_fresh_out_gets_the_val_trajectories_of_a_cache_hit(prefect_harness, world) -> None:
    from prefect import flow

    from hasp.flows.evolve import _val_phase

    work, params = world
    policy = SearchingPolicyDouble()
    key = f"val-{work.name}"

    @flow(name="val-once")
    def val_once(out: Path) -> dict:
        return _val_phase(Pipeline("t", 2), "val baseline", key, params, work / "data", work / "lib",
                          out / "epoch_0" / "val_baseline.jsonl", policy=policy, teacher=None, label="val_baseline")

    first = val_once(work / "out_a")
    calls = policy.calls.n
    assert calls > 0 and first["n"] >= 2
    a = work / "out_a" / "epoch_0" / "val_baseline.jsonl"

    second = val_once(work / "out_b")  # a fresh --out: served from the cache, the file copied
    b = work / "out_b" / "epoch_0" / "val_baseline.jsonl"
    assert policy.calls.n == calls and second["em"] == first["em"]
    assert b.read_bytes() == a.read_bytes() and len(b.read_text().splitlines()) == first["n"]

    a.write_text(a.read_text()[:-40])  # the source is corrupted and the fresh output is missing
    fresh = work / "out_c"
    third = val_once(fresh)
    assert policy.calls.n > calls, "the rollout re-ran"
    c = fresh / "epoch_0" / "val_baseline.jsonl"
    assert output_complete(c) and [json.loads(x)["qid"] for x in c.read_text().splitlines()] == \
        [json.loads(x)["qid"] for x in b.read_text().splitlines()]
    assert third["em"] == first["em"]


def test_scratch_of_a_killed_run_is_swept(tmp_path: Path) -> None:
    from hasp.flows.evolve import sweep_scratch

    (tmp_path / "valgate-skill_x-abc" / "library").mkdir(parents=True)
    (tmp_path / "valgate-skill_x-abc" / "library" / "SKILL.md").write_text("x")
    (tmp_path / "rollout.jsonl").write_text("{}\n")
    assert sweep_scratch(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["rollout.jsonl"]
