"""The model ladder's evolution epochs: one lite and one full epoch per (policy, teacher) configuration.

Why: the ladder's evaluations say what each embedded model does as an agent; these epochs say what it
does as the loop's author and reviewer. Each configuration runs ``hasp evolve run`` on the same
generated one-hop questions: the policy is also the student (Phase C), the teacher (when there is one)
reviews in Phase E, otherwise the heuristic does. Per epoch the table reports failures Phase B read,
proposals written, passed Phase D (lite mode runs none: '-'), passed review, admitted, the best val-gate
gain over the start library with its paired 95 % interval, and test EM of ReAct, the PF agent with the
seed library and with the evolved one, with the paired gain of evolved over seed.

One command, resumable: each epoch is a folder under ``--out``; one whose evaluation is written is not
run again.

    python bench/ladder_epochs.py --out /tmp/ladder-epochs --questions 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from domain_epochs import gain_text, read_json  # noqa: E402 - bench/ is the script directory
from model_ladder import add_configuration_args, configurations  # noqa: E402
from results import Report  # noqa: E402

HASP = [sys.executable, "-m", "hasp.cli"]
MODES = ("lite", "full")


def epoch_params(base: Path, policy: str, teacher: str, mode: str, questions: int) -> dict:
    """``base`` for one epoch of the ladder: its models, its mode, its data size; no training."""
    from hasp.llm.server import free_port

    p = yaml.safe_load(base.read_text())
    p["data"].update(n_questions=questions, fractions=[0.25, 0.25, 0.5], version=1, hop_weights={1: 1.0})
    p["evolve"].update(mode=mode)
    p["train"]["enabled"] = False
    p["llm"].update(embedded=policy, port=free_port())
    p["teacher"].update(embedded=None if teacher == "none" else teacher, port=free_port())
    p["tracking"]["experiment"] = "hasp-ladder-epochs"
    return p


def val_gain(ep: Path) -> str:
    """The best gated candidate's val EM gain over the start library, paired on the val questions."""
    base = em_by_qid(ep / "val_baseline.jsonl")
    best = None
    for f in sorted((ep / "val_runs").glob("val*.jsonl")):
        g = paired_gain(base, em_by_qid(f))
        if g.get("n") and (best is None or g["mean"] > best["mean"]):
            best = g
    return gain_text(best) if best else "none gated"


def row(label: str, mode: str, out: Path, wall: float) -> str:
    ep = out / "epoch_0"
    b, c, d, e, f = (read_json(ep / f"summary_{s}.json") for s in ("analyse", "propose", "validate", "review",
                                                                   "admit"))
    ev = out / "eval_evolution"
    em = {k: em_by_qid(cell_file(ev, k)) for k in ("react", "pf_before", "pf")}
    cells = next((c for c in read_json(ev / "metrics.json").values() if isinstance(c, dict) and "pf" in c), {})
    ceiling = (cells.get("pf") or {}).get("extractor_ceiling") or {}
    rewrite = (cells.get("pf") or {}).get("correct_via_vocabulary_rewrite") or {}
    ceil = f"{ceiling['em_k']}/{ceiling['n']}" if ceiling.get("n") else "-"
    via = f"{rewrite.get('k', 0)}/{rewrite.get('n', 0)}" if rewrite else "-"
    score = lambda k: f"{sum(em[k].values()):.0f}/{len(em[k])}" if em[k] else "-"  # noqa: E731
    d_ok = d.get("exec_pass", "-") if d else "-"
    r_ok = e.get("review_accept", "-") if e else "-"
    reviewer = ",".join(e.get("reviewer") or []) if e else "-"
    return (f"{label:27s} {mode:4s} {b.get('failed', '-')!s:>6s} {c.get('proposed', '-')!s:>4s} {d_ok!s:>4s} "
            f"{r_ok!s:>4s} {reviewer[:9]:9s} {f.get('admitted', '-')!s:>3s}  {val_gain(ep):24s} {score('react'):>6s} "
            f"{score('pf_before'):>7s} {score('pf'):>7s} {via:>7s} {ceil:>7s}  "
            f"{gain_text(paired_gain(em['pf_before'], em['pf'])):24s} {wall:5.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="work folder (one sub-folder per epoch; resumable)")
    add_configuration_args(ap)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--questions", type=int, default=60, help="generated one-hop questions (split 25/25/50 %%)")
    ap.add_argument("--ran", action="append", default=[], help="what else ran on the machine (printed)")
    ap.add_argument("--section", default="Model ladder: one lite and one full evolution epoch per configuration")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    a = ap.parse_args(argv)
    report = Report(a.section)
    rows = []
    for label, pol, t in configurations(a):
        for mode in a.modes:
            work = a.out / f"{label}-{mode}"
            work.mkdir(parents=True, exist_ok=True)
            wall_file = work / "wall_s.txt"
            if not (work / "out" / "eval_evolution" / "metrics.json").exists():
                (work / "params.yaml").write_text(yaml.safe_dump(epoch_params(a.params, pol, t, mode,
                                                                              a.questions)))
                t0 = time.monotonic()
                with (work / "run.log").open("w") as log:
                    r = subprocess.run(HASP + ["evolve", "run", "--domain", "search", "--params", "params.yaml",
                                               "--out", "out"], cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                       env={**os.environ, "HASP_LLM_THREADS": os.environ.get("HASP_LLM_THREADS",
                                                                                             "2")})
                wall_file.write_text(f"{time.monotonic() - t0:.0f}\n")
                if r.returncode != 0:
                    report.line(f"{label} {mode}: `hasp evolve run` failed ({r.returncode}); see {work / 'run.log'}")
                    continue
            wall = float(wall_file.read_text()) if wall_file.exists() else 0.0
            rows.append(row(label, mode, work / "out", wall))
    report.line(f"{a.questions} generated one-hop questions (train/val/test 25/25/50 %), `hasp evolve run --domain "
                "search` per epoch with params.yaml's evolve settings but the mode, training off; the policy is "
                "the student; the teacher, where there is one, reviews (else the heuristic: 'reviewer'); 'D ok' "
                "is '-' where lite mode runs no Phase D; val gain: the best gated candidate's val EM over the start "
                "library, paired; 'via rw': the evolved PF agent's correct answers a vocabulary rewrite wrote, of its "
                "correct answers; 'ceiling': the vocabulary extractor (answer_span_from_evidence) on each test "
                "question's gold support; wall: the whole command, evaluation included")
    for r in a.ran:
        report.line(f"ran: {r}")
    report.line("")
    report.line(f"{'configuration':27s} {'mode':4s} {'failed':>6s} {'prop':>4s} {'D ok':>4s} {'rev':>4s} "
                f"{'reviewer':9s} {'adm':>3s}  {'val gain (best, paired)':24s} {'react':>6s} {'pf seed':>7s} "
                f"{'pf evo':>7s} {'via rw':>7s} {'ceiling':>7s}  {'evolved - seed (paired)':24s}  wall")
    for r in rows:
        report.line(r)
    if not a.no_write:
        report.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
