"""The judge gate: candidates gated on held-out trace questions, with a judge instead of gold answers.

Why: an agent that learns from its own logged traces usually has no gold answers, so the val gate
(EM on a labelled val split) cannot say whether a candidate helps. The pinned anchors
(``hasp.evolve.anchors``) protect the few questions a user labelled; this gate covers the rest.
Phase A holds a share of the traces' questions out of Phases B-H (``evolve.traces.holdout``; the
same question logged under several arms goes one way, so nothing the candidates were built from is
judged). The PF agent answers the held-out questions with the library alone and with the library
plus each candidate, and the trace judge (``hasp.evolve.trace_judge``: the teacher, else the policy
model) reads each answer beside what the agent saw. An answer is 1 when SUPPORTED, 0 when
UNSUPPORTED or missing; a verdict the judge could not give (and an episode the endpoint failed)
leaves that question out of the comparison, counted. A candidate under which the share of supported
answers drops (the paired difference over the questions judged in both runs) is refused; the check
reports n, the supported answers before and after, and the paired difference with its bootstrap
interval (``hasp.stats.paired_difference``), so a refusal on one question of ten reads as what it is.
A judge is a noisy reader, not gold: the gate refuses a drop, it never admits on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp.records import Trajectory
from hasp.stats import paired_difference


def judged_answers(trajs: Sequence[Trajectory], judge: Any, *, max_chars: int) -> tuple[dict[str, float], dict[str, Any]]:
    """``({qid: 1.0 supported | 0.0 unsupported or unanswered}, judge counts)``; a question the judge
    could not judge, or whose episode the endpoint failed, is absent from the scores."""
    from hasp.evolve.trace_judge import judge_traces

    judging = judge_traces(trajs, judge, max_chars=max_chars)
    scores: dict[str, float] = {}
    for t in trajs:
        if t.terminated == "error":
            continue
        if not t.prediction.strip():
            scores[t.qid] = 0.0  # no answer is never a supported one
        elif t.qid in judging.verdicts:
            scores[t.qid] = 1.0 if judging.verdicts[t.qid] else 0.0
    return scores, judging.summary()


@dataclass
class JudgeGateResult:
    """One candidate's held-out questions: judged answers with the library alone (before) and with it (after)."""

    skill_id: str
    n: int = 0  # questions judged in both runs (the paired comparison)
    held_out: int = 0
    supported_before: int = 0
    supported_after: int = 0
    broken: list[str] = field(default_factory=list)  # supported before, not after
    fixed: list[str] = field(default_factory=list)
    delta: dict[str, Any] = field(default_factory=dict)  # paired after - before: mean, n, ci95
    unjudged: int = 0  # held-out questions left out: a judge error or a failed episode in either run
    judge: dict[str, Any] = field(default_factory=dict)  # the candidate run's judge counts
    error: str = ""
    failed_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JudgeGateResult:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def refusal(self) -> list[str]:
        """Why the judge gate refuses the candidate (empty = it does not)."""
        if self.error:
            return [f"judge gate failed: {self.error}"]
        if self.n == 0:
            return [f"no held-out answer could be judged in both runs ({self.unjudged} of {self.held_out} "
                    "left out: judge errors or failed episodes)"]
        mean = float(self.delta.get("mean", 0.0))
        if mean < 0:
            return [f"fewer held-out answers judged supported ({self.supported_before} -> {self.supported_after} "
                    f"of n={self.n}, paired {mean:+.3f} {self.delta.get('ci95')})"]
        return []


def compare(skill_id: str, before: Mapping[str, float], after: Mapping[str, float], ids: Sequence[str]) -> JudgeGateResult:
    """The held-out questions ``ids`` judged before and after one candidate (paired where both judged)."""
    both = [i for i in ids if i in before and i in after]
    b, a = [before[i] for i in both], [after[i] for i in both]
    return JudgeGateResult(skill_id=skill_id, n=len(both), held_out=len(ids), supported_before=int(sum(b)),
                           supported_after=int(sum(a)), broken=[i for i, x, y in zip(both, b, a) if x > y],
                           fixed=[i for i, x, y in zip(both, b, a) if y > x], unjudged=len(ids) - len(both),
                           delta=paired_difference(b, a).to_dict() if both else {})


#: ``run(library, label) -> (rollout summary, {qid: judged score}, judge counts)``: the PF agent on the
#: held-out questions, then the judge on its answers
JudgeRun = Callable[[Path, str], tuple[dict[str, Any], dict[str, float], dict[str, Any]]]


def run_judge_gate(items: Sequence[tuple[Any, Any, Any]], library_root: Path, run: JudgeRun,
                   before: Mapping[str, float], ids: Sequence[str], *,
                   workdir: Path | None = None) -> list[JudgeGateResult]:
    """The judge gate of each candidate (``(candidate, cluster, review)``) against ``before`` (the
    library alone), each on a copy of the library with only that candidate added (``gate.check_each``);
    a failed run is recorded on its result (which then refuses), never raised."""
    from hasp.evolve.gate import check_each

    def check(cand: Any, lib: Path) -> JudgeGateResult:
        summary, after, counts = run(lib, f"judge+{cand.skill_id}")
        res = compare(cand.skill_id, before, after, ids)
        res.judge, res.failed_calls = counts, int(summary.get("failed_calls") or 0)
        return res

    return check_each(items, library_root, "judge", workdir, check,
                      lambda cand: JudgeGateResult(skill_id=cand.skill_id, held_out=len(ids)))
