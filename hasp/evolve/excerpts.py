"""Concrete failing steps: what the agent saw, what it did, what went wrong.

An abstract failure summary ("the agent reads documents that do not exist") is hard for a
small student model to turn into a trigger and a repair; one real step of the failure is
easy. Detectors attach ``FailingStep`` records to each failure pattern's evidence
(``evidence["failing_steps"]``), so they travel with the pattern through clustering and
``clusters.json`` into the proposal prompt, where ``failing_steps_text`` picks a few of a
cluster's steps (distinct episodes first) and renders them as a short text block.

This module reads trajectories only; it imports nothing from the other evolution phases,
so the detectors, the summarizer and the proposer can all use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hasp.prompts import prompt, render
from hasp.records import StepRecord, Trajectory

log = logging.getLogger(__name__)

__all__ = ["FailingStep", "EVIDENCE_KEY", "tool_observation", "shorten", "failing_step", "step_problem",
           "pick_failing_steps", "render_failing_steps", "failing_steps_text"]

#: where a pattern's failing steps live in ``FailurePattern.evidence``
EVIDENCE_KEY = "failing_steps"
SEEN_CHARS = 220
ACTION_CHARS = 120
PROBLEM_CHARS = 220
QUESTION_CHARS = 200


@dataclass
class FailingStep:
    """One step of a failed episode, already shortened for a prompt."""

    qid: str
    question: str
    step: int
    seen: str  # the last observation before the step ("" at the first step)
    action: str  # what the model did: its proposed action, or its raw reply when unparseable
    problem: str  # what went wrong at this step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FailingStep":
        return cls(qid=str(d.get("qid", "")), question=str(d.get("question", "")), step=int(d.get("step", 0)),
                   seen=str(d.get("seen", "")), action=str(d.get("action", "")), problem=str(d.get("problem", "")))


def tool_observation(step: StepRecord) -> str:
    """The observation the tool produced, without the context PFs appended to it."""
    obs = step.observation or ""
    ctx = step.audit.context if step.audit else []
    if ctx:
        tail = "\n" + "\n".join(ctx)
        if obs.endswith(tail):
            obs = obs[: -len(tail)]
    return obs


def shorten(text: str, limit: int, focus: str = "") -> str:
    """``text`` on one line, cut to ``limit`` characters; with ``focus``, the window is centred on
    its first (case-insensitive) occurrence so the part that matters stays visible."""
    flat = " ".join((text or "").split())
    if len(flat) <= limit:
        return flat
    start = 0
    if focus:
        at = flat.lower().find(" ".join(focus.split()).lower())
        if at >= 0 and at + len(focus) > limit - 3:
            start = max(0, min(at - limit // 3, len(flat) - (limit - 3)))
    head = "..." if start else ""
    room = limit - len(head)
    if len(flat) - start <= room:
        return head + flat[start:]
    return head + flat[start: start + room - 3] + "..."


def _seen_before(traj: Trajectory, index: int) -> str:
    """The tool observation the model had in front of it when it wrote step ``index``."""
    for s in reversed(traj.steps[:index]):
        return tool_observation(s) if s.audit is not None else (s.observation or "")
    return ""


def _action_text(step: StepRecord) -> str:
    if step.audit is None:
        return f"(unparseable reply) {shorten(step.raw_output, ACTION_CHARS - 20)!r}"
    a = step.audit.a_orig.render()
    if step.audit.was_modified:
        a += f" (a PF rewrote it to {step.audit.a_final.render()})"
    return a


def step_problem(step: StepRecord) -> str:
    """What visibly went wrong when the step ran ("" when nothing did): an unparseable reply, a
    READ that opened nothing, a SEARCH without results, an exhausted budget."""
    if step.audit is None:
        return f"the reply could not be parsed as an action ({shorten(step.parse_error, 80)})" \
            if step.parse_error else "the reply could not be parsed as an action"
    fb, a = step.audit.feedback, step.audit.a_final
    if "budget_exhausted" in fb:
        return f"the {fb['budget_exhausted']} budget was already used up"
    if a.type == "READ" and fb.get("found", True) is False:
        return f"READ opened nothing: no document matches {shorten(a.arg, 60)!r}"
    if a.type == "SEARCH" and "n_hits" in fb and int(fb["n_hits"]) == 0:
        return "SEARCH returned no results"
    return ""


def failing_step(traj: Trajectory, index: int, problem: str = "", *, focus: str = "",
                 seen: str | None = None) -> FailingStep:
    """The excerpt of step ``index`` (a position in ``traj.steps``). ``problem`` defaults to
    ``step_problem``; ``focus`` keeps that text visible in the shortened observation; ``seen``
    replaces the observation (e.g. an earlier one that held the answer)."""
    index = max(0, min(index, len(traj.steps) - 1))
    step = traj.steps[index]
    shown = _seen_before(traj, index) if seen is None else seen
    return FailingStep(qid=traj.qid, question=shorten(traj.question, QUESTION_CHARS), step=step.index,
                       seen=shorten(shown, SEEN_CHARS, focus), action=_action_text(step),
                       problem=shorten(problem or step_problem(step) or "(see the failure description)",
                                       PROBLEM_CHARS))


def _steps_of(patterns: Iterable[Any]) -> list[list[FailingStep]]:
    """Per pattern, its stored failing steps (malformed entries are logged and skipped)."""
    out = []
    for p in patterns:
        ev = getattr(p, "evidence", None) or {}
        steps = []
        for d in ev.get(EVIDENCE_KEY, []) or []:
            try:
                steps.append(FailingStep.from_dict(d))
            except (TypeError, ValueError, AttributeError) as e:
                log.warning("skipping a malformed failing step of %s: %s", getattr(p, "qid", "?"), e)
        out.append(steps)
    return out


def pick_failing_steps(patterns: Iterable[Any], n: int = 3) -> list[FailingStep]:
    """Up to ``n`` failing steps of a cluster's patterns: one per distinct episode first (in
    pattern order), then further steps of the same episodes."""
    per_pattern = _steps_of(patterns)
    chosen: list[FailingStep] = []
    seen_qids: set[str] = set()
    for steps in per_pattern:
        if len(chosen) >= n:
            break
        if steps and steps[0].qid not in seen_qids:
            chosen.append(steps[0])
            seen_qids.add(steps[0].qid)
    for steps in per_pattern:
        for s in steps:
            if len(chosen) >= n:
                return chosen
            if s not in chosen:
                chosen.append(s)
    return chosen


def render_failing_steps(steps: Sequence[FailingStep]) -> str:
    """The steps as the numbered text block the proposal prompt shows ("" for none)."""
    lines = []
    for i, s in enumerate(steps, 1):
        lines.append(render("hasp.evolve", "excerpts", "step", n=i, question=s.question,
                            seen=s.seen or prompt("hasp.evolve", "excerpts", "nothing_seen"),
                            action=s.action, problem=s.problem))
    return "\n".join(lines)


def failing_steps_text(cluster: Any, n: int = 3) -> str:
    """A cluster's concrete failing steps as prompt text, or ``none`` when it has none stored."""
    text = render_failing_steps(pick_failing_steps(getattr(cluster, "patterns", []), n))
    return text or prompt("hasp.evolve", "excerpts", "none")
