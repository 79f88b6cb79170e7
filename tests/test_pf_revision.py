"""Evolution revises a declared PF that took correct answers away: the harmful-rewrite cluster names
the PF that rewrote a FINAL carrying the gold answer, the student picks the condition under which it
should stay quiet, and the revision is admitted as that PF's next version, which replaces it at run
time. Rewrites of wrong answers in failed episodes name no PF to revise.

The student is a scripted double; the library is the project's real seed library.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from doubles import ScriptedPolicyDouble

from hasp.agent.replay import replay
from hasp.evolve.cluster import REWRITE_CATEGORY, cluster_patterns, existing_from_library
from hasp.evolve.declarative import compiled_pf, propose_declarative, reply_lines, revision_options, validate_declared
from hasp.evolve.detectors import detect_failures
from hasp.evolve.gate import Evidence, refusals
from hasp.evolve.review import heuristic_review, trigger_hit_rate
from hasp.pf.library import load_library
from hasp.pf.skill_md import parse_skill_md
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"
PF = "insufficient_exploration"
RESULTS = ("1. [doc0003] Roholt: Roholt is a city in Seirngeesh, founded in 1836.\n"
           "2. [doc0007] Seirngeesh: a region.")


def _step(i: int, orig: Action, final: Action, obs: str, feedback: dict, fired: list | None = None) -> StepRecord:
    return StepRecord(index=i, raw_output=orig.render(), observation=obs,
                      audit=AuditEvent(state={}, a_orig=orig, a_final=final, feedback=feedback, fired=fired or []))


def blocked(qid: str, answer: str = "1836") -> Trajectory:
    """The trained policy answers right after its search; the seed PF forces a READ instead, and the
    episode runs out of steps with no answer."""
    search = Action("SEARCH", "Roholt founded")
    hits = {"n_hits": 2, "hit_ids": ["doc0003", "doc0007"]}
    rewrite = [{"skill_id": PF, "type": "MODIFY_ACTION", "applied": True, "reason": "read first"}]
    return Trajectory(qid=qid, question="In what year was Roholt founded?", answers=["1836"], variant="pf", steps=[
        _step(0, search, search, RESULTS, hits),
        _step(1, Action("FINAL", answer), Action("READ", "doc0003"), "Roholt: a city.",
              {"found": True, "doc_id": "doc0003"}, rewrite),
        _step(2, Action("READ", "doc0099"), Action("READ", "doc0099"), "No document matches.", {"found": False}),
    ], em=0.0, terminated="max_steps")


def test_a_harmful_rewrite_cluster_is_answered_with_a_revision_that_replaces_the_pf(tmp_path: Path) -> None:
    lib = load_library(SEED, "search")
    declared = {s.skill_id: s.spec for s in lib.skills if s.spec.pf is not None}
    existing, ids, seed_pf = existing_from_library(lib), lib.ids, lib.get(PF).pf
    trajs = [blocked(f"q{i}") for i in range(3)]
    assert trigger_hit_rate(seed_pf, trajs) == 1.0
    lib.close()
    patterns = [p for p in detect_failures(trajs) if p.category == REWRITE_CATEGORY]
    assert len(patterns) == 3 and all(p.evidence["skill_ids"] == [PF] for p in patterns)
    assert all(p.evidence["blocked_steps"] == [1] and p.evidence["blocked_skill_ids"] == [PF] for p in patterns)

    (cluster,) = [c for c in cluster_patterns(patterns, existing) if c.category == REWRITE_CATEGORY]
    assert cluster.revises == PF and cluster.nearest_skill == PF and cluster.novelty == 0.0
    assert not cluster.is_new_category
    # it ranks with the new categories (by support, then name), not after them
    unseen = blocked("q3")
    unseen.answers = ["Seirngeesh Hall"]  # a rewrite in an episode whose answer never showed
    ranked = cluster_patterns(detect_failures([*trajs, unseen]), existing)
    assert [(c.category, c.support, c.is_new_category, c.revises) for c in ranked] == [
        (REWRITE_CATEGORY, 4, False, PF), ("answer_seen_not_given", 3, True, None)]

    # the same PF also fires on a wrong answer elsewhere (a rewrite that did not take an answer away)
    wrong = blocked("w", answer="Babbage Hall")
    replayed = {t.qid: list(replay(t, 5)) for t in [*trajs, wrong]}
    options = revision_options(declared[PF], cluster, replayed)
    assert options[0] == "answer_in_evidence"  # holds where it hurt, never on its other firing
    assert "no_read_yet" not in options  # the PF tests that already
    assert "evidence_has_answer" not in options  # holds on its other firing too: negated, it would silence the PF
    student = ScriptedPolicyDouble(["It should leave it alone when answer_in_evidence."])
    (cand,) = propose_declarative([cluster], student, existing_skill_ids=ids, replayed=replayed,
                                  reply_format="choices", declared_skills=declared)
    asked = student.seen[0][-1]["content"]
    assert f'When should "{PF}" leave' in asked and "FINAL[1836]" in asked and "READ[doc0003]" in asked
    assert "1) answer_in_evidence" in asked
    assert cand.revises == PF and cand.skill_id == PF and not cand.parse_error
    assert cand.declaration["when"] == [*declared[PF].pf.model_dump()["when"], "!answer_in_evidence"]
    spec = parse_skill_md(cand.skill_md)
    assert spec.phases == declared[PF].phases and spec.priority == declared[PF].priority  # the rest is kept
    assert "Not when: FINAL whose words all occur in the evidence seen." in spec.description
    # Objective B trains the student on the reply the question asked for: the chosen option's number
    assert cand.target == "1" and reply_lines(cand) == "1" and cand.prompt_messages[-1]["content"] == asked

    rep = validate_declared(cand)
    assert rep.passed, rep.errors
    hit = trigger_hit_rate(compiled_pf(cand), trajs)
    assert hit == 0.0
    review = heuristic_review(cand, rep.q_exec, cluster, trigger_hit_rate=hit)
    assert review.decision == "ACCEPT", review.reasons
    assert not any("odd fit" in r or "without refining" in r for r in review.reasons)
    # lite mode's id dedup lets a revision through and still refuses a plain duplicate id
    lite = ("parse", "new_id")
    assert refusals(Evidence(candidate=cand, cluster=cluster, library_ids=frozenset(ids)), lite) == []
    cand.revises = None
    assert refusals(Evidence(candidate=cand, cluster=cluster, library_ids=frozenset(ids)), lite) == [
        f"new_id: skill id {PF!r} already in the library"]
    cand.revises = PF

    from hasp.evolve.admit import admit

    root = tmp_path / "search"
    shutil.copytree(SEED, root)
    res = admit(root, cand, review, epoch=1, cluster=cluster, refusals=[])
    assert res.admitted and res.version == 2 and res.path == f"generated/{PF.replace('_', '-')}-v2", res
    after = load_library(root, "search")
    assert after.load_errors == [] and after.get(PF).version == 2 and after.get(PF).generated
    # the revision is quiet where the answer was in the evidence and still forces a READ elsewhere
    assert trigger_hit_rate(after.get(PF).pf, trajs) == 0.0
    assert trigger_hit_rate(after.get(PF).pf, [blocked("w", answer="Babbage Hall")]) == 1.0
    after.close()


def test_the_revision_question_shows_a_rewrite_of_the_pf_it_revises() -> None:
    """When another PF rewrote an earlier step of the same episodes, the question about the PF being
    revised still shows one of that PF's own harmful rewrites, and only its steps make the menu."""
    lib = load_library(SEED, "search")
    declared = {s.skill_id: s.spec for s in lib.skills if s.spec.pf is not None}
    existing, ids = existing_from_library(lib), lib.ids
    lib.close()
    trajs = []
    for i in range(3):
        t = blocked(f"m{i}")
        first = [{"skill_id": "premature_final", "type": "MODIFY_ACTION", "applied": True}]
        t.steps[0] = _step(0, Action("FINAL", "Seirngeesh"), Action("SEARCH", "Roholt founded"), RESULTS,
                           {"n_hits": 2, "hit_ids": ["doc0003", "doc0007"]}, first)
        trajs.append(t)
    patterns = [p for p in detect_failures(trajs) if p.category == REWRITE_CATEGORY]
    assert all(p.evidence["rewrites"][0]["skill_ids"] == ["premature_final"] for p in patterns)
    (cluster,) = [c for c in cluster_patterns(patterns, existing) if c.category == REWRITE_CATEGORY]
    assert cluster.revises == PF
    replayed = {t.qid: list(replay(t, 5)) for t in trajs}
    assert revision_options(declared[PF], cluster, replayed)[0] == "answer_in_evidence"
    student = ScriptedPolicyDouble(["answer_in_evidence"])
    (cand,) = propose_declarative([cluster], student, existing_skill_ids=ids, replayed=replayed,
                                  reply_format="choices", declared_skills=declared)
    asked = student.seen[0][-1]["content"]
    assert "the agent proposed FINAL[1836]; insufficient_exploration changed it to READ[doc0003]" in asked
    assert "FINAL[Seirngeesh]" not in asked
    assert cand.revises == PF and not cand.parse_error


