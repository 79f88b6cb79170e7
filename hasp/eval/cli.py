"""The ``hasp eval`` command: variants × datasets of one domain, logged to MLflow, printed as a table.

One command for search, math and code, and for the epoch's evaluation stage (``--trained`` adds
the trained policy's PF arms). Only typer is imported at module level (``hasp --help`` stays
fast); everything else is imported when the command runs. Inputs are all checked (params,
variants, dataset specs, library, teacher requirements) before a model server starts, and one
``provenance:`` line names what the run uses (commit, model, data, library and params hashes).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from hasp.console import safe

if TYPE_CHECKING:
    from hasp.provenance import Provenance

def _fail(msg: str) -> typer.Exit:
    typer.echo(f"error: {safe(msg)}", err=True)
    return typer.Exit(2)


def eval_command(
    domain: Annotated[str, typer.Option(help="search | math | code, or your own task as pkg.module:attr "
                                             "(a hasp.api.Task or Domain; the current folder is importable), or the name "
                                             "an installed package registers it under (entry points "
                                             "'hasp.tasks').")] = "search",
    variants: Annotated[str, typer.Option(help="Comma-separated agent variants (hasp.agent.variants).")]
    = "react,prompt,pf",
    dataset: Annotated[Optional[list[str]], typer.Option(
        "--dataset", help="search: 'generated', 'generated:DIR' or KIND:PATH (hotpotqa, 2wiki, musique, agentflow); "
                          "math: game24 or a file; code: humaneval, KIND:PATH (mbpp, evalplus) or a file. "
                          "Repeatable.")] = None,
    library: Annotated[Optional[Path], typer.Option(help="Skill library folder (default: the domain's seed library, shipped in the package).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Evaluate the first N items of each dataset.")] = None,
    split: Annotated[str, typer.Option(help="search: test | val | train (| seed for benchmark files).")] = "test",
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="LLM-judge accuracy (search; needs a teacher).")]
    = False,
    teacher_snippets: Annotated[Optional[bool], typer.Option(
        "--teacher-snippets/--no-teacher-snippets", help="Override eval.teacher_snippets (search, App. D.4).")] = None,
    out: Annotated[Path, typer.Option(help="Output folder (trajectories, metrics, tables).")]
    = Path("outputs/evaluations"),
    data: Annotated[Path, typer.Option(help="Folder of the generated benchmark (written if missing).")]
    = Path("outputs/data"),
    retriever_url: Annotated[Optional[str], typer.Option(
        help="Search-R1 retriever for datasets without paragraphs (AgentFlow).")] = None,
    model_dir: Annotated[Optional[Path], typer.Option(
        help="Serve this HF model folder as the policy (e.g. outputs/train/merged).")] = None,
    trained: Annotated[Optional[Path], typer.Option(
        help="A trained HF model folder: adds a trained_<variant> arm for every PF variant, run by it "
             "(skipped with a warning when the folder has no config.json, e.g. training was off).")] = None,
    traces: Annotated[Optional[bool], typer.Option("--traces/--no-traces", help="Override eval.traces.")] = None,
    run_name: Annotated[Optional[str], typer.Option(help="Name of the parent MLflow run.")] = None,
    params: Annotated[Optional[Path], typer.Option(
        "--params", help="Params file to read (default: ./params.yaml when there is one, else the built-in "
                         "defaults).")] = None,
    skills: Annotated[Optional[str], typer.Option(
        "--skills", help="Comma-separated skill ids: run the library restricted to these (one skill measured "
                         "alone against the same questions).")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Evaluate agent variants on datasets of one domain; one MLflow parent run with a nested run per cell."""
    from hasp.config import ParamsError, defaults_notice, load_params, params_file
    from hasp.eval.datasets import DOMAINS, DatasetSpecError, load_datasets
    from hasp.seeds import seed_library

    params = params_file(params)
    if params is None:
        typer.echo(defaults_notice(), err=True)
    only = [x.strip() for x in (skills or "").split(",") if x.strip()]
    try:
        p = load_params(params, {"harness.only_skills": only} if only else None)
    except ParamsError as e:
        raise _fail(str(e)) from None
    names = [v.strip() for v in variants.split(",") if v.strip()]
    task = None
    if domain not in DOMAINS:  # a user task: pkg.module:attr, or a name an installed package registers
        from hasp.episode.task import TaskError, load_task

        try:
            task = load_task(domain)
        except TaskError as e:
            raise _fail(str(e)) from None
    lib = library if library is not None else (
        (Path(task.library) if task.library is not None else None) if task is not None else seed_library(domain))
    if task is not None:
        sets, vs = _task_sets(task, names, dataset, limit, lib, p)
        return _finish(p, sets, names, lib, out, model_dir, trained, judge, False, traces, run_name, progress, limit,
                       data)
    try:
        from hasp.agent.variants import get_variant
        from hasp.eval.runner import check_teacher_needs, check_variants

        if not names:
            raise ValueError("--variants is empty")
        vs = [get_variant(v) for v in names]
        check_variants(domain, vs)
        if model_dir is not None and not (model_dir / "config.json").is_file():
            raise ValueError(f"--model-dir {model_dir} has no config.json (not a HF model folder)")
        sets = load_datasets(domain, list(dataset or []), p, split=split, limit=limit, data_dir=data,
                             retriever_url=retriever_url)
        from hasp.eval.runner import domain_of

        snippets = (p.eval.teacher_snippets if teacher_snippets is None else teacher_snippets) and \
            domain_of(sets[0]).teacher_snippets
        check_teacher_needs(vs, judge=judge, snippets=snippets, have_teacher=p.teacher.configured)
        if not lib.is_dir():
            raise ValueError(f"skill library {lib} is not a folder; pass --library")
        if only:
            from hasp.pf.layout import scan_versions

            missing = [x for x in only if x not in scan_versions(lib)]
            if missing:
                raise ValueError(f"--skills: {', '.join(missing)} not in the library at {lib} "
                                 f"(has: {', '.join(sorted(scan_versions(lib))) or 'none'})")
    except (DatasetSpecError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e)) from None
    _finish(p, sets, names, lib, out, model_dir, trained, judge, snippets, traces, run_name, progress, limit, data)


