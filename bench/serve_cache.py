"""PF-agent episodes per second on the embedded model under several KV-cache settings of its CPU server.

Why: on two cores an episode's time goes to prompt processing; step k's prompt begins with step k-1's,
and ``transformers serve`` can reuse cached pages of a shared prefix instead of recomputing them, but
only in whole pages and only while free pages remain (``llm.transformers``). Every setting runs the same
greedy PF-agent episodes on the same questions, one after another on a fresh server, so the ratio of
episodes/s between them is measured in one run; identical answers show the cache changed speed only.

    python bench/serve_cache.py --questions 16 --config num_blocks=64 --config num_blocks=512,page_size=32
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.config import Params, load_params  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("CPU server KV cache and agent throughput")


def parse_config(text: str) -> dict[str, Any]:
    """``num_blocks=512,page_size=32`` -> the ``llm.transformers`` overrides it names."""
    out: dict[str, Any] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise SystemExit(f"error: --config {text!r}: expected key=value[,key=value]")
        out[f"llm.transformers.{key.strip()}"] = None if value.strip() in ("null", "") else int(value)
    return out


def run_setting(p: Params, data: Path, library: Path, n: int) -> dict[str, Any]:
    """``n`` greedy PF-agent episodes on a fresh server with ``p.llm.transformers``."""
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.llm.endpoints import policy_client
    from hasp.pf.library import load_library

    domain = SearchDomain(data_dir=data)
    items, index = domain.items("test")[:n], domain.open(p)
    lib = load_library(library, "search", sandbox=p.sandbox)
    try:
        with policy_client(p.llm.model_copy(update={"reply_cache": False}), max_tokens=p.agent.max_tokens) as policy:
            t0 = time.perf_counter()
            trajs = [r.traj for r in run_episodes(episode_spec(p, domain, "pf"), items, policy=policy, library=lib,
                                                  opened=index, desc="episodes")]
            wall = time.perf_counter() - t0
    finally:
        lib.close()
    return {"episodes": len(trajs), "wall_s": wall, "episodes_per_s": len(trajs) / wall,
            "steps": sum(len(t.steps) for t in trajs), "prompt_tokens": sum(t.prompt_tokens for t in trajs),
            "em": sum(t.em for t in trajs), "answers": [t.prediction for t in trajs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=16, help="test questions of the generated benchmark")
    ap.add_argument("--config", action="append", default=None,
                    help="llm.transformers settings to compare, e.g. num_blocks=512,page_size=32 (repeatable; "
                         "the first is the baseline; default: the params file's, then 512 pages of 32 tokens)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--library", type=Path, default=ROOT / "hasp" / "skills" / "search")
    ap.add_argument("--hops", default="1:1", help="data.hop_weights as hop:weight,... (default: one-hop only)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    from hasp.domains.search.prepare import prepare_data

    configs = a.config or ["", "num_blocks=512,page_size=32"]
    hops = {int(h): float(w) for h, w in (x.split(":") for x in a.hops.split(","))}
    base = load_params(a.params, {"data.hop_weights": hops, "data.n_questions": max(40, 3 * a.questions),
                                  "llm.base_url": None})
    rows = []
    with tempfile.TemporaryDirectory(prefix="hasp-serve-cache-") as tmp:
        prepare_data(base, Path(tmp) / "data")
        for c in configs:
            p = load_params(a.params, {"data.hop_weights": hops, "llm.base_url": None, **parse_config(c)})
            r = run_setting(p, Path(tmp) / "data", a.library, a.questions)
            rows.append((c or "params file", p.llm.transformers, r))
    ref = rows[0][2]
    REPORT.line(f"{a.questions} greedy PF-agent episodes on generated test questions (hops {a.hops}), "
                f"concurrency {base.llm.max_concurrency}, a fresh server per setting")
    REPORT.line(f"{'setting':<32}{'wall s':>8}{'ep/s':>8}{'steps':>7}{'prompt tok':>12}{'EM':>5}{'same answers':>14}"
                f"{'ratio':>8}")
    for name, t, r in rows:
        same = sum(x == y for x, y in zip(r["answers"], ref["answers"]))
        label = f"{t.num_blocks}x{t.page_size or 'default'} ({name})"[:31]
        REPORT.line(f"{label:<32}{r['wall_s']:>8.1f}{r['episodes_per_s']:>8.3f}{r['steps']:>7}{r['prompt_tokens']:>12}"
                    f"{r['em']:>5.0f}{same:>10}/{r['episodes']:<3}{r['episodes_per_s'] / ref['episodes_per_s']:>8.2f}x")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
