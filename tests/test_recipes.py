"""Recipe logic without a model: the RS score and filter, OPD weights and targets, hindsight rows,
and the E1-E6 presets against the paper's Table 13."""

from __future__ import annotations

import pytest

from doubles import FailingTeacherDouble, GarbageTeacherDouble, RolloutSamplerDouble, ScriptedTeacherDouble
from hasp.agent.loop import load_prompts
from hasp.config import ParamsError, RSParams, TrainParams, load_params
from hasp.records import Action, AuditEvent, HarnessRecord, StepRecord, Trajectory
from hasp.signals.coarse import score_step, score_trajectory
from hasp.train.data import score_all
from hasp.train.hindsight import hindsight_rows
from hasp.train.opd import opd_rows, train_opd
from hasp.train.presets import PresetError, apply_preset, get_preset, load_presets
from hasp.train.rounds import RecipeError
from hasp.train.rewards import composite_reward, step_economy
from hasp.train.rs import kept_rows, round_rows, select, train_rs
from hasp.train.chains import SAGE_KEY

MAX_STEPS = 5


def traj(qid: str, *, em: float = 0.0, f1: float = 0.0, terminated: str = "final", n_steps: int = 2,
         answer: str = "Velm City", gold_seen_at: int | None = None, reward: float | None = None) -> Trajectory:
    """``n_steps`` steps: every step but the last is a premature FINAL a PF rewrote to SEARCH; the last
    answers. ``gold_seen_at`` puts the gold answer into that step's observation."""
    p = load_prompts()
    msgs = [{"role": "system", "content": p["system"]},
            {"role": "user", "content": p["question"].format(question=f"Where is {qid}?")}]
    steps = []
    for i in range(n_steps):
        last = i == n_steps - 1
        orig = Action("FINAL", answer if last else "guess")
        final = orig if last else Action("SEARCH", f"{qid} place {i}")
        fired = [] if last else [{"skill_id": "premature_final", "type": "MODIFY_ACTION", "reason": "",
                                  "applied": True}]
        audit = AuditEvent(state={"step_count": i, "has_read": False, "empty_results": False},
                           a_orig=orig, a_final=final, fired=fired)
        obs = f"[d{i}] the hall stands in {answer} today." if gold_seen_at == i else f"[d{i}] nothing useful."
        step = StepRecord(index=i, raw_output="", thought=f"thinking {i}", audit=audit, observation=obs,
                          prompt_messages=[dict(m) for m in msgs])
        steps.append(step)
        msgs = msgs + step.to_messages(p)
    harness = HarnessRecord(postprocess={SAGE_KEY: {"chain": "c", "position": 0, "outcome": em, "reward": reward}}
                            if reward is not None else {})
    return Trajectory(qid=qid, question=f"Where is {qid}?", answers=[answer], variant="pf", steps=steps, em=em,
                      f1=f1, terminated=terminated, harness=harness)


# ----------------------------------------------------------------------------- RS: score and filter
def test_step_economy_and_composite_follow_app_d4():
    cfg = RSParams()
    assert (cfg.min_score, cfg.em_weight, cfg.f1_weight, cfg.economy_weight) == (0.15, 0.7, 0.2, 0.1)
    two = traj("a", em=1.0, f1=1.0, n_steps=2)
    assert step_economy(two, MAX_STEPS) == pytest.approx(0.8)
    assert step_economy(traj("b", n_steps=5), MAX_STEPS) == pytest.approx(0.2)
    assert step_economy(traj("c", terminated="max_steps"), MAX_STEPS) == 0.0
    assert composite_reward(two, cfg, MAX_STEPS) == pytest.approx(0.7 + 0.2 + 0.1 * 0.8)
    partial = traj("d", f1=0.5, n_steps=2)
    assert composite_reward(partial, cfg, MAX_STEPS) == pytest.approx(0.2 * 0.5 + 0.1 * 0.8)  # 0.18: passes 0.15
    weak = traj("e", f1=0.2, n_steps=5)
    assert composite_reward(weak, cfg, MAX_STEPS) == pytest.approx(0.2 * 0.2 + 0.1 * 0.2)  # 0.06: fails
    v = select(score_all([two, partial, weak, traj("f", terminated="timeout")]), cfg, MAX_STEPS)
    assert [x.passed for x in v] == [True, True, False, False]


