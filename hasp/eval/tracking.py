"""Log an evaluation to MLflow: one parent run, one nested run per (dataset, variant) cell.

Every domain has this one run shape, so a search and a code evaluation are read the same way.
Nested runs share param and metric names (``em``, ``f1``, ``accuracy``, ``judge_acc``,
``fires.<skill>`` …), so the MLflow UI compares them directly; the parent holds what spans cells:
the comparison table (CSV + Markdown), ``metrics.json`` and the PF-trigger plot. Each episode
becomes a trace linked to its cell's run (``hasp.track.traces``). ``mlflow.active_run()`` is
thread-local, so all logging happens here, in the calling thread, after the episodes ran.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.eval.records import EpisodeRecord
from hasp.eval.report import to_markdown, write_csv
from hasp.eval.runner import CellResult, EvalResult
from hasp.track.mlflow_run import sandbox_tags, start_run
from hasp.track.plots import pf_trigger_plot
from hasp.track.traces import log_episode_trace

log = logging.getLogger(__name__)


def _metric_name(s: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", s)


def cell_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """Numeric summary values plus ``fires.<skill>`` and ``em_hops_<h>`` (with its interval and n);
    other nested dicts and strings are left out."""
    out = {_metric_name(k): float(v) for k, v in summary.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for skill, n in (summary.get("pf_fires") or {}).items():
        out[f"fires.{_metric_name(skill)}"] = float(n)
    for hops, m in (summary.get("em_by_hops") or {}).items():
        out[f"em_hops_{hops}"] = float(m["mean"])
        out[f"em_hops_{hops}_lo"], out[f"em_hops_{hops}_hi"] = (float(x) for x in m["ci95"])
        out[f"n_hops_{hops}"] = float(m["n"])
    return out


def log_eval_runs(result: EvalResult, *, experiment: str, run_name: str, params: Mapping[str, Any],
                  cell_params: Mapping[str, Mapping[str, Any]] | None = None, traces: bool = True,
                  project_dir: Path | None = None, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Returns ``{"parent": run_id, "children": {"<dataset>/<variant>": run_id}, "traces": n}``.

    ``params`` go on the parent and on every child (model, library hash, split …);
    ``cell_params[dataset]`` adds per-dataset params (kind, path) to that dataset's children."""
    base_tags = {"hasp.kind": "eval", "hasp.domain": result.domain,
                 **sandbox_tags(result.settings.get("sandbox_weaker") or ()), **(tags or {})}
    children: dict[str, str] = {}
    n_traces = 0
    with start_run(experiment, run_name, tags=base_tags, project_dir=project_dir) as mlflow:
        parent = mlflow.active_run().info.run_id
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        for cell in result.cells:
            rid, n = _log_cell(mlflow, cell, params, (cell_params or {}).get(cell.dataset, {}), base_tags, traces)
            children[f"{cell.dataset}/{cell.variant}"] = rid
            n_traces += n
        metrics = result.metrics()
        mlflow.log_metrics({f"{_metric_name(c.dataset)}.{_metric_name(c.variant)}.{k}": float(c.summary[k])
                            for c in result.cells for k in ("em", "f1", "judge_acc") if k in c.summary})
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            write_csv(metrics, tmp / "comparison.csv")
            (tmp / "comparison.md").write_text(to_markdown(metrics), encoding="utf-8")
            (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str), encoding="utf-8")
            pf_trigger_plot(metrics, tmp / "pf_triggers.png")
            for name in ("comparison.csv", "comparison.md", "metrics.json"):
                mlflow.log_artifact(str(tmp / name))
            mlflow.log_artifact(str(tmp / "pf_triggers.png"), artifact_path="plots")
    if n_traces:
        mlflow.flush_trace_async_logging()  # traces export in the background; make them visible now
    return {"parent": parent, "children": children, "traces": n_traces}


def trace_attributes(rec: EpisodeRecord) -> dict[str, Any]:
    """What an evaluated episode adds to its trace's root span beyond the trajectory."""
    attrs: dict[str, Any] = {"teacher_tokens": rec.teacher_prompt_tokens + rec.teacher_completion_tokens}
    if rec.judge is not None:
        attrs["judge_correct"] = rec.judge.correct
        attrs["judge_error"] = rec.judge.error
    return attrs


def _log_cell(mlflow: Any, cell: CellResult, params: Mapping[str, Any], extra: Mapping[str, Any],
              tags: Mapping[str, str], traces: bool) -> tuple[str, int]:
    with mlflow.start_run(run_name=f"{cell.dataset}/{cell.variant}", nested=True,
                          tags={**tags, "hasp.dataset": cell.dataset, "hasp.variant": cell.variant}) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in {**params, **extra, "dataset": cell.dataset,
                                                          "variant": cell.variant}.items()})
        mlflow.log_metrics(cell_metrics(cell.summary))
        n = 0
        if traces:
            for rec in cell.records:
                try:
                    log_episode_trace(mlflow, rec.traj, start_ns=rec.start_ns, dataset=cell.dataset,
                                      variant=cell.variant, attributes=trace_attributes(rec), error=bool(rec.error))
                    n += 1
                except Exception as e:  # noqa: BLE001 - a trace is a view; a failed one must not lose the metrics
                    log.warning("trace of %s/%s %s not logged: %s", cell.dataset, cell.variant, rec.traj.qid, e)
        return run.info.run_id, n
