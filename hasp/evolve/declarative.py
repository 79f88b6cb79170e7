"""Phase C for declared PFs: the student fills a declaration from menus instead of writing code.

Why: a small student cannot write a working Python class, but it can pick a trigger and a repair
from a short list. The lists (menus) are ranked from the cluster's own failing steps, rebuilt from
the rollout (``hasp.agent.replay``): the conditions that hold there and rarely elsewhere come first,
and only sources that have a value there are offered. The student still chooses; a choice that does
not compile gets one retry with the error shown, then a logged refusal that keeps the reply.

Two reply formats, one parser: a JSON object (the endpoint's structured output, ``response_format``
with a JSON schema, where the server supports it) or short ``KEY: value`` lines (lenient about case,
bullets and markdown), for servers that reject ``response_format`` such as ``transformers serve``.
Where decoding is constrained (``llm.constrained``), the JSON schema is the cluster's own
(``reply_schema`` with its menus): names only from the menus, so every reply that follows it is a
declaration that compiles.

A cluster whose episodes show a declared PF rewriting correct answers away (``Cluster.revises``)
is answered with a revision instead (``propose_revision``): the student picks, from the conditions
that held where the PF took the answer away (``revision_options``), the one under which it should
stay quiet; the candidate is that PF's declaration with the condition negated, under the PF's own
id (its next version).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hasp.agent.replay import ReplayedStep
from hasp.bounded import json_load
from hasp.evolve.cluster import Cluster
from hasp.evolve.excerpts import EVIDENCE_KEY, failing_steps_text
from hasp.evolve.propose import LLM_CALL_FAILED, Candidate, ChatModel, FeedbackHistory, _suggested_id
from hasp.pf.declaration import PFDeclaration
from hasp.pf.declared import compile_declaration
from hasp.pf.skill_md import (MAX_DESCRIPTION, MAX_SKILL_ID, SKILL_ID, SkillFormatError, SkillSpec, parse_skill_md,
                             render_skill_md)
from hasp.pf.vocabulary import ACTIONS, CONDITIONS, FIELDS, SOURCES, Step
from hasp.prompts import prompt, render
from hasp.textutil import truncate

log = logging.getLogger(__name__)

_KEYS = ("skill_id", "description", "watches", "when", "rewrite", "inject", "max_fires", "reason")
_LINE = re.compile(r"^[\s>*#\-`]*(skill[ _]?id|description|watches|when|rewrite|inject|max[ _]?fires|reason)"
                   r"[\s*`]*[:=]\s*(.*?)\s*$", re.I)
_TEST = re.compile(r"^\s*([a-z_]+)\s*(==|!=|>=|<=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")
_NOT = re.compile(r"^\s*(?:not\s+|!)\s*([a-z_]+)\s*$", re.I)
_SPLIT = re.compile(r"\s*(?:,|;|\band\b)\s*", re.I)
MAX_MENU = 8

#: bounds of the free texts of a schema-constrained reply: the whole object has to fit in
#: ``evolve.declarative_max_tokens``, or the budget cuts it into invalid JSON
SCHEMA_TEXT_CHARS = 160
SCHEMA_MAX_CONDITIONS = 2


def _menu_schema(menus: Menus, skill_id: str) -> dict[str, Any]:
    """The reply schema narrowed to one cluster: its skill id, one watched action and one or two
    conditions from the ranked menus (every condition when the menu is empty), and a rewrite from
    ``repair_options`` (an injected text without placeholders when no source has a value there)."""
    options = [o for o in repair_options(menus, menus.watches[0]) if not _example_copy({"rewrite": o})]
    conditions = menus.conditions or sorted(c for c in CONDITIONS if c != "always")
    repair: dict[str, Any] = {"rewrite": {"type": "string", "enum": options}} if options else {
        "inject": {"type": "string",
                   "pattern": rf'^[A-Za-z][^{{}}"\\\n]{{0,{SCHEMA_TEXT_CHARS - 1}}}$'}}
    properties = {
        "skill_id": {"type": "string", "enum": [skill_id]},
        "description": {"type": "string", "maxLength": SCHEMA_TEXT_CHARS},
        "watches": {"type": "array", "items": {"type": "string", "enum": list(menus.watches)},
                    "minItems": 1, "maxItems": 1},
        "when": {"type": "array", "items": {"type": "string", "enum": conditions},
                 "minItems": 1, "maxItems": SCHEMA_MAX_CONDITIONS},
        **repair,
        "max_fires": {"type": "integer", "minimum": 1, "maximum": 3},
    }
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def reply_schema(menus: Menus | None = None, skill_id: str | None = None) -> dict[str, Any]:
    """JSON schema of a reply. Without menus, any names (``check_reply`` judges them afterwards): what
    ``response_format`` asks of an endpoint with structured output. With a cluster's ``menus`` and the
    ``skill_id`` its prompt names, the names come from the menus, so a reply that follows it is a
    declaration that compiles: what constrained decoding enforces token by token."""
    if menus is not None:
        return _menu_schema(menus, skill_id or "repair")
    return {
        "type": "object",
        "properties": {
            "skill_id": {"type": "string"}, "description": {"type": "string"},
            "watches": {"type": "array", "items": {"type": "string", "enum": list(ACTIONS)}, "minItems": 1},
            "when": {"type": "array", "items": {"type": "string"}},
            "rewrite": {"type": "string"}, "inject": {"type": "string"},
            "max_fires": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "required": ["skill_id", "description", "watches", "when", "max_fires"],
    }


#: JSON schema of a reply, for endpoints with structured output
REPLY_SCHEMA: dict[str, Any] = reply_schema()


def _p(key: str, **fields: object) -> str:
    return render("hasp.evolve", "propose_declarative", key, **fields) if fields else \
        prompt("hasp.evolve", "propose_declarative", key)


# --------------------------------------------------------------------------- menus from the failing steps

@dataclass(frozen=True)
class Menus:
    """What the student may pick from, most relevant first. ``answers`` (source -> share of the
    failing steps where a FINAL from that source would have been right) orders the repairs."""

    watches: list[str]
    conditions: list[str]
    sources: list[str]
    answers: dict[str, float] = field(default_factory=dict)


def _rate(test: Callable[[Step], Any], steps: Sequence[ReplayedStep]) -> float:
    if not steps:
        return 0.0
    hits = 0
    for s in steps:
        try:
            hits += bool(test(Step(s.ctx, s.action, s.arg)))
        except Exception:  # noqa: BLE001 - a vocabulary item that cannot read a step counts as "no"
            pass
    return hits / len(steps)


def _answer_rates(focus: Sequence[ReplayedStep], gold: dict[str, list[str]]) -> dict[str, float]:
    """Counterfactual replay on the training split: per answer source, the share of the failing
    steps on which a FINAL with its value would have been an exact match of the gold answer."""
    from hasp.domains.search.metrics import exact_match

    steps = [s for s in focus if gold.get(s.qid)]
    if not steps:
        return {}
    out = {}
    for name, src in SOURCES.items():
        if src.kind == "answer":
            out[name] = sum(exact_match(src.get(Step(s.ctx, s.action, s.arg)), gold[s.qid]) for s in steps) / len(steps)
    return out


def rank_menus(focus: Sequence[ReplayedStep], background: Sequence[ReplayedStep],
               gold: dict[str, list[str]] | None = None) -> Menus:
    """Menus for a cluster: its steps' action types by frequency; conditions true on at least half of
    them, ranked by how much more often they hold there than on the background steps; sources that
    yield a value on at least half of them (documents, then answers, then queries). With ``gold``
    (qid -> answers of the training questions) answer sources are also scored by counterfactual
    replay, and the repairs that would have answered right come first."""
    watches = [a for a, _ in Counter(s.action for s in focus).most_common() if a in ACTIONS] or list(ACTIONS)
    scored = []
    for name, (test, _) in CONDITIONS.items():
        if name == "always":
            continue
        here = _rate(test, focus)
        if here >= 0.5:
            scored.append((here - _rate(test, background), here, name))
    conditions = [n for _, _, n in sorted(scored, key=lambda x: (-x[0], -x[1], x[2]))][:MAX_MENU]
    kinds = {"doc": 0, "answer": 1, "query": 2}
    yields = [(-_rate(src.get, focus), kinds.get(src.kind, 3), name) for name, src in SOURCES.items()
              if name not in ("shown_results", "arg")]
    sources = [n for r, _, n in sorted(yields) if -r >= 0.5]
    return Menus(watches=watches, conditions=conditions, sources=sources, answers=_answer_rates(focus, gold or {}))


def focus_steps(cluster: Cluster, replayed: dict[str, list[ReplayedStep]]) -> list[ReplayedStep]:
    """The cluster's failing steps: those its patterns point at (``evidence["failing_steps"]`` of
    ``hasp.evolve.excerpts``, or an evidence key ``step``/``steps``/``*_step``), else every parsed
    step of its episodes."""
    out: list[ReplayedStep] = []
    for p in cluster.patterns:
        steps = replayed.get(p.qid, [])
        marked: set[int] = set()
        for k, v in (p.evidence or {}).items():
            if k == EVIDENCE_KEY and isinstance(v, list):
                marked |= {int(d["step"]) for d in v if isinstance(d, dict) and isinstance(d.get("step"), int)}
            elif k == "steps" or k == "step" or k.endswith("_step") or k.endswith("_steps"):
                marked |= {int(x) for x in (v if isinstance(v, list) else [v]) if isinstance(x, int)}
        out += [s for s in steps if s.index in marked] or steps
    return out


# --------------------------------------------------------------------------- the reply

def _items(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(x).strip() for x in value if str(x).strip()]
    return [x for x in (t.strip(" .`'\"") for t in _SPLIT.split(str(value or ""))) if x]


def _condition(item: str) -> str | dict[str, Any]:
    m = _TEST.match(item)
    if m:
        value = float(m.group(3))
        return {"field": m.group(1), "op": m.group(2), "value": int(value) if value.is_integer() else value}
    m = _NOT.match(item)
    return f"!{m.group(1).lower()}" if m else item.strip().lower().replace(" ", "_")


def _rewrite(value: str) -> dict[str, Any]:
    words = [w for w in re.split(r"[\s:\[\]()]+", value.strip()) if w and w.lower() != "or"]
    if not words:
        raise ValueError("REWRITE needs an action type and a source, e.g. 'READ top_result'")
    return {"action": words[0].upper(), "arg": [w.lower() for w in words[1:]] or ["arg"]}


def reply_fields(text: str) -> dict[str, Any]:
    """The reply's fields (JSON object or ``KEY: value`` lines), keys normalised; {} when none."""
    stripped = (text or "").strip().strip("`").removeprefix("json").strip()
    if stripped.startswith("{"):
        try:
            data = json_load(stripped[: stripped.rfind("}") + 1])
            if isinstance(data, dict):
                return {k: data[k] for k in _KEYS if k in data}
        except ValueError:  # not JSON, or refused by the bounded parser: read KEY: value lines
            pass
    out: dict[str, Any] = {}
    for line in (text or "").splitlines():
        m = _LINE.match(line)
        if m:
            key = re.sub(r"[\s_]+", "_", m.group(1).lower())
            out.setdefault(key, m.group(2).strip().strip("`"))
    return out


