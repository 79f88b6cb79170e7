"""Phase B, heuristic half: rule-based failure detectors over failed trajectories.

Every detector looks at one ``Trajectory`` and either returns a ``FailurePattern``
(a reusable description of *why* the episode failed, plus the evidence that made
the rule fire) or ``None``. Detectors are registered with ``@detector("name")``;
``detect_failures`` runs all of them on the failed trajectories (``em == 0``).

Design choices:

* The abstraction / trigger / hint texts of one heuristic category are fixed
  templates. Episode specifics go into ``evidence``. That keeps all patterns of
  one rule textually identical, so the Jaccard dedup in ``cluster.py`` merges
  them and a cluster's support is simply the number of distinct episodes.
* Detectors read what the agent *did* (``audit.a_final``, after PF rewrites) and
  what the tools returned (step observations with PF-injected context removed),
  never PF-private state, so they work on any stored trajectory jsonl.
* Rules are deliberately orthogonal where cheap: ``reasoning_hallucination``
  needs at least one READ (an episode with no READ is ``no_read_before_final``),
  ``partial_answer`` / ``format_mismatch`` / ``wrong_entity_focus`` split the
  answer-vs-gold overlap into "subset", "superset" and "mostly disjoint".
* Every pattern carries concrete failing steps (``evidence["failing_steps"]``,
  see ``hasp.evolve.excerpts``): the rules for a small model's loops pick the
  repeat and its first occurrence, the others get the step their evidence names.
  The proposal prompt shows them, so the student sees a real step, not only the
  abstract template.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.agent.context import CONFLICT_WORDS
from hasp.evolve.excerpts import EVIDENCE_KEY, failing_step, shorten, step_problem, tool_observation
from hasp.agent.replay import replay
from hasp.records import Action, StepRecord, Trajectory
from hasp.textutil import content_tokens, jaccard, tokens

log = logging.getLogger(__name__)

__all__ = [
    "FailurePattern", "DETECTORS", "DETECTOR_SETS", "SEARCH_DETECTORS", "detector", "detect_failures", "run_detectors",
    "tokens", "content_tokens", "jaccard", "replay_contexts", "tool_observation",
    "read_texts", "final_action",
]

# --------------------------------------------------------------------------- pattern record

@dataclass
class FailurePattern:
    """One failed episode abstracted into a reusable failure mode (paper App. C.2)."""

    category: str
    abstraction: str
    trigger: str
    intervention_hint: str
    qid: str
    source: str = "heuristic"  # heuristic | llm
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The text the dedup compares: abstraction + trigger."""
        return f"{self.abstraction} {self.trigger}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FailurePattern":
        keys = {"category", "abstraction", "trigger", "intervention_hint", "qid", "source", "evidence"}
        return cls(**{k: v for k, v in d.items() if k in keys})


DetectorFn = Callable[[Trajectory], "FailurePattern | None"]
DETECTORS: dict[str, DetectorFn] = {}


def detector(name: str) -> Callable[[DetectorFn], DetectorFn]:
    """Register a detector under ``name`` (also the category of the patterns it emits)."""

    def deco(fn: DetectorFn) -> DetectorFn:
        if name in DETECTORS and DETECTORS[name] is not fn:
            raise ValueError(f"detector {name!r} registered twice")
        fn.detector_name = name  # type: ignore[attr-defined]
        DETECTORS[name] = fn
        return fn

    return deco


