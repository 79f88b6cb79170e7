"""Real TRL + PEFT SFT on CPU with a tiny random Llama (and, marked ``model``, the embedded 135M)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("peft")

from hasp.agent.loop import load_prompts  # noqa: E402
from hasp.records import Action, AuditEvent, StepRecord, Trajectory  # noqa: E402
from hasp.atomic import write_jsonl  # noqa: E402
from hasp.train.data import build_sft_rows, score_all  # noqa: E402
from hasp.train.sft import (  # noqa: E402
    WEIGHT_COLUMN,
    SFTRecipe,
    WeightedSFTTrainer,
    apportion,
    fit_messages,
    prepare_rows,
    train_sft,
)

REAL_MODEL = Path(os.environ.get("HASP_CACHE") or Path.home() / ".cache" / "hasp") / "models" / "smollm2-135m-instruct"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _tokenizer():
    """The embedded model's tokenizer when its folder exists, else a small byte-level BPE with chatml."""
    from transformers import AutoTokenizer

    if (REAL_MODEL / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(REAL_MODEL)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = [load_prompts()["system"], "Thought: Action: SEARCH READ FINAL Observation: Question: founder born city"]
    tk.train_from_iterator(corpus * 20, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                  pad_token="<|im_end|>", unk_token="<unk>")
    tok.chat_template = CHATML
    return tok


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tiny_model import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), _tokenizer())


def _traj(k: int, em: float) -> Trajectory:
    """Two steps: a FINAL→SEARCH rescue with the real system prompt, then FINAL."""
    p = load_prompts()
    msgs = [{"role": "system", "content": p["system"]},
            {"role": "user", "content": p["question"].format(question=f"Where was founder {k} born?")}]
    a0 = AuditEvent(state={"step_count": 0, "has_read": False, "empty_results": False},
                    a_orig=Action("FINAL", f"guess{k}"), a_final=Action("SEARCH", f"founder {k}"),
                    fired=[{"skill_id": "premature_final", "type": "MODIFY_ACTION", "reason": "", "applied": True}])
    hist = msgs + [{"role": "assistant", "content": f"Thought: t{k}\nAction: SEARCH[founder {k}]"},
                   {"role": "user", "content": f"Observation: [d{k}] founder {k} was born in City{k}."}]
    a1 = AuditEvent(state={"step_count": 1, "has_read": False, "empty_results": False},
                    a_orig=Action("FINAL", f"City{k}"), a_final=Action("READ", f"d{k}"),
                    fired=[{"skill_id": "no_read_before_final", "type": "MODIFY_ACTION", "reason": "",
                            "applied": True}])
    steps = [StepRecord(index=0, raw_output="", thought=f"t{k}", audit=a0, prompt_messages=msgs),
             StepRecord(index=1, raw_output="", thought=f"found it {k}", audit=a1, prompt_messages=hist)]
    return Trajectory(qid=f"q{k}", question="", answers=[f"City{k}"], variant="pf", steps=steps, em=em)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    r = build_sft_rows(score_all([_traj(k, float(k % 2)) for k in range(6)]))
    assert len(r) >= 8
    return r


def _rows_file(tmp_path: Path, rows: list[dict]) -> Path:
    return write_jsonl(rows, tmp_path / "sft.jsonl")


def test_apportion_and_oversample_counts(tiny_model_dir: Path, rows: list[dict]) -> None:
    assert apportion([1, 1, 2], 8) == [2, 2, 4]
    assert apportion([0.0, 0.0, 0.5, 0.0], 8) == [0, 0, 8, 0]
    assert sum(apportion([0.3, 0.6, 0.45], 7)) == 7
    tok = _tokenizer()
    one_hot = [dict(r, sample_weight=(0.9 if i == 2 else 0.0)) for i, r in enumerate(rows[:4])]
    ex, stats = prepare_rows(one_hot, tok, SFTRecipe(weighting="oversample", oversample_factor=2.0))
    assert stats["oversample_counts"] == [0, 0, 8, 0] and len(ex) == 8
    assert all(e["completion"] == [rows[2]["messages"][-1]] for e in ex)
    ex, _ = prepare_rows(one_hot, tok, SFTRecipe(weighting="loss"))
    assert [e[WEIGHT_COLUMN] for e in ex] == pytest.approx([0.0, 0.0, 4.0, 0.0])  # normalised to mean 1
    ex, _ = prepare_rows(one_hot, tok, SFTRecipe(weighting="none"))
    assert len(ex) == 4 and WEIGHT_COLUMN not in ex[0]


