"""Log one finished evolution epoch (its output folder) as one MLflow run.

Reading the phase outputs from disk, rather than logging from inside each phase,
lets the Prefect flow and ``dvc repro`` (separate processes per stage) produce the
same run, and a cached re-run log nothing twice.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.config import Params
from hasp.provenance import Provenance, provenance as collect_provenance, without_provenance
from hasp.track.mlflow_run import flatten, log_adapter, log_json_artifact, log_numeric, sandbox_tags, start_run
from hasp.track.traces import log_trajectory_file


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _eval_by_label(path: Path) -> dict[str, Any]:
    """An evaluation's ``metrics.json`` as ``{label: summary}``: the evaluation runner writes
    ``{dataset: {label: summary}}`` and an epoch evaluates one dataset, its generated benchmark."""
    return {label: m for cells in without_provenance(_load(path) or {}).values() for label, m in cells.items()}


def sandbox_weaker(epoch_dir: Path) -> list[str]:
    """Isolation layers missing in any sandbox the epoch ran generated code in (the weaker mode,
    recorded by its phase summaries and by ``validation.json``)."""
    found: set[str] = set()
    for f in epoch_dir.glob(art.SUMMARY_GLOB):
        s = _load(f)
        if isinstance(s, dict):
            found.update(w for w in s.get("sandbox_weaker") or () if isinstance(w, str))
    for r in _load(epoch_dir / art.VALIDATION) or ():
        if isinstance(r, dict):
            found.update(w for w in r.get("weaker") or () if isinstance(w, str))
    return sorted(found)


def stop_tag(epoch_dirs: list[Path]) -> dict[str, str]:
    """``hasp.budget.stopped``: the stop line of the first epoch the budget stopped (no tag when none was)."""
    for ep in epoch_dirs:
        line = (_load(ep / art.summary_file(art.BUDGET)) or {}).get("stopped")
        if line:
            return {"hasp.budget.stopped": f"{ep.name}: {line}"[:500]}
    return {}


def collect_epoch(out_root: Path, epoch: int = 0) -> dict[str, Any]:
    """Everything the run reports, gathered from the epoch's files (also printed by the CLI)."""
    ep = out_root / f"epoch_{epoch}"
    return {
        "phases": {art.summary_phase(f.name): _load(f) for f in sorted(ep.glob(art.SUMMARY_GLOB))},
        "eval": _eval_by_label(out_root / "eval" / "metrics.json"),
        "train": _load(out_root / "train" / "train_metrics.json") or {},
        "data_summary": _load(ep / art.DATA_SUMMARY) or {},
    }


def trajectory_files(epoch_dir: Path) -> list[tuple[Path, str, str]]:
    """(file, dataset, phase) of every episode an epoch ran: the Phase A rollout on the train
    split, the shared val baseline, one val run per gated candidate, the pinned anchors (library
    alone and per candidate), the library after the epoch."""
    files = [(epoch_dir / art.ROLLOUT, "train", "rollout"), (epoch_dir / art.VAL_BASELINE, "val", "val_baseline")]
    files += [(f, "val", "val_gate") for f in sorted((epoch_dir / art.VAL_RUNS).glob("*.jsonl"))
              if not f.name.endswith(".episodes.jsonl")]
    files += [(f, "anchors", "anchors") for f in sorted((epoch_dir / art.ANCHOR_RUNS).glob("*.jsonl"))
              if not f.name.endswith(".episodes.jsonl")]
    files.append((epoch_dir / art.VAL_AFTER, "val", "val_after"))
    return [f for f in files if f[0].is_file()]


def eval_files(eval_dir: Path) -> list[tuple[Path, str, str]]:
    """(file, dataset, phase) of an evaluation's trajectories: ``<dataset>/<label>.jsonl``."""
    return [(f, f.parent.name, "evaluate") for f in sorted(eval_dir.glob("*/*.jsonl"))
            if not f.name.endswith(".episodes.jsonl")]


