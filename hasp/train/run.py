"""One training phase of any recipe, from params: what ``hasp train`` and the experiment grid call.

``run_recipe`` resolves the train section (with its preset), checks the model before anything
starts, and hands each recipe the inputs it reads: SFT and DPO a rows file (``sft.jsonl`` /
``dpo.jsonl``), RS and OPD a sampler over the training questions. It writes
``recipe_summary.json`` under the output folder with the checkpoint the phase ended on, so a caller
(the CLI, a Prefect task) gets the same answer from a fresh run and from a finished one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hasp.atomic import write_json
from hasp.config import Params, TrainParams
from hasp.train.rounds import LogCallback, RecipeError, Sampler

SUMMARY_FILE = "recipe_summary.json"
#: (state messages, max_tokens) -> the teacher's reply text
TeacherFn = Callable[[list[dict[str, str]], int], str]


def resolve_model(model: Path | str | None) -> Path:
    """A local model folder: the given folder, a hub name already in the local cache, or (None) the
    embedded model. A name that is neither is one line naming it."""
    from hasp.train.sft import ModelFolderError, check_model

    if model is None:
        from hasp.llm.model_prep import prepare_model

        return prepare_model()
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


def run_recipe(p: Params, *, model: Path, out_dir: Path, train: TrainParams | None = None,
               rows: Path | None = None, questions: Sequence[Any] = (), sample: Sampler | None = None,
               teacher: TeacherFn | None = None, log_callback: LogCallback | None = None,
               inputs_key: str | None = None) -> dict[str, Any]:
    """Train ``model`` with ``train.recipe`` into ``out_dir``; returns (and writes) the phase summary.

    ``rows`` feeds sft/dpo; ``questions`` and ``sample`` feed rs/opd (``sample`` gets every question
    ``train.rollout.k`` times). A missing input is a ``RecipeError`` naming it. ``inputs_key`` (what the
    sampler depends on) decides with the knobs whether a finished rs/opd round in ``out_dir`` is reused."""
    train = train or resolved_train(p)
    out_dir = Path(out_dir)
    recipe = train.recipe
    base: dict[str, Any] = {"recipe": recipe, "preset": train.preset, "start_model": str(model)}
    if recipe in ("sft", "dpo"):
        if rows is None or not Path(rows).is_file():
            raise RecipeError(f"train.recipe {recipe}: rows file {rows} not found")
        if recipe == "sft":
            from hasp.atomic import read_jsonl
            from hasp.train.sft import SFTRecipe, train_sft

            if not read_jsonl(rows):
                raise RecipeError(f"{rows}: no SFT rows (no PF-corrected step above the reward floor)")
            res = train_sft(model, Path(rows), out_dir, SFTRecipe.from_params(train).model_copy(
                update={"save_merged": True}), log_callback=log_callback, label="train: sft")
        else:
            from hasp.train.dpo import train_dpo

            res = train_dpo(model, Path(rows), out_dir, train.model_copy(update={"save_merged": True}),
                            log_callback=log_callback)
        summary = {**base, "model_dir": str(res.merged_dir), "adapter_dir": str(res.adapter_dir),
                   "metrics": res.metrics, "rows": str(rows),
                   "train_summaries": [str(out_dir / "train_summary.json")]}
    elif recipe in ("rs", "opd"):
        if sample is None or not questions:
            raise RecipeError(f"train.recipe {recipe} samples its own rollouts: it needs training questions "
                              "and a sampler")
        if recipe == "rs":
            from hasp.train.rs import train_rs

            rr = train_rs(model, questions, sample, out_dir, train, log_callback=log_callback, inputs_key=inputs_key)
        else:
            from hasp.train.opd import train_opd

            rr = train_opd(model, questions, sample, out_dir, train, reward_floor=p.signals.reward_floor,
                           teacher=teacher, log_callback=log_callback, inputs_key=inputs_key)
        summary = {**base, "model_dir": str(rr.model_dir), "adapter_dir": str(rr.adapter_dir),
                   "rounds": rr.rounds, "metrics": rr.rounds[-1]["metrics"] if rr.rounds else {},
                   "train_summaries": [str(Path(r["adapter_dir"]).parent / "train_summary.json")
                                       for r in rr.rounds]}
    else:  # the schema allows only the four
        raise RecipeError(f"train.recipe: unknown recipe {recipe!r}")
    write_json(summary, out_dir / SUMMARY_FILE)
    return summary
