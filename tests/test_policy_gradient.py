"""GRPO and SAGE: advantages on crafted groups, rows on the model's own replies with observations only
in the prompt, the policy-gradient loss on a tiny random Llama (a negative advantage lowers its reply's
log-probability after one step), the skill-integrated reward in every case of seed 001's definition,
and a round without signal handing its checkpoint on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from hasp.agent.loop import load_prompts  # noqa: E402
from hasp.atomic import read_json, read_jsonl  # noqa: E402
from hasp.config import TrainParams  # noqa: E402
from hasp.episode.seeding import unseeded  # noqa: E402
from hasp.records import Action, AuditEvent, HarnessRecord, StepRecord, Trajectory  # noqa: E402
from hasp.train import chains, grpo, rewards, sage  # noqa: E402
from hasp.train.losses import WEIGHT_COLUMN, PolicyGradientTrainer  # noqa: E402
from hasp.train.rounds import policy_gradient_step, round_questions  # noqa: E402
from hasp.train.sft import SFTRecipe, prepare_rows  # noqa: E402

from test_sft_train import _tokenizer, tiny_model_dir  # noqa: E402,F401 - the tiny-model fixture


def _episode(qid: str, em: float, *, reply: str = "Thought: look.\nAction: FINAL[Paris]", rewritten: bool = True,
             terminated: str = "final", sage_rec: dict | None = None) -> Trajectory:
    """Two turns; the second prompt carries the first turn's observation. The PF rewrote turn 0."""
    p = load_prompts()
    msgs = [{"role": "system", "content": p["system"]},
            {"role": "user", "content": p["question"].format(question=f"Where is {qid}?")}]
    a0 = AuditEvent(state={"step_count": 0}, a_orig=Action("FINAL", "guess"),
                    a_final=Action("SEARCH", qid) if rewritten else Action("FINAL", "guess"),
                    fired=[{"skill_id": "premature_final", "applied": True}] if rewritten else [])
    obs = f"Observation: [d1] {qid} lies in Paris."
    hist = msgs + [{"role": "assistant", "content": f"Thought: t\nAction: SEARCH[{qid}]"},
                   {"role": "user", "content": obs}]
    steps = [StepRecord(index=0, raw_output="Thought: guess.\nAction: FINAL[guess]", audit=a0, prompt_messages=msgs),
             StepRecord(index=1, raw_output=reply, audit=None, prompt_messages=hist)]
    h = HarnessRecord()
    if sage_rec is not None:
        h.postprocess[chains.SAGE_KEY] = sage_rec
    return Trajectory(qid=qid, question="", answers=["Paris"], variant="pf", steps=steps, em=em,
                      terminated=terminated, harness=h)


# -- advantages and rows ---------------------------------------------------------------------------

def test_group_advantages_subtract_the_group_mean_and_scale_only_when_asked() -> None:
    r = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    g = ["a", "a", "a", "a", "b", "b"]
    adv = grpo.group_advantages(r, g)
    assert adv == pytest.approx([0.75, -0.25, -0.25, -0.25, 0.0, 0.0])
    assert sum(adv[:4]) == pytest.approx(0.0)
    scaled = grpo.group_advantages(r, g, scale_by_std=True)
    assert scaled[0] == pytest.approx(0.75 / (0.75 * 0.25) ** 0.5) and scaled[4:] == [0.0, 0.0]


def test_outcome_reward_success_composite_and_no_answer_penalty() -> None:
    t = TrainParams.model_validate({"grpo": {"no_answer_penalty": 1.0}})
    assert rewards.outcome_reward(_episode("q", 1.0), t.grpo, t) == 1.0
    assert rewards.outcome_reward(_episode("q", 0.0, terminated="max_steps"), t.grpo, t) == -1.0
    c = TrainParams.model_validate({"grpo": {"reward": "composite"}})
    won = _episode("q", 1.0)
    won.f1 = 1.0
    # 0.7 EM + 0.2 F1 + 0.1 StepEconomy, two steps of a five-step budget: economy (5 - 2 + 1) / 5
    assert rewards.outcome_reward(won, c.grpo, c) == pytest.approx(0.7 + 0.2 + 0.1 * 0.8)