def log_traces(mlflow: Any, files: list[tuple[Path, str, str]], limit: int) -> int:
    """Traces of every file on the active run (at most ``limit`` per file), flushed so they are
    visible when the run closes; returns how many."""
    n = 0
    for f, ds, phase in files:
        epoch = next((m.group(1) for d in f.parents if (m := re.fullmatch(r"epoch_(\d+)", d.name))), None)
        n += log_trajectory_file(mlflow, f, dataset=ds, phase=phase, limit=limit, logged_before=n,
                                 tags={"hasp.epoch": epoch} if epoch is not None else None)
    if n:
        mlflow.flush_trace_async_logging()
        mlflow.log_metric("traces", n)
    return n


def run_provenance(out_root: Path, params: Params, library: Path | None,
                   model: Path | str | None) -> Provenance:
    """Provenance of an evolution's run: its data (``<out>/data``, where the flows and ``dvc.yaml``
    write it), its library, params and policy model; inputs that are not on disk are left out."""
    data = out_root / "data"
    return collect_provenance(params=params, data_dir=data if data.is_dir() else None,
                              library=library if library is not None and library.is_dir() else None, model=model)


def _final_library(out_root: Path, epochs: list[int]) -> Path | None:
    """The library the last epoch carried on (its ``carry.json``), else that epoch's own folder."""
    if not epochs:
        return None
    last = out_root / f"epoch_{epochs[-1]}"
    return Path((_load(last / art.CARRY) or {}).get("library", last / art.LIBRARY))


def log_epoch(out_root: Path, params: Params, *, epoch: int = 0, run_name: str | None = None,
              project_dir: Path | None = None, tags: dict[str, str] | None = None, trace_eval: bool = True,
              model: Path | str | None = None, domain: str | None = None) -> str:
    """Create the epoch's MLflow run; return its run id.

    The run holds the epoch's episodes as traces (``tracking.traces_per_file`` per file; with
    ``trace_eval`` the test evaluation's too — off when ``hasp eval`` logged those in a run of its
    own) and the adapter the epoch trained, under ``adapter/``. ``model`` is the policy's weights
    (``hasp.llm.endpoints.served_model``), part of the run's provenance (``run_provenance``). ``domain``
    is the task's name for the ``hasp.domain`` tag (a user task's own; default ``evolve.domain``)."""
    info = collect_epoch(out_root, epoch)
    ep = out_root / f"epoch_{epoch}"
    trained = bool((info["train"] or {}).get("history"))
    all_tags = {"hasp.kind": "epoch", "hasp.epoch": str(epoch), "hasp.domain": domain or params.evolve.domain,
                **({"hasp.recipe": "sft"} if trained else {}),  # an epoch trains SFT on its rows, or nothing
                **({"hasp.experiment": params.train.preset} if params.train.preset else {}),
                **sandbox_tags(sandbox_weaker(ep)), **stop_tag([ep]), **(tags or {})}
    with start_run(params.tracking.experiment, run_name or f"epoch_{epoch}", tags=all_tags, project_dir=project_dir,
                   provenance=run_provenance(out_root, params, ep / art.LIBRARY, model)) as mlflow:
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
            p = ep / art.LIBRARY / name
            if p.exists():
                mlflow.log_artifact(str(p), artifact_path="library")
        for name in (art.CLUSTERS, art.CANDIDATES, art.VALIDATION, art.REVIEWS,
                     art.DATA_SUMMARY):
            if (ep / name).exists():
                mlflow.log_artifact(str(ep / name), artifact_path=f"epoch_{epoch}")
        snap = ep / art.LIBRARY / "snapshots" / f"epoch_{epoch}"
        if snap.exists():
            mlflow.log_artifacts(str(snap), artifact_path=f"library/snapshots/epoch_{epoch}")
        sample = ep / art.ROLLOUT
        if sample.exists():
            with open(sample, encoding="utf-8") as f:
                rows = [json.loads(line) for _, line in zip(range(3), f)]
            for r in rows:
                for s in r.get("steps", []):
                    s.pop("prompt_messages", None)  # the sample is for reading, keep it short
            log_json_artifact(mlflow, rows, "trajectory_sample.json", artifact_path=f"epoch_{epoch}")
        if info["eval"]:
            log_json_artifact(mlflow, info["eval"], "eval_metrics.json", artifact_path="eval")
        log_adapter(mlflow, Path(str((info["train"] or {}).get("adapter_dir") or out_root / "train" / "adapter")))
        files = trajectory_files(ep) + (eval_files(out_root / "eval") if trace_eval else [])
        log_traces(mlflow, files, params.tracking.traces_per_file)
        return run_id


