"""Released versions of a deployed skill library: publish, changelog, rollback, trace watermark.

Why: a scheduled evolution run changes the library an agent serves from. Its users need to know which
version is live, what changed and on what evidence, and to go back in one command when a release
misbehaves; a run that learns from logged traces needs to know which traces it has already read.
So the served folder (the one ``hasp eval --library`` or a running agent loads) keeps its own state
beside the skills, in ``<library>/.hasp/`` (the loader skips dot-folders):

- ``releases/v<N>/``: each released version's active skills and history, as ``snapshot`` copies them;
- ``changelog.jsonl``: one entry per publish or rollback (version, time, skills added / changed /
  removed, and the evidence the caller names: the epoch folder, traces, anchors, gate results);
- ``state.json``: the live version and the trace watermark (an opaque dict the trace reader owns).

The first publish onto a folder without state releases its current content as v1 first, so the
library as it stood before any scheduled run can always be restored. Every write is atomic; the live
skills are swapped in as one folder rename (``hasp.atomic.swap_dir``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hasp.atomic import swap_dir, write_json_atomic
from hasp.evolve.admit import TMP_PREFIX, snapshot
from hasp.pf.library import loaded_versions

log = logging.getLogger(__name__)

STATE_DIR = ".hasp"
CHANGELOG = "changelog.jsonl"
STATE = "state.json"


class ReleaseError(ValueError):
    """A release operation that cannot be done; the message names the folder and what to do."""


@dataclass(frozen=True)
class Entry:
    """One changelog line: what became live, from what, and on what evidence."""

    version: int
    action: str  # init | publish | rollback
    created: str
    previous: int | None
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


LOCK = "lock"


@contextmanager
def lock(lib: Path, who: str = "a release") -> Iterator[None]:
    """Hold the served library's lock (``<library>/.hasp/lock``) for the block, or raise ``ReleaseError``
    at once when another process holds it. Why: two nightly runs (or a run and a rollback) over the same
    library would read the same watermark and race each other's release. The lock is an OS file lock
    (``filelock``): it goes with the process that held it, so a killed run never leaves a stale one."""
    from filelock import FileLock, Timeout

    if not Path(lib).is_dir():
        raise ReleaseError(f"{lib}: not a skill library folder")
    path = _state_dir(lib) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    held = FileLock(str(path), timeout=0)
    try:
        held.acquire()
    except Timeout:
        raise ReleaseError(f"{path}: another process is changing {lib} (a nightly run, publish or rollback); "
                           f"{who} waits for it to finish: run it again then") from None
    try:
        yield
    finally:
        held.release()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _state_dir(lib: Path) -> Path:
    return Path(lib) / STATE_DIR


def _read_state(lib: Path) -> dict[str, Any]:
    p = _state_dir(lib) / STATE
    if not p.exists():
        return {}
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReleaseError(f"{p}: unreadable release state ({e}); restore it from {CHANGELOG} or remove "
                           f"{STATE_DIR}/ to start the release history again") from None
    if not isinstance(state, dict) or not isinstance(state.get("version"), int):
        raise ReleaseError(f"{p}: field 'version' must be an integer")
    return state


def _write_state(lib: Path, state: dict[str, Any]) -> None:
    write_json_atomic(state, _state_dir(lib) / STATE)


def changelog(lib: Path) -> list[Entry]:
    """The entries of ``lib``'s changelog, oldest first; a line that does not parse is skipped with a
    logged line naming file and line (the others still read)."""
    p = _state_dir(lib) / CHANGELOG
    out: list[Entry] = []
    if not p.exists():
        return out
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Entry(**json.loads(line)))
        except (ValueError, TypeError) as e:
            log.warning("%s:%d: changelog entry skipped (%s)", p, i, e)
    return out


def _append(lib: Path, entry: Entry) -> None:
    p = _state_dir(lib) / CHANGELOG
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry), sort_keys=True, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def live_version(lib: Path) -> int | None:
    """The released version ``lib`` serves (None: it was never released)."""
    return _read_state(lib).get("version")


def watermark(lib: Path) -> dict[str, Any] | None:
    """What the trace reader recorded as read up to (None: nothing read yet)."""
    return _read_state(lib).get("watermark")


def set_watermark(lib: Path, mark: dict[str, Any]) -> None:
    """Record ``mark`` as the traces read so far (kept with the library, so a copy of the folder
    carries it). The library must have been released once (``publish`` or ``init``)."""
    state = _read_state(lib)
    if not state:
        state = {"version": init(lib).version}
    _write_state(lib, {**state, "watermark": mark})


def _release_dir(lib: Path, version: int) -> Path:
    return _state_dir(lib) / "releases" / f"v{version}"


def _skills(root: Path) -> dict[str, str]:
    return {sid: str(v[0]) for sid, v in loaded_versions(root).items()}


def _diff(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(s for s in set(before) & set(after) if before[s] != after[s])
    return added, changed, removed


def _make_live(lib: Path, release: Path) -> None:
    """Swap ``release``'s skills in as ``lib``'s content, keeping ``lib``'s state folder."""
    lib = Path(lib)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{lib.name}-", dir=lib.parent))
    try:
        for item in release.iterdir():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        os.replace(_state_dir(lib), tmp / STATE_DIR)  # the state moves with the folder that becomes live
        swap_dir(tmp, lib, old_prefix=f"{TMP_PREFIX}old-")
    except BaseException:
        if (tmp / STATE_DIR).exists() and not _state_dir(lib).exists():
            os.replace(tmp / STATE_DIR, _state_dir(lib))
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def init(lib: Path, evidence: dict[str, Any] | None = None) -> Entry:
    """Release ``lib``'s current content as v1 (a no-op returning the first entry when it has state)."""
    lib = Path(lib)
    if not lib.is_dir():
        raise ReleaseError(f"{lib}: no such library folder")
    if _read_state(lib):
        entries = changelog(lib)
        if entries:
            return entries[0]
        log.warning("%s: release state without a changelog (%s missing or empty): the history of earlier "
                    "versions is lost; the next entries start from v%d", lib, _state_dir(lib) / CHANGELOG,
                    live_version(lib) or 1)
        return Entry(live_version(lib) or 1, "init", _now(), None, evidence={"note": "changelog missing"})
    snapshot(lib, _release_dir(lib, 1))
    entry = Entry(1, "init", _now(), None, added=sorted(_skills(lib)), evidence=evidence or {})
    _append(lib, entry)
    _write_state(lib, {"version": 1})
    return entry


