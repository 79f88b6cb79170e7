"""Declarative proposals (Phase C): menus ranked on the cluster's replayed failing steps, the
lenient line format and the JSON format, one retry with the error shown, a logged refusal that keeps
the reply, structured output requested only where asked, and declared candidates through Phases D-F.

The student is a scripted double; replies of the real embedded model are in
``tests/fixtures/declarative_replies`` (see ``test_real_embedded_replies``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import ScriptedPolicyDouble

from hasp.agent.replay import replay
from hasp.evolve.cluster import Cluster
from hasp.evolve.declarative import (check_reply, choose_format, declaration_of, propose_declarative,
                                     rank_menus, reply_fields, reply_format_for, validate_declared)
from hasp.evolve.detectors import FailurePattern
from hasp.evolve.propose import FeedbackEntry, FeedbackHistory
from hasp.pf.skill_md import parse_skill_md
from hasp.records import Action, AuditEvent, StepRecord, Trajectory

FIXTURES = Path(__file__).parent / "fixtures" / "declarative_replies"
RESULTS = "1. [doc0003] Roholt: Roholt is a city located in Seirngeesh, founded in 1836."
NOT_FOUND = "No document matches 'doc9999'. READ takes a doc id like [doc0012], a result number, or a title."


def _step(i, action, arg, obs, feedback):
    a = Action(action, arg)
    return StepRecord(index=i, raw_output=f"{action}[{arg}]", observation=obs,
                      audit=AuditEvent(state={}, a_orig=a, a_final=a, feedback=feedback))


def invented_read_traj(qid="q1") -> Trajectory:
    """The embedded model's loop: one SEARCH that shows the answer, then READs of an id it made up."""
    return Trajectory(qid=qid, question="In what year was Roholt founded?", answers=["1836"], variant="pf", steps=[
        _step(0, "SEARCH", "Roholt", RESULTS, {"n_hits": 1, "hit_ids": ["doc0003"], "hit_titles": ["Roholt"]}),
        _step(1, "READ", "doc9999", NOT_FOUND, {"found": False, "doc_id": None}),
        _step(2, "READ", "doc9999", NOT_FOUND, {"found": False, "doc_id": None}),
        StepRecord(index=3, raw_output="I think", parse_error="no action"),
        _step(4, "READ", "doc9999", NOT_FOUND, {"found": False, "doc_id": None}),
    ])


def searching_traj(qid="q9") -> Trajectory:
    return Trajectory(qid=qid, question="Who founded Bairduth Optics?", answers=["Lairnre Duthell"], variant="pf",
                      steps=[_step(0, "SEARCH", "Bairduth Optics", "1. [doc0001] Bairduth Optics: a firm.",
                                   {"n_hits": 1, "hit_ids": ["doc0001"], "hit_titles": ["Bairduth Optics"]}),
                             _step(1, "SEARCH", "Bairduth Optics founder", "1. [doc0001] Bairduth Optics: a firm.",
                                   {"n_hits": 1, "hit_ids": ["doc0001"], "hit_titles": ["Bairduth Optics"]})])


def cluster_of(*qids: str, category="repeated_invalid_read") -> Cluster:
    from hasp.evolve.excerpts import EVIDENCE_KEY, failing_step

    steps = [failing_step(invented_read_traj(), i, "READ opened nothing").to_dict() for i in (2, 4)]
    ps = [FailurePattern(category, "The agent keeps reading a document id no search showed.",
                         "READ of an unknown id after a failed READ.", "Read a shown result instead.", qid=q,
                         evidence={EVIDENCE_KEY: steps}) for q in qids]
    return Cluster(category=category, patterns=ps, support=len(ps), novelty=1.0, is_new_category=True,
                   representative=ps[0], qids=list(qids))


GOOD = ("SKILL_ID: read_shown_result\nDESCRIPTION: A READ of an id no search showed reads a shown result instead.\n"
        "WATCHES: READ\nWHEN: last_action_failed, arg_not_in_results\nREWRITE: READ top_result\nMAX_FIRES: 2\n")


