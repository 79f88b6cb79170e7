"""Admission gates: which checks may refuse a candidate, as a table (paper App. C, D.5, G.3).

Each gate is a small function ``Evidence -> list[str]`` (reasons to refuse; empty = pass).
``evolve.mode`` and ``evolve.filtering`` select a tuple of gate names from ``FILTERING``
/ ``LITE_GATES`` — no mode-specific branches elsewhere:

=========  =====================================================
filtering  gates
=========  =====================================================
none       parse                       (every candidate whose code parses)
exec       parse, exec                 (Phase D: all executable checks)
teacher    parse, teacher              (Phase E: decision ACCEPT and Q_skill >= bar)
full       parse, exec, teacher, val   (val dropped when ``val_gate`` is off)
lite mode  parse, loadable, sandbox_exec, new_id   (App. D.5: compile check + skill-id dedup)
=========  =====================================================

With ``evolve.anchors`` set, every row gets ``anchors`` last (``hasp.evolve.anchors``): any pinned
question that passed with the library alone and fails with the candidate refuses it. A pin is the
user's promise, not an ablation, so it holds in every mode and filtering, ``val_gate`` off included;
like the val gate it runs only for candidates every other gate passed.

``loadable`` and ``sandbox_exec`` (lite only) are our additions to App. D.5: the paper's lite
mode admits whatever ``ast.parse`` accepts, which let a reply with no ``@register_pf`` class and
disallowed imports into ``generated/``, and code that loops, exhausts memory or returns
megabytes into the library. ``loadable`` reads the code (the sandbox's static policy plus "a
registered PF class whose id is the skill id"); ``sandbox_exec`` runs it once in the sandbox on
the mock regimes, stopping at the first failure (``hasp.evolve.validate.lite_exec_refusals``,
well under a second for code that behaves). Lite stays free of teacher calls. ``none`` keeps
the paper's no-filtering ablation as it is; the loader's policy check and the sandbox still
keep such code contained at run time.

Structural checks that the library needs to store a skill at all (folder id,
SKILL.md parses, size cap) are applied by ``hasp.evolve.admit`` in every mode.

``new_id`` refuses an id the library already has, except for a revision (``Candidate.revises``):
a candidate that declares itself a new version of that skill keeps its id, and admission stores
it as the skill's next version, which replaces the older one at run time (App. C.6).

The **val gate** (EvoSkill-style held-out check): the PF agent runs on the val split
with the library plus the candidate and with the library alone (one baseline run
shared by every candidate of the epoch). With ``val_rule: gain`` (the default, EvoSkill's
rule) a candidate is admitted only when ``ΔEM_val > 0``: on a weak model whose baseline is
near zero, "no drop" admits every skill that never fires. ``no_drop`` refuses ``ΔEM_val < 0``
only;
``r_skill = Q_skill + λ·ΔEM_val`` (App. E, ``hasp.train.rewards.skill_author_reward``) is recorded either way. The candidate's
code runs through ``SandboxedPF`` because it is loaded from ``generated/`` like any
admitted skill.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hasp.config import EvolveParams, SandboxParams
from hasp.evolve.cluster import Cluster
from hasp.evolve.propose import Candidate, registered_id
from hasp.evolve.review import DEFAULT_BARS, Review, admission_bar
from hasp.pf.folder_files import copy_folder
from hasp.sandbox.policy import check_policy
from hasp.train.rewards import skill_author_reward

log = logging.getLogger(__name__)

__all__ = ["Evidence", "ValResult", "GATES", "FILTERING", "LITE_GATES", "active_gates", "refusals",
           "pre_val_gates", "epoch_phases", "static_exec", "static_exec_report", "run_val_gate",
           "placeholder_review", "val_passed", "with_candidate"]


@dataclass
class ValResult:
    """One candidate's held-out check against the shared baseline."""

    skill_id: str
    em_val: float | None = None
    f1_val: float | None = None
    base_em: float | None = None
    base_f1: float | None = None
    delta_em: float | None = None
    delta_f1: float | None = None
    n: int = 0
    q_skill: float | None = None
    r_skill: float | None = None
    error: str = ""
    failed_calls: int = 0  # val episodes the endpoint failed (infrastructure): the run then counts as failed
    rule: str = "gain"  # val_rule applied (recorded so admission reads what the gate measured against)
    weaker: list[str] = field(default_factory=list)  # isolation layers missing in the val run (allow_weaker)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ValResult":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class Evidence:
    """Everything the gates may look at for one candidate (absent phases are None)."""

    candidate: Candidate
    cluster: Cluster
    exec_report: dict[str, Any] | None = None
    review: Review | None = None
    val: ValResult | None = None
    library_ids: frozenset[str] = frozenset()
    earlier_ids: tuple[str, ...] = ()  # ids of candidates before this one in the same batch
    sandbox: SandboxParams | None = None  # the sandbox a gate that runs the code uses (None: defaults)
    evolve: EvolveParams | None = None  # the review bars the teacher gate applies (None: defaults)
    anchors: Any = None  # hasp.evolve.anchors.AnchorResult of the anchors gate (None: not run)
    judge: Any = None  # hasp.evolve.judge_gate.JudgeGateResult of the judge gate (None: not run)


