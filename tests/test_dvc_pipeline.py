"""The DVC pipeline is valid and re-runs only the stages a param change touches (real dvc, real git)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hasp.config import TrainParams
from hasp.train.presets import apply_preset

ROOT = Path(__file__).resolve().parents[1]
DVC = [sys.executable, "-m", "dvc"]


def run(cmd, cwd, **kw):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture
def dvc_repo(tmp_path):
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "hasp" / "skills", tmp_path / "skills")
    for code in ("hasp", "flows", "tasks"):  # every stage's code deps (the experiment stage runs the Prefect flow)
        shutil.copytree(ROOT / code, tmp_path / code, ignore=shutil.ignore_patterns("__pycache__"))
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


def test_pipeline_graph_is_valid(dvc_repo):
    out = run(DVC + ["dag", "--dot"], dvc_repo)
    for stage in ("prepare", "rollout", "analyse", "propose", "validate", "review", "admit",
                  "build_data", "train", "evaluate", "track"):
        assert stage in out


def test_only_dependent_stages_rerun(dvc_repo):
    # prepare needs no model: reproduce it for real, then change params and ask DVC what is stale.
    run(DVC + ["repro", "prepare"], dvc_repo)
    assert (dvc_repo / "outputs" / "data" / "test.jsonl").exists()
    assert stale(dvc_repo, "prepare") == set()
    set_param(dvc_repo, "evolve", "min_cluster_size", 5)
    assert stale(dvc_repo, "prepare") == set()        # evolve knob: prepare untouched
    set_param(dvc_repo, "data", "seed", 11)
    assert stale(dvc_repo, "prepare") == {"prepare"}
    run(DVC + ["repro", "prepare"], dvc_repo)
    assert stale(dvc_repo, "prepare") == set()


def test_experiment_stage_follows_train_preset(dvc_repo):
    """One preset per DVC experiment: with train.preset null the stage runs nothing and writes an empty
    metrics file; setting the preset (what `dvc exp run -S train.preset=E3_cpu experiment` does) makes
    that stage stale and leaves the data untouched."""
    assert "experiment" in run(DVC + ["dag", "--dot"], dvc_repo)
    run(DVC + ["repro", "experiment"], dvc_repo)
    assert (dvc_repo / "outputs" / "experiment" / "metrics.json").read_text().strip() == "{}"
    assert stale(dvc_repo, "experiment") == set()
    set_param(dvc_repo, "train", "preset", "E3_cpu")
    assert stale(dvc_repo, "experiment") == {"experiment"}


def _experiments(repo: Path) -> dict[str, dict]:
    """``dvc exp show --json`` as name -> (executor, params.yaml values, metrics file -> values)."""
    import json

    shown = json.loads(run(DVC + ["exp", "show", "--json"], repo))
    out = {}
    for top in shown:
        for e in top.get("experiments") or []:
            data = e["revs"][0]["data"]
            out[e["name"]] = {"executor": e.get("executor"), "params": data["params"]["params.yaml"]["data"],
                              "metrics": {f: v["data"] for f, v in (data.get("metrics") or {}).items()
                                          if "data" in v}}
    return out


def test_dvc_exp_show_lists_experiments_with_their_params_and_metrics(dvc_repo):
    """Real `dvc exp run`s of the experiment stage, compared by `dvc exp show`. A preset is queued the
    way the grid is run (its run would train and serve the embedded model, so it stays queued here);
    two experiments that differ in the data run for real to the experiment stage (with train.preset
    null it trains nothing, the prepare stage before it writes the data metrics) and are listed with
    the params they ran with and the metrics columns of both stages."""
    run(DVC + ["exp", "run", "--queue", "-n", "E1_cpu", "-S", "train.preset=E1_cpu",
               "-S", "++train.overrides.max_steps=3", "experiment"], dvc_repo)
    run(DVC + ["exp", "run", "-n", "seed11", "-S", "data.seed=11", "experiment"], dvc_repo)
    run(DVC + ["exp", "run", "-n", "seed13", "-S", "data.seed=13", "-S", "data.n_questions=40", "experiment"], dvc_repo)
    exps = _experiments(dvc_repo)
    assert set(exps) == {"E1_cpu", "seed11", "seed13"}
    queued = exps["E1_cpu"]
    assert queued["executor"]["state"] == "queued" and queued["params"]["train"]["preset"] == "E1_cpu"
    queued_train = TrainParams.model_validate(queued["params"]["train"])
    assert apply_preset(queued_train).max_steps == 3  # a shortened preset, set from the command line
    for name, seed, n in (("seed11", 11, 80), ("seed13", 13, 40)):
        e = exps[name]
        assert e["params"]["data"]["seed"] == seed and e["params"]["data"]["n_questions"] == n
        assert e["params"]["train"]["preset"] is None
        assert e["metrics"]["outputs/experiment/metrics.json"] == {}
        counts = e["metrics"]["outputs/data/summary.json"]["counts"]
        assert counts["train"] + counts["val"] + counts["test"] == n
        assert sum(e["metrics"]["outputs/data/summary.json"]["hops"].values()) == n


def test_track_stage_writes_what_dvc_plots_show_draws(dvc_repo, monkeypatch):
    """The track stage's command on an epoch's files: `dvc plots show` then lists every plot of
    dvc.yaml with its data (training curves, per-epoch numbers, test EM per arm), and the epoch's
    run holds its rollout episodes as traces."""
    import json

    import mlflow

    from hasp.cli import main

    out = dvc_repo / "outputs"
    (out / "train").mkdir(parents=True)
    hist = [{"step": float(s), "loss": 2.0 / s, "learning_rate": 1e-4, "grad_norm": 1.0 + s} for s in (1, 2, 3)]
    (out / "train" / "train_metrics.json").write_text(json.dumps({"metrics": {}, "history": hist}))
    ep = out / "epoch_0"
    ep.mkdir()
    for name, s in {"propose": {"proposed": 2}, "admit": {"admitted": 1, "library_size": 9},
                    "val_baseline": {"em": 0.25}, "val_after": {"em": 0.5, "f1": 0.6}}.items():
        (ep / f"summary_{name}.json").write_text(json.dumps(s))
    traj = {"qid": "q1", "question": "Where?", "answers": ["Oslo"], "variant": "pf", "prediction": "Oslo", "em": 1.0,
            "f1": 1.0, "terminated": "final", "wall_s": 0.5, "steps": []}
    (ep / "rollout.jsonl").write_text(json.dumps(traj) + "\n" + json.dumps({**traj, "qid": "q2"}) + "\n")
    (out / "eval").mkdir()
    (out / "eval" / "metrics.json").write_text(json.dumps(
        {"generated": {"react": {"em": 0.1, "f1": 0.2, "n": 16}, "pf": {"em": 0.3, "f1": 0.4, "n": 16}}}))
    monkeypatch.chdir(dvc_repo)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{dvc_repo / 'mlflow.db'}")
    assert main(["track", "epoch", "--out", "outputs", "--params", "params.yaml"]) in (0, None)

    shown = json.loads(run(DVC + ["plots", "show", "--json"], dvc_repo))
    assert not shown.get("errors")
    data = {pid: v[0]["content"]["data"]["values"] for pid, v in shown["data"].items()}
    assert set(data) == {"training-loss", "training-learning-rate", "training-grad-norm", "epoch-em",
                         "epoch-candidates", "library-size", "test-em"}
    assert [r["loss"] for r in data["training-loss"]] == [2.0, 1.0, pytest.approx(2 / 3)]
    assert {(r["epoch"], r["val_em"]) for r in data["epoch-em"]} == {(0, 0.5)}
    assert {r["arm"]: r["em"] for r in data["test-em"]} == {"react": 0.1, "pf": 0.3}
    assert [r["library_size"] for r in data["library-size"]] == [9.0]

    run_id = (ep / "mlflow_run_id.txt").read_text().strip()
    traces = mlflow.search_traces(run_id=run_id, return_type="list")
    assert sorted(t.info.tags["hasp.qid"] for t in traces) == ["q1", "q2"]
    assert {t.info.tags["hasp.phase"] for t in traces} == {"rollout"}


def test_the_committed_dvc_lock_records_the_committed_code_and_params(dvc_repo):
    """Every stage in the committed ``dvc.lock`` was run on the code, params and command committed beside it:
    ``dvc status`` finds no changed dependency, parameter or command (outputs are not committed; only
    their absence shows). The lock holds the data stage; the model stages are a user's run."""
    import json

    shutil.copy(ROOT / "dvc.lock", dvc_repo / "dvc.lock")
    locked = yaml.safe_load((dvc_repo / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    assert "prepare" in locked
    status = json.loads(run(DVC + ["status", "--json", *locked], dvc_repo) or "{}")
    changed = {stage: [k for entry in entries if isinstance(entry, dict) for k in entry if k != "changed outs"]
               for stage, entries in status.items()}
    changed = {stage: keys for stage, keys in changed.items() if keys}
    assert not changed, (f"dvc.lock is stale for {changed}: run `dvc repro {' '.join(changed)}` and commit "
                         f"dvc.lock ({status})")