def test_replay_rebuilds_what_the_loop_knew_at_each_step():
    steps = list(replay(invented_read_traj(), max_steps=5))
    assert [s.index for s in steps] == [0, 1, 2, 4]
    second = steps[1].ctx
    assert second["last_search_hits"] == [{"id": "doc0003", "title": "Roholt"}] and second["search_count"] == 1
    assert steps[2].ctx["last_action_failed"] and steps[3].ctx["failed_streak"] == 2
    assert steps[3].ctx["parse_failures"] == 1 and steps[3].ctx["step_count"] == 4


def test_menus_put_what_is_special_about_the_failing_steps_first():
    replayed = {t.qid: list(replay(t, 5)) for t in (invented_read_traj(), searching_traj())}
    from hasp.evolve.declarative import focus_steps

    focus = focus_steps(cluster_of("q1"), replayed)
    menus = rank_menus(focus, [s for v in replayed.values() for s in v])
    assert menus.watches == ["READ"]
    assert menus.conditions[0] == "last_action_failed" and "same_action_repeated" in menus.conditions
    assert "arg_not_in_results" in menus.conditions and "no_search_yet" not in menus.conditions
    assert menus.sources[:2] == ["best_unread_result", "top_result"] and "answer_span_from_results" in menus.sources


def test_counterfactual_replay_puts_the_repairs_that_would_have_answered_first():
    from hasp.evolve.declarative import focus_steps, repair_options

    replayed = {t.qid: list(replay(t, 5)) for t in (invented_read_traj(), searching_traj())}
    focus = focus_steps(cluster_of("q1"), replayed)
    menus = rank_menus(focus, [s for v in replayed.values() for s in v], gold={"q1": ["1836"]})
    assert menus.answers["answer_span_from_evidence"] == 1.0 and menus.answers["answer_span_from_last_read"] == 0.0
    assert repair_options(menus, "READ")[:2] == ["FINAL answer_span_from_evidence", "FINAL answer_span_from_results"]
    wrong = rank_menus(focus, [], gold={"q1": ["1901"]})
    assert repair_options(wrong, "READ")[0] == "READ best_unread_result"  # nothing would have answered right
    assert rank_menus(focus, []).answers == {}  # no gold (not the training split): no replay


@pytest.mark.parametrize("reply", [
    GOOD,
    "**SKILL_ID**: read_shown_result\n- description: reads a shown result\n- Watches: READ\n"
    "- When: last_action_failed and arg_not_in_results\n- Rewrite: READ[top_result]\n- max fires: 2",
    json.dumps({"skill_id": "read_shown_result", "description": "reads a shown result", "watches": ["READ"],
                "when": ["last_action_failed", "arg_not_in_results"], "rewrite": "READ top_result", "max_fires": 2}),
])
def test_lines_markdown_and_json_replies_give_the_same_declaration(reply):
    fields, decl, sid = check_reply(reply, cluster_of("q1"), ["redundant_read"])
    assert sid == "read_shown_result"
    assert decl.watches == ["READ"] and decl.when == ["last_action_failed", "arg_not_in_results"]
    assert decl.rewrite.action == "READ" and decl.rewrite.sources == ["top_result"] and decl.max_fires == 2


def test_tests_negations_and_injections_are_read():
    decl = declaration_of(reply_fields("WATCHES: READ, SEARCH\nWHEN: not has_read, failed_streak >= 2\n"
                                       "INJECT: \"Read one of: {shown_results}\"\nMAX_FIRES: 9"))
    assert decl.when == ["!has_read", {"field": "failed_streak", "op": ">=", "value": 2}]
    assert decl.inject == "Read one of: {shown_results}" and decl.max_fires == 3


@pytest.mark.parametrize("reply,error", [
    ("I would make the agent better.", "no 'KEY: value' lines"),
    ("SKILL_ID: x_y\nWATCHES: READ\nWHEN: arg_never_shown\nREWRITE: READ top_result", "unknown condition 'arg_never_shown'"),
    ("SKILL_ID: x_y\nWATCHES: READ\nWHEN: has_read\nREWRITE: READ question", "yields a query, which READ cannot take"),
    ("SKILL_ID: x_y\nWATCHES: READ\nWHEN: has_read", "missing: rewrite or inject"),
    ("SKILL_ID: empty_result_rephrase\nWATCHES: SEARCH\nWHEN: empty_results\nREWRITE: SEARCH arg_shortened",
     "repeats the example"),
])
def test_an_unusable_reply_says_which_field_is_wrong(reply, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace("[", r"\[")):
        check_reply(reply, cluster_of("q1"), [])