# Fixed per-category texts (see module docstring for why they are templates).
_TEMPLATES: dict[str, tuple[str, str, str]] = {
    "premature_final": (
        "The agent commits to a final answer within the first two steps, before gathering evidence.",
        "A FINAL action is proposed while step_count is below 2 and nothing has been read.",
        "Turn an early FINAL into a SEARCH for the question's main entity, or remind the agent to verify first."),
    "repeated_search": (
        "The agent re-issues nearly the same search query instead of reformulating or reading a result.",
        "A SEARCH whose query shares most tokens with an earlier query in action_history.",
        "Block the repeat: suggest READ on an unread hit or a query about a different hop of the question."),
    "no_read_before_final": (
        "The agent answers from search snippets without ever opening a document.",
        "A FINAL action while has_read is False.",
        "Replace the FINAL with READ of the top search hit, or inject a reminder to read before answering."),
    "query_too_broad": (
        "The agent searches with one or two generic words, so results miss the target entity.",
        "A SEARCH whose query has fewer than two content words (e.g. just 'born' or 'river').",
        "Rewrite the query to include the named entity from the question."),
    "query_too_narrow": (
        "The agent pastes the whole multi-hop question (or a long clause) as a query and gets poor or no results.",
        "A SEARCH whose query nearly copies the question, is very long, or returns empty_results.",
        "Shorten the query to the entity of the current hop, e.g. the first named entity of the question."),
    "wrong_entity_focus": (
        "The final answer names a different entity than the one asked about (often a look-alike distractor).",
        "A FINAL whose answer shares few tokens with the entities in the read documents tied to the question.",
        "Before FINAL, inject a check that the answer is the attribute of the exact entity in the question."),
    "reasoning_hallucination": (
        "The final answer is not supported by the documents the agent read.",
        "A FINAL whose answer words mostly do not occur in all_read_contents.",
        "Before FINAL, check the answer appears in the read text; if not, SEARCH or READ again."),
    "format_mismatch": (
        "The answer contains the right content but wrapped in extra words or a sentence instead of the short form.",
        "A FINAL whose answer is a long phrase or sentence rather than a short name, place or year.",
        "Inject an instruction to answer with only the entity / date, no explanation."),
    "partial_answer": (
        "The answer gives only part of the required entity (e.g. a surname instead of the full name).",
        "A FINAL whose answer is a strict subset of a longer name that appears in the read text.",
        "Inject a reminder to give the complete name as written in the document."),
    "contradictory_evidence_ignored": (
        "Read documents disagree or contain negations, and the agent answers without resolving the conflict.",
        "A FINAL right after reading while contradictory_sources is True.",
        "Inject context pointing at the conflict, or redirect to a SEARCH that disambiguates."),
    "excessive_steps_no_progress": (
        "The agent spends many steps without finding new documents or reaching an answer.",
        "Several consecutive steps add no new documents or reads, or step_count approaches max_steps.",
        "When progress stalls, inject a summary of what was found and push toward READ of the best hit or FINAL."),
    "pf_override_harmful": (
        "A Program Function rewrote the agent's action and the episode still failed.",
        "A step where a PF applied MODIFY_ACTION in an episode that ended wrong.",
        "Narrow the rewriting PF's trigger or downgrade it to INJECT_CONTEXT."),
    "repeated_failed_read": (
        "The agent asks again and again to READ documents that do not exist, instead of reading a listed result.",
        "A READ proposed after an earlier READ in the episode opened nothing (document not found).",
        "After a failed READ, rewrite the next READ to the best unread search result, or SEARCH for the question's entity."),
    "repeated_empty_search": (
        "The agent keeps issuing searches that return no results.",
        "A SEARCH proposed after an earlier SEARCH in the episode returned no results (empty_results).",
        "After an empty search, rewrite the query to the question's named entity or a shorter query."),
    "repeated_invalid_argument": (
        "The agent passes READ an argument that is not an id, number or title from the search results it was shown.",
        "A READ whose argument matches none of the shown result ids, result numbers or titles, after such a READ already happened.",
        "Rewrite a READ whose argument is not among the shown results to READ the top unread result."),
    "repeated_unparseable_output": (
        "The agent's replies repeatedly contain no parseable SEARCH[...], READ[...] or FINAL[...] action.",
        "Two or more steps of one episode end in a parse error instead of an action.",
        "A PF never sees an unparseable reply, but step_count minus len(action_history) counts them: on the next "
        "parsed action, inject the exact action format or choose the action (e.g. READ the top result)."),
    "answer_seen_not_given": (
        "The correct answer appears in a search result or a read document, but the agent never gives it as its final answer.",
        "A search result or read document contains the answer, and the agent keeps searching or reading, runs out of steps, or answers something else.",
        "When the last observation answers the question, rewrite the next action to FINAL with the answer span from that observation."),
    # task-neutral rules: what any task's failed episode shows without knowing its tools
    "wrong_answer": (
        "The agent gives a final answer that the task's scorer does not accept.",
        "A FINAL whose answer matches none of the expected answers.",
        "Before FINAL, check the answer against what the question asks (its numbers, units, form), or rewrite "
        "it to the form the task expects."),
    "no_final_answer": (
        "The episode ends without a final answer.",
        "No FINAL action before the step budget ran out or the episode stopped.",
        "When the step budget is nearly spent, rewrite the next action to FINAL with the best answer so far."),
}


