"""Phase E: five-dimensional review of a candidate skill (paper App. C.5).

``Q_skill = 0.25 Q_concept + 0.20 Q_trigger + 0.20 Q_intervene + 0.20 Q_exec + 0.15 Q_val``

Decision, in priority order:

1. **Hard reject** when the Phase-D execution score ``Q_exec < evolve.exec_threshold`` (0.3; the
   reviewer is not even consulted then; the recorded scores come from the heuristic reviewer).
2. The reviewer's **explicit decision**: the teacher's ``decision`` (the JSON verdict's field, or the
   literal ``DECISION: ACCEPT|REVISE|REJECT`` line); for the heuristic reviewer, a veto (``REJECT``)
   on a disqualifying defect (constant trigger, intervention that never changes anything,
   model/IO calls in ``should_activate``). The heuristic reviewer never issues an explicit ACCEPT.
3. **Thresholds**: ``Q_skill >= 0.60`` accept, ``>= 0.42`` revise, else reject.

Admission (Phase F) additionally requires ``Q_skill >= admission_bar(is_new_category)``:
``evolve.new_group_threshold`` (0.75) for a new failure group, ``evolve.same_group_threshold`` (0.60)
for a refinement of an existing one. The three bars are read from the ``evolve`` params section each
function is given (the schema defaults when none is).

The teacher is asked for its verdict as a JSON object under ``REVIEW_SCHEMA`` when its client takes a
``json_schema`` keyword (``LLMClient.chat``, which encodes it for the endpoint's dialect), else as seven
lines. A reply that parses as neither is retried, then the heuristic reviewer decides; that Review's
``fallback_reason`` (also its first reason) says why ("teacher verdict unusable (...)").

``Q_exec`` in the composite is always the Phase-D score (measured by running the
code) rather than the teacher's opinion of executability; the teacher's own value
is kept in ``Review.llm_scores``.

Heuristic reviewer (no teacher), deterministic, from the code's AST and the cluster:

* concept: cluster support (saturating at 6 episodes), novelty (or 0.6 when the
  candidate is a new version of the nearest existing skill), an authored description
  and an authored body (synthesized text from the parser earns partial credit). The description
  must name the failure (a content word of the cluster's category or abstraction) and what the
  skill does (a word for an action it watches or produces, its kind of repair, or a ctx field its
  trigger reads); words meet when equal or one is a prefix of the other (4+ letters). Each miss
  halves the description's credit and is a reason; a description that says neither caps Q_skill
  just under the lowest accept/admission bar (``unreadable_cap``): the code cannot be checked
  against a text that does not say what it is for, however well the code scores.
* trigger: ``should_activate`` is not constant, reads known step-context fields or the
  action argument (2 such signals = full credit), checks ``action_type`` (full credit
  when it is the action the failure is about), contains a condition; unknown ctx keys
  cost credit.
* intervene: builds a non-NOOP ``Intervention`` of a type that fits the category,
  with the payload the type needs (new_action_type/arg or context_text), a reason,
  only the allowed keyword arguments, and proportionality (a MODIFY_ACTION whose
  trigger does not look at ``action_type`` would rewrite every kind of action).
* exec: the Phase-D ``Q_exec``.
* val: ``trigger_hit_rate`` (share of the cluster's failed episodes on which the trigger
  would have fired, see ``trigger_hit_rate()``) when given; otherwise the proxy
  ``0.8 * mean(trigger, intervene)`` (discounted because it is not measured).

A revision of the PF a cluster names in ``Cluster.revises`` (one that took correct answers away)
keeps that PF's repair, so its intervention fits by definition, and its trigger should stay quiet
on those episodes: val is one minus the hit rate there.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from hasp.bounded import json_load
from hasp.pyast import parse_python
from hasp.config import EvolveParams
from hasp.records import Trajectory
from hasp.evolve.cluster import Cluster
from hasp.evolve.detectors import replay_contexts
from hasp.evolve.propose import INTERVENTION_KWARGS, SEARCH_FORMS, STEP_CONTEXT_FIELDS, Candidate, word_list
from hasp.pf.skill_md import SkillFormatError, parse_skill_md
from hasp.prompts import prompt, render
from hasp.textutil import content_tokens

log = logging.getLogger(__name__)

__all__ = ["ChatModel", "Review", "review_candidate", "heuristic_review", "llm_review",
           "build_reviewer_messages", "parse_review_reply", "admission_bar", "passes_admission",
           "composite", "threshold_decision", "trigger_hit_rate", "code_facts", "CodeFacts",
           "description_findings", "unreadable_cap", "takes_json_schema", "REVIEW_SCHEMA",
           "WEIGHTS", "ACCEPT_AT", "REVISE_AT"]

WEIGHTS = {"concept": 0.25, "trigger": 0.20, "intervene": 0.20, "exec": 0.20, "val": 0.15}
ACCEPT_AT, REVISE_AT = 0.60, 0.42
#: the bars of a caller that passes no ``evolve`` section: the schema's defaults
DEFAULT_BARS = EvolveParams()
DECISIONS = ("ACCEPT", "REVISE", "REJECT")


class ChatModel(Protocol):
    """The teacher as the reviewer calls it; a ``chat`` that also takes ``json_schema`` (``LLMClient``)
    is sent ``REVIEW_SCHEMA`` (see ``takes_json_schema``)."""

    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None, stop: list[str] | None = None,
             seed: int | None = None) -> Any: ...


@dataclass
class Review:
    q_concept: float
    q_trigger: float
    q_intervene: float
    q_exec: float
    q_val: float
    q_skill: float
    decision: str  # ACCEPT | REVISE | REJECT
    feedback: str
    reviewer: str  # llm | heuristic
    reasons: list[str] = field(default_factory=list)
    decided_by: str = ""  # hard_reject | explicit | threshold
    llm_scores: dict[str, float] = field(default_factory=dict)
    raw_reply: str = ""
    fallback_reason: str = ""

    def scores(self) -> dict[str, float]:
        return {"q_concept": self.q_concept, "q_trigger": self.q_trigger, "q_intervene": self.q_intervene,
                "q_exec": self.q_exec, "q_val": self.q_val, "q_skill": self.q_skill}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Review":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def composite(concept: float, trigger: float, intervene: float, exec_: float, val: float) -> float:
    return round(WEIGHTS["concept"] * concept + WEIGHTS["trigger"] * trigger + WEIGHTS["intervene"] * intervene
                 + WEIGHTS["exec"] * exec_ + WEIGHTS["val"] * val, 4)


def threshold_decision(q_skill: float) -> str:
    return "ACCEPT" if q_skill >= ACCEPT_AT else "REVISE" if q_skill >= REVISE_AT else "REJECT"


def admission_bar(is_new_category: bool, evolve: EvolveParams = DEFAULT_BARS) -> float:
    """Minimum Q_skill for admission: ``evolve.new_group_threshold`` for a new failure group,
    ``evolve.same_group_threshold`` for an existing one."""
    return evolve.new_group_threshold if is_new_category else evolve.same_group_threshold


def passes_admission(review: Review, is_new_category: bool, evolve: EvolveParams = DEFAULT_BARS) -> bool:
    return review.decision == "ACCEPT" and review.q_skill >= admission_bar(is_new_category, evolve)


def _clip(x: float) -> float:
    return round(min(1.0, max(0.0, float(x))), 4)


# --------------------------------------------------------------------------- AST facts

_IO_NAMES = {"teacher", "openai", "requests", "httpx", "urllib", "socket", "subprocess", "random", "open",
             "os", "time", "llm", "client"}
_IO_ATTRS = {"chat", "map_chat", "generate", "completion", "completions", "urlopen", "post", "request"}
_FIT: dict[str, set[str]] = {
    "premature_final": {"MODIFY_ACTION", "INJECT_CONTEXT"},
    "no_read_before_final": {"MODIFY_ACTION", "INJECT_CONTEXT"},
    "repeated_search": {"MODIFY_ACTION", "INJECT_CONTEXT"},
    "query_too_broad": {"MODIFY_ACTION"},
    "query_too_narrow": {"MODIFY_ACTION"},
    "excessive_steps_no_progress": {"INJECT_CONTEXT", "MODIFY_ACTION"},
    "reasoning_hallucination": {"INJECT_CONTEXT", "MODIFY_ACTION"},
    "wrong_entity_focus": {"INJECT_CONTEXT"},
    "format_mismatch": {"MODIFY_ACTION", "INJECT_CONTEXT"},
    "partial_answer": {"INJECT_CONTEXT"},
    "contradictory_evidence_ignored": {"INJECT_CONTEXT", "MODIFY_ACTION"},
    "pf_override_harmful": {"INJECT_CONTEXT"},
    "repeated_failed_read": {"MODIFY_ACTION", "INJECT_CONTEXT"},
    "repeated_empty_search": {"MODIFY_ACTION"},
    "repeated_invalid_argument": {"MODIFY_ACTION"},
    "repeated_unparseable_output": {"INJECT_CONTEXT", "MODIFY_ACTION"},
    "answer_seen_not_given": {"MODIFY_ACTION", "INJECT_CONTEXT"},
}
_TARGET_ACTION: dict[str, set[str]] = {
    **{c: {"FINAL"} for c in ("premature_final", "no_read_before_final", "reasoning_hallucination",
                              "wrong_entity_focus", "format_mismatch", "partial_answer",
                              "contradictory_evidence_ignored")},
    **{c: {"SEARCH"} for c in ("repeated_search", "query_too_broad", "query_too_narrow", "repeated_empty_search")},
    **{c: {"READ"} for c in ("repeated_failed_read", "repeated_invalid_argument")},
}


@dataclass
class CodeFacts:
    """What the heuristic reviewer reads off the candidate's code."""

    parses: bool = False
    error: str = ""
    class_name: str | None = None
    has_should_activate: bool = False
    has_intervene: bool = False
    trigger_fields: list[str] = field(default_factory=list)
    unknown_fields: list[str] = field(default_factory=list)
    trigger_constant: bool = False
    trigger_action_types: list[str] = field(default_factory=list)
    trigger_checks_action: bool = False
    trigger_has_condition: bool = False
    trigger_uses_arg: bool = False
    trigger_io: list[str] = field(default_factory=list)
    iv_types: list[str] = field(default_factory=list)
    iv_bad_kwargs: list[str] = field(default_factory=list)
    iv_new_action_types: list[str] = field(default_factory=list)
    iv_has_new_arg: bool = False
    iv_has_context: bool = False
    iv_has_reason: bool = False
    trigger_src: str = ""
    intervene_src: str = ""


