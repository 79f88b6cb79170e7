"""Prefect artifacts of an evolution epoch, shown on the flow run's Artifacts tab.

Per epoch: ``epoch-<i>-summary`` (markdown: the epoch told from its files, ``hasp.evolve.story``),
``epoch-<i>-decisions`` (a table: each candidate's cluster, Q_exec, review, val EM before / after,
decision and reason) and ``epoch-<i>-mlflow-run`` (a link to the run in the MLflow UI). They are
made in the flow body, not in a cached task, so a run served from the cache shows them too. An
artifact the API refuses is logged and counted, never a failed flow: the files and the MLflow run
hold the same facts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from hasp.evolve.story import decision_rows, epoch_story
from hasp.track.mlflow_run import run_ui_link

log = logging.getLogger(__name__)


def artifact_key(*parts: Any) -> str:
    """Prefect's key rule: lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", "-".join(map(str, parts)).lower())).strip("-")


def summary_markdown(epoch_dir: Path, epoch: int, eval_metrics: Mapping[str, Any] | None = None,
                     eval_dir: Path | None = None, link: tuple[str, str] | None = None) -> str:
    lines = epoch_story(epoch_dir, dict(eval_metrics) if eval_metrics else None, eval_dir)
    md = [f"# Evolution epoch {epoch}", "", f"Files: `{epoch_dir}`", ""]
    if link:
        md += [f"MLflow: [{link[0]}]({link[0]}) ({link[1]})", ""]
    return "\n".join(md + ["```text", *lines, "```", ""])


def publish_epoch(out_root: Path, epoch: int, *, run_id: str | None, eval_metrics: Mapping[str, Any] | None = None,
                  eval_dir: Path | None = None) -> dict[str, Any]:
    """Create the epoch's three artifacts; returns ``{"keys": [...], "failed": n}``."""
    ep_dir = Path(out_root) / f"epoch_{epoch}"
    keys: list[str] = []
    failed = 0
    link = None
    if run_id:
        try:
            link = run_ui_link(run_id)
        except Exception as e:  # noqa: BLE001 - the link is a convenience; the run exists either way
            log.warning("MLflow run %s: no UI link: %s", run_id, e)
    made = [
        (artifact_key("epoch", epoch, "summary"), lambda k: create_markdown_artifact(
            summary_markdown(ep_dir, epoch, eval_metrics, eval_dir, link), key=k,
            description=f"What evolution epoch {epoch} did, told from {ep_dir}")),
        (artifact_key("epoch", epoch, "decisions"), lambda k: create_table_artifact(
            decision_rows(ep_dir) or [{"name": "(no candidates)"}], key=k,
            description=f"Epoch {epoch}: candidates, their gates and the admission decision")),
    ]
    if link:
        made.append((artifact_key("epoch", epoch, "mlflow-run"), lambda k: create_link_artifact(
            link[0], link_text=f"MLflow run {run_id}", key=k, description=link[1])))
    for key, create in made:
        try:
            create(key)
            keys.append(key)
        except Exception as e:  # noqa: BLE001 - see the module docstring
            failed += 1
            log.warning("Prefect artifact %s not created: %s", key, e)
    return {"keys": keys, "failed": failed}
