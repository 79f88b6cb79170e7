"""Metrics of a set of trajectories: the rollout summary every phase shares, and the one per-cell
summary of an evaluation, whatever the domain.

The rollout summary lives here (not in evolution) so evaluation, the single-step domains and the
epoch read one definition of ``em``, ``answered_rate`` or ``pf_fires``. The cell summary adds what
a comparison needs: intervention levels, teacher and judge figures, episode errors, wall time and,
for single-step domains, how the PF-triggered revision turn changed the answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from hasp.episode.records import EpisodeRecord
from hasp.records import Trajectory
from hasp.stats import bootstrap_mean

#: ``Trajectory.terminated`` values that carry an answer
ANSWERED = ("final", "budget_final")
#: intervention types by level (paper §3: action-level rewrite vs context-level injection)
ACTION_LEVEL = "MODIFY_ACTION"
CONTEXT_LEVEL = "INJECT_CONTEXT"


def summarize_rollout(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Scores, step counts, PF fires and tokens of a set of trajectories (any domain)."""
    n = max(1, len(trajs))
    fires = Counter(skill for t in trajs for skill in t.fired_skills())
    audits = [a for t in trajs for a in t.audits()]
    steps = [len(t.steps) for t in trajs]
    return {
        "n": len(trajs),
        "em": sum(t.em for t in trajs) / n,
        "f1": sum(t.f1 for t in trajs) / n,
        "mean_steps": sum(steps) / n,
        "parse_error_rate": sum(1 for t in trajs for s in t.steps if s.parse_error) / max(1, sum(steps)),
        "answered_rate": sum(1 for t in trajs if t.terminated in ANSWERED) / n,
        "pf_fires": dict(fires),
        "pf_fires_total": sum(fires.values()),
        "modified_steps": sum(1 for a in audits if a.was_modified),
        "inject_steps": sum(1 for a in audits if a.context),
        "pf_errors": sum(len(t.pf_errors) for t in trajs),
        "prompt_tokens": sum(t.prompt_tokens for t in trajs),
        "completion_tokens": sum(t.completion_tokens for t in trajs),
        "wall_s_sum": sum(t.wall_s for t in trajs),
    }


def intervention_levels(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Applied PF fires split into action-level and context-level, with their shares."""
    types = Counter(f.get("type") for t in trajs for a in t.audits() for f in a.fired if f.get("applied", True))
    action, context = types.get(ACTION_LEVEL, 0), types.get(CONTEXT_LEVEL, 0)
    both = action + context
    return {"pf_action_fires": action, "pf_context_fires": context,
            "pf_other_fires": sum(types.values()) - both,
            "pf_action_share": action / both if both else 0.0,
            "pf_context_share": context / both if both else 0.0}


def revision_effect(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """How the revision turn changed single-step answers: its rate, the accuracy of the first
    (pre-revision) answers, and how many revisions fixed or broke an answer.

    Only single-step episodes score each answered step (``feedback["score"]``); for others the
    figures would be meaningless zeros, so they are left out (empty dict)."""
    if not any("score" in a.feedback for t in trajs for a in t.audits()):
        return {}
    n = max(1, len(trajs))
    firsts = [t.audits()[0].feedback.get("score") for t in trajs if t.audits()]
    firsts = [float(x) for x in firsts if isinstance(x, (int, float))]
    revised = [t for t in trajs if any(a.feedback.get("revision_requested") for a in t.audits())]
    first_of = {id(t): float(t.audits()[0].feedback.get("score", t.em)) for t in revised}
    return {"revised_rate": len(revised) / n,
            "first_answer_accuracy": (sum(firsts) / len(trajs)) if trajs else 0.0,
            "revision_fixed": sum(1 for t in revised if t.em > first_of[id(t)]),
            "revision_broke": sum(1 for t in revised if t.em < first_of[id(t)])}


def grading_weaker(trajs: Sequence[Trajectory]) -> list[str]:
    """Isolation layers missing in the sandboxes that graded these trajectories' answers (a
    program under test in the weaker mode the user allowed: ``feedback["sandbox_weaker"]``)."""
    return sorted({str(w) for t in trajs for a in t.audits() for w in a.feedback.get("sandbox_weaker") or ()})


def summarize_trajectories(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Everything a cell summary derives from trajectories alone (no records, no wall time)."""
    s = summarize_rollout(trajs)
    s["accuracy"] = s["em"]
    s.update(intervention_levels(trajs))
    s["episodes_with_fires"] = sum(1 for t in trajs if t.fired_skills()) / max(1, len(trajs))
    s.update(revision_effect(trajs))
    return s


