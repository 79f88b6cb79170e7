"""Phase-instruction conditions: a small evaluator over the search agent's step state.

A SKILL.md phase (``phases.post_search.conditions``) lists conditions that must all hold for
its reminder to render. A condition is either

* a registered name (``no_read_yet``, ``search_empty`` …), optionally negated with ``!``;
* a comparison ``{field: search_count, op: ">=", value: 2}`` over a whitelisted state field;
* ``{any: [c1, c2]}`` or ``{not: c}``.

Conditions are compiled once per library into closures; an unknown name, field or operator is a
``SkillFormatError`` naming the SKILL.md, never a silently false condition (a typo would otherwise
switch a reminder off for good without anyone noticing).

The state is read by attribute (``hasp.agent.context.EpisodeState`` or anything shaped like it),
so evaluating a step copies nothing.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hasp.pf.question import QuestionFeatures
from hasp.config import HarnessParams, default_of
from hasp.pf.skill_md import SkillFormatError, SkillSpec
from hasp.textutil import jaccard


@dataclass
class ConditionEnv:
    """What one condition evaluation may look at."""

    state: Any  # EpisodeState-shaped: step_count, search_count, read_count, queries, ...
    question: QuestionFeatures
    pre_final_step_threshold: int = default_of(HarnessParams, "pre_final_step_threshold")


Condition = Callable[[ConditionEnv], bool]
E = TypeVar("E")


def _similar_titles(env: ConditionEnv) -> bool:
    titles = list(dict.fromkeys(str(h.get("title", "")).lower().strip() for h in env.state.last_search_hits))
    titles = [t for t in titles if t]
    return any(difflib.SequenceMatcher(None, a, b).ratio() >= 0.75
               for i, a in enumerate(titles) for b in titles[i + 1:])


def _repeated_query(env: ConditionEnv) -> bool:
    q = env.state.queries
    return len(q) >= 2 and any(jaccard(q[-1], prev) > 0.5 for prev in q[-3:-1])


def _unread_results(env: ConditionEnv) -> bool:
    read = set(env.state.read_ids)
    return any(h.get("id") not in read for h in env.state.last_search_hits)


#: Named conditions of the search domain (the vocabulary SKILL.md files may use).
SEARCH_CONDITIONS: dict[str, Condition] = {
    "always": lambda e: True,
    "no_search_yet": lambda e: e.state.search_count == 0,
    "has_searched": lambda e: e.state.search_count > 0,
    "no_read_yet": lambda e: e.state.read_count == 0,
    "has_read": lambda e: e.state.read_count > 0,
    "single_source": lambda e: e.state.read_count == 1,
    "search_empty": lambda e: e.state.search_count > 0 and bool(e.state.empty_results),
    "empty_results": lambda e: e.state.search_count > 0 and bool(e.state.empty_results),
    "has_results": lambda e: bool(e.state.last_search_hits),
    "unread_results": _unread_results,
    "repeated_query": _repeated_query,
    "similar_titles": _similar_titles,
    "contradictory_sources": lambda e: bool(e.state.contradictory_sources()),
    "pre_final_step": lambda e: e.state.step_count + 1 >= e.pre_final_step_threshold,
    "near_step_limit": lambda e: e.state.step_count + 2 >= e.state.max_steps,
    "multi_hop_question": lambda e: e.question.multi_hop,
    "multi_part_question": lambda e: e.question.multi_part,
    "negation_question": lambda e: e.question.negation,
    "temporal_question": lambda e: e.question.temporal,
    "computation_question": lambda e: e.question.computation,
    "factoid_question": lambda e: e.question.kind == "factoid",
}

#: Domains whose phase conditions are evaluated (and therefore validated) by the harness.
DOMAIN_CONDITIONS: dict[str, dict[str, Condition]] = {"search": SEARCH_CONDITIONS}

_FIELDS = ("step_count", "search_count", "read_count", "max_steps", "empty_results", "has_read")
#: the comparison fields phases may use: attributes of the episode state
STATE_FIELDS: dict[str, Callable[[ConditionEnv], Any]] = {
    f: (lambda e, f=f: getattr(e.state, f)) for f in _FIELDS}
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}


def compile_condition(cond: Any, names: dict[str, Callable[[E], bool]], where: str,
                      fields: dict[str, Callable[[E], Any]] | None = None) -> Callable[[E], bool]:
    """One condition → a closure; raises ``SkillFormatError`` (prefixed with ``where``) if invalid.

    ``names`` and ``fields`` are the vocabulary: phase conditions evaluate over a ``ConditionEnv``,
    declared PFs (``hasp.pf.declared``) over their step view, with the same grammar."""
    fields = STATE_FIELDS if fields is None else fields
    if isinstance(cond, str):
        neg = cond.startswith("!")
        name = cond[1:].strip() if neg else cond.strip()
        fn = names.get(name)
        if fn is None:
            raise SkillFormatError(f"{where}: unknown condition {name!r}; known: {sorted(names)}")
        return (lambda e: not fn(e)) if neg else fn
    if isinstance(cond, dict) and set(cond) == {"any"} and isinstance(cond["any"], list) and cond["any"]:
        parts = [compile_condition(c, names, where, fields) for c in cond["any"]]
        return lambda e: any(p(e) for p in parts)
    if isinstance(cond, dict) and set(cond) == {"not"}:
        inner = compile_condition(cond["not"], names, where, fields)
        return lambda e: not inner(e)
    if isinstance(cond, dict) and set(cond) == {"field", "op", "value"}:
        get, op = fields.get(str(cond["field"])), OPS.get(str(cond["op"]))
        if get is None:
            raise SkillFormatError(f"{where}: unknown field {cond['field']!r}; known: {sorted(fields)}")
        if op is None:
            raise SkillFormatError(f"{where}: unknown operator {cond['op']!r}; known: {list(OPS)}")
        value = cond["value"]
        if not isinstance(value, (int, float)):  # bool is an int: ``empty_results == true`` is fine
            raise SkillFormatError(f"{where}: field {cond['field']!r} is compared with a number, not {value!r}")
        return lambda e: bool(op(get(e), value))
    raise SkillFormatError(f"{where}: a condition is a name, {{field, op, value}}, {{any: [...]}} or "
                           f"{{not: ...}}; got {cond!r}")


def compile_conditions(spec: SkillSpec, phase: str, domain: str = "search",
                       source: str = "") -> list[Condition]:
    """All conditions of ``spec.phases[phase]`` (AND-ed by the caller). A domain without an evaluator
    (single-step math and code, whose conditions label the PF's own checks) has none: its phase
    reminders show whenever their phase is live."""
    names = DOMAIN_CONDITIONS.get(domain)
    if names is None:
        return []
    where = f"{source or spec.skill_id}: phases.{phase}.conditions"
    return [compile_condition(c, names, where) for c in spec.phases[phase].conditions]


def invalid_phases(spec: SkillSpec, domain: str, source: str = "") -> dict[str, str]:
    """``{phase: error}`` for every phase of ``spec`` whose conditions ``domain`` cannot evaluate.

    Domains without an evaluator (single-step math/code, whose conditions are descriptive labels
    of the PF's checks) have nothing to validate."""
    if domain not in DOMAIN_CONDITIONS:
        return {}
    bad = {}
    for phase in spec.phases:
        try:
            compile_conditions(spec, phase, domain, source)
        except SkillFormatError as e:
            bad[phase] = str(e)
    return bad
