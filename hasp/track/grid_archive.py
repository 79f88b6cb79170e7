"""A small, readable copy of what a post-training grid measured, kept after its run folder is gone.

Why: a grid's output folder holds adapters, merged models, rollout pools and full trajectories
(prompts included): hundreds of megabytes that live on the machine that ran it. The measured result
is much smaller: the grid's summary, each preset's record and training summaries, and per test
episode its question id, score and the actions with their PF audit. Archived, that is enough to
re-run the report, pool seeds that ran on different machines, and recount where answers were lost,
without the run folder. The archive has the run folder's layout, so every reader of a grid folder
reads an archive unchanged.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.atomic import read_jsonl, write_json, write_jsonl

#: the question id -> hop count file of an archive (the run folder reads the prepared data instead)
HOPS_FILE = "hops.json"
#: summaries copied as they are (small JSON files), as globs under the grid folder
KEPT_JSON = ("grid.json", "metrics.json", "eval_untrained/**/*.json", "*/experiment.json", "*/metrics.json",
             "*/eval/**/*.json", "*/phase_*/train/train_metrics.json")
#: trajectory files whose episodes are slimmed, as globs under the grid folder
EPISODES = ("eval_untrained/**/*.jsonl", "*/eval/**/*.jsonl")
#: characters of an observation or a reply an archived step keeps
KEEP_CHARS = 200


def slim_episode(ep: Mapping[str, Any]) -> dict[str, Any]:
    """One trajectory record without what only a re-run needs: the prompts, the state snapshots and
    the feedback payloads go; observations and replies are cut to ``KEEP_CHARS``. What stays still
    loads with ``Trajectory.from_dict``."""
    out = dict(ep)
    if "steps" not in ep:  # an evaluation's per-episode record file, not trajectories: kept as it is
        return out
    steps = []
    for s in ep.get("steps") or []:
        s = dict(s)
        s["prompt_messages"] = []
        s["raw_output"] = str(s.get("raw_output") or "")[:KEEP_CHARS]
        s["observation"] = str(s.get("observation") or "")[:KEEP_CHARS]
        if s.get("audit"):
            a = dict(s["audit"])
            a["state"] = {}
            a["feedback"] = {k: v for k, v in (a.get("feedback") or {}).items() if isinstance(v, (int, float, bool))}
            a["context"] = [str(c)[:KEEP_CHARS] for c in a.get("context") or []]
            s["audit"] = a
        steps.append(s)
    out["steps"] = steps
    return out


def archive_grid(grid_dir: Path, dest: Path, hops_of: Mapping[str, int]) -> list[Path]:
    """Write the archive of ``grid_dir`` into ``dest`` (replacing an earlier archive there); returns
    the files written. ``hops_of`` maps test question ids to hop counts (kept as ``hops.json``)."""
    grid_dir, dest = Path(grid_dir), Path(dest)
    if not (grid_dir / "grid.json").is_file():
        raise FileNotFoundError(f"{grid_dir / 'grid.json'}: not a grid folder (no grid.json)")
    if dest.exists():
        shutil.rmtree(dest)
    written: list[Path] = []
    for pattern in KEPT_JSON:
        for src in sorted(grid_dir.glob(pattern)):
            to = dest / src.relative_to(grid_dir)
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, to)
            written.append(to)
    for pattern in EPISODES:
        for src in sorted(grid_dir.glob(pattern)):
            to = dest / src.relative_to(grid_dir)
            write_jsonl([slim_episode(ep) for ep in read_jsonl(src)], to)
            written.append(to)
    write_json(dict(sorted(hops_of.items())), dest / HOPS_FILE)
    written.append(dest / HOPS_FILE)
    return written
