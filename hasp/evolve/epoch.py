"""One self-improvement epoch as file-to-file phase functions (paper App. C, Phases A–H).

Besides the lettered phases: ``gate`` (held-out val check of each candidate, App. E's
ΔEM_val), ``frontier_update`` / ``rollback_to`` (best library versions by val EM) and
``build_skill_data`` (Objective B). Which checks may refuse a candidate is the gate
table of ``hasp.evolve.gate`` (``evolve.mode`` / ``evolve.filtering``).

Each function reads its inputs from files, writes its outputs atomically and
returns a small summary dict. The same functions back the ``hasp`` CLI (and so
the ``dvc.yaml`` stages) and the Prefect tasks, so the two orchestrations can
never drift apart.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hasp import artifacts as art
from hasp.atomic import read_json, write_json

from hasp.agent.loop import Policy
from hasp.agent.remote import EpisodeExecutor
from hasp.agent.rollout import read_trajectories, write_trajectories
from hasp.agent.variants import get_variant
from hasp.config import Params, SandboxParams
from hasp.episode.spec import pipeline_variant
from hasp.evolve.epoch_task import domain_name
from hasp.eval.summary import summarize_rollout
from hasp.pf.base import Teacher
from hasp.pf.library import load_library
from hasp.pf.folder_files import copy_folder
from hasp.progress import Progress

if TYPE_CHECKING:
    from hasp.config import EvolveParams
    from hasp.train.run import TrainSummary

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- rollouts
def rollout(params: Params, data_dir: Path, library_root: Path | None, split: str, out_path: Path,
            *, policy: Policy, variant: str = "pf", teacher: Teacher | None = None,
            limit: int | None = None, label: str | None = None,
            qids: Collection[str] | None = None, executor: EpisodeExecutor | None = None,
            items: list[Any] | None = None) -> dict[str, Any]:
    """Phase A and the val gate: run ``variant`` on a split, write trajectories, return metrics.
    ``items`` (questions over the same corpus, e.g. the pinned anchors) replace the split's questions.

    The pipeline's PF agent uses the teacher whenever one is configured: ``variant="pf"`` with a
    teacher runs as ``pf_teacher`` (the paper's Full row, ``pipeline_variant``), so a configured
    teacher is never ignored; the summary's ``variant`` (and the trajectories, unless ``label``
    names the run) say ``pf_teacher`` then.

    Episodes run on threads here, or through ``executor`` (``runner.kind``) in worker processes
    that rebuild the same episode function from its ``EpisodeSpec``.
    """
    from hasp.episode.spec import episode_spec, run_episodes
    from hasp.evolve.epoch_task import epoch_task

    task = epoch_task(params, data_dir)
    domain = task.domain
    spec = episode_spec(params, domain, variant, label=label, library=library_root, teacher=teacher, pipeline=True)
    items = list(items) if items is not None else task.items(split, limit)
    if qids is not None:
        keep = set(qids)
        items = [it for it in items if domain.identity(it)[0] in keep]
    lib = load_library(library_root, domain.name, sandbox=params.sandbox) if library_root is not None else None
    try:
        trajs = [r.traj for r in run_episodes(spec, items, policy=policy, teacher=teacher, library=lib,
                                              opened=None if executor is not None else domain.open(params),
                                              executor=executor, desc=f"{spec.label}:{split}")]
    finally:
        if lib is not None:
            lib.close()
    write_trajectories(trajs, out_path)
    summary = summarize_rollout(trajs)
    summary["variant"] = spec.variant.name
    broken = [t for t in trajs if t.terminated == "error"]
    if broken:  # the endpoint failed these episodes: say so, and let the orchestrator retry the phase
        summary.update(failure=f"{len(broken)} episodes failed: endpoint error", failed_calls=len(broken),
                       first_error=(broken[0].pf_errors or ["error"])[-1][:300])
    if lib is not None:
        summary["library_size"] = len(lib.skills)
        summary["library_load_errors"] = lib.load_errors
        summary["sandbox_weaker"] = lib.sandbox_weaker()  # layers missing under sandbox.allow_weaker
    return summary


def phase_a_rollout(params: Params, data_dir: Path, library_root: Path, out_path: Path, *, policy: Policy,
                    teacher: Teacher | None = None, executor: EpisodeExecutor | None = None) -> dict[str, Any]:
    """Phase A on the seed (train) split: the PF-aware rollout, optionally behind the two-stage prefilter.

    With ``evolve.prefilter`` a cheap pass (plain ReAct: no skills, no teacher, the shortest
    prompts) runs first and only the questions it gets wrong go through the PF-aware rollout, so
    the expensive pass is spent where Phase B will look. ``rollout.jsonl`` then holds those
    trajectories only; the cheap pass is kept beside it as ``prefilter.jsonl``. No question is held out
    for the judge gate (only logged traces have one): ``heldout.jsonl`` is written empty.
    """
    from hasp.evolve.heldout import write_heldout

    write_heldout([], out_path.with_name(art.HELDOUT))
    if not params.evolve.prefilter:
        return rollout(params, data_dir, library_root, "train", out_path, policy=policy, variant="pf", teacher=teacher,
                       executor=executor)
    pre_path = out_path.with_name("prefilter.jsonl")
    pre = rollout(params, data_dir, None, "train", pre_path, policy=policy, variant="react", label="prefilter",
                  executor=executor)
    failed = [t.qid for t in read_trajectories(pre_path) if t.em < 1.0]
    summary = rollout(params, data_dir, library_root, "train", out_path, policy=policy, variant="pf",
                      teacher=teacher, qids=failed, executor=executor)
    summary["prefilter"] = {"n": pre["n"], "em": pre["em"], "f1": pre["f1"], "failed": len(failed),
                            "skipped": pre["n"] - len(failed)}
    return summary


# ----------------------------------------------------------------------------- Phase B
def analyse(rollout_path: Path, library_root: Path, params: Params, out_dir: Path, *,
            summarizer: Any = None, epoch: int = 0) -> dict[str, Any]:
    """Phase B: failure patterns of EM=0 trajectories, then clusters for Phase C. Trajectories without
    gold answers (logged traces, ``hasp.evolve.traces``) fail when a label-free signal fires
    (``hasp.evolve.trace_signals``); each signal's precision against EM 0 on the ones with gold is in
    the summary (``signals``).

    full mode: the twelve heuristic detectors plus, when ``evolve.summarizer`` is on and a
    ``summarizer`` model is given, the LLM summarizer; patterns are deduplicated (Jaccard)
    and clustered with novelty scores. lite mode (App. D.5): up to ``lite_failures``
    sampled failures, heuristic detectors only, grouped by category without dedup,
    novelty cut or size filter (``min_cluster_size=1``, ``dup_threshold=0``)."""
    import random

    from hasp.evolve.cluster import cluster_patterns, clusters_to_json, existing_from_library
    from hasp.evolve.detectors import DETECTOR_SETS, detect_failures
    from hasp.evolve.epoch_task import epoch_task
    from hasp.evolve.summarize import SummaryOutcome, summarize_failures
    from hasp.evolve.trace_signals import failure_set, signal_counts, signal_patterns, signal_precision

    e = params.evolve
    task = epoch_task(params, Path("."))  # the domain and whether its pool is a built-in one; no items read
    detector_set = task.domain.detectors
    detectors = DETECTOR_SETS[detector_set]
    trajs = read_trajectories(rollout_path)
    # EM 0 where gold answers exist, the label-free signals where none do (logged traces); an endpoint
    # failure is not the agent's
    judged = None
    if e.traces.judge and summarizer is not None:
        from hasp.evolve.trace_judge import judge_traces

        judged = judge_traces(trajs, summarizer, max_chars=e.traces.judge_max_chars)
    elif e.traces.judge:
        log.warning("evolve.traces.judge is on but no model is there to judge (no teacher, no student)")
    # math and code items are graded without answer strings (code: by the item's tests): a rollout of them
    # scored every episode; other trajectories without gold are logged traces, read by the label-free signals
    scored = not e.traces.source and task.pool is not None and task.pool.task is None
    found = failure_set(trajs, e.traces, judged.signals if judged else None, scored=scored)
    failed = found.failed
    if e.mode == "lite" and len(failed) > e.lite_failures:
        failed = sorted(random.Random(f"lite-{epoch}").sample(failed, e.lite_failures), key=lambda t: t.qid)
    patterns = detect_failures(failed, detectors) + signal_patterns(failed, found.signals, scored=scored)
    llm = SummaryOutcome()
    if e.mode == "full" and e.summarizer and summarizer is not None:
        llm = summarize_failures(failed, summarizer, known_categories=sorted(detectors),
                                 temperature=e.summarizer_temperature, max_tokens=e.summarizer_max_tokens,
                                 retries=e.summarizer_retries, max_concurrency=params.llm.in_flight,
                                 limit=e.summarizer_max_failures)
        patterns = patterns + llm.patterns
    lib = load_library(library_root, domain_name(params), sandbox=params.sandbox)
    try:
        existing = existing_from_library(lib)
    finally:
        lib.close()
    if e.mode == "lite":
        clusters = cluster_patterns(patterns, existing, min_cluster_size=1, dup_threshold=0.0)
    else:
        clusters = cluster_patterns(patterns, existing, min_cluster_size=e.min_cluster_size)
    write_json([p.to_dict() for p in patterns], out_dir / art.FAILURES)
    write_json(llm.to_dict(), out_dir / art.SUMMARIES)
    write_json(clusters_to_json(clusters), out_dir / art.CLUSTERS)
    return {"failed": found.gold + found.label_free,
            "analysed": len(failed), "mode": e.mode, "detectors": detector_set,
            "failure_source": found.summary(),
            "signals": {"fired": signal_counts(found), **signal_precision(trajs, e.traces, found.signals, scored=scored),
                        **({"judge": judged.summary()} if judged else {})},
            "patterns": len(patterns), "pattern_categories": dict(Counter(p.category for p in patterns)),
            "summarizer_used": bool(e.mode == "full" and e.summarizer and summarizer is not None),
            **llm.summary(),
            "clusters": len(clusters), "new_category_clusters": sum(c.is_new_category for c in clusters)}


# ----------------------------------------------------------------------------- Phase C
def history_before(history_path: Path, epoch: int) -> Any:
    """Proposal feedback from epochs before ``epoch`` (what Phase C of this epoch may see)."""
    from hasp.evolve.propose import FeedbackHistory

    h = FeedbackHistory.load(history_path)
    return FeedbackHistory(None, [x for x in h.entries if x.epoch < epoch])


def propose(clusters_path: Path, library_root: Path, params: Params, out_path: Path, *,
            student: Any, epoch: int, history_path: Path | None = None,
            rollout_path: Path | None = None, guard: Any = None) -> dict[str, Any]:
    """Phase C: the student writes at most ``max_candidates`` candidates, as code (SKILL.md + pf.py)
    or as declared PFs (``evolve.proposal_format``). Declarations are proposed from menus ranked on
    the cluster's failing steps, replayed from ``rollout_path`` (default: the rollout next to
    ``clusters_path``).

    ``guard`` (``hasp.evolve.budget.Guard``) is asked before each proposal; when the epoch's budget is
    reached the phase stops there, keeps what it wrote and says so (``budget_stop``). A phase that wrote
    fewer than it was asked for says why (``short``: no clusters, budget, endpoint errors, refused replies)."""
    from hasp.evolve.cluster import clusters_from_json
    from hasp.evolve.declarative import choose_format, propose_declarative, reply_format_for
    from hasp.evolve.propose import LLM_CALL_FAILED, propose_candidates
    from hasp.llm.structured import constrains_json, dialect_of

    clusters = clusters_from_json(read_json(clusters_path))
    lib = load_library(library_root, domain_name(params), sandbox=params.sandbox)
    ids = lib.ids
    declared = {s.skill_id: s.spec for s in lib.skills if s.spec.pf is not None}  # revisable by declaration
    lib.close()
    from hasp.evolve.epoch_task import epoch_domain

    history = history_before(history_path, epoch) if history_path else None
    e = params.evolve
    domain = epoch_domain(params)
    cap = e.lite_max_candidates if e.mode == "lite" else e.max_candidates
    fmt = choose_format(e.proposal_format, history)
    format_note = None
    if fmt == "declarative" and not domain.vocabulary:  # the declared-PF vocabulary speaks of search steps
        fmt, format_note = "code", f"domain {domain.name} has no declared-PF vocabulary: code proposals only"
        log.info(format_note)
    per = e.proposals_per_cluster if fmt == "declarative" else 1
    stop = guard.reached if guard is not None else None
    with Progress("C propose", min(cap, len(clusters)) * per, unit="proposals") as bar:
        if fmt == "declarative":
            from hasp.agent.replay import replay

            rollout_path = rollout_path or clusters_path.parent / art.ROLLOUT
            trajs = read_trajectories(rollout_path) if rollout_path.exists() else []
            replayed = {t.qid: list(replay(t, params.agent.max_steps)) for t in trajs}
            reply_format = reply_format_for(e.structured_output, params.llm.base_url is None,
                                            constrains_json(params.llm.constrained, dialect_of(student)))
            cands = propose_declarative(
                clusters, student, existing_skill_ids=ids, replayed=replayed, history=history, epoch=epoch,
                max_candidates=cap, temperature=e.proposal_temperature, max_tokens=e.declarative_max_tokens,
                seed=epoch, reply_format=reply_format, gold={t.qid: list(t.answers) for t in trajs}, per_cluster=per,
                on_done=bar.advance, declared_skills=declared, stop=stop)
        else:
            # the student answers all clusters in one batch: the heartbeat shows the time spent until it returns
            cands = propose_candidates(clusters, student, existing_skill_ids=ids, history=history, epoch=epoch,
                                       max_candidates=cap, temperature=e.proposal_temperature,
                                       max_tokens=e.proposal_max_tokens, seed=epoch, stop=stop,
                                       action_forms=tuple(domain.action_forms))
            bar.advance(len(cands))
    write_json([c.to_dict() for c in cands], out_path)
    failed = [c for c in cands if c.parse_error.startswith(LLM_CALL_FAILED)]
    summary: dict[str, Any] = {}
    if failed:  # an outage is not a proposal: say so first, and let the orchestrator retry the phase
        summary = {"failure": f"{len(failed)} proposals failed: endpoint error", "failed_calls": len(failed),
                   "first_error": failed[0].parse_error[:300]}
    refused = sum(1 for c in cands if c.parse_error and c not in failed)
    proposed = len(cands) - len(failed)
    if guard is not None and guard.hit is not None:
        from hasp.evolve.budget import stop_line

        summary["budget_stop"] = stop_line(guard.hit, "during phase C propose", (proposed, cap))
    if format_note:
        summary["format_note"] = format_note
    return {**summary, "proposed": proposed, "asked": cap, "format": fmt, "domain": domain.name,
            "with_code": sum(1 for c in cands if c.code.strip()), "declared": sum(1 for c in cands if c.declared),
            "parse_errors": refused,
            **shortfall(cap, len(clusters), {c.cluster_category for c in cands}, len(failed), refused, guard)}


def shortfall(asked: int, clusters: int, answered: set[str], failed: int, refused: int, guard: Any) -> dict[str, Any]:
    """Why Phase C wrote fewer usable proposals than ``asked`` (empty when it did not): fewer clusters than
    asked for, clusters the budget left unasked, endpoint errors, replies the parser refused."""
    reasons = {"no_clusters": max(0, asked - clusters),
               "budget": max(0, min(asked, clusters) - len(answered)) if guard is not None and guard.hit else 0,
               "endpoint_errors": failed, "refused": refused}
    reasons = {k: v for k, v in reasons.items() if v}
    if not reasons:
        return {}
    return {"short": {"missing": sum(reasons.values()), "reasons": reasons,
                      "line": f"{max(0, asked - sum(reasons.values()))} usable of {asked} proposals asked for: "
                              + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in reasons.items())}}


# ----------------------------------------------------------------------------- Phase D
def validate(candidates_path: Path, out_path: Path, *, static: bool = False,
             sandbox: SandboxParams | None = None,
             action_types: tuple[str, ...] = ("SEARCH", "READ", "FINAL")) -> dict[str, Any]:
    """Phase D: syntax, policy, interface, sandboxed executions on the mock regimes and on steps
    replayed from the epoch's rollout (the candidate's cluster and recent others), return types.
    ``sandbox`` is the params section the candidates run under (schema defaults when None); a
    report made in the weaker mode says which layers were missing (``weaker``).

    ``static=True`` (filtering ``teacher``: executable validation is ablated) reads the
    code without running it, so Phase E still gets an executability estimate. ``action_types`` are the
    epoch's task's actions (``epoch_actions``): the mock regimes ask the candidate about each."""
    from hasp.evolve.cluster import clusters_from_json
    from hasp.evolve.declarative import validate_declared
    from hasp.evolve.gate import static_exec_report
    from hasp.evolve.propose import Candidate
    from hasp.evolve.validate import phase_d_contexts, validate_candidate

    reports = []
    cands = [Candidate.from_dict(d) for d in read_json(candidates_path)]
    epoch_dir = Path(candidates_path).parent
    trajs = read_trajectories(epoch_dir / art.ROLLOUT) if (epoch_dir / art.ROLLOUT).exists() else []
    qids = {c.category: c.qids for c in clusters_from_json(_load_list(epoch_dir / art.CLUSTERS))}
    with Progress("D validate", len(cands), unit="candidates") as bar:
        for c in cands:
            if c.declared:
                reports.append({"skill_id": c.skill_id, **validate_declared(c).to_dict()})
            elif static:
                reports.append(static_exec_report(c.code, c.skill_id))
            else:
                ctxs, args = phase_d_contexts(trajs, qids.get(c.cluster_category, ()))
                reports.append({"skill_id": c.skill_id, **validate_candidate(
                    c.code, c.skill_id, contexts=ctxs, args=args, sandbox=sandbox,
                    action_types=tuple(action_types)).to_dict()})
            bar.advance()
    write_json(reports, out_path)
    weaker = sorted({w for r in reports for w in r.get("weaker") or ()})
    return {"validated": len(reports), "static": static, "exec_pass": sum(1 for r in reports if r["passed"]),
            "q_exec_mean": (sum(r["q_exec"] for r in reports) / len(reports)) if reports else 0.0,
            "sandbox_weaker": weaker}


def epoch_actions(params: Params) -> tuple[str, ...]:
    """The actions of the epoch's task (``evolve.domain``), as Phase D asks a candidate about them."""
    from hasp.evolve.epoch_task import epoch_domain

    return tuple(epoch_domain(params).action_types)


