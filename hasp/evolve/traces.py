"""Logged traces as Phase A's input: evolve from trajectories a run already produced.

Why: rolling the policy out is the most expensive phase, and a deployed agent's logs already hold the
episodes Phase B needs. ``read_traces`` reads a file or a folder of them and ``phase_a_from_traces``
writes Phase A's ``rollout.jsonl`` from them, so Phases B-H run on logged traces unchanged.

Accepted rows (one JSON object a line, ``*.jsonl``; a folder is read recursively, in name order):

- HASP's own records: a trajectory row of ``hasp eval`` (``<dataset>/<label>.jsonl``) or of a
  rollout (``rollout.jsonl``), and an evaluation journal's rows (``<label>.journal.jsonl``: a header
  line, then ``{"item", "record": {"traj": ...}}``). ``*.episodes.jsonl`` (the runner's per-episode
  extras, no steps) are skipped.
- HASP episode traces in MLflow: the source ``mlflow:<experiment name or id>`` (``mlflow_rows``).
- Chat logs in the OpenAI message format: ``{"messages": [...]}`` with optional ``question``,
  ``answers`` and ``id``, mapped by ``chat_to_trajectory`` (see its doc and docs/traces.md).

A bad row never stops the read: it is counted by reason and logged as one line naming file, line and
field (``BadRow``), and the rest are read. Reasons: ``truncated_json`` (a line that is not JSON, e.g. cut
off by a killed writer), ``no_audit`` (a HASP trajectory with no steps, or with a step that has neither an
audit record nor a parse error, the answer-only turn after the step budget excepted), ``not_trajectory`` (a HASP row that does not load),
``unmappable`` (a chat row the adapter cannot map), ``unknown_row`` (none of the formats).

``evolve.traces.gold`` false drops the gold answers the traces carry: Phase B then finds every failure
with the label-free signals (``hasp.evolve.trace_signals``).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.config import Params, TracesParams
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

log = logging.getLogger(__name__)

#: files of a ``hasp eval`` output folder that hold no trajectories
SKIPPED_SUFFIXES = (".episodes.jsonl",)
#: the variant label of a trajectory read from a chat log
CHAT_VARIANT = "chat_log"
#: bad rows the summary names one by one (all are counted and logged)
NAMED_BAD = 20


class TraceFormatError(ValueError):
    """A source that cannot be read at all (missing, or no trace file in it)."""


@dataclass
class BadRow:
    """A row that was not read, and why: one log line names file, line and field."""

    file: str
    line: int
    field: str
    reason: str  # truncated_json | no_audit | not_trajectory | unmappable | unknown_row
    message: str

    def line_text(self) -> str:
        return f"{self.file}:{self.line}: field {self.field}: {self.reason}: {self.message}"


@dataclass
class TraceRead:
    """What ``read_traces`` read: the trajectories, the bad rows, and counts for the summary."""

    trajs: list[Trajectory] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    formats: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0

    def summary(self) -> dict[str, Any]:
        return {"n_read": len(self.trajs), "n_bad": len(self.bad),
                "bad_by_reason": dict(sorted(Counter(b.reason for b in self.bad).items())),
                "n_with_gold": sum(1 for t in self.trajs if any(a.strip() for a in t.answers)),
                "formats": dict(sorted(self.formats.items())), "duplicates": self.duplicates,
                "episode_errors": sum(1 for t in self.trajs if t.terminated == "error"),
                "files": self.files, "skipped_files": self.skipped_files,
                "bad": [b.line_text() for b in self.bad[:NAMED_BAD]]}


class _Bad(Exception):
    def __init__(self, reason: str, fld: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.field, self.message = reason, fld, message


# ----------------------------------------------------------------------------- files
def trace_files(source: Path) -> tuple[list[Path], list[Path]]:
    """(files to read, files skipped) of a source file or folder."""
    source = Path(source)
    if source.is_file():
        return [source], []
    if not source.is_dir():
        raise TraceFormatError(f"{source}: no such trace file or folder")
    found = sorted(p for p in source.rglob("*.jsonl") if p.is_file())
    skipped = [p for p in found if p.name.endswith(SKIPPED_SUFFIXES)]
    files = [p for p in found if p not in skipped]
    if not files:
        raise TraceFormatError(f"{source}: no *.jsonl trace file under it")
    return files, skipped


def check_source(source: Path | str) -> None:
    """Raise ``TraceFormatError`` (one line) when ``source`` cannot be read at all."""
    if str(source).startswith(MLFLOW_PREFIX):
        _experiment(str(source))
    else:
        trace_files(Path(source))


def source_key(source: Path | str) -> str:
    """The content key of a trace source (Phase A's cache key holds it): the files' bytes, or the ids,
    states and times of an MLflow experiment's traces."""
    from hasp.fingerprint import content_hash, key_of

    if not str(source).startswith(MLFLOW_PREFIX):
        return content_hash(Path(source))
    import mlflow

    infos = mlflow.search_traces(locations=[_experiment(str(source))], return_type="list", include_spans=False)
    return key_of(str(source), sorted((str(t.info.trace_id), str(t.info.state), t.info.request_time,
                                       t.info.execution_duration) for t in infos))


def _rows(path: Path) -> Iterator[tuple[int, Any | _Bad]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                yield n, _Bad("truncated_json", "(line)", f"not JSON: {e.msg.removesuffix(' at')} (character {e.pos}); "
                                                         f"a line of {len(line.rstrip())} characters")


def read_traces(source: Path | str, cfg: TracesParams) -> TraceRead:
    """Every trajectory of ``source`` (see the module doc); bad rows are counted and logged. A source
    ``mlflow:<experiment name or id>`` reads that experiment's HASP episode traces (``mlflow_rows``)."""
    if str(source).startswith(MLFLOW_PREFIX):
        out = TraceRead(files=[str(source)])
        return _collect(out, [(str(source), mlflow_rows(str(source)))], cfg)
    files, skipped = trace_files(Path(source))
    out = TraceRead(files=[str(p) for p in files], skipped_files=[str(p) for p in skipped])
    return _collect(out, [(str(p), ((n, r, f"{p.stem}:{n}") for n, r in _rows(p))) for p in files], cfg)


def _collect(out: TraceRead, sources: list[tuple[str, Iterator[tuple[int, Any, str]]]], cfg: TracesParams) -> TraceRead:
    seen: set[tuple[str, str]] = set()
    qids: set[str] = set()
    for where, rows in sources:
        for n, row, fallback_id in rows:
            try:
                if isinstance(row, _Bad):
                    raise row
                got = (row, "mlflow_trace") if isinstance(row, Trajectory) else _trajectory_of(row, cfg, fallback_id)
                if got is None:  # a journal's header line
                    continue
                traj, fmt = got
            except _Bad as b:
                bad = BadRow(where, n, b.field, b.reason, b.message)
                log.warning("%s", bad.line_text())
                out.bad.append(bad)
                continue
            if (traj.qid, traj.variant) in seen:  # e.g. a journal beside the cell file it became
                out.duplicates += 1
                continue
            seen.add((traj.qid, traj.variant))
            if traj.qid in qids:  # the same question under another arm: one qid per episode downstream
                traj.qid = f"{traj.qid}@{traj.variant}"
            qids.add(traj.qid)
            if not cfg.gold:
                traj.answers, traj.em, traj.f1 = [], 0.0, 0.0
            out.trajs.append(traj)
            out.formats[fmt] += 1
    return out


def _trajectory_of(row: Any, cfg: TracesParams, fallback_id: str) -> tuple[Trajectory, str] | None:
    if not isinstance(row, dict):
        raise _Bad("unknown_row", "(row)", f"a JSON {type(row).__name__}, not an object")
    if set(row) == {"journal"}:
        return None
    if "record" in row:
        rec = row["record"]
        if not isinstance(rec, dict) or not isinstance(rec.get("traj"), dict):
            raise _Bad("not_trajectory", "record.traj", "a journal row without its trajectory")
        return _hasp_trajectory(rec["traj"], "record.traj."), "hasp_journal"
    if "traj" in row and isinstance(row["traj"], dict):
        return _hasp_trajectory(row["traj"], "traj."), "hasp_record"
    if "steps" in row and "qid" in row:
        return _hasp_trajectory(row, ""), "hasp_trajectory"
    if "messages" in row:
        return chat_to_trajectory(row, cfg, str(row.get("id") or fallback_id)), "chat"
    raise _Bad("unknown_row", "(row)", "neither a HASP trajectory (qid, steps), a journal record (record) nor a "
                                       "chat log (messages)")


def _hasp_trajectory(d: dict[str, Any], prefix: str) -> Trajectory:
    for key, kind in (("qid", str), ("question", str), ("answers", list), ("steps", list)):
        if not isinstance(d.get(key), kind):
            raise _Bad("not_trajectory", f"{prefix}{key}", f"missing or not a {kind.__name__}")
    if not d["steps"]:
        raise _Bad("no_audit", f"{prefix}steps", "no steps, so no audit record")
    last = len(d["steps"]) - 1
    for i, s in enumerate(d["steps"]):
        if not isinstance(s, dict):
            raise _Bad("not_trajectory", f"{prefix}steps[{i}]", "a step that is not an object")
        # the one step that has neither: the answer-only turn after the step budget (no PF, no tool ran)
        budget_answer = i == last and d.get("terminated") == "budget_final"
        if not s.get("audit") and not s.get("parse_error") and not budget_answer:
            raise _Bad("no_audit", f"{prefix}steps[{i}].audit", "a step with neither an audit record nor a parse error")
    try:
        return Trajectory.from_dict({"variant": "logged", **d})
    except (TypeError, KeyError, ValueError) as e:
        raise _Bad("not_trajectory", f"{prefix}(record)", f"{type(e).__name__}: {e}"[:200]) from None


# ----------------------------------------------------------------------------- MLflow traces
MLFLOW_PREFIX = "mlflow:"


def mlflow_rows(spec: str) -> Iterator[tuple[int, Trajectory | _Bad, str]]:
    """The episode traces of MLflow experiment ``spec`` (``mlflow:<name or id>``, on the tracking URI of
    ``MLFLOW_TRACKING_URI``) as trajectories, in the store's order; ``n`` is the trace's position. Only
    traces HASP wrote (``hasp.track.traces.log_episode_trace``) map: their root span names the question,
    the answers and the scores, and each step span the actions, the PF events and the tool's feedback.
    Texts on spans are cut to 2000 characters, so long observations arrive cut."""
    import mlflow

    traces = mlflow.search_traces(locations=[_experiment(spec)], return_type="list", include_spans=True)
    for n, tr in enumerate(traces, 1):
        try:
            yield n, trajectory_from_trace(tr), str(tr.info.trace_id)
        except _Bad as b:
            yield n, _Bad(b.reason, f"trace {tr.info.trace_id} {b.field}", b.message), ""


def _experiment(spec: str) -> str:
    """The id of the experiment ``mlflow:<name or id>`` names."""
    import mlflow
    from mlflow.exceptions import MlflowException

    name = spec[len(MLFLOW_PREFIX):]
    exp = mlflow.get_experiment_by_name(name)
    if exp is None:
        try:
            exp = mlflow.get_experiment(name)
        except MlflowException:
            exp = None
    if exp is None:
        raise TraceFormatError(f"{spec}: no such MLflow experiment (tracking URI {mlflow.get_tracking_uri()})")
    return str(exp.experiment_id)


def _user_attrs(span: Any) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if not k.startswith("mlflow.")}


def _action(rendered: Any, fld: str) -> Action:
    text = str(rendered or "")
    head, sep, rest = text.partition("[")
    if not sep or not text.endswith("]") or not head:
        raise _Bad("not_trajectory", fld, f"not an action TYPE[arg]: {text[:60]!r}")
    return Action(head, rest[:-1])


def trajectory_from_trace(trace: Any) -> Trajectory:
    """One HASP episode trace back as its trajectory (see ``mlflow_rows``)."""
    spans = list(trace.data.spans)
    root = next((s for s in spans if s.parent_id is None), None)
    if root is None:
        raise _Bad("unmappable", "spans", "no root span")
    attrs, inputs, outputs = _user_attrs(root), root.inputs or {}, root.outputs or {}
    if "qid" not in attrs or not isinstance(inputs, dict):
        raise _Bad("unmappable", "root.attributes.qid", "not a HASP episode trace (no qid on its root span)")
    kids: dict[str, list[Any]] = {}
    for s in spans:
        kids.setdefault(s.parent_id, []).append(s)
    steps = []
    for sp in sorted((s for s in kids.get(root.span_id, []) if s.name.startswith("step ")),
                     key=lambda s: int(_user_attrs(s).get("index", 0))):
        a = _user_attrs(sp)
        sub = {c.name: c for c in kids.get(sp.span_id, [])}
        policy = sub.get("policy")
        step = StepRecord(index=int(a.get("index", len(steps))),
                          raw_output=str((policy.outputs or {}).get("text", "")) if policy is not None else "",
                          observation=str((sp.outputs or {}).get("observation", "")),
                          parse_error=str(a.get("parse_error", "")))
        if "action" in a:
            final = _action(a["action"], f"{sp.name}.attributes.action")
            disp = sub.get("pf_dispatch")
            fired = [{"skill_id": str(_user_attrs(e).get("skill_id", "")), "type": str(_user_attrs(e).get("type", "")),
                      "reason": str(_user_attrs(e).get("reason", "")), "applied": bool(_user_attrs(e).get("applied", True))}
                     for e in (kids.get(disp.span_id, []) if disp is not None else [])]
            tool = sub.get(final.type.lower())
            step.audit = AuditEvent(state={}, a_orig=_action(a.get("proposed", a["action"]), f"{sp.name}.attributes.proposed"),
                                    a_final=final, fired=fired, mode=str(a.get("mode", "none")),
                                    context=list((disp.outputs or {}).get("context", [])) if disp is not None else [],
                                    feedback=_user_attrs(tool) if tool is not None else {})
        elif not step.parse_error:
            raise _Bad("no_audit", f"{sp.name}.attributes.action", "a step span with neither an action nor a parse error")
        steps.append(step)
    if not steps:
        raise _Bad("no_audit", "steps", "no step spans, so no audit record")
    answers = inputs.get("answers") or []
    return Trajectory(qid=str(attrs["qid"]), question=str(inputs.get("question", "")),
                      answers=[str(x) for x in answers] if isinstance(answers, list) else [str(answers)],
                      variant=str(attrs.get("variant", "logged")), steps=steps,
                      prediction=str(outputs.get("prediction", "")), em=float(attrs.get("em", 0.0)),
                      f1=float(attrs.get("f1", 0.0)), terminated=str(attrs.get("terminated", "")),
                      prompt_tokens=int(attrs.get("prompt_tokens", 0)),
                      completion_tokens=int(attrs.get("completion_tokens", 0)))


# ----------------------------------------------------------------------------- the chat-log adapter
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_ARG_KEYS = ("query", "q", "doc_id", "id", "url", "title", "answer", "text", "input")


def chat_to_trajectory(row: dict[str, Any], cfg: TracesParams, qid: str) -> Trajectory:
    """One OpenAI-style chat log as a HASP trajectory.

    - ``question``: the row's ``question``, else the first user turn (which then starts the episode);
      system and developer turns are skipped. ``answers`` (a string or a list) are the gold answers.
    - Each assistant turn is a step. A tool call (``tool_calls[j].function`` or the older
      ``function_call``) is the action ``evolve.traces.tool_actions[name]`` with the call's argument (the
      first of ``query``, ``doc_id``, ``url``, ``answer`` ... in its JSON arguments, else the raw text);
      a turn with several calls gives one step per call. A turn without a call is parsed as HASP's
      ``Action: SEARCH[...]`` text; if it holds no action and it is the log's last assistant turn, its
      text is the FINAL answer, otherwise the step is a parse failure (``parse_error``).
    - A tool (or function) turn is the observation of the call it answers (``tool_call_id``, else the
      latest step without one); a tool turn that reports an error (``is_error``, ``"error"`` in a JSON
      reply, or text starting with "Error") sets the step's ``tool_error``. A later user turn is added
      to the observation of the step before it.
    - The prediction is the first FINAL's argument; the log's end without one is ``terminated:
      unfinished``. With gold answers, EM and F1 are scored as the search domain scores them.

    Raises ``_Bad("unmappable", field, why)`` naming the message and field it could not map."""
    from hasp.agent.parser import ParsedAction, parse_action
    from hasp.domains.search.metrics import exact_match, f1

    msgs = row.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _Bad("unmappable", "messages", "missing, empty or not a list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _Bad("unmappable", f"messages[{i}]", "a message that is not an object")
        if m.get("role") not in _ROLES:
            raise _Bad("unmappable", f"messages[{i}].role", f"unknown role {m.get('role')!r} (expected one of {_ROLES})")
    question = row.get("question")
    start = 0
    if not (isinstance(question, str) and question.strip()):
        first = next((i for i, m in enumerate(msgs) if m["role"] == "user"), None)
        if first is None:
            raise _Bad("unmappable", "question", "no question field and no user turn")
        question, start = _text(msgs[first].get("content")), first + 1
    last_assistant = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
    if last_assistant is None or last_assistant < start:
        raise _Bad("unmappable", "messages", "no assistant turn after the question")
    steps: list[StepRecord] = []
    by_call: dict[str, StepRecord] = {}
    for i in range(start, len(msgs)):
        m = msgs[i]
        role, content = m["role"], _text(m.get("content"))
        if role in ("system", "developer"):
            continue
        if role == "assistant":
            calls = m.get("tool_calls") or ([m["function_call"]] if isinstance(m.get("function_call"), dict) else [])
            if not isinstance(calls, list):
                raise _Bad("unmappable", f"messages[{i}].tool_calls", "not a list")
            for j, c in enumerate(calls):
                fn = c.get("function", c) if isinstance(c, dict) else None
                where = f"messages[{i}].tool_calls[{j}].function" if m.get("tool_calls") else f"messages[{i}].function_call"
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise _Bad("unmappable", f"{where}.name", "a tool call without a function name")
                typ = cfg.tool_actions.get(fn["name"].lower())
                if typ is None:
                    raise _Bad("unmappable", f"{where}.name",
                               f"tool {fn['name']!r} is not in evolve.traces.tool_actions")
                action = Action(typ, _argument(fn.get("arguments")))
                step = _step(len(steps), f"Action: {action.render()}", content, action)
                steps.append(step)
                if isinstance(c, dict) and c.get("id"):
                    by_call[str(c["id"])] = step
            if calls:
                continue
            parsed = parse_action(content)
            if isinstance(parsed, ParsedAction):
                steps.append(_step(len(steps), content, parsed.thought, Action(parsed.type, parsed.arg)))
            elif i == last_assistant and content.strip():
                steps.append(_step(len(steps), content, "", Action("FINAL", content.strip())))
            else:
                steps.append(StepRecord(index=len(steps), raw_output=content, parse_error=parsed.reason))
        elif role in ("tool", "function"):
            target = by_call.get(str(m.get("tool_call_id") or "")) or next(
                (s for s in reversed(steps) if s.audit is not None and not s.observation), None)
            if target is None or target.audit is None:
                raise _Bad("unmappable", f"messages[{i}]", f"a {role} turn that answers no tool call before it")
            target.observation = content
            target.audit.feedback = _feedback(target.audit.a_final, content, m)
        elif steps:  # a user turn after a step: more of what the agent was shown
            s = steps[-1]
            s.observation = f"{s.observation}\n{content}".strip() if s.observation else content
    final = next((s.audit.a_final.arg for s in steps if s.audit is not None and s.audit.a_final.type == "FINAL"), None)
    answers = row.get("answers", [])
    answers = [answers] if isinstance(answers, str) else answers
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise _Bad("unmappable", "answers", "not a string or a list of strings")
    traj = Trajectory(qid=qid, question=question, answers=list(answers), variant=CHAT_VARIANT, steps=steps,
                      prediction=final or "", terminated="final" if final is not None else "unfinished")
    if answers and final is not None:
        traj.em, traj.f1 = exact_match(final, answers), f1(final, answers)
    return traj


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def _argument(arguments: Any) -> str:
    if isinstance(arguments, dict):
        args = arguments
    else:
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else {}
        except json.JSONDecodeError:
            return str(arguments).strip()
    if not isinstance(args, dict):
        return str(args)
    for k in _ARG_KEYS:
        if isinstance(args.get(k), (str, int, float)) and str(args[k]).strip():
            return str(args[k]).strip()
    first = next((v for v in args.values() if isinstance(v, (str, int, float))), None)
    return str(first).strip() if first is not None else json.dumps(args)[:200]


def _step(index: int, raw: str, thought: str, action: Action) -> StepRecord:
    audit = AuditEvent(state={"step_count": index}, a_orig=action, a_final=action,
                       feedback={"final": True} if action.type == "FINAL" else {})
    return StepRecord(index=index, raw_output=raw, thought=thought, audit=audit)


def _feedback(action: Action, content: str, msg: dict[str, Any]) -> dict[str, Any]:
    error = ""
    if msg.get("is_error") or msg.get("status") == "error":
        error = content or "the tool reported an error"
    else:
        try:
            parsed = json.loads(content)
        except (json.JSONDecodeError, TypeError):
            parsed = None
        if isinstance(parsed, dict) and parsed.get("error"):
            error = str(parsed["error"])
        elif content.lstrip().lower().startswith(("error", "traceback")):
            error = content.strip()
    fb: dict[str, Any] = {"tool": msg.get("name") or action.type.lower()}
    if error:
        fb["tool_error"] = error[:300]
    if action.type == "READ":
        fb.update(doc_id=action.arg, found=not error and bool(content.strip()))
    return fb


# ----------------------------------------------------------------------------- Phase A from traces
def import_traces(source: Path | str, out_dir: Path, cfg: TracesParams) -> dict[str, Any]:
    """Read ``source`` and write ``out_dir/rollout.jsonl`` (Phase A's format), ``out_dir/heldout.jsonl``
    (the questions ``evolve.traces.holdout`` keeps for the judge gate, ``hasp.evolve.judge_gate``) and
    ``out_dir/traces_summary.json``; returns the summary."""
    from hasp.agent.rollout import write_trajectories
    from hasp.atomic import write_json
    from hasp.eval.summary import summarize_rollout

    from hasp.evolve.heldout import split_heldout, write_heldout

    read = read_traces(source, cfg)
    out_dir = Path(out_dir)
    trajs, heldout = split_heldout(read.trajs, cfg.holdout, cfg.holdout_max)
    write_trajectories(trajs, out_dir / art.ROLLOUT)
    write_heldout(heldout, out_dir / art.HELDOUT)
    summary = {**summarize_rollout(trajs), "variant": "traces", "source": str(source), "gold": cfg.gold,
               "traces": read.summary()}
    if cfg.holdout > 0:
        summary["heldout"] = {"questions": len(heldout), "trajectories": len(read.trajs) - len(trajs),
                              "share": cfg.holdout, "max": cfg.holdout_max}
    scored = [t for t in trajs if any(a.strip() for a in t.answers) and t.terminated != "error"]
    summary.pop("em"), summary.pop("f1")  # scores only where gold answers say what is right
    # tokens the logged run spent, not this one: kept apart so the epoch's budget does not count them
    summary["logged_tokens"] = {k: summary.pop(k) for k in ("prompt_tokens", "completion_tokens")}
    if scored:
        summary.update(em=sum(t.em for t in scored) / len(scored), f1=sum(t.f1 for t in scored) / len(scored),
                       n_scored=len(scored))
    write_json(summary, out_dir / art.TRACES_SUMMARY)
    if not read.trajs:
        log.warning("%s: no trajectory read (%d bad rows): Phase B has nothing to analyse", source, len(read.bad))
    return summary


def phase_a_from_traces(params: Params, out_path: Path, source: Path | str | None = None) -> dict[str, Any]:
    """Phase A of ``evolve.traces.source`` (or ``source``): the logged traces become ``out_path``
    (``rollout.jsonl``) beside ``traces_summary.json``; the summary is the rollout's, with ``traces``."""
    cfg = params.evolve.traces
    src = source if source is not None else cfg.source
    if not src:
        raise TraceFormatError("no trace source: set evolve.traces.source or pass --from-traces")
    out_path = Path(out_path)
    summary = import_traces(src, out_path.parent, cfg)
    if out_path.name != art.ROLLOUT:
        (out_path.parent / art.ROLLOUT).replace(out_path)
    return summary