def summarize_cell(records: Sequence[EpisodeRecord], wall_s: float) -> dict[str, Any]:
    """The one summary of an evaluation cell: trajectory metrics plus teacher tokens, judge
    accuracy, snippet calls, episode errors and time.

    An episode that failed for infrastructure reasons (the endpoint, the sandbox, the task's own code:
    ``error`` set, or ``terminated == "error"``) says nothing about the agent: it is counted in
    ``n_failed`` and left out of every trajectory metric, so EM, F1, answered and PF errors are over
    the ``n_scored`` episodes that ran; ``n`` is all episodes. An episode whose own run raised for
    any other reason (``terminated == "crash"``) is scored, as a wrong answer, and counted in
    ``n_crashed``."""
    scored = [r.traj for r in records if not _failed(r)]
    s = summarize_trajectories(scored)
    s["n"], s["n_scored"], s["n_failed"] = len(records), len(scored), len(records) - len(scored)
    #: scored as wrong: the agent's run raised (``hasp.episode.spec.EpisodeSpec.crashed``)
    s["n_crashed"] = sum(1 for t in scored if t.terminated == "crash")
    n = max(1, len(records))
    s["teacher_prompt_tokens"] = sum(r.teacher_prompt_tokens for r in records)
    s["teacher_completion_tokens"] = sum(r.teacher_completion_tokens for r in records)
    s["teacher_tokens"] = s["teacher_prompt_tokens"] + s["teacher_completion_tokens"]
    s["episode_errors"] = s["n_failed"]
    snippets = [r.snippet for r in records if r.snippet is not None]
    if snippets:
        s["snippet_calls"] = sum(x.calls for x in snippets)
        s["snippet_fallbacks"] = sum(x.fallbacks for x in snippets)
    verdicts = [r.judge for r in records if r.judge is not None]
    if verdicts:
        judged = [v for v in verdicts if v.correct is not None]
        s["judge_n"] = len(judged)
        s["judge_errors"] = len(verdicts) - len(judged)
        if judged:  # no usable verdict at all: no accuracy, rather than a made-up 0
            s["judge_acc"] = sum(1 for v in judged if v.correct) / len(judged)
        s["judge_tokens"] = sum(v.prompt_tokens + v.completion_tokens for v in verdicts)
    s["wall_s"] = wall_s
    s["episode_wall_s_mean"] = s["wall_s_sum"] / n
    return s


def _failed(r: EpisodeRecord) -> bool:
    return bool(r.error) or r.traj.terminated == "error"


def hop_counts(questions: Sequence[Any]) -> dict[str, int]:
    """``{question id: hop count}`` of a dataset's questions (0 where an item has none)."""
    return {str(getattr(q, "id", "")): int(getattr(q, "hops", 0) or 0) for q in questions}


def hop_mix(questions: Sequence[Any]) -> str:
    """How many questions of each hop count, e.g. ``"1-hop 20, 2-hop 10"`` (what a table ran on)."""
    counts = Counter(int(getattr(q, "hops", 0) or 0) for q in questions)
    return ", ".join(f"{h}-hop {n}" if h else f"no hop count {n}" for h, n in sorted(counts.items()))


def by_hops(records: Sequence[EpisodeRecord], hops_of: dict[str, int]) -> dict[str, dict[str, Any]]:
    """EM per hop count over the scored episodes, each with n and a bootstrap 95 % interval.

    Why: a mixed benchmark's mean hides where an agent moves; a small model can gain on one-hop
    questions while staying at zero on chains. Items without a hop count (math, code) give {}."""
    return by_group(records, {q: int(h) for q, h in hops_of.items() if h})


def template_groups(template_seen: dict[str, bool]) -> dict[str, str]:
    """``{question id: "seen" | "unseen"}``: whether training used the question's template."""
    return {q: "seen" if s else "unseen" for q, s in template_seen.items()}


def by_template(records: Sequence[EpisodeRecord], template_seen: dict[str, bool]) -> dict[str, dict[str, Any]]:
    """EM on questions whose template training used (seen) and on held-out ones (unseen), as ``by_hops``.

    Why: a gain that only holds on the phrasings the agent and its skills were fitted to is recall,
    not generalisation; benchmark v2 holds phrasings and relations out of train/val to tell them apart."""
    return by_group(records, template_groups(template_seen))


def by_group(records: Sequence[EpisodeRecord], group_of: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """EM per group of questions (the groups in sorted order), failed episodes left out."""
    groups: dict[Any, list[float]] = {}
    for r in records:
        g = group_of.get(r.traj.qid)
        if g is not None and not _failed(r):
            groups.setdefault(g, []).append(float(r.traj.em))
    return {str(g): bootstrap_mean(v).to_dict() for g, v in sorted(groups.items())}
