"""Log one finished evolution epoch (its output folder) as one MLflow run.

Reading the phase outputs from disk, rather than logging from inside each phase,
lets the Prefect flow and ``dvc repro`` (separate processes per stage) produce the
same run, and a cached re-run log nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hasp.config import Params
from hasp.track.mlflow_run import flatten, log_json_artifact, log_numeric, start_run


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def collect_epoch(out_root: Path, epoch: int = 0) -> dict[str, Any]:
    """Everything the run reports, gathered from the epoch's files (also printed by the CLI)."""
    ep = out_root / f"epoch_{epoch}"
    return {
        "phases": {f.stem.removeprefix("summary_"): _load(f) for f in sorted(ep.glob("summary_*.json"))},
        "eval": _load(out_root / "eval" / "metrics.json") or {},
        "train": _load(out_root / "train" / "train_metrics.json") or {},
        "data_summary": _load(ep / "data_summary.json") or {},
    }


def log_epoch(out_root: Path, params: Params, *, epoch: int = 0, run_name: str | None = None,
              project_dir: Path | None = None, tags: dict[str, str] | None = None) -> str:
    """Create the epoch's MLflow run; return its run id."""
    info = collect_epoch(out_root, epoch)
    ep = out_root / f"epoch_{epoch}"
    all_tags = {"hasp.experiment": "E1", "hasp.epoch": str(epoch), "hasp.domain": "search", **(tags or {})}
    with start_run(params.tracking.experiment, run_name or f"epoch_{epoch}", tags=all_tags,
                   project_dir=project_dir) as mlflow:
        run_id = mlflow.active_run().info.run_id
        mlflow.log_params({k: str(v)[:500] for k, v in flatten(params.model_dump(mode="json")).items()})
        for label, m in info["eval"].items():
            log_numeric(mlflow, {f"eval.{label}": {k: m[k] for k in ("em", "f1", "mean_steps",
                                 "answered_rate", "parse_error_rate", "pf_fires_total",
                                 "modified_steps", "inject_steps", "completion_tokens") if k in m}})
            for skill, n in (m.get("pf_fires") or {}).items():
                mlflow.log_metric(f"eval.{label}.fires.{skill}", n)
        ph = info["phases"]
        log_numeric(mlflow, {"phase": {k: v for k, v in ph.items() if isinstance(v, dict)}})
        for i, row in enumerate((info["train"] or {}).get("history", [])):
            step = int(row.get("step", i))
            log_numeric(mlflow, {f"train.{k}": v for k, v in row.items() if k != "step"}, step=step)
        log_numeric(mlflow, {"train": (info["train"] or {}).get("metrics", {})})
        log_numeric(mlflow, {"data": info["data_summary"]})
        for name in ("library_history.json",):
            p = ep / "library" / name
            if p.exists():
                mlflow.log_artifact(str(p), artifact_path="library")
        for name in ("clusters.json", "candidates.json", "validation.json", "reviews.json",
                     "data_summary.json"):
            if (ep / name).exists():
                mlflow.log_artifact(str(ep / name), artifact_path=f"epoch_{epoch}")
        snap = ep / "library" / "snapshots" / f"epoch_{epoch}"
        if snap.exists():
            mlflow.log_artifacts(str(snap), artifact_path=f"library/snapshots/epoch_{epoch}")
        sample = ep / "rollout.jsonl"
        if sample.exists():
            with open(sample, encoding="utf-8") as f:
                rows = [json.loads(line) for _, line in zip(range(3), f)]
            for r in rows:
                for s in r.get("steps", []):
                    s.pop("prompt_messages", None)  # the sample is for reading, keep it short
            log_json_artifact(mlflow, rows, "trajectory_sample.json", artifact_path=f"epoch_{epoch}")
        if info["eval"]:
            log_json_artifact(mlflow, info["eval"], "eval_metrics.json", artifact_path="eval")
        return run_id
