"""``hasp evolve run | gate | rollback``: multi-epoch evolution, the val gate, frontier rollback.

Registered on the ``hasp evolve`` group by ``hasp.cli`` (``register(evolve_app)``). This is the
one module of ``hasp`` that starts the Prefect flows (``flows/``), and only inside the functions
that run them: the library below it stays importable and testable without Prefect.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp import artifacts as art
from hasp.cli.params import ParamsOpt, params_or_exit, params_path
from hasp.seeds import seed_library


def register(evolve_app: typer.Typer) -> None:
    evolve_app.command("run")(run)
    evolve_app.command("gate")(gate)
    evolve_app.command("rollback")(rollback)
    evolve_app.command("sage")(sage)
    evolve_app.command("import-traces")(import_traces)


def run(epochs: Annotated[int, typer.Option("--epochs", min=1, help="Epochs to run.")] = 1,
        mode: Annotated[Optional[str], typer.Option(help="lite | full (default: evolve.mode)")] = None,
        filtering: Annotated[Optional[str], typer.Option(
            help="none | exec | teacher | full (default: evolve.filtering)")] = None,
        params: ParamsOpt = None,
        out: Annotated[Path, typer.Option("--out", help="Output root (epoch_<i>/ folders).")] = Path("outputs"),
        library: Annotated[Optional[Path], typer.Option(
            "--library", help="Starting library (default: the seed skills of --domain, or your task's "
                              "library attribute).")] = None,
        start_epoch: Annotated[int, typer.Option("--start-epoch", min=0,
                                                 help="Continue after epoch N-1 (reads its carry.json).")] = 0,
        final_eval: Annotated[bool, typer.Option("--final-eval/--no-final-eval",
                                                 help="Evaluate the final library on the test split.")] = True,
        val_gate: Annotated[Optional[bool], typer.Option(
            "--val-gate/--no-val-gate", help="Override evolve.val_gate (full filtering's held-out check).")] = None,
        from_traces: Annotated[Optional[str], typer.Option(
            "--from-traces", help="Phase A reads these logged traces (file or folder: hasp eval output, "
                                  "journals, chat-log jsonl; or mlflow:<experiment>) instead of rolling out "
                                  "(evolve.traces.source).")] = None,
        gold: Annotated[Optional[bool], typer.Option(
            "--gold/--no-gold", help="Score the traces against their gold answers, or drop them and find "
                                     "failures with the label-free signals only (evolve.traces.gold).")] = None,
        domain: Annotated[Optional[str], typer.Option(
            "--domain", help="The task to evolve: search, math, code, or your own (pkg.module:attr, or a name an "
                             "installed package registers) (evolve.domain).")] = None,
        dataset: Annotated[Optional[str], typer.Option(
            "--dataset", help="Items of a math, code or user-task epoch, as `hasp eval --dataset` takes them "
                              "(evolve.dataset; default: game24, humaneval, the task's own items).")] = None,
        ) -> None:
    """Run N evolution epochs as one Prefect flow (cached per task; one MLflow run, step = epoch)."""
    traces = from_traces
    overrides = {k: v for k, v in (("evolve.mode", mode), ("evolve.filtering", filtering),
                                   ("evolve.val_gate", val_gate), ("evolve.traces.source", traces),
                                   ("evolve.traces.gold", gold), ("evolve.domain", domain),
                                   ("evolve.dataset", dataset)) if v is not None}
    p = params_or_exit(params, overrides)  # fail here, with the key named, before Prefect starts
    task_or_exit(p, out)
    if library is None:
        from hasp.evolve.epoch_task import default_library

        library = default_library(p)
        if library is None:
            typer.echo(f"error: task {p.evolve.domain} declares no Task.library; pass --library FOLDER", err=True)
            raise typer.Exit(2)
    anchors_or_exit(p)
    traces_or_exit(p)
    found = params_path(params)
    prefect_env()
    from hasp.flows.evolve import evolve_flow
    from hasp.flows.prefect_server import owned_prefect_server

    with owned_prefect_server():  # ends with this process, even on SIGKILL
        res = evolve_flow(epochs=epochs, mode=mode, filtering=filtering, params_path=str(found) if found else None,
                          out_root=str(out), library=str(library), start_epoch=start_epoch, final_eval=final_eval,
                          val_gate=val_gate, traces=traces, traces_gold=gold, domain=domain, dataset=dataset)
    for i, ph in enumerate(res["epochs"], start=start_epoch):
        budget = ph.get("budget") or {}
        if budget.get("stopped"):
            typer.echo(json.dumps({"epoch": i, "stopped": budget["stopped"], "spend": budget.get("total"),
                                   "library_changed": budget.get("library_changed")}))
            continue
        failure = {"proposals_failed": ph["propose"]["failure"]} if ph["propose"].get("failure") else {}
        typer.echo(json.dumps({"epoch": i, **failure, "proposed": ph["propose"]["proposed"],
                               "admitted": ph["admit"]["admitted"], "library_size": ph["admit"]["library_size"],
                               "val_em": ph["val_after"]["em"],
                               "rolled_back_to": ph["frontier"]["rolled_back_to"]}))
    for label, m in (res["eval"] or {}).items():
        typer.echo(f"test {label:6s} EM={m['em']:.3f} F1={m['f1']:.3f} n={m['n']}")
    typer.echo(f"final library {res['library']}; MLflow run {res['run_id']}")


def _one_line_or_exit(check: Any, value: object,
                      error: type[Exception] | tuple[type[Exception], ...]) -> None:
    """``check(value)`` when ``value`` is set; its ``error`` is one error line and exit code 2."""
    if not value:
        return
    try:
        check(value)
    except error as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def task_or_exit(p: object, out: Path) -> None:
    """A task that cannot be loaded, or a pool too small to split, is one error line and exit code 2."""
    from hasp.eval.datasets import DatasetSpecError
    from hasp.episode.task import TaskError
    from hasp.evolve.epoch_task import epoch_task, too_small

    def check(params: object) -> None:
        task = epoch_task(params, out / "data")  # type: ignore[arg-type]
        if (why := too_small(task)) is not None:
            raise TaskError(why)
        e = params.evolve  # type: ignore[attr-defined]
        single_step = task.pool is not None and task.pool.task is None  # math, code: items are not questions
        for key, value in (("evolve.anchors", e.anchors), ("evolve.traces.source", e.traces.source)):
            if value and single_step:
                raise TaskError(f"{key}: pinned anchors and logged traces are question/answer rows; a {task.name} "
                                "epoch reads its own items (unset it, or evolve search or a task of your own)")

    _one_line_or_exit(check, p, (TaskError, DatasetSpecError))


def anchors_or_exit(p: object) -> None:
    """A pinned anchors file that cannot be read is one error line and exit code 2, before any model starts."""
    from hasp.evolve.anchors import AnchorError, load_anchors

    _one_line_or_exit(load_anchors, p.evolve.anchors, AnchorError)  # type: ignore[attr-defined]


def traces_or_exit(p: object) -> None:
    """A trace source that is missing or holds no trace file is one error line and exit code 2."""
    from hasp.evolve.traces import TraceFormatError, check_source

    _one_line_or_exit(check_source, p.evolve.traces.source, TraceFormatError)  # type: ignore[attr-defined]


def import_traces(source: Annotated[str, typer.Argument(help="File or folder of logged traces, or "
                                                               "mlflow:<experiment> (its HASP episode traces).")],
                  out: Annotated[Path, typer.Option("--out", help="Folder for rollout.jsonl and "
                                                                  "traces_summary.json.")],
                  gold: Annotated[Optional[bool], typer.Option(
                      "--gold/--no-gold", help="Keep the traces' gold answers (default: evolve.traces.gold).")] = None,
                  judge: Annotated[Optional[bool], typer.Option(
                      "--judge/--no-judge", help="Also ask the judge (the teacher, else the policy model) about "
                      "every answered trace, and report its precision against gold beside the signals' "
                      "(default: evolve.traces.judge).")] = None,
                  params: ParamsOpt = None) -> None:
    """Read logged traces into Phase A's rollout.jsonl (plus traces_summary.json: rows read, bad rows by
    reason, rows with gold) and report the label-free failure signals; no model runs unless --judge."""
    from hasp.agent.rollout import read_trajectories
    from hasp.atomic import write_json
    from hasp.evolve.trace_signals import failure_set, signal_counts, signal_precision
    from hasp.evolve.traces import import_traces as run_import

    overrides = {k: v for k, v in (("evolve.traces.gold", gold), ("evolve.traces.judge", judge)) if v is not None}
    p = params_or_exit(params, overrides or None)
    p = p.model_copy(update={"evolve": p.evolve.model_copy(update={"traces": p.evolve.traces.model_copy(
        update={"source": str(source)})})})
    traces_or_exit(p)
    summary = run_import(source, out, p.evolve.traces)
    trajs = read_trajectories(out / art.ROLLOUT)
    judged = _judge_traces(p, trajs) if p.evolve.traces.judge else None
    found = failure_set(trajs, p.evolve.traces, judged.signals if judged else None)
    summary["signals"] = {"failure_source": found.summary(), "fired": signal_counts(found),
                          **signal_precision(trajs, p.evolve.traces, found.signals),
                          **({"judge": judged.summary()} if judged else {})}
    write_json(summary, out / art.TRACES_SUMMARY)
    t = summary["traces"]
    typer.echo(f"read {t['n_read']} trajectories ({t['n_with_gold']} with gold), {t['n_bad']} bad rows"
               + (f" ({', '.join(f'{v} {k}' for k, v in t['bad_by_reason'].items())})" if t["n_bad"] else "")
               + f"; failures: {found.gold} by gold, {found.label_free} by label-free signals")
    if judged is not None:
        j = summary["signals"].get("per_signal", {}).get("judge") or {}
        typer.echo(f"judge: {judged.asked} asked, {judged.unsupported} unsupported, {judged.errors} unusable"
                   + (f"; against gold (EM 0): {j['flagged']} flagged, precision {j['precision']}, recall {j['recall']}"
                      if j.get("flagged") else ""))
    typer.echo(f"wrote {out / art.ROLLOUT} and {out / art.TRACES_SUMMARY}")
    if not t["n_read"]:
        raise typer.Exit(1)


def _judge_traces(p: object, trajs: list) -> object:
    """The trace judge over ``trajs`` with the teacher, else a policy-model server started for it."""
    from contextlib import nullcontext

    from hasp.evolve.trace_judge import judge_traces
    from hasp.llm.endpoints import policy_client, teacher_client

    teacher = teacher_client(p.teacher, p.llm)
    try:
        with (nullcontext(teacher) if teacher is not None else policy_client(p.llm, max_tokens=8)) as judge:
            return judge_traces(trajs, judge, max_chars=p.evolve.traces.judge_max_chars)
    finally:
        closer = getattr(teacher, "close", None)
        if callable(closer):
            closer()


def prefect_env() -> None:
    """Project-local Prefect state (results cache, ephemeral API database) unless set by the user."""
    os.environ.setdefault("PREFECT_HOME", str(Path.cwd() / ".prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def run_epoch_flow(params: Path | None, out: Path, library: Path) -> dict:
    """One full evolution epoch as a Prefect flow (``hasp demo``); returns the flow's result."""
    prefect_env()
    from hasp.flows.evolve import evolve_epoch_flow
    from hasp.flows.prefect_server import owned_prefect_server

    with owned_prefect_server():
        return evolve_epoch_flow(params_path=str(params) if params else None, out_root=str(out), library=str(library))


