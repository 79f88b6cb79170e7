"""``hasp train sft | rs | opd | dpo``: one recipe on any local model folder (or a cached hub name).

Every command reads the params file, applies ``--preset`` (or ``train.preset``), forces the command's
recipe and runs it through the one training entry point (``hasp.train.run.run_recipe``); it prints the
phase's ``TrainSummary`` (without its per-step history, which is in the summary file) and the MLflow
run id. A preset of another recipe, a model without weights, missing data or an RS round that keeps
nothing ends the command with one line and exit code 2.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp import artifacts as art
from hasp.console import safe

from hasp.cli.params import ParamsOpt, params_or_exit

ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Model to train: a local HF folder or a hub name in the local cache "
                    "(default: the embedded SmolLM2-135M-Instruct).")]
PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", help="E1..E6 or E1_cpu..E6_cpu (default: train.preset); must be of this recipe.")]
DataOpt = Annotated[Path, typer.Option("--data", help=(
    "Prepared data folder of the search task (its train split is sampled); a math, code or user task "
    "(evolve.domain) samples its own items' training split instead."))]
LibraryOpt = Annotated[Optional[Path], typer.Option("--library", help=(
    "Skill library the sampling agent runs with (default: the seed skills of evolve.domain, or a user "
    "task's library attribute)."))]
TrackOpt = Annotated[bool, typer.Option(
    "--track/--no-track", help="Log the training as one MLflow run (knobs, curves, metrics, adapter).")]


def register(train_app: typer.Typer) -> None:
    train_app.command("sft")(sft)
    train_app.command("rs")(rs)
    train_app.command("opd")(opd)
    train_app.command("dpo")(dpo)
    train_app.command("grpo")(grpo)
    train_app.command("sage")(sage)


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Bad input (preset, knob, model folder, data, an empty kept set) -> ``error: ...`` and exit 2."""
    from hasp.config import ParamsError
    from hasp.train.rounds import RecipeError
    from hasp.train.sft import ModelFolderError

    try:
        yield
    except (ParamsError, RecipeError, ModelFolderError) as e:
        typer.echo(f"error: {safe(e)}", err=True)
        raise typer.Exit(2) from None


def track_training(p: Any, train: Any, summary: Any, track: bool, *, data: Path | None = None,
                   library: Path | None = None) -> str | None:
    """The MLflow run of a finished command-line training (None with ``--no-track`` or when the phase
    trained nothing); its provenance names the start model, the training data (rows or data folder)
    and the library sampled with."""
    if not track or summary.skipped:
        return None
    from hasp.llm.endpoints import served_model
    from hasp.provenance import provenance
    from hasp.track.train_run import log_training

    start = Path(summary.start_model) if summary.start_model else None
    prov = provenance(params=p, data_dir=data if data is not None and data.exists() else None,
                      library=library if library is not None and library.is_dir() else None,
                      model=served_model(p.llm, start))
    return log_training(p, train, summary.model_dump(mode="json"), provenance=prov)


def _train_section(p: Any, recipe: str, preset: str | None) -> Any:
    from pydantic import ValidationError

    from hasp.config import TrainParams
    from hasp.train.rounds import RecipeError
    from hasp.train.run import resolved_train

    t = resolved_train(p, preset)
    if t.preset and t.recipe != recipe:
        raise RecipeError(f"train.preset {t.preset} is a {t.recipe} preset, not {recipe}: "
                          f"run `hasp train {t.recipe}` or pick a {recipe} preset")
    try:  # the command's recipe under the section's rules (train.objective B needs sft or dpo)
        return TrainParams.model_validate({**t.model_dump(), "recipe": recipe})
    except ValidationError as e:
        raise RecipeError("; ".join(f"train.{'.'.join(map(str, er['loc']))}: {er['msg']}"
                                    for er in e.errors())) from None


def _sampling_inputs(p: Any, task: Any, library: Path) -> str:
    """What the sampler reads besides the train knobs (the task's training items and code, skills,
    agent settings): a finished round in ``--out`` made from other inputs is run again, not reused."""
    import hashlib

    from hasp.evolve.epoch_task import task_code_key
    from hasp.pf.library import library_hash
    items = [task.domain.identity(it) for it in task.items("train")]  # read already by recipe_inputs
    h = hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode())
    h.update(task_code_key(p).encode())
    h.update(library_hash(library).encode())
    h.update(p.section_hash("agent", "llm", "harness", "sandbox", "teacher").encode())
    return h.hexdigest()[:32]