def declaration_of(fields: dict[str, Any]) -> PFDeclaration:
    """The declaration the fields describe; raises ``ValueError`` / ``ValidationError`` naming the field."""
    decl: dict[str, Any] = {"watches": [w.upper() for w in _items(fields.get("watches"))],
                            "when": [_condition(c) for c in _items(fields.get("when"))]}
    if fields.get("rewrite") and not fields.get("inject"):
        decl["rewrite"] = _rewrite(str(fields["rewrite"]))
    if fields.get("inject"):
        decl["inject"] = str(fields["inject"]).strip().strip("\"'")
    if fields.get("max_fires") not in (None, ""):
        m = re.search(r"\d+", str(fields["max_fires"]))
        decl["max_fires"] = min(3, max(1, int(m.group(0)))) if m else None
    if fields.get("reason"):
        decl["reason"] = str(fields["reason"])[:200]
    return PFDeclaration(**decl)


def _fresh_id(sid: str, taken: Sequence[str]) -> str:
    """``sid``, or ``sid_2``, ``sid_3`` ... when taken (a declared candidate is always a new skill)."""
    n, out = 1, sid
    while out in taken:
        n += 1
        out = f"{sid[:MAX_SKILL_ID - 3]}_{n}"
    return out


def _example_copy(fields: dict[str, Any]) -> bool:
    return str(fields.get("skill_id", "")).strip() == "empty_result_rephrase" or \
        str(fields.get("rewrite", "")).strip().lower() == "search arg_shortened"