def gate(epoch_dir: Annotated[Path, typer.Option("--epoch-dir")],
         library: Annotated[Path, typer.Option("--library")],
         data: Annotated[Path, typer.Option("--data")] = Path("outputs/data"),
         params: ParamsOpt = None) -> None:
    """Val gate: val EM with library+candidate vs library alone (writes gate.json; [] when off), the
    pinned anchors of evolve.anchors (writes anchors.json) and the judge on the held-out trace questions
    of evolve.traces.holdout (writes judge_gate.json)."""
    from hasp.agent.remote import episode_executor
    from hasp.evolve.epoch import gate as gate_phase
    from hasp.atomic import write_json
    from hasp.evolve.epoch import gate_runners, rollout
    from hasp.evolve.gate import active_gates, epoch_phases
    from hasp.llm.endpoints import policy_client, teacher_client

    p = params_or_exit(params)
    if "gate" not in epoch_phases(p.evolve):
        write_json([], epoch_dir / art.GATE)
        write_json([], epoch_dir / art.ANCHORS)
        write_json([], epoch_dir / art.JUDGE_GATE)
        summary: dict = {"skipped": f"val gate off (mode {p.evolve.mode}, filtering {p.evolve.filtering}, "
                                    f"val_gate {p.evolve.val_gate})"}
    else:
        from hasp.cli.budget import budgeted
        from hasp.evolve.budget import limited, metered

        anchors_or_exit(p)

        def run(meter: object, ledger: object) -> dict:
            teacher = metered(teacher_client(p.teacher, p.llm), meter)
            with policy_client(p.llm, max_tokens=p.agent.max_tokens) as pol, episode_executor(p.runner) as ex:
                pol = metered(pol, meter)
                # the same guard as the flow's, asked before each candidate's val run; made before the
                # baseline run, which this stage makes itself (the flow's is a phase of its own)
                guard = ledger.guard(meter) if limited(p.evolve.budget) else None
                base = {}
                if "val" in active_gates(p.evolve):
                    base = rollout(p, data, library, "val", epoch_dir / art.VAL_BASELINE, policy=pol,
                                   variant="pf", teacher=teacher, limit=p.evolve.val_limit or None,
                                   label="val_baseline", executor=ex)
                return gate_phase(epoch_dir, library, p, base, guard=guard,
                                  **gate_runners(p, data, epoch_dir, policy=pol, teacher=teacher, executor=ex))
        budgeted(epoch_dir, "gate", p, run)
        return
    write_json(summary, epoch_dir / art.summary_file("gate"))
    typer.echo(json.dumps({"gate": summary}, default=str)[:2000])


