"""Phase E review (decision order, LLM parsing, heuristic reviewer) and Phase F admission."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from doubles import (ConstraintRefusingEndpointDouble, OpenAIEndpointDouble, PlainTeacherDouble,
                     ScriptedPolicyDouble, StructuredTeacherDouble)
from skills_ref import validate as validate_agent_skill
from traj_builders import scripted_traj

from hasp.evolve import admit as admit_mod
from hasp.evolve.admit import admit, next_version, read_history, record_decision, snapshot
from hasp.evolve.cluster import Cluster, cluster_patterns
from hasp.evolve.detectors import _TEMPLATES, FailurePattern
from hasp.evolve.propose import Candidate, parse_proposal
from hasp.evolve.review import (
    REVIEW_SCHEMA,
    Review,
    admission_bar,
    code_facts,
    composite,
    heuristic_review,
    parse_review_reply,
    passes_admission,
    review_candidate,
    takes_json_schema,
    trigger_hit_rate,
)
from hasp.evolve.skill_check import check_folder
from hasp.pf.library import load_library, scan_versions
from hasp.pf.skill_md import load_skill, parse_skill_md, write_skill_folder
from hasp.records import Trajectory


def make_cluster(cat: str = "no_read_before_final", n: int = 4, existing=("query_dedup",)) -> Cluster:
    a, t, h = _TEMPLATES[cat]
    ps = [FailurePattern(cat, a, t, h, qid=f"q{i}", evidence={}) for i in range(n)]
    (c,) = cluster_patterns(ps, list(existing))
    return c


GOOD_CODE = '''from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("read_before_final")
class ReadBeforeFinal(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and not ctx.get("has_read", False) and ctx.get("search_count", 0) > 0

    def intervene(self, ctx, action_type, arg, teacher=None):
        hits = ctx.get("last_search_hits", [])
        if hits:
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ",
                                new_action_arg=hits[0]["id"], reason="read before answering")
        return Intervention(type=InterventionType.INJECT_CONTEXT,
                            context_text="Read a document before answering.", reason="no hits to read")
'''

TRIVIAL_CODE = '''from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("read_before_final")
class Trivial(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return True

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.NOOP)
'''

SKILL_MD = """---
skill_id: read_before_final
name: read-before-final
description: Stops the agent from answering from snippets; it must read the top hit first.
error_category: no_read_before_final
---
## When it fires
On FINAL when nothing has been read yet, after at least one search returned documents to open.

