"""Prompt-equivalence (A+B, App. B.5) decided from PF source: each branch on small synthetic
sources, then the real seed libraries (counts are whatever the code says; the paper reports
10/26 web and 2/12 code, 0 math)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hasp.pf.equivalence import analyse_library, analyse_source, only_modifies
from hasp.pf.skill_md import load_skill
from hasp.pf.pf_source import pf_attrs

ROOT = Path(__file__).resolve().parents[1] / "hasp" / "skills"

HEAD = "from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf\n"


def pf_source(intervene_body: str, *, prelude: str = "", extra: str = "", attrs: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(intervene_body).strip("\n"), " " * 8)
    return (HEAD + textwrap.dedent(prelude) + "\n\n@register_pf('x_skill')\nclass XPF(ProgramFunction):\n"
            + (textwrap.indent(textwrap.dedent(attrs), "    ") if attrs else "")
            + "    def should_activate(self, ctx, action_type, arg):\n        return True\n\n"
            + "    def intervene(self, ctx, action_type, arg, teacher=None):\n" + body + "\n"
            + textwrap.indent(textwrap.dedent(extra), "    "))


def check(src: str):
    return analyse_source(src, "x_skill")


def test_literal_inject_is_prompt_equivalent():
    r = check(pf_source("return Intervention(type=InterventionType.INJECT_CONTEXT, context_text='[HINT] do X.')"))
    assert r.a and r.b and r.prompt_equivalent and r.types == ["INJECT_CONTEXT"] and r.reasons == []


def test_noop_only_is_prompt_equivalent():
    r = check(pf_source("return Intervention(type=InterventionType.NOOP, reason=f'audit {arg}')"))
    assert r.prompt_equivalent and r.types == ["NOOP"]


def test_default_type_is_noop_and_string_types_are_understood():
    assert check(pf_source("return Intervention()")).prompt_equivalent
    r = check(pf_source("return Intervention('INJECT_CONTEXT', None, None, 'fixed text')"))
    assert r.prompt_equivalent and r.types == ["INJECT_CONTEXT"]


def test_modify_action_fails_a():
    r = check(pf_source("return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH', "
                        "new_action_arg=arg)"))
    assert not r.a and r.b and not r.prompt_equivalent
    assert any("constructs MODIFY_ACTION" in x for x in r.reasons)


def test_modify_in_one_branch_fails_a():
    r = check(pf_source("""
        if teacher is None:
            return Intervention(type=InterventionType.INJECT_CONTEXT, context_text='fixed')
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='FINAL', new_action_arg='a')
    """))
    assert not r.a and r.types == ["INJECT_CONTEXT", "MODIFY_ACTION"]


def test_modify_built_in_a_helper_method_is_found():
    r = check(pf_source("return self._repair(arg)", extra="""
        def _repair(self, arg):
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH', new_action_arg=arg)
    """))
    assert not r.a and any("MODIFY_ACTION" in x for x in r.reasons)


def test_modify_built_in_a_module_function_is_found():
    src = pf_source("return repair(arg)", prelude="""
        def repair(arg):
            return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='READ', new_action_arg=arg)
    """)
    assert not check(src).a


def test_unknown_type_fails_a_conservatively():
    r = check(pf_source("kind = InterventionType.INJECT_CONTEXT if arg else InterventionType.MODIFY_ACTION\n"
                        "return Intervention(type=kind, context_text='x', new_action_type='SEARCH')"))
    assert not r.a and any("not statically known" in x for x in r.reasons)
    r = check(pf_source("return Intervention.from_dict({'type': 'NOOP'})"))
    assert not r.a and any("from_dict" in x for x in r.reasons)
    r = check(pf_source("iv = Intervention(type=InterventionType.NOOP)\niv.type = 'MODIFY_ACTION'\nreturn iv"))
    assert not r.a and any("assigned after construction" in x for x in r.reasons)


def test_no_intervention_or_no_intervene_fails_a():
    assert not check(pf_source("return None")).a
    src = HEAD + "@register_pf('x_skill')\nclass XPF(ProgramFunction):\n    pass\n"
    r = check(src)
    assert not r.a and any("no intervene" in x for x in r.reasons)


def test_fstring_fails_b():
    r = check(pf_source("return Intervention(type=InterventionType.INJECT_CONTEXT, "
                        "context_text=f'[WARN] {arg} is wrong')"))
    assert r.a and not r.b and any("f-string" in x for x in r.reasons)


@pytest.mark.parametrize("expr,why", [
    ("'[W] {}'.format(arg)", "format()"),
    ("'[W] %s' % arg", "%-formatting"),
    ("'[W] ' + arg", "local 'arg', which holds a parameter"),
    ("'[W] ' + ctx['question']", "Subscript"),
    ("IMPORTED_TEXT", "the runtime value 'IMPORTED_TEXT'"),
    ("', '.join(ctx['queries'])", "join()"),
    ("ctx.get('question', '')", "get()"),
    ("str(ctx['step_count'])", "str()"),
])
def test_runtime_text_fails_b(expr, why):
    r = check(pf_source(f"return Intervention(type=InterventionType.INJECT_CONTEXT, context_text={expr})"))
    assert r.a and not r.b
    assert any(why in x for x in r.reasons), r.reasons


def test_constant_expressions_pass_b():
    cases = [
        "'[W] part one, ' 'part two'",
        "'[W] ' + 'joined'",
        "'[A]' if arg else '[B]'",
        "TEXT",
        "self.TEXT",
    ]
    for expr in cases:
        src = pf_source(f"return Intervention(type=InterventionType.INJECT_CONTEXT, context_text={expr})",
                        prelude="TEXT = '[W] module constant ' + 'text'", attrs="TEXT = '[W] class text'\n")
        r = check(src)
        assert r.prompt_equivalent, (expr, r.reasons)


def test_locals_pass_b_only_when_every_assignment_is_literal():
    literal = pf_source("""
        text = '[W] one'
        if arg:
            text = '[W] two'
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=text)
    """)
    assert check(literal).b
    grown = pf_source("""
        text = '[W] one'
        text += arg
        return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=text)
    """)
    r = check(grown)
    assert not r.b and any("augmented assignment" in x for x in r.reasons)
    param = pf_source("return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=arg)")
    assert any("parameter" in x for x in check(param).reasons)


def test_module_name_rebound_is_not_constant():
    src = pf_source("return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=TEXT)",
                    prelude="TEXT = 'a'\nTEXT = TEXT + 'b'")
    assert not check(src).b
    src = pf_source("return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=TEXT)",
                    prelude="TEXT = 'a'\ndef set_text(v):\n    global TEXT\n    TEXT = v\n")
    assert not check(src).b


def test_context_text_assigned_after_construction_is_checked():
    src = pf_source("iv = Intervention(type=InterventionType.INJECT_CONTEXT)\n"
                    "iv.context_text = f'{arg}'\nreturn iv")
    r = check(src)
    assert r.a and not r.b and any("context_text set to an f-string" in x for x in r.reasons)


def test_both_failures_are_reported_together():
    r = check(pf_source("return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH', "
                        "context_text=f'{arg}')"))
    assert not r.a and not r.b
    assert [x[:2] for x in r.reasons] == ["A:", "B:"]


def test_bad_sources_are_reported_not_raised():
    r = analyse_source("def broken(:\n", "x_skill")
    assert not r.prompt_equivalent and "does not parse" in r.reasons[0]
    r = analyse_source(HEAD + "class NotRegistered(ProgramFunction):\n    pass\n", "x_skill")
    assert not r.prompt_equivalent and "no @register_pf" in r.reasons[0]


def test_pf_attrs_reads_literals_with_base_defaults():
    src = pf_source("return Intervention()", attrs="needs_teacher = True\nhandler_kind = 'llm'\nwatches = ('FINAL',)\n")
    assert pf_attrs(src, "x_skill") == {"needs_teacher": True, "max_fires": None, "handler_kind": "llm",
                                        "watches": ("FINAL",)}
    with pytest.raises(LookupError):
        pf_attrs(src, "other_skill")


# ----------------------------------------------------------------------------- the real libraries
def _by_id(domain):
    return {r.skill_id: r for r in analyse_library(ROOT / domain)}


def test_search_library_equivalence():
    reps = _by_id("search")
    assert len(reps) == 26
    ab = {k for k, r in reps.items() if r.prompt_equivalent}
    assert ab == {"decompose_complex_question", "adversarial_distraction", "negation_oversight",
                  "wrong_entity_confusion", "reading_comprehension_error", "answer_completeness",
                  "language_barrier", "iterative_refinement", "claim_triangulation", "misinformation_detector"}
    # the paper's named non-A+B examples, for the paper's reasons
    assert not reps["retrieval_failure"].a and not reps["insufficient_exploration"].a
    assert reps["temporal_confusion"].a and not reps["temporal_confusion"].b
    assert reps["citation_mismatch"].a and not reps["citation_mismatch"].b
    for r in reps.values():
        assert r.prompt_equivalent or r.reasons


def test_code_and_math_library_equivalence():
    code = _by_id("code")
    assert {k for k, r in code.items() if r.prompt_equivalent} == {"code_negative_handling", "code_test_walkthrough"}
    math = _by_id("math")
    assert math and not any(r.prompt_equivalent for r in math.values())


# --------------------------------------------------------------------------- shared PF bases

#: (A, B, rewrite-only) of every seed skill, as decided from each pf.py written out in full
#: before the seeds moved onto the shared bases: the bases must not change a verdict.
SEED_VERDICTS = {
    "adversarial_distraction": (True, True, False), "algebraic_sign_error": (True, False, False),
    "answer_completeness": (True, True, False), "answer_confidence_guard": (False, True, False),
    "answer_type_mismatch": (True, False, False), "arithmetic_slip": (True, False, False),
    "boundary_violation": (True, False, False), "case_incompleteness": (True, False, False),
    "citation_mismatch": (True, False, False), "claim_triangulation": (True, True, False),
    "code_complexity_analysis": (True, False, False), "code_data_structure_choice": (True, False, False),
    "code_edge_cases": (True, False, False), "code_io_format": (True, False, False),
    "code_mutable_state": (True, False, False), "code_negative_handling": (True, True, False),
    "code_numeric_precision": (True, False, False), "code_off_by_one": (True, False, False),
    "code_recursion_depth": (True, False, False), "code_string_index_safety": (True, False, False),
    "code_test_walkthrough": (True, True, False), "code_verification": (True, False, False),
    "decompose_complex_question": (True, True, False), "final_format_error": (False, False, False),
    "format_extraction_error": (False, True, True), "insufficient_exploration": (False, True, True),
    "iterative_refinement": (True, True, False), "language_barrier": (True, True, False),
    "misinformation_detector": (True, True, False), "multi_hop_reasoning_failure": (False, True, True),
    "negation_oversight": (True, True, False), "overgeneralization": (True, False, False),
    "premature_final": (False, True, True), "proof_step_gap": (True, False, False),
    "query_drift": (False, True, True), "question_echo": (False, True, True),
    "reading_comprehension_error": (True, True, False), "reasoning_error": (False, False, False),
    "reasoning_hallucination": (False, True, True), "redundant_read": (False, True, True),
    "relevant_content_extractor": (True, False, False), "retrieval_failure": (False, True, True),
    "simplification_incomplete": (True, False, False), "step_budget_guard": (False, True, True),
    "substitution_invalid": (True, False, False), "temporal_confusion": (True, False, False),
    "units_dimension_mismatch": (True, False, False), "verification_missing": (True, False, False),
    "wrong_entity_confusion": (True, True, False),
}


def test_seed_verdicts_survive_the_shared_bases():
    got = {}
    for domain in ("search", "math", "code"):
        for rep in analyse_library(ROOT / domain):
            pf = Path(rep.path)
            if pf.name == "hasp.yaml":  # a declared PF: the verdict is read off its fields
                rewrites = load_skill(pf.parent).pf.rewrite is not None
            else:
                rewrites = only_modifies(pf.read_text(encoding="utf-8"), rep.skill_id)
            got[rep.skill_id] = (rep.a, rep.b, rewrites)
    assert got == SEED_VERDICTS


BASED = "from hasp.pf import register_pf\nfrom hasp.pf.base import HintPF\n\n"


def test_a_literal_hint_inherited_intervene_is_prompt_equivalent():
    src = BASED + textwrap.dedent('''
        @register_pf("h_ok")
        class H(HintPF):
            watches, max_fires = ("FINAL",), 1
            hint = ("Check the " "answer.")
            why = "x"

            def should_activate(self, ctx, action_type, arg):
                return action_type == "FINAL"
        ''')
    rep = analyse_source(src, "h_ok")
    assert rep.prompt_equivalent and rep.types == ["INJECT_CONTEXT"], rep.reasons
    assert pf_attrs(src, "h_ok")["watches"] == ("FINAL",) and pf_attrs(src, "h_ok")["max_fires"] == 1


@pytest.mark.parametrize("body,why", [
    ('hint = make_hint()', "call to make_hint()"),
    ('hint = "x"\n\n    def __init__(self):\n        self.hint = str(self)', "runtime value"),
])
def test_a_runtime_hint_is_not_b(body, why):
    src = BASED + f'@register_pf("h_bad")\nclass H(HintPF):\n    {body}\n'
    rep = analyse_source(src, "h_bad")
    assert rep.a and not rep.b and any("hasp.pf.base line" in r for r in rep.reasons), rep.reasons


def test_an_inherited_redirect_is_rewrite_only_and_names_the_base_module():
    src = ("from hasp.domains.search.pf_bases import FinalRedirectPF\nfrom hasp.pf import register_pf\n\n"
           '@register_pf("r")\nclass R(FinalRedirectPF):\n'
           '    def problem(self, ctx, answer):\n        return "p"\n\n'
           '    def target(self, ctx, arg):\n        return "q"\n')
    assert only_modifies(src, "r")
    rep = analyse_source(src, "r")
    assert not rep.a and rep.reasons == [r for r in rep.reasons if "hasp.domains.search.pf_bases line" in r]
    assert pf_attrs(src, "r")["handler_kind"] == "code" and pf_attrs(src, "r")["watches"] == ("FINAL",)
