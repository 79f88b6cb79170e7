"""Phase D wall time per candidate, with every check on: policy, a fresh sandboxed worker, the mock
regimes plus replayed cluster and recent steps, boundary caps, watches.

Why: Phase D runs once per candidate per epoch and lite admission runs its short form on every
proposal, so the hardening must not make validation the slow phase. Target: p50 <= 300 ms per
candidate on this machine.

    python bench/phase_d.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hasp.evolve.validate import lite_exec_refusals, phase_d_contexts, validate_candidate  # noqa: E402
from hasp.records import Action, AuditEvent, StepRecord, Trajectory  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Phase D validation time per candidate")

HEAD = "from hasp.pf import ProgramFunction, Intervention, InterventionType, register_pf\nimport re\n\n"


def _pf(sid: str, activate: str, intervene: str, extra: str = "") -> str:
    return (HEAD + f"@register_pf({sid!r})\nclass P(ProgramFunction):\n{extra}"
            f"    def should_activate(self, ctx, action_type, arg):\n        {activate}\n\n"
            f"    def intervene(self, ctx, action_type, arg, teacher=None):\n        {intervene}\n")


#: kind -> code; the mix a proposal batch produces: mostly well-formed PFs, some broken ones
MIX: dict[str, str] = {
    "good_rewrite": _pf("shorten_query", "return action_type == 'SEARCH' and len(arg.split()) > 12",
                        "return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH', "
                        "new_action_arg=' '.join(re.findall(r'[A-Za-z0-9]+', arg)[:8]), reason='shorter')"),
    "good_inject": _pf("read_first", "return action_type == 'FINAL' and not ctx.get('has_read')",
                       "return Intervention(type=InterventionType.INJECT_CONTEXT, context_text='Read a "
                       "document before answering.', reason='no read')", "    watches = ('FINAL',)\n"),
    "good_stateful": _pf("repeat_guard", "n = ctx.get('_seen', 0)\n        ctx['_seen'] = n + 1\n"
                         "        return arg in ctx.get('queries', [])",
                         "return Intervention(type=InterventionType.INJECT_CONTEXT, context_text='You "
                         "searched this already.')"),
    "raises": _pf("broken", "return ctx['no_such_key'] > 1", "return None"),
    "wrong_type": _pf("sloppy", "return 'yes'", "return {'type': 'NOOP'}"),
    "policy_refused": "import os\n" + _pf("reads_env", "return bool(os.environ)", "return None"),
    "loops": _pf("spins", "while True:\n            pass", "return None"),
}


def _trajs(n: int = 8) -> list[Trajectory]:
    out = []
    for q in range(n):
        question = f"Which company did the founder of Orbel Works {q} start after leaving Varnholt Labs?"
        acts = [("SEARCH", f"founder of Orbel Works {q}"), ("READ", f"doc{q}1"),
                ("SEARCH", f"founder Orbel Works {q} Varnholt Labs company started afterwards"), ("FINAL", "Tessaly")]
        steps = []
        for i, (typ, arg) in enumerate(acts):
            fb = ({"n_hits": 3, "hit_ids": [f"doc{q}{k}" for k in range(3)]} if typ == "SEARCH" else
                  {"found": True, "doc_id": arg} if typ == "READ" else {"final": True})
            obs = (f"1. [doc{q}1] Orbel Works {q}: founded by Mara Eskel in 1998. 2. [doc{q}2] Varnholt Labs."
                   if typ == "SEARCH" else f"Orbel Works {q} was founded by Mara Eskel, formerly of Varnholt Labs.")
            steps.append(StepRecord(index=i, raw_output="", observation=obs, thought=f"step {i}",
                                    audit=AuditEvent(state={}, a_orig=Action(typ, arg), a_final=Action(typ, arg),
                                                     feedback=fb)))
        out.append(Trajectory(qid=f"q{q}", question=question, answers=["Tessaly"], variant="pf", steps=steps))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="times each candidate of the mix is validated")
    a = ap.parse_args()
    ctxs, args = phase_d_contexts(_trajs(), {"q0", "q1", "q2", "q3"})
    n_real = len(ctxs) - 3
    REPORT.line(f"contexts per candidate: 3 mock regimes + {n_real} replayed steps "
                f"({sum(n.startswith('cluster:') for n, _ in ctxs)} cluster, "
                f"{sum(n.startswith('recent:') for n, _ in ctxs)} recent) x 3 action types x 2 calls")
    REPORT.line("candidate mix (one each per round): " + ", ".join(MIX))
    validate_candidate(MIX["good_inject"], "read_first")  # warm the host's caches once
    full: dict[str, list[float]] = {k: [] for k in MIX}
    lite: dict[str, list[float]] = {k: [] for k in MIX}
    outcome: dict[str, str] = {}
    for _ in range(a.rounds):
        for kind, code in MIX.items():
            t0 = time.perf_counter()
            rep = validate_candidate(code, None, contexts=ctxs, args=args)
            full[kind].append(time.perf_counter() - t0)
            outcome[kind] = f"passed={rep.passed} q_exec={rep.q_exec:.2f}"
            t0 = time.perf_counter()
            lite_exec_refusals(code, None)
            lite[kind].append(time.perf_counter() - t0)
    every = [x for xs in full.values() for x in xs]
    every_lite = [x for xs in lite.values() for x in xs]
    REPORT.line("")
    REPORT.line(f"{'kind':16s} {'Phase D p50':>12s} {'lite p50':>10s}   outcome")
    for kind in MIX:
        REPORT.line(f"{kind:16s} {statistics.median(full[kind]) * 1000:9.0f} ms {statistics.median(lite[kind]) * 1000:7.0f} ms"
                    f"   {outcome[kind]}")
    REPORT.line("")
    p50 = statistics.median(every)
    REPORT.line(f"Phase D per candidate over the mix (n={len(every)}): p50 {p50 * 1000:.0f} ms, "
                f"max {max(every) * 1000:.0f} ms  (target p50 <= 300 ms: {'met' if p50 <= 0.3 else 'NOT met'})")
    REPORT.line(f"lite sandbox_exec per candidate (n={len(every_lite)}): p50 "
                f"{statistics.median(every_lite) * 1000:.0f} ms, max {max(every_lite) * 1000:.0f} ms")
    REPORT.write()


if __name__ == "__main__":
    main()
