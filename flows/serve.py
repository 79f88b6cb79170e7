"""Serve the multi-epoch evolution flow on a cron schedule from this process (needs a running Prefect server).

    .venv/bin/prefect server start &          # once, in another terminal
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    .venv/bin/python -m hasp.flows.serve --cron "0 2 * * *" --epochs 3 --mode lite --filtering full

``flow.serve`` registers a deployment named ``hasp-evolve/<name>`` with the schedule and keeps
this process alive to run the scheduled flow runs (Ctrl-C stops serving; the deployment stays).
To run them on a work pool's worker instead, see ``flows/deploy.py``. Every run is cached per task
on content hashes, so a night with no new data, library or code change replays from the cache.
"""

from __future__ import annotations

import argparse

from hasp.flows.evolve import evolve_flow
from hasp.flows.schedule import add_arguments, flow_parameters, require_server, run_main, schedule_kwargs


def _main(argv: list[str] | None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    a = ap.parse_args(argv)
    params = flow_parameters(a)
    require_server()
    if a.traces:
        from hasp.flows.nightly import nightly_flow

        nightly_flow.serve(name=a.name, parameters=params, **schedule_kwargs(a))
    else:
        evolve_flow.serve(name=a.name, parameters=params, **schedule_kwargs(a))


def main(argv: list[str] | None = None) -> None:
    run_main(_main, argv)


if __name__ == "__main__":
    main()
