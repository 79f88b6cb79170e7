"""One Prefect task per phase. Each is a typed wrapper over ``hasp.evolve.epoch``.

Tasks take a ``cache_key`` the flow derives from the phase graph (``hasp.evolve.phase_graph.cache_key``:
the phase's code, params keys and upstream files, plus the model's identity); everything else they
receive (paths, live clients, the episode executor of ``runner.kind``) is not part of the key: where
episodes run does not change what they produce. Results (the phase summaries) are persisted so a second run of an
unchanged epoch is served from the cache.

A phase whose model calls failed (its summary counts ``failed_calls``) finishes by raising
``PhaseIncomplete`` with its summary: Prefect records the task as failed, so the outage is never
served from the cache as a result, and the next run of the same inputs retries it. The flow
catches it (``settle``) and carries on with the summary, which says what failed.

Every phase runs inside ``hasp.evolve.budget.metered_phase``: its summary carries what it spent
(``spend``: tokens and calls the run's ``meter`` counted, wall seconds), cached with it. A Phase C the
budget cut (``budget_stop``) is a finished task, not a failure: the flow runs it again when the cache
serves it to a run whose own budget did not cut it (``hasp.flows.evolve.run_epoch``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from hasp import artifacts as art
from hasp.config import Params
from hasp.domains.search.prepare import prepare_data as prepare_search_data
from hasp.evolve import epoch as ep
from hasp.evolve.budget import metered_phase
from hasp.tasks.cache import BY_CACHE_KEY

_opts: dict[str, Any] = dict(cache_policy=BY_CACHE_KEY, persist_result=True)


class PhaseIncomplete(Exception):
    """A phase ran to its end but some model calls failed; ``summary`` is what it produced."""

    def __init__(self, phase: str, summary: dict[str, Any]) -> None:
        super().__init__(f"{phase}: {summary.get('failure') or str(summary.get('failed_calls')) + ' calls failed'}")
        self.phase, self.summary = phase, summary


def _uncached_if_failed(phase: str, summary: dict[str, Any]) -> dict[str, Any]:
    if isinstance(summary, dict) and summary.get("failed_calls"):
        raise PhaseIncomplete(phase, summary)
    return summary


def settle(task_call: Any) -> Any:
    """``task_call`` as the flow calls it, with an incomplete phase returning its summary."""
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return task_call(*args, **kwargs)
        except PhaseIncomplete as e:
            return e.summary
    return call


@task(name="prepare-data", **_opts)
def prepare_data(cache_key: str, params: Params, out_dir: Path) -> dict[str, Any]:
    return prepare_search_data(params, out_dir)


@task(name="A-rollout", **_opts)
def rollout(cache_key: str, params: Params, data_dir: Path, library: Path, out_path: Path, *,
            policy: Any, teacher: Any = None, executor: Any = None, meter: Any = None) -> dict[str, Any]:
    s = metered_phase(meter, lambda: ep.phase_a_rollout(params, data_dir, library, out_path, policy=policy,
                                                        teacher=teacher, executor=executor), params.evolve.budget)
    return _uncached_if_failed("A-rollout", s)


@task(name="A-rollout-from-traces", **_opts)
def rollout_from_traces(cache_key: str, params: Params, out_path: Path) -> dict[str, Any]:
    """Phase A of ``evolve.traces.source``: the logged traces, read into ``rollout.jsonl`` (no model runs).
    The flow's key holds the traces' content hash."""
    from hasp.evolve.traces import phase_a_from_traces

    return metered_phase(None, lambda: phase_a_from_traces(params, out_path))


@task(name="B-analyse", **_opts)
def analyse(cache_key: str, rollout_path: Path, library: Path, params: Params, out_dir: Path, *,
            summarizer: Any = None, epoch: int = 0, meter: Any = None) -> dict[str, Any]:
    s = metered_phase(meter, lambda: ep.analyse(rollout_path, library, params, out_dir, summarizer=summarizer,
                                                epoch=epoch), params.evolve.budget)
    return _uncached_if_failed("B-analyse", s)


@task(name="C-propose", **_opts)
def propose(cache_key: str, clusters_path: Path, library: Path, params: Params, out_path: Path, *,
            student: Any, epoch: int, history_path: Path | None, meter: Any = None,
            guard: Any = None) -> dict[str, Any]:
    s = metered_phase(meter, lambda: ep.propose(clusters_path, library, params, out_path, student=student,
                                                epoch=epoch, history_path=history_path, guard=guard),
                      params.evolve.budget)
    return _uncached_if_failed("C-propose", s)


@task(name="D-validate", **_opts)
def validate(cache_key: str, candidates_path: Path, out_path: Path, *, static: bool = False,
             sandbox: Any = None, action_types: tuple[str, ...] = ("SEARCH", "READ", "FINAL")) -> dict[str, Any]:
    return metered_phase(None, lambda: ep.validate(candidates_path, out_path, static=static, sandbox=sandbox,
                                                   action_types=action_types))


@task(name="E-review", **_opts)
def review(cache_key: str, epoch_dir: Path, library: Path, params: Params, *, teacher: Any = None,
           meter: Any = None) -> dict[str, Any]:
    s = metered_phase(meter, lambda: ep.review(
        epoch_dir / art.CANDIDATES, epoch_dir / art.VALIDATION, epoch_dir / art.CLUSTERS,
        epoch_dir / art.ROLLOUT, library, params, epoch_dir / art.REVIEWS, teacher=teacher),
        params.evolve.budget)
    return _uncached_if_failed("E-review", s)


@task(name="val-rollout", **_opts)
def val_rollout(cache_key: str, params: Params, data_dir: Path, library: Path, out_path: Path, *,
                policy: Any, teacher: Any = None, label: str = "val", executor: Any = None,
                meter: Any = None) -> dict[str, Any]:
    """The PF agent on the val split with ``library`` (the gate's shared baseline, and the
    library after an epoch). Keyed on the library's content, so one run serves both."""
    s = metered_phase(meter, lambda: ep.rollout(params, data_dir, library, "val", out_path, policy=policy,
                                                variant="pf", teacher=teacher, limit=params.evolve.val_limit or None,
                                                label=label, executor=executor), params.evolve.budget)
    s["trajectories"] = str(Path(out_path).resolve())  # where a later cache hit finds the file
    return _uncached_if_failed("val-rollout", s)


