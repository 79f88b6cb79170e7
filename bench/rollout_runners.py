"""Rollout episodes/s one at a time, on threads, and through Prefect tasks on a Dask LocalCluster.

Why: ``runner.kind`` decides where Phase A, the val gate and ``hasp eval`` run their episodes. This
runs the same questions against the same endpoint in three modes and states the concurrent /
sequential ratio against the goal of 5x, plus what the task runner itself costs per episode.

The endpoint is the scripted OpenAI-compatible double of the test suite (``tests/doubles.py``) with a
fixed latency per call, standing in for a GPU server whose answer time does not grow with load; it
makes the comparison one of runners, not of a 2-core CPU model server. The episodes are the real
pipeline ones (an ``EpisodeSpec``: the PF agent with the seed library, BM25 over the generated
corpus, greedy), and the dask trajectories are checked against the threaded ones.

    python bench/rollout_runners.py [--n 48] [--latency-ms 100] [--concurrency 16] [--workers 2]
                                    [--threads-per-worker 8] [--per-task 8] [--noop 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the scripted endpoint double

from results import Report  # noqa: E402 - bench/ is the script directory

REPORT = Report("Rollout runners: sequential, threads, Dask")
GOAL = 5.0


@dataclass(frozen=True)
class NoopSpec:
    """An episode that does nothing: what is left of its wall time is the runner's own cost."""

    def build(self) -> Any:
        from hasp.agent.remote import BuiltEpisode

        return BuiltEpisode(lambda item: item)

    def failed(self, item: Any, error: str) -> Any:
        return None


