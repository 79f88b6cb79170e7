"""The traces a scheduled run has not read yet: a batch cut from a growing trace folder by a watermark.

Why: an agent in service keeps appending episodes to its logs (``hasp eval`` folders, journals, chat
logs), and a nightly evolution run should learn from what happened since the last run, not from
everything again. The watermark (kept with the served library, ``hasp.evolve.release``) records, per
trace file, how many lines were read and a hash of them; the next batch is the lines after that
point and every new file. A file whose read part changed (rotated, rewritten) is read again from its
start, with a logged line, since its old lines no longer say what was read. The batch is written as
plain files under the run's folder, so Phase A reads it like any trace folder and its cache key is
its content.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """The new lines of a trace source: where they were written, how many, and the watermark after them."""

    folder: Path
    n_lines: int
    files: dict[str, int]  # source file -> new lines taken from it
    mark: dict[str, Any]
    reread: list[str]  # files read again from their start (their read part changed)


def _prefix_hash(lines: list[bytes]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line)
    return h.hexdigest()[:16]


def _files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such trace file or folder")
    return sorted(p for p in source.rglob("*.jsonl") if p.is_file())


def new_batch(source: Path | str, mark: dict[str, Any] | None, dest: Path) -> Batch:
    """The lines of ``source`` (a trace file or folder) after ``mark``, written under ``dest`` with the
    same relative names; ``mark`` None reads everything. Only whole lines count: a last line still
    being written (no newline yet) is left for the next batch."""
    source, dest = Path(source), Path(dest)
    seen = (mark or {}).get("files", {}) if (mark or {}).get("source") == str(source) else {}
    if mark and mark.get("source") not in (None, str(source)):
        log.warning("trace source %s is not the one the watermark was kept for (%s): reading it whole",
                    source, mark.get("source"))
    files: dict[str, int] = {}
    new_mark: dict[str, Any] = {}
    reread: list[str] = []
    total = 0
    for path in _files(source):
        rel = path.name if source.is_file() else str(path.relative_to(source))
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        if lines and not lines[-1].endswith(b"\n"):
            lines = lines[:-1]  # still being written
        before = seen.get(rel)
        start = 0
        if before:
            n = int(before.get("lines", 0))
            if n <= len(lines) and _prefix_hash(lines[:n]) == before.get("hash"):
                start = n
            else:
                reread.append(rel)
                log.warning("%s: its first %d lines changed since the last run (rotated or rewritten): "
                            "reading it again from the start", path, n)
        fresh = lines[start:]
        new_mark[rel] = {"lines": len(lines), "hash": _prefix_hash(lines)}
        if fresh:
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"".join(fresh))
            files[rel] = len(fresh)
            total += len(fresh)
    return Batch(dest, total, files, {"source": str(source), "files": new_mark}, reread)
