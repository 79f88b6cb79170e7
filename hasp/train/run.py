"""One training phase of any recipe, from params: the one entry point ``hasp train <recipe>``, the
evolution epoch's training step and the experiment grid all call.

``run_recipe`` takes the resolved train section (preset applied), checks the model before anything
starts, and hands each recipe the inputs it reads: SFT and DPO a rows file (``sft.jsonl`` /
``dpo.jsonl``), RS and OPD a sampler over the training questions. Every recipe ends in the same
``TrainSummary``, written as ``train_metrics.json`` under the output folder, so a caller (the CLI, a
Prefect task, DVC's metrics and plots) reads one shape from a fresh run and from a finished one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hasp.atomic import read_json, write_json
from hasp.config import Params, TrainParams
from hasp.train.rounds import LogCallback, NoRowsError, RecipeError, Sampler

SUMMARY_FILE = "train_metrics.json"
TRAINER_FILE = "train_summary.json"  # what each trainer writes beside its adapter (knobs, metrics, history)
#: (state messages, max_tokens) -> the teacher's reply text
TeacherFn = Callable[[list[dict[str, str]], int], str]


class TrainSummary(BaseModel):
    """What one training phase left, in the same shape for every recipe."""

    model_config = ConfigDict(extra="forbid")

    recipe: Literal["sft", "rs", "opd", "dpo", "grpo", "sage"]
    preset: str | None = None
    start_model: str | None = Field(None, description="the checkpoint training started from")
    skipped: str | None = Field(None, description="why nothing was trained; None when a checkpoint was written")
    model_dir: str | None = Field(None, description="the merged checkpoint the phase ended on")
    adapter_dir: str | None = Field(None, description="the LoRA adapter of the last trainer")
    rows: str | None = Field(None, description="sft/dpo: the rows file trained on")
    metrics: dict[str, Any] = Field(default_factory=dict, description="the last trainer's final metrics")
    history: list[dict[str, float]] = Field(
        default_factory=list, description="per-step logs of every trainer; rs/opd steps continue across "
                                          "rounds and each row says its round")
    rounds: list[dict[str, Any]] = Field(default_factory=list, description="rs/opd/grpo/sage: one summary per round")
    train_summaries: list[str] = Field(default_factory=list, description="each trainer's own summary file")
    wall_s: float = Field(0.0, description="seconds the phase took")

    def brief(self) -> dict[str, Any]:
        """The summary without its per-step history and per-round detail (what a command prints)."""
        return {**self.model_dump(mode="json", exclude={"history", "rounds"}), "rounds": len(self.rounds)}


def read_summary(out_dir: Path) -> TrainSummary:
    return TrainSummary.model_validate(read_json(Path(out_dir) / SUMMARY_FILE))


def resolve_model(model: Path | str | None, embedded: str | None = None, chat_format: str | None = None) -> Path:
    """A local model folder: the given folder, a hub name already in the local cache, or (None) the
    embedded model ``embedded`` (``llm.embedded``). A name that is neither is one line naming it."""
    from hasp.train.sft import ModelFolderError, check_model

    if model is None:
        from hasp.llm.model_prep import prepare_model

        return prepare_model(name=embedded, chat_format=chat_format)
    check_model(model)
    p = Path(model)
    if p.is_dir():
        return p.resolve()
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(model), local_files_only=True))
    except Exception:  # noqa: BLE001 - any lookup failure means the same thing to the user
        raise ModelFolderError(f"{model}: neither a model folder nor a model in the local Hugging Face cache "
                               "(no downloads at run time)") from None


def teacher_fn(client: Any) -> TeacherFn | None:
    """The OPD teacher as ``(messages, max_tokens) -> text`` over an LLM client (None: no teacher)."""
    if client is None:
        return None
    return lambda messages, max_tokens: client.generate(messages, max_tokens=max_tokens)


def resolved_train(p: Params, preset: str | None = None) -> TrainParams:
    from hasp.train.presets import apply_preset

    return apply_preset(p.train, preset)


def skip_training(train: TrainParams, out_dir: Path, reason: str, **kept: Any) -> TrainSummary:
    """Record that this phase trains nothing, and why; ``kept`` names what it hands on instead (a closed
    loop's later phase keeps its start checkpoint: ``model_dir``, ``adapter_dir``)."""
    summary = TrainSummary(recipe=train.recipe, preset=train.preset, skipped=reason, **kept)
    write_json(summary.model_dump(mode="json"), Path(out_dir) / SUMMARY_FILE)
    return summary


def _train_on_rows(start: Path, rows: Path, out_dir: Path, train: TrainParams,
                   log_callback: LogCallback | None) -> Any:
    """sft or dpo on a rows file: one trainer, one checkpoint."""
    if train.recipe == "dpo":
        from hasp.train.dpo import train_dpo

        return train_dpo(start, rows, out_dir, train, log_callback=log_callback)
    from hasp.atomic import read_jsonl
    from hasp.train.sft import SFTRecipe, train_sft

    if not read_jsonl(rows):
        raise NoRowsError(f"{rows}: no SFT rows (no PF-corrected step above the reward floor)")
    return train_sft(start, rows, out_dir, SFTRecipe.from_params(train.trainer("sft")),
                     log_callback=log_callback, label="train: sft")


def run_recipe(p: Params, *, model: Path | str | None, out_dir: Path, train: TrainParams | None = None,
               rows: Path | None = None, questions: Sequence[Any] = (), sample: Sampler | None = None,
               teacher: TeacherFn | None = None, log_callback: LogCallback | None = None,
               inputs_key: str | None = None) -> TrainSummary:
    """Train ``model`` (a folder, a cached hub name, or None for the embedded model) with
    ``train.recipe`` into ``out_dir``; returns (and writes) the phase summary. ``train.enabled: false``
    trains nothing and says so.

    ``rows`` feeds sft/dpo; ``questions`` and ``sample`` feed rs/opd (``sample`` gets every question
    ``train.rollout.k`` times), grpo (``train.grpo.group_size`` times) and sage (``questions`` are
    chains, each sampled ``train.sage.group_size`` times); ``recipe_inputs`` builds them. A missing input is a ``RecipeError`` naming it. ``inputs_key`` (what the
    sampler depends on) decides with the knobs whether a finished rs/opd round in ``out_dir`` is reused."""
    train = train or resolved_train(p)
    out_dir = Path(out_dir)
    recipe = train.recipe
    if not train.enabled:
        return skip_training(train, out_dir, "train.enabled is false")
    t0 = time.perf_counter()
    if recipe in ("sft", "dpo"):
        if rows is None or not Path(rows).is_file():
            raise RecipeError(f"train.recipe {recipe}: rows file {rows} not found")
    elif sample is None or not questions:
        raise RecipeError(f"train.recipe {recipe} samples its own rollouts: it needs training questions "
                          "and a sampler")
    start = resolve_model(model, p.llm.embedded, p.llm.chat_format)
    base: dict[str, Any] = {"recipe": recipe, "preset": train.preset, "start_model": str(start)}
    if recipe in ("sft", "dpo"):
        res = _train_on_rows(start, Path(str(rows)), out_dir, train, log_callback)
        summary = TrainSummary(**base, model_dir=str(res.merged_dir), adapter_dir=str(res.adapter_dir),
                               rows=str(rows), metrics=res.metrics, history=res.history,
                               train_summaries=[str(out_dir / TRAINER_FILE)])
    else:
        if recipe == "rs":
            from hasp.train.rs import train_rs

            rr = train_rs(start, questions, sample, out_dir, train, log_callback=log_callback, inputs_key=inputs_key)
        elif recipe == "grpo":
            from hasp.train.grpo import train_grpo

            rr = train_grpo(start, questions, sample, out_dir, train, log_callback=log_callback,
                            inputs_key=inputs_key)
        elif recipe == "sage":
            from hasp.train.sage import train_sage

            rr = train_sage(start, questions, sample, out_dir, train, log_callback=log_callback,
                            inputs_key=inputs_key)
        else:
            from hasp.train.opd import train_opd

            rr = train_opd(start, questions, sample, out_dir, train, reward_floor=p.signals.reward_floor,
                           teacher=teacher, log_callback=log_callback, inputs_key=inputs_key)
        summary = TrainSummary(**base, model_dir=str(rr.model_dir), adapter_dir=str(rr.adapter_dir),
                               rounds=rr.rounds, metrics=rr.rounds[-1]["metrics"] if rr.rounds else {},
                               history=rr.history,
                               train_summaries=[str(out_dir / f"round_{r['round']}" / TRAINER_FILE)
                                                for r in rr.rounds if not r.get("skipped")])
    summary.wall_s = time.perf_counter() - t0
    write_json(summary.model_dump(mode="json"), out_dir / SUMMARY_FILE)
    return summary