def check_reply(text: str, cluster: Cluster, existing: Sequence[str], fields: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], PFDeclaration, str]:
    """(fields, declaration, skill id) of a usable reply; raises ``ValueError`` with one line saying
    which field is wrong, so the retry can show it to the student. ``fields`` given (the choices
    format) are checked instead of parsing ``text``."""
    fields = reply_fields(text) if fields is None else fields
    if not fields:
        raise ValueError("no 'KEY: value' lines found (SKILL_ID, DESCRIPTION, WATCHES, WHEN, REWRITE or INJECT)")
    missing = [k for k in ("watches", "when") if not fields.get(k)]
    if not (fields.get("rewrite") or fields.get("inject")):
        missing.append("rewrite or inject")
    if not any(fields.get(k) for k in ("watches", "when", "rewrite", "inject")):
        raise ValueError("nothing chosen: no WATCHES, WHEN, REWRITE or INJECT given")
    if missing:
        raise ValueError(f"missing: {', '.join(missing)}")
    if _example_copy(fields):
        raise ValueError("it repeats the example; write a repair for the failure shown")
    try:
        decl = declaration_of(fields)
    except ValidationError as e:
        er = e.errors()[0]
        raise ValueError(f"{'.'.join(map(str, er['loc'])) or 'declaration'}: {er['msg']}") from None
    sid = str(fields.get("skill_id", "")).strip().lower().replace("-", "_").replace(" ", "_")
    if not SKILL_ID.fullmatch(sid) or len(sid) < 3:
        sid = _suggested_id(cluster, existing)
    sid = _fresh_id(sid, existing)
    try:
        compile_declaration(sid, decl, "reply")
    except SkillFormatError as e:
        raise ValueError(str(e).removeprefix("reply: ")) from None
    return fields, decl, sid