GateFn = Callable[[Evidence], list[str]]


def _declared(ev: Evidence) -> list[str]:
    from hasp.evolve.declarative import declaration_errors

    return [f"declaration does not compile: {e}" for e in declaration_errors(ev.candidate)]


def _parse(ev: Evidence) -> list[str]:
    if ev.candidate.declared:
        return _declared(ev)
    code = ev.candidate.code
    if not code.strip():
        return [f"no PF code ({ev.candidate.parse_error or 'empty'})"]
    try:
        ast.parse(code)
    except (SyntaxError, ValueError) as e:
        return [f"code does not parse: {getattr(e, 'msg', e)}"]
    return []


def _exec(ev: Evidence) -> list[str]:
    rep = ev.exec_report
    if rep is None:
        return ["no Phase-D report"]
    why = []
    if not rep.get("passed"):
        failed = [k for k, ok in (rep.get("checks") or {}).items() if not ok]
        why.append(f"Phase D failed ({', '.join(failed) or 'checks'}; Q_exec {float(rep.get('q_exec', 0)):.2f})")
    if not ev.candidate.declared and registered_id(ev.candidate.code) != ev.candidate.skill_id:
        why.append(f"@register_pf id {registered_id(ev.candidate.code)!r} != skill_id {ev.candidate.skill_id!r}")
    return why


def _teacher(ev: Evidence) -> list[str]:
    rv = ev.review
    if rv is None:
        return ["no Phase-E review"]
    why = []
    bar = admission_bar(ev.cluster.is_new_category, ev.evolve or DEFAULT_BARS)
    if rv.decision != "ACCEPT":
        why.append(f"review decision {rv.decision}")
    if rv.q_skill < bar:
        why.append(f"Q_skill {rv.q_skill:.3f} below the "
                   f"{'new-group' if ev.cluster.is_new_category else 'same-group'} bar {bar:.2f}")
    return why


def _val(ev: Evidence) -> list[str]:
    v = ev.val
    if v is None:
        return ["no val-gate result"]
    if v.error or v.delta_em is None:
        return [f"val run failed: {v.error or 'no result'}"]
    if v.delta_em < 0:
        return [f"val EM drops by {-v.delta_em:.3f} ({v.base_em:.3f} -> {v.em_val:.3f}, n={v.n})"]
    if v.delta_em == 0 and v.rule == "gain":
        return [f"val EM unchanged ({v.base_em:.3f} -> {v.em_val:.3f}, n={v.n}); val_rule gain needs a rise"]
    return []


def _anchors(ev: Evidence) -> list[str]:
    if ev.anchors is None:
        return ["no anchor check"]
    return ev.anchors.refusal()


def _judge(ev: Evidence) -> list[str]:
    if ev.judge is None:
        return ["no judge-gate check"]
    return ev.judge.refusal()


def val_passed(v: ValResult) -> bool:
    """Whether a val result passes its rule (the same test ``refusals`` applies)."""
    return not v.error and v.delta_em is not None and (v.delta_em > 0 or (v.delta_em == 0 and v.rule == "no_drop"))


def _loadable(ev: Evidence) -> list[str]:
    if ev.candidate.declared:
        return _declared(ev)
    code = ev.candidate.code
    why = [f"static policy: {v}" for v in check_policy(code)]
    rid = registered_id(code)
    if rid is None:
        why.append("no @register_pf class")
    elif rid != ev.candidate.skill_id:
        why.append(f"@register_pf id {rid!r} != skill_id {ev.candidate.skill_id!r}")
    return why


def _sandbox_exec(ev: Evidence) -> list[str]:
    from hasp.evolve.validate import lite_exec_refusals

    if ev.candidate.declared:  # compiled from vetted templates, never run as student code
        return []
    if check_policy(ev.candidate.code):  # never run code the policy refuses (``loadable`` says why)
        return ["not run: the static policy refuses it"]
    return lite_exec_refusals(ev.candidate.code, ev.candidate.skill_id, ev.sandbox)


def _new_id(ev: Evidence) -> list[str]:
    sid = ev.candidate.skill_id
    if sid in ev.library_ids and ev.candidate.revises != sid:
        return [f"skill id {sid!r} already in the library"]
    if sid in ev.earlier_ids:
        return [f"skill id {sid!r} proposed twice in this batch"]
    return []