def test_rows_train_the_models_own_reply_with_the_episode_advantage_and_skip_flat_groups() -> None:
    train = TrainParams()
    trajs = [_episode("q1", 1.0), _episode("q1", 0.0, reply="Thought: no.\nAction: FINAL[Rome]"),
             _episode("q2", 1.0), _episode("q2", 1.0)]
    rows, stats = grpo.round_rows(trajs, 0, train)
    assert stats["groups"] == 2 and stats["groups_with_signal"] == 1 and stats["rows"] == 4
    assert all(r["qid"] == "q1" for r in rows)
    assert [r["sample_weight"] for r in rows] == [0.5, 0.5, -0.5, -0.5]
    assert stats["negative_rows"] == 2 and stats["positive_rows"] == 2
    first = rows[0]["messages"]
    # the target is what the model generated at turn 0 (FINAL[guess]), not the PF's SEARCH that ran
    assert first[-1] == {"role": "assistant", "content": "Thought: guess.\nAction: FINAL[guess]"}
    # observations are prompt (context), never target
    second = rows[1]["messages"]
    assert second[-1]["content"].endswith("FINAL[Paris]")
    assert any("Observation:" in m["content"] for m in second[:-1])
    assert "Observation:" not in second[-1]["content"]


def test_policy_gradient_step_is_one_update_over_all_rows() -> None:
    knobs = policy_gradient_step(SFTRecipe(per_device_train_batch_size=2, warmup_steps=0.1), 7)
    assert (knobs.max_steps, knobs.gradient_accumulation_steps, knobs.weighting) == (1, 4, "advantage")
    assert knobs.warmup_steps == 0.0 and knobs.lr_scheduler_type == "constant"


def test_round_questions_draw_per_round_and_repeat_on_resume() -> None:
    qs = [f"q{i}" for i in range(10)]
    assert round_questions(qs, None, 42, 0) == qs
    a, b = round_questions(qs, 4, 42, 0), round_questions(qs, 4, 42, 1)
    assert len(a) == 4 and a == round_questions(qs, 4, 42, 0) and a != b


def test_advantage_rows_keep_the_sign(tiny_model_dir: Path) -> None:  # noqa: F811
    tok = _tokenizer()
    rows, _ = grpo.round_rows([_episode("q1", 1.0), _episode("q1", 0.0)], 0, TrainParams())
    ex, _ = prepare_rows(rows, tok, SFTRecipe(weighting="advantage", max_length=2048))
    assert [e[WEIGHT_COLUMN] for e in ex] == [0.5, 0.5, -0.5, -0.5]


# -- the loss on a tiny model ----------------------------------------------------------------------

def _trainer(tiny_model_dir: Path, rows: list[dict], tmp_path: Path, *, lr: float = 1e-3, beta: float = 0.0):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    tok = _tokenizer()
    ex, _ = prepare_rows(rows, tok, SFTRecipe(weighting="advantage", max_length=2048))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    args = SFTConfig(output_dir=str(tmp_path / "t"), use_cpu=True, bf16=False, fp16=False, report_to=[],
                     activation_checkpointing=False, per_device_train_batch_size=len(ex), completion_only_loss=True,
                     save_strategy="no", max_length=2048, learning_rate=lr, max_steps=1, lr_scheduler_type="constant",
                     warmup_steps=0, seed=0, data_seed=0, disable_tqdm=True)
    return PolicyGradientTrainer(model=model, args=args, train_dataset=Dataset.from_list(ex), processing_class=tok,
                                 peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj",
                                                                                            "o_proj"],
                                                        init_lora_weights=True),
                                 beta=beta, reference=tiny_model_dir if beta else None), ex


def _seq_logprob(trainer, batch) -> torch.Tensor:  # noqa: ANN001
    """Sum of log π over each row's completion tokens (per row)."""
    b = {k: v for k, v in batch.items() if k != WEIGHT_COLUMN}
    b["use_cache"] = False
    with torch.no_grad():
        out = trainer.model(**b, fused_lm_head=True)
    return (out.log_probs * out.label_mask).sum(dim=1)


