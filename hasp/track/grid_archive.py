"""A small, readable copy of what a post-training grid measured, kept after its run folder is gone.

Why: a grid's output folder holds adapters, merged models, rollout pools and full trajectories
(prompts included): hundreds of megabytes that live on the machine that ran it. The measured result
is much smaller: the grid's summary, each preset's record and training summaries, and per test
episode its question id, score and the actions with their PF audit. Archived, that is enough to
re-run the report, pool seeds that ran on different machines, and recount where answers were lost,
without the run folder. The archive has the run folder's layout, so every reader of a grid folder
reads an archive unchanged.

One seed's grid may run in parts (``hasp experiment grid --preset ...``), on different machines; each
part is merged into the seed's archive (``merge=True``) when it measured the same untrained agent on
the same questions, so every preset of the archive is paired against one baseline.
"""

from __future__ import annotations

import base64
import json
import pickle
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hasp.atomic import read_json, read_jsonl, write_json, write_jsonl
from hasp.provenance import PROVENANCE_KEY

#: the question id -> hop count file of an archive (the run folder reads the prepared data instead)
HOPS_FILE = "hops.json"
#: benchmark v2: question id -> whether training used its template (the run folder reads test.jsonl)
TEMPLATES_FILE = "templates_seen.json"
#: the parts of a merged archive: per part the presets it ran and its provenance
PARTS_KEY = "parts"
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


class ArchiveMergeError(ValueError):
    """A grid part that cannot join an archive: its untrained agent's answers differ from the archive's."""


def _answers(folder: Path) -> dict[str, list[tuple[str, Any]]]:
    """Per trajectory file under ``folder``, its (question id, EM) pairs."""
    return {f.relative_to(folder).as_posix(): sorted((str(ep.get("qid")), ep.get("em")) for ep in read_jsonl(f))
            for f in sorted(folder.rglob("*.jsonl")) if not f.name.endswith(".episodes.jsonl")}


def _merged_grid(old: Mapping[str, Any], new: Mapping[str, Any], rerun: Mapping[str, bool]) -> dict[str, Any]:
    """``old`` with ``new``'s presets added (a preset in both: ``new``'s record); each part keeps its
    presets and provenance under ``parts``, and ``rerun``: per preset it measured again, whether its
    answers were the same as before (a preset re-trained because a later one starts from it).

    A part archived while its grid ran (``partial``) knows less than a finished one: what it lacks (the
    base model, the untrained evaluation's wall time) stays as archived. When the grid then finishes and
    is archived again, its part replaces the partial one it grew from (same presets, same answers): one
    run, one part line."""
    def parts(g: Mapping[str, Any]) -> list[dict[str, Any]]:
        return list(g.get(PARTS_KEY) or [{"presets": list(g.get("presets") or []),
                                          PROVENANCE_KEY: g.get(PROVENANCE_KEY),
                                          **({"partial": True} if g.get("partial") else {})}])

    experiments = {**(old.get("experiments") or {}), **(new.get("experiments") or {})}
    before, added = parts(old), parts(new)
    grew = before[-1] if before and before[-1].get("partial") else None
    if grew is not None and all(rerun.get(n) for n in grew.get("presets") or []):
        before = before[:-1]
        rerun = {n: same for n, same in rerun.items() if n not in grew["presets"]}
    if rerun:
        added[-1] = {**added[-1], "rerun_same_answers": dict(rerun)}
    old_untrained = old.get("untrained") or {}
    untrained = {**old_untrained, **{arm: {**(old_untrained.get(arm) or {}), **rec}
                                     for arm, rec in (new.get("untrained") or {}).items()}}
    merged = {**old, **{k: v for k, v in new.items() if v is not None}, "untrained": untrained,
              "presets": list(experiments), "experiments": experiments, PARTS_KEY: before + added}
    merged.pop("partial", None)
    return {**merged, "partial": True} if new.get("partial") else merged


