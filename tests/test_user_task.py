"""A user's own task (hasp.api.Task): declared in user code, checked, run through the CLI and the
Python API with the real embedded model, its PF firing on its own action, and `hasp show` over it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hasp.api import Task, TaskError, Tool
from hasp.episode.task import TaskDomain, load_task, task_items

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "unit_convert"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _echo(arg: str) -> str:
    return arg


@pytest.mark.parametrize("kw,msg", [
    ({"name": "Bad Name"}, r"t\.name: 'Bad Name' must be a lower-case word"),
    ({"name": "search"}, "built-in domain"),
    ({"tools": []}, r"t\.tools: a task needs at least one Tool"),
    ({"tools": [Tool("ECHO", _echo), Tool("ECHO", _echo)]}, r"t\.tools\[1\]: action name 'ECHO' collides"),
    ({"tools": [Tool("FINAL", _echo)]}, r"t\.tools\[0\]: name 'FINAL' is reserved"),
    ({"tools": [Tool("echo", _echo)]}, r"t\.tools\[0\]: name 'echo' is not an upper-case word"),
    ({"tools": [Tool("ECHO", "not a function")]}, r"run of 'ECHO' is not callable"),
    ({"scorer": 3}, r"t\.scorer: not callable"),
    ({"max_steps": 0}, r"t\.max_steps"),
])
def test_a_task_missing_a_part_is_one_error_naming_the_attribute(kw, msg):
    task = Task(**{"name": "echo_task", "tools": [Tool("ECHO", _echo)], **kw})
    with pytest.raises(TaskError, match=msg):
        task.check("t")


def test_items_without_a_question_or_answers_name_the_row():
    t = Task("echo_task", [Tool("ECHO", _echo)], items=[{"question": "q?", "answers": ["a"]}, {"answers": ["b"]}])
    with pytest.raises(TaskError, match=r"echo_task\.items\[1\]: field 'question'"):
        task_items(t, t.name)
    t = Task("echo_task", [Tool("ECHO", _echo)], items=[{"question": "q?", "answer": "a", "id": "x"}])
    assert task_items(t)[0].answers == ["a"] and task_items(t)[0].id == "x"


def test_a_task_is_named_pkg_module_attr_and_a_bad_name_is_one_line(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    task = load_task("task:unit_task")
    assert TaskDomain(task).action_types == ("CONVERT", "FINAL")
    for ref, msg in [("task", "pkg.module:attr"), ("no_such_mod:x", "cannot import no_such_mod"),
                     ("task:nothing", "has no attribute 'nothing'"), ("task:convert", "not a hasp Task")]:
        with pytest.raises(TaskError, match=msg):
            load_task(ref)


def test_a_raising_scorer_or_tool_is_contained_and_named():
    from hasp.agent.tool_env import ToolEnvironment
    from hasp.records import Action, AuditEvent, Trajectory

    def boom(_a: str) -> str:
        raise RuntimeError("tool down")

    def bad_score(_p: str, _a: list[str]) -> float:
        raise KeyError("x")

    d = TaskDomain(Task("echo_task", [Tool("BOOM", boom)], scorer=bad_score))
    with pytest.raises(TaskError, match=r"task echo_task\.scorer raised KeyError"):
        d.score(Trajectory(qid="q", question="q", answers=["a"], variant="react"))
    env = ToolEnvironment([Tool("BOOM", boom)])
    from hasp.agent.context import EpisodeState

    audit = AuditEvent(state={}, a_orig=Action("BOOM", "x"), a_final=Action("BOOM", "x"))
    obs, done = env.execute(Action("BOOM", "x"), EpisodeState(question="q", max_steps=2), audit, False)
    assert not done and "the tool BOOM failed: RuntimeError: tool down" in obs
    assert audit.feedback["tool_error"] == "RuntimeError: tool down"
    assert env.parse("Action: BOOM[now]").type == "BOOM" and env.parse("SEARCH[x]").reason.startswith("no BOOM")


@pytest.fixture(scope="module")
def example_run(tmp_path_factory) -> Path:
    """The example task evaluated through the CLI from a copy of its folder (the real embedded model)."""
    work = tmp_path_factory.mktemp("unit") / "unit_convert"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "hasp.cli", "eval", "--domain", "task:unit_task", "--variants",
                        "react,pf", "--limit", "3", "--no-progress", "--out", "out"], cwd=work, env=ENV,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return work


@pytest.mark.model
def test_the_example_task_runs_with_its_pf_through_the_cli(example_run):
    m = json.loads((example_run / "out" / "metrics.json").read_text())["unit_convert"]
    assert m["react"]["n"] == m["pf"]["n"] == 3 and m["pf"]["n_failed"] == 0
    assert m["pf"]["pf_fires"].get("unit_suffix_guard", 0) >= 1  # the user's own PF, with the default params
    assert m["pf"]["pf_selected_episodes"] == 3 and "pf_note" not in m["pf"]
    assert m["pf"]["extractor_ceiling"]["source"] == "unit_convert.ceiling"
    assert m["pf"]["extractor_ceiling"]["n"] == 3


@pytest.mark.model
def test_hasp_show_prints_the_samples_and_filters_them(example_run):
    def show(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "hasp.cli", "show", "out", *args], cwd=example_run, env=ENV,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    everything = show("--limit", "0")
    assert everything.count("question: ") == 6 and "matching episodes shown" in everything
    fired = show("--skill", "unit_suffix_guard", "--limit", "0")
    assert "PF unit_suffix_guard MODIFY_ACTION: answered before calling CONVERT" in fired
    assert "→ CONVERT[" in fired and "unit_convert/react" not in fired
    assert show("--variant", "react", "--no-steps").count("question: ") == 3
    r = subprocess.run([sys.executable, "-m", "hasp.cli", "show", "nowhere"], cwd=example_run, env=ENV,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not an evaluation folder" in r.stderr


@pytest.mark.model
def test_the_example_task_runs_through_the_python_api(example_run, monkeypatch):
    monkeypatch.chdir(example_run)
    monkeypatch.syspath_prepend(str(example_run))
    import hasp.api as h

    task = load_task("task:unit_task")
    m = h.evaluate(task, ["pf"], out="out-api", limit=2)["unit_convert"]["pf"]
    assert m["n"] == 2 and m["pf_fires"].get("unit_suffix_guard", 0) >= 1
    assert (example_run / "out-api" / "unit_convert" / "pf.jsonl").is_file()
    with h.agent(task) as a:
        t = a.run("How many km is 3 miles?", answers=["4.828"])
    assert t.steps and t.harness is not None and t.harness.selected_pfs == ["unit_suffix_guard"]
