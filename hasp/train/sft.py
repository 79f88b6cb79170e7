"""Objective A SFT: LoRA on PF-corrected steps, weighted by A_t (paper §3.2, App. D.3, D.7; E1/E4).

``train_sft`` reads the jsonl written by ``hasp.train.data.build_sft_rows`` and trains a LoRA adapter
with TRL's ``SFTTrainer`` + PEFT on CPU (or whatever device the model lands on), then saves

- ``<out>/adapter``  the PEFT adapter (+ tokenizer), servable by vLLM ``--lora-modules``;
- ``<out>/merged``   the adapter merged into a fresh copy of the base, a plain HF folder with
  tokenizer and chat template (``transformers serve <out>/merged``);
- ``<out>/train_summary.json``  recipe, metrics and per-step history.

Loss: only the last assistant turn (the corrected step) is trained. Rows become TRL
*prompt-completion* conversations (prompt = the messages the policy saw, completion = the target),
so TRL's completion-only loss applies. ``assistant_only_loss`` is not used: it needs
``{% generation %}`` markers, SmolLM2's chatml template has none and TRL ships no patched
template for it — and it would also train the earlier assistant turns of the history, which carry
their own (different) weights.

Sample weights (TRL has none for SFT):

- ``weighting="loss"`` (default): ``WeightedSFTTrainer`` keeps a ``sample_weight`` column through
  dataset preparation and collation and computes ``Σ_i w_i Σ_t nll_it / N_tokens`` with the same
  fused LM head and token normaliser TRL uses (so with all w = 1 it equals TRL's loss). Weights are
  divided by their mean over the training set so the effective learning rate does not shrink with
  the scale of A_t (A_t ≈ 0.3–0.7). A zero-weight row contributes no gradient.
- ``weighting="oversample"``: rows are repeated in proportion to the weight (largest-remainder
  apportionment of ``round(oversample_factor · n)`` copies) and trained with TRL's plain loss.
- ``weighting="none"``: weights ignored.
- ``weighting="advantage"``: the weight is a signed advantage, kept as it is (GRPO and SAGE; the
  policy-gradient trainer of ``hasp.train.losses``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from hasp.agent.react import load_prompts  # noqa: E402
from hasp.atomic import read_jsonl  # noqa: E402
from hasp.config import TrainerParams  # noqa: E402
from hasp.progress import Progress  # noqa: E402
from hasp.train.losses import WEIGHT_COLUMN, PolicyGradientTrainer, WeightedSFTTrainer  # noqa: E402

LogCallback = Callable[[dict[str, float], int], Any]  # mlflow.log_metrics(metrics, step=...) fits


class SFTRecipe(TrainerParams):
    """The SFT run's knobs as one object; fields, defaults and help text are the ``train`` section's
    (``hasp.config.TrainerParams``), so a knob set in params.yaml reaches the trainer unchanged. Build it
    from ``TrainParams.trainer(recipe)`` so a recipe block's overrides apply."""

    @classmethod
    def from_params(cls, trainer: TrainerParams) -> "SFTRecipe":
        return cls.model_validate(trainer.model_dump(include=set(TrainerParams.model_fields)))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "SFTRecipe":
        return cls.model_validate(dict(d or {}))

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass
class TrainResult:
    adapter_dir: Path
    merged_dir: Path | None
    metrics: dict[str, Any]
    history: list[dict[str, float]]


# -- data ----------------------------------------------------------------------------------------

def n_tokens(tok: Any, messages: list[dict[str, str]]) -> int:
    out = tok.apply_chat_template(messages, tokenize=True)
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    return len(ids)


def episode_head(messages: list[dict[str, str]]) -> tuple[int, int]:
    """``(demo_start, question_end)``: where a leading few-shot demo of the agent's prompts file starts
    (it ends where the episode's question starts) and the index after that question."""
    start = 1 if messages and messages[0]["role"] == "system" else 0
    demo = [dict(m) for m in load_prompts().get("demo", [])]
    q = start + len(demo) if demo and messages[start:start + len(demo)] == demo else start
    return start, min(q + 1, len(messages))