def _candidate(cluster: Cluster, fields: dict[str, Any], decl: PFDeclaration, sid: str, reply: str,
               notes: list[str], epoch: int) -> Candidate:
    rep = cluster.representative
    description = str(fields.get("description") or "").strip() or rep.abstraction
    if not str(fields.get("description") or "").strip():
        notes.append("description synthesized from the cluster")
    if sid != str(fields.get("skill_id", "")).strip():
        notes.append(f"skill_id {fields.get('skill_id')!r} replaced by {sid!r}")
    body = (f"## Failure pattern\n{rep.abstraction}\n\n## When it fires\n{rep.trigger}\n\n"
            "## Repair\nDeclared in hasp.yaml (`pf:`), compiled from the project's templates.\n")
    spec = SkillSpec(skill_id=sid, name=sid.replace("_", "-"), description=description[:MAX_DESCRIPTION],
                     error_category=cluster.category, version=1, priority=0.5, domain="search", pf=decl, body=body)
    return Candidate(skill_id=sid, skill_md=render_skill_md(spec), code="", cluster_category=cluster.category,
                     raw_reply=reply, notes=notes, epoch=epoch, declaration=decl.model_dump(exclude_defaults=True))


def _condition_text(cond: str | dict[str, Any]) -> str | None:
    """A condition as the line format writes it (``name``, ``not name``, ``field >= 2``); None for the
    nested forms the line format has no words for."""
    if isinstance(cond, str):
        return f"not {cond[1:]}" if cond.startswith("!") else cond
    if set(cond) == {"field", "op", "value"}:
        return f"{cond['field']} {cond['op']} {cond['value']}"
    return None


def _canonical(decl: PFDeclaration) -> dict[str, Any]:
    d = decl.model_dump(exclude_defaults=True)
    if decl.rewrite is not None:  # one source or a list of one: the same rewrite
        d["rewrite"] = {"action": decl.rewrite.action, "arg": decl.rewrite.sources}
    return d


def reply_lines(candidate: Candidate) -> str | None:
    """The reply to the candidate's proposal prompt that declares its PF: the exact reply when the
    proposer recorded one (``Candidate.target``: a revision's option number, the JSON a student wrote
    under structured output), else the ``KEY: value``
    lines the declarative prompt asks for: the target of the candidate's skill-authoring training row
    (Objective B). None when the lines cannot say that declaration (a nested condition, a vote, text
    over several lines) or it has none: such a candidate was not an answer to this prompt."""
    if candidate.target:  # the proposer recorded the exact reply
        return candidate.target
    if not candidate.declaration or not candidate.skill_md:
        return None
    decl = PFDeclaration(**candidate.declaration)
    when = [_condition_text(c) for c in decl.when]
    if decl.vote or None in when:
        return None
    try:
        description = " ".join(parse_skill_md(candidate.skill_md).description.split())
    except SkillFormatError:
        return None
    lines = [f"SKILL_ID: {candidate.skill_id}", f"DESCRIPTION: {description}",
             f"WATCHES: {', '.join(decl.watches)}", f"WHEN: {', '.join(str(c) for c in when)}"]
    if decl.rewrite is not None:
        lines.append(f"REWRITE: {decl.rewrite.action} {' '.join(decl.rewrite.sources)}")
    else:
        lines.append(f"INJECT: {decl.inject}")
    if decl.max_fires is not None:
        lines.append(f"MAX_FIRES: {decl.max_fires}")
    if decl.reason:
        lines.append(f"REASON: {decl.reason}")
    text = "\n".join(lines)
    try:
        same = _canonical(declaration_of(reply_fields(text))) == _canonical(decl)
    except (ValueError, ValidationError):
        return None
    return text if same else None


# --------------------------------------------------------------------------- the proposal loop

_ACTION_WORDS = {"read": "READ", "search": "SEARCH", "final": "FINAL", "answer": "FINAL"}


def _mentions(reply: str, options: Sequence[str]) -> list[str]:
    """The options a reply names, in the order it names them; a bare number picks by position."""
    low = (reply or "").lower()
    found = []
    for opt in options:
        m = re.search(rf"(?<![a-z_]){re.escape(opt.lower())}(?![a-z_])", low)
        if m:
            found.append((m.start(), opt))
    if not found:
        num = re.match(r"\s*(?:option\s*)?\(?(\d+)\b", low)
        if num and 1 <= int(num.group(1)) <= len(options):
            return [options[int(num.group(1)) - 1]]
    return [opt for _, opt in sorted(found)]


def _action_named(reply: str, options: Sequence[str]) -> list[str]:
    """An action type the reply names, also as a plain verb ("it should read ...")."""
    named = _mentions(reply, options)
    if named:
        return named
    low = (reply or "").lower()
    hits = sorted((m.start(), _ACTION_WORDS[m.group(1)]) for m in re.finditer(r"\b(read|search|final|answer)\b", low))
    return [a for _, a in hits if a in options][:1]


