"""train.objective: the sft and dpo trainers read the policy's rows (A), the skill author's (B) or both (AB).

The epochs are recorded (``tests/data/objective_b``): ``full/epoch_0`` holds the Phase A-F files of one
evolution epoch of ``tests/test_e2e_epoch.py`` (the embedded student proposing declared PFs, the
heuristic reviewer, the val gate) and the Phase-H rows that run wrote; ``lite/epoch_0`` the proposals and
admissions of epoch 0 of an E5_cpu run (lite mode: nothing reviewed, so no r_skill). Phase G/H and the
row selection run for real on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from hasp.atomic import read_jsonl, write_json, write_jsonl
from hasp.config import ParamsError, TrainParams, load_params
from hasp.evolve import epoch as ep
from hasp.evolve.cluster import clusters_from_json
from hasp.evolve.declarative import check_reply
from hasp.evolve.dvc_yaml import dvc_yaml
from hasp.evolve.phase_graph import cache_key
from hasp.pf.declaration import PFDeclaration
from hasp.train.data import build_skill_dpo_rows
from hasp.train.dpo import fit_pairs, preference_examples
from hasp.train.objective import policy_rows, rows_for
from hasp.train.presets import PresetError, apply_preset
from hasp.train.rounds import RecipeError
from hasp.train.sft import SFTRecipe, n_tokens, prepare_rows
from test_sft_train import _tokenizer as sft_tests_tokenizer
from test_sft_train import tiny_model_dir  # noqa: F401  (module fixture: a tiny random Llama folder)

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "objective_b"


def _epoch(tmp_path: Path, kind: str, **overrides) -> tuple[Path, object]:
    """The recorded epoch copied to ``tmp_path/<kind>/epoch_0`` with Phase G/H (or Objective B alone,
    for the lite epoch without a rollout) run on it."""
    ed = tmp_path / kind / "epoch_0"
    shutil.copytree(RECORDED / kind / "epoch_0", ed)
    p = load_params(ROOT / "params.yaml", overrides)
    if (ed / "rollout.jsonl").exists():
        ep.build_data(ed / "rollout.jsonl", p, ed)
    else:
        ep.build_skill_data(ed, p)
    return ed, p


def _train(**knobs) -> TrainParams:
    return load_params(ROOT / "params.yaml", {f"train.{k}": v for k, v in knobs.items()}).train


def _tokenizer():
    return sft_tests_tokenizer()  # the embedded model's tokenizer when it is prepared


@pytest.fixture
def full(tmp_path):
    return _epoch(tmp_path, "full")


def test_the_real_epochs_declared_proposals_become_skill_author_rows(full):
    """Phase H of the real epoch: each declared proposal is a row whose target is the reply that declares
    it in the lines the proposal prompt asks for, weighted by r_skill = Q_skill + lambda * dEM_val."""
    ed, p = full
    cands = {c["skill_id"]: c for c in json.loads((ed / "candidates.json").read_text())}
    reviews = {r["skill_id"]: r for r in json.loads((ed / "reviews.json").read_text())}
    gate = {g["skill_id"]: g for g in json.loads((ed / "gate.json").read_text())}
    clusters = {c.category: c for c in clusters_from_json(json.loads((ed / "clusters.json").read_text()))}
    assert all(c["proposal_format"] == "declarative" and not c["code"] for c in cands.values())
    records = read_jsonl(ed / "skill_records.jsonl")
    assert {r["skill_id"] for r in records} == set(cands)
    sft = read_jsonl(ed / "sft_skill.jsonl")
    assert {r["skill_id"] for r in sft} == set(cands)
    for row in sft:
        c = cands[row["skill_id"]]
        r_skill = reviews[c["skill_id"]]["q_skill"] + p.evolve.r_skill_lambda * gate[c["skill_id"]]["delta_em"]
        assert row["sample_weight"] == pytest.approx(r_skill)
        assert row["messages"][:-1] == c["prompt_messages"] and row["messages"][-1]["role"] == "assistant"
        target = row["messages"][-1]["content"]
        assert target.startswith(f"SKILL_ID: {c['skill_id']}\nDESCRIPTION: ")
        cluster = clusters[c["cluster_category"]]
        _, decl, sid = check_reply(target, cluster, existing=[])  # the proposal parser reads the target back
        assert sid == c["skill_id"] and decl == PFDeclaration(**c["declaration"])
    assert read_jsonl(ed / "dpo_skill.jsonl") == []  # the val gate admitted neither: no chosen side
    for name in ("sft.jsonl", "dpo.jsonl"):  # Objective A's rows are the ones the real run wrote
        assert (ed / name).read_bytes() == (RECORDED / "full" / "epoch_0" / name).read_bytes()


def test_objective_a_b_ab_pick_the_rows_the_sft_trainer_reads(full):
    ed, _ = full
    policy = read_jsonl(ed / "sft.jsonl")
    skill = read_jsonl(ed / "sft_skill.jsonl")
    r_skill = {r["skill_id"]: r["r_skill"] for r in read_jsonl(ed / "skill_records.jsonl")}
    assert policy and skill

    a = rows_for(_train(objective="A"), ed / "sft.jsonl", ed)
    assert a.path == ed / "sft.jsonl" and (a.n_policy, a.n_skill) == (len(policy), 0)
    assert a.path.read_bytes() == (RECORDED / "full" / "epoch_0" / "sft.jsonl").read_bytes()
    assert sorted(p.name for p in ed.glob("sft_objective_*")) == []  # A writes nothing

    b = rows_for(_train(objective="B"), ed / "sft.jsonl", ed)
    got = read_jsonl(b.path)
    assert b.path == ed / "sft_objective_B.jsonl" and (b.n_policy, b.n_skill, b.n_unscored) == (0, len(skill), 0)
    assert [r["skill_id"] for r in got] == [r["skill_id"] for r in skill]
    assert all(r["objective"] == "B" and r["sample_weight"] == pytest.approx(r_skill[r["skill_id"]]) for r in got)
    assert json.loads(b.path.with_suffix(".json").read_text())["n_skill"] == len(skill)

    ab = rows_for(_train(objective="AB"), ed / "sft.jsonl", ed)
    assert read_jsonl(ab.path) == policy + got and (ab.n_policy, ab.n_skill) == (len(policy), len(skill))


def _real_pair(ed: Path) -> list[dict]:
    """No recorded full-mode epoch admitted a proposal, so the pair is built from the epoch's two real
    records with the admission set here: the first admitted, the second refused, in one cluster."""
    first, second = read_jsonl(ed / "skill_records.jsonl")
    pair = build_skill_dpo_rows([dict(first, admitted=True), dict(second, admitted=False, category=first["category"])])
    assert len(pair) == 1
    write_jsonl(pair, ed / "dpo_skill.jsonl")
    return pair


def test_the_dpo_trainer_reads_objective_b_pairs_as_phase_h_wrote_them(full):
    ed, _ = full
    pair = _real_pair(ed)
    t = _train(recipe="dpo", objective="B")
    assert policy_rows(t, ed) == ed / "dpo.jsonl"
    b = rows_for(t, policy_rows(t, ed), ed)
    assert b.path == ed / "dpo_objective_B.jsonl" and read_jsonl(b.path) == pair and (b.n_policy, b.n_skill) == (0, 1)
    ab = rows_for(_train(recipe="dpo", objective="AB"), policy_rows(t, ed), ed)
    assert read_jsonl(ab.path) == read_jsonl(ed / "dpo.jsonl") + pair

    examples = preference_examples(read_jsonl(b.path), str(b.path))  # the DPO trainer's row reader
    assert examples == [{k: pair[0][k] for k in ("prompt", "chosen", "rejected")}]
    tok = _tokenizer()
    longest = max(n_tokens(tok, examples[0]["prompt"] + examples[0][k]) for k in ("chosen", "rejected"))
    fitted, stats = fit_pairs(examples, tok, SFTRecipe(max_length=longest))
    assert stats["n_rows_used"] == 1 and fitted[0]["prompt"] == examples[0]["prompt"]


def test_sft_prepare_rows_keeps_the_skill_rows_and_their_weights(full):
    """The SFT trainer's data step on the B rows with the prepared model's tokenizer: every row that fits
    ``max_length`` is kept with loss weight r_skill; the proposal prompts are long, so a short
    ``train.max_length`` drops them (counted), which is what B at the CPU default does."""
    ed, _ = full
    tok = _tokenizer()
    rows = read_jsonl(rows_for(_train(objective="B"), ed / "sft.jsonl", ed).path)
    longest = max(n_tokens(tok, r["messages"]) for r in rows)
    examples, stats = prepare_rows(rows, tok, SFTRecipe(max_length=longest, weighting="loss",
                                                        normalize_weights=False))
    assert stats["n_rows_used"] == len(rows) and stats["n_rows_too_long"] == 0
    assert [e["sample_weight"] for e in examples] == pytest.approx([r["sample_weight"] for r in rows])
    assert [e["completion"][0]["content"] for e in examples] == [r["messages"][-1]["content"] for r in rows]
    default = load_params(ROOT / "params.yaml").train.max_length
    _, short = prepare_rows(rows, tok, SFTRecipe(max_length=default))
    assert short["n_rows_too_long"] == sum(n_tokens(tok, r["messages"]) > default for r in rows)


def test_unscored_proposals_are_left_out_and_counted(tmp_path):
    ed, _ = _epoch(tmp_path, "lite")
    records = read_jsonl(ed / "skill_records.jsonl")
    assert records and all(r["r_skill"] is None for r in records)  # lite mode reviews nothing
    b = rows_for(_train(objective="B"), ed / "sft.jsonl", ed)
    assert (b.n_skill, b.n_unscored, b.n_below_floor) == (0, len(records), 0) and read_jsonl(b.path) == []


def test_a_negative_r_skill_weighs_zero_and_a_low_one_is_counted(tmp_path):
    """A proposal that lowered val EM: r_skill < 0 still passes a floor of -1 and trains with weight 0;
    under a higher floor it is left out and counted."""
    ed = tmp_path / "full" / "epoch_0"
    shutil.copytree(RECORDED / "full" / "epoch_0", ed)
    gate = json.loads((ed / "gate.json").read_text())
    gate[0]["delta_em"] = -1.0
    write_json(gate, ed / "gate.json")
    over = {"evolve.r_skill_lambda": 1.0, "signals.reward_floor": -1.0}
    ep.build_skill_data(ed, load_params(ROOT / "params.yaml", over))
    sid = gate[0]["skill_id"]
    rows = {r["skill_id"]: r for r in read_jsonl(rows_for(_train(objective="B"), ed / "sft.jsonl", ed).path)}
    assert read_jsonl(ed / "sft_skill.jsonl")[0]["sample_weight"] < 0 and rows[sid]["sample_weight"] == 0.0
    ep.build_skill_data(ed, load_params(ROOT / "params.yaml", {**over, "signals.reward_floor": 0.0}))
    b = rows_for(_train(objective="B"), ed / "sft.jsonl", ed)
    assert sid not in {r["skill_id"] for r in read_jsonl(b.path)} and b.n_below_floor == 1


def test_objective_b_without_an_evolution_epoch_is_one_clear_error(tmp_path):
    (tmp_path / "sft.jsonl").write_text("")
    assert rows_for(_train(objective="A"), tmp_path / "sft.jsonl", None).path == tmp_path / "sft.jsonl"
    for objective in ("B", "AB"):
        with pytest.raises(RecipeError, match=f"train.objective {objective} trains on the skill author's"):
            rows_for(_train(objective=objective), tmp_path / "sft.jsonl", None)


def test_a_bad_objective_is_one_params_error_line(tmp_path, capsys):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert params["train"]["objective"] == "A" and TrainParams().objective == "A"
    f = tmp_path / "p.yaml"
    f.write_text("train:\n  objective: C\n")
    with pytest.raises(ParamsError, match=r"^.*p.yaml: line 2: train.objective: Input should be 'A', 'B' or 'AB'$"):
        load_params(f)
    f.write_text("train:\n  objective: B\n  recipe: rs\n")
    with pytest.raises(ParamsError) as e:
        load_params(f)
    assert str(e.value) == f"{f}: line 2: train.objective: B needs train.recipe sft or dpo (recipe rs samples its own rows)"
    with pytest.raises(PresetError, match=r"^train.preset E3_cpu: train.objective: AB needs train.recipe sft or dpo"):
        apply_preset(TrainParams(objective="AB", preset="E3_cpu"))
    from hasp.cli import main

    f.write_text("train:\n  objective: B\n")  # `hasp train rs` forces its recipe: the same rule, the same line
    assert main(["train", "rs", "--params", str(f), "--out", str(tmp_path / "rs"), "--no-track"]) == 2
    assert capsys.readouterr().err.strip() == "error: train.objective: B needs train.recipe sft or dpo (recipe rs " \
                                               "samples its own rows)"


def test_the_train_phase_follows_the_objective_and_the_skill_rows(full):
    ed, p = full
    lay = {"epoch": ed}
    base = cache_key("train", p, lay)
    assert cache_key("train", load_params(ROOT / "params.yaml", {"train.objective": "B"}), lay) != base
    (ed / "sft_skill.jsonl").write_text("")
    assert cache_key("train", p, lay) != base
    train = yaml.safe_load(dvc_yaml())["stages"]["train"]
    assert "train" in train["params"]  # the whole section, train.objective with it
    assert {"outputs/epoch_0/sft_skill.jsonl", "outputs/epoch_0/skill_records.jsonl",
            "hasp/train/objective.py"} <= set(train["deps"])


def test_the_epoch_train_step_trains_on_the_objective_b_rows(full, tiny_model_dir, tmp_path):
    """The epoch's training step (the Prefect flow's train task) with train.objective B: the rows that
    reach the trainer are the skill author's, all used, weighted by r_skill."""
    ed, _ = full
    p = load_params(ROOT / "params.yaml", {"train.objective": "B", "train.max_steps": 1, "train.max_length": 4096,
                                           "train.lora_r": 4, "train.lora_alpha": 8})
    s = ep.train(ed / "sft.jsonl", p, tmp_path / "train", model_dir=tiny_model_dir)
    assert s.skipped is None and s.rows == str(ed / "sft_objective_B.jsonl")
    trained = json.loads((tmp_path / "train" / "train_summary.json").read_text())
    n = len(read_jsonl(ed / "sft_skill.jsonl"))
    assert trained["rows_path"] == s.rows and trained["metrics"]["n_rows_used"] == n
    weights = [r["sample_weight"] for r in read_jsonl(ed / "sft_skill.jsonl")]
    assert trained["metrics"]["mean_weight_raw"] == pytest.approx(sum(weights) / n)


def test_the_epoch_train_step_without_rows_is_a_skipped_phase(full, tiny_model_dir, tmp_path):
    """No row above the reward floor is the epoch's result, not an error: the phase is recorded as
    skipped with the trainer's reason, and nothing is trained."""
    ed, _ = full
    empty = ed / "sft_empty.jsonl"
    empty.write_text("")
    p = load_params(ROOT / "params.yaml", {"train.objective": "A"})
    s = ep.train(empty, p, tmp_path / "train", model_dir=tiny_model_dir)
    assert s.skipped == f"{empty}: no SFT rows (no PF-corrected step above the reward floor); training skipped"
    assert s.model_dir is None and not (tmp_path / "train" / "adapter").exists()
    assert json.loads((tmp_path / "train" / "train_metrics.json").read_text())["skipped"] == s.skipped

