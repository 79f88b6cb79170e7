"""Cache keys built from *content*, never from path strings.

A task's key is the hash of: the task's name, the content of every input file or
folder it reads, the params sections it uses, and the identity of the model it
calls. Changing a skill file, a dataset row or a knob changes the key; moving the
project or re-running an unchanged epoch does not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy


def content_hash(path: Path | str) -> str:
    """sha256 of a file, or of every file under a folder (relative names + bytes)."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_file():
        h.update(p.read_bytes())
    elif p.is_dir():
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            rel = f.relative_to(p)
            if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
                continue
            h.update(str(rel).encode())
            h.update(f.read_bytes())
    else:
        h.update(b"<missing>")
    return h.hexdigest()


def key_of(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()[:32]


class ByCacheKey(CachePolicy):
    """Use the task's ``cache_key`` argument (computed by the flow from content hashes) as the key."""

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str | None:
        key = inputs.get("cache_key")
        return f"{task_ctx.task.name}-{key}" if key else None


BY_CACHE_KEY = ByCacheKey()
