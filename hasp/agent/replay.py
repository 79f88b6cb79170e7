"""Step contexts rebuilt from a recorded trajectory, without a model or an environment.

Why: evolution needs the contexts the agent was in when it failed — to show a student which
conditions held on its failing steps, and to validate a candidate PF on real steps rather than
on one mock question. The environment records in each step's Δ_t (``audit.feedback``) what it
handed the state — the hits of a SEARCH, the document a READ opened (``hasp.agent.react``) — so
the replay steps an ``EpisodeState`` through the same methods the loop called (``record_search``,
``record_read``) and the contexts come back as the PFs saw them. A trajectory recorded before Δ_t
carried that has hit ids without titles and the shown document text instead. PFs' private keys
are not recorded, so they start empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.records import StepRecord, Trajectory


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
    a, fb = audit.a_final, audit.feedback or {}
    failed = bool(fb.get("budget_exhausted"))
    if a.type == "SEARCH" and not failed:
        ids = [str(x) for x in fb.get("hit_ids", [])]
        titles = [str(x) for x in fb.get("hit_titles", [])] or [""] * len(ids)
        state.record_search(a.arg, _tool_text(step), [{"id": i, "title": t} for i, t in zip(ids, titles)])
        failed = not ids
    elif a.type == "READ" and not failed:
        found = bool(fb.get("found"))
        if found:
            state.record_read(str(fb.get("doc_id") or ""), str(fb.get("contents", _tool_text(step))))
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