def fit_messages(tok: Any, messages: list[dict[str, str]], max_length: int | None,
                 trim: bool = True) -> tuple[list[dict[str, str]] | None, int]:
    """Make a conversation fit ``max_length`` tokens without losing the target or the question.

    TRL truncates sequences from the right (``keep_start`` is its only mode), which would cut the
    target off a long multi-step prompt. Trimming here drops, in order: the oldest (assistant,
    observation) pairs of the episode's history, then the few-shot demo as one block. The system prompt,
    the episode's question and the latest (assistant, observation) pair stay, since the target answers
    them; a row that still does not fit is ``None``.
    Returns ``(messages or None, number of messages dropped)``.
    """
    if max_length is None:
        return messages, 0
    msgs = list(messages)
    demo_start, head = episode_head(msgs)
    dropped = 0
    while n_tokens(tok, msgs) > max_length:
        if not trim:
            return None, dropped
        if len(msgs) - head >= 5:  # an old (assistant, observation) pair before the latest one
            del msgs[head:head + 2]
            dropped += 2
        elif head - 1 > demo_start:  # the demo, then nothing more to drop
            n = head - 1 - demo_start
            del msgs[demo_start:head - 1]
            head -= n
            dropped += n
        else:
            return None, dropped
    return msgs, dropped


def apportion(weights: list[float], total: int) -> list[int]:
    """Largest-remainder split of ``total`` copies proportional to ``weights`` (deterministic)."""
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w)
    if s <= 0 or total <= 0:
        return [0] * len(w)
    quotas = [x * total / s for x in w]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(w)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def prepare_rows(rows: list[dict[str, Any]], tok: Any, recipe: SFTRecipe) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SFT rows → prompt/completion examples (+ ``sample_weight`` for loss weighting) and data stats."""
    kept: list[tuple[list[dict[str, str]], dict[str, str], float]] = []
    n_trimmed = n_too_long = 0
    for r in rows:
        msgs = r["messages"]
        if not msgs or msgs[-1].get("role") != "assistant":
            raise ValueError(f"row {r.get('qid')}/{r.get('step')} does not end with an assistant message")
        fitted, dropped = fit_messages(tok, msgs, recipe.max_length, recipe.trim_history)
        if fitted is None:
            n_too_long += 1
            continue
        n_trimmed += dropped > 0
        kept.append((fitted[:-1], fitted[-1], float(r.get(WEIGHT_COLUMN, 1.0))))
    raw = [w for _, _, w in kept]
    stats: dict[str, Any] = {"n_rows_in": len(rows), "n_rows_used": len(kept), "n_rows_trimmed": n_trimmed,
                             "n_rows_too_long": n_too_long,
                             "mean_weight_raw": sum(raw) / len(raw) if raw else 0.0}
    examples: list[dict[str, Any]] = []
    if recipe.weighting == "oversample":
        counts = apportion(raw, round(recipe.oversample_factor * len(kept)))
        for (p, c, _), k in zip(kept, counts):
            examples += [{"prompt": p, "completion": [c]} for _ in range(k)]
        stats["oversample_counts"] = counts
    elif recipe.weighting == "loss":
        mean = sum(raw) / len(raw) if raw else 1.0
        scale = 1.0 / mean if recipe.normalize_weights and mean > 0 else 1.0
        examples = [{"prompt": p, "completion": [c], WEIGHT_COLUMN: max(0.0, w) * scale} for p, c, w in kept]
    elif recipe.weighting == "advantage":  # policy gradient: the signed advantage, as it is
        examples = [{"prompt": p, "completion": [c], WEIGHT_COLUMN: w} for p, c, w in kept]
    else:
        examples = [{"prompt": p, "completion": [c]} for p, c, _ in kept]
    stats["n_train_examples"] = len(examples)
    return examples, stats


# -- trainer -------------------------------------------------------------------------------------

class ProgressCallback(TrainerCallback):
    """Optimizer steps as a phase of ``hasp.progress`` (count, elapsed, ETA, final loss)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bar: Progress | None = None

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        self.bar = Progress(self.name, state.max_steps, unit="steps").start()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.bar is not None:
            self.bar.advance()

    def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.bar is not None:
            losses = [h["loss"] for h in state.log_history if "loss" in h]
            tail = f", last loss {losses[-1]:.4f}" if losses else ""
            self.bar.finish(f"{state.global_step} steps{tail}")


