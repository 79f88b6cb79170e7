"""The 26-skill web-search seed library: loads cleanly, and every PF fires when it should,
stays silent when it should not, and returns the right intervention type. Teacher-assisted
PFs are driven by a scripted teacher double and by one that raises (→ deterministic fallback).

Contexts are built with the real ``EpisodeState.to_ctx`` so the PFs see exactly the keys
the agent loop provides.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doubles import FailingTeacherDouble, ScriptedTeacherDouble

from hasp.agent.context import EpisodeState
from hasp.pf.search_support import FINAL_REDIRECT_KEY, MAX_FINAL_REDIRECTS, hop_count, is_multi_hop
from hasp.pf import InterventionType
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.library import load_library
from hasp.pf.skill_md import PHASES

SEARCH_LIB = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"
from hasp.pf.conditions import SEARCH_CONDITIONS  # noqa: E402 - the names the harness evaluates

CONDITIONS = set(SEARCH_CONDITIONS)
MODIFY, INJECT, NOOP = InterventionType.MODIFY_ACTION, InterventionType.INJECT_CONTEXT, InterventionType.NOOP

Q2 = "Which company does the founder of Bramwais Textiles work for?"
DOC_BRAMWAIS = ("Bramwais Textiles\nBramwais Textiles is a company founded by Verzi Thal in 1990. "
                "It is headquartered in Taholt.")
DOC_VERZI = ("Verzi Thal\nVerzi Thal (born 13 February 1961 in Zamdremmoor) is a historian. "
             "He works for Holor Textiles. Contrary to some accounts, Verzi Thal was not born in Wodumport.")
HITS = [{"id": "doc1", "title": "Bramwais Textiles"}, {"id": "doc2", "title": "Verzi Thal"},
        {"id": "doc3", "title": "Holor Textiles"}]


def make_ctx(question: str = Q2, *, step: int = 1, max_steps: int = 8, reads: tuple[str, ...] = (),
             read_ids: tuple[str, ...] = (), queries: tuple[str, ...] = (), hits=HITS, results_text: str = "",
             history: tuple[str, ...] = (), thought: str = "", empty: bool = False, private=None):
    """A step context from the real EpisodeState (so PFs see the loop's exact keys)."""
    st = EpisodeState(question=question, max_steps=max_steps, step_count=step, search_count=len(queries),
                      read_count=len(reads), empty_results=empty, queries=list(queries),
                      action_history=list(history), last_search_results_text=results_text,
                      last_search_hits=[dict(h) for h in hits] if queries else [],
                      seen_hits=[dict(h) for h in hits] if queries else [], read_ids=list(read_ids),
                      read_contents=list(reads), private=dict(private or {}))
    return st.to_ctx(thought)


@pytest.fixture(scope="module")
def lib():
    library = load_library(SEARCH_LIB)
    yield library
    library.close()


@pytest.fixture(scope="module")
def pf(lib):
    def get(skill_id):
        skill = lib.get(skill_id)
        assert skill is not None and skill.pf is not None, skill_id
        return skill.pf
    return get


def fire(pf_obj, ctx, action, arg, teacher=None):
    """should_activate must be true; then run intervene (teacher only if the PF asks for one)."""
    assert pf_obj.should_activate(ctx, action, arg), f"{pf_obj.skill_id} did not fire on {action}[{arg}]"
    return pf_obj.intervene(ctx, action, arg, teacher)


# ----------------------------------------------------------------------------- the library as a whole
def test_library_has_26_skills_and_loads_without_errors(lib):
    assert lib.load_errors == []
    assert len(lib.skills) == 26 and len(set(lib.ids)) == 26
    assert all(s.pf is not None and not s.generated for s in lib.skills)


def test_frontmatter_is_valid_agent_skill_and_uses_the_condition_vocabulary(lib):
    for s in lib.skills:
        spec = s.spec
        assert spec.name == spec.skill_id.replace("_", "-") and len(spec.description) > 40, spec.skill_id
        assert spec.domain == "search" and spec.applicable_modes and spec.trigger_keywords, spec.skill_id
        assert 0.0 < spec.priority <= 1.0
        for phase, p in spec.phases.items():
            assert phase in PHASES
            names = {c.lstrip("!") for c in p.conditions if isinstance(c, str)}
            assert names <= CONDITIONS, (spec.skill_id, p.conditions)
            assert spec.phase_text(phase) or p.action, (spec.skill_id, phase)


def test_library_roles_always_on_teacher_and_handlers(lib):
    always_on = {s.skill_id for s in lib.skills if getattr(s.spec, "always_on", False)}
    assert always_on == {"retrieval_failure", "format_extraction_error", "relevant_content_extractor"}
    teacher = {s.skill_id for s in lib.skills if s.pf.needs_teacher}
    assert teacher == {"retrieval_failure", "format_extraction_error", "reasoning_error", "answer_confidence_guard"}
    kinds = {s.skill_id: s.pf.handler_kind for s in lib.skills}
    assert set(kinds.values()) <= {None, "code", "llm"}
    assert sum(k == "llm" for k in kinds.values()) >= 5 and sum(k == "code" for k in kinds.values()) >= 5


def test_llm_handlers_abstain_without_teacher_and_when_it_fails(lib):
    ctx = make_ctx("Who founded X and when was it founded?", queries=("x",), reads=(DOC_VERZI, DOC_BRAMWAIS),
                   read_ids=("doc2", "doc1"), thought="I am not sure")
    for s in lib.skills:
        if s.pf.handler_kind == "llm":
            assert s.pf.check_final(ctx, "1990", None) is None, s.skill_id
            assert s.pf.check_final(ctx, "1990", FailingTeacherDouble()) is None, s.skill_id


def test_multi_hop_heuristic():
    assert is_multi_hop(Q2) and hop_count(Q2) == 2
    assert is_multi_hop("Who is the mayor of the birthplace of the founder of the company that employs X Y?")
    assert not is_multi_hop("What is the capital of France?")
    assert not is_multi_hop("Which river flows through Sonddethburg?")


# ----------------------------------------------------------------------------- always-on three
def test_retrieval_failure_long_query_teacher_and_fallbacks(pf):
    p = pf("retrieval_failure")
    long_q = "I want to find out which company the founder of Bramwais Textiles works for and where it is based today"
    ctx = make_ctx()
    t = ScriptedTeacherDouble("Query: \"Bramwais Textiles founder\"")
    iv = fire(p, ctx, "SEARCH", long_q, t)
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "SEARCH", "Bramwais Textiles founder")
    assert "Bramwais" in t.prompts[0]
    failing = FailingTeacherDouble()
    iv = fire(p, ctx, "SEARCH", long_q, failing)
    assert failing.calls == 1 and iv.type is MODIFY and 0 < len(iv.new_action_arg.split()) <= 8
    iv = fire(p, ctx, "SEARCH", long_q, ScriptedTeacherDouble(" ".join(["word"] * 30)))  # unusable reply
    assert iv.new_action_arg != " ".join(["word"] * 30) and len(iv.new_action_arg.split()) <= 8
    assert not p.should_activate(ctx, "SEARCH", "Bramwais Textiles founder")
    assert not p.should_activate(ctx, "FINAL", long_q)