## What it does
Turns the FINAL into READ of the first search hit so the answer is grounded in a document.
"""


def cand(code: str = GOOD_CODE, md: str = SKILL_MD) -> Candidate:
    reply = f"```markdown\n{md}```\n```python\n{code}```"
    return parse_proposal(reply, make_cluster(), epoch=1)


def llm_reply(c=0.9, t=0.8, i=0.8, e=0.9, v=0.7, decision: str | None = "ACCEPT") -> str:
    lines = [f"Q_concept: {c}", "Concept feedback: fine", f"Q_trigger: {t}", f"Q_intervene: {i}",
             f"Q_exec: {e}", f"Q_val: {v}"]
    if decision:
        lines.append(f"DECISION: {decision}")
    lines.append("FEEDBACK: looks reasonable.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- decision order

def test_composite_weights():
    assert composite(1, 0, 0, 0, 0) == 0.25 and composite(0, 0, 0, 0, 1) == 0.15
    assert composite(1, 1, 1, 1, 1) == 1.0


def test_hard_reject_beats_teacher_accept_and_skips_the_teacher():
    teacher = ScriptedPolicyDouble([llm_reply(decision="ACCEPT")])
    r = review_candidate(cand(), 0.25, make_cluster(), teacher)
    assert r.decision == "REJECT" and r.decided_by == "hard_reject"
    assert teacher.seen == []  # not consulted
    assert any("hard reject" in x for x in r.reasons)


def test_literal_decision_line_beats_thresholds():
    """One band off its scores, the teacher's decision stands (a full contradiction is not a review:
    test_a_decision_its_own_scores_contradict_is_not_a_review)."""
    low = review_candidate(cand(), 1.0, make_cluster(), ScriptedPolicyDouble([llm_reply(0.45, 0.45, 0.45, 0.45, 0.45, "ACCEPT")]))
    assert low.reviewer == "llm" and low.decision == "ACCEPT" and low.decided_by == "explicit"
    assert low.q_skill < 0.6
    high = review_candidate(cand(), 1.0, make_cluster(), ScriptedPolicyDouble([llm_reply(0.55, 0.55, 0.55, 0.55, 0.55, "REJECT")]))
    assert high.reviewer == "llm" and high.decision == "REJECT" and high.q_skill > 0.6


def test_threshold_fallback_without_decision_line():
    def run(score):
        return review_candidate(cand(), 1.0, make_cluster(),
                                ScriptedPolicyDouble([llm_reply(score, score, score, 1.0, score, None)]))

    # q_exec in the composite is the Phase-D score (1.0), not the teacher's
    r = run(0.7)
    assert r.decided_by == "threshold" and r.q_exec == 1.0 and r.llm_scores["exec"] == 1.0
    assert r.q_skill == composite(0.7, 0.7, 0.7, 1.0, 0.7) and r.decision == "ACCEPT"
    assert run(0.4).decision == "REVISE"  # 0.8*0.4 + 0.2 = 0.52
    assert run(0.1).decision == "REJECT"  # 0.28


def test_parse_review_reply_variants():
    scores, decision, fb, problem = parse_review_reply(
        "**Q_concept**: 8/10\nQ_trigger = 0.7\nQ_intervention: 0.6\nQ_executability: 90\nQ_val: .5\n"
        "DECISION: revise\nOVERALL FEEDBACK: narrow the trigger")
    assert problem == "" and decision == "REVISE" and fb == "narrow the trigger"
    assert scores == {"concept": 0.8, "trigger": 0.7, "intervene": 0.6, "exec": 0.9, "val": 0.5}
    # echoing the template's alternatives is not a decision
    _, decision, _, _ = parse_review_reply(llm_reply(decision="[ACCEPT / REVISE / REJECT]"))
    assert decision is None
    scores, _, _, problem = parse_review_reply("Q_concept: 0.9\nDECISION: ACCEPT")
    assert scores is None and "missing scores" in problem


def test_malformed_reply_is_retried_once():
    teacher = ScriptedPolicyDouble(["I like it!", llm_reply(decision="ACCEPT")])
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert r.reviewer == "llm" and r.decision == "ACCEPT" and len(teacher.seen) == 2
    assert "format" in teacher.seen[1][-1]["content"]


def test_twice_malformed_falls_back_to_heuristic_with_reason(caplog):
    teacher = ScriptedPolicyDouble(["I like it!", TimeoutError("slow"), "never used"])
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert r.reviewer == "heuristic" and len(teacher.seen) == 2
    assert "missing scores" in r.fallback_reason and "TimeoutError" in r.fallback_reason
    assert "heuristic reviewer used" in caplog.text


def json_verdict(c=0.9, t=0.8, i=0.8, e=0.9, v=0.7, decision="ACCEPT", feedback="fine") -> str:
    return json.dumps({"q_concept": c, "q_trigger": t, "q_intervene": i, "q_exec": e, "q_val": v,
                       "decision": decision, "feedback": feedback})


def test_teacher_verdict_is_asked_for_under_the_json_schema():
    teacher = StructuredTeacherDouble(json_verdict(0.8, 0.7, 0.6, 0.5, 0.4, "REVISE", "narrow the trigger"))
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert teacher.calls[0]["json_schema"] == REVIEW_SCHEMA and teacher.calls[0]["temperature"] == 0.0
    assert "one JSON object" in teacher.seen[0][-1]["content"]
    assert r.reviewer == "llm" and r.decision == "REVISE" and r.decided_by == "explicit"
    assert r.llm_scores == {"concept": 0.8, "trigger": 0.7, "intervene": 0.6, "exec": 0.5, "val": 0.4}
    assert r.q_exec == 1.0 and r.feedback == "narrow the trigger"
    assert "verdict asked for under the review JSON schema" in r.reasons
    props = REVIEW_SCHEMA["properties"]
    assert props["decision"]["enum"] == ["ACCEPT", "REVISE", "REJECT"]
    assert all(props[f"q_{k}"] == {"type": "number", "minimum": 0.0, "maximum": 1.0}
               for k in ("concept", "trigger", "intervene", "exec", "val"))
    assert set(REVIEW_SCHEMA["required"]) == set(props)


def test_a_verdict_that_reviews_nothing_is_not_the_models_review():
    """What the embedded Gemma-270M teacher wrote under the schema: the prompt's example word for word,
    then (with no example) the numbers 1 to 5 and a feedback of ': '. Neither is a review."""
    from hasp.prompts import prompt

    example = prompt("hasp.evolve", "review", "example")
    counting = json_verdict(1, 2, 3, 4, 5, "ACCEPT", ": ")
    teacher = StructuredTeacherDouble(example, counting)
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert r.reviewer == "heuristic" and len(teacher.calls) == 2
    assert "attempt 1: not a review: it repeats the prompt's example verdict" in r.fallback_reason
    assert "attempt 2: JSON verdict scores outside [0, 1]: q_trigger=2" in r.fallback_reason
    assert "not a review of this candidate" in teacher.seen[1][-1]["content"]
    blank = StructuredTeacherDouble(json_verdict(feedback=": "), json_verdict(feedback="3, 4"))
    r = review_candidate(cand(), 1.0, make_cluster(), blank)
    assert r.reviewer == "heuristic" and "its feedback ':' holds no word" in r.fallback_reason
    # a short real verdict is still the model's
    r = review_candidate(cand(), 1.0, make_cluster(), StructuredTeacherDouble(json_verdict(feedback="fine")))
    assert r.reviewer == "llm"


def test_a_decision_its_own_scores_contradict_is_not_a_review():
    """Gemma-270M under the schema wrote ACCEPT with scores 1, 0, 0, 0, 0: a verdict that contradicts
    itself is retried, then left to the heuristic; a decision one band off its scores stays the model's."""
    wrong = StructuredTeacherDouble(json_verdict(1.0, 0.0, 0.0, 0.0, 0.0, "ACCEPT", "good trigger"),
                                    json_verdict(0.9, 0.9, 0.9, 0.9, 0.9, "REJECT", "bad trigger"))
    r = review_candidate(cand(), 1.0, make_cluster(), wrong)
    assert r.reviewer == "heuristic" and len(wrong.calls) == 2
    assert "attempt 1: not a review: its decision ACCEPT contradicts its own scores (they make a REJECT)" \
        in r.fallback_reason
    assert "attempt 2: not a review: its decision REJECT contradicts its own scores (they make a ACCEPT)" \
        in r.fallback_reason
    strict = review_candidate(cand(), 1.0, make_cluster(), StructuredTeacherDouble(
        json_verdict(0.7, 0.7, 0.7, 0.7, 0.7, "REVISE", "narrow the trigger to FINAL")))
    assert strict.reviewer == "llm" and strict.decision == "REVISE"


