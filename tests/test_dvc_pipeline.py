"""The DVC pipeline is valid and re-runs only the stages a param change touches (real dvc, real git)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DVC = [sys.executable, "-m", "dvc"]


def run(cmd, cwd, **kw):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture
def repo(tmp_path):
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "skills", tmp_path / "skills")
    shutil.copytree(ROOT / "hasp", tmp_path / "hasp", ignore=shutil.ignore_patterns("__pycache__"))
    run(["git", "init", "-q"], tmp_path)
    run(DVC + ["init", "-q"], tmp_path)
    run(["git", "add", "-A"], tmp_path)
    run(["git", "commit", "-qm", "init"], tmp_path)
    return tmp_path


def set_param(repo: Path, section: str, key: str, value) -> None:
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p[section][key] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(p))


def stale(repo: Path, *stages: str) -> set[str]:
    out = run(DVC + ["status", *stages], repo)
    return {line.rstrip(":").strip() for line in out.splitlines()
            if line and not line.startswith((" ", "\t")) and line.rstrip().endswith(":")}


def test_pipeline_graph_is_valid(repo):
    out = run(DVC + ["dag", "--dot"], repo)
    for stage in ("prepare", "rollout", "analyse", "propose", "validate", "review", "admit",
                  "build_data", "train", "evaluate", "track"):
        assert stage in out


def test_only_dependent_stages_rerun(repo):
    # prepare needs no model: reproduce it for real, then change params and ask DVC what is stale.
    run(DVC + ["repro", "prepare"], repo)
    assert (repo / "outputs" / "data" / "test.jsonl").exists()
    assert stale(repo, "prepare") == set()
    set_param(repo, "evolve", "min_cluster_size", 5)
    assert stale(repo, "prepare") == set()        # evolve knob: prepare untouched
    set_param(repo, "data", "seed", 11)
    assert stale(repo, "prepare") == {"prepare"}
    run(DVC + ["repro", "prepare"], repo)
    assert stale(repo, "prepare") == set()


def test_experiment_stage_follows_train_preset(repo):
    """One preset per DVC experiment: with train.preset null the stage runs nothing and writes an empty
    metrics file; setting the preset (what `dvc exp run -S train.preset=E3_cpu experiment` does) makes
    that stage stale and leaves the data untouched."""
    assert "experiment" in run(DVC + ["dag", "--dot"], repo)
    run(DVC + ["repro", "experiment"], repo)
    assert (repo / "outputs" / "experiment" / "metrics.json").read_text().strip() == "{}"
    assert stale(repo, "experiment") == set()
    set_param(repo, "train", "preset", "E3_cpu")
    assert stale(repo, "experiment") == {"experiment"}
