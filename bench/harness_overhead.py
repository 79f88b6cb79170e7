"""PF dispatch time per step vs total step time, for a real rollout with the embedded model.

    .venv/bin/python bench/harness_overhead.py [--questions 8] [--port 8931]

Prints, from one run: p50/p95 dispatch time per step (µs), mean LLM time per step, mean step
time, and the ratio dispatch / step. Uses the seed search library (in-process PFs).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from hasp.config import load_params
from hasp.evolve.epoch import prepare_data, rollout
from hasp.llm.endpoints import policy_client

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--port", type=int, default=8931)
    args = ap.parse_args()
    p = load_params(ROOT / "params.yaml")
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        prepare_data(p, data)
        with policy_client(p.llm, port=args.port, max_tokens=p.agent.max_tokens) as pol:
            t0 = time.perf_counter()
            rollout(p, data, ROOT / "skills" / "search", "test", Path(d) / "r.jsonl", policy=pol,
                    variant="pf", limit=args.questions)
            wall = time.perf_counter() - t0
        from hasp.agent.rollout import read_trajectories

        trajs = read_trajectories(Path(d) / "r.jsonl")
    steps = [s for t in trajs for s in t.steps if s.audit is not None]
    disp = sorted(s.audit.dispatch_s for s in steps)
    step_t = [s.step_s for s in steps]
    llm_t = [s.llm_s for s in steps]
    q = statistics.quantiles(disp, n=20) if len(disp) >= 2 else disp * 19
    print(f"episodes={len(trajs)} parsed_steps={len(steps)} wall={wall:.1f}s")
    print(f"dispatch per step: p50={statistics.median(disp) * 1e6:.1f}us p95={q[18] * 1e6:.1f}us "
          f"mean={statistics.mean(disp) * 1e6:.1f}us")
    print(f"llm per step: mean={statistics.mean(llm_t):.3f}s; step total: mean={statistics.mean(step_t):.3f}s")
    print(f"ratio dispatch/step = {sum(disp) / sum(step_t):.2e}")


if __name__ == "__main__":
    main()
