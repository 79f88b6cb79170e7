"""JSON-lines reading shared by the benchmark loaders of every domain.

Each domain raises its own error type, but a malformed line must read the same everywhere: one
message that starts ``<file>:<line>:`` so the user can open the file at the bad row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["json_objects"]


def json_objects(lines: Iterable[str], path: Path,
                 error: Callable[[str], Exception]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line (1-based, blank lines still counted);
    a line that is not valid JSON or not an object raises ``error("<path>:<line>: ...")``."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row
