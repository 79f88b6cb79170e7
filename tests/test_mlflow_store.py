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