class HistoryCallback(TrainerCallback):
    """Collects every training log (loss, grad_norm, learning_rate, entropy, mean_token_accuracy, ...)."""

    def __init__(self, sink: LogCallback | None) -> None:
        self.history: list[dict[str, float]] = []
        self.summary: dict[str, float] = {}
        self.sink = sink

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        logs = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        if "loss" not in logs:  # the end-of-training summary (train_loss, train_runtime, ...)
            self.summary.update(logs)
            return
        rec = {"step": float(state.global_step), **logs}
        self.history.append(rec)
        if self.sink is not None:
            self.sink({k: v for k, v in rec.items() if k != "step"}, state.global_step)


def use_bf16(precision: str) -> bool:
    """bf16 when asked for, or with ``auto`` when a GPU supports it (the paper's setting); else fp32."""
    if precision == "bf16":
        return True
    return precision == "auto" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


class ModelFolderError(ValueError):
    """A model path a trainer cannot load; the message is one line naming the path."""


def check_model(model: Path | str) -> None:
    """Refuse a local folder without weights before a trainer starts; a hub name passes through
    (with ``HF_HUB_OFFLINE`` it must be in the local cache)."""
    p = Path(model)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelFolderError(f"{p}: not a model folder (no config.json)")
        if not any(p.glob("*.safetensors")) and not any(p.glob("*.bin")) and not any(p.glob("*.gguf")):
            raise ModelFolderError(f"{p}: model folder has no weights (*.safetensors or *.bin)")
    elif p.exists() or str(model).startswith((".", "/", "~")):
        raise ModelFolderError(f"{p}: no such model folder")


def idle_cores() -> int:
    n = os.cpu_count() or 1
    try:
        busy = round(os.getloadavg()[0])
    except OSError:
        busy = 0
    return max(1, n - busy)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """``train.torch_threads`` for the duration of one training (None: torch's default, 0: idle cores);
    the setting is process-global, so the caller's is restored afterwards."""
    prev = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n or idle_cores())
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def write_pretrained(model: Any, tok: Any, folder: Path) -> None:
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def lora_config(recipe: Any) -> Any:
    """The PEFT LoRA config of a recipe (rank, alpha, dropout, target modules)."""
    from peft import LoraConfig

    return LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                      target_modules=list(recipe.target_modules), bias="none", task_type="CAUSAL_LM")


def train_and_save(box: list[Any], tok: Any, model_dir: Path, out_dir: Path, save_merged: bool
                   ) -> tuple[Any, float, Path, Path | None]:
    """Train, save the adapter, free the training graph, then (optionally) merge it into a fresh base.
    The trainer is taken out of the one-element ``box`` so no caller name keeps the training graph
    alive while the merge loads a second copy of the model. Returns (train output, train seconds,
    adapter folder, merged folder or None)."""
    trainer = box.pop()
    t_train = time.perf_counter()
    out = trainer.train()
    train_s = time.perf_counter() - t_train
    adapter_dir = out_dir / "adapter"
    save_folder(adapter_dir, partial(write_pretrained, trainer.model, tok))
    del trainer
    merged_dir = save_merged_model(model_dir, adapter_dir, out_dir, tok) if save_merged else None
    return out, train_s, adapter_dir, merged_dir


def save_merged_model(model_dir: Path, adapter_dir: Path, out_dir: Path, tok: Any) -> Path:
    """``out_dir/merged``: a fresh base (a trained one carries TRL's patched forward) with the saved
    adapter merged in, servable by any HF server. Also drops the empty ``trainer`` folder that
    ``save_strategy="no"`` leaves."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    try:
        (out_dir / "trainer").rmdir()
    except OSError:
        pass
    merged_dir = out_dir / "merged"
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    save_folder(merged_dir, partial(write_pretrained, merged, tok))
    return merged_dir


def save_folder(dest: Path, write: Callable[[Path], Any]) -> None:
    """Write a folder in a temp dir beside ``dest`` and move it into place, so ``dest`` is never half-written.

    mkdtemp/safetensors leave 0700/0600 modes, which a server running as another user (docker) cannot
    read, so the modes are opened up before the move.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)
        for p in tmp.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def train_sft(model_dir: Path, rows_path: Path, out_dir: Path, recipe: SFTRecipe | None = None, *,
              log_callback: LogCallback | None = None, label: str = "train: LoRA SFT",
              save_merged: bool = True, kl_beta: float = 0.0, reference: Path | None = None) -> TrainResult:
    """Train a LoRA adapter on SFT rows; save adapter, merged model (unless ``save_merged`` is false)
    and a summary under ``out_dir``.

    ``log_callback(metrics, step)`` is called at every logging step (``mlflow.log_metrics`` fits).
    ``weighting="advantage"`` trains the policy-gradient loss (``hasp.train.losses``), with a KL
    penalty of weight ``kl_beta`` to ``reference`` when it is positive.
    """
    recipe = recipe or SFTRecipe()
    with torch_threads(recipe.torch_threads):
        return _train_sft(Path(model_dir), Path(rows_path), Path(out_dir), recipe, log_callback, label, save_merged,
                          kl_beta, reference)


