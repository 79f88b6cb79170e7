"""One evaluated episode as one MLflow trace: root span, a span per step, PF events as spans.

Traces are written after the episode, from its record, not live: the agent loop stays free of
tracing code and the trace is the same whichever thread ran the episode. Timestamps are real:
the root starts at the episode's wall-clock start, and each step, LLM call, PF dispatch and tool
call is laid out from the durations the loop measured (``step_s``, ``llm_s``, ``dispatch_s``).
The loop does not time individual PFs, so each PF-event span covers the dispatch that ran it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.records import StepRecord, Trajectory

log = logging.getLogger(__name__)

_TEXT = 2000  # characters of prompts / observations kept on a span


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT else text[:_TEXT] + "…"


def log_episode_trace(mlflow: Any, t: Trajectory, *, start_ns: int, dataset: str, variant: str,
                      attributes: Mapping[str, Any] | None = None, error: bool = False,
                      tags: Mapping[str, str] | None = None) -> str:
    """Create the trace (linked to the active run, if any); return its trace id.

    ``attributes`` add to the root span what the caller knows beyond the trajectory (teacher
    tokens, a judge verdict); ``error`` marks the root span as failed; ``tags`` add to the trace's
    tags (``hasp.phase`` for an evolution episode), so the MLflow UI filters on them."""
    start = start_ns
    attrs = {"qid": t.qid, "dataset": dataset, "variant": variant, "em": t.em, "f1": t.f1,
             "terminated": t.terminated, "n_steps": len(t.steps), "pf_fires": len(t.fired_skills()),
             "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens, **(attributes or {})}
    root = mlflow.start_span_no_context(
        f"episode {t.qid}", span_type="AGENT", inputs={"question": t.question, "answers": t.answers},
        attributes=attrs, start_time_ns=start,
        tags={"hasp.dataset": dataset, "hasp.variant": variant, "hasp.qid": t.qid, **(tags or {})})
    cursor = start
    for step in t.steps:
        cursor = _step_spans(mlflow, root, step, cursor)
    end = max(cursor, start + _ns(t.wall_s))
    root.end(outputs={"prediction": t.prediction, "em": t.em, "f1": t.f1},
             status="ERROR" if error else "OK", end_time_ns=end)
    return str(root.trace_id)


def _step_spans(mlflow: Any, root: Any, step: StepRecord, start: int) -> int:
    """Spans of one step starting at ``start``; returns the step's end time."""
    end = start + _ns(step.step_s)
    a = step.audit
    attrs: dict[str, Any] = {"index": step.index}
    if step.parse_error:
        attrs["parse_error"] = step.parse_error
    if a is not None:
        attrs.update({"action": a.a_final.render(), "proposed": a.a_orig.render(),
                      "modified": a.was_modified, "mode": a.mode})
    span = mlflow.start_span_no_context(f"step {step.index}", span_type="CHAIN", parent_span=root,
                                        attributes=attrs, start_time_ns=start)
    llm_end = min(end, start + _ns(step.llm_s))
    last = step.prompt_messages[-1]["content"] if step.prompt_messages else ""
    llm = mlflow.start_span_no_context("policy", span_type="CHAT_MODEL", parent_span=span,
                                       inputs={"last_message": _cut(last)}, start_time_ns=start)
    llm.end(outputs={"text": _cut(step.raw_output)}, end_time_ns=llm_end)
    if a is not None:
        d_end = min(end, llm_end + _ns(a.dispatch_s))
        disp = mlflow.start_span_no_context("pf_dispatch", span_type="CHAIN", parent_span=span,
                                            inputs={"action": a.a_orig.render()},
                                            attributes={"mode": a.mode, "n_fired": len(a.fired),
                                                        "errors": list(a.errors)},
                                            start_time_ns=llm_end)
        for f in a.fired:
            ev = mlflow.start_span_no_context(
                f"pf:{f.get('skill_id', '?')}", span_type="PF_EVENT", parent_span=disp, start_time_ns=llm_end,
                attributes={"skill_id": str(f.get("skill_id", "")), "type": str(f.get("type", "")),
                            "reason": str(f.get("reason", "")), "applied": bool(f.get("applied", True))})
            ev.end(end_time_ns=d_end)
        disp.end(outputs={"action": a.a_final.render(), "context": list(a.context)}, end_time_ns=d_end)
        tool = mlflow.start_span_no_context(a.a_final.type.lower(), span_type="TOOL", parent_span=span,
                                            inputs={"arg": a.a_final.arg}, attributes=dict(a.feedback),
                                            start_time_ns=d_end)
        tool.end(outputs={"observation": _cut(step.observation)}, end_time_ns=end)
    span.end(outputs={"observation": _cut(step.observation)}, end_time_ns=end)
    return end


