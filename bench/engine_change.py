"""Did a grid run's effect survive a change of serving engine? The same preset and seed, run before
and after, compared arm by arm on the same test questions.

Why: every earlier figure of the post-training grid was measured with one engine; a new engine
(another kernel, quantised weights, constrained decoding) may move the untrained agent, the trained
policy or both. A run is only comparable to its predecessor question by question: per arm this prints
EM before and after with the paired difference (after − before, 95 % bootstrap interval, per hop
count), the preset's own gain in each run (trained PF agent − untrained PF agent), and the wall time
of each run. Both sides are read from grid folders or their archives (``bench/grid_runs/<name>``).

    python bench/engine_change.py --before bench/grid_runs/E5_cpu-seed42 --after outputs/e5 \
        --label-before "transformers serve" --label-after "llama.cpp, constrained actions"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.atomic import read_json  # noqa: E402
from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from hasp.track.grid_archive import HOPS_FILE  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Post-training grid across the engine change")
UNTRAINED = ("untrained_react", "untrained_pf")
TRAINED = ("trained_react", "trained_pf")


def _ci(g: dict) -> str:
    lo, hi = g["ci95"]
    return f"{g['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={g['n']})"


def _hops(d: dict) -> str:
    return "; ".join(f"{h}-hop {_ci(g)}" for h, g in d.get("by_hops", {}).items())


def cells(grid: Path, preset: str) -> dict[str, dict[str, float]]:
    """EM per question of each arm of one grid folder: the untrained arms and the preset's trained ones."""
    out = {arm: em_by_qid(cell_file(grid / "eval_untrained", arm)) for arm in UNTRAINED}
    out |= {arm: em_by_qid(cell_file(grid / preset / "eval", arm)) for arm in TRAINED}
    return {arm: em for arm, em in out.items() if em}


def wall_s(grid: Path, preset: str) -> float | None:
    """The preset's wall time as its grid summary recorded it (training, evolution and evaluation)."""
    try:
        return float(read_json(grid / "grid.json")["presets_detail"][preset]["wall_s"])
    except (OSError, ValueError, KeyError, TypeError):
        try:
            return float(read_json(grid / preset / "metrics.json")["wall_s"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="grid folder or archive of the earlier run")
    ap.add_argument("--after", type=Path, required=True, help="grid folder or archive of the new run")
    ap.add_argument("--preset", default="E5_cpu")
    ap.add_argument("--label-before", default="before")
    ap.add_argument("--label-after", default="after")
    ap.add_argument("--ran", action="append", default=[], help="how each run was made (printed), repeatable")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    hops_file = next((g / HOPS_FILE for g in (a.after, a.before) if (g / HOPS_FILE).is_file()), None)
    hops = {str(k): int(v) for k, v in read_json(hops_file).items()} if hops_file else {}
    before, after = cells(a.before, a.preset), cells(a.after, a.preset)
    for r in a.ran:
        REPORT.line(f"ran: {r}")
    REPORT.line(f"{a.preset}: before = {a.label_before} ({a.before}); after = {a.label_after} ({a.after})")
    REPORT.line(f"{'arm':<17}{'EM before':>10}{'EM after':>10}  paired after - before (95% CI)  per hop count")
    for arm in (*UNTRAINED, *TRAINED):
        if arm not in before or arm not in after:
            REPORT.line(f"{arm:<17}  missing on the {'before' if arm not in before else 'after'} side")
            continue
        g = paired_gain(before[arm], after[arm], hops)
        common = sorted(set(before[arm]) & set(after[arm]))
        b = sum(before[arm][q] for q in common)
        f = sum(after[arm][q] for q in common)
        REPORT.line(f"{arm:<17}{b:>7.0f}/{len(common):<2}{f:>7.0f}/{len(common):<2}  {_ci(g)}  {_hops(g)}")
    for side, cell in ((a.label_before, before), (a.label_after, after)):
        if "trained_pf" in cell and "untrained_pf" in cell:
            g = paired_gain(cell["untrained_pf"], cell["trained_pf"], hops)
            REPORT.line(f"preset gain, trained_pf - untrained_pf, {side}: {_ci(g)}")
    for side, grid in ((a.label_before, a.before), (a.label_after, a.after)):
        w = wall_s(grid, a.preset)
        REPORT.line(f"{a.preset} wall, {side}: " + (f"{w / 60:.1f} min" if w is not None else "not recorded"))
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
