"""What post-training grid runs measured, written into the results file: per grid folder the test-split
table (untrained agent and each preset's trained policy, without and with PFs; EM per hop count with n
and 95 % intervals; per PF arm the correct answers a vocabulary rewrite wrote; wall time per preset)
with the vocabulary answer extractor's ceiling on gold support beside the arms, each trained arm's
paired gain over the untrained arms, and per arm the episodes where a PF rewrote the policy's correct
answer into another action.

Why a bench script: whether a recipe moves the policy is a measured result like any speed figure; it
goes into ``bench/RESULTS.md`` with the command that produced each grid. The gains are recomputed from
the grid's trajectory files, so a grid that ran before a reporting change is reported the same way.

    python bench/grid_report.py --grid outputs/experiment --ran "hasp experiment run E2_cpu --params p.yaml"

``--archive bench/grid_runs`` also keeps a small copy of each grid (``hasp.track.grid_archive``) under
``bench/grid_runs/<name>``; ``--grid`` reads such a copy like a run folder, so seeds measured on
different machines are reported and pooled together. A seed's grid run in parts (``hasp experiment
grid --preset ...``, one part per machine or session) is kept as one archive: ``--archive DIR --merge``
adds each part's presets to ``DIR/<grid folder name>`` and reports the whole archive.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.atomic import read_json  # noqa: E402
from hasp.domains.search.blocked import blocked_in_file  # noqa: E402
from hasp.eval.ceiling import CEILING_KEY, extractor_ceiling, retriever_lookup  # noqa: E402
from hasp.eval.paired import add_grid_gains, cell_file, gains_over_seeds  # noqa: E402
from hasp.eval.summary import hop_counts  # noqa: E402
from hasp.track.grid_archive import HOPS_FILE, PARTS_KEY, TEMPLATES_FILE, ArchiveMergeError, archive_grid  # noqa: E402
from hasp.track.grid_archive import keep_untrained_record  # noqa: E402
from hasp.track.grid_report import comparison_rows, gains_markdown, table_markdown  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory


def _hops(grid_dir: Path, data_dir: Path | None) -> dict[str, int]:
    """Hop count per test question: an archive's own file, else the prepared data folder."""
    if data_dir is None and (grid_dir / HOPS_FILE).is_file():
        return {str(k): int(v) for k, v in read_json(grid_dir / HOPS_FILE).items()}
    from hasp.domains.search.task import SearchTask

    return hop_counts(SearchTask.load(data_dir or grid_dir / "data").questions("test"))


def _templates(grid_dir: Path, data_dir: Path | None) -> dict[str, bool]:
    """Benchmark v2: whether training used each test question's template (empty for version 1, or
    when no data folder is at hand)."""
    from hasp.domains.search.generator import load_template_seen

    if data_dir is None and (grid_dir / TEMPLATES_FILE).is_file():
        return {str(k): bool(v) for k, v in read_json(grid_dir / TEMPLATES_FILE).items()}
    test = (data_dir or grid_dir / "data") / "test.jsonl"
    return load_template_seen(test) if test.is_file() else {}


def add_ceiling(grid_dir: Path, grid: dict, data_dir: Path | None) -> None:
    """A grid whose summaries carry no extractor ceiling (evaluated before they did) gets it from the
    prepared data folder's test split, which is what the grid evaluated; an archive keeps none then."""
    summaries = [*(grid.get("untrained") or {}).values(),
                 *(s for e in (grid.get("experiments") or {}).values() for s in (e.get("eval") or {}).values())]
    data = data_dir or grid_dir / "data"
    if any(CEILING_KEY in s for s in summaries) or not (data / "corpus.jsonl").is_file():
        return
    from hasp.domains.search.task import SearchTask

    task = SearchTask.load(data)
    ceiling = extractor_ceiling(task.questions("test"), retriever_lookup(task.retriever))
    for s in (grid.get("untrained") or {}).values():
        s[CEILING_KEY] = ceiling