# ----------------------------------------------------------------------------- Phase E
def review(candidates_path: Path, validation_path: Path, clusters_path: Path, rollout_path: Path,
           library_root: Path, params: Params, out_path: Path, *, teacher: Any = None) -> dict[str, Any]:
    """Phase E: five-dimension review (LLM teacher if configured, else the heuristic reviewer).

    Q_val uses the candidate's trigger replayed over its cluster's failed trajectories,
    executed in the sandbox (candidate code is untrusted)."""
    from hasp.evolve.cluster import clusters_from_json
    from hasp.evolve.propose import Candidate
    from hasp.evolve.declarative import compiled_pf
    from hasp.evolve.epoch_task import epoch_domain
    from hasp.evolve.review import review_candidate, trigger_hit_rate
    from hasp.pf.sandboxed import SandboxedPF

    cands = [Candidate.from_dict(d) for d in read_json(candidates_path)]
    reports = {r["skill_id"]: r for r in read_json(validation_path)}
    clusters = {c.category: c for c in clusters_from_json(read_json(clusters_path))}
    trajs = read_trajectories(rollout_path)
    lib = load_library(library_root, domain_name(params), sandbox=params.sandbox)
    ids = lib.ids
    lib.close()
    forms = tuple(epoch_domain(params).action_forms)
    out = []
    bar = Progress("E review", len(cands), unit="candidates").start()
    for c in cands:
        rep = reports.get(c.skill_id, {"q_exec": 0.0, "passed": False})
        cluster = clusters.get(c.cluster_category)
        hit_rate = None
        if rep.get("passed") and cluster is not None:
            pf = compiled_pf(c) if c.declared else SandboxedPF(c.code, skill_id=c.skill_id, sandbox=params.sandbox)
            try:
                hit_rate = trigger_hit_rate(pf, [t for t in trajs if t.qid in set(cluster.qids)])
            except Exception as e:  # noqa: BLE001 - a broken candidate scores 0 here, it never stops the epoch
                log.warning("trigger replay failed for %s: %s", c.skill_id, e)
                hit_rate = 0.0
            finally:
                getattr(pf, "close", lambda: None)()  # a sandboxed PF owns a worker process
        if cluster is None:
            log.warning("candidate %s names unknown cluster %s", c.skill_id, c.cluster_category)
            from hasp.evolve.cluster import Cluster
            cluster = Cluster(category=c.cluster_category, patterns=[], support=0, novelty=0.0,
                              is_new_category=False, representative=None)
        rv = review_candidate(c, float(rep["q_exec"]), cluster, teacher, trigger_hit_rate=hit_rate,
                              existing_skill_ids=ids, evolve=params.evolve, action_forms=forms)
        out.append({"skill_id": c.skill_id, "cluster": c.cluster_category, "trigger_hit_rate": hit_rate,
                    "is_new_category": cluster.is_new_category, **rv.to_dict()})
        bar.advance()
    bar.finish(f"{sum(1 for r in out if r['decision'] == 'ACCEPT')}/{len(out)} accepted")
    write_json(out, out_path)
    q = [r["q_skill"] for r in out]
    return {"reviewed": len(out), "review_accept": sum(1 for r in out if r["decision"] == "ACCEPT"),
            "q_skill_mean": sum(q) / len(q) if q else 0.0, "q_skill_min": min(q, default=0.0),
            "q_skill_max": max(q, default=0.0), "reviewer": sorted({r["reviewer"] for r in out}),
            # asked a teacher but its verdict was unusable or it was down: the heuristic decided, counted
            "teacher_fallbacks": sum(1 for r in out if r.get("fallback_reason"))}


