"""The package as a user installs it: a wheel built from this checkout, installed into a fresh venv,
used from an empty folder with only the installed `hasp` command and the user's own files.

The fresh venv sees this checkout's dependencies through a path file (nothing is downloaded), but
not the checkout: `hasp` is the wheel's, its seed skills are the wheel's package data, and the
checkout's `skills`, `params.yaml` and `flows/` are nowhere on its path. One test drives the whole
first hour (one model server start per command): the seeds on a 3-question plain dataset (5 documents), a user
library whose code PF and declared PF fire under the default params, the example task through the CLI
and the Python API, and `hasp show` over the results.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

QUESTIONS = [("Where was Ana Morro born?", "Telvik"), ("What colour is the flag of Verzi?", "green"),
             ("Which river flows through Sonddeth?", "Amber")]
CORPUS = [("d1", "Ana Morro", "Ana Morro was born in Telvik in 1961. She founded Brightwell Labs."),
          ("d2", "Brightwell Labs", "Brightwell Labs is a company founded by Ana Morro in 1990."),
          ("d3", "Verzi", "The flag of Verzi is green with a white star."),
          ("d4", "Holor Textiles", "Holor Textiles is a textile maker founded in 1958 in Telvik."),
          ("d5", "Sonddeth", "Sonddeth is a town on the Amber river.")]

CODE_PF = '''
from hasp.pf import register_pf
from hasp.pf.base import ProgramFunction
from hasp.pf.intervention import Intervention, InterventionType


@register_pf("answer_note")
class AnswerNote(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL"

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(InterventionType.INJECT_CONTEXT, context_text="Check the answer against a document.",
                            reason="every answer is checked once", skill_id="answer_note")
'''


def _skill(root: Path, name: str, sid: str, desc: str, extra: str = "") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\n\n# {name}\n\n{desc}\n")
    (d / "hasp.yaml").write_text(f"skill_id: {sid}\ntitle: {name}\nversion: 1\npriority: 0.5\n"
                                 f"error_category: other\ndomain: search\napplicable_modes: [all]\n{extra}")
    return d


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel of this checkout; returns its bin folder."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"  # what a source distribution holds; the build leaves its build/ there, not here
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, src / name)
    for name in ("hasp", "flows", "tasks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(base / "dist"), str(src)], check=True, capture_output=True, timeout=600)
    wheel = next((base / "dist").glob("hasp-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    own = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    # the checkout's dependencies, after the venv's own site-packages; their .pth files (the
    # checkout's editable install among them) are not run from a path line
    (Path(own) / "deps-of-the-checkout.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True, timeout=600)
    return venv / "bin"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "HASP_PROGRESS": "0"}


def _hasp(bin_dir: Path, cwd: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(bin_dir / "hasp"), *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"hasp {' '.join(args)}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.model
def test_a_users_first_hour_from_an_empty_folder_with_the_installed_wheel(installed, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    where = subprocess.run([str(installed / "python"), "-c", "import hasp, hasp.seeds as s; "
                            "print(hasp.__file__); print(s.seed_library())"], cwd=work, env=_env(),
                           capture_output=True, text=True, check=True).stdout.split()
    assert str(ROOT) not in where[0] and (Path(where[1]) / "premature-final" / "SKILL.md").is_file()

    mine = work / "mine"
    mine.mkdir()
    (mine / "questions.jsonl").write_text("".join(json.dumps({"question": q, "answers": [a]}) + "\n"
                                                  for q, a in QUESTIONS))
    (mine / "corpus.jsonl").write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n"
                                               for i, t, x in CORPUS))
    r = _hasp(installed, work, "eval", "--dataset", "mine", "--variants", "react,pf", "--out", "seeds",
              "--no-progress")
    seeds = json.loads((work / "seeds" / "metrics.json").read_text())["qa-mine"]
    assert seeds["react"]["n"] == seeds["pf"]["n"] == len(QUESTIONS) and seeds["pf"]["library_size"] >= 20
    assert seeds["pf"]["pf_selected_episodes"] == len(QUESTIONS), r.stderr

    lib = work / "mylib"
    (_skill(lib, "answer-note", "answer_note", "When the agent answers, a note asks it to check the answer.")
     / "pf.py").write_text(textwrap.dedent(CODE_PF))
    _skill(lib, "search-note", "search_note", "When the agent searches or answers, a note asks it to read a result.",
           "pf:\n  watches: [SEARCH, FINAL]\n  inject: Read one of the results before you go on.\n"
           "  max_fires: 1\n  reason: the agent acted without reading\n")
    _hasp(installed, work, "skills", "validate", "mylib")
    r = _hasp(installed, work, "eval", "--dataset", "mine", "--variants", "pf", "--library", "mylib", "--out", "own",
              "--no-progress")
    own = json.loads((work / "own" / "metrics.json").read_text())["qa-mine"]["pf"]
    assert own["pf_fires"].get("answer_note", 0) >= 1 and own["pf_fires"].get("search_note", 0) >= 1, own["pf_fires"]
    shown = _hasp(installed, work, "show", "own", "--skill", "search_note").stdout
    assert "PF search_note INJECT_CONTEXT: the agent acted without reading" in shown and "question: " in shown

    example = work / "unit_convert"
    shutil.copytree(ROOT / "examples" / "unit_convert", example, ignore=shutil.ignore_patterns("__pycache__"))
    # one item each way: that the installed command and API find the user's task and its PF fires (the
    # checkout's tests run the example on more items)
    _hasp(installed, example, "eval", "--domain", "task:unit_task", "--variants", "pf", "--limit", "1",
          "--out", "cli", "--no-progress")
    cli = json.loads((example / "cli" / "metrics.json").read_text())["unit_convert"]["pf"]
    assert cli["n"] == 1 and cli["pf_fires"].get("unit_suffix_guard", 0) >= 1
    api = subprocess.run([str(installed / "python"), "-c",
                          "import json, hasp.api as h, task; "
                          "print(json.dumps(h.evaluate(task.unit_task, ['pf'], out='api', limit=1)))"],
                         cwd=example, env=_env(), capture_output=True, text=True, timeout=900)
    assert api.returncode == 0, api.stderr[-3000:]
    m = json.loads(api.stdout.strip().splitlines()[-1])["unit_convert"]["pf"]
    assert m["n"] == 1 and m["pf_fires"].get("unit_suffix_guard", 0) >= 1
    assert "unit_convert/pf" in _hasp(installed, example, "show", "api").stdout
