"""The example user task (``examples/unit_convert``) evaluated as a user would, with the embedded model.

Why: the task API's claim is that a user's own tool, scorer and PF run through the same harness; this
puts a number on what the example's one PF does for the embedded SmolLM2 on its six hand-written
questions (the first six of its items; the other 42 are generated so an epoch has items to split) (ReAct against the PF agent, paired per question), beside the task's own ceiling (its tool applied
to each question's numbers). Greedy decoding (``agent.temperature: 0``): a run is one deterministic
sample, so the interval is over questions, not seeds.

    python bench/example_task.py [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.stats import paired_difference, rate  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Example user task: unit conversion with its own tool, scorer and PF")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "examples" / "unit_convert"))
    import hasp.api as h
    from task import unit_task

    here = Path.cwd()
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # the run's mlflow.db and outputs stay out of the checkout
        try:
            m = h.evaluate(unit_task, ["react", "pf"], out="out", params=None, limit=6)["unit_convert"]
            em = {v: {json.loads(x)["qid"]: float(json.loads(x)["em"])
                      for x in (Path(d) / "out" / "unit_convert" / f"{v}.jsonl").read_text().splitlines()
                      if x.strip()}
                  for v in ("react", "pf")}
        finally:
            os.chdir(here)
    qids = sorted(em["react"])
    diff = paired_difference([em["react"][q] for q in qids], [em["pf"][q] for q in qids])
    ceiling = m["pf"].get("extractor_ceiling", {})
    REPORT.line(f"questions: {len(qids)} (examples/unit_convert/task.py), embedded SmolLM2-135M, llama.cpp, greedy")
    for v in ("react", "pf"):
        r = rate([em[v][q] for q in qids])
        REPORT.line(f"  {v:<6} EM {r.k}/{r.n} {r.p:.3f} [{r.lo:.2f}, {r.hi:.2f}]  steps {m[v]['mean_steps']:.1f}  "
                    f"PF fires {m[v]['pf_fires_total']} {m[v].get('pf_fires') or ''}")
    REPORT.line(f"  pf - react (paired over questions): {diff.mean:+.3f} [{diff.lo:+.2f}, {diff.hi:+.2f}] n={len(qids)}")
    REPORT.line(f"  the task's ceiling (its tool on each question's numbers): {ceiling.get('em_k')}/{ceiling.get('n')}")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