def test_score_ranks_a_questions_passing_samples_and_keeps_the_top_one():
    cfg = RSParams(beta_success=0.5, beta_pf=0.5)
    win, partial = traj("q1", em=1.0, f1=1.0), traj("q1", f1=0.5)
    v = select(score_all([partial, win]), cfg, MAX_STEPS)
    a_win = score_trajectory(win).A
    assert v[1].score == pytest.approx(0.5 * 1.0 + 0.5 * a_win) and v[1].score_source == "score"
    assert v[0].score == pytest.approx(0.5 * score_trajectory(partial).A)
    assert [x.kept for x in v] == [False, True]  # both pass the filter, the higher Score is kept
    v_all = select(score_all([partial, win]), cfg.model_copy(update={"keep_per_question": 0}), MAX_STEPS)
    assert [x.kept for x in v_all] == [True, True]


def test_skill_integrated_reward_replaces_the_score_when_present():
    win, partial = traj("q1", em=1.0, f1=1.0), traj("q1", f1=0.5, reward=3.0)
    v = select(score_all([partial, win]), RSParams(), MAX_STEPS)
    assert v[0].score == 3.0 and v[0].score_source == "skill_integrated_reward"
    assert [x.kept for x in v] == [True, False]
    off = select(score_all([partial, win]), RSParams(skill_reward=False), MAX_STEPS)
    assert [x.kept for x in off] == [False, True]


def test_kept_rows_train_the_action_that_ran_on_every_step_of_kept_trajectories():
    trajs = [traj("q1", em=1.0, f1=1.0, n_steps=3), traj("q2", f1=0.0, terminated="max_steps")]
    cfg = RSParams()
    scored = score_all(trajs)
    rows = kept_rows(scored, select(scored, cfg, MAX_STEPS), cfg)
    assert [r["qid"] for r in rows] == ["q1"] * 3
    assert rows[0]["messages"][-1]["content"].endswith("Action: SEARCH[q1 place 0]")  # PF-corrected target
    assert rows[0]["a_orig"] == "FINAL[guess]" and all(r["sample_weight"] == 1.0 for r in rows)
    assert rows[1]["messages"][:-1] == trajs[0].steps[1].prompt_messages


def test_an_empty_kept_set_is_one_clear_error_unless_hindsight_supplies_rows():
    train = TrainParams()
    fails = [traj("q1", f1=0.0, terminated="max_steps", gold_seen_at=0), traj("q2", terminated="max_steps")]
    with pytest.raises(RecipeError) as e:
        round_rows(fails, 0, train)
    msg = str(e.value)
    assert "\n" not in msg and "kept set is empty" in msg and "train.rs.min_score 0.15" in msg
    assert "train.rs.hindsight.enabled" in msg
    on = train.model_copy(update={"rs": RSParams(hindsight={"enabled": True})})
    rows, stats = round_rows(fails, 0, on)
    assert stats["rs_rows"] == 0 and stats["hindsight_rows"] == 1 and len(rows) == 1
    row = rows[0]
    assert row["source"] == "hindsight" and row["qid"] == "q1"
    assert row["messages"][:-1] == fails[0].steps[1].prompt_messages  # the state after the observation
    # the neutral thought of the prompts file, not the one the policy wrote before another action
    assert row["messages"][-1]["content"] == f"Thought: {load_prompts()['answer_thought']}\nAction: FINAL[Velm City]"


def test_hindsight_needs_the_gold_in_an_observation_and_a_question_that_was_asked():
    seen_last = traj("q1", terminated="max_steps", gold_seen_at=1)  # gold in the last observation
    rows, stats = hindsight_rows([seen_last, traj("q2", terminated="max_steps"), traj("q3", em=1.0, gold_seen_at=0),
                                  traj("zz", gold_seen_at=0)],
                                 weight=0.5, questions=[{"id": "q1"}, {"id": "q2"}, {"id": "q3"}])
    assert [r["qid"] for r in rows] == ["q1"] and stats["not_asked"] == 1 and rows[0]["sample_weight"] == 0.5
    last = seen_last.steps[-1]
    assert rows[0]["messages"][:-1] == last.prompt_messages + last.to_messages(load_prompts())