# ----------------------------------------------------------------------------- val gate
def _load_list(path: Path | None) -> list[dict[str, Any]]:
    return read_json(path) if path is not None and Path(path).exists() else []


def _evidence(epoch_dir: Path, library_in: Path, sandbox: SandboxParams | None = None,
              evolve: EvolveParams | None = None) -> list[Any]:
    """One ``gate.Evidence`` per candidate from the epoch's files (absent phases -> None)."""
    from hasp.evolve.admit import active_ids
    from hasp.evolve.anchors import AnchorResult
    from hasp.evolve.cluster import Cluster, clusters_from_json
    from hasp.evolve.gate import Evidence, ValResult
    from hasp.evolve.judge_gate import JudgeGateResult
    from hasp.evolve.propose import Candidate
    from hasp.evolve.review import Review

    cands = [Candidate.from_dict(d) for d in read_json(epoch_dir / art.CANDIDATES)]
    clusters = {c.category: c for c in clusters_from_json(_load_list(epoch_dir / art.CLUSTERS))}
    reports = {r["skill_id"]: r for r in _load_list(epoch_dir / art.VALIDATION)}
    reviews = {r["skill_id"]: Review.from_dict(r) for r in _load_list(epoch_dir / art.REVIEWS)}
    vals = {r["skill_id"]: ValResult.from_dict(r) for r in _load_list(epoch_dir / art.GATE)}
    anchors = {r["skill_id"]: AnchorResult.from_dict(r) for r in _load_list(epoch_dir / art.ANCHORS)}
    judged = {r["skill_id"]: JudgeGateResult.from_dict(r) for r in _load_list(epoch_dir / art.JUDGE_GATE)}
    lib_ids = frozenset(active_ids(library_in))
    out = []
    for i, c in enumerate(cands):
        cluster = clusters.get(c.cluster_category) or Cluster(
            category=c.cluster_category, patterns=[], support=0, novelty=0.0, is_new_category=False,
            representative=None)  # type: ignore[arg-type]
        out.append(Evidence(candidate=c, cluster=cluster, exec_report=reports.get(c.skill_id),
                            review=reviews.get(c.skill_id), val=vals.get(c.skill_id), library_ids=lib_ids,
                            earlier_ids=tuple(x.skill_id for x in cands[:i]), sandbox=sandbox,
                            evolve=evolve, anchors=anchors.get(c.skill_id), judge=judged.get(c.skill_id)))
    return out


