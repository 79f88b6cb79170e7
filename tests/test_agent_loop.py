"""Parser tolerance and the harness loop, driven by a scripted policy double over real BM25 data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doubles import ScriptedPolicyDouble

from hasp.agent.loop import AgentConfig, run_episode
from hasp.agent.loop import load_prompts
from hasp.agent.parser import PLACEHOLDERS, ParsedAction, ParseFailure, parse_action
from hasp.records import Trajectory
from hasp.domains.search.generator import generate_benchmark
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.task import score
from hasp.domains.search.tools import SearchEnvironment
from hasp.pf.library import load_library

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"


@pytest.mark.parametrize("text,expected", [
    ("Thought: find it\nAction: SEARCH[Lahurn Holdings founder]", ("SEARCH", "Lahurn Holdings founder")),
    ("search(Lahurn)", ("SEARCH", "Lahurn")),
    ("Action: Read[doc0012]", ("READ", "doc0012")),
    ("Final Answer: Keinkanholt", ("FINAL", "Keinkanholt")),
    ("I think so. FINAL[ \"1951\" ]", ("FINAL", "1951")),
    ("Answer: Tom\nmore text", ("FINAL", "Tom")),
    ("SEARCH: who founded X\nREAD[1]", ("SEARCH", "who founded X")),
    ("Action: FINAL[(1+1+1)*8]", ("FINAL", "(1+1+1)*8")),
    ("FINAL[\\frac{1}{2}]", ("FINAL", "\\frac{1}{2}")),
    ("SEARCH[Ana Morro born", ("SEARCH", "Ana Morro born")),
    ("thought: sure\naction: final [ Telvik ]", ("FINAL", "Telvik")),
    ("Action: FINAL[Telvik  \n", ("FINAL", "Telvik")),
    ("Give FINAL[answer] once sure.\nAction: SEARCH[Ana Morro]", ("SEARCH", "Ana Morro")),
])
def test_parser_tolerates_sloppy_formats(text, expected):
    r = parse_action(text)
    assert isinstance(r, ParsedAction), r
    assert (r.type, r.arg) == expected


@pytest.mark.parametrize("text", ["", "I am not sure what to do.", "SEARCH[]", "Thought: hmm"])
def test_parser_failure_is_a_value_not_an_exception(text):
    assert isinstance(parse_action(text), ParseFailure)


@pytest.mark.parametrize("text,reason", [
    # prose about an answer is not an answer: it must not count as answered
    ("I think the answer is somewhere in the documents.", "prose"),
    ("Thought: no steps are left.\n\nThe answer is: no steps are left.", "prose"),
    ("The answer is: [Thentor Laren]", "prose"),
    # the prompt's own placeholder copied back
    ("Thought: I need a document.\nAction: READ a found document or give FINAL[answer].", "placeholder"),
    ("Action: SEARCH[query]", "placeholder"),
    # a sentence cut by the token budget, and an argument left open before more text
    ("Action: FINAL[The Hollow Saints is a folk band formed in Teholt in 1993. The lead singer of", "runs on"),
    ("Action: FINAL[Telvik\nThought: let me check", "not closed"),
])
def test_parser_refuses_what_the_model_did_not_commit_to(text, reason):
    r = parse_action(text)
    assert isinstance(r, ParseFailure), r
    assert reason in r.reason


def test_every_placeholder_the_prompts_write_is_refused():
    """A placeholder added to an instruction must be added to the parser's list, or a reply that
    copies the instruction becomes an action again."""
    prompts = load_prompts()
    written = {m.group(1).strip().lower() for k, v in prompts.items() if k != "demo" and isinstance(v, str)
               for m in re.finditer(r"(?:SEARCH|READ|FINAL)\[([^\]]+)\]", v)}
    assert written and written <= PLACEHOLDERS, written - PLACEHOLDERS


@pytest.fixture(scope="module")
def world():
    bench = generate_benchmark(7, 20)
    return bench, BM25Retriever.from_corpus(bench.corpus)


def _run(world, replies, use_pfs=True, **cfg):
    bench, retr = world
    q = bench.questions[0]
    lib = load_library(SEED)
    pol = ScriptedPolicyDouble(replies)
    t = run_episode(qid=q.id, question=q.question, answers=q.answers, policy=pol,
                    env=SearchEnvironment(retr, top_k=3), pfs=lib.pfs() if use_pfs else [],
                    cfg=AgentConfig(**cfg), variant="pf", scorer=score)
    return q, t, pol


def test_premature_final_is_rewritten_and_audited(world):
    q, t, pol = _run(world, ["Thought: easy\nAction: FINAL[Paris]", "FINAL[Paris]", f"FINAL[{'x'}]"])
    a0 = t.steps[0].audit
    assert a0.a_orig.type == "FINAL" and a0.a_final.type == "SEARCH" and a0.was_modified
    assert a0.fired[0]["skill_id"] == "premature_final" and a0.mode == "MODIFY_ACTION"
    assert a0.feedback["n_hits"] > 0  # Δ_t: the rewritten search really ran
    # step 2: FINAL without READ -> insufficient_exploration turns it into a READ of the best hit
    a1 = t.steps[1].audit
    assert a1.a_final.type == "READ" and a1.a_final.arg == a0.feedback["hit_ids"][0]
    assert "READ" in pol.seen[2][-2]["content"]  # the model sees the action that was executed
    assert t.terminated == "final"


def test_without_pfs_the_final_stands(world):
    q, t, _ = _run(world, ["FINAL[Paris]"], use_pfs=False)
    assert len(t.steps) == 1 and t.steps[0].audit.fired == [] and t.prediction == "Paris"
    assert t.em == 0.0


def test_unparseable_output_is_recorded_and_recoverable(world):
    bench, _ = world
    q = bench.questions[0]
    _, t, pol = _run(world, ["blah blah", f"SEARCH[{q.question}]", f"FINAL[{q.answers[0]}]"],
                     use_pfs=False)
    assert t.steps[0].parse_error and t.steps[0].audit is None
    assert "your reply had no action" in pol.seen[1][-1]["content"]
    assert t.prediction == q.answers[0] and t.em == 1.0 and t.f1 == 1.0


def test_budgets_and_max_steps(world):
    _, t, _ = _run(world, ["SEARCH[a b]", "SEARCH[c d]", "SEARCH[e f]"], use_pfs=False,
                   max_steps=3, max_search_calls=2, final_on_budget=False)
    assert t.terminated == "max_steps" and len(t.steps) == 3 and t.prediction == ""
    assert t.steps[2].audit.feedback == {"budget_exhausted": "search"}


def test_out_of_steps_gets_one_answer_only_turn(world):
    bench, _ = world
    q = bench.questions[0]
    _, t, pol = _run(world, ["SEARCH[a b]", "SEARCH[c d]", f"Thought: done\nAction: FINAL[{q.answers[0]}]"],
                     max_steps=2)
    assert t.terminated == "budget_final" and t.prediction == q.answers[0] and t.em == 1.0
    last = t.steps[-1]
    assert len(t.steps) == 3 and last.audit is None and "no steps are left" in pol.seen[-1][-1]["content"]
    # an answer-only turn that does not answer leaves the episode unanswered, with the reason
    _, t2, _ = _run(world, ["SEARCH[a b]", "SEARCH[c d]", "SEARCH[e f]"], max_steps=2)
    assert t2.terminated == "max_steps" and t2.prediction == "" and "after the budget" in t2.steps[-1].parse_error
    # nor does prose that talks about an answer: the turn is a counted parse error, not an answer
    _, t3, _ = _run(world, ["SEARCH[a b]", "SEARCH[c d]", "Thought: no steps are left.\nThe answer is: no steps are left."],
                    max_steps=2)
    assert t3.terminated == "max_steps" and t3.prediction == "" and "prose" in t3.steps[-1].parse_error


def test_trajectory_roundtrips_through_json(world):
    _, t, _ = _run(world, ["FINAL[Paris]", "READ[1]", "FINAL[x]"])
    back = Trajectory.from_dict(t.to_dict())
    assert back == t and back.audits()[0].was_modified


def test_replay_rebuilds_the_contexts_the_pfs_saw(world):
    """The replay steps the state with what the environment recorded in Δ_t, through the methods the loop
    calls: every context it rebuilds is the one a PF was asked with, titles and read documents included."""
    from doubles import ContextRecordingPFDouble

    from hasp.agent.replay import replay

    bench, retr = world
    q = next(q for q in bench.questions if q.hops >= 2)
    recorder = ContextRecordingPFDouble()
    pol = ScriptedPolicyDouble([f"SEARCH[{q.question}]", "READ[1]", "I am not sure", "READ[doc9999]",
                                "SEARCH[zzzz qqqq]", "READ[2]", "FINAL[x]"])
    t = run_episode(qid=q.id, question=q.question, answers=q.answers, policy=pol, env=SearchEnvironment(retr),
                    pfs=[recorder], cfg=AgentConfig(max_steps=8, max_search_calls=2, max_read_calls=3),
                    variant="pf", scorer=score)
    replayed = [s.ctx for s in replay(t, 8)]
    assert len(replayed) == len(recorder.seen) == 6 and replayed == recorder.seen
    assert recorder.seen[1]["last_search_hits"][0]["title"] and recorder.seen[2]["last_read"]
