"""Phase B clustering: dedup within category, support filter, novelty against the library, ranking."""

from __future__ import annotations

import json

from hasp.evolve.cluster import (
    Cluster,
    ExistingSkill,
    cluster_patterns,
    clusters_from_json,
    clusters_to_json,
    dedup_patterns,
    novelty,
)
from hasp.evolve.detectors import FailurePattern


def pat(cat: str, qid: str, abstraction: str, trigger: str = "at FINAL", source: str = "llm") -> FailurePattern:
    return FailurePattern(category=cat, abstraction=abstraction, trigger=trigger,
                          intervention_hint="do something", qid=qid, source=source, evidence={"q": qid})


STALE = "The agent answers with a date from an outdated document instead of the latest one"
STALE2 = "The agent answers with a date from an outdated document rather than the most recent one"
LEAK = "The agent drops a constraint of the question when it writes the second query"


def test_dedup_merges_near_duplicates_within_category_only():
    ps = [pat("stale_evidence", "q1", STALE), pat("stale_evidence", "q2", STALE2),
          pat("constraint_leak", "q3", LEAK), pat("other_cat", "q4", STALE)]
    groups = dedup_patterns(ps)
    by_first = {g[0].qid: [p.qid for p in g] for g in groups}
    assert by_first == {"q1": ["q1", "q2"], "q3": ["q3"], "q4": ["q4"]}


def test_dedup_keeps_distinct_texts_apart_in_one_category():
    ps = [pat("stale_evidence", "q1", STALE), pat("stale_evidence", "q2", LEAK)]
    assert len(dedup_patterns(ps)) == 2


def test_min_cluster_size_counts_distinct_episodes():
    # three patterns but only two distinct episodes -> dropped at min size 3
    ps = [pat("stale_evidence", "q1", STALE), pat("stale_evidence", "q1", STALE2),
          pat("stale_evidence", "q2", STALE)]
    assert cluster_patterns(ps) == []
    ps.append(pat("stale_evidence", "q3", STALE2))
    (c,) = cluster_patterns(ps)
    assert c.support == 3 and c.count == 4 and c.qids == ["q1", "q2", "q3"]
    assert c.representative.abstraction == STALE
    assert cluster_patterns(ps, min_cluster_size=4) == []


def test_novelty_against_existing_skills():
    existing = [ExistingSkill("stale_evidence_check", "Flags answers taken from outdated documents",
                              "stale_evidence"),
                ExistingSkill("query_dedup", "Blocks a SEARCH that repeats an earlier query", "repeated_search")]
    nov, nearest = novelty("stale_evidence", STALE, existing)
    assert nov == 0.0 and nearest == "stale_evidence_check"  # same error category
    nov, nearest = novelty("constraint_leak", LEAK, existing)
    assert nov >= 0.3
    nov_empty, nearest_empty = novelty("constraint_leak", LEAK, [])
    assert nov_empty == 1.0 and nearest_empty is None
    # the plain-mapping and id-list forms work too
    assert novelty("repeated_search", "x", ["repeated_search"])[0] == 0.0
    assert novelty("repeated_search", "x", {"query_dedup": "repeated search blocker"})[0] < 1.0


def test_rank_new_categories_first_then_support():
    existing = [ExistingSkill("stale_evidence_check", "Flags answers from outdated documents", "stale_evidence")]
    ps = ([pat("stale_evidence", f"s{i}", STALE) for i in range(6)]
          + [pat("constraint_leak", f"c{i}", LEAK) for i in range(3)]
          + [pat("premature_summary", f"p{i}", "The agent summarises before reading the key document")
             for i in range(4)])
    cl = cluster_patterns(ps, existing)
    assert [c.category for c in cl] == ["premature_summary", "constraint_leak", "stale_evidence"]
    assert [c.is_new_category for c in cl] == [True, True, False]
    assert cl[-1].nearest_skill == "stale_evidence_check" and cl[-1].support == 6


def test_clusters_are_json_serialisable():
    ps = [pat("constraint_leak", f"c{i}", LEAK) for i in range(3)]
    cl = cluster_patterns(ps)
    data = json.loads(json.dumps(clusters_to_json(cl)))
    assert data[0]["count"] == 3 and data[0]["support"] == 3
    back = clusters_from_json(data)
    assert isinstance(back[0], Cluster) and back[0] == cl[0]


def test_heuristic_patterns_collapse_to_one_cluster_per_category():
    from hasp.evolve.detectors import _TEMPLATES

    a, t, h = _TEMPLATES["repeated_search"]
    ps = [FailurePattern("repeated_search", a, t, h, qid=f"q{i}", evidence={"jaccard": 0.9 + i / 100})
          for i in range(5)]
    (c,) = cluster_patterns(ps)
    assert c.support == 5 and c.count == 5