def gate(epoch_dir: Path, library_in: Path, params: Params, baseline: dict[str, Any],
         run_val: Any, run_anchors: Any = None, guard: Any = None, run_judge: Any = None) -> dict[str, Any]:
    """The gates that run the policy, for the candidates every cheap gate passed. Val gate: each runs
    on the val split with the library plus itself; ``baseline`` is the shared library-alone val
    summary (gate.json). Anchors (``evolve.anchors``, ``hasp.evolve.anchors``): the candidates the val
    gate passed (all of them when it is off) answer the pinned questions, against one library-alone
    run (anchors.json). ``run_anchors`` is ``anchor_runner``'s function. The judge gate
    (``evolve.traces.holdout``, ``hasp.evolve.judge_gate``): the candidates the val and anchor gates
    passed answer the held-out trace questions, judged against one library-alone run (judge_gate.json);
    ``run_judge`` is ``judge_runner``'s function. ``guard``
    (``hasp.evolve.budget.Guard``) is asked before each candidate's val run: the ones left when the
    epoch's budget is reached are refused, and the summary's ``budget_stop`` says so."""
    from hasp.evolve.gate import active_gates, placeholder_review, pre_val_gates, refusals, run_val_gate, val_passed

    gates = active_gates(params.evolve)
    evs = _evidence(epoch_dir, library_in, params.sandbox, params.evolve)
    todo = [ev for ev in evs if not refusals(ev, pre_val_gates(gates))]
    items = [(ev.candidate, ev.cluster, ev.review or placeholder_review("not reviewed")) for ev in todo]
    results = []
    if "val" in gates:
        results = run_val_gate(items, library_in, run_val, baseline, lam=params.evolve.r_skill_lambda,
                               workdir=epoch_dir, rule=params.evolve.val_rule,
                               stop=guard.reached if guard is not None else None)
    write_json([r.to_dict() for r in results], epoch_dir / art.GATE)
    summary: dict[str, Any] = {"val_runs": len(results), "val_pass": sum(1 for r in results if val_passed(r)),
                               "base_em": baseline.get("em"), "base_f1": baseline.get("f1"),
                               "delta_em": {r.skill_id: r.delta_em for r in results},
                               "r_skill": {r.skill_id: r.r_skill for r in results},
                               "sandbox_weaker": sorted({w for r in results for w in r.weaker})}
    if guard is not None and guard.hit is not None:
        from hasp.evolve.budget import stop_line

        gated = sum(1 for r in results if not (r.error or "").startswith("not run"))
        summary["budget_stop"] = (f"{stop_line(guard.hit, 'during the val gate')}; {gated} of {len(results)} "
                                  "candidates gated, the others refused")
    passed = {r.skill_id for r in results if val_passed(r)}
    keep = [it for it in items if "val" not in gates or it[0].skill_id in passed]
    if "anchors" in gates:
        summary["anchors"] = anchor_gate(epoch_dir, library_in, params, keep, run_anchors)
        refused = set(summary["anchors"]["refused"])
        keep = [it for it in keep if it[0].skill_id not in refused]
    else:
        write_json([], epoch_dir / art.ANCHORS)
    if "judge" in gates:
        summary["judge"] = judge_gate(epoch_dir, library_in, keep, run_judge)
    else:
        write_json([], epoch_dir / art.JUDGE_GATE)
    broken = [r for r in results if r.failed_calls]
    if broken:  # the endpoint failed val episodes: say so, and let the orchestrator retry the phase
        summary.update(failure=f"{len(broken)} val runs had failed episodes: endpoint error",
                       failed_calls=sum(r.failed_calls for r in broken), first_error=broken[0].error[:300])
    else:
        for name, what in (("anchors", "anchor"), ("judge", "held-out")):
            g = summary.get(name) or {}
            if g.get("failed_calls"):
                summary.update(failure=f"{g['failed_calls']} {what} episodes failed: endpoint error",
                               failed_calls=g["failed_calls"], first_error=g.get("first_error", "")[:300])
                break
    return summary