def test_unparseable_json_verdict_is_retried_then_falls_back_recorded(caplog):
    teacher = StructuredTeacherDouble('{"q_concept": 0.9, "q_trigger": ', '{"q_concept": 0.9, "decision": "ACCEPT"}')
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert len(teacher.calls) == 2 and all(c["json_schema"] == REVIEW_SCHEMA for c in teacher.calls)
    assert "JSON" in teacher.seen[1][-1]["content"] and teacher.seen[1][-2]["role"] == "assistant"
    assert r.reviewer == "heuristic" and r.decided_by == "threshold"
    assert r.fallback_reason.startswith("teacher verdict unusable")
    assert "attempt 1: invalid JSON" in r.fallback_reason
    assert "attempt 2: JSON verdict lacks scores: trigger, intervene, exec, val" in r.fallback_reason
    assert r.reasons[0] == r.fallback_reason and "teacher" not in r.feedback
    assert r.raw_reply.startswith('{"q_concept": 0.9, "decision"')
    assert "heuristic reviewer used" in caplog.text


def test_broken_json_then_valid_json_is_an_llm_review_that_says_it_was_retried():
    teacher = StructuredTeacherDouble("Sure! {not json}", json_verdict(decision="ACCEPT"))
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert r.reviewer == "llm" and r.decision == "ACCEPT" and len(teacher.calls) == 2
    assert any(x.startswith("teacher retried after attempt 1: invalid JSON") for x in r.reasons)


