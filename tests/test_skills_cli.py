"""`hasp skills list|show|diff|equivalence` on a temporary library with a generated __v2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hasp.cli import app, main

SEED = Path(__file__).resolve().parents[1] / "skills" / "search"
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
        shutil.copytree(SEED / sid, root / sid)
    gen = root / "generated" / "iterative_refinement__v2"
    gen.mkdir(parents=True)
    md = (SEED / "iterative_refinement" / "SKILL.md").read_text()
    (gen / "SKILL.md").write_text(md.replace("version: 1", "version: 2").replace(
        "title: Vary Repeated Searches", "title: Vary Repeated Searches (names the repeated query)"))
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
    (library / "premature_final" / "SKILL.md").write_text("no frontmatter here\n")
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
    assert "-from hasp.textutil import jaccard" in out
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