_ARG_CONDITIONS = ("arg_", "same_action_repeated", "query_drifted", "answer_")


def declared_facts(declaration: dict[str, Any]) -> CodeFacts:
    """The reviewer's facts read off a declared PF (``hasp.pf.declaration``) instead of code: each
    condition counts as one signal the trigger reads, ``watches`` is its action check."""
    from hasp.pf.declaration import PFDeclaration

    try:
        d = PFDeclaration(**declaration)
    except Exception as e:  # noqa: BLE001 - an invalid declaration is a finding, not a crash
        return CodeFacts(error=f"invalid declaration: {e}")
    names = [c.lstrip("!") if isinstance(c, str) else (c.get("field") or "") for c in d.when]
    rewrite = d.rewrite is not None
    return CodeFacts(
        parses=True, class_name="DeclaredPF", has_should_activate=True, has_intervene=True,
        trigger_fields=[n for n in names if n and not n.startswith(_ARG_CONDITIONS)],
        trigger_constant=not [n for n in names if n and n != "always"],
        trigger_action_types=list(d.watches), trigger_checks_action=True, trigger_has_condition=bool(d.when),
        trigger_uses_arg=any(n.startswith(_ARG_CONDITIONS) for n in names),
        iv_types=["MODIFY_ACTION" if rewrite else "INJECT_CONTEXT"],
        iv_new_action_types=[d.rewrite.action] if d.rewrite else [], iv_has_new_arg=rewrite,
        iv_has_context=not rewrite, iv_has_reason=True)