def test_retrieval_failure_repeat_of_an_empty_search(pf):
    p = pf("retrieval_failure")
    ctx = make_ctx(queries=("founder of the Bramwais Textiles company",), empty=True, hits=[])
    iv = fire(p, ctx, "SEARCH", "the founder of the Bramwais Textiles company", None)
    assert iv.type is MODIFY and iv.new_action_arg == "Bramwais Textiles"
    ok = make_ctx(queries=("founder of the Bramwais Textiles company",), empty=False)
    assert not p.should_activate(ok, "SEARCH", "the founder of the Bramwais Textiles company")


def test_format_extraction_error(pf):
    p = pf("format_extraction_error")
    ctx = make_ctx(reads=(DOC_VERZI,), read_ids=("doc2",), queries=("x",))
    sentence = "The answer is Holor Textiles because Verzi Thal works there."
    iv = fire(p, ctx, "FINAL", sentence, None)
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "FINAL", "Holor Textiles")
    iv = fire(p, ctx, "FINAL", sentence, FailingTeacherDouble())
    assert iv.new_action_arg == "Holor Textiles"
    iv = fire(p, ctx, "FINAL", sentence, ScriptedTeacherDouble("Holor Textiles."))
    assert iv.new_action_arg == "Holor Textiles" and iv.reason.startswith("teacher")
    iv = fire(p, ctx, "SEARCH", "Thought: I need the employer\nAction: SEARCH[Verzi Thal]", None)
    assert (iv.new_action_type, iv.new_action_arg) == ("SEARCH", "Verzi Thal")
    for action, arg in (("FINAL", "Holor Textiles"), ("SEARCH", "Verzi Thal employer"), ("READ", "doc1")):
        assert not p.should_activate(ctx, action, arg)


def test_relevant_content_extractor(pf):
    p = pf("relevant_content_extractor")
    ctx = make_ctx(reads=(DOC_VERZI,), read_ids=("doc2",), queries=("Verzi Thal",), history=("READ[doc2]",))
    iv = fire(p, ctx, "SEARCH", "Holor Textiles", None)
    assert iv.type is INJECT and "works for Holor Textiles" in iv.context_text
    after_search = make_ctx(reads=(DOC_VERZI,), read_ids=("doc2",), queries=("a", "b"),
                            history=("READ[doc2]", "SEARCH[b]"))
    assert not p.should_activate(after_search, "FINAL", "x")


# ----------------------------------------------------------------------------- MODIFY_ACTION PFs
def test_premature_final(pf):
    p = pf("premature_final")
    ctx = make_ctx(step=0)
    iv = fire(p, ctx, "FINAL", "Paris")
    assert (iv.type, iv.new_action_type) == (MODIFY, "SEARCH") and "Bramwais" in iv.new_action_arg
    assert ctx[FINAL_REDIRECT_KEY] == 1
    assert p.check_final(make_ctx(step=0), "Paris") == "answered without any search"
    assert not p.should_activate(make_ctx(queries=("q",)), "FINAL", "Paris")
    assert not p.should_activate(make_ctx(step=7, max_steps=8), "FINAL", "Paris")  # no step left to answer
    spent = make_ctx(step=0, private={FINAL_REDIRECT_KEY: MAX_FINAL_REDIRECTS})
    assert not p.should_activate(spent, "FINAL", "Paris")


