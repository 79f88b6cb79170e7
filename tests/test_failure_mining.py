"""The small model's own loops: each rule fires on a crafted episode of that loop, stays quiet on
near misses, clusters into one group per category, and its failing steps reach the proposal prompt."""

from __future__ import annotations

import json

import pytest

from hasp.evolve.cluster import cluster_patterns, clusters_from_json, clusters_to_json
from hasp.evolve.detectors import DETECTORS, detect_failures, run_detectors
from hasp.evolve.excerpts import (EVIDENCE_KEY, FailingStep, failing_step, failing_steps_text,
                                  pick_failing_steps, shorten)
from hasp.evolve.propose import build_proposer_messages
from hasp.evolve.summarize import render_trace, summarize_failures
from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from tests.doubles import ScriptedPolicyDouble

Q = "In what year was Roholt founded?"
RESULTS = ("1. [doc0031] Roholt: Roholt is a city located in Seirngeesh, founded in 1836.\n"
           "2. [doc0077] Rohalt Systems: Rohalt Systems is a company founded by Ema Vo.")
HITS = {"n_hits": 2, "hit_ids": ["doc0031", "doc0077"]}
NOT_FOUND = "No document matches '{arg}'. READ takes a doc id like [doc0012], a result number, or a title."
NEW_RULES = ("repeated_failed_read", "repeated_empty_search", "repeated_invalid_argument",
             "repeated_unparseable_output", "answer_seen_not_given")


def act(i: int, typ: str, arg: str, obs: str = "", fb: dict | None = None) -> StepRecord:
    if fb is None:
        fb = {"final": True} if typ == "FINAL" else {"found": True, "doc_id": arg}
    a = Action(typ, arg)
    return StepRecord(index=i, raw_output=f"Action: {a.render()}", thought="t", observation=obs,
                      audit=AuditEvent(state={}, a_orig=a, a_final=a, feedback=fb))


def search(i: int, q: str = "Roholt founded", obs: str = RESULTS, fb: dict | None = None) -> StepRecord:
    return act(i, "SEARCH", q, obs, HITS if fb is None else fb)


def bad_read(i: int, arg: str) -> StepRecord:
    return act(i, "READ", arg, NOT_FOUND.format(arg=arg), {"found": False, "doc_id": None})


def unparseable(i: int, raw: str = "The founding year of Roholt is an interesting question") -> StepRecord:
    return StepRecord(index=i, raw_output=raw, parse_error="no SEARCH[...], READ[...] or FINAL[...] action",
                      observation="Your reply had no action. Answer with Thought: ... Action: ...")


def episode(steps: list[StepRecord], *, prediction: str = "", qid: str = "q1", answers=("1836",),
            question: str = Q) -> Trajectory:
    return Trajectory(qid=qid, question=question, answers=list(answers), variant="pf", steps=steps,
                      prediction=prediction, em=0.0, terminated="final" if prediction else "max_steps")


def roholt(qid: str = "q1") -> Trajectory:
    """The episode from the field: the answer is in the first results, then made-up READs."""
    return episode([search(0), bad_read(1, "roholt_history"), bad_read(2, "roholt_history"),
                    unparseable(3), bad_read(4, "doc_1836")], qid=qid)


def fired(traj: Trajectory) -> set[str]:
    return {p.category for p in run_detectors(traj)}


def test_the_roholt_loop_is_seen_by_every_rule_it_breaks():
    assert fired(roholt()) >= {"repeated_failed_read", "repeated_invalid_argument", "answer_seen_not_given"}
    assert "repeated_unparseable_output" not in fired(roholt())  # one parse error is not a loop


@pytest.mark.parametrize("name", NEW_RULES)
def test_rule_fires_on_its_loop_and_has_a_fixed_template(name):
    cases = {
        "repeated_failed_read": roholt(),
        "repeated_empty_search": episode([search(0, "Seirngeesh 1836 founding xq", "No results.",
                                                 {"n_hits": 0, "hit_ids": []}),
                                          search(1, "Roholt founding zz", "No results.", {"n_hits": 0, "hit_ids": []})]),
        "repeated_invalid_argument": episode([search(0), act(1, "READ", "Roholt history", "(closest match)...",
                                                             {"found": True, "doc_id": "doc0099"}),
                                              bad_read(2, "doc9999")]),
        "repeated_unparseable_output": episode([unparseable(0), search(1), unparseable(2)]),
        "answer_seen_not_given": episode([search(0), act(1, "FINAL", "Seirngeesh")], prediction="Seirngeesh"),
    }
    p = DETECTORS[name](cases[name])
    assert p is not None and p.category == name and p.source == "heuristic"
    other = DETECTORS[name](roholt("q2")) or DETECTORS[name](cases[name])
    assert (p.abstraction, p.trigger) == (other.abstraction, other.trigger)  # one template per rule
    steps = [FailingStep.from_dict(d) for d in p.evidence[EVIDENCE_KEY]]
    assert steps and all(s.question == Q and s.action and s.problem for s in steps)
    json.dumps(p.to_dict())


