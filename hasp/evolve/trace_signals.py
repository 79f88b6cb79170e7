"""Label-free failure signals: what in a trajectory says it failed when no gold answer says so.

Why: logged traces (``hasp.evolve.traces``) often carry no gold answer, so EM cannot pick Phase B's
failures. These signals read only what the agent did and what its tools returned: the same executed
action again (``repeated_action``), a near-identical (not the same) query again (``repeated_query``), a FINAL with no
evidence observed before it (``final_without_evidence``), replies with no parseable action
(``parse_failure``), a PF rewrite the agent later undid by taking the blocked action anyway
(``pf_override_undone``), a tool that failed (``tool_error``), an episode that ended without an answer
(``no_answer``). Each detected failure names the signal that found it (``TraceSignal.kind``).

A signal is a guess, so it is measured where it can be: on trajectories with gold, ``signal_precision``
reports for each signal the share of the episodes it flags that did fail (EM 0) and the share of the
failures it finds; Phase B puts that into its summary. Phase B's failure set (``failure_set``) is the
gold one (EM 0) for trajectories with gold answers and the label-free one for those without; a
label-free failure also gives one pattern per signal (category ``trace_<kind>``), so it can cluster
even when no heuristic detector recognises it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.config import TracesParams
from hasp.evolve.detectors import FailurePattern
from hasp.evolve.excerpts import EVIDENCE_KEY, failing_step, tool_observation
from hasp.records import Action, StepRecord, Trajectory
from hasp.textutil import jaccard, tokens


@dataclass
class TraceSignal:
    """One label-free sign of failure in one episode, at one step (its ``index``; -1 = the episode)."""

    kind: str
    qid: str
    step: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SignalFn = Callable[[Trajectory, TracesParams], "list[TraceSignal]"]
SIGNALS: dict[str, SignalFn] = {}


def signal(name: str) -> Callable[[SignalFn], SignalFn]:
    """Register a signal under ``name`` (the ``kind`` of what it finds; ``evolve.traces.signals`` names it)."""

    def deco(fn: SignalFn) -> SignalFn:
        SIGNALS[name] = fn
        return fn

    return deco


def _acted(traj: Trajectory) -> list[tuple[StepRecord, Action]]:
    return [(s, s.audit.a_final) for s in traj.steps if s.audit is not None]


def _key(a: Action) -> tuple[str, str]:
    return a.type, " ".join(a.arg.lower().split())


def _tool_failed(step: StepRecord) -> str:
    """Why the executed tool call failed ('' when it did not), from its feedback."""
    fb = step.audit.feedback if step.audit else {}
    if fb.get("tool_error"):
        return str(fb["tool_error"])
    if step.audit is not None and step.audit.a_final.type == "READ" and fb.get("found", True) is False:
        return f"READ[{step.audit.a_final.arg}] opened nothing"
    return ""


@signal("repeated_action")
def repeated_action(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """The same executed action (type and argument, case and spaces ignored) ``repeat_threshold`` times."""
    seen: dict[tuple[str, str], int] = {}
    for s, a in _acted(traj):
        k = _key(a)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] == cfg.repeat_threshold:
            return [TraceSignal("repeated_action", traj.qid, s.index, f"{a.render()[:120]} executed {seen[k]} times")]
    return []


@signal("repeated_query")
def repeated_query(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """A SEARCH whose query tokens overlap an earlier, different query's by ``query_similarity`` (Jaccard)
    or more (the same query again is ``repeated_action``'s)."""
    earlier: list[tuple[str, list[str]]] = []
    for s, a in _acted(traj):
        if a.type != "SEARCH":
            continue
        toks = tokens(a.arg)
        for q, qt in earlier:
            if toks and _key(a) != _key(Action("SEARCH", q)) and jaccard(toks, qt) >= cfg.query_similarity:
                return [TraceSignal("repeated_query", traj.qid, s.index, f"query {a.arg[:80]!r} repeats {q[:80]!r}")]
        earlier.append((a.arg, toks))
    return []


@signal("final_without_evidence")
def final_without_evidence(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """A FINAL before any tool call returned something: no earlier executed SEARCH or READ with a
    non-empty observation that did not fail."""
    evidence = False
    for s, a in _acted(traj):
        if a.type == "FINAL":
            if not evidence:
                return [TraceSignal("final_without_evidence", traj.qid, s.index,
                                    f"FINAL[{a.arg[:80]}] with no evidence observed before it")]
            return []
        fb = s.audit.feedback if s.audit else {}
        if (tool_observation(s).strip() and not _tool_failed(s) and not fb.get("budget_exhausted")
                and fb.get("n_hits") != 0):
            evidence = True
    return []


@signal("parse_failure")
def parse_failure(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """A reply with no parseable action (the step's ``parse_error``)."""
    for s in traj.steps:
        if s.parse_error:
            n = sum(1 for x in traj.steps if x.parse_error)
            return [TraceSignal("parse_failure", traj.qid, s.index, f"{n} unparseable repl{'y' if n == 1 else 'ies'}: "
                                                                    f"{s.parse_error[:80]}")]
    return []


@signal("pf_override_undone")
def pf_override_undone(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """A PF rewrote an action, and a later step executed the action it had rewritten away."""
    acted = _acted(traj)
    for i, (s, a) in enumerate(acted):
        au = s.audit
        if au is None or not au.was_modified:
            continue
        blocked = _key(au.a_orig)
        later = next((t for t, b in acted[i + 1:] if _key(b) == blocked), None)
        if later is not None:
            return [TraceSignal("pf_override_undone", traj.qid, later.index,
                                f"step {s.index} rewrote {au.a_orig.render()[:60]} to {a.render()[:60]}; "
                                f"step {later.index} ran it anyway")]
    return []


@signal("tool_error")
def tool_error(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """A tool call whose feedback says it failed (``tool_error``, or a READ that opened nothing)."""
    for s, _ in _acted(traj):
        why = _tool_failed(s)
        if why:
            return [TraceSignal("tool_error", traj.qid, s.index, why[:160])]
    return []


@signal("no_answer")
def no_answer(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """The episode ended without a FINAL answer (steps or time ran out)."""
    if any(a.type == "FINAL" for _, a in _acted(traj)) or traj.prediction.strip():
        return []
    return [TraceSignal("no_answer", traj.qid, -1, f"ended without an answer ({traj.terminated or 'no FINAL'})")]


def detect_signals(traj: Trajectory, cfg: TracesParams) -> list[TraceSignal]:
    """The signals of ``cfg.signals`` that fire on ``traj`` (at most one per kind)."""
    return [x for name in cfg.signals for x in SIGNALS[name](traj, cfg)]


def has_gold(traj: Trajectory) -> bool:
    return any(a.strip() for a in traj.answers)


@dataclass
class FailureSet:
    """Phase B's failures: gold ones (EM 0) and label-free ones (a signal fired, no gold answer)."""

    failed: list[Trajectory] = field(default_factory=list)
    signals: dict[str, list[TraceSignal]] = field(default_factory=dict)  # qid -> what fired (all trajectories)
    gold: int = 0
    label_free: int = 0

    def summary(self) -> dict[str, Any]:
        return {"gold": self.gold, "label_free": self.label_free}


def failure_set(trajs: Iterable[Trajectory], cfg: TracesParams,
                extra: dict[str, list[TraceSignal]] | None = None, *, scored: bool = False) -> FailureSet:
    """The failed trajectories Phase B analyses: EM 0 where gold answers exist, any fired signal where
    none do. Episodes that ended in an endpoint error are the infrastructure's, not the agent's.
    ``extra`` adds signals found elsewhere (the judge's, ``hasp.evolve.trace_judge``) by qid.
    ``scored``: every trajectory was scored by its task as it ran (a rollout, not logged traces), so its
    EM is gold even where the task's gold is not an answer string (code: the item's tests)."""
    out = FailureSet()
    for t in trajs:
        fired = detect_signals(t, cfg) + list((extra or {}).get(t.qid, []))
        out.signals[t.qid] = fired
        if t.terminated == "error":
            continue
        if scored or has_gold(t):
            if t.em == 0:
                out.failed.append(t)
                out.gold += 1
        elif fired:
            out.failed.append(t)
            out.label_free += 1
    return out


def signal_precision(trajs: Sequence[Trajectory], cfg: TracesParams,
                     fired: dict[str, list[TraceSignal]] | None = None, *, scored: bool = False) -> dict[str, Any]:
    """Each signal against gold failure (EM 0) on the trajectories with gold answers: how many it flags,
    how many of those failed (``precision``) and the share of all failures it flags (``recall``);
    ``any`` is the union of the signals. Precision is None when a signal flagged nothing."""
    labelled = [t for t in trajs if (scored or has_gold(t)) and t.terminated != "error"]
    fired = fired if fired is not None else {t.qid: detect_signals(t, cfg) for t in labelled}
    failures = sum(1 for t in labelled if t.em == 0)
    out: dict[str, Any] = {"n_labelled": len(labelled), "gold_failures": failures, "per_signal": {}}
    kinds = [*cfg.signals, *sorted({x.kind for xs in fired.values() for x in xs} - set(cfg.signals))]
    for kind in [*kinds, "any"]:
        flagged = [t for t in labelled if (fired.get(t.qid) if kind == "any" else
                                           any(x.kind == kind for x in fired.get(t.qid, [])))]
        hit = sum(1 for t in flagged if t.em == 0)
        out["per_signal"][kind] = {"flagged": len(flagged), "failed": hit,
                                   "precision": round(hit / len(flagged), 4) if flagged else None,
                                   "recall": round(hit / failures, 4) if failures else None}
    return out


def signal_counts(fs: FailureSet) -> dict[str, int]:
    """Episodes each signal fired on (all trajectories, with and without gold)."""
    out: dict[str, int] = {}
    for fired in fs.signals.values():
        for x in fired:
            out[x.kind] = out.get(x.kind, 0) + 1
    return out


#: per signal: (abstraction, trigger, intervention hint) of the pattern a label-free failure gives
_TEMPLATES: dict[str, tuple[str, str, str]] = {
    "repeated_action": (
        "The agent executes the same action again and again instead of changing course.",
        "An action (type and argument) that already ran earlier in the episode.",
        "Block the repeat: suggest an unread result, a different query, or FINAL from what was found."),
    "repeated_query": (
        "The agent searches with nearly the same query it already used.",
        "A SEARCH whose query shares most tokens with an earlier query in action_history.",
        "Rewrite the query to another hop of the question, or READ an unread hit of the earlier search."),
    "final_without_evidence": (
        "The agent answers before any tool returned evidence.",
        "A FINAL action before any SEARCH or READ returned a result.",
        "Turn the early FINAL into a SEARCH for the question's main entity."),
    "parse_failure": (
        "The agent's reply contains no action the harness can run.",
        "A step ends in a parse error instead of a SEARCH, READ or FINAL action.",
        "On the next parsed action, inject the exact action format, or choose the action for the agent."),
    "pf_override_undone": (
        "A PF rewrote the agent's action, and the agent took the rewritten-away action later anyway.",
        "A step executes the action a PF replaced at an earlier step.",
        "Make the rewriting PF's correction stick (inject why) or narrow its trigger."),
    "tool_error": (
        "A tool call failed (an error, or a document that does not exist).",
        "A step whose feedback carries tool_error or found False.",
        "After a failed call, redirect to a listed result or a corrected argument."),
    "no_answer": (
        "The episode ends without an answer: the steps or the time ran out.",
        "step_count approaches max_steps and no FINAL was given.",
        "When the steps run low, push toward FINAL with the best answer found so far."),
    "judge": (
        "The agent gives an answer that nothing it searched or read states.",
        "A FINAL whose argument appears in none of the observations shown so far.",
        "Before FINAL, read a result that names the answer, or answer with a span of what was read."),
}


def signal_patterns(trajs: Iterable[Trajectory], fired: dict[str, list[TraceSignal]], *,
                    scored: bool = False) -> list[FailurePattern]:
    """One pattern per fired signal of each label-free failure (category ``trace_<kind>``, source
    ``trace_signal``), with the step it fired on as its failing step; none where ``scored`` (every
    failure is a gold one, see ``failure_set``)."""
    out = []
    for t in trajs:
        if scored or has_gold(t):
            continue
        pos = {s.index: i for i, s in enumerate(t.steps)}
        for x in fired.get(t.qid, []):
            a, trig, hint = _TEMPLATES[x.kind]
            p = FailurePattern(category=f"trace_{x.kind}", abstraction=a, trigger=trig, intervention_hint=hint,
                               qid=t.qid, source="trace_signal", evidence={"signal": x.kind, "step": x.step,
                                                                           "detail": x.detail})
            if t.steps:
                at = pos.get(x.step, len(t.steps) - 1)
                p.evidence[EVIDENCE_KEY] = [failing_step(t, at, x.detail).to_dict()]
            out.append(p)
    return out
