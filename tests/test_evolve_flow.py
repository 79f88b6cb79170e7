"""The multi-epoch Prefect flow on doubles: 2 epochs, library carried, MLflow metrics per epoch,
and an unchanged re-run served from the task cache (no model call at all).

Real Prefect (the session's test API, ``prefect_harness`` in ``conftest.py``), real MLflow (temp
sqlite), real BM25, real sandbox for generated PFs; only the three models are doubles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import flow_params_with_doubles, flow_with_doubles

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory, prefect_harness):
    work = tmp_path_factory.mktemp("evolve_flow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    flow_params_with_doubles(work, "hasp-evolve-flow-test", max_candidates=2, min_cluster_size=2)
    doubles = flow_with_doubles(mp, work, ROOT / "hasp" / "skills" / "search")
    yield work, doubles
    mp.undo()


def _run(work: Path):
    from hasp.flows.evolve import evolve_flow

    return evolve_flow(epochs=2, mode="full", filtering="full", params_path=str(work / "params.yaml"),
                       out_root=str(work / "outputs"), library=str(work / "skills" / "search"))


@pytest.fixture(scope="module")
def first(env):
    work, doubles = env
    return work, doubles, _run(work)


def test_two_epochs_carry_the_library(first):
    work, doubles, res = first
    out = work / "outputs"
    assert len(res["epochs"]) == 2
    for i in (0, 1):
        ed = out / f"epoch_{i}"
        for name in ("rollout.jsonl", "summaries.json", "clusters.json", "candidates.json", "validation.json",
                     "reviews.json", "gate.json", "admission.json", "carry.json", "sft.jsonl", "sft_skill.jsonl",
                     "dpo_skill.jsonl", "summary_val_after.json"):
            assert (ed / name).exists(), f"epoch_{i}/{name}"
    e0, e1 = res["epochs"]
    assert e0["analyse"]["llm_patterns"] > 0  # the summarizer double was asked and its patterns kept
    carry0 = json.loads((out / "epoch_0" / "carry.json").read_text())["library"]
    # epoch 1 rolled out on epoch 0's carried library
    assert e1["rollout"]["library_size"] == len([*Path(carry0).glob("*/SKILL.md"),
                                                 *Path(carry0).glob("generated/*/SKILL.md")]) or \
        e0["frontier"]["rolled_back_to"] is not None
    # the val gate ran the candidates that passed D and E, each against one shared baseline
    gate0 = json.loads((out / "epoch_0" / "gate.json").read_text())
    assert len(gate0) == e0["gate"]["val_runs"]
    for g in gate0:
        assert g["base_em"] == e0["val_baseline"]["em"] and g["delta_em"] is not None
    # no rollback here (EM stays flat), so epoch 1's library-alone val run is epoch 0's "val_after"
    # run served from the cache, its trajectories copied from there
    assert e0["frontier"]["rolled_back_to"] is None
    assert e1["val_baseline"] == e0["val_after"]
    assert (out / "epoch_1" / "val_baseline.jsonl").read_bytes() == (out / "epoch_0" / "val_after.jsonl").read_bytes()
    fr = json.loads((out / "frontier.json").read_text())
    assert {m["epoch"] for m in fr["members"]} <= {-1, 0, 1} and fr["members"]
    assert set(res["eval"]) == {"react", "pf_before", "pf"}


def test_mlflow_has_per_epoch_metrics(first):
    import mlflow

    work, doubles, res = first
    client = mlflow.tracking.MlflowClient()
    for name in ("proposed", "exec_pass", "review_pass", "val_pass", "admitted", "library_size", "q_skill_mean",
                 "q_skill_min", "q_skill_max", "val_em"):
        steps = sorted(m.step for m in client.get_metric_history(res["run_id"], name))
        assert steps == [0, 1], name
    run = client.get_run(res["run_id"])
    assert run.data.tags["hasp.filtering"] == "full" and "final.pf.em" in run.data.metrics
    from hasp.fingerprint import content_hash

    # provenance: a policy served elsewhere is named, not hashed; the data is the flow's own folder
    assert run.data.tags["hasp.provenance.model"] == "double-model at http://127.0.0.1:9/v1"
    assert run.data.tags["hasp.provenance.model_sha256"] == "unknown"
    assert run.data.tags["hasp.provenance.data_hash"] == content_hash(work / "outputs" / "data")
    assert len(run.data.tags["hasp.provenance.git_commit"]) == 40
    arts = {a.path for a in client.list_artifacts(res["run_id"], "epoch_0")}
    assert "epoch_0/review_histogram.json" in arts and "epoch_0/review_histogram.png" in arts


def _artifacts(flow_run_id: str) -> dict:
    """The flow run's artifacts from the Prefect API. The request is sent as the API documents it:
    the client's ``read_artifacts`` sends ``null`` for the flow-run and task-run filters it was not
    given, which the server refuses, and an empty task-run filter drops artifacts made in a flow body."""
    from types import SimpleNamespace

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as c:
        r = c.request("POST", "/artifacts/filter", json={
            "artifacts": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 100, "offset": 0, "sort": "CREATED_DESC"})
    return {a["key"]: SimpleNamespace(**a) for a in r.json()}


def test_each_epoch_leaves_prefect_artifacts(first):
    """Per epoch, read back from the Prefect API: the story as markdown, the candidates and their
    decisions as a table (one row per candidate, the admission file's decision), a link to the run."""
    work, doubles, res = first
    arts = _artifacts(res["flow_run_id"])
    assert res["artifacts"]["failed"] == 0 and set(res["artifacts"]["keys"]) == set(arts)
    for i in (0, 1):
        md, table, link = arts[f"epoch-{i}-summary"], arts[f"epoch-{i}-decisions"], arts[f"epoch-{i}-mlflow-run"]
        assert (md.type, table.type) == ("markdown", "table")  # Prefect stores a link as markdown
        assert f"# Evolution epoch {i}" in md.data and "Failures found:" in md.data and "Proposals:" in md.data
        rows = json.loads(table.data)
        cands = json.loads((work / "outputs" / f"epoch_{i}" / "candidates.json").read_text())
        adm = {a["skill_id"]: a for a in json.loads((work / "outputs" / f"epoch_{i}" / "admission.json").read_text())}
        assert [r["name"] for r in rows] == [c["skill_id"] for c in cands] and rows
        assert set(rows[0]) == {"name", "cluster", "format", "q_exec", "review", "val_em_before", "val_em_after",
                                "val_n", "decision", "reason"}
        for r in rows:
            a = adm.get(r["name"])
            assert r["decision"] == ("not decided" if a is None else
                                     f"admitted v{a['version']}" if a["admitted"] else "rejected")
        assert link.data.startswith(f"[MLflow run {res['run_id']}](http://127.0.0.1:5000/#/experiments/")
        assert "mlflow ui --backend-store-uri sqlite:///" in link.description
    assert "Test split:" in arts["epoch-1-summary"].data  # the final evaluation closes the last epoch


def test_ui_link_uses_the_tracking_server_when_there_is_one():
    from hasp.track.mlflow_run import ui_link

    assert ui_link("http://mlflow:5000/", "3", "abc") == ("http://mlflow:5000/#/experiments/3/runs/abc",
                                                          "run abc on http://mlflow:5000/")
    assert ui_link("sqlite:////x/mlflow.db", "3", "abc")[0] == "http://127.0.0.1:5000/#/experiments/3/runs/abc"


def test_evolution_episodes_are_traces_on_the_run(first):
    """Phase A rollouts, the val baseline, each gated candidate's val run, the library after the
    epoch and the final test evaluation: one trace per episode on the evolution run, tagged with
    phase and epoch, PF events as spans."""
    import mlflow

    work, doubles, res = first
    traces = mlflow.search_traces(run_id=res["run_id"], return_type="list")
    by = {}
    for t in traces:
        tags = t.info.tags
        by.setdefault((tags.get("hasp.epoch"), tags["hasp.phase"]), []).append(t)
    out = work / "outputs"
    for i in ("0", "1"):
        n_roll = len((out / f"epoch_{i}" / "rollout.jsonl").read_text().splitlines())
        assert len(by[(i, "rollout")]) == min(n_roll, 50)
        assert by[(i, "val_baseline")] and by[(i, "val_after")]
    gated = sum(1 for i in (0, 1) for _ in (out / f"epoch_{i}" / "val_runs").glob("*.jsonl"))
    assert len([t for (e, ph), ts in by.items() if ph == "val_gate" for t in ts]) >= gated > 0
    assert by[(None, "evaluate")]  # the final evaluation, start times from its episodes file
    spans = [s for t in traces for s in t.data.spans]
    assert any(s.span_type == "PF_EVENT" for s in spans)
    assert client_metric(res["run_id"], "traces") == len(traces)
    roll = by[("0", "rollout")][0].data.spans[0]
    assert roll.attributes["phase"] == "rollout" and roll.attributes["start_estimated"] is True
    assert by[(None, "evaluate")][0].data.spans[0].attributes["start_estimated"] is False


def client_metric(run_id: str, name: str) -> float:
    import mlflow

    return mlflow.tracking.MlflowClient().get_run(run_id).data.metrics[name]


def test_flow_writes_the_files_dvc_plots_draws(first):
    work, doubles, res = first
    plots = work / "outputs" / "plots"
    epochs = json.loads((plots / "epochs.json").read_text())
    assert [r["epoch"] for r in epochs] == [0, 1]
    assert [r["admitted"] for r in epochs] == [float(e["admit"]["admitted"]) for e in res["epochs"]]
    assert {r["arm"] for r in json.loads((plots / "test.json").read_text())} == set(res["eval"])
    assert json.loads((plots / "train_steps.json").read_text()) == []  # no training in this flow


def test_unchanged_rerun_hits_the_cache(first):
    work, doubles, res = first
    before = {n: doubles[n].calls.n for n in doubles}
    cands = (work / "outputs" / "epoch_1" / "candidates.json").read_bytes()
    res2 = _run(work)
    assert {n: doubles[n].calls.n for n in doubles} == before  # not one model call
    assert res2["run_id"] == res["run_id"] and res2["eval"] == res["eval"]
    assert (work / "outputs" / "epoch_1" / "candidates.json").read_bytes() == cands


def test_single_epoch_flow_still_runs_with_the_gate(env):
    """``evolve_epoch_flow`` (``hasp demo``) runs the same epoch tasks, then evaluation and one MLflow run."""
    from hasp.flows.evolve import evolve_epoch_flow

    work, doubles = env
    res = evolve_epoch_flow(params_path=str(work / "params.yaml"), out_root=str(work / "single"),
                            library=str(work / "skills" / "search"))
    ph = res["phases"]
    assert ph["train"]["skipped"] == "train.enabled is false" and ph["train"]["model_dir"] is None
    assert set(res["eval"]) == {"react", "pf_before", "pf"} and ph["gate"]["val_runs"] >= 0
    hist = json.loads((work / "single" / "epoch_0" / "library" / "library_history.json").read_text())
    assert len(hist) == ph["propose"]["proposed"]
    assert all("gates" in h for h in hist)
    # an epoch that admitted nothing does not run the same agent on the same library twice
    assert (res["eval"]["pf_before"].get("same_library_as") == "pf") == (not any(h["decision"] == "admitted" for h in hist))


def test_serve_registers_evolve_flow_with_a_cron_schedule(monkeypatch):
    """Argument handling only; the scheduled flow on a real server and worker is tests/test_services.py."""
    import hasp.flows.serve as serve

    seen = {}
    monkeypatch.setattr(serve.evolve_flow, "serve", lambda **kw: seen.update(kw))
    monkeypatch.setattr(serve, "require_server", lambda: "http://127.0.0.1:4200/api")
    serve.main(["--cron", "30 1 * * *", "--epochs", "3", "--mode", "lite", "--filtering", "exec"])
    assert seen["cron"] == "30 1 * * *" and seen["name"] == "nightly-evolve"
    assert seen["parameters"]["epochs"] == 3 and seen["parameters"]["mode"] == "lite"
    assert seen["parameters"]["filtering"] == "exec"
    seen.clear()
    serve.main(["--cron", "0 3 * * *", "--timezone", "Europe/Berlin"])
    assert seen["schedule"].cron == "0 3 * * *" and seen["schedule"].timezone == "Europe/Berlin"