def candidate_facts(candidate: Candidate) -> CodeFacts:
    """Facts of a candidate's PF, from its code or its declaration."""
    return declared_facts(candidate.declaration) if candidate.declared else code_facts(candidate.code)


def _param(fn: ast.FunctionDef, i: int) -> str | None:
    args = fn.args.posonlyargs + fn.args.args
    return args[i].arg if len(args) > i else None


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _ctx_keys(fn: ast.FunctionDef, ctx_name: str | None) -> set[str]:
    keys: set[str] = set()
    if not ctx_name:
        return keys
    for n in ast.walk(fn):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == ctx_name:
            if (k := _str(n.slice)) is not None:
                keys.add(k)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
              and isinstance(n.func.value, ast.Name) and n.func.value.id == ctx_name and n.args):
            if (k := _str(n.args[0])) is not None:
                keys.add(k)
        elif (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn))
              and isinstance(n.comparators[0], ast.Name) and n.comparators[0].id == ctx_name):
            if (k := _str(n.left)) is not None:
                keys.add(k)
    return keys


def _action_literals(fn: ast.FunctionDef, at_name: str | None) -> set[str]:
    """String literals ``action_type`` is compared with (==, !=, in, not in; .upper() allowed)."""
    out: set[str] = set()
    if not at_name:
        return out

    def is_at(n: ast.AST) -> bool:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            n = n.func.value
        return isinstance(n, ast.Name) and n.id == at_name

    for n in ast.walk(fn):
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            if any(is_at(s) for s in sides):
                for s in sides:
                    if (v := _str(s)) is not None:
                        out.add(v.upper())
                    elif isinstance(s, (ast.Tuple, ast.List, ast.Set)):
                        out |= {v.upper() for e in s.elts if (v := _str(e)) is not None}
    return out


def _is_constant_fn(fn: ast.FunctionDef) -> bool:
    """True when every return is a literal of the same truthiness (or there is no return):
    such a trigger fires on every step or on none."""
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if any(r.value is not None and not isinstance(r.value, ast.Constant) for r in rets):
        return False
    return len({bool(r.value.value) if r.value is not None else False for r in rets}) <= 1


def _interventions(fn: ast.FunctionDef) -> list[ast.Call]:
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == "Intervention":
                out.append(n)
    return out


def _iv_type(call: ast.Call) -> str:
    node = next((k.value for k in call.keywords if k.arg == "type"), call.args[0] if call.args else None)
    if node is None:
        return "NOOP"  # the dataclass default
    if isinstance(node, ast.Attribute):
        return node.attr.upper()
    if (v := _str(node)) is not None:
        return v.upper()
    return "?"


def _nonempty(node: ast.AST) -> bool:
    return not (isinstance(node, ast.Constant) and node.value in ("", None))


def code_facts(code: str) -> CodeFacts:
    """Static facts about a candidate's PF class (never executes the code)."""
    f = CodeFacts()
    try:
        tree = parse_python(code or "")
    except SyntaxError as e:
        f.error = f"syntax error: {e.msg} (line {e.lineno})"
        return f
    f.parses = True
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    cls = next((c for c in classes if any(
        isinstance(m, ast.FunctionDef) and m.name == "should_activate" for m in c.body)), None)
    if cls is None:
        f.error = "no class with should_activate"
        return f
    f.class_name = cls.name
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    sa, iv = methods.get("should_activate"), methods.get("intervene")
    if sa is not None:
        f.has_should_activate = True
        f.trigger_src = ast.get_source_segment(code, sa) or ""
        ctx_name, at_name, arg_name = _param(sa, 1), _param(sa, 2), _param(sa, 3)
        f.trigger_uses_arg = bool(arg_name) and any(
            isinstance(n, ast.Name) and n.id == arg_name for n in ast.walk(sa))
        keys = _ctx_keys(sa, ctx_name)
        f.trigger_fields = sorted(k for k in keys if k in STEP_CONTEXT_FIELDS)
        f.unknown_fields = sorted(k for k in keys if k not in STEP_CONTEXT_FIELDS and not k.startswith("_"))
        f.trigger_constant = _is_constant_fn(sa)
        f.trigger_action_types = sorted(_action_literals(sa, at_name))
        f.trigger_checks_action = bool(f.trigger_action_types)
        f.trigger_has_condition = any(isinstance(n, (ast.If, ast.IfExp, ast.Compare, ast.BoolOp, ast.UnaryOp))
                                      for n in ast.walk(sa))
        io = set()
        for n in ast.walk(sa):
            if isinstance(n, ast.Name) and n.id in _IO_NAMES:
                io.add(n.id)
            elif isinstance(n, ast.Attribute) and n.attr in _IO_ATTRS:
                io.add(n.attr)
        f.trigger_io = sorted(io)
    if iv is not None:
        f.has_intervene = True
        f.intervene_src = ast.get_source_segment(code, iv) or ""
        calls = _interventions(iv)
        f.iv_types = sorted({_iv_type(c) for c in calls})
        bad, nat = set(), set()
        for c in calls:
            for k in c.keywords:
                if k.arg is not None and k.arg not in INTERVENTION_KWARGS:
                    bad.add(k.arg)
                if k.arg == "new_action_type":
                    nat.add((_str(k.value) or "?").upper())
                if k.arg == "new_action_arg" and _nonempty(k.value):
                    f.iv_has_new_arg = True
                if k.arg == "context_text" and _nonempty(k.value):
                    f.iv_has_context = True
                if k.arg == "reason" and _nonempty(k.value):
                    f.iv_has_reason = True
        f.iv_bad_kwargs, f.iv_new_action_types = sorted(bad), sorted(nat)
    return f