def test_fit_messages_trims_history_then_the_demo_never_the_question_or_target(rows: list[dict]) -> None:
    tok = _tokenizer()
    short = rows[1]["messages"]
    assert len(short) == 5  # system, question, assistant, observation, target
    n = lambda m: len(tok.apply_chat_template(m, tokenize=True)["input_ids"])  # noqa: E731
    assert fit_messages(tok, short, n(short) - 1)[0] is None  # the latest observation is what the target answers
    demo = [dict(m) for m in load_prompts()["demo"]]
    extra = [{"role": "assistant", "content": "Thought: more.\nAction: SEARCH[x]"},
             {"role": "user", "content": "Observation: nothing.\nNext Thought and Action:"}]
    long = short[:1] + demo + short[1:2] + extra + short[2:]
    full = n(long)
    fitted, dropped = fit_messages(tok, long, full - 1)  # the oldest history pair goes first
    assert dropped == 2 and fitted == short[:1] + demo + short[1:]
    fitted, dropped = fit_messages(tok, long, n(short))  # then the demo, as one block
    assert dropped == 2 + len(demo) and fitted == short
    assert fit_messages(tok, long, 5)[0] is None
    assert fit_messages(tok, long, full - 1, trim=False)[0] is None


def test_weighted_loss_is_linear_in_weights_and_matches_trl(tiny_model_dir: Path, rows: list[dict],
                                                            tmp_path: Path) -> None:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    tok = _tokenizer()
    ex, _ = prepare_rows(rows[:2], tok, SFTRecipe(weighting="loss"))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    args = SFTConfig(output_dir=str(tmp_path / "t"), use_cpu=True, bf16=False, fp16=False, report_to=[],
                     activation_checkpointing=False, per_device_train_batch_size=2, completion_only_loss=True,
                     save_strategy="no", max_length=1024)
    trainer = WeightedSFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(ex), processing_class=tok,
                                 peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    batch = next(iter(trainer.get_train_dataloader()))
    assert WEIGHT_COLUMN in batch and batch[WEIGHT_COLUMN].shape == (2,)
    m = trainer.model
    m.train()
    labels = batch["labels"]
    n_tok = (labels[:, 1:] != -100).sum()

    def loss(w0: float, w1: float) -> float:
        b = {k: v for k, v in batch.items()}
        b[WEIGHT_COLUMN] = torch.tensor([w0, w1])
        with torch.no_grad():
            return float(trainer.compute_loss(m, b, num_items_in_batch=n_tok))

    plain_batch = {k: v for k, v in batch.items() if k != WEIGHT_COLUMN}
    with torch.no_grad():
        plain = float(SFTTrainer.compute_loss(trainer, m, plain_batch, num_items_in_batch=n_tok))
    assert loss(1.0, 1.0) == pytest.approx(plain, rel=1e-5)  # all-ones weights == TRL's own loss
    a, b = loss(1.0, 0.0), loss(0.0, 1.0)
    assert a + b == pytest.approx(plain, rel=1e-5) and a != pytest.approx(b)
    assert loss(0.0, 0.0) == 0.0
    assert loss(2.0, 0.0) == pytest.approx(2 * a, rel=1e-5)


