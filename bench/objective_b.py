"""Objective B's effect: does training the student on its own scored proposals make its next
proposals pass the gates more often?

Why: Objective B (paper App. D, data layer 2) trains the skill author on its proposals weighted by
r_skill = Q_skill + lambda * dEM_val. What it is for is the next epoch: the share of proposals that pass
the val gate, and what the admitted ones add. This script measures that with everything else held:

1. *Rows.* The student proposes for the clusters of a recorded epoch (``--train-epoch``: its
   ``clusters.json`` and ``rollout.jsonl``), Phases D, E and the val gate score every proposal, and
   Phase H writes the skill-author rows (``hasp.evolve.epoch.build_skill_data``).
2. *Training.* SFT with ``train.objective: B`` from the student on those rows (``rows_for``).
3. *Next epoch.* The untrained and the trained student each propose for the clusters of the next
   recorded epoch (``--test-epoch``), same sampling seed and settings, and go through the same
   Phases D, E and val gate. The acting policy on val is the untrained student in every arm, so a
   val difference is the skill's, not the actor's.

The gate table is the full one (``evolve.filtering: full``): Phase-D execution, review, val gain.
Reported per arm: proposals, pass rate before val (D + E) and through the val gate, with Wilson
intervals; mean dEM_val of what passed; and the trained-minus-untrained pass rate paired by cluster
(the share of a cluster's proposals that pass), bootstrap 95 % interval. Val runs of an identical
library (a duplicate proposal) are reused within one seed: greedy decoding on the same questions.

    python bench/objective_b.py --model CKPT --data DATA --library LIB0 --train-epoch EPOCH0 \\
        --test-library LIB1 --test-epoch EPOCH1 --out DIR --seed 42 [--seed 43 ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.atomic import read_json, write_json  # noqa: E402
from hasp.config import Params, load_params  # noqa: E402
from hasp.pf.library import library_hash  # noqa: E402
from hasp.stats import paired_difference, rate  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Objective B: the student trained on its own proposals")
EPOCH_FILES = ("clusters.json", "rollout.jsonl")


def params_for(path: Path | None, seed: int, per_cluster: int, epochs: int, max_length: int) -> Params:
    """The run's params with the measurement's settings: full gates, every cluster proposed for
    ``per_cluster`` times, SFT on Objective B rows long enough for a proposal prompt."""
    return load_params(path, {
        "evolve.mode": "full", "evolve.filtering": "full", "evolve.val_gate": True,
        "evolve.proposal_format": "declarative", "evolve.max_candidates": 1000,
        "evolve.proposals_per_cluster": per_cluster,
        "train.enabled": True, "train.recipe": "sft", "train.preset": None, "train.objective": "B",
        "train.max_steps": -1, "train.num_train_epochs": epochs, "train.max_length": max_length,
        "train.seed": seed})


def cached_val(run_val: Any, cache: dict[str, dict[str, Any]], counts: dict[str, int]) -> Any:
    def run(library: Path, label: str) -> dict[str, Any]:
        key = library_hash(Path(library))
        if key in cache:
            counts["reused"] += 1
            return cache[key]
        counts["run"] += 1
        cache[key] = run_val(library, label)
        return cache[key]
    return run


def score_proposals(label: str, p: Params, *, student_model: Path | None, actor_model: Path | None,
                    source_epoch: Path, library: Path, data: Path, out: Path, seed: int,
                    val_cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Phases C, D, E, the val gate and Phase H for one student on one recorded epoch's clusters."""
    from hasp.evolve import epoch as ep
    from hasp.evolve.gate import active_gates, pre_val_gates, refusals
    from hasp.llm.endpoints import policy_client

    work = out / f"epoch_{seed}"
    if (work / "result.json").exists():
        return read_json(work / "result.json")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in EPOCH_FILES:
        shutil.copy2(source_epoch / name, work / name)
    counts = {"run": 0, "reused": 0}
    t0 = time.monotonic()
    with policy_client(p.llm, model_dir=actor_model, max_tokens=p.agent.max_tokens) as actor, \
            policy_client(p.llm, model_dir=student_model, port=p.llm.port + 1,
                          max_tokens=p.evolve.declarative_max_tokens,
                          temperature=p.evolve.proposal_temperature) as student:
        proposed = ep.propose(work / "clusters.json", library, p, work / "candidates.json", student=student,
                              epoch=seed, rollout_path=work / "rollout.jsonl")
        if proposed.get("failure"):
            raise RuntimeError(f"{label}: {proposed['failure']} ({proposed.get('first_error')})")
        ep.validate(work / "candidates.json", work / "validation.json", sandbox=p.sandbox)
        ep.review(work / "candidates.json", work / "validation.json", work / "clusters.json",
                  work / "rollout.jsonl", library, p, work / "reviews.json")
        run_val = cached_val(ep.val_runner(p, data, work / "val", policy=actor), val_cache, counts)
        baseline = run_val(library, "library")
        gated = ep.gate(work, library, p, baseline, run_val)
    if gated.get("failure"):
        raise RuntimeError(f"{label}: {gated['failure']} ({gated.get('first_error')})")
    gates = active_gates(p.evolve)
    pre_val = pre_val_gates(gates)
    rows = []
    for ev in ep._evidence(work, library, p.sandbox, p.evolve):
        c = ev.candidate
        rows.append({"skill_id": c.skill_id, "cluster": c.cluster_category, "parse_error": c.parse_error,
                     "pre_val_pass": not refusals(ev, pre_val), "pass": not refusals(ev, gates),
                     "delta_em": ev.val.delta_em if ev.val else None,
                     "r_skill": ev.val.r_skill if ev.val else None})
    skill_data = ep.build_skill_data(work, p)
    result = {"label": label, "seed": seed, "student": str(student_model), "proposed": proposed,
              "baseline_em": baseline.get("em"), "val_runs": counts, "skill_data": skill_data,
              "candidates": rows, "wall_s": round(time.monotonic() - t0, 1)}
    write_json(result, work / "result.json")
    return result