# --------------------------------------------------------------------------- heuristic reviewer

def _frontmatter(candidate: Candidate) -> tuple[str, str]:
    try:
        spec = parse_skill_md(candidate.skill_md, "<candidate>")
        return spec.description, spec.body
    except SkillFormatError:
        return "", ""


#: words any description may use that name neither a failure nor a repair
_GENERIC = frozenset("agent skill pf step action model user make ensure please ever without".split())
#: what a description may call each action the PF watches or produces
_ACTION_WORDS = {"SEARCH": ("search", "query", "look"), "READ": ("read", "open", "document"),
                 "FINAL": ("final", "answer", "respond", "reply", "commit")}
#: what a description may call each kind of repair
_REPAIR_WORDS = {"MODIFY_ACTION": ("rewrite", "replace", "turn", "change", "redirect", "block", "convert",
                                   "force", "modify", "swap", "switch", "stop", "prevent"),
                 "INJECT_CONTEXT": ("remind", "note", "hint", "inject", "tell", "warn", "context",
                                    "instruct", "nudge", "suggest", "advise", "alert")}


def _words(text: str) -> set[str]:
    """Content words of 3+ letters: a possessive's "s" or an "a" names nothing (they once let a
    description with no word of its failure count as naming it)."""
    return {w for w in content_tokens(text) if len(w) >= 3} - _GENERIC


def _names(desc: set[str], vocab: set[str]) -> list[str]:
    """The description's words that meet ``vocab``: equal, or (both of 4+ letters) one a prefix of
    the other, so "answering" meets "answer" and "reminder" meets "remind" without a stemmer."""
    return sorted(w for w in desc if any(w == v or (min(len(w), len(v)) >= 4 and (w.startswith(v) or
                                                                                   v.startswith(w)))
                                         for v in vocab))


def failure_words(cluster: Cluster) -> set[str]:
    """The failure a description should name: the cluster's category and its representative's abstraction."""
    rep = cluster.representative
    return _words(f"{cluster.category} {rep.abstraction if rep is not None else ''}")


def behaviour_words(f: CodeFacts) -> set[str]:
    """What the PF does, as words: the actions its trigger watches and its repair produces, the
    kind of repair, and the step-context fields (or declared conditions) its trigger reads. Facts
    that say nothing (unusable code, already marked down) leave any action or repair word as a claim."""
    out = set()
    for a in {*f.trigger_action_types, *f.iv_new_action_types}:
        out |= set(_ACTION_WORDS.get(a, (a.lower(),)))
    for t in f.iv_types:
        out |= set(_REPAIR_WORDS.get(t, ()))
    out |= _words(" ".join(f.trigger_fields))
    return out or {w for words in (*_ACTION_WORDS.values(), *_REPAIR_WORDS.values()) for w in words}


def description_findings(desc: str, cluster: Cluster, f: CodeFacts) -> list[str]:
    """What the description fails to say: the failure it is for, what the skill does (empty: both said)."""
    words = _words(desc)
    out = []
    if not _names(words, failure_words(cluster)):
        out.append(f"description does not name the failure '{cluster.category}'")
    if not _names(words, behaviour_words(f)):
        out.append("description does not say what the skill does")
    return out


