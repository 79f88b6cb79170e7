"""Phase D — executable validation of a candidate PF (paper App. C.4).

``validate_candidate(code, skill_id)`` runs the checks in order and returns an
``ExecReport``:

1. **syntax**       ``ast.parse``
2. **policy**       ``hasp.sandbox.policy.check_policy`` (imports, dunders, patching)
3. **interface**    a ``@register_pf`` class inheriting ``ProgramFunction`` with
                    ``should_activate(self, ctx, action_type, arg)`` and
                    ``intervene(self, ctx, action_type, arg, teacher=None)`` (any name
                    for the optional 5th parameter, e.g. ``model=None``); checked on the
                    loaded class inside the sandbox, statically when it cannot be loaded
4. **mock_exec**    3 mock step contexts × SEARCH/READ/FINAL = 9 invocations; each calls
                    ``should_activate`` *and* ``intervene`` (a PF must not crash when
                    called) inside ``SandboxedPF``; the score is the fraction of the 9
                    invocations where neither raised nor timed out. Private ``_`` ctx keys
                    carry across the 9 like one episode; what ``intervene`` writes is only
                    carried when ``should_activate`` said True
5. **return_types** fraction of the 18 calls returning the right type: ``bool`` from
                    ``should_activate``; an ``Intervention`` with a legal ``type`` and
                    legal fields from ``intervene``

A PF that declares ``watches`` must keep that promise on the mock contexts: a ``should_activate``
that says True for an action type outside it fails **interface** (the dispatcher would never
ask it there, so the behaviour tested here would not be the behaviour deployed).

``Q_exec = 0.2 syntax + 0.2 policy + 0.2 interface + 0.25 mock_exec + 0.15 return_types``.
One deviation from a plain weighted sum: **a policy violation sets Q_exec to 0** —
such code is never executed, and Phase E's hard reject (``Q_exec < evolve.exec_threshold``) must
catch it however tidy the rest looks.

The mock contexts are built with ``hasp.agent.context.EpisodeState.to_ctx`` so
they carry exactly the keys the runtime passes. So that a candidate cannot behave on
one fixed question and misbehave on real ones, ``phase_d_contexts`` adds step contexts
replayed from the real trajectories of the candidate's failure cluster and from other
recent steps (varied questions, every action type the agent proposed); the epoch passes
them as ``contexts``/``args``. Returned text over the ``sandbox`` caps is a return-type
error. The candidate code is never imported into this process.

``lite_exec_refusals`` is the cheap form lite admission uses: the same sandboxed run,
stopped at the first failure, so code that loops, exhausts memory or returns oversized
values never enters the library even without a review.
"""

from __future__ import annotations

import ast
import inspect
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.agent.context import EpisodeState
from hasp.pyast import parse_python
from hasp.config import SandboxParams
from hasp.agent.replay import replay
from hasp.records import Trajectory
from hasp.pf.base import ProgramFunction, watched_types
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.sandboxed import SandboxedPF
from hasp.sandbox.policy import check_policy
from hasp.sandbox.worker import SandboxError, SandboxTimeout

WEIGHTS: dict[str, float] = {"syntax": 0.20, "policy": 0.20, "interface": 0.20,
                             "mock_exec": 0.25, "return_types": 0.15}
SEARCH_ACTIONS: tuple[str, ...] = ("SEARCH", "READ", "FINAL")
MAX_ERRORS = 30
#: timeouts after which the remaining invocations are not run (and count as failed): a
#: candidate that loops would otherwise spend the whole time budget one call at a time
MAX_TIMEOUTS = 2