def test_sft_hindsight_adds_answer_rows_to_the_epochs_sft_set(tmp_path, caplog):
    """The paper's SFT rows are the PFs' corrections; where those only defer the answer (every target a
    SEARCH here) the trained policy can stop answering. ``train.sft.hindsight`` adds FINAL[gold] rows at
    the states after the rollout observed the gold answer, counted apart; off, the set is the paper's."""
    from hasp.atomic import read_jsonl, write_jsonl
    from hasp.config import Params
    from hasp.evolve.epoch import build_data

    write_jsonl([traj("q1", n_steps=3, gold_seen_at=0).to_dict(), traj("q2", n_steps=3).to_dict()],
                tmp_path / "rollout.jsonl")
    with caplog.at_level("WARNING", logger="hasp.evolve.epoch"):
        off = build_data(tmp_path / "rollout.jsonl", Params(), tmp_path)
    assert off["sft"]["per_target_type"] == {"SEARCH": 4} and "sft_hindsight" not in off
    assert "none of the 4 SFT rows has a FINAL target" in caplog.text
    assert all("source" not in r for r in read_jsonl(tmp_path / "sft.jsonl"))

    caplog.clear()
    on_params = Params(train={"sft": {"hindsight": {"enabled": True, "weight": 0.5}}})
    with caplog.at_level("WARNING", logger="hasp.evolve.epoch"):
        on = build_data(tmp_path / "rollout.jsonl", on_params, tmp_path)
    assert on["sft"]["per_target_type"] == {"FINAL": 1, "SEARCH": 4} and not caplog.records
    assert on["sft_hindsight"] == {"failed": 2, "answer_seen": 1, "rows": 1, "not_asked": 0}
    hs = [r for r in read_jsonl(tmp_path / "sft.jsonl") if r.get("source") == "hindsight"]
    assert [(r["qid"], r["step"], r["sample_weight"]) for r in hs] == [("q1", 1, 0.5)]
    assert hs[0]["messages"][-1]["content"].endswith("Action: FINAL[Velm City]")
    assert on["dpo_rows"] == off["dpo_rows"]  # preference rows stay the PFs' corrections


def test_hindsight_after_answers_at_every_later_state_of_every_failed_sample():
    a, b = (traj("q1", terminated="max_steps", n_steps=4, gold_seen_at=1) for _ in range(2))
    late = traj("q2", terminated="max_steps", n_steps=3, gold_seen_at=2)  # seen in the last observation
    rows, stats = hindsight_rows([a, b, late], weight=1.0, states="after")
    # q1: the states before steps 2 and 3 of both samples; q2: the state after its last step
    assert [(r["qid"], r["step"], r["answer_seen_at"]) for r in rows] == [
        ("q1", 2, 1), ("q1", 3, 1), ("q1", 2, 1), ("q1", 3, 1), ("q2", 3, 2)]
    assert rows[1]["messages"][:-1] == a.steps[3].prompt_messages
    assert all(r["messages"][-1]["content"].endswith("Action: FINAL[Velm City]") for r in rows)
    first, _ = hindsight_rows([a, b, late], weight=1.0)  # the default: one row per question
    assert [(r["qid"], r["step"]) for r in first] == [("q1", 2), ("q2", 3)]
    assert stats["answer_seen"] == 3 and stats["rows"] == 5
    with pytest.raises(RecipeError, match="hindsight.states: expected 'first' or 'after'"):
        hindsight_rows([a], weight=1.0, states="all")


@pytest.mark.parametrize("recipe", ["rs", "opd"])
def test_hindsight_refuses_anything_but_the_train_split(tmp_path, recipe):
    sampler = RolloutSamplerDouble([traj("q1")])
    train = TrainParams(**{recipe: {"hindsight": {"enabled": True}}})
    run = train_rs if recipe == "rs" else train_opd
    kw = {} if recipe == "rs" else {"reward_floor": 0.25}
    with pytest.raises(RecipeError, match=f"train.{recipe}.hindsight: .*train split only, not on 'test'"):
        run(tmp_path, [{"id": "q1"}], sampler, tmp_path / "out", train, split="test", **kw)
    assert sampler.calls == []


# ----------------------------------------------------------------------------- OPD: weights and targets
def test_opd_weights_are_the_intervention_scores_at_pf_corrected_states():
    trajs = [traj("q1", n_steps=3), traj("q2", em=1.0, f1=1.0, n_steps=2)]
    rows, stats = opd_rows(trajs, TrainParams(), reward_floor=-1.0)
    expected = [(t.qid, i, score_step(t, i).A) for t in trajs for i in range(len(t.steps) - 1)]
    assert [(r["qid"], r["step"]) for r in rows] == [(q, i) for q, i, _ in expected]  # unmodified steps absent
    assert [r["sample_weight"] for r in rows] == pytest.approx([a for _, _, a in expected], abs=1e-6)
    assert stats["target"] == "pf" and stats["target_sources"] == {"pf": len(rows)}
    assert rows[0]["messages"][-1]["content"].endswith("Action: SEARCH[q1 place 0]")
    high = max(a for *_, a in expected)
    kept, _ = opd_rows(trajs, TrainParams(), reward_floor=high)
    assert [r["sample_weight"] for r in kept] == pytest.approx([high], abs=1e-6)