def _heuristic_scores(candidate: Candidate, cluster: Cluster, q_exec: float, trigger_hit_rate: float | None,
                      action_forms: tuple[str, ...] = SEARCH_FORMS
                      ) -> tuple[dict[str, float], list[str], str | None, bool]:
    """(scores, reasons, veto, unreadable): ``unreadable`` when the description names neither the
    failure nor what the skill does."""
    reasons: list[str] = []
    veto: str | None = None
    notes = " ".join(candidate.notes)
    f = candidate_facts(candidate)

    # concept
    desc, body = _frontmatter(candidate)
    support = min(1.0, cluster.support / 6)
    refine = bool(cluster.nearest_skill) and candidate.skill_id == cluster.nearest_skill
    # a revision of the PF that took correct answers away: it keeps that PF's repair and should stay quiet there
    revision = bool(candidate.revises) and candidate.revises == cluster.revises
    nov = cluster.novelty if cluster.is_new_category or not refine else max(cluster.novelty, 0.6)
    desc_ok = (0.5 if "description synthesized" in notes else 1.0) if len(desc.split()) >= 5 else 0.0
    body_ok = (0.3 if "body synthesized" in notes else 1.0) if len(body.split()) >= 15 else (
        0.3 if body.strip() else 0.0)
    if desc_ok < 1.0:
        reasons.append("no authored description")
    unsaid = description_findings(desc, cluster, f)
    reasons += unsaid
    unreadable = len(unsaid) == 2
    desc_ok *= 1.0 - 0.5 * len(unsaid)
    concept = 0.35 * support + 0.25 * nov + 0.25 * desc_ok + 0.15 * body_ok
    if not cluster.is_new_category and not refine:
        reasons.append(f"overlaps existing skill {cluster.nearest_skill} without refining it")

    if not candidate.code.strip() and not candidate.declared:
        reasons.append("no code")
    elif not f.parses or f.class_name is None:
        reasons.append(f.error or "code unusable")

    # trigger
    trigger = 0.0
    if f.has_should_activate:
        if f.trigger_io:
            reasons.append(f"should_activate uses model/IO/randomness: {', '.join(f.trigger_io)}")
            veto = "REJECT"
        elif f.trigger_constant:
            reasons.append("should_activate is constant (fires always or never)")
            trigger, veto = 0.05, "REJECT"
        else:
            targets = _TARGET_ACTION.get(cluster.category)
            act = 0.0
            if f.trigger_checks_action:
                act = 1.0 if not targets or set(f.trigger_action_types) & targets else 0.4
            signals = len(f.trigger_fields) + f.trigger_uses_arg
            trigger = (0.15 + 0.45 * min(1.0, signals / 2) + 0.25 * act
                       + 0.15 * f.trigger_has_condition - 0.15 * min(2, len(f.unknown_fields)))
            if not signals:
                reasons.append("trigger reads neither step-context fields nor the action argument")
            if f.unknown_fields:
                reasons.append(f"trigger reads unknown ctx keys: {', '.join(f.unknown_fields)}")
            if not f.trigger_checks_action:
                reasons.append("trigger does not check action_type")

    # intervene
    intervene = 0.0
    active = [t for t in f.iv_types if t != "NOOP"]
    if f.has_intervene:
        if not active:
            reasons.append("intervene never changes anything (NOOP only)")
            intervene, veto = 0.05, "REJECT"
        else:
            want = _FIT.get(cluster.category)
            fit = 1.0 if revision else 0.5 if "?" in active and len(active) == 1 else (
                0.75 if want is None else 1.0 if set(active) & want else 0.5)
            payload = []
            if "MODIFY_ACTION" in active:
                valid = {a.split("[", 1)[0].upper() for a in action_forms}  # the task's own actions
                nat_ok = 1.0 if set(f.iv_new_action_types) & valid else (
                    0.5 if f.iv_new_action_types else 0.0)
                payload.append(0.6 * nat_ok + 0.4 * f.iv_has_new_arg)
            if "INJECT_CONTEXT" in active:
                payload.append(1.0 if f.iv_has_context else 0.0)
            pay = sum(payload) / len(payload) if payload else 0.5
            proportional = 1.0
            if "MODIFY_ACTION" in active and not f.trigger_checks_action:
                proportional = 0.2
                reasons.append("MODIFY_ACTION without an action_type check rewrites any action")
            if f.trigger_constant:
                proportional = 0.0
            intervene = 0.4 * fit + 0.25 * pay + 0.1 * f.iv_has_reason + 0.25 * proportional
            if f.iv_bad_kwargs:
                intervene *= 0.5
                reasons.append(f"Intervention got unknown keywords: {', '.join(f.iv_bad_kwargs)}")
            if fit < 1.0 and want is not None:
                reasons.append(f"intervention type {active} is an odd fit for {cluster.category}")
            if pay < 1.0:
                reasons.append("intervention lacks the payload its type needs")

    # val
    if trigger_hit_rate is not None:
        val = max(0.0, min(1.0, 1.0 - trigger_hit_rate if revision else trigger_hit_rate))
        if f.trigger_constant:
            val = min(val, 0.1)
        reasons.append(f"trigger fired on {trigger_hit_rate:.0%} of the cluster's failed episodes"
                       + (" (a revision should stay quiet there)" if revision else ""))
    else:
        val = 0.8 * (trigger + intervene) / 2
    scores = {"concept": _clip(concept), "trigger": _clip(trigger), "intervene": _clip(intervene),
              "exec": _clip(q_exec), "val": _clip(val)}
    return scores, reasons, veto, unreadable


def unreadable_cap(evolve: EvolveParams = DEFAULT_BARS) -> float:
    """The heuristic Q_skill of a skill whose description says nothing checkable: just under the
    lowest of the accept and admission bars, so it is sent back for revision, never admitted."""
    return round(min(ACCEPT_AT, evolve.same_group_threshold, evolve.new_group_threshold) - 0.01, 4)


