"""The post-training grid flow end to end: E5_cpu (V2 closed loop, RS, lite evolution, two phases).

Real Prefect (the session's test API), real MLflow (temp sqlite), real BM25, real agent loop and
library, real TRL + PEFT training of the tiny random Llama; only the model calls are doubles
(``GoldPolicyDouble`` for every checkpoint, ``StudentDouble`` for proposals).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("trl")
pytest.importorskip("peft")

from doubles import GoldPolicyDouble, GridClientsDouble, StudentDouble  # noqa: E402
from test_sft_train import tiny_model_dir  # noqa: E402,F401  (module fixture: a tiny random Llama folder)

ROOT = Path(__file__).resolve().parents[1]
PRESET = "E5_cpu"
TRAIN_STEPS = 3  # train.overrides.max_steps: LoRA steps per phase in this file's runs


@pytest.fixture(scope="module")
def env(tmp_path_factory, prefect_harness, tiny_model_dir):
    from hasp.atomic import read_jsonl
    from hasp.config import load_params
    from hasp.domains.search.prepare import prepare_data

    work = tmp_path_factory.mktemp("experiment_flow")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(n_questions=12, hop_weights={1: 1.0})
    params["agent"].update(max_steps=3)
    params["llm"].update(max_concurrency=2)
    params["evolve"].update(max_candidates=1, min_cluster_size=2, summarizer=False, lite_max_candidates=1)
    params["train"].update(max_length=256)
    # a few LoRA steps per phase are enough to check the phase chain and the curves; the preset's own step
    # count on the tiny model's 49k-token head would be most of this file's time
    params["train"]["overrides"] = {"max_steps": TRAIN_STEPS}
    params["tracking"]["experiment"] = "hasp-grid-test"
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copytree(ROOT / "hasp" / "skills" / "search", work / "skills" / "search",
                    ignore=shutil.ignore_patterns("__pycache__"))
    prepare_data(load_params(work / "params.yaml"), work / "data")
    rows = [r for split in ("train", "val", "test") for r in read_jsonl(work / "data" / f"{split}.jsonl")]
    gold = {r["question"]: r["answers"][0] for r in rows}
    correct = [r["question"] for i, r in enumerate(rows) if i % 2 == 0]  # half of every split is answered
    import hasp.flows.experiment as fx

    clients = GridClientsDouble(GoldPolicyDouble(gold, correct), StudentDouble())
    mp.setattr(fx, "make_grid_clients", lambda p: clients)
    yield work, clients, tiny_model_dir
    mp.undo()


def _run(work: Path, model: Path):
    from hasp.flows.experiment import experiment_flow

    return experiment_flow(presets=[PRESET], params_path=str(work / "params.yaml"), out_root=str(work / "out"),
                           library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))


@pytest.fixture(scope="module")
def first(env):
    work, clients, model = env
    return work, clients, model, _run(work, model)


def test_two_phases_evolve_then_train_from_the_last_checkpoint(first):
    work, clients, model, res = first
    e = res["experiments"][PRESET]
    e_dir = work / "out" / PRESET
    assert e["recipe"] == "rs" and e["preset"]["loop"] == {"kind": "closed", "phases": 2, "evolve_mode": "lite"}
    p0, p1 = e["phases"]
    assert p0["evolve"]["mode"] == p1["evolve"]["mode"] == "lite"
    for i in (0, 1):
        assert (e_dir / "evolve" / f"epoch_{i}" / "candidates.json").is_file()  # an evolution epoch per phase
    ck0 = e_dir / "phase_0" / "train" / "round_0" / "merged"
    ck1 = e_dir / "phase_1" / "train" / "round_0" / "merged"
    assert Path(p0["train"]["model_dir"]) == ck0 and Path(e["final_model"]) == ck1
    # phase 1 evolves with, and samples from, the checkpoint phase 0 wrote; the sampler runs at the rollout's settings
    assert [s[0] for s in clients.sampled] == [model.resolve(), ck0]
    assert {(s[1], s[2]) for s in clients.sampled} == {(0.9, 0.95)}
    assert ck0 in clients.student_dirs and ck0 in clients.policy_dirs
    # phase 1's library is the one phase 1's epoch carried (the evolving library), and it sampled with it
    assert p1["library"] == json.loads((e_dir / "evolve" / "epoch_1" / "carry.json").read_text())["library"]
    # k = 2 samples per training question with PFs on, each with a seed of its own (train.seed's): they may
    # differ, and the round samples the same episodes when it runs again
    n_train = len((work / "data" / "train.jsonl").read_text().splitlines())
    assert p0["train"]["rounds"][0]["n_trajectories"] == 2 * n_train
    policy = clients._policy
    sampled_kw = [kw for kw in policy.kwargs if kw.get("temperature") == 0.9]
    sampled_seeds = {kw.get("seed") for kw in sampled_kw}
    assert sampled_kw and None not in sampled_seeds and len(sampled_seeds) >= 2 * n_train
    # the untrained and the trained policy, each with and without PFs, per hop count
    assert set(res["untrained"]) == {"untrained_react", "untrained_pf"}
    start = "trained_pf_start_library"
    assert set(e["eval"]) == {"trained_react", "trained_pf", start} and "1" in e["eval"]["trained_pf"]["em_by_hops"]
    assert clients.policy_dirs[-1] == ck1  # the trained arms ran on the final checkpoint
    # V2: the trained policy also ran with the library the grid started from, not the evolved one
    n_start = len([d for d in (work / "skills" / "search").iterdir() if (d / "SKILL.md").is_file()])
    assert e["eval"][start]["library_size"] == n_start
    assert e["eval"]["trained_pf"]["library_size"] == p1["evolve"]["library_size"]
    assert (e_dir / "eval" / "start_library" / "generated" / f"{start}.jsonl").is_file()
    metrics = json.loads((work / "out" / "metrics.json").read_text())
    assert set(metrics) == {"untrained", "trained", "gain", "provenance"}
    assert "em_1hop" in metrics["trained"]["trained_pf"]
    ceiling = e["eval"]["trained_pf"]["extractor_ceiling"]  # beside the scores in what `dvc metrics show` reads
    assert metrics["trained"]["extractor_ceiling"] == {"em": ceiling["em"], "n": ceiling["n"],
                                                      "lo": ceiling["em_ci95"][0], "hi": ceiling["em_ci95"][1]}
    assert len(metrics["provenance"]["git_commit"]) == 40  # what produced the metrics travels with them
    # the trained arms minus the untrained ones, paired on the same test questions
    n_test = len((work / "data" / "test.jsonl").read_text().splitlines())
    assert set(e["gains"]) == {f"{a} - {b}" for a in ("trained_react", "trained_pf", start)
                               for b in ("untrained_react", "untrained_pf")} | {f"trained_pf - {start}"}
    lib_gain = e["gains"][f"trained_pf - {start}"]  # what the evolved library adds to the trained policy
    assert lib_gain["n"] == n_test
    assert lib_gain["mean"] == pytest.approx(e["eval"]["trained_pf"]["em"] - e["eval"][start]["em"], abs=1e-3)
    g = e["gains"]["trained_pf - untrained_pf"]
    assert g["n"] == n_test == g["by_hops"]["1"]["n"]
    assert g["mean"] == pytest.approx(e["eval"]["trained_pf"]["em"] - res["untrained"]["untrained_pf"]["em"], abs=1e-3)
    assert g["ci95"][0] <= g["mean"] <= g["ci95"][1]
    assert metrics["gain"]["trained_pf_vs_untrained_pf"]["n"] == n_test


def test_mlflow_parent_with_a_child_per_preset_and_curves(first):
    import mlflow

    work, clients, model, res = first
    client = mlflow.tracking.MlflowClient()
    child_id = res["child_run_ids"][PRESET]
    child = client.get_run(child_id)
    assert child.data.tags["mlflow.parentRunId"] == res["parent_run_id"]
    assert child.data.tags["hasp.experiment"] == PRESET and child.data.tags["hasp.loop"] == "closed"
    parent = client.get_run(res["parent_run_id"])  # dated by the work, not by the seconds spent logging it
    assert parent.info.start_time <= child.info.start_time < child.info.end_time <= parent.info.end_time
    assert child.info.end_time - child.info.start_time >= 1000 * res["experiments"][PRESET]["wall_s"]
    assert child.data.params["train.rs.learning_rate"] == "0.0001"
    # what the preset replaced in the params file is visible on the run, not only the values it ran with
    replaced = child.data.tags["hasp.replaced_knobs"].split("; ")
    assert "train.recipe: sft -> rs" in replaced and "train.max_length: 256 -> 1024" in replaced
    loss = client.get_metric_history(child_id, "loss")
    n = TRAIN_STEPS  # the step cap per phase (train.overrides over the preset's)
    assert sorted(m.step for m in loss) == list(range(1, 2 * n + 1))  # two phases on one axis
    assert child.data.tags["hasp.phase_boundaries"] == f"1,{n + 1}"
    phase = {m.step: m.value for m in client.get_metric_history(child_id, "phase")}
    assert phase[n] == 0 and phase[n + 1] == 1
    lr = {m.step: m.value for m in client.get_metric_history(child_id, "learning_rate")}
    assert max(lr[s] for s in range(n + 1, 2 * n + 1)) > lr[n]  # the schedule restarts with the phase
    for name in ("grad_norm", "entropy", "mean_token_accuracy", "num_tokens"):
        assert len(client.get_metric_history(child_id, name)) == 2 * n, name
    assert "trained_pf.em" in child.data.metrics and "trained_pf.em_hops_1.mean" in child.data.metrics
    g = res["experiments"][PRESET]["gains"]["trained_pf - untrained_pf"]
    assert child.data.metrics["gain.trained_pf_vs_untrained_pf.mean"] == pytest.approx(g["mean"])
    assert child.data.metrics["gain.trained_pf_vs_untrained_pf.lo"] == pytest.approx(g["ci95"][0])
    assert {a.path for a in client.list_artifacts(child_id, "adapter")} >= {"adapter/adapter_config.json"}
    parent_arts = {a.path for a in client.list_artifacts(res["parent_run_id"])}
    assert {"comparison.md", "comparison.json"} <= parent_arts
    table = Path(mlflow.artifacts.download_artifacts(run_id=res["parent_run_id"], artifact_path="comparison.md",
                                                     dst_path=str(work / "dl"))).read_text()
    assert f"| {PRESET} | trained_pf |" in table and "| untrained | untrained_react |" in table
    assert f"| {PRESET} | trained_pf - untrained_pf | {g['mean']:+.3f} [" in table


def test_rerun_is_served_from_the_cache(first):
    work, clients, model, res = first
    calls = clients._policy.calls.n
    summary = work / "out" / PRESET / "phase_1" / "train" / "train_metrics.json"
    before = summary.stat().st_mtime_ns
    res2 = _run(work, model)
    assert clients._policy.calls.n == calls  # not one model call
    assert summary.stat().st_mtime_ns == before  # no training either
    assert res2["parent_run_id"] == res["parent_run_id"]
    assert res2["experiments"][PRESET]["eval"] == res["experiments"][PRESET]["eval"]


def _outcome(e_dir: Path) -> tuple[dict, dict, dict]:
    """What a preset's run produced, minus the clock: (exact, curves, adapters). ``exact`` holds each
    evolution epoch's library, each training round's rows and every evaluated answer; ``curves`` each
    phase's logged training history; ``adapters`` each phase's LoRA weights."""
    from safetensors.torch import load_file

    from hasp.pf.library import library_hash

    exact: dict = {}
    for ep in sorted((e_dir / "evolve").glob("epoch_*")):
        exact[ep.name] = library_hash(ep / "library")
    for rows in sorted(e_dir.glob("phase_*/train/round_*/rows.jsonl")):
        exact[str(rows.relative_to(e_dir))] = rows.read_text()
    for f in sorted((e_dir / "eval").rglob("*.jsonl")):
        if not f.name.endswith(".episodes.jsonl"):
            exact[str(f.relative_to(e_dir))] = [(r["qid"], r["prediction"], r["em"])
                                               for r in map(json.loads, f.read_text().splitlines())]
    curves = {ph.name: json.loads((ph / "train" / "train_metrics.json").read_text())["history"]
              for ph in sorted(e_dir.glob("phase_*"))}
    adapters = {str(a.relative_to(e_dir)): load_file(a) for a in sorted(e_dir.glob("phase_*/train/*/adapter/*.safetensors"))}
    return exact, curves, adapters


def test_the_grid_report_bench_script_reports_and_archives_this_grid(first, tmp_path, monkeypatch, capsys):
    """``bench/grid_report.py`` (the post-training grid's results section and its small archive) runs
    on this grid's folder: a stale import or signature inside it fails here, not at the next grid."""
    from bench_run import run_bench

    work, *_ = first
    run_bench("grid_report", ["--grid", str(work / "out"), "--ran", "the experiment flow test",
                              "--data", str(work / "data"), "--archive", str(tmp_path / "archive")],
              tmp_path, monkeypatch, capsys)
    assert (tmp_path / "archive" / "out").is_dir()


def test_the_preset_run_again_from_nothing_reproduces_its_training_and_answers(first):
    """Reproducibility of a grid preset at a tiny scale: the same preset in a fresh output folder (every
    phase misses the cache and runs again) evolves the same libraries, trains on the same rows with the
    same loss curve to the same LoRA weights, and gives the same answers and metrics. Two runs in one
    process agree on weights and gradient norms to float32 rounding (about 1e-8 here), not bit for bit,
    so those two are compared with a tolerance (``bench/reproducibility.py``, one process per run on the
    real model, compares the adapters' bytes). The model replies are doubles in this file, so this checks
    the grid's own code (data order, seeds, evolution, training); that the served model's greedy replies
    repeat is ``test_reproducibility``'s check."""
    import torch

    work, clients, model, res = first
    calls = clients._policy.calls.n
    from hasp.flows.experiment import experiment_flow

    again = experiment_flow(presets=[PRESET], params_path=str(work / "params.yaml"), out_root=str(work / "out_again"),
                            library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))
    assert clients._policy.calls.n > calls  # it ran, not served from the cache
    exact, curves, adapters = _outcome(work / "out" / PRESET)
    exact2, curves2, adapters2 = _outcome(work / "out_again" / PRESET)
    assert {"epoch_0", "epoch_1"} <= set(exact) and any(k.endswith("trained_pf.jsonl") for k in exact)
    assert exact2 == exact
    assert set(curves) == {"phase_0", "phase_1"} and all(len(c) == TRAIN_STEPS for c in curves.values())
    assert curves2 == {ph: [pytest.approx(step, rel=1e-5) for step in c] for ph, c in curves.items()}
    assert len(adapters) == 2 and set(adapters2) == set(adapters)
    for name, weights in adapters.items():
        assert set(adapters2[name]) == set(weights)
        for k, w in weights.items():
            assert torch.allclose(adapters2[name][k], w, rtol=1e-4, atol=1e-7), (name, k)
    ev, ev2 = ({arm: {k: v for k, v in s.items() if "wall_s" not in k} for arm, s in r["experiments"][PRESET]["eval"].items()}
               for r in (res, again))
    assert ev2 == ev


