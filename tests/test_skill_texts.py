"""A skill's texts live in its hasp.yaml (``texts:``): the loader sets them on the seed PF,
refuses a key the PF does not say with one line naming the file and the key, and the
render / write round trip keeps them."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from hasp.pf.base import FindingsPF
from hasp.pf.library import load_library
from hasp.pf.skill_md import HASP_FILE, load_skill, render_skill_folder, write_skill_folder

SKILLS = Path(__file__).resolve().parents[1] / "hasp" / "skills"


def _yaml_texts(folder: Path) -> dict[str, str]:
    return yaml.safe_load((folder / HASP_FILE).read_text(encoding="utf-8"))["texts"]


def test_a_seed_findings_pf_says_what_its_hasp_yaml_says():
    lib = load_library(SKILLS / "code", "code", include_generated=False)
    skill = lib.get("code_recursion_depth")
    texts = _yaml_texts(skill.path)
    assert skill.spec.texts == texts and set(texts) == {"label", "noun", "advice"}
    pf = skill.pf
    assert "label" not in vars(type(pf)) and "advice" not in vars(type(pf))  # not in pf.py
    for key, text in texts.items():
        assert getattr(pf, key) == text
    code = "def f(n):\n    return f(n - 1) if n else 0\n"
    iv = pf.intervene({"question": "write f"}, "FINAL", code)
    assert iv.context_text.startswith(f"[{texts['label']}]") and texts["advice"] in iv.context_text
    assert iv.reason.endswith(texts["noun"])


def test_every_math_and_code_findings_pf_has_its_texts_in_hasp_yaml():
    for domain in ("math", "code"):
        lib = load_library(SKILLS / domain, domain, include_generated=False)
        assert not lib.load_errors
        findings = [s for s in lib.skills if isinstance(s.pf, FindingsPF)]
        assert len(findings) >= 9
        for s in findings:
            assert s.spec.texts == _yaml_texts(s.path), s.skill_id
            assert not set(vars(type(s.pf))) & {"label", "closing", "noun", "quiet", "advice"}, s.skill_id


def _copy_with_texts(tmp_path: Path, extra: str) -> Path:
    root = tmp_path / "code"
    shutil.copytree(SKILLS / "code" / "code-recursion-depth", root / "code-recursion-depth")
    hasp_yaml = root / "code-recursion-depth" / HASP_FILE
    hasp_yaml.write_text(hasp_yaml.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return root


def test_an_unknown_texts_key_is_refused_with_one_line_naming_file_and_key(tmp_path):
    root = _copy_with_texts(tmp_path, "  lable: RECURSION\n")
    lib = load_library(root, "code")
    assert lib.skills == [] and len(lib.load_errors) == 1
    msg = lib.load_errors[0]
    assert "\n" not in msg and f"code-recursion-depth/{HASP_FILE}" in msg and "'lable'" in msg
    assert "allowed: advice, closing, label, noun, quiet" in msg


def test_a_string_attribute_that_is_not_a_text_is_refused(tmp_path):
    lib = load_library(_copy_with_texts(tmp_path, "  trigger: SEARCH\n"), "code")
    assert lib.skills == [] and "texts: unknown key 'trigger'" in lib.load_errors[0]


def test_a_text_that_is_not_a_string_is_refused_naming_the_file(tmp_path):
    lib = load_library(_copy_with_texts(tmp_path, "  quiet: [a, b]\n"), "code")
    assert lib.skills == [] and "texts.quiet" in lib.load_errors[0] and "code-recursion-depth" in lib.load_errors[0]


def test_render_and_write_keep_texts_and_leave_them_out_when_there_are_none(tmp_path):
    spec = load_skill(SKILLS / "math" / "case-incompleteness")
    assert spec.texts["label"] == "[CASE CHECK]"
    again = load_skill(write_skill_folder(tmp_path / "case-incompleteness", spec))
    assert again.texts == spec.texts
    bare = render_skill_folder(spec.model_copy(update={"texts": {}}), "case-incompleteness")[HASP_FILE]
    assert "texts" not in yaml.safe_load(bare)


def test_a_generated_pf_keeps_its_texts_in_its_code_and_yaml_texts_are_reported(tmp_path):
    root = tmp_path / "code"
    shutil.copytree(SKILLS / "code" / "code-recursion-depth", root / "code-recursion-depth")
    spec = load_skill(root / "code-recursion-depth")
    gen = write_skill_folder(root / "generated" / "code-recursion-depth-v2", spec.model_copy(update={"version": 2}))
    (gen / "pf.py").write_text(
        "from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf\n\n"
        "@register_pf('code_recursion_depth')\nclass P(ProgramFunction):\n"
        "    def should_activate(self, ctx, action_type, arg):\n        return False\n"
        "    def intervene(self, ctx, action_type, arg, teacher=None):\n"
        "        return Intervention(type=InterventionType.NOOP)\n")
    lib = load_library(root, "code")
    try:
        s = lib.get("code_recursion_depth")
        assert s.generated and s.version == 2 and s.spec.texts == {}
        assert len(lib.load_errors) == 1 and "texts: a generated PF keeps its texts in its code" in lib.load_errors[0]
        assert f"code-recursion-depth-v2/{HASP_FILE}" in lib.load_errors[0]
    finally:
        lib.close()
