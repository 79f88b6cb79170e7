"""Phase F: admit reviewed candidates into the versioned library (paper App. C.6).

On-disk contract (shared with ``hasp.pf.library``)::

    <root>/<name>/SKILL.md + hasp.yaml + pf.py                   seed skills
    <root>/generated/<name>-v<N>/SKILL.md, hasp.yaml, pf.py, metadata.json   admitted candidates
    <root>/library_history.json                                  every decision, admitted or not
    <root>/snapshots/epoch_<i>/...                               copies of the active library

Crash safety:

* A version folder is built in ``generated/.tmp-<id>-<random>/`` (a name the loader's
  version pattern never matches) and then renamed into place with
  one ``os.replace``: a kill leaves either no version folder or the complete one.
  Temp folders older than an hour are swept by the next admission.
* ``library_history.json`` is rewritten whole via a temp file + ``os.replace``.
* Admissions and history updates are serialised across processes with ``flock`` on the
  ``generated/`` and root directories (no extra lock files in the DVC-tracked tree).

The history entry is written after the rename, so the history never names a folder
that does not exist; a kill between the two leaves a folder whose ``metadata.json``
still carries the full decision.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hasp.atomic import default_mode, swap_dir, write_json_atomic
from hasp.config import EvolveParams

from hasp.evolve.cluster import Cluster
from hasp.evolve.propose import Candidate, registered_id
from hasp.evolve.review import DEFAULT_BARS, Review, admission_bar
from hasp.pf.folder_files import copy_file, copy_folder, present
from hasp.pf.layout import GENERATED_DIR, scan_versions, version_name
from hasp.pf.library import MAX_LIBRARY_SIZE, loaded_versions
from hasp.pf.skill_md import SkillFormatError, SkillSpec, parse_skill_md, render_skill_folder

log = logging.getLogger(__name__)

__all__ = ["AdmissionResult", "admit", "review_refusals", "structural_refusals", "record_decision", "read_history", "snapshot", "next_version",
           "active_ids", "HISTORY_FILE", "GENERATED_DIR", "TMP_PREFIX"]

HISTORY_FILE = "library_history.json"
TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0


@dataclass
class AdmissionResult:
    admitted: bool
    skill_id: str
    version: int | None
    path: str | None
    reason: str
    entry: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- small fs helpers

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def _dir_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on a directory (flock on its fd)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _discard_tmp(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _sweep_stale_tmp(gen: Path) -> None:
    cutoff = time.time() - STALE_TMP_S
    for p in gen.iterdir():
        if p.is_dir() and p.name.startswith(TMP_PREFIX):
            with contextlib.suppress(OSError):
                if p.stat().st_mtime < cutoff:
                    _discard_tmp(p)


# --------------------------------------------------------------------------- versions

def next_version(library_root: Path, base_id: str) -> int:
    """1 + the highest version of ``base_id`` among seed and generated folders (1 if none)."""
    versions = scan_versions(Path(library_root)).get(base_id, [])
    return 1 + max((v for v, _, _ in versions), default=0)


def active_ids(library_root: Path) -> set[str]:
    """Base ids that have at least one version (each has exactly one active version)."""
    return set(scan_versions(Path(library_root)))


# --------------------------------------------------------------------------- history

def read_history(library_root: Path) -> list[dict[str, Any]]:
    path = Path(library_root) / HISTORY_FILE
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "[]")
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); refusing to overwrite it") from e
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a JSON list, found {type(data).__name__}")
    return data


def record_decision(library_root: Path, entry: dict[str, Any]) -> None:
    """Append one decision to ``library_history.json`` (read, append, temp file, os.replace)."""
    root = Path(library_root)
    root.mkdir(parents=True, exist_ok=True)
    entry = {"timestamp": _now(), **entry}
    with _dir_lock(root):
        history = read_history(root)
        history.append(entry)
        write_json_atomic(history, root / HISTORY_FILE, indent=1)
        _fsync_dir(root)


# --------------------------------------------------------------------------- admission

def _cluster_summary(cluster: Cluster) -> dict[str, Any]:
    rep = cluster.representative
    return {"category": cluster.category, "support": cluster.support, "novelty": cluster.novelty,
            "is_new_category": cluster.is_new_category, "nearest_skill": cluster.nearest_skill,
            "qids": list(cluster.qids), "abstraction": rep.abstraction, "trigger": rep.trigger,
            "intervention_hint": rep.intervention_hint}


def review_refusals(candidate: Candidate, review: Review, cluster: Cluster,
                    evolve: EvolveParams = DEFAULT_BARS) -> list[str]:
    """The default admission rule (full filtering without a val gate): the review's decision,
    ``evolve``'s new-/same-group bar and a PF registered under the candidate's id."""
    why = []
    bar = admission_bar(cluster.is_new_category, evolve)
    if review.decision != "ACCEPT":
        why.append(f"review decision {review.decision}")
    if review.q_skill < bar:
        why.append(f"Q_skill {review.q_skill:.3f} below the "
                   f"{'new-group' if cluster.is_new_category else 'same-group'} bar {bar:.2f}")
    if candidate.declared:
        from hasp.evolve.declarative import declaration_errors

        why += [f"declaration does not compile: {e}" for e in declaration_errors(candidate)]
    elif not candidate.code.strip():
        why.append("candidate has no PF code")
    elif registered_id(candidate.code) != candidate.skill_id:
        why.append(f"@register_pf id {registered_id(candidate.code)!r} != skill_id {candidate.skill_id!r}")
    return why


def _pf_text(candidate: Candidate) -> str:
    """What the admitted PF is made of: its code, or its declaration as canonical JSON."""
    if candidate.declared:
        return json.dumps(candidate.declaration, sort_keys=True)
    return candidate.code


def structural_refusals(root: Path, candidate: Candidate, max_library_size: int) -> list[str]:
    """What no filtering mode can waive: a folder id, a SKILL.md that parses, room in the library."""
    why = []
    try:
        SkillSpec(skill_id=candidate.skill_id)
    except ValueError:
        why.append(f"skill_id {candidate.skill_id!r} is not a valid folder id")
    try:
        spec = parse_skill_md(candidate.skill_md, "<candidate SKILL.md>")
        if spec.skill_id != candidate.skill_id:
            why.append(f"SKILL.md skill_id {spec.skill_id!r} != {candidate.skill_id!r}")
        if not spec.description.strip():
            why.append("SKILL.md has no description (an Agent Skills folder needs one)")
    except SkillFormatError as e:
        why.append(str(e))
    ids = active_ids(root)
    if candidate.skill_id not in ids and len(ids) + 1 > max_library_size:
        why.append(f"library is full ({len(ids)} active skills, cap {max_library_size})")
    return why


def _entry(candidate: Candidate, review: Review, cluster: Cluster, *, epoch: int, admitted: bool,
           reasons: list[str], version: int | None, path: str | None, bar: float) -> dict[str, Any]:
    return {
        "epoch": epoch, "timestamp": _now(), "skill_id": candidate.skill_id, "version": version,
        "category": cluster.category, "decision": "admitted" if admitted else "rejected",
        "review_decision": review.decision, "decided_by": review.decided_by, "reviewer": review.reviewer,
        "q_skill": review.q_skill, "review": review.scores(),
        "admission_bar": bar, "is_new_category": cluster.is_new_category,
        "cluster_support": cluster.support, "reasons": list(reasons), "feedback": review.feedback[:500],
        "parse_error": candidate.parse_error, "path": path, "proposal_format": candidate.proposal_format,
    }


def admit(library_root: Path, candidate: Candidate, review: Review, *, epoch: int, cluster: Cluster,
          max_library_size: int = MAX_LIBRARY_SIZE, record: bool = True, refusals: list[str] | None = None,
          accept_reason: str | None = None, extra: dict[str, Any] | None = None,
          evolve: EvolveParams = DEFAULT_BARS, domain: str | None = None) -> AdmissionResult:
    """Admit ``candidate`` as ``generated/<name>-v<N>/`` if the gates and the cap allow it.

    ``refusals`` are the reasons of the caller's gate table (``hasp.evolve.gate``); when
    None the default rule ``review_refusals`` applies. Structural checks always apply.
    ``extra`` (e.g. val-gate deltas, r_skill, filtering mode) is stored in the history entry.
    ``evolve`` holds the new-/same-group bars the default rule applies and the entry records.
    ``domain`` (the library's: search, math, code or a user task's name) is written into the admitted
    skill's ``hasp.yaml``, so ``hasp skills validate`` asks it about that domain's actions.
    Every call (admitted or not) is appended to ``library_history.json`` unless
    ``record=False``. Filesystem errors propagate after the temp folder is removed.
    """
    root = Path(library_root)
    gen = root / GENERATED_DIR
    gen.mkdir(parents=True, exist_ok=True)
    inside_library(root, gen)
    with _dir_lock(gen):
        bar = admission_bar(cluster.is_new_category, evolve)
        gate_why = review_refusals(candidate, review, cluster, evolve) if refusals is None else list(refusals)
        why = [*gate_why, *structural_refusals(root, candidate, max_library_size)]
        if why:
            entry = _entry(candidate, review, cluster, epoch=epoch, admitted=False,
                           reasons=[*why, *review.reasons], version=None, path=None, bar=bar)
            entry.update(extra or {})
            if record:
                record_decision(root, entry)
            return AdmissionResult(False, candidate.skill_id, None, None, "; ".join(why), entry)

        _sweep_stale_tmp(gen)
        version = next_version(root, candidate.skill_id)
        final = gen / version_name(candidate.skill_id, version)
        spec = parse_skill_md(candidate.skill_md, "<candidate SKILL.md>").model_copy(
            update={"version": version, "name": final.name, **({"domain": domain} if domain else {})})
        rel = str(final.relative_to(root))
        reasons = [accept_reason or f"accepted by {review.reviewer} reviewer ({review.decided_by}), "
                   f"Q_skill {review.q_skill:.3f} >= bar {bar:.2f}"]
        entry = _entry(candidate, review, cluster, epoch=epoch, admitted=True, reasons=reasons,
                       version=version, path=rel, bar=bar)
        entry.update(extra or {})
        meta = {
            "skill_id": candidate.skill_id, "version": version, "epoch": epoch, "timestamp": entry["timestamp"],
            "review": {**review.to_dict(), "raw_reply": review.raw_reply[:4000]},
            "admission_bar": entry["admission_bar"], "cluster": _cluster_summary(cluster),
            "candidate": {"parse_error": candidate.parse_error, "notes": list(candidate.notes),
                          "cluster_category": candidate.cluster_category},
            "proposal_format": candidate.proposal_format,
            "code_sha256": hashlib.sha256(_pf_text(candidate).encode()).hexdigest(),
            "gate": dict(extra or {}),
        }
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{candidate.skill_id}-", dir=gen))
        try:
            for name, text in render_skill_folder(spec, final.name).items():
                _write(tmp / name, text)
            if not candidate.declared:  # a declared PF lives in hasp.yaml (``pf:``)
                _write(tmp / "pf.py", candidate.code)
            _write(tmp / "metadata.json", json.dumps(meta, indent=1, ensure_ascii=False, default=str) + "\n")
            os.chmod(tmp, default_mode(is_dir=True))  # mkdtemp's 0700 would stay on the skill folder
            _fsync_dir(tmp)
            if final.exists():  # cannot happen under the lock unless someone edits by hand
                raise FileExistsError(f"{final} already exists")
            os.replace(tmp, final)
            _fsync_dir(gen)
        except BaseException:
            _discard_tmp(tmp)
            raise
        if record:
            record_decision(root, entry)
    return AdmissionResult(True, candidate.skill_id, version, rel, reasons[0], entry)


def inside_library(root: Path, target: Path) -> Path:
    """``target`` resolved, refused (``SkillFormatError``) unless it is a real folder inside the
    library ``root``: a symlinked ``generated/`` (or a link on the way) would make admission write
    outside the library, where the next load, snapshot or trust check reads it as the library's."""
    real_root, real = root.resolve(), target.resolve()
    if target.is_symlink() or (real != real_root and real_root not in real.parents):
        raise SkillFormatError(f"{target}: resolves to {real}, outside the library {real_root}; "
                               "admission writes only inside the library (remove the link)")
    return real