def test_teacher_without_json_schema_gets_the_line_format():
    teacher = PlainTeacherDouble(llm_reply(decision="ACCEPT"))
    assert not takes_json_schema(teacher) and takes_json_schema(StructuredTeacherDouble())
    r = review_candidate(cand(), 1.0, make_cluster(), teacher)
    assert r.reviewer == "llm" and teacher.calls[0]["json_schema"] is None
    assert "exactly these seven lines" in teacher.seen[0][-1]["content"]
    # a fenced JSON verdict still parses when the teacher writes one unasked
    scores, decision, _, problem = parse_review_reply("```json\n" + json_verdict(decision="reject") + "\n```")
    assert problem == "" and decision == "REJECT" and scores["concept"] == 0.9


def _client(url: str, **kw):
    from hasp.llm.client import LLMClient, LLMConfig

    return LLMClient(LLMConfig(base_url=url, model="m", timeout_s=10.0, max_retries=0, **kw))


def test_llm_client_sends_the_review_schema_in_the_request_body():
    with OpenAIEndpointDouble(reply=lambda body: json_verdict(decision="ACCEPT")) as ep:
        client = _client(ep.base_url)
        r = review_candidate(cand(), 1.0, make_cluster(), client)
    fmt = ep.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == REVIEW_SCHEMA
    assert r.reviewer == "llm" and r.decision == "ACCEPT" and client.usage.constrained == 1


def test_an_endpoint_refusing_the_schema_is_answered_unconstrained_and_counted():
    with ConstraintRefusingEndpointDouble(("json_schema",), message="JSON schema error: unsupported",
                                          reply=lambda body: json_verdict(0.3, 0.3, 0.3, 0.9, 0.3, "REJECT")) as ep:
        client = _client(ep.base_url, dialect="llamacpp")
        r = review_candidate(cand(), 1.0, make_cluster(), client)
    assert "json_schema" in ep.bodies[0] and "json_schema" not in ep.bodies[1]
    assert client.constraint_fallbacks == 1 and r.reviewer == "llm" and r.decision == "REJECT"


# --------------------------------------------------------------------------- heuristic reviewer

def test_heuristic_scores_good_pf_above_trivial_pf():
    cl = make_cluster()
    good = review_candidate(cand(GOOD_CODE), 1.0, cl, None)
    trivial = review_candidate(cand(TRIVIAL_CODE), 1.0, cl, None)
    assert good.reviewer == trivial.reviewer == "heuristic"
    assert good.q_trigger > 0.8 and trivial.q_trigger < 0.1
    assert good.q_intervene > 0.8 and trivial.q_intervene < 0.1
    assert good.q_skill > trivial.q_skill + 0.3
    assert good.decision == "ACCEPT" and trivial.decision == "REJECT"
    assert trivial.decided_by == "explicit"  # vetoed, not just below threshold
    assert any("constant" in x for x in trivial.reasons) and any("NOOP" in x for x in trivial.reasons)


def test_heuristic_penalises_modify_on_every_action_and_unknown_fields():
    broad = GOOD_CODE.replace('action_type == "FINAL" and not ctx.get("has_read", False)',
                              'not ctx.get("hasRead", False)')
    f = code_facts(broad)
    assert f.unknown_fields == ["hasRead"] and not f.trigger_checks_action
    good = heuristic_review(cand(GOOD_CODE), 1.0, make_cluster())
    bad = heuristic_review(cand(broad), 1.0, make_cluster())
    assert bad.q_trigger < good.q_trigger and bad.q_intervene < good.q_intervene
    assert any("rewrites any action" in x for x in bad.reasons)


def test_heuristic_vetoes_model_calls_in_should_activate():
    code = GOOD_CODE.replace('return action_type == "FINAL"',
                             'return teacher_client.chat([]) and action_type == "FINAL"').replace(
        "teacher_client", "teacher")
    r = heuristic_review(cand(code), 1.0, make_cluster())
    assert r.decision == "REJECT" and any("model/IO" in x for x in r.reasons)


def test_heuristic_val_uses_trigger_hit_rate():
    cl = make_cluster()
    hi = heuristic_review(cand(), 1.0, cl, trigger_hit_rate=1.0)
    lo = heuristic_review(cand(), 1.0, cl, trigger_hit_rate=0.0)
    assert hi.q_val == 1.0 and lo.q_val == 0.0 and hi.q_skill - lo.q_skill == pytest.approx(0.15)