def test_opd_teacher_supplies_targets_and_the_run_records_it():
    trajs = [traj("q1", n_steps=3)]
    teacher = ScriptedTeacherDouble("Thought: check the source\nAction: READ[d7]", "no action here")
    rows, stats = opd_rows(trajs, TrainParams(), reward_floor=-1.0, teacher=teacher.generate)
    assert rows[0]["messages"][-1]["content"] == "Thought: check the source\nAction: READ[d7]"
    assert rows[0]["target_source"] == "teacher" and rows[1]["target_source"] == "pf"
    assert stats["target"] == "teacher" and stats["teacher_unreadable"] == 1
    assert stats["target_sources"] == {"teacher": 1, "pf": 1}
    assert teacher.prompts[0] == rows[0]["messages"][-2]["content"]  # the teacher saw the visited state
    pf_only, st = opd_rows(trajs, TrainParams(opd={"target": "pf"}), reward_floor=-1.0, teacher=teacher.generate)
    assert st["target"] == "pf" and all(r["target_source"] == "pf" for r in pf_only)
    garbage, st = opd_rows(trajs, TrainParams(), reward_floor=-1.0, teacher=GarbageTeacherDouble().generate)
    assert st["teacher_unreadable"] == 2 and all(r["target_source"] == "pf" for r in garbage)


def test_opd_teacher_failures_are_one_line_errors(tmp_path):
    with pytest.raises(RecipeError, match=r"^OPD round 1: teacher failed on 2 states: TimeoutError") as e:
        opd_rows([traj("q1", n_steps=3)], TrainParams(), reward_floor=-1.0, teacher=FailingTeacherDouble().generate)
    assert "\n" not in str(e.value)
    sampler = RolloutSamplerDouble([traj("q1")])
    with pytest.raises(RecipeError, match="train.opd.target is teacher but no teacher is configured"):
        train_opd(tmp_path, [{"id": "q1"}], sampler, tmp_path / "o", TrainParams(opd={"target": "teacher"}),
                  reward_floor=0.25)
    assert sampler.calls == []


# ----------------------------------------------------------------------------- presets = Table 13
# (setting, loop, recipe, learning rate, epochs, rollout used, teacher) as the paper's Table 13 gives them;
# E4's 8 epochs per phase are from App. D.3 / D.5; RS rounds and V2 phases from Table 21.
TABLE_13 = {
    "E1": ("open", "sft", 1e-5, 10, False, None),
    "E2": ("open", "rs", 5e-6, 8, True, None),
    "E3": ("open", "opd", 5e-6, 10, True, "gpt-4o-2024-11-20"),
    "E4": ("closed", "sft", 1e-5, 8, False, None),
    "E5": ("closed", "rs", 5e-6, 8, True, None),
    "E6": ("closed", "opd", 5e-6, 5, True, "gpt-4o-2024-11-20"),
}


def _lr_epochs(t: TrainParams) -> tuple[float, float]:
    trainer = t.trainer()
    return trainer.learning_rate, trainer.num_train_epochs


@pytest.mark.parametrize("name", sorted(TABLE_13))
def test_presets_equal_table_13(name):
    loop, recipe, lr, epochs, _, teacher = TABLE_13[name]
    p = get_preset(name)
    t = apply_preset(TrainParams(), name)
    assert (p.loop.kind, t.recipe, p.teacher) == (loop, recipe, teacher)
    assert _lr_epochs(t) == (pytest.approx(lr), epochs)
    # App. D.3: shared by all six
    assert (t.lora_r, t.lora_alpha, t.precision, t.gradient_checkpointing) == (16, 32, "auto", True)
    assert (t.warmup_steps, t.seed, t.max_steps) == (0.03, 42, -1)
    assert apply_preset(TrainParams(seed=43), name).seed == 43  # a seed is the run's, not the preset's
    # App. D.4: rollout of RS and OPD
    r = t.rollout
    assert (r.k, r.temperature, r.top_p, r.max_steps, r.max_search_calls) == (2, 0.9, 0.95, 5, 3)
    assert (r.teacher_snippets, r.max_read_calls) == (True, 0)
    assert (t.rs.min_score, t.rs.em_weight, t.rs.f1_weight, t.rs.economy_weight) == (0.15, 0.7, 0.2, 0.1)
    assert (t.opd.teacher_max_tokens, t.opd.teacher_concurrency) == (512, 64)
    assert not t.rs.hindsight.enabled and not t.opd.hindsight.enabled  # the paper's recipe, nothing added
    assert p.loop.phases == (2 if loop == "closed" else 1)
    assert p.loop.evolve_mode == {"E4": "full", "E5": "lite", "E6": "lite"}.get(name)
    if recipe == "rs":
        assert t.rs.iterations == (2 if name == "E2" else 1)
    if recipe == "opd":
        assert t.opd.target == "teacher"


