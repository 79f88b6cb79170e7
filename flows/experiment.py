"""The post-training grid (paper App. D.2, Table 13) as a Prefect flow: one preset, or all six.

``experiment_flow(presets=[...])`` runs, with a cached task per phase:

1. the data (reused when the folder is complete) and the untrained agent on the test split, without
   and with PFs;
2. per preset, ``loop.phases`` phases from the base model. V1 (open): the recipe on a frozen library.
   V2 (closed): each phase first runs one evolution epoch (``hasp.flows.evolve.run_epoch``; ``full`` or
   ``lite`` from the preset) with the current checkpoint as policy and student, then refreshes the
   data with the library it carried, then trains from the current checkpoint. Data refresh means: SFT
   and DPO get a new PF-aware rollout pool of the current checkpoint (Phase A) and its rows (the epoch's
   own Phase A rollout when evolution admitted nothing: same checkpoint, skills and questions); RS and
   OPD sample their own rollouts with the new library. Every phase is a new trainer, so the
   learning-rate schedule restarts per phase;
3. per preset, the trained policy on the test split without and with PFs (the final library); a V2
   preset also runs it with the starting library (``trained_pf_start_library``), so its gain splits into
   what training did and what the evolved library adds;
4. one MLflow parent run with a child per preset (``hasp.track.grid_report``).

A checkpoint's identity in every later cache key is the key of the training task that wrote it, so a
re-run of an unchanged grid is served from the cache phase by phase without starting a model server,
and a grid that failed resumes at its first unfinished phase (RS/OPD also at their first unfinished
round). A preset that cannot train (an empty kept set, no rows, a teacher that failed) is recorded with
its one-line error and the grid goes on with the next. Outputs: ``<out>/<preset>/phase_<i>/`` (rollout pool, rows, ``train/``), ``<out>/<preset>/
evolve/epoch_<i>/`` (V2), ``<out>/<preset>/eval/``, ``<out>/eval_untrained/``, ``<out>/grid.json`` and
``<out>/metrics.json`` (what ``dvc exp show`` compares).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from prefect import flow

from hasp import artifacts as art
from hasp.flows.evolve import Clients, RunKeys, _phase, _prepare, code_version, copy_output, epoch_phase_count
from hasp.flows.evolve import run_epoch, tracking_code_version
from hasp.atomic import write_json
from hasp.config import Params, load_params
from hasp.eval.ceiling import CEILING_KEY
from hasp.eval.datasets import load_eval_dataset, parse_dataset_spec
from hasp.eval.paired import START_LIBRARY, add_grid_gains
from hasp.eval.journal import evaluation_code_key
from hasp.eval.summary import hop_counts
from hasp.evolve.phase_graph import cache_key, task_key
from hasp.fingerprint import content_hash, key_of, module_closure
from hasp.pf.library import library_hash
from hasp.progress import Pipeline, phase_result
from hasp.provenance import PROVENANCE_KEY, provenance
from hasp.seeds import seed_library
from hasp.tasks import experiment as texp
from hasp.tasks.episodes import make_executor
from hasp.tasks import phases
from hasp.tasks.cache import output_complete, outputs_complete

GRID_MODULES = ("hasp.train.run", "hasp.train.sampler", "hasp.train.rs", "hasp.train.opd", "hasp.train.dpo",
                "hasp.train.rounds", "hasp.train.hindsight", "hasp.train.presets", "hasp.eval.runner")


def grid_code_version() -> str:
    """The epoch's code key plus the recipes, the sampler and the evaluation runner (not the tracking:
    the grid's MLflow task has its own code key)."""
    return key_of(code_version(), [(f.name, content_hash(f)) for f in module_closure(GRID_MODULES)])


def model_identity(folder: Path) -> str:
    """Content key of a model folder (config, tokenizer and weights)."""
    return content_hash(folder)


