"""Question features computed once per episode and shared by every selection layer.

The difficulty gate, the PF selector's branching rule, the skill selector's mode and the
question-level phase conditions all look at the same few surface cues (length, multi-hop
markers, constraint phrases, arithmetic words). Computing them once per question keeps the
per-step cost of the harness at dictionary lookups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "the founder of", "a river of" – one relational hop each
_RELATION = re.compile(r"\b(?:the|a|an)\s+[a-z]+(?:\s+[a-z]+)?\s+of\b")
# "the company that employs", "the river which flows": a relative clause adds a hop
_RELATIVE = re.compile(r"\b(?:that|which|who|whose|where)\s+[a-z]+")
_POSSESSIVE = re.compile(r"\w(?:'s|s')\s")
_CONSTRAINT = re.compile(
    r"\b(?:not|never|except|without|before|after|between|first|last|only|both|neither|earliest|"
    r"latest|same|different|excluding|other than)\b")
_NEGATION = re.compile(r"\b(?:not|never|except|excluding|other than|no longer)\b")
_COMPUTATION = re.compile(
    r"\b(?:how many|how much|how old|how long|difference|sum of|total|combined|average|"
    r"calculate|years between|how far)\b")
# "Who is older, A or B?" compares two looked-up facts: a two-entity multi-hop question, not arithmetic
_COMPARISON = re.compile(r"\b(?:older|younger|earlier|later|born first|died first|first|longer|shorter|"
                         r"larger|smaller|more|less|fewer)\b.*\bor\b")
_TEMPORAL = re.compile(r"\b(?:when|what year|which year|in what year|date|century|decade|\d{4})\b")
_MULTI_PART = re.compile(r"\b(?:and|both|as well as|which two|what two)\b")
_WORD = re.compile(r"[A-Za-z0-9']+")
_LEADING_WH = re.compile(r"^\s*(?:in|at|on|for|from)?\s*(?:which|who|whose|where|what)\b")


@dataclass(frozen=True)
class QuestionFeatures:
    """Surface cues of one question (cheap, deterministic, no model)."""

    n_words: int
    hop_markers: int
    constraint_phrases: int
    negation: bool
    computation: bool
    temporal: bool
    multi_part: bool
    comparison: bool = False

    @classmethod
    def of(cls, question: str) -> "QuestionFeatures":
        # lower-cased once: the cue patterns are case-sensitive, which is ~2x faster than re.I
        # over nine scans (this runs once per episode, inside the harness's planning time)
        q = (question or "").lower()
        # the leading wh-word ("Which company ...", "Who ...") is the question, not a relative clause
        body = _LEADING_WH.sub("", q, count=1)
        return cls(
            n_words=len(_WORD.findall(q)),
            hop_markers=len(_RELATION.findall(q)) + len(_RELATIVE.findall(body)) + len(_POSSESSIVE.findall(q + " ")),
            constraint_phrases=len(_CONSTRAINT.findall(q)),
            negation=bool(_NEGATION.search(q)),
            computation=bool(_COMPUTATION.search(q)),
            temporal=bool(_TEMPORAL.search(q)),
            multi_part=bool(_MULTI_PART.search(body)),
            comparison=bool(_COMPARISON.search(q)),
        )

    @property
    def multi_hop(self) -> bool:
        """Two chained relations, or one relation inside a longer question."""
        return self.comparison or self.hop_markers >= 2 or (self.hop_markers == 1 and self.n_words >= 9)

    @property
    def kind(self) -> str:
        """The branch of the PF selector's heuristic rule: computation | multi_hop | factoid."""
        if self.computation:
            return "computation"
        return "multi_hop" if self.multi_hop else "factoid"
