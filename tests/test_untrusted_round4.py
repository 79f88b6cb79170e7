"""Untrusted input, round four: numbers that are not numbers, terminal text, Unicode actions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hasp.config import ParamsError, load_params
from hasp.pf.skill_md import SkillFormatError, load_skill

ROOT = Path(__file__).resolve().parents[1]


def _skill(tmp_path: Path, extra: str) -> Path:
    d = tmp_path / "num-skill"
    d.mkdir()
    (d / "SKILL.md").write_text("---\nname: num-skill\ndescription: A skill whose numbers are checked.\n---\n")
    (d / "hasp.yaml").write_text("skill_id: num_skill\ntitle: t\nversion: 1\nerror_category: other\ndomain: search\n"
                                 + extra)
    return d


@pytest.mark.parametrize("extra", ["priority: .nan\n", "priority: .inf\n", "priority: -.inf\n",
                                   "phases:\n  pre_final:\n    conditions: [has_read]\n    priority_boost: .nan\n"
                                   "    text: t\n"])
def test_a_skill_number_that_is_not_finite_is_refused_naming_the_file(tmp_path, extra):
    with pytest.raises(SkillFormatError, match=r"num-skill: .*finite number"):
        load_skill(_skill(tmp_path, extra))


@pytest.mark.parametrize("key", ["agent.temperature", "harness.timeout_seconds", "evolve.proposal_temperature"])
def test_a_params_number_that_is_not_finite_is_one_error_naming_the_key(key):
    with pytest.raises(ParamsError, match=key.split(".")[1]):
        load_params(ROOT / "params.yaml", {key: float("nan")})


@pytest.mark.parametrize("text", ['{"score": NaN}', '{"score": Infinity}', '[-Infinity]', '{"q": 1e999}'])
def test_a_model_reply_with_a_number_that_is_not_finite_is_refused(text):
    from hasp.bounded import ParseRefused, json_load

    with pytest.raises(ParseRefused):
        json_load(text)
    assert json_load('{"score": 0.5}') == {"score": 0.5}


HOSTILE = "\x1b[2K\x1b]0;owned\x07\x1b[8mhidden\x1b[0m \u202egnp.exe [/bold][link=x]"
_PF = '''
from hasp.pf import register_pf
from hasp.pf.base import ProgramFunction


@register_pf("hostile_text")
class HostileText(ProgramFunction):
    handler_kind = "[/bold]\\x1b[2K"
    watches = ("FINAL",)

    def should_activate(self, ctx, action_type, arg):
        return False
'''


def _hostile_library(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    d = lib / "hostile-text"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\nname: hostile-text\ndescription: \"Shows {HOSTILE!r} text.\"\n---\n\n"
                                f"# Body\n{HOSTILE}\n")
    (d / "hasp.yaml").write_text("skill_id: hostile_text\ntitle: t\nversion: 1\nerror_category: other\n"
                                 "domain: search\n")
    (d / "pf.py").write_text(_PF)
    good = lib / "plain-note"
    good.mkdir()
    (good / "SKILL.md").write_text("---\nname: plain-note\ndescription: A plain skill beside the hostile one.\n---\n")
    (good / "hasp.yaml").write_text("skill_id: plain_note\ntitle: t\nversion: 1\nerror_category: other\n")
    return lib


@pytest.mark.parametrize("args", [["list"], ["show", "hostile_text"], ["validate"]])
def test_skills_commands_print_folder_text_as_text(tmp_path, args):
    """Control sequences from a skill folder reach the terminal escaped, Rich markup is not read,
    and one hostile skill does not hide the other."""
    from typer.testing import CliRunner

    from hasp.cli import app

    lib = _hostile_library(tmp_path)
    argv = ["skills", *args, str(lib)] if args == ["validate"] else ["skills", *args, "--library", str(lib)]
    r = CliRunner().invoke(app, argv)
    out = r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out, out
    if args != ["show", "hostile_text"]:
        assert "plain_note" in out or "plain-note" in out
    if args == ["show", "hostile_text"]:
        assert "\\x1b[2K" in out and "\\u202e" in out  # shown, escaped


@pytest.mark.parametrize("text,expect", [
    ("Action: FİNAL[Telvik]", None), ("Action: fınal[Telvik]", None), ("Action: ＦＩＮＡＬ[Telvik]", None),
    ("Action: ſearch[Ana Morro]", ("SEARCH", "Ana Morro")), ("Action: READ[d1]", ("READ", "d1"))])
def test_a_unicode_spelling_is_that_action_or_a_parse_error_never_a_third_type(text, expect):
    from hasp.agent.parser import ParseFailure, parse_action

    got = parse_action(text)
    if expect is None:
        assert isinstance(got, ParseFailure)
    else:
        assert (got.type, got.arg) == expect


def test_an_episode_the_agent_crashes_is_scored_as_wrong_and_an_endpoint_failure_is_left_out():
    """The crash must not raise the score: EM over all episodes the agent ran, crashes included."""
    from hasp.config import Params
    from hasp.episode.domains import SearchDomain
    from hasp.episode.records import EpisodeRecord
    from hasp.episode.spec import episode_spec, infrastructure
    from hasp.eval.summary import summarize_cell
    from hasp.llm.client import LLMError
    from hasp.records import Trajectory

    spec = episode_spec(Params(), SearchDomain(data_dir=Path(".")), "react")
    item = type("Q", (), {"id": "q1", "question": "Where?", "answers": ["Telvik"]})()
    crashed = spec.crashed(item, "ValueError: unknown action type 'FİNAL'")
    failed = spec.failed(item, "LLMError: endpoint down")
    right = EpisodeRecord(Trajectory(qid="q2", question="Q?", answers=["a"], variant="react", terminated="final",
                                     em=1.0, f1=1.0), 0)
    s = summarize_cell([right, crashed, failed], 1.0)
    assert (s["n"], s["n_scored"], s["n_failed"], s["n_crashed"]) == (3, 2, 1, 1) and s["em"] == 0.5
    assert infrastructure(LLMError("down")) and infrastructure(OSError("disk")) and not infrastructure(ValueError("x"))


def test_the_seed_manifest_lists_exactly_the_shipped_seeds():
    """``HASP_WRITE_FIXTURES=1`` rewrites it after a seed's pf.py changed on purpose."""
    import os

    from hasp.pf.trust import MANIFEST, SEED_ROOT, manifest_text

    if os.environ.get("HASP_WRITE_FIXTURES"):
        (SEED_ROOT / MANIFEST).write_text(manifest_text())
    assert (SEED_ROOT / MANIFEST).read_text() == manifest_text(), "seed pf.py changed: rewrite the manifest"


