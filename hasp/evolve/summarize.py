"""Phase B, LLM half: abstract each failed trajectory into a reusable failure mode (paper App. C.2).

The heuristic detectors only know their fixed categories; a model reading the
trajectory can name failure modes no rule anticipated. Each failed trajectory is
rendered compactly (question, gold, prediction, one line per step) and the model
must answer with one JSON object ``{category, abstraction, trigger, intervention_hint}``.

Robustness rules (a small model often answers with prose or broken JSON):

* the first ``{...}`` object in the reply is parsed (code fences and chatter around it
  are tolerated); every key must be a non-empty string and ``category`` must become a
  4–30 character snake_case id after normalisation;
* a malformed reply is re-asked ``retries`` times (the bad reply and a short correction
  are appended to the conversation); after that the trajectory is dropped and the
  reason is kept in ``SummaryOutcome.dropped`` (and logged), never silently lost;
* calls run in a bounded thread pool (``max_concurrency``), results keep input order;
* a trajectory dropped because its last model call failed (the endpoint, not the reply) is
  counted in ``failed_calls``: the phase summary then says "N summaries failed: endpoint error"
  and the orchestrator does not keep the phase as a result (an outage is retried, not cached).

The produced ``FailurePattern``s (``source="llm"``) join the heuristic ones before
dedup and clustering.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hasp.bounded import json_load
from hasp.records import Trajectory
from hasp.evolve.detectors import FailurePattern, final_action
from hasp.evolve.excerpts import EVIDENCE_KEY, failing_step, step_problem
from hasp.llm.cancel import worker_pool
from hasp.prompts import prompt, render

log = logging.getLogger(__name__)

__all__ = ["ChatModel", "SummaryOutcome", "SummaryFormatError", "build_summarizer_messages",
           "parse_summary", "summarize_failures", "render_trace", "KEYS"]

KEYS = ("category", "abstraction", "trigger", "intervention_hint")
_CATEGORY = re.compile(r"^[a-z][a-z0-9_]{3,29}$")


class ChatModel(Protocol):
    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None, stop: list[str] | None = None,
             seed: int | None = None) -> Any: ...


class SummaryFormatError(ValueError):
    """The model's reply is not the JSON object the summarizer asked for."""


@dataclass
class SummaryOutcome:
    patterns: list[FailurePattern] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # {"qid", "reason", "attempts"}
    retried: int = 0  # trajectories that needed at least one re-ask
    failed_calls: int = 0  # trajectories dropped because the model call itself failed
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        failure: dict[str, Any] = {}
        if self.failed_calls:  # an outage is not a summary: say so first
            failure = {"failure": f"{self.failed_calls} summaries failed: endpoint error",
                       "failed_calls": self.failed_calls, "first_error": self.first_error[:300]}
        return {**failure, "llm_patterns": len(self.patterns), "llm_dropped": len(self.dropped),
                "llm_retried": self.retried,
                "llm_dropped_reasons": [f"{d['qid']}: {d['reason']}" for d in self.dropped][:20]}

    def to_dict(self) -> dict[str, Any]:
        return {"patterns": [p.to_dict() for p in self.patterns], "dropped": self.dropped,
                "retried": self.retried, "failed_calls": self.failed_calls}


# --------------------------------------------------------------------------- prompt

def render_trace(traj: Trajectory, limit: int = 1800) -> str:
    """One line per step: the executed action (and the proposed one if a PF changed it), its
    observation, and what visibly went wrong (a READ that opened nothing, an empty SEARCH), so a
    small summarizer can name a loop of failing actions without inferring it from raw text."""
    lines = []
    for s in traj.steps:
        if s.audit is None:
            lines.append(f"{s.index}. (unparseable output) {s.raw_output[:80]!r}")
            continue
        a, o = s.audit.a_final, s.audit.a_orig
        line = f"{s.index}. {a.render()}"
        if s.audit.was_modified:
            line += f"  (agent proposed {o.render()}, a PF rewrote it)"
        obs = " ".join((s.observation or "").split())[:120]
        problem = step_problem(s)
        lines.append(f"{line} -> {obs}" + (f"  [FAILED: {problem}]" if problem else ""))
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_summarizer_messages(traj: Trajectory, known_categories: Sequence[str] = ()) -> list[dict[str, str]]:
    fa = final_action(traj)
    pred = traj.prediction or (fa.arg if fa else "(no answer)")
    user = render("hasp.evolve", "summarize", "user", question=traj.question[:500],
                  answers="; ".join(traj.answers)[:200], prediction=pred[:200], steps=render_trace(traj),
                  known=", ".join(known_categories) if known_categories else prompt("hasp.evolve", "summarize", "none"))
    return [{"role": "system", "content": prompt("hasp.evolve", "summarize", "system")}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- parsing

def _first_object(text: str) -> str:
    start = text.find("{")
    if start < 0:
        raise SummaryFormatError("no JSON object in the reply")
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start: i + 1]
    raise SummaryFormatError("unterminated JSON object")