def archive_grid(grid_dir: Path, dest: Path, hops_of: Mapping[str, int],
                 template_seen: Mapping[str, bool] | None = None, *, merge: bool = False,
                 grid: Mapping[str, Any] | None = None) -> list[Path]:
    """Write the archive of ``grid_dir`` into ``dest``; returns the files written. ``hops_of`` maps
    test question ids to hop counts (kept as ``hops.json``), ``template_seen`` to whether training saw
    their template (``templates_seen.json``, benchmark v2).

    Without ``merge`` an earlier archive at ``dest`` is replaced. With ``merge`` this grid's presets
    are added to it (replacing those it ran again) when both measured the same untrained answers per
    question; else ``ArchiveMergeError``, and ``dest`` is left as it was.

    ``grid`` is the grid record when ``grid_dir`` has no ``grid.json`` yet (a grid still running: its
    finished presets); only the files of the presets it names are archived then."""
    grid_dir, dest = Path(grid_dir), Path(dest)
    if grid is None:
        if not (grid_dir / "grid.json").is_file():
            raise FileNotFoundError(f"{grid_dir / 'grid.json'}: not a grid folder (no grid.json)")
        grid = read_json(grid_dir / "grid.json")
    kept_dirs = {"eval_untrained", *(grid.get("experiments") or {})}

    def kept(src: Path) -> bool:
        parts = src.relative_to(grid_dir).parts
        return len(parts) == 1 or parts[0] in kept_dirs

    merging = merge and (dest / "grid.json").is_file()
    if merging:
        before = read_json(dest / "grid.json")
        before_metrics = read_json(dest / "metrics.json") if (dest / "metrics.json").is_file() else {}
        if _answers(dest / "eval_untrained") != _answers(grid_dir / "eval_untrained"):
            raise ArchiveMergeError(f"{grid_dir}: its untrained agent answered differently from the one archived in "
                                    f"{dest}; archive it apart (its presets are paired against another baseline)")
        rerun = {}
        for name in grid.get("presets") or []:
            if (dest / name / "eval").is_dir():
                rerun[name] = _answers(dest / name / "eval") == _answers(grid_dir / name / "eval")
            shutil.rmtree(dest / name, ignore_errors=True)
    elif dest.exists():
        shutil.rmtree(dest)
    written: list[Path] = []
    for pattern in KEPT_JSON:
        for src in sorted(x for x in grid_dir.glob(pattern) if kept(x)):
            to = dest / src.relative_to(grid_dir)
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, to)
            written.append(to)
    for pattern in EPISODES:
        for src in sorted(x for x in grid_dir.glob(pattern) if kept(x)):
            to = dest / src.relative_to(grid_dir)
            write_jsonl([slim_episode(ep) for ep in read_jsonl(src)], to)
            written.append(to)
    if merging:
        write_json(_merged_grid(before, grid, rerun), dest / "grid.json")
        metrics = read_json(grid_dir / "metrics.json") if (grid_dir / "metrics.json").is_file() else {}
        write_json({**before_metrics, **metrics}, dest / "metrics.json")
    elif not (grid_dir / "grid.json").is_file():
        write_json(dict(grid), dest / "grid.json")
        written.append(dest / "grid.json")
    write_json(dict(sorted(hops_of.items())), dest / HOPS_FILE)
    written.append(dest / HOPS_FILE)
    if template_seen:
        write_json(dict(sorted(template_seen.items())), dest / TEMPLATES_FILE)
        written.append(dest / TEMPLATES_FILE)
    return written


#: where an archive keeps the cached result record of its untrained evaluation
RECORDS_DIR = "cache_records"
#: the name the grid's evaluation task gives its cached result records (``tasks/experiment.py``)
EVAL_RECORD_PREFIX = "evaluate-arms-"


def _record_result(path: Path) -> Any:
    """The result a cached task record holds (a JSON record whose ``result`` is a base64 pickle, as the
    grid's tasks persist them); None when the file is not such a record."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if (record.get("metadata") or {}).get("serializer", {}).get("type") != "pickle":
            return None
        return pickle.loads(base64.b64decode(record["result"]))  # noqa: S301 - our own run's cache, not input
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pickle.UnpicklingError, EOFError):
        return None


def _scores(summaries: Any) -> dict[str, tuple[Any, ...]]:
    """``{arm: (n, em, f1)}`` of an evaluation's summaries (what identifies its record; the record also
    holds the wall time, which ``metrics.json`` does not)."""
    if not isinstance(summaries, dict):
        return {}
    return {str(k): (v.get("n"), v.get("em"), v.get("f1")) for k, v in summaries.items() if isinstance(v, dict)}


def keep_untrained_record(storage: Path, grid_dir: Path, dest: Path) -> Path | None:
    """Copy the cached result record of ``grid_dir``'s untrained evaluation from the task result
    storage ``storage`` into the archive ``dest``: the record whose result has that evaluation's arms
    and scores (``eval_untrained/metrics.json``). Returns the copy, or None when no record matches.

    Why: a later part of the same seed's grid, on a fresh machine, then reuses the measured untrained
    agent (a cache hit under the same key: same code, data, library, settings and model) instead of
    measuring it again, so every part is paired against the same answers."""
    metrics = read_json(Path(grid_dir) / "eval_untrained" / "metrics.json")
    want = _scores(metrics.get("generated") if isinstance(metrics, dict) else None)
    if not want:
        return None
    for f in sorted(Path(storage).glob(f"{EVAL_RECORD_PREFIX}*")):
        if _scores(_record_result(f)) == want:
            to = Path(dest) / RECORDS_DIR / f.name
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, to)
            return to
    return None


def restore_untrained(archive: Path, grid_dir: Path, storage: Path) -> list[Path]:
    """Put an archive's untrained evaluation (its files and its cached result record) back into the run
    folder ``grid_dir`` and the task result storage ``storage``; returns the files written, none when
    the archive kept no record or the run folder already has an untrained evaluation."""
    archive, grid_dir = Path(archive), Path(grid_dir)
    records = sorted((archive / RECORDS_DIR).glob(f"{EVAL_RECORD_PREFIX}*"))
    if not records or (grid_dir / "eval_untrained").exists():
        return []
    written = []
    for src in sorted((archive / "eval_untrained").rglob("*")):
        if src.is_file():
            to = grid_dir / src.relative_to(archive)
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, to)
            written.append(to)
    Path(storage).mkdir(parents=True, exist_ok=True)
    for r in records:
        shutil.copyfile(r, Path(storage) / r.name)
        written.append(Path(storage) / r.name)
    return written
