"""The Prefect API server of a command-line run, owned by that run.

Without ``PREFECT_API_URL`` Prefect starts a temporary API server (uvicorn) in a subprocess and
stops it from an ``atexit`` hook, which a SIGKILL, an OOM kill or an unhandled SIGTERM never runs:
the ~200 MB server then outlives the run indefinitely. Here the run starts the same server itself,
under ``hasp.llm.guard`` (the server ends with this process however it ends), points Prefect at it
for the duration of the block, and reports servers left by an earlier crash.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from hasp.llm.guard import guarded, report_stale, stop_group
from hasp.llm.server import free_port

APP = "prefect.server.api.server:create_app"


def server_command(port: int) -> list[str]:
    """The command Prefect itself uses for its temporary server (UI off, ephemeral services)."""
    import prefect

    return [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent), "--factory",
            APP, "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"]


@contextlib.contextmanager
def owned_prefect_server(startup_timeout_s: float = 240.0) -> Iterator[str | None]:
    """Yield the API URL of a guarded server of this process (None when the user set
    ``PREFECT_API_URL``: their server is theirs)."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    report_stale(APP)
    port = free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    proc = subprocess.Popen(guarded(server_command(port)), env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    try:
        _wait_healthy(proc, url, startup_timeout_s)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        _stop(proc)


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the Prefect API server exited with code {proc.returncode} while starting")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the Prefect API server at {url} did not answer within {timeout_s:.0f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop_group(proc, 15.0)