def _pattern(category: str, traj: Trajectory, **evidence: Any) -> FailurePattern:
    abstraction, trigger, hint = _TEMPLATES[category]
    return FailurePattern(category=category, abstraction=abstraction, trigger=trigger,
                          intervention_hint=hint, qid=traj.qid, source="heuristic", evidence=evidence)


#: evidence keys that name the step a rule fired on, in order of preference
_STEP_KEYS = ("step", "final_step", "conflict_step")


def _with_failing_steps(p: FailurePattern, traj: Trajectory) -> FailurePattern:
    """Give a pattern that did not pick its own failing steps one: the step its evidence names,
    else the episode's last step, described by the category's abstraction."""
    if EVIDENCE_KEY in p.evidence or not traj.steps:
        return p
    pos = {s.index: i for i, s in enumerate(traj.steps)}
    at = next((pos[p.evidence[k]] for k in _STEP_KEYS if p.evidence.get(k) in pos), len(traj.steps) - 1)
    problem = step_problem(traj.steps[at]) or p.abstraction
    p.evidence[EVIDENCE_KEY] = [failing_step(traj, at, problem).to_dict()]
    return p


# --------------------------------------------------------------------------- trajectory views

def _acted(traj: Trajectory) -> Iterator[tuple[StepRecord, Action]]:
    """Steps that executed an action (parse failures have no audit), with the executed action."""
    for s in traj.steps:
        if s.audit is not None:
            yield s, s.audit.a_final


def final_action(traj: Trajectory) -> Action | None:
    for _, a in _acted(traj):
        if a.type == "FINAL":
            return a
    return None


def _prediction(traj: Trajectory) -> str:
    if traj.prediction:
        return traj.prediction
    fa = final_action(traj)
    return fa.arg if fa else ""


def _read_ok(step: StepRecord) -> bool:
    fb = step.audit.feedback if step.audit else {}
    return "budget_exhausted" not in fb and fb.get("found", True) is not False


def read_texts(traj: Trajectory, before_step: int | None = None) -> list[str]:
    """Contents of successful READs (optionally only those before step index ``before_step``)."""
    out = []
    for s, a in _acted(traj):
        if before_step is not None and s.index >= before_step:
            break
        if a.type == "READ" and _read_ok(s):
            out.append(tool_observation(s))
    return out


def _searches(traj: Trajectory) -> list[tuple[StepRecord, str]]:
    return [(s, a.arg) for s, a in _acted(traj) if a.type == "SEARCH"]


def replay_contexts(traj: Trajectory) -> list[tuple[dict[str, Any], str, str]]:
    """The step context a PF saw at each parsed step, ``[(ctx, proposed action type, arg)]``
    (``hasp.agent.replay``): what a candidate's trigger is replayed on."""
    return [(s.ctx, s.action, s.arg) for s in replay(traj)]


def _gold_token_sets(traj: Trajectory) -> list[list[str]]:
    return [content_tokens(g) for g in traj.answers if content_tokens(g)]


def _overlap_f1(pred: list[str], gold: list[str]) -> float:
    common = len(set(pred) & set(gold))
    if not pred or not gold or common == 0:
        return 0.0
    p, r = common / len(set(pred)), common / len(set(gold))
    return 2 * p * r / (p + r)


def _conflict_count(text: str) -> int:
    low = f" {' '.join(tokens(text))} "
    return sum(low.count(f" {w} ") for w in CONFLICT_WORDS)


# --------------------------------------------------------------------------- answer and search rules

@detector("premature_final")
def premature_final(traj: Trajectory) -> FailurePattern | None:
    """FINAL reached in a trajectory shorter than three steps."""
    fa = final_action(traj)
    if fa is None or len(traj.steps) >= 3:
        return None
    return _pattern("premature_final", traj, n_steps=len(traj.steps), answer=fa.arg)


