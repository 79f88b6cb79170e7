"""The harness around whole episodes: FINAL-time handler votes, the counting teacher and its
failures, the five variants, the difficulty gate, budgets and the per-step latency budget."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from doubles import (CheapPFDouble, FailingTeacherDouble, GarbageTeacherDouble, RewritingPFDouble,
                     ScriptedPolicyDouble, ScriptedTeacherDouble, SlowPolicyDouble, VotingPFDouble, library, skill)

from hasp.agent.context import EpisodeState
from hasp.agent.harness import Harness
from hasp.agent.loop import AgentConfig, episode_runner, run_episode
from hasp.agent.react import ReactEnvironment
from hasp.agent.postprocess import parse_answer_span
from hasp.records import Trajectory
from hasp.agent.variants import VARIANTS, get_variant
from hasp.config import HarnessParams
from hasp.domains.search.generator import generate_benchmark
from hasp.domains.search.retriever import BM25Retriever
from hasp.domains.search.task import score
from hasp.domains.search.tools import SearchEnvironment
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.handlers import HandlerVoter, unsearched_query
from hasp.pf.library import load_library
from hasp.pf.skill_md import PhaseSpec
from hasp.pf.teacher import CountingTeacher, TeacherError

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"
Q = "In which city was the founder of Brightwell Labs born?"


@pytest.fixture(scope="module")
def world():
    bench = generate_benchmark(7, 20)
    return bench, BM25Retriever.from_corpus(bench.corpus)


def _runner(retr, cfg, variant, hp, *, policy, library=None, teacher=None, top_k=3):
    """``episode_runner`` over BM25 tools, the way the search domain builds it."""
    return episode_runner(policy=policy, library=library, cfg=cfg, variant=get_variant(variant), params=hp,
                          make_env=lambda item: ReactEnvironment(SearchEnvironment(retr, top_k=top_k),
                                                                 max_search_calls=cfg.max_search_calls,
                                                                 max_read_calls=cfg.max_read_calls, scorer=score),
                          identity=lambda it: (it.id, it.question, it.answers), teacher=teacher)


def _episode(world, lib, variant, replies, teacher=None, **hp):
    bench, retr = world
    item = bench.questions[0]
    pol = ScriptedPolicyDouble(replies)
    run = _runner(retr, AgentConfig(max_steps=6, max_search_calls=4), variant, HarnessParams(**hp), policy=pol,
                  library=lib, teacher=teacher)
    return run(item), pol, item


# ----------------------------------------------------------------------------- handler votes
def _voter(n_votes, threshold=4, max_overrides=1, teacher=None, extra=()):
    pfs = [VotingPFDouble(f"h{i}") for i in range(n_votes)] + list(extra)
    return HandlerVoter(pfs, threshold=threshold, max_overrides=max_overrides, teacher=teacher), pfs


def test_votes_below_threshold_keep_the_final():
    v, _ = _voter(3)
    out = v.vote({"question": Q}, "Telvik")
    assert len(out.votes) == 3 and not out.overridden and out.query == ""


def test_votes_at_threshold_override_once_then_the_final_is_accepted():
    v, pfs = _voter(4)
    first = v.vote({"question": Q}, "Telvik", ["Brightwell Labs"])
    assert first.overridden and len(first.votes) == 4
    assert {x["skill_id"] for x in first.votes} == {"h0", "h1", "h2", "h3"} and "doubts Telvik" in first.votes[0]["reason"]
    assert first.query == "founder Brightwell Labs"  # the keyword not yet searched comes first
    second = v.vote({"question": Q}, "Telvik")
    assert len(second.votes) == 4 and not second.overridden  # max_final_overrides = 1
    assert all(p.asked == 2 for p in pfs)


def test_llm_handlers_are_skipped_without_teacher_and_asked_with_one():
    llm = VotingPFDouble("llm_judge", kind="llm")
    v, _ = _voter(3, extra=[llm])
    out = v.vote({"question": Q}, "Telvik")
    assert out.skipped == ["llm_judge"] and llm.asked == 0 and not out.overridden
    tw = CountingTeacher(ScriptedTeacherDouble("WRONG: the founder was born elsewhere"))
    v2, _ = _voter(3, teacher=tw, extra=[VotingPFDouble("llm_judge", kind="llm")])
    out2 = v2.vote({"question": Q}, "Telvik")
    assert out2.overridden and "llm_judge" in {x["skill_id"] for x in out2.votes} and tw.calls == 1


def test_raising_handler_is_disabled_and_contained():
    bad = VotingPFDouble("broken", raises=True)
    v, _ = _voter(4, extra=[bad])
    out = v.vote({"question": Q}, "x")
    assert out.overridden and "broken.check_final raised RuntimeError" in out.errors[0]
    assert "broken" in v.disabled
    v.vote({"question": Q}, "x")
    assert bad.asked == 1  # not asked again this episode


def test_llm_handler_whose_teacher_fails_does_not_vote_and_stays_enabled():
    tw = CountingTeacher(FailingTeacherDouble())
    v, _ = _voter(3, teacher=tw, extra=[VotingPFDouble("llm_judge", kind="llm")])
    out = v.vote({"question": Q}, "x")
    assert not out.overridden and tw.errors == 1 and "llm_judge" not in v.disabled


def test_unsearched_query_prefers_new_keywords():
    assert unsearched_query(Q, []) == "Brightwell Labs founder"
    assert unsearched_query(Q, ["Brightwell Labs"]).startswith("founder")


def test_handler_override_in_an_episode_is_audited(world):
    lib = library(*[skill(f"handler_{i}", VotingPFDouble("x"), priority=0.5) for i in range(4)])
    t, pol, item = _episode(world, lib, "pf", ["FINAL[Paris]", "FINAL[Paris]"], pf_selection="all")
    a0, a1 = t.steps[0].audit, t.steps[1].audit
    assert a0.a_orig.type == "FINAL" and a0.a_final.type == "SEARCH" and a0.handlers["overridden"]
    assert len(a0.handlers["votes"]) == 4 and a0.feedback["n_hits"] >= 0
    assert "[CHECK]" in t.steps[0].observation
    assert a1.a_final.type == "FINAL" and not a1.handlers["overridden"]  # the second FINAL stands
    assert t.terminated == "final" and t.harness.handler_overrides == 1 and t.harness.handler_votes == 8


# ----------------------------------------------------------------------------- teacher
def test_counting_teacher_sums_tokens_and_wraps_failures():
    tw = CountingTeacher(ScriptedTeacherDouble("a", "b", prompt_tokens=7, completion_tokens=2))
    assert tw.generate([{"role": "user", "content": "q"}]) == "a"
    assert tw.generate([{"role": "user", "content": "q"}]) == "b"
    assert (tw.calls, tw.prompt_tokens, tw.completion_tokens, tw.errors) == (2, 14, 4, 0)
    bad = CountingTeacher(FailingTeacherDouble())
    with pytest.raises(TeacherError, match="timed out"):
        bad.generate([{"role": "user", "content": "q"}])
    assert bad.errors == 1


def test_failing_teacher_makes_the_pf_take_its_deterministic_path():
    tw = CountingTeacher(FailingTeacherDouble())
    d = Dispatcher([RewritingPFDouble()], teacher=tw)
    res = d.dispatch({"question": Q}, "SEARCH", "Brightwell Labs founder birthplace")
    assert (res.action_type, res.arg) == ("SEARCH", "Brightwell")
    assert res.fired[0].reason == "deterministic query" and res.teacher_fallbacks == ["retrieval_failure"]
    assert not d.disabled and not res.errors and tw.errors == 1
    # a PF bug (not a teacher failure) still disables the PF
    class BuggyPFDouble(RewritingPFDouble):
        def intervene(self, ctx, action_type, arg, teacher=None):
            raise KeyError("bug")
    d2 = Dispatcher([BuggyPFDouble()], teacher=CountingTeacher(ScriptedTeacherDouble("q")))
    assert d2.dispatch({}, "SEARCH", "a b").errors and "retrieval_failure" in d2.disabled


def test_teacher_tokens_and_errors_land_on_the_trajectory(world):
    lib = library(skill("retrieval_failure", RewritingPFDouble(), priority=0.8))
    ok, _, _ = _episode(world, lib, "pf_teacher", ["SEARCH[Brightwell Labs founder]", "FINAL[x]"],
                        teacher=ScriptedTeacherDouble("Brightwell Labs", prompt_tokens=11, completion_tokens=4))
    assert ok.steps[0].audit.a_final.arg == "Brightwell Labs"
    assert ok.teacher_calls == 1 and ok.teacher_prompt_tokens == 11 and ok.teacher_completion_tokens == 4
    down, _, _ = _episode(world, lib, "pf_teacher", ["SEARCH[Brightwell Labs founder]", "FINAL[x]"],
                          teacher=FailingTeacherDouble())
    assert down.steps[0].audit.a_final.arg == "Brightwell" and down.teacher_errors == 1
    assert down.terminated == "final" and down.harness.teacher_fallbacks == 1 and not down.pf_errors
    back = Trajectory.from_dict(ok.to_dict())
    assert back == ok and back.harness.selected_pfs == ["retrieval_failure"]


# ----------------------------------------------------------------------------- variants
def test_variant_table():
    assert set(VARIANTS) == {"react", "prompt", "pf", "pf_teacher", "teacher_only"}
    assert not VARIANTS["pf"].use_teacher and VARIANTS["pf_teacher"].use_teacher
    with pytest.raises(ValueError, match="unknown agent variant"):
        get_variant("full")


def test_pf_variant_never_passes_the_teacher(world):
    lib = library(skill("retrieval_failure", RewritingPFDouble(), priority=0.8))
    teacher = ScriptedTeacherDouble("should not be used")
    t, _, _ = _episode(world, lib, "pf", ["SEARCH[Brightwell Labs founder]", "FINAL[x]"], teacher=teacher)
    assert teacher.prompts == [] and t.steps[0].audit.a_final.arg == "Brightwell" and t.teacher_calls == 0


def test_react_and_prompt_variants(world):
    lib = load_library(SEED, "search")
    r, pol, _ = _episode(world, lib, "react", ["FINAL[Paris]"])
    assert r.steps[0].audit.fired == [] and r.harness.selected_pfs == [] and "Skills to follow" not in pol.seen[0][0]["content"]
    p, pol, _ = _episode(world, lib, "prompt", ["SEARCH[Quonddas Laren spouse]", "FINAL[Paris]"],
                         max_skills_in_prompt=3)
    assert p.steps[0].audit.fired == [] and len(p.harness.prompt_skills) == 3
    assert "Skills to follow" in pol.seen[0][0]["content"]
    assert p.steps[0].audit.phases  # post_search reminders of the skills (e.g. multi-hop decomposition)
    assert "Reminder:" in pol.seen[1][-1]["content"] and "Reminder:" not in p.steps[0].observation


def test_the_variant_decides_the_pfs_and_one_master_switch_turns_skills_off(world):
    lib = load_library(SEED, "search")
    t, pol, _ = _episode(world, lib, "pf", ["SEARCH[Quonddas Laren spouse]", "FINAL[x]"])
    assert t.steps[0].audit.phases and t.harness.selected_pfs
    nopf, _, _ = _episode(world, lib, "prompt", ["FINAL[Paris]"])
    assert nopf.harness.selected_pfs == [] and nopf.steps[0].audit.fired == [] and nopf.prediction == "Paris"
    off, _, _ = _episode(world, lib, "pf", ["SEARCH[Quonddas Laren spouse]", "FINAL[Paris]"], skills_enabled=False)
    assert off.steps[0].audit.fired == [] and off.steps[0].audit.phases == [] and off.prediction == "Paris"
    assert not off.harness.skills_active and off.harness.selected_pfs == [] and off.harness.prompt_skills == []


def test_pf_variant_selects_heuristically_and_records_it(world):
    lib = load_library(SEED, "search")
    t, _, item = _episode(world, lib, "pf", ["FINAL[Paris]", "FINAL[Paris]", "FINAL[x]"])
    h = t.harness
    assert h.pf_selection_source == "heuristic" and h.pf_selection_branch == "multi_hop"
    assert "retrieval_failure" in h.selected_pfs and "premature_final" in h.selected_pfs
    assert t.steps[0].audit.fired[0]["skill_id"] == "premature_final"


def test_teacher_only_postprocesses_the_final_answer(world):
    lib = load_library(SEED, "search")
    t, _, item = _episode(world, lib, "teacher_only", ["FINAL[it is Rekethora i think]"],
                          teacher=ScriptedTeacherDouble(f"ANSWER: {'Rekethora'}"))
    assert t.prediction == "Rekethora" and t.harness.postprocess["ok"] and t.harness.postprocess["rounds"] == 1
    assert t.harness.postprocess["agent_answer"] == "it is Rekethora i think" and t.harness.selected_pfs == []
    assert t.em == float("Rekethora" in item.answers)
    retry, _, _ = _episode(world, lib, "teacher_only", ["FINAL[long answer]"],
                           teacher=ScriptedTeacherDouble("The answer is Rekethora.", "ANSWER: Rekethora"))
    assert retry.prediction == "Rekethora" and retry.harness.postprocess["rounds"] == 2 and retry.teacher_calls == 2
    junk, _, _ = _episode(world, lib, "teacher_only", ["FINAL[long answer]"], teacher=GarbageTeacherDouble())
    assert junk.prediction == "long answer" and not junk.harness.postprocess["ok"] and junk.teacher_calls == 2
    down, _, _ = _episode(world, lib, "teacher_only", ["FINAL[long answer]"], teacher=FailingTeacherDouble())
    assert down.prediction == "long answer" and down.teacher_errors == 1 and down.terminated == "final"


@pytest.mark.parametrize("reply,span", [("ANSWER: Telvik", "Telvik"), ("answer:  \"1961\" ", "1961"),
                                        ("ANSWER:", None), ("Telvik", None), ("ANSWER: a\nANSWER: b", None)])
def test_answer_span_parse(reply, span):
    assert parse_answer_span(reply) == span


# ----------------------------------------------------------------------------- difficulty gate in an episode
def test_difficulty_gate_bypasses_skills_for_easy_questions(world):
    lib = load_library(SEED, "search")
    easy, _, _ = _episode(world, lib, "pf_teacher", ["FINAL[Paris]"], teacher=ScriptedTeacherDouble("1"),
                          enable_difficulty_gating=True, difficulty_threshold=3)
    h = easy.harness
    assert (h.difficulty, h.difficulty_source, h.skills_active) == (1, "teacher", False)
    assert easy.steps[0].audit.fired == [] and easy.prediction == "Paris"
    hard, _, _ = _episode(world, lib, "pf_teacher", ["FINAL[Paris]", "FINAL[Paris]", "FINAL[x]"],
                          teacher=ScriptedTeacherDouble("4", "[]"), enable_difficulty_gating=True, difficulty_threshold=3)
    assert hard.harness.skills_active and hard.harness.pf_selection_source == "teacher"
    # the teacher picked no extra PFs: only the three mandatory ones run, and they do not touch a FINAL
    assert sorted(hard.harness.selected_pfs) == ["format_extraction_error", "relevant_content_extractor",
                                                 "retrieval_failure"]
    assert hard.steps[0].audit.a_final.type == "FINAL"
    nogate, _, _ = _episode(world, lib, "pf", ["FINAL[Paris]", "FINAL[x]", "FINAL[x]"],
                            enable_difficulty_gating=True, difficulty_threshold=5)
    assert nogate.harness.difficulty_source == "heuristic" and not nogate.harness.skills_active


# ----------------------------------------------------------------------------- budgets
def test_phase_instruction_budget_per_step(world):
    phases = {"post_search": PhaseSpec(conditions=[], text="")}
    skills = [skill(f"note_{i}", None, priority=0.1 * i,
                    phases={"post_search": PhaseSpec(conditions=["has_searched"], text=f"note {i}")}) for i in range(5)]
    skills.append(skill("never_skill", None, phases=phases))
    t, pol, _ = _episode(world, library(*skills), "prompt", ["SEARCH[Quonddas Laren]", "FINAL[x]"],
                         max_phase_instructions=2)
    assert t.steps[0].audit.phases == ["note_4:post_search", "note_3:post_search"]
    assert pol.seen[1][-1]["content"].count("Reminder:") == 2
    off, _, _ = _episode(world, library(*skills), "prompt", ["SEARCH[Quonddas Laren]", "FINAL[x]"],
                         enable_prompt_only_skills=False)
    assert off.steps[0].audit.phases == [] and off.harness.prompt_skills == []


def test_episode_wall_budget(world):
    bench, retr = world

    run = _runner(retr, AgentConfig(max_steps=10), "react", HarnessParams(timeout_seconds=0.08),
                  policy=SlowPolicyDouble(["SEARCH[a]"] * 10, delay_s=0.05), top_k=3)
    t = run(bench.questions[0])
    assert t.terminated == "timeout" and 1 <= len(t.steps) < 10
    # the default sets no wall budget: the same slow model runs the episode to its step cap
    assert HarnessParams().timeout_seconds is None
    run = _runner(retr, AgentConfig(max_steps=4), "react", HarnessParams(),
                  policy=SlowPolicyDouble(["SEARCH[a]"] * 10, delay_s=0.05))
    t = run(bench.questions[0])
    assert t.terminated == "max_steps" and len(t.steps) == 4 + 1 and not t.pf_errors  # + the answer-only turn


def test_plain_run_episode_still_accepts_pfs_directly(world):
    bench, retr = world
    q = bench.questions[0]
    t = run_episode(qid=q.id, question=q.question, answers=q.answers, policy=ScriptedPolicyDouble(["FINAL[Paris]"]),
                    env=SearchEnvironment(retr), pfs=load_library(SEED).pfs(), cfg=AgentConfig(), variant="pf")
    assert t.steps[0].audit.fired[0]["skill_id"] == "premature_final" and t.harness is None


# ----------------------------------------------------------------------------- latency
def test_dispatch_and_selection_latency_for_26_skills():
    """p50 of (dispatch + handler check + phase trimming) per step stays well under 200 µs."""
    ph = {"post_search": PhaseSpec(conditions=["has_results", "!search_empty"], text="look"),
          "pre_final": PhaseSpec(conditions=["no_read_yet"], text="read")}
    skills = [skill(f"skill_{i:02d}", CheapPFDouble(f"skill_{i:02d}"), priority=i / 30, phases=ph,
                    keywords=["founder", "city"]) for i in range(26)]
    h = Harness(library(*skills), get_variant("pf"), HarnessParams(pf_selection="all", max_phase_instructions=2))
    ep = h.episode(Q)
    assert len(ep.dispatcher.pfs) == 26 and len(ep.rules) == 52
    state = EpisodeState(question=Q, max_steps=8)
    state.search_count, state.last_search_hits = 1, [{"id": "d1", "title": "Brightwell Labs"}]
    times = []
    for i in range(400):
        state.step_count = i % 8
        ctx = state.to_ctx("thought")
        t0 = time.perf_counter()
        audit = ep.decide(ctx, state, "SEARCH", "Brightwell Labs founder")
        ep.reminders(state, audit)
        times.append(time.perf_counter() - t0)
    p50 = statistics.median(times)
    print(f"harness step p50 = {p50 * 1e6:.1f} µs")
    assert p50 < 200e-6, f"p50 {p50 * 1e6:.0f} µs"


def test_episodes_share_the_wiring_of_a_selected_set_but_not_its_counters():
    """The dispatch plan, handlers and phase rules are built once per selected PF set; fire counts,
    modify counts and disabled PFs start fresh in every episode."""
    lib = load_library(SEED, "search")
    h = Harness(lib, get_variant("pf"), HarnessParams(pf_selection="all"))
    a = h.episode("Who founded Brightwell Labs?")
    ctx = EpisodeState(question="Who founded Brightwell Labs?", max_steps=6).to_ctx()
    a.dispatcher.dispatch(ctx, "FINAL", "Paris")  # premature_final rewrites it and counts a fire
    assert a.dispatcher.fire_counts and a.dispatcher.modify_counts
    b = h.episode("Which river flows through the birthplace of Thentor Laren?")
    assert b.dispatcher._plan is a.dispatcher._plan and b.rules is a.rules
    assert b.dispatcher.fire_counts == {} and b.dispatcher.modify_counts == {} and b.dispatcher.disabled == {}
    assert [p.skill_id for p in b.dispatcher.pfs] == lib.ids
    expected = h.phase_rules.restricted(lib.ids)
    assert {p: [r.label for r in rs] for p, rs in b.rules.by_phase.items()} == \
           {p: [r.label for r in rs] for p, rs in expected.by_phase.items()}
