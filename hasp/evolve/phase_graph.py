"""The epoch's phase graph, declared once: what each phase's output depends on.

A phase names the params keys it reads, the ``hasp`` modules that run it (with every ``hasp`` module
they import and the prompt files beside them) and the files of earlier phases it reads. Both
orchestrations are derived from this table:

- the Prefect flows key each cached task on ``cache_key`` (declared code, params and inputs, plus
  what only a live run knows: the model's identity, the epoch, the proposal history);
- ``dvc.yaml``'s stages list the same files as ``deps`` and the same keys as ``params``
  (``hasp dvc-yaml`` writes the file from ``hasp.evolve.dvc_yaml``; a test checks the committed one).

A knob or file left out here is left out of both, so ``dvc repro`` and the Prefect cache re-run the
same phases when something changes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasp import artifacts as art
from hasp.fingerprint import content_hash, key_of, module_closure, package_dir

#: where a run keeps its artifacts, by role; dvc.yaml's stages run on this layout
DVC_LAYOUT: Mapping[str, str] = {"data": "outputs/data", "epoch": "outputs/epoch_0", "library": "hasp/skills/search",
                                 "evolved": "outputs/epoch_0/library", "train": "outputs/train", "eval": "outputs/eval",
                                 "out": "outputs"}

def _seed_imports(domain: str = "search") -> tuple[str, ...]:
    """The ``hasp`` modules the shipped seed ``pf.py`` files of ``domain`` import, read from their code:
    a phase that runs the skills runs these too (``hasp.pf.teacher`` as well: the runtime wraps every
    teacher). Names that are not modules (``from m import f`` also yields ``m.f``) are left out."""
    from hasp.fingerprint import is_module, package_imports
    from hasp.seeds import seed_library

    found = {"hasp.pf.teacher"}
    for pf in sorted(seed_library(domain).glob("*/pf.py")):
        found.update(m for m in package_imports(pf.read_text(encoding="utf-8"), "hasp") if is_module(m))
    return tuple(sorted(found))


#: modules the library's pf.py files import: a phase that runs the skills runs them too
SKILL_RUNTIME = _seed_imports()
#: where the epoch's phase functions live (each phase runs through it)
EPOCH_FILE = "hasp/evolve/epoch.py"
#: the policy's rollout: the one episode recipe (its closure holds the agent loop, the harness, the
#: parser, the environments and the domains), the search task, the library and the skills it loads
ROLLOUT_MODULES = ("hasp.episode.spec", "hasp.episode.domains", "hasp.agent.rollout", "hasp.agent.variants",
                   "hasp.domains.search.task", "hasp.pf.library", "hasp.eval.summary", "hasp.evolve.epoch_task",
                   *SKILL_RUNTIME)
#: which task an epoch evolves: every phase that loads its library or asks about its actions reads it
DOMAIN_PARAMS = ("evolve.domain",)
#: which items a split holds: the task, its dataset, and how a pool without split files is split
TASK_PARAMS = (*DOMAIN_PARAMS, "evolve.dataset", "data.seed", "data.n_questions", "data.fractions")
#: what a policy episode reads: the agent, the harness, the sandbox, every model endpoint and the task
EPISODE_PARAMS = ("agent", "harness", "sandbox", "llm", "teacher", *TASK_PARAMS)


@dataclass(frozen=True)
class Phase:
    """One phase: its inputs (``params``, ``modules`` + ``files``, ``inputs``) and, for its DVC stage,
    the ``hasp`` command and what it writes. Paths are templates over a layout's roles
    (``{epoch}/`` + a ``hasp.artifacts`` name)."""

    name: str
    modules: tuple[str, ...]
    params: tuple[str, ...] = ()  # a section ("agent") or one key ("evolve.proposal_format")
    inputs: tuple[str, ...] = ()  # artifacts of earlier phases
    files: tuple[str, ...] = (EPOCH_FILE,)  # code that is not a hasp module import (phase functions, presets)
    cmd: str | None = None  # the DVC stage's command; None: a phase only the Prefect flow runs
    outs: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()


def _epoch(*names: str) -> tuple[str, ...]:
    return tuple(f"{{epoch}}/{n}" for n in names)


PHASES: tuple[Phase, ...] = (
    # "data" covers every data knob, data.version (which generator) among them
    Phase("prepare", ("hasp.domains.search.prepare",), ("data",), files=(),
          cmd="hasp data prepare --out {data}",
          outs=("{data}/corpus.jsonl", "{data}/train.jsonl", "{data}/val.jsonl", "{data}/test.jsonl",
                "{data}/templates.json"),
          metrics=("{data}/summary.json",)),
    # evolve.traces.source set: Phase A reads logged traces instead (their content is a key extra of the flow)
    Phase("rollout", (*ROLLOUT_MODULES, "hasp.evolve.traces"), (*EPISODE_PARAMS, "evolve.prefilter", "evolve.traces"),
          ("{data}/corpus.jsonl", "{data}/train.jsonl", "{library}"),
          cmd="hasp evolve rollout --epoch-dir {epoch} --library {library} --data {data}",
          outs=_epoch(art.ROLLOUT, art.HELDOUT), metrics=_epoch(art.summary_file("rollout"))),
    Phase("analyse", ("hasp.evolve.detectors", "hasp.evolve.cluster", "hasp.evolve.summarize", "hasp.pf.library",
                      "hasp.evolve.trace_signals"),
          ("evolve.mode", "evolve.lite_failures", "evolve.min_cluster_size", "evolve.summarizer", "evolve.traces",
           "evolve.summarizer_temperature", "evolve.summarizer_max_tokens", "evolve.summarizer_retries",
           "evolve.summarizer_max_failures", "llm", "teacher", "sandbox", *DOMAIN_PARAMS),
          (*_epoch(art.ROLLOUT), "{library}"),
          cmd="hasp evolve analyse --epoch-dir {epoch} --library {library}",
          outs=_epoch(art.FAILURES, art.SUMMARIES, art.CLUSTERS), metrics=_epoch(art.summary_file("analyse"))),
    Phase("propose", ("hasp.evolve.propose", "hasp.evolve.declarative", "hasp.evolve.cluster", "hasp.agent.replay",
                      "hasp.llm.structured", "hasp.pf.library"),
          ("evolve.mode", "evolve.max_candidates", "evolve.lite_max_candidates", "evolve.proposal_format",
           "evolve.proposals_per_cluster", "evolve.structured_output", "evolve.proposal_temperature",
           "evolve.proposal_max_tokens", "evolve.declarative_max_tokens", "agent.max_steps", "llm", "sandbox",
           *DOMAIN_PARAMS),
          (*_epoch(art.CLUSTERS, art.ROLLOUT), "{library}"),
          cmd="hasp evolve propose --epoch-dir {epoch} --library {library}",
          outs=_epoch(art.CANDIDATES), metrics=_epoch(art.summary_file("propose"))),
    Phase("validate", ("hasp.evolve.validate", "hasp.evolve.declarative", "hasp.evolve.gate", "hasp.evolve.propose",
                       "hasp.evolve.cluster", "hasp.pf.sandboxed", "hasp.pf.sandbox_driver", "hasp.sandbox.child"),
          ("evolve.mode", "evolve.filtering", "evolve.val_gate", "sandbox", *DOMAIN_PARAMS),
          _epoch(art.CANDIDATES, art.ROLLOUT, art.CLUSTERS),
          cmd="hasp evolve validate --epoch-dir {epoch}",
          outs=_epoch(art.VALIDATION), metrics=_epoch(art.summary_file("validate"))),
    Phase("review", ("hasp.evolve.review", "hasp.evolve.declarative", "hasp.evolve.cluster", "hasp.pf.sandboxed",
                     "hasp.pf.library", "hasp.llm.endpoints"),
          ("sandbox", "teacher", "llm", *DOMAIN_PARAMS),
          (*_epoch(art.CANDIDATES, art.VALIDATION, art.CLUSTERS, art.ROLLOUT), "{library}"),
          cmd="hasp evolve review --epoch-dir {epoch} --library {library}",
          outs=_epoch(art.REVIEWS), metrics=_epoch(art.summary_file("review"))),
    # the PF agent on the val split with one library: the val gate's baseline and the library after the
    # epoch (the DVC gate stage runs its baseline itself)
    Phase("val_rollout", ROLLOUT_MODULES, (*EPISODE_PARAMS, "evolve.val_limit"),
          ("{data}/corpus.jsonl", "{data}/val.jsonl")),
    # the anchors file's content is a key extra of the flow (a params value is a path, not a content key)
    Phase("gate", (*ROLLOUT_MODULES, "hasp.evolve.gate", "hasp.evolve.admit", "hasp.evolve.review",
                   "hasp.evolve.anchors", "hasp.evolve.judge_gate", "hasp.evolve.heldout", "hasp.evolve.trace_judge"),
          (*EPISODE_PARAMS, "evolve.mode", "evolve.filtering", "evolve.val_gate", "evolve.val_rule",
           "evolve.val_limit", "evolve.r_skill_lambda", "evolve.anchors", "evolve.traces"),
          ("{data}/corpus.jsonl", "{data}/val.jsonl",
           *_epoch(art.CANDIDATES, art.VALIDATION, art.REVIEWS, art.CLUSTERS, art.HELDOUT), "{library}"),
          cmd="hasp evolve gate --epoch-dir {epoch} --library {library} --data {data}",
          outs=_epoch(art.GATE, art.ANCHORS, art.JUDGE_GATE), metrics=_epoch(art.summary_file("gate"))),
    Phase("admit", ("hasp.evolve.admit", "hasp.evolve.gate", "hasp.evolve.propose", "hasp.evolve.review",
                    "hasp.evolve.cluster", "hasp.evolve.anchors", "hasp.evolve.judge_gate", "hasp.pf.library"),
          ("evolve.mode", "evolve.filtering", "evolve.val_gate", "evolve.r_skill_lambda", "evolve.max_library_size",
           "evolve.anchors", "evolve.traces", "sandbox", *DOMAIN_PARAMS),
          (*_epoch(art.CANDIDATES, art.VALIDATION, art.REVIEWS, art.GATE, art.ANCHORS, art.JUDGE_GATE,
                   art.CLUSTERS), "{library}"),
          cmd="hasp evolve admit --epoch-dir {epoch} --library {library}",
          outs=_epoch(art.LIBRARY, art.ADMISSION), metrics=_epoch(art.summary_file("admit"))),
    Phase("build_data", ("hasp.signals.coarse", "hasp.train.data", "hasp.train.hindsight", "hasp.evolve.declarative"),
          ("signals", "evolve.r_skill_lambda", "train.sft"),
          _epoch(art.ROLLOUT, art.CANDIDATES, art.REVIEWS, art.VALIDATION, art.GATE, art.ADMISSION),
          cmd="hasp evolve build-data --epoch-dir {epoch}",
          outs=_epoch(art.SFT, art.DPO, art.SFT_SKILL, art.DPO_SKILL, art.SKILL_RECORDS),
          metrics=_epoch(art.DATA_SUMMARY, art.summary_file("build_data"))),
    # train.objective (in the train section) picks Objective A's rows, the skill author's, or both
    Phase("train", ("hasp.train.run", "hasp.train.sft", "hasp.train.presets", "hasp.train.objective"), ("train",),
          _epoch(art.SFT, art.SFT_SKILL, art.SKILL_RECORDS),
          files=(EPOCH_FILE, "hasp/train/presets.yaml"),
          cmd=f"hasp train sft --data {{epoch}}/{art.SFT} --out {{train}}",
          outs=("{train}/adapter", "{train}/merged"), metrics=("{train}/train_metrics.json",)),
    Phase("evaluate", ("hasp.eval.runner", "hasp.eval.datasets", *ROLLOUT_MODULES), (*EPISODE_PARAMS, "eval"),
          ("{data}/corpus.jsonl", "{data}/test.jsonl", "{evolved}", "{train}/merged"),
          cmd="hasp eval --domain search --dataset generated --data {data} --variants react,pf "
              "--library {evolved} --trained {train}/merged --out {eval} --run-name epoch_0-eval --no-progress",
          outs=("{eval}/generated",), metrics=("{eval}/metrics.json",)),
    Phase("track", ("hasp.track.epoch_report", "hasp.track.dvc_plots"), ("tracking",),
          ("{eval}/metrics.json", "{train}/train_metrics.json", *_epoch(art.summary_file("admit")), "{evolved}"),
          files=(), cmd="hasp track epoch --out {out} --epoch 0",
          outs=(*_epoch(art.MLFLOW_RUN_ID), "{out}/plots/train_steps.json", "{out}/plots/epochs.json",
                "{out}/plots/test.json")),
    # one preset of the post-training grid per DVC experiment (train.preset; null runs nothing)
    Phase("experiment", ("hasp.cli.experiment", "hasp.train.run", "hasp.train.sampler", "hasp.train.rs",
                         "hasp.train.opd", "hasp.train.dpo", "hasp.train.rounds", "hasp.train.hindsight",
                         "hasp.train.presets", "hasp.eval.runner", "hasp.evolve.epoch"),
          ("train", "agent", "harness", "evolve", "signals", "sandbox", "eval", "llm", "teacher", "tracking"),
          ("{data}/corpus.jsonl", "{data}/train.jsonl", "{data}/val.jsonl", "{data}/test.jsonl", "{library}"),
          files=("hasp/train/presets.yaml", "flows", "tasks"),
          cmd="hasp experiment run --optional --params params.yaml --data {data} --out {out}/experiment "
              "--library {library}",
          metrics=("{out}/experiment/metrics.json",)),
)

BY_NAME: Mapping[str, Phase] = {ph.name: ph for ph in PHASES}


@dataclass(frozen=True)
class Step:
    """One step of an epoch, in the order ``run_epoch`` (the Prefect flow) runs them and the ``hasp evolve``
    stages rebuild the budget's ledger (``hasp.evolve.budget.ledger_of``). A graph phase may run more
    than once an epoch (``val_rollout``: the val baseline and the library after it)."""

    name: str  # its summary_<name>.json, its entry in the budget's ledger and in the flow's summaries
    phase: str | None  # the graph phase it runs (what its cache key is declared by); None: not in the graph
    label: str  # how the progress lines and the budget's stop line name it
    optional: bool = False  # runs only when hasp.evolve.gate.epoch_phases lists it
    metered: bool = True  # counts in the epoch's budget ledger (the frontier calls no model)
    writes: tuple[str, ...] = ()  # epoch-folder files of the step beyond its graph phase's outs (hasp.artifacts)


#: the epoch's steps in the order they run, declared once
EPOCH_STEPS: tuple[Step, ...] = (
    Step("rollout", "rollout", "A rollout"),
    Step("analyse", "analyse", "B analyse"),
    Step("propose", "propose", "C propose"),
    Step("validate", "validate", "D validate", optional=True),
    Step("review", "review", "E review", optional=True),
    Step("val_baseline", "val_rollout", "val baseline", writes=(art.VAL_BASELINE,)),
    Step("gate", "gate", "E2 val gate", optional=True, writes=(art.VAL_RUNS, art.ANCHOR_RUNS, art.JUDGE_RUNS)),
    Step("admit", "admit", "F admit"),
    Step("val_after", "val_rollout", "val after", writes=(art.VAL_AFTER,)),
    Step("frontier", None, "frontier", metered=False, writes=(art.CARRY,)),
    Step("build_data", "build_data", "G-H build data"),
)
STEP: Mapping[str, Step] = {s.name: s for s in EPOCH_STEPS}


def epoch_outs(name: str) -> tuple[str, ...]:
    """What graph phase ``name`` writes into the epoch folder, as names in it (``hasp.artifacts``)."""
    return tuple(o.removeprefix("{epoch}/") for o in BY_NAME[name].outs if o.startswith("{epoch}/"))


def step_outputs(name: str) -> tuple[str, ...]:
    """Everything step ``name`` leaves in the epoch folder (its phase's outs and metrics, its own files),
    as names in it: what is removed when a run stops before the step, so an earlier run's cannot pass for it."""
    step = STEP[name]
    ph = BY_NAME[step.phase] if step.phase else None
    graph = [o.removeprefix("{epoch}/") for o in ((*ph.outs, *ph.metrics) if ph else ())
             if o.startswith("{epoch}/")]
    return tuple(dict.fromkeys((*graph, *step.writes)))


def epoch_order(run_phases: Collection[str]) -> tuple[str, ...]:
    """The steps one epoch runs, in order: an optional one only when ``run_phases``
    (``hasp.evolve.gate.epoch_phases``) lists it."""
    return tuple(s.name for s in EPOCH_STEPS if not s.optional or s.name in run_phases)


def repo_root() -> Path:
    """The folder holding the ``hasp`` package (paths in the graph are relative to it)."""
    return package_dir("hasp").parent


def code_paths(ph: Phase) -> list[str]:
    """The phase's code, relative to the repository: the module closure of ``modules``, the
    ``prompts/`` folder of every package in it, and ``files``."""
    root = repo_root()
    sources = module_closure(ph.modules)
    prompts = {f.parent / "prompts" for f in sources if (f.parent / "prompts").is_dir()}
    rel = {str(p.relative_to(root)) for p in [*sources, *prompts]}
    return sorted(rel | set(ph.files))


def code_key(ph: Phase) -> str:
    """Fingerprint of the phase's code (names and contents of ``code_paths``)."""
    root = repo_root()
    return key_of(*[(p, content_hash(root / p)) for p in code_paths(ph)])


def params_values(params: Any, keys: Iterable[str]) -> dict[str, Any]:
    """The values of ``keys`` (``section`` or ``section.key``) in a ``Params``, as JSON-able data."""
    out: dict[str, Any] = {}
    for dotted in keys:
        node: Any = params
        for part in dotted.split("."):
            node = getattr(node, part)
        out[dotted] = node.model_dump(mode="json") if hasattr(node, "model_dump") else node
    return out


def resolve(template: str, layout: Mapping[str, Path | str]) -> Path:
    return Path(template.format(**{k: str(v) for k, v in layout.items()}))


def cache_key(name: str, params: Any, layout: Mapping[str, Path | str], *extras: Any) -> str:
    """The Prefect cache key of phase ``name``: its code, the values of its params keys and the content
    of its inputs under ``layout``, plus ``extras`` (what the graph cannot see: model identity, epoch,
    earlier proposal feedback ...)."""
    ph = BY_NAME[name]
    inputs = [content_hash(resolve(i, layout)) for i in ph.inputs]
    if set(DOMAIN_PARAMS) & set(ph.params):  # a user task's own code is code this phase runs
        from hasp.evolve.epoch_task import task_code_key

        extras = (*extras, task_code_key(params))
    return key_of(name, code_key(ph), json.dumps(params_values(params, ph.params), sort_keys=True), inputs, *extras)


def task_key(params: Any) -> str:
    """Which task and items a run outside the phase graph reads (an experiment's training sampler and
    its evaluation): the ``TASK_PARAMS`` values and the code of a user task."""
    from hasp.evolve.epoch_task import task_code_key

    return key_of(json.dumps(params_values(params, TASK_PARAMS), sort_keys=True), task_code_key(params))


def epoch_code_paths() -> list[str]:
    """Every code path of the epoch's phases (what a run-level code key covers)."""
    return sorted({p for ph in PHASES if ph.name not in ("track", "experiment") for p in code_paths(ph)})
