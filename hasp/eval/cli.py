"""The ``hasp eval`` command: any variants × any datasets, logged to MLflow, printed as a table.

Only typer is imported at module level (``hasp --help`` stays fast); everything else is imported
when the command runs. Inputs are all checked (params, variants, dataset specs, library, teacher
requirements) before a model server starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def _fail(msg: str) -> typer.Exit:
    typer.echo(f"error: {msg}", err=True)
    return typer.Exit(2)


def eval_command(
    variants: Annotated[str, typer.Option(help="Comma-separated agent variants (hasp.agent.variants).")]
    = "react,prompt,pf",
    dataset: Annotated[Optional[list[str]], typer.Option(
        "--dataset", help="'generated' or KIND:PATH (hotpotqa, 2wiki, musique, agentflow); repeatable.")] = None,
    library: Annotated[Path, typer.Option(help="Skill library folder.")] = Path("skills/search"),
    limit: Annotated[Optional[int], typer.Option(help="Evaluate the first N questions of the split.")] = None,
    split: Annotated[str, typer.Option(help="test | val | train (| seed for benchmark files).")] = "test",
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="LLM-judge accuracy (needs a teacher).")] = False,
    teacher_snippets: Annotated[Optional[bool], typer.Option(
        "--teacher-snippets/--no-teacher-snippets", help="Override eval.teacher_snippets (App. D.4).")] = None,
    out: Annotated[Path, typer.Option(help="Output folder (trajectories, metrics, tables).")]
    = Path("outputs/evaluations"),
    data: Annotated[Path, typer.Option(help="Folder of the generated benchmark (written if missing).")]
    = Path("outputs/data"),
    retriever_url: Annotated[Optional[str], typer.Option(
        help="Search-R1 retriever for datasets without paragraphs (AgentFlow).")] = None,
    model_dir: Annotated[Optional[Path], typer.Option(
        help="Serve this HF model folder as the policy (e.g. outputs/train/merged).")] = None,
    traces: Annotated[Optional[bool], typer.Option("--traces/--no-traces", help="Override eval.traces.")] = None,
    run_name: Annotated[Optional[str], typer.Option(help="Name of the parent MLflow run.")] = None,
    params: Annotated[Path, typer.Option("--params", help="params.yaml to read.")] = Path("params.yaml"),
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Evaluate agent variants on datasets; one MLflow parent run with a nested run per cell."""
    from hasp.config import ParamsError, load_params
    from hasp.eval.datasets import DatasetSpecError, load_eval_dataset, parse_dataset_specs

    try:
        p = load_params(params)
    except ParamsError as e:
        raise _fail(str(e)) from None
    names = [v.strip() for v in variants.split(",") if v.strip()]
    try:
        from hasp.agent.variants import get_variant
        from hasp.eval.runner import check_teacher_needs

        if not names:
            raise ValueError("--variants is empty")
        specs = parse_dataset_specs(dataset or ["generated"])
        if not library.is_dir():
            raise ValueError(f"skill library {library} is not a folder")
        if model_dir is not None and not (model_dir / "config.json").is_file():
            raise ValueError(f"--model-dir {model_dir} has no config.json (not a HF model folder)")
        snippets = p.eval.teacher_snippets if teacher_snippets is None else teacher_snippets
        check_teacher_needs([get_variant(v) for v in names], judge=judge, snippets=snippets,
                            have_teacher=bool(p.teacher.base_url))
        sets = [load_eval_dataset(s, p, split=split, limit=limit, data_dir=data, retriever_url=retriever_url)
                for s in specs]
    except (DatasetSpecError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e)) from None
    res, runs = _run(p, sets, names, library, out, model_dir, judge, snippets,
                     p.eval.traces if traces is None else traces, run_name, progress, limit)
    print_table(res.metrics())
    typer.echo(f"outputs in {out}; MLflow parent run {runs['parent']} ({len(runs['children'])} nested runs, "
               f"{runs['traces']} traces)")


def _run(p: Any, sets: list[Any], names: list[str], library: Path, out: Path, model_dir: Path | None, judge: bool,
         snippets: bool, traces: bool, run_name: str | None, progress: bool,
         limit: int | None) -> tuple[Any, dict[str, Any]]:
    from hasp.eval.runner import run_eval
    from hasp.llm.endpoints import policy_client, teacher_client
    from hasp.track.eval_runs import log_eval_runs

    teacher = teacher_client(p.teacher, p.llm)
    llm = p.llm.model_copy(update={"base_url": None}) if model_dir is not None else p.llm
    port = p.llm.port + 1 if model_dir is not None else None
    try:
        with policy_client(llm, model_dir=model_dir, port=port, max_tokens=p.agent.max_tokens) as pol:
            res = run_eval(p, sets, names, policy=pol, library_root=library, out_dir=out, teacher=teacher,
                           judge=judge, teacher_snippets=snippets, progress=progress)
            model = getattr(getattr(pol, "config", None), "model", None) or p.llm.model or "embedded"
    finally:
        if teacher is not None:
            teacher.close()
    run_params = {"variants": ",".join(names), "datasets": ",".join(s.name for s in sets),
                  "split": sets[0].split, "limit": limit if limit is not None else "all",
                  "model": model, "model_dir": str(model_dir or ""), "library": str(library),
                  "library_hash": res.library_hash, "library_size": res.library_size,
                  "teacher_model": p.teacher.model or "", "teacher_snippets": snippets, "judge": judge,
                  "max_steps": p.agent.max_steps, "top_k": p.agent.top_k}
    cell_params = {s.name: {"dataset_kind": s.spec.kind, "dataset_path": str(s.spec.path or ""),
                            "n": len(s.questions), "n_split": s.n_split, "corpus_size": s.corpus_size,
                            "load_report": s.load_report}
                   for s in sets}
    runs = log_eval_runs(res, experiment=p.tracking.experiment,
                         run_name=run_name or f"eval-{time.strftime('%Y%m%d-%H%M%S')}", params=run_params,
                         cell_params=cell_params, traces=traces)
    return res, runs


def print_table(metrics: dict[str, dict[str, dict[str, Any]]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from hasp.eval.report import header, table_rows

    t = Table(title="hasp eval: dataset × variant")
    for col in header():
        t.add_column(col, justify="left" if col in ("dataset", "variant") else "right",
                     no_wrap=col in ("dataset", "variant"))
    for row in table_rows(metrics):
        t.add_row(*row)
    console = Console()
    if not console.is_terminal:  # logs / pipes: do not squeeze the table into 80 columns
        console = Console(width=220)
    console.print(t)