def test_a_bad_reply_gets_one_retry_with_the_error_shown_then_a_candidate():
    student = ScriptedPolicyDouble(["WATCHES: READ\nWHEN: arg_never_shown\nREWRITE: READ top_result", GOOD])
    (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=["redundant_read"],
                                  replayed={"q1": list(replay(invented_read_traj(), 5))})
    assert len(student.seen) == 2 and "unknown condition 'arg_never_shown'" in student.seen[1][-1]["content"]
    assert student.seen[1][-2] == {"role": "assistant", "content": student.seen[1][-2]["content"]}
    assert cand.declared and not cand.parse_error and cand.code == "" and cand.proposal_format == "declarative"
    spec = parse_skill_md(cand.skill_md)
    assert spec.pf is not None and spec.pf.rewrite.sources == ["top_result"] and spec.error_category == cand.cluster_category
    assert "attempt 1: when: unknown condition" in cand.notes[0]
    assert "Failing steps" in student.seen[0][-1]["content"] and "READ[doc9999]" in student.seen[0][-1]["content"]


def test_a_reply_that_stays_bad_is_a_logged_refusal_that_keeps_the_reply(caplog):
    student = ScriptedPolicyDouble(["nonsense one", "nonsense two"])
    (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=[], replayed={})
    assert cand.parse_error.startswith("declaration refused: no 'KEY: value' lines")
    assert "nonsense one" in cand.raw_reply and "nonsense two" in cand.raw_reply and not cand.declared
    assert any("declared proposal for repeated_invalid_read refused" in r.message for r in caplog.records)


def test_structured_output_is_requested_only_where_asked_and_dropped_when_refused():
    student = ScriptedPolicyDouble([RuntimeError("400: response_format is not supported"), GOOD])
    (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=[], replayed={}, reply_format="json")
    assert "response_format" in student.calls[0] and "response_format" not in student.calls[1]
    assert cand.declared and any("structured output refused" in n for n in cand.notes)
    assert reply_format_for("auto", embedded=True) == "choices" and reply_format_for("auto", embedded=False) == "json"
    assert reply_format_for("json_schema", embedded=True) == "json" and reply_format_for("lines", embedded=False) == "lines"


def test_the_choices_format_asks_one_question_per_field_and_reads_the_options_named():
    replayed = {"q1": list(replay(invented_read_traj(), 5))}
    student = ScriptedPolicyDouble(["arg_not_in_results, because it was never shown",
                                    "2"])  # a bare number picks the second repair option
    (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=[], replayed=replayed,
                                  reply_format="choices")
    # every failing step is a READ: the one-option action menu is not asked
    assert len(student.seen) == 2 and all(len(m) == 2 for m in student.seen)
    assert "Options: 1) last_action_failed" in student.seen[0][-1]["content"]
    assert "1) READ best_unread_result 2) READ top_result" in student.seen[1][-1]["content"]
    assert cand.declared, cand.parse_error
    assert cand.declaration["watches"] == ["READ"] and cand.declaration["when"] == ["arg_not_in_results"]
    assert cand.declaration["rewrite"] == {"action": "READ", "arg": ["top_result"]}
    assert "WATCH: READ (the only option; not asked)" in cand.raw_reply
    mute = ScriptedPolicyDouble([], default="Hello there.")
    (none,) = propose_declarative([cluster_of("q1")], mute, existing_skill_ids=[], replayed=replayed,
                                  reply_format="choices")
    assert none.parse_error.startswith("declaration refused: missing: when, rewrite or inject")
    assert len(mute.seen) == 4  # one retry: a second interview


def test_replies_are_read_leniently_by_verb_source_or_number():
    from hasp.evolve.declarative import _action_named, _repair_named

    opts = ["READ best_unread_result", "READ top_result", "FINAL answer_span_from_evidence"]
    assert _repair_named("the agent should read the document best_unread_result", opts) == ["READ best_unread_result"]
    assert _repair_named("answer with answer_span_from_evidence", opts) == ["FINAL answer_span_from_evidence"]
    assert _repair_named("3", opts) == ["FINAL answer_span_from_evidence"]
    assert _repair_named("Let's consider the options. 1. READ best_unread_result 2. READ top_result", opts)[0] == opts[0]
    assert _action_named("It should search again", ["READ", "SEARCH"]) == ["SEARCH"]
    assert _action_named("The document id", ["READ", "SEARCH"]) == []


