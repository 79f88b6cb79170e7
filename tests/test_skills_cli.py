"""`hasp skills list|show|diff|equivalence|validate` on a temporary library with a generated -v2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hasp.cli import app, main
from hasp.pf.skill_md import kebab, load_skill, write_skill_folder

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"
runner = CliRunner()

GENERATED_V2 = '''"""SEARCH repeating a recent query -> a warning that names the repeated query."""

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("iterative_refinement")
class IterativeRefinementPF(ProgramFunction):
    max_fires = 3

    def should_activate(self, ctx, action_type, arg):
        words = set(arg.lower().split())
        return action_type == "SEARCH" and any(
            len(words & set(q.lower().split())) * 2 > len(words | set(q.lower().split()))
            for q in ctx.get("queries", [])[-3:])

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(
            type=InterventionType.INJECT_CONTEXT,
            context_text=f"[SEARCH REFINEMENT] {arg!r} is almost the same as an earlier search. "
                         "Search for a different entity from the question, or READ a result.",
            reason="near-duplicate query")
'''


@pytest.fixture()
def library(tmp_path: Path) -> Path:
    """Three seed skills plus a generated v2 of iterative_refinement whose text is built at run time."""
    root = tmp_path / "search"
    for sid in ("premature_final", "decompose_complex_question", "iterative_refinement"):
        shutil.copytree(SEED / kebab(sid), root / kebab(sid))
    gen = root / "generated" / "iterative-refinement-v2"
    spec = load_skill(SEED / "iterative-refinement")
    write_skill_folder(gen, spec.model_copy(update={
        "version": 2, "title": "Vary Repeated Searches (names the repeated query)", "pf": None}))
    # generated code runs in the sandbox, whose policy allows no hasp helpers: v2 is self-contained
    (gen / "pf.py").write_text(GENERATED_V2)
    return root


def invoke(*args: str):
    return runner.invoke(app, ["skills", *args])


def test_list_shows_versions_sources_handlers_and_ab(library):
    r = invoke("list", "--library", str(library))
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if line.count("│") > 5}
    assert set(rows) >= {"premature_final", "decompose_complex_question", "iterative_refinement"}
    assert "v2" in rows["iterative_refinement"] and "generated" in rows["iterative_refinement"]
    assert "seed" in rows["premature_final"] and "code" in rows["premature_final"]
    assert "A+B" in rows["decompose_complex_question"]
    assert "A+B" not in rows["iterative_refinement"]  # v2 formats the query into its text


def test_show_active_and_chosen_version(library):
    r = invoke("show", "iterative_refinement", "--library", str(library))
    assert r.exit_code == 0, r.output
    assert "v2 (generated)" in r.stdout and "names the repeated query" in r.stdout
    assert "skill_id: iterative_refinement" in r.stdout and "@register_pf" in r.stdout
    assert "not A+B: B:" in r.stdout and "f-string" in r.stdout
    assert "rewrite-only: -" in r.stdout  # it injects context
    r2 = invoke("show", "premature_final", "--library", str(library))
    assert r2.exit_code == 0 and "watches: FINAL" in r2.stdout and "rewrite-only: yes" in r2.stdout
    r1 = invoke("show", "iterative_refinement", "--version", "1", "--library", str(library))
    assert r1.exit_code == 0 and "v1 (seed)" in r1.stdout and "names the repeated query" not in r1.stdout


def test_show_errors_name_the_problem(library):
    r = invoke("show", "iterative_refinement", "--version", "7", "--library", str(library))
    assert r.exit_code == 2 and "no version 7" in r.stderr and "v2 (generated)" in r.stderr
    r = invoke("show", "no_such_skill", "--library", str(library))
    assert r.exit_code == 2 and "no skill 'no_such_skill'" in r.stderr
    (library / "premature-final" / "SKILL.md").write_text("no frontmatter here\n")
    r = invoke("show", "premature_final", "--library", str(library))
    assert r.exit_code == 2 and "SKILL.md" in r.stderr


def test_diff_seed_v1_against_generated_v2(library):
    r = invoke("diff", "iterative_refinement", "--library", str(library))
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "--- iterative_refinement v1 (seed)/SKILL.md" in out
    assert "+++ iterative_refinement v2 (generated)/pf.py" in out
    assert "-version: 1" in out and "+version: 2" in out
    assert '+            context_text=f"[SEARCH REFINEMENT] {arg!r}' in out
    assert "-pf:" in out and "-  watches:" in out  # v1 declares its PF; v2 replaces it with code
    explicit = invoke("diff", "iterative_refinement", "--from", "1", "--to", "2", "--library", str(library))
    assert explicit.exit_code == 0 and explicit.stdout == out


def test_diff_needs_two_versions(library):
    r = invoke("diff", "premature_final", "--library", str(library))
    assert r.exit_code == 2 and "both sides are v1 (seed)" in r.stderr
    assert main(["skills", "diff", "premature_final", "--library", str(library)]) == 2


def test_equivalence_table_and_json(library):
    r = invoke("equivalence", "--library", str(library))
    assert r.exit_code == 0, r.output
    assert "1 of 3 skills are prompt-equivalent (A+B)" in r.stdout
    assert "constructs MODIFY_ACTION" in r.stdout and "f-string" in r.stdout
    j = invoke("equivalence", "--json", "--library", str(library))
    data = json.loads(j.stdout)
    assert (data["prompt_equivalent"], data["total"]) == (1, 3)
    by_id = {s["skill_id"]: s for s in data["skills"]}
    assert by_id["decompose_complex_question"]["prompt_equivalent"]
    assert by_id["iterative_refinement"]["a"] and not by_id["iterative_refinement"]["b"]
    assert not by_id["premature_final"]["a"]


def test_missing_library_is_one_clear_error(tmp_path):
    r = invoke("equivalence", "--library", str(tmp_path / "nope"))
    assert r.exit_code == 2 and "no skill library" in r.stderr


SKILLS = SEED.parent


def test_every_seed_skill_passes_the_agent_skills_reference_validator():
    from skills_ref import validate

    folders = sorted(p for p in SKILLS.glob("*/*") if (p / "SKILL.md").exists())
    assert len(folders) >= 49
    assert {str(f): validate(f) for f in folders if validate(f)} == {}


def test_validate_passes_every_seed_skill():
    r = invoke("validate", str(SKILLS / "search"), str(SKILLS / "math"), str(SKILLS / "code"), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] == out["total"] >= 49
    assert {f["mode"] for f in out["folders"]} == {"trusted", "declared"}


def test_validate_runs_a_generated_version_in_the_sandbox(library):
    r = invoke("validate", str(library / "generated" / "iterative-refinement-v2"), "--json")
    assert r.exit_code == 0, r.output
    folder = json.loads(r.stdout)["folders"][0]
    assert folder["mode"] == "sandbox" and set(folder["checks"].values()) == {"ok"}


def test_validate_refuses_a_typo_with_one_line_and_exit_1(library):
    hasp_yaml = library / "premature-final" / "hasp.yaml"
    hasp_yaml.write_text(hasp_yaml.read_text().replace("priority:", "priorty:"))
    r = invoke("validate", str(library / "premature-final"), "--json")
    assert r.exit_code == 1
    folder = json.loads(r.stdout)["folders"][0]
    assert folder["checks"]["hasp"] == "fail" and folder["checks"]["agent_skills"] == "ok"
    assert folder["errors"] == [f"hasp: {hasp_yaml}: unknown key 'priorty' (allowed: skill_id, title, version, "
                                "priority, error_category, domain, applicable_modes, applicable_phases, "
                                "trigger_keywords, always_on, system_summary, phases, texts, pf)"]
    table = invoke("validate", str(library / "premature-final"))
    assert table.exit_code == 1 and "fail" in table.stdout and "0 of 1 skill folders pass" in table.stdout


def test_validate_names_an_agent_skills_violation(library):
    md = library / "premature-final" / "SKILL.md"
    md.write_text(md.read_text().replace("name: premature-final", "name: premature_final"))
    r = invoke("validate", str(library / "premature-final"), "--json")
    folder = json.loads(r.stdout)["folders"][0]
    assert r.exit_code == 1 and folder["checks"]["agent_skills"] == "fail"
    assert any("must match skill name" in e for e in folder["errors"])


def test_list_reads_a_user_library_of_any_name_with_its_declared_pf(tmp_path):
    """The library's domain comes from what its skills declare, not from the folder's name, and a
    user's skill is labelled user, not seed."""
    lib = tmp_path / "mylib" / "search-note"
    lib.mkdir(parents=True)
    (lib / "SKILL.md").write_text("---\nname: search-note\ndescription: When the agent searches, a note asks it "
                                  "to read a result.\n---\n\n# Search note\n")
    (lib / "hasp.yaml").write_text("skill_id: search_note\ntitle: Search note\nversion: 1\npriority: 0.5\n"
                                   "error_category: other\ndomain: search\napplicable_modes: [all]\n"
                                   "pf:\n  watches: [SEARCH]\n  inject: Read a result.\n  reason: searched\n")
    r = invoke("list", "--library", str(tmp_path / "mylib"))
    assert r.exit_code == 0 and "error:" not in r.output, r.output
    row = next(line for line in r.output.splitlines() if "search_note" in line)
    assert "user" in row and "seed" not in row
