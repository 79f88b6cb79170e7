"""The Prefect API server of a command-line run, owned by that run.

Without ``PREFECT_API_URL`` Prefect starts a temporary API server (uvicorn) in a subprocess and
stops it from an ``atexit`` hook, which a SIGKILL, an OOM kill or an unhandled SIGTERM never runs:
the ~200 MB server then outlives the run indefinitely. Here the run starts the same server itself,
through ``flows.services.running`` (the server ends with this process however it ends), points
Prefect at it for the duration of the block, and reports servers left by an earlier crash.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from flows.services import running
from hasp.llm.guard import report_stale
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
    url = f"http://127.0.0.1:{port}/api"
    with running("the Prefect API server", server_command(port), health_url=f"{url}/health", env=env,
                 timeout_s=startup_timeout_s), temporary_settings(updates={PREFECT_API_URL: url}):
        yield url
