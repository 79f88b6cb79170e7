"""Phase B, second half: turn failure patterns into a ranked list of clusters.

Steps (paper App. C.2, with our own choices where it is silent):

1. **Dedup within a category.** Patterns of one category are grouped greedily:
   a pattern whose abstraction+trigger tokens have Jaccard >= ``dup_threshold``
   (0.5) with a group's representative joins that group (it is a duplicate and
   only adds to the count); otherwise it starts a new group. Heuristic patterns
   use fixed texts per category, so each heuristic category becomes one group;
   free-text (LLM) patterns of one category may split into several.
2. **Novelty against the library.** Each group is compared with the existing
   skills (id, error_category, description). Similarity is the larger of
   (a) token-Jaccard of the category words vs the skill's id + error_category words and
   (b) token-Jaccard of category + abstraction vs skill id + description (content tokens);
   ``novelty = 1 - max similarity``; ``novelty >= new_threshold`` (0.3) -> ``is_new_category``.
   The most similar skill is kept as ``nearest_skill`` (the "existing group" the
   cluster falls into, so a proposal can refine it instead of duplicating it).
   A cluster of harmful rewrites (``REWRITE_CATEGORY``) in which a library PF rewrote a
   FINAL that carried the gold answer is about that PF, whatever the words say: it becomes
   the cluster's ``revises`` (and nearest skill, novelty 0), so the proposal revises it.
   Rewrites of wrong answers in failed episodes do not count: the untrained agent fails
   nearly everything, and a PF that forces a search before a made-up answer is not harmful
   because the episode failed anyway.
3. **Support filter.** ``support`` = number of distinct failed episodes (qids);
   groups below ``min_cluster_size`` (3) are dropped.
4. **Rank** by (is_new_category, support) descending, then category name for determinism;
   a cluster with a PF to revise ranks with the new categories.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from hasp.evolve.detectors import FailurePattern, content_tokens, jaccard, tokens

__all__ = ["Cluster", "ExistingSkill", "REWRITE_CATEGORY", "cluster_patterns", "rewriting_skill", "dedup_patterns", "novelty",
           "existing_from_library", "clusters_to_json", "clusters_from_json"]


@dataclass
class ExistingSkill:
    """What the novelty score needs to know about a library skill."""

    skill_id: str
    description: str = ""
    error_category: str = ""


@dataclass
class Cluster:
    """A recurring failure mode with enough support to be worth a candidate skill."""

    category: str
    patterns: list[FailurePattern]
    support: int
    novelty: float
    is_new_category: bool
    representative: FailurePattern
    nearest_skill: str | None = None
    qids: list[str] = field(default_factory=list)
    #: the library PF this cluster's episodes show taking away correct answers (a revision target)
    revises: str | None = None

    @property
    def count(self) -> int:
        """How many patterns (duplicates included) this cluster absorbed."""
        return len(self.patterns)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["count"] = self.count
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Cluster":
        return cls(category=d["category"],
                   patterns=[FailurePattern.from_dict(p) for p in d.get("patterns", [])],
                   support=int(d["support"]), novelty=float(d["novelty"]),
                   is_new_category=bool(d["is_new_category"]),
                   representative=FailurePattern.from_dict(d["representative"]),
                   nearest_skill=d.get("nearest_skill"), qids=list(d.get("qids", [])),
                   revises=d.get("revises"))


def _as_existing(existing: Iterable[ExistingSkill | str] | Mapping[str, str] | None) -> list[ExistingSkill]:
    if existing is None:
        return []
    if isinstance(existing, Mapping):
        return [ExistingSkill(skill_id=k, description=v) for k, v in existing.items()]
    return [e if isinstance(e, ExistingSkill) else ExistingSkill(skill_id=str(e)) for e in existing]


def existing_from_library(lib: Any) -> list[ExistingSkill]:
    """``ExistingSkill`` list from a ``hasp.pf.library.SkillLibrary`` (duck-typed)."""
    out = []
    for s in getattr(lib, "skills", []):
        spec = s.spec
        out.append(ExistingSkill(skill_id=spec.skill_id,
                                 description=spec.description or spec.system_summary or "",
                                 error_category=spec.error_category or ""))
    return out


def novelty(category: str, abstraction: str, existing: Iterable[ExistingSkill | str] | Mapping[str, str] | None
            ) -> tuple[float, str | None]:
    """(1 - max similarity to any existing skill, id of the most similar skill or None)."""
    best, best_id = 0.0, None
    cat_words = set(tokens(category))
    cluster_text = set(content_tokens(f"{category} {abstraction}"))
    for sk in _as_existing(existing):
        id_words = set(tokens(f"{sk.skill_id} {sk.error_category}"))
        sim = max(jaccard(cat_words, id_words),
                  jaccard(cluster_text, set(content_tokens(f"{sk.skill_id} {sk.description}"))))
        if sk.error_category and sk.error_category == category:
            sim = 1.0
        if sim > best:
            best, best_id = sim, sk.skill_id
    return round(1.0 - best, 4), best_id


#: the failure category whose patterns name the PFs that rewrote the action (``evidence["skill_ids"]``)
REWRITE_CATEGORY = "pf_override_harmful"


def rewriting_skill(group: Iterable[FailurePattern], existing_ids: Iterable[str]) -> str | None:
    """The library PF named most often as having rewritten a correct FINAL in a group of
    harmful-rewrite patterns (``evidence["blocked_skill_ids"]``; ties: the first named), or None."""
    ids = set(existing_ids)
    named = Counter(sid for p in group for sid in (p.evidence or {}).get("blocked_skill_ids") or () if sid in ids)
    return named.most_common(1)[0][0] if named else None


def dedup_patterns(patterns: Iterable[FailurePattern], dup_threshold: float = 0.5
                   ) -> list[list[FailurePattern]]:
    """Greedy leader grouping within each category; the first member is the representative."""
    groups: list[list[FailurePattern]] = []
    leaders: list[tuple[str, set[str]]] = []
    for p in patterns:
        toks = set(tokens(p.text))
        for i, (cat, ltoks) in enumerate(leaders):
            if cat == p.category and jaccard(toks, ltoks) >= dup_threshold:
                groups[i].append(p)
                break
        else:
            groups.append([p])
            leaders.append((p.category, toks))
    return groups


def cluster_patterns(patterns: Iterable[FailurePattern],
                     existing: Iterable[ExistingSkill | str] | Mapping[str, str] | None = None, *,
                     min_cluster_size: int = 3, dup_threshold: float = 0.5,
                     new_threshold: float = 0.3) -> list[Cluster]:
    """Dedup, score novelty, drop low-support groups, rank. See the module docstring."""
    existing_l = _as_existing(existing)
    out = []
    for group in dedup_patterns(patterns, dup_threshold):
        qids = sorted({p.qid for p in group})
        if len(qids) < min_cluster_size:
            continue
        rep = group[0]
        nov, nearest = novelty(rep.category, rep.abstraction, existing_l)
        who = rewriting_skill(group, (e.skill_id for e in existing_l)) if rep.category == REWRITE_CATEGORY else None
        nov, nearest = (0.0, who) if who else (nov, nearest)
        out.append(Cluster(category=rep.category, patterns=group, support=len(qids), novelty=nov,
                           is_new_category=nov >= new_threshold, representative=rep,
                           nearest_skill=nearest, qids=qids, revises=who))
    # a PF that takes correct answers away is as urgent as a gap in the library: it ranks with the new ones
    out.sort(key=lambda c: (not (c.is_new_category or c.revises), -c.support, c.category))
    return out


def clusters_to_json(clusters: Iterable[Cluster]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in clusters]


def clusters_from_json(data: Iterable[dict[str, Any]]) -> list[Cluster]:
    return [Cluster.from_dict(d) for d in data]
