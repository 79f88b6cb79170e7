"""Evolution as Prefect flows.

* ``evolve_epoch_flow`` — one epoch: data → A … H (with the val gate and the frontier)
  → LoRA SFT → evaluation → one MLflow run (``hasp demo``, the e2e test).
* ``evolve_flow`` — N epochs (``hasp evolve run``): the same per-epoch tasks with
  ``epoch_<i>/`` artifacts, the library carried from epoch to epoch (or rolled back to
  the best frontier snapshot), a final test evaluation, and one MLflow run with
  per-epoch metrics at ``step=epoch``.

Each epoch leaves three Prefect artifacts (summary, candidates and decisions, a link to the MLflow
run; ``hasp.tasks.artifacts``) and the run leaves the files ``dvc plots show`` draws (``<out>/plots/``).

Runs without a server (ephemeral Prefect). Every task is cached on content hashes,
so re-running an unchanged epoch replays summaries from the cache and skips the
model entirely (the model server is started lazily, only if a task needs it).
For a schedule, see ``flows/serve.py`` (served from one process) and ``flows/deploy.py`` (a work pool).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from hasp import artifacts as art
from hasp.atomic import atomic_write
from hasp.config import Params, load_params
from hasp.evolve.epoch_task import reads_split_files
from hasp.evolve.epoch import epoch_actions, history_before
from hasp.evolve.gate import active_gates, epoch_phases, static_exec
from hasp.evolve.phase_graph import (EPOCH_STEPS, STEP, cache_key, epoch_code_paths, epoch_order, epoch_outs,
                                    repo_root, step_outputs)
from hasp.fingerprint import content_hash, key_of, module_closure, source_key
from hasp.llm.endpoints import teacher_client
from hasp.llm.endpoints import LazyPolicy
from hasp.pf.library import library_hash
from hasp.progress import Pipeline, phase_result
from hasp.seeds import seed_library
from hasp.track.dvc_plots import write_plot_data
from hasp.tasks import phases
from hasp.tasks.artifacts import publish_epoch
from hasp.tasks.cache import output_complete, outputs_complete
from hasp.tasks.episodes import make_executor
from hasp.tasks.phases import settle

log = logging.getLogger(__name__)

def tracking_code_version(*roots: str) -> str:
    """Code key of a tracking task only (MLflow logging): it is left out of the phases' key, so
    editing how results are logged re-logs them and never re-runs rollouts or training."""
    return source_key(module_closure(roots))


def code_version() -> str:
    """Code key of the whole epoch (every phase's code in the phase graph): the run-level tasks
    (tracking, the grid) key on it; each phase keys on its own code only."""
    root = repo_root()
    return key_of(*[(p, content_hash(root / p)) for p in epoch_code_paths()])


def _model_identity(params: Any) -> str:
    if params.llm.base_url:
        return f"{params.llm.base_url}|{params.llm.model}"
    from hasp.llm.model_prep import prepare_model

    folder = prepare_model(name=params.llm.embedded, chat_format=params.llm.chat_format)
    marker = next((p for p in sorted(folder.glob("*")) if p.name.startswith(".") or p.suffix == ".json"), None)
    return content_hash(folder / "config.json") + (content_hash(marker) if marker else "")


def _fresh(*paths: Path) -> bool:
    """True when an output is missing or incomplete: then the task must run even if its key is cached."""
    return not outputs_complete(*paths)


def _phase(pipe: Pipeline, name: str, task: Any, outputs: tuple[Path, ...], *args: Any, **kwargs: Any) -> Any:
    """One cached phase: it re-runs when one of its ``outputs`` is missing or incomplete, and a phase
    whose model calls failed returns its summary without being cached (``hasp.tasks.phases.settle``)."""
    call = task.with_options(refresh_cache=_fresh(*outputs)) if outputs else task
    return pipe.run(name, settle(call), *args, **kwargs)


def copy_output(src: Path, dst: Path) -> None:
    """Copy a finished output file (atomically: a reader never sees half of it)."""
    text = src.read_text(encoding="utf-8")
    atomic_write(dst, lambda f: f.write(text))


def _val_phase(pipe: Pipeline, name: str, key: str, p: Params, data_dir: Path, library: Path, out_path: Path,
               **kwargs: Any) -> dict[str, Any]:
    """The shared val rollout. Its key is the library's skills, so a hit may come from a run that wrote
    its trajectories elsewhere (the previous epoch's "val after", another ``--out``): the file is
    copied from there when it is still whole, and the rollout re-runs when it is not."""
    call = settle(phases.val_rollout.with_options(refresh_cache=False))
    summary = pipe.run(name, call, key, p, data_dir, library, out_path, **kwargs)
    if output_complete(out_path):
        return summary
    src = Path(summary.get("trajectories", ""))
    if summary.get("trajectories") and output_complete(src):
        copy_output(src, out_path)
        return summary
    call = settle(phases.val_rollout.with_options(refresh_cache=True))
    return pipe.run(f"{name} (re-run: trajectories missing)", call, key, p, data_dir, library, out_path, **kwargs)


#: scratch folders a phase removes when it ends; a killed run leaves them behind
SCRATCH = ("valgate-*", "anchors-*", "judge-*")


def sweep_scratch(ep_dir: Path) -> int:
    """Remove the scratch folders of an earlier, killed run of this epoch (nothing else writes
    there while the epoch starts); returns how many were removed."""
    import shutil

    gone = 0
    for pattern in SCRATCH:
        for d in ep_dir.glob(pattern):
            shutil.rmtree(d, ignore_errors=True)
            gone += 1
    if gone:
        phase_result(f"epoch folder {ep_dir}", f"removed {gone} scratch folder(s) left by an interrupted run")
    return gone


@dataclass
class Clients:
    """The model clients of a run. All lazy: a fully cached run never starts a server."""

    policy: Any
    student: Any
    trained: Any
    teacher: Any = None
    executor: Any = None  # where rollout episodes run (runner.kind); None = this process's threads

    @property
    def started(self) -> bool:
        return any(getattr(c, "started", False) for c in (self.policy, self.student, self.trained))

    def close(self) -> None:
        for c in (self.policy, self.student, self.trained, self.executor):
            _close(c)

    def release_student(self) -> None:
        """Stop the student's server between phases (a lazy client restarts it when asked again)."""
        _close(self.student)


def _close(client: Any) -> None:
    closer = getattr(client, "close", None)
    if callable(closer):
        closer()


def make_clients(p: Params, out: Path) -> Clients:
    """Policy (greedy), student (sampling, own server), trained policy, teacher (or None), and the
    episode executor of ``runner.kind`` (its cluster starts on the first episode). Tests replace
    this function with one returning doubles."""
    return Clients(
        policy=LazyPolicy(p.llm, max_tokens=p.agent.max_tokens),
        student=LazyPolicy(p.llm, port=p.llm.port + 2, max_tokens=p.evolve.proposal_max_tokens,
                           temperature=p.evolve.proposal_temperature),
        trained=LazyPolicy(p.llm.model_copy(update={"base_url": None}), model_dir=out / "train" / "merged",
                           port=p.llm.port + 1, max_tokens=p.agent.max_tokens),
        teacher=teacher_client(p.teacher, p.llm), executor=make_executor(p.runner))


@dataclass
class RunKeys:
    """What a run's cache keys need beyond the phase graph: the identities of the models it calls."""

    model_id: str
    teacher_id: str


def layout(out: Path, data_dir: Path, ep_dir: Path, library: Path, evolved: Path | None = None) -> dict[str, Path]:
    """Where this run keeps the artifacts the phase graph names by role."""
    return {"data": data_dir, "epoch": ep_dir, "library": library, "evolved": evolved or ep_dir / art.LIBRARY,
            "train": out / "train", "eval": out / "eval", "out": out}


#: what an optional step writes (the graph's outs): removed when this run does not run it
STALE_IF_SKIPPED = {s.name: epoch_outs(s.phase) for s in EPOCH_STEPS if s.optional and s.phase}
#: what each step leaves in the epoch folder (the graph's): removed when the budget stops the epoch before it
PHASE_OUTPUTS = {s.name: step_outputs(s.name) for s in EPOCH_STEPS}


def epoch_phase_count(p: Params) -> int:
    """How many phases ``run_epoch`` runs under these params (for the ``[i/N]`` progress lines)."""
    return len(epoch_order(epoch_phases(p.evolve)))


def _drop_outputs(ep_dir: Path, names: list[str]) -> None:
    import shutil

    for name in names:
        for f in (*PHASE_OUTPUTS.get(name, ()), art.summary_file(name)):
            path = ep_dir / f
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


@dataclass
class _Epoch:
    """One epoch's run state, with one method per step of ``EPOCH_STEPS`` (named as the step): ``run_epoch``
    calls them in the graph's order. Each returns the step's summary; the budget is ``run_epoch``'s."""

    p: Params
    out: Path
    data_dir: Path
    lib_in: Path
    ep_dir: Path
    epoch: int
    clients: Clients
    keys: RunKeys
    pipe: Pipeline
    meter: Any
    ledger: Any
    seed_frontier: bool
    anchors_key: str | None
    policy: Any = None
    student: Any = None
    teacher: Any = None
    ph: dict[str, Any] = field(default_factory=dict)

    @property
    def history(self) -> Path:
        return self.out / "proposal_history.jsonl"

    @property
    def evolved(self) -> Path:
        return self.ep_dir / art.LIBRARY

    @property
    def lay(self) -> dict[str, Path]:
        return layout(self.out, self.data_dir, self.ep_dir, self.lib_in)

    def _label(self, name: str, rerun: str | None = None) -> str:
        return STEP[name].label + (f" (re-run: {rerun})" if rerun else "")

    def _guarded(self, name: str, task: Any, output: Path, key: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A phase the budget may cut mid-way (Phase C between proposals, the val gate between candidates).
        When the cache served a summary an earlier run's budget cut, this run's budget decides anew."""
        from hasp.evolve.budget import limited

        def once(refresh: bool) -> tuple[dict[str, Any], Any]:
            guard = self.ledger.guard(self.meter) if limited(self.p.evolve.budget) else None
            call = settle(task.with_options(refresh_cache=refresh or _fresh(output)))
            label = self._label(name, "an earlier budget cut it" if refresh else None)
            return self.pipe.run(label, call, key, *args, guard=guard, **kwargs), guard

        summary, guard = once(refresh=False)
        if summary.get("budget_stop") and (guard is None or guard.hit is None):
            summary, guard = once(refresh=True)
        return summary

    def rollout(self) -> dict[str, Any]:
        ep, p = self.ep_dir, self.p
        if p.evolve.traces.source:  # Phase A reads logged traces: keyed on their content, no model runs
            from hasp.evolve.traces import source_key

            k = cache_key("rollout", p, self.lay, "traces", source_key(p.evolve.traces.source))
            return _phase(self.pipe, f"{STEP['rollout'].label} (from traces)", phases.rollout_from_traces,
                          (ep / art.ROLLOUT, ep / art.HELDOUT), k, p, ep / art.ROLLOUT)
        k = cache_key("rollout", p, self.lay, self.keys.model_id)
        return _phase(self.pipe, STEP["rollout"].label, phases.rollout, (ep / art.ROLLOUT, ep / art.HELDOUT),
                      k, p, self.data_dir, self.lib_in, ep / art.ROLLOUT, policy=self.policy, teacher=self.teacher,
                      executor=self.clients.executor, meter=self.meter)

    def analyse(self) -> dict[str, Any]:
        p = self.p
        summarizer = self.teacher or self.student  # the paper asks the teacher; without one, the student
        # the model that summarises failures or judges traces is part of what Phase B's output depends on
        asks_model = p.evolve.summarizer or p.evolve.traces.judge
        summ_id = ((self.keys.teacher_id if self.clients.teacher is not None else self.keys.model_id)
                   if asks_model else None)
        k = cache_key("analyse", p, self.lay, summ_id, self.epoch)
        return _phase(self.pipe, STEP["analyse"].label, phases.analyse, (self.ep_dir / art.CLUSTERS,),
                      k, self.ep_dir / art.ROLLOUT, self.lib_in, p, self.ep_dir, summarizer=summarizer,
                      epoch=self.epoch, meter=self.meter)

    def propose(self) -> dict[str, Any]:
        earlier = [asdict(x) for x in history_before(self.history, self.epoch).entries]
        k = cache_key("propose", self.p, self.lay, self.keys.model_id, earlier, self.epoch)
        ep = self.ep_dir
        summary = self._guarded("propose", phases.propose, ep / art.CANDIDATES, k, ep / art.CLUSTERS, self.lib_in,
                                self.p, ep / art.CANDIDATES, student=self.student, epoch=self.epoch,
                                history_path=self.history, meter=self.meter)
        self.clients.release_student()  # free its memory before the next model-heavy phases
        return summary

    def validate(self) -> dict[str, Any]:
        ep, p = self.ep_dir, self.p
        return _phase(self.pipe, STEP["validate"].label, phases.validate, (ep / art.VALIDATION,),
                      cache_key("validate", p, self.lay), ep / art.CANDIDATES, ep / art.VALIDATION,
                      static=static_exec(p.evolve), sandbox=p.sandbox, action_types=epoch_actions(p))

    def review(self) -> dict[str, Any]:
        return _phase(self.pipe, STEP["review"].label, phases.review, (self.ep_dir / art.REVIEWS,),
                      cache_key("review", self.p, self.lay), self.ep_dir, self.lib_in, self.p, teacher=self.teacher,
                      meter=self.meter)

    def _val(self, name: str, library: Path, out_name: str) -> dict[str, Any]:
        k = cache_key("val_rollout", self.p, self.lay, self.keys.model_id, library_hash(library))
        return _val_phase(self.pipe, STEP[name].label, k, self.p, self.data_dir, library, self.ep_dir / out_name,
                          policy=self.policy, teacher=self.teacher, label=name, executor=self.clients.executor,
                          meter=self.meter)

    def val_baseline(self) -> dict[str, Any]:
        # One library-alone val run per epoch, shared by every candidate's gate and by the frontier's seed
        # member. Keyed on the skills only (SKILL.md, hasp.yaml, pf.py; not history or snapshots): it is the
        # previous epoch's "val_after" run, and an epoch that admits nothing reuses it as its own.
        return self._val("val_baseline", self.lib_in, art.VAL_BASELINE)

    def gate(self) -> dict[str, Any]:
        p, ep, base = self.p, self.ep_dir, self.ph["val_baseline"]
        # the judge gate's held-out questions come from Phase A's traces, and the judge is a model of its own
        judge_key = ((content_hash(ep / art.HELDOUT),
                      self.keys.teacher_id if self.clients.teacher is not None else self.keys.model_id)
                     if "judge" in active_gates(p.evolve) else None)
        k = cache_key("gate", p, self.lay, self.keys.model_id, base["em"], base["f1"], self.anchors_key, judge_key)
        return self._guarded("gate", phases.gate, ep / art.GATE, k, ep, self.lib_in, p, self.data_dir, base,
                             policy=self.policy, teacher=self.teacher, executor=self.clients.executor,
                             meter=self.meter)

    def admit(self) -> dict[str, Any]:
        ep = self.ep_dir
        return _phase(self.pipe, STEP["admit"].label, phases.admit, (self.evolved / "library_history.json",
                      ep / art.ADMISSION), cache_key("admit", self.p, self.lay, self.epoch), ep, self.lib_in, self.p,
                      epoch=self.epoch, history_path=self.history)

    def val_after(self) -> dict[str, Any]:
        return self._val("val_after", self.evolved, art.VAL_AFTER)

    def frontier(self) -> dict[str, Any]:
        seed = (self.lib_in, self.ph["val_baseline"]) if self.seed_frontier else None
        return self.pipe.run(STEP["frontier"].label, phases.frontier, self.out, self.epoch, self.evolved,
                             self.ph["val_after"], self.p, seed=seed)

    def build_data(self) -> dict[str, Any]:
        ep = self.ep_dir
        earlier = [content_hash(f) for f in sorted(self.out.glob(f"epoch_*/{art.SKILL_RECORDS}"))
                   if f.parent.name != ep.name and int(f.parent.name.split("_")[1]) < self.epoch]
        return _phase(self.pipe, STEP["build_data"].label, phases.build_data, (ep / art.SFT,),
                      cache_key("build_data", self.p, self.lay, earlier), ep / art.ROLLOUT, self.p, ep)


_UNRUN = [s.name for s in EPOCH_STEPS if not callable(getattr(_Epoch, s.name, None))]
if _UNRUN:  # a step the graph declares that the flow cannot run
    raise RuntimeError(f"flows.evolve: no runner for epoch step(s) {_UNRUN}")


def run_epoch(p: Params, out: Path, data_dir: Path, lib_in: Path, epoch: int, clients: Clients, keys: RunKeys,
              *, seed_frontier: bool, pipe: Pipeline | None = None) -> tuple[dict[str, Any], Path]:
    """Phases A–H of one epoch plus the val gate and the frontier, one step of ``EPOCH_STEPS`` after the
    other; returns (summaries, carry library).

    Which of D / E / val gate run comes from ``hasp.evolve.gate.epoch_phases``; files of a
    phase that does not run are removed so an earlier run's results cannot leak into admission.

    Every model call goes through a client metered for this epoch (``hasp.evolve.budget``); each phase's
    summary carries its ``spend``, ``summary_budget.json`` the epoch's, and ``evolve.budget`` is checked
    after every step and between Phase C's proposals. When a limit is reached the epoch stops there with
    one warning line (``summaries["budget"]["stopped"]``): the finished steps stay, the later ones do not
    run (their files of an earlier run are removed), and the library is the input library, unless the stop
    came after the last gate, when admission (which calls no model) still runs."""
    from hasp.evolve.anchors import load_anchors
    from hasp.evolve.budget import PHASE_LABELS, Ledger, Meter, metered, stop_line

    ep_dir = out / f"epoch_{epoch}"
    ep_dir.mkdir(parents=True, exist_ok=True)
    pipe = pipe or Pipeline(f"epoch {epoch}", epoch_phase_count(p))
    run_phases = epoch_phases(p.evolve)
    for phase, names in STALE_IF_SKIPPED.items():
        if phase not in run_phases:
            for name in names:
                (ep_dir / name).unlink(missing_ok=True)
    sweep_scratch(ep_dir)
    anchors_key = None
    if p.evolve.anchors:  # a pin that cannot be read stops the run here, not inside the gate
        load_anchors(p.evolve.anchors)
        anchors_key = content_hash(Path(p.evolve.anchors))
    meter = Meter()
    run = _Epoch(p, out, data_dir, lib_in, ep_dir, epoch, clients, keys, pipe, meter, Ledger(p.evolve.budget),
                 seed_frontier, anchors_key,
                 *(metered(c, meter) for c in (clients.policy, clients.student, clients.teacher)))
    ph, ledger = run.ph, run.ledger
    order = epoch_order(run_phases)
    last_gate = "gate" if "gate" in run_phases else "val_baseline"

    def reached(name: str) -> str | None:
        """The stop line when the budget is reached after step ``name`` (None: go on)."""
        ledger.add(name, ph[name])
        own = (ph[name] or {}).get("budget_stop")
        hit = ledger.reached()
        if own is None and hit is None:
            return None
        written = (ph["propose"]["proposed"], ph["propose"]["asked"]) if "propose" in ph else None
        return own or stop_line(hit, f"after phase {PHASE_LABELS.get(name, name)}", written)

    def stopped(line: str, after: str) -> tuple[dict[str, Any], Path]:
        log.warning("epoch %d: %s", epoch, line)
        done = [n for n in order if n in ph]
        _drop_outputs(ep_dir, [n for n in order if n not in ph])
        admitted = "admit" in ph
        ph["budget"] = {**ledger.to_dict(), "stopped": line, "stopped_after": after, "phases_run": done,
                        "library_changed": admitted and ph["admit"].get("admitted", 0) > 0,
                        **_proposal_count(ph)}
        for name, summary in ph.items():
            phases_write_summary(ep_dir, name, summary)
        return ph, (run.evolved if admitted else lib_in)

    gate_at = order.index(last_gate)
    pending: str | None = None  # the budget was reached at the last gate: admission runs, then the epoch stops
    for i, name in enumerate(order):
        ph[name] = getattr(run, name)()
        if not STEP[name].metered:
            continue
        if i > gate_at:  # after the last gate the budget is counted, and only a stop at the gate ends the epoch
            ledger.add(name, ph[name])
            if pending and name == "admit":
                return stopped(pending, last_gate)
            continue
        line = reached(name)
        if line and i < gate_at:
            return stopped(line, name)
        pending = line
    ph["budget"] = {**ledger.to_dict(), "stopped": None, **_proposal_count(ph)}
    for name, summary in ph.items():
        phases_write_summary(ep_dir, name, summary)
    return ph, Path(ph["frontier"]["carry"])


def _proposal_count(ph: dict[str, Any]) -> dict[str, Any]:
    """Proposals asked for and written, with the reasons of a shortfall (Phase C's ``short``)."""
    c = ph.get("propose")
    if not c:
        return {"proposals": None}
    return {"proposals": {"asked": c.get("asked"), "proposed": c.get("proposed"), "short": c.get("short")}}


def epoch_stopped(ph: dict[str, Any]) -> str | None:
    """The budget's stop line of an epoch's summaries (None when it ran to its end)."""
    return (ph.get("budget") or {}).get("stopped")


def _own_items(p: Params) -> dict[str, Any]:
    """The data step of an epoch whose task splits its own items: no search benchmark is written."""
    return {"skipped": "the task splits its own items", "domain": p.evolve.domain}


def _prepare(p: Params, data_dir: Path, pipe: Pipeline) -> dict[str, Any]:
    if not reads_split_files(p):
        return pipe.run("prepare data", _own_items, p)
    k = cache_key("prepare", p, {"data": data_dir})
    return _phase(pipe, "prepare data", phases.prepare_data, (data_dir / "test.jsonl",), k, p, data_dir)


@flow(name="hasp-evolve-epoch", log_prints=True)
def evolve_epoch_flow(params_path: str | None = "params.yaml", out_root: str = "outputs",
                      library: str = str(seed_library("search")), epoch: int = 0) -> dict[str, Any]:
    p = load_params(params_path)
    out, lib = Path(out_root), Path(library)
    data_dir = out / "data"
    code = code_version()
    model_id = _model_identity(p)
    teacher_id = p.teacher.key
    clients = make_clients(p, out)
    phase_out: dict[str, Any] = {}
    stopped: str | None = None
    pipe = Pipeline(f"epoch {epoch}", epoch_phase_count(p) + 4)  # + data, train, evaluate, track
    try:
        phase_out["data"] = _prepare(p, data_dir, pipe)
        keys = RunKeys(model_id, teacher_id)
        ep_phases, carry = run_epoch(p, out, data_dir, lib, epoch, clients, keys, seed_frontier=True, pipe=pipe)
        phase_out.update(ep_phases)
        ep_dir = out / f"epoch_{epoch}"
        stopped = epoch_stopped(ep_phases)
        eval_res = {} if stopped else _train_and_evaluate(p, out, data_dir, lib, carry, ep_dir, clients, model_id,
                                                          phase_out, pipe)
    finally:
        servers_started = clients.started
        clients.close()
    k = key_of(code, tracking_code_version("hasp.track.epoch_report"),
               {n: s for n, s in phase_out.items() if n != "train"}, eval_res,
               p.model_dump(mode="json"), os.environ.get("MLFLOW_TRACKING_URI", str(Path.cwd())))
    run_id = pipe.run("track (MLflow)", phases.track, k, out, p, epoch)
    write_plot_data(out, eval_metrics=out / "eval" / "metrics.json", eval_epoch=epoch)
    arts = publish_epoch(out, epoch, run_id=run_id, eval_metrics=eval_res, eval_dir=out / "eval")
    return {"phases": phase_out, "eval": eval_res, "run_id": run_id, "model_used": servers_started,
            "artifacts": arts, "flow_run_id": str(flow_run.id), "stopped": stopped}


def _train_and_evaluate(p: Params, out: Path, data_dir: Path, lib: Path, carry: Path, ep_dir: Path, clients: Clients,
                        model_id: str, phase_out: dict[str, Any], pipe: Pipeline) -> dict[str, Any]:
    """The single-epoch flow's LoRA SFT (into ``phase_out["train"]``) and its test evaluation (returned)."""
    trained_dir = out / "train" / "merged"
    lay = layout(out, data_dir, ep_dir, lib, evolved=carry)
    train_key = cache_key("train", p, lay, model_id)
    phase_out["train"] = pipe.run("train", phases.train.with_options(
        refresh_cache=p.train.enabled and _fresh(trained_dir / "config.json")),
        train_key, ep_dir / art.SFT, p, out / "train")
    has_trained = (trained_dir / "config.json").exists()

    k = cache_key("evaluate", p, lay, model_id, content_hash(lib))  # lib: the "before" arm's library
    return _phase(pipe, "evaluate", phases.evaluate, (out / "eval" / "metrics.json",),
        k, p, data_dir, carry, out / "eval", policy=clients.policy,
        trained_policy=clients.trained if has_trained else None, teacher=clients.teacher, library_before=lib,
        executor=clients.executor)


@flow(name="hasp-evolve", log_prints=True)
def evolve_flow(epochs: int = 1, mode: str | None = None, filtering: str | None = None,
                params_path: str | None = "params.yaml", out_root: str = "outputs", library: str = str(seed_library("search")),
                start_epoch: int = 0, final_eval: bool = True, val_gate: bool | None = None,
                traces: str | None = None, traces_gold: bool | None = None, domain: str | None = None,
                dataset: str | None = None) -> dict[str, Any]:
    """``epochs`` evolution epochs from ``start_epoch``; ``mode``/``filtering``/``val_gate`` override
    params.yaml, ``traces``/``traces_gold`` override ``evolve.traces.source``/``gold`` (Phase A
    reads those logged traces instead of rolling out, ``hasp.evolve.traces``), and ``domain``/``dataset``
    ``evolve.domain``/``evolve.dataset`` (the task evolved, ``hasp.evolve.epoch_task``).

    Epoch ``i`` starts from the library named in ``epoch_<i-1>/carry.json`` (the previous
    epoch's library, or the restored best snapshot after a rollback); the first epoch of a
    run at ``start_epoch=0`` starts from ``library``. With ``final_eval`` the PF agent and the
    plain ReAct baseline are evaluated on the test split with the final library
    (``<out>/eval_evolution/metrics.json``)."""
    from hasp.evolve.frontier import read_carry

    overrides = {k: v for k, v in (("evolve.mode", mode), ("evolve.filtering", filtering),
                                   ("evolve.val_gate", val_gate), ("evolve.traces.source", traces),
                                   ("evolve.traces.gold", traces_gold), ("evolve.domain", domain),
                                   ("evolve.dataset", dataset)) if v is not None}
    p = load_params(params_path, overrides)
    out = Path(out_root)
    data_dir = out / "data"
    code = code_version()
    clients = make_clients(p, out)
    keys_model = (_model_identity(p), p.teacher.key)
    lib = Path(library)
    if start_epoch > 0:
        prev = read_carry(out / f"epoch_{start_epoch - 1}")
        if prev is None:
            raise FileNotFoundError(f"{out}/epoch_{start_epoch - 1}/carry.json missing: run the earlier epochs first")
        lib = Path(prev["library"])
    start_lib = lib  # the library the run starts from: the final evaluation's "before" arm
    per_epoch: list[dict[str, Any]] = []
    eval_res: dict[str, Any] = {}
    stopped: str | None = None
    ran = list(range(start_epoch, start_epoch + epochs))
    pipe = Pipeline(f"{epochs} epoch(s)", 2 + epochs * epoch_phase_count(p) + int(final_eval))
    try:
        data_sum = _prepare(p, data_dir, pipe)
        keys = RunKeys(*keys_model)
        for i in ran:
            ph, lib = run_epoch(p, out, data_dir, lib, i, clients, keys, seed_frontier=(i == 0), pipe=pipe)
            per_epoch.append(ph)
            if epoch_stopped(ph):  # the budget stopped this epoch (its line is logged): no later epoch runs
                stopped = epoch_stopped(ph)
                break
            phase_result(f"epoch {i}", f"{proposals_line(ph['propose'])}, admitted {ph['admit']['admitted']}, "
                         f"library {ph['admit']['library_size']}, val EM {ph['val_after']['em']:.3f}"
                         + (f", rolled back to epoch {ph['frontier']['rolled_back_to']}"
                            if ph["frontier"]["rolled_back_to"] is not None else ""))
        ran = ran[:len(per_epoch)]
        final_eval = final_eval and stopped is None  # a stopped run's library is not an evolution's result
        if final_eval:
            lay = layout(out, data_dir, out / f"epoch_{ran[-1]}", start_lib, evolved=lib)
            k = cache_key("evaluate", p, lay, keys.model_id, content_hash(start_lib))
            eval_res = _phase(pipe, "evaluate", phases.evaluate, (out / "eval_evolution" / "metrics.json",),
                k, p, data_dir, lib, out / "eval_evolution", policy=clients.policy, trained_policy=None,
                teacher=clients.teacher, library_before=start_lib, executor=clients.executor)
    finally:
        servers_started = clients.started
        clients.close()
    k = key_of(code, tracking_code_version("hasp.track.epoch_report"),
               [{n: s for n, s in ph.items() if n != "frontier"} for ph in per_epoch], eval_res,
               p.model_dump(mode="json"), os.environ.get("MLFLOW_TRACKING_URI", str(Path.cwd())))
    final_metrics = out / "eval_evolution" / "metrics.json" if final_eval else None
    run_id = pipe.run("track (MLflow)", phases.track_evolution, k, out, p, ran, final_metrics)
    write_plot_data(out, eval_metrics=final_metrics, eval_epoch=ran[-1] if ran else 0)
    arts: dict[str, Any] = {"keys": [], "failed": 0}
    for i in ran:  # the final evaluation belongs to the last epoch's summary
        last = i == ran[-1] and final_eval
        one = publish_epoch(out, i, run_id=run_id, eval_metrics=eval_res if last else None,
                            eval_dir=out / "eval_evolution" if last else None)
        arts = {"keys": arts["keys"] + one["keys"], "failed": arts["failed"] + one["failed"]}
    return {"data": data_sum, "epochs": per_epoch, "eval": eval_res, "run_id": run_id,
            "model_used": servers_started, "library": str(lib), "artifacts": arts, "flow_run_id": str(flow_run.id),
            "stopped": stopped}


def proposals_line(summary: dict[str, Any]) -> str:
    """"proposed 3" — or, when the student's endpoint failed, "5 proposals failed: endpoint error"
    first: an outage is never reported as proposals."""
    line = f"proposed {summary['proposed']}"
    return f"{summary['failure']}, {line}" if summary.get("failure") else line


def phases_write_summary(ep_dir: Path, name: str, summary: dict[str, Any]) -> None:
    from hasp.atomic import write_json

    write_json(summary, ep_dir / art.summary_file(name))