# the kind of description a 135M student wrote in a demo run, which the heuristic once accepted at 0.9
INCOHERENT = ("The original edit of the text was made by the user. Please ensure that your edit has the "
              "same meaning as the original one.")


def with_description(text: str, code: str = GOOD_CODE, cluster: Cluster | None = None) -> Candidate:
    md = SKILL_MD.replace("Stops the agent from answering from snippets; it must read the top hit first.", text)
    return parse_proposal(f"```markdown\n{md}```\n```python\n{code}```", cluster or make_cluster(), epoch=1)


def test_incoherent_description_falls_below_both_admission_bars():
    cl = make_cluster(n=6)  # full support: everything but the description scores like a good skill
    r = heuristic_review(with_description(INCOHERENT, cluster=cl), 1.0, cl, trigger_hit_rate=1.0)
    assert r.q_skill < admission_bar(False) and r.q_skill < admission_bar(True)
    assert not passes_admission(r, is_new_category=False) and not passes_admission(r, is_new_category=True)
    assert r.decision == "REVISE" and r.decided_by == "threshold"
    assert "description does not name the failure 'no_read_before_final'" in r.reasons
    assert "description does not say what the skill does" in r.reasons
    assert "does not say what the skill does" in r.feedback  # the student is told what to fix
    assert any("capped" in x for x in r.reasons)
    assert r.q_trigger > 0.8 and r.q_intervene > 0.8  # the code is not what was marked down


def test_a_possessive_s_does_not_name_the_failure():
    """A demo proposal's description that named nothing passed at Q_skill 0.88 because "user's" gave
    the token "s", which the failure's words held too ("the agent's action")."""
    cl = make_cluster("pf_override_harmful", n=6)
    text = ("The original edit of the text was made by the user. Please ensure that your edit has the same "
            "formatting as the original text. A repair is given by the user's own words.")
    r = heuristic_review(with_description(text, cluster=cl), 1.0, cl, trigger_hit_rate=1.0)
    assert "description does not name the failure 'pf_override_harmful'" in r.reasons
    assert any("capped" in x for x in r.reasons) and not passes_admission(r, is_new_category=True)


def test_incoherent_description_of_a_declared_pf_is_marked_down_too():
    cl = make_cluster(n=6)
    decl = {"watches": ["FINAL"], "when": ["!has_read"],
            "rewrite": {"action": "READ", "arg": "top_result"}, "reason": "read first"}
    md = SKILL_MD.replace("Stops the agent from answering from snippets; it must read the top hit first.", INCOHERENT)
    declared = Candidate(skill_id="read_before_final", skill_md=md, code="", cluster_category=cl.category,
                         raw_reply="", declaration=decl, proposal_format="declarative")
    r = heuristic_review(declared, 1.0, cl, trigger_hit_rate=1.0)
    assert r.q_skill < admission_bar(False) and "description does not say what the skill does" in r.reasons
    good = heuristic_review(Candidate(**{**declared.to_dict(), "skill_md": SKILL_MD}), 1.0, cl, trigger_hit_rate=1.0)
    assert good.q_skill >= admission_bar(True) and not [x for x in good.reasons if "description" in x]


def test_coherent_description_keeps_its_score():
    cl = make_cluster(n=6)
    r = heuristic_review(with_description(
        "Turns a FINAL given before any document was read into a READ of the top search hit.", cluster=cl),
        1.0, cl, trigger_hit_rate=1.0)
    assert r.q_skill >= admission_bar(True) and r.decision == "ACCEPT"
    assert r.q_skill == composite(r.q_concept, r.q_trigger, r.q_intervene, r.q_exec, r.q_val)  # not capped
    assert not [x for x in r.reasons if "description" in x or "capped" in x]


def test_a_description_that_says_only_half_loses_some_concept_credit():
    cl = make_cluster(n=6)
    full = heuristic_review(with_description(SKILL_MD.split("description: ")[1].split("\n")[0], cluster=cl), 1.0, cl)
    # names the failure (snippets) but no action the skill watches or takes, nor its kind of repair
    half = heuristic_review(with_description("Helps whenever the agent relies on snippets alone.", cluster=cl),
                            1.0, cl)
    assert "description does not say what the skill does" in half.reasons
    assert not any("does not name the failure" in x for x in half.reasons)
    assert half.q_concept < full.q_concept and not any("capped" in x for x in half.reasons)


