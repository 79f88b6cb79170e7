"""Sequential vs concurrent decode throughput of the embedded model behind ``transformers serve``.

Why: continuous batching is the reason we run a server at all; this shows how much it buys on this
machine (agent episodes run concurrently, so aggregate tok/s is what sets experiment wall time).

    python bench/llm_throughput.py [--requests 8] [--max-tokens 64] [--port N] [--threads N] [--extra "--cb-num-blocks 64"]
"""

from __future__ import annotations

import argparse
import shlex
import time

from hasp.llm.client import LLMClient, LLMConfig
from hasp.llm.model_prep import prepare_model
from hasp.llm.server import LocalModelServer, ensure_server
from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Embedded model throughput")

PROMPTS = [f"Write a short paragraph about {t}." for t in
           ("the sea", "mountains", "bread", "trains", "owls", "rain", "chess", "copper",
            "bees", "glass", "rivers", "paper", "clocks", "salt", "maps", "wool")]


def _tok_s(results: list, wall: float) -> float:
    return sum(r.completion_tokens for r in results) / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8, help="concurrent requests (and sequential count)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--port", type=int, default=0, help="reuse/start a server on this port (0: fresh, free port)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads of a fresh server")
    ap.add_argument("--extra", default="", help="extra `transformers serve` flags for a fresh server")
    a = ap.parse_args()

    t0 = time.perf_counter()
    folder = prepare_model()
    REPORT.line(f"prepare_model: {time.perf_counter() - t0:.1f}s -> {folder}")
    handle: LocalModelServer | None
    if a.port:
        base_url, model, handle = ensure_server(folder, a.port)
    else:
        handle = LocalModelServer(folder, extra_args=tuple(shlex.split(a.extra)), threads=a.threads).start()
        base_url, model = handle.base_url, handle.model_name
    if handle is not None:
        REPORT.line(f"server startup (spawn -> first 1-token answer): {handle.startup_s:.1f}s  log {handle.log_path}")
    try:
        client = LLMClient(LLMConfig(base_url=base_url, model=model, timeout_s=600.0, temperature=0.0,
                                     max_tokens=a.max_tokens, max_concurrency=a.requests,
                                     reply_cache=False))  # every request decodes: the engine is measured
        batch = [[{"role": "user", "content": p}] for p in (PROMPTS * 4)[: a.requests]]
        # Force generation to run the full length: stops on EOS would make the two runs incomparable.
        t0 = time.perf_counter()
        seq = [client.chat(m) for m in batch]
        seq_wall = time.perf_counter() - t0
        t0 = time.perf_counter()
        par = client.map_chat(batch)
        par_wall = time.perf_counter() - t0
        s, p = _tok_s(seq, seq_wall), _tok_s(par, par_wall)
        REPORT.line(f"sequential: {len(seq)} req, {sum(r.completion_tokens for r in seq)} tok in {seq_wall:.1f}s"
              f" = {s:.1f} tok/s (one request {seq[0].completion_tokens / seq[0].latency_s:.1f} tok/s)")
        REPORT.line(f"{a.requests}-concurrent: {sum(r.completion_tokens for r in par)} tok in {par_wall:.1f}s = {p:.1f} tok/s")
        REPORT.line(f"ratio concurrent/sequential: {p / s:.2f}x   usage totals: {client.usage}")
        REPORT.write()
    finally:
        if handle is not None:
            handle.stop()


if __name__ == "__main__":
    main()
