"""A child process that ends with its parent, however the parent ends.

Why: ``atexit`` and ``finally`` stop a model server or a Prefect API server when the parent exits
normally or on a handled signal, but not on SIGKILL (or an OOM kill): the server then runs on,
holding memory and a port, until someone finds it. ``PR_SET_PDEATHSIG`` alone is tied to the
*thread* that forked the child (a server started from a worker thread would die with that thread),
so the child runs under this small guard instead: the guard starts the real command in its own
process group (start the guard with ``start_new_session=True``; ``os.killpg(guard pid)`` then
reaches both), watches the parent's pid, and on the parent's death sends SIGTERM, then SIGKILL, to
that group.

Usage: ``subprocess.Popen(guarded(cmd), start_new_session=True)``. ``stale_children`` lists guarded
processes whose parent is gone (left by a crash from before the guard could act, e.g. a kill of the
whole machine's session): the caller reports them at start.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hasp.processes import pid_alive

#: how often the guard checks that its parent is alive (seconds)
POLL_S = 0.5
#: after SIGTERM, how long the command may take to exit before SIGKILL (seconds)
GRACE_S = 10.0
MARKER = "hasp.llm.guard"

log = logging.getLogger(__name__)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = GRACE_S) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL after ``grace_s``; a group already gone is fine."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def guarded(cmd: list[str], *, parent: int | None = None) -> list[str]:
    """``cmd`` wrapped in the guard, which ends it when ``parent`` (default: this process) dies."""
    return [sys.executable, "-m", MARKER, str(parent or os.getpid()), "--", *cmd]


@dataclass(frozen=True)
class StaleChild:
    pid: int
    parent: int
    command: str


def stale_children(contains: str = "") -> list[StaleChild]:
    """Guarded processes whose recorded parent no longer runs, and unguarded ones adopted by init;
    ``contains`` filters on the command line."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode("utf-8", "replace") for a in argv if a]
        if MARKER not in args or "--" not in args:
            line = " ".join(args)
            if contains and contains in line and _ppid(proc) == 1:  # an unguarded orphan, adopted by init
                out.append(StaleChild(int(proc.name), 0, line[:200]))
            continue
        i = args.index(MARKER)
        try:
            parent = int(args[i + 1])
        except (IndexError, ValueError):
            continue
        line = " ".join(args[args.index("--") + 1:])
        if contains and contains not in line:
            continue
        if not pid_alive(parent):
            out.append(StaleChild(int(proc.name), parent, line[:200]))
    return out


def report_stale(contains: str) -> list[StaleChild]:
    """Warn (one line each, with the pid to kill) about guarded ``contains`` processes left by a
    crashed run; they are reported, never killed: they may belong to another user's session."""
    stale = stale_children(contains)
    for c in stale:
        log.warning("a process from an earlier run is still alive (pid %d, its parent %d is gone): %s — "
                    "stop it with `kill %d`", c.pid, c.parent, c.command, c.pid)
    return stale


def _ppid(proc: Path) -> int:
    try:
        stat = (proc / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _end_group(child: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the guard's process group (the command and its own children), SIGKILL after the grace."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
        return child.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(0, signal.SIGKILL)  # ends the guard too
        return child.wait()


def main(argv: list[str]) -> int:
    parent, cmd = int(argv[0]), argv[2:]
    if not pid_alive(parent):
        return 1
    child = subprocess.Popen(cmd)  # in the guard's process group: one killpg reaches both

    def forward(signum: int, frame: object) -> None:
        _end_group(child)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while child.poll() is None:
        if os.getppid() != parent and not pid_alive(parent):
            return _end_group(child) or 1
        time.sleep(POLL_S)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