# --------------------------------------------------------------------------- snapshots

def snapshot(library_root: Path, dest: Path) -> Path:
    """Copy the active library (per base id the version the loader activates: the highest one that
    loads, ``loaded_versions``; same layout) and the history to ``dest`` (e.g.
    ``<root>/snapshots/epoch_<i>``). ``load_library(dest)`` then sees the same active skills. An existing ``dest`` is replaced; the copy appears atomically.

    Only regular files are copied: a symlink (to a host file, say) or a special file in a skill
    folder is left out with a logged line, never followed, since snapshots are logged as artifacts."""
    root, dest = Path(library_root), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{dest.name}-", dir=dest.parent))
    try:
        for _, folder, generated in loaded_versions(root).values():  # what the loader activates
            target = tmp / GENERATED_DIR / folder.name if generated else tmp / folder.name
            if folder.is_symlink():
                log.warning("%s: is a symbolic link (not copied)", folder)
                continue
            copy_folder(folder, target)
        if present(root / HISTORY_FILE):
            try:
                copy_file(root / HISTORY_FILE, tmp / HISTORY_FILE)
            except SkillFormatError as e:
                log.warning("%s (not copied)", e)
        swap_dir(tmp, dest, old_prefix=f"{TMP_PREFIX}old-")
    except BaseException:
        _discard_tmp(tmp)
        raise
    return dest
