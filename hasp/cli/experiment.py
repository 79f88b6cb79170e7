"""``hasp experiment run E<k> | grid``: the post-training grid as one Prefect flow (``flows/experiment.py``).

Prefect is imported only inside the commands. A preset name is checked before Prefect starts, so a
typo is one line (exit 2), not a flow run that fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from hasp.console import safe

from hasp.cli.params import ParamsOpt, params_or_exit, params_path
from hasp.seeds import seed_library

OutOpt = Annotated[Path, typer.Option("--out", help="Output root of the grid.")]
LibraryOpt = Annotated[Path, typer.Option("--library", help="Starting skill library (V1 keeps it frozen).")]
DataOpt = Annotated[Optional[Path], typer.Option(
    "--data", help="Prepared data folder (default: <out>/data, generated when missing).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Base model: a local HF folder or a cached hub name (default: the embedded model).")]


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("grid")(grid)


def _check(names: list[str], model: Optional[str]) -> None:
    """Unknown presets, and a preset whose start checkpoint is neither trained earlier in the same run nor
    named with --model, fail here in one line, before Prefect starts."""
    from hasp.train.presets import PresetError, get_preset

    try:
        for i, n in enumerate(names):
            start = get_preset(n, key="experiment").start
            if start is not None and start not in names[:i] and model is None:
                raise PresetError(f"experiment: {n} starts from {start}'s checkpoint: run {start} before it in the "
                                  f"same grid, or name the start checkpoint with --model")
    except PresetError as e:
        typer.echo(f"error: {safe(e)}", err=True)
        raise typer.Exit(2) from None


def _run(names: list[str], params: Optional[Path], out: Path, library: Path, data: Optional[Path], model: Optional[str],
         run_name: Optional[str]) -> None:
    params_or_exit(params)
    _check(names, model)
    found = params_path(params)
    from hasp.cli.evolve import prefect_env
    from hasp.cli.train import one_line_errors

    prefect_env()
    from hasp.flows.experiment import experiment_flow
    from hasp.flows.prefect_server import owned_prefect_server

    with one_line_errors(), owned_prefect_server():
        res = experiment_flow(presets=names, params_path=str(found) if found else None, out_root=str(out), library=str(library),
                              data_dir=str(data) if data else None, model=model, run_name=run_name)
    for label, m in res["untrained"].items():
        typer.echo(json.dumps({"policy": "untrained", "arm": label, "em": m["em"], "n": m["n"],
                               "em_by_hops": m.get("em_by_hops", {})}))
    failed = {n: e["error"] for n, e in res["experiments"].items() if e.get("error")}
    for name, e in res["experiments"].items():
        for label, m in e.get("eval", {}).items():
            typer.echo(json.dumps({"policy": name, "arm": label, "em": m["em"], "n": m["n"],
                                   "em_by_hops": m.get("em_by_hops", {}), "wall_s": round(e["wall_s"], 1)}))
    for name, e in res["experiments"].items():
        for pair, g in e.get("gains", {}).items():
            typer.echo(json.dumps({"policy": name, "gain": pair, "em_diff": g["mean"], "ci95": g["ci95"], "n": g["n"],
                                   "by_hops": {h: {"mean": v["mean"], "ci95": v["ci95"], "n": v["n"]}
                                               for h, v in g.get("by_hops", {}).items()}}))
    typer.echo(f"comparison: {out / 'grid.json'}; MLflow parent run {res['parent_run_id']}")
    for n, err in failed.items():
        typer.echo(f"error: {n}: {safe(err)}", err=True)
    if failed:
        raise typer.Exit(2)


def run(name: Annotated[Optional[str], typer.Argument(
            help="Preset: E1..E6, GRPO, SAGE or their _cpu variants (default: train.preset of the params file).")] = None,
        params: ParamsOpt = None, out: OutOpt = Path("outputs/experiment"),
        library: LibraryOpt = seed_library("search"), data: DataOpt = None, model: ModelOpt = None,
        run_name: Annotated[Optional[str], typer.Option("--run-name", help="MLflow parent run name.")] = None,
        optional: Annotated[bool, typer.Option(
            "--optional", help="Without NAME and with train.preset null, write an empty metrics file and exit 0 "
                               "(the DVC stage: a plain `dvc repro` runs no grid).")] = False,
        ) -> None:
    """Run one preset (V1: recipe on the frozen library; V2: evolve, refresh, train per phase) and evaluate
    the untrained and the trained policy with and without PFs on the test split."""
    if name is None:
        name = params_or_exit(params).train.preset
        if not name and optional:
            from hasp.atomic import write_json

            write_json({}, out / "metrics.json")
            typer.echo(f"{params or 'params'}: train.preset is null, no experiment run "
                       "(e.g. dvc exp run -S train.preset=E3_cpu experiment)")
            return
        if not name:
            typer.echo(f"error: {params or 'params'}: train.preset is null; name a preset (hasp experiment run E3_cpu) "
                       "or set train.preset", err=True)
            raise typer.Exit(2)
    _run([name], params, out, library, data, model, run_name)


def grid(params: ParamsOpt = None, out: OutOpt = Path("outputs/experiment"),
         library: LibraryOpt = seed_library("search"), data: DataOpt = None, model: ModelOpt = None,
         paper: Annotated[bool, typer.Option("--paper", help="The paper-scale presets (GPU) instead of the "
                                                             "_cpu ones.")] = False,
         run_name: Annotated[Optional[str], typer.Option("--run-name", help="MLflow parent run name.")] = None,
         only: Annotated[Optional[list[str]], typer.Option(
             "--preset", help="Run only these presets of the grid (repeatable; kept in grid order), e.g. to spread "
                              "one seed's grid over several machines. GRPO and SAGE need E2 beside them.")] = None,
         ) -> None:
    """Run the grid as one flow: E1-E6, then GRPO and SAGE from E2's checkpoint; one MLflow parent run, a
    child per preset, a comparison table."""
    names = [f"{n}{'' if paper else '_cpu'}" for n in (*(f"E{k}" for k in range(1, 7)), "GRPO", "SAGE")]
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            typer.echo(f"error: --preset {', '.join(unknown)}: not in this grid ({', '.join(names)})", err=True)
            raise typer.Exit(2)
        names = [n for n in names if n in only]
    _run(names, params, out, library, data, model, run_name)