def guessed(qid: str) -> Trajectory:
    """The untrained agent's failure: it answers before searching, a seed PF turns that into a SEARCH,
    and the episode still fails. The rewrite took nothing away."""
    search = Action("SEARCH", "Roholt founded")
    fired = [{"skill_id": "premature_final", "type": "MODIFY_ACTION", "applied": True}]
    return Trajectory(qid=qid, question="In what year was Roholt founded?", answers=["1836"], variant="pf", steps=[
        _step(0, Action("FINAL", "Roholt"), search, RESULTS, {"n_hits": 2, "hit_ids": ["doc0003"]}, fired),
        _step(1, Action("READ", "doc0099"), Action("READ", "doc0099"), "No document matches.", {"found": False}),
    ], em=0.0, terminated="max_steps")


def test_rewrites_of_wrong_answers_or_a_mute_student_give_no_revision() -> None:
    lib = load_library(SEED, "search")
    declared = {s.skill_id: s.spec for s in lib.skills if s.spec.pf is not None}
    existing, ids = existing_from_library(lib), lib.ids
    lib.close()
    guesses = [guessed(f"g{i}") for i in range(3)]
    (plain,) = [c for c in cluster_patterns(detect_failures(guesses), existing) if c.category == REWRITE_CATEGORY]
    assert plain.revises is None and all(p.evidence["blocked_steps"] == [] for p in plain.patterns)
    student = ScriptedPolicyDouble([], default="1")
    (new,) = propose_declarative([plain], student, existing_skill_ids=ids, reply_format="choices",
                                 replayed={t.qid: list(replay(t, 5)) for t in guesses}, declared_skills=declared)
    assert new.revises is None and new.skill_id not in ids  # the usual new-skill proposal

    trajs = [blocked(f"q{i}") for i in range(3)]
    (cluster,) = [c for c in cluster_patterns(detect_failures(trajs), existing) if c.category == REWRITE_CATEGORY]
    mute = ScriptedPolicyDouble([], default="I do not know.")
    (refused,) = propose_declarative([cluster], mute, existing_skill_ids=ids, reply_format="choices",
                                     replayed={t.qid: list(replay(t, 5)) for t in trajs}, declared_skills=declared)
    assert refused.revises == PF and refused.parse_error == "revision refused: the reply names none of the options"
    assert len(mute.seen) == 2 and not refused.declared  # one retry, then a refusal that keeps the replies