def test_repeat_rules_need_two_occurrences():
    assert not {"repeated_failed_read", "repeated_invalid_argument"} & fired(
        episode([search(0), bad_read(1, "roholt_history"), act(2, "FINAL", "1830")], prediction="1830",
                answers=["1999"]))
    assert "repeated_empty_search" not in fired(
        episode([search(0, "xq", "No results.", {"n_hits": 0, "hit_ids": []}), search(1)]))
    # budget refusals are not failed actions
    budget = {"budget_exhausted": "read"}
    assert "repeated_failed_read" not in fired(
        episode([search(0), act(1, "READ", "doc0031", "budget", budget), act(2, "READ", "doc0077", "budget", budget)]))


def test_reads_naming_a_shown_result_are_valid_arguments():
    reads = [act(1, "READ", "doc0031"), act(2, "READ", "2", fb={"found": True, "doc_id": "doc0077"}),
             act(3, "READ", "Roholt", fb={"found": True, "doc_id": "doc0031"}),
             act(4, "READ", "[DOC0077]", fb={"found": True, "doc_id": "doc0077"}),
             act(5, "READ", "2. [doc0077] Rohalt Systems: Rohalt Systems is a company",
                 fb={"found": True, "doc_id": "doc0077"}),
             act(6, "READ", "Rohalt Systems: a company", fb={"found": True, "doc_id": "doc0077"}),
             act(7, "READ", "the roholt city page", fb={"found": True, "doc_id": "doc0031"})]  # resolved to a shown one
    t = episode([search(0), *reads], answers=["1999"])
    assert "repeated_invalid_argument" not in fired(t)
    # a number beyond the last result list and a READ before any search are not valid
    t2 = episode([bad_read(0, "doc0031"), search(1), act(2, "READ", "7", "nothing", {"found": False, "doc_id": None})],
                 answers=["1999"])
    p = DETECTORS["repeated_invalid_argument"](t2)
    assert p is not None and p.evidence["args"] == ["doc0031", "7"]
    assert "no search results had been shown" in p.evidence[EVIDENCE_KEY][1]["problem"]


def test_answer_seen_rule_uses_gold_tokens_and_ignores_pf_context():
    given = episode([search(0), act(1, "FINAL", "founded in 1836")], prediction="founded in 1836")
    assert "answer_seen_not_given" not in fired(given)
    not_in_obs = episode([search(0, obs=RESULTS.replace("1836", "18360"))])
    assert "answer_seen_not_given" not in fired(not_in_obs)
    pf_hint = search(0, obs=RESULTS.replace("1836", "1900"))
    pf_hint.audit.context = ["Hint: the answer may be 1836"]
    pf_hint.observation += "\nHint: the answer may be 1836"
    assert "answer_seen_not_given" not in fired(episode([pf_hint]))
    read = episode([search(0, obs=RESULTS.replace("1836", "1900")),
                    act(1, "READ", "doc0031", "[doc0031] Roholt\n" + "x " * 200 + "It was founded in 1836."),
                    act(2, "FINAL", "1900")], prediction="1900")
    p = DETECTORS["answer_seen_not_given"](read)
    assert p.evidence["where"] == "read document" and p.evidence["gold"] == "1836"
    step = p.evidence[EVIDENCE_KEY][0]
    assert "1836" in step["seen"] and step["action"] == "FINAL[1900]" and "'1900'" in step["problem"]


def test_new_rules_quiet_on_a_clean_episode():
    clean = episode([search(0), act(1, "READ", "doc0031", "[doc0031] Roholt\nfounded in 1836"),
                     act(2, "FINAL", "1836")], prediction="1836")
    assert not fired(clean) & set(NEW_RULES)


def test_each_new_rule_clusters_into_one_group_with_support():
    trajs = [roholt(f"q{i}") for i in range(4)]
    clusters = cluster_patterns(detect_failures(trajs), existing=["repeated_search", "no_read_before_final"])
    by_cat = {c.category: c for c in clusters}
    for cat in ("repeated_failed_read", "repeated_invalid_argument", "answer_seen_not_given"):
        assert by_cat[cat].support == 4 and by_cat[cat].is_new_category, cat
    back = clusters_from_json(json.loads(json.dumps(clusters_to_json(clusters))))
    assert pick_failing_steps(back[0].patterns) == pick_failing_steps(clusters[0].patterns)