def test_insufficient_exploration(pf):
    p = pf("insufficient_exploration")
    ctx = make_ctx(queries=("Bramwais Textiles",))
    iv = fire(p, ctx, "FINAL", "Verzi Thal")
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "READ", "doc1")
    assert p.check_final(make_ctx(queries=("q",)), "x") is not None
    read = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    assert not p.should_activate(read, "FINAL", "Verzi Thal") and p.check_final(read, "x") is None


def test_multi_hop_reasoning_failure(pf):
    p = pf("multi_hop_reasoning_failure")
    ctx = make_ctx(queries=("Bramwais Textiles",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    iv = fire(p, ctx, "FINAL", "Verzi Thal")
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "SEARCH", "Verzi Thal")
    assert "intermediate" in p.check_final(ctx, "Verzi Thal")
    both_read = make_ctx(queries=("Bramwais Textiles", "Verzi Thal"), reads=(DOC_BRAMWAIS, DOC_VERZI),
                         read_ids=("doc1", "doc2"))
    assert not p.should_activate(both_read, "FINAL", "Holor Textiles")
    searched = make_ctx(queries=("Bramwais Textiles", "Verzi Thal"), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    assert not p.should_activate(searched, "FINAL", "Verzi Thal")
    single_hop = make_ctx("Who founded Bramwais Textiles?", queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    assert not p.should_activate(single_hop, "FINAL", "Verzi Thal")


def test_reasoning_hallucination(pf):
    p = pf("reasoning_hallucination")
    ctx = make_ctx(queries=("Verzi Thal",), reads=(DOC_VERZI,), read_ids=("doc2",))
    iv = fire(p, ctx, "FINAL", "Quellbrook Systems")
    assert (iv.type, iv.new_action_type) == (MODIFY, "SEARCH") and iv.new_action_arg != "Verzi Thal"
    assert p.check_final(ctx, "Quellbrook Systems") is not None
    assert not p.should_activate(ctx, "FINAL", "Holor Textiles")  # grounded
    assert not p.should_activate(ctx, "FINAL", "unknown")  # hedges belong to answer_confidence_guard


def test_redundant_read(pf):
    p = pf("redundant_read")
    ctx = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    for ref in ("doc1", "[doc1]", "1", "Bramwais Textiles"):
        iv = fire(p, ctx, "READ", ref)
        assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "READ", "doc2"), ref
    assert not p.should_activate(ctx, "READ", "doc2")
    all_read = make_ctx(queries=("q",), reads=("a", "b", "c"), read_ids=("doc1", "doc2", "doc3"))
    assert not p.should_activate(all_read, "READ", "doc1")  # nothing new to open
    # "doc2" is the id of the first result here, not rank 2 (the environment resolves it so too)
    by_id = make_ctx(queries=("q",), hits=[{"id": "doc2", "title": "A"}, {"id": "doc9", "title": "B"}],
                     reads=("a",), read_ids=("doc2",))
    assert fire(p, by_id, "READ", "doc2").reason == "doc2 was already read; reading doc9"
    assert not p.should_activate(by_id, "READ", "2")  # rank 2 is doc9, not read yet


def test_query_drift(pf):
    p = pf("query_drift")
    ctx = make_ctx(queries=("Bramwais Textiles",), results_text="1. [doc1] Bramwais Textiles: a company")
    iv = fire(p, ctx, "SEARCH", "Eiffel Tower height")
    assert (iv.type, iv.new_action_type) == (MODIFY, "SEARCH") and "Bramwais" in iv.new_action_arg
    assert not p.should_activate(ctx, "SEARCH", "Bramwais Textiles founder")
    with_read = make_ctx(queries=("Bramwais Textiles",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    assert not p.should_activate(with_read, "SEARCH", "Verzi Thal")  # next hop from the evidence


def test_step_budget_guard(pf):
    p = pf("step_budget_guard")
    ctx = make_ctx(step=6, max_steps=8, queries=("Bramwais Textiles",))
    iv = fire(p, ctx, "SEARCH", "Bramwais founder")
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "READ", "doc1")
    assert not p.should_activate(make_ctx(step=2, max_steps=8, queries=("q",)), "SEARCH", "x")
    read = make_ctx(step=6, max_steps=8, queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",))
    assert not p.should_activate(read, "SEARCH", "x")


def test_question_echo(pf):
    p = pf("question_echo")
    ctx = make_ctx(queries=("Verzi Thal",))
    iv = fire(p, ctx, "FINAL", "Bramwais Textiles")
    assert (iv.type, iv.new_action_type) == (MODIFY, "SEARCH")
    assert p.check_final(ctx, "Bramwais Textiles") is not None
    assert not p.should_activate(ctx, "FINAL", "Holor Textiles")
    choice = make_ctx("Which is older, Bramwais Textiles or Holor Textiles?", queries=("q",))
    assert not p.should_activate(choice, "FINAL", "Bramwais Textiles")


# ----------------------------------------------------------------------------- teacher-assisted FINAL PFs
def test_answer_confidence_guard_teacher_paths(pf):
    p = pf("answer_confidence_guard")
    ctx = make_ctx(queries=("Bramwais Textiles", "Verzi Thal"), reads=(DOC_BRAMWAIS, DOC_VERZI),
                   read_ids=("doc1", "doc2"))
    iv = fire(p, ctx, "FINAL", "unknown", ScriptedTeacherDouble("ANSWER: Holor Textiles"))
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "FINAL", "Holor Textiles")
    iv = fire(p, ctx, "FINAL", "unknown", ScriptedTeacherDouble("SEARCH: Verzi Thal employer"))
    assert (iv.new_action_type, iv.new_action_arg) == ("SEARCH", "Verzi Thal employer")
    failing = FailingTeacherDouble()
    iv = fire(p, ctx, "FINAL", "unknown", failing)
    assert failing.calls == 1 and iv.type is MODIFY and iv.new_action_type in ("SEARCH", "READ")
    assert not p.should_activate(ctx, "FINAL", "Holor Textiles")
    assert p.should_activate(make_ctx(queries=("q",), thought="I cannot find the employer"), "FINAL", "Taholt")


def test_answer_confidence_guard_fallback_without_teacher(pf):
    p = pf("answer_confidence_guard")
    unread = make_ctx(queries=("Bramwais Textiles",))
    iv = fire(p, unread, "FINAL", "not sure", None)
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "READ", "doc1")
    hedge_ctx = make_ctx(queries=("q",), reads=(DOC_VERZI,), read_ids=("doc2",), thought="maybe")
    assert p.check_final(hedge_ctx, "maybe Taholt", None) is None
    vote = p.check_final(hedge_ctx, "maybe Taholt", ScriptedTeacherDouble("PROBLEM: Taholt is never mentioned"))
    assert vote == "Taholt is never mentioned"
    assert p.check_final(hedge_ctx, "maybe Taholt", ScriptedTeacherDouble("OK")) is None


def test_reasoning_error_teacher_and_fallback(pf):
    p = pf("reasoning_error")
    q = "Which company does Verzi Thal work for?"
    ctx = make_ctx(q, queries=("Verzi Thal",), reads=(DOC_VERZI,), read_ids=("doc2",))
    iv = fire(p, ctx, "FINAL", "Zamdremmoor", ScriptedTeacherDouble("ANSWER: Holor Textiles"))
    assert (iv.type, iv.new_action_type, iv.new_action_arg) == (MODIFY, "FINAL", "Holor Textiles")
    iv = fire(p, ctx, "FINAL", "Zamdremmoor", ScriptedTeacherDouble("ANSWER: Zamdremmoor"))
    assert iv.type is NOOP
    for teacher in (None, FailingTeacherDouble()):
        iv = fire(p, ctx, "FINAL", "Zamdremmoor", teacher)
        assert iv.type is INJECT and "works for Holor Textiles" in iv.context_text
    assert not p.should_activate(ctx, "FINAL", "Holor Textiles")  # from the 'works for' sentence
    assert p.check_final(ctx, "Zamdremmoor", ScriptedTeacherDouble("PROBLEM: birthplace, not employer"))
    assert p.check_final(ctx, "Zamdremmoor", None) is None


# ----------------------------------------------------------------------------- dynamic INJECT_CONTEXT PFs
def test_temporal_confusion(pf):
    p = pf("temporal_confusion")
    ctx = make_ctx("In what year was Bramwais Textiles founded?", queries=("q",), reads=(DOC_BRAMWAIS,),
                   read_ids=("doc1",))
    iv = fire(p, ctx, "FINAL", "1875")
    assert iv.type is INJECT and "1875" in iv.context_text and "1990" in iv.context_text
    assert p.check_final(ctx, "1875") is not None and p.check_final(ctx, "1990") is None
    assert not p.should_activate(ctx, "FINAL", "1990")


def test_citation_mismatch(pf):
    p = pf("citation_mismatch")
    ctx = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",),
                   results_text="1. [doc3] Holor Textiles: Holor Textiles is a firm in Taholt")
    iv = fire(p, ctx, "FINAL", "Holor Textiles")
    assert iv.type is INJECT and "'Holor Textiles'" in iv.context_text
    assert p.check_final(ctx, "Holor Textiles") is not None
    assert not p.should_activate(ctx, "FINAL", "Verzi Thal")  # in a read document


def test_answer_type_mismatch(pf):
    p = pf("answer_type_mismatch")
    year_q = make_ctx("In what year was Bramwais Textiles founded?")
    iv = fire(p, year_q, "FINAL", "Verzi Thal")
    assert iv.type is INJECT and "a year" in iv.context_text and "Verzi Thal" in iv.context_text
    assert not p.should_activate(year_q, "FINAL", "1990")
    assert p.should_activate(make_ctx("How many employees does X have?"), "FINAL", "Taholt")
    assert p.check_final(make_ctx("Who founded Bramwais Textiles?"), "1990") is not None
    assert not p.should_activate(make_ctx("Who founded Bramwais Textiles?"), "FINAL", "Verzi Thal")


# ----------------------------------------------------------------------------- prompt-equivalent PFs
def test_decompose_complex_question(pf):
    p = pf("decompose_complex_question")
    iv = fire(p, make_ctx(), "SEARCH", "Bramwais Textiles")
    assert iv.type is INJECT and iv.context_text.startswith("[DECOMPOSITION HINT]")
    assert not p.should_activate(make_ctx("Who wrote Hamlet?"), "SEARCH", "Hamlet")
    assert not p.should_activate(make_ctx(queries=("q",)), "SEARCH", "x")


def test_adversarial_distraction(pf):
    p = pf("adversarial_distraction")
    noisy = ("1. [doc2] Verzi Thal: contrary to some accounts he was not born in Wodumport. "
             "Verzi Thal should not be confused with Verzi Thar, who never worked there.")
    iv = fire(p, make_ctx(queries=("q",), results_text=noisy), "READ", "doc2")
    assert iv.type is INJECT and "[DISTRACTOR NOTE]" in iv.context_text
    calm = "1. [doc2] Verzi Thal: a historian, not a painter."
    assert not p.should_activate(make_ctx(queries=("q",), results_text=calm), "READ", "doc2")


def test_negation_oversight(pf):
    p = pf("negation_oversight")
    q = "Where was Verzi Thal born?"
    ctx = make_ctx(q, queries=("q",), reads=(DOC_VERZI,), read_ids=("doc2",))
    iv = fire(p, ctx, "FINAL", "Wodumport")  # only in the 'was not born in' sentence
    assert iv.type is INJECT and "[NEGATION REMINDER]" in iv.context_text
    assert not p.should_activate(ctx, "FINAL", "Zamdremmoor")
    neg_q = make_ctx("Which company does Verzi Thal not work for?", thought="He works for Holor")
    assert p.should_activate(neg_q, "FINAL", "Holor Textiles")
    assert p.check_final(ctx, "Wodumport", ScriptedTeacherDouble("PROBLEM: the document denies it")) \
        == "the document denies it"
    assert p.check_final(ctx, "Wodumport", None) is None


def test_wrong_entity_confusion(pf):
    p = pf("wrong_entity_confusion")
    look = [{"id": "doc2", "title": "Verzi Thal"}, {"id": "doc9", "title": "Verzi Thar"}]
    ctx = make_ctx(queries=("Verzi Thal",), hits=look)
    iv = fire(p, ctx, "READ", "doc2")
    assert iv.type is INJECT and "Verzi Thar" not in iv.context_text and "Verzi Thar" in iv.reason
    assert not p.should_activate(make_ctx(queries=("q",)), "READ", "doc1")
    vote = p.check_final(ctx, "Holor Textiles", ScriptedTeacherDouble("PROBLEM: about Verzi Thar"))
    assert vote == "about Verzi Thar"


def test_wrong_entity_confusion_pairs_titles_at_least_80_percent_alike(pf):
    """rapidfuzz's normalised Indel ratio (2·LCS / total length) replaced difflib's matcher; it is
    never below difflib's ratio, so every pair difflib found at 0.8 is still found."""
    from difflib import SequenceMatcher

    pairs = type(pf("wrong_entity_confusion")).should_activate.__globals__["lookalike_pairs"]  # the PF module's helper
    titles = ["Verzi Thal", "Verzi Thar", "verzi thal", "Holor Textiles", "Holor Textile", "Bramwais", "", "Verzi Thal"]
    got = set(pairs(titles))
    assert ("Verzi Thal", "Verzi Thar") in got and ("Verzi Thal", "verzi thal") in got  # case-folded
    assert ("Holor Textiles", "Holor Textile") in got
    assert not any("Bramwais" in p or "" in p or p[0] == p[1] for p in got)
    assert pairs(["Verzi Thal", "Holor Textiles"]) == [] and pairs([]) == []
    words = ["Anna Karin Berg", "Anne Karin Berg", "Lake Ost", "Lake Oster", "Port Velm", "Fort Velm",
             "Velm River", "Velm Rivers", "Mara", "Marta", "Oskar Lind", "Oscar Lindh"]
    for i, a in enumerate(words):
        for b in words[i + 1:]:
            if SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.8:
                assert (a, b) in set(pairs([a, b])), (a, b)


def test_pfs_fire_the_same_through_the_dispatcher_and_called_apart(pf):
    """intervene does not depend on a preceding should_activate call (some PFs memoise helpers)."""
    look = [{"id": "doc2", "title": "Verzi Thal"}, {"id": "doc9", "title": "Verzi Thar"}]
    ctx = make_ctx(queries=("Verzi Thal",), hits=look, reads=(DOC_BRAMWAIS,), read_ids=("doc2",),
                   history=("SEARCH[Verzi Thal]", "READ[doc2]"))
    for sid, action, arg in (("redundant_read", "READ", "doc2"), ("wrong_entity_confusion", "READ", "doc2"),
                             ("relevant_content_extractor", "SEARCH", "x")):
        p = pf(sid)
        direct = p.intervene(dict(ctx), action, arg)
        fired = fire(p, ctx, action, arg)
        assert (fired.type, fired.new_action_arg, fired.context_text, fired.reason) == \
            (direct.type, direct.new_action_arg, direct.context_text, direct.reason), sid
        res = Dispatcher([p]).dispatch(dict(ctx), action, arg)
        assert [f.reason for f in res.fired] == [direct.reason], sid


def _reference_names(text):
    """names() as first written: a Python loop over the matches (the C-level version must agree)."""
    from hasp.pf.search_support import _LEADING_FUNCTION, _NAME

    out = []
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        while words and words[0] in _LEADING_FUNCTION:
            words = words[1:]
        name = " ".join(words)
        if name and name not in out:
            out.append(name)
    return out


def _texts_to_compare():
    import json
    import os

    from hasp.domains.search.generator import generate_benchmark

    texts = [d["contents"] for d in generate_benchmark(seed=3, n_questions=60).corpus]
    texts += ["The Hague is in The Netherlands. In The Bank of England, A of B met Verzi  Thal\tand The.",
              "According To\nThe Old Man of the Sea\u00a0Story, Contrary However It Was", "", "x", "The A An",
              "Queries and searches: classes, boxes, buses, status; the_query_too_broad!"]
    shared = Path(os.environ.get("HASP_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    sample = shared / "hotpotqa" / "hotpot_dev_distractor_sample_a.jsonl"
    if sample.exists():  # real Wikipedia paragraphs when the shared samples are there
        for line in sample.read_text().splitlines()[:20]:
            texts += [" ".join(sents) for _, sents in json.loads(line)["context"]]
    return texts


def test_names_and_sentence_tokens_match_their_reference_loops():
    from hasp.pf.search_support import _SENTENCE, names, sentence_tokens
    from hasp.textutil import content_tokens

    for text in _texts_to_compare():
        assert names(text) == _reference_names(text), text[:80]
        want = tuple((s.strip(), frozenset(content_tokens(s.strip()))) for s in _SENTENCE.findall(text) if s.strip())
        assert sentence_tokens(text) == want, text[:80]


def test_reading_comprehension_error(pf):
    p = pf("reading_comprehension_error")
    dense = "Verzi Thal\n" + " ".join(f"In {1900 + i} he moved {i} times." for i in range(6))
    ctx = make_ctx(queries=("q",), reads=(dense,), read_ids=("doc2",), history=("READ[doc2]",))
    iv = fire(p, ctx, "SEARCH", "x")
    assert iv.type is INJECT and iv.context_text.startswith("[READ CAREFULLY]")
    sparse = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS,), read_ids=("doc1",), history=("READ[doc1]",))
    assert not p.should_activate(sparse, "SEARCH", "x")


def test_answer_completeness(pf):
    p = pf("answer_completeness")
    ctx = make_ctx("Who founded Bramwais Textiles and when was it founded?")
    iv = fire(p, ctx, "FINAL", "Verzi Thal")
    assert iv.type is INJECT and "[COMPLETENESS WARNING]" in iv.context_text
    assert not p.should_activate(ctx, "FINAL", "Verzi Thal, 1990")
    assert not p.should_activate(make_ctx(), "FINAL", "Holor Textiles")
    assert p.check_final(ctx, "Verzi Thal", ScriptedTeacherDouble("PROBLEM: year missing")) == "year missing"


def test_language_barrier(pf):
    p = pf("language_barrier")
    doc = "Moscow\nМосква — столица и крупнейший город России, основана в 1147 году."
    after_read = make_ctx(queries=("q",), reads=(doc,), read_ids=("doc5",), history=("READ[doc5]",))
    assert fire(p, after_read, "SEARCH", "x").type is INJECT
    assert p.should_activate(make_ctx(queries=("q",), reads=("Der Ort Zürich liegt am See.",), read_ids=("d",)),
                             "FINAL", "Zurich")
    assert not p.should_activate(make_ctx(queries=("q",), reads=(DOC_VERZI,), read_ids=("doc2",),
                                          history=("READ[doc2]",)), "FINAL", "Zamdremmoor")


def test_iterative_refinement(pf):
    p = pf("iterative_refinement")
    ctx = make_ctx(queries=("Bramwais Textiles founder",))
    assert fire(p, ctx, "SEARCH", "founder Bramwais Textiles").type is INJECT
    assert not p.should_activate(ctx, "SEARCH", "Verzi Thal employer")


def test_claim_triangulation(pf):
    p = pf("claim_triangulation")
    ctx = make_ctx("In what year was Bramwais Textiles founded?", queries=("q",), reads=(DOC_BRAMWAIS,),
                   read_ids=("doc1",))
    assert fire(p, ctx, "FINAL", "1990").type is INJECT
    assert not p.should_activate(ctx, "FINAL", "Verzi Thal")
    two = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS, DOC_VERZI), read_ids=("doc1", "doc2"))
    assert not p.should_activate(two, "FINAL", "1990")
    assert p.check_final(ctx, "1990", ScriptedTeacherDouble("OK")) is None
    assert p.check_final(ctx, "1990", ScriptedTeacherDouble("PROBLEM: wrong year")) == "wrong year"