def _traj(qid: str, actions: list[tuple[str, str]]) -> Trajectory:
    return scripted_traj(qid, actions)


def test_trigger_hit_rate_replays_failed_episodes():
    no_read = _traj("a", [("SEARCH", "Ana Morro"), ("FINAL", "Telvik")])
    fine = _traj("b", [("SEARCH", "Ana Morro"), ("READ", "d0"), ("FINAL", "Telvik")])

    def sa(ctx, action_type, arg):
        return action_type == "FINAL" and not ctx["has_read"]

    assert trigger_hit_rate(sa, [no_read, fine]) == 0.5
    assert trigger_hit_rate(lambda *a: 1 / 0, [no_read]) == 0.0  # raising counts as not firing
    assert trigger_hit_rate(sa, []) == 0.0


def test_admission_bar_and_gate():
    assert admission_bar(True) == 0.75 and admission_bar(False) == 0.60
    r = Review(0.7, 0.7, 0.7, 1, 0.7, 0.745, "ACCEPT", "", "heuristic")
    assert passes_admission(r, is_new_category=False) and not passes_admission(r, is_new_category=True)


def test_the_review_bars_are_the_evolve_params():
    """evolve.exec_threshold / new_group_threshold / same_group_threshold decide, not constants."""
    from hasp.config import EvolveParams
    from hasp.evolve.gate import Evidence, refusals

    lax = EvolveParams(exec_threshold=0.2, new_group_threshold=0.7, same_group_threshold=0.8)
    teacher = ScriptedPolicyDouble([llm_reply(decision="ACCEPT")])
    assert review_candidate(cand(), 0.25, make_cluster(), teacher).decided_by == "hard_reject"
    r = review_candidate(cand(), 0.25, make_cluster(), teacher, evolve=lax)
    assert r.decided_by == "explicit" and teacher.seen  # 0.25 clears a 0.2 bar: the teacher decides
    assert heuristic_review(cand(), 0.25, make_cluster(), evolve=lax).decided_by != "hard_reject"
    assert admission_bar(True, lax) == 0.7 and admission_bar(False, lax) == 0.8
    r = Review(0.7, 0.7, 0.7, 1, 0.7, 0.745, "ACCEPT", "", "heuristic")
    assert passes_admission(r, is_new_category=True, evolve=lax)
    assert not passes_admission(r, is_new_category=False, evolve=lax)
    new_group = make_cluster()
    assert new_group.is_new_category
    c = cand()
    assert refusals(Evidence(candidate=c, cluster=new_group, review=r), ("teacher",)) != []
    assert refusals(Evidence(candidate=c, cluster=new_group, review=r, evolve=lax), ("teacher",)) == []


# --------------------------------------------------------------------------- admission

def accept(q: float = 0.9) -> Review:
    return Review(q, q, q, 1.0, q, q, "ACCEPT", "ok", "heuristic", decided_by="threshold")


SEED_MD = """---
skill_id: seed_skill
name: seed-skill
description: A trusted seed skill used by the tests.
version: 3
---
Body.
"""
SEED_PF = '''from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("seed_skill")
class Seed(ProgramFunction):
    def should_activate(self, ctx, action_type, arg):
        return False

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention()
'''


@pytest.fixture
def lib_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills" / "search"
    write_skill_folder(root / "seed-skill", parse_skill_md(SEED_MD))
    (root / "seed-skill" / "pf.py").write_text(SEED_PF)
    return root


def test_admit_versions_v1_then_v2_and_writes_metadata(lib_root):
    cl = make_cluster()
    r1 = admit(lib_root, cand(), accept(), epoch=1, cluster=cl)
    assert r1.admitted and r1.version == 1 and r1.path == "generated/read-before-final-v1"
    folder = lib_root / r1.path
    assert sorted(p.name for p in folder.iterdir()) == ["SKILL.md", "hasp.yaml", "metadata.json", "pf.py"]
    assert load_skill(folder).version == 1
    assert validate_agent_skill(folder) == [] and check_folder(folder).ok  # other tools and HASP both load it
    assert (folder / "pf.py").read_text() == GOOD_CODE
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["epoch"] == 1 and meta["review"]["q_skill"] == 0.9 and meta["cluster"]["support"] == 4
    assert meta["timestamp"] and meta["cluster"]["category"] == "no_read_before_final"

    r2 = admit(lib_root, cand(), accept(), epoch=2, cluster=cl)
    assert r2.admitted and r2.version == 2
    assert load_skill(lib_root / r2.path).version == 2
    assert (lib_root / r1.path).exists()  # old version stays for replay
    assert next_version(lib_root, "read_before_final") == 3


