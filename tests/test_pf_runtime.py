"""PF runtime: Intervention contract, SKILL.md, library versions, dispatcher limits and isolation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.pf.dispatcher import Dispatcher
from hasp.pf.library import library_hash, load_library
from hasp.pf.registry import collecting
from hasp.pf.skill_md import SkillFormatError, load_skill, parse_skill_md, write_skill_folder

SEED = Path(__file__).resolve().parents[1] / "hasp" / "skills" / "search"


def make_pf(sid, *, fire_on=("FINAL",), kind="MODIFY_ACTION", new=("SEARCH", "q"), raises=None, cap=None,
            watch=None):
    with collecting():
        @register_pf(sid)
        class _PF(ProgramFunction):
            max_fires = cap
            watches = watch
            asked: list[str]  # action types should_activate was called with

            def __init__(self):
                self.asked = []

            def should_activate(self, ctx, action_type, arg):
                self.asked.append(action_type)
                if raises == "should_activate":
                    raise RuntimeError("boom")
                return action_type in fire_on

            def intervene(self, ctx, action_type, arg, teacher=None):
                if raises == "intervene":
                    raise ValueError("bad")
                if kind == "MODIFY_ACTION":
                    return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type=new[0],
                                        new_action_arg=new[1], reason="r")
                if kind == "INJECT_CONTEXT":
                    return Intervention(type=InterventionType.INJECT_CONTEXT, context_text=f"ctx-{sid}")
                if kind == "DICT":
                    return {"type": "NOOP"}
                return Intervention()
    return _PF()


def test_intervention_contract():
    with pytest.raises(ValueError):
        Intervention(type=InterventionType.MODIFY_ACTION)  # a modification must say what to do
    iv = Intervention.from_dict({"type": "INJECT_CONTEXT", "context_text": "x", "junk": 1})
    assert iv.type is InterventionType.INJECT_CONTEXT and iv.context_text == "x"
    assert Intervention.from_dict(iv.to_dict()) == iv


def test_register_pf_rejects_non_pf():
    with pytest.raises(TypeError):
        register_pf("x_bad")(object)


def test_modify_limit_two_per_pf_and_one_per_step():
    a = make_pf("aaa_mod", new=("SEARCH", "first"))
    b = make_pf("bbb_mod", fire_on=("FINAL", "SEARCH"), new=("READ", "second"))
    d = Dispatcher([a, b], max_modify_fires=2)
    results = [d.dispatch({}, "FINAL", "x") for _ in range(3)]
    # step 1, 2: a modifies (b suppressed because the step is already modified)
    assert [(r.action_type, r.arg) for r in results[:2]] == [("SEARCH", "first")] * 2
    assert results[0].fired[1].skill_id == "bbb_mod" and results[0].fired[1].applied is False
    # step 3: a has used its two MODIFY fires -> b's modification applies
    assert (results[2].action_type, results[2].arg) == ("READ", "second")
    assert results[2].mode == "MODIFY_ACTION"


def test_per_skill_cap_counts_fires():
    pf = make_pf("capped_ctx", fire_on=("SEARCH",), kind="INJECT_CONTEXT", cap=2)
    d = Dispatcher([pf])
    fired = [bool(d.dispatch({}, "SEARCH", "q").fired) for _ in range(4)]
    assert fired == [True, True, False, False]


def test_raising_pf_is_disabled_and_others_still_run():
    bad = make_pf("bad_pf", raises="should_activate")
    bad2 = make_pf("bad_iv", raises="intervene")
    wrong_type = make_pf("wrong_type", kind="DICT")
    good = make_pf("good_ctx", kind="INJECT_CONTEXT")
    d = Dispatcher([bad, bad2, wrong_type, good])
    r1 = d.dispatch({}, "FINAL", "x")
    assert r1.contexts == ["ctx-good_ctx"]
    assert len(r1.errors) == 3 and set(d.disabled) == {"bad_pf", "bad_iv", "wrong_type"}
    r2 = d.dispatch({}, "FINAL", "x")
    assert r2.errors == [] and r2.contexts == ["ctx-good_ctx"]  # disabled ones are skipped, not retried


def test_dispatcher_asks_only_pfs_that_watch_the_action_type():
    final_only = make_pf("w_final", fire_on=("FINAL",), kind="INJECT_CONTEXT", watch=("FINAL",))
    everything = make_pf("w_all", fire_on=(), kind="INJECT_CONTEXT")
    d = Dispatcher([final_only, everything])
    for at in ("SEARCH", "READ", "FINAL"):
        d.dispatch({}, at, "x")
    assert final_only.asked == ["FINAL"]
    assert everything.asked == ["SEARCH", "READ", "FINAL"]
    assert Dispatcher([final_only], skip_unwatched=False).dispatch({}, "SEARCH", "x").fired == []
    assert final_only.asked[-1] == "SEARCH"  # asked (and said no) when skipping is off


def test_watches_are_rechecked_after_an_earlier_pf_changes_the_action_type():
    to_final = make_pf("m_to_final", fire_on=("SEARCH",), new=("FINAL", "Paris"), watch=("SEARCH",))
    search_watcher = make_pf("m_search", fire_on=("SEARCH",), kind="INJECT_CONTEXT", watch=("SEARCH",))
    final_watcher = make_pf("m_final", fire_on=("FINAL",), kind="INJECT_CONTEXT", watch=["final"])
    earlier_final = make_pf("m_final_0", fire_on=("FINAL",), kind="INJECT_CONTEXT", watch=("FINAL",))
    res = Dispatcher([earlier_final, to_final, search_watcher, final_watcher]).dispatch({}, "SEARCH", "q")
    assert (res.action_type, res.arg) == ("FINAL", "Paris")
    assert search_watcher.asked == [] and final_watcher.asked == ["FINAL"]  # "final" normalised to FINAL
    assert earlier_final.asked == []  # before the rewrite in priority order: the walk does not go back
    assert res.contexts == ["ctx-m_final"]


def test_rewrite_only_pfs_are_not_asked_once_a_rewrite_was_applied():
    first = make_pf("r_first", fire_on=("FINAL",), new=("SEARCH", "q1"))
    second = make_pf("r_second", fire_on=("FINAL", "SEARCH"), new=("SEARCH", "q2"))
    injector = make_pf("r_inject", fire_on=("SEARCH",), kind="INJECT_CONTEXT")
    second.modify_only = True  # what the library loader derives from a PF's source
    res = Dispatcher([first, second, injector]).dispatch({}, "FINAL", "x")
    assert (res.action_type, res.arg, res.contexts) == ("SEARCH", "q1", ["ctx-r_inject"])
    assert second.asked == [] and injector.asked == ["SEARCH"]
    assert [(f.skill_id, f.applied) for f in res.fired] == [("r_first", True), ("r_inject", True)]
    alone = Dispatcher([second]).dispatch({}, "FINAL", "x")  # no earlier rewrite: asked and applied
    assert (alone.arg, second.asked) == ("q2", ["FINAL"])
    every = Dispatcher([first, second], skip_unwatched=False).dispatch({}, "FINAL", "x")
    assert [(f.skill_id, f.applied) for f in every.fired] == [("r_first", True), ("r_second", False)]


def test_unusable_watches_means_every_type_with_a_warning(caplog):
    from hasp.pf.base import watched_types

    assert watched_types("final") == frozenset({"FINAL"})  # one string is one type, not five letters
    with pytest.raises(ValueError):
        watched_types(5)
    bad = make_pf("w_bad", fire_on=("READ",), kind="INJECT_CONTEXT", watch=5)
    with caplog.at_level("WARNING"):
        res = Dispatcher([bad]).dispatch({}, "READ", "doc1")
    assert [f.skill_id for f in res.fired] == ["w_bad"]
    assert "w_bad" in caplog.text and "every action type" in caplog.text


def test_skill_md_errors_name_the_file():
    with pytest.raises(SkillFormatError, match="x.md: missing YAML"):
        parse_skill_md("no frontmatter", "x.md")
    with pytest.raises(SkillFormatError, match="y.md: frontmatter has no skill_id"):
        parse_skill_md("---\nname: a\n---\nbody", "y.md")
    with pytest.raises(SkillFormatError, match="z.md: .*phases"):
        parse_skill_md("---\nskill_id: abc\nphases: {post_lunch: {}}\n---\n", "z.md")
    with pytest.raises(SkillFormatError, match="w.md: invalid YAML"):
        parse_skill_md("---\nskill_id: [unclosed\n---\n", "w.md")


def test_skill_md_agent_skills_keys_and_phase_text():
    spec = parse_skill_md("---\nskill_id: some_skill\nsystem_summary: Do X.\nphases:\n  pre_final: {}\n---\n"
                          "# T\n\n## Phase: pre_final\nCheck before answering.\n")
    assert spec.name == "some-skill" and spec.description == "Do X."
    assert spec.phase_text("pre_final") == "Check before answering."


def test_seed_library_loads_every_skill():
    lib = load_library(SEED)
    assert lib.load_errors == []
    for required in ("insufficient_exploration", "premature_final", "iterative_refinement",
                     "decompose_complex_question", "answer_completeness", "retrieval_failure"):
        assert required in lib.ids
    prios = [s.spec.priority for s in lib.skills]
    assert prios == sorted(prios, reverse=True)
    for s in lib.skills:  # Agent Skills keys present
        assert s.spec.name and s.spec.description


def test_highest_version_wins_and_broken_skill_is_skipped(tmp_path):
    root = tmp_path / "search"
    shutil.copytree(SEED, root)
    gen = root / "generated" / "premature-final-v2"
    write_skill_folder(gen, load_skill(SEED / "premature-final").model_copy(update={"version": 2, "priority": 0.95, "pf": None}))
    (gen / "pf.py").write_text(
        "from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf\n\n"
        "@register_pf('premature_final')\nclass P(ProgramFunction):\n"
        "    def should_activate(self, ctx, action_type, arg):\n"
        "        return action_type == 'FINAL' and ctx.get('search_count', 0) == 0\n"
        "    def intervene(self, ctx, action_type, arg, teacher=None):\n"
        "        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type='SEARCH',\n"
        "                            new_action_arg=ctx.get('question', ''), reason='v2')\n")
    broken = root / "broken-one"
    broken.mkdir()
    (broken / "SKILL.md").write_text("not a skill")
    (root / "generated" / ".tmp-half-written").mkdir()
    h1 = library_hash(root)
    lib = load_library(root)
    try:
        s = lib.get("premature_final")
        assert s.version == 2 and s.generated and s.spec.priority == 0.95
        assert type(s.pf).__name__ == "SandboxedPF"  # generated code never runs in-process
        assert any("broken-one" in e for e in lib.load_errors)
        assert "broken_one" not in lib.ids
        r = Dispatcher(lib.pfs()).dispatch({"question": "Who founded Acme?", "search_count": 0}, "FINAL", "x")
        assert (r.action_type, r.fired[0].skill_id) == ("SEARCH", "premature_final")
    finally:
        lib.close()
    (root / "generated" / ".tmp-half-written" / "x").write_text("junk")
    assert library_hash(root) == h1  # in-flight temp dirs are not part of the library's identity


def test_library_cap(tmp_path):
    root = tmp_path / "search"
    shutil.copytree(SEED, root)
    lib = load_library(root, max_size=3)
    assert len(lib.skills) == 3 and lib.ids[0] == "premature_final"


def test_a_typo_key_is_refused_with_one_line_naming_file_and_key(tmp_path):
    with pytest.raises(SkillFormatError) as e:
        parse_skill_md("---\nskill_id: abc\npriorty: 0.9\n---\n", "cand.md")
    assert str(e.value).startswith("cand.md: unknown key 'priorty'") and "\n" not in str(e.value)
    folder = shutil.copytree(SEED / "premature-final", tmp_path / "premature-final")
    md = folder / "SKILL.md"
    md.write_text(md.read_text().replace("description:", "version: 2\ndescription:"))
    with pytest.raises(SkillFormatError, match=rf"^{md}: unknown key 'version' \(allowed: name, description"):
        load_skill(folder)
    lib = load_library(folder.parent)
    assert lib.ids == [] and f"{md}: unknown key 'version'" in lib.load_errors[0]


@pytest.mark.parametrize("file_name", ["SKILL.md", "hasp.yaml"])
def test_a_binary_skill_file_is_one_load_error_naming_it(tmp_path, file_name):
    root = tmp_path / "search"
    shutil.copytree(SEED, root)
    bad = root / "premature-final" / file_name
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary")
    with pytest.raises(SkillFormatError, match=rf"^{bad}: not UTF-8 text"):
        load_skill(bad.parent)
    lib = load_library(root)
    try:
        errors = [e for e in lib.load_errors if str(bad) in e]
        assert len(errors) == 1 and "\n" not in errors[0] and "not UTF-8 text" in errors[0]
        assert "premature_final" not in lib.ids and "retrieval_failure" in lib.ids
    finally:
        lib.close()


def test_a_broken_generated_version_falls_back_to_the_working_one(tmp_path):
    root = tmp_path / "search"
    shutil.copytree(SEED, root)
    gen = write_skill_folder(root / "generated" / "premature-final-v2",
                             load_skill(SEED / "premature-final").model_copy(update={"version": 2}))
    (gen / "hasp.yaml").write_text("skill_id: premature_final\nversion: 2\npriorty: 1\n")
    lib = load_library(root)
    try:
        s = lib.get("premature_final")
        assert s is not None and (s.version, s.generated, s.path.name) == (1, False, "premature-final")
        assert any(str(gen) in e and "unknown key 'priorty'" in e for e in lib.load_errors)
        assert any("premature-final (v1)" in e and "newer version is broken" in e for e in lib.load_errors)
    finally:
        lib.close()


@pytest.mark.parametrize("key", ["name", "description"])
def test_skill_md_without_name_or_description_is_refused(tmp_path, key):
    folder = shutil.copytree(SEED / "premature-final", tmp_path / "premature-final")
    md = folder / "SKILL.md"
    lines = md.read_text().splitlines(keepends=True)
    md.write_text("".join(line for line in lines if not line.startswith(f"{key}:")))
    with pytest.raises(SkillFormatError, match=rf"^{md}: required key '{key}' must be a non-empty string \(missing\)"):
        load_skill(folder)
    lib = load_library(folder.parent)
    assert lib.ids == [] and len(lib.load_errors) == 1 and f"required key '{key}'" in lib.load_errors[0]
