"""The traces a scheduled run has not read yet: a batch cut from a growing trace folder by a watermark.

Why: an agent in service keeps appending episodes to its logs (``hasp eval`` folders, journals, chat
logs), and a nightly evolution run should learn from what happened since the last run, not from
everything again. The watermark (kept with the served library, ``hasp.evolve.release``) records, per
trace file, how many lines and bytes were read and a hash of the last bytes before that point; the
next batch is the lines after it and every new file, read without reading the old part again. A file whose read part changed (rotated, rewritten) is read again from its
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


#: bytes before the watermark whose hash checks that the part already read is unchanged
TAIL = 4096


def _prefix_hash(lines: list[bytes]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line)
    return h.hexdigest()[:16]


def _tail_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _read_after(path: Path, before: dict[str, Any] | None) -> tuple[int, list[bytes], bool]:
    """``(lines before, whole new lines, reread)`` of ``path`` after the watermark entry ``before``.

    Only the bytes after the mark are read (plus the ``TAIL`` bytes before it, whose hash must match):
    a log that grows by a day's episodes costs a day's read, not the whole file's. An entry written
    before byte marks existed is checked by its lines' hash instead. A file whose read part changed
    is read again from its start (``reread``)."""
    size = path.stat().st_size
    if before and "bytes" in before:
        off = int(before["bytes"])
        with path.open("rb") as f:
            lo = max(0, off - TAIL)
            f.seek(lo)
            head = f.read(off - lo) if off <= size else b""
            if off <= size and _tail_hash(head) == before.get("tail"):
                return int(before.get("lines", 0)), _whole(f.read()), False
    elif before:
        lines = _whole(path.read_bytes())
        n = int(before.get("lines", 0))
        if n <= len(lines) and _prefix_hash(lines[:n]) == before.get("hash"):
            return n, lines[n:], False
    else:
        return 0, _whole(path.read_bytes()), False
    return 0, _whole(path.read_bytes()), True


def _whole(data: bytes) -> list[bytes]:
    """The complete lines of ``data``: a last line still being written (no newline yet) waits."""
    lines = data.splitlines(keepends=True)
    return lines[:-1] if lines and not lines[-1].endswith(b"\n") else lines


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
        before = seen.get(rel)
        n_before, fresh, again = _read_after(path, before)
        if again:
            reread.append(rel)
            log.warning("%s: its first %s lines changed since the last run (rotated or rewritten): "
                        "reading it again from the start", path, before.get("lines"))
        off = (int(before["bytes"]) if before and "bytes" in before and not again else 0) + sum(map(len, fresh))
        if before and "bytes" not in before and not again:  # an older mark: count the bytes once
            off = sum(map(len, _whole(path.read_bytes())[:n_before + len(fresh)]))
        with path.open("rb") as f:
            f.seek(max(0, off - TAIL))
            tail = f.read(off - max(0, off - TAIL))
        new_mark[rel] = {"lines": n_before + len(fresh), "bytes": off, "tail": _tail_hash(tail)}
        if fresh:
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"".join(fresh))
            files[rel] = len(fresh)
            total += len(fresh)
    return Batch(dest, total, files, {"source": str(source), "files": new_mark}, reread)
