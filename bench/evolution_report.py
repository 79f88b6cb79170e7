"""What one evolution run on a model did, written into the results file: the epoch's story
(failures found, each proposal as the student wrote it, Phase D / review / val-gate numbers with
n and 95 % intervals, admission decisions) and the test-split table before and after.

Why a bench script: the effect of evolution is a measured result like any speed figure, so it goes
into ``bench/RESULTS.md`` with the command that produced the run, not into prose by hand.

    python bench/evolution_report.py --out outputs --ran "hasp evolve run --params params.yaml"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hasp.eval.paired import em_by_qid  # noqa: E402
from hasp.evolve.story import epoch_story  # noqa: E402
from hasp.provenance import without_provenance  # noqa: E402
from hasp.stats import paired_difference, rate  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output root of `hasp evolve run` / `hasp demo`")
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--ran", required=True, help="the command that produced --out (recorded with the figures)")
    ap.add_argument("--section", default="Evolution on the embedded model")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=EVAL_DIR",
                    help="another evaluation of the same test questions (e.g. a filtering-ablation library), "
                         "reported with its paired difference to the library before the epoch")
    args = ap.parse_args(argv)
    epoch_dir = args.out / f"epoch_{args.epoch}"
    if not (epoch_dir / "candidates.json").exists():
        print(f"error: {epoch_dir}: no candidates.json (not an evolution epoch folder)", file=sys.stderr)
        return 2
    eval_dir = next((d for d in (args.out / "eval_evolution", args.out / "eval") if (d / "metrics.json").exists()),
                    None)
    metrics = None
    if eval_dir is not None:
        by_ds = without_provenance(json.loads((eval_dir / "metrics.json").read_text(encoding="utf-8")))
        metrics = next(iter(by_ds.values())) if by_ds else None
    report = Report(args.section)
    report.line(f"outputs in {args.out}")
    for line in epoch_story(epoch_dir, metrics, eval_dir):
        report.line(line)
    before = em_by_qid(next(eval_dir.rglob("*_before.jsonl"), Path("-"))) if eval_dir is not None else {}
    for spec in args.also:
        label, _, path = spec.partition("=")
        for traj_file in sorted(Path(path).rglob("*.jsonl")):
            if traj_file.name.endswith(".episodes.jsonl"):
                continue
            after = em_by_qid(traj_file)
            common = sorted(set(before) & set(after))
            line = f"  {label:22s} EM {rate([after[q] for q in after])} "
            if common:
                line += f"; after - before: {paired_difference([before[q] for q in common], [after[q] for q in common])}"
            report.line(line)
    report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