class GridClients:
    """The model clients of a grid run, all lazy (a cached run starts no server).

    ``policy(folder)`` is the greedy policy served from a checkpoint; asking for another folder stops
    the previous server first (two cores hold one model server comfortably, not three). ``student``
    samples at the proposal temperature; ``sampler(rollout)`` serves a checkpoint at the rollout's
    temperature and top-p for one sampling call. Tests replace ``make_grid_clients``."""

    def __init__(self, p: Params) -> None:
        from hasp.llm.endpoints import teacher_client

        self.p = p
        self.llm = p.llm.model_copy(update={"base_url": None})  # checkpoints are served from their folders
        self.teacher = teacher_client(p.teacher, p.llm)
        self.executor = make_executor(p.runner)  # where rollout episodes run (runner.kind); None = threads
        self._policies: dict[str, Any] = {}
        self._students: dict[str, Any] = {}

    def _one(self, pool: dict[str, Any], folder: Path, make: Any) -> Any:
        key = str(Path(folder).resolve())
        for k in [k for k in pool if k != key]:
            pool.pop(k).close()
        if key not in pool:
            pool[key] = make(Path(key))
        return pool[key]

    def policy(self, folder: Path) -> Any:
        from hasp.llm.endpoints import LazyPolicy

        return self._one(self._policies, folder, lambda f: LazyPolicy(
            self.llm, model_dir=f, port=self.p.llm.port, max_tokens=self.p.agent.max_tokens))

    def student(self, folder: Path) -> Any:
        from hasp.llm.endpoints import LazyPolicy

        return self._one(self._students, folder, lambda f: LazyPolicy(
            self.llm, model_dir=f, port=self.p.llm.port + 2, max_tokens=self.p.evolve.proposal_max_tokens,
            temperature=self.p.evolve.proposal_temperature))

    def sampler(self, rollout: Any) -> Any:
        from hasp.train.sampler import served_policy

        return served_policy(self.p, rollout)

    def release_student(self) -> None:
        for s in self._students.values():
            s.close()

    @property
    def started(self) -> bool:
        return any(getattr(c, "started", False) for c in (*self._policies.values(), *self._students.values()))

    def close(self) -> None:
        for c in (*self._policies.values(), *self._students.values()):
            c.close()
        if self.executor is not None:
            self.executor.close()


def make_grid_clients(p: Params) -> Any:
    return GridClients(p)


def _preset_params(p: Params, name: str) -> tuple[Params, Any]:
    from hasp.train.presets import apply_preset, get_preset

    preset = get_preset(name)
    update: dict[str, Any] = {"train": apply_preset(p.train, name)}
    if preset.loop.kind == "closed" and preset.loop.evolve_mode:
        update["evolve"] = p.evolve.model_copy(update={"mode": preset.loop.evolve_mode})
    return p.model_copy(update=update), preset


