"""A user's task found by name: an installed package registers it under the ``hasp.tasks`` entry points
(real ``importlib.metadata`` over a dist-info folder on the path), and ``--domain NAME`` loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hasp.cli import app
from hasp.episode.task import TASK_ENTRY_POINTS, TaskError, load_task, registered_tasks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    """The example task's package as pip would leave it: its module and a dist-info with entry points."""
    site = tmp_path / "site"
    dist = site / "unit_tasks-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: unit-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{TASK_ENTRY_POINTS}]\nunits = task:unit_task\n"
                                           "broken = task:no_such_attr\n")
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "unit_convert"))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_registered_task_loads_by_its_name(installed):
    assert registered_tasks()["units"] == "task:unit_task"
    task = load_task("units")
    assert task.name == "unit_convert" and task.tools
    with pytest.raises(TaskError, match=r"has no attribute 'no_such_attr' \(the 'hasp.tasks' entry point 'broken'\)"):
        load_task("broken")


def test_an_unknown_domain_name_lists_what_is_registered(installed):
    with pytest.raises(TaskError, match=r"registered: broken, units\)"):
        load_task("nosuch")
    r = CliRunner().invoke(app, ["eval", "--domain", "nosuch", "--variants", "react"])
    assert r.exit_code != 0
    assert "not a built-in domain (search, math, code)" in r.output and "units" in r.output