@detector("repeated_search")
def repeated_search(traj: Trajectory) -> FailurePattern | None:
    """Two SEARCH queries whose token-Jaccard (content tokens) exceeds 0.8."""
    qs = [q for _, q in _searches(traj)]
    toks = [content_tokens(q) for q in qs]
    for i in range(len(qs)):
        for j in range(i + 1, len(qs)):
            sim = jaccard(toks[i], toks[j])
            if sim > 0.8:
                return _pattern("repeated_search", traj, first=qs[i], repeat=qs[j],
                                jaccard=round(sim, 3), n_searches=len(qs))
    return None


@detector("no_read_before_final")
def no_read_before_final(traj: Trajectory) -> FailurePattern | None:
    """A FINAL with no successful READ before it."""
    for s, a in _acted(traj):
        if a.type == "READ" and _read_ok(s):
            return None
        if a.type == "FINAL":
            return _pattern("no_read_before_final", traj, final_step=s.index, answer=a.arg,
                            n_searches=len(_searches(traj)))
    return None


@detector("query_too_broad")
def query_too_broad(traj: Trajectory) -> FailurePattern | None:
    """A SEARCH with fewer than 2 content tokens. (No "shares nothing with the question" rule:
    a second-hop query legitimately names an entity the question never mentions.)"""
    for s, q in _searches(traj):
        ct = content_tokens(q)
        if len(ct) < 2:
            return _pattern("query_too_broad", traj, query=q, step=s.index, n_content_tokens=len(ct))
    return None


@detector("query_too_narrow")
def query_too_narrow(traj: Trajectory) -> FailurePattern | None:
    """A SEARCH that copies the question (Jaccard >= 0.8 with >= 4 content tokens), has >= 10
    content tokens, or returned no hits with >= 4 content tokens."""
    for s, q in _searches(traj):
        ct = content_tokens(q)
        sim = jaccard(ct, content_tokens(traj.question))
        fb = s.audit.feedback if s.audit else {}
        empty = "n_hits" in fb and int(fb["n_hits"]) == 0
        why = ("copies_question" if sim >= 0.8 and len(ct) >= 4 else
               "too_long" if len(ct) >= 10 else
               "empty_results" if empty and len(ct) >= 4 else "")
        if why:
            return _pattern("query_too_narrow", traj, query=q, step=s.index, why=why,
                            jaccard_with_question=round(sim, 3), n_content_tokens=len(ct))
    return None


@detector("wrong_entity_focus")
def wrong_entity_focus(traj: Trajectory) -> FailurePattern | None:
    """Answer/gold content-token overlap (F1, best gold) below 0.3, answer not a subset of a gold."""
    pred = content_tokens(_prediction(traj))
    golds = _gold_token_sets(traj)
    if not pred or not golds:
        return None
    if any(set(pred) <= set(g) for g in golds):  # a piece of the gold: partial_answer's job
        return None
    best = max(_overlap_f1(pred, g) for g in golds)
    if best >= 0.3:
        return None
    return _pattern("wrong_entity_focus", traj, answer=_prediction(traj), gold=list(traj.answers),
                    overlap=round(best, 3))


@detector("reasoning_hallucination")
def reasoning_hallucination(traj: Trajectory) -> FailurePattern | None:
    """Final answer whose content tokens are < 30% present in the documents read before it.
    Needs >= 1 READ (episodes without reads are ``no_read_before_final``)."""
    fa_step = next((s for s, a in _acted(traj) if a.type == "FINAL"), None)
    if fa_step is None:
        return None
    reads = read_texts(traj, before_step=fa_step.index)
    pred = content_tokens(fa_step.audit.a_final.arg if fa_step.audit else "")
    if not reads or not pred:
        return None
    read_tok = set(content_tokens("\n".join(reads)))
    grounded = sum(t in read_tok for t in pred) / len(pred)
    if grounded >= 0.3:
        return None
    return _pattern("reasoning_hallucination", traj, answer=fa_step.audit.a_final.arg if fa_step.audit else "",
                    grounded_fraction=round(grounded, 3), n_reads=len(reads))