def test_a_pf_file_written_below_a_seed_root_is_not_trusted_by_being_there(tmp_path):
    from hasp.pf.trust import seed_digests

    root = tmp_path / "skills"
    (root / "search" / "planted").mkdir(parents=True)
    (root / "search" / "planted" / "pf.py").write_text("import os\nos.system('id')\n")
    assert seed_digests(root) == frozenset()  # no manifest, nothing trusted


def test_admission_refuses_a_symlinked_generated_folder_and_the_loader_skips_linked_skills(tmp_path):
    from hasp.evolve.admit import inside_library
    from hasp.pf.layout import VERSION_DIR, scan_versions

    lib, outside = tmp_path / "lib", tmp_path / "elsewhere"
    lib.mkdir(), outside.mkdir()
    (lib / "generated").symlink_to(outside)
    with pytest.raises(SkillFormatError, match="outside the library"):
        inside_library(lib, lib / "generated")
    seed = ROOT / "hasp" / "skills" / "search" / "premature-final"
    (lib / "premature-final").symlink_to(seed)
    assert scan_versions(lib) == {}
    assert VERSION_DIR.match("x-v12") and not VERSION_DIR.match("x-v\u0661\u0662") and not VERSION_DIR.match("x-v1\n")


def test_validate_and_the_loader_agree_on_a_declared_pf_with_texts(tmp_path):
    from hasp.evolve.skill_check import check_folder
    from hasp.pf.library import load_library

    lib = tmp_path / "lib"
    d = lib / "texty-note"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: texty-note\ndescription: A declared PF that also sets texts.\n---\n")
    (d / "hasp.yaml").write_text("skill_id: texty_note\ntitle: t\nversion: 1\nerror_category: other\n"
                                 "domain: search\ntexts: {hint: other words}\n"
                                 "pf:\n  watches: [SEARCH]\n  inject: Read a result.\n  reason: searched\n")
    loaded = load_library(lib, "search")
    rep = check_folder(d)
    assert (loaded.get("texty_note") is not None) == rep.ok, (loaded.load_errors, rep.errors)