def _timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48, help="episodes (questions) per mode")
    ap.add_argument("--latency-ms", type=float, default=100.0, help="endpoint latency per model call")
    ap.add_argument("--concurrency", type=int, default=16, help="thread-pool size of the threads mode")
    ap.add_argument("--workers", type=int, default=2, help="Dask LocalCluster worker processes")
    ap.add_argument("--threads-per-worker", type=int, default=8, help="episodes at once per Dask worker")
    ap.add_argument("--per-task", type=int, default=8, help="episodes per Prefect task of the batched Dask row "
                    "(same concurrency: threads per worker shrink to match)")
    ap.add_argument("--noop", type=int, default=200, help="empty episodes for the per-episode runner cost")
    ap.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    a = ap.parse_args()
    os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="hasp-bench-prefect-"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "240")  # a fresh database migrates

    from doubles import OpenAIEndpointDouble, ReadThenAnswerReplyDouble
    from traj_builders import timeless
    from prefect.task_runners import ThreadPoolTaskRunner

    from hasp.agent.rollout import run_many
    from hasp.config import Params, RunnerParams
    from hasp.domains.search.prepare import prepare_data
    from hasp.episode.domains import SearchDomain
    from hasp.episode.spec import episode_spec
    from hasp.llm.client import LLMClient, LLMConfig
    from hasp.pf.library import load_library
    from hasp.tasks.episodes import TaskRunnerExecutor, api_url, make_executor

    params = Params.model_validate({"data": {"n_questions": max(6, a.n), "hop_weights": {1: 0.5, 2: 0.5}},
                                    "llm": {"max_concurrency": a.concurrency}})
    data = Path(tempfile.mkdtemp(prefix="hasp-bench-data-"))
    prepare_data(params, data)
    domain = SearchDomain(data_dir=data)
    items = [q for split in ("train", "val", "test") for q in domain.items(split)][: a.n]
    library = ROOT / "hasp" / "skills" / "search"
    lib = load_library(library, "search", sandbox=params.sandbox)
    n = len(items)
    REPORT.line(f"endpoint: scripted OpenAI-compatible double, {a.latency_ms:.0f} ms per call (a stand-in for a GPU "
                "server: latency does not grow with load); same questions and endpoint in every mode")
    REPORT.line(f"episodes: {n} generated questions, PF agent with the seed library ({len(lib.skills)} skills), "
                f"greedy, max {params.agent.max_steps} steps")

    with OpenAIEndpointDouble(delay_s=a.latency_ms / 1000, reply=ReadThenAnswerReplyDouble()) as endpoint:
        cfg = LLMConfig(base_url=endpoint.base_url, model="bench", max_tokens=params.agent.max_tokens,
                        max_concurrency=a.concurrency, reply_cache=False)
        policy = LLMClient(cfg)
        spec = episode_spec(params, domain, "pf", library=library)
        fn = spec.runner(policy=policy, library=lib)
        seq, seq_s = _timed(lambda: run_many(items, fn, concurrency=1, desc="sequential", progress=False))
        calls = endpoint.requests
        thr, thr_s = _timed(lambda: run_many(items, fn, concurrency=a.concurrency, desc="threads", progress=False))

        _, prefect_s = _timed(api_url)  # the Prefect API the task runs report to (ephemeral: starts here)
        runner = RunnerParams(kind="dask", n_workers=a.workers, threads_per_worker=a.threads_per_worker)
        spec = spec.shipped(policy)
        with make_executor(runner) as dask:
            _, warm_s = _timed(lambda: dask.run(spec, items[: a.workers * 2], desc="warm-up", progress=False))
            dsk, dsk_s = _timed(lambda: dask.run(spec, items, desc="dask", progress=False))
            _, noop_dask_s = _timed(lambda: dask.run(NoopSpec(), list(range(a.noop)), desc="noop", progress=False))
        batched = RunnerParams(kind="dask", n_workers=a.workers, episodes_per_task=a.per_task,
                               threads_per_worker=max(1, a.threads_per_worker // a.per_task))
        with make_executor(batched) as dask:  # warm-up: a task per worker, so every worker has built the spec
            dask.run(spec, items[: a.workers * a.per_task], desc="warm-up", progress=False)
            bat, bat_s = _timed(lambda: dask.run(spec, items, desc="dask batched", progress=False))
        with TaskRunnerExecutor(ThreadPoolTaskRunner(max_workers=a.concurrency)) as pt:
            _, noop_pt_s = _timed(lambda: pt.run(NoopSpec(), list(range(a.noop)), desc="noop", progress=False))
        _, noop_thr_s = _timed(lambda: run_many(list(range(a.noop)), lambda i: i, concurrency=a.concurrency,
                                                desc="noop", progress=False))
    lib.close()
    policy.close()

    same = [timeless(r.traj.to_dict()) for r in dsk] == [timeless(r.traj.to_dict()) for r in thr] == \
        [timeless(r.traj.to_dict()) for r in seq] == [timeless(r.traj.to_dict()) for r in bat]
    lost = sum(r.traj.terminated == "error" for r in [*dsk, *bat])
    REPORT.line(f"model calls per episode: {calls / n:.1f}; EM {sum(r.traj.em for r in seq) / n:.3f} (all modes)")
    REPORT.line("")
    REPORT.line(f"{'mode':<50}{'wall s':>8}{'episodes/s':>12}{'x sequential':>14}")
    rows = [("one at a time", seq_s),
            (f"threads ({a.concurrency} at once, one process)", thr_s),
            (f"Dask LocalCluster ({a.workers} workers x {a.threads_per_worker} threads)", dsk_s),
            (f"Dask, {a.per_task} episodes per task ({a.workers} x {batched.threads_per_worker} x {a.per_task})",
             bat_s)]
    for name, wall in rows:
        REPORT.line(f"{name:<50}{wall:>8.2f}{n / wall:>12.2f}{seq_s / wall:>13.1f}x")
    REPORT.line("")
    REPORT.line(f"trajectories identical across all modes: {'yes' if same else 'NO'}; episodes lost: {lost}")
    REPORT.line(f"Dask start-up, not in the figures: Prefect API {prefect_s:.1f}s, cluster + first "
                f"{a.workers * 2} episodes {warm_s:.1f}s")
    REPORT.line(f"runner cost per empty episode ({a.noop}): Prefect task on Dask {noop_dask_s / a.noop * 1e6:,.0f} us, "
                f"Prefect task on its thread pool {noop_pt_s / a.noop * 1e6:,.0f} us, "
                f"plain thread pool {noop_thr_s / a.noop * 1e6:,.0f} us")
    for name, wall in rows[1:]:
        ratio = seq_s / wall
        REPORT.line(f"goal >= {GOAL:.0f}x concurrent/sequential: {name.split(' (')[0]}: {ratio:.1f}x "
                    f"({'met' if ratio >= GOAL else 'not met'})")
    REPORT.line("the Prefect rows pay a task's own cost: prefect-dask serialises the whole Prefect context per "
                "submitted task in this process, and each task run opens an API client and sends state events; "
                "the plain thread pool pays none")
    if not a.no_write:
        REPORT.write()


if __name__ == "__main__":
    main()