def test_admit_refuses_a_candidate_without_description_and_a_typo_key(lib_root):
    c = cand()
    c.skill_md = c.skill_md.replace("description: Stops", "description: ''\nx_was: Stops")
    r = admit(lib_root, c, accept(), epoch=1, cluster=make_cluster())
    assert not r.admitted and "unknown key 'x_was'" in r.reason
    c.skill_md = cand().skill_md.replace("description: Stops the agent from answering from snippets; it must "
                                         "read the top hit first.", "description: ''")
    r = admit(lib_root, c, accept(), epoch=1, cluster=make_cluster())
    assert not r.admitted and "no description" in r.reason


def test_admit_version_continues_after_seed_version(lib_root):
    md = SKILL_MD.replace("read_before_final", "seed_skill")
    code = GOOD_CODE.replace("read_before_final", "seed_skill")
    c = parse_proposal(f"```markdown\n{md}```\n```python\n{code}```", make_cluster())
    r = admit(lib_root, c, accept(), epoch=1, cluster=make_cluster())
    assert r.admitted and r.version == 4  # seed SKILL.md says version 3
    assert scan_versions(lib_root)["seed_skill"][-1][0] == 4


def test_history_records_rejections_too(lib_root):
    cl = make_cluster()
    rejected = Review(0.2, 0.05, 0.05, 1.0, 0.04, 0.3, "REJECT", "trivial", "heuristic",
                      reasons=["should_activate is constant"], decided_by="explicit")
    r = admit(lib_root, cand(TRIVIAL_CODE), rejected, epoch=3, cluster=cl)
    assert not r.admitted and "review decision REJECT" in r.reason
    assert not (lib_root / "generated" / "read-before-final-v1").exists()
    below_bar = Review(0.7, 0.7, 0.7, 1.0, 0.7, 0.745, "ACCEPT", "", "heuristic")
    r2 = admit(lib_root, cand(), below_bar, epoch=3, cluster=cl)  # cl is a new group: bar 0.75
    assert not r2.admitted and "below the new-group bar" in r2.reason
    no_code = cand(code="")
    r3 = admit(lib_root, no_code, accept(), epoch=3, cluster=cl)
    assert not r3.admitted and "no PF code" in r3.reason
    ok = admit(lib_root, cand(), accept(), epoch=3, cluster=cl)
    hist = read_history(lib_root)
    assert [h["decision"] for h in hist] == ["rejected", "rejected", "rejected", "admitted"]
    assert hist[0]["review"]["q_trigger"] == 0.05 and "should_activate is constant" in hist[0]["reasons"]
    assert hist[0]["q_skill"] == 0.3 and hist[0]["epoch"] == 3 and hist[0]["version"] is None
    assert hist[3]["version"] == 1 and hist[3]["path"] == ok.path


def test_record_decision_is_append_only_and_atomic(lib_root, monkeypatch):
    record_decision(lib_root, {"skill_id": "a", "decision": "rejected"})
    record_decision(lib_root, {"skill_id": "b", "decision": "admitted"})
    assert [h["skill_id"] for h in read_history(lib_root)] == ["a", "b"]

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(admit_mod.os, "replace", boom)
    with pytest.raises(OSError):
        record_decision(lib_root, {"skill_id": "c"})
    monkeypatch.undo()
    assert [h["skill_id"] for h in read_history(lib_root)] == ["a", "b"]  # old file intact
    assert not [p for p in lib_root.iterdir() if p.name.endswith(".tmp")]


