"""Per-question selection of skills (system prompt) and PFs (dispatch), App. B.6 (2) and B.7.

Both selectors are built once per library (keyword patterns compiled, candidates sorted) and
then called once per question, so nothing here runs per step.

* ``SkillSelector`` ranks skills for the system prompt by ``0.5·mode_match + 0.5·keyword_match``.
* ``PFSelector`` picks the PFs the dispatcher will run: the teacher's top-K (strictly parsed JSON
  list) plus the mandatory PFs, or — without a teacher, or when its reply is unusable — a ranking
  of every PF of the library under the question kind. The named lists of ``harness`` boost, they do
  not gate: evolved skills first, then the lists the paper's branching rule names for the kind
  (simple factoid → light set; multi-hop → light + decomposition + entity-aware; computation →
  none), then every PF no list names (a user's own skills, unlisted seeds) by mode and keyword
  match, up to ``pf_top_k`` besides the mandatory ones. A PF named for another branch only stays
  out of this one. So a library of the user's own skills is selectable with the default params.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hasp.bounded import json_load
from hasp.pf.base import Teacher
from hasp.pf.intervention import shown_text
from hasp.pf.library import Skill
from hasp.pf.question import QuestionFeatures
from hasp.pf.teacher import teacher_prompt

log = logging.getLogger(__name__)

#: longest system-prompt line one skill may add
MAX_SUMMARY_CHARS = 300
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


# ----------------------------------------------------------------------------- SkillSelector
class SkillSelector:
    """Ranks skills for the system prompt of one question."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        self._entries = []
        for s in skills:
            kws = [k.strip().lower() for k in s.spec.trigger_keywords if k.strip()]
            pats = [re.compile(rf"\b{re.escape(k)}\b", re.I) for k in kws]
            modes = {m.lower() for m in s.spec.applicable_modes}
            self._entries.append((s, modes, pats))

    @staticmethod
    def _score(modes: set[str], pats: list[re.Pattern[str]], question: str, kind: str) -> float:
        mode = 1.0 if ("all" in modes or kind in modes) else 0.0
        kw = sum(1 for p in pats if p.search(question)) / len(pats) if pats else 0.0
        return 0.5 * mode + 0.5 * kw

    def rank(self, question: str, q: QuestionFeatures) -> list[tuple[float, Skill]]:
        """(score, skill) for every skill with a positive score, best first (priority breaks ties)."""
        scored = [(self._score(modes, pats, question, q.kind), s) for s, modes, pats in self._entries]
        scored = [x for x in scored if x[0] > 0]
        scored.sort(key=lambda x: (-x[0], -x[1].spec.priority, x[1].skill_id))
        return scored

    def select(self, question: str, q: QuestionFeatures, limit: int) -> list[Skill]:
        return [s for _, s in self.rank(question, q)[:max(0, limit)]]


def render_skill_lines(skills: Sequence[Skill]) -> str:
    """The system-prompt block: one ``- summary`` line per skill."""
    lines = [f"- {shown_text((s.spec.system_summary or s.spec.description).strip(), MAX_SUMMARY_CHARS, one_line=True)}"
             for s in skills]
    return "\n".join(ln for ln in lines if ln != "- ")


# ----------------------------------------------------------------------------- PFSelector
@dataclass(frozen=True)
class PFSelection:
    """The PFs one episode runs, in dispatch (priority) order, and how they were chosen."""

    ids: tuple[str, ...]
    source: str  # "teacher" | "heuristic" | "all"
    branch: str = ""  # question kind for the heuristic rule
    note: str = ""  # why the teacher path was not used