def _trainer_class(recipe: SFTRecipe, kl_beta: float, reference: Path | None) -> tuple[type, dict[str, Any]]:
    if recipe.weighting == "advantage":
        return PolicyGradientTrainer, {"beta": kl_beta, "reference": reference}
    return (WeightedSFTTrainer if recipe.weighting == "loss" else SFTTrainer), {}


def _train_sft(model_dir: Path, rows_path: Path, out_dir: Path, recipe: SFTRecipe,
               log_callback: LogCallback | None, label: str, save_merged: bool, kl_beta: float = 0.0,
               reference: Path | None = None) -> TrainResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    set_seed(recipe.seed)
    t0 = time.perf_counter()

    check_model(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    examples, data_stats = prepare_rows(read_jsonl(rows_path), tok, recipe)
    if not examples:
        raise ValueError(f"no trainable rows in {rows_path} (stats: {data_stats})")
    from datasets import Dataset

    dataset = Dataset.from_list(examples)

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    on_cpu = not torch.cuda.is_available()
    args = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        use_cpu=on_cpu, bf16=use_bf16(recipe.precision), fp16=False,
        activation_checkpointing=recipe.gradient_checkpointing,  # the non-deprecated name (transformers 5)
        report_to=[], save_strategy="no", disable_tqdm=True,
        logging_strategy="steps", logging_steps=recipe.logging_steps,
        learning_rate=recipe.learning_rate, num_train_epochs=recipe.num_train_epochs,
        max_steps=recipe.max_steps, per_device_train_batch_size=recipe.per_device_train_batch_size,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        lr_scheduler_type=recipe.lr_scheduler_type, warmup_steps=recipe.warmup_steps,
        weight_decay=recipe.weight_decay, max_grad_norm=recipe.max_grad_norm,
        max_length=recipe.max_length, completion_only_loss=True, packing=False, padding_free=False,
        seed=recipe.seed, data_seed=recipe.seed, dataloader_num_workers=0, dataloader_pin_memory=False,
    )
    history = HistoryCallback(log_callback)
    trainer_cls, extra = _trainer_class(recipe, kl_beta, reference)
    box = [trainer_cls(model=model, args=args, train_dataset=dataset, processing_class=tok,
                       peft_config=lora_config(recipe), callbacks=[history, ProgressCallback(label)], **extra)]
    del model  # the trainer holds it
    out, train_s, adapter_dir, merged_dir = train_and_save(box, tok, model_dir, out_dir, save_merged)

    steps = int(out.global_step)
    metrics: dict[str, Any] = {
        **{k: v for k, v in data_stats.items() if k != "oversample_counts"},
        **history.summary,
        "train_loss": float(out.training_loss),
        "global_step": steps,
        "train_wall_s": train_s,
        "s_per_step": train_s / steps if steps else float("nan"),
        "total_wall_s": time.perf_counter() - t0,
        "weighting": recipe.weighting,
        "torch_threads": torch.get_num_threads(),
    }
    summary = {"recipe": recipe.to_dict(), "model_dir": str(model_dir), "rows_path": str(rows_path),
               "metrics": metrics, "history": history.history,
               "oversample_counts": data_stats.get("oversample_counts")}
    (out_dir / "train_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return TrainResult(adapter_dir=adapter_dir, merged_dir=merged_dir, metrics=metrics, history=history.history)
