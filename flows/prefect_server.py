"""The Prefect API server of a command-line run, owned by that run.

Without ``PREFECT_API_URL`` Prefect starts a temporary API server (uvicorn) in a subprocess and
stops it from an ``atexit`` hook, which a SIGKILL, an OOM kill or an unhandled SIGTERM never runs:
the ~200 MB server then outlives the run indefinitely. Here the run starts the same server itself,
through ``hasp.flows.services.running`` (the server ends with this process however it ends), points
Prefect at it for the duration of the block, and reports servers left by an earlier crash.

Prefect sends run logs and events from background queues that drain at interpreter exit. If the
server is stopped first, that drain keeps retrying a closed port and the process hangs for a minute
or more after its work is done; so the block drains both queues while its server still answers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from hasp.flows.services import running
from hasp.llm.guard import report_stale
from hasp.llm.server import free_port

APP = "prefect.server.api.server:create_app"
DRAIN_TIMEOUT_S = 30.0  # bounded: a wedged queue must not hold the run's exit hostage


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
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no network here; the user's setting wins
           **os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    url = f"http://127.0.0.1:{port}/api"
    with running("the Prefect API server", server_command(port), health_url=f"{url}/health", env=env,
                 timeout_s=startup_timeout_s), temporary_settings(updates={PREFECT_API_URL: url}):
        try:
            yield url
        finally:
            drain_prefect_queues()


def drain_prefect_queues(timeout_s: float = DRAIN_TIMEOUT_S) -> None:
    """Send the queued run logs and events now, while the server that receives them is up."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=timeout_s)