@detector("format_mismatch")
def format_mismatch(traj: Trajectory) -> FailurePattern | None:
    """The answer contains every gold content token but adds >= 2 extra tokens (a sentence
    or an explanation around the right entity), or is much longer than any gold."""
    raw = _prediction(traj)
    pred = content_tokens(raw)
    golds = _gold_token_sets(traj)
    if not pred or not golds:
        return None
    for g in golds:
        extra = len(set(pred) - set(g))
        if set(g) <= set(pred) and extra >= 2:
            return _pattern("format_mismatch", traj, answer=raw, gold=list(traj.answers), extra_tokens=extra)
    if len(tokens(raw)) >= 8 and len(tokens(raw)) > 3 * max(len(tokens(g)) for g in traj.answers):
        return _pattern("format_mismatch", traj, answer=raw, gold=list(traj.answers),
                        answer_tokens=len(tokens(raw)))
    return None


@detector("partial_answer")
def partial_answer(traj: Trajectory) -> FailurePattern | None:
    """The answer is a non-empty strict subset of a gold answer's content tokens."""
    raw = _prediction(traj)
    pred = set(content_tokens(raw))
    if not pred:
        return None
    for g in _gold_token_sets(traj):
        if pred < set(g):
            return _pattern("partial_answer", traj, answer=raw, gold=list(traj.answers),
                            coverage=round(len(pred) / len(set(g)), 3))
    return None


@detector("contradictory_evidence_ignored")
def contradictory_evidence_ignored(traj: Trajectory) -> FailurePattern | None:
    """The documents read so far carry >= 3 conflict/negation markers (the runtime's
    ``contradictory_sources`` rule) and the very next action after that point is FINAL."""
    reads: list[str] = []
    conflicted_at: int | None = None
    for s, a in _acted(traj):
        if a.type == "FINAL":
            if conflicted_at is not None:
                return _pattern("contradictory_evidence_ignored", traj, conflict_step=conflicted_at,
                                final_step=s.index, answer=a.arg,
                                conflict_markers=_conflict_count("\n".join(reads)))
            return None
        if conflicted_at is not None:  # the agent did something else after seeing the conflict
            return None
        if a.type == "READ" and _read_ok(s):
            reads.append(tool_observation(s))
            if _conflict_count("\n".join(reads)) >= 3:
                conflicted_at = s.index
    return None


@detector("excessive_steps_no_progress")
def excessive_steps_no_progress(traj: Trajectory) -> FailurePattern | None:
    """No FINAL after >= 4 steps, or >= 3 consecutive steps without progress (a new
    document id in search hits or a new successful READ); parse failures count as no progress."""
    seen: set[str] = set()
    read: set[str] = set()
    run = longest = 0
    for s in traj.steps:
        progress = False
        if s.audit is not None:
            a, fb = s.audit.a_final, s.audit.feedback
            if a.type == "FINAL":
                break
            if a.type == "SEARCH":
                new = {str(x) for x in fb.get("hit_ids", [])} - seen
                seen |= new
                progress = bool(new)
            elif a.type == "READ" and _read_ok(s):
                doc = str(fb.get("doc_id") or tool_observation(s)[:80])
                progress = doc not in read
                read.add(doc)
        run = 0 if progress else run + 1
        longest = max(longest, run)
    no_final = final_action(traj) is None
    if (no_final and len(traj.steps) >= 4) or longest >= 3:
        return _pattern("excessive_steps_no_progress", traj, n_steps=len(traj.steps),
                        reached_final=not no_final, longest_stall=longest,
                        parse_errors=sum(bool(s.parse_error) for s in traj.steps))
    return None


