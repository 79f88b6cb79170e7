"""Serve the multi-epoch evolution flow on a cron schedule (needs a running Prefect server).

    .venv/bin/prefect server start &          # once, in another terminal
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    .venv/bin/python -m flows.serve --cron "0 2 * * *" --epochs 3 --mode lite --filtering full

``flow.serve`` registers a deployment named ``hasp-evolve/<name>`` with the schedule and keeps
this process alive to run the scheduled flow runs (Ctrl-C stops serving; the deployment stays).
Every run is cached per task on content hashes, so a night with no new data, library or code
change replays from the cache.
"""

from __future__ import annotations

import argparse
import sys

from flows.evolve import evolve_flow
from hasp.config import ParamsError, load_params


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cron", default="0 2 * * *", help="cron string (server time zone unless --timezone)")
    ap.add_argument("--timezone", default=None, help="IANA time zone of the cron string, e.g. Europe/Berlin")
    ap.add_argument("--name", default="nightly-evolve")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--mode", choices=("lite", "full"), default=None)
    ap.add_argument("--filtering", choices=("none", "exec", "teacher", "full"), default=None)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="outputs")
    ap.add_argument("--library", default="skills/search")
    a = ap.parse_args(argv)
    try:
        load_params(a.params)  # a bad file fails now, not at the first scheduled run
    except ParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    params = {"epochs": a.epochs, "mode": a.mode, "filtering": a.filtering, "params_path": a.params,
              "out_root": a.out, "library": a.library}
    if a.timezone:
        from prefect.client.schemas.schedules import CronSchedule

        evolve_flow.serve(name=a.name, schedule=CronSchedule(cron=a.cron, timezone=a.timezone), parameters=params)
    else:
        evolve_flow.serve(name=a.name, cron=a.cron, parameters=params)


if __name__ == "__main__":
    main()
