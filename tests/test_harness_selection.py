"""Selection layers of the harness (App. B.6): params, question cues, difficulty gate,
SkillSelector, PFSelector, phase conditions and phase-instruction trimming."""

from __future__ import annotations

from pathlib import Path

import pytest
from doubles import (FailingTeacherDouble, GarbageTeacherDouble, RewritingPFDouble, ScriptedTeacherDouble,
                     VotingPFDouble, library, skill)

from hasp.agent.context import EpisodeState
from hasp.config import HarnessParams, ParamsError, load_params
from hasp.pf.conditions import ConditionEnv, compile_condition, SEARCH_CONDITIONS
from hasp.pf.difficulty import assess_difficulty, heuristic_difficulty, parse_difficulty
from hasp.pf.library import load_library
from hasp.pf.phases import PhaseRules
from hasp.pf.question import QuestionFeatures
from hasp.pf.selection import PFSelector, SkillSelector
from hasp.pf.skill_md import PhaseSpec, SkillFormatError, parse_skill_md, write_skill_folder
from hasp.pf.teacher import CountingTeacher

ROOT = Path(__file__).resolve().parents[1]
MULTI = "In which city was the founder of the company that employs Meinmam Girton born?"
FACTOID = "Who founded Brightwell Labs?"
COMPUTE = "How many years passed between the founding of Brightwell Labs and Telvik?"


# ----------------------------------------------------------------------------- params
def test_params_yaml_has_a_valid_harness_section():
    hp = load_params(ROOT / "params.yaml").harness
    assert hp.handler_vote_threshold == 4 and hp.max_final_overrides == 1
    assert hp.mandatory_pfs == ["retrieval_failure", "format_extraction_error", "relevant_content_extractor"]


@pytest.mark.parametrize("key,value", [("harness.difficulty_threshold", 6), ("harness.pf_top_k", -1),
                                       ("harness.pf_selection", "random"), ("harness.timeout_seconds", 0),
                                       ("harness.mandatory_pfs", ["Bad-Id"]), ("harness.no_such_knob", 1)])
def test_bad_harness_values_fail_naming_the_key(key, value):
    with pytest.raises(ParamsError, match=key.split(".")[1]):
        load_params(ROOT / "params.yaml", {key: value})


