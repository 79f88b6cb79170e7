"""A user's own ``Domain`` (the task API's general form, of which search, math and code are instances):
found by ``pkg.module:attr``, checked with one line naming the attribute, and evaluated with its own
per-episode state (a scripted policy double stands in for the model: the control flow is under test)."""

from __future__ import annotations

import pickle

import pytest
from countdown_domain import COUNTDOWN, CountdownDomain
from doubles import ScriptedPolicyDouble

from hasp.api import Domain, Task
from hasp.config import load_params
from hasp.episode.domains import CodeDomain, MathDomain, SearchDomain
from hasp.episode.task import TaskDomain, TaskError, as_domain, check_task, load_task


def test_the_built_in_domains_and_a_declared_task_are_instances_of_the_public_domain():
    from hasp.agent.tool_env import Tool

    task = Task("echo_task", [Tool("ECHO", str)])
    for d in (SearchDomain(), MathDomain(), CodeDomain(), as_domain(task), COUNTDOWN):
        assert isinstance(d, Domain) and d.action_types[-1] == "FINAL"
    assert isinstance(as_domain(task), TaskDomain) and as_domain(COUNTDOWN) is COUNTDOWN
    assert pickle.loads(pickle.dumps(COUNTDOWN)) == COUNTDOWN  # it travels to a worker as a Task does
    assert COUNTDOWN.action_forms == ("TICK[input]", "FINAL[answer]")


def test_a_user_domain_loads_by_pkg_module_attr_and_a_broken_one_is_one_line():
    assert load_task("countdown_domain:COUNTDOWN") is COUNTDOWN
    assert load_task("countdown_domain:CountdownDomain") == CountdownDomain()  # a class is instantiated
    with pytest.raises(TaskError, match=r"countdown_domain:NoEnvironment\.environment: NoEnvironment does not"):
        load_task("countdown_domain:NoEnvironment")
    with pytest.raises(TaskError, match=r"\.action_types: \('TICK',\) must be distinct upper-case action names"):
        load_task("countdown_domain:NoFinal")
    with pytest.raises(TaskError, match=r"x\.name: 'search' is a built-in domain's name"):
        check_task(type("Mine", (CountdownDomain,), {"name": "search"})(), "x")


def _evaluate(replies: list[str], tmp_path):
    from hasp.eval.cli import task_inputs
    from hasp.eval.runner import run_eval

    p = load_params(None)
    p = p.model_copy(update={"llm": p.llm.model_copy(update={"max_concurrency": 1})})
    sets, _ = task_inputs(COUNTDOWN, ["react"], [], 1, None, p)
    return run_eval(p, sets, ["react"], policy=ScriptedPolicyDouble(replies), library_root=None,
                    out_dir=tmp_path, progress=False)


def test_a_user_domain_is_evaluated_with_its_own_state_across_steps(tmp_path):
    done = _evaluate(["TICK[now]", "TICK[now]", "FINAL[liftoff]"], tmp_path / "ticked")
    cell = done.cells[0]
    assert (cell.dataset, cell.summary["n"], cell.summary["em"]) == ("countdown", 1, 1.0)
    assert [s.raw_output for s in cell.records[0].traj.steps] == ["TICK[now]", "TICK[now]", "FINAL[liftoff]"]
    early = _evaluate(["FINAL[liftoff]"], tmp_path / "early")  # the same answer before the ticks: wrong
    assert early.cells[0].summary["em"] == 0.0


def test_hasp_show_reads_an_evaluation_folder_or_one_dataset_folder_of_it(tmp_path):
    """``hasp show OUT`` and ``hasp show OUT/<dataset>`` print the same samples (the cells' files)."""
    from typer.testing import CliRunner

    from hasp.cli import app

    res = _evaluate(["TICK[now]", "TICK[now]", "FINAL[liftoff]"], tmp_path / "out")
    assert res.cells[0].summary["em"] == 1.0
    whole = CliRunner().invoke(app, ["show", str(tmp_path / "out")])
    one = CliRunner().invoke(app, ["show", str(tmp_path / "out" / "countdown")])
    assert whole.exit_code == one.exit_code == 0, one.output
    assert "countdown/react count-0" in one.output and "FINAL[liftoff]" in one.output
    assert one.output == whole.output
