"""The ``hasp`` command line. Each command is a thin shell over ``hasp.evolve.epoch`` & co.

``dvc.yaml`` stages call these commands, so every stage is reproducible by hand.
Heavy imports happen inside commands so ``hasp --help`` stays fast.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hasp import artifacts as art
from hasp.console import safe
from hasp.cli.budget import budgeted as _budgeted, save_summary as _save_summary
from hasp.cli.params import ParamsOpt, params_or_exit, params_path
from hasp.cli.skills import skills_app
from hasp.seeds import seed_library

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(help="HASP: harness LLM agents with executable Program Functions.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
model_app = typer.Typer(help="The embedded default model (SmolLM2-135M-Instruct).", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data.", no_args_is_help=True)
evolve_app = typer.Typer(help="One self-improvement epoch, phase by phase (A–H).", no_args_is_help=True)
train_app = typer.Typer(help="Post-training (LoRA): sft, rs, opd, dpo.", no_args_is_help=True)
experiment_app = typer.Typer(help="The post-training grid E1-E6 (paper Table 13) as a Prefect flow.",
                             no_args_is_help=True)
track_app = typer.Typer(help="MLflow tracking.", no_args_is_help=True)
for sub, name in ((model_app, "model"), (data_app, "data"), (evolve_app, "evolve"), (train_app, "train"),
                  (track_app, "track"), (skills_app, "skills"), (experiment_app, "experiment")):
    app.add_typer(sub, name=name)

from hasp.cli.evolve import register as _register_evolve_commands  # noqa: E402 - run, gate, rollback

from hasp.cli.experiment import register as _register_experiment_commands  # noqa: E402 - run, grid
from hasp.cli.release import register as _register_release_commands  # noqa: E402 - publish, log, rollback
from hasp.cli.train import register as _register_train_commands  # noqa: E402 - sft, rs, opd, dpo

_register_evolve_commands(evolve_app)
_register_train_commands(train_app)
_register_experiment_commands(experiment_app)
_register_release_commands(skills_app)

EpochDir = Annotated[Path, typer.Option("--epoch-dir", help="Output folder of the epoch (outputs/epoch_<i>).")]
Library = Annotated[Path, typer.Option("--library", help="Skill library folder (default: the seed library).")]


def _params(path: Path | None) -> Any:
    return params_or_exit(path)


def _epoch_of(epoch_dir: Path) -> int:
    tail = epoch_dir.name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


# ----------------------------------------------------------------------------- model
@model_app.command("prepare")
def model_prepare(name: Annotated[Optional[str], typer.Argument(
                      help="an embedded model (`hasp model list`), or 'all'; default: llm.embedded of the params")] = None,
                  params: ParamsOpt = None) -> None:
    """Assemble and verify an embedded model's GGUF, then derive the Hugging Face folder training uses
    (once; idempotent). Prints the folder."""
    from hasp import embedded_models as catalog
    from hasp.llm.model_prep import prepare_model

    if name == "all":
        names = catalog.names()
    elif name:
        names = [name]
    else:
        p = _params(params)
        names = [p.llm.embedded]
    for n in names:
        try:
            model = catalog.find(n)
            catalog.verify(model.name)
        except catalog.CatalogError as e:
            raise typer.BadParameter(str(e)) from None
        typer.echo(str(prepare_model(name=model.name)))


@model_app.command("list")
def model_list() -> None:
    """The embedded models: package, file, checksum, chat format, context, licence, and whether installed."""
    from hasp import embedded_models as catalog

    for m in catalog.CATALOG.values():
        try:
            m.part_paths()
            state = "installed"
        except catalog.CatalogError:
            state = f"not installed ({m.requirement})"
        fmt = m.format()
        typer.echo(f"{m.name}{' (default)' if m.name == catalog.DEFAULT_MODEL else ''}: {m.title}")
        for label, value in (("package", m.requirement), ("file", f"{m.file} ({m.size} bytes, sha256 {m.sha256})"),
                             ("chat format", f"{fmt.name}: {fmt.description}" if fmt else "the GGUF's own template"),
                             ("stop", ", ".join(fmt.stop) if fmt and fmt.stop else "-"),
                             ("context", str(m.context)), ("architecture", m.architecture),
                             ("licence", m.licence), ("state", state)):
            typer.echo(f"  {label}: {value}")
    typer.echo("chat formats: " + "; ".join(f"{f.name} ({f.description})" for f in catalog.FORMATS.values()))


@model_app.command("serve")
def model_serve(port: int = 8765,
                folder: Annotated[Optional[Path], typer.Option(
                    help="Model folder (vllm: also a hub name) to serve; default: the embedded one, or the "
                         "base the --lora adapters were trained on.")] = None,
                backend: Annotated[Optional[str], typer.Option(
                    help="llamacpp | transformers | vllm; default llm.backend of the params file.")] = None,
                lora: Annotated[Optional[list[str]], typer.Option(
                    "--lora", help="vllm: a trained adapter to register, NAME=DIR or DIR (an adapter folder or "
                                   "the merged folder beside it; the name is then derived). Repeatable. "
                                   "llamacpp: one checkpoint (adapter or merged folder), its adapters converted "
                                   "to GGUF and applied to every request.")] = None,
                model: Annotated[Optional[str], typer.Option(
                    "--model", help="an embedded model (`hasp model list`); default: llm.embedded of the params")] = None,
                params: ParamsOpt = None) -> None:
    """Serve a model OpenAI-compatibly until Ctrl-C: llama.cpp on the GGUF, with a trained checkpoint's
    adapters (CPU), transformers serve on a folder (CPU), or vllm serve with LoRA adapters selectable by
    name (GPU)."""
    import time

    p = _params(params)
    if model:
        from hasp import embedded_models

        try:
            p = p.model_copy(update={"llm": p.llm.model_copy(update={"embedded": embedded_models.find(model).name})})
        except embedded_models.CatalogError as e:
            raise typer.BadParameter(str(e)) from None
    chosen = backend or p.llm.backend
    if chosen not in ("llamacpp", "transformers", "vllm"):
        raise typer.BadParameter(f"--backend {chosen!r}: choose llamacpp, transformers or vllm")
    if chosen == "vllm":
        srv = _vllm_server(p, port, folder, lora or [])
    elif chosen == "llamacpp":
        srv = _llamacpp_server(p, port, folder, lora)
    else:
        srv = _transformers_server(p, port, folder, lora)
    with srv:
        typer.echo(f"serving {srv.model_name} at {srv.base_url} (model name as above); Ctrl-C to stop")
        for a in getattr(srv, "adapters", []):
            typer.echo(f"  adapter {a.name} = {a.adapter} (send it as the model)")
        try:
            while srv.proc is not None and srv.proc.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


def _llamacpp_server(p: Any, port: int, folder: Path | None, lora: list[str] | None) -> Any:
    """llama.cpp on the GGUF of ``folder`` (default: the embedded model), with the one checkpoint named
    by ``--lora`` applied to every request."""
    from hasp.llm.llamacpp_server import LlamaCppServer, resolve_gguf_checkpoint

    if lora and len(lora) > 1:
        raise typer.BadParameter("--backend llamacpp serves one checkpoint per server: give one --lora")
    target = Path(lora[0].partition("=")[2] or lora[0]) if lora else folder
    ckpt = resolve_gguf_checkpoint(target, p.llm.llamacpp.gguf, embedded=p.llm.embedded, chat_format=p.llm.chat_format)
    srv = LlamaCppServer.from_settings(ckpt, port, p.llm.llamacpp)
    srv.apply_adapters = True
    if ckpt.adapters:
        typer.echo(f"adapters applied to every request: {', '.join(map(str, ckpt.adapters))}")
    return srv


def _transformers_server(p: Any, port: int, folder: Path | None, lora: list[str] | None) -> Any:
    from hasp.llm.model_prep import prepare_model
    from hasp.llm.server import LocalModelServer, cache_kwargs

    if lora:
        raise typer.BadParameter("--lora needs --backend vllm; transformers serve runs a merged folder "
                                 "(--folder <train out>/merged)")
    return LocalModelServer(folder or prepare_model(name=p.llm.embedded, chat_format=p.llm.chat_format), port,
                            **cache_kwargs(p.llm.transformers))


def _vllm_server(p: Any, port: int, folder: Path | None, lora: list[str]) -> Any:
    """The vLLM server of ``hasp model serve``: checked (vllm installed, adapters readable, one base)
    before anything starts."""
    from hasp.llm.adapters import adapter_checkpoint, resolve_checkpoint
    from hasp.llm.vllm_server import VLLMServer, require_vllm, same_model

    require_vllm(p.llm.vllm)
    adapters = []
    for spec in lora:
        name, sep, path = spec.partition("=")
        ckpt = resolve_checkpoint(Path(path if sep else name))
        if ckpt.adapter is None:
            raise typer.BadParameter(f"--lora {spec}: {ckpt.base} holds no adapter_config.json")
        adapters.append(adapter_checkpoint(ckpt.adapter, name if sep else None))
    if folder is not None:
        base = str(folder.resolve()) if folder.exists() else str(folder)
    elif adapters:
        base = adapters[0].base
    else:
        from hasp.llm.model_prep import prepare_model

        base = str(prepare_model(name=p.llm.embedded, chat_format=p.llm.chat_format))
    other = [a for a in adapters if not same_model(a.base, base)]
    if other:
        raise typer.BadParameter(f"--lora {other[0].adapter} was trained on {other[0].base}, not on {base}; "
                                 "one server serves adapters of one base")
    return VLLMServer(base, adapters, port, settings=p.llm.vllm)


# ----------------------------------------------------------------------------- data
@data_app.command("prepare")
def data_prepare(out: Path = Path("outputs/data"), params: ParamsOpt = None) -> None:
    """Generate the multi-hop benchmark into OUT (corpus + train/val/test)."""
    from hasp.atomic import write_json
    from hasp.domains.search.prepare import prepare_data

    s = prepare_data(_params(params), out)
    write_json(s, out / "summary.json")
    typer.echo(json.dumps(s))


# ----------------------------------------------------------------------------- evolve phases
@evolve_app.command("rollout")
def evolve_rollout(epoch_dir: EpochDir, library: Library, data: Path = Path("outputs/data"),
                   params: ParamsOpt = None, split: str = "train") -> None:
    """Phase A: PF-aware rollout of the policy on the seed split (behind the two-stage prefilter
    when ``evolve.prefilter`` is on; other splits always get the plain PF-aware rollout)."""
    from hasp.agent.remote import episode_executor
    from hasp.evolve.epoch import phase_a_rollout, rollout
    from hasp.llm.endpoints import policy_client, teacher_client

    from hasp.evolve.budget import metered

    p = _params(params)
    if p.evolve.traces.source and split == "train":  # logged traces replace the rollout (no model runs)
        from hasp.evolve.traces import phase_a_from_traces

        _budgeted(epoch_dir, "rollout", p, lambda meter, ledger: phase_a_from_traces(p, epoch_dir / art.ROLLOUT))
        return

    def run(meter: Any, ledger: Any) -> dict[str, Any]:
        with policy_client(p.llm, max_tokens=p.agent.max_tokens) as pol, episode_executor(p.runner) as ex:
            pol, teacher = metered(pol, meter), metered(teacher_client(p.teacher, p.llm), meter)
            if split == "train":
                return phase_a_rollout(p, data, library, epoch_dir / art.ROLLOUT, policy=pol, teacher=teacher,
                                       executor=ex)
            return rollout(p, data, library, split, epoch_dir / art.ROLLOUT, policy=pol, variant="pf",
                           teacher=teacher, executor=ex)
    _budgeted(epoch_dir, "rollout", p, run)


@evolve_app.command("analyse")
def evolve_analyse(epoch_dir: EpochDir, library: Library, params: ParamsOpt = None) -> None:
    """Phase B: failure detection (+ LLM summarizer and trace judge: teacher, else the student) and clustering."""
    import contextlib

    from hasp.evolve.epoch import analyse
    from hasp.llm.endpoints import policy_client, teacher_client

    from hasp.evolve.budget import metered

    p = _params(params)

    def run(meter: Any, ledger: Any) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            model = None
            if (p.evolve.summarizer and p.evolve.mode == "full") or p.evolve.traces.judge:
                model = teacher_client(p.teacher, p.llm) or stack.enter_context(policy_client(
                    p.llm, port=p.llm.port + 2, max_tokens=p.evolve.summarizer_max_tokens,
                    temperature=p.evolve.summarizer_temperature))
            return analyse(epoch_dir / art.ROLLOUT, library, p, epoch_dir, summarizer=metered(model, meter),
                           epoch=_epoch_of(epoch_dir))
    _budgeted(epoch_dir, "analyse", p, run)


@evolve_app.command("propose")
def evolve_propose(epoch_dir: EpochDir, library: Library, params: ParamsOpt = None,
                   history: Optional[Path] = None) -> None:
    """Phase C: the student proposes candidate skills (SKILL.md + PF code)."""
    from hasp.evolve.epoch import propose
    from hasp.llm.endpoints import policy_client

    from hasp.evolve.budget import limited, metered

    p = _params(params)

    def run(meter: Any, ledger: Any) -> dict[str, Any]:
        with policy_client(p.llm, port=p.llm.port + 2, max_tokens=p.evolve.proposal_max_tokens,
                           temperature=p.evolve.proposal_temperature) as student:
            return propose(epoch_dir / art.CLUSTERS, library, p, epoch_dir / art.CANDIDATES,
                           student=metered(student, meter), epoch=_epoch_of(epoch_dir), history_path=history,
                           guard=ledger.guard(meter) if limited(p.evolve.budget) else None)
    _budgeted(epoch_dir, "propose", p, run)


@evolve_app.command("validate")
def evolve_validate(epoch_dir: EpochDir, params: ParamsOpt = None) -> None:
    """Phase D: executable validation in the sandbox (static reading under filtering=teacher)."""
    from hasp.evolve.epoch import epoch_actions, validate
    from hasp.evolve.gate import static_exec

    p = _params(params)
    _budgeted(epoch_dir, "validate", p, lambda meter, ledger: validate(
        epoch_dir / art.CANDIDATES, epoch_dir / art.VALIDATION, static=static_exec(p.evolve), sandbox=p.sandbox,
        action_types=epoch_actions(p)))


@evolve_app.command("review")
def evolve_review(epoch_dir: EpochDir, library: Library, params: ParamsOpt = None) -> None:
    """Phase E: five-dimension review (teacher if configured, else the heuristic reviewer)."""
    from hasp.evolve.epoch import review
    from hasp.llm.endpoints import teacher_client

    from hasp.evolve.budget import metered

    p = _params(params)
    _budgeted(epoch_dir, "review", p, lambda meter, ledger: review(
        epoch_dir / art.CANDIDATES, epoch_dir / art.VALIDATION, epoch_dir / art.CLUSTERS,
        epoch_dir / art.ROLLOUT, library, p, epoch_dir / art.REVIEWS,
        teacher=metered(teacher_client(p.teacher, p.llm), meter)))


@evolve_app.command("admit")
def evolve_admit(epoch_dir: EpochDir, library: Library, params: ParamsOpt = None,
                 history: Optional[Path] = None) -> None:
    """Phase F: admit accepted candidates into EPOCH_DIR/library (versioned, with history)."""
    from hasp.evolve.epoch import admit_phase

    s = admit_phase(epoch_dir / art.CANDIDATES, epoch_dir / art.REVIEWS, epoch_dir / art.CLUSTERS,
                    library, epoch_dir / art.LIBRARY, _params(params), epoch=_epoch_of(epoch_dir),
                    history_path=history)
    _save_summary(epoch_dir, "admit", s)


@evolve_app.command("build-data")
def evolve_build_data(epoch_dir: EpochDir, params: ParamsOpt = None) -> None:
    """Phases G–H: four-signal scores and the SFT/DPO jsonl of PF-corrected steps."""
    from hasp.evolve.epoch import build_data

    _save_summary(epoch_dir, "build_data", build_data(epoch_dir / art.ROLLOUT, _params(params), epoch_dir))


# ----------------------------------------------------------------------------- train / eval / track
@app.command("params")
def params_write(out: Annotated[Path, typer.Option(help="File to write the resolved params to.")],
                 set_: Annotated[Optional[list[str]], typer.Option(
                     "--set", help="section.key=value (the value is read as YAML). Repeatable.")] = None,
                 params: ParamsOpt = None) -> None:
    """Write PARAMS with --set values applied, validated, as one complete file (e.g. a GPU stack's
    llm.backend=vllm and llm.base_url), so every other knob keeps the value of the file it came from."""
    import yaml

    overrides = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set {item!r}: expected section.key=value")
        overrides[key] = yaml.safe_load(value) if value else None
    resolved = params_or_exit(params, overrides)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {**resolved.model_dump(mode="json"), "demo": resolved.demo}  # demo values stay as the file has them
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    typer.echo(str(out))


@app.command("dvc-yaml")
def dvc_yaml_cmd(out: Annotated[Path, typer.Option(help="Where to write it.")] = Path("dvc.yaml"),
                 check: Annotated[bool, typer.Option("--check", help="Only compare: exit 1 when OUT differs.")]
                 = False) -> None:
    """Write dvc.yaml from the phase graph (hasp/evolve/phase_graph.py): each stage's deps and params are
    the phase's declared inputs, the same ones the Prefect cache keys on."""
    from hasp.evolve.dvc_yaml import dvc_yaml

    text = dvc_yaml()
    if check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        typer.echo(f"{out} {'matches' if same else 'differs from'} the phase graph"
                   + ("" if same else ": run `hasp dvc-yaml`"))
        raise typer.Exit(0 if same else 1)
    from hasp.atomic import atomic_write

    atomic_write(out, lambda f: f.write(text))
    typer.echo(f"wrote {out}")