def test_several_samples_per_cluster_get_fresh_ids_and_duplicates_are_dropped():
    replies = ["1", "1", "1", "1", "2", "2"]  # samples 1 and 2 choose the same; sample 3 differs
    student = ScriptedPolicyDouble(replies)
    cands = propose_declarative([cluster_of("q1")], student, existing_skill_ids=["repeated_invalid_read"],
                                replayed={"q1": list(replay(invented_read_traj(), 5))}, reply_format="choices",
                                per_cluster=3, seed=0)
    assert [c.skill_id for c in cands] == ["repeated_invalid_read_2", "repeated_invalid_read_3"]
    assert cands[0].declaration != cands[1].declaration and "sample 2 declared the same" in cands[0].notes
    assert len({json.dumps(c.declaration, sort_keys=True) for c in cands}) == 2


def test_auto_asks_for_code_only_after_code_proposals_passed_review_twice():
    e = lambda d, f="code": FeedbackEntry(epoch=0, skill_id="a", category="c", decision=d, q_skill=0.5,  # noqa: E731
                                         proposal_format=f)
    assert choose_format("auto", None) == "declarative"
    assert choose_format("auto", FeedbackHistory(None, [e("admitted"), e("rejected")])) == "declarative"
    assert choose_format("auto", FeedbackHistory(None, [e("admitted"), e("ACCEPT")])) == "code"
    assert choose_format("code", None) == "code"


def test_a_declared_candidate_passes_phase_d_in_process_and_is_admitted_without_pf_py(tmp_path):
    import shutil

    from hasp.evolve.admit import admit
    from hasp.evolve.review import heuristic_review
    from hasp.pf.library import load_library

    (cand,) = propose_declarative([cluster_of("q1", "q2")], ScriptedPolicyDouble([GOOD]), existing_skill_ids=[],
                                  replayed={"q1": list(replay(invented_read_traj(), 5))})
    rep = validate_declared(cand)
    assert rep.passed and rep.q_exec == 1.0, rep.errors
    review = heuristic_review(cand, rep.q_exec, cluster_of("q1", "q2"), trigger_hit_rate=1.0)
    assert "no code" not in review.reasons
    root = tmp_path / "search"
    shutil.copytree(Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search" / "redundant-read", root / "redundant-read")
    res = admit(root, cand, review, epoch=0, cluster=cluster_of("q1", "q2"), refusals=[])
    assert res.admitted, res.reason
    folder = root / res.path
    assert not (folder / "pf.py").exists() and "pf:" in (folder / "hasp.yaml").read_text()
    lib = load_library(root)
    assert lib.load_errors == [] and type(lib.get("read_shown_result").pf).__name__ == "DeclaredPF"
    history = json.loads((root / "library_history.json").read_text())
    assert history[-1]["proposal_format"] == "declarative"


def test_real_embedded_replies():
    """Replies the embedded 135M student gave to the declarative prompts on this file's invented-READ
    cluster (recorded with its own sampling server, T=0.7): replayed through the parser they give the
    same declarations and refusals as when they were recorded — never a crash, every refusal one line."""
    files = sorted(FIXTURES.glob("*.json"))
    assert len(files) >= 8, "no saved replies"
    replayed = {t.qid: list(replay(t, 5)) for t in (invented_read_traj(), searching_traj())}
    usable = 0
    for f in files:
        rec = json.loads(f.read_text(encoding="utf-8"))
        student = ScriptedPolicyDouble(rec["replies"], default="")
        (cand,) = propose_declarative([cluster_of("q1")], student, existing_skill_ids=["redundant_read"],
                                      replayed=replayed, seed=rec["seed"], reply_format=rec["format"])
        assert (cand.declaration, cand.parse_error) == (rec["declaration"], rec["parse_error"]), f.name
        assert "\n" not in cand.parse_error
        usable += cand.declared
    assert usable >= 1
