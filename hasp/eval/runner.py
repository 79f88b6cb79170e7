"""Run agent variants over evaluation datasets: one cell per (dataset, variant).

Episodes of a cell run concurrently through ``run_many`` (thread pool + progress bar). Every
episode gets a fresh environment (plain BM25 tools, or the teacher-snippet wrapper) and, only for
variants with ``use_teacher``, the teacher. An episode that raises (endpoint down after retries,
a harness bug) is recorded as ``terminated="error"``, logged and counted instead of discarding the
whole evaluation; a cell in which *every* episode raised stops the run with that error, since its
numbers would mean nothing.

Outputs under ``out_dir``: ``<dataset>/<variant>.jsonl`` (trajectories), ``<dataset>/<variant>.
episodes.jsonl`` (judge verdicts, snippet stats, start times) and ``metrics.json``
(``{dataset: {variant: summary}}``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hasp.agent.loop import Policy
from hasp.records import Trajectory
from hasp.agent.rollout import run_many, write_trajectories
from hasp.agent.variants import Variant, get_variant
from hasp.config import Params
from hasp.domains.search.generator import QAItem
from hasp.domains.search.task import score
from hasp.domains.search.teacher_snippets import TeacherSnippetEnvironment
from hasp.agent.loop import episode_runner
from hasp.domains.search.tools import SearchEnvironment
from hasp.eval.datasets import EvalDataset
from hasp.eval.judge import judge_answer
from hasp.eval.records import EpisodeRecord
from hasp.eval.summary import summarize_cell

log = logging.getLogger(__name__)


@dataclass
class CellResult:
    dataset: str
    variant: str
    summary: dict[str, Any]
    records: list[EpisodeRecord]
    trajectories_path: Path


@dataclass
class EvalResult:
    cells: list[CellResult]
    out_dir: Path
    library_hash: str = ""
    library_size: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for c in self.cells:
            out.setdefault(c.dataset, {})[c.variant] = c.summary
        return out


def uses_teacher(variant: Variant) -> bool:
    """Variants opt into the teacher (``pf_teacher``, ``teacher_only``); older variants have no flag."""
    return bool(getattr(variant, "use_teacher", False))


def run_eval(params: Params, datasets: Sequence[EvalDataset], variants: Sequence[str], *, policy: Policy,
             library_root: Path | None, out_dir: Path, teacher: Any = None, judge: bool = False,
             teacher_snippets: bool | None = None, progress: bool = True) -> EvalResult:
    """Evaluate every variant on every dataset and write the outputs; see the module docstring.

    ``teacher_snippets=None`` reads ``params.eval.teacher_snippets``. Snippet mode is a property of
    the environment, so it applies to all variants (a fair comparison); it needs a teacher, as
    does ``judge``."""
    from hasp.atomic import write_json
    from hasp.pf.library import load_library
    from hasp.atomic import write_jsonl

    vs = [get_variant(v) for v in variants]
    snippets = params.eval.teacher_snippets if teacher_snippets is None else teacher_snippets
    if teacher is None:
        check_teacher_needs(vs, judge=judge, snippets=snippets, have_teacher=False)
    lib = load_library(library_root, "search") if library_root is not None else None
    for err in (lib.load_errors if lib is not None else []):
        log.warning("skill library: %s", err)
    out_dir = Path(out_dir)
    cells: list[CellResult] = []
    try:
        for ds in datasets:
            for v in vs:
                t0 = time.perf_counter()
                fn = _episode_fn(params, ds, v, policy=policy, lib=lib, teacher=teacher, judge=judge,
                                 snippets=snippets)
                records = run_many(ds.questions, fn, concurrency=params.llm.max_concurrency,
                                   desc=f"{ds.name}:{v.name}", progress=progress)
                wall = time.perf_counter() - t0
                _raise_if_all_failed(records, ds.name, v.name)
                path = out_dir / ds.name / f"{v.name}.jsonl"
                write_trajectories([r.traj for r in records], path)
                write_jsonl((r.extras() for r in records), out_dir / ds.name / f"{v.name}.episodes.jsonl")
                summary = summarize_cell(records, wall)
                summary.update({"dataset_kind": ds.spec.kind, "split": ds.split, "n_split": ds.n_split})
                cells.append(CellResult(ds.name, v.name, summary, records, path))
        result = EvalResult(cells, out_dir, library_hash=lib.content_hash() if lib is not None else "",
                            library_size=len(lib.skills) if lib is not None else 0,
                            settings={"teacher_snippets": snippets, "judge": judge,
                                      "teacher": teacher is not None})
    finally:
        if lib is not None:
            lib.close()
    write_json(result.metrics(), out_dir / "metrics.json")
    return result


def check_teacher_needs(variants: Sequence[Variant], *, judge: bool, snippets: bool, have_teacher: bool) -> None:
    """One clear error when something asks for a teacher and none is configured (a teacher
    variant without one would silently be its teacher-less twin)."""
    if have_teacher:
        return
    wants = [f"variant {v.name}" for v in variants if uses_teacher(v)]
    wants += ["--judge"] * judge + ["teacher-snippet mode"] * snippets
    if wants:
        raise ValueError(f"{', '.join(wants)} need(s) a teacher endpoint: set teacher.base_url and teacher.model "
                         "in params.yaml")


def _raise_if_all_failed(records: Sequence[EpisodeRecord], dataset: str, variant: str) -> None:
    errors = [r.error for r in records if r.error]
    if records and len(errors) == len(records):
        raise RuntimeError(f"{dataset}/{variant}: all {len(records)} episodes failed; first error: {errors[0]}")
    if errors:
        log.warning("%s/%s: %d of %d episodes failed (counted as episode_errors); first: %s",
                    dataset, variant, len(errors), len(records), errors[0])


def _episode_fn(params: Params, ds: EvalDataset, variant: Variant, *, policy: Policy, lib: Any,
                teacher: Any, judge: bool, snippets: bool) -> Any:
    from hasp.evolve.epoch import agent_config

    a, e = params.agent, params.eval
    cfg = replace(agent_config(params), use_pfs=variant.use_pfs, skills_in_prompt=variant.skills_in_prompt)

    def make_env() -> Any:
        env: Any = SearchEnvironment(ds.retriever, top_k=a.top_k, snippet_chars=a.snippet_chars,
                                     read_chars=a.read_chars)
        if snippets:
            env = TeacherSnippetEnvironment(env, teacher, max_tokens=e.snippet_max_tokens, doc_chars=e.snippet_doc_chars)
        return env

    # the same harness as rollouts: selection layers, handlers, phase reminders, teacher for use_teacher variants
    episode = episode_runner(policy=policy, library=lib, cfg=cfg, variant=variant, params=params.harness,
                             make_env=make_env, teacher=teacher, scorer=score)

    def run(item: QAItem) -> EpisodeRecord:
        start_ns = time.time_ns()
        env = make_env()
        error = ""
        try:
            traj = episode(item, env)
        except Exception as exc:  # noqa: BLE001 - contained per episode, counted; all-failed cells raise
            error = f"{type(exc).__name__}: {exc}"[:500]
            log.warning("%s/%s %s: episode failed: %s", ds.name, variant.name, item.id, error)
            traj = Trajectory(qid=item.id, question=item.question, answers=list(item.answers),
                              variant=variant.name, terminated="error", pf_errors=[error],
                              wall_s=(time.time_ns() - start_ns) / 1e9)
        verdict = None
        if judge and not error:
            verdict = judge_answer(teacher, item.question, item.answers, traj.prediction,
                                   max_tokens=e.judge_max_tokens)
        return EpisodeRecord(traj, start_ns, getattr(env, "stats", None), verdict, error)

    return run
