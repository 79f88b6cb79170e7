"""Harness time per step (selection + dispatch + handler votes + phase reminders) vs step time,
for a real rollout of the embedded model with the full web-search library.

    .venv/bin/python bench/harness_overhead.py [--questions 8] [--port 8931] [--pf-selection all] [--params P]
                                               [--concurrency 1]

``--pf-selection all`` (default) selects all 26 seed PFs for every episode, the worst case for
dispatch (each step still asks only the PFs whose ``watches`` include its action type; the bench
prints how many that was); ``auto`` measures the per-question selection of App. B.6 instead. Per step, the harness
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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hasp.config import ParamsError, load_params
from hasp.domains.search.prepare import prepare_data
from hasp.evolve.epoch import rollout
from hasp.agent.rollout import read_trajectories
from hasp.llm.endpoints import policy_client
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Harness overhead per step")

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--port", type=int, default=8931)
    ap.add_argument("--concurrency", type=int, default=1,
                    help="episodes in flight; >1 adds GIL waits of sibling episodes to the timed harness code")
    ap.add_argument("--replay-reps", type=int, default=5,
                    help="re-run the episodes this many times on the recorded model replies (0 = off)")
    ap.add_argument("--pf-selection", default="all", choices=["all", "auto", "heuristic"])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                    help="params file (its llm.base_url may point at a running server)")
    args = ap.parse_args()
    try:
        p = load_params(args.params, overrides={"harness.pf_selection": args.pf_selection,
                                                  "llm.max_concurrency": args.concurrency})
    except ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    library = ROOT / "hasp" / "skills" / "search"
    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        prepare_data(p, data)
        with policy_client(p.llm.model_copy(update={"reply_cache": False}), port=args.port,
                           max_tokens=p.agent.max_tokens) as pol:
            t0 = time.perf_counter()
            rollout(p, data, library, "test", Path(d) / "r.jsonl", policy=pol, variant="pf",
                    limit=args.questions)
            wall = time.perf_counter() - t0
        trajs = read_trajectories(Path(d) / "r.jsonl")
        replayed = []
        for i in range(args.replay_reps):  # the same episodes again, the model's recorded replies fed back
            rollout(p, data, library, "test", Path(d) / f"replay{i}.jsonl", policy=ReplayPolicy(trajs),
                    variant="pf", limit=args.questions)
            replayed += read_trajectories(Path(d) / f"replay{i}.jsonl")
    live = _per_step(trajs)
    asked = _asked_per_step(trajs, library)
    if not live["harness"]:
        raise SystemExit("no parsed steps: nothing to measure")
    REPORT.line(f"library={library.name} pf_selection={args.pf_selection} live PFs per episode="
          f"{statistics.mean(live['n_pfs']):.1f} episodes={len(trajs)} parsed_steps={len(live['harness'])} "
          f"wall={wall:.1f}s")
    _report("live (between real model calls)", live)
    REPORT.line(f"PFs asked per step (selected PFs watching the proposed action type): p50={statistics.median(asked):.0f} "
          f"mean={statistics.mean(asked):.1f} of {statistics.mean(live['n_pfs']):.0f} selected")
    REPORT.line(f"llm per step: mean={statistics.mean(live['llm']):.3f}s; step total: mean={statistics.mean(live['step']):.3f}s")
    REPORT.line(f"ratio harness/step = {sum(live['harness']) / sum(live['step']):.2e} "
          f"({100 * sum(live['harness']) / sum(live['step']):.4f}%)")
    if replayed:
        rep = _per_step(replayed)
        same = sum(a.prediction == b.prediction for a, b in zip(trajs * args.replay_reps, replayed))
        REPORT.line(f"replay x{args.replay_reps}: {same}/{len(replayed)} episodes reproduce the live prediction")
        _report("replay (same steps, warm, no model wait)", rep)
    REPORT.write()


class ReplayPolicy:
    """Feeds each episode the replies the real model gave it in the live run (matched by question).

    It separates the harness's own cost from what the live timers also pick up on a busy machine:
    after each multi-second model call the harness runs on cold caches and may be preempted by
    the model server's threads."""

    def __init__(self, trajs: list[Any]) -> None:
        self.replies = {t.question: [s.raw_output for s in t.steps] for t in trajs}

    def chat(self, messages: list[dict[str, str]], **kw: Any) -> Any:
        from hasp.llm.client import ChatResult

        user = "\n".join(m["content"] for m in messages if m["role"] == "user")
        for q, rs in self.replies.items():
            if q in user and rs:
                return ChatResult(rs.pop(0), 0, 0, 0.0)
        return ChatResult("Thought: out of recorded replies\nAction: FINAL[unknown]", 0, 0, 0.0)


def _per_step(trajs: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"harness": [], "dispatch": [], "dispatch_selection": [], "step": [], "llm": [],
                                   "n_pfs": []}
    by_type: dict[str, list[float]] = {}
    for t in trajs:
        audited = [s for s in t.steps if s.audit is not None]
        if not audited:
            continue
        plan = (t.harness.selection_s if t.harness else 0.0) / len(audited)
        out["n_pfs"].append(len(t.harness.selected_pfs) if t.harness else 0)
        for s in audited:
            out["harness"].append(s.audit.harness_s + plan)
            out["dispatch"].append(s.audit.dispatch_s)
            out["dispatch_selection"].append(s.audit.dispatch_s + plan)
            by_type.setdefault(s.audit.a_orig.type, []).append(s.audit.dispatch_s + plan)
            out["step"].append(s.step_s)
            out["llm"].append(s.llm_s)
    out.update({f"type:{k}": v for k, v in sorted(by_type.items())})
    return out


def _asked_per_step(trajs: list[Any], library: Path) -> list[int]:
    """Per audited step, how many selected PFs watch the proposed action type (before any rewrite)."""
    from hasp.pf.base import watched_types
    from hasp.pf.library import load_library

    lib = load_library(library)
    try:
        watches = {s.skill_id: watched_types(s.pf.watches) for s in lib.skills if s.pf is not None}
    finally:
        lib.close()
    out = []
    for t in trajs:
        ids = t.harness.selected_pfs if t.harness else []
        for s in t.steps:
            if s.audit is not None:
                at = s.audit.a_orig.type
                out.append(sum(1 for i in ids if watches.get(i) is None or at in watches[i]))
    return out or [0]


def _report(label: str, m: dict[str, list[float]]) -> None:
    h = m["harness"]
    q = statistics.quantiles(h, n=20) if len(h) >= 2 else h * 19
    REPORT.line(f"{label}: harness per step (selection + dispatch + handlers + phases) p50={statistics.median(h) * 1e6:.1f}us "
          f"p95={q[18] * 1e6:.1f}us mean={statistics.mean(h) * 1e6:.1f}us; dispatch + selection p50="
          f"{statistics.median(m['dispatch_selection']) * 1e6:.1f}us; dispatch only p50="
          f"{statistics.median(m['dispatch']) * 1e6:.1f}us")
    REPORT.line("  dispatch + selection p50 by proposed action type: " + ", ".join(
        f"{k[5:]} {statistics.median(v) * 1e6:.0f}us (n={len(v)})" for k, v in m.items() if k.startswith("type:")))

if __name__ == "__main__":
    main()