def judge_gate(epoch_dir: Path, library_in: Path, items: list[Any], run_judge: Any) -> dict[str, Any]:
    """The judge gate of ``items`` (candidate, cluster, review) on the epoch's held-out trace questions:
    one library-alone run, one run per candidate; writes judge_gate.json and returns its summary."""
    from hasp.evolve.heldout import load_heldout
    from hasp.evolve.judge_gate import run_judge_gate

    ids = [q.id for q in load_heldout(epoch_dir / art.HELDOUT)]
    out: dict[str, Any] = {"held_out": len(ids), "runs": 0, "refused": {}, "checks": {}}
    if not items or not ids or run_judge is None:
        write_json([], epoch_dir / art.JUDGE_GATE)
        if items:  # every candidate is refused by the judge gate's missing result, said once here
            out["note"] = ("no held-out question (Phase A held none out)" if not ids
                           else "no judge runner was given")
        return out
    base_summary, before, base_counts = run_judge(library_in, "judge_baseline")
    results = run_judge_gate(items, library_in, run_judge, before, ids, workdir=epoch_dir)
    write_json([r.to_dict() for r in results], epoch_dir / art.JUDGE_GATE)
    failed = int(base_summary.get("failed_calls") or 0) + sum(r.failed_calls for r in results)
    out.update(runs=len(results), supported_before=int(sum(before.get(i, 0.0) for i in ids)),
               judged_before=sum(1 for i in ids if i in before), judge_before=base_counts,
               refused={r.skill_id: r.refusal() for r in results if r.refusal()},
               checks={r.skill_id: {"n": r.n, "supported_after": r.supported_after, "delta": r.delta,
                                    "unjudged": r.unjudged, "error": r.error} for r in results})
    if failed:
        out.update(failed_calls=failed, first_error=next((r.error for r in results if r.error), "")
                   or str(base_summary.get("first_error", "")))
    return out


def anchor_gate(epoch_dir: Path, library_in: Path, params: Params, items: list[Any], run_anchors: Any) -> dict[str, Any]:
    """The anchors gate of ``items`` (candidate, cluster, review): one library-alone run, one run per
    candidate; writes anchors.json and returns its summary (n, passes before, refused ids per candidate)."""
    from hasp.evolve.anchors import load_anchors, run_anchor_gate

    anchors = load_anchors(params.evolve.anchors)
    ids = [a.id for a in anchors]
    base_summary, before = run_anchors(library_in, "anchors_baseline") if items else ({}, {})
    results = run_anchor_gate(items, library_in, run_anchors, before, ids, workdir=epoch_dir) if items else []
    write_json([r.to_dict() for r in results], epoch_dir / art.ANCHORS)
    failed = int(base_summary.get("failed_calls") or 0) + sum(r.failed_calls for r in results)
    out: dict[str, Any] = {"file": str(params.evolve.anchors), "n": len(ids), "runs": len(results),
                           "passes_before": int(sum(1 for i in ids if before.get(i, 0.0) >= 1.0)) if items else None,
                           "refused": {r.skill_id: r.broken for r in results if r.broken or r.error},
                           "checks": {r.skill_id: {"passes_after": r.passes_after, "delta": r.delta,
                                                   "broken": r.broken, "fixed": r.fixed, "error": r.error}
                                      for r in results}}
    if failed:
        out.update(failed_calls=failed, first_error=next((r.error for r in results if r.error), "")
                   or str(base_summary.get("first_error", "")))
    return out


def val_runner(params: Params, data_dir: Path, out_dir: Path, *, policy: Policy, teacher: Teacher | None = None,
               executor: EpisodeExecutor | None = None) -> Any:
    """``run_val(library, label)`` for the val gate: the PF agent on the val split."""
    def run_val(library: Path, label: str) -> dict[str, Any]:
        return rollout(params, data_dir, library, "val", out_dir / f"{label.replace('+', '__')}.jsonl",
                       policy=policy, variant="pf", teacher=teacher,
                       limit=params.evolve.val_limit or None, label=label, executor=executor)
    return run_val


