"""GRPO vs SAGE vs their start checkpoint on test chains: TGC, SGC, steps and tokens, paired.

Why: seed 001 claims SAGE beats plain GRPO on Scenario Goal Completion with fewer steps and tokens.
Each arm is one checkpoint evaluated by ``hasp evolve sage --split test --chain-length 2 --model M``
(chains of two same-template test questions; a plain pass with the library as it is, and a sequential
pass in which a skill proposed after a failed task 1 serves task 2). This script pairs every arm
with the base arm chain by chain (``hasp.eval.chain_metrics``) and prints each training run's rounds
(rewards, rows, skills made and used) so a null result shows where the signal was missing.

An arm trained with several seeds names one folder per seed (``--arm grpo=EVAL_S42 --arm grpo=EVAL_S43``):
each seed is reported on its own, then the seeds are pooled, a chain of seed s paired with the same
chain of the base arm (one base folder serves every seed; a base given once per seed is paired seed by
seed). The pooled interval treats (seed, chain) pairs as the sample, so it reflects training-seed and
question variation together.

    python bench/policy_gradient.py --arm start=EVAL_A --arm grpo=EVAL_B --arm sage=EVAL_C --base start \\
        --train grpo=TRAIN_B --train sage=TRAIN_C --ran "..."
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.eval.chain_metrics import ChainRecord, chain_differences, chain_metrics  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Policy gradient on the embedded model: GRPO and SAGE")


def records(eval_dir: Path) -> dict[str, list[ChainRecord]]:
    """``{"plain": [...], "sequential": [...]}`` from a ``hasp evolve sage`` output folder."""
    tasks = json.loads((Path(eval_dir) / "sequential.json").read_text(encoding="utf-8"))["tasks"]
    seq = [ChainRecord(chain=t["chain"], position=t["position"], em=t["em"], used_earlier_skill=bool(t["used_from"]),
                       steps=t["steps"], completion_tokens=t["completion_tokens"]) for t in tasks]
    plain = [ChainRecord(chain=t["chain"], position=t["position"], em=t["plain_em"], used_earlier_skill=False,
                         steps=t["plain_steps"] or 0, completion_tokens=t["plain_completion_tokens"] or 0)
             for t in tasks if t.get("plain_em") is not None]
    return {"plain": plain, "sequential": seq}


def seeded(recs: dict[str, list[ChainRecord]], seed: int) -> dict[str, list[ChainRecord]]:
    """The same records with their chain named ``seed:chain``, so seeds pool without colliding."""
    return {kind: [replace(t, chain=f"{seed}:{t.chain}") for t in rows] for kind, rows in recs.items()}


def pooled(folders: list[Path], n: int) -> dict[str, list[ChainRecord]]:
    """``n`` seeds of one arm pooled: folder i is seed i (one folder is reused for every seed)."""
    per = [records(f) for f in folders]
    out: dict[str, list[ChainRecord]] = {"plain": [], "sequential": []}
    for i in range(n):
        for kind, rows in seeded(per[i if len(per) > 1 else 0], i).items():
            out[kind].extend(rows)
    return out


def _rate(r: dict[str, Any]) -> str:
    return f"{r['k']}/{r['n']} {r['p']:.3f} [{r['ci95'][0]:.2f},{r['ci95'][1]:.2f}]"


def _diff(d: dict[str, Any]) -> str:
    return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (n={d['n']})"


def pair(spec: str) -> tuple[str, Path]:
    label, _, path = spec.partition("=")
    if not path:
        raise argparse.ArgumentTypeError(f"{spec}: expected LABEL=FOLDER")
    return label, Path(path)


def round_lines(label: str, train_dir: Path) -> None:
    for f in sorted(Path(train_dir).glob("round_*/round.json"), key=lambda p: int(p.parent.name.split("_")[1])):
        r = json.loads(f.read_text(encoding="utf-8"))
        d, m = r.get("data", {}), r.get("metrics", {})
        keys = ("sampled", "groups_with_signal", "success", "task1_solved", "task2_solved", "both_solved",
                "skills_admitted", "task2_used_skill", "rows", "negative_rows", "proposal_rows", "mean_reward")
        shown = ", ".join(f"{k} {d[k]}" for k in keys if k in d)
        extra = (f"; too long {m.get('n_rows_too_long', 0)}, train {m['train_wall_s']:.0f}s"
                 if "train_wall_s" in m else f"; {r.get('skipped', '')}")
        REPORT.line(f"  {label} round {r['round']}: {shown}{extra}")


def report_arms(arms: dict[str, dict[str, list[ChainRecord]]], base: str) -> None:
    """One table of arms and every arm paired with ``base``, then the other arms with each other."""
    REPORT.line(f"{'arm':<8}{'pass':<11}{'TGC':<24}{'SGC':<24}{'skill use':<22}{'steps/task':>11}{'tokens/task':>12}")
    for label, by in arms.items():
        for kind, recs in by.items():
            m = chain_metrics(recs)
            REPORT.line(f"{label:<8}{kind:<11}{_rate(m['tgc']):<24}{_rate(m['sgc']):<24}{_rate(m['skill_use']):<22}"
                        f"{m['mean_steps']['mean']:>11.2f}{m['mean_completion_tokens']['mean']:>12.1f}")
    others = [label for label in arms if label != base]
    pairs = [(base, o) for o in others] + [(x, y) for i, x in enumerate(others) for y in others[i + 1:]]
    for before, after in pairs:
        for kind in ("plain", "sequential"):
            d = chain_differences(arms[before][kind], arms[after][kind])
            REPORT.line(f"{after} - {before} ({kind}): TGC {_diff(d['tgc'])}; SGC {_diff(d['sgc'])}; "
                        f"steps {_diff(d['mean_steps'])}; tokens {_diff(d['mean_completion_tokens'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", type=pair, action="append", required=True, help="LABEL=hasp evolve sage --out folder")
    ap.add_argument("--base", required=True, help="the arm every other is paired with")
    ap.add_argument("--train", type=pair, action="append", default=[], help="LABEL=training --out folder")
    ap.add_argument("--ran", action="append", default=[], help="how the arms were made (printed), repeatable")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    folders: dict[str, list[Path]] = {}
    for label, folder in a.arm:
        folders.setdefault(label, []).append(folder)
    if a.base not in folders:
        ap.error(f"--base {a.base}: not among the arms {sorted(folders)}")
    seeds = max(len(f) for f in folders.values())
    bad = [label for label, f in folders.items() if len(f) not in (1, seeds)]
    if bad:
        ap.error(f"arms {bad}: give one folder, or one per seed ({seeds})")
    for r in a.ran:
        REPORT.line(f"ran: {r}")
    views = [(f"seed {i + 1} of {seeds}", {label: records(f[i if len(f) > 1 else 0]) for label, f in folders.items()})
             for i in range(seeds)] if seeds > 1 else [("", {label: records(f[0]) for label, f in folders.items()})]
    if seeds > 1:
        views.append((f"{seeds} seeds pooled", {label: pooled(f, seeds) for label, f in folders.items()}))
    for title, arms in views:
        if title:
            REPORT.line(f"-- {title}")
        report_arms(arms, a.base)
    if a.train:
        REPORT.line("training rounds:")
        for label, folder in a.train:
            round_lines(label, folder)
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
