"""Evolution from logged traces with the gold answers withheld, against the same evolution with them.

Why: a deployed agent's logs carry no gold answers; Phase B then finds failures with the label-free
signals alone (``hasp.evolve.trace_signals``). This measures what that costs on the same traces: the
PF agent's ``hasp eval`` episodes on the benchmark-v2 train split are the logged traces, and two runs of
``hasp evolve run --from-traces`` (``--gold`` and ``--no-gold``) evolve from them with the same params,
data and gates. Reported per arm: the failures Phase B used and which signal found them, the signals'
precision against gold, proposals, reviews, val-gate passes, admissions, and test EM of the PF agent
before and after with paired intervals on the same test questions (per hop count and per seen /
held-out template), plus the two arms' final agents against each other. Every step is the CLI a user
runs. Greedy decoding: one run is one sample, the intervals are over questions, not seeds.

    HASP_BENCH_NOTE='what else ran' python bench/traces_evolution.py --out /work/runs/traces_evo [--questions 100] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

SECTION = "Evolution from logged traces, with and without gold answers"
REPORT = Report(SECTION)
HASP = [sys.executable, "-m", "hasp.cli"]


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.monotonic()
    with log.open("w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "HASP_LLM_THREADS": "2"})
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}); see {log}")
    return time.monotonic() - t0


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _gain(g: dict) -> str:
    return f"{g['mean']:+.3f} [{g['ci95'][0]:+.2f}, {g['ci95'][1]:+.2f}] n={g['n']}"


def _groups(g: dict) -> str:
    parts = [f"{k}-hop {_gain(v)}" for k, v in g.get("by_hops", {}).items()]
    parts += [f"{k} {_gain(v)}" for k, v in g.get("by_template", {}).items()]
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--questions", type=int, default=100, help="benchmark-v2 questions (35 %% train, 15 %% val, 50 %% test)")
    ap.add_argument("--filtering", default=None, help="evolve --filtering for both arms (default: params.yaml's, "
                    "full: Phase D, the review and the val gate)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    if a.filtering:
        REPORT.section = f"{SECTION}, filtering {a.filtering}"
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    demo = p.get("demo", {})
    for key, value in demo.items():  # the demo's scale and roles: a model reviews every proposal
        if key.split(".")[0] in ("agent", "evolve", "teacher"):
            sec, k = key.split(".", 1)
            p[sec][k] = value
    p["data"].update(version=2, n_questions=a.questions)
    p["evolve"].update(max_candidates=2)
    p["train"]["enabled"] = False
    params = out / "params.yaml"
    params.write_text(yaml.safe_dump(p))
    wall = {}
    wall["data"] = _run(HASP + ["data", "prepare", "--out", str(out / "data"), "--params", str(params)], out / "data.log")
    wall["traces"] = _run(HASP + ["eval", "--variants", "pf", "--split", "train", "--data", str(out / "data"),
                                  "--out", str(out / "traces"), "--params", str(params), "--no-progress"],
                          out / "traces.log")
    arms = {"gold": "--gold", "no_gold": "--no-gold"}
    for arm, flag in arms.items():
        wall[arm] = _run(HASP + ["evolve", "run", "--from-traces", str(out / "traces"), flag, "--params", str(params),
                                 "--out", str(out / arm), "--final-eval",
                                 *(["--filtering", a.filtering] if a.filtering else [])], out / f"{arm}.log")
    from hasp.config import load_params
    from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec

    ds = load_eval_dataset(parse_dataset_spec("generated"), load_params(params), split="test", data_dir=out / "data")
    hops = {str(q.id): int(getattr(q, "hops", 0) or 0) for q in ds.items}
    seen = dict(ds.template_seen)
    REPORT.line(f"benchmark v2, {a.questions} questions (seed {p['data']['seed']}); traces: the PF agent's hasp eval "
                f"episodes on the train split; embedded {p['llm']['embedded']} policy, teacher "
                f"{p['teacher'].get('embedded')} reviewing (demo roles), greedy; test n={len(ds.items)}")
    REPORT.line(f"filtering: {a.filtering or p['evolve']['filtering']} (both arms)")
    REPORT.line(f"wall s: " + ", ".join(f"{k} {v:.0f}" for k, v in wall.items()))
    finals = {}
    for arm in arms:
        ep = out / arm / "epoch_0"
        an, pr, rv = _json(ep / "summary_analyse.json"), _json(ep / "summary_propose.json"), _json(ep / "summary_review.json")
        gt, ad = _json(ep / "summary_gate.json"), _json(ep / "summary_admit.json")
        tr = _json(ep / "traces_summary.json").get("traces", {})
        REPORT.line(f"{arm}: traces read {tr.get('n_read')} (bad {tr.get('n_bad')}, with gold {tr.get('n_with_gold')}); "
                    f"failures {an.get('failed')} by {an.get('failure_source')}; proposals {pr.get('proposed')} of "
                    f"{pr.get('asked')}; review accepted {rv.get('review_accept')} of {rv.get('reviewed')}; val gate "
                    f"passed {gt.get('val_pass')} of {gt.get('val_runs')}; admitted {ad.get('admitted')}")
        prec = an.get("signals")
        if prec:
            REPORT.line(f"  label-free signals against gold: {json.dumps(prec, sort_keys=True)[:600]}")
        ev = out / arm / "eval_evolution"
        before, after, react = (em_by_qid(cell_file(ev, x)) for x in ("pf_before", "pf", "react"))
        finals[arm] = after
        for name, cell in (("react", react), ("pf before", before), ("pf after", after)):
            if cell:
                REPORT.line(f"  test EM {name}: {sum(cell.values()):.0f}/{len(cell)}")
        if before and after:
            g = paired_gain(before, after, hops, seen)
            REPORT.line(f"  pf after - before (paired): {_gain(g)}; {_groups(g)}")
    if all(finals.values()):
        g = paired_gain(finals["gold"], finals["no_gold"], hops, seen)
        REPORT.line(f"no-gold after - gold after (paired): {_gain(g)}; {_groups(g)}")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
