"""Untrusted input, round four: numbers that are not numbers, terminal text, Unicode actions."""

from __future__ import annotations

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