def heuristic_review(candidate: Candidate, exec_report_q_exec: float, cluster: Cluster, *,
                     trigger_hit_rate: float | None = None, fallback_reason: str = "",
                     evolve: EvolveParams = DEFAULT_BARS, action_forms: tuple[str, ...] = SEARCH_FORMS) -> Review:
    """The review without a teacher, from the candidate's code and description (``action_forms``: the
    task's actions, the ones a rewrite may produce)."""
    scores, reasons, veto, unreadable = _heuristic_scores(candidate, cluster, exec_report_q_exec,
                                                          trigger_hit_rate, action_forms)
    feedback = "; ".join(reasons)  # for the student: what to fix, not why the teacher was not heard
    if fallback_reason:
        reasons = [fallback_reason, *reasons]
    return _decide(scores, reasons, explicit=veto, reviewer="heuristic", feedback=feedback,
                   fallback_reason=fallback_reason, evolve=evolve,
                   q_cap=unreadable_cap(evolve) if unreadable else None)


def _decide(scores: dict[str, float], reasons: list[str], *, explicit: str | None, reviewer: str,
            feedback: str, raw_reply: str = "", llm_scores: dict[str, float] | None = None,
            fallback_reason: str = "", evolve: EvolveParams = DEFAULT_BARS, q_cap: float | None = None) -> Review:
    q = composite(scores["concept"], scores["trigger"], scores["intervene"], scores["exec"], scores["val"])
    if q_cap is not None and q > q_cap:
        reasons = [*reasons, f"Q_skill {q:.2f} capped at {q_cap:.2f}: the description names neither the "
                             "failure nor what the skill does, so the code cannot be checked against it"]
        q = q_cap
    if scores["exec"] < evolve.exec_threshold:
        decision, by = "REJECT", "hard_reject"
        reasons = [f"hard reject: Q_exec {scores['exec']:.2f} < {evolve.exec_threshold}", *reasons]
    elif explicit in DECISIONS:
        decision, by = explicit, "explicit"
    else:
        decision, by = threshold_decision(q), "threshold"
    return Review(q_concept=scores["concept"], q_trigger=scores["trigger"], q_intervene=scores["intervene"],
                  q_exec=scores["exec"], q_val=scores["val"], q_skill=q, decision=decision,
                  feedback=feedback, reviewer=reviewer, reasons=reasons, decided_by=by,
                  llm_scores=dict(llm_scores or {}), raw_reply=raw_reply, fallback_reason=fallback_reason)


# --------------------------------------------------------------------------- LLM reviewer

@lru_cache(maxsize=8)
def _review_system(action_forms: tuple[str, ...]) -> str:
    return render("hasp.evolve", "review", "system", ctx_keys=", ".join(STEP_CONTEXT_FIELDS),
                  action_forms=word_list(action_forms, "and"))


def build_reviewer_messages(candidate: Candidate, cluster: Cluster, exec_q: float,
                            existing_skill_ids: Iterable[str] = (), *,
                            json_verdict: bool = False,
                            action_forms: tuple[str, ...] = SEARCH_FORMS) -> list[dict[str, str]]:
    """System + user turns; ``json_verdict`` asks for the verdict as the JSON object of
    ``REVIEW_SCHEMA`` instead of seven lines; ``action_forms`` are the task's actions."""
    f = candidate_facts(candidate)
    code = candidate.code
    if candidate.declared:
        from hasp.evolve.declarative import compiled_source

        code = compiled_source(candidate)
        f.trigger_src = f.intervene_src = code
    rep = cluster.representative
    user = "\n".join([
        f"## Candidate {candidate.skill_id} for failure '{cluster.category}'",
        f"Failure: {rep.abstraction}",
        f"Seen in {cluster.support} failed episodes; novelty vs library {cluster.novelty:.2f}"
        f"{' (new failure group)' if cluster.is_new_category else f' (close to {cluster.nearest_skill})'}.",
        "Existing skills: " + (", ".join(existing_skill_ids) or "(none)"),
        f"Automatic execution checks passed: {exec_q:.2f} of 1.0",
        "", "## Trigger", "```python", (f.trigger_src or "(missing)")[:1500], "```",
        "", "## Intervention", "```python", (f.intervene_src or "(missing)")[:1500], "```",
        "", "## SKILL.md", candidate.skill_md[:2000],
        "", "## Full code", "```python", (code or "(none)")[:4000], "```",
        "", render("hasp.evolve", "review", "format_json", example=prompt("hasp.evolve", "review", "example"))
        if json_verdict else render("hasp.evolve", "review", "format"),
    ])
    return [{"role": "system", "content": _review_system(tuple(action_forms))}, {"role": "user", "content": user}]


_KEYS = {"concept": "concept", "trigger": "trigger", "intervene": "intervene", "intervention": "intervene",
         "exec": "exec", "executability": "exec", "val": "val", "validation": "val"}
_SCORE = re.compile(
    r"Q[ _-]?(concept|trigger|intervene|intervention|executability|exec|validation|val)[a-z_ ]*?\**\s*[:=]\s*\**\s*"
    r"\[?\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:/\s*(\d+(?:\.\d+)?))?", re.I)
_DECISION_LINE = re.compile(r"^\W*DECISION\W*[:=](.*)$", re.I | re.M)
_FEEDBACK = re.compile(r"^\W*(?:OVERALL\s+)?FEEDBACK\W*[:=]\s*(.*)", re.I | re.M | re.S)


def _norm_score(value: str, denom: str | None) -> float | None:
    v = float(value)
    if denom:
        d = float(denom)
        return v / d if d > 0 and v <= d else None
    if v <= 1.0:
        return v
    if v <= 10.0:
        return v / 10
    if v <= 100.0:
        return v / 100
    return None