@detector("pf_override_harmful")
def pf_override_harmful(traj: Trajectory) -> FailurePattern | None:
    """A PF applied a MODIFY_ACTION (a_orig != a_final) in this failed episode. The steps where the
    rewritten action was a FINAL with the gold answer are kept apart (``blocked_steps``, with the
    PFs that did it in ``blocked_skill_ids``): there the rewrite provably took the answer away."""
    from hasp.domains.search.blocked import blocked_answers

    rewrites = []
    for s, a in _acted(traj):
        au = s.audit
        if au is None or not au.was_modified:
            continue
        sids = [f["skill_id"] for f in au.fired
                if f.get("type") == "MODIFY_ACTION" and f.get("applied", True)]
        rewrites.append({"step": s.index, "skill_ids": sids, "from": au.a_orig.render(), "to": a.render()})
    if not rewrites:
        return None
    first = rewrites[0]
    blocked = blocked_answers(traj)
    p = _pattern("pf_override_harmful", traj, rewrites=rewrites, step=first["step"],
                 skill_ids=sorted({x for r in rewrites for x in r["skill_ids"]}),
                 blocked_steps=[b["step"] for b in blocked],
                 blocked_skill_ids=sorted({x for b in blocked for x in b["skill_ids"]}))
    pos = next(i for i, s in enumerate(traj.steps) if s.index == first["step"])
    who = ", ".join(first["skill_ids"]) or "a PF"
    p.evidence[EVIDENCE_KEY] = [failing_step(traj, pos, f"{who} rewrote {first['from']} to {first['to']}, "
                                                        "and the episode still failed").to_dict()]
    return p


# --------------------------------------------------------------------------- loops of a small model
# A 135M policy fails less by reasoning wrongly than by getting stuck: the same failing action,
# made-up READ arguments, unparseable replies, an answer in front of it that it never gives.
# Each rule stores its failing steps (``hasp.evolve.excerpts``) with the repeat first: that is the
# step a repair could have changed.

_RESULT_LINE = re.compile(r"^\s*\d+\.\s*\[([^\]\n]+)\]\s*([^:\n]*)", re.M)
_BRACKET = re.compile(r"\[([^\[\]\n]+)\]")


def _ref(text: str) -> str:
    """A READ argument or a title, compared the way a person would: case, quotes, brackets and
    surrounding punctuation ignored."""
    return " ".join(re.sub(r"[\"'`\[\]()<>.,;:!?]+", " ", text or "").lower().split())


@dataclass
class _Shown:
    """What the search results had shown the agent before one of its READs."""

    ids: dict[str, str] = field(default_factory=dict)  # normalised id -> id, every result so far
    titles: dict[str, str] = field(default_factory=dict)  # normalised title -> id, every result so far
    last: list[tuple[str, str]] = field(default_factory=list)  # (id, title) of the last results

    def add(self, obs: str, hit_ids: list[str]) -> None:
        titles = {i.strip(): t.strip() for i, t in _RESULT_LINE.findall(obs)}
        self.last = [(i, titles.get(i, "")) for i in hit_ids] or list(titles.items())
        for i, t in self.last:
            self.ids[_ref(i)] = i
            if t:
                self.titles[_ref(t)] = i

    def allows(self, arg: str, opened: str | None) -> bool:
        """The argument names a shown result (id, number in the last list, title, a pasted result
        line), or the environment resolved it to a shown result anyway."""
        if opened is not None and _ref(opened) in self.ids:
            return True
        key = _ref(arg)
        if key in self.ids or key in self.titles:
            return True
        if key.isdigit() and 1 <= int(key) <= len(self.last):
            return True
        if any(_ref(b) in self.ids for b in _BRACKET.findall(arg or "")):
            return True
        head = _ref((arg or "").split(":", 1)[0])
        return bool(head) and head in self.titles

    def describe(self, limit: int = 3) -> str:
        if not self.last:
            return "no search results had been shown"
        shown = ", ".join(f"{n}=[{i}] {t}".strip() for n, (i, t) in enumerate(self.last[:limit], 1))
        return f"shown: {shown}"


def _invalid_reads(traj: Trajectory) -> list[tuple[int, Action, str]]:
    """(position in steps, READ, why) for each executed READ whose argument names no shown result."""
    shown, out = _Shown(), []
    for pos, s in enumerate(traj.steps):
        if s.audit is None:
            continue
        a, fb = s.audit.a_final, s.audit.feedback
        if a.type == "SEARCH" and "budget_exhausted" not in fb:
            shown.add(tool_observation(s), [str(x) for x in fb.get("hit_ids", [])])
        elif a.type == "READ" and "budget_exhausted" not in fb:
            opened = fb.get("doc_id") if fb.get("found", True) is not False else None
            if not shown.allows(a.arg, str(opened) if opened else None):
                outcome = (f"the environment opened the closest title [{opened}] instead" if opened else
                           "it opened nothing")
                out.append((pos, a, f"READ argument {shorten(a.arg, 60)!r} is not an id, number or title "
                                    f"of the shown results ({shown.describe()}); {outcome}"))
    return out