def publish(lib: Path, evolved: Path, evidence: dict[str, Any] | None = None) -> Entry:
    """Make ``evolved`` (an epoch's admitted library) the live content of ``lib`` as a new version,
    with a changelog entry naming ``evidence``. A library without state is released as v1 first."""
    lib, evolved = Path(lib), Path(evolved)
    if not Path(evolved).is_dir():
        raise ReleaseError(f"{evolved}: no such library folder to publish")
    init(lib)
    state = _read_state(lib)
    before = _skills(lib)
    version = max([e.version for e in changelog(lib)] + [state["version"]]) + 1
    release = snapshot(evolved, _release_dir(lib, version))
    added, changed, removed = _diff(before, _skills(release))
    _make_live(lib, release)
    entry = Entry(version, "publish", _now(), state["version"], added, changed, removed, evidence or {})
    _append(lib, entry)
    _write_state(lib, {**state, "version": version})
    log.info("%s: released v%d (added %s, changed %s, removed %s)", lib, version, added, changed, removed)
    return entry


def rollback(lib: Path, to: int | None = None) -> Entry:
    """Make an earlier release live again: ``to``, or the version the live one was made from."""
    lib = Path(lib)
    state = _read_state(lib)
    if not state:
        raise ReleaseError(f"{lib}: never released (no {STATE_DIR}/{STATE}); nothing to roll back to")
    current = state["version"]
    if to is None:
        made_from = [e.previous for e in changelog(lib) if e.version == current and e.action == "publish"]
        to = made_from[-1] if made_from else None
        if to is None:
            raise ReleaseError(f"{lib}: v{current} has no earlier release to roll back to; pass --to")
    release = _release_dir(lib, to)
    if not release.is_dir():
        known = sorted(int(p.name[1:]) for p in release.parent.glob("v*") if p.name[1:].isdigit())
        raise ReleaseError(f"{lib}: no release v{to} (released: {', '.join(f'v{v}' for v in known) or 'none'})")
    added, changed, removed = _diff(_skills(lib), _skills(release))
    _make_live(lib, release)
    entry = Entry(to, "rollback", _now(), current, added, changed, removed, {"from_version": current})
    _append(lib, entry)
    _write_state(lib, {**state, "version": to})
    return entry
