"""Each recipe trains for real (TRL + PEFT on CPU) on the tiny random Llama and writes an adapter."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from doubles import RolloutSamplerDouble, ScriptedTeacherDouble  # noqa: E402
from test_recipes import traj  # noqa: E402
from test_sft_train import tiny_model_dir  # noqa: E402,F401  (module fixture: a tiny random Llama folder)

from hasp.atomic import read_json, read_jsonl, write_jsonl  # noqa: E402
from hasp.config import TrainParams  # noqa: E402
from hasp.train.data import build_dpo_rows, score_all  # noqa: E402
from hasp.train.presets import apply_preset  # noqa: E402
from hasp.train.rounds import NoRowsError  # noqa: E402

TINY = {"max_steps": 1, "lora_r": 4, "lora_alpha": 8, "learning_rate": 1e-3, "per_device_train_batch_size": 2,
        "logging_steps": 1}


def _adapter(d: Path) -> None:
    assert (d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file()


def test_rs_two_rounds_second_samples_from_the_first_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    from hasp.train.rs import train_rs

    questions = [{"id": "q1"}, {"id": "q2"}]
    batch = [traj("q1", em=1.0, f1=1.0), traj("q1", f1=0.0, terminated="max_steps"),
             traj("q2", f1=0.5), traj("q2", terminated="max_steps")]
    sampler = RolloutSamplerDouble(batch)
    train = TrainParams(**TINY, rs={"iterations": 2, "learning_rate": 1e-3})
    seen: list[tuple[int, dict]] = []
    res = train_rs(tiny_model_dir, questions, sampler, tmp_path / "rs", train,
                   log_callback=lambda m, s: seen.append((s, m)))
    assert [len(q) for q, _ in sampler.calls] == [4, 4]  # k = 2 samples per question
    assert sampler.calls[0][1] == tiny_model_dir
    assert sampler.calls[1][1] == tmp_path / "rs" / "round_0" / "merged"  # the new checkpoint
    for r in (0, 1):
        _adapter(tmp_path / "rs" / f"round_{r}" / "adapter")
    assert res.model_dir == tmp_path / "rs" / "round_1" / "merged" and len(res.rounds) == 2
    first = res.rounds[0]["data"]
    assert (first["sampled"], first["passed"], first["kept"], first["kept_questions"]) == (4, 2, 2, 2)
    assert [s for s, _ in seen] == [1, 2]  # steps continue across rounds
    assert [h["round"] for h in res.history] == [0.0, 1.0] and [h["step"] for h in res.history] == [1, 2]
    # a second run finds both rounds finished and samples nothing
    again = RolloutSamplerDouble([])
    res2 = train_rs(tiny_model_dir, questions, again, tmp_path / "rs", train)
    assert again.calls == [] and res2.model_dir == res.model_dir
    # another seed over the same folder must not reuse those rounds (it did: seed 43 got seed 42's checkpoint)
    other = RolloutSamplerDouble(batch)
    res3 = train_rs(tiny_model_dir, questions, other, tmp_path / "rs", train.model_copy(update={"seed": 43}))
    assert len(other.calls) == 2 and res3.rounds[0]["fingerprint"] != res.rounds[0]["fingerprint"]
    # and a caller input the knobs do not show (the grid's phase key: library, data) decides too
    keyed = RolloutSamplerDouble(batch)
    train_rs(tiny_model_dir, questions, keyed, tmp_path / "rs", train.model_copy(update={"seed": 43}),
             inputs_key="another library")
    assert len(keyed.calls) == 2


def test_rs_round_with_nothing_kept_hands_the_earlier_rounds_checkpoint_on(tiny_model_dir: Path,
                                                                           tmp_path: Path) -> None:
    from hasp.train.rs import train_rs

    good, bad = [traj("q1", em=1.0, f1=1.0)], [traj("q1", terminated="max_steps")]
    train = TrainParams(**TINY, rs={"iterations": 3}, rollout={"k": 1})
    sampler = RolloutSamplerDouble(good, bad, good)
    res = train_rs(tiny_model_dir, [{"id": "q1"}], sampler, tmp_path / "rs", train)
    first = tmp_path / "rs" / "round_0"
    assert res.rounds[1]["skipped"].startswith("RS round 2: kept set is empty")
    assert res.rounds[1]["merged_dir"] == str(first / "merged") and res.rounds[1]["metrics"]["global_step"] == 0
    assert read_jsonl(tmp_path / "rs" / "round_1" / "rows.jsonl") == []
    # round 3 samples round 1's checkpoint (round 2 trained nothing) and trains from it
    assert [m for _, m in sampler.calls] == [tiny_model_dir, first / "merged", first / "merged"]
    assert res.rounds[2]["start_model"] == str(first / "merged") and "skipped" not in res.rounds[2]
    assert res.model_dir == tmp_path / "rs" / "round_2" / "merged"
    _adapter(res.adapter_dir)
    # a first round with nothing kept has no checkpoint to hand on: the caller gets the NoRowsError
    with pytest.raises(NoRowsError, match="^RS round 1: kept set is empty"):
        train_rs(tiny_model_dir, [{"id": "q1"}], RolloutSamplerDouble(bad), tmp_path / "rs-empty", train)
    assert not (tmp_path / "rs-empty" / "round_0" / "round.json").exists()


def test_rs_hindsight_option_trains_when_nothing_passes(tiny_model_dir: Path, tmp_path: Path) -> None:
    from hasp.train.rs import train_rs

    train = TrainParams(**TINY, rollout={"k": 1}, rs={"hindsight": {"enabled": True}})
    res = train_rs(tiny_model_dir, [{"id": "q1"}],
                   RolloutSamplerDouble([traj("q1", terminated="max_steps", gold_seen_at=0)]), tmp_path / "rs", train)
    data = res.rounds[0]["data"]
    assert (data["rs_rows"], data["hindsight_rows"]) == (0, 1)
    rows = read_jsonl(tmp_path / "rs" / "round_0" / "rows.jsonl")
    assert [r["source"] for r in rows] == ["hindsight"]
    _adapter(res.adapter_dir)


def test_opd_round_trains_on_teacher_targets_and_records_the_source(tiny_model_dir: Path, tmp_path: Path) -> None:
    from hasp.train.opd import train_opd

    teacher = ScriptedTeacherDouble("Thought: read it\nAction: READ[d3]")
    train = TrainParams(**TINY, rollout={"k": 1})
    res = train_opd(tiny_model_dir, [{"id": "q1"}], RolloutSamplerDouble([traj("q1", n_steps=3)]),
                    tmp_path / "opd", train, reward_floor=-1.0, teacher=teacher.generate)
    data = res.rounds[0]["data"]
    assert data["target"] == "teacher" and data["target_sources"] == {"teacher": 2}
    rows = read_jsonl(tmp_path / "opd" / "round_0" / "rows.jsonl")
    assert all(r["messages"][-1]["content"].endswith("READ[d3]") for r in rows)
    _adapter(res.adapter_dir)
    assert (res.model_dir / "config.json").is_file()


def test_dpo_trains_on_objective_a_preference_rows(tiny_model_dir: Path, tmp_path: Path) -> None:
    from hasp.train.dpo import train_dpo

    rows = build_dpo_rows(score_all([traj(f"q{k}", n_steps=2) for k in range(4)]), reward_floor=-1.0)
    assert len(rows) == 4 and rows[0]["rejected"][0]["content"].endswith("FINAL[guess]")
    path = write_jsonl(rows, tmp_path / "dpo.jsonl")
    res = train_dpo(tiny_model_dir, path, tmp_path / "dpo", TrainParams(**TINY, recipe="dpo"))
    _adapter(res.adapter_dir)
    assert res.merged_dir is not None and (res.merged_dir / "model.safetensors").is_file()
    assert res.metrics["global_step"] == 1 and "loss" in res.history[0]
    assert res.metrics["n_rows_used"] == 4
    summary = json.loads((tmp_path / "dpo" / "train_summary.json").read_text())
    assert summary["recipe"] == "dpo" and summary["dpo"]["beta"] == 0.1
    write_jsonl([{"prompt": rows[0]["prompt"], "chosen": rows[0]["chosen"]}], tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: preference row without rejected"):
        train_dpo(tiny_model_dir, tmp_path / "bad.jsonl", tmp_path / "dpo2", TrainParams(**TINY))
    # no pair at all is the policy's result (no PF changed an action), which a closed loop's later phase
    # keeps its checkpoint on, not a malformed file
    (tmp_path / "none.jsonl").write_text("")
    with pytest.raises(NoRowsError, match=r"none.jsonl: no preference rows"):
        train_dpo(tiny_model_dir, tmp_path / "none.jsonl", tmp_path / "dpo3", TrainParams(**TINY))


def test_dpo_trims_prompt_history_so_the_answers_survive(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from hasp.train.dpo import fit_pairs, preference_examples
    from hasp.train.sft import SFTRecipe

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    exs = preference_examples(build_dpo_rows(score_all([traj("q1", n_steps=4)]), reward_floor=-1.0), "rows")
    ex = max(exs, key=lambda e: len(e["prompt"]))
    assert len(ex["prompt"]) == 6  # system, question, steps 0 and 1 with their observations
    full = len(tok.apply_chat_template(ex["prompt"] + ex["chosen"], tokenize=True)["input_ids"])
    out, stats = fit_pairs([ex], tok, SFTRecipe(max_length=full - 1))
    # the oldest step goes; the question and the observation the answers respond to stay
    assert stats["n_rows_trimmed"] == 1 and out[0]["chosen"] == ex["chosen"]
    assert out[0]["prompt"] == ex["prompt"][:2] + ex["prompt"][4:]
    assert fit_pairs([ex], tok, SFTRecipe(max_length=64))[1]["n_rows_too_long"] == 1


def test_sft_preset_trains_and_a_folder_without_weights_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    from hasp.train.data import build_sft_rows
    from hasp.train.sft import ModelFolderError, SFTRecipe, train_sft

    t = apply_preset(TrainParams(), "E1_cpu").model_copy(update={"max_steps": 1, "lora_r": 4, "lora_alpha": 8})
    recipe = SFTRecipe.from_params(t.trainer())
    assert (recipe.learning_rate, recipe.seed, recipe.precision) == (2e-4, 42, "fp32")
    path = write_jsonl(build_sft_rows(score_all([traj("q1", n_steps=3)]), reward_floor=-1.0), tmp_path / "sft.jsonl")
    res = train_sft(tiny_model_dir, path, tmp_path / "sft", recipe)
    _adapter(res.adapter_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ModelFolderError, match=r"empty: model folder has no weights"):
        train_sft(empty, path, tmp_path / "x", recipe)


def _cli_params(tmp_path: Path) -> Path:
    import yaml

    root = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["train"].update(TINY)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.mark.parametrize("recipe", ["sft", "dpo"])
def test_command_line_training_is_one_mlflow_run_with_its_adapter(recipe: str, tiny_model_dir: Path,
                                                                   tmp_path: Path, monkeypatch, capsys) -> None:
    """``hasp train sft|dpo`` logs what it trained: knobs, per-step curves, final metrics and the adapter
    (tagged with its base model), and says the run id; no preset means no ``hasp.experiment`` tag."""
    import mlflow

    from hasp.cli import main
    from hasp.train.data import build_sft_rows

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    trajs = [traj(f"q{k}", n_steps=2) for k in range(4)]
    rows = (build_sft_rows(score_all(trajs), reward_floor=-1.0) if recipe == "sft"
            else build_dpo_rows(score_all(trajs), reward_floor=-1.0))
    path = write_jsonl(rows, tmp_path / f"{recipe}.jsonl")
    args = ["train", recipe, "--model", str(tiny_model_dir), "--out", str(tmp_path / "out"),
            "--params", str(_cli_params(tmp_path)), "--data" if recipe == "sft" else "--rows", str(path)]
    assert main(args) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = mlflow.get_run(said["mlflow_run_id"])
    assert run.data.tags["hasp.recipe"] == recipe and "hasp.experiment" not in run.data.tags
    assert run.data.params["train.lora_r"] == "4"
    assert run.data.tags["hasp.adapter"] == f"runs:/{run.info.run_id}/adapter"
    assert run.data.tags["hasp.adapter.rank"] == "4"
    losses = mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in losses] == [1]
    assert "final.global_step" in run.data.metrics
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "adapter")}
    assert "adapter/adapter_config.json" in names
    assert main(args + ["--no-track", "--out", str(tmp_path / "out2")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["mlflow_run_id"] is None


def test_the_train_command_keys_its_rounds_on_the_training_questions_and_the_library(tmp_path: Path) -> None:
    """``hasp train rs|opd --out X`` run again with another library or data must not reuse X's rounds."""
    import shutil

    from hasp.cli.train import _sampling_inputs
    from hasp.config import Params
    from traj_builders import search_task

    root = Path(__file__).resolve().parents[1]
    lib = tmp_path / "lib"
    shutil.copytree(root / "hasp" / "skills" / "search", lib, ignore=shutil.ignore_patterns("__pycache__"))
    data = tmp_path / "data"
    write_jsonl([{"id": "q1", "question": "a?", "answers": ["b"], "hops": 1, "support": []}], data / "train.jsonl")
    p = Params()
    key = _sampling_inputs(p, search_task(data), lib)
    assert key == _sampling_inputs(p, search_task(data), lib)
    (next(lib.rglob("SKILL.md"))).write_text("changed", encoding="utf-8")
    assert _sampling_inputs(p, search_task(data), lib) != key
    changed_lib = _sampling_inputs(p, search_task(data), lib)
    write_jsonl([{"id": "q2", "question": "c?", "answers": ["d"], "hops": 1, "support": []}], data / "train.jsonl")
    assert _sampling_inputs(p, search_task(data), lib) != changed_lib