def test_the_untrained_evaluation_is_keyed_on_evaluation_code_only():
    """Editing a recipe re-runs training and the trained evaluation, not the untrained agent's."""
    from hasp.flows.experiment import GRID_MODULES
    from hasp.eval.journal import EVAL_MODULES
    from hasp.fingerprint import module_closure

    ev = {f.resolve() for f in module_closure(EVAL_MODULES)}
    train = {f.resolve() for f in module_closure(GRID_MODULES)} - ev
    assert any(f.name == "runner.py" and f.parent.name == "eval" for f in ev)
    assert any(f.parent.name == "agent" for f in ev) and not any(f.parent.name == "train" for f in ev)
    assert {"rs.py", "hindsight.py", "sft.py"} <= {f.name for f in train}


def test_cli_unknown_preset_is_one_line(capsys):
    from hasp.cli import main

    assert main(["experiment", "run", "E9", "--params", str(ROOT / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: experiment: unknown preset 'E9'; known: E1")
    assert main(["train", "rs", "--preset", "E1_cpu", "--params", str(ROOT / "params.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: train.preset E1_cpu is a sft preset, not rs: run `hasp train sft` or pick a rs preset"]


def test_cli_grid_subset_is_checked_before_prefect(capsys):
    """`grid --preset` runs a part of the grid; a name outside it, or GRPO without the E2 it starts from,
    is one error line (exit 2) before any flow starts."""
    from hasp.cli import main

    params = str(ROOT / "params.yaml")
    assert main(["experiment", "grid", "--preset", "E9_cpu", "--params", params]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --preset E9_cpu: not in this grid (E1_cpu, E2_cpu, E3_cpu, E4_cpu, E5_cpu, E6_cpu, GRPO_cpu, SAGE_cpu)"]
    assert main(["experiment", "grid", "--preset", "GRPO_cpu", "--params", params]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: experiment: GRPO_cpu starts from E2_cpu's checkpoint: run E2_cpu before it in the same grid, "
        "or name the start checkpoint with --model"]


def test_a_preset_that_cannot_train_is_recorded_and_the_grid_goes_on(env, monkeypatch):
    """RS whose sampler never takes an action (prose only: no success, no observation, so no hindsight row)
    fails with its one line; the next preset still trains and is evaluated, and the grid's files,
    metrics and MLflow parent run hold both."""
    import mlflow

    import hasp.flows.experiment as fx
    from doubles import ScriptedPolicyDouble

    work, clients, model = env

    class ProseSamplerDouble(GridClientsDouble):
        def sampler(self, rollout):
            import contextlib

            @contextlib.contextmanager
            def open_policy(model_dir):
                yield ScriptedPolicyDouble(default="I am not sure what to do here.")

            return open_policy

    monkeypatch.setattr(fx, "make_grid_clients",
                        lambda p: ProseSamplerDouble(clients._policy, StudentDouble()))
    from hasp.flows.experiment import experiment_flow

    out = work / "out_failing"
    res = experiment_flow(presets=["E2_cpu", "E1_cpu"], params_path=str(work / "params.yaml"), out_root=str(out),
                          library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))
    failed, ran = res["experiments"]["E2_cpu"], res["experiments"]["E1_cpu"]
    assert "kept set is empty" in failed["error"] and "\n" not in failed["error"]
    assert "error" not in ran and set(ran["eval"]) == {"trained_react", "trained_pf"}
    grid = json.loads((out / "grid.json").read_text())
    assert "kept set is empty" in grid["experiments"]["E2_cpu"]["error"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert "E1_cpu" in metrics and "E2_cpu" not in metrics
    child = mlflow.tracking.MlflowClient().get_run(res["child_run_ids"]["E1_cpu"])
    assert child.data.tags["mlflow.parentRunId"] == res["parent_run_id"]


def test_a_closed_loop_sft_phase_where_nothing_was_admitted_trains_on_the_epochs_rollout(env):
    """E4_cpu (V2, SFT, full evolution) with no proposals: each phase's refreshed pool is the epoch's own
    Phase A rollout (same checkpoint, same skills), copied rather than rolled out a second time; the
    rows, training and both trained evaluations follow from it as usual."""
    import mlflow

    from hasp.flows.experiment import experiment_flow

    work, clients, model = env
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["evolve"].update(max_candidates=0)
    params["train"]["overrides"] = {"max_steps": 2}
    (work / "params_e4.yaml").write_text(yaml.safe_dump(params))
    out = work / "out_e4"
    res = experiment_flow(presets=["E4_cpu"], params_path=str(work / "params_e4.yaml"), out_root=str(out),
                          library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))
    e = res["experiments"]["E4_cpu"]
    assert "error" not in e and e["recipe"] == "sft" and len(e["phases"]) == 2
    for i, ph in enumerate(e["phases"]):
        a_roll = out / "E4_cpu" / "evolve" / f"epoch_{i}" / "rollout.jsonl"
        assert ph["evolve"]["admitted"] == 0 and ph["rollout"]["reused_from"] == str(a_roll)
        pool = out / "E4_cpu" / f"phase_{i}" / "rollout.jsonl"
        assert pool.read_bytes() == a_roll.read_bytes()
        assert (out / "E4_cpu" / f"phase_{i}" / "sft.jsonl").is_file()
    assert Path(e["final_model"]) == out / "E4_cpu" / "phase_1" / "train" / "merged"
    # nothing admitted: the start-library arm runs the same skills as the final library
    assert e["eval"]["trained_pf_start_library"]["library_size"] == e["eval"]["trained_pf"]["library_size"]
    # each phase's rows are in the MLflow child run, counted per target action type
    client = mlflow.tracking.MlflowClient()
    child = res["child_run_ids"]["E4_cpu"]
    n_rows = {m.step: m.value for m in client.get_metric_history(child, "data.sft.n_rows")}
    assert n_rows == {i: ph["build_data"]["sft"]["n_rows"] for i, ph in enumerate(e["phases"])}
    by_type = [name for name in client.get_run(child).data.metrics if name.startswith("data.sft.per_target_type.")]
    per_phase: dict[int, float] = {}
    for name in by_type:
        for m in client.get_metric_history(child, name):
            per_phase[m.step] = per_phase.get(m.step, 0.0) + m.value
    assert by_type and per_phase == {i: n for i, n in n_rows.items() if n}


def test_a_closed_loop_sft_phase_with_objective_ab_trains_on_its_own_epochs_skill_rows_too(env):
    """E4_cpu with train.objective AB: each phase's trainer reads one file holding that phase's refreshed
    policy rows followed by the skill-author rows of that phase's own evolution epoch."""
    from hasp.flows.experiment import experiment_flow
    from hasp.atomic import read_jsonl

    work, clients, model = env
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["train"].update(objective="AB", overrides={"max_steps": 1, "max_length": 2048})
    params["evolve"].update(structured_output="lines")  # the student double answers the line format
    (work / "params_ab.yaml").write_text(yaml.safe_dump(params))
    out = work / "out_ab"
    res = experiment_flow(presets=["E4_cpu"], params_path=str(work / "params_ab.yaml"), out_root=str(out),
                          library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))
    e = res["experiments"]["E4_cpu"]
    assert "error" not in e and len(e["phases"]) == 2
    for i, ph in enumerate(e["phases"]):
        ph_dir, ep_dir = out / "E4_cpu" / f"phase_{i}", out / "E4_cpu" / "evolve" / f"epoch_{i}"
        rows = ph_dir / "sft_objective_AB.jsonl"
        assert ph["train"]["rows"] == str(rows)
        skill = read_jsonl(ep_dir / "sft_skill.jsonl")
        assert read_jsonl(rows) == read_jsonl(ph_dir / "sft.jsonl") + [
            {**r, "sample_weight": max(0.0, r["sample_weight"])} for r in skill]
        trained = json.loads((ph_dir / "train" / "train_summary.json").read_text())
        assert trained["metrics"]["n_rows_in"] == len(read_jsonl(rows))
    assert read_jsonl(out / "E4_cpu" / "evolve" / "epoch_0" / "sft_skill.jsonl")  # the student's proposal, scored


def test_a_later_closed_loop_phase_without_rows_keeps_its_start_checkpoint(tmp_path, tiny_model_dir):
    """A closed loop's later phase whose policy made no PF-corrected step above the reward floor (no SFT
    rows; RS and OPD raise the same ``NoRowsError`` on an empty round) trains nothing: it hands its start checkpoint and the previous adapter on and says why, so the earlier phases
    and the evolved library still reach the evaluation. A first phase without rows has no checkpoint to
    keep: that stays the preset's one error line."""
    from hasp.config import load_params
    from hasp.train.rounds import RecipeError
    from hasp.train.run import SUMMARY_FILE
    from hasp.tasks.experiment import train_phase

    p = load_params(ROOT / "params.yaml")
    t = p.train.model_copy(update={"recipe": "sft"})
    rows = tmp_path / "sft.jsonl"
    rows.write_text("")
    previous = {"adapter_dir": str(tmp_path / "phase_0" / "train" / "adapter")}
    out = tmp_path / "phase_1" / "train"
    s = train_phase.fn("key", p, t, tiny_model_dir, out, rows=rows, previous=previous)
    assert s["model_dir"] == s["start_model"] == str(tiny_model_dir)
    assert s["adapter_dir"] == previous["adapter_dir"] and s["rows"] == str(rows)
    assert s["skipped"] == f"{rows}: no SFT rows (no PF-corrected step above the reward floor); the phase keeps " \
                           "its start checkpoint"
    assert json.loads((out / SUMMARY_FILE).read_text()) == s
    with pytest.raises(RecipeError, match="no SFT rows"):
        train_phase.fn("key", p, t, tiny_model_dir, tmp_path / "phase_0" / "train", rows=rows)


def test_a_closed_loop_rs_phase_with_an_empty_kept_set_keeps_the_previous_checkpoint(env, monkeypatch):
    """E5_cpu whose sampler writes prose only once it samples from phase 0's checkpoint: phase 1's RS round
    keeps nothing (no success, no observation, so no hindsight row). The preset is not lost: phase 1 hands
    phase 0's checkpoint and adapter on, says why, and the trained arms are evaluated on that checkpoint;
    the MLflow child run carries the reason as a tag."""
    import contextlib

    import mlflow

    import hasp.flows.experiment as fx
    from doubles import ScriptedPolicyDouble

    work, clients, model = env

    class ProseAfterPhase0Double(GridClientsDouble):
        def sampler(self, rollout):
            @contextlib.contextmanager
            def open_policy(model_dir):
                self.sampled.append((Path(model_dir), rollout.temperature, rollout.top_p))
                yield self._policy if Path(model_dir) == model.resolve() else \
                    ScriptedPolicyDouble(default="I am not sure what to do here.")

            return open_policy

    double = ProseAfterPhase0Double(clients._policy, StudentDouble())
    monkeypatch.setattr(fx, "make_grid_clients", lambda p: double)
    from hasp.flows.experiment import experiment_flow

    out = work / "out_empty_phase"
    res = experiment_flow(presets=[PRESET], params_path=str(work / "params.yaml"), out_root=str(out),
                          library=str(work / "skills" / "search"), data_dir=str(work / "data"), model=str(model))
    e = res["experiments"][PRESET]
    assert "error" not in e and len(e["phases"]) == 2
    p0, p1 = (ph["train"] for ph in e["phases"])
    assert p0.get("skipped") is None and "kept set is empty" in p1["skipped"]
    assert p1["skipped"].endswith("the phase keeps its start checkpoint")
    assert p1["model_dir"] == p1["start_model"] == p0["model_dir"] == e["final_model"]
    assert p1["adapter_dir"] == p0["adapter_dir"] == e["adapter_dir"]
    assert [s[0] for s in double.sampled] == [model.resolve(), Path(p0["model_dir"])]
    assert Path(p0["model_dir"]) in double.policy_dirs[-3:]  # the trained arms ran on phase 0's checkpoint
    assert set(e["eval"]) >= {"trained_react", "trained_pf", "trained_pf_start_library"}
    child = mlflow.tracking.MlflowClient().get_run(res["child_run_ids"][PRESET])
    assert "kept set is empty" in child.data.tags["hasp.phase_1.train_skipped"]
