"""Keep the model ladder's finished episodes in the repository, so a ladder longer than one machine's
life resumes on the next machine instead of starting again.

Why: at 200 test questions the ladder is about ten hours of CPU, and a run folder does not outlive its
machine. ``save`` copies each configuration's result files (the cells' episode journals, their
trajectory files and ``metrics.json``) from the run folder into the archive and records which commit
measured them; ``restore`` puts them back into a fresh run folder before ``bench/model_ladder.py``
starts. A restored journal is resumed only by an evaluation with the same cell key (the evaluation
code, questions, settings, library and the served weights' hash: ``hasp.eval.journal``), so the ladder
must run from a worktree at the archived commit; under other code the cells start afresh (logged), and
nothing of two commits is mixed in one score. The archive is compact: each step's ``prompt_messages``
(the whole conversation so far, re-sent at every step: most of a file's bytes, and rebuilt from the rest)
is left out and every file is gzipped, so a restored episode's trajectory has its steps without them.

    python bench/ladder_archive.py restore --out /tmp/ladder --archive bench/ladder_runs/full
    python bench/ladder_archive.py save --out /tmp/ladder --archive bench/ladder_runs/full --worktree /tmp/wt
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import shutil
import subprocess
from pathlib import Path

#: the files of a configuration's evaluation folder that hold results (plots and params are rebuilt)
RESULT_GLOBS = ("*.jsonl", "*.json")
PARTS = "parts.jsonl"


def result_files(folder: Path) -> list[Path]:
    """The result files under one configuration's evaluation folder, relative to it."""
    return sorted({p.relative_to(folder) for g in RESULT_GLOBS for p in folder.rglob(g) if p.is_file()})


def archived_files(folder: Path) -> list[Path]:
    """The archive's files of one configuration, relative to it and without the ``.gz``."""
    return sorted(p.relative_to(folder).with_suffix("") for p in folder.rglob("*.gz") if p.is_file())


def compact(line: str) -> str:
    """One jsonl row (a journal record or a trajectory) without its steps' ``prompt_messages``."""
    try:
        row = json.loads(line)
    except ValueError:
        return line  # a torn last line stays torn: the journal's reader stops there, as it would have
    traj = row.get("record", {}).get("traj") if isinstance(row.get("record"), dict) else row
    for step in (traj.get("steps") or []) if isinstance(traj, dict) else []:
        if isinstance(step, dict):
            step.pop("prompt_messages", None)
    return json.dumps(row)


def configurations(root: Path) -> list[Path]:
    """The configuration folders of a run or an archive (the generated data folders are not results)."""
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("data-")) if root.is_dir() else []


def episodes_in(path: Path) -> int:
    """Finished episodes in a journal (its first line is the key) or rows of a trajectory file."""
    try:
        n = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    except (OSError, UnicodeDecodeError):
        return 0
    return n - 1 if path.name.endswith(".journal.jsonl") else n


def save(out: Path, archive: Path, commit: str) -> list[str]:
    """Copy every configuration's result files from ``out`` into ``archive``; returns a line per one."""
    lines = []
    archive.mkdir(parents=True, exist_ok=True)
    for cfg in configurations(out):
        files = result_files(cfg)
        if not files:
            continue
        dest = archive / cfg.name
        if dest.exists():
            shutil.rmtree(dest)  # the run folder is newer: a finished cell's journal is gone from it
        for rel in files:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            text = (cfg / rel).read_text(encoding="utf-8")
            if rel.suffix == ".jsonl":
                text = "".join(compact(line) + "\n" for line in text.splitlines() if line.strip())
            with gzip.open(dest / f"{rel}.gz", "wt", encoding="utf-8") as f:
                f.write(text)
        cells: dict[str, int] = {}  # dataset/variant -> episodes (its journal's, or its finished file's)
        for rel in files:
            name = rel.name.removesuffix(".journal.jsonl").removesuffix(".jsonl")
            if rel.suffix == ".jsonl" and not name.endswith(".episodes"):
                cell = f"{rel.parent}/{name}"
                cells[cell] = max(cells.get(cell, 0), episodes_in(cfg / rel))
        part = {"configuration": cfg.name, "commit": commit, "finished": (cfg / "metrics.json").is_file()
                and not any(r.name.endswith(".journal.jsonl") for r in files),
                "saved": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "episodes": cells}
        with open(archive / PARTS, "a", encoding="utf-8") as f:
            f.write(json.dumps(part) + "\n")
        lines.append(f"{cfg.name}: {len(files)} files, {sum(cells.values())} episodes (commit {commit[:12]})")
    return lines


def restore(archive: Path, out: Path) -> list[str]:
    """Copy the archive's result files into ``out`` where ``out`` has none of that configuration."""
    lines = []
    for cfg in configurations(archive):
        dest = out / cfg.name
        if dest.is_dir() and result_files(dest):
            lines.append(f"{cfg.name}: left as it is ({dest} has results of its own)")
            continue
        files = archived_files(cfg)
        for rel in files:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(cfg / f"{rel}.gz", "rt", encoding="utf-8") as f:
                (dest / rel).write_text(f.read(), encoding="utf-8")
        lines.append(f"{cfg.name}: restored {len(files)} files")
    return lines


def archived_commit(archive: Path) -> str | None:
    """The commit of the newest part: the worktree the ladder must resume from."""
    try:
        rows = [json.loads(line) for line in (archive / PARTS).read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    return rows[-1]["commit"] if rows else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["save", "restore", "commit"],
                    help="save the run into the archive, restore it, or print the archived commit")
    ap.add_argument("--out", type=Path, help="the ladder's run folder (bench/model_ladder.py --out)")
    ap.add_argument("--archive", type=Path, required=True, help="the archive folder (bench/ladder_runs/...)")
    ap.add_argument("--worktree", type=Path, default=Path("."), help="the checkout the ladder ran from (save)")
    a = ap.parse_args(argv)
    if a.action == "commit":
        c = archived_commit(a.archive)
        print(c or f"{a.archive}: nothing archived yet")
        return 0 if c else 1
    if a.out is None:
        ap.error(f"{a.action} needs --out")
    if a.action == "save":
        commit = subprocess.run(["git", "-C", str(a.worktree), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(a.worktree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        lines = save(a.out, a.archive, commit + ("-dirty" if dirty else ""))
    else:
        lines = restore(a.archive, a.out)
    print("\n".join(lines) or "nothing to do")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