def _repeat_pattern(category: str, traj: Trajectory, hits: list[tuple[int, str]], **evidence: Any
                    ) -> FailurePattern:
    """A pattern for a rule that fired on >= 2 steps: the repeat and the first step as excerpts."""
    (first, why_first), (second, why_second) = hits[0], hits[1]
    p = _pattern(category, traj, step=traj.steps[second].index, first_step=traj.steps[first].index,
                 count=len(hits), **evidence)
    p.evidence[EVIDENCE_KEY] = [failing_step(traj, second, why_second).to_dict(),
                                failing_step(traj, first, why_first).to_dict()]
    return p


@detector("repeated_failed_read")
def repeated_failed_read(traj: Trajectory) -> FailurePattern | None:
    """Two or more executed READs opened nothing (``feedback.found`` False; budget refusals aside)."""
    hits = [(pos, s.audit.a_final.arg) for pos, s in enumerate(traj.steps)
            if s.audit is not None and s.audit.a_final.type == "READ"
            and "budget_exhausted" not in s.audit.feedback and s.audit.feedback.get("found", True) is False]
    if len(hits) < 2:
        return None
    args = [a for _, a in hits]
    why = [(pos, f"READ[{shorten(a, 60)}] opened nothing (no such document)"
                 + (", the same READ that had already failed" if a in args[:k] else ""))
           for k, (pos, a) in enumerate(hits)]
    return _repeat_pattern("repeated_failed_read", traj, why, args=args[:5], same_arg=len(set(args)) < len(args))


@detector("repeated_empty_search")
def repeated_empty_search(traj: Trajectory) -> FailurePattern | None:
    """Two or more executed SEARCHes returned no results (``feedback.n_hits`` 0)."""
    hits = [(pos, s.audit.a_final.arg) for pos, s in enumerate(traj.steps)
            if s.audit is not None and s.audit.a_final.type == "SEARCH"
            and "n_hits" in s.audit.feedback and int(s.audit.feedback["n_hits"]) == 0]
    if len(hits) < 2:
        return None
    why = [(pos, f"SEARCH[{shorten(q, 80)}] returned no results") for pos, q in hits]
    return _repeat_pattern("repeated_empty_search", traj, why, queries=[q for _, q in hits][:5])


@detector("repeated_invalid_argument")
def repeated_invalid_argument(traj: Trajectory) -> FailurePattern | None:
    """Two or more READs whose argument is none of the ids or titles of the results shown so
    far, nor a number of the last result list (and that the environment did not resolve to a
    shown result). Overlaps ``repeated_failed_read`` when a made-up id opens nothing; this rule
    also catches made-up titles the environment fuzzily resolved to some other document."""
    bad = _invalid_reads(traj)
    if len(bad) < 2:
        return None
    return _repeat_pattern("repeated_invalid_argument", traj, [(pos, why) for pos, _, why in bad],
                           args=[a.arg for _, a, _ in bad][:5])


@detector("repeated_unparseable_output")
def repeated_unparseable_output(traj: Trajectory) -> FailurePattern | None:
    """Two or more steps ended in a parse error instead of an action."""
    hits = [(pos, f"the reply contains no parseable action ({shorten(s.parse_error, 80)})")
            for pos, s in enumerate(traj.steps) if s.parse_error]
    if len(hits) < 2:
        return None
    errors = list(dict.fromkeys(shorten(traj.steps[pos].parse_error, 80) for pos, _ in hits))
    return _repeat_pattern("repeated_unparseable_output", traj, hits, n_steps=len(traj.steps),
                           errors=errors[:3])