@task(name="E2-val-gate", **_opts)
def gate(cache_key: str, epoch_dir: Path, library: Path, params: Params, data_dir: Path,
         baseline: dict[str, Any], *, policy: Any, teacher: Any = None, executor: Any = None,
         meter: Any = None, guard: Any = None) -> dict[str, Any]:
    runs = ep.gate_runners(params, data_dir, epoch_dir, policy=policy, teacher=teacher, executor=executor)
    s = metered_phase(meter, lambda: ep.gate(epoch_dir, library, params, baseline, guard=guard, **runs),
                      params.evolve.budget)
    return _uncached_if_failed("E2-val-gate", s)


@task(name="frontier", cache_policy=NO_CACHE)
def frontier(out_root: Path, epoch: int, library_out: Path, val_summary: dict[str, Any], params: Params, *,
             seed: tuple[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Not cached: cheap, idempotent, and it must see the frontier file as it is now."""
    return ep.frontier_update(out_root, epoch, library_out, val_summary, params, seed=seed)


@task(name="F-admit", **_opts)
def admit(cache_key: str, epoch_dir: Path, library: Path, params: Params, *, epoch: int,
          history_path: Path | None) -> dict[str, Any]:
    return metered_phase(None, lambda: ep.admit_phase(
        epoch_dir / art.CANDIDATES, epoch_dir / art.REVIEWS, epoch_dir / art.CLUSTERS, library,
        epoch_dir / art.LIBRARY, params, epoch=epoch, history_path=history_path))


@task(name="GH-build-data", **_opts)
def build_data(cache_key: str, rollout_path: Path, params: Params, out_dir: Path) -> dict[str, Any]:
    return metered_phase(None, lambda: ep.build_data(rollout_path, params, out_dir))


@task(name="train-sft", **_opts)
def train(cache_key: str, sft_path: Path, params: Params, out_dir: Path) -> dict[str, Any]:
    return ep.train(sft_path, params, out_dir).model_dump(mode="json")


@task(name="evaluate", **_opts)
def evaluate(cache_key: str, params: Params, data_dir: Path, library: Path, out_dir: Path, *,
             policy: Any, trained_policy: Any, teacher: Any = None, library_before: Path | None = None,
             executor: Any = None) -> dict[str, Any]:
    s = ep.evaluate(params, data_dir, library, out_dir, policy=policy, trained_policy=trained_policy,
                    teacher=teacher, library_before=library_before, executor=executor)
    return _uncached_if_failed("evaluate", s)


@task(name="track-mlflow", **_opts)
def track(cache_key: str, out_root: Path, params: Params, epoch: int) -> str:
    from hasp.evolve.epoch_task import domain_name
    from hasp.llm.endpoints import served_model
    from hasp.track.epoch_report import log_epoch

    return log_epoch(out_root, params, epoch=epoch, model=served_model(params.llm), domain=domain_name(params))


@task(name="track-mlflow-evolution", **_opts)
def track_evolution(cache_key: str, out_root: Path, params: Params, epochs: list[int],
                    final_eval: Path | None) -> str:
    from hasp.evolve.epoch_task import domain_name
    from hasp.llm.endpoints import served_model
    from hasp.track.epoch_report import log_evolution

    return log_evolution(out_root, params, epochs, final_eval=final_eval, model=served_model(params.llm),
                         domain=domain_name(params))
