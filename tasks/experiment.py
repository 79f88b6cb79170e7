"""Prefect tasks of the post-training grid: train one phase of a preset, evaluate arms, log the grid.

Like ``hasp.tasks.phases`` each task takes a ``cache_key`` the flow builds from content hashes (data,
library, checkpoint identity, the resolved train section); live clients and paths are not part of
it. The evolution epochs and the rollout pool reuse ``hasp.tasks.phases`` unchanged.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from prefect import task

from hasp.config import Params, TrainParams
from hasp.provenance import Provenance
from hasp.tasks.cache import BY_CACHE_KEY

log = logging.getLogger(__name__)

_opts: dict[str, Any] = dict(cache_policy=BY_CACHE_KEY, persist_result=True)


@task(name="train-phase", **_opts)
def train_phase(cache_key: str, params: Params, train: TrainParams, model: Path, out_dir: Path, *,
                rows: Path | None = None, data_dir: Path | None = None, library: Path | None = None,
                sampler_policy: Any = None, teacher: Any = None, executor: Any = None,
                previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """One training phase: sft/dpo on ``rows``; rs/opd/grpo/sage sample the train split with ``library`` through
    ``sampler_policy`` (``model_dir -> policy context``), on threads or through ``executor``
    (``runner.kind``). Finished RS/OPD rounds in ``out_dir`` are
    reused, so a phase that failed half-way resumes at its first unfinished round. A phase that trains
    nothing (``train.enabled: false``) has no checkpoint for the next one: that is a ``RecipeError``.

    A later phase of a closed loop (``previous``: the summary of the phase before) whose sampled episodes
    leave nothing to train on (no SFT rows, no DPO pair, an empty RS kept set, no OPD state:
    ``NoRowsError``) keeps ``model`` and the previous adapter, and its summary says why: that is a result
    of the loop, not a reason to lose the earlier phases and the evolved library (the epoch's own train
    step skips the same way). A first phase has no checkpoint to keep: there it stays the preset's one
    error line."""
    from hasp.train.rounds import NoRowsError, RecipeError
    from hasp.evolve.chain_skill import chain_grower
    from hasp.train.inputs import SAMPLING_RECIPES, recipe_inputs
    from hasp.train.run import run_recipe, skip_training

    kw: dict[str, Any] = {}
    if train.recipe in SAMPLING_RECIPES:
        from hasp.evolve.epoch_task import epoch_task

        assert data_dir is not None
        kw = recipe_inputs(params, train, epoch_task(params, data_dir), library, out_dir=out_dir,
                           grower=chain_grower(params, gold=True),
                           policy_for=sampler_policy, teacher=teacher, executor=executor)
    try:
        summary = run_recipe(params, model=model, out_dir=out_dir, train=train, rows=rows, inputs_key=cache_key, **kw)
    except NoRowsError as e:
        if previous is None:
            raise
        kept = skip_training(train, out_dir, f"{e}; the phase keeps its start checkpoint", start_model=str(model),
                             model_dir=str(model), adapter_dir=previous.get("adapter_dir"),
                             rows=str(rows) if rows else None)
        log.warning("%s", kept.skipped)
        return kept.model_dump(mode="json")
    if summary.skipped:
        raise RecipeError(f"{train.preset or train.recipe}: {summary.skipped}")
    return summary.model_dump(mode="json")


@task(name="evaluate-arms", **_opts)
def evaluate_arms(cache_key: str, params: Params, data_dir: Path, library: Path, out_dir: Path, *,
                  policy: Any, react_label: str | None, pf_label: str, teacher: Any = None,
                  executor: Any = None) -> dict[str, Any]:
    """One policy on the test split, without PFs (plain ReAct; no such arm when ``react_label`` is None)
    and with them (the PF agent, with the teacher when one is configured), through the one evaluation
    runner: ``{label: summary}``; failed episodes are counted in each summary's ``n_failed`` (a cell
    where all failed raises)."""
    from hasp.eval.runner import Arm, run_eval
    from hasp.agent.variants import get_variant
    from hasp.episode.spec import pipeline_variant
    from hasp.evolve.epoch_task import epoch_task

    t0 = time.perf_counter()
    ds = epoch_task(params, data_dir).dataset(params, data_dir, "test")  # evolve.domain's test split
    pf = get_variant(pipeline_variant("pf", teacher, params))
    arms = [Arm(react_label, get_variant("react"), policy)] if react_label else []
    arms.append(Arm(pf_label, pf, policy))
    res = run_eval(params, [ds], arms, policy=policy, library_root=library, out_dir=out_dir, teacher=teacher,
                   teacher_snippets=False, progress=True, executor=executor)
    out = res.metrics()[ds.name]
    wall = time.perf_counter() - t0
    for s in out.values():
        s["eval_wall_s"] = wall
    return out


@task(name="track-grid", **_opts)
def track_grid(cache_key: str, out_root: Path, params: Params, grid: dict[str, Any], name: str,
               spans: dict[str, tuple[float, float]] | None = None,
               provenance: Provenance | None = None) -> dict[str, Any]:
    from hasp.track.grid_report import log_grid

    return log_grid(out_root, params, grid, run_name=name, spans=spans, provenance=provenance)
