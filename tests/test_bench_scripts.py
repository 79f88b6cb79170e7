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
from bench_run import run_bench  # noqa: E402


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


def test_the_ladder_archive_carries_a_stopped_cell_to_a_fresh_run_folder(tmp_path):
    """A journal saved into the archive and restored into an empty run folder is resumed by a cell of
    the same key (its episodes are not run again), and a restore never overwrites a run's own results."""
    import json

    from hasp.episode.records import EpisodeRecord
    from hasp.eval.journal import CellJournal, journal_path
    from hasp.records import StepRecord, Trajectory

    sys.path.insert(0, str(ROOT / "bench"))
    import ladder_archive

    run, archive, fresh = tmp_path / "run", tmp_path / "archive", tmp_path / "fresh"
    cfg = run / "smollm2-135m"
    j = CellJournal(journal_path(cfg, "generated-data-v1", "pf"), "the-cell-key")
    for i in range(3):
        traj = Trajectory(f"q{i}", "Who?", ["x"], "pf", prediction="x", em=1.0, terminated="final",
                          steps=[StepRecord(index=1, raw_output="FINAL[x]",
                                            prompt_messages=[{"role": "user", "content": "Who?"}])])
        j.append(i, EpisodeRecord(traj, start_ns=i))
    j.close()
    (run / "data-v1").mkdir()  # generated data is rebuilt, not archived
    (run / "data-v1" / "test.jsonl").write_text("{}\n")
    lines = ladder_archive.save(run, archive, "abc123")
    assert lines == ["smollm2-135m: 1 files, 3 episodes (commit abc123)"]
    assert not (archive / "data-v1").exists()
    part = json.loads((archive / "parts.jsonl").read_text().splitlines()[-1])
    assert (part["commit"], part["finished"], part["episodes"]) == ("abc123", False,
                                                                    {"generated-data-v1/pf": 3})
    assert ladder_archive.archived_commit(archive) == "abc123"
    assert ladder_archive.restore(archive, fresh) == ["smollm2-135m: restored 1 files"]
    resumed = CellJournal(journal_path(fresh / "smollm2-135m", "generated-data-v1", "pf"), "the-cell-key")
    resumed.close()
    assert sorted(resumed.done) == [0, 1, 2] and resumed.done[2].traj.qid == "q2"
    step = resumed.done[2].traj.steps[0]  # the archive keeps the step, not the conversation re-sent with it
    assert step.raw_output == "FINAL[x]" and not step.prompt_messages
    assert ladder_archive.restore(archive, fresh) == [
        f"smollm2-135m: left as it is ({fresh / 'smollm2-135m'} has results of its own)"]


def test_the_ladder_epochs_params_are_valid_settings_for_every_configuration(tmp_path):
    """Each (policy, teacher, mode) of bench/ladder_epochs.py makes a params file the config accepts,
    with the models and mode it names and training off."""
    import yaml

    from hasp.config import load_params

    sys.path.insert(0, str(ROOT / "bench"))
    import ladder_epochs

    for policy, teacher, mode in (("smollm2-135m", "none", "lite"), ("gemma3-270m", "gemma3-270m", "full")):
        f = tmp_path / f"{policy}-{teacher}-{mode}.yaml"
        f.write_text(yaml.safe_dump(ladder_epochs.epoch_params(ROOT / "params.yaml", policy, teacher, mode, 60)))
        p = load_params(f)
        assert (p.llm.embedded, p.teacher.embedded, p.evolve.mode, p.train.enabled) == (
            policy, None if teacher == "none" else teacher, mode, False)
        assert p.data.n_questions == 60 and p.teacher.configured == (teacher != "none")


#: bench scripts that run in seconds without a model, each on its smallest setting
QUICK_RUNS = {
    "sandbox_overhead": ["--calls", "3", "--big-kb", "1"],
    "phase_d": ["--rounds", "1"],
    "humaneval_canonical": ["--limit", "2", "--workers", "1"],
    "untrusted_text": ["--no-write"],
    "extractor_ceiling": ["--dataset", f"hotpotqa:{ROOT.parent / 'shared' / 'data' / 'hotpotqa' / 'hotpot_dev_distractor_sample_a.jsonl'}",
                          "--no-write"],
}


#: bench scripts that start the embedded model, on their smallest setting (seconds, not minutes)
MODEL_RUNS = {
    "engine_speed": ["--questions", "1", "--engines", "llamacpp", "--concurrency", "1", "--no-write"],
}


@pytest.mark.parametrize("name", sorted(QUICK_RUNS))
def test_a_quick_bench_script_runs_on_its_smallest_setting(name, tmp_path, monkeypatch, capsys):
    """The script's whole path runs (not only its imports): a call with a stale signature inside it
    fails here. Its results section goes to a temp file, never to bench/RESULTS.md."""
    run_bench(name, QUICK_RUNS[name], tmp_path, monkeypatch, capsys)


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(MODEL_RUNS))
def test_a_model_bench_script_runs_on_its_smallest_setting(name, tmp_path, monkeypatch, capsys):
    """As above, for a script that serves the real embedded model itself."""
    run_bench(name, MODEL_RUNS[name], tmp_path, monkeypatch, capsys)


