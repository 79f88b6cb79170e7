"""Rollout episodes as Prefect tasks through the task runner ``runner.kind`` names: one task per
episode, or ``runner.episodes_per_task`` side by side in one task.

``runner.kind: threads`` keeps the in-process thread pool of ``hasp.agent.rollout.run_many``
(``make_executor`` returns None). ``dask`` submits every episode to prefect-dask's
``DaskTaskRunner``: a ``LocalCluster`` of ``runner.n_workers`` processes started on the first
episode, or the scheduler at ``runner.address``. A worker builds the episode function from the
picklable spec once (``hasp.agent.remote.run_spec``) and reuses it for every episode of that spec.

A worker that dies takes its running episodes with it: Dask re-runs them on another worker (up to
``distributed.scheduler.allowed-failures`` times); a task that raises is retried ``runner.retries``
times by Prefect; an episode that still fails is recorded as ``spec.failed`` (``terminated="error"``),
so the run goes on and counts it.

What a task costs besides its episodes: prefect-dask serialises the whole Prefect context (all
settings) for every submitted task, in the submitting process, and each task run opens an API
client in its worker; on two busy cores that is a few hundred ms of CPU per task
(``bench/rollout_runners.py``), which caps one-task-per-episode throughput. ``episodes_per_task``
spreads it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from hasp.agent.remote import EpisodeSpec, run_spec, spec_key
from hasp.config import RunnerParams
from hasp.llm.cancel import worker_pool
from hasp.progress import Progress

log = logging.getLogger(__name__)


@task(name="episodes", cache_policy=NO_CACHE, persist_result=False)
def episodes(key: str, spec: EpisodeSpec, items: list[Any]) -> list[Any]:
    """Episodes in the worker that runs this task, side by side (never cached: a rollout is a
    measurement). One item is one episode per task; more spread a task run's own cost."""
    if len(items) <= 1:
        return [run_spec(key, spec, it) for it in items]
    with worker_pool(len(items), "episode") as pool:
        return list(pool.map(lambda it: run_spec(key, spec, it), items))


class TaskRunnerExecutor:
    """``hasp.agent.remote.EpisodeExecutor`` over a Prefect task runner; started on the first
    ``run`` (a run served from the cache starts no cluster), closed with ``close``."""

    def __init__(self, runner: Any, *, retries: int = 0, episodes_per_task: int = 1) -> None:
        self.runner = runner
        self.task = episodes.with_options(retries=retries)
        self.per_task = max(1, episodes_per_task)
        self._lock = threading.Lock()
        self._started = False

    def _start(self) -> tuple[Any, str]:
        with self._lock:
            if not self._started:
                self._api_url = api_url()
                self.runner.__enter__()
                self._started = True
            return self.runner, self._api_url

    def run(self, spec: EpisodeSpec, items: Sequence[Any], *, desc: str, progress: bool = True) -> list[Any]:
        from prefect.settings import PREFECT_API_URL, PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW, temporary_settings

        runner, api = self._start()
        key = spec_key(spec)
        out: list[Any] = [None] * len(items)
        chunks = [list(range(i, min(i + self.per_task, len(items)))) for i in range(0, len(items), self.per_task)]
        lost = 0
        with Progress(desc, len(items), unit="episodes", enabled=None if progress else False) as bar:
            # travels with each task to its worker; outside a flow (hasp eval) task logs stay local
            quiet = {PREFECT_API_URL: api, PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW: "ignore"}
            with temporary_settings(updates=quiet):
                index = {runner.submit(self.task, parameters={"key": key, "spec": spec,
                                                              "items": [items[i] for i in chunk]}): chunk
                         for chunk in chunks}
            for fut in as_completed(list(index)):
                chunk = index[fut]
                try:
                    for i, result in zip(chunk, fut.result(), strict=True):
                        out[i] = result
                except Exception as e:  # noqa: BLE001 - lost episodes are recorded, never the run's end
                    lost += len(chunk)
                    for i in chunk:
                        out[i] = spec.failed(items[i], f"{type(e).__name__}: {e}")
                bar.advance(len(chunk))
        if lost:
            log.warning("%s: %d of %d episodes lost by the task runner (recorded as failed)", desc, lost, len(items))
        return out

    def close(self) -> None:
        with self._lock:
            if self._started:
                self.runner.__exit__(None, None, None)
                self._started = False

    def __enter__(self) -> TaskRunnerExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def api_url() -> str:
    """The Prefect API the workers report their task runs to: the configured one, else this process's
    ephemeral server (without it, every worker process would start an ephemeral server of its own
    on the same database)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return url
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # one per process: the one this process's own client uses
    server.start()
    return server.api_url


def dask_runner(r: RunnerParams) -> Any:
    """prefect-dask's runner: the cluster at ``r.address``, or a LocalCluster of worker processes."""
    from prefect_dask import DaskTaskRunner

    if r.address:
        return DaskTaskRunner(address=r.address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": r.n_workers, "threads_per_worker": r.threads_per_worker,
                                          "processes": True, "dashboard_address": ":0"})


def make_executor(r: RunnerParams) -> TaskRunnerExecutor | None:
    """The executor of ``runner.kind``; None for threads (episodes stay on this process's threads)."""
    if r.kind == "threads":
        return None
    return TaskRunnerExecutor(dask_runner(r), retries=r.retries, episodes_per_task=r.episodes_per_task)