def task_inputs(task: Any, names: Sequence[str], dataset: Sequence[str], limit: int | None, lib: Path | None,
                p: Any) -> tuple[list[Any], list[Any]]:
    """A user task's evaluation inputs, checked: its dataset (its items, or the one plain questions
    file) and its variants; ``TaskError`` / ``ValueError`` / ``FileNotFoundError`` name what is wrong.
    The one check of the CLI and of ``hasp.api.evaluate``."""
    from hasp.agent.variants import get_variant
    from hasp.episode.task import as_domain, check_task
    from hasp.eval.datasets import task_dataset
    from hasp.eval.runner import check_teacher_needs, check_variants

    check_task(task, task.name)
    if len(dataset) > 1:
        raise ValueError("a task takes at most one dataset (a file of {question, answers} rows)")
    if not names:
        raise ValueError("--variants is empty")
    vs = [get_variant(v) for v in names]
    check_variants(as_domain(task), vs)
    check_teacher_needs(vs, judge=False, snippets=False, have_teacher=p.teacher.configured)
    sets = [task_dataset(task, Path(dataset[0]) if dataset else None, limit)]
    if lib is not None and not lib.is_dir():
        raise FileNotFoundError(f"skill library {lib} is not a folder")
    return sets, vs


def _task_sets(task: Any, names: list[str], dataset: list[str] | None, limit: int | None, lib: Path | None,
               p: Any) -> tuple[list[Any], list[Any]]:
    """``task_inputs`` for the command: a problem is one error line, a task without a library a note."""
    from hasp.episode.task import TaskError

    try:
        sets, vs = task_inputs(task, names, list(dataset or []), limit, lib, p)
    except (TaskError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e)) from None
    if lib is None and any(v.use_pfs for v in vs):
        typer.echo(f"note: task {task.name} has no skill library (its library attribute or --library): PF variants run "
                   "without skills", err=True)
    return sets, vs


def _finish(p: Any, sets: list[Any], names: list[str], lib: Path | None, out: Path, model_dir: Path | None,
            trained: Path | None, judge: bool, snippets: bool, traces: bool | None, run_name: str | None,
            progress: bool, limit: int | None, data: Path) -> None:
    """Run the checked evaluation and print its table, notes and where its outputs are."""
    if trained is not None and not (trained / "config.json").is_file():
        typer.echo(f"warning: --trained {trained} has no config.json; no trained arms", err=True)
        trained = None
    prov = run_provenance(p, sets, data, lib, model_dir)
    typer.echo(prov.header())
    res, runs = _run(p, sets, names, lib, out, model_dir, trained, judge, snippets,
                     p.eval.traces if traces is None else traces, run_name, progress, limit, prov)
    print_table(res.metrics())
    for ds_name, cells in res.metrics().items():
        for label, c in (cells or {}).items():
            if isinstance(c, dict) and c.get("pf_note"):
                typer.echo(f"note: {ds_name}/{label}: {c['pf_note']}", err=True)
    typer.echo(f"outputs in {out}; MLflow parent run {runs['parent']} ({len(runs['children'])} nested runs, "
               f"{runs['traces']} traces)")