def _repair_named(reply: str, options: Sequence[str]) -> list[str]:
    """A repair option the reply names whole ("READ top_result"), or by its source with the action
    taken from a verb in the reply (else the first option with that source)."""
    named = _mentions(reply, options)
    if named:
        return named
    low = (reply or "").lower()
    sources = sorted((m.start(), src) for src in {o.split()[1] for o in options}
                     if (m := re.search(rf"(?<![a-z_]){src}(?![a-z_])", low)))
    for _, src in sources:
        acts = _action_named(reply, list(ACTIONS))
        with_src = [o for o in options if o.split()[1] == src]
        pick = next((o for o in with_src if acts and o.split()[0] == acts[0]), with_src[0])
        return [pick]
    return []


def _numbered(options: Sequence[str]) -> str:
    return " ".join(f"{i}) {o}" for i, o in enumerate(options, 1))


def repair_options(menus: Menus, watched: str) -> list[str]:
    """``ACTION source`` pairs a rewrite may use: a FINAL that would have answered right on the
    failing steps first (best first), then the watched action's own, then the others."""
    from hasp.pf.vocabulary import REWRITE_KINDS

    order = [watched, *[a for a in ACTIONS if a != watched]]
    opts = [f"{a} {s}" for a in order for s in menus.sources
            if SOURCES[s].kind in REWRITE_KINDS[a] and not (a == watched and s == "arg")]
    right = sorted((o for o in opts if o.startswith("FINAL ") and menus.answers.get(o.split()[1], 0) > 0),
                   key=lambda o: -menus.answers[o.split()[1]])
    return right + [o for o in opts if o not in right]


def interview(student: ChatModel, cluster: Cluster, menus: Menus, steps: Sequence[ReplayedStep],
              kw: dict[str, Any], notes: list[str]) -> tuple[str, dict[str, Any]]:
    """The ``choices`` format: one short question per field (action, condition, repair), each answered
    by naming a numbered menu option (leniently: a plain verb or a source name counts). A menu with a
    single option is not asked. Returns (the transcript, the fields chosen) — a field the student
    named nothing for is left out, so ``check_reply`` says which one is missing."""
    rep = cluster.representative
    s = steps[0] if steps else None
    context = _p("choice_context", abstraction=rep.abstraction,
                 question=truncate(str(s.ctx.get("question", "")), 90) if s else "?",
                 action=f"{s.action}[{truncate(s.arg, 40)}]" if s else "?",
                 previous=(s.ctx.get("action_history") or ["nothing"])[-1] if s else "?")
    transcript: list[str] = []
    fields: dict[str, Any] = {"skill_id": _suggested_id(cluster, []), "max_fires": 2}

    def ask(key: str, options: list[str], read: Callable[[str, Sequence[str]], list[str]]) -> list[str]:
        if len(options) == 1:
            transcript.append(f"{key.removeprefix('ask_').upper()}: {options[0]} (the only option; not asked)")
            return list(options)
        q = _p(key, context=context, options=_numbered(options))
        reply = _ask(student, [{"role": "system", "content": _p("choice_system")}, {"role": "user", "content": q}],
                     kw, notes)
        transcript.append(f"{key.removeprefix('ask_').upper()}? {truncate(reply, 300)}")
        return read(reply, options)

    watch = ask("ask_watch", menus.watches, _action_named)
    if watch:
        fields["watches"] = watch[:1]
    when = ask("ask_when", menus.conditions, _mentions) if menus.conditions else []
    if when:
        fields["when"] = when[:2]
    repair = ask("ask_repair", repair_options(menus, (watch or menus.watches)[0]), _repair_named)
    if repair:
        fields["rewrite"] = repair[0]
    if watch and when and repair:
        fields["description"] = (f"When the agent proposes {watch[0]} and {' and '.join(when[:2])}, "
                                 f"it does {repair[0]} instead.")
        notes.append("skill_id, description and max_fires set by the project (choices format)")
    return "\n".join(transcript), fields


def choose_format(setting: str, history: FeedbackHistory | None) -> str:
    """``evolve.proposal_format`` resolved: ``auto`` asks for code only once the student's code
    proposals have passed review (admitted or ACCEPT) at least twice, declarations until then."""
    if setting != "auto":
        return setting
    code = [e for e in (history.entries if history is not None else []) if e.proposal_format == "code"]
    passed = sum(1 for e in code if e.decision in ("admitted", "ACCEPT"))
    return "code" if passed >= 2 else "declarative"


def reply_format_for(setting: str, embedded: bool, constrained: bool = False) -> str:
    """``evolve.structured_output`` resolved to a reply format of ``propose_declarative``: ``auto`` is
    JSON through ``response_format`` for a served model, and the one-question-per-field ``choices``
    for the embedded 135M student (without constrained decoding it does not keep a multi-line format).
    ``constrained`` (``llm.constrained`` says proposals are constrained for the student's dialect)
    turns ``auto`` and ``json_schema`` into ``schema``: JSON under the cluster's own schema."""
    if constrained and setting in ("auto", "json_schema"):
        return "schema"
    if setting == "auto":
        return "choices" if embedded else "json"
    return {"json_schema": "json"}.get(setting, setting)