@app.command("retriever-serve")
def retriever_serve(corpus: Path, host: str = "127.0.0.1", port: int = 8000, topk: int = 3) -> None:
    """Serve a BM25 index over CORPUS (jsonl of {id, contents}) with the Search-R1 /retrieve API."""
    from hasp.domains.search.retriever_server import serve

    serve(corpus, host, port, topk=topk)


from hasp.eval.cli import eval_command  # noqa: E402 - `hasp eval`: variants × datasets of any domain
from hasp.cli.show import show_command  # noqa: E402 - `hasp show`: the samples of an evaluation


def _task_runner_executor(runner: Any) -> Any:
    """Episodes through a Prefect task runner (``runner.kind`` other than threads); Prefect is
    imported only when such a runner is asked for."""
    from hasp.tasks.episodes import make_executor

    return make_executor(runner)


@app.callback()
def _plug_task_runners() -> None:
    # before any command: the library reaches the Prefect task runners only through this hook
    from hasp.agent.remote import use_executors

    use_executors(_task_runner_executor)

app.command("eval")(eval_command)
app.command("show")(show_command)


def benchmark_title(data_dir: Path, split: str = "test") -> str:
    """What the epoch's evaluation ran on, read from its data: "Test split (generated benchmark,
    30 questions: 1-hop 30)"."""
    from hasp.domains.search.generator import load_questions
    from hasp.eval.summary import hop_mix

    qs = load_questions(data_dir / f"{split}.jsonl")
    return f"{split.capitalize()} split (generated benchmark, {len(qs)} questions: {hop_mix(qs)})"