def test_observations_are_masked_and_the_loss_is_minus_advantage_times_logprob(tiny_model_dir: Path,  # noqa: F811
                                                                                tmp_path: Path) -> None:
    rows, _ = grpo.round_rows([_episode("q1", 1.0), _episode("q1", 0.0, reply="Thought: no.\nAction: FINAL[Rome]")],
                              0, TrainParams())
    rows = [rows[1], rows[3]]  # turn 1 of each: their prompts hold an observation
    trainer, _ = _trainer(tiny_model_dir, rows, tmp_path)
    batch = next(iter(trainer.get_train_dataloader()))
    tok = _tokenizer()
    labels = batch["labels"]
    for i in range(labels.shape[0]):
        target = tok.decode([t for t in labels[i].tolist() if t != -100])
        assert "Observation" not in target and "FINAL[" in target  # only the reply is a target
    m = trainer.model
    m.train()
    n = (labels[:, 1:] != -100).sum()
    with torch.no_grad():
        loss = float(trainer.compute_loss(m, dict(batch), num_items_in_batch=n))
    m.eval()
    lp = _seq_logprob(trainer, batch)
    adv = batch[WEIGHT_COLUMN]
    assert loss == pytest.approx(float(-(adv * lp).sum() / n), rel=1e-4)


def test_one_step_lowers_a_negative_replys_logprob_and_widens_the_groups_gap(tiny_model_dir: Path,  # noqa: F811
                                                                             tmp_path: Path) -> None:
    rows, _ = grpo.round_rows([_episode("q1", 1.0, reply="Thought: yes.\nAction: FINAL[Paris]"),
                               _episode("q1", 0.0, reply="Thought: no.\nAction: FINAL[Rome]")], 0, TrainParams())
    pos, neg = rows[1], rows[3]  # +0.5 on the Paris reply, -0.5 on the Rome reply
    assert (pos["sample_weight"], neg["sample_weight"]) == (0.5, -0.5)

    alone, _ = _trainer(tiny_model_dir, [neg], tmp_path / "neg")
    batch = next(iter(alone.get_train_dataloader()))
    before = float(_seq_logprob(alone, batch)[0])
    alone.train()
    assert float(_seq_logprob(alone, batch)[0]) < before - 1e-3  # the negative sample is pushed down

    both, _ = _trainer(tiny_model_dir, [pos, neg], tmp_path / "both")
    batch = next(iter(both.get_train_dataloader()))
    sign = batch[WEIGHT_COLUMN]
    gap = lambda lp: float((lp * torch.sign(sign)).sum())  # noqa: E731 - log π(positive) - log π(negative)
    g0 = gap(_seq_logprob(both, batch))
    both.train()
    assert gap(_seq_logprob(both, batch)) > g0 + 1e-3


def test_kl_penalty_is_zero_at_the_reference_and_logged(tiny_model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    rows, _ = grpo.round_rows([_episode("q1", 1.0), _episode("q1", 0.0)], 0, TrainParams())
    trainer, _ = _trainer(tiny_model_dir, rows[:2], tmp_path, beta=0.5)
    batch = next(iter(trainer.get_train_dataloader()))
    m = trainer.model
    m.train()
    with torch.no_grad():
        trainer.compute_loss(m, dict(batch))
    # LoRA starts at zero: the policy is the reference, so the k3 estimate is 0
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(0.0, abs=1e-6)


# -- SAGE ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("r1,r2,used,seed_rule,repair_rule", [
    (1, 1, True, (2, 2), (2, 2)),    # skill made on a success carries a success: both bonuses
    (0, 1, True, (0, 2), (1, 2)),    # repair from a failed task 1: the seed pays task 2 only
    (1, 0, True, (1, 0), (1, 0)),    # skill used, task 2 failed: no bonus
    (0, 0, True, (0, 0), (0, 0)),
    (1, 1, False, (1, 1), (1, 1)),   # both solved without the skill: outcome only
    (0, 1, False, (0, 1), (0, 1)),
    (1, 0, False, (1, 0), (1, 0)),
    (0, 0, False, (0, 0), (0, 0)),
])
def test_skill_integrated_reward_every_case(r1, r2, used, seed_rule, repair_rule) -> None:  # noqa: ANN001
    uses = [(), (0,) if used else ()]  # task 2 fired task 1's skill, or not
    assert tuple(rewards.skill_integrated_rewards([r1, r2], uses, bonus="seed")) == seed_rule
    assert tuple(rewards.skill_integrated_rewards([r1, r2], uses, bonus="repair")) == repair_rule


