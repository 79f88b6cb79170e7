"""Many episodes logged as MLflow traces at once keep every span (real MLflow, sqlite store).

MLflow exports spans through a bounded queue (OpenTelemetry's batch processor, 2048 spans); an
evaluation logs its episodes' traces in one burst after the run, and on a loaded machine spans were
dropped ("Queue full, dropping Span") while the count of logged traces said nothing was missing.
Whether the queue overflows depends on the machine's load, so this checks the outcome on every run:
each trace holds a span for every step its root says the episode took."""

from __future__ import annotations

import json
from pathlib import Path

from hasp.track.traces import log_trajectory_file

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "objective_b" / "full" / "epoch_0" / "rollout.jsonl"


def test_a_burst_of_episode_traces_keeps_every_step_span(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    rows = [json.loads(x) for x in SOURCE.read_text().splitlines() if x.strip()]
    copies = 10  # 40 episodes: more than one drain of the queue
    path = tmp_path / "pf.jsonl"
    with path.open("w") as f:
        for i in range(copies):
            for r in rows:
                f.write(json.dumps({**r, "qid": f"{r['qid']}-{i}"}) + "\n")
    mlflow.set_experiment("burst")
    with mlflow.start_run() as run:
        n = log_trajectory_file(mlflow, path, dataset="generated", phase="evaluate", limit=10_000)
    assert n == copies * len(rows)
    mlflow.flush_trace_async_logging()
    traces = mlflow.search_traces(run_id=run.info.run_id, return_type="list", max_results=10_000)
    assert len(traces) == n
    short = []
    for t in traces:
        root = next(s for s in t.data.spans if s.parent_id is None)
        steps = [s for s in t.data.spans if s.name.startswith("step ")]
        if len(steps) != root.attributes["n_steps"]:
            short.append((root.attributes["qid"], len(steps), root.attributes["n_steps"]))
    assert not short, f"{len(short)} traces lost step spans, e.g. {short[:3]}"
