"""The Prefect side of cache keys: a task's key is the ``cache_key`` argument the flow computed.

The key itself is a content fingerprint (``hasp.fingerprint``): for an epoch phase the hash of its
code, the params keys and the upstream files the phase graph (``hasp.evolve.phase_graph``) declares,
plus the identity of the model it calls. Changing a skill file, a dataset row or a knob changes the
key; moving the project or re-running an unchanged epoch does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy

from hasp.atomic import json_file_error


class ByCacheKey(CachePolicy):
    """Use the task's ``cache_key`` argument (computed by the flow from content hashes) as the key."""

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> str | None:
        key = inputs.get("cache_key")
        return f"{task_ctx.task.name}-{key}" if key else None


BY_CACHE_KEY = ByCacheKey()


def output_complete(path: Path | str) -> bool:
    """True when ``path`` exists and reads whole: a folder holding a file, JSON that parses, JSON
    lines that all parse (other files: present). A cached task whose output fails this re-runs,
    so a fresh output folder, a deleted file or a corrupted one never leaves a hole behind a hit."""
    p = Path(path)
    if p.is_dir():
        return any(x.is_file() for x in p.rglob("*"))
    if not p.is_file():
        return False
    return p.suffix not in (".json", ".jsonl") or json_file_error(p) is None


def outputs_complete(*paths: Path | str) -> bool:
    return all(output_complete(p) for p in paths)