def test_library_cap_refuses_new_ids_but_allows_new_versions(lib_root):
    cl = make_cluster()
    r = admit(lib_root, cand(), accept(), epoch=1, cluster=cl, max_library_size=1)  # seed_skill fills it
    assert not r.admitted and "library is full" in r.reason
    md = SKILL_MD.replace("read_before_final", "seed_skill")
    code = GOOD_CODE.replace("read_before_final", "seed_skill")
    c = parse_proposal(f"```markdown\n{md}```\n```python\n{code}```", cl)
    assert admit(lib_root, c, accept(), epoch=1, cluster=cl, max_library_size=1).admitted


def test_crash_mid_write_leaves_nothing_visible(lib_root, monkeypatch):
    real_replace = os.replace

    def crash(src, dst):
        if Path(dst).name.startswith("read-before-final-v"):
            raise OSError("killed")
        return real_replace(src, dst)

    monkeypatch.setattr(admit_mod.os, "replace", crash)
    with pytest.raises(OSError):
        admit(lib_root, cand(), accept(), epoch=1, cluster=make_cluster())
    gen = lib_root / "generated"
    assert list(gen.iterdir()) == []  # the temp folder was cleaned up
    assert read_history(lib_root) == []  # no decision claimed for a folder that does not exist


def test_kill_mid_write_leftover_temp_dir_is_ignored(lib_root, monkeypatch):
    """A hard kill skips the cleanup: the half-written temp folder must stay invisible."""
    def crash(src, dst):
        raise KeyboardInterrupt("SIGKILL stand-in")

    monkeypatch.setattr(admit_mod.os, "replace", crash)
    monkeypatch.setattr(admit_mod, "_discard_tmp", lambda p: None)
    with pytest.raises(KeyboardInterrupt):
        admit(lib_root, cand(), accept(), epoch=1, cluster=make_cluster())
    monkeypatch.undo()
    leftovers = list((lib_root / "generated").iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".tmp-")
    assert (leftovers[0] / "SKILL.md").exists()  # it is a complete-looking skill folder, yet…

    lib = load_library(lib_root, "search")
    try:
        assert lib.ids == ["seed_skill"] and lib.load_errors == []
    finally:
        lib.close()
    assert "read_before_final" not in scan_versions(lib_root)
    # the next admission is still v1
    r = admit(lib_root, cand(), accept(), epoch=1, cluster=make_cluster())
    assert r.admitted and r.version == 1


def test_snapshot_copies_active_versions(lib_root, tmp_path):
    cl = make_cluster()
    admit(lib_root, cand(), accept(), epoch=1, cluster=cl)
    admit(lib_root, cand(), accept(), epoch=2, cluster=cl)
    dest = lib_root / "snapshots" / "epoch_2"
    snapshot(lib_root, dest)
    assert (dest / "seed-skill" / "pf.py").exists()
    assert (dest / "generated" / "read-before-final-v2" / "pf.py").exists()
    assert not (dest / "generated" / "read-before-final-v1").exists()
    assert len(json.loads((dest / "library_history.json").read_text())) == 2
    # the snapshot folder does not become a skill of the live library
    assert set(scan_versions(lib_root)) == {"seed_skill", "read_before_final"}
    snapshot(lib_root, dest)  # re-running an epoch replaces the snapshot
    assert {p.name for p in (lib_root / "snapshots").iterdir()} == {"epoch_2"}


def test_the_review_is_of_the_tasks_own_actions():
    """A rewrite into a user task's tool is a valid rewrite there (not in search), and the teacher is told
    the task's actions, not the search agent's."""
    from hasp.evolve.review import build_reviewer_messages, heuristic_review

    code = GOOD_CODE.replace('new_action_type="READ"', 'new_action_type="CONVERT"')
    forms = ("CONVERT[quantity]", "FINAL[answer]")
    in_task = heuristic_review(cand(code), 1.0, make_cluster(), action_forms=forms)
    in_search = heuristic_review(cand(code), 1.0, make_cluster())
    assert in_task.q_intervene > in_search.q_intervene
    system = build_reviewer_messages(cand(code), make_cluster(), 1.0, action_forms=forms)[0]["content"]
    assert "CONVERT[quantity] and FINAL[answer]" in system and "SEARCH[query]" not in system
    search_system = build_reviewer_messages(cand(), make_cluster(), 1.0)[0]["content"]
    assert "SEARCH[query], READ[doc_id] and FINAL[answer]" in search_system
