"""Pinned anchors: labelled questions a user pins (``evolve.anchors``) that no admitted skill may break.

Why a gate of its own: the val gate compares means, so a candidate that fixes two val questions and
breaks the one a user cares about passes it. An anchor is a promise about each question: the PF agent
answers the anchors with the library alone and with the library plus the candidate, and any anchor
that passed before (EM 1) and fails after refuses the candidate, naming the anchors. Each check
reports n, the passes before and after and the paired difference with its bootstrap interval
(``hasp.stats.paired_difference``), so a refusal on one question out of five reads as what it is.

The file has the test split's row format (``hasp.domains.search.generator.load_questions``: ``id``,
``question``, ``answers``, optional ``hops`` / ``support``), questions over the epoch's corpus. A
malformed row, a duplicate id or a file without rows is one ``AnchorError`` naming file, line and
field: a pin that cannot be read must stop the gate, never be skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp.domains.jsonl import json_file_objects
from hasp.domains.search.generator import BenchmarkFormatError, QAItem, load_questions
from hasp.stats import paired_difference

#: anchor ids a refusal names before it says "and N more"
NAMED = 10


class AnchorError(ValueError):
    """An anchors file that cannot be used; the message is one line naming file, line and field."""


def load_anchors(path: str | Path) -> list[QAItem]:
    """The anchors of ``path`` in file order (see the module doc for what is refused)."""
    p = Path(path)
    if not p.is_file():
        raise AnchorError(f"{p}: no such anchors file (evolve.anchors)")
    try:
        items = load_questions(p)
    except BenchmarkFormatError as e:
        raise AnchorError(str(e)) from None
    if not items:
        raise AnchorError(f"{p}: no anchor rows (an empty file pins nothing: add rows or set evolve.anchors: null)")
    first: dict[str, int] = {}
    for lineno, row in json_file_objects(p, AnchorError):
        qid = row["id"]
        if qid in first:
            raise AnchorError(f"{p}:{lineno}: field 'id': duplicate anchor id {qid!r} (first at line {first[qid]})")
        first[qid] = lineno
    return items


@dataclass
class AnchorResult:
    """One candidate's anchors: per-anchor EM with the library alone (before) and with the candidate (after)."""

    skill_id: str
    n: int = 0
    passes_before: int = 0
    passes_after: int = 0
    broken: list[str] = field(default_factory=list)  # passed before, fail after: each one refuses
    fixed: list[str] = field(default_factory=list)
    delta: dict[str, Any] = field(default_factory=dict)  # paired after - before: mean, n, ci95
    error: str = ""
    failed_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AnchorResult:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def refusal(self) -> list[str]:
        """Why the anchors refuse the candidate (empty = they do not)."""
        if self.error:
            return [f"anchor run failed: {self.error}"]
        if not self.broken:
            return []
        more = f" and {len(self.broken) - NAMED} more" if len(self.broken) > NAMED else ""
        return [f"anchors that passed fail with it: {', '.join(self.broken[:NAMED])}{more} "
                f"(n={self.n}, passes {self.passes_before} -> {self.passes_after}, "
                f"paired {self.delta.get('mean', 0.0):+.3f} {self.delta.get('ci95')})"]


def compare(skill_id: str, before: Mapping[str, float], after: Mapping[str, float], ids: Sequence[str]) -> AnchorResult:
    """The anchors ``ids`` before and after one candidate (an anchor missing from a run counts as failed)."""
    b = [1.0 if before.get(i, 0.0) >= 1.0 else 0.0 for i in ids]
    a = [1.0 if after.get(i, 0.0) >= 1.0 else 0.0 for i in ids]
    return AnchorResult(skill_id=skill_id, n=len(ids), passes_before=int(sum(b)), passes_after=int(sum(a)),
                        broken=[i for i, x, y in zip(ids, b, a) if x > y],
                        fixed=[i for i, x, y in zip(ids, b, a) if y > x],
                        delta=paired_difference(b, a).to_dict())


#: ``run(library, label) -> (rollout summary, {anchor id: EM})``: the PF agent on the anchors
AnchorRun = Callable[[Path, str], tuple[dict[str, Any], dict[str, float]]]


def run_anchor_gate(items: Sequence[tuple[Any, Any, Any]], library_root: Path, run: AnchorRun,
                    before: Mapping[str, float], ids: Sequence[str], *,
                    workdir: Path | None = None) -> list[AnchorResult]:
    """The anchors of each candidate (``(candidate, cluster, review)``) against ``before`` (the library
    alone), each on a copy of the library with only that candidate added (``gate.check_each``); a failed
    run is recorded on its result (which then refuses), never raised."""
    from hasp.evolve.gate import check_each

    def check(cand: Any, lib: Path) -> AnchorResult:
        summary, after = run(lib, f"anchors+{cand.skill_id}")
        res = compare(cand.skill_id, before, after, ids)
        res.failed_calls = int(summary.get("failed_calls") or 0)
        return res

    return check_each(items, library_root, "anchors", workdir, check,
                      lambda cand: AnchorResult(skill_id=cand.skill_id, n=len(ids)))
