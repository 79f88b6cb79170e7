"""Deploy the multi-epoch evolution flow to a process work pool, on a cron schedule.

    prefect server start                                   # terminal 1
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    prefect work-pool create hasp --type process           # once
    prefect worker start --pool hasp --type process        # terminal 2: runs the flow runs
    python -m hasp.flows.deploy --pool hasp --cron "0 2 * * *" --epochs 1 --mode full --filtering full
    prefect deployment run hasp-evolve/nightly-evolve      # a run now, besides the schedule

Unlike ``flows/serve.py`` nothing stays running here: the deployment lives on the server, and the
worker of the pool runs each scheduled run as a subprocess whose working directory is ``--source``
(this repository by default), so relative ``--params``/``--out``/``--library`` resolve there.
``--env KEY=VALUE`` sets the run's environment (``MLFLOW_TRACKING_URI`` of a tracking server).
With ``--traces DIR --library SERVED`` the deployment is the nightly flow (``flows/nightly.py``): each
run evolves from the traces logged in DIR since the last run and releases SERVED's next version.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hasp.flows.schedule import (DeployError, add_arguments, entrypoint, flow_parameters, require_server, run_main,
                                 schedule_kwargs)

ROOT = Path(__file__).resolve().parents[1]


def check_pool(pool: str, url: str) -> None:
    """A missing pool is an error here, not a deployment whose runs wait forever."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise DeployError(f"work pool {pool!r} does not exist on {url}: create it with "
                              f"`prefect work-pool create {pool} --type process`") from None


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise DeployError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def _main(argv: list[str] | None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--pool", required=True,
                    help="a process work pool (`prefect work-pool create NAME --type process`)")
    ap.add_argument("--source", default=str(ROOT), help="the repository folder the worker runs the flow in")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment of each run")
    a = ap.parse_args(argv)
    source = Path(a.source).resolve()
    target, flow_name = entrypoint(a)
    if not (source / target.split(":")[0]).is_file():
        raise DeployError(f"--source {source}: no {target.split(':')[0]} there")
    params = flow_parameters(a, base=source)
    env = parse_env(a.env)
    url = require_server()
    check_pool(a.pool, url)
    from prefect import flow

    # ``to_deployment(...).apply()`` rather than ``flow.deploy``: the latter also asks the server for the
    # pool's online workers, a request Prefect 3.8.8's server answers with HTTP 422 (null limit and
    # offset), and it has nothing to build or push for a process pool anyway.
    deployment = flow.from_source(source=str(source), entrypoint=target).to_deployment(
        name=a.name, work_pool_name=a.pool, parameters=params, job_variables=env and {"env": env},
        **schedule_kwargs(a))
    dep_id = deployment.apply()
    print(f"deployment {flow_name}/{a.name} ({dep_id}) on work pool {a.pool!r}: run it now with "
          f"`prefect deployment run {flow_name}/{a.name}`")


def main(argv: list[str] | None = None) -> None:
    run_main(_main, argv)


if __name__ == "__main__":
    main()
