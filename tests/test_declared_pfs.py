"""Declared PFs: every condition, field, source and repair of the vocabulary behaves on crafted
contexts; the ported seed skills decide exactly as the code they replaced (kept in
``tests/fixtures/ported_pfs``) on a bank of step contexts; malformed declarations are refused with
one line naming file and key; a compiled declaration never raises.

Contexts come from the real ``EpisodeState.to_ctx``, so the vocabulary sees the loop's keys.
"""

from __future__ import annotations

import copy
import json
import itertools
import shutil
from pathlib import Path

import pytest
import yaml

from hasp.agent.context import EpisodeState
from hasp.pf import InterventionType
from hasp.pf.conditions import SEARCH_CONDITIONS, ConditionEnv
from hasp.pf.declaration import PFDeclaration
from hasp.pf.declared import DeclaredPF, compile_declaration
from hasp.pf.library import import_trusted_pf, load_library
from hasp.pf.question import QuestionFeatures
from hasp.pf.search_support import FINAL_REDIRECT_KEY, answer_span
from hasp.pf.skill_md import SkillFormatError
from hasp.pf.vocabulary import CONDITIONS, FIELDS, SOURCES, Step, describe_vocabulary

ROOT = Path(__file__).resolve().parents[1]
SEARCH_LIB = ROOT / "hasp" / "skills" / "search"
ORIGINALS = Path(__file__).parent / "fixtures" / "ported_pfs"
PORTED = sorted(p.stem for p in ORIGINALS.glob("*.py"))

Q1 = "In what year was Roholt founded?"
Q2 = "Which company does the founder of Bramwais Textiles work for?"
Q3 = "Who founded Velm River Press and which city is it in?"
HITS = [{"id": "doc1", "title": "Roholt"}, {"id": "doc2", "title": "Bramwais Textiles"},
        {"id": "doc3", "title": "Verzi Thal"}]
RESULTS = "1. [doc1] Roholt: Roholt is a city located in Seirngeesh, founded in 1836."
DOC_ROHOLT = "Roholt\nRoholt is a city located in Seirngeesh, founded in 1836. Its mayor is Anna Brell."
DOC_DENSE = ("Census\n" + " ".join(f"In {1900 + i} the town of Place{i} Alpha had {i * 37} people." for i in range(10)))
DENIALS = ("1. [doc2] X: It is not true that Verzi Thal founded it. However, Holor was never a founder, "
           "contrary to reports.")


def ctx_of(question=Q1, *, step=1, max_steps=6, queries=(), hits=HITS, results="", reads=(), read_ids=(),
           history=(), empty=False, failed=False, streak=0, parse_failures=0, private=None):
    st = EpisodeState(question=question, max_steps=max_steps, step_count=step, search_count=len(queries),
                      read_count=len(reads), empty_results=empty, queries=list(queries),
                      action_history=list(history), last_search_results_text=results,
                      last_search_hits=[dict(h) for h in hits] if queries else [],
                      seen_hits=[dict(h) for h in hits] if queries else [], read_ids=list(read_ids),
                      read_contents=list(reads), last_failed=failed, failed_streak=streak,
                      parse_failures=parse_failures, private=dict(private or {}))
    return st.to_ctx("")


def step_of(action="SEARCH", arg="", **kw) -> Step:
    return Step(ctx_of(**kw), action, arg)


# ----------------------------------------------------------------------------- vocabulary items

