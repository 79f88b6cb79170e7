"""The MLflow store survives a kill while it is being created: a process SIGKILLed in the middle
of MLflow's table creation leaves no database behind, and the next run creates a whole one.
Real processes, real SQLite store in tmp."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_killed_while_creating_the_store_leaves_no_half_made_database(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent("""
        import os, signal
        import mlflow.store.db.utils as db
        from hasp.track.mlflow_run import start_run

        def die(engine):  # the tables exist, the migrations have not run: the worst moment to die
            os.kill(os.getpid(), signal.SIGKILL)

        db._upgrade_db = die
        with start_run("exp", "never"):
            pass
    """))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not (tmp_path / "mlflow.db").exists()

    from hasp.track.mlflow_run import find_runs, start_run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with start_run("exp", "after") as mlflow:
        mlflow.log_metric("x", 1.0)
    (run,) = find_runs("exp")
    assert run.data.metrics["x"] == 1.0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".mlflow.db.")]


def test_artifacts_of_a_new_experiment_go_beside_the_database_not_into_the_working_folder(
        tmp_path: Path, monkeypatch) -> None:
    from hasp.track.mlflow_run import log_json_artifact, start_run

    store, cwd = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    with start_run("beside-the-store", "r1") as mlflow:
        log_json_artifact(mlflow, {"a": 1}, "a.json")
        run_id = mlflow.active_run().info.run_id
    assert not (cwd / "mlruns").exists()
    assert (store / "mlruns" / run_id / "artifacts" / "a.json").is_file()
    with start_run("beside-the-store", "r2") as mlflow:  # the existing experiment is reused
        assert mlflow.active_run().info.experiment_id == mlflow.get_run(run_id).info.experiment_id


def test_a_two_round_recipe_run_marks_its_round_boundaries_and_preset(tmp_path: Path, monkeypatch) -> None:
    """Each round's trainer counts from step 1; the run shifts round 2 past round 1, tags where each
    round starts, logs the per-round data counts, and names the preset that chose the recipe."""
    import json

    import mlflow

    from hasp.config import Params
    from hasp.track.train_run import log_training
    from hasp.train.presets import apply_preset

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    files = []
    for r, losses in enumerate(([2.0, 1.5], [1.2, 1.0, 0.9])):
        f = tmp_path / f"round_{r}" / "train_summary.json"
        f.parent.mkdir()
        f.write_text(json.dumps({"history": [{"step": i + 1, "loss": v} for i, v in enumerate(losses)]}))
        files.append(str(f))
    p = Params()
    train = apply_preset(p.train, "E2_cpu")
    summary = {"recipe": "rs", "start_model": "m", "adapter_dir": str(tmp_path / "no_adapter"),
               "rounds": [{"data": {"kept": 3}}, {"data": {"kept": 5}}], "metrics": {"train_loss": 0.9},
               "train_summaries": files}
    run_id = log_training(p, train, summary)
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    run = mlflow.get_run(run_id)
    client = mlflow.MlflowClient()
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [
        (1, 2.0), (2, 1.5), (3, 1.2), (4, 1.0), (5, 0.9)]
    assert run.data.tags["hasp.round_boundaries"] == "1,3"
    assert run.data.tags["hasp.experiment"] == "E2_cpu" and run.data.tags["hasp.recipe"] == "rs"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "data.kept")] == [(0, 3.0), (1, 5.0)]
    assert run.data.metrics["final.train_loss"] == 0.9 and "hasp.adapter" not in run.data.tags


def test_grid_runs_are_dated_by_when_their_work_ran_not_when_they_were_logged(tmp_path: Path, monkeypatch) -> None:
    """The grid logs after the work; without the spans the parent showed a duration of under a second."""
    import mlflow

    from hasp.config import load_params
    from hasp.track.grid_report import log_grid

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    p = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    grid = {"untrained": {}, "experiments": {
        "E1_cpu": {"preset": {"loop": {"kind": "open", "phases": 1}}, "train": {}, "phases": [], "eval": {},
                   "gains": {}, "wall_s": 5000.0}}}
    spans = {"grid": (1_700_000_000.0, 1_700_007_200.0), "E1_cpu": (1_700_000_100.0, 1_700_005_100.0)}
    res = log_grid(tmp_path, p, grid, run_name="grid-dated", spans=spans)
    client = mlflow.tracking.MlflowClient()
    parent, child = client.get_run(res["parent_run_id"]), client.get_run(res["child_run_ids"]["E1_cpu"])
    assert parent.info.start_time == 1_700_000_000_000
    assert (child.info.start_time, child.info.end_time) == (1_700_000_100_000, 1_700_005_100_000)
    assert child.info.status == "FINISHED" and parent.info.status == "FINISHED"
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert child.data.metrics["wall_s"] == 5000.0
    undated = log_grid(tmp_path, p, grid, run_name="grid-undated")  # without spans: runs dated as they are logged
    assert client.get_run(undated["child_run_ids"]["E1_cpu"]).info.start_time > 1_700_007_200_000
    assert "training_curves.png" not in {a.path for a in client.list_artifacts(res["parent_run_id"])}  # no curve