@pytest.mark.parametrize("key", ["mandatory_pfs", "light_pfs", "decomposition_pfs", "entity_pfs"])
def test_an_unknown_pf_id_in_params_is_one_warning_naming_the_key(key, caplog):
    """The lists only boost: a user library without the seed ids runs, with one warning per list."""
    from hasp.agent import harness as h
    from hasp.agent.variants import get_variant

    lib = load_library(ROOT / "hasp" / "skills" / "search")
    try:
        hp = load_params(ROOT / "params.yaml", {f"harness.{key}": ["premature_final", "no_such_skill"]}).harness
        h._WARNED.clear()
        with caplog.at_level("WARNING", logger="hasp.agent.harness"):
            h.Harness(lib, get_variant("pf"), hp)
            h.Harness(lib, get_variant("pf"), hp)
        lines = [r.getMessage() for r in caplog.records if "no_such_skill" in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith(f"harness.{key}: skill id(s) no_such_skill are not in the "
                                                       "search library at ") and "boosts the others only" in lines[0]
        assert h.check_pf_ids(load_params(ROOT / "params.yaml").harness, lib) == []  # the shipped ids all exist
    finally:
        lib.close()


def test_only_skills_restricts_the_library_to_the_named_ids():
    from hasp.agent.harness import Harness
    from hasp.agent.variants import get_variant

    lib = _pf_library()
    hp = HarnessParams(only_skills=["negation_oversight"], pf_selection="all")
    assert list(Harness(lib, get_variant("pf"), hp).pf_by_id) == ["negation_oversight"]
    with pytest.raises(ParamsError, match="only_skills"):
        load_params(ROOT / "params.yaml", {"harness.only_skills": ["Not An Id"]})


# ----------------------------------------------------------------------------- question cues
def test_question_kinds():
    assert QuestionFeatures.of(MULTI).kind == "multi_hop"
    assert QuestionFeatures.of(FACTOID).kind == "factoid"
    assert QuestionFeatures.of(COMPUTE).kind == "computation"
    # a comparison needs two look-ups (a multi-hop branch with entity PFs), not arithmetic
    assert QuestionFeatures.of("Who is older, Ann Smith or Bob Jones?").kind == "multi_hop"
    assert QuestionFeatures.of("Which film came out first, Free Guy or Jaws?").kind == "multi_hop"
    assert QuestionFeatures.of("How many years separate the births of Ann and Bob?").kind == "computation"
    assert QuestionFeatures.of("Which film was not directed by Ana Morro?").negation


# ----------------------------------------------------------------------------- difficulty gate
@pytest.mark.parametrize("reply,expected", [("3", 3), (" 5.\n", 5), ("1", 1), ("0", None), ("6", None),
                                            ("3/5", None), ("Difficulty: 4 because", None), ("", None)])
def test_difficulty_reply_is_parsed_strictly(reply, expected):
    assert parse_difficulty(reply) == expected


def test_heuristic_difficulty_orders_questions():
    easy, hard = heuristic_difficulty(QuestionFeatures.of(FACTOID)), heuristic_difficulty(QuestionFeatures.of(MULTI))
    assert 1 <= easy < hard <= 5


def test_difficulty_sources():
    q = QuestionFeatures.of(MULTI)
    ok = assess_difficulty(MULTI, q, CountingTeacher(ScriptedTeacherDouble("2")))
    assert (ok.score, ok.source) == (2, "teacher")
    bad = assess_difficulty(MULTI, q, CountingTeacher(GarbageTeacherDouble()))
    assert bad.source == "heuristic" and "unparseable" in bad.note and bad.score == heuristic_difficulty(q)
    tw = CountingTeacher(FailingTeacherDouble())
    down = assess_difficulty(MULTI, q, tw)
    assert down.source == "heuristic" and "teacher error" in down.note and tw.errors == 1
    assert assess_difficulty(MULTI, q, None).note == "no teacher"


# ----------------------------------------------------------------------------- SkillSelector
def test_skill_selector_ranks_by_mode_and_keywords_and_caps():
    lib = library(
        skill("alpha_skill", keywords=["founder", "born"], priority=0.1),
        skill("beta_skill", keywords=["river"], priority=0.9),
        skill("gamma_skill", modes=["computation"], keywords=["founder"], priority=0.9),
        skill("delta_skill", modes=["multi_hop"], priority=0.2),
    )
    sel = SkillSelector(lib.skills)
    q = QuestionFeatures.of(MULTI)
    ranked = sel.rank(MULTI, q)
    scores = {s.skill_id: sc for sc, s in ranked}
    assert scores["alpha_skill"] == pytest.approx(1.0)  # mode 'all' + both keywords
    assert scores["beta_skill"] == pytest.approx(0.5)  # mode only
    assert scores["gamma_skill"] == pytest.approx(0.5)  # wrong mode, keyword hit
    assert scores["delta_skill"] == pytest.approx(0.5)  # mode matches the question kind
    assert ranked[0][1].skill_id == "alpha_skill"
    assert [s.skill_id for s in sel.select(MULTI, q, 2)][0] == "alpha_skill" and len(sel.select(MULTI, q, 2)) == 2
    assert sel.select(MULTI, q, 0) == []
    # a skill that neither matches the mode nor a keyword is never shown
    assert "gamma_skill" not in {s.skill_id for _, s in sel.rank(FACTOID, QuestionFeatures.of(FACTOID))}


# ----------------------------------------------------------------------------- PFSelector
def _pf_library():
    return library(
        skill("retrieval_failure", RewritingPFDouble(), priority=0.8),
        skill("premature_final", VotingPFDouble("x"), priority=0.9),
        skill("insufficient_exploration", VotingPFDouble("x"), priority=0.85),
        skill("decompose_complex_question", VotingPFDouble("x"), priority=0.6),
        skill("wrong_entity_confusion", VotingPFDouble("x"), priority=0.55),
        skill("iterative_refinement", VotingPFDouble("x"), priority=0.5),
        skill("negation_oversight", VotingPFDouble("x"), priority=0.45),
        skill("prompt_only_skill", None, priority=0.99),
    )


def _selector(**kw):
    hp = HarnessParams(**kw)
    return PFSelector(_pf_library().skills, mandatory=hp.mandatory_pfs, light=hp.light_pfs,
                      decomposition=hp.decomposition_pfs, entity=hp.entity_pfs, top_k=hp.pf_top_k,
                      mode=hp.pf_selection)


def test_pf_selector_heuristic_boosts_the_named_lists_and_ranks_every_other_pf(caplog):
    with caplog.at_level("DEBUG", logger="hasp.pf.selection"):
        sel = _selector()
    assert sel.mandatory == ("retrieval_failure",)  # the two other mandatory ids are simply absent
    assert "format_extraction_error is not in this library" in caplog.text
    assert sel.unlisted == ("negation_oversight",)  # no list names it: ranked on every branch
    comp = sel.select(COMPUTE, QuestionFeatures.of(COMPUTE))
    assert comp.ids == ("retrieval_failure", "negation_oversight") and comp.source == "heuristic"
    assert comp.branch == "computation"
    fact = sel.select(FACTOID, QuestionFeatures.of(FACTOID))
    assert fact.ids == ("premature_final", "insufficient_exploration", "retrieval_failure", "negation_oversight")
    multi = sel.select(MULTI, QuestionFeatures.of(MULTI))
    assert set(multi.ids) == {"premature_final", "insufficient_exploration", "retrieval_failure",
                              "decompose_complex_question", "wrong_entity_confusion", "iterative_refinement",
                              "negation_oversight"}
    assert "prompt_only_skill" not in multi.ids and "decompose_complex_question" not in fact.ids
    capped = _selector(pf_top_k=1).select(MULTI, QuestionFeatures.of(MULTI))
    assert capped.ids == ("premature_final", "retrieval_failure")  # mandatory never counts against K
    capped = _selector(pf_top_k=1).select(COMPUTE, QuestionFeatures.of(COMPUTE))
    assert capped.ids == ("retrieval_failure", "negation_oversight")  # the boosted lists come first


def test_a_library_of_only_user_skills_is_selectable_with_default_params():
    """A library none of whose ids the seed lists name: every PF ranked, so they fire by default."""
    lib = library(skill("unit_guard", VotingPFDouble("x"), priority=0.5),
                  skill("city_check", VotingPFDouble("x"), keywords=["founded"], priority=0.4))
    hp = HarnessParams()
    sel = PFSelector(lib.skills, mandatory=hp.mandatory_pfs, light=hp.light_pfs, top_k=1)
    assert sel.select(FACTOID, QuestionFeatures.of(FACTOID)).ids == ("city_check",)  # keyword match ranks first
    assert set(PFSelector(lib.skills).select(MULTI, QuestionFeatures.of(MULTI)).ids) == {"unit_guard", "city_check"}


def test_pf_selector_keeps_evolved_skills_live_on_every_branch():
    """A skill evolution admitted is named by no branch list; without this rule the heuristic never
    selected it, so the val gate measured a library in which the candidate never ran."""
    from dataclasses import replace

    evolved = replace(skill("read_shown_result", VotingPFDouble("x"), priority=0.5), generated=True)
    lib = _pf_library()
    sel = PFSelector([*lib.skills, evolved], mandatory=("retrieval_failure",), light=("premature_final",), top_k=2)
    for question in (COMPUTE, FACTOID, MULTI):
        assert "read_shown_result" in sel.select(question, QuestionFeatures.of(question)).ids, question
    assert "read_shown_result" not in PFSelector(lib.skills, light=("premature_final",)).candidates


def test_pf_selector_teacher_top_k_with_mandatory():
    sel = _selector(pf_top_k=2)
    t = CountingTeacher(ScriptedTeacherDouble('["negation_oversight", "decompose_complex_question"]'))
    got = sel.select(MULTI, QuestionFeatures.of(MULTI), t)
    assert got.source == "teacher"
    assert got.ids == ("retrieval_failure", "decompose_complex_question", "negation_oversight")
    assert "retrieval_failure" not in t.inner.prompts[0].split("Candidate modules")[1].split("Pick")[0]
    fenced = sel.select(MULTI, QuestionFeatures.of(MULTI),
                        CountingTeacher(ScriptedTeacherDouble('```json\n["negation_oversight"]\n```')))
    assert fenced.ids == ("retrieval_failure", "negation_oversight")


@pytest.mark.parametrize("reply", ['["negation_oversight", "made_up_skill"]', "negation_oversight",
                                   '{"ids": ["negation_oversight"]}',
                                   '["negation_oversight", "wrong_entity_confusion", "iterative_refinement"]',
                                   '["negation_oversight", "negation_oversight"]'])
def test_pf_selector_rejects_unusable_teacher_replies(reply):
    got = _selector(pf_top_k=2).select(MULTI, QuestionFeatures.of(MULTI), CountingTeacher(ScriptedTeacherDouble(reply)))
    assert got.source == "heuristic" and "unparseable" in got.note and "retrieval_failure" in got.ids


def test_pf_selector_teacher_failure_and_all_mode():
    tw = CountingTeacher(FailingTeacherDouble())
    got = _selector().select(MULTI, QuestionFeatures.of(MULTI), tw)
    assert got.source == "heuristic" and "teacher error" in got.note and tw.errors == 1
    everything = _selector(pf_selection="all").select(COMPUTE, QuestionFeatures.of(COMPUTE))
    assert everything.source == "all" and len(everything.ids) == 7


# ----------------------------------------------------------------------------- conditions
def _env(**state):
    st = EpisodeState(question=MULTI, max_steps=6)
    for k, v in state.items():
        setattr(st, k, v)
    return ConditionEnv(st, QuestionFeatures.of(MULTI), pre_final_step_threshold=3)


def test_named_and_json_conditions():
    c = lambda cond: compile_condition(cond, SEARCH_CONDITIONS, "t")  # noqa: E731
    assert c("no_read_yet")(_env()) and not c("no_read_yet")(_env(read_count=1))
    assert c("!no_read_yet")(_env(read_count=1))
    assert c("search_empty")(_env(search_count=1, empty_results=True))
    assert not c("search_empty")(_env(search_count=0, empty_results=False))
    assert c("pre_final_step")(_env(step_count=2)) and not c("pre_final_step")(_env(step_count=1))
    assert c("repeated_query")(_env(queries=["Ana Morro birthplace", "Ana Morro birthplace city"]))
    assert c("similar_titles")(_env(last_search_hits=[{"id": "1", "title": "Holor Textiles"},
                                                      {"id": "2", "title": "Holar Textiles"}]))
    assert not c("similar_titles")(_env(last_search_hits=[{"id": "1", "title": "Holor Textiles"},
                                                          {"id": "2", "title": "Telvik"}]))
    ge2 = c({"field": "search_count", "op": ">=", "value": 2})
    assert ge2(_env(search_count=2)) and not ge2(_env(search_count=1))
    either = c({"any": ["has_read", {"not": "multi_hop_question"}]})
    assert not either(_env()) and either(_env(read_count=1))


@pytest.mark.parametrize("cond,msg", [("no_such_condition", "unknown condition 'no_such_condition'"),
                                      ({"field": "secret", "op": "==", "value": 1}, "unknown field"),
                                      ({"field": "read_count", "op": "~", "value": 1}, "unknown operator"),
                                      (3, "a condition is")])
def test_invalid_conditions_are_format_errors(cond, msg):
    with pytest.raises(SkillFormatError, match=msg):
        compile_condition(cond, SEARCH_CONDITIONS, "x/SKILL.md: phases.pre_final.conditions")


def test_unknown_condition_is_reported_at_library_load(tmp_path):
    root = tmp_path / "search"
    write_skill_folder(root / "bad-skill", parse_skill_md(
        "---\nskill_id: bad_skill\ndescription: d\nphases:\n  pre_final:\n    conditions: [no_raed_yet]\n"
        "    text: read first\n---\nbody\n"))
    lib = load_library(root, "search")
    assert lib.ids == [] and "unknown condition 'no_raed_yet'" in lib.load_errors[0]
    assert "bad-skill/hasp.yaml" in lib.load_errors[0]
    with pytest.raises(SkillFormatError, match="no_raed_yet"):
        PhaseRules.compile([skill("bad_skill", phases={"pre_final": PhaseSpec(conditions=["no_raed_yet"], text="x")})])


def test_generated_skill_with_unknown_condition_loses_only_that_phase(tmp_path):
    root = tmp_path / "search"
    write_skill_folder(root / "generated" / "gen-skill-v1", parse_skill_md(
        "---\nskill_id: gen_skill\ndescription: d\nphases:\n  pre_final:\n    conditions: [invented_cond]\n"
        "    text: x\n  post_search:\n    conditions: [has_results]\n    text: y\n---\n"))
    lib = load_library(root, "search")
    assert lib.ids == ["gen_skill"] and set(lib.skills[0].spec.phases) == {"post_search"}
    assert "invented_cond" in lib.load_errors[0] and "phase dropped" in lib.load_errors[0]


def test_seed_search_library_conditions_are_all_known():
    lib = load_library(ROOT / "hasp" / "skills" / "search", "search")
    assert not lib.load_errors
    assert len(PhaseRules.compile(lib.skills)) >= 5


# ----------------------------------------------------------------------------- phase trimming
def test_phase_rules_trim_by_phase_condition_priority_and_limit():
    ph = lambda conds, boost=0.0, text="": PhaseSpec(conditions=conds, priority_boost=boost, text=text)  # noqa: E731
    rules = PhaseRules.compile([
        skill("low_skill", priority=0.1, phases={"post_search": ph([], 0.0, "LOW")}),
        skill("boosted_skill", priority=0.2, phases={"post_search": ph(["has_results"], 0.9, "BOOSTED")}),
        skill("mid_skill", priority=0.5, phases={"post_search": ph([], 0.0, "MID"),
                                                 "pre_final": ph(["no_read_yet"], 0.0, "READ FIRST")}),
        skill("blocked_skill", priority=0.9, phases={"post_search": ph(["search_empty"], 0.0, "EMPTY")}),
        skill("silent_skill", priority=0.9, phases={"post_search": ph([], 0.0, "")}),  # no text: never rendered
    ])
    env = _env(search_count=1, last_search_hits=[{"id": "d1", "title": "A"}])
    assert [r.text for r in rules.select(["post_search"], env, 2)] == ["BOOSTED", "MID"]
    assert [r.text for r in rules.select(["post_search"], env, 10)] == ["BOOSTED", "MID", "LOW"]
    assert [r.text for r in rules.select(["post_search", "pre_final"], env, 10)][:3] == ["BOOSTED", "MID", "READ FIRST"]
    assert rules.select(["post_read"], env, 10) == [] and rules.select(["post_search"], env, 0) == []
    assert [r.skill_id for r in rules.restricted({"low_skill"}).select(["post_search"], env, 10)] == ["low_skill"]