def rollback(to: Annotated[int, typer.Option("--to", help="Epoch whose library snapshot to restore "
                                                          "(-1 = the starting library).")],
             out: Annotated[Path, typer.Option("--out")] = Path("outputs"),
             dest: Annotated[Optional[Path], typer.Option(
                 "--dest", help="Restore here instead of <latest epoch>/library_rollback "
                                "(which the next `hasp evolve run --start-epoch` continues from).")] = None,
             ) -> None:
    """Restore a frontier (or any finished epoch's) library snapshot."""
    from hasp.evolve.epoch import rollback_to

    path = rollback_to(out, to, dest)
    typer.echo(f"restored the epoch-{to} library into {path}")


def sage(params: ParamsOpt = None,
         data: Annotated[Path, typer.Option("--data")] = Path("outputs/data"),
         library: Annotated[Path, typer.Option("--library", help="Starting library (copied per chain).")] = seed_library("search"),
         out: Annotated[Path, typer.Option("--out")] = Path("outputs/sage"),
         split: Annotated[str, typer.Option(help="Split whose questions form the chains.")] = "train",
         chain_length: Annotated[int, typer.Option("--chain-length", min=2, help="Tasks per chain.")] = 3,
         limit: Annotated[Optional[int], typer.Option(help="First N questions of the split.")] = None,
         model: Annotated[Optional[Path], typer.Option(
             "--model", help="Checkpoint folder that acts and writes the skills (default: the embedded model).")]
         = None) -> None:
    """SAGE's sequential rollout: chains of same-template questions, skills admitted after a failed task serve
    the next ones; compared with plain rollouts of the same questions (writes sequential.json). Prints SAGE's
    metrics per arm: TGC, SGC, skill use and EM with and without it, steps and generated tokens per task."""
    from hasp.eval.chain_metrics import metric_lines
    from hasp.evolve.sequential import sage_run
    from hasp.llm.endpoints import policy_client

    p = params_or_exit(params)
    with policy_client(p.llm, model_dir=model, max_tokens=p.agent.max_tokens) as pol, \
            policy_client(p.llm, model_dir=model, port=p.llm.port + 1, max_tokens=p.evolve.declarative_max_tokens,
                          temperature=p.evolve.proposal_temperature) as student:
        summary = sage_run(p, data, library, out, policy=pol, student=student, split=split,
                           chain_length=chain_length, limit=limit)
    typer.echo(json.dumps(summary, indent=1))
    arms = {arm: summary[arm] for arm in ("sequential", "plain") if arm in summary}
    for line in metric_lines(arms, summary.get("sequential_minus_plain"), "sequential - plain"):
        typer.echo(line)