class PFSelector:
    """Once per question: which of the library's PFs are live for the episode."""

    def __init__(self, skills: Sequence[Skill], *, mandatory: Sequence[str] = (), light: Sequence[str] = (),
                 decomposition: Sequence[str] = (), entity: Sequence[str] = (), top_k: int = 6,
                 mode: str = "auto", max_tokens: int = 64) -> None:
        self._order = [s.skill_id for s in skills if s.pf is not None]  # library priority order
        have = set(self._order)
        self._desc = {s.skill_id: (s.spec.description or s.spec.system_summary or s.spec.title).strip()
                      for s in skills if s.pf is not None}
        for sid in mandatory:
            if sid not in have:
                log.debug("mandatory PF %s is not in this library; skipped", sid)
        self.mandatory = tuple(x for x in mandatory if x in have)
        self.groups = {name: tuple(x for x in ids if x in have and x not in self.mandatory)
                       for name, ids in (("light", light), ("decomposition", decomposition), ("entity", entity))}
        self.candidates = tuple(x for x in self._order if x not in self.mandatory)
        #: skills evolution admitted: no branch list names them, and a skill admitted for this agent's
        #: failures (and val-gated while live) must stay live, so every branch includes them
        self.evolved = tuple(s.skill_id for s in skills if s.pf is not None and s.generated
                             and s.skill_id not in self.mandatory)
        named = {x for ids in self.groups.values() for x in ids}
        #: PFs no list names (a user's own skills, seeds no branch names): ranked on every branch
        self.unlisted = tuple(x for x in self.candidates if x not in named and x not in self.evolved)
        self._relevance = SkillSelector([s for s in skills if s.skill_id in set(self.unlisted)])
        self.top_k, self.mode, self.max_tokens = top_k, mode, max_tokens
        self._all = PFSelection(tuple(self._order), "all")  # immutable: one instance for every episode

    def _ordered(self, ids: Sequence[str]) -> tuple[str, ...]:
        chosen = set(ids)
        return tuple(x for x in self._order if x in chosen)

    def heuristic(self, q: QuestionFeatures, note: str = "", question: str = "") -> PFSelection:
        """Evolved skills, then the branch's named lists, then the unlisted PFs ranked by mode and
        keyword match on ``question``; non-mandatory picks are capped at ``top_k``."""
        g = self.groups
        boosted = {"computation": (), "factoid": g["light"],
                   "multi_hop": g["light"] + g["decomposition"] + g["entity"]}[q.kind]
        ranked = tuple(s.skill_id for _, s in self._relevance.rank(question, q))
        extra = tuple(dict.fromkeys(self.evolved + boosted + ranked))[: self.top_k]
        return PFSelection(self._ordered(self.mandatory + extra), "heuristic", q.kind, note)

    def parse_reply(self, reply: str) -> list[str] | None:
        """Strict: a JSON list of known, distinct ids, at most ``top_k`` non-mandatory ones."""
        text = (reply or "").strip()
        m = _FENCE.match(text)
        try:
            ids = json_load(m.group(1) if m else text)
        except ValueError:  # not JSON, or refused by the bounded parser
            return None
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids) or len(set(ids)) != len(ids):
            return None
        known = set(self.candidates) | set(self.mandatory)
        if any(x not in known for x in ids):
            return None
        picked = [x for x in ids if x not in self.mandatory]
        return picked if len(picked) <= self.top_k else None

    def select(self, question: str, q: QuestionFeatures, teacher: Teacher | None = None) -> PFSelection:
        if self.mode == "all":
            return self._all
        if self.mode == "heuristic" or teacher is None:
            return self.heuristic(q, "" if self.mode == "heuristic" else "no teacher", question)
        if not self.candidates or self.top_k == 0:
            return PFSelection(self._ordered(self.mandatory), "heuristic", q.kind, "nothing to rank")
        cands = "\n".join(f"- {sid}: {self._desc.get(sid, '')}" for sid in self.candidates)
        msgs = teacher_prompt("pf_select", question=question, candidates=cands, k=self.top_k,
                              mandatory=", ".join(self.mandatory) or "(none)")
        try:
            reply = teacher.generate(msgs, max_tokens=self.max_tokens, temperature=0.0)
        except Exception as e:  # noqa: BLE001 - the heuristic is the documented fallback
            return self.heuristic(q, f"teacher error: {e}", question)
        picked = self.parse_reply(reply)
        if picked is None:
            log.info("PF selection: unusable teacher reply %r; using the heuristic rule", reply[:120])
            return self.heuristic(q, f"unparseable teacher reply: {reply[:80]!r}", question)
        return PFSelection(self._ordered(list(self.mandatory) + picked), "teacher", q.kind)