@pytest.mark.parametrize("name", sorted(TABLE_13))
def test_each_preset_has_a_cpu_variant_with_the_same_shape(name):
    paper, cpu = get_preset(name), get_preset(f"{name}_cpu")
    t = apply_preset(TrainParams(), f"{name}_cpu")
    assert (cpu.loop, t.recipe) == (paper.loop, apply_preset(TrainParams(), name).recipe)
    assert (t.precision, t.gradient_checkpointing, t.max_steps > 0, t.rollout.teacher_snippets) == (
        "fp32", False, True, False)
    assert cpu.teacher is None
    if t.recipe in ("rs", "opd"):
        hs = getattr(t, t.recipe).hindsight
        assert hs.enabled and hs.states == "after"  # the option, reported apart from the recipe


def test_a_preset_keeps_the_knobs_it_does_not_name_and_says_where_it_came_from():
    base = TrainParams(weight_decay=0.01, per_device_train_batch_size=1, preset="E5_cpu")
    t = apply_preset(base)
    assert (t.weight_decay, t.per_device_train_batch_size, t.preset, t.recipe) == (0.01, 1, "E5_cpu", "rs")
    assert apply_preset(TrainParams()) == TrainParams()  # no preset, no change
    assert len(load_presets()) == 16  # E1-E6, GRPO, SAGE at paper and CPU scale


def test_overrides_win_over_the_preset_and_an_unknown_override_is_one_line():
    """A user shortens a preset (a smoke run of E2_cpu) without editing the presets file; the preset's
    other knobs stay, and the knobs the run changed are the ones ``replaced_knobs`` reports."""
    from hasp.train.presets import replaced_knobs

    t = apply_preset(TrainParams(preset="E2_cpu", overrides={"max_steps": 3, "rs": {"iterations": 1}}))
    assert (t.max_steps, t.rs.iterations, t.trainer().learning_rate, t.recipe) == (3, 1, 1e-4, "rs")
    assert apply_preset(t) == t  # applying again changes nothing
    short = TrainParams(overrides={"max_steps": 3})
    changed = replaced_knobs(short, apply_preset(short, "E2_cpu"))
    assert changed["train.max_steps"] == (10, 3) and changed["train.recipe"] == ("sft", "rs")
    assert apply_preset(TrainParams(overrides={"lora_r": 4})).lora_r == 4  # no preset: still applied
    with pytest.raises(PresetError, match=r"^train.overrides.rs.iteratons: unknown train knob") as e:
        apply_preset(TrainParams(preset="E2_cpu", overrides={"rs": {"iteratons": 1}}))
    assert "\n" not in str(e.value)
    with pytest.raises(PresetError, match=r"^train.overrides.preset: unknown train knob"):
        apply_preset(TrainParams(overrides={"preset": "E1"}))
    with pytest.raises(PresetError, match=r"^train.preset E2_cpu: train.max_steps: Input should be a valid integer"):
        apply_preset(TrainParams(preset="E2_cpu", overrides={"max_steps": "many"}))


