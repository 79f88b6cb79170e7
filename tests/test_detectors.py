"""Phase B heuristic detectors: each rule fires on a crafted failure and stays quiet on a clean episode."""

from __future__ import annotations

import json

import pytest

from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from hasp.evolve.detectors import (
    DETECTORS,
    DETECTOR_SETS,
    SEARCH_DETECTORS,
    FailurePattern,
    detect_failures,
    detector,
    replay_contexts,
    run_detectors,
)

Q = "In which city was the founder of Brightwell Labs born?"
DOC12 = "[d12] Brightwell Labs\nBrightwell Labs was founded by Ana Morro in 1990."
DOC40 = "[d40] Ana Morro\nAna Morro was born in Telvik."


def st(i: int, typ: str, arg: str, obs: str = "", fb: dict | None = None, *, orig: tuple[str, str] | None = None,
       fired: list[dict] | None = None, context: list[str] | None = None) -> StepRecord:
    if fb is None:
        fb = ({"n_hits": 1, "hit_ids": [f"d{i}"]} if typ == "SEARCH" else
              {"found": True, "doc_id": f"d{i}"} if typ == "READ" else {"final": True})
    a_final = Action(typ, arg)
    a_orig = Action(*orig) if orig else a_final
    if context:
        obs = obs + "\n" + "\n".join(context)
    audit = AuditEvent(state={}, a_orig=a_orig, a_final=a_final, context=list(context or []),
                       fired=list(fired or []), feedback=fb)
    return StepRecord(index=i, raw_output=f"Action: {a_orig.render()}", thought="t", audit=audit, observation=obs)


def make(steps: list[StepRecord], *, answers=("Telvik",), em: float = 0.0, question: str = Q,
         qid: str = "q1") -> Trajectory:
    final = next((s.audit.a_final.arg for s in steps if s.audit and s.audit.a_final.type == "FINAL"), "")
    return Trajectory(qid=qid, question=question, answers=list(answers), variant="pf", steps=steps,
                      prediction=final, em=em, terminated="final" if final else "max_steps")


def clean_steps(final: str = "Telvik") -> list[StepRecord]:
    return [
        st(0, "SEARCH", "Brightwell Labs founder", "1. [d12] Brightwell Labs: founded by Ana Morro",
           {"n_hits": 1, "hit_ids": ["d12"]}),
        st(1, "READ", "d12", DOC12, {"found": True, "doc_id": "d12"}),
        st(2, "SEARCH", "Ana Morro birthplace", "1. [d40] Ana Morro: born in Telvik",
           {"n_hits": 1, "hit_ids": ["d40"]}),
        st(3, "READ", "d40", DOC40, {"found": True, "doc_id": "d40"}),
        st(4, "FINAL", final),
    ]


def fired(traj: Trajectory) -> set[str]:
    return {p.category for p in run_detectors(traj)}


def test_registry_has_all_twelve():
    assert set(DETECTORS) >= {
        "premature_final", "repeated_search", "no_read_before_final", "query_too_broad", "query_too_narrow",
        "wrong_entity_focus", "reasoning_hallucination", "format_mismatch", "partial_answer",
        "contradictory_evidence_ignored", "excessive_steps_no_progress", "pf_override_harmful"}
    assert all(fn.detector_name == name for name, fn in DETECTORS.items())


def test_detector_decorator_records_name_and_rejects_duplicates():
    @detector("test_only_rule")
    def rule(traj):
        return None

    try:
        assert DETECTORS["test_only_rule"] is rule and rule.detector_name == "test_only_rule"
        with pytest.raises(ValueError):
            detector("test_only_rule")(lambda t: None)
    finally:
        DETECTORS.pop("test_only_rule")


def test_clean_episode_fires_nothing():
    assert fired(make(clean_steps())) == set()