GATES: dict[str, GateFn] = {"parse": _parse, "exec": _exec, "teacher": _teacher, "val": _val, "new_id": _new_id,
                              "loadable": _loadable, "sandbox_exec": _sandbox_exec, "anchors": _anchors,
                              "judge": _judge}
#: the gates that run the policy on questions (after every cheap gate passed)
RUN_GATES = ("val", "anchors", "judge")
FILTERING: dict[str, tuple[str, ...]] = {
    "none": ("parse",),
    "exec": ("parse", "exec"),
    "teacher": ("parse", "teacher"),
    "full": ("parse", "exec", "teacher", "val"),
}
LITE_GATES: tuple[str, ...] = ("parse", "loadable", "sandbox_exec", "new_id")


def active_gates(evolve: Any) -> tuple[str, ...]:
    """The gate names for ``params.evolve`` (mode, filtering, val_gate, anchors, the traces' holdout).
    The anchors and the judge gate (``hasp.evolve.judge_gate``) run in every mode and filtering: both
    guard a library that learns without gold, which a lite epoch does too."""
    gates = LITE_GATES if evolve.mode == "lite" else FILTERING[evolve.filtering]
    gates = tuple(g for g in gates if g != "val" or evolve.val_gate)
    if getattr(evolve, "anchors", None):
        gates += ("anchors",)
    traces = getattr(evolve, "traces", None)
    if traces is not None and traces.source and traces.holdout > 0:
        gates += ("judge",)
    return gates


def pre_val_gates(gates: Sequence[str]) -> tuple[str, ...]:
    """The cheap gates a candidate must pass before its (expensive) val and anchor runs."""
    return tuple(g for g in gates if g not in RUN_GATES)


def refusals(ev: Evidence, gates: Iterable[str]) -> list[str]:
    """Every reason of every gate, prefixed by the gate name. The val and anchor gates are only
    consulted when the gates before them passed (a refused candidate never gets those runs)."""
    out: list[str] = []
    for g in gates:
        if g in RUN_GATES and out:
            continue
        out += [f"{g}: {r}" for r in GATES[g](ev)]
    return out


def epoch_phases(evolve: Any) -> tuple[str, ...]:
    """Which of Phase D, Phase E and the val gate run. lite runs D and E never; otherwise D and E
    always run (their scores are recorded and feed Objective B even when they do not gate). The
    gate phase runs when the val gate or the anchors gate (in any mode) gates."""
    gate = ("gate",) if set(RUN_GATES) & set(active_gates(evolve)) else ()
    if evolve.mode == "lite":
        return gate
    return ("validate", "review") + gate


def static_exec(evolve: Any) -> bool:
    """Phase D reads the code without running it when only the teacher gates (the exec ablation)."""
    gates = active_gates(evolve)
    return "teacher" in gates and "exec" not in gates


def placeholder_review(reason: str) -> Review:
    """The review record of a candidate that was never reviewed (lite mode): no scores, explicit reason."""
    return Review(q_concept=0.0, q_trigger=0.0, q_intervene=0.0, q_exec=0.0, q_val=0.0, q_skill=0.0,
                  decision="NOT_REVIEWED", feedback="", reviewer="none", reasons=[reason],
                  decided_by="not_reviewed")


# --------------------------------------------------------------------------- static exec (teacher-only)

def static_exec_report(code: str, skill_id: str | None) -> dict[str, Any]:
    """A Phase-D-shaped report from reading the code only (syntax, policy, static interface).

    Used when executable validation does not gate admission (``filtering: teacher``): the
    reviewer still needs an executability estimate, but the sandboxed mock execution — the
    thing that ablation switches off — must not leak in through the review's hard reject."""
    from hasp.evolve.validate import interface_errors, static_interface
    from hasp.sandbox.policy import check_policy

    checks = {"syntax": False, "policy": False, "interface": False}
    errors: list[str] = []
    try:
        tree = ast.parse(code or "")
        checks["syntax"] = bool((code or "").strip())
    except (SyntaxError, ValueError) as e:
        errors.append(f"syntax: {getattr(e, 'msg', e)}")
        tree = None
    if tree is not None and checks["syntax"]:
        violations = check_policy(code)
        checks["policy"] = not violations
        errors += [f"policy: {v}" for v in violations]
        info, errs = static_interface(tree, skill_id)
        errs = errs + (interface_errors(info) if info else [])
        checks["interface"] = not errs
        errors += errs
    q = round(sum(checks.values()) / len(checks), 4) if checks["policy"] else 0.0
    return {"skill_id": skill_id, "q_exec": q, "passed": False, "static": True, "checks": checks,
            "errors": errors}


# --------------------------------------------------------------------------- val gate

