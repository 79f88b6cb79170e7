"""Two `dvc repro` runs of a small configuration give the same metrics (real DVC, real embedded model).

The rollout stage serves the embedded model with llama.cpp and runs the PF agent on the train split.
Greedy decoding on one slot, one request at a time, makes each reply a function of its prompt alone, so
forcing the stage again reproduces every metric (timing aside) and every action of every trajectory.
With several slots decoding together, a batch's composition can flip a greedy token now and then
(about one answer in thirty in our runs), which is why a reproducible configuration asks for one slot.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ports import free_port_pair
from test_dvc_pipeline import DVC, dvc_repo, run  # noqa: F401 - dvc_repo is a fixture

pytestmark = pytest.mark.model

#: summary fields that measure time, not behaviour
TIMING = {"wall_s_sum", "wall_s"}


def _small(repo: Path) -> None:
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p["data"]["n_questions"] = 6  # two train questions: the rollout split
    p["agent"]["max_steps"] = 3  # each episode still searches, reads and answers under the PFs
    p["llm"]["port"] = free_port_pair()
    p["llm"]["max_concurrency"] = 1
    p["llm"]["llamacpp"]["parallel"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(p))


def _rollout(repo: Path) -> tuple[dict, list[list[str]]]:
    epoch = repo / "outputs" / "epoch_0"
    summary = json.loads((epoch / "summary_rollout.json").read_text())
    actions = []
    for line in (epoch / "rollout.jsonl").read_text().splitlines():
        t = json.loads(line)
        actions.append([(s["raw_output"], s["observation"]) for s in t["steps"]] + [t["prediction"]])
    return _untimed(summary), actions


def _untimed(d: dict) -> dict:
    """``d`` without its timing fields, at any depth (the budget's ``spend`` carries a wall time too)."""
    return {k: _untimed(v) if isinstance(v, dict) else v for k, v in d.items() if k not in TIMING}


def test_forcing_the_rollout_stage_again_gives_the_same_metrics(dvc_repo):  # noqa: F811
    _small(dvc_repo)
    run(DVC + ["repro", "rollout"], dvc_repo)
    first, first_actions = _rollout(dvc_repo)
    n_train = len((dvc_repo / "outputs" / "data" / "train.jsonl").read_text().splitlines())
    assert first["n"] == n_train == len(first_actions) > 0
    run(DVC + ["repro", "--force", "--single-item", "rollout"], dvc_repo)
    second, second_actions = _rollout(dvc_repo)
    assert second == first
    assert second_actions == first_actions