NEW_CONDITIONS = {  # name -> (a step where it holds, a step where it does not)
    "last_action_failed": (step_of(failed=True, queries=("x",)), step_of(queries=("x",))),
    "arg_not_in_results": (step_of("READ", "doc0099", queries=("Roholt",)), step_of("READ", "2", queries=("Roholt",))),
    "arg_already_read": (step_of("READ", "[doc1]", queries=("Roholt",), reads=(DOC_ROHOLT,), read_ids=("doc1",)),
                         step_of("READ", "doc2", queries=("Roholt",), reads=(DOC_ROHOLT,), read_ids=("doc1",))),
    "same_action_repeated": (step_of("READ", "doc9", history=("SEARCH[Roholt]", "READ[doc9]")),
                             step_of("READ", "doc9", history=("READ[doc9]", "SEARCH[a]", "SEARCH[b]"))),
    "arg_repeats_recent_query": (step_of("SEARCH", "Roholt city founded", queries=("Roholt founded city",)),
                                 step_of("SEARCH", "Seirngeesh", queries=("Roholt founded city",))),
    "query_drifted": (step_of("SEARCH", "purple elephants"), step_of("SEARCH", "Roholt")),
    "answer_echoes_question": (step_of("FINAL", "Roholt"), step_of("FINAL", "1836")),
    "answer_in_evidence": (step_of("FINAL", "1836", queries=("Roholt",), results=RESULTS),
                           step_of("FINAL", "1901", queries=("Roholt",), results=RESULTS)),
    "just_read": (step_of(reads=(DOC_ROHOLT,), read_ids=("doc1",), history=("READ[doc1]",)),
                  step_of(reads=(DOC_ROHOLT,), read_ids=("doc1",), history=("READ[doc1]", "SEARCH[x]"))),
    "chained_question": (step_of(question=Q2), step_of(question=Q1)),
    "evidence_has_answer": (step_of(queries=("Roholt",), results=RESULTS), step_of(queries=("Roholt",), results="")),
}


@pytest.mark.parametrize("name", sorted(set(CONDITIONS) - set(SEARCH_CONDITIONS)))
def test_each_new_condition_holds_and_fails_where_it_should(name):
    yes, no = NEW_CONDITIONS[name]
    test = CONDITIONS[name][0]
    assert test(yes) is True and test(no) is False


def test_phase_conditions_read_the_step_context_as_the_harness_reads_the_state():
    """The same names in a phase and in a declaration mean the same thing."""
    for kw in _bank_kwargs():
        ctx = ctx_of(**kw)
        state = EpisodeState(question=kw.get("question", Q1), max_steps=ctx["max_steps"], step_count=ctx["step_count"],
                             search_count=ctx["search_count"], read_count=ctx["read_count"],
                             empty_results=ctx["empty_results"], queries=list(ctx["queries"]),
                             last_search_hits=ctx["last_search_hits"], read_ids=list(ctx["read_ids"]),
                             read_contents=list(kw.get("reads", ())))
        env = ConditionEnv(state=state, question=QuestionFeatures.of(state.question))
        for name, fn in SEARCH_CONDITIONS.items():
            assert CONDITIONS[name][0](Step(ctx, "SEARCH", "x")) == bool(fn(env)), name