def run_experiment(name: str, p: Params, *, out: Path, data: Path, library: Path, base: Path, base_id: str,
                   code: str, teacher_id: str, data_h: str, clients: Any, pipe: Pipeline) -> dict[str, Any]:
    """One preset: its phases (evolve → refresh → train for V2), then the trained policy's evaluation.

    ``wall_s`` is the training and evaluation time of the tasks that produced the results (kept with
    their cached summaries, so a cached re-run reports the time of the run that did the work); the
    evolution epochs and rollout pools print their own times in the progress log."""
    from hasp.train.objective import policy_rows, rows_for
    from hasp.train.presets import replaced_knobs
    from hasp.train.run import SUMMARY_FILE

    pe, preset = _preset_params(p, name)
    t = pe.train
    replaced = {k: list(v) for k, v in replaced_knobs(p.train, t).items()}
    closed = preset.loop.kind == "closed"
    e_dir = out / name
    agent_h = key_of(p.section_hash("agent", "llm", "harness", "sandbox"), task_key(p))  # and the task
    ckpt, ckpt_id, lib = base, base_id, library
    done: list[dict[str, Any]] = []
    for i in range(preset.loop.phases):
        ph: dict[str, Any] = {"phase": i, "start_model": str(ckpt)}
        ph_dir = e_dir / f"phase_{i}"
        lib_in, ep = lib, None
        if closed:
            ev = Clients(policy=clients.policy(ckpt), student=clients.student(ckpt), trained=None,
                         teacher=clients.teacher, executor=clients.executor)
            ep, lib = run_epoch(pe, e_dir / "evolve", data, lib, i, ev, RunKeys(ckpt_id, teacher_id),
                                seed_frontier=(i == 0), pipe=pipe)
            clients.release_student()
            if (ep.get("budget") or {}).get("stopped"):  # the epoch's budget stopped it (its line is logged)
                ph["evolve"] = {"mode": pe.evolve.mode, "stopped": ep["budget"]["stopped"],
                                "proposed": (ep.get("propose") or {}).get("proposed", 0)}
            else:
                ph["evolve"] = {"mode": pe.evolve.mode, "proposed": ep["propose"]["proposed"],
                                "admitted": ep["admit"]["admitted"], "library_size": ep["admit"]["library_size"],
                                "val_em": ep["val_after"]["em"]}
        ph["library"] = str(lib)
        lib_h = content_hash(lib)
        rows = None
        if t.recipe in ("sft", "dpo"):
            pool = ph_dir / art.ROLLOUT
            a_roll = e_dir / "evolve" / f"epoch_{i}" / art.ROLLOUT
            if ep is not None and library_hash(lib) == library_hash(lib_in) and output_complete(a_roll):
                # evolution admitted nothing: its Phase A rollout already ran this checkpoint with these
                # skills on the training questions, so it is the refreshed pool (not rolled out twice)
                copy_output(a_roll, pool)
                ph["rollout"] = {**ep["rollout"], "reused_from": str(a_roll)}
            else:
                k = cache_key("rollout", pe, {"data": data, "library": lib}, ckpt_id)
                ph["rollout"] = _phase(pipe, f"{name} phase {i}: rollout pool", phases.rollout, (pool,),
                                       k, pe, data, lib, pool, policy=clients.policy(ckpt), teacher=clients.teacher)
            k = cache_key("build_data", pe, {"epoch": ph_dir}, [])
            ph["build_data"] = _phase(pipe, f"{name} phase {i}: rows", phases.build_data, (ph_dir / art.SFT,),
                                      k, pool, pe, ph_dir)
            # this phase's refreshed policy rows and, for train.objective B / AB, this phase's evolution epoch's
            # skill-author rows
            rows = rows_for(t, policy_rows(t, ph_dir), e_dir / "evolve" / f"epoch_{i}" if closed else None).path
            inputs: Any = content_hash(rows)
        else:
            inputs = (data_h, lib_h, agent_h, p.section_hash("eval"))
        k = key_of(code, name, i, ckpt_id, t.model_dump(mode="json"), inputs, p.section_hash("signals"), teacher_id)
        tr = _phase(pipe, f"{name} phase {i}: train {t.recipe}", texp.train_phase, (ph_dir / "train" / SUMMARY_FILE,),
                    k, pe, t, ckpt, ph_dir / "train", rows=rows, data_dir=data, library=lib,
                    sampler_policy=clients.sampler(t.rollout), teacher=clients.teacher,
                    executor=clients.executor, previous=done[-1]["train"] if closed and done else None)
        ph["train"] = tr
        ckpt, ckpt_id = Path(tr["model_dir"]), k
        done.append(ph)
    pf_label = "trained_pf" if clients.teacher is None else "trained_pf_teacher"
    k = key_of(code, data_h, content_hash(lib), agent_h, ckpt_id, teacher_id)
    ev_sum = _phase(pipe, f"{name}: evaluate", texp.evaluate_arms, (e_dir / "eval" / "metrics.json",),
                    k, p, data, lib, e_dir / "eval", policy=clients.policy(ckpt), react_label="trained_react",
                    executor=clients.executor, pf_label=pf_label, teacher=clients.teacher)
    if closed:  # the same policy with the library the grid started from: training's share vs the library's
        start_dir = e_dir / "eval" / "start_library"
        k = key_of(evaluation_code_key(), data_h, content_hash(library), agent_h, ckpt_id, teacher_id)
        ev_sum = {**ev_sum, **_phase(pipe, f"{name}: evaluate with the starting library", texp.evaluate_arms,
                                     (start_dir / "metrics.json",), k, p, data, library, start_dir,
                                     policy=clients.policy(ckpt), react_label=None, executor=clients.executor,
                                     pf_label=pf_label + START_LIBRARY, teacher=clients.teacher)}
    wall = sum(float(ph["train"].get("wall_s", 0.0)) for ph in done) + \
        max((float(s.get("eval_wall_s", 0.0)) for s in ev_sum.values()), default=0.0)
    result = {"name": name, "recipe": t.recipe, "preset": preset.model_dump(mode="json"),
              "train": t.model_dump(mode="json"), "replaced": replaced, "phases": done, "eval": ev_sum,
              "final_model": str(ckpt), "adapter_dir": done[-1]["train"]["adapter_dir"], "library": str(lib), "wall_s": wall}
    write_json(result, e_dir / "experiment.json")
    write_json(flat_metrics(ev_sum, wall), e_dir / "metrics.json")
    phase_result(name, ", ".join(f"{lab} EM {s['em']:.3f}" for lab, s in ev_sum.items()) + f", wall {wall:.0f}s")
    return result


