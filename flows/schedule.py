"""What a scheduled evolution deployment is made of, shared by ``hasp.flows.serve`` (the flow runs in
the serving process) and ``hasp.flows.deploy`` (the flow runs on a work pool's worker): the command-line
arguments, the flow parameters, the schedule, and the checks that turn a bad argument or an absent
server into one error line before anything is registered."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hasp.config import ParamsError, load_params
from hasp.seeds import seed_library


class DeployError(RuntimeError):
    """Bad input for a deployment; the message is the one line to show."""


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cron", default="0 2 * * *", help="cron string (server time zone unless --timezone)")
    ap.add_argument("--timezone", default=None, help="IANA time zone of the cron string, e.g. Europe/Berlin")
    ap.add_argument("--name", default="nightly-evolve")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--mode", choices=("lite", "full"), default=None)
    ap.add_argument("--filtering", choices=("none", "exec", "teacher", "full"), default=None)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="outputs")
    ap.add_argument("--library", default=str(seed_library("search")),
                    help="the starting library; with --traces, the served library each run releases into")
    ap.add_argument("--traces", default=None, help="a folder the agent logs its traces to: each run evolves "
                    "from the lines logged since the last one (flows/nightly.py) and releases --library's "
                    "next version when skills are admitted")


def flow_parameters(a: argparse.Namespace, base: Path | None = None) -> dict[str, Any]:
    """The parameters of every scheduled run; a bad params file fails now, not at the first run.
    ``base``: the folder the runs start in, where a relative ``--params`` is read."""
    try:
        load_params((base or Path.cwd()) / a.params)
    except ParamsError as e:
        raise DeployError(str(e)) from None
    if getattr(a, "traces", None):
        if not ((base or Path.cwd()) / a.traces).exists():
            raise DeployError(f"--traces {a.traces}: no such file or folder (where the agent logs its traces)")
        if a.epochs != 1:
            raise DeployError("--traces runs one epoch per batch of traces: leave --epochs at 1")
        return {"traces": a.traces, "library": a.library, "params_path": a.params, "out_root": a.out,
                "mode": a.mode, "filtering": a.filtering}
    return {"epochs": a.epochs, "mode": a.mode, "filtering": a.filtering, "params_path": a.params,
            "out_root": a.out, "library": a.library}


def entrypoint(a: argparse.Namespace) -> tuple[str, str]:
    """(entrypoint, flow name) of the scheduled flow: the nightly flow over traces, or the evolution flow."""
    if getattr(a, "traces", None):
        return "flows/nightly.py:nightly_flow", "hasp-nightly"
    return "flows/evolve.py:evolve_flow", "hasp-evolve"


def schedule_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    """``cron=`` alone, or a ``CronSchedule`` when a time zone is given (Prefect takes either). A nightly
    deployment (``--traces``) also runs one flow run at a time: a run scheduled while the last one still
    works waits for it (Prefect's deployment concurrency limit, strategy ENQUEUE), so it starts from the
    watermark the last run left. The served library's own lock (``hasp.evolve.release.lock``) covers runs
    started outside this deployment."""
    limit = {"concurrency_limit": 1} if getattr(a, "traces", None) else {}
    if not a.timezone:
        return {"cron": a.cron, **limit}
    from prefect.client.schemas.schedules import CronSchedule

    return {"schedule": CronSchedule(cron=a.cron, timezone=a.timezone), **limit}


def require_server() -> str:
    """The API URL of a running Prefect server. Without ``PREFECT_API_URL`` Prefect would register
    the deployment on a temporary server that disappears with this process."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        raise DeployError("PREFECT_API_URL is not set: start a server (`prefect server start`) and "
                          "export PREFECT_API_URL=http://127.0.0.1:4200/api")
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        if client.api_healthcheck() is not None:
            raise DeployError(f"no Prefect server answers at PREFECT_API_URL={url}: "
                              "start it with `prefect server start`")
    return url


def run_main(main: Any, argv: list[str] | None) -> None:
    """``main(argv)`` with a ``DeployError`` shown as one line and exit code 2."""
    try:
        main(argv)
    except DeployError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