def anchor_runner(params: Params, data_dir: Path, out_dir: Path, *, policy: Policy, teacher: Teacher | None = None,
                  executor: EpisodeExecutor | None = None) -> Any:
    """``run_anchors(library, label) -> (summary, {anchor id: EM})`` for the anchors gate: the PF agent on
    the pinned questions of ``evolve.anchors`` (None when no anchors are set)."""
    if not params.evolve.anchors:
        return None
    from hasp.evolve.anchors import load_anchors

    anchors = load_anchors(params.evolve.anchors)

    def run_anchors(library: Path, label: str) -> tuple[dict[str, Any], dict[str, float]]:
        out = out_dir / f"{label.replace('+', '__')}.jsonl"
        summary = rollout(params, data_dir, library, "anchors", out, policy=policy, variant="pf", teacher=teacher,
                          label=label, executor=executor, items=anchors)
        return summary, {t.qid: float(t.em) for t in read_trajectories(out) if t.terminated != "error"}
    return run_anchors


def judge_runner(params: Params, data_dir: Path, epoch_dir: Path, *, policy: Policy, teacher: Teacher | None = None,
                 judge: Any = None, executor: EpisodeExecutor | None = None) -> Any:
    """``run_judge(library, label) -> (summary, {qid: judged score}, judge counts)`` for the judge gate:
    the PF agent on the epoch's held-out trace questions, then ``judge`` (the teacher, else the policy
    model) on each answer (None when the judge gate is off)."""
    from hasp.evolve.gate import active_gates
    from hasp.evolve.heldout import load_heldout
    from hasp.evolve.judge_gate import judged_answers

    if "judge" not in active_gates(params.evolve):
        return None
    heldout = load_heldout(epoch_dir / art.HELDOUT)
    judge = judge if judge is not None else teacher if teacher is not None else policy
    out_dir = epoch_dir / art.JUDGE_RUNS

    def run_judge(library: Path, label: str) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
        out = out_dir / f"{label.replace('+', '__')}.jsonl"
        summary = rollout(params, data_dir, library, "heldout", out, policy=policy, variant="pf", teacher=teacher,
                          label=label, executor=executor, items=heldout)
        scores, counts = judged_answers(read_trajectories(out), judge, max_chars=params.evolve.traces.judge_max_chars)
        return summary, scores, counts
    return run_judge


def gate_runners(params: Params, data_dir: Path, epoch_dir: Path, *, policy: Policy, teacher: Teacher | None = None,
                 executor: EpisodeExecutor | None = None) -> dict[str, Any]:
    """The runs ``gate`` makes, by its keyword names: ``run_val``, ``run_anchors``, ``run_judge``."""
    kw = {"policy": policy, "teacher": teacher, "executor": executor}
    return {"run_val": val_runner(params, data_dir, epoch_dir / art.VAL_RUNS, **kw),
            "run_anchors": anchor_runner(params, data_dir, epoch_dir / art.ANCHOR_RUNS, **kw),
            "run_judge": judge_runner(params, data_dir, epoch_dir, **kw)}


