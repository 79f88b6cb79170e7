"""What post-training grid runs measured, written into the results file: per grid folder the test-split
table (untrained agent and each preset's trained policy, without and with PFs; EM per hop count with n
and 95 % intervals; wall time per preset) and each trained arm's paired gain over the untrained arms.

Why a bench script: whether a recipe moves the policy is a measured result like any speed figure; it
goes into ``bench/RESULTS.md`` with the command that produced each grid. The gains are recomputed from
the grid's trajectory files, so a grid that ran before a reporting change is reported the same way.

    python bench/grid_report.py --grid outputs/experiment --ran "hasp experiment run E2_cpu --params p.yaml"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.eval.paired import add_grid_gains, gains_over_seeds  # noqa: E402
from hasp.eval.summary import hop_counts  # noqa: E402
from hasp.track.grid_report import comparison_rows, gains_markdown, table_markdown  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory


def _hops(data_dir: Path) -> dict[str, int]:
    from hasp.domains.search.task import SearchTask

    return hop_counts(SearchTask.load(data_dir).questions("test"))


def report_grid(report: Report, grid_dir: Path, ran: str, data_dir: Path | None) -> dict | None:
    """One grid folder's section; returns the grid (None after one error line)."""
    try:
        grid = json.loads((grid_dir / "grid.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"error: {grid_dir / 'grid.json'}: {e}", file=sys.stderr)
        return None
    add_grid_gains(grid_dir, grid, _hops(data_dir or grid_dir / "data"))
    report.line(f"### {grid_dir.name}")
    report.line("")
    report.line(f"- ran: `{ran}`")
    report.line(f"- outputs: {grid_dir}; base model {grid.get('base_model')}")
    report.line("")
    report.line(table_markdown(comparison_rows(grid)))
    report.line("Paired gains on the same test questions (trained arm − untrained arm):")
    report.line("")
    report.line(gains_markdown(grid))
    return grid


def report_seeds(report: Report, grid_dirs: list[Path], grids: list[dict], data_dir: Path | None) -> None:
    """Presets repeated over several grids (seeds): each side averaged over seeds per question."""
    pooled = gains_over_seeds(grid_dirs, grids, _hops(data_dir or grid_dirs[0] / "data"))
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
    ap.add_argument("--section", default="Post-training grid on the embedded model")
    args = ap.parse_args(argv)
    if len(args.ran) != len(args.grid):
        print(f"error: --ran given {len(args.ran)} times for {len(args.grid)} --grid folders", file=sys.stderr)
        return 2
    report = Report(args.section)
    grids = []
    for grid_dir, ran in zip(args.grid, args.ran):
        grid = report_grid(report, grid_dir, ran, args.data)
        if grid is None:
            return 2
        grids.append(grid)
    if len(grids) > 1:
        report_seeds(report, list(args.grid), grids, args.data)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
