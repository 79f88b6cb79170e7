"""The stack's servers as child processes of one owner: the Prefect API server, a Prefect worker,
the MLflow tracking server.

Why one runner: whoever starts a server (a command-line run, a test) must stop it on every exit
path, and a server that cannot start must say why in one line instead of leaving the caller to time
out. ``running`` refuses a port already in use, starts the command under ``hasp.llm.guard`` in its
own process group (it ends with its owner even on SIGKILL), waits for the health URL, and stops
the whole group when the block ends, however it ends. The commands below are the ones
``docs/services.md`` tells a user to type.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from hasp.llm.guard import guarded, stop_group

HOST = "127.0.0.1"


class ServiceError(RuntimeError):
    """A server that cannot start; the message is the one line to show."""


def port_in_use(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def prefect_server_command(port: int, host: str = HOST) -> list[str]:
    """``prefect server start``: the API, the UI and the services (the scheduler creates the cron runs)."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]


def prefect_worker_command(pool: str) -> list[str]:
    """A process worker: it runs each flow run of ``pool`` as a subprocess of itself."""
    return [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"]


def mlflow_server_command(port: int, backend_store_uri: str, artifacts: Path, host: str = HOST) -> list[str]:
    """``mlflow server`` with a database backend and a local artifact store served over HTTP
    (clients upload and download artifacts through the server, never through the file system)."""
    return [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port), "--workers", "1",
            "--backend-store-uri", backend_store_uri, "--artifacts-destination", str(artifacts)]


@contextlib.contextmanager
def running(name: str, cmd: list[str], *, health_url: str | None = None, port: int | None = None,
            env: Mapping[str, str] | None = None, log: Path | None = None,
            timeout_s: float = 240.0) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` for the duration of the block; with ``health_url``, only once it answers 200.

    Raises ``ServiceError`` (one line, naming the log) when ``port`` is taken, the process exits
    while starting, or the health URL stays silent for ``timeout_s``."""
    if port is not None and port_in_use(port):
        raise ServiceError(f"{name}: port {port} on {HOST} is in use; stop what listens there or pick another port")
    out = open(log, "ab") if log else None  # noqa: SIM115 - closed below; None: the owner's own output
    proc = subprocess.Popen(guarded(cmd), env=dict(env if env is not None else os.environ), stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True)
    try:
        if health_url:
            wait_healthy(name, proc, health_url, timeout_s, log)
        yield proc
    finally:
        stop_group(proc, 15.0)
        if out:
            out.close()


def wait_healthy(name: str, proc: subprocess.Popen[bytes], url: str, timeout_s: float, log: Path | None = None) -> None:
    see = f" (log: {log})" if log else ""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise ServiceError(f"{name} exited with code {proc.returncode} while starting{see}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise ServiceError(f"{name} at {url} did not answer within {timeout_s:.0f}s{see}")