def test_skill_integrated_reward_with_a_graded_outcome() -> None:
    # the outcome term may be a composite; success is what the bonus asks for
    assert rewards.skill_integrated_rewards([0.9, 0.95], [(), (0,)], solved=[True, True]) == [1.9, 1.95]
    assert rewards.skill_integrated_rewards([0.9, 0.95], [(), (0,)]) == [0.9, 0.95]


def _chain_rec(chain: str, pos: int, em: float, reward: float, *, proposal: bool = False) -> dict:
    used = pos == 1 and reward > em
    return {"chain": chain, "position": pos, "outcome": em, "reward": reward, "created": ["s1"] if pos == 0 else [],
            "used_positions": [0] if used else [], "used_skills": ["s1"] if used else [], "used_earlier_skill": used,
            "refusals": [], "proposal": {"messages": [{"role": "user", "content": "write a skill"}],
                                         "reply": '{"id": "s1"}'} if proposal else None}


def test_sage_rows_group_by_chain_and_position_and_the_proposal_takes_task_ones_advantage() -> None:
    trajs = [  # chain c, G = 2 rollouts: rollout 0 made a skill that carried task 2, rollout 1 did not
        _episode("a", 0.0, sage_rec=_chain_rec("c", 0, 0.0, 1.0, proposal=True)),
        _episode("b", 1.0, sage_rec=_chain_rec("c", 1, 1.0, 2.0)),
        _episode("a", 0.0, sage_rec=_chain_rec("c", 0, 0.0, 0.0, proposal=True)),
        _episode("b", 0.0, sage_rec=_chain_rec("c", 1, 0.0, 0.0)),
    ]
    rows, stats = sage.round_rows(trajs, 0, TrainParams())
    props = [r for r in rows if r["source"] == "sage_proposal"]
    assert [r["sample_weight"] for r in props] == [0.5, -0.5]
    assert props[0]["messages"][-1] == {"role": "assistant", "content": '{"id": "s1"}'}
    task2 = [r for r in rows if r["source"] == "sage" and r["position"] == 1]
    assert sorted({r["sample_weight"] for r in task2}) == [-1.0, 1.0]
    assert stats["both_solved"] == 0 and stats["task2_used_skill"] == 1 and stats["proposal_rows"] == 2


def test_a_round_without_signal_hands_its_checkpoint_on(tiny_model_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    calls = []

    def sampler_double(questions, model_dir):  # noqa: ANN001 - a scripted policy: every episode fails
        calls.append((len(questions), str(model_dir)))
        return [_episode(q, 0.0) for q in questions]

    t = TrainParams.model_validate({"recipe": "grpo", "grpo": {"iterations": 2, "group_size": 3}})
    res = grpo.train_grpo(tiny_model_dir, ["q1", "q2"], sampler_double, tmp_path / "out", t)
    assert calls == [(6, str(tiny_model_dir)), (6, str(tiny_model_dir))]
    assert res.model_dir == Path(tiny_model_dir)
    rnd = read_json(tmp_path / "out" / "round_0" / "round.json")
    assert rnd["skipped"] == "no advantage signal" and rnd["data"]["groups_with_signal"] == 0
    assert read_jsonl(tmp_path / "out" / "round_0" / "rows.jsonl") == []


def test_a_grpo_round_trains_one_step_and_the_next_samples_the_new_checkpoint(tiny_model_dir: Path,  # noqa: F811
                                                                             tmp_path: Path) -> None:
    seen = []

    def sampler_double(questions, model_dir):  # noqa: ANN001 - alternating success within each group
        seen.append(str(model_dir))
        asked = [unseeded(q) for q in questions]  # each sample of a group arrives with a seed of its own
        assert len({s for _, s in asked}) == len(asked)
        return [_episode(q, float(i % 2)) for i, (q, _) in enumerate(asked)]

    t = TrainParams.model_validate({"recipe": "grpo", "max_length": 2048,
                                    "grpo": {"iterations": 2, "group_size": 2, "learning_rate": 1e-3}})
    res = grpo.train_grpo(tiny_model_dir, ["q1"], sampler_double, tmp_path / "out", t)
    r0 = read_json(tmp_path / "out" / "round_0" / "round.json")
    assert r0["metrics"]["global_step"] == 1 and r0["data"]["negative_rows"] == 2
    assert seen[1] == r0["merged_dir"] and res.model_dir == Path(read_json(
        tmp_path / "out" / "round_1" / "round.json")["merged_dir"])
