"""Log an evaluation to MLflow: one parent run, one nested run per (dataset, variant) cell.

Every domain has this one run shape, so a search and a code evaluation are read the same way.
Nested runs share param and metric names (``em``, ``f1``, ``accuracy``, ``judge_acc``,
``fires.<skill>`` …), so the MLflow UI compares them directly; the parent holds what spans cells:
the comparison table (CSV + Markdown), ``metrics.json`` and the PF-trigger plot. Each episode
becomes a trace linked to its cell's run (``hasp.track.traces``).

``eval_run`` opens the parent before the first cell runs and logs each cell as soon as it
finishes (the runner's ``on_cell`` callback), so a later cell that fails, or a killed process,
cannot take the finished cells' runs with it. ``mlflow.active_run()`` is thread-local, so all
logging happens in the thread that runs the evaluation, between cells, never in episode workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hasp.episode.records import EpisodeRecord
from hasp.eval.ceiling import CEILING_KEY, VIA_REWRITE_KEY
from hasp.eval.report import to_markdown, write_csv
from hasp.eval.runner import CellResult, EvalResult
from hasp.provenance import Provenance, provenance as collect_provenance
from hasp.track.mlflow_run import sandbox_tags, start_run
from hasp.track.plots import pf_trigger_plot
from hasp.track.traces import log_episode_trace

log = logging.getLogger(__name__)


def _metric_name(s: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", s)


def cell_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """Numeric summary values plus ``fires.<skill>``, ``em_hops_<h>`` and ``em_template_<seen|unseen>``
    (each with its interval and n), the
    dataset's extractor ceiling (``extractor_ceiling_em`` with its interval and n) and the correct
    answers a vocabulary rewrite wrote; other nested dicts and strings are left out."""
    out = {_metric_name(k): float(v) for k, v in summary.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for skill, n in (summary.get("pf_fires") or {}).items():
        out[f"fires.{_metric_name(skill)}"] = float(n)
    for key, prefix in (("em_by_hops", "hops"), ("em_by_template", "template")):
        for group, m in (summary.get(key) or {}).items():
            out[f"em_{prefix}_{group}"] = float(m["mean"])
            out[f"em_{prefix}_{group}_lo"], out[f"em_{prefix}_{group}_hi"] = (float(x) for x in m["ci95"])
            out[f"n_{prefix}_{group}"] = float(m["n"])
    ceiling = summary.get(CEILING_KEY) or {}
    if ceiling.get("n"):
        out["extractor_ceiling_em"], out["extractor_ceiling_n"] = float(ceiling["em"]), float(ceiling["n"])
        out["extractor_ceiling_lo"], out["extractor_ceiling_hi"] = (float(x) for x in ceiling["em_ci95"])
    via = summary.get(VIA_REWRITE_KEY)
    if via:
        out[VIA_REWRITE_KEY] = float(via["k"])
    return out


class EvalRunLog:
    """The open parent run of one evaluation: ``log_cell`` adds a finished cell as a nested run,
    ``finish`` adds what spans cells (comparison table, plot, per-cell headline metrics)."""

    def __init__(self, mlflow: Any, params: Mapping[str, Any], cell_params: Mapping[str, Mapping[str, Any]],
                 tags: Mapping[str, str], traces: bool) -> None:
        self.mlflow, self.params, self.cell_params, self.tags, self.traces = mlflow, params, cell_params, tags, traces
        self.parent: str = mlflow.active_run().info.run_id
        self.children: dict[str, str] = {}
        self.n_traces = 0

    def log_cell(self, cell: CellResult) -> None:
        rid, n = _log_cell(self.mlflow, cell, self.params, self.cell_params.get(cell.dataset, {}), self.tags,
                           self.traces)
        self.children[f"{cell.dataset}/{cell.variant}"] = rid
        self.n_traces += n

    def finish(self, result: EvalResult, params: Mapping[str, Any] | None = None) -> None:
        """Parent-level outputs of the whole evaluation; ``params`` known only at the end go on the parent."""
        mlflow = self.mlflow
        mlflow.set_tags(sandbox_tags(result.settings.get("sandbox_weaker") or ()))
        if params:
            mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
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

    def ids(self) -> dict[str, Any]:
        return {"parent": self.parent, "children": dict(self.children), "traces": self.n_traces}


@contextlib.contextmanager
def eval_run(*, experiment: str, run_name: str, domain: str, params: Mapping[str, Any],
             cell_params: Mapping[str, Mapping[str, Any]] | None = None, traces: bool = True,
             project_dir: Path | None = None, tags: Mapping[str, str] | None = None,
             provenance: Provenance | None = None) -> Iterator[EvalRunLog]:
    """The parent run of an evaluation, open while its cells run; see the module docstring.

    ``params`` go on the parent and on every child (model, library hash, split …);
    ``cell_params[dataset]`` adds per-dataset params (kind, path) to that dataset's children. The
    ``provenance`` tags go on both too (collected here when not given). A block that raises leaves
    the parent marked FAILED with the cells logged so far."""
    prov = provenance if provenance is not None else collect_provenance()
    base_tags = {**prov.tags(), "hasp.kind": "eval", "hasp.domain": domain, **(tags or {})}
    log_ = None
    try:
        with start_run(experiment, run_name, tags=base_tags, project_dir=project_dir, provenance=prov) as mlflow:
            mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
            log_ = EvalRunLog(mlflow, params, cell_params or {}, base_tags, traces)
            yield log_
    finally:
        if log_ is not None and log_.n_traces:
            log_.mlflow.flush_trace_async_logging()  # traces export in the background; make them visible now


def log_eval_runs(result: EvalResult, *, experiment: str, run_name: str, params: Mapping[str, Any],
                  cell_params: Mapping[str, Mapping[str, Any]] | None = None, traces: bool = True,
                  project_dir: Path | None = None, tags: Mapping[str, str] | None = None,
                  provenance: Provenance | None = None) -> dict[str, Any]:
    """Log a finished evaluation at once. Returns ``{"parent": run_id, "children":
    {"<dataset>/<variant>": run_id}, "traces": n}``."""
    with eval_run(experiment=experiment, run_name=run_name, domain=result.domain, params=params,
                  cell_params=cell_params, traces=traces, project_dir=project_dir, tags=tags,
                  provenance=provenance) as run:
        for cell in result.cells:
            run.log_cell(cell)
        run.finish(result)
    return run.ids()


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
                          tags={**tags, **sandbox_tags(cell.summary.get("sandbox_weaker") or ()),
                                "hasp.dataset": cell.dataset, "hasp.variant": cell.variant}) as run:
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
