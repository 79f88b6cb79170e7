"""End to end: one tiny evolution epoch with the real embedded model, real Prefect, real MLflow.

This is the slow test (a few minutes on 2 cores): it starts the real SmolLM2-135M server,
runs phases A–H, a short LoRA SFT and the three-agent evaluation as a Prefect flow, then
checks what a user would look at: the MLflow run, the library history and the PF events.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from ports import free_port_pair

# real embedded model: deselect with -m "not model"
pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def epoch_env(tmp_path_factory, monkeypatch_module, prefect_harness):
    work = tmp_path_factory.mktemp("epoch")
    monkeypatch_module.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # 3 train, 1 val, 2 test questions: every phase runs, none for long
    params["data"].update(n_questions=6, fractions=[0.5, 0.17, 0.33])
    params["agent"].update(max_steps=2, max_tokens=48)  # two steps and the answer turn: PFs fire, episodes stay short
    params["llm"].update(port=free_port_pair())
    # one failure summary and one proposal exercise Phases B-E's model paths; each costs seconds on 2 cores
    params["evolve"].update(max_candidates=1, proposal_max_tokens=160, min_cluster_size=2,
                            summarizer_max_failures=1, summarizer_max_tokens=200)
    params["train"].update(max_steps=2, max_length=512, per_device_train_batch_size=2)
    params["tracking"]["experiment"] = "hasp-e2e"
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copytree(ROOT / "hasp" / "skills" / "search", work / "skills" / "search")
    return work


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def first_run(epoch_env):
    from hasp.flows.evolve import evolve_epoch_flow

    res = evolve_epoch_flow(params_path=str(epoch_env / "params.yaml"), out_root=str(epoch_env / "outputs"),
                            library=str(epoch_env / "skills" / "search"))
    return epoch_env, res


def test_epoch_outputs_and_pf_events(first_run):
    work, res = first_run
    out = work / "outputs"
    assert set(res["eval"]) == {"react", "pf_before", "pf", "trained_pf"}  # pf_before: the input library
    for label, m in res["eval"].items():
        assert m["n"] > 0 and 0.0 <= m["em"] <= 1.0, label
    assert res["eval"]["react"]["pf_fires_total"] == 0  # the baseline has no harness
    # PF events are in the Phase-A trajectories, with complete audit records
    rows = [json.loads(line) for line in (out / "epoch_0" / "rollout.jsonl").read_text().splitlines()]
    audits = [s["audit"] for r in rows for s in r["steps"] if s["audit"]]
    assert audits, "no parsed steps at all"
    fired = [f for a in audits for f in a["fired"]]
    assert fired, "no PF fired in the whole rollout"
    for a in audits:
        assert {"state", "a_orig", "a_final", "context", "fired", "mode", "feedback"} <= set(a)
    # every phase wrote its summary; Phase D validated every proposed candidate
    ph = res["phases"]
    assert ph["validate"]["validated"] == ph["propose"]["proposed"]
    assert ph["review"]["reviewed"] == ph["propose"]["proposed"]
    # the library history records every decision (admitted or not)
    hist = json.loads((out / "epoch_0" / "library" / "library_history.json").read_text())
    entries = hist if isinstance(hist, list) else hist.get("entries", hist.get("decisions", []))
    assert len(entries) == ph["propose"]["proposed"]
    assert (out / "train" / "merged" / "config.json").exists()
    assert (out / "epoch_0" / "sft.jsonl").exists()


def test_mlflow_run_has_metrics_and_artifacts(first_run):
    import mlflow

    work, res = first_run
    client = mlflow.tracking.MlflowClient()
    run = client.get_run(res["run_id"])
    m = run.data.metrics
    for label in ("react", "pf", "trained_pf"):
        assert f"eval.{label}.em" in m and f"eval.{label}.f1" in m
    assert "phase.propose.proposed" in m and "phase.admit.admitted" in m
    assert "phase.admit.library_size" in m
    assert any(k.startswith("train.loss") for k in m)
    # what ran, never a hard-coded grid preset: this epoch trained SFT and no preset was chosen
    assert run.data.tags["hasp.recipe"] == "sft" and run.data.tags["hasp.kind"] == "epoch"
    assert "hasp.experiment" not in run.data.tags
    arts = {a.path for a in client.list_artifacts(res["run_id"])}
    assert {"library", "epoch_0", "eval"} <= arts
    lib_arts = {a.path for a in client.list_artifacts(res["run_id"], "library")}
    assert "library/library_history.json" in lib_arts


def test_second_run_is_served_from_cache(first_run):
    from hasp.flows.evolve import evolve_epoch_flow

    work, res = first_run
    before = (work / "outputs" / "epoch_0" / "rollout.jsonl").read_bytes()
    res2 = evolve_epoch_flow(params_path=str(work / "params.yaml"), out_root=str(work / "outputs"),
                             library=str(work / "skills" / "search"))
    assert res2["model_used"] is False  # no model server was needed: every task hit the cache
    assert res2["eval"] == res["eval"] and res2["run_id"] == res["run_id"]
    assert (work / "outputs" / "epoch_0" / "rollout.jsonl").read_bytes() == before


#: bench scripts that report on an epoch's outputs, each run on this epoch's (arguments after the folder)
REPORTS = {
    "evolution_report": lambda out: ["--out", str(out), "--ran", "the e2e test epoch", "--section", "Smoke"],
    "main_table": lambda out: ["--eval", f"epoch={out / 'eval'}", "--column", "Generated=generated", "--no-write"],
    "hindsight_rows": lambda out: ["--rollout", str(out / "epoch_0" / "rollout.jsonl"), "--max-length", "512",
                                   "--no-write"],
    "answer_extraction": lambda out: [str(out / "epoch_0"), "--old-rev", "HEAD"],
    "checkpoint_engines": lambda out: ["--first", str(out / "eval"), "--second", str(out / "eval"), "--no-write"],
}


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_report_bench_script_runs_on_the_epochs_outputs(first_run, name, tmp_path, monkeypatch, capsys):
    """The bench scripts that read a run's files instead of making one run on this epoch's: a stale
    import or signature inside one fails here. Their sections go to a temp file."""
    from bench_run import run_bench

    work, _ = first_run
    run_bench(name, REPORTS[name](work / "outputs"), tmp_path, monkeypatch, capsys)