def flat_metrics(summaries: dict[str, Any], wall: float | None = None) -> dict[str, Any]:
    """``{arm: {em, f1, n, n_failed, em_<h>hop, em_<seen|unseen>}}`` (+ wall_s) and the extractor's ceiling
    on the same questions (``extractor_ceiling``: em, n, interval): what DVC reads as metrics."""
    out: dict[str, Any] = {}
    ceiling = None
    for label, s in summaries.items():
        m = {k: s[k] for k in ("em", "f1", "n", "n_failed") if k in s}
        for hop, h in (s.get("em_by_hops") or {}).items():
            m[f"em_{hop}hop"] = h.get("mean")
        for group, h in (s.get("em_by_template") or {}).items():
            m[f"em_{group}"] = h.get("mean")
        out[label] = m
        ceiling = ceiling or s.get(CEILING_KEY)
    if ceiling and ceiling.get("n"):
        out["extractor_ceiling"] = {"em": ceiling["em"], "n": ceiling["n"], "lo": ceiling["em_ci95"][0],
                                    "hi": ceiling["em_ci95"][1]}
    if wall is not None:
        out["wall_s"] = round(wall, 1)
    return out


def flat_gains(gains: dict[str, Any]) -> dict[str, Any]:
    """``{"<arm>_vs_<base arm>": {mean, lo, hi, n}}``: the paired gains as DVC metrics."""
    return {pair.replace(" - ", "_vs_"): {"mean": g["mean"], "lo": g["ci95"][0], "hi": g["ci95"][1], "n": g["n"]}
            for pair, g in gains.items()}


