"""Stopping model calls from outside: a process-wide abort and a per-thread deadline.

Why: an HTTP request blocks its thread until the server answers or the (long) per-request timeout
runs out. Ctrl-C reaches only the main thread, and a thread pool then waits for every worker's
request before the process can exit; an episode's wall budget checked between steps cannot stop a
call that hangs. ``LLMClient`` waits for each request in short slices and looks at both signals
between slices, so an interrupt or a passed deadline ends the call within a fraction of a second.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: How often a waiting call looks at the abort flag and its deadline (seconds).
POLL_S = 0.1

_ABORT = threading.Event()
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("hasp_llm_deadline", default=None)


def abort_calls() -> None:
    """Make every waiting and future model call of this process raise ``LLMInterrupted``."""
    _ABORT.set()


def aborted() -> bool:
    return _ABORT.is_set()


def reset_abort() -> None:
    """Allow calls again (a long-lived process that handled an interrupt, or a test)."""
    _ABORT.clear()


@contextlib.contextmanager
def call_deadline(seconds: float | None) -> Iterator[None]:
    """Model calls made by this thread inside the block end by ``seconds`` from now (``None``: no
    deadline). Nested blocks keep the earlier deadline. Worker threads do not inherit it."""
    if seconds is None:
        yield
        return
    end = time.monotonic() + max(0.0, seconds)
    outer = _DEADLINE.get()
    token = _DEADLINE.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline() -> float | None:
    """The monotonic time by which the current thread's model calls must end, or None."""
    return _DEADLINE.get()


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM abort model calls in every thread, then unwind the main thread
    (KeyboardInterrupt / SystemExit) so ``finally`` blocks stop servers and remove temp folders.
    Call once from the main thread of a command-line process."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_int(signum: int, frame: Any) -> None:
        abort_calls()
        raise KeyboardInterrupt

    def on_term(signum: int, frame: Any) -> None:
        abort_calls()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)


@contextlib.contextmanager
def worker_pool(max_workers: int, name: str = "hasp") -> Iterator[ThreadPoolExecutor]:
    """A thread pool that an interrupt empties at once; every pool of model calls uses it.

    Why: leaving a ``with ThreadPoolExecutor`` block waits for every running worker, so an interrupt
    of the main thread would wait for the slowest in-flight model call (minutes against a hung
    endpoint). Inside a Prefect flow run the interrupt is not even ours: Prefect swaps its own
    SIGTERM handler in, which raises ``TerminationSignal`` without aborting anything. Here any
    interrupt (an exception that is not an ``Exception``) aborts model calls in every thread and
    cancels queued work, so the workers end within a poll interval and the interrupt unwinds on.
    A plain error also cancels the queued work: its caller has failed and will not read it.
    """
    pool = ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix=name)
    try:
        yield pool
    except BaseException as e:
        if not isinstance(e, Exception):
            abort_calls()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