_DIMENSIONS = ("concept", "trigger", "intervene", "exec", "val")
#: the teacher's verdict as JSON: what a constrained request asks for (``LLMClient.chat(json_schema=)``)
REVIEW_SCHEMA: dict[str, Any] = {
    "title": "skill_review",
    "type": "object",
    "properties": {
        **{f"q_{k}": {"type": "number", "minimum": 0.0, "maximum": 1.0} for k in _DIMENSIONS},
        "decision": {"type": "string", "enum": list(DECISIONS)},
        "feedback": {"type": "string", "maxLength": 600},
    },
    "required": [*(f"q_{k}" for k in _DIMENSIONS), "decision", "feedback"],
    "additionalProperties": False,
}
_JSON_FENCE = re.compile(r"^```[a-z]*\s*|\s*```$", re.I)


def _json_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The reply's JSON object (from its first ``{`` to its last ``}``), or ``(None, problem)``;
    the problem is empty when the reply holds no ``{`` at all."""
    body = _JSON_FENCE.sub("", (text or "").strip())
    start, end = body.find("{"), body.rfind("}")
    if start < 0:
        return None, ""
    try:
        obj = json_load(body[start:end + 1] if end > start else body[start:])
    except ValueError as e:  # a syntax error, or what the bounded parser refuses (NaN, depth, size)
        return None, f"invalid JSON: {e}"
    return (obj, "") if isinstance(obj, dict) else (None, "invalid JSON: not an object")


def _json_verdict(obj: dict[str, Any]) -> tuple[dict[str, float] | None, str | None, str, str]:
    """The JSON verdict's scores, decision and feedback. Its scores are read as ``REVIEW_SCHEMA`` states
    them, in [0, 1]: a 3 there is no score on another scale but a reply that ignored the schema."""
    scores: dict[str, float] = {}
    out_of_range: list[str] = []
    for name, value in obj.items():
        key = _KEYS.get(str(name).lower().removeprefix("q_").removeprefix("q"))
        if key is None or key in scores or isinstance(value, bool):
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            continue
        if 0.0 <= v <= 1.0:
            scores[key] = round(v, 4)
        else:
            out_of_range.append(f"q_{key}={value}")
    d = str(obj.get("decision") or "").strip().upper()
    decision = d if d in DECISIONS else None
    feedback = str(obj.get("feedback") or "").strip()[:1000]
    if out_of_range:
        return None, decision, feedback, f"JSON verdict scores outside [0, 1]: {', '.join(out_of_range)}"
    missing = [k for k in _DIMENSIONS if k not in scores]
    if missing:
        return None, decision, feedback, f"JSON verdict lacks scores: {', '.join(missing)}"
    return scores, decision, feedback, ""


@lru_cache(maxsize=1)
def _example_verdict() -> tuple[dict[str, float], str]:
    """The scores and feedback of the prompt's example verdict (``review.yaml``'s ``example``)."""
    scores, _, feedback, _ = _json_verdict(json_load(prompt("hasp.evolve", "review", "example")))
    return scores or {}, feedback


def not_a_review(scores: dict[str, float], feedback: str, decision: str | None = None) -> str:
    """Why a verdict that parses is still not a review of the candidate (empty: it is one). Why: a small
    teacher under the schema writes well-formed replies that say nothing: the prompt's example copied
    word for word, feedback without a sentence, or a decision its own scores contradict (ACCEPT with
    scores that make a REJECT, or the reverse). Counting such a reply as the model's review would
    report a review that never happened, so it is retried and then left to the heuristic."""
    ex_scores, ex_feedback = _example_verdict()
    if feedback.strip().lower() == ex_feedback.strip().lower() or scores == ex_scores:
        return "it repeats the prompt's example verdict"
    if decision in ("ACCEPT", "REJECT") and all(k in scores for k in _DIMENSIONS):
        own = threshold_decision(composite(*(scores[k] for k in _DIMENSIONS)))
        if {decision, own} == {"ACCEPT", "REJECT"}:
            return f"its decision {decision} contradicts its own scores (they make a {own})"
    if not re.search(r"[^\W\d_]{2,}", feedback):
        return f"its feedback {feedback.strip()[:40]!r} holds no word"
    return ""


def parse_review_reply(text: str) -> tuple[dict[str, float] | None, str | None, str, str]:
    """(scores or None if any of the five is missing, decision or None, feedback, problem).

    Reads the JSON verdict of ``REVIEW_SCHEMA`` (a constrained reply) or the seven-line format."""
    obj, json_problem = _json_object(text)
    if obj is not None:
        return _json_verdict(obj)
    scores: dict[str, float] = {}
    for m in _SCORE.finditer(text or ""):
        key = _KEYS[m.group(1).lower()]
        v = _norm_score(m.group(2), m.group(3))
        if v is not None and key not in scores:
            scores[key] = round(v, 4)
    decision = None
    for m in _DECISION_LINE.finditer(text or ""):
        words = {w for w in DECISIONS if re.search(rf"\b{w}\b", m.group(1), re.I)}
        if len(words) == 1:  # "ACCEPT / REVISE / REJECT" echoed from the template is not a decision
            decision = words.pop()
    fm = _FEEDBACK.search(text or "")
    feedback = fm.group(1).strip()[:1000] if fm else ""
    missing = [k for k in _DIMENSIONS if k not in scores]
    if missing:  # a reply that tried JSON and broke it is reported as such
        return None, decision, feedback, json_problem or f"missing scores: {', '.join(missing)}"
    return scores, decision, feedback, ""


def takes_json_schema(model: Any) -> bool:
    """Does ``model.chat`` take a ``json_schema`` keyword (``LLMClient`` and the clients wrapping it)?
    The client encodes it for its endpoint's dialect and answers without it, counted, when refused."""
    from hasp.pf.teacher import takes_keyword

    return takes_keyword(model, "json_schema")