@dataclass
class ExecReport:
    """The outcome of Phase D for one candidate."""

    skill_id: str | None
    syntax: bool = False
    policy: bool = False
    interface: bool = False
    mock_exec: float = 0.0        # fraction of the 9 mock invocations that ran clean
    return_types: float = 0.0     # fraction of the 18 calls that returned legal types
    q_exec: float = 0.0
    passed: bool = False          # every check fully passed
    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # per invocation: ctx, action, results
    class_name: str = ""
    needs_teacher: bool | None = None
    max_fires: int | None = None
    protections: dict[str, Any] = field(default_factory=dict)
    weaker: list[str] = field(default_factory=list)  # isolation layers missing (the user allowed it)
    elapsed_s: float = 0.0

    @property
    def checks(self) -> dict[str, bool]:
        return {"syntax": self.syntax, "policy": self.policy, "interface": self.interface,
                "mock_exec": self.mock_exec >= 1.0, "return_types": self.return_types >= 1.0}

    @property
    def activations(self) -> dict[str, bool | None]:
        """``"<ctx>/<ACTION>" -> should_activate result`` (None when it raised)."""
        return {f"{c['ctx']}/{c['action']}": c.get("should_activate") for c in self.calls}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = self.checks
        return d

    def _score(self) -> None:
        if not self.syntax or not self.policy:
            self.q_exec = 0.0
        else:
            q = (WEIGHTS["syntax"] + WEIGHTS["policy"] + WEIGHTS["interface"] * self.interface
                 + WEIGHTS["mock_exec"] * self.mock_exec + WEIGHTS["return_types"] * self.return_types)
            self.q_exec = round(min(1.0, max(0.0, q)), 4)
        self.passed = all(self.checks.values())

    def _error(self, msg: str) -> None:
        if msg not in self.errors and len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)


# --------------------------------------------------------------------------- mock contexts

_Q = "Which company did the founder of Quellbrook Systems start after leaving Varnholt Labs?"


def _hits(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"id": i, "title": t} for i, t in pairs]


def mock_contexts(max_steps: int = 15) -> list[tuple[str, dict[str, Any]]]:
    """The three regimes of App. C.4, as real step contexts (``EpisodeState.to_ctx``).

    early: step 1, one search done, nothing read.
    mid:   step 5, two searches and two reads, consistent sources.
    late:  step 12, the last search came back empty and the read sources contradict.
    """
    h1 = _hits(("doc0012", "Quellbrook Systems"), ("doc0047", "Varnholt Labs"), ("doc0103", "Quellbrook Labs"))
    early = EpisodeState(question=_Q, max_steps=max_steps, step_count=1, search_count=1,
                         queries=["founder of Quellbrook Systems"],
                         action_history=["SEARCH[founder of Quellbrook Systems]"],
                         last_search_results_text=(
                             "1. [doc0012] Quellbrook Systems: Quellbrook Systems was founded in 1998 by Mara Eskel.\n"
                             "2. [doc0047] Varnholt Labs: Varnholt Labs is a research company in Doruna.\n"
                             "3. [doc0103] Quellbrook Labs: Quellbrook Labs, not to be confused with Quellbrook Systems."),
                         last_search_hits=h1, seen_hits=list(h1))
    docs_mid = ["Quellbrook Systems was founded in 1998 by Mara Eskel, formerly of Varnholt Labs.",
                "Mara Eskel left Varnholt Labs in 2004 and started Tessaly Robotics in Doruna."]
    h2 = _hits(("doc0201", "Mara Eskel"), ("doc0202", "Tessaly Robotics"))
    mid = EpisodeState(question=_Q, max_steps=max_steps, step_count=5, search_count=2, read_count=2,
                       queries=["founder of Quellbrook Systems", "Mara Eskel Varnholt Labs"],
                       action_history=["SEARCH[founder of Quellbrook Systems]", "READ[doc0012]",
                                       "SEARCH[Mara Eskel Varnholt Labs]", "READ[doc0201]"],
                       last_search_results_text=(
                           "1. [doc0201] Mara Eskel: Mara Eskel is an engineer and founder.\n"
                           "2. [doc0202] Tessaly Robotics: Tessaly Robotics was started in 2004."),
                       last_search_hits=h2, seen_hits=h1 + h2, read_ids=["doc0012", "doc0201"],
                       read_contents=docs_mid)
    docs_late = docs_mid + [
        "However, some records say Tessaly Robotics was not founded by Mara Eskel but by her brother.",
        "Although often credited, Eskel never held a stake; the founding date is disputed, but 2005 is likely.",
    ]
    q_late = ["founder of Quellbrook Systems", "Mara Eskel Varnholt Labs", "Tessaly Robotics founder",
              "Tessaly Robotics founder", "Tessaly Robotics founder 2004 Doruna Mara Eskel brother company",
              "who really founded Tessaly Robotics after Mara Eskel left Varnholt Labs in Doruna in 2004 or 2005"]
    late = EpisodeState(question=_Q, max_steps=max_steps, step_count=12, search_count=6, read_count=4,
                        empty_results=True, queries=q_late,
                        action_history=[f"SEARCH[{q}]" for q in q_late[:3]] + ["READ[doc0202]", "READ[doc0330]"]
                        + [f"SEARCH[{q}]" for q in q_late[3:]] + ["READ[2]", "READ[doc0331]", "SEARCH[Eskel]",
                                                                  "READ[doc0012]"],
                        last_search_results_text=(f"No results for '{q_late[-1]}'. Try fewer or different keywords, "
                                                  "such as a full name from the question."),
                        last_search_hits=[], seen_hits=h1 + h2 + _hits(("doc0330", "Eskel family"),
                                                                         ("doc0331", "Doruna companies")),
                        read_ids=["doc0012", "doc0201", "doc0330", "doc0331"], read_contents=docs_late)
    out = [("early", early.to_ctx("I should find who founded Quellbrook Systems.")),
           ("mid", mid.to_ctx("Mara Eskel started Tessaly Robotics; I can answer.")),
           ("late", late.to_ctx("The sources disagree and the search found nothing."))]
    assert out[2][1]["contradictory_sources"] and out[2][1]["empty_results"] and not out[0][1]["has_read"]
    return out


