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