CASES = {
    "premature_final": [st(0, "FINAL", "Telvik town")],
    "repeated_search": [
        st(0, "SEARCH", "Brightwell Labs founder", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(1, "SEARCH", "the Brightwell Labs founder", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(2, "READ", "d12", DOC12), st(3, "FINAL", "Ana Morro")],
    "no_read_before_final": [
        st(0, "SEARCH", "Brightwell Labs founder", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(1, "SEARCH", "Ana Morro birthplace", "1. [d40] ...", {"n_hits": 1, "hit_ids": ["d40"]}),
        st(2, "READ", "zzz", "No document matches", {"found": False, "doc_id": None}),
        st(3, "FINAL", "Telvik")],
    "query_too_broad": [st(0, "SEARCH", "born", "1. [d1] ..."), *clean_steps()[1:]],
    "query_too_narrow": [st(0, "SEARCH", Q, "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
                         *clean_steps()[1:]],
    "wrong_entity_focus": clean_steps("Velm River"),
    "reasoning_hallucination": clean_steps("Korsgard"),
    "format_mismatch": clean_steps("Ana Morro was born in Telvik"),
    "partial_answer": clean_steps("Telvik"),  # gold is "Telvik Harbour", see ANSWERS
    "contradictory_evidence_ignored": [
        st(0, "SEARCH", "Brightwell Labs founder", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(1, "READ", "d12", "Brightwell Labs was not founded by Ana Morro, however some say so; "
                             "but records are disputed.", {"found": True, "doc_id": "d12"}),
        st(2, "FINAL", "Ana Morro")],
    "excessive_steps_no_progress": [
        st(0, "SEARCH", "Brightwell Labs founder", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(1, "SEARCH", "Brightwell founder name", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(2, "SEARCH", "who founded Brightwell", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]}),
        st(3, "SEARCH", "Brightwell Labs origin", "1. [d12] ...", {"n_hits": 1, "hit_ids": ["d12"]})],
    "pf_override_harmful": [
        *clean_steps()[:4],
        st(4, "SEARCH", "Telvik city", "1. [d77] ...", {"n_hits": 1, "hit_ids": ["d77"]},
           orig=("FINAL", "Telvik"), fired=[{"skill_id": "verify_first", "type": "MODIFY_ACTION",
                                             "reason": "x", "applied": True}]),
        st(5, "FINAL", "Telvik City")],
}


ANSWERS = {"partial_answer": ["Telvik Harbour"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_detector_fires_on_crafted_failure(name):
    traj = make(CASES[name], answers=ANSWERS.get(name, ["Telvik"]))
    pattern = DETECTORS[name](traj)
    assert isinstance(pattern, FailurePattern), f"{name} did not fire; all fired: {fired(traj)}"
    assert pattern.category == name and pattern.qid == "q1" and pattern.source == "heuristic"
    assert pattern.abstraction and pattern.trigger and pattern.intervention_hint
    json.dumps(pattern.to_dict())  # evidence is JSON-serialisable
    assert FailurePattern.from_dict(pattern.to_dict()) == pattern


@pytest.mark.parametrize("name", sorted(CASES))
def test_detector_quiet_on_clean_episode(name):
    assert DETECTORS[name](make(clean_steps())) is None


def test_answer_overlap_rules_are_disjoint():
    assert "partial_answer" in fired(make(clean_steps("Morro"), answers=["Ana Morro"]))
    assert "wrong_entity_focus" not in fired(make(clean_steps("Morro"), answers=["Ana Morro"]))
    assert "format_mismatch" not in fired(make(clean_steps("Velm River")))


def test_hallucination_needs_a_read_and_pf_context_is_not_evidence():
    # no READ at all: that is no_read_before_final, not hallucination
    t = make([st(0, "SEARCH", "Brightwell Labs founder"), st(1, "SEARCH", "Ana Morro birthplace"),
              st(2, "SEARCH", "Telvik city"), st(3, "FINAL", "Korsgard")])
    assert "reasoning_hallucination" not in fired(t)
    # the answer word only appears in PF-injected context, not in the document: still ungrounded
    steps = clean_steps("Korsgard")
    steps[3] = st(3, "READ", "d40", DOC40, {"found": True, "doc_id": "d40"}, context=["Hint: maybe Korsgard"])
    assert "reasoning_hallucination" in fired(make(steps))


def test_pf_override_records_skill_ids():
    p = DETECTORS["pf_override_harmful"](make(CASES["pf_override_harmful"]))
    assert p.evidence["skill_ids"] == ["verify_first"]


def test_detect_failures_only_on_failed_episodes():
    bad = make(clean_steps("Velm River"), qid="bad")
    good = make(clean_steps("Telvik"), em=1.0, qid="good")
    also_bad_looking_but_correct = make(CASES["premature_final"], em=1.0, qid="lucky")
    pats = detect_failures([bad, good, also_bad_looking_but_correct])
    assert {p.qid for p in pats} == {"bad"}
    assert {p.category for p in pats} >= {"wrong_entity_focus", "reasoning_hallucination"}


def test_detect_failures_survives_a_broken_detector(caplog):
    @detector("test_broken_rule")
    def broken(traj):
        raise RuntimeError("boom")

    try:
        pats = detect_failures([make(CASES["premature_final"])], [*SEARCH_DETECTORS, "test_broken_rule"])
        assert "premature_final" in {p.category for p in pats}
        assert "test_broken_rule" in caplog.text
    finally:
        DETECTORS.pop("test_broken_rule")


def test_detectors_work_on_round_tripped_trajectories():
    t = make(CASES["repeated_search"])
    t2 = Trajectory.from_dict(json.loads(json.dumps(t.to_dict())))
    assert fired(t2) == fired(t)


def test_replay_contexts_rebuilds_step_state():
    steps = clean_steps()
    ctxs = replay_contexts(make(steps))
    assert [a for _, a, _ in ctxs] == ["SEARCH", "READ", "SEARCH", "READ", "FINAL"]
    ctx_final = ctxs[-1][0]
    assert ctx_final["has_read"] and ctx_final["read_count"] == 2 and ctx_final["search_count"] == 2
    assert "born in Telvik" in ctx_final["all_read_contents"]
    assert ctx_final["action_history"][0] == "SEARCH[Brightwell Labs founder]"
    assert ctxs[0][0]["step_count"] == 0 and not ctxs[0][0]["has_read"]


def test_task_neutral_rules_read_any_task_and_search_keeps_its_own():
    answer = DETECTOR_SETS["answer"]
    wrong = make([st(0, "FINAL", "17")], answers=["24"])
    unanswered = make([st(0, "CONVERT", "3 miles to km", "4.828 km", {})], answers=["4.828"])
    right = make([st(0, "FINAL", "24")], answers=["24"], em=1.0)
    cats = lambda t: {p.category for p in run_detectors(t, answer)}  # noqa: E731
    assert "wrong_answer" in cats(wrong) and "no_final_answer" not in cats(wrong)
    assert "no_final_answer" in cats(unanswered) and "wrong_answer" not in cats(unanswered)
    assert not {"wrong_answer", "no_final_answer"} & cats(right)
    # a single-step answer is not a search episode: the search rules (premature_final ...) are not in the set
    assert not {"premature_final", "no_read_before_final"} & set(answer)
    assert "wrong_answer" not in SEARCH_DETECTORS and fired(wrong) & {"premature_final"}