def llm_review(candidate: Candidate, exec_report_q_exec: float, cluster: Cluster, teacher: ChatModel, *,
               existing_skill_ids: Iterable[str] = (), trigger_hit_rate: float | None = None,
               max_tokens: int = 400, retries: int = 1, evolve: EvolveParams = DEFAULT_BARS,
               action_forms: tuple[str, ...] = SEARCH_FORMS) -> Review:
    """Teacher review. When the teacher's client takes a JSON schema, the verdict is asked for under
    ``REVIEW_SCHEMA``; a reply that does not parse is retried ``retries`` times, then the heuristic
    decides and its Review says why (``fallback_reason``, first of ``reasons``)."""
    constrained = takes_json_schema(teacher)
    msgs = build_reviewer_messages(candidate, cluster, exec_report_q_exec, list(existing_skill_ids),
                                   json_verdict=constrained, action_forms=action_forms)
    kw: dict[str, Any] = {"temperature": 0.0, "max_tokens": max_tokens}
    if constrained:
        kw["json_schema"] = REVIEW_SCHEMA
    problems: list[str] = []
    raw = ""
    answered = False
    for attempt in range(retries + 1):
        try:
            reply = teacher.chat(msgs, **kw)
            raw = str(getattr(reply, "text", reply) or "")
        except Exception as e:  # noqa: BLE001 - a teacher outage must not stop the epoch
            problems.append(f"attempt {attempt + 1}: teacher call failed: {type(e).__name__}: {e}")
            continue
        answered = True
        scores, decision, feedback, problem = parse_review_reply(raw)
        empty = not_a_review(scores, feedback, decision) if scores is not None else ""
        if empty:
            scores, problem = None, f"not a review: {empty}"
            problems.append(f"attempt {attempt + 1}: {problem}")
            msgs = [*msgs, {"role": "assistant", "content": raw[:2000]},
                    {"role": "user", "content": render("hasp.evolve", "review", "retry_own", problem=empty)}]
            continue
        if scores is not None:
            llm_scores = dict(scores)
            scores = {**scores, "exec": _clip(exec_report_q_exec)}
            reasons = [f"teacher decision: {decision}" if decision else "teacher gave no decision"]
            if constrained:
                reasons.append("verdict asked for under the review JSON schema")
            reasons += [f"teacher retried after {p}" for p in problems]
            return _decide(scores, reasons, explicit=decision, reviewer="llm", feedback=feedback,
                           raw_reply=raw, llm_scores=llm_scores, evolve=evolve)
        problems.append(f"attempt {attempt + 1}: {problem}")
        msgs = [*msgs, {"role": "assistant", "content": raw[:2000]},
                {"role": "user", "content": prompt("hasp.evolve", "review", "retry_json" if constrained else "retry")}]
    what = "teacher verdict unusable" if answered else "teacher unavailable"
    reason = f"{what} ({'; '.join(problems)}); heuristic reviewer used"
    log.warning("%s: %s", candidate.skill_id, reason)
    rv = heuristic_review(candidate, exec_report_q_exec, cluster, trigger_hit_rate=trigger_hit_rate,
                          fallback_reason=reason, evolve=evolve, action_forms=action_forms)
    rv.raw_reply = raw
    return rv


def review_candidate(candidate: Candidate, exec_report_q_exec: float, cluster: Cluster,
                     teacher: ChatModel | None = None, *, trigger_hit_rate: float | None = None,
                     existing_skill_ids: Iterable[str] = (), max_tokens: int = 400,
                     evolve: EvolveParams = DEFAULT_BARS, action_forms: tuple[str, ...] = SEARCH_FORMS) -> Review:
    """Phase E for one candidate under ``evolve``'s bars. See the module docstring for the decision order."""
    if exec_report_q_exec < evolve.exec_threshold or teacher is None:
        reason = "" if teacher is None else "teacher not consulted: Phase-D hard reject"
        return heuristic_review(candidate, exec_report_q_exec, cluster, trigger_hit_rate=trigger_hit_rate,
                                fallback_reason=reason, evolve=evolve, action_forms=action_forms)
    return llm_review(candidate, exec_report_q_exec, cluster, teacher, existing_skill_ids=existing_skill_ids,
                      trigger_hit_rate=trigger_hit_rate, max_tokens=max_tokens, evolve=evolve,
                      action_forms=action_forms)


# --------------------------------------------------------------------------- trigger replay

def trigger_hit_rate(should_activate: Callable[[dict[str, Any], str, str], Any] | Any,
                     trajs: Iterable[Trajectory]) -> float:
    """Share of ``trajs`` on which the trigger fires on at least one replayed step.

    ``should_activate`` is a callable or any object with a ``should_activate`` method
    (e.g. ``hasp.pf.sandboxed.SandboxedPF`` -- never pass untrusted code in-process).
    Contexts come from ``detectors.replay_contexts``; an exception counts as not firing.
    """
    fn = getattr(should_activate, "should_activate", should_activate)
    trajs = list(trajs)
    if not trajs:
        return 0.0
    hits = 0
    for t in trajs:
        for ctx, at, arg in replay_contexts(t):
            try:
                if fn(dict(ctx), at, arg):
                    hits += 1
                    break
            except Exception as e:  # noqa: BLE001
                log.debug("trigger raised on %s: %s", t.qid, e)
    return hits / len(trajs)