def test_misinformation_detector(pf):
    p = pf("misinformation_detector")
    ctx = make_ctx(queries=("q",), reads=(DOC_BRAMWAIS, DOC_VERZI), read_ids=("doc1", "doc2"))
    assert fire(p, ctx, "FINAL", "Holor Textiles").type is INJECT
    one = make_ctx(queries=("q",), reads=(DOC_VERZI,), read_ids=("doc2",))
    assert not p.should_activate(one, "FINAL", "Holor Textiles")
    assert p.check_final(ctx, "Holor Textiles", ScriptedTeacherDouble("garbled")) is None  # unclear = no vote


def test_prompt_equivalent_pfs_inject_the_same_text_on_different_contexts(pf):
    """What the static A+B check claims, observed at run time: the injected text does not vary."""
    p = pf("negation_oversight")
    a = p.intervene(make_ctx("Where was Verzi Thal born?"), "FINAL", "Wodumport")
    b = p.intervene(make_ctx("Which firm does X not own?"), "FINAL", "Quellbrook")
    assert a.context_text == b.context_text and a.type is b.type is INJECT


# ----------------------------------------------------------------------------- through the dispatcher
def test_dispatcher_caps_final_redirects_per_episode(lib):
    """Many FINAL-redirecting PFs share one budget: the episode can always end with an answer."""
    d = Dispatcher(lib.pfs(), teacher=None)
    private: dict = {}
    redirects = 0
    for step in range(6):
        ctx = make_ctx(step=step, max_steps=12, queries=("Bramwais Textiles",), reads=(DOC_BRAMWAIS,),
                       read_ids=("doc1",), private=private)
        res = d.dispatch(ctx, "FINAL", "unknown")
        private = {k: v for k, v in ctx.items() if k.startswith("_")}
        redirects += res.action_type != "FINAL"
        assert not res.errors
    assert 0 < redirects <= MAX_FINAL_REDIRECTS


