"""Phase instructions (App. B.2): SKILL.md reminders rendered only when their phase is live.

Each skill may declare ``phases.{post_search,post_read,pre_final}`` with conditions, a
priority boost and a text (frontmatter ``text`` or the body's ``## Phase: <name>`` section).
The rules are compiled once per library; per step the harness names the live phases, and
``PhaseRules.select`` returns at most ``limit`` rules whose conditions all hold, highest
``priority + priority_boost`` first. Conditions are evaluated lazily and each at most once per
step, so a step costs a handful of attribute reads.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from hasp.pf.conditions import Condition, ConditionEnv, compile_conditions
from hasp.pf.intervention import shown_text
from hasp.pf.library import Skill
from hasp.pf.skill_md import PHASES

#: longest phase reminder a skill may show the policy
MAX_PHASE_TEXT_CHARS = 1000


@dataclass(frozen=True)
class PhaseRule:
    skill_id: str
    phase: str
    rank: float  # skill priority + phase priority_boost
    text: str
    conditions: tuple[Condition, ...]

    @property
    def label(self) -> str:
        return f"{self.skill_id}:{self.phase}"


class PhaseRules:
    """All renderable phase rules of a library, per phase, best first."""

    def __init__(self, rules: Iterable[PhaseRule]) -> None:
        rules = list(rules)
        self.by_phase: dict[str, tuple[PhaseRule, ...]] = {
            p: tuple(sorted((r for r in rules if r.phase == p), key=lambda r: (-r.rank, r.skill_id)))
            for p in PHASES}
        self._restricted: dict[frozenset[str], PhaseRules] = {}

    @classmethod
    def compile(cls, skills: Sequence[Skill], domain: str = "search") -> "PhaseRules":
        """Compile every phase of every skill; an invalid condition raises ``SkillFormatError``."""
        rules = []
        for s in skills:
            for phase, spec in s.spec.phases.items():
                conds = tuple(compile_conditions(s.spec, phase, domain, f"{s.path}/hasp.yaml"))
                text = shown_text(s.spec.phase_text(phase), MAX_PHASE_TEXT_CHARS)
                if text:
                    rules.append(PhaseRule(s.skill_id, phase, s.spec.priority + spec.priority_boost, text, conds))
        return cls(rules)

    def restricted(self, skill_ids: Collection[str]) -> "PhaseRules":
        """The rules of the skills live in one episode.

        Memoised per skill set (rules are immutable): the selectors pick from a handful of sets
        (all, or one per heuristic branch), and this runs at every episode start."""
        keep = frozenset(skill_ids)
        hit = self._restricted.get(keep)
        if hit is None:
            hit = PhaseRules([r for rules in self.by_phase.values() for r in rules if r.skill_id in keep])
            if len(self._restricted) < 512:
                self._restricted[keep] = hit
        return hit

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_phase.values())

    def select(self, phases: Sequence[str], env: ConditionEnv, limit: int) -> list[PhaseRule]:
        if limit <= 0 or not phases:
            return []
        cands = [r for p in phases for r in self.by_phase.get(p, ())]
        if len(phases) > 1:
            cands.sort(key=lambda r: (-r.rank, r.skill_id))
        memo: dict[int, bool] = {}
        out: list[PhaseRule] = []
        seen_text: set[str] = set()
        for r in cands:
            ok = True
            for c in r.conditions:
                v = memo.get(id(c))
                if v is None:
                    v = memo[id(c)] = bool(c(env))
                if not v:
                    ok = False
                    break
            if ok and r.text not in seen_text:
                seen_text.add(r.text)
                out.append(r)
                if len(out) >= limit:
                    break
        return out