def test_failing_steps_of_a_cluster_reach_the_proposal_prompt():
    trajs = [roholt("q1"), episode([search(0), bad_read(1, "Roholt_doc"), bad_read(2, "Roholt_doc2")], qid="q2"),
             roholt("q3")]
    cluster = next(c for c in cluster_patterns(detect_failures(trajs)) if c.category == "repeated_failed_read")
    picked = pick_failing_steps(cluster.patterns, 3)
    assert [s.qid for s in picked] == ["q1", "q2", "q3"]  # distinct episodes first
    first = picked[0]
    assert first.action == "READ[roholt_history]" and first.step == 2
    assert "No document matches 'roholt_history'" in first.seen and "already failed" in first.problem
    text = failing_steps_text(cluster)
    assert text.startswith("1. Question: In what year was Roholt founded?") and "What went wrong:" in text
    user = build_proposer_messages(cluster, ["repeated_search"])[1]["content"]
    assert "The agent did: READ[roholt_history]" in user and "Last observation: No document matches" in user
    assert EVIDENCE_KEY not in user  # the raw evidence lines do not repeat the steps as JSON


def test_failing_steps_for_older_rules_and_unparseable_replies():
    t = episode([unparseable(0, "x" * 500), search(1), unparseable(2), act(3, "FINAL", "1830")], prediction="1830")
    pats = {p.category: p for p in run_detectors(t)}
    un = pats["repeated_unparseable_output"].evidence[EVIDENCE_KEY]
    assert un[0]["step"] == 2 and un[0]["seen"].startswith("1. [doc0031] Roholt")
    assert un[1]["seen"] == "" and un[1]["action"].startswith("(unparseable reply)") and len(un[1]["action"]) < 140
    # an older rule without its own excerpt gets the step its evidence names
    assert pats["no_read_before_final"].evidence[EVIDENCE_KEY][0]["action"] == "FINAL[1830]"
    assert failing_steps_text(type("C", (), {"patterns": []})()).startswith("(no concrete steps")


def test_shorten_keeps_the_focus_visible():
    text = "a " * 300 + "founded in 1836 " + "b " * 300
    out = shorten(text, 120, focus="1836")
    assert "1836" in out and len(out) <= 120 and out.startswith("...")
    assert shorten("short  text", 50) == "short text"
    assert failing_step(roholt(), 0).seen == ""  # nothing shown before the first step


def test_summarizer_trace_marks_failed_steps_and_llm_patterns_get_steps():
    trace = render_trace(roholt())
    assert "READ[roholt_history]" in trace and "[FAILED: READ opened nothing" in trace
    reply = json.dumps({"category": "made_up_doc_ids", "abstraction": "The agent reads invented ids.",
                        "trigger": "after a search", "intervention_hint": "read a listed result"})
    out = summarize_failures([roholt()], ScriptedPolicyDouble([reply]))
    steps = out.patterns[0].evidence[EVIDENCE_KEY]
    assert out.patterns[0].category == "made_up_doc_ids" and steps[0]["action"] == "READ[roholt_history]"


_READ_REPAIR = '''from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("repeated_invalid_argument")
class ReadListed(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "{watch}" and bool(ctx.get("last_search_hits"))

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.{kind}, new_action_type="READ",
                            new_action_arg=ctx["last_search_hits"][0]["id"], context_text="Read a listed result.",
                            reason="argument not among the shown results")
'''


def test_review_knows_which_repairs_fit_the_new_categories():
    from hasp.evolve.propose import parse_proposal
    from hasp.evolve.review import heuristic_review

    cluster = next(c for c in cluster_patterns(detect_failures([roholt(f"q{i}") for i in range(3)]))
                   if c.category == "repeated_invalid_argument")

    def review(watch: str, kind: str):
        code = _READ_REPAIR.replace("{watch}", watch).replace("{kind}", kind)
        return heuristic_review(parse_proposal(f"```python\n{code}```", cluster), 1.0, cluster)

    fits, watches_search = review("READ", "MODIFY_ACTION"), review("SEARCH", "MODIFY_ACTION")
    only_note = review("READ", "INJECT_CONTEXT")
    assert fits.q_trigger > watches_search.q_trigger  # the loop is in READs
    assert fits.q_intervene > only_note.q_intervene  # a note alone does not stop a made-up READ


def test_a_pf_rewrite_is_the_failing_step_of_pf_override_harmful():
    rewritten = act(1, "READ", "doc0031", "[doc0031] Roholt\nfounded in 1836")
    rewritten.audit.a_orig = Action("FINAL", "Seirngeesh")
    rewritten.audit.fired = [{"skill_id": "read_before_final", "type": "MODIFY_ACTION", "applied": True}]
    t = episode([search(0), rewritten, act(2, "READ", "doc0077")])
    (step,) = DETECTORS["pf_override_harmful"](t).evidence[EVIDENCE_KEY]
    assert step["step"] == 1 and step["action"] == "FINAL[Seirngeesh] (a PF rewrote it to READ[doc0031])"
    assert step["problem"].startswith("read_before_final rewrote FINAL[Seirngeesh] to READ[doc0031]")