# ----------------------------------------------------------------------------- multi-epoch evolution
HIST_BINS = [round(0.1 * i, 1) for i in range(11)]


def review_histogram(reviews: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per 0.1-wide bin of Q_skill and of each review dimension (App. I's score histogram)."""
    def counts(vals: list[float]) -> list[int]:
        c = [0] * 10
        for v in vals:
            c[min(9, max(0, int(float(v) * 10)))] += 1
        return c

    dims = ("q_skill", "q_concept", "q_trigger", "q_intervene", "q_exec", "q_val")
    return {"bins": HIST_BINS, **{d: counts([r[d] for r in reviews if d in r]) for d in dims}}


def epoch_metrics(out_root: Path, epoch: int) -> dict[str, float]:
    """The per-epoch numbers of an evolution run, from the epoch's summary files."""
    ep = out_root / f"epoch_{epoch}"
    s = {art.summary_phase(f.name): _load(f) or {} for f in ep.glob(art.SUMMARY_GLOB)}
    reviews = _load(ep / art.REVIEWS) or []
    q = [float(r["q_skill"]) for r in reviews]
    val_after = s.get("val_after") or {}
    m = {
        "proposed": s.get("propose", {}).get("proposed", 0),
        "exec_pass": s.get("validate", {}).get("exec_pass", 0),
        "review_pass": sum(1 for r in reviews if r.get("decision") == "ACCEPT"),
        "val_pass": s.get("gate", {}).get("val_pass", 0),
        "admitted": s.get("admit", {}).get("admitted", 0),
        "library_size": s.get("admit", {}).get("library_size", 0),
        "q_skill_mean": sum(q) / len(q) if q else 0.0,
        "q_skill_min": min(q, default=0.0),
        "q_skill_max": max(q, default=0.0),
        "failed": s.get("analyse", {}).get("failed", 0),
        "patterns": s.get("analyse", {}).get("patterns", 0),
        "llm_patterns": s.get("analyse", {}).get("llm_patterns", 0),
        "llm_dropped": s.get("analyse", {}).get("llm_dropped", 0),
        "clusters": s.get("analyse", {}).get("clusters", 0),
        "train_em": s.get("rollout", {}).get("em", 0.0),
        "rolled_back": 1.0 if (s.get("frontier") or {}).get("rolled_back_to") is not None else 0.0,
    }
    if "em" in val_after:
        m["val_em"], m["val_f1"] = val_after["em"], val_after.get("f1", 0.0)
    m.update(spend_metrics(s.get("budget") or {}))
    return {k: float(v) for k, v in m.items()}


def spend_metrics(budget: dict[str, Any]) -> dict[str, float]:
    """What the epoch spent (``summary_budget.json``, ``hasp.evolve.budget``): ``spend.<key>`` for the epoch
    and ``spend.<phase>.<key>`` per phase (tokens, prompt/completion tokens, calls, wall seconds, cost when
    priced), ``budget_stopped`` 1 when a limit stopped it, and the proposals asked for and written."""
    keys = ("tokens", "prompt_tokens", "completion_tokens", "calls", "wall_s", "cost")
    out: dict[str, float] = {}
    for name, spend in [("", budget.get("total") or {}), *((f"{n}.", s) for n, s in (budget.get("phases") or {}).items())]:
        out.update({f"spend.{name}{k}": float(spend[k]) for k in keys if isinstance(spend.get(k), (int, float))})
    if budget:
        out["budget_stopped"] = 1.0 if budget.get("stopped") else 0.0
    props = budget.get("proposals") or {}
    for k in ("asked", "proposed"):
        if isinstance(props.get(k), (int, float)):
            out[f"proposals_{k}"] = float(props[k])
    return out


def _histogram_png(hist: dict[str, Any], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    centers = [b + 0.05 for b in HIST_BINS[:-1]]
    for i, dim in enumerate(("q_skill", "q_concept", "q_trigger", "q_intervene", "q_val")):
        ax.bar([c - 0.04 + 0.016 * i for c in centers], hist[dim], width=0.016, label=dim)
    ax.set_xlabel("score")
    ax.set_ylabel("candidates")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def log_evolution(out_root: Path, params: Params, epochs: list[int], *, run_name: str | None = None,
                  project_dir: Path | None = None, tags: dict[str, str] | None = None,
                  final_eval: Path | None = None, model: Path | str | None = None,
                  domain: str | None = None) -> str:
    """One MLflow run for a multi-epoch evolution: per-epoch metrics with ``step=epoch``,
    a review-score histogram (json + png) per epoch, frontier.json, the final library history
    and (if given) the final test evaluation. Returns the run id. ``model`` and ``domain`` as for
    ``log_epoch``."""
    import tempfile

    e = params.evolve
    all_tags = {"hasp.kind": "evolution", "hasp.mode": e.mode, "hasp.filtering": e.filtering,
                "hasp.domain": domain or params.evolve.domain, "hasp.epochs": str(len(epochs)),
                **sandbox_tags(w for i in epochs for w in sandbox_weaker(out_root / f"epoch_{i}")),
                **stop_tag([out_root / f"epoch_{i}" for i in epochs]), **(tags or {})}
    with start_run(params.tracking.experiment, run_name or f"evolve-{e.mode}-{e.filtering}-{len(epochs)}ep",
                   tags=all_tags, project_dir=project_dir,
                   provenance=run_provenance(out_root, params, _final_library(out_root, epochs), model)) as mlflow:
        run_id = mlflow.active_run().info.run_id
        mlflow.log_params({k: str(v)[:500] for k, v in flatten(params.model_dump(mode="json")).items()})
        for i in epochs:
            mlflow.log_metrics(epoch_metrics(out_root, i), step=i)
            ep = out_root / f"epoch_{i}"
            hist = review_histogram(_load(ep / art.REVIEWS) or [])
            log_json_artifact(mlflow, hist, "review_histogram.json", artifact_path=f"epoch_{i}")
            with tempfile.TemporaryDirectory() as d:
                png = Path(d) / "review_histogram.png"
                if _histogram_png(hist, png, f"epoch {i}: review scores"):
                    mlflow.log_artifact(str(png), artifact_path=f"epoch_{i}")
            for name in (art.CLUSTERS, art.CANDIDATES, art.REVIEWS, art.GATE, art.ADMISSION,
                         art.SUMMARIES, art.CARRY):
                if (ep / name).exists():
                    mlflow.log_artifact(str(ep / name), artifact_path=f"epoch_{i}")
        if (out_root / "frontier.json").exists():
            mlflow.log_artifact(str(out_root / "frontier.json"))
        final_library = _final_library(out_root, epochs)
        if final_library is not None:
            hist_path = final_library / "library_history.json"
            if hist_path.exists():
                mlflow.log_artifact(str(hist_path), artifact_path="library")
        if final_eval is not None and final_eval.exists():
            for label, m in _eval_by_label(final_eval).items():
                log_numeric(mlflow, {f"final.{label}": {k: m[k] for k in ("em", "f1", "mean_steps",
                                     "pf_fires_total", "library_size") if k in m}})
            mlflow.log_artifact(str(final_eval), artifact_path="eval")
        files = [f for i in epochs for f in trajectory_files(out_root / f"epoch_{i}")]
        if final_eval is not None:
            files += eval_files(final_eval.parent)
        log_traces(mlflow, files, params.tracking.traces_per_file)
        return run_id