def build_messages(cluster: Cluster, menus: Menus, steps: Sequence[ReplayedStep], existing: Sequence[str],
                   history: FeedbackHistory | None) -> list[dict[str, str]]:
    """System + user messages asking the student for one declaration for ``cluster``."""
    rep = cluster.representative
    hist = history.render(cluster.category, 4) if history is not None else ""
    user = _p("user", category=cluster.category, abstraction=rep.abstraction, trigger=rep.trigger,
              support=cluster.support, steps=failing_steps_text(cluster),
              watches=", ".join(menus.watches), conditions=", ".join(menus.conditions) or "(none)",
              fields=", ".join(FIELDS), sources=", ".join(menus.sources) or "(none)",
              existing=", ".join(existing) or "(none)", history=_p("history", lines=hist) if hist else "",
              skill_id=_suggested_id(cluster, existing))
    return [{"role": "system", "content": _p("system", example=_p("example"))}, {"role": "user", "content": user}]


def _ask(student: ChatModel, convo: list[dict[str, str]], kw: dict[str, Any], notes: list[str]) -> str:
    """One reply; when the endpoint refuses structured output, ask once more in the line format
    (and keep doing so for this candidate)."""
    try:
        return str(getattr(student.chat(convo, **kw), "text", "") or "")
    except Exception as e:  # noqa: BLE001
        if "response_format" not in kw:
            raise
        kw.pop("response_format")
        notes.append(f"structured output refused ({type(e).__name__}); asked for lines instead")
        log.info("endpoint refused response_format (%s); using the line format", e)
        return str(getattr(student.chat(convo, **kw), "text", "") or "")


def _called(call: Callable[[], Any]) -> tuple[Any, str]:
    """``(result, "")``, or ``(None, why)`` when the model call raised (recorded on the candidate)."""
    try:
        return call(), ""
    except Exception as e:  # noqa: BLE001 - a failed call is a refused candidate, never a crash
        return None, f"{LLM_CALL_FAILED}: {type(e).__name__}: {e}"


def blocked_rewrites(cluster: Cluster, skill_id: str) -> list[tuple[str, dict[str, Any]]]:
    """``(qid, rewrite)`` of each step of the cluster where ``skill_id`` rewrote a FINAL that carried
    the gold answer (the detector's ``rewrites`` at its ``blocked_steps``). Why per PF: a blocked step
    may be another PF's doing, and a revision of this one must be judged on its own harm."""
    out = []
    for p in cluster.patterns:
        ev = p.evidence or {}
        blocked = set(ev.get("blocked_steps") or ())
        out += [(p.qid, r) for r in ev.get("rewrites") or ()
                if r.get("step") in blocked and skill_id in (r.get("skill_ids") or ())]
    return out


def revision_options(base: SkillSpec, cluster: Cluster, replayed: dict[str, list[ReplayedStep]]) -> list[str]:
    """Conditions under which a revision of ``base`` should stay quiet, best first.

    The focus is the steps where ``base`` rewrote a FINAL that carried the gold answer
    (``blocked_rewrites``). A condition is offered when it holds on at least half of them,
    ``base`` does not test it yet, and it does not hold on every other step where ``base`` fires
    (negating such a condition would silence the PF everywhere, not just where it hurt); the
    ones that hold most often on the blocked steps and least often on the other firings come first."""
    assert base.pf is not None
    blocked = {(q, r["step"]) for q, r in blocked_rewrites(cluster, base.skill_id)}
    steps = [s for v in replayed.values() for s in v]
    focus = [s for s in steps if (s.qid, s.index) in blocked]
    pf = compile_declaration(base.skill_id, base.pf, "revision")
    others = [s for s in steps if (s.qid, s.index) not in blocked and pf.should_activate(dict(s.ctx), s.action, s.arg)]
    have = {c.lstrip("!") for c in base.pf.when if isinstance(c, str)}
    scored = []
    for name, (test, _) in CONDITIONS.items():
        if name == "always" or name in have:
            continue
        here, there = _rate(test, focus), _rate(test, others)
        if here >= 0.5 and (not others or there < 1.0):
            scored.append((here - there, here, name))
    return [n for _, _, n in sorted(scored, key=lambda x: (-x[0], -x[1], x[2]))][:MAX_MENU]


def revised_skill(base: SkillSpec, condition: str, support: int) -> SkillSpec:
    """``base`` with its PF quiet when ``condition`` holds (appended as ``!condition``); the rest of
    the skill (phases, priority, texts) is kept, the description and body say what changed."""
    assert base.pf is not None
    decl = base.pf.model_copy(update={"when": [*base.pf.when, f"!{condition}"]})
    what = CONDITIONS[condition][1]
    note = f"Not when: {what}."
    body = (f"{base.body.rstrip()}\n\n## Revision\nIts rewrites failed in {support} episode(s) where {what}; "
            "this version no longer fires then.\n")
    return base.model_copy(update={"pf": decl, "body": body,
                                   "description": f"{truncate(base.description, MAX_DESCRIPTION - len(note) - 1)} {note}"})