# ----------------------------------------------------------------------------- Phase F
def admit_phase(candidates_path: Path, reviews_path: Path | None, clusters_path: Path, library_in: Path,
                library_out: Path, params: Params, *, epoch: int,
                history_path: Path | None = None) -> dict[str, Any]:
    """Phase F: copy the input library to ``library_out`` and admit candidates there.

    Admission is decided by the gate table of ``hasp.evolve.gate`` for the configured
    mode/filtering (Phase-D reports, reviews and val results are read from the epoch
    folder next to ``candidates_path``). Every decision lands in
    ``library_out/library_history.json`` and ``admission.json``; the proposer's feedback
    history (``history_path``) gets the same entries."""
    from hasp.evolve.admit import admit, snapshot
    from hasp.evolve.gate import active_gates, placeholder_review, refusals
    from hasp.train.rewards import skill_author_reward
    from hasp.evolve.propose import FeedbackEntry, FeedbackHistory

    epoch_dir = Path(candidates_path).parent
    gates = active_gates(params.evolve)
    evs = _evidence(epoch_dir, library_in, params.sandbox, params.evolve)
    tmp = library_out.with_name(f".{library_out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    copy_folder(library_in, tmp, skip=("__pycache__", ".*"))
    shutil.rmtree(library_out, ignore_errors=True)
    os.replace(tmp, library_out)
    history = None
    if history_path is not None:
        # Re-running an epoch replaces that epoch's feedback instead of appending duplicates.
        history = FeedbackHistory.load(history_path)
        history.entries = [x for x in history.entries if x.epoch != epoch]
        history.save(history_path)
    results = []
    for ev in evs:
        review = ev.review or placeholder_review(f"{params.evolve.mode} mode: no review")
        why = refusals(ev, gates)
        q = review.q_skill if ev.review is not None else None
        extra = {"mode": params.evolve.mode, "filtering": params.evolve.filtering, "gates": list(gates),
                 "delta_em_val": ev.val.delta_em if ev.val else None,
                 "delta_f1_val": ev.val.delta_f1 if ev.val else None,
                 "r_skill": skill_author_reward(q, ev.val.delta_em if ev.val else None,
                                                params.evolve.r_skill_lambda)}
        res = admit(library_out, ev.candidate, review, epoch=epoch, cluster=ev.cluster,
                    max_library_size=params.evolve.max_library_size, refusals=why,
                    accept_reason=f"passed gates {'+'.join(gates)}", extra=extra, evolve=params.evolve,
                    domain=domain_name(params))
        results.append({"skill_id": res.skill_id, "admitted": res.admitted, "version": res.version,
                        "reason": res.reason, **extra})
        if history is not None:
            history.append(FeedbackEntry.from_dict(res.entry))
    if not (library_out / "library_history.json").exists():
        write_json([], library_out / "library_history.json")  # an epoch with no candidates still has a history
    snapshot(library_out, library_out / "snapshots" / f"epoch_{epoch}")
    write_json(results, epoch_dir / art.ADMISSION)
    lib = load_library(library_out, domain_name(params), sandbox=params.sandbox)
    size = len(lib.skills)
    lib.close()
    return {"admitted": sum(r["admitted"] for r in results), "decisions": results, "library_size": size,
            "gates": list(gates)}


# ----------------------------------------------------------------------------- frontier
def frontier_update(out_root: Path, epoch: int, library_out: Path, val_summary: dict[str, Any],
                    params: Params, *, seed: tuple[Path, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Put this epoch's library into ``frontier.json``; roll back when val EM fell too far.

    ``seed`` = (input library, its val summary) adds the starting library as member
    ``SEED_EPOCH`` (first epoch only). Writes ``epoch_<i>/carry.json`` naming the library
    the next epoch starts from: this epoch's, or a restored copy of the best snapshot. Members
    of later epochs (left by an earlier run in the same folder) are dropped first."""
    from hasp.evolve.admit import snapshot
    from hasp.evolve.frontier import SEED_EPOCH, Frontier, restore_snapshot, write_carry

    e = params.evolve
    fr = Frontier.load(out_root / "frontier.json", e.frontier_size)
    gone = fr.drop_after(epoch)
    if gone:
        log.info("epoch %d: frontier forgets epochs %s of an earlier run (they are redone after this one)",
                 epoch, gone)
    if seed is not None and fr.get(SEED_EPOCH) is None:
        seed_lib, seed_val = seed
        snap = snapshot(seed_lib, out_root / "frontier_seed")
        fr.update(SEED_EPOCH, float(seed_val["em"]), snap, f1=seed_val.get("f1"))
    score = float(val_summary["em"])
    snap = library_out / "snapshots" / f"epoch_{epoch}"
    entered = fr.update(epoch, score, snap, f1=val_summary.get("f1"))
    target = fr.rollback_target(score, e.rollback_tolerance)
    fr.save()
    ep_dir = out_root / f"epoch_{epoch}"
    carry, rolled = library_out, None
    if target is not None:
        carry = restore_snapshot(Path(target.snapshot), ep_dir / "library_rollback", history_from=library_out,
                                 note={"epoch": epoch, "val_em": score, "best_epoch": target.epoch,
                                       "best_score": target.score, "tolerance": e.rollback_tolerance})
        rolled = target.epoch
        log.warning("epoch %d: val EM %.3f < best %.3f (epoch %d) - %.3f; next epoch starts from its snapshot",
                    epoch, score, target.score, target.epoch, e.rollback_tolerance)
    info = write_carry(ep_dir, carry, rolled_back_to=rolled, val_em=score, best=fr.best())
    return {"val_em": score, "val_f1": val_summary.get("f1"), "in_frontier": entered, "rolled_back_to": rolled,
            "carry": str(carry), "frontier": [m.__dict__ for m in fr.members], "best_score": info["best_score"]}


def rollback_to(out_root: Path, epoch: int, dest: Path | None = None) -> Path:
    """Restore the library snapshot of ``epoch`` (a frontier member, or any finished epoch)
    into ``dest`` (default: ``<latest epoch>/library_rollback``, which then becomes the
    library the next epoch starts from)."""
    from hasp.evolve.frontier import SEED_EPOCH, Frontier, read_carry, restore_snapshot, write_carry

    fr = Frontier.load(out_root / "frontier.json")
    m = fr.get(epoch)
    snap = Path(m.snapshot) if m else (out_root / "frontier_seed" if epoch == SEED_EPOCH else
                                       out_root / f"epoch_{epoch}" / art.LIBRARY / "snapshots" / f"epoch_{epoch}")
    if not snap.is_dir():
        raise FileNotFoundError(f"no snapshot for epoch {epoch} (looked at {snap})")
    epochs = sorted(int(p.name.split("_")[1]) for p in out_root.glob("epoch_*") if p.name.split("_")[1].isdigit())
    if dest is None:
        if not epochs:
            raise FileNotFoundError(f"{out_root} has no epoch_<i> folders; pass --dest")
        last = out_root / f"epoch_{epochs[-1]}"
        cur = read_carry(last)
        dest = last / "library_rollback"
        restore_snapshot(snap, dest, history_from=Path(cur["library"]) if cur else last / art.LIBRARY,
                         note={"manual": True, "to_epoch": epoch})
        write_carry(last, dest, rolled_back_to=epoch, val_em=m.score if m else None, best=fr.best())
        return dest
    return restore_snapshot(snap, dest, note={"manual": True, "to_epoch": epoch})


# ----------------------------------------------------------------------------- Phases G + H
def build_data(rollout_path: Path, params: Params, out_dir: Path) -> dict[str, Any]:
    """Phase G (four coarse signals per step) and H: Objective A (SFT + DPO jsonl of
    PF-corrected steps) and, when the epoch has candidates, Objective B (skill-authoring
    SFT + DPO, ``sft_skill.jsonl`` / ``dpo_skill.jsonl``, see ``build_skill_data``).
    With ``train.sft.hindsight`` the SFT rows also answer the failed questions whose gold answer the
    rollout observed (``hasp.train.hindsight``; Phase A's rollout is on the train split)."""
    from hasp.atomic import write_jsonl
    from hasp.train.data import build_dpo_rows, build_sft_rows, score_all, signal_summary, summarize
    from hasp.train.hindsight import hindsight_rows

    scored = score_all(read_trajectories(rollout_path))
    sft = build_sft_rows(scored, reward_floor=params.signals.reward_floor)
    dpo = build_dpo_rows(scored, reward_floor=params.signals.reward_floor)
    hs_cfg, hindsight = params.train.sft.hindsight, None
    if hs_cfg.enabled:
        hs, hindsight = hindsight_rows([s.traj for s in scored], weight=hs_cfg.weight, states=hs_cfg.states)
        sft += hs
    write_jsonl(sft, out_dir / art.SFT)
    write_jsonl(dpo, out_dir / art.DPO)
    sft_summary = summarize(sft)
    if sft and not sft_summary["per_target_type"].get("FINAL"):
        log.warning("%s: none of the %d SFT rows has a FINAL target (%s): a policy trained on them "
                    "may learn to defer its answer", out_dir / art.SFT, len(sft),
                    ", ".join(f"{k} {v}" for k, v in sft_summary["per_target_type"].items()))
    summary = {"signals": signal_summary(scored), "sft": sft_summary, "dpo_rows": len(dpo),
               "objective_b": build_skill_data(out_dir, params)}
    if hindsight is not None:
        summary["sft_hindsight"] = hindsight
    write_json(summary, out_dir / art.DATA_SUMMARY)
    return summary


def build_skill_data(epoch_dir: Path, params: Params) -> dict[str, Any]:
    """Objective B of one epoch from its phase files; earlier epochs' ``skill_records.jsonl``
    (siblings ``epoch_<j>``, j < this epoch) supply the other side of cross-epoch DPO pairs."""
    from hasp.atomic import read_jsonl, write_jsonl
    from hasp.evolve.declarative import reply_lines
    from hasp.evolve.propose import Candidate
    from hasp.train.data import build_skill_dpo_rows, build_skill_records, build_skill_sft_rows
    from hasp.train.rewards import reaches_floor

    cpath = epoch_dir / art.CANDIDATES
    if not cpath.exists():
        return {"skipped": "no candidates.json in this epoch"}
    candidates = read_json(cpath)
    targets = {c["skill_id"]: t for c in candidates if (t := reply_lines(Candidate.from_dict(c))) is not None}
    records = build_skill_records(candidates, reviews=_load_list(epoch_dir / art.REVIEWS),
                                  exec_reports=_load_list(epoch_dir / art.VALIDATION),
                                  val_results=_load_list(epoch_dir / art.GATE),
                                  decisions=_load_list(epoch_dir / art.ADMISSION),
                                  lam=params.evolve.r_skill_lambda, targets=targets)
    this = _epoch_num(epoch_dir)
    earlier = [r for p in sorted(epoch_dir.parent.glob(f"epoch_*/{art.SKILL_RECORDS}"))
               if _epoch_num(p.parent) < this for r in read_jsonl(p)]
    floor = params.signals.reward_floor
    sft = build_skill_sft_rows(records, reward_floor=floor)
    dpo = build_skill_dpo_rows(records, earlier=earlier, reward_floor=floor)
    write_jsonl(records, epoch_dir / art.SKILL_RECORDS)
    write_jsonl(sft, epoch_dir / art.SFT_SKILL)
    write_jsonl(dpo, epoch_dir / art.DPO_SKILL)
    return {"records": len(records), "unscored": sum(r["r_skill"] is None for r in records),
            "sft_rows": len(sft), "dpo_rows": len(dpo),
            "below_floor": sum(r["r_skill"] is not None and not reaches_floor(r["r_skill"], floor) for r in records)}


def _epoch_num(epoch_dir: Path) -> int:
    tail = Path(epoch_dir).name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


# ----------------------------------------------------------------------------- LoRA SFT (E1 shape)
def train(sft_path: Path, params: Params, out_dir: Path, *, model_dir: Path | None = None) -> TrainSummary:
    """The epoch's training step: SFT of the policy through the one training entry point
    (``hasp.train.run.run_recipe``), which writes adapter/, merged/ and the ``TrainSummary``. The rows
    are the ones ``train.objective`` picks (``hasp.train.objective.rows_for``): the Phase-H rows
    ``sft_path``, the skill author's rows beside it, or both. The epoch has rows and no sampler, so a
    preset or ``train.recipe`` of another recipe, or rows that are empty (``NoRowsError``, the case a
    closed loop's later phase keeps its checkpoint on too), is recorded as a skipped phase instead."""
    from hasp.train.objective import rows_for
    from hasp.train.rounds import NoRowsError
    from hasp.train.run import resolved_train, run_recipe, skip_training

    t = resolved_train(params)
    rows = Path(sft_path)
    if t.enabled and t.recipe != "sft":
        reason = (f"train.recipe is {t.recipe}{f' (preset {t.preset})' if t.preset else ''}: this step trains "
                  "sft on the epoch's rows only; rs and opd sample their own rollouts and dpo reads dpo.jsonl")
    else:
        rows = rows_for(t, rows, rows.parent).path if t.enabled else rows
        try:
            return run_recipe(params, model=model_dir, out_dir=out_dir, train=t, rows=rows)
        except NoRowsError as e:
            reason = f"{e}; training skipped"
    log.warning(reason)
    return skip_training(t, out_dir, reason)


# ----------------------------------------------------------------------------- evaluation
def evaluate(params: Params, data_dir: Path, library_root: Path, out_dir: Path, *, policy: Any,
             trained_policy: Any | None, teacher: Any = None, split: str = "test",
             library_before: Path | None = None, executor: EpisodeExecutor | None = None) -> dict[str, Any]:
    """Baseline ReAct vs PF agent vs trained PF agent on the epoch task's ``split`` (the generated
    benchmark's for search; same library, same data), through the evaluation runner every ``hasp eval`` uses. With
    ``library_before`` (the epoch's input library) the PF agent also runs with it, labelled
    ``<pf>_before``, so the epoch's effect on the same questions is in the table.

    Labels say what ran: ``pf_teacher`` / ``trained_pf_teacher`` when a teacher is configured.
    Writes the runner's files under ``out_dir`` and returns ``{label: summary}``."""
    from hasp.eval.runner import Arm, run_eval
    from hasp.evolve.epoch_task import epoch_task
    from hasp.pf.library import library_hash

    ds = epoch_task(params, data_dir).dataset(params, data_dir, split)
    arms = epoch_arms(teacher, trained_policy, params)
    pf = get_variant(pipeline_variant("pf", teacher, params))
    before = f"{pf.name}_before"
    unchanged = library_before is not None and library_hash(Path(library_before)) == library_hash(Path(library_root))
    if library_before is not None and not unchanged:
        arms.insert(1, Arm(before, pf, None, library_before))
    res = run_eval(params, [ds], arms, policy=policy, library_root=library_root,
                   out_dir=out_dir, teacher=teacher, teacher_snippets=False, executor=executor)
    metrics = res.metrics()[ds.name]
    if unchanged:  # nothing admitted: the "before" agent is the same agent on the same questions
        log.info("the epoch admitted nothing: %s reuses the %s episodes instead of running them again", before, pf.name)
        first, *rest = metrics.items()  # the table keeps its order: react, <pf>_before, <pf>, ...
        metrics = dict([first, (before, {**metrics[pf.name], "same_library_as": pf.name}), *rest])
        for f in list(Path(out_dir).rglob(f"{pf.name}.*")):  # its trajectories and the runner's episode times
            shutil.copyfile(f, f.with_name(before + f.name[len(pf.name):]))
        written = read_json(Path(out_dir) / "metrics.json")
        write_json({**written, ds.name: metrics}, Path(out_dir) / "metrics.json")
    return metrics


def epoch_arms(teacher: Any, trained_policy: Any | None, params: Params) -> list[Any]:
    """ReAct, the pipeline's PF agent and, with a trained policy, the same agent on that policy."""
    from hasp.eval.runner import Arm

    pf = get_variant(pipeline_variant("pf", teacher, params))
    arms = [Arm("react", get_variant("react")), Arm(pf.name, pf)]
    if trained_policy is not None:
        arms.append(Arm(f"trained_{pf.name}", pf, trained_policy))
    return arms