def print_results(res: dict[str, Any], title: str) -> None:
    """The epoch's evaluation (``{label: summary}``) as one table."""
    from rich.table import Table

    from hasp.console import console

    t = Table(title=title)
    for col in ("agent", "n", "EM", "F1", "answered", "steps", "PF fires", "modified", "parse err"):
        t.add_column(col)
    for label, m in res.items():
        t.add_row(label, str(m["n"]), f"{m['em']:.3f}", f"{m['f1']:.3f}", f"{m['answered_rate']:.2f}",
                  f"{m['mean_steps']:.1f}", str(m["pf_fires_total"]), str(m["modified_steps"]),
                  f"{m['parse_error_rate']:.2f}")
    console().print(t)


@track_app.command("epoch")
def track_epoch(out: Path = Path("outputs"), epoch: int = 0, params: ParamsOpt = None) -> None:
    """Log the epoch's outputs (phases, eval, training, adapter, episode traces) as one MLflow run and
    write the files ``dvc plots show`` draws (<out>/plots/)."""
    from hasp.evolve.epoch_task import domain_name
    from hasp.llm.endpoints import served_model
    from hasp.track.dvc_plots import write_plot_data
    from hasp.track.epoch_report import log_epoch
    from hasp.track.mlflow_run import tracking_uri

    p = _params(params)
    # `hasp eval` (the evaluate stage) traced the test episodes in a run of its own
    run_id = log_epoch(out, p, epoch=epoch, trace_eval=False, model=served_model(p.llm), domain=domain_name(p))
    write_plot_data(out, eval_metrics=out / "eval" / "metrics.json", eval_epoch=epoch)
    (out / f"epoch_{epoch}").mkdir(parents=True, exist_ok=True)
    (out / f"epoch_{epoch}" / art.MLFLOW_RUN_ID).write_text(run_id + "\n")
    typer.echo(f"MLflow run {run_id} in {tracking_uri()}")


