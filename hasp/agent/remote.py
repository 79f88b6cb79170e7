"""Episodes in other processes: the seam between a rollout and a task runner.

A thread pool (``hasp.agent.rollout.run_many``) shares live objects with every episode: an
OpenAI client, locks, a skill library with its sandbox worker processes. A worker process of a
cluster cannot receive those, so a distributed run ships an *episode spec* instead: plain,
picklable data (params, paths, endpoint configs) from which each worker process builds the episode
function once and reuses it for every episode of that spec. The runner that moves episodes to the
workers (Prefect task runners, in ``tasks/``) implements ``EpisodeExecutor``; ``run_spec`` is what a
worker executes for one episode.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hasp.config import RunnerParams
from hasp.llm.client import LLMConfig

log = logging.getLogger(__name__)

#: episode functions one worker process keeps built (a phase runs one spec; the val gate a few in turn)
KEEP_BUILT = 4


@dataclass
class BuiltEpisode:
    """An episode function built in a worker, and what releases what it holds (clients, sandboxes)."""

    run: Callable[[Any], Any]
    close: Callable[[], None] = field(default=lambda: None)

    @classmethod
    def holding(cls, run: Callable[[Any], Any], *held: Any) -> "BuiltEpisode":
        """``run`` with ``close`` releasing what it holds (libraries, clients; None is skipped)."""
        def close() -> None:
            for h in held:
                if h is not None:
                    h.close()

        return cls(run, close)


class EpisodeSpec(Protocol):
    """Picklable recipe of an episode function; ``failed`` is the result recorded for an episode the
    runner lost (its worker died and the re-runs did not help), shaped like a real one."""

    def build(self) -> BuiltEpisode: ...

    def failed(self, item: Any, error: str) -> Any: ...


class EpisodeExecutor(Protocol):
    """Runs every item of a spec somewhere else and returns the results in input order; an episode
    it could not run comes back as ``spec.failed(item, error)``, never as an exception."""

    def run(self, spec: EpisodeSpec, items: Sequence[Any], *, desc: str, progress: bool = True) -> list[Any]: ...

    def close(self) -> None: ...


#: builds the executor of a ``runner`` section whose kind is not threads; plugged in by the CLI
_executor_factory: Callable[[RunnerParams], EpisodeExecutor] | None = None


def use_executors(factory: Callable[[RunnerParams], EpisodeExecutor]) -> None:
    """Plug in what builds executors (the CLI plugs in the Prefect task runners of ``tasks/``, which
    this library may not import)."""
    global _executor_factory
    _executor_factory = factory


@contextlib.contextmanager
def episode_executor(runner: RunnerParams) -> Iterator[EpisodeExecutor | None]:
    """The executor ``runner.kind`` names for the block, closed after it; None for threads."""
    if runner.kind == "threads":
        yield None
        return
    if _executor_factory is None:
        raise RuntimeError(f"runner.kind {runner.kind} runs episodes through Prefect task runners, which the "
                           "hasp CLI and the Prefect flows provide; this entry point has none")
    executor = _executor_factory(runner)
    try:
        yield executor
    finally:
        executor.close()


def spec_key(spec: EpisodeSpec) -> str:
    """Content key of a spec: workers build one episode function per key."""
    return hashlib.sha256(pickle.dumps(spec)).hexdigest()[:16]


def endpoint_of(client: Any, role: str) -> LLMConfig | None:
    """The endpoint a worker process calls instead of ``client`` (None stays None): a client that is
    not an OpenAI-compatible endpoint (an in-process object) cannot be shipped to another process."""
    if client is None:
        return None
    endpoint = getattr(client, "endpoint", None)
    if not callable(endpoint):
        raise TypeError(f"runner.kind dask runs episodes in other processes, which reach the {role} over "
                        f"HTTP; {type(client).__name__} is not an OpenAI-compatible endpoint client "
                        "(use runner.kind: threads)")
    return endpoint()


class _Entry:
    def __init__(self, built: BuiltEpisode) -> None:
        self.built, self.users, self.evicted = built, 0, False


_lock = threading.Lock()
_building = threading.Lock()
_built: OrderedDict[str, _Entry] = OrderedDict()


def run_spec(key: str, spec: EpisodeSpec, item: Any) -> Any:
    """One episode in this (worker) process, with the spec's episode function built on first use."""
    entry = _acquire(key, spec)
    try:
        return entry.built.run(item)
    finally:
        _release(entry)


def _take(key: str) -> _Entry | None:
    with _lock:
        entry = _built.get(key)
        if entry is not None:
            _built.move_to_end(key)
            entry.users += 1
        return entry


def _acquire(key: str, spec: EpisodeSpec) -> _Entry:
    entry = _take(key)
    if entry is not None:
        return entry
    with _building:  # one build at a time: loading skills registers PF classes process-wide
        entry = _take(key)  # built by another thread while this one waited
        if entry is not None:
            return entry
        entry = _Entry(spec.build())  # outside ``_lock``: episodes of built specs go on meanwhile
        with _lock:
            _built[key] = entry
            entry.users += 1
            stale = []
            while len(_built) > KEEP_BUILT:
                _, old = _built.popitem(last=False)
                old.evicted = True
                if old.users == 0:
                    stale.append(old)
    for old in stale:
        _close(old)
    return entry


def _release(entry: _Entry) -> None:
    with _lock:
        entry.users -= 1
        done = entry.evicted and entry.users == 0
    if done:
        _close(entry)


def _close(entry: _Entry) -> None:
    try:
        entry.built.close()
    except Exception as e:  # noqa: BLE001 - a failing close must not fail the episode that evicted it
        log.warning("closing an episode function failed: %s", e)


@atexit.register
def close_built() -> None:
    """Release every built episode function (the worker process is ending)."""
    with _lock:
        entries = list(_built.values())
        _built.clear()
    for entry in entries:
        _close(entry)