def test_a_snapshot_holds_exactly_the_set_the_loader_activates(tmp_path):
    """A broken highest version: the loader falls back to the one below, and so does the snapshot."""
    import hashlib
    import shutil

    from hasp.evolve.admit import snapshot
    from hasp.pf.library import load_library

    lib = tmp_path / "lib"
    for name in ("premature-final", "redundant-read", "answer-completeness"):
        shutil.copytree(ROOT / "hasp" / "skills" / "search" / name, lib / name)
    broken = lib / "generated" / "redundant-read-v2"
    shutil.copytree(lib / "redundant-read", broken)
    (broken / "hasp.yaml").write_text((broken / "hasp.yaml").read_text().replace("version: 1", "version: 2")
                                      + "priority: .nan\n")
    snap = snapshot(lib, tmp_path / "snap")

    def active(root):
        loaded = load_library(root, "search")
        try:
            return {s.skill_id: (s.version, {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                                             for f in sorted(s.path.iterdir()) if f.is_file()})
                    for s in loaded.skills}
        finally:
            loaded.close()

    assert active(snap) == active(lib) and active(lib)["redundant_read"][0] == 1


def test_a_deep_or_wide_tree_is_refused_by_the_copy_and_the_hash_not_by_a_crash(tmp_path):
    from hasp.pf.folder_files import MAX_TREE_DEPTH, copy_folder
    from hasp.pf.library import library_hash

    lib = tmp_path / "lib"
    deep = lib / "deep-skill"
    deep.mkdir(parents=True)
    (deep / "SKILL.md").write_text("---\nname: deep-skill\ndescription: d\n---\n")
    d = str(deep)
    for _ in range(1100):  # a recursive walk (pathlib's rglob, a recursive copy) runs out of stack frames here
        d += "/d"
        os.mkdir(d)
    Path(d, "pf.py").write_text("x = 1\n")
    try:
        before = library_hash(lib)
        assert before == library_hash(lib)  # deterministic
        left = copy_folder(deep, tmp_path / "copy")
        assert any(f"deeper than {MAX_TREE_DEPTH} levels" in line for line in left)
        assert (tmp_path / "copy" / "SKILL.md").is_file()
    finally:  # bottom-up: pytest's own clean-up of old temp folders (shutil.rmtree) recurses
        os.remove(os.path.join(d, "pf.py"))
        while d != str(deep):
            os.rmdir(d)
            d = os.path.dirname(d)


def test_the_checker_imports_only_modules_the_problems_tests_import():
    """A solution whose answer names a module makes the checker import it only when the tests do."""
    from hasp.domains.code import run_program
    from hasp.sandbox.program_driver import imported_modules

    assert imported_modules("import math\nfrom collections import abc\nfrom . import x\n") == {
        "math", "collections"}
    tests = "assert f(3) == 9\n"
    named = "import unittest.mock\ndef f(x):\n    return unittest.mock\n"
    r = run_program(named, tests, "f")
    assert not r.passed and "not one the problem's tests import" in r.detail, r.detail
    ok = run_program("import math\ndef f(x):\n    return math\n", "import math\nassert f(3) is math\n", "f")
    assert ok.passed, ok.detail
