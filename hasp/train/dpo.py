"""DPO on the Objective-A preference rows (TRL ``DPOTrainer`` + PEFT LoRA).

The rows are the ones Phase H writes to ``dpo.jsonl`` (``hasp.train.data.build_dpo_rows``): at a
state where a PF rewrote the action, chosen = the corrected action, rejected = the policy's own. They
are already in TRL's conversational preference format (``prompt`` / ``chosen`` / ``rejected`` message
lists); the scoring metadata stays in the file and is dropped here. With a PEFT model TRL uses the
base with the adapter disabled as the reference, so no second copy of the model is loaded. Outputs
match the SFT trainer's: ``adapter/``, ``merged/`` and ``train_summary.json`` under ``out_dir``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hasp.atomic import read_jsonl
from hasp.config import DPOParams, TrainParams
from hasp.train.rounds import NoRowsError
from hasp.train.sft import (HistoryCallback, LogCallback, ProgressCallback, SFTRecipe, TrainResult,
                            check_model, fit_messages, lora_config, torch_threads, train_and_save, use_bf16)

COLUMNS = ("prompt", "chosen", "rejected")


def preference_examples(rows: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Only the three columns TRL reads; a row missing one is refused with its line number."""
    out = []
    for i, r in enumerate(rows, 1):
        missing = [c for c in COLUMNS if not r.get(c)]
        if missing:
            raise ValueError(f"{where}:{i}: preference row without {', '.join(missing)}")
        out.append({c: r[c] for c in COLUMNS})
    return out


def fit_pairs(examples: list[dict[str, Any]], tok: Any, recipe: SFTRecipe) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Drop the oldest history turns of a prompt until prompt + the longer answer fits ``max_length``.

    TRL truncates from the right, which would cut the answers of a long multi-step prompt; a pair
    that cannot fit even with its history gone is dropped (counted)."""
    out, trimmed, too_long = [], 0, 0
    for ex in examples:
        longer = max(ex["chosen"], ex["rejected"], key=lambda m: sum(len(x.get("content", "")) for x in m))
        fitted, dropped = fit_messages(tok, list(ex["prompt"]) + list(longer), recipe.max_length,
                                       recipe.trim_history)
        if fitted is None:
            too_long += 1
            continue
        trimmed += dropped > 0
        out.append({**ex, "prompt": fitted[: len(fitted) - len(longer)]})
    return out, {"n_rows_in": len(examples), "n_rows_used": len(out), "n_rows_trimmed": trimmed,
                 "n_rows_too_long": too_long}


def train_dpo(model_dir: Path, rows_path: Path, out_dir: Path, train: TrainParams | None = None, *,
              log_callback: LogCallback | None = None, save_merged: bool = True) -> TrainResult:
    """LoRA DPO on ``rows_path``: the trainer knobs are ``train.trainer("dpo")`` (the shared ones with
    ``train.dpo``'s overrides), beta and loss type ``train.dpo``'s."""
    train = train or TrainParams()
    recipe = SFTRecipe.from_params(train.trainer("dpo"))
    with torch_threads(recipe.torch_threads):
        return _train_dpo(Path(model_dir), Path(rows_path), Path(out_dir), recipe, train.dpo, log_callback,
                          save_merged)


def _train_dpo(model_dir: Path, rows_path: Path, out_dir: Path, recipe: SFTRecipe, cfg: DPOParams,
               log_callback: LogCallback | None, save_merged: bool) -> TrainResult:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import DPOConfig, DPOTrainer

    check_model(model_dir)
    examples = preference_examples(read_jsonl(rows_path), str(rows_path))
    if not examples:
        raise NoRowsError(f"{rows_path}: no preference rows (no step where a PF changed the action)")
    out_dir.mkdir(parents=True, exist_ok=True)
    set_seed(recipe.seed)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    examples, data_stats = fit_pairs(examples, tok, recipe)
    if not examples:
        raise ValueError(f"{rows_path}: no preference row fits train.max_length {recipe.max_length}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = DPOConfig(
        output_dir=str(out_dir / "trainer"), use_cpu=not torch.cuda.is_available(),
        bf16=use_bf16(recipe.precision), fp16=False, activation_checkpointing=recipe.gradient_checkpointing,
        report_to=[], save_strategy="no", disable_tqdm=True, logging_strategy="steps",
        logging_steps=recipe.logging_steps, learning_rate=recipe.learning_rate,
        num_train_epochs=recipe.num_train_epochs,
        max_steps=recipe.max_steps, per_device_train_batch_size=recipe.per_device_train_batch_size,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps, lr_scheduler_type=recipe.lr_scheduler_type,
        warmup_steps=recipe.warmup_steps, weight_decay=recipe.weight_decay, max_grad_norm=recipe.max_grad_norm,
        max_length=recipe.max_length, beta=cfg.beta, loss_type=[cfg.loss_type], seed=recipe.seed,
        data_seed=recipe.seed, dataloader_num_workers=0, dataloader_pin_memory=False,
    )
    history = HistoryCallback(log_callback)
    box = [DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples), processing_class=tok,
                      peft_config=lora_config(recipe), callbacks=[history, ProgressCallback("train: LoRA DPO")])]
    del model  # the trainer holds it
    out, train_s, adapter_dir, merged_dir = train_and_save(box, tok, model_dir, out_dir, save_merged)
    steps = int(out.global_step)
    metrics: dict[str, Any] = {**data_stats, **history.summary, "n_rows": len(examples), "train_loss": float(out.training_loss),
                               "global_step": steps, "train_wall_s": train_s,
                               "s_per_step": train_s / steps if steps else float("nan"),
                               "total_wall_s": time.perf_counter() - t0}
    summary = {"recipe": "dpo", "sft_knobs": recipe.to_dict(), "dpo": cfg.model_dump(mode="json"),
               "model_dir": str(model_dir), "rows_path": str(rows_path), "metrics": metrics,
               "history": history.history}
    (out_dir / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return TrainResult(adapter_dir=adapter_dir, merged_dir=merged_dir, metrics=metrics, history=history.history)