# ----------------------------------------------------------------------------- demo
@app.command("demo")
def demo(out: Path = Path("outputs"), params: ParamsOpt = None,
         library: Library = seed_library("search"),
         full: Annotated[bool, typer.Option("--full", help="ignore the demo: section of the params "
                                                             "file (run at the full scale)")] = False) -> None:
    """Run one full evolution epoch (Prefect flow) on the embedded model and print the results.

    The params file's ``demo:`` section (a few one-hop questions, short episodes) is applied
    unless ``--full``; the resolved settings are written to ``<out>/params.demo.yaml`` and
    that file is what the flow runs and MLflow records."""
    import time

    import yaml

    from hasp.cli.evolve import run_epoch_flow
    from hasp.config import ParamsError, demo_params
    from hasp.evolve.story import epoch_story
    from hasp.track.mlflow_run import tracking_uri

    t0 = time.perf_counter()
    params = params_path(params)
    if not full:
        try:
            resolved = demo_params(params)
        except ParamsError as e:
            typer.echo(f"error: {safe(e)}", err=True)
            raise typer.Exit(2) from None
        out.mkdir(parents=True, exist_ok=True)
        params = out / "params.demo.yaml"
        params.write_text(yaml.safe_dump(resolved.model_dump(mode="json", exclude={"demo"}), sort_keys=False))
        typer.echo("demo scale: " + ", ".join(f"{k}={v}" for k, v in resolved.demo.items())
                   + f" (resolved settings: {params})")
    res = run_epoch_flow(params, out, library)
    print_results(res["eval"], benchmark_title(out / "data"))
    for line in epoch_story(out / "epoch_0", res["eval"], out / "eval"):
        typer.echo(line)
    typer.echo(f"wall time {time.perf_counter() - t0:.0f}s; MLflow run {res['run_id']}; "
               f"every phase's files are in {out}/epoch_0")
    typer.echo(f"Open the UI: .venv/bin/mlflow ui --backend-store-uri {tracking_uri()}")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("HASP_LOG", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    from hasp.llm.cancel import install_signal_handlers

    install_signal_handlers()  # Ctrl-C / SIGTERM end in-flight model calls in every thread, then unwind
    from hasp.sandbox.spawn import sweep_at_start

    sweep_at_start()  # sandbox folders of earlier runs that were killed
    try:
        rc = app(args=argv if argv is not None else sys.argv[1:], standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # noqa: BLE001 - one clear line for the user; full trace with HASP_LOG=DEBUG
        if os.environ.get("HASP_LOG") == "DEBUG":
            raise
        typer.echo(f"error: {type(e).__name__}: {safe(e)}", err=True)
        return 1
    # click returns (not raises) a command's typer.Exit code when standalone_mode is off
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0


if __name__ == "__main__":
    raise SystemExit(main())