# ----------------------------------------------------------------------------- the `watches` promise
def _context_bank(n: int = 300, seed: int = 7):
    """A seeded sample of step contexts mixing every trigger the seed PFs look for."""
    import random

    rng = random.Random(seed)
    dense = "Verzi Thal\n" + " ".join(f"In {1900 + i} he moved {i} times." for i in range(6))
    foreign = "Moscow\nМосква — столица и крупнейший город России, основана в 1147 году."
    noisy = ("1. [doc2] Verzi Thal: contrary to some accounts he was not born in Wodumport. "
             "Verzi Thal should not be confused with Verzi Thar, who never worked there.")
    look = [{"id": "doc2", "title": "Verzi Thal"}, {"id": "doc9", "title": "Verzi Thar"}]
    questions = [Q2, "In what year was Bramwais Textiles founded?", "Where was Verzi Thal born?",
                 "Which company does Verzi Thal not work for?", "Who wrote Hamlet?",
                 "Who founded Bramwais Textiles and when was it founded?",
                 "Which is older, Bramwais Textiles or Holor Textiles?", "How many employees does X have?"]
    reads = [(), (DOC_BRAMWAIS,), (DOC_VERZI,), (DOC_BRAMWAIS, DOC_VERZI), (dense,), (foreign,),
             ("Der Ort Zürich liegt am See.",)]
    queries = [(), ("q",), ("Bramwais Textiles",), ("Bramwais Textiles", "Verzi Thal"),
               ("founder of the Bramwais Textiles company",)]
    bank = []
    for i in range(n):
        r = rng.choice(reads)
        qs = queries[i // len(questions) % len(queries)] if not r else rng.choice(queries[1:])
        ids = tuple(f"doc{i + 1}" for i in range(len(r)))
        step = rng.choice([0, 1, 2, 6])
        bank.append(make_ctx(questions[i % len(questions)], step=step, max_steps=8, reads=r, read_ids=ids, queries=qs,
                             hits=rng.choice([HITS, look]), results_text=rng.choice(["", noisy]),
                             history=(f"READ[{ids[-1]}]",) if r and rng.random() < 0.6 else (),
                             thought=rng.choice(["", "maybe", "I cannot find the employer"]),
                             empty=rng.random() < 0.2))
    return bank


_ARGS = ["Paris", "unknown", "not sure, maybe Holor Textiles", "Verzi Thal", "Holor Textiles", "1875", "1990",
         "doc1", "doc2", "2", "x", "Eiffel Tower height", "founder Bramwais Textiles", "Bramwais founder",
         "the founder of the Bramwais Textiles company", "Wodumport", "Zamdremmoor", "Zurich", "Taholt",
         "Bramwais Textiles", " ".join(["word"] * 20), "Thought: I need the employer\nAction: SEARCH[Verzi Thal]",
         "Verzi Thal, 1990", "Quellbrook Systems"]


def test_every_seed_pf_keeps_its_watches_promise(lib):
    """The dispatcher never asks a PF about an action type outside ``watches``. So on a broad context
    bank, ``should_activate`` must be False for every other type. The bank must also make each PF fire
    on a watched type, or the check would say nothing about it."""
    from hasp.pf.base import watched_types

    bank = _context_bank()
    declared = 0
    for skill in lib.skills:
        p = skill.pf
        watches = watched_types(p.watches)
        if watches is None:
            continue
        declared += 1
        fired_on_watched = 0
        for ctx in bank:
            for arg in _ARGS:
                for at in ("SEARCH", "READ", "FINAL"):
                    active = p.should_activate(dict(ctx), at, arg)
                    if at in watches:
                        fired_on_watched += bool(active)
                    else:
                        assert not active, f"{p.skill_id} fired on {at}[{arg}] but watches {sorted(watches)}"
        assert fired_on_watched, f"the bank never makes {p.skill_id} fire: extend it"
    assert declared == 24  # relevant_content_extractor and language_barrier watch every type


def test_dispatch_skips_pfs_that_do_not_watch_the_action_and_gives_the_same_result(lib):
    """Skipping (unwatched types; rewrite-only PFs after an applied rewrite) changes which PFs are
    asked, never what a step decides: the only fires it drops are discarded rewrites."""
    pfs = lib.pfs()
    modify_only = {p.skill_id for p in pfs if p.modify_only}
    bank = _context_bank(n=60, seed=11)
    dropped = 0
    for ctx in bank:
        for arg in _ARGS[:12]:
            for at in ("SEARCH", "READ", "FINAL"):
                a = Dispatcher(pfs).dispatch(dict(ctx), at, arg)
                b = Dispatcher(pfs, skip_unwatched=False).dispatch(dict(ctx), at, arg)
                assert (a.action_type, a.arg, a.contexts, [f.skill_id for f in a.fired if f.applied]) == \
                       (b.action_type, b.arg, b.contexts, [f.skill_id for f in b.fired if f.applied])
                assert [f.skill_id for f in a.fired if not f.applied] == \
                       [f.skill_id for f in b.fired if not f.applied and f.skill_id not in modify_only]
                dropped += len(b.fired) - len(a.fired)
    assert dropped > 0  # the bank has steps where a second rewrite was discarded


def test_modify_only_is_derived_from_the_source():
    from hasp.pf.equivalence import only_modifies

    derived = {p.skill_id for p in load_library(SEARCH_LIB).pfs() if p.modify_only}
    assert derived == {"premature_final", "insufficient_exploration", "format_extraction_error",
                       "retrieval_failure", "question_echo", "multi_hop_reasoning_failure",
                       "reasoning_hallucination", "redundant_read", "query_drift", "step_budget_guard"}
    head = "from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf\n"
    mod = "Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH', new_action_arg='q')"

    def pf(body, top=""):
        return f"{head}{top}\n@register_pf('x')\nclass X(ProgramFunction):\n    def intervene(self, ctx, a, arg, teacher=None):\n{body}"

    assert only_modifies(pf(f"        return {mod}"))
    assert only_modifies(pf("        return self.h()\n    def h(self):\n        return " + mod))
    assert only_modifies(pf("        return h()", top=f"def h():\n    return {mod}\n"))
    assert not only_modifies(pf(f"        if a:\n            return {mod}\n        return Intervention()"))
    assert not only_modifies(pf("        return NOOP", top="NOOP = Intervention()\n"))  # a constant
    assert not only_modifies(pf(f"        iv = {mod}\n        return iv"))  # not proven
    assert not only_modifies(pf("        return Intervention(type=kind, new_action_type='S')"))
    assert not only_modifies(pf("        return helper()", top="from elsewhere import helper\n"))
    assert not only_modifies(pf(f"        if a:\n            return {mod}\n        return"))
    assert not only_modifies(pf("        return Intervention.from_dict({})"))
    assert not only_modifies("not python(")


def test_derived_step_keys_agree_with_the_history_they_come_from():
    """``last_action`` / ``last_read`` are what PFs used to parse out of ``action_history`` and
    ``all_read_contents``; contexts built without them (older callers) get the same answers."""
    from hasp.pf.search_support import just_read, last_read_text

    for ctx in _context_bank(n=120, seed=3):
        legacy = {k: v for k, v in ctx.items() if k not in ("last_action", "last_read")}
        assert just_read(ctx) == just_read(legacy)
        assert last_read_text(ctx) == last_read_text(legacy)
    ctx = make_ctx(reads=("para one\n\npara two", DOC_VERZI), read_ids=("d1", "d2"), queries=("q",),
                   history=("READ[d2]",))
    assert ctx["last_action"] == "READ" and last_read_text(ctx) == DOC_VERZI