def train_student(p: Params, *, student_model: Path, rows_epoch: Path, out: Path) -> Path | None:
    """SFT (Objective B) from the student on one epoch's skill-author rows; the new checkpoint, or None
    when no row passed the reward floor."""
    from hasp.evolve.epoch import train
    from hasp.train.run import SUMMARY_FILE, read_summary

    if (Path(out) / SUMMARY_FILE).is_file():  # a finished training of this seed (the arms are cached the same way)
        done = read_summary(out)
        if done.model_dir and Path(done.model_dir).is_dir():
            return Path(done.model_dir)
    summary = train(rows_epoch / "sft.jsonl", p, out, model_dir=student_model)
    if summary.skipped:
        REPORT.line(f"training skipped: {summary.skipped}")
        return None
    return Path(summary.model_dir)


def _rate(values: list[float]) -> str:
    r = rate(values).to_dict()
    return f"{r['k']:g}/{r['n']} {r['p']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if r["n"] else "0/0"


def per_cluster(result: dict[str, Any], key: str) -> dict[str, float]:
    by: dict[str, list[bool]] = {}
    for c in result["candidates"]:
        by.setdefault(c["cluster"], []).append(bool(c[key]))
    return {k: sum(v) / len(v) for k, v in by.items()}


def report_arm(result: dict[str, Any]) -> None:
    cands = result["candidates"]
    passed = [c for c in cands if c["pass"]]
    dem = [c["delta_em"] for c in passed if c["delta_em"] is not None]
    REPORT.line(f"  {result['label']:<10} proposals {len(cands):>3}; parse errors "
                f"{sum(bool(c['parse_error']) for c in cands)}; pass D+E {_rate([float(c['pre_val_pass']) for c in cands])}"
                f"; pass val gate {_rate([float(c['pass']) for c in cands])}; dEM_val of passed "
                f"{(sum(dem) / len(dem)) if dem else float('nan'):+.3f} (n={len(dem)}); base val EM "
                f"{result['baseline_em']:.3f}; val runs {result['val_runs']['run']} (+{result['val_runs']['reused']} "
                f"reused); {result['wall_s']:.0f} s")


