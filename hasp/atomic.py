"""Atomic file and folder writes: a kill at any point leaves the old content or the new, never half.

Every pipeline artifact that a later phase, a rerun or a rollback reads (phase summaries,
trajectories, training rows, the library history, the frontier) goes through these helpers, so
the crash-safety rule lives in one place: write a temp file beside the target, fsync, then
``os.replace`` (atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, is_dataclass
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "write_json_atomic", "write_jsonl_atomic", "write_json", "read_json",
           "write_jsonl", "read_jsonl",
           "swap_dir", "default_mode"]


def default_mode(is_dir: bool = False) -> int:
    """The mode ``open()``/``mkdir()`` would give under the current umask. ``mkstemp``/``mkdtemp``
    create 0600/0700, which an MLflow UI, a DVC remote or a server running as another user
    cannot read once the temp entry is renamed into place."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if is_dir else 0o666) & ~umask


def atomic_write(path: str | Path, fill: Callable[[IO[str]], None]) -> Path:
    """Create ``path`` from ``fill(file)`` atomically (temp file beside it, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(obj: Any, path: str | Path, *, indent: int = 2,
                      default: Callable[[Any], Any] | None = str) -> Path:
    """One JSON document, atomically (non-JSON values go through ``default``)."""
    def fill(f: IO[str]) -> None:
        json.dump(obj, f, indent=indent, ensure_ascii=False, default=default)
        f.write("\n")
    return atomic_write(path, fill)


def write_jsonl_atomic(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """JSON lines (keys sorted, so equal rows give equal files and equal content hashes), atomically."""
    def fill(f: IO[str]) -> None:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    return atomic_write(path, fill)


def _jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(obj: Any, path: str | Path) -> None:
    """Atomic JSON write of a pipeline artifact; dataclasses, pydantic models and paths are converted."""
    write_json_atomic(obj, path, default=_jsonable)


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """JSON lines, atomically (the name every pipeline module uses)."""
    return write_jsonl_atomic(rows, path)


def json_file_error(path: str | Path) -> str | None:
    """Why a ``.json`` / ``.jsonl`` file does not read whole (None when it does): the one check
    behind cache-output verification and the chaos run's artifact audit."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            json.loads(text)
        else:
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def swap_dir(tmp: Path, dest: Path, *, old_prefix: str = ".tmp-old-") -> None:
    """Put the finished folder ``tmp`` at ``dest``: the old ``dest`` is moved aside, ``tmp`` renamed
    in, then the old copy removed. A kill leaves ``dest`` either old or new (plus a stray aside copy
    whose name starts with ``old_prefix``, which loaders skip)."""
    old = None
    if tmp.stat().st_mode & 0o777 == 0o700:  # a mkdtemp folder: give it the mode mkdir would
        os.chmod(tmp, default_mode(is_dir=True))
    if dest.exists():
        old = dest.parent / f"{old_prefix}{dest.name}-{os.getpid()}-{time.time_ns()}"
        os.replace(dest, old)
    os.replace(tmp, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