def _train(recipe: str, model: Optional[str], out: Path, params: Path, preset: Optional[str], track: bool, *,
           rows: Path | None = None, data: Path | None = None, library: Path | None = None) -> None:
    """Any recipe from the command line: sft/dpo on ``rows``, rs/opd sampling ``data``'s train split with
    ``library``; prints the summary and the MLflow run id."""
    from hasp.evolve.chain_skill import chain_grower
    from hasp.train.inputs import SAMPLING_RECIPES, recipe_inputs
    from hasp.train.rounds import RecipeError
    from hasp.train.run import run_recipe

    p = params_or_exit(params)
    with one_line_errors(), contextlib.ExitStack() as stack:
        t = _train_section(p, recipe, preset)
        kw: dict[str, Any] = {}
        if recipe in SAMPLING_RECIPES:
            from hasp.agent.remote import episode_executor
            from hasp.llm.endpoints import teacher_client

            from hasp.evolve.epoch_task import default_library, epoch_task

            assert data is not None
            library = library if library is not None else default_library(p)
            if library is None:
                raise RecipeError(f"evolve.domain {p.evolve.domain}: the task declares no library; pass --library")
            task = epoch_task(p, data)  # evolve.domain's items: search's split files, or a task's pool
            teacher = teacher_client(p.teacher, p.llm)
            executor = stack.enter_context(episode_executor(p.runner))
            kw = {**recipe_inputs(p, t, task, library, out_dir=out, grower=chain_grower(p, gold=True),
                                  teacher=teacher, executor=executor),
                  "inputs_key": _sampling_inputs(p, task, library)}
        if rows is not None:  # Phase H's rows file: train.objective picks what to train on from its folder
            from hasp.train.objective import rows_for

            rows = rows_for(t, rows, rows.parent).path
        s = run_recipe(p, model=model, out_dir=out, train=t, rows=rows, **kw)
    run_id = track_training(p, t, s, track, data=rows if rows is not None else data, library=library)
    typer.echo(json.dumps({**s.brief(), "mlflow_run_id": run_id}, default=str))


def sft(model: ModelOpt = None,
        data: Annotated[Path, typer.Option("--data", help=(
            "Phase H's sft.jsonl; with train.objective B (AB) the skill author's sft_skill.jsonl beside it "
            "replaces (joins) it."))]
        = Path("outputs/epoch_0") / art.SFT,
        out: Annotated[Path, typer.Option("--out")] = Path("outputs/train"),
        params: ParamsOpt = None, preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """LoRA SFT of the policy on PF-corrected steps, weighted by A_t (E1 shape); writes adapter/ and merged/."""
    _train("sft", model, out, params, preset, track, rows=data)


def rs(model: ModelOpt = None, data: DataOpt = Path("outputs/data"), library: LibraryOpt = None,
       out: Annotated[Path, typer.Option("--out")] = Path("outputs/train_rs"), params: ParamsOpt = None,
       preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """Rejection sampling: sample k per training question (PFs active), filter, SFT; repeat from the new
    checkpoint. Writes round_<i>/ (rollout, rows, adapter, merged) and train_metrics.json."""
    _train("rs", model, out, params, preset, track, data=data, library=library)


def opd(model: ModelOpt = None, data: DataOpt = Path("outputs/data"), library: LibraryOpt = None,
        out: Annotated[Path, typer.Option("--out")] = Path("outputs/train_opd"),
        params: ParamsOpt = None, preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """On-policy distillation: train on the PF (or teacher) corrections at the states the checkpoint visits."""
    _train("opd", model, out, params, preset, track, data=data, library=library)


def dpo(model: ModelOpt = None,
        rows: Annotated[Path, typer.Option("--rows", help=(
            "Phase H's dpo.jsonl; with train.objective B (AB) the skill author's dpo_skill.jsonl beside it "
            "replaces (joins) it."))]
        = Path("outputs/epoch_0") / art.DPO,
        out: Annotated[Path, typer.Option("--out")] = Path("outputs/train_dpo"),
        params: ParamsOpt = None, preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """DPO (TRL DPOTrainer) on the preference rows: chosen = the PF-corrected action, rejected = the policy's."""
    _train("dpo", model, out, params, preset, track, rows=rows)


def grpo(model: ModelOpt = None, data: DataOpt = Path("outputs/data"), library: LibraryOpt = None,
         out: Annotated[Path, typer.Option("--out")] = Path("outputs/train_grpo"), params: ParamsOpt = None,
         preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """GRPO: G episodes per training question, advantage = reward - group mean, one on-policy update on the
    model's own replies per round. Writes round_<i>/ (rollout, rows, adapter, merged) and train_metrics.json."""
    _train("grpo", model, out, params, preset, track, data=data, library=library)


def sage(model: ModelOpt = None, data: DataOpt = Path("outputs/data"), library: LibraryOpt = None,
         out: Annotated[Path, typer.Option("--out")] = Path("outputs/train_sage"), params: ParamsOpt = None,
         preset: PresetOpt = None, track: TrackOpt = True) -> None:
    """SAGE: GRPO over chains of two same-template questions with sequential rollout (task 1, the policy's own
    skill from it, task 2 with that skill) and the skill-integrated reward."""
    _train("sage", model, out, params, preset, track, data=data, library=library)
