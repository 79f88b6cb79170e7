"""Step contexts rebuilt from a recorded trajectory, without a model or an environment.

Why: evolution needs the contexts the agent was in when it failed — to show a student which
conditions held on its failing steps, and to validate a candidate PF on real steps rather than
on one mock question. A trajectory records every observation and the feedback of every executed
action, which is enough to step an ``EpisodeState`` forward exactly as the loop did. Documents
come back as the model saw them (cut to the agent's ``read_chars``), and PFs' private keys are
not recorded, so they start empty.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.records import StepRecord, Trajectory

_HIT_LINE = re.compile(r"^\s*\d+\.\s*\[([^\]]+)\]\s*([^:\n]*)", re.M)
_DOC_HEAD = re.compile(r"^(?:\(closest match[^\n]*\)\n)?\[([^\]]+)\]\s*([^\n]*)\n?", re.S)


@dataclass(frozen=True)
class ReplayedStep:
    """One parsed step: the context the PFs saw, the model's proposed action and where it came from."""

    qid: str
    index: int
    ctx: dict[str, Any]
    action: str
    arg: str
    failed: bool  # executing the final action failed (see ``EpisodeState.last_failed``)


def _tool_text(step: StepRecord) -> str:
    """The environment's part of the observation (PF context is appended after it)."""
    obs = step.observation or ""
    extra = "\n".join(step.audit.context) if step.audit and step.audit.context else ""
    return obs[: -len(extra) - 1] if extra and obs.endswith(extra) else obs


def _advance(state: EpisodeState, step: StepRecord) -> bool:
    """Apply the recorded executed action to ``state``; True when it failed."""
    audit = step.audit
    assert audit is not None
    a, fb, text = audit.a_final, audit.feedback or {}, _tool_text(step)
    failed = bool(fb.get("budget_exhausted"))
    if a.type == "SEARCH" and not failed:
        hits = [{"id": m.group(1).strip(), "title": m.group(2).strip()} for m in _HIT_LINE.finditer(text)]
        state.search_count += 1
        state.queries.append(a.arg)
        state.empty_results = not hits
        state.last_search_results_text = text
        state.last_search_hits = hits
        known = {h["id"] for h in state.seen_hits}
        state.seen_hits += [h for h in hits if h["id"] not in known]
        failed = not hits
    elif a.type == "READ" and not failed:
        found = bool(fb.get("found"))
        if found:
            head = _DOC_HEAD.match(text)
            state.read_count += 1
            state.read_ids.append(str(fb.get("doc_id") or (head.group(1) if head else "")))
            state.read_contents.append(text[head.end():] if head else text)
        failed = not found
    state.note_outcome(failed)
    state.action_history.append(a.render())
    return failed


def replay(traj: Trajectory, max_steps: int | None = None) -> Iterator[ReplayedStep]:
    """Every parsed step of ``traj`` with the context the PFs were asked in (FINAL steps included)."""
    state = EpisodeState(question=traj.question, max_steps=max_steps or max(len(traj.steps), 1))
    for step in traj.steps:
        if step.parse_error or step.audit is None:
            state.parse_failures += bool(step.parse_error)
            continue
        state.step_count = step.index
        ctx = state.to_ctx(step.thought)
        a = step.audit.a_orig
        if step.audit.a_final.type == "FINAL":
            yield ReplayedStep(traj.qid, step.index, ctx, a.type, a.arg, False)
            break
        failed = _advance(state, step)
        yield ReplayedStep(traj.qid, step.index, ctx, a.type, a.arg, failed)
