"""Serve the evolution flow on a cron schedule (needs a running Prefect server).

    .venv/bin/prefect server start &          # once, in another terminal
    PREFECT_API_URL=http://127.0.0.1:4200/api .venv/bin/python -m flows.serve --cron "0 2 * * *"
"""

from __future__ import annotations

import argparse

from flows.evolve import evolve_epoch_flow


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cron", default="0 2 * * *")
    ap.add_argument("--name", default="nightly-evolve")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="outputs")
    a = ap.parse_args()
    evolve_epoch_flow.serve(name=a.name, cron=a.cron,
                            parameters={"params_path": a.params, "out_root": a.out})


if __name__ == "__main__":
    main()
