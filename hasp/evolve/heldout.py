"""The questions Phase A holds out of a trace batch for the judge gate (``hasp.evolve.judge_gate``).

Why a module of its own: Phase A writes the held-out file and the gate reads it; keeping the split and
its file format here keeps Phase A's code key free of the gate's code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from hasp.atomic import write_jsonl_atomic
from hasp.domains.search.generator import QAItem
from hasp.records import Trajectory


def _question_key(question: str) -> str:
    return " ".join(str(question).lower().split())


def _share(question: str) -> float:
    """A stable position in [0, 1) for a question: its held-out draw, the same on every machine and run."""
    digest = hashlib.sha256(_question_key(question).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def base_qid(qid: str) -> str:
    """The question id without the ``@<variant>`` the trace reader adds to a second arm's episode."""
    return str(qid).split("@", 1)[0]


def split_heldout(trajs: Sequence[Trajectory], share: float, max_n: int) -> tuple[list[Trajectory], list[QAItem]]:
    """``(kept, held_out)``: the trajectories Phases B-H read, and the questions held out of them (at
    most ``max_n``, the lowest draws first). Every trajectory of a held-out question is dropped from
    ``kept``; a held-out question keeps the gold answers its traces carry (empty without gold)."""
    if share <= 0:
        return list(trajs), []
    by_q: dict[str, list[Trajectory]] = {}
    for t in trajs:
        by_q.setdefault(_question_key(t.question), []).append(t)
    drawn = sorted((_share(k), k) for k in by_q if _share(k) < share)[:max_n]
    held = {k for _, k in drawn}
    items = []
    for _, k in drawn:
        first = by_q[k][0]
        answers = sorted({a for t in by_q[k] for a in t.answers if str(a).strip()})
        items.append(QAItem(id=base_qid(first.qid), question=first.question, answers=answers, hops=1, support=[]))
    kept = [t for t in trajs if _question_key(t.question) not in held]
    return kept, items


def write_heldout(items: Sequence[QAItem], path: Path) -> None:
    """The held-out questions as jsonl rows ``{id, question, answers, hops, support}`` (empty file: none)."""
    write_jsonl_atomic([it.to_dict() for it in items], path)


def load_heldout(path: Path) -> list[QAItem]:
    """The questions ``write_heldout`` wrote (none when the file is absent: no judge gate this epoch)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(QAItem(id=str(row["id"]), question=str(row["question"]),
                              answers=[str(a) for a in row.get("answers") or []], hops=int(row.get("hops") or 1),
                              support=[str(s) for s in row.get("support") or []]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{p}:{lineno}: not a held-out question row ({type(e).__name__}: {e})") from None
    return out
