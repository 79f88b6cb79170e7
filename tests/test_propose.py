"""Phase C: proposer prompt, tolerant reply parsing, candidate cap, feedback history."""

from __future__ import annotations

import json

import pytest
from doubles import ReplyDouble, ScriptedPolicyDouble

from hasp.evolve.cluster import Cluster, cluster_patterns
from hasp.evolve.detectors import _TEMPLATES, FailurePattern
from hasp.evolve.propose import (
    STEP_CONTEXT_FIELDS,
    Candidate,
    FeedbackEntry,
    FeedbackHistory,
    build_proposer_messages,
    parse_proposal,
    propose_candidates,
)
from hasp.pf.skill_md import parse_skill_md


def make_cluster(cat: str = "no_read_before_final", n: int = 3) -> Cluster:
    a, t, h = _TEMPLATES.get(cat, _TEMPLATES["no_read_before_final"])
    ps = [FailurePattern(cat, a, t, h, qid=f"q{i}", evidence={"answer": f"ans{i}"}) for i in range(n)]
    (c,) = cluster_patterns(ps, ["query_dedup"])
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

GOOD_REPLY = f'''Here is my skill.
```markdown
---
skill_id: read_before_final
name: read-before-final
description: Stops the agent from answering from snippets; it must read the top hit first.
error_category: no_read_before_final
priority: 0.7
---
## When it fires
On FINAL when nothing has been read yet.

## What it does
Turns the FINAL into READ of the first search hit.
```

```python
{GOOD_CODE}```
'''


def test_parse_well_formed_reply():
    c = parse_proposal(GOOD_REPLY, make_cluster(), epoch=2)
    assert c.skill_id == "read_before_final" and c.parse_error == "" and c.epoch == 2
    assert c.code.strip() == GOOD_CODE.strip()
    spec = parse_skill_md(c.skill_md)
    assert spec.skill_id == "read_before_final" and spec.priority == 0.7
    assert spec.description.startswith("Stops the agent") and "Turns the FINAL" in spec.body
    assert c.cluster_category == "no_read_before_final" and c.raw_reply == GOOD_REPLY
    assert not any("synthesized" in n for n in c.notes)
    assert Candidate.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_reply_without_python_block_gets_empty_code_but_a_valid_skill_md():
    reply = ("```markdown\nThis skill makes the agent read a document before the final answer, "
             "because answers from snippets are often wrong.\n```\nI think it is good.")
    c = parse_proposal(reply, make_cluster())
    assert c.code == ""
    assert "no python code block" in c.parse_error
    spec = parse_skill_md(c.skill_md)  # synthesized frontmatter around the model's body
    assert spec.skill_id == "no_read_before_final"
    assert spec.description == make_cluster().representative.abstraction
    assert "read a document before the final answer" in spec.body
    assert any("frontmatter" in n for n in c.notes)


def test_junk_reply_never_fabricates_code():
    c = parse_proposal("SEARCH[SEARCH[SEARCH[", make_cluster())
    assert c.code == "" and c.parse_error
    assert parse_skill_md(c.skill_md).skill_id == "no_read_before_final"


def test_broken_frontmatter_is_repaired_and_code_id_wins():
    reply = ("```markdown\n---\nskill_id: Bad Id!\nname: x\npriority: high\nphases: {nonsense: 1}\n"
             "description: Read first, answer later, every single time.\n---\nBody text here.\n```\n"
             f"```python\n{GOOD_CODE}```")
    c = parse_proposal(reply, make_cluster())
    spec = parse_skill_md(c.skill_md)
    assert c.skill_id == spec.skill_id == "read_before_final"  # from @register_pf
    assert spec.description == "Read first, answer later, every single time."
    assert spec.priority == 0.5 and spec.phases == {} and "Body text here." in spec.body
    assert c.parse_error == ""


def test_unterminated_python_block_is_still_taken_verbatim():
    reply = f"```python\n{GOOD_CODE}"  # the model ran out of tokens before closing the fence
    c = parse_proposal(reply, make_cluster())
    assert c.code.strip() == GOOD_CODE.strip()


def test_copy_of_prompt_example_is_not_a_proposal():
    msgs = build_proposer_messages(make_cluster(), [])
    example = msgs[0]["content"].split("```python\n", 1)[1].split("```", 1)[0]
    c = parse_proposal(f"```python\n{example}```", make_cluster())
    assert c.code == "" and "example" in c.parse_error


@pytest.mark.parametrize("forms", [("SEARCH[query]", "READ[doc_id]", "FINAL[answer]"), ("FINAL[answer]",),
                                   ("FINAL[program]",), ("CONVERT[quantity]", "FINAL[answer]")])
