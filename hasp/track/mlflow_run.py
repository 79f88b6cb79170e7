"""Start/stop MLflow runs in one place and log the pipeline's results.

The store is a SQLite file inside the project (absolute URI; MLflow's file store
is deprecated). ``mlflow`` is imported lazily so ``hasp --help`` stays fast.

A new SQLite store is created whole or not at all (``ensure_store``): MLflow creates its tables
and runs its migrations in place, so a run killed meanwhile would leave a half-made database that
every later run fails on ("table … already exists").
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hasp.processes import pid_alive
from hasp.provenance import Provenance, provenance as collect_provenance


def tracking_uri(project_dir: Path | None = None) -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<project>/mlflow.db`` (absolute)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    root = (project_dir or Path.cwd()).resolve()
    return f"sqlite:///{root / 'mlflow.db'}"


def ensure_store(uri: str) -> None:
    """Create the SQLite file of ``uri`` (if it is one and does not exist) beside itself, migrate it
    there, and link it into place only when complete; a concurrent creator that won keeps its file."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri[len("sqlite:///"):])
    if path.exists() or not path.parent.is_dir():
        return
    _sweep_creating(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.pid{os.getpid()}-", suffix=".creating", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        tmp.unlink()  # sqlite creates it; MLflow must see a new database to set it up
        client = _mlflow().tracking.MlflowClient(tracking_uri=f"sqlite:///{tmp}")
        client.search_experiments()  # creates the tables and runs the migrations
        engine = getattr(getattr(client._tracking_client, "store", None), "engine", None)
        if engine is not None:
            engine.dispose()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
        for extra in (f"{tmp}-journal", f"{tmp}-wal", f"{tmp}-shm"):
            Path(extra).unlink(missing_ok=True)


def _sweep_creating(path: Path) -> None:
    """Half-made stores of creators that were killed (their pid is in the name)."""
    import re

    mine = re.compile(re.escape(f".{path.name}.pid") + r"(\d+)-")
    for f in path.parent.glob(f".{path.name}.pid*"):
        m = mine.match(f.name)
        if m and not pid_alive(int(m.group(1))):
            f.unlink(missing_ok=True)


def _mlflow():
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return mlflow


def provenance_tags(prov: Provenance | None = None) -> dict[str, str]:
    """The ``hasp.provenance.*`` tags of a run: ``prov``'s, or (None) the code and environment
    collected now. Every run HASP starts carries them (``start_run``)."""
    return (prov if prov is not None else collect_provenance()).tags()


@contextlib.contextmanager
def start_run(experiment: str, run_name: str, *, tags: Mapping[str, str] | None = None,
              project_dir: Path | None = None, start_time: float | None = None,
              provenance: Provenance | None = None) -> Iterator[Any]:
    """Context manager around one MLflow run; yields the ``mlflow`` module bound to it.

    ``start_time`` (seconds since the epoch) dates the run from when its work began: results logged
    after the work would otherwise show the logging time as the run's duration in the UI.
    ``provenance`` (the inputs the caller knows: model, data, library, params) becomes the run's
    ``hasp.provenance.*`` tags; without it the code and environment are collected here."""
    tags = {**provenance_tags(provenance), **(tags or {})}
    mlflow = _mlflow()
    uri = tracking_uri(project_dir)
    ensure_store(uri)
    mlflow.set_tracking_uri(uri)
    _create_beside_store(mlflow, uri, experiment)
    exp = mlflow.set_experiment(experiment)
    if start_time is None:
        with mlflow.start_run(run_name=run_name, tags=dict(tags or {})):
            yield mlflow
        return
    run = mlflow.MlflowClient().create_run(exp.experiment_id, start_time=int(start_time * 1000),
                                           tags=dict(tags or {}), run_name=run_name)
    with mlflow.start_run(run_id=run.info.run_id):
        yield mlflow


@contextlib.contextmanager
def dated_child_run(mlflow: Any, run_name: str, *, tags: Mapping[str, str] | None = None,
                    span: tuple[float, float] | None = None) -> Iterator[Any]:
    """A nested run under the active one; ``span`` = (start, end) in seconds since the epoch, the
    time its work took, so the UI shows that duration and not the seconds spent logging it."""
    if span is None:
        with mlflow.start_run(run_name=run_name, nested=True, tags=dict(tags or {})) as run:
            yield run
        return
    client = mlflow.MlflowClient()
    parent = mlflow.active_run()
    run = client.create_run(parent.info.experiment_id, start_time=int(span[0] * 1000), run_name=run_name,
                            tags={**dict(tags or {}), "mlflow.parentRunId": parent.info.run_id})
    with mlflow.start_run(run_id=run.info.run_id, nested=True) as active:
        yield active
    client.set_terminated(run.info.run_id, "FINISHED", end_time=int(span[1] * 1000))


def _create_beside_store(mlflow: Any, uri: str, experiment: str) -> None:
    """A new experiment of a SQLite store keeps its artifacts in ``mlruns/`` beside the database file.

    Why: MLflow's default artifact root for a database store is ``./mlruns`` of the process's working
    folder, so a store named by ``MLFLOW_TRACKING_URI`` elsewhere would scatter its artifacts into
    whichever folder a command ran from. Existing experiments keep their location."""
    if not uri.startswith("sqlite:///") or mlflow.get_experiment_by_name(experiment) is not None:
        return
    root = Path(uri[len("sqlite:///"):]).parent / "mlruns"
    try:
        mlflow.create_experiment(experiment, artifact_location=root.resolve().as_uri())
    except mlflow.exceptions.MlflowException:
        pass  # a concurrent creator won; its location stands


#: the tag naming the isolation layers missing in the sandboxes a run's generated PFs ran in
SANDBOX_WEAKER_TAG = "hasp.sandbox.weaker"


def sandbox_tags(weaker: Iterable[str]) -> dict[str, str]:
    """Tags recording the sandbox mode of a run: ``none``, or the missing layers (the weaker
    mode the user allowed with ``sandbox.allow_weaker``), so it is visible in the MLflow UI."""
    layers = sorted(set(weaker))
    return {SANDBOX_WEAKER_TAG: "; ".join(layers)[:4000] if layers else "none"}


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def log_numeric(mlflow: Any, metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Log every numeric leaf of a nested dict as a metric (dotted names)."""
    flat = {k.replace("/", "."): float(v) for k, v in flatten(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if flat:
        mlflow.log_metrics(flat, step=step)


def log_json_artifact(mlflow: Any, obj: Any, name: str, artifact_path: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
        mlflow.log_artifact(str(p), artifact_path=artifact_path)


def find_runs(experiment: str, project_dir: Path | None = None) -> list[Any]:
    """All runs of an experiment (newest first) — for tests and the CLI's `hasp runs`."""
    mlflow = _mlflow()
    uri = tracking_uri(project_dir)
    ensure_store(uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return []
    client = mlflow.tracking.MlflowClient()
    return list(client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"]))


#: where an adapter sits in its run's artifacts, and the tag holding its URI
ADAPTER_PATH = "adapter"
ADAPTER_TAG = "hasp.adapter"


def log_adapter(mlflow: Any, adapter_dir: Path) -> str | None:
    """Log a PEFT adapter folder (config, weights, tokenizer) under ``adapter/`` of the active run
    and tag the run with its URI (``runs:/<id>/adapter``) and base model; returns the URI, or None
    when there is no adapter. Artifacts, not a model flavor: the base is often a local folder the
    transformers flavor cannot name, and ``PeftModel.from_pretrained(base, <downloaded folder>)``
    or vLLM ``--lora-modules`` read the folder as it is."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        return None
    run_id = mlflow.active_run().info.run_id
    mlflow.log_artifacts(str(adapter_dir), artifact_path=ADAPTER_PATH)
    uri = f"runs:/{run_id}/{ADAPTER_PATH}"
    tags = {ADAPTER_TAG: uri}
    try:
        cfg = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
        tags[f"{ADAPTER_TAG}.base_model"] = str(cfg.get("base_model_name_or_path") or "")[:4000]
        tags[f"{ADAPTER_TAG}.rank"] = str(cfg.get("r", ""))
    except (OSError, ValueError):
        pass
    mlflow.set_tags(tags)
    return uri


#: where ``mlflow ui`` listens unless told otherwise
LOCAL_UI = "http://127.0.0.1:5000"


def ui_link(uri: str, experiment_id: str, run_id: str) -> tuple[str, str]:
    """(address of a run in the MLflow UI, how to open it). A tracking server (http) is the address
    itself; a local store needs ``mlflow ui`` started on it first, which the hint says."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}", f"run {run_id} on {uri}"
    return (f"{LOCAL_UI}/#/experiments/{experiment_id}/runs/{run_id}",
            f"run {run_id} in a local store: start the UI first with `mlflow ui --backend-store-uri {uri}`")


def run_ui_link(run_id: str, project_dir: Path | None = None) -> tuple[str, str]:
    """``ui_link`` of a run of the current tracking store (its experiment looked up there)."""
    uri = tracking_uri(project_dir)
    exp_id = _mlflow().tracking.MlflowClient(tracking_uri=uri).get_run(run_id).info.experiment_id
    return ui_link(uri, exp_id, run_id)
