"""Sandbox cost per problem: run every canonical solution through ``run_tests``.

Why: the code domain grades every rollout in a fresh locked-down interpreter, so the
per-problem sandbox time bounds how fast code rollouts can be scored. All canonical
solutions must pass (a failure here is a sandbox or loader bug, not a model error).

    python bench/humaneval_canonical.py [--workers 2] [--limit N]
        [--mbpp PATH] [--evalplus PATH [--plus]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hasp.domains.code import (  # noqa: E402
    load_evalplus,
    load_humaneval,
    load_mbpp,
    pass_at_1,
    probe_protections,
    run_many,
)
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("HumanEval canonical solutions in the program sandbox")


def bench(name: str, items: list, workers: int, timeout_s: float) -> bool:
    t0 = time.perf_counter()
    res = run_many([(it.canonical, it) for it in items], workers=workers, timeout_s=timeout_s)
    wall = time.perf_counter() - t0
    per = [r.elapsed_s for r in res]
    REPORT.line(f"{name}: {len(items)} problems, {workers} worker(s): wall {wall:.1f}s "
          f"({wall / max(1, len(items)) * 1000:.0f} ms/problem amortised); per-run median "
          f"{statistics.median(per) * 1000:.0f} ms, p90 {sorted(per)[int(0.9 * (len(per) - 1))] * 1000:.0f} ms, "
          f"max {max(per) * 1000:.0f} ms; pass@1 {pass_at_1(res):.3f}; {dict(Counter(r.status for r in res))}")
    for it, r in zip(items, res):
        if not r.passed:
            REPORT.line(f"  FAIL {it.task_id}: {r.status}: {r.detail[:200]}")
    return all(r.passed for r in res)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--mbpp", type=Path, default=None, help="MBPP jsonl (original format)")
    ap.add_argument("--evalplus", type=Path, default=None, help="HumanEval+/MBPP+ jsonl")
    ap.add_argument("--plus", action="store_true", help="EvalPlus: include plus_input")
    args = ap.parse_args()
    REPORT.line("protections:", probe_protections())
    ok = bench("HumanEval", load_humaneval()[: args.limit], args.workers, args.timeout)
    if args.mbpp:
        ok &= bench("MBPP", load_mbpp(args.mbpp)[: args.limit], args.workers, args.timeout)
    if args.evalplus:
        ok &= bench("EvalPlus" + ("+plus" if args.plus else ""),
                    load_evalplus(args.evalplus, include_plus=args.plus)[: args.limit], args.workers, args.timeout)
    REPORT.write()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