def propose_revision(student: ChatModel, cluster: Cluster, base: SkillSpec, options: Sequence[str],
                     kw: dict[str, Any], epoch: int, seed: int | None) -> Candidate:
    """One revision of ``base`` for a cluster of its harmful rewrites: the student names the
    condition (from ``options``) under which it should stay quiet; a reply naming none is asked
    once more, then refused with the replies kept."""
    # one of its own harmful rewrites (``options`` is empty unless there is one)
    shown = next((r for _, r in blocked_rewrites(cluster, base.skill_id)), {})
    context = _p("revise_context", skill=base.skill_id, abstraction=cluster.representative.abstraction,
                 orig=shown.get("from", "?"), final=shown.get("to", "?"))
    convo = [{"role": "system", "content": _p("choice_system")},
             {"role": "user", "content": _p("ask_unless", context=context, skill=base.skill_id,
                                            options=_numbered(options))}]
    notes: list[str] = []
    replies: list[str] = []
    error = ""
    cand: Candidate | None = None
    for attempt in range(2):
        if attempt:
            kw["seed"] = None if seed is None else seed + 1
        reply, error = _called(lambda: _ask(student, convo, kw, notes))
        if reply is None:
            break
        replies.append(reply)
        named = _mentions(reply, options)
        if not named:
            error = "the reply names none of the options"
            notes.append(f"attempt {attempt + 1}: {error}")
            continue
        spec = revised_skill(base, named[0], cluster.support)
        try:
            compile_declaration(base.skill_id, spec.pf, "revision")
        except SkillFormatError as e:
            error = str(e)
            notes.append(f"attempt {attempt + 1}: {error}")
            continue
        notes.append(f"revision of {base.skill_id} (v{base.version}): quiet when {named[0]}; "
                     "the rest of the skill kept, skill_id and description set by the project")
        cand = Candidate(skill_id=base.skill_id, skill_md=render_skill_md(spec), code="",
                         cluster_category=cluster.category, raw_reply=f"UNLESS? {truncate(reply, 300)}", notes=notes,
                         epoch=epoch, declaration=spec.pf.model_dump(exclude_defaults=True), revises=base.skill_id,
                         target=str(options.index(named[0]) + 1))  # the question asks for an option's number
        break
    if cand is None:
        log.warning("revision of %s refused: %s", base.skill_id, error)
        cand = Candidate(skill_id=base.skill_id, skill_md="", code="", cluster_category=cluster.category,
                         raw_reply="\n---\n".join(replies), notes=notes, epoch=epoch, revises=base.skill_id,
                         parse_error=f"revision refused: {error}" if replies else error)
    cand.prompt_messages = [dict(m) for m in convo]
    return cand