def run_provenance(p: Any, sets: list[Any], data: Path, library: Path, model_dir: Path | None) -> Provenance:
    """The evaluation's provenance: the served policy's weights, the dataset files (the generated
    benchmark's folder; a named dataset built from code has none), the library and the params."""
    from hasp.eval.datasets import GENERATED
    from hasp.llm.endpoints import served_model
    from hasp.provenance import provenance

    sources = [s.spec.path if s.spec.path is not None else data for s in sets
               if s.spec.path is not None or s.spec.kind == GENERATED]
    return provenance(params=p, data_dir=sources or None, library=library, model=served_model(p.llm, model_dir))


def _run(p: Any, sets: list[Any], names: list[str], library: Path, out: Path, model_dir: Path | None,
         trained: Path | None, judge: bool, snippets: bool, traces: bool, run_name: str | None, progress: bool,
         limit: int | None, prov: Provenance) -> tuple[Any, dict[str, Any]]:
    """Run the cells inside the open parent MLflow run, each cell logged as it finishes."""
    from hasp.agent.remote import episode_executor
    from hasp.agent.variants import get_variant
    from hasp.eval.runner import Arm, domain_of, run_eval
    from hasp.eval.tracking import eval_run
    from hasp.llm.endpoints import policy_client, teacher_client
    from hasp.pf.library import library_hash

    domain = sets[0].domain
    agent = domain_of(sets[0]).config(p, get_variant("react"))
    max_tokens = agent.max_tokens
    served = p.llm.model_copy(update={"base_url": None})
    teacher = teacher_client(p.teacher, p.llm)
    try:
        with contextlib.ExitStack() as stack:
            pol = stack.enter_context(policy_client(served if model_dir is not None else p.llm, model_dir=model_dir,
                                                    port=p.llm.port + 1 if model_dir is not None else None,
                                                    max_tokens=max_tokens))
            arms: list[Any] = list(names)
            if trained is not None:
                tpol = stack.enter_context(policy_client(served, model_dir=trained, port=p.llm.port + 2,
                                                         max_tokens=max_tokens))
                arms += [Arm(f"trained_{v}", get_variant(v), tpol) for v in names if get_variant(v).use_pfs]
            model = getattr(getattr(pol, "config", None), "model", None) or p.llm.model or "embedded"
            labels = [a.label if isinstance(a, Arm) else a for a in arms]
            run_params = {"domain": domain, "variants": ",".join(labels), "datasets": ",".join(s.name for s in sets),
                          "split": sets[0].split, "limit": limit if limit is not None else "all", "model": model,
                          "model_dir": str(model_dir or ""), "trained": str(trained or ""), "library": str(library or ""), "out": str(Path(out).resolve()),
                          "library_hash": library_hash(library) if library is not None else "", "teacher_model": p.teacher.label,
                          "teacher_snippets": snippets, "judge": judge,
                          "max_steps": agent.max_steps, "max_tokens": max_tokens,
                          "top_k": p.agent.top_k, "sandbox.allow_weaker": p.sandbox.allow_weaker}
            run = stack.enter_context(eval_run(
                experiment=p.tracking.experiment, domain=domain, params=run_params,
                run_name=run_name or f"eval-{domain}-{time.strftime('%Y%m%d-%H%M%S')}",
                cell_params={s.name: dataset_params(s) for s in sets}, traces=traces, provenance=prov))
            executor = stack.enter_context(episode_executor(p.runner))
            res = run_eval(p, sets, arms, policy=pol, library_root=library, out_dir=out, teacher=teacher,
                           judge=judge, teacher_snippets=snippets, progress=progress, on_cell=run.log_cell,
                           executor=executor, provenance=prov.to_dict())
            run.finish(res, {"library_size": res.library_size})
    finally:
        if teacher is not None:
            teacher.close()
    return res, run.ids()


def dataset_params(ds: Any) -> dict[str, Any]:
    """Per-dataset params of a cell's MLflow run."""
    return {"dataset_kind": ds.spec.kind, "dataset_path": str(ds.spec.path or ""), "n": len(ds.questions),
            "n_split": ds.n_split, "corpus_size": ds.corpus_size, "load_report": ds.load_report}


def print_table(metrics: dict[str, dict[str, dict[str, Any]]]) -> None:
    from rich.table import Table

    from hasp.console import console
    from hasp.eval.report import header, table_rows

    t = Table(title="hasp eval: dataset × variant")
    for col in header():
        t.add_column(col, justify="left" if col in ("dataset", "variant") else "right",
                     no_wrap=col in ("dataset", "variant"))
    for row in table_rows(metrics):
        t.add_row(*row)
    console().print(t)
