"""Where a long run is: one reporter per phase, printing its name, items done / total, elapsed time
and an ETA, plus a one-line result when the phase ends.

Why a module of its own: rollouts, proposals, validation, training and evaluation all run for
minutes on a CPU model, and a user watching ``hasp demo`` must see which phase is running and how
far it is. A progress bar that advances only in submission order (the first episode of twelve
finishing last freezes it at 0) is no help, so ``Progress`` counts items in the order they *finish*,
and a heartbeat repeats the line while nothing finishes, with an ETA that keeps counting down.

Output goes to stderr (stdout stays for results and ``--json``). On a terminal the line is redrawn
in place; in a log (CI, ``nohup``) a line is printed per finished item at most every
``min_interval_s`` and by the heartbeat. ``HASP_PROGRESS=0`` silences it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Pipeline", "Progress", "format_duration", "phase_result", "progress_enabled", "summary_line"]


def _say(text: str, stream: TextIO | None = None) -> None:
    """Write one line straight to the stream. Not ``print``: a Prefect flow with ``log_prints``
    turns prints into log records, which its logging level (WARNING by default here) then drops."""
    out = stream or sys.stderr
    out.write(text + "\n")
    out.flush()


def progress_enabled() -> bool:
    return os.environ.get("HASP_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def format_duration(seconds: float) -> str:
    """``75`` → ``1:15``; ``3725`` → ``1:02:05`` (the form a user reads at a glance)."""
    s = max(0, int(round(seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def phase_result(name: str, result: str, *, elapsed_s: float | None = None,
                 stream: TextIO | None = None) -> None:
    """One line that closes a phase: its name, what it produced, and how long it took."""
    if not progress_enabled():
        return
    took = f" [{format_duration(elapsed_s)}]" if elapsed_s is not None else ""
    _say(f"✓ {name}: {result}{took}", stream)


class Progress:
    """Progress of one phase over ``total`` items (use as a context manager).

    ``advance()`` is thread-safe: worker threads call it as their item finishes. The ETA is the
    finish time projected from the rate so far minus the time already spent, so it moves with every
    finished item and counts down between them; before the first item finishes it is unknown.
    """

    def __init__(self, name: str, total: int, *, unit: str = "items", stream: TextIO | None = None,
                 heartbeat_s: float = 20.0, min_interval_s: float = 5.0, enabled: bool | None = None,
                 clock=time.monotonic) -> None:
        self.name = name
        self.total = max(0, int(total))
        self.unit = unit
        self.done = 0
        self._stream = stream or sys.stderr
        self._enabled = progress_enabled() if enabled is None else enabled
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._heartbeat_s = heartbeat_s
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock()
        self._last_done_at: float | None = None
        self._last_print = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------- numbers
    def elapsed(self) -> float:
        return self._clock() - self._start

    def eta(self) -> float | None:
        """Seconds left, or None while no item has finished."""
        if not self.done or self._last_done_at is None:
            return None
        if self.done >= self.total:
            return 0.0
        spent_at_last = self._last_done_at - self._start
        projected = spent_at_last / self.done * self.total
        return max(0.0, projected - self.elapsed())

    def line(self) -> str:
        eta = self.eta()
        eta_s = "?" if eta is None else format_duration(eta)
        return (f"… {self.name}: {self.done}/{self.total} {self.unit} · "
                f"{format_duration(self.elapsed())} elapsed · ETA {eta_s}")

    # ----------------------------------------------------------------------------- lifecycle
    def start(self) -> Progress:
        if not self._enabled:
            return self
        _say(f"▶ {self.name}: {self.total} {self.unit}", self._stream)
        self._thread = threading.Thread(target=self._beat, name=f"progress:{self.name}", daemon=True)
        self._thread.start()
        return self

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done = min(self.total, self.done + n) if self.total else self.done + n
            self._last_done_at = self._clock()
            self._emit(force=self.done >= self.total)

    def finish(self, result: str | None = None) -> None:
        """Stop the heartbeat and print the phase's one-line result (``result`` or the count)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if not self._enabled:
            return
        if self._tty:
            self._stream.write("\n")
        phase_result(self.name, result if result is not None else f"{self.done}/{self.total} {self.unit}",
                     elapsed_s=self.elapsed(), stream=self._stream)

    def __enter__(self) -> Progress:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.finish()
            return
        self._stop.set()
        if self._enabled:
            _say(f"✗ {self.name}: stopped after {self.done}/{self.total} {self.unit} "
                 f"[{format_duration(self.elapsed())}]: {type(exc).__name__}", self._stream)

    # ----------------------------------------------------------------------------- output
    def _emit(self, *, force: bool = False) -> None:
        if not self._enabled:
            return
        now = self._clock()
        if self._tty:
            self._stream.write("\r\x1b[2K" + self.line())
            self._stream.flush()
            self._last_print = now
        elif force or now - self._last_print >= self._min_interval_s:
            _say(self.line(), self._stream)
            self._last_print = now

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s if not self._tty else 1.0):
            with self._lock:
                if self._tty or self._clock() - self._last_print >= self._heartbeat_s:
                    self._emit(force=True)


def summary_line(summary: object, *, limit: int = 6) -> str:
    """The scalar fields of a phase summary as ``key=value`` pairs, one level of nesting flattened
    (``counts.train=4``): the one-line result a user reads between phases (floats to three digits;
    anything deeper is left to the summary file)."""
    if not isinstance(summary, dict):
        return str(summary)

    def scalars(d: dict, prefix: str = ""):  # noqa: ANN202
        for k, v in d.items():
            if isinstance(v, dict) and not prefix:
                yield from scalars(v, f"{k}.")
            elif isinstance(v, float) and not isinstance(v, bool):
                yield f"{prefix}{k}={v:.3f}"
            elif isinstance(v, (int, str)) and not isinstance(v, bool) and len(str(v)) <= 40:
                yield f"{prefix}{k}={v}"
            elif isinstance(v, bool) and v:
                yield f"{prefix}{k}"

    parts = []
    for part in scalars(summary):
        parts.append(part)
        if len(parts) >= limit:
            break
    return ", ".join(parts) if parts else "done"


class Pipeline:
    """The phases of one run (an epoch, a training run): ``[i/N] name`` before each phase and its
    one-line result after, with the time it took and the run's elapsed time."""

    def __init__(self, title: str, total: int, *, stream: TextIO | None = None, clock=time.monotonic) -> None:
        self.title = title
        self.total = total
        self.index = 0
        self._stream = stream
        self._clock = clock
        self._start = clock()

    def run(self, name: str, fn, *args, describe=summary_line, **kwargs):  # noqa: ANN001, ANN201
        """Run one phase; a cached phase prints its result too (its time says it was replayed)."""
        self.index += 1
        label = f"[{self.index}/{self.total}] {self.title}: {name}"
        if progress_enabled():
            _say(f"▶ {label} (run elapsed {format_duration(self._clock() - self._start)})", self._stream)
        t0 = self._clock()
        result = fn(*args, **kwargs)
        phase_result(label, describe(result), elapsed_s=self._clock() - t0, stream=self._stream)
        return result
