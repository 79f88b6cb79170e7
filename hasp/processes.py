"""Whether a process still exists — the one test every sweep of leftovers uses.

Why one module: stale sandbox folders, half-made MLflow stores and orphaned servers are all
recognised by the pid of the process that made them; a sweep must never remove what a live
process (possibly another user's) still owns.
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True unless no process ``pid`` exists (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, it is not ours
        return True
    return True