MOCK_ARGS: dict[str, dict[str, str]] = {
    "early": {"SEARCH": "Quellbrook Systems founder", "READ": "doc0012", "FINAL": "Quellbrook Labs"},
    "mid": {"SEARCH": "Tessaly Robotics founded 2004", "READ": "2", "FINAL": "Tessaly Robotics"},
    "late": {"SEARCH": ("who was the real founder of the company Tessaly Robotics that Mara Eskel "
                        "is said to have started after she left Varnholt Labs in Doruna"),
             "READ": "doc9999", "FINAL": "unknown"},
}


# --------------------------------------------------------------------------- real step contexts

def _other_args(ctx: dict[str, Any]) -> dict[str, str]:
    """Plausible arguments for the action types the agent did not propose at this step."""
    hits = ctx.get("last_search_hits") or []
    queries = ctx.get("queries") or []
    return {"SEARCH": str(queries[-1] if queries else ctx.get("question", ""))[:200],
            "READ": str(hits[0].get("id", "1")) if hits and isinstance(hits[0], dict) else "1",
            "FINAL": str(ctx.get("thought", ""))[:80] or "unknown"}


def _round_robin(groups: list[list[Any]]) -> list[Any]:
    out: list[Any] = []
    queues = [list(g) for g in groups if g]
    while queues:
        for q in queues:
            out.append(q.pop(0))
        queues = [q for q in queues if q]
    return out


def _spread(steps: list[tuple[str, dict[str, Any], str, str]], n: int) -> list[tuple[str, dict[str, Any], str, str]]:
    """Up to ``n`` steps, alternating over questions first and proposed action types second."""
    by_q: dict[str, dict[str, list]] = {}
    for st in steps:
        by_q.setdefault(st[1].get("question", ""), {}).setdefault(st[2], []).append(st)
    per_question = [_round_robin(list(types.values())) for types in by_q.values()]
    return _round_robin(per_question)[:n]


def phase_d_contexts(trajs: list[Trajectory], cluster_qids: Any = (), *, n_cluster: int = 6,
                     n_other: int = 3, with_mock: bool = True
                     ) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, dict[str, str]]]:
    """The contexts and arguments Phase D runs a candidate on: the mock regimes, then up to
    ``n_cluster`` steps replayed from the cluster's trajectories and ``n_other`` from the
    other (most recent) ones, spread over questions and proposed action types. At each
    replayed step the proposed action keeps its real argument; the other types get
    plausible ones from the same context."""
    qids = set(cluster_qids)
    cluster: list = []
    other: list = []
    for t in trajs:
        bucket = cluster if t.qid in qids else other
        for st in replay(t):
            bucket.append((f"{'cluster' if bucket is cluster else 'recent'}:{t.qid}#{st.index}", st.ctx,
                           st.action, st.arg))
    other = other[-max(50, 10 * n_other):]  # the most recent steps of the rollout
    contexts = mock_contexts() if with_mock else []
    args = dict(MOCK_ARGS) if with_mock else {}
    for name, ctx, at, arg in _spread(cluster, n_cluster) + _spread(other, n_other):
        contexts.append((name, ctx))
        args[name] = {**_other_args(ctx), at: arg}
    return contexts, args