FIELD_VALUES = {  # name -> (step, value)
    "step_count": (step_of(step=3), 3), "search_count": (step_of(queries=("a", "b")), 2),
    "read_count": (step_of(reads=("x",), read_ids=("doc1",)), 1), "max_steps": (step_of(max_steps=7), 7),
    "steps_left": (step_of(step=3, max_steps=6), 2), "failed_streak": (step_of(streak=2), 2),
    "parse_failures": (step_of(parse_failures=3), 3), "arg_words": (step_of("SEARCH", "a b c"), 3),
    "n_results": (step_of(queries=("a",)), 3), "n_unread": (step_of(queries=("a",), read_ids=("doc2",), reads=("x",)), 2),
    "times_done": (step_of("READ", "doc9", history=("READ[doc9]", "SEARCH[a]", "READ[doc9]")), 2),
    "denial_cues": (step_of(queries=("a",), results=DENIALS), 4),
    "last_read_numbers": (step_of(reads=(DOC_ROHOLT,), read_ids=("doc1",)), 1),
    "last_read_names": (step_of(reads=(DOC_ROHOLT,), read_ids=("doc1",)), 3),
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_each_field_reads_its_value(name):
    step, value = FIELD_VALUES[name]
    assert FIELDS[name][0](step) == value


SOURCE_VALUES = {  # name -> (step, value)
    "arg": (step_of("SEARCH", "Roholt"), "Roholt"),
    "question": (step_of(), Q1),
    "question_keywords": (step_of(), "Roholt founded"),
    "question_entities": (step_of(question=Q2), "Bramwais Textiles"),
    "unused_question_query": (step_of(queries=("Roholt founded",)), "Roholt"),
    "last_query": (step_of(queries=("a", "Roholt city")), "Roholt city"),
    "last_query_shortened": (step_of(queries=("the city called Roholt in the north of Seirngeesh",)),
                             "Roholt Seirngeesh called north"),
    "arg_shortened": (step_of("SEARCH", "what is the founding year of the city Roholt"), "Roholt founding"),
    "best_unread_result": (step_of(queries=("a",), reads=("x",), read_ids=("doc1",)), "doc2"),
    "top_result": (step_of(queries=("a",)), "doc1"),
    "answer_span_from_last_read": (step_of(reads=(DOC_ROHOLT,), read_ids=("doc1",)), "1836"),
    "answer_span_from_results": (step_of(queries=("Roholt",), results=RESULTS), "1836"),
    "answer_span_from_evidence": (step_of(question="In which region is Roholt located?", queries=("Roholt",),
                                          results=RESULTS), "Seirngeesh"),
    "shown_results": (step_of(queries=("a",)), "1=[doc1] Roholt, 2=[doc2] Bramwais Textiles, 3=[doc3] Verzi Thal"),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_source_yields_its_value_and_nothing_when_it_has_nothing(name):
    step, value = SOURCE_VALUES[name]
    assert SOURCES[name].get(step) == value
    empty = Step({}, "SEARCH", "")
    assert SOURCES[name].get(empty) is None


def test_answer_span_picks_the_asked_kind_from_the_sentence_about_the_question():
    assert answer_span(Q1, RESULTS) == "1836"
    assert answer_span("Who is the mayor of Roholt?", DOC_ROHOLT) == "Anna Brell"
    assert answer_span("How many people lived in Place3 Alpha?", DOC_DENSE) == "111"
    assert answer_span(Q1, "Nothing relevant here.") is None


def test_the_vocabulary_is_described_one_item_per_line():
    text = describe_vocabulary()
    for name in [*CONDITIONS, *FIELDS, *SOURCES]:
        assert name in text


# ----------------------------------------------------------------------------- repairs

def _compile(**decl) -> DeclaredPF:
    return compile_declaration("x_skill", PFDeclaration(**decl), "t/hasp.yaml: pf")


def test_a_rewrite_takes_the_first_source_that_yields_and_never_repeats_the_action():
    pf = _compile(watches=["READ"], when=["arg_not_in_results"], rewrite={"action": "READ", "arg": ["top_result"]},
                  reason="{arg} was never shown")
    ctx = ctx_of(queries=("Roholt",))
    iv = pf.intervene(ctx, "READ", "doc0099")
    assert (iv.type, iv.new_action_type, iv.new_action_arg, iv.reason) == (
        InterventionType.MODIFY_ACTION, "READ", "doc1", "doc0099 was never shown")
    assert not pf.should_activate(ctx, "SEARCH", "doc0099")  # not watched
    assert not pf.should_activate(ctx_of(), "READ", "doc0099")  # no result to read instead
    assert pf.modify_only and not pf.prompt_equivalent


def test_a_final_rewrite_to_another_action_spends_the_shared_redirect_budget():
    pf = _compile(watches=["FINAL"], when=["no_read_yet"], rewrite={"action": "READ", "arg": "best_unread_result"})
    ctx = ctx_of(queries=("Roholt",))
    assert pf.intervene(ctx, "FINAL", "1900").new_action_arg == "doc1" and ctx[FINAL_REDIRECT_KEY] == 1
    spent = ctx_of(queries=("Roholt",), private={FINAL_REDIRECT_KEY: 3})
    assert not pf.should_activate(spent, "FINAL", "1900")
    last_step = ctx_of(queries=("Roholt",), step=5, max_steps=6)
    assert not pf.should_activate(last_step, "FINAL", "1900")


def test_a_final_from_evidence_replaces_the_proposed_action():
    pf = _compile(watches=["READ", "SEARCH"], when=["last_action_failed", "evidence_has_answer"],
                  rewrite={"action": "FINAL", "arg": "answer_span_from_evidence"})
    ctx = ctx_of(queries=("Roholt",), results=RESULTS, failed=True)
    iv = pf.intervene(ctx, "READ", "doc0042")
    assert (iv.new_action_type, iv.new_action_arg) == ("FINAL", "1836")


def test_an_injected_text_fills_its_placeholders_or_is_not_given():
    pf = _compile(watches=["READ"], when=["arg_not_in_results"], inject="No such document. Shown: {shown_results}.",
                  max_fires=2)
    iv = pf.intervene(ctx_of(queries=("R",)), "READ", "doc77")
    assert iv.type is InterventionType.INJECT_CONTEXT and iv.context_text.startswith("No such document. Shown: 1=[doc1]")
    assert not pf.should_activate(ctx_of(), "READ", "doc77")  # nothing shown: the hint would be empty
    assert not pf.prompt_equivalent and pf.max_fires == 2
    constant = _compile(watches=["SEARCH"], when=["always"], inject="Keep queries short.")
    assert constant.prompt_equivalent and constant.intervene(ctx_of(), "SEARCH", "a").context_text == "Keep queries short."


def test_a_vote_objects_to_a_final_when_the_conditions_hold():
    pf = _compile(watches=["FINAL"], when=["no_search_yet"], rewrite={"action": "SEARCH", "arg": "question_keywords"},
                  vote=True, reason="answered without searching")
    assert pf.handler_kind == "code"
    assert pf.check_final(ctx_of(), "1900") == "answered without searching"
    assert pf.check_final(ctx_of(queries=("a",)), "1900") is None


def test_the_compiled_form_names_every_part_of_the_declaration():
    pf = _compile(watches=["READ"], when=["last_action_failed", {"field": "failed_streak", "op": ">=", "value": 2}],
                  rewrite={"action": "READ", "arg": ["best_unread_result", "top_result"]}, max_fires=1)
    code = pf.compiled()
    for part in ("watches = ('READ',)", "max_fires = 1", "last_action_failed(step)", "failed_streak(step) >= 2",
                 "best_unread_result(step) or top_result(step)", "MODIFY_ACTION('READ'"):
        assert part in code, part


JUNK_CTXS = [{}, {"question": 5, "queries": "abc", "last_search_hits": [1, None, "x"], "read_ids": None},
             {"max_steps": "six", "step_count": None, "action_history": [None, 3], "all_read_contents": b"x"},
             {"last_search_hits": [{"id": None, "title": 3}], "seen_hits": {"a": 1}, "read_count": "2"}]


@pytest.mark.parametrize("ctx", JUNK_CTXS)
def test_no_compiled_declaration_raises_on_a_malformed_context(ctx):
    lib = load_library(SEARCH_LIB)
    declared = [s.pf for s in lib.skills if isinstance(s.pf, DeclaredPF)]
    every_item = [_compile(watches=["SEARCH", "READ", "FINAL"], when=[name], inject="x {" + src + "}")
                  for name, src in zip(sorted(CONDITIONS), itertools.cycle(sorted(SOURCES)))]
    for pf in declared + every_item:
        for action, arg in (("SEARCH", "a"), ("READ", None), ("FINAL", 3)):
            pf.should_activate(copy.deepcopy(ctx), action, arg)
            pf.intervene(copy.deepcopy(ctx), action, arg)
            pf.check_final(copy.deepcopy(ctx), arg)


# ----------------------------------------------------------------------------- refusals

def _declaring(tmp_path, pf):
    """A one-skill library whose redundant-read declares ``pf``, and what loading it gives."""
    folder = shutil.copytree(SEARCH_LIB / "redundant-read", tmp_path / "search" / "redundant-read")
    meta = yaml.safe_load((folder / "hasp.yaml").read_text())
    meta["pf"] = pf
    (folder / "hasp.yaml").write_text(yaml.safe_dump(meta))
    return folder, load_library(folder.parent)


@pytest.mark.parametrize("pf,key", [
    ({"watches": ["READ"], "when": ["arg_not_in_result"], "inject": "x"}, "when: unknown condition 'arg_not_in_result'"),
    ({"watches": ["READ"], "when": [{"field": "n_docs", "op": ">", "value": 1}], "inject": "x"},
     "when: unknown field 'n_docs'"),
    ({"watches": ["READ"], "when": [{"field": "n_results", "op": "=>", "value": 1}], "inject": "x"},
     "when: unknown operator '=>'"),
    ({"watches": ["DELETE"], "inject": "x"}, "watches: unknown action type(s) ['DELETE']"),
    ({"watches": ["READ"], "rewrite": {"action": "WRITE", "arg": "top_result"}}, "rewrite.action: unknown action type"),
    ({"watches": ["READ"], "rewrite": {"action": "READ", "arg": "best_doc"}}, "rewrite.arg: unknown source 'best_doc'"),
    ({"watches": ["FINAL"], "rewrite": {"action": "READ", "arg": "question"}},
     "rewrite.arg: source 'question' yields a query, which READ cannot take"),
    ({"watches": ["READ"], "rewrite": {"action": "READ", "arg": "arg"}}, "rewrite.arg: 'arg' would repeat"),
    ({"watches": ["READ"], "inject": "see {shown_results.__class__}"}, "inject: placeholder {shown_results.__class__}"),
    ({"watches": ["READ"], "inject": "see {0}"}, "inject: placeholder {0} is not a source name"),
    ({"watches": ["READ"], "inject": "x", "reason": "{nothing}"}, "reason: placeholder {nothing}"),
])
def test_a_malformed_declaration_is_refused_with_one_line_naming_file_and_key(tmp_path, pf, key):
    folder, lib = _declaring(tmp_path, pf)
    assert lib.ids == [] and len(lib.load_errors) == 1
    err = lib.load_errors[0]
    assert f"{folder}/hasp.yaml: pf: {key}" in err and "\n" not in err, err


@pytest.mark.parametrize("pf,msg", [
    ({"watches": ["READ"]}, "declare exactly one repair"),
    ({"watches": ["READ"], "inject": "x", "rewrite": {"action": "READ", "arg": "top_result"}}, "exactly one repair"),
    ({"watches": ["READ"], "inject": "x", "vote": True}, "vote needs FINAL"),
    ({"watches": ["READ"], "inject": "x", "max_fire": 2}, "pf.max_fire"),
    ({"watches": [], "inject": "x"}, "pf.watches"),
])
def test_a_declaration_of_the_wrong_shape_is_refused_naming_the_key(tmp_path, pf, msg):
    _, lib = _declaring(tmp_path, pf)
    assert lib.ids == [] and msg in lib.load_errors[0] and "\n" not in lib.load_errors[0]


def test_a_declaration_and_a_pf_py_together_are_refused(tmp_path):
    folder = shutil.copytree(SEARCH_LIB / "redundant-read", tmp_path / "search" / "redundant-read")
    shutil.copy(ORIGINALS / "redundant_read.py", folder / "pf.py")
    lib = load_library(folder.parent)
    assert lib.ids == [] and "pf: a skill declares its PF under pf: or in pf.py, not both" in lib.load_errors[0]


def test_a_domain_without_a_vocabulary_is_refused():
    with pytest.raises(SkillFormatError, match="domain 'math' has no declarative vocabulary"):
        compile_declaration("x_skill", PFDeclaration(watches=["FINAL"], inject="x"), "m/hasp.yaml: pf", "math")


# ----------------------------------------------------------------------------- ported seeds

def _bank_kwargs() -> list[dict]:
    """Step states across questions, budgets, searches, reads, failures and redirect budgets."""
    out = []
    for question, step, (queries, results), (reads, read_ids), failed, private in itertools.product(
            (Q1, Q2, Q3), (0, 2, 4, 5),
            (((), ""), (("Roholt",), RESULTS), (("Roholt founded year", "Roholt"), DENIALS),
             (("founder of Bramwais Textiles",), DENIALS + " " + RESULTS)),
            (((), ()), ((DOC_ROHOLT,), ("doc1",)), ((DOC_ROHOLT, DOC_DENSE), ("doc1", "doc3"))),
            (False, True), ({}, {FINAL_REDIRECT_KEY: 3})):
        history = tuple(f"SEARCH[{q}]" for q in queries) + tuple(f"READ[{d}]" for d in read_ids)
        out.append(dict(question=question, step=step, queries=queries, results=results, reads=reads,
                        read_ids=read_ids, history=history, failed=failed, private=private))
    return out


ARGS = {
    "SEARCH": ["Roholt", "Roholt founded year", "purple elephants", "founder of Bramwais Textiles company",
               "a very long query that goes on and on about the city of Roholt and when it was founded"],
    "READ": ["doc1", "[doc1]", "1", "doc2", "Verzi Thal", "doc0099"],
    "FINAL": ["1836", "Roholt", "In what year was Roholt founded?", "Holor Textiles", "not sure", ""],
}


def _decision(pf, ctx, action, arg):
    c = copy.deepcopy(ctx)
    fires = pf.should_activate(c, action, arg)
    if not fires:
        return (False,)
    iv = pf.intervene(c, action, arg)
    private = {k: v for k, v in c.items() if k.startswith("_")}
    return (True, iv.type, iv.new_action_type, iv.new_action_arg, iv.context_text, private)


@pytest.mark.parametrize("skill_id", PORTED)
def test_a_ported_seed_skill_decides_as_its_original_code(skill_id):
    assert len(PORTED) >= 8
    original = import_trusted_pf(ORIGINALS / f"{skill_id}.py", skill_id)
    lib = load_library(SEARCH_LIB)
    declared = lib.get(skill_id).pf
    assert isinstance(declared, DeclaredPF) and not (lib.get(skill_id).path / "pf.py").exists()
    assert declared.max_fires == original.max_fires
    assert declared.handler_kind == original.handler_kind
    fired = checked = 0
    for kw in _bank_kwargs():
        ctx = ctx_of(**kw)
        for action, args in ARGS.items():
            for arg in args:
                want, got = _decision(original, ctx, action, arg), _decision(declared, ctx, action, arg)
                assert got == want, (skill_id, kw, action, arg)
                fired += want[0]
                checked += 1
                if action == "FINAL" and original.handler_kind:
                    assert (declared.check_final(dict(ctx), arg) is None) == (original.check_final(dict(ctx), arg) is None)
    assert 0 < fired < checked, f"the bank must make {skill_id} fire sometimes and not always ({fired}/{checked})"


def test_skills_show_prints_the_declaration_and_its_compiled_form_and_validate_checks_it(tmp_path):
    from typer.testing import CliRunner

    from hasp.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["skills", "show", "redundant_read", "--library", str(SEARCH_LIB)])
    assert r.exit_code == 0, r.output
    assert "pf:" in r.stdout and "arg_already_read" in r.stdout  # the hasp.yaml declaration
    assert "compiled" in r.stdout and "def should_activate" in r.stdout and "best_unread_result(step)" in r.stdout
    folder = shutil.copytree(SEARCH_LIB / "redundant-read", tmp_path / "search" / "redundant-read")
    r = runner.invoke(app, ["skills", "validate", str(folder), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["folders"][0]["mode"] == "declared"
    meta = yaml.safe_load((folder / "hasp.yaml").read_text())
    meta["pf"]["when"] = ["arg_already_red"]
    (folder / "hasp.yaml").write_text(yaml.safe_dump(meta))
    r = runner.invoke(app, ["skills", "validate", str(folder), "--json"])
    rep = json.loads(r.stdout)["folders"][0]
    assert r.exit_code == 1 and rep["checks"]["pf_load"] == "fail"
    assert any("hasp.yaml: pf: when: unknown condition 'arg_already_red'" in e for e in rep["errors"])