def test_the_prompt_example_is_a_skill_that_passes_phase_d_on_the_tasks_own_actions(forms):
    """A task without SEARCH is shown an example over its FINAL, never a SEARCH rule that cannot fire there."""
    from hasp.evolve.validate import validate_candidate

    msgs = build_proposer_messages(make_cluster(), [], action_forms=forms)
    example = msgs[0]["content"].split("```python\n", 1)[1].split("```", 1)[0]
    names = tuple(f.split("[", 1)[0] for f in forms)
    assert ('"SEARCH"' in example) == ("SEARCH" in names)
    rep = validate_candidate(example, action_types=names)
    assert rep.passed, rep.errors
    c = parse_proposal(f"```python\n{example}```", make_cluster())
    assert c.code == "" and "example" in c.parse_error


def test_prompt_states_interface_fields_library_and_history(tmp_path):
    hist = FeedbackHistory(tmp_path / "feedback.jsonl")
    hist.append(FeedbackEntry(1, "read_first_v0", "no_read_before_final", "rejected", 0.31,
                              ["should_activate is constant (fires always or never)"]))
    hist.append({"epoch": 1, "skill_id": "dup_query_guard", "category": "repeated_search",
                 "decision": "admitted", "q_skill": 0.81, "reasons": ["accepted"]})
    msgs = build_proposer_messages(make_cluster(), ["query_dedup", "premature_final"], hist)
    system, user = msgs[0]["content"], msgs[1]["content"]
    for kw in ("new_action_type", "new_action_arg", "context_text", "reason", "skill_id"):
        assert kw in system
    assert "Never call a language model" in system
    assert all(f in system for f in STEP_CONTEXT_FIELDS)
    assert "query_dedup" in user and "premature_final" in user
    assert "read_first_v0" in user and "REJECTED" in user and "constant" in user
    assert "dup_query_guard" in user
    # same-category history comes first
    assert user.index("read_first_v0") < user.index("dup_query_guard")
    assert "no_read_before_final" in user and "3 failed episodes" in user


def test_feedback_history_jsonl_roundtrip_and_torn_line(tmp_path):
    path = tmp_path / "fb" / "feedback.jsonl"
    h = FeedbackHistory(path)
    h.append(FeedbackEntry(0, "a_skill", "cat_a", "rejected", 0.2, ["bad"]))
    h.append(FeedbackEntry(1, "b_skill", "cat_b", "admitted", 0.9, []))
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"epoch": 2, "skill_id": "torn')  # a crash mid-append
    back = FeedbackHistory.load(path)
    assert [e.skill_id for e in back] == ["a_skill", "b_skill"]
    back.save()
    assert len(FeedbackHistory.load(path)) == 2
    assert FeedbackHistory.load(tmp_path / "missing.jsonl").entries == []
    # library_history.json entries convert too
    e = FeedbackEntry.from_dict({"epoch": 3, "skill_id": "x_skill", "category": "c", "decision": "rejected",
                                 "review": {"q_skill": 0.4}, "reasons": "too broad", "extra": 1})
    assert e.q_skill == 0.4 and e.reasons == ["too broad"]


def test_propose_candidates_caps_and_uses_temperature():
    clusters = [make_cluster(cat) for cat in ("no_read_before_final", "repeated_search", "premature_final",
                                              "query_too_broad", "format_mismatch", "partial_answer")]
    chat = ScriptedPolicyDouble([GOOD_REPLY, "nonsense", RuntimeError("server down"), "x", "y", "z"])
    cands = propose_candidates(clusters, chat, existing_skill_ids=["query_dedup"], epoch=4, max_candidates=3)
    assert len(cands) == 3 and len(chat.calls) == 3
    assert all(c["temperature"] == 0.7 for c in chat.calls)
    assert cands[0].code and cands[0].parse_error == ""
    assert cands[1].code == "" and cands[1].cluster_category == "repeated_search"
    assert cands[2].code == "" and "server down" in cands[2].parse_error
    assert all(c.epoch == 4 for c in cands)


def test_propose_candidates_prefers_map_chat():
    class BatchedPolicyDouble(ScriptedPolicyDouble):
        def map_chat(self, convs, **kw):
            self.batched = (len(convs), kw)
            return [ReplyDouble(GOOD_REPLY, 0, 0) for _ in convs]

    chat = BatchedPolicyDouble([])
    cands = propose_candidates([make_cluster()], chat, existing_skill_ids=[])
    assert chat.batched[0] == 1 and chat.batched[1]["temperature"] == 0.7
    assert cands[0].skill_id == "read_before_final"


@pytest.mark.parametrize("cat,expected", [("Stale Evidence!", "stale_evidence"), ("9lives", "fix_9lives"),
                                          ("", "candidate_skill")])
def test_skill_id_from_category(cat, expected):
    from hasp.evolve.propose import skill_id_from_category

    assert skill_id_from_category(cat) == expected
