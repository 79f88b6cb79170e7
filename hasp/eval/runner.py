"""Run agent variants over evaluation datasets of any domain: one cell per (dataset, arm).

An arm is a variant run by a policy under a label that says what ran (``pf_teacher`` when the
teacher is used, ``trained_pf`` for a trained policy), so ``hasp eval`` and the epoch's evaluation
stage are the same loop with different arms. A cell is one episode spec (``hasp.episode.spec``) of
the dataset's domain; everything else is domain-free. A cell's episodes run concurrently through
``run_many`` (thread pool + progress bar) or a task runner's executor. An episode that raises
(endpoint down after retries, a harness bug) is recorded as ``terminated="error"``, logged and
counted instead of discarding the whole evaluation; a cell in which *every* episode failed stops the
run with that error, since its numbers would mean nothing.

Outputs under ``out_dir``: ``<dataset>/<label>.jsonl`` (trajectories), ``<dataset>/<label>.
episodes.jsonl`` (judge verdicts, snippet stats, start times) and ``metrics.json``
(``{dataset: {label: summary}}``, plus a ``provenance`` block when the caller gives one).

A search cell's summary carries the dataset's extractor ceiling (``hasp.eval.ceiling``: the
vocabulary answer extractor on each question's gold support, computed once per dataset) and a PF
cell's the share of its correct answers a vocabulary rewrite wrote, so every score is read beside them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from hasp.agent.loop import Policy
from hasp.agent.remote import EpisodeExecutor
from hasp.agent.rollout import write_trajectories
from hasp.agent.variants import Variant, get_variant
from hasp.atomic import write_jsonl
from hasp.config import Params
from hasp.episode.domains import domain_named
from hasp.episode.records import EpisodeRecord
from hasp.episode.spec import episode_spec, run_episodes
from hasp.eval.ceiling import (CEILING_KEY, VIA_REWRITE_KEY, extractor_ceiling, retriever_lookup,
                               vocabulary_rewrite_share)
from hasp.eval.datasets import EvalDataset
from hasp.eval.journal import CellJournal, cell_key, evaluation_code_key, identity_of, journal_path
from hasp.eval.summary import by_hops, by_template, grading_weaker, hop_counts, summarize_cell, template_groups
from hasp.provenance import PROVENANCE_KEY

log = logging.getLogger(__name__)


class Arm(NamedTuple):
    """One column of the comparison: ``variant`` run by ``policy`` (None: the evaluation's policy)
    with the skills of ``library`` (None: the evaluation's library), e.g. the PF agent before and
    after an evolution epoch. A named tuple: compared and hashed by value."""

    label: str
    variant: Variant
    policy: Policy | None = None
    library: Path | None = None


@dataclass
class CellResult:
    dataset: str
    variant: str  # the arm's label
    summary: dict[str, Any]
    records: list[EpisodeRecord]
    trajectories_path: Path


@dataclass
class EvalResult:
    cells: list[CellResult]
    out_dir: Path
    domain: str = "search"
    library_hash: str = ""
    library_size: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, dict[str, dict[str, Any]]]:
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for c in self.cells:
            out.setdefault(c.dataset, {})[c.variant] = c.summary
        return out


def uses_teacher(variant: Variant) -> bool:
    """Variants opt into the teacher (``pf_teacher``, ``teacher_only``)."""
    return bool(getattr(variant, "use_teacher", False))


def as_arms(variants: Sequence[str | Variant | Arm]) -> list[Arm]:
    """Variant names and variants become arms labelled with the variant's own name."""
    out = []
    for v in variants:
        if isinstance(v, Arm):
            out.append(v)
        else:
            var = get_variant(v) if isinstance(v, str) else v
            out.append(Arm(var.name, var))
    labels = [a.label for a in out]
    if len(set(labels)) != len(labels):
        raise ValueError(f"two arms share a label: {labels}")
    return out


def domain_of(ds: EvalDataset) -> Any:
    """The domain a dataset's episodes run in: its task's (``hasp.episode.task``) or a built-in one."""
    if ds.task is not None:
        from hasp.episode.task import as_domain

        return as_domain(ds.task)
    return domain_named(ds.domain, dataset=ds.shipped())


def check_variants(domain: str | Any, variants: Sequence[Variant]) -> None:
    """Refuse variants the domain (a name, or a domain) cannot run (``teacher_only`` post-processes a
    web-search FINAL)."""
    d = domain_named(domain) if isinstance(domain, str) else domain
    for v in variants:
        d.check(v)


def check_teacher_needs(variants: Sequence[Variant], *, judge: bool, snippets: bool, have_teacher: bool) -> None:
    """One clear error when something asks for a teacher and none is configured (a teacher
    variant without one would silently be its teacher-less twin)."""
    if have_teacher:
        return
    wants = [f"variant {v.name}" for v in variants if uses_teacher(v)]
    wants += ["--judge"] * judge + ["teacher-snippet mode"] * snippets
    if wants:
        raise ValueError(f"{', '.join(wants)} need(s) a teacher: set teacher.embedded, or teacher.base_url and teacher.model "
                         "in params.yaml")


def run_eval(params: Params, datasets: Sequence[EvalDataset], variants: Sequence[str | Variant | Arm], *,
             policy: Policy, library_root: Path | None, out_dir: Path, teacher: Any = None, judge: bool = False,
             teacher_snippets: bool | None = None, progress: bool = True,
             on_cell: Callable[[CellResult], None] | None = None,
             executor: EpisodeExecutor | None = None,
             provenance: Mapping[str, Any] | None = None) -> EvalResult:
    """Evaluate every arm on every dataset (all of one domain) and write the outputs; see the
    module docstring.

    ``on_cell`` is called with each cell as soon as it finished and its files are written, before
    the next cell starts (``hasp.eval.tracking.eval_run`` logs it to MLflow there), so what
    finished is kept when a later cell fails or the process is killed.

    ``teacher_snippets=None`` reads ``params.eval.teacher_snippets`` for search. Snippet mode is a
    property of the environment, so it applies to all arms (a fair comparison); it needs a
    teacher, as does ``judge``. Both are search-only: math and code are graded exactly.

    ``executor`` (``runner.kind``) runs each cell's episodes in worker processes, which rebuild the
    cell from its ``EpisodeSpec``; without it they run on threads here.

    ``provenance`` (``Provenance.to_dict()``) is written into ``metrics.json`` as its ``provenance``
    block, beside the datasets."""
    from hasp.atomic import write_json
    from hasp.pf.library import load_library

    domain = _domain_of(datasets)
    d = domain_of(datasets[0])
    arms = as_arms(variants)
    check_variants(d, [a.variant for a in arms])
    snippets = (params.eval.teacher_snippets if teacher_snippets is None else teacher_snippets) and d.teacher_snippets
    if judge and not d.judged:
        raise ValueError(f"--judge compares short answers; {domain} is graded exactly (leave --judge off)")
    if teacher is None:
        check_teacher_needs([a.variant for a in arms], judge=judge, snippets=snippets, have_teacher=False)
    lib = load_library(library_root, domain, sandbox=params.sandbox) if library_root is not None else None
    for err in (lib.load_errors if lib is not None else []):
        log.warning("skill library: %s", err)
    out_dir = Path(out_dir)
    cells: list[CellResult] = []
    own_libs: dict[Path, Any] = {}  # arms with a library of their own
    ceilings: dict[tuple[str, ...], dict[str, Any]] = {}  # (dataset, *question ids) -> the extractor ceiling
    code_key = evaluation_code_key()  # a cell's journal is resumed only by the code that wrote it

    def lib_of(arm: Arm) -> Any:
        if arm.library is None:
            return lib
        if arm.library not in own_libs:
            own_libs[arm.library] = load_library(arm.library, domain, sandbox=params.sandbox)
        return own_libs[arm.library]

    try:
        for ds in datasets:
            ceiling = dataset_ceiling(ds, ceilings)
            for arm in arms:
                try:
                    cell = _run_cell(params, ds, arm, policy=arm.policy or policy, lib=lib_of(arm),
                                     teacher=teacher, judge=judge, snippets=snippets, out_dir=out_dir,
                                     progress=progress, executor=executor, code_key=code_key)
                except Exception as exc:
                    _write_so_far(cells, out_dir, failed=(ds.name, arm.label, f"{type(exc).__name__}: {exc}"),
                                  provenance=provenance)
                    raise
                if ceiling is not None:
                    cell.summary[CEILING_KEY] = dict(ceiling)
                if lib is not None:
                    cell.summary["library_size"] = len(lib.skills)
                if lib_of(arm) is not None:  # PFs of this arm's library, besides programs graded (code)
                    cell.summary["sandbox_weaker"] = sorted({*lib_of(arm).sandbox_weaker(),
                                                             *(cell.summary.get("sandbox_weaker") or ())})
                cells.append(cell)
                _write_so_far(cells, out_dir, provenance=provenance)  # a later cell that fails cannot lose this one
                if on_cell is not None:
                    on_cell(cell)
        weaker = sorted({w for one in (lib, *own_libs.values()) if one is not None for w in one.sandbox_weaker()}
                        | {w for c in cells for w in c.summary.get("sandbox_weaker") or ()})
        result = EvalResult(cells, out_dir, domain=domain,
                            library_hash=lib.content_hash() if lib is not None else "",
                            library_size=len(lib.skills) if lib is not None else 0,
                            settings={"teacher_snippets": snippets, "judge": judge, "teacher": teacher is not None,
                                      "sandbox_weaker": weaker})
    finally:
        for one in (lib, *own_libs.values()):
            if one is not None:
                one.close()
    write_json(_with_provenance(result.metrics(), provenance), out_dir / "metrics.json")
    for c in cells:  # every cell's files and the metrics are written: nothing left to resume
        journal_path(out_dir, c.dataset, c.variant).unlink(missing_ok=True)
    return result


def dataset_ceiling(ds: EvalDataset, cache: dict[tuple[str, ...], dict[str, Any]]) -> dict[str, Any] | None:
    """The extractor ceiling of a search dataset's questions (``hasp.eval.ceiling``), once per set of
    question ids in ``cache``; a task's own ``ceiling(items)`` when it declares one; None elsewhere."""
    if ds.task is not None and getattr(ds.task, "ceiling", None) is not None:
        from hasp.stats import rate

        identity = domain_of(ds).identity
        key = (ds.name, *(identity(q)[0] for q in ds.questions))
        if key not in cache:
            try:
                per_item = [float(x) for x in ds.task.ceiling(list(ds.questions))]
            except Exception as e:  # noqa: BLE001 - the task's code; the cells still run and say why
                log.warning("task %s.ceiling raised %s: %s; no ceiling reported", ds.task.name, type(e).__name__, e)
                return {"source": f"{ds.task.name}.ceiling", "error": f"{type(e).__name__}: {e}"[:200]}
            r = rate(per_item)
            cache[key] = {"source": f"{ds.task.name}.ceiling", "n": r.n, "em": round(r.p, 4), "em_k": r.k,
                          "em_ci95": [round(r.lo, 4), round(r.hi, 4)], "f1": round(r.p, 4)}
        return cache[key]
    if not domain_of(ds).vocabulary:
        return None
    key = (ds.name, *(str(q.id) for q in ds.questions))
    if key not in cache:
        lookup = retriever_lookup(ds.retriever)
        cache[key] = extractor_ceiling(ds.questions, lookup)
        if ds.template_seen:  # benchmark v2: the ceiling on seen and on held-out templates apart
            group = template_groups(ds.template_seen)
            cache[key]["by_template"] = {g: extractor_ceiling([q for q in ds.questions if group.get(str(q.id)) == g],
                                                              lookup) for g in sorted(set(group.values()))}
    return cache[key]


def _with_provenance(metrics: dict[str, Any], provenance: Mapping[str, Any] | None) -> dict[str, Any]:
    return metrics if provenance is None else {**metrics, PROVENANCE_KEY: dict(provenance)}


def _write_so_far(cells: Sequence[CellResult], out_dir: Path, failed: tuple[str, str, str] | None = None,
                  provenance: Mapping[str, Any] | None = None) -> None:
    """metrics.json with the cells finished so far (and the one that failed, with its error)."""
    from hasp.atomic import write_json

    metrics: dict[str, dict[str, dict[str, Any]]] = {}
    for c in cells:
        metrics.setdefault(c.dataset, {})[c.variant] = c.summary
    if failed is not None:
        metrics.setdefault(failed[0], {})[failed[1]] = {"cell_error": failed[2][:500]}
    write_json(_with_provenance(metrics, provenance), out_dir / "metrics.json")


def _domain_of(datasets: Sequence[EvalDataset]) -> str:
    domains = {ds.domain for ds in datasets}
    if len(domains) != 1:
        raise ValueError(f"one evaluation runs one domain; got datasets of {sorted(domains) or 'none'}")
    return domains.pop()


def _run_cell(params: Params, ds: EvalDataset, arm: Arm, *, policy: Policy, lib: Any, teacher: Any, judge: bool,
              snippets: bool, out_dir: Path, progress: bool, executor: EpisodeExecutor | None,
              code_key: str) -> CellResult:
    t0 = time.perf_counter()
    desc = f"{ds.name}:{arm.label}"
    spec = episode_spec(params, domain_of(ds), arm.variant, label=arm.label,
                        library=lib.root if lib is not None else None, snippets=snippets, judge=judge)
    key = cell_key(code_key, ds.name, repr(list(ds.questions)), arm.label, repr(arm.variant), repr(spec.agent),
                   params.section_hash("agent", "harness", "sandbox", "eval"), snippets, judge,
                   lib.content_hash() if lib is not None else "", identity_of(policy),
                   identity_of(teacher) if teacher is not None else "")
    journal = CellJournal(journal_path(out_dir, ds.name, arm.label), key) if key is not None else None
    done = journal.done if journal is not None else {}
    todo = [i for i in range(len(ds.questions)) if i not in done]
    if done:
        log.info("%s: %d of %d episodes from the cell's journal, %d to run", desc, len(ds.questions) - len(todo),
                 len(ds.questions), len(todo))
    try:
        ran = run_episodes(spec, [ds.questions[i] for i in todo], policy=policy, teacher=teacher, library=lib,
                           opened=ds.retriever, executor=executor, desc=desc, progress=progress,
                           on_record=(lambda j, r: journal.append(todo[j], r)) if journal is not None else None)
    finally:
        if journal is not None:
            journal.close()  # the file stays: run_eval removes it once the whole evaluation is written
    by_item = {**done, **dict(zip(todo, ran))}
    records = [by_item[i] for i in range(len(ds.questions))]
    wall = time.perf_counter() - t0  # this run's time: episodes read from the journal are counted apart
    path = out_dir / ds.name / f"{arm.label}.jsonl"
    write_trajectories([r.traj for r in records], path)  # kept even when the cell failed: it shows why
    write_jsonl((r.extras() for r in records), out_dir / ds.name / f"{arm.label}.episodes.jsonl")
    _raise_if_all_failed(records, ds.name, arm.label)
    summary = summarize_cell(records, wall)
    if done:
        summary["resumed_episodes"] = len(done)  # finished by an earlier, interrupted run of this cell
    hops = by_hops(records, hop_counts(ds.questions))
    if hops:
        summary["em_by_hops"] = hops
    if ds.template_seen:
        summary["em_by_template"] = by_template(records, ds.template_seen)
    summary.update({"domain": ds.domain, "dataset_kind": ds.spec.kind, "split": ds.split, "n_split": ds.n_split,
                    "variant": arm.variant.name})
    if arm.variant.use_pfs and lib is not None:
        summary.update(selectable(records, lib, params.harness.only_skills))
    if spec.domain.vocabulary and arm.variant.use_pfs:
        summary[VIA_REWRITE_KEY] = vocabulary_rewrite_share([r.traj for r in records])
    if spec.domain.graded_programs:
        summary["pass_at_1"] = summary["em"]  # a program passes its tests or not: mean em is pass@1
        summary["sandbox_weaker"] = grading_weaker([r.traj for r in records])  # programs ran there
    return CellResult(ds.name, arm.label, summary, records, path)


def selectable(records: Sequence[EpisodeRecord], lib: Any, only: Sequence[str] = ()) -> dict[str, Any]:
    """How many episodes had any PF live, and a plain note when the library's PFs (those of ``only``
    when given) never were: a cell whose skills could not fire must not read as one whose skills
    did not help."""
    n_pfs = sum(1 for s in lib.skills if s.pf is not None and (not only or s.skill_id in only))
    live = sum(1 for r in records if r.traj.harness is not None and r.traj.harness.selected_pfs)
    out: dict[str, Any] = {"pf_selected_episodes": live, "library_pfs": n_pfs}
    if n_pfs and records and not live:
        out["pf_note"] = (f"no episode selected any of the library's {n_pfs} PFs (see harness.pf_selection, "
                          "harness.pf_top_k and the harness lists)")
    elif not n_pfs:
        out["pf_note"] = "the library has no PFs (prompt-only skills or none)"
    return out


def _raise_if_all_failed(records: Sequence[EpisodeRecord], dataset: str, label: str) -> None:
    errors = [r.error or (r.traj.pf_errors[-1] if r.traj.pf_errors else "error")
              for r in records if r.error or r.traj.terminated == "error"]
    if records and len(errors) == len(records):
        raise RuntimeError(f"{dataset}/{label}: all {len(records)} episodes failed; first error: {errors[0]}")
    if errors:
        log.warning("%s/%s: %d of %d episodes failed (counted as episode_errors); first: %s",
                    dataset, label, len(errors), len(records), errors[0])