def lite_exec_refusals(code: str, skill_id: str | None, sandbox: SandboxParams | None = None) -> list[str]:
    """Why lite admission must refuse ``code``: the sandboxed execution check, stopped at the
    first failure (empty = it loads, runs clean on the mock regimes and returns legal values)."""
    rep = validate_candidate(code, skill_id, timeout_s=5.0, call_timeout_s=0.5, stop_on_error=True,
                             sandbox=sandbox)
    if rep.passed:
        return []
    failed = [k for k, ok in rep.checks.items() if not ok]
    return [f"sandboxed execution check failed ({', '.join(failed)})"] + rep.errors[:3]


# --------------------------------------------------------------------------- static interface

def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return ""


def _static_params(fn: ast.FunctionDef) -> list[dict[str, Any]]:
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
    n_def = len(a.defaults)
    out = [{"name": p.arg, "kind": "POSITIONAL_OR_KEYWORD", "has_default": i >= len(pos) - n_def}
           for i, p in enumerate(pos)]
    if a.vararg:
        out.append({"name": a.vararg.arg, "kind": "VAR_POSITIONAL", "has_default": False})
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append({"name": p.arg, "kind": "KEYWORD_ONLY", "has_default": d is not None})
    if a.kwarg:
        out.append({"name": a.kwarg.arg, "kind": "VAR_KEYWORD", "has_default": False})
    return out