def run_val_gate(items: Sequence[tuple[Candidate, Cluster, Review]], library_root: Path,
                 run_val: Callable[[Path, str], dict[str, Any]], baseline: dict[str, Any], *,
                 lam: float = 0.5, workdir: Path | None = None, rule: str = "gain",
                 stop: Callable[[], Any] | None = None) -> list[ValResult]:
    """Val-split check of each candidate against the shared ``baseline`` summary.

    ``run_val(library_dir, label)`` runs the PF agent on the val split and returns a
    rollout summary with ``em``/``f1``/``n`` (``hasp.evolve.epoch.rollout``). Each
    candidate gets a temporary copy of ``library_root`` with only that candidate added
    under ``generated/`` (so it loads through ``SandboxedPF``). A failure of one run is
    recorded on its result, never raised. ``stop()`` is asked before each candidate (the epoch's
    budget, ``hasp.evolve.budget.Guard.reached``): once it says yes, the candidates left get a result
    saying they were not run, which the gate refuses.
    """
    out = []
    base_em, base_f1 = float(baseline["em"]), float(baseline["f1"])
    cut = False
    for cand, cluster, review in items:
        q = review.q_skill if review.decided_by != "not_reviewed" else None
        res = ValResult(skill_id=cand.skill_id, base_em=base_em, base_f1=base_f1, q_skill=q, rule=rule)
        cut = cut or (stop is not None and bool(stop()))
        if cut:
            res.error = "not run: the epoch's budget (evolve.budget) was reached"
            out.append(res)
            continue
        try:
            with with_candidate(library_root, cand, cluster, review, workdir) as lib:
                m = run_val(lib, f"val+{cand.skill_id}")
            res.em_val, res.f1_val, res.n = float(m["em"]), float(m["f1"]), int(m.get("n", 0))
            res.weaker = list(m.get("sandbox_weaker") or ())
            res.failed_calls = int(m.get("failed_calls") or 0)
            if res.failed_calls:  # an outage is not a measurement: no delta, and the phase is retried
                raise RuntimeError(f"{m.get('failure') or str(res.failed_calls) + ' episodes failed'} "
                                   f"({m.get('first_error', '')})".strip())
            res.delta_em = round(res.em_val - base_em, 6)
            res.delta_f1 = round(res.f1_val - base_f1, 6)
        except Exception as e:  # noqa: BLE001 - recorded; the val gate then refuses this candidate
            log.warning("val gate for %s failed: %s", cand.skill_id, e)
            res.error = f"{type(e).__name__}: {e}"
        res.r_skill = skill_author_reward(res.q_skill, res.delta_em, lam)
        out.append(res)
    return out


@contextlib.contextmanager
def with_candidate(library_root: Path, cand: Candidate, cluster: Cluster, review: Review,
                   workdir: Path | None = None, kind: str = "valgate") -> Iterator[Path]:
    """A scratch copy of ``library_root`` with only ``cand`` added under ``generated/`` (so it loads
    through ``SandboxedPF`` like any admitted skill), removed on exit; the gates that run the policy
    (val, anchors) each run on one. The folder's ``<kind>-*`` prefix is what an interrupted run leaves."""
    from hasp.evolve.admit import admit

    tmp = Path(tempfile.mkdtemp(prefix=f"{kind}-{cand.skill_id}-", dir=workdir))
    lib = tmp / "library"
    try:
        copy_folder(library_root, lib, skip=("__pycache__", ".*", "snapshots"))
        added = admit(lib, cand, review, epoch=-1, cluster=cluster, record=False, refusals=[])
        if not added.admitted:
            raise ValueError(f"could not add the candidate to a library copy: {added.reason}")
        yield lib
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_each(items: Sequence[tuple[Candidate, Cluster, Review]], library_root: Path, kind: str,
               workdir: Path | None, check: Callable[[Candidate, Path], Any], empty: Callable[[Candidate], Any],
               ) -> list[Any]:
    """``check(candidate, library)`` of each ``(candidate, cluster, review)`` on a library copy holding
    only that candidate (``with_candidate``): the per-candidate loop of the anchors and judge gates. A
    result with ``failed_calls`` (the endpoint failed episodes: an outage, not a measurement) gets an
    ``error``; a check that raises gives ``empty(candidate)`` with the error. Either way the gate then
    refuses that candidate, and the others are still checked."""
    out = []
    for cand, cluster, review in items:
        try:
            with with_candidate(library_root, cand, cluster, review, workdir, kind) as lib:
                res = check(cand, lib)
            if res.failed_calls and not res.error:
                res.error = f"RuntimeError: {res.failed_calls} {kind} episodes failed: endpoint error"
        except Exception as e:  # noqa: BLE001 - recorded; the gate then refuses this candidate
            res = empty(cand)
            res.error = f"{type(e).__name__}: {e}"
        if res.error:
            log.warning("%s gate for %s failed: %s", kind, cand.skill_id, res.error)
        out.append(res)
    return out