@flow(name="hasp-experiment-grid", log_prints=True)
def experiment_flow(presets: list[str], params_path: str | None = "params.yaml", out_root: str = "outputs/experiment",
                    library: str = str(seed_library("search")), data_dir: str | None = None, model: str | None = None,
                    run_name: str | None = None) -> dict[str, Any]:
    """Run ``presets`` (e.g. ``["E3_cpu"]`` or the six) from ``model`` (default: the embedded model)."""
    from hasp.llm.endpoints import served_model
    from hasp.train.presets import PresetError, get_preset
    from hasp.train.rounds import RecipeError
    from hasp.train.run import resolve_model

    p = load_params(params_path)
    for i, n in enumerate(presets):
        start = get_preset(n, key="experiment").start  # an unknown name fails before anything runs
        if start is not None and start not in presets[:i] and model is None:
            raise PresetError(f"experiment: {n} starts from {start}'s checkpoint: run {start} before it in the same "
                              f"grid (hasp experiment grid), or name the start checkpoint with --model")
    out, lib = Path(out_root), Path(library)
    data = Path(data_dir) if data_dir else out / "data"
    code = grid_code_version()
    base = resolve_model(model, p.llm.embedded, p.llm.chat_format)
    base_id = model_identity(base)
    teacher_id = p.teacher.key
    clients = make_grid_clients(p)
    closed_loops = [get_preset(n).loop for n in presets if get_preset(n).loop.kind == "closed"]
    n_epochs = sum(loop.phases for loop in closed_loops)
    pipe = Pipeline(f"grid {', '.join(presets)}",
                    3 + 4 * len(presets) + len(closed_loops) + n_epochs * (epoch_phase_count(p) + 1))
    experiments: dict[str, Any] = {}
    spans: dict[str, tuple[float, float]] = {}  # when each preset ran in this command (MLflow run times)
    started = time.time()
    try:
        if not outputs_complete(data / "corpus.jsonl", data / "train.jsonl", data / "test.jsonl"):
            _prepare(p, data, pipe)
        data_h = content_hash(data)
        prov = provenance(params=p, data_dir=data, library=lib, model=served_model(p.llm, base))
        k = key_of(evaluation_code_key(), data_h, content_hash(lib), p.section_hash("agent", "llm", "harness", "sandbox"),
                   task_key(p), base_id, teacher_id)
        untrained = _phase(pipe, "evaluate untrained", texp.evaluate_arms, (out / "eval_untrained" / "metrics.json",),
                           k, p, data, lib, out / "eval_untrained", policy=clients.policy(base),
                           executor=clients.executor,
                           react_label="untrained_react",
                           pf_label="untrained_pf" if clients.teacher is None else "untrained_pf_teacher",
                           teacher=clients.teacher)
        for n in presets:
            t0 = time.time()
            start, start_id = base, base_id
            if get_preset(n).start in experiments:  # a checkpoint of an earlier preset of this grid
                before = experiments.get(str(get_preset(n).start)) or {}
                if "final_model" not in before:
                    experiments[n] = {"name": n, "error": f"starts from {get_preset(n).start}'s checkpoint, "
                                                          "which this grid did not train"}
                    phase_result(n, f"failed: {experiments[n]['error']}")
                    continue
                start = Path(before["final_model"])
                start_id = model_identity(start)
            try:
                experiments[n] = run_experiment(n, p, out=out, data=data, library=lib, base=start, base_id=start_id,
                                                code=code, teacher_id=teacher_id, data_h=data_h, clients=clients,
                                                pipe=pipe)
            except RecipeError as e:  # nothing to train on, a teacher that failed: this preset only
                experiments[n] = {"name": n, "error": str(e)}
                phase_result(n, f"failed: {e}")
            spans[n] = (t0, time.time())
    finally:
        servers_started = clients.started
        clients.close()
    grid = {"presets": list(presets), "base_model": str(base), "untrained": untrained, "experiments": experiments}
    test = load_eval_dataset(parse_dataset_spec("generated"), p, split="test", data_dir=data)
    add_grid_gains(out, grid, hop_counts(test.questions), test.template_seen)
    write_json({**grid, PROVENANCE_KEY: prov.to_dict()}, out / "grid.json")
    metrics: dict[str, Any] = {"untrained": flat_metrics(untrained)}
    ran = {n: e for n, e in experiments.items() if "error" not in e}
    if len(presets) == 1:  # one preset per DVC experiment: the same keys in every row of `dvc exp show`
        e = ran.get(presets[0])
        metrics["trained"] = flat_metrics(e["eval"], e["wall_s"]) if e else {}
        metrics["gain"] = flat_gains(e.get("gains", {})) if e else {}
    else:
        metrics.update({n: {**flat_metrics(e["eval"], e["wall_s"]), "gain": flat_gains(e.get("gains", {}))}
                        for n, e in ran.items()})
    write_json({**metrics, PROVENANCE_KEY: prov.to_dict()}, out / "metrics.json")
    k = key_of(code, tracking_code_version("hasp.track.grid_report"), grid, p.model_dump(mode="json"),
               os.environ.get("MLFLOW_TRACKING_URI", str(Path.cwd())), run_name)
    tracked = pipe.run("track (MLflow)", texp.track_grid, k, out, p, grid, run_name or f"grid-{'-'.join(presets)}",
                       {"grid": (started, time.time()), **spans}, provenance=prov)
    return {**grid, **tracked, "model_used": servers_started}