def propose_declarative(clusters: Sequence[Cluster], student: ChatModel, *, existing_skill_ids: Sequence[str],
                        replayed: dict[str, list[ReplayedStep]], history: FeedbackHistory | None = None,
                        epoch: int = 0, max_candidates: int = 5, temperature: float = 0.7, max_tokens: int = 200,
                        seed: int | None = None, reply_format: str = "lines",
                        gold: dict[str, list[str]] | None = None, per_cluster: int = 1,
                        on_done: Callable[[], None] | None = None,
                        declared_skills: dict[str, SkillSpec] | None = None,
                        stop: Callable[[], bool] | None = None) -> list[Candidate]:
    """One declared candidate per cluster (the first ``max_candidates``); each gets one retry.

    ``replayed`` maps qid -> its replayed steps (the rollout). ``reply_format``: ``json`` asks the
    endpoint for JSON through ``response_format`` (an endpoint that refuses it is asked again for
    lines); ``schema`` constrains decoding to the cluster's ``reply_schema`` (the client encodes it
    for its dialect and answers without it, counted, where it is refused); ``lines`` asks for
    ``KEY: value`` lines; ``choices`` asks one short question per field (``interview``), for students
    too small to keep a format. A failed call or a reply that stays
    invalid is a candidate with ``parse_error`` set and the reply kept, so the epoch's record shows it.
    ``gold`` (qid -> answers, training questions only) orders the repair menu by counterfactual replay.
    ``per_cluster`` proposals are sampled per cluster; one that declares what an earlier one of the
    same cluster did is dropped (and counted in the first one's notes). ``declared_skills`` (id ->
    spec of the library's declared PFs) lets a cluster that names one of them in ``revises`` be
    answered with a revision of it (``propose_revision``). ``stop`` is asked before each proposal (the
    epoch's budget, ``hasp.evolve.budget.Guard``): once it says True, no further proposal is asked for.
    """
    background = [s for steps in replayed.values() for s in steps]
    existing = list(existing_skill_ids)
    chosen = list(clusters)[: max(0, max_candidates)]
    revisable = {id(c): (b, revision_options(b, c, replayed)) for c in chosen
                 if (b := (declared_skills or {}).get(c.revises or "")) is not None and b.pf is not None}
    out = []
    for cluster, sample in ((c, j) for c in chosen for j in range(per_cluster)):
        if stop is not None and stop():
            break
        kw: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens,
                              "seed": None if seed is None else seed + 1000 * sample}
        base, options = revisable.get(id(cluster), (None, []))
        if base is not None and options:
            cand = propose_revision(student, cluster, base, options, kw, epoch, kw["seed"])
            cand.proposal_format = "declarative"
            if on_done is not None:
                on_done()
            if not any(c.revises == cand.revises and c.declaration == cand.declaration for c in out if c.declared):
                out.append(cand)
            continue
        focus = focus_steps(cluster, replayed)
        menus = rank_menus(focus, background, gold)
        msgs = build_messages(cluster, menus, focus, existing, history)
        if reply_format == "json":
            kw["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "pf_declaration", "schema": REPLY_SCHEMA}}
        elif reply_format == "schema":
            kw["json_schema"] = reply_schema(menus, _suggested_id(cluster, existing))
        notes: list[str] = []
        replies: list[str] = []
        cand: Candidate | None = None
        error = ""
        convo = list(msgs)
        for attempt in range(2):
            fields = None
            if reply_format == "choices":
                got, error = _called(lambda: interview(student, cluster, menus, focus, kw, notes))
                reply, fields = got if got is not None else (None, None)
            else:
                reply, error = _called(lambda: _ask(student, convo, kw, notes))
            if reply is None:
                break
            replies.append(reply)
            try:
                fields, decl, sid = check_reply(reply, cluster, existing, fields)
            except ValueError as e:
                error = str(e)
                notes.append(f"attempt {attempt + 1}: {error}")
                convo = [*msgs, {"role": "assistant", "content": reply}, {"role": "user", "content": _p("retry", error=error)}]
                kw["seed"] = None if seed is None else seed + 1  # a second interview must not repeat the first
                continue
            cand = _candidate(cluster, fields, decl, sid, reply, notes, epoch)
            if reply_format in ("json", "schema"):  # the JSON it wrote is the reply this prompt gets from it
                cand.target = reply
            break
        if cand is None:
            log.warning("declared proposal for %s refused: %s", cluster.category, error)
            cand = Candidate(skill_id=_suggested_id(cluster, existing), skill_md="", code="",
                             cluster_category=cluster.category, raw_reply="\n---\n".join(replies),
                             parse_error=f"declaration refused: {error}" if replies else error,
                             notes=notes, epoch=epoch)
        cand.prompt_messages = [dict(m) for m in msgs]
        cand.proposal_format = "declarative"
        if on_done is not None:
            on_done()
        twin = next((c for c in out if c.declared and c.cluster_category == cluster.category
                     and c.declaration == cand.declaration), None)
        if twin is not None:
            twin.notes.append(f"sample {sample + 1} declared the same")
            continue
        existing.append(cand.skill_id)
        out.append(cand)
    return out


# --------------------------------------------------------------------------- Phases D-F for declared candidates

def declaration_errors(candidate: Candidate) -> list[str]:
    """Why a declared candidate's PF cannot be built (empty when it compiles)."""
    try:
        compile_declaration(candidate.skill_id, PFDeclaration(**(candidate.declaration or {})), "declaration")
    except (ValidationError, SkillFormatError, TypeError) as e:
        return [str(e).splitlines()[0]]
    return []


def compiled_source(candidate: Candidate) -> str:
    """The compiled form of a declared candidate (what a reviewer reads instead of code)."""
    try:
        return compile_declaration(candidate.skill_id, PFDeclaration(**(candidate.declaration or {})),
                                   "declaration").compiled()
    except (ValidationError, SkillFormatError, TypeError) as e:
        return f"# declaration does not compile: {str(e).splitlines()[0]}"


def compiled_pf(candidate: Candidate) -> Any:
    """The in-process PF of a declared candidate (raises ``SkillFormatError`` when it does not compile)."""
    return compile_declaration(candidate.skill_id, PFDeclaration(**(candidate.declaration or {})), "declaration")


def validate_declared(candidate: Candidate) -> Any:
    """Phase D for a declared candidate: it compiles, then the execution checks run in-process
    (compiled declarations run no student code, so they need no sandbox)."""
    from hasp.evolve.validate import SEARCH_ACTIONS, ExecReport, validate_trusted

    errors = declaration_errors(candidate)
    if errors:
        rep = ExecReport(skill_id=candidate.skill_id)
        rep.errors = [f"declaration: {e}" for e in errors]
        return rep
    return validate_trusted(compiled_pf(candidate), action_types=SEARCH_ACTIONS)