def _check_outputs(res, steps: int) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert len(res.history) == steps
    assert all(math.isfinite(h["loss"]) for h in res.history)
    assert all("grad_norm" in h and "learning_rate" in h and "entropy" in h and "mean_token_accuracy" in h
               for h in res.history)
    assert (res.adapter_dir / "adapter_config.json").is_file()
    assert (res.adapter_dir / "adapter_model.safetensors").is_file()
    assert res.merged_dir is not None and (res.merged_dir / "config.json").is_file()
    assert (res.merged_dir / "model.safetensors").is_file() and (res.merged_dir / "tokenizer_config.json").is_file()
    assert not list(res.merged_dir.glob("adapter_*"))  # a plain HF folder, not an adapter
    tok = AutoTokenizer.from_pretrained(res.merged_dir)
    model = AutoModelForCausalLM.from_pretrained(res.merged_dir)
    enc = tok.apply_chat_template([{"role": "user", "content": "Question: hi"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > enc["input_ids"].shape[1]
    assert res.metrics["global_step"] == steps and res.metrics["s_per_step"] > 0


def test_train_sft_loss_weighting_end_to_end(tiny_model_dir: Path, rows: list[dict], tmp_path: Path) -> None:
    path = _rows_file(tmp_path, rows)
    recipe = SFTRecipe(max_steps=3, learning_rate=1e-3, per_device_train_batch_size=2, lora_r=4, lora_alpha=8)
    seen: list[tuple[int, dict]] = []
    res = train_sft(tiny_model_dir, path, tmp_path / "run1", recipe, log_callback=lambda m, s: seen.append((s, m)))
    _check_outputs(res, 3)
    assert [s for s, _ in seen] == [1, 2, 3] and "loss" in seen[0][1] and "nll" in seen[0][1]
    summary = json.loads((tmp_path / "run1" / "train_summary.json").read_text())
    assert summary["recipe"]["weighting"] == "loss" and len(summary["history"]) == 3
    # same seed, same data → same losses
    res2 = train_sft(tiny_model_dir, path, tmp_path / "run2", recipe)
    assert [h["loss"] for h in res2.history] == pytest.approx([h["loss"] for h in res.history], rel=1e-6)


def test_train_sft_oversample_end_to_end(tiny_model_dir: Path, rows: list[dict], tmp_path: Path) -> None:
    one_hot = [dict(r, sample_weight=(0.9 if i == 0 else 0.0)) for i, r in enumerate(rows)]
    recipe = SFTRecipe(max_steps=2, learning_rate=1e-3, per_device_train_batch_size=2, lora_r=4, lora_alpha=8,
                       weighting="oversample")
    res = train_sft(tiny_model_dir, _rows_file(tmp_path, one_hot), tmp_path / "run", recipe)
    _check_outputs(res, 2)
    assert res.metrics["n_train_examples"] == 2 * len(rows)
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["oversample_counts"] == [2 * len(rows)] + [0] * (len(rows) - 1)


@pytest.mark.model
@pytest.mark.skipif(not (REAL_MODEL / "config.json").is_file(), reason="embedded model folder not prepared")
def test_train_sft_real_135m_two_steps(rows: list[dict], tmp_path: Path) -> None:
    recipe = SFTRecipe(max_steps=2, learning_rate=2e-4, per_device_train_batch_size=2, gradient_accumulation_steps=1,
                       torch_threads=0)  # auto: idle cores; oversubscribed threads are 3-5x slower
    res = train_sft(REAL_MODEL, _rows_file(tmp_path, rows[:4]), tmp_path / "run", recipe)
    _check_outputs(res, 2)


def test_epoch_run_holds_the_trained_adapter_and_its_curves(tiny_model_dir: Path, rows: list[dict],
                                                           tmp_path: Path, monkeypatch) -> None:
    """The epoch's training step (what the DVC train stage and the Prefect flow call) trains an
    adapter; the epoch's MLflow run (real sqlite store) holds it under adapter/, tagged with its URI,
    and the folder downloaded from there loads onto the base as the same adapter. The per-step curves
    land in the file `dvc plots show` draws."""
    import mlflow
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from hasp.config import Params
    from hasp.evolve.epoch import train
    from hasp.track.dvc_plots import write_plot_data
    from hasp.track.epoch_report import log_epoch

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    p = Params()
    p = p.model_copy(update={"train": p.train.model_copy(update={
        "max_steps": 2, "learning_rate": 1e-3, "per_device_train_batch_size": 2, "lora_r": 4, "lora_alpha": 8,
        "logging_steps": 1}), "tracking": p.tracking.model_copy(update={"experiment": "adapter"})})
    out = tmp_path / "outputs"
    s = train(_rows_file(tmp_path, rows), p, out / "train", model_dir=tiny_model_dir)
    assert Path(s.adapter_dir) == out / "train" / "adapter" and s.recipe == "sft" and s.skipped is None
    run_id = log_epoch(out, p, epoch=0)

    client = mlflow.tracking.MlflowClient()
    run = client.get_run(run_id)
    assert run.data.tags["hasp.adapter"] == f"runs:/{run_id}/adapter" and run.data.tags["hasp.adapter.rank"] == "4"
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"} <= {
        a.path for a in client.list_artifacts(run_id, "adapter")}
    got = Path(mlflow.artifacts.download_artifacts(run.data.tags["hasp.adapter"], dst_path=str(tmp_path / "dl")))
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), got)
    local = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out / "train" / "adapter")
    lora = {k: v for k, v in local.state_dict().items() if "lora_" in k}
    assert lora and all(torch.equal(v, loaded.state_dict()[k]) for k, v in lora.items())

    write_plot_data(out)
    steps = json.loads((out / "plots" / "train_steps.json").read_text())
    assert [r["step"] for r in steps] == [1, 2] and all(r["loss"] > 0 and "grad_norm" in r for r in steps)