def _start_times(path: Path) -> dict[str, int]:
    """``{qid: start_ns}`` from the runner's ``<label>.episodes.jsonl`` beside ``<label>.jsonl``."""
    side = path.with_name(path.stem + ".episodes.jsonl")
    out: dict[str, int] = {}
    if side.is_file():
        for line in side.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                out[str(d["qid"])] = int(d["start_ns"])
            except (ValueError, KeyError, TypeError):
                continue
    return out


def log_trajectory_file(mlflow: Any, path: Path, *, dataset: str, phase: str, limit: int,
                        tags: Mapping[str, str] | None = None, logged_before: int = 0) -> int:
    """One trace per episode of a trajectory file (a rollout, a val run, an evaluation), at most
    ``limit``, tagged ``hasp.phase`` (plus ``tags``); returns how many were logged.

    MLflow's queue is drained every ``FLUSH_EVERY`` traces counted from ``logged_before`` (the traces
    the caller logged from earlier files of the same burst), not at the end of each file: a drain
    waits up to a second for MLflow's consumer thread, which was most of an epoch's tracking time
    with a few traces per file. The caller flushes once when its last file is logged.

    Start times come from the runner's episodes file when there is one; otherwise each episode is
    anchored to end when the file was written (its durations stay the measured ones) and the root
    span says so (``start_estimated``). An unreadable line or a trace that fails is logged and
    skipped: traces are a view of the files, never a reason to lose the run."""
    if limit <= 0 or not path.is_file():
        return 0
    starts = _start_times(path)
    written_ns = path.stat().st_mtime_ns
    n = 0
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if n >= limit:
                break
            if not line.strip():
                continue
            try:
                t = Trajectory.from_dict(json.loads(line))
            except (ValueError, TypeError, KeyError) as e:
                log.warning("%s:%d: not a trajectory, no trace: %s", path, i, e)
                continue
            start = starts.get(t.qid)
            attrs = {"phase": phase, "start_estimated": start is None}
            try:
                log_episode_trace(mlflow, t, start_ns=start if start is not None else written_ns - _ns(t.wall_s),
                                  dataset=dataset, variant=t.variant, attributes=attrs,
                                  error=t.terminated == "error", tags={"hasp.phase": phase, **(tags or {})})
                n += 1
                if (logged_before + n) % FLUSH_EVERY == 0:
                    _drain(mlflow)
            except Exception as e:  # noqa: BLE001 - a trace is a view; a failed one must not lose the run
                log.warning("trace of %s %s not logged: %s", path, t.qid, e)
    return n


#: traces logged between two drains of MLflow's span queue (an episode is ~5-40 spans)
FLUSH_EVERY = 32


def _drain(mlflow: Any) -> None:
    """Wait until MLflow has exported the spans queued so far. Why: its exporter takes spans through a
    bounded queue (OpenTelemetry's batch processor, 2048 spans) and drops what does not fit ("Queue
    full, dropping Span", seen on a loaded 2-core machine logging an evaluation's 150 episodes in one
    burst); draining every ``FLUSH_EVERY`` traces keeps the queue well under that bound."""
    flush = getattr(mlflow, "flush_trace_async_logging", None)
    if flush is None:
        return
    try:
        flush()
    except Exception as e:  # noqa: BLE001 - a trace is a view; a failed flush must not lose the run
        log.warning("MLflow trace export not drained: %s", e)
