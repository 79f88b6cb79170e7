"""Every prompt file ships and loads, and every prompt the code asks for exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hasp.prompts import PromptError, load_prompts, prompt, render

ROOT = Path(__file__).resolve().parents[1]
HASP = ROOT / "hasp"

# call shapes that name a prompt: prompt/render("pkg", "file", "key"), and the two per-file shorthands
_FULL = re.compile(r"""\b(?:prompt|render)\(\s*["']([\w.]+)["'],\s*["'](\w+)["'],\s*["'](\w+)["']""")
_SHORT = [  # (pattern, files it applies to or None for all, package, prompt file)
    (re.compile(r"""\b_p\(\s*["'](\w+)["']"""), {"propose.py"}, "hasp.evolve", "propose"),
    (re.compile(r"""\bteacher_prompt\(\s*["'](\w+)["']"""), None, "hasp.pf", "harness"),
]


def _prompt_files() -> list[tuple[str, str]]:
    out = []
    for f in sorted(HASP.rglob("prompts/*.yaml")):
        package = ".".join(f.parent.parent.relative_to(ROOT).parts)
        out.append((package, f.stem))
    return out


def _references() -> set[tuple[str, str, str]]:
    refs: set[tuple[str, str, str]] = set()
    for f in HASP.rglob("*.py"):
        text = f.read_text(encoding="utf-8")
        refs |= set(_FULL.findall(text))
        for pat, files, package, name in _SHORT:
            if files is None or f.name in files:
                refs |= {(package, name, key) for key in pat.findall(text)}
    return refs


def test_prompt_files_exist_and_load():
    files = _prompt_files()
    assert ("hasp.agent", "search_react") in files and ("hasp.evolve", "propose") in files
    for package, name in files:
        entries = load_prompts(package, name)
        assert entries and all(isinstance(k, str) for k in entries), f"{package}/{name}"


def test_every_prompt_the_code_names_exists():
    refs = _references()
    assert len(refs) > 20, "the reference scan found too few prompt uses; has the call shape changed?"
    for package, name, key in sorted(refs):
        assert isinstance(prompt(package, name, key), str), f"{package}/{name}:{key}"


def test_the_search_agent_prompts_the_loop_reads_exist():
    from hasp.agent.loop import load_prompts as agent_prompts

    p = agent_prompts()
    for key in ("system", "skills_header", "question", "observation", "parse_error", "budget_exhausted",
                "reminder", "budget_final"):
        assert isinstance(p[key], str), key
    assert all({"role", "content"} <= set(m) for m in p["demo"])


def test_a_missing_prompt_names_file_and_key():
    with pytest.raises(PromptError, match=r"hasp/evolve/prompts/propose.yaml: no prompt 'nope'"):
        prompt("hasp.evolve", "propose", "nope")
    with pytest.raises(PromptError, match="no such prompt file"):
        load_prompts("hasp.evolve", "no_such_file")
    with pytest.raises(PromptError, match="not prompt text"):
        prompt("hasp.agent", "search_react", "demo")


def test_render_fills_placeholders():
    assert render("hasp.episode", "judge", "user", question="Q", refs="a", prediction="p").startswith("Question: Q\n")