def static_interface(tree: ast.Module, skill_id: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """Find the registered PF class in the AST; return (interface-info like the worker's, errors)."""
    errors: list[str] = []
    found: list[tuple[ast.ClassDef, str | None]] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        regs = [d for d in node.decorator_list if _name_of(d) == "register_pf"]
        if not regs:
            continue
        sid = None
        d = regs[0]
        if isinstance(d, ast.Call):
            arg = d.args[0] if d.args else next((k.value for k in d.keywords if k.arg == "skill_id"), None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                sid = arg.value
        found.append((node, sid))
    if not found:
        return None, ["interface: no class decorated with @register_pf(...)"]
    cls, sid = next(((c, s) for c, s in found if skill_id is None or s == skill_id), found[0])
    if skill_id is not None and sid != skill_id:
        errors.append(f"interface: class {cls.name} is registered as {sid!r}, expected {skill_id!r}")
    info: dict[str, Any] = {"is_program_function": any(_name_of(b) == "ProgramFunction" for b in cls.bases),
                            "class_name": cls.name}
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for m in ("should_activate", "intervene"):
        fn = methods.get(m)
        info[m] = {"defined": fn is not None, "overridden": fn is not None,
                   "params": _static_params(fn) if fn is not None else None,
                   "is_async": isinstance(fn, ast.AsyncFunctionDef)}
    return info, errors


# --------------------------------------------------------------------------- interface rules

def _signature_errors(method: str, d: dict[str, Any] | None) -> list[str]:
    if not d or not d.get("defined") or not d.get("overridden"):
        return [f"interface: {method} is not defined on the PF class"]
    if d.get("is_async"):
        return [f"interface: {method} must be a plain (not async) method"]
    params = d.get("params")
    if params is None:
        return [f"interface: cannot read the signature of {method}"]
    pos = [p for p in params if p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
    var = any(p["kind"] == "VAR_POSITIONAL" for p in params)
    req_kw = [p["name"] for p in params if p["kind"] == "KEYWORD_ONLY" and not p["has_default"]]
    required = [p for p in pos if not p["has_default"]]
    want = "(self, ctx, action_type, arg)" if method == "should_activate" else \
        "(self, ctx, action_type, arg, teacher=None)"
    n = 4 if method == "should_activate" else 5
    errs = []
    if len(pos) < n and not var:
        errs.append(f"interface: {method} takes {len(pos)} positional parameters, needs {want}")
    if len(required) > 4:
        errs.append(f"interface: {method} requires {len(required)} positional arguments, needs {want}"
                    + (" (the teacher/model parameter must default to None)" if method == "intervene" else ""))
    if req_kw:
        errs.append(f"interface: {method} has required keyword-only parameters {req_kw}")
    return errs


def interface_errors(info: dict[str, Any] | None) -> list[str]:
    if info is None:
        return ["interface: no PF class found"]
    errs = []
    if not info.get("is_program_function"):
        errs.append("interface: the registered class does not inherit from ProgramFunction")
    for m in ("should_activate", "intervene"):
        errs += _signature_errors(m, info.get(m))
    return errs


def _intervention_errors(resp: dict[str, Any], action_types: tuple[str, ...],
                         sandbox: SandboxParams) -> list[str]:
    if resp.get("result_type") != "Intervention":
        return [f"intervene returned {resp.get('result_type')}, not Intervention"]
    errs = [f"illegal field: {i}" for i in resp.get("issues") or ()]
    r = resp.get("result") or {}
    legal = {t.value for t in InterventionType}
    if r.get("type") not in legal:
        errs.append(f"illegal Intervention.type {r.get('type')!r} (legal: {sorted(legal)})")
    for k in ("context_text", "reason", "skill_id"):
        if not isinstance(r.get(k), str):
            errs.append(f"Intervention.{k} must be a str, got {type(r.get(k)).__name__}")
    for k in ("new_action_type", "new_action_arg"):
        if r.get(k) is not None and not isinstance(r.get(k), str):
            errs.append(f"Intervention.{k} must be str or None")
    caps = {"new_action_arg": sandbox.max_action_arg_chars, "context_text": sandbox.max_context_chars}
    for k, cap in caps.items():
        if isinstance(r.get(k), str) and len(r[k]) > cap:
            errs.append(f"Intervention.{k} longer than {cap} characters (it would be cut at run time)")
    if r.get("type") == InterventionType.MODIFY_ACTION.value:
        nat = r.get("new_action_type")
        if not isinstance(nat, str) or nat.upper() not in action_types:
            errs.append(f"MODIFY_ACTION with new_action_type {nat!r} (legal: {list(action_types)})")
    return errs


# --------------------------------------------------------------------------- the check

def validate_candidate(code: str, skill_id: str | None = None, *, timeout_s: float = 10,
                       call_timeout_s: float = 1.0, memory_mb: int = 512,
                       action_types: tuple[str, ...] = SEARCH_ACTIONS,
                       contexts: list[tuple[str, dict[str, Any]]] | None = None,
                       args: dict[str, dict[str, str]] | None = None,
                       sandbox: SandboxParams | None = None,
                       stop_on_error: bool = False) -> ExecReport:
    """Phase D for one candidate. ``timeout_s`` bounds the whole sandboxed part (worker
    start, load and all 18 calls); ``call_timeout_s`` bounds each call; ``sandbox`` (the
    params section, schema defaults when None) is the sandbox the candidate runs in and the
    caps its returned text is held to. Never raises for anything the candidate does."""
    t0 = time.perf_counter()
    rep = ExecReport(skill_id=skill_id)
    try:
        _validate(rep, code, skill_id, timeout_s=timeout_s, call_timeout_s=call_timeout_s,
                  memory_mb=memory_mb, action_types=tuple(a.upper() for a in action_types),
                  contexts=contexts, args=args, sandbox=sandbox if sandbox is not None else SandboxParams(),
                  stop_on_error=stop_on_error)
    finally:
        rep._score()
        rep.elapsed_s = round(time.perf_counter() - t0, 4)
    return rep


def _validate(rep: ExecReport, code: str, skill_id: str | None, *, timeout_s: float, call_timeout_s: float,
              memory_mb: int, action_types: tuple[str, ...],
              contexts: list[tuple[str, dict[str, Any]]] | None,
              args: dict[str, dict[str, str]] | None, sandbox: SandboxParams,
              stop_on_error: bool = False) -> None:
    # 1. syntax
    if not isinstance(code, str) or not code.strip():
        rep._error("syntax: empty code")
        return
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None)
        rep._error(f"syntax: {getattr(e, 'msg', e)}" + (f" (line {line})" if line else ""))
        return
    rep.syntax = True
    # 2. policy
    rep.violations = check_policy(code)
    rep.policy = not rep.violations
    for v in rep.violations:
        rep._error(f"policy: {v}")
    static_info, static_errs = static_interface(tree, skill_id)
    if not rep.policy:  # never executed; interface judged statically (reported, not scored)
        errs = static_errs + interface_errors(static_info) if static_info else static_errs
        rep.interface = not errs
        for e in errs:
            rep._error(e)
        return
    # 3. interface (on the loaded class), 4./5. mock execution and return types
    deadline = time.monotonic() + timeout_s
    pf = SandboxedPF(code, skill_id, timeout_s=call_timeout_s, memory_mb=memory_mb,
                     load_timeout_s=max(1.0, timeout_s), max_restarts=9, sandbox=sandbox)
    try:
        try:
            pf._ensure()
        except SandboxError as e:
            rep._error(f"load: {e}")
            errs = static_errs + (interface_errors(static_info) if static_info else [])
            for e2 in errs:
                rep._error(e2)
            return
        info = pf.load_info or {}
        rep.protections = dict((pf.hello or {}).get("protections", {}))
        rep.weaker = list(rep.protections.get("weaker") or [])
        rep.skill_id = rep.skill_id or info.get("skill_id")
        rep.class_name = str(info.get("class_name", ""))
        rep.needs_teacher = info.get("needs_teacher")
        rep.max_fires = info.get("max_fires")
        for w in info.get("warnings") or ():
            rep._error(f"interface: {w}")
        ierrs = interface_errors(info.get("interface"))
        if static_info and static_info.get("should_activate", {}).get("is_async"):
            ierrs.append("interface: should_activate must be a plain (not async) method")
        rep.interface = not ierrs and not info.get("warnings")
        for e in ierrs:
            rep._error(e)
        _mock_exec(rep, pf, deadline, call_timeout_s, action_types, contexts, args, stop_on_error=stop_on_error)
        _check_watches(rep, info.get("watches"))
    finally:
        pf.close()


def _check_watches(rep: ExecReport, watches: list[str] | None) -> None:
    if watches is None:
        return
    bad = [f"{c['ctx']}/{c['action']}" for c in rep.calls
           if c.get("should_activate") is True and c["action"] not in watches]
    if bad:
        rep.interface = False
        rep._error(f"interface: should_activate fired on {', '.join(bad[:3])}, outside watches={watches}")


def _mock_exec(rep: ExecReport, pf: SandboxedPF, deadline: float, call_timeout_s: float,
               action_types: tuple[str, ...], contexts: list[tuple[str, dict[str, Any]]] | None,
               args: dict[str, dict[str, str]] | None, *, stop_on_error: bool = False) -> None:
    ctxs = contexts if contexts is not None else mock_contexts()
    argmap = args if args is not None else MOCK_ARGS
    sandbox = getattr(pf, "sandbox", None) or SandboxParams()  # the caps the PF will run under
    n_inv = len(ctxs) * len(action_types)
    clean = typed = 0
    private: dict[str, Any] = {}  # carried across invocations like one episode
    timeouts = 0
    for name, base in ctxs:
        if timeouts >= MAX_TIMEOUTS:
            rep._error(f"mock_exec: stopped after {timeouts} timeouts; the remaining invocations count as failed")
            break
        for at in action_types:
            ctx = {**base, **private}
            arg = argmap.get(name, {}).get(at, "x")
            rec: dict[str, Any] = {"ctx": name, "action": at, "should_activate": None,
                                   "intervention": None, "error": None}
            ok_calls = 0
            for method in ("should_activate", "intervene"):
                if stop_on_error and rec["error"]:
                    break
                # intervene always runs (a PF must not crash when called), but its private-state
                # changes only carry over when the PF activated, as in a real episode
                call_ctx = ctx if method == "should_activate" or rec["should_activate"] else dict(ctx)
                left = deadline - time.monotonic()
                if left <= 0:
                    rec["error"] = rec["error"] or "validation time budget exhausted"
                    rep._error("mock_exec: validation time budget exhausted")
                    break
                try:
                    resp = pf.call_raw(method, call_ctx, at, arg, timeout_s=min(call_timeout_s, left))
                except SandboxTimeout:
                    timeouts += 1
                    rec["error"] = rec["error"] or f"{method} timed out"
                    rep._error(f"mock_exec: {method} timed out (> {call_timeout_s}s) on {name}/{at}")
                    continue
                except SandboxError as e:
                    rec["error"] = rec["error"] or f"{method}: {e}"
                    rep._error(f"mock_exec: {method} on {name}/{at}: {str(e)[:300]}")
                    continue
                if not resp.get("ok"):
                    where = f" ({resp['where']})" if resp.get("where") else ""
                    rec["error"] = rec["error"] or f"{method}: {resp.get('error')}{where}"
                    rep._error(f"mock_exec: {method} raised on {name}/{at}: {resp.get('error')}{where}")
                    continue
                ok_calls += 1
                if method == "should_activate":
                    rec["should_activate"] = resp.get("result")
                    if resp.get("result_type") == "bool":
                        typed += 1
                    else:
                        rep._error(f"return_types: should_activate returned {resp.get('result_type')}, not bool")
                else:
                    rec["intervention"] = resp.get("result")
                    errs = _intervention_errors(resp, action_types, sandbox)
                    if errs:
                        for e in errs:
                            rep._error(f"return_types: {e} on {name}/{at}")
                    else:
                        typed += 1
            if ok_calls == 2:
                clean += 1
            private = {k: v for k, v in ctx.items() if k.startswith("_")}
            rep.calls.append(rec)
            if stop_on_error and (ok_calls < 2 or rep.errors):
                break
        if stop_on_error and rep.calls and (rep.calls[-1]["error"] or rep.errors):
            break
    rep.mock_exec = round(clean / n_inv, 4) if n_inv else 0.0
    rep.return_types = round(typed / (2 * n_inv), 4) if n_inv else 0.0


# --------------------------------------------------------------------------- trusted (seed) code

class _InProcess:
    """``SandboxedPF.call_raw`` for a PF object imported in-process.

    Seed PFs are trusted project code that imports project helpers the sandbox does not
    serve; the library runs them in-process, so they are exercised the same way here,
    with the same mock invocations and return-type rules as a sandboxed candidate."""

    def __init__(self, pf: ProgramFunction) -> None:
        self.pf = pf

    def call_raw(self, method: str, ctx: dict[str, Any], action_type: str, arg: str,
                 timeout_s: float | None = None) -> dict[str, Any]:
        try:
            if method == "should_activate":
                r = self.pf.should_activate(ctx, action_type, arg)
                return {"ok": True, "result": bool(r), "result_type": type(r).__name__}
            iv = self.pf.intervene(ctx, action_type, arg, None)
        except Exception as e:  # noqa: BLE001 - reported like a sandboxed PF that raised
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if not isinstance(iv, Intervention):
            return {"ok": True, "result": None, "result_type": type(iv).__name__}
        return {"ok": True, "result": iv.to_dict(), "result_type": "Intervention"}


def _live_interface(cls: type) -> dict[str, Any]:
    """The interface facts ``interface_errors`` judges, read from a loaded class (inherited methods count)."""
    def params(fn: Any) -> list[dict[str, Any]]:
        return [{"name": p.name, "kind": p.kind.name, "has_default": p.default is not p.empty,
                 "default_is_none": p.default is None} for p in inspect.signature(fn).parameters.values()]
    return {"is_program_function": issubclass(cls, ProgramFunction),
            **{m: {"defined": True, "overridden": getattr(cls, m) is not getattr(ProgramFunction, m),
                   "params": params(getattr(cls, m))} for m in ("should_activate", "intervene")}}


def validate_trusted(pf: ProgramFunction, *, action_types: tuple[str, ...] = SEARCH_ACTIONS,
                     contexts: list[tuple[str, dict[str, Any]]] | None = None,
                     args: dict[str, dict[str, str]] | None = None) -> ExecReport:
    """Phase D's interface, mock-execution and return-type checks for an already imported PF.

    Syntax and policy count as passed: the code was imported as trusted project code,
    which the sandbox policy does not govern (``validate_candidate`` is the check for
    code that will run in the sandbox)."""
    t0 = time.perf_counter()
    rep = ExecReport(skill_id=pf.skill_id, syntax=True, policy=True, class_name=type(pf).__name__,
                     needs_teacher=pf.needs_teacher, max_fires=pf.max_fires)
    try:
        ierrs = interface_errors(_live_interface(type(pf)))
        rep.interface = not ierrs
        for e in ierrs:
            rep._error(e)
        at = tuple(a.upper() for a in action_types)
        _mock_exec(rep, _InProcess(pf), time.monotonic() + 3600, 3600, at, contexts, args)  # type: ignore[arg-type]
        w = watched_types(pf.watches)
        _check_watches(rep, sorted(w) if w is not None else None)
    finally:
        rep._score()
        rep.elapsed_s = round(time.perf_counter() - t0, 4)
    return rep
