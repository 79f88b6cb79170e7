"""A frontier of library versions and rollback (EvoSkill §2.2, adapted to epochs).

Why: a library that grows every epoch can also get worse (App. C.8). After each epoch
the evolved library is scored on the held-out val split; the ``k`` best versions stay
in ``frontier.json`` with the path of their snapshot. When an epoch's val EM falls
more than ``tolerance`` below the best member, the next epoch starts from the best
member's snapshot instead of the degraded library.

Files (all written atomically: temp file / folder, then ``os.replace``)::

    <out>/frontier.json                 {"size": k, "members": [{epoch, score, f1, snapshot}, ...]}
    <out>/epoch_<i>/carry.json          which library epoch i+1 starts from (and why)
    <out>/epoch_<i>/library_rollback/   a restored snapshot, when epoch i rolled back

A restored library keeps the *current* ``library_history.json`` (so no decision is
lost) plus one ``rollback`` entry; the skills come from the snapshot.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.atomic import swap_dir, write_json_atomic
from hasp.pf.folder_files import copy_folder

__all__ = ["Member", "Frontier", "restore_snapshot", "write_carry", "read_carry", "FRONTIER_FILE",
           "CARRY_FILE", "SEED_EPOCH"]

FRONTIER_FILE = "frontier.json"
CARRY_FILE = art.CARRY
SEED_EPOCH = -1  # the frontier member for the library an evolution run started from


def _atomic_json(obj: Any, path: Path) -> None:
    write_json_atomic(obj, path, default=None)


@dataclass
class Member:
    epoch: int
    score: float  # val EM of the library after this epoch
    snapshot: str
    f1: float | None = None


@dataclass
class Frontier:
    """The ``size`` best library versions by val EM (ties: the earlier epoch, the smaller library)."""

    path: Path
    size: int = 3
    members: list[Member] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path, size: int = 3) -> "Frontier":
        path = Path(path)
        if not path.exists():
            return cls(path, size)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            members = [Member(**m) for m in raw.get("members", [])]
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a frontier file ({e}); fix or delete it") from e
        fr = cls(path, size, members)
        fr._trim()
        return fr

    def save(self) -> Path:
        _atomic_json({"size": self.size, "members": [asdict(m) for m in self.members]}, self.path)
        return self.path

    def _trim(self) -> None:
        self.members.sort(key=lambda m: (-m.score, m.epoch))
        del self.members[self.size:]

    def update(self, epoch: int, score: float, snapshot: Path | str, f1: float | None = None) -> bool:
        """Insert (or replace) ``epoch``'s version; True when it is in the frontier afterwards."""
        self.members = [m for m in self.members if m.epoch != epoch]
        self.members.append(Member(epoch=epoch, score=float(score), snapshot=str(snapshot), f1=f1))
        self._trim()
        return any(m.epoch == epoch for m in self.members)

    def drop_after(self, epoch: int) -> list[int]:
        """Forget the versions of epochs after ``epoch`` (the seed member stays); returns their epochs.

        Why: re-running epoch ``epoch`` over an earlier run's output folder redoes every later
        epoch, so their old scores must not decide this epoch's rollback (they would carry a
        library from a run that is being replaced)."""
        gone = [m.epoch for m in self.members if m.epoch > epoch and m.epoch != SEED_EPOCH]
        self.members = [m for m in self.members if m.epoch not in gone]
        return gone

    def best(self) -> Member | None:
        return self.members[0] if self.members else None

    def get(self, epoch: int) -> Member | None:
        return next((m for m in self.members if m.epoch == epoch), None)

    def rollback_target(self, score: float, tolerance: float) -> Member | None:
        """The best member when ``score`` is more than ``tolerance`` below it, else None."""
        best = self.best()
        if best is not None and score < best.score - tolerance:
            return best
        return None


def restore_snapshot(snapshot: Path, dest: Path, *, history_from: Path | None = None,
                     note: dict[str, Any] | None = None) -> Path:
    """Make ``dest`` a copy of ``snapshot``; keep ``history_from``'s library_history.json and
    append a ``rollback`` entry. Idempotent: an existing ``dest`` restored from the same
    snapshot with the same note is left untouched (so a cached re-run changes nothing)."""
    from hasp.evolve.admit import HISTORY_FILE

    snapshot, dest = Path(snapshot), Path(dest)
    if not (snapshot.is_dir()):
        raise FileNotFoundError(f"snapshot {snapshot} does not exist")
    marker = {"restored_from": str(snapshot), **(note or {})}
    mpath = dest / ".rollback.json"
    if mpath.exists() and json.loads(mpath.read_text(encoding="utf-8")) == marker:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    try:
        copy_folder(snapshot, tmp, skip=("__pycache__",))
        history: list[dict[str, Any]] = []
        src_hist = Path(history_from) / HISTORY_FILE if history_from else snapshot / HISTORY_FILE
        if src_hist.exists():
            history = json.loads(src_hist.read_text(encoding="utf-8") or "[]")
        history.append({"decision": "rollback", "restored_from": str(snapshot), **(note or {})})
        (tmp / HISTORY_FILE).write_text(json.dumps(history, indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
        (tmp / ".rollback.json").write_text(json.dumps(marker), encoding="utf-8")
        swap_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def write_carry(epoch_dir: Path, library: Path, *, rolled_back_to: int | None = None,
                val_em: float | None = None, best: Member | None = None) -> dict[str, Any]:
    info = {"library": str(library), "rolled_back_to": rolled_back_to, "val_em": val_em,
            "best_epoch": best.epoch if best else None, "best_score": best.score if best else None}
    _atomic_json(info, Path(epoch_dir) / CARRY_FILE)
    return info


def read_carry(epoch_dir: Path) -> dict[str, Any] | None:
    p = Path(epoch_dir) / CARRY_FILE
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