def blocked_markdown(grid_dir: Path, grid: dict) -> str:
    """Per arm: episodes in which a PF rewrote the policy's correct FINAL, and by which PFs."""
    cells = [("untrained", grid_dir / "eval_untrained", a) for a in grid.get("untrained") or {}]
    cells += [(n, grid_dir / n / "eval", a) for n, e in (grid.get("experiments") or {}).items()
              if "error" not in e for a in e.get("eval") or {}]
    lines = ["| experiment | arm | episodes with a correct FINAL rewritten | rewrites by PF |", "|---|---|---|---|"]
    for name, d, arm in cells:
        b = blocked_in_file(cell_file(d, arm))
        who = ", ".join(f"{k} {v}" for k, v in b["by_skill"].items()) or "-"
        lines.append(f"| {name} | {arm} | {b['episodes']}/{b['n']} | {who} |")
    return "\n".join(lines) + "\n"


def partial_grid(grid_dir: Path, since: float | None = None) -> dict | None:
    """A grid still running (or stopped): what its finished tasks wrote, the untrained agent's
    evaluation and each preset whose ``experiment.json`` exists (written after ``since``, a timestamp,
    when given); None when the untrained evaluation has not finished either. Marked ``partial`` with
    the presets it has."""
    try:
        metrics = json.loads((grid_dir / "eval_untrained" / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    untrained = metrics.get("generated") or {}
    experiments = {}
    for f in sorted(grid_dir.glob("*/experiment.json")):
        if since is not None and f.stat().st_mtime <= since:
            continue
        try:
            experiments[f.parent.name] = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            print(f"warning: {f}: {e}; left out", file=sys.stderr)
    return {"presets": list(experiments), "base_model": None, "untrained": untrained, "experiments": experiments,
            "partial": True, "provenance": metrics.get("provenance")}


def running_part(grid_dir: Path) -> dict | None:
    """The part a grid folder is running now, when an earlier part's ``grid.json`` is still there: the
    presets whose ``experiment.json`` is newer than it (a part rewrites ``grid.json`` when it ends).
    None when there is none, and the folder's ``grid.json`` is its record; always None for an archive,
    whose files' times say nothing about a run."""
    if (grid_dir / HOPS_FILE).is_file():
        return None
    written = (grid_dir / "grid.json").stat().st_mtime
    if not any(f.stat().st_mtime > written for f in grid_dir.glob("*/experiment.json")):
        return None
    grid = partial_grid(grid_dir, since=written)
    if grid is not None:
        print(f"{grid_dir}: a part is running (grid.json is an earlier part's): presets finished so far: "
              f"{', '.join(grid['presets'])}", file=sys.stderr)
    return grid


def report_grid(report: Report, grid_dir: Path, ran: str, data_dir: Path | None,
                archive: Path | None = None, merge: bool = False, records: Path | None = None) -> dict | None:
    """One grid folder's section (and its archive under ``archive``, added to an earlier archive of
    the same name with ``merge``); returns the grid (None after one error line). A folder without
    ``grid.json`` (the grid has not finished) is reported from what its finished tasks wrote, and says so."""
    try:
        grid = json.loads((grid_dir / "grid.json").read_text(encoding="utf-8"))
        grid = running_part(grid_dir) or grid
    except FileNotFoundError:
        grid = partial_grid(grid_dir)
        if grid is None:
            print(f"error: {grid_dir}: no grid.json and no finished untrained evaluation", file=sys.stderr)
            return None
    except (OSError, ValueError) as e:
        print(f"error: {grid_dir / 'grid.json'}: {e}", file=sys.stderr)
        return None
    hops, templates = _hops(grid_dir, data_dir), _templates(grid_dir, data_dir)
    if archive is not None:
        dest = archive / grid_dir.name
        try:
            n = len(archive_grid(grid_dir, dest, hops, templates, merge=merge, grid=grid))
        except (ArchiveMergeError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return None
        print(f"archived: {n} files in {dest}", file=sys.stderr)
        if records is not None:
            kept = keep_untrained_record(records, grid_dir, dest)
            print(f"kept the untrained evaluation's cached record: {kept}" if kept else
                  f"warning: {records}: no cached record of {grid_dir}/eval_untrained", file=sys.stderr)
        if merge:  # the section reports the whole archive: every part of this seed's grid
            return report_grid(report, dest, ran, None)
    add_grid_gains(grid_dir, grid, hops, templates)
    add_ceiling(grid_dir, grid, data_dir)
    report.line(f"### {grid_dir.name}")
    report.line("")
    report.line(f"- ran: `{ran}`")
    base = grid.get("base_model")  # a partial grid has not written it yet
    report.line(f"- outputs: {grid_dir}" + (f"; base model {base}" if base else ""))
    for part in grid.get(PARTS_KEY) or []:
        prov = part.get("provenance") or {}
        report.line(f"- part: {', '.join(part.get('presets') or []) or 'the untrained evaluation only'}"
                    + (f" (commit {str(prov['git_commit'])[:12]})" if prov.get("git_commit") else "")
                    + "".join(f"; {n} measured again: {'same' if same else 'different'} answers as archived"
                              for n, same in (part.get("rerun_same_answers") or {}).items()))
    if grid.get("partial"):
        report.line(f"- partial: the grid had not finished; presets evaluated so far: "
                    f"{', '.join(grid['presets']) or 'none'} (the untrained agent's evaluation is complete)")
    report.line("")
    report.line(table_markdown(comparison_rows(grid)))
    report.line("The oracle row is the vocabulary answer extractor (the source a declared PF's FINAL rewrite "
                "answers with) after reading each question's gold support documents: a ceiling for the answers "
                "such rewrites can write. `wall s` is the time of a preset's training phases and of its evaluation "
                "(the ReAct and PF cells; for a closed loop the longer of its two evaluations), from the run that "
                "did the work (kept with the cached summaries); evolution epochs and rollout pools are not in it "
                "(the progress log prints their times).")
    report.line("")
    report.line("Paired gains on the same test questions (trained arm − untrained arm; for a closed loop also "
                "the evolved library − the starting library, both under the trained policy; for a preset that trains on "
                "from another preset's checkpoint also its arms − that preset's same arms):")
    report.line("")
    report.line(gains_markdown(grid))
    report.line("Correct answers a PF took away (the policy proposed FINAL[gold], a PF rewrote the step):")
    report.line("")
    report.line(blocked_markdown(grid_dir, grid))
    return grid


def report_seeds(report: Report, grid_dirs: list[Path], grids: list[dict], data_dir: Path | None) -> None:
    """Presets repeated over several grids (seeds): each side averaged over seeds per question."""
    pooled = gains_over_seeds(grid_dirs, grids, _hops(grid_dirs[0], data_dir), _templates(grid_dirs[0], data_dir))
    if not pooled:
        return
    report.line("### Over seeds")
    report.line("")
    report.line(f"Grids pooled: {', '.join(d.name for d in grid_dirs)}. Per question (those every seed scored), "
                "each arm's EM is averaged over the seeds; the interval is a paired bootstrap over questions.")
    report.line("")
    named = {f"{n} ({max(g['seeds'] for g in gs.values())} seeds)": {"gains": gs} for n, gs in pooled.items()}
    report.line(gains_markdown({"experiments": named}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=Path, action="append", required=True,
                    help="output root of `hasp experiment run|grid` (repeat for several grids, e.g. seeds)")
    ap.add_argument("--ran", action="append", required=True,
                    help="the command that produced each --grid, in the same order")
    ap.add_argument("--data", type=Path, default=None, help="prepared data folder (default: <grid>/data)")
    ap.add_argument("--archive", type=Path, default=None,
                    help="also keep a small copy of each grid in <archive>/<grid folder name> (e.g. bench/grid_runs)")
    ap.add_argument("--merge", action="store_true",
                    help="add each grid's presets to its earlier archive (a seed's grid run in parts with "
                         "`hasp experiment grid --preset`) and report the whole archive")
    ap.add_argument("--records", type=Path, default=None,
                    help="with --archive: the task result storage ($PREFECT_HOME/storage) whose record of the "
                         "untrained evaluation the archive keeps (bench/grid_restore.py puts it back)")
    ap.add_argument("--section", default="Post-training grid on the embedded model")
    args = ap.parse_args(argv)
    if len(args.ran) != len(args.grid):
        print(f"error: --ran given {len(args.ran)} times for {len(args.grid)} --grid folders", file=sys.stderr)
        return 2
    report = Report(args.section, markdown=True)
    grids = []
    reported = []  # with --merge, the archives
    for grid_dir, ran in zip(args.grid, args.ran):
        grid = report_grid(report, grid_dir, ran, args.data, args.archive, args.merge, args.records)
        if grid is None:
            return 2
        grids.append(grid)
        reported.append(args.archive / grid_dir.name if args.merge and args.archive else grid_dir)
    if len(grids) > 1:
        report_seeds(report, reported, grids, None if args.merge else args.data)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
