"""Harness time per step (selection + dispatch + handler votes + phase reminders) vs step time,
for a real rollout of the embedded model with the full web-search library.

    .venv/bin/python bench/harness_overhead.py [--questions 8] [--port 8931] [--pf-selection all] [--params P]
                                               [--concurrency 1]

``--pf-selection all`` (default) keeps all 26 seed PFs live on every step, the worst case for
dispatch; ``auto`` measures the per-question selection of App. B.6 instead. Per step, the harness
time is ``audit.harness_s`` (step context, dispatch, handlers, phase reminders) plus the episode's
planning time (difficulty gate + PF/skill selection) spread over its steps. Prints, from one run:
p50/p95 of that per-step harness time (µs), the dispatch-only p50, mean LLM and step time, and the
ratio harness / step time. Episodes run one at a time by default (``--concurrency 1``): the
harness timers are wall clocks, and with several episodes in flight they also count the time a
step waits for the GIL while a sibling episode parses its HTTP reply.
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
    ap.add_argument("--concurrency", type=int, default=1,
                    help="episodes in flight; >1 adds GIL waits of sibling episodes to the timed harness code")
    ap.add_argument("--pf-selection", default="all", choices=["all", "auto", "heuristic"])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                    help="params file (its llm.base_url may point at a running server)")
    args = ap.parse_args()
    p = load_params(args.params, overrides={"harness.pf_selection": args.pf_selection,
                                              "llm.max_concurrency": args.concurrency})
    library = ROOT / "skills" / "search"
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        prepare_data(p, data)
        with policy_client(p.llm, port=args.port, max_tokens=p.agent.max_tokens) as pol:
            t0 = time.perf_counter()
            rollout(p, data, library, "test", Path(d) / "r.jsonl", policy=pol, variant="pf",
                    limit=args.questions)
            wall = time.perf_counter() - t0
        from hasp.agent.rollout import read_trajectories

        trajs = read_trajectories(Path(d) / "r.jsonl")
    per_step, disp, step_t, llm_t, n_pfs = [], [], [], [], []
    for t in trajs:
        audited = [s for s in t.steps if s.audit is not None]
        if not audited:
            continue
        plan = (t.harness.selection_s if t.harness else 0.0) / len(audited)
        n_pfs.append(len(t.harness.selected_pfs) if t.harness else 0)
        for s in audited:
            per_step.append(s.audit.harness_s + plan)
            disp.append(s.audit.dispatch_s)
            step_t.append(s.step_s)
            llm_t.append(s.llm_s)
    if not per_step:
        raise SystemExit("no parsed steps: nothing to measure")
    q = statistics.quantiles(per_step, n=20) if len(per_step) >= 2 else per_step * 19
    print(f"library={library.name} pf_selection={args.pf_selection} live PFs per episode="
          f"{statistics.mean(n_pfs):.1f} episodes={len(trajs)} parsed_steps={len(per_step)} wall={wall:.1f}s")
    print(f"harness per step (selection + dispatch + handlers + phases): p50={statistics.median(per_step) * 1e6:.1f}us "
          f"p95={q[18] * 1e6:.1f}us mean={statistics.mean(per_step) * 1e6:.1f}us")
    print(f"dispatch only: p50={statistics.median(disp) * 1e6:.1f}us")
    print(f"llm per step: mean={statistics.mean(llm_t):.3f}s; step total: mean={statistics.mean(step_t):.3f}s")
    print(f"ratio harness/step = {sum(per_step) / sum(step_t):.2e} ({100 * sum(per_step) / sum(step_t):.4f}%)")


if __name__ == "__main__":
    main()
