"""Bench code that the suite does not otherwise run: the pieces a bench builds its input from."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_sage_pool_of_the_training_throughput_bench_builds_chain_rewards(tmp_path):
    """``bench/train_throughput.py`` gives every SAGE chain task its skill-integrated reward."""
    sys.path.insert(0, str(ROOT / "bench"))
    import train_throughput

    from hasp.config import Params
    from hasp.domains.search.prepare import prepare_data
    from hasp.domains.search.task import SearchTask
    from hasp.records import HarnessRecord, Trajectory
    from hasp.train.chains import SAGE_KEY

    prepare_data(Params.model_validate({"data": {"n_questions": 40}}), tmp_path)
    questions = SearchTask.load(tmp_path).questions("train")
    pool = [Trajectory(qid=str(q.id), question=q.question, answers=list(q.answers), variant="pf",
                       harness=HarnessRecord()) for q in questions for _ in range(2)]
    trajs, chains = train_throughput.policy_gradient_pool(pool, "sage", questions)
    assert chains and len(trajs) == 4 * len(chains)
    records = [t.harness.postprocess[SAGE_KEY] for t in trajs]
    assert {r["position"] for r in records} == {0, 1}
    assert all(isinstance(r["reward"], float) for r in records)
    assert any(r["reward"] >= 2.0 for r in records)  # a solved first task whose skill the second used


def _bench_scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "bench").glob("*.py") if p.name != "results.py")


import pytest  # noqa: E402 - the parametrized smoke test below


@pytest.mark.parametrize("script", _bench_scripts(), ids=lambda p: p.stem)
def test_every_bench_script_imports_and_parses_its_arguments(script, capsys, monkeypatch):
    """Each bench script loads (its imports of hasp are current) and its ``--help`` parses: a renamed
    module or function a script imports fails here, not when someone next runs the benchmark."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import inspect

    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    takes_argv = bool(inspect.signature(module.main).parameters)
    with pytest.raises(SystemExit) as e:
        module.main(["--help"]) if takes_argv else module.main()
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_ladder_resumes_an_evaluation_that_wrote_some_cells_only(tmp_path):
    """``hasp eval`` rewrites metrics.json after every cell: an interrupted configuration is not done."""
    import json

    sys.path.insert(0, str(ROOT / "bench"))
    import model_ladder

    folder = tmp_path / "smollm2-135m"
    folder.mkdir()
    assert not model_ladder.finished(folder, 2, ["react", "pf"])  # nothing yet
    cells = {"n": 1, "em": 0.0}
    (folder / "metrics.json").write_text(json.dumps({"a": {"react": cells, "pf": cells}, "b": {"react": cells},
                                                     "provenance": {"commit": "x"}}))
    assert not model_ladder.finished(folder, 2, ["react", "pf"])  # dataset b lacks its pf cell
    (folder / "metrics.json").write_text(json.dumps({"a": {"react": cells, "pf": cells},
                                                     "b": {"react": cells, "pf": cells}}))
    assert model_ladder.finished(folder, 2, ["react", "pf"])
    (folder / "metrics.json").write_text("{torn")
    assert not model_ladder.finished(folder, 2, ["react", "pf"])
