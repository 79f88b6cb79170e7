"""One lite evolution epoch per task: search, math (24-game), code (HumanEval) and the example user task.

What a user of their own task runs: ``hasp evolve run --domain D --mode lite --filtering exec`` on the
embedded default, then the epoch's own evaluation on the task's test split (ReAct, the PF agent with the
seed library and with the evolved one). The table reports per task: failures Phase B read and the
detector categories it found, proposals written, passed Phase D, admitted, and test EM with the paired
95 % interval of the evolved library against the seed library and against ReAct on the same questions.
Math, code and the example task split their item pools by ``data.n_questions`` / ``data.fractions``.

    python bench/domain_epochs.py --out DIR [--questions 30] [--domains search math code unit_convert]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hasp.eval.paired import cell_file, em_by_qid, paired_gain  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("One lite evolution epoch per task")
HASP = [sys.executable, "-m", "hasp.cli"]
#: bench name -> (evolve.domain, the folder the command runs in: None = the output folder)
DOMAINS = {"search": ("search", None), "math": ("math", None), "code": ("code", None),
           "unit_convert": ("task:unit_task", "unit_convert")}


def gain_text(g: dict) -> str:
    """A paired gain as ``+0.062 [+0.00, +0.19] n=16`` (``-`` when no question was paired)."""
    return f"{g['mean']:+.3f} [{g['ci95'][0]:+.2f}, {g['ci95'][1]:+.2f}] n={g['n']}" if g.get("n") else "-"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="work folder (one sub-folder per task)")
    ap.add_argument("--questions", type=int, default=30, help="items per task (data.n_questions)")
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=list(DOMAINS))
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    a = ap.parse_args(argv)
    from hasp.llm.server import free_port

    a.out.mkdir(parents=True, exist_ok=True)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["data"]["n_questions"] = a.questions
    p["evolve"].update(mode="lite", filtering="exec", max_candidates=2, lite_max_candidates=2)
    p["train"]["enabled"] = False
    p["llm"]["port"], p["teacher"]["port"] = free_port(), free_port()  # the default ports stay free
    rows = []
    for name in a.domains:
        domain, folder = DOMAINS[name]
        work = a.out / name
        if folder is not None and not work.exists():
            shutil.copytree(ROOT / "examples" / folder, work, ignore=shutil.ignore_patterns("__pycache__"))
        work.mkdir(parents=True, exist_ok=True)
        params = work / "params.yaml"
        params.write_text(yaml.safe_dump(p))
        wall = 0.0
        if not (work / "out" / "eval_evolution" / "metrics.json").exists():
            t0 = time.monotonic()
            with (work / "run.log").open("w") as log:
                r = subprocess.run(HASP + ["evolve", "run", "--domain", domain, "--params", "params.yaml", "--out",
                                           "out"], cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "HASP_LLM_THREADS": "2"})
            wall = time.monotonic() - t0
            (work / "wall_s.txt").write_text(f"{wall:.0f}\n")
            if r.returncode != 0:
                REPORT.line(f"{name}: `hasp evolve run` failed ({r.returncode}); see {work / 'run.log'}")
                continue
        elif (work / "wall_s.txt").exists():  # an earlier run of this folder: its own wall time
            wall = float((work / "wall_s.txt").read_text())
        rows.append(_row(name, work / "out", wall))
    REPORT.line(f"{a.questions} items per task (data.n_questions; fractions train/val/test "
                f"{p['data']['fractions']}), evolve.mode lite, filtering exec, 2 proposals asked, training off, "
                "embedded default policy and student; 'D ok' is '-' where lite mode runs no Phase D (its compile "
                "check is part of admission); wall: the whole `hasp evolve run`, evaluation included")
    REPORT.line("")
    REPORT.line(f"{'task':13s} {'failed':>6s} {'patterns (category: n)':40s} {'prop':>4s} {'D ok':>4s} {'adm':>3s} "
                f"{'react':>6s} {'pf seed':>7s} {'pf evolved':>10s}  evolved - seed (paired)   evolved - react (paired)"
                "   wall")
    for r in rows:
        REPORT.line(r)
    if not a.no_write:
        REPORT.write()
    return 0


def _row(name: str, out: Path, wall: float) -> str:
    ep = out / "epoch_0"
    b, c, d, f = (read_json(ep / f"summary_{s}.json") for s in ("analyse", "propose", "validate", "admit"))
    metrics = read_json(out / "eval_evolution" / "metrics.json")
    cells = next((v for k, v in metrics.items() if isinstance(v, dict) and "react" in v), {})
    pf = next((k for k in cells if k.startswith("pf") and not k.endswith("_before")), "pf")
    before = f"{pf}_before"
    em = {k: em_by_qid(cell_file(out / "eval_evolution", k)) for k in ("react", before, pf)}
    cats = ", ".join(f"{k}: {v}" for k, v in sorted(b.get("pattern_categories", {}).items()))
    score = lambda k: f"{sum(em[k].values()):.0f}/{len(em[k])}" if em[k] else "-"  # noqa: E731
    return (f"{name:13s} {b.get('failed', '-')!s:>6s} {cats[:40]:40s} {c.get('proposed', '-')!s:>4s} "
            f"{d.get('exec_pass', '-')!s:>4s} {f.get('admitted', '-')!s:>3s} {score('react'):>6s} "
            f"{score(before):>7s} {score(pf):>10s}  {gain_text(paired_gain(em[before], em[pf])):24s} "
            f"{gain_text(paired_gain(em['react'], em[pf])):24s} {wall:5.0f} s")


if __name__ == "__main__":
    raise SystemExit(main())
