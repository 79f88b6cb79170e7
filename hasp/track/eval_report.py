"""Log a single-step domain evaluation (math / code: ``{variant: summary}``) as one MLflow run.

Metrics per variant (``<variant>.<name>``): accuracy, em, pass_at_1 (code), answered/parse-error
rates, PF fires in total and per skill (``<variant>.fires.<skill_id>``), action-level
(MODIFY_ACTION) vs context-level (INJECT_CONTEXT) fire counts and shares, revision rate and
first-answer accuracy, prompt/completion tokens, wall time. ``metrics.json`` (the whole result
dict) is an artifact; with ``out_dir`` a short trajectory sample per variant is logged as well.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.track.mlflow_run import flatten, log_json_artifact, log_numeric, start_run

#: summary keys logged as metrics (when present and numeric); renamed where MLflow forbids a character
METRIC_KEYS: dict[str, str] = {
    "accuracy": "accuracy", "em": "em", "f1": "f1", "pass@1": "pass_at_1", "n": "n",
    "answered_rate": "answered_rate", "parse_error_rate": "parse_error_rate", "mean_steps": "mean_steps",
    "pf_fires_total": "pf_fires_total", "pf_action_fires": "pf_action_fires",
    "pf_context_fires": "pf_context_fires", "pf_action_share": "pf_action_share",
    "pf_context_share": "pf_context_share", "episodes_with_fires": "episodes_with_fires",
    "modified_steps": "modified_steps", "inject_steps": "inject_steps", "pf_errors": "pf_errors",
    "revised_rate": "revised_rate", "first_answer_accuracy": "first_answer_accuracy",
    "revision_fixed": "revision_fixed", "revision_broke": "revision_broke",
    "prompt_tokens": "prompt_tokens", "completion_tokens": "completion_tokens",
    "wall_s": "wall_s", "wall_s_sum": "episode_wall_s_sum", "library_size": "library_size",
}
_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def _name(s: str) -> str:
    return _BAD.sub("_", str(s))


def eval_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """The flat metric dict ``log_eval`` logs (also handy for printing)."""
    out: dict[str, float] = {}
    for variant, summary in results.items():
        if not isinstance(summary, Mapping):
            continue
        v = _name(variant)
        for key, metric in METRIC_KEYS.items():
            val = summary.get(key)
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                out[f"{v}.{metric}"] = float(val)
        for skill, n in (summary.get("pf_fires") or {}).items():
            out[f"{v}.fires.{_name(skill)}"] = float(n)
    return out


def log_eval(results: Mapping[str, Any], *, experiment: str, run_name: str, params: Mapping[str, Any] | None = None,
             tags: Mapping[str, str] | None = None, project_dir: Path | None = None,
             out_dir: Path | None = None, sample: int = 3) -> str:
    """One MLflow run for ``{variant: summary}``; returns the run id.

    ``params`` is flattened (dotted keys, values cut to 500 characters). ``out_dir`` (the folder
    ``evaluate_domain`` wrote) adds its ``metrics.json`` as is and the first ``sample`` trajectories
    of each ``<variant>.jsonl`` (without prompt messages) as ``trajectories/<variant>_sample.json``.
    """
    with start_run(experiment, run_name, tags={k: str(v) for k, v in (tags or {}).items()},
                   project_dir=project_dir) as mlflow:
        run_id = mlflow.active_run().info.run_id
        if params:
            mlflow.log_params({k[:250]: str(v)[:500] for k, v in flatten(dict(params)).items()})
        log_numeric(mlflow, eval_metrics(results))
        metrics_file = Path(out_dir) / "metrics.json" if out_dir is not None else None
        if metrics_file is not None and metrics_file.exists():
            mlflow.log_artifact(str(metrics_file))
        else:
            log_json_artifact(mlflow, dict(results), "metrics.json")
        if out_dir is not None and sample > 0:
            for variant in results:
                p = Path(out_dir) / f"{variant}.jsonl"
                if not p.exists():
                    continue
                with open(p, encoding="utf-8") as f:
                    rows = [json.loads(line) for _, line in zip(range(sample), f) if line.strip()]
                for r in rows:
                    for s in r.get("steps", []):
                        s.pop("prompt_messages", None)
                log_json_artifact(mlflow, rows, f"{_name(variant)}_sample.json", artifact_path="trajectories")
        return run_id