def paired_line(before: dict[str, Any], after: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    b, a = per_cluster(before, key), per_cluster(after, key)
    common = sorted(set(a) & set(b))
    d = paired_difference([b[k] for k in common], [a[k] for k in common]).to_dict()
    REPORT.line(f"  trained - untrained, {name} per cluster: {d['mean']:+.3f} "
                f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (n={d['n']} clusters)")
    return {"clusters": common, "before": [b[k] for k in common], "after": [a[k] for k in common]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, default=None)
    ap.add_argument("--model", type=Path, required=True, help="the student checkpoint (also the val actor)")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--library", type=Path, required=True, help="library the train epoch's proposals add to")
    ap.add_argument("--train-epoch", type=Path, required=True, help="recorded epoch whose clusters give the rows")
    ap.add_argument("--test-library", type=Path, required=True, help="library the test epoch's proposals add to")
    ap.add_argument("--test-epoch", type=Path, required=True, help="recorded next epoch whose clusters are the test")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, action="append", required=True)
    ap.add_argument("--per-cluster", type=int, default=2, help="proposals sampled per cluster")
    ap.add_argument("--epochs", type=int, default=3, help="SFT epochs on the Objective-B rows")
    ap.add_argument("--max-length", type=int, default=1536, help="tokens of a proposal prompt + its target")
    ap.add_argument("--ran", default="", help="what else ran on the machine (printed)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    REPORT.line(f"student and val actor {a.model}; rows from the clusters of {a.train_epoch}; test on the clusters "
                f"of {a.test_epoch}; {a.per_cluster} proposals per cluster, SFT {a.epochs} epochs, max_length "
                f"{a.max_length}. {a.ran}".rstrip())
    pooled: dict[str, dict[str, list[float]]] = {"pre_val_pass": {"before": [], "after": []},
                                                  "pass": {"before": [], "after": []}}
    for seed in a.seed:
        p = params_for(a.params, seed, a.per_cluster, a.epochs, a.max_length)
        root = a.out / f"seed{seed}"
        cache: dict[str, dict[str, Any]] = {}
        rows = score_proposals("rows", p, student_model=a.model, actor_model=a.model, source_epoch=a.train_epoch,
                               library=a.library, data=a.data, out=root / "rows", seed=seed, val_cache={})
        trained = train_student(p, student_model=a.model, rows_epoch=root / "rows" / f"epoch_{seed}",
                                out=root / "train")
        REPORT.line(f"seed {seed}: rows from {len(rows['candidates'])} proposals: {json.dumps(rows['skill_data'])}")
        report_arm(rows)
        untrained = score_proposals("untrained", p, student_model=a.model, actor_model=a.model,
                                    source_epoch=a.test_epoch, library=a.test_library, data=a.data,
                                    out=root / "untrained", seed=seed, val_cache=cache)
        report_arm(untrained)
        if trained is None:
            continue
        after = score_proposals("trained", p, student_model=trained, actor_model=a.model,
                                source_epoch=a.test_epoch, library=a.test_library, data=a.data,
                                out=root / "trained", seed=seed, val_cache=cache)
        report_arm(after)
        for key, name in (("pre_val_pass", "pass rate D+E"), ("pass", "val-gate pass rate")):
            got = paired_line(untrained, after, key, name)
            pooled[key]["before"] += got["before"]
            pooled[key]["after"] += got["after"]
    if len(a.seed) > 1:
        for key, name in (("pre_val_pass", "pass rate D+E"), ("pass", "val-gate pass rate")):
            d = paired_difference(pooled[key]["before"], pooled[key]["after"]).to_dict()
            REPORT.line(f"{len(a.seed)} seeds pooled, trained - untrained, {name} per (seed, cluster): "
                        f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (n={d['n']})")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
