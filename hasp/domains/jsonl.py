"""JSON-lines reading shared by the benchmark loaders of every domain.

Each domain raises its own error type, but a malformed line must read the same everywhere: one
message that starts ``<file>:<line>:`` so the user can open the file at the bad row. Files are read
as bytes and decoded line by line, because a text-mode reader fails on a binary line with a bare
codec error that names neither the file nor the line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["decode_text", "json_file_objects", "json_objects"]


def decode_text(data: bytes, path: Path, error: Callable[[str], Exception], lineno: int | None = None) -> str:
    """``data`` as UTF-8; otherwise ``error("<path>:<line>: not UTF-8 text ...")``. Without a known
    line number the line is counted up to the first bad byte, so whole-file reads point at it too."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lineno if lineno is not None else data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}; "
                    "is this a binary or differently encoded file?)") from None


def json_objects(lines: Iterable[str | bytes], path: Path,
                 error: Callable[[str], Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line (1-based, blank lines still counted);
    a line that is not UTF-8, not valid JSON or not an object raises ``error("<path>:<line>: ...")``."""
    for lineno, raw in enumerate(lines, 1):
        line = decode_text(raw, path, error, lineno) if isinstance(raw, bytes) else raw
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


def json_file_objects(path: Path, error: Callable[[str], Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`json_objects` over the lines of ``path``, read as bytes so every line is checked."""
    with path.open("rb") as fh:
        yield from json_objects(fh, path, error)
