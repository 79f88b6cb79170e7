"""Per-call latency of a sandboxed PF (worker process, JSON over pipes) vs the same PF in-process.

Why: generated PFs run on every agent step, so the sandbox's round trip is paid
``n_generated_PFs × (1 + fires)`` times per step. This measures it, for a
realistic mid-episode context and for one with a large ``all_read_contents``.

    python bench/sandbox_overhead.py [--calls 2000] [--big-kb 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hasp.evolve.validate import mock_contexts  # noqa: E402
from hasp.pf.registry import collecting  # noqa: E402
from hasp.pf.sandboxed import SandboxedPF  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Sandboxed PF call overhead")

PF_CODE = '''
import re
from hasp.pf import ProgramFunction, Intervention, InterventionType, register_pf

@register_pf("bench_pf")
class BenchPF(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH" and (len(arg.split()) > 15 or arg in ctx.get("queries", []))

    def intervene(self, ctx, action_type, arg, teacher=None):
        ctx["_bench_fires"] = ctx.get("_bench_fires", 0) + 1
        words = re.findall(r"[A-Za-z0-9]+", arg)[:8]
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=" ".join(words), reason="shortened")
'''


def in_process():
    ns: dict = {"__name__": "bench_candidate"}
    with collecting() as found:
        exec(compile(PF_CODE, "<bench>", "exec", dont_inherit=True), ns)  # noqa: S102 - our own code
    return found["bench_pf"]()


def time_calls(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    return (f"median {statistics.median(xs) * 1e6:8.1f} us   p90 {xs[int(0.9 * len(xs))] * 1e6:8.1f} us   "
            f"mean {statistics.fmean(xs) * 1e6:8.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--big-kb", type=int, default=32, help="size of all_read_contents in the large context")
    a = ap.parse_args()

    local = in_process()
    t0 = time.perf_counter()
    remote = SandboxedPF(PF_CODE, "bench_pf")
    prot = remote.protections  # starts the worker and loads the PF
    start_s = time.perf_counter() - t0
    REPORT.line(f"worker start + load: {start_s * 1000:.0f} ms")
    REPORT.line("protections:", json.dumps({k: v for k, v in prot.items() if k not in ("pid", "workdir")}))

    mid = dict(mock_contexts()[1][1])
    big = dict(mid, all_read_contents="lorem ipsum dolor sit amet " * (a.big_kb * 1024 // 27))
    long_q = " ".join(["word"] * 20)
    rows = []
    for label, ctx in (("mid ctx (%.1f KB)" % (len(json.dumps(mid)) / 1024), mid),
                       ("big ctx (%.1f KB)" % (len(json.dumps(big)) / 1024), big)):
        for method, at, arg in (("should_activate", "READ", "1"), ("intervene", "SEARCH", long_q)):
            if method == "should_activate":
                f_local = lambda c=ctx: local.should_activate(dict(c), at, arg)  # noqa: E731
                f_remote = lambda c=ctx: remote.should_activate(dict(c), at, arg)  # noqa: E731
            else:
                f_local = lambda c=ctx: local.intervene(dict(c), at, arg, None)  # noqa: E731
                f_remote = lambda c=ctx: remote.intervene(dict(c), at, arg, None)  # noqa: E731
            for f in (f_local, f_remote):  # warm up
                time_calls(f, 50)
            tl, tr = time_calls(f_local, a.calls), time_calls(f_remote, a.calls)
            ratio = statistics.median(tr) / statistics.median(tl)
            rows.append((label, method, tl, tr, ratio))
    for label, method, tl, tr, ratio in rows:
        REPORT.line(f"\n{label} {method}")
        REPORT.line(f"  in-process : {fmt(tl)}")
        REPORT.line(f"  sandboxed  : {fmt(tr)}")
        REPORT.line(f"  ratio (median sandboxed / in-process): {ratio:.0f}x   "
              f"overhead {(statistics.median(tr) - statistics.median(tl)) * 1e6:.1f} us/call")
    remote.close()
    REPORT.write()


if __name__ == "__main__":
    main()
