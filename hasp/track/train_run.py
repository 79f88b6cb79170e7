"""One MLflow run for a training command (``hasp train sft|rs|opd|dpo``).

The grid and the evolution epochs log their training inside their own runs; a recipe started on its
own from the command line would otherwise leave its adapter and curves only on disk, where the MLflow
UI cannot compare it with anything. The run carries the same things a grid child does: the resolved
recipe knobs, per-step curves (round boundaries tagged), the final trainer metrics, per-round data
counts and the adapter with its base model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.config import Params, TrainParams
from hasp.provenance import Provenance, provenance as collect_provenance
from hasp.track.grid_report import curves
from hasp.track.mlflow_run import flatten, log_adapter, log_json_artifact, log_numeric, start_run


#: the run's copy of the summary, named as the file the training wrote
SUMMARY_ARTIFACT = "train_metrics.json"


def log_training(params: Params, train: TrainParams, summary: Mapping[str, Any], *,
                 run_name: str | None = None, provenance: Provenance | None = None) -> str:
    """Log one finished training (``summary``: the ``TrainSummary`` ``hasp.train.run.run_recipe``
    returns, dumped); returns the run id. ``hasp.experiment`` is set only when a preset chose the recipe.
    ``provenance`` names the start model and data (default: code, environment and params only)."""
    recipe = str(summary.get("recipe") or train.recipe)
    tags = {"hasp.recipe": recipe, "hasp.command": f"train {recipe}"}
    if train.preset:
        tags["hasp.experiment"] = train.preset
    prov = provenance if provenance is not None else collect_provenance(params=params)
    with start_run(params.tracking.experiment, run_name or f"train-{recipe}", tags=tags, provenance=prov) as mlflow:
        run_id = mlflow.active_run().info.run_id
        mlflow.log_params({k: str(v)[:500] for k, v in flatten(train.model_dump(mode="json"), "train.").items()})
        mlflow.log_param("start_model", str(summary.get("start_model", ""))[:500])
        points, _ = curves({"phases": [{"phase": 0, "train": summary}]})
        for step, m in points:
            mlflow.log_metrics(m, step=step)
        rounds = summary.get("rounds") or []
        if rounds:
            mlflow.set_tag("hasp.round_boundaries", ",".join(str(_first_step(points, r)) for r in range(len(rounds))))
            for i, r in enumerate(rounds):
                log_numeric(mlflow, {"data": r.get("data") or {}}, step=i)
        log_numeric(mlflow, {"final": summary.get("metrics") or {}})
        log_adapter(mlflow, Path(str(summary.get("adapter_dir") or "-")))
        log_json_artifact(mlflow, dict(summary), SUMMARY_ARTIFACT)
    return run_id


def _first_step(points: list[tuple[int, dict[str, float]]], round_index: int) -> int:
    """The first global step logged for round ``round_index`` (0 when that round logged nothing)."""
    return next((s for s, m in points if int(m.get("round", -1)) == round_index), 0)