def test_unknown_preset_and_unknown_knobs_are_one_line_errors_naming_the_key(tmp_path, monkeypatch):
    with pytest.raises(PresetError, match=r"^train.preset: unknown preset 'E7'; known: E1, E1_cpu") as e:
        apply_preset(TrainParams(preset="E7"))
    assert "\n" not in str(e.value)
    (tmp_path / "p.yaml").write_text("train:\n  recipe: rs\n  rs:\n    min_scor: 0.2\n")
    with pytest.raises(ParamsError, match=r"p.yaml: line 4: train.rs.min_scor: neither a knob of recipe rs nor a train knob"):
        load_params(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text("train:\n  recipe: ppo\n")
    with pytest.raises(ParamsError, match=r"train.recipe: Input should be 'sft', 'rs', 'opd', 'dpo', 'grpo' or 'sage'"):
        load_params(tmp_path / "p.yaml")
    import hasp.train.presets as presets

    bad = "paper:\n  shared: {}\n  E1:\n    description: x\n    loop: {kind: open, phases: 1, evolve_mode: null}\n" \
          "    teacher: null\n    train: {recipe: sft, rs: {lr: 1.0}}\ncpu: {}\n"

    class _Res:
        def joinpath(self, _name):
            return self

        def read_text(self, encoding=None):
            return bad

    presets.load_presets.cache_clear()
    monkeypatch.setattr(presets.resources, "files", lambda _pkg: _Res())
    try:
        with pytest.raises(PresetError, match=r"^hasp/train/presets.yaml: paper.E1: rs.lr: neither a knob of recipe rs"):
            presets.load_presets()
    finally:
        monkeypatch.undo()
        presets.load_presets.cache_clear()


def test_params_file_reaches_every_recipe_section():
    p = load_params("params.yaml")
    t = p.train
    assert t.recipe == "sft" and t.preset is None and t.learning_rate == 2e-4 and t.max_steps == 10
    assert (t.rollout.k, t.rs.min_score, t.opd.target, t.dpo.rows) == (2, 0.15, "auto", "dpo.jsonl")
    for section in (t, t.rollout, t.rs, t.opd, t.dpo, t.rs.hindsight):
        for name, f in type(section).model_fields.items():
            assert f.description, f"{type(section).__name__}.{name} has no help text"


def test_the_epoch_train_step_applies_the_preset_and_skips_a_recipe_it_cannot_run(tmp_path):
    from hasp.evolve.epoch import train as epoch_train

    params = load_params(None, {"train.preset": "E2_cpu"})
    out = epoch_train(tmp_path / "sft.jsonl", params, tmp_path)
    assert "train.recipe is rs (preset E2_cpu)" in out.skipped
    from hasp.train.run import read_summary

    assert read_summary(tmp_path) == out and out.recipe == "rs" and out.model_dir is None


def test_a_recipe_block_overrides_the_shared_trainer_knobs_it_reads_and_nothing_else(tmp_path):
    """One home per trainer knob: ``train.learning_rate`` is every recipe's unless its block names its
    own; a block key the recipe's trainer does not read, or no knob at all, is an error naming it."""
    t = TrainParams(learning_rate=3e-4, num_train_epochs=4, rs={"learning_rate": 1e-5}, dpo={"max_steps": 7})
    assert (t.trainer("sft").learning_rate, t.trainer("rs").learning_rate, t.trainer("opd").learning_rate) == (
        3e-4, 1e-5, 3e-4)
    assert TrainParams(learning_rate=3e-4, sft={"learning_rate": 5e-5}).trainer().learning_rate == 5e-5
    assert t.trainer("rs").num_train_epochs == 4 and t.trainer("dpo").max_steps == 7 and t.trainer("rs").max_steps == 10
    assert TrainParams.model_validate(t.model_dump(mode="json")) == t  # `hasp params` writes what loads back
    (tmp_path / "p.yaml").write_text("train:\n  dpo:\n    weighting: none\n")
    with pytest.raises(ParamsError, match=r"p.yaml: line 3: train.dpo.weighting: the dpo trainer does not read this train knob"):
        load_params(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text("train:\n  opd:\n    learning_rat: 0.1\n")
    with pytest.raises(ParamsError, match=r"p.yaml: line 3: train.opd.learning_rat: neither a knob of recipe opd nor a train knob"):
        load_params(tmp_path / "p.yaml")
    (tmp_path / "p.yaml").write_text("train:\n  rs:\n    learning_rate: -1\n")
    with pytest.raises(ParamsError, match=r"p.yaml: line 3: train.rs.learning_rate: Input should be greater than 0"):
        load_params(tmp_path / "p.yaml")
    over = apply_preset(TrainParams(preset="E2_cpu", overrides={"rs": {"max_steps": 2}}))
    assert over.trainer().max_steps == 2 and over.trainer().learning_rate == 1e-4
    with pytest.raises(PresetError, match=r"train.dpo.oversample_factor: the dpo trainer does not read"):
        apply_preset(TrainParams(overrides={"dpo": {"oversample_factor": 3.0}}))
