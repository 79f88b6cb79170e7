"""Phase C: the student authors candidate skills (SKILL.md + PF code) for failure clusters.

The default student is a 135M-parameter model, so most replies are imperfect.
The parser is tolerant about *documentation* and strict about *code*:

* SKILL.md: fenced ``markdown``/``md``/``yaml`` block, or a ``---`` frontmatter
  anywhere in the reply. Valid frontmatter keys are kept; a missing or broken
  frontmatter is rebuilt from the cluster (skill_id from the category,
  description from the abstraction) around the model's own body text.
  Every repair is listed in ``Candidate.notes``.
* PF code: taken verbatim from a fenced ``python`` block (or an unlabeled block
  that defines ``should_activate``). With no code block the candidate gets empty
  ``code`` and fails Phase D honestly. Code is never synthesised or rewritten
  here; a reply that merely copies the prompt's example class is also emptied.

The prompt states the PF interface, the no-model-calls rule for
``should_activate``, the step-context fields, the existing skill ids and a
feedback history of earlier proposals (EvoSkill-style, so rejected ideas are
not resubmitted unchanged).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import yaml

from hasp.agent.context import EpisodeState
from hasp.bounded import ParseRefused, yaml_load
from hasp.evolve.cluster import Cluster
from hasp.evolve.excerpts import EVIDENCE_KEY, failing_steps_text
from hasp.pf.skill_md import (MAX_DESCRIPTION, MAX_SKILL_ID, PHASES, SKILL_ID, SkillFormatError, SkillSpec,
                              parse_skill_md, render_skill_md)
from hasp.prompts import prompt, render
from hasp.sandbox.policy import ALLOWED_MODULES

log = logging.getLogger(__name__)

__all__ = ["ChatModel", "Candidate", "FeedbackEntry", "FeedbackHistory", "STEP_CONTEXT_FIELDS",
           "INTERVENTION_KWARGS", "build_proposer_messages", "parse_proposal", "propose_candidates",
           "skill_id_from_category", "registered_id"]


class ChatModel(Protocol):
    """The one method we need from ``hasp.llm.client.LLMClient`` (or a test double).
    The result must have a ``.text`` attribute."""

    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None, stop: list[str] | None = None,
             seed: int | None = None) -> Any: ...


#: The context keys a PF can read, taken from the runtime so the prompt never drifts from it.
STEP_CONTEXT_FIELDS: tuple[str, ...] = tuple(EpisodeState(question="", max_steps=1).to_ctx().keys())
_FIELD_DOC = {
    "question": "str, the user question",
    "step_count": "int, 0-based index of this step",
    "has_read": "bool, a document was read this episode",
    "search_count": "int", "read_count": "int",
    "empty_results": "bool, the last SEARCH found nothing",
    "contradictory_sources": "bool, read documents contain conflict/negation words",
    "max_steps": "int, step budget",
    "action_history": 'list[str] of executed actions like "SEARCH[x]"',
    "last_action": 'str, type of the previous executed action ("SEARCH", "READ", "FINAL"; "" at the first step)',
    "last_read": "str, the most recently read document",
    "last_search_results_text": "str", "all_read_contents": "str, all read documents",
    "thought": "str, the agent's thought for this step",
    "queries": "list[str] of earlier search queries",
    "last_search_hits": 'list of {"id","title"}', "seen_hits": 'list of {"id","title"}',
    "read_ids": "list[str] of read document ids",
}
INTERVENTION_KWARGS = ("type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id")

# A small worked example in the prompt, one for agents that search and one for the others (its rule must be
# one that can fire on the task's actions). A reply whose code is (nearly) either is not a proposal.
_EXAMPLES = {"example": "empty_result_rephrase", "answer_example": "empty_answer_note"}


def _p(key: str, **fields: object) -> str:
    return render("hasp.evolve", "propose", key, **fields) if fields else prompt("hasp.evolve", "propose", key)


#: the search agent's actions as the prompt shows them (the default task)
SEARCH_FORMS = ("SEARCH[query]", "READ[doc_id]", "FINAL[answer]")


def word_list(words: Sequence[str], last: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c`` (``last="and"``: ``a, b and c``)."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


@lru_cache(maxsize=8)
def proposer_system(action_forms: tuple[str, ...] = SEARCH_FORMS) -> str:
    """The proposer's system prompt: the PF interface as the runtime enforces it (the task's actions,
    ``action_forms`` such as ``SEARCH[query]``), then the example."""
    names = [f.split("[", 1)[0] for f in action_forms]
    example = "example" if "SEARCH" in names else "answer_example"
    return _p("system", action_forms=word_list(action_forms), action_names=word_list([f'"{n}"' for n in names]),
              intervention_kwargs=", ".join(INTERVENTION_KWARGS),
              allowed_modules=", ".join(sorted(ALLOWED_MODULES - {"__future__"})),
              ctx_keys="; ".join(f"{k} ({_FIELD_DOC.get(k, 'see runtime')})" for k in STEP_CONTEXT_FIELDS),
              example_md=_p(f"{example}_md"), example_code=_p(f"{example}_code"))


# --------------------------------------------------------------------------- feedback history

@dataclass
class FeedbackEntry:
    """One earlier proposal and what happened to it."""

    epoch: int
    skill_id: str
    category: str
    decision: str  # admitted | rejected | revise | ...
    q_skill: float
    reasons: list[str] = field(default_factory=list)
    proposal_format: str = "code"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FeedbackEntry":
        """From a FeedbackHistory line or a ``library_history.json`` entry (extra keys ignored)."""
        reasons = d.get("reasons", [])
        if isinstance(reasons, str):
            reasons = [reasons]
        review = d.get("review") or {}
        q = d.get("q_skill", review.get("q_skill", 0.0))
        return cls(epoch=int(d.get("epoch", 0)), skill_id=str(d.get("skill_id", "")),
                   category=str(d.get("category", "")), decision=str(d.get("decision", "")),
                   q_skill=float(q or 0.0), reasons=[str(r) for r in reasons],
                   proposal_format=str(d.get("proposal_format") or "code"))


class FeedbackHistory:
    """Append-only jsonl of earlier proposals, read back into the proposer prompt."""

    def __init__(self, path: Path | None = None, entries: Iterable[FeedbackEntry] = ()) -> None:
        self.path = Path(path) if path is not None else None
        self.entries: list[FeedbackEntry] = list(entries)

    @classmethod
    def load(cls, path: Path) -> "FeedbackHistory":
        """Missing file -> empty history; unparseable lines (e.g. a torn last line) are skipped."""
        path = Path(path)
        entries = []
        if path.exists():
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    entries.append(FeedbackEntry.from_dict(json.loads(line)))
                except (ValueError, TypeError, AttributeError) as e:
                    log.warning("%s:%d: skipping bad feedback line: %s", path, n, e)
        return cls(path, entries)

    def append(self, entry: FeedbackEntry | dict[str, Any]) -> FeedbackEntry:
        """Add one entry; with a path, append it to the file (one line, flushed and fsynced)."""
        if isinstance(entry, dict):
            entry = FeedbackEntry.from_dict(entry)
        self.entries.append(entry)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(entry), ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return entry

    def save(self, path: Path | None = None) -> Path:
        """Write every entry (atomically: temp file + os.replace)."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise ValueError("FeedbackHistory.save needs a path")
        from hasp.atomic import write_jsonl

        write_jsonl([asdict(e) for e in self.entries], path)
        self.path = path
        return path

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[FeedbackEntry]:
        return iter(self.entries)

    def relevant(self, category: str | None = None, limit: int = 8) -> list[FeedbackEntry]:
        """Same-category entries first, then the most recent others; newest first in each part."""
        same = [e for e in reversed(self.entries) if category and e.category == category]
        other = [e for e in reversed(self.entries) if not (category and e.category == category)]
        return (same + other)[:limit]

    def render(self, category: str | None = None, limit: int = 8) -> str:
        lines = []
        for e in self.relevant(category, limit):
            why = "; ".join(e.reasons)[:240] or "no reason recorded"
            lines.append(f"- epoch {e.epoch}: {e.skill_id} (failure {e.category}) -> "
                         f"{e.decision.upper()}, Q_skill={e.q_skill:.2f}. Why: {why}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- prompt

_ID_OK = re.compile(rf"^(?=.{{3,{MAX_SKILL_ID}}}$){SKILL_ID.pattern}$")


def skill_id_from_category(category: str) -> str:
    """A valid snake_case skill id derived from a failure category."""
    s = re.sub(r"[^a-z0-9]+", "_", (category or "").lower()).strip("_")
    if not s or not s[0].isalpha():
        s = f"fix_{s}" if s else "candidate_skill"
    s = s[:MAX_SKILL_ID].rstrip("_")
    return s if _ID_OK.match(s) else (s[:MAX_SKILL_ID - 3].rstrip("_") + "_pf")


def _suggested_id(cluster: Cluster, existing_ids: Sequence[str]) -> str:
    sid = skill_id_from_category(cluster.category)
    if sid in existing_ids and cluster.is_new_category:  # a new failure should not overwrite a skill
        sid = sid[:MAX_SKILL_ID - 6].rstrip("_") + "_guard"
    return sid


def _evidence_lines(cluster: Cluster, n: int = 2) -> list[str]:
    out = []
    for p in cluster.patterns[:n]:
        ev = json.dumps({k: v for k, v in p.evidence.items() if k != EVIDENCE_KEY}, ensure_ascii=False, default=str)
        out.append(_p("user_evidence", qid=p.qid, evidence=ev[:300]))
    return out


def build_proposer_messages(cluster: Cluster, existing_skill_ids: Sequence[str],
                            history: FeedbackHistory | Iterable[FeedbackEntry] | None = None, *,
                            history_limit: int = 8,
                            action_forms: tuple[str, ...] = SEARCH_FORMS) -> list[dict[str, str]]:
    """System + user messages asking the student for one skill that fixes ``cluster`` (for an agent whose
    actions are ``action_forms``)."""
    if history is not None and not isinstance(history, FeedbackHistory):
        history = FeedbackHistory(None, history)
    existing = list(existing_skill_ids)
    sid = _suggested_id(cluster, existing)
    rep = cluster.representative
    parts = [
        _p("user_failure", category=cluster.category),
        _p("user_abstraction", abstraction=rep.abstraction),
        _p("user_trigger", trigger=rep.trigger),
        _p("user_hint", hint=rep.intervention_hint),
        _p("user_support", support=cluster.support),
        *_evidence_lines(cluster),
        _p("user_failing_steps", steps=failing_steps_text(cluster)),
        "",
        _p("user_existing", existing=", ".join(existing) if existing else _p("none")),
    ]
    if cluster.nearest_skill and not cluster.is_new_category:
        parts.append(_p("user_near_skill", skill=cluster.nearest_skill))
    else:
        parts.append(_p("user_new_skill"))
    hist = history.render(cluster.category, history_limit) if history is not None else ""
    parts += ["", _p("user_history"), hist or _p("user_no_history")]
    if hist:
        parts.append(_p("user_history_note"))
    parts += ["", _p("user_skill_id", skill_id=sid), _p("user_reply")]
    return [{"role": "system", "content": proposer_system(tuple(action_forms))},
            {"role": "user", "content": "\n".join(parts)}]


# --------------------------------------------------------------------------- parsing

@dataclass
class Candidate:
    """One proposed skill as produced by the student (after tolerant parsing)."""

    skill_id: str
    skill_md: str
    code: str
    cluster_category: str
    raw_reply: str
    parse_error: str = ""  # non-empty when the reply is unusable as code (no/odd python block, LLM error)
    notes: list[str] = field(default_factory=list)  # repairs made to the documentation part
    epoch: int = 0
    prompt_messages: list[dict[str, str]] = field(default_factory=list)  # what the student saw (Objective B)
    #: "code" (``code`` holds pf.py) or "declarative" (``declaration`` holds the PF as data, no code)
    proposal_format: str = "code"
    declaration: dict[str, Any] | None = None
    #: the library skill this candidate is a new version of (a revision keeps its id), else None
    revises: str | None = None
    #: the reply to ``prompt_messages`` that yields this candidate, when the proposer knows it exactly
    #: (a revision: the chosen option's number; structured output: the JSON it wrote); Objective B's target.
    #: Empty: derived from the candidate
    target: str = ""

    @property
    def declared(self) -> bool:
        return self.declaration is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Candidate":
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.\-]*)[^\n]*\n(.*?)(?:^[ \t]*```|\Z)", re.S | re.M)
_FRONT = re.compile(r"\A\s*---[ \t]*\n(.*?)\n---[ \t]*(?:\n(.*))?\Z", re.S)
_REGISTER = re.compile(r"""register_pf\(\s*(?:skill_id\s*=\s*)?["']([^"']*)["']""")
_PY = {"python", "py", "python3"}
_MD = {"markdown", "md", "skill", "skill.md", "yaml", "yml"}
_SAFE_KEYS = {  # frontmatter keys salvaged from a broken SKILL.md, with the type each must have
    "name": str, "description": str, "title": str, "error_category": str, "system_summary": str,
    "priority": (int, float), "trigger_keywords": list, "applicable_modes": list,
    "applicable_phases": list, "domain": str, "phases": dict,
}


def _blocks(reply: str) -> list[tuple[str, str]]:
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(reply)]


def registered_id(code: str) -> str | None:
    """The id in the code's ``@register_pf("...")`` (first one), if any."""
    m = _REGISTER.search(code or "")
    return m.group(1) if m else None


def _norm_code(code: str) -> str:
    return re.sub(r"\s+", "", code)


def _pick_code(blocks: list[tuple[str, str]]) -> str:
    py = [b for lang, b in blocks if lang in _PY]
    if not py:
        py = [b for lang, b in blocks if lang == "" and "def should_activate" in b]
    if not py:
        return ""
    best = next((b for b in py if "should_activate" in b), py[0])
    return best.strip("\n") + "\n" if best.strip() else ""


def _pick_md(blocks: list[tuple[str, str]], reply: str) -> tuple[str, str]:
    """(frontmatter-bearing text, how it was found)."""
    for lang, b in blocks:
        if lang in _MD:
            if lang in ("yaml", "yml") and not b.lstrip().startswith("---"):
                body = next((bb for ll, bb in blocks if ll in ("markdown", "md")), "")
                return f"---\n{b.strip()}\n---\n{body}", "yaml block"
            return b, f"{lang} block"
    for lang, b in blocks:
        if lang == "" and b.lstrip().startswith("---"):
            return b, "unlabeled block"
    outside = _FENCE.sub("", reply)
    m = re.search(r"^---[ \t]*\n.*?\n---[ \t]*$.*", outside, re.S | re.M)
    if m:
        return m.group(0), "inline frontmatter"
    return outside.strip(), "prose"


def _salvage_meta(raw: Any, notes: list[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    meta: dict[str, Any] = {}
    for k, v in raw.items():
        k = str(k)
        if k == "skill_id":
            meta[k] = str(v)
        elif k in _SAFE_KEYS and isinstance(v, _SAFE_KEYS[k]) and not isinstance(v, bool):
            meta[k] = v
        else:
            notes.append(f"dropped frontmatter key {k!r}")
    if "applicable_phases" in meta:
        meta["applicable_phases"] = [p for p in meta["applicable_phases"] if p in PHASES]
    if "phases" in meta and not set(meta["phases"]) <= set(PHASES):
        notes.append("dropped invalid 'phases'")
        meta.pop("phases")
    return meta


def _spec_or_none(meta: dict[str, Any], body: str) -> SkillSpec | None:
    try:
        return parse_skill_md("---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n" + body)
    except (SkillFormatError, yaml.YAMLError):
        return None


def parse_proposal(reply: str, cluster: Cluster, *, existing_skill_ids: Sequence[str] = (),
                   epoch: int = 0) -> Candidate:
    """Turn a raw student reply into a ``Candidate`` (see the module docstring for the rules)."""
    reply = reply or ""
    notes: list[str] = []
    errors: list[str] = []
    blocks = _blocks(reply)
    code = _pick_code(blocks)
    if not code:
        errors.append("no python code block in the reply")
    elif any(_norm_code(code) == _norm_code(_p(f"{k}_code")) or registered_id(code) == sid
             for k, sid in _EXAMPLES.items()):
        errors.append("the code copies the prompt's example")
        code = ""

    md_text, where = _pick_md(blocks, reply)
    try:
        spec = parse_skill_md(md_text, "<proposal>")
        sp_meta: dict[str, Any] = spec.model_dump(exclude={"body"}, by_alias=True)
        body = spec.body
    except SkillFormatError as e:
        notes.append(f"SKILL.md did not validate: {str(e)[:200]}")
        m = _FRONT.match(md_text)
        if m:
            body = (m.group(2) or "").strip()
            try:
                raw_meta = yaml_load(m.group(1))
            except ParseRefused as e:
                raw_meta = None
                notes.append(f"frontmatter is not valid YAML ({str(e)[:200]})")
            sp_meta = _salvage_meta(raw_meta, notes)
        else:
            body, sp_meta = md_text.strip(), {}
            notes.append(f"no frontmatter found (looked at: {where})")

    # The id: the code's registration wins (it is what will run), then the frontmatter, then the cluster.
    fm_id = str(sp_meta.get("skill_id") or "")
    code_id = registered_id(code) if code else None
    if code_id and _ID_OK.match(code_id):
        sid = code_id
        if fm_id and fm_id != code_id:
            notes.append(f"frontmatter skill_id {fm_id!r} replaced by the code's id {code_id!r}")
    elif _ID_OK.match(fm_id):
        sid = fm_id
    else:
        sid = _suggested_id(cluster, existing_skill_ids)
        notes.append(f"skill_id synthesized from the cluster: {sid}")
    if code and code_id is None:
        errors.append("the code has no @register_pf(...) decorator")
    elif code and code_id != sid:
        errors.append(f"@register_pf id {code_id!r} is not a valid skill id")

    rep = cluster.representative
    synth = {"skill_id": sid, "name": sid.replace("_", "-"), "description": rep.abstraction,
             "error_category": cluster.category, "version": 1, "priority": 0.5}
    meta = {**synth, **{k: v for k, v in sp_meta.items() if v not in (None, "", [], {})}}
    meta["skill_id"], meta["version"] = sid, 1
    meta["description"] = str(meta["description"])[:MAX_DESCRIPTION]
    for k in ("name", "description", "error_category"):
        if not str(sp_meta.get(k) or "").strip():
            notes.append(f"{k} synthesized from the cluster")
    if not body.strip():
        body = f"## Failure pattern\n{rep.abstraction}\n\n## When it fires\n{rep.trigger}\n"
        notes.append("body synthesized from the cluster")
    final = _spec_or_none(meta, body)
    if final is None:
        notes.append("frontmatter reduced to synthesized keys")
        final = _spec_or_none(synth, body) or _spec_or_none(synth, "")
    assert final is not None  # synth is always valid: sid is checked against the id regex
    return Candidate(skill_id=sid, skill_md=render_skill_md(final), code=code,
                     cluster_category=cluster.category, raw_reply=reply,
                     parse_error="; ".join(errors), notes=notes, epoch=epoch)


# --------------------------------------------------------------------------- proposal loop

#: how ``parse_error`` starts when the model call itself failed (the endpoint, not the student's reply)
LLM_CALL_FAILED = "LLM call failed"
#: how ``parse_error`` starts when the reply could not be parsed at all (counted with the parse errors)
REPLY_REFUSED = "reply refused"


def _candidate(reply: str, cluster: Cluster, existing_skill_ids: Sequence[str], epoch: int) -> Candidate:
    """``parse_proposal``, with any failure on a hostile reply turned into a refused candidate: a
    reply is the student's, so what goes wrong with it is recorded and counted, never raised out of
    Phase C."""
    try:
        return parse_proposal(reply, cluster, existing_skill_ids=existing_skill_ids, epoch=epoch)
    except Exception as e:  # noqa: BLE001 - recorded on the candidate
        log.warning("proposal for %s refused: %s: %s", cluster.category, type(e).__name__, str(e)[:200])
        cand = parse_proposal("", cluster, existing_skill_ids=existing_skill_ids, epoch=epoch)
        cand.raw_reply = reply
        cand.parse_error = f"{REPLY_REFUSED}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
        return cand


def propose_candidates(clusters: Sequence[Cluster], student: ChatModel, *, existing_skill_ids: Sequence[str],
                       history: FeedbackHistory | None = None, epoch: int = 0, max_candidates: int = 5,
                       temperature: float = 0.7, max_tokens: int = 700, seed: int | None = None,
                       stop: Callable[[], bool] | None = None,
                       action_forms: tuple[str, ...] = SEARCH_FORMS) -> list[Candidate]:
    """One candidate per cluster for the first ``max_candidates`` clusters (already ranked).

    Uses ``student.map_chat`` when present (batched, concurrent), else ``chat`` one by one.
    A failed LLM call yields a candidate with empty code and the error in ``parse_error``,
    so the epoch's record shows it instead of silently proposing fewer skills. With ``stop`` (the
    epoch's budget, ``hasp.evolve.budget.Guard``) the clusters are asked one by one, ``stop`` before
    each, and the first True ends the phase: a batch would spend the whole budget before the check.
    """
    chosen = list(clusters)[: max(0, max_candidates)]
    if not chosen:
        return []
    convs = [build_proposer_messages(c, existing_skill_ids, history, action_forms=action_forms) for c in chosen]
    kw = {"temperature": temperature, "max_tokens": max_tokens, "seed": seed}
    replies: list[Any] = []
    batch = getattr(student, "map_chat", None)
    if stop is not None:
        for msgs in convs:
            if stop():
                break
            try:
                replies.append(student.chat(msgs, **kw))
            except Exception as e:  # noqa: BLE001 - recorded on the candidate
                replies.append(e)
        chosen, convs = chosen[:len(replies)], convs[:len(replies)]
    elif callable(batch):
        try:
            replies = list(batch(convs, **kw))
        except Exception as e:  # noqa: BLE001 - fall back to one call at a time
            log.warning("map_chat failed (%s); proposing one cluster at a time", e)
            replies = []
    if len(replies) != len(convs):
        replies = []
        for msgs in convs:
            try:
                replies.append(student.chat(msgs, **kw))
            except Exception as e:  # noqa: BLE001 - recorded on the candidate
                replies.append(e)
    out = []
    for c, msgs, r in zip(chosen, convs, replies):
        if isinstance(r, BaseException):
            cand = parse_proposal("", c, existing_skill_ids=existing_skill_ids, epoch=epoch)
            cand.parse_error = f"{LLM_CALL_FAILED}: {type(r).__name__}: {r}"
        else:
            cand = _candidate(str(getattr(r, "text", r) or ""), c, existing_skill_ids, epoch)
        cand.prompt_messages = [dict(m) for m in msgs]
        out.append(cand)
    return out