def _contains(hay: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(hay[i:i + n] == needle for i in range(len(hay) - n + 1))


@detector("answer_seen_not_given")
def answer_seen_not_given(traj: Trajectory) -> FailurePattern | None:
    """A gold answer occurs (as a whole token sequence) in a search result list or a read
    document, and the prediction does not contain it. Needs gold answers, so it is a
    training-split rule: evolution mines the seed split, never the test split."""
    golds = [(g, tokens(g)) for g in traj.answers if tokens(g)]
    pred = tokens(_prediction(traj))
    if not golds or any(_contains(pred, gt) for _, gt in golds):
        return None
    for pos, s in enumerate(traj.steps):
        if s.audit is None or s.audit.a_final.type not in ("SEARCH", "READ"):
            continue
        if "budget_exhausted" in s.audit.feedback or (s.audit.a_final.type == "READ" and not _read_ok(s)):
            continue
        obs = tool_observation(s)
        obs_t = tokens(obs)
        gold = next((g for g, gt in golds if _contains(obs_t, gt)), None)
        if gold is None:
            continue
        answer = _prediction(traj)
        where = "search results" if s.audit.a_final.type == "SEARCH" else "read document"
        after = len(traj.steps) - pos - 1
        then = (f"it answered {shorten(answer, 60)!r} instead" if answer else
                "it never answered" + (" (the steps ran out)" if traj.terminated == "max_steps" else ""))
        nxt = min(pos + 1, len(traj.steps) - 1)
        problem = f"the {where} above contain the answer {gold!r}, but the agent did not give it: {then}"
        p = _pattern("answer_seen_not_given", traj, step=traj.steps[pos].index, where=where, gold=gold,
                     answer=answer, steps_after=after, terminated=traj.terminated)
        p.evidence[EVIDENCE_KEY] = [failing_step(traj, nxt, problem, focus=gold, seen=obs).to_dict()]
        return p
    return None


#: the rules above read search episodes (queries, hits, reads); what Phase B runs on the search task
SEARCH_DETECTORS: tuple[str, ...] = tuple(DETECTORS)


# --------------------------------------------------------------------------- task-neutral rules

@detector("wrong_answer")
def wrong_answer(traj: Trajectory) -> FailurePattern | None:
    """A failed episode that gave a FINAL answer: the task's scorer refused it (EM 0)."""
    fa = final_action(traj)
    if fa is None or traj.em:
        return None
    steps = [s.index for s, a in _acted(traj) if a.type == "FINAL"]
    return _pattern("wrong_answer", traj, final_step=steps[-1] if steps else None, answer=shorten(fa.arg, 120),
                    gold=list(traj.answers)[:3])


@detector("no_final_answer")
def no_final_answer(traj: Trajectory) -> FailurePattern | None:
    """A failed episode without any executed FINAL (the budget ran out, or no reply parsed)."""
    if final_action(traj) is not None or traj.em:
        return None
    return _pattern("no_final_answer", traj, terminated=traj.terminated, steps=len(traj.steps))


#: which detectors read a domain's failed episodes (``Domain.detectors`` names the set): search episodes
#: get the search rules; single-step and user tasks get the rules that need no tool of their own
DETECTOR_SETS: dict[str, tuple[str, ...]] = {
    "search": SEARCH_DETECTORS,
    "answer": ("wrong_answer", "no_final_answer", "format_mismatch", "partial_answer",
               "repeated_unparseable_output", "pf_override_harmful"),
}


# --------------------------------------------------------------------------- entry points

def run_detectors(traj: Trajectory, names: Iterable[str] | None = None) -> list[FailurePattern]:
    """The search detectors (or the named ones) on one trajectory, regardless of its EM.

    A detector that raises is logged and skipped: one odd trajectory must not stop Phase B.
    """
    out = []
    for name in (list(names) if names is not None else list(SEARCH_DETECTORS)):
        fn = DETECTORS[name]
        try:
            p = fn(traj)
        except Exception as e:  # noqa: BLE001 - robustness over strictness for stored data
            log.warning("detector %s failed on %s: %s: %s", name, traj.qid, type(e).__name__, e)
            continue
        if p is not None:
            out.append(_with_failing_steps(p, traj))
    return out


def detect_failures(trajs: Iterable[Trajectory], names: Iterable[str] | None = None) -> list[FailurePattern]:
    """Heuristic failure patterns over the failed trajectories (``em == 0``) only."""
    names = list(names) if names is not None else None
    return [p for t in trajs if not t.em for p in run_detectors(t, names)]