def normalize_category(raw: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", raw.strip().lower()).strip("_")


def parse_summary(text: str) -> dict[str, str]:
    """The four fields of a summarizer reply, or ``SummaryFormatError`` naming what is wrong."""
    try:
        obj = json_load(_first_object(text or ""))
    except json.JSONDecodeError as e:
        raise SummaryFormatError(f"invalid JSON: {e.msg}") from e
    except ValueError as e:  # refused by the bounded parser (depth, size, a huge integer)
        raise SummaryFormatError(f"invalid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise SummaryFormatError("the JSON value is not an object")
    missing = [k for k in KEYS if not isinstance(obj.get(k), str) or not obj[k].strip()]
    if missing:
        raise SummaryFormatError(f"missing or empty string fields: {', '.join(missing)}")
    out = {k: " ".join(obj[k].split())[:400] for k in KEYS}
    out["category"] = normalize_category(obj["category"])
    if not _CATEGORY.match(out["category"]):
        raise SummaryFormatError(f"category {obj['category']!r} is not a 4-30 character snake_case id")
    return out


# --------------------------------------------------------------------------- the loop

def _summarize_one(traj: Trajectory, model: ChatModel, known: Sequence[str], *, temperature: float,
                   max_tokens: int, retries: int) -> tuple[FailurePattern | None, str, int, str]:
    """(pattern or None, reason when None, attempts used, the call error when the last attempt's
    model call failed, else "")."""
    msgs = build_summarizer_messages(traj, known)
    problems: list[str] = []
    call_error = ""
    for attempt in range(retries + 1):
        try:
            reply = model.chat(msgs, temperature=temperature, max_tokens=max_tokens)
            raw = str(getattr(reply, "text", reply) or "")
        except Exception as e:  # noqa: BLE001 - one bad call drops one trajectory, never the phase
            call_error = f"{type(e).__name__}: {e}"
            problems.append(f"attempt {attempt + 1}: model call failed: {call_error}")
            continue
        call_error = ""
        try:
            fields = parse_summary(raw)
        except SummaryFormatError as e:
            problems.append(f"attempt {attempt + 1}: {e}")
            msgs = [*msgs, {"role": "assistant", "content": raw[:1500]}, {"role": "user", "content": prompt("hasp.evolve", "summarize", "retry")}]
            continue
        fa = final_action(traj)
        pat = FailurePattern(category=fields["category"], abstraction=fields["abstraction"],
                             trigger=fields["trigger"], intervention_hint=fields["intervention_hint"],
                             qid=traj.qid, source="llm",
                             evidence={"answer": traj.prediction or (fa.arg if fa else ""),
                                       "attempts": attempt + 1, **_failing_steps(traj, fields["abstraction"])})
        return pat, "", attempt + 1, ""
    return None, "; ".join(problems), retries + 1, call_error


def _failing_steps(traj: Trajectory, abstraction: str) -> dict[str, Any]:
    """The summarized episode's first step where something visibly went wrong (else its last
    step, described by the model's own abstraction), so an LLM-found cluster also shows the
    student a concrete step."""
    if not traj.steps:
        return {}
    at = next((i for i, s in enumerate(traj.steps) if step_problem(s)), len(traj.steps) - 1)
    return {EVIDENCE_KEY: [failing_step(traj, at, step_problem(traj.steps[at]) or abstraction).to_dict()]}


def summarize_failures(trajs: Iterable[Trajectory], model: ChatModel, *, known_categories: Sequence[str] = (),
                       temperature: float = 0.3, max_tokens: int = 400, retries: int = 1,
                       max_concurrency: int = 4, limit: int = 0) -> SummaryOutcome:
    """Ask ``model`` about every failed (``em == 0``) trajectory; see the module docstring."""
    failed = [t for t in trajs if t.em == 0]
    if limit:
        failed = failed[:limit]
    out = SummaryOutcome()
    if not failed:
        return out
    known = list(known_categories)

    def one(t: Trajectory) -> tuple[FailurePattern | None, str, int, str]:
        return _summarize_one(t, model, known, temperature=temperature, max_tokens=max_tokens, retries=retries)

    with worker_pool(min(max_concurrency, len(failed)), "summarize") as pool:
        results = list(pool.map(one, failed))
    for t, (pat, reason, attempts, call_error) in zip(failed, results):
        if attempts > 1:
            out.retried += 1
        if pat is None:
            log.warning("summarizer dropped %s after %d attempt(s): %s", t.qid, attempts, reason)
            out.dropped.append({"qid": t.qid, "reason": reason, "attempts": attempts})
            if call_error:
                out.failed_calls += 1
                out.first_error = out.first_error or call_error
        else:
            out.patterns.append(pat)
    return out

