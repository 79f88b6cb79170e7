"""Where a PF took a correct answer away, and the small archive of a grid that the report reads like
its run folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from hasp.domains.search.blocked import blocked_answers, blocked_in_file
from hasp.records import Action, AuditEvent, StepRecord, Trajectory
from hasp.track.grid_archive import HOPS_FILE, PARTS_KEY, TEMPLATES_FILE, ArchiveMergeError, archive_grid, slim_episode

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _step(i: int, orig: tuple[str, str], final: tuple[str, str], fired: list[dict] | None = None) -> StepRecord:
    audit = AuditEvent(state={"question": "q" * 500}, a_orig=Action(*orig), a_final=Action(*final),
                       fired=fired or [], feedback={"hit_ids": ["d1", "d2"], "score": 1.0})
    return StepRecord(index=i, raw_output="x" * 900, audit=audit, observation="o" * 900,
                      prompt_messages=[{"role": "user", "content": "p" * 2000}])


def _episode(qid: str, steps: list[StepRecord], em: float = 0.0) -> dict:
    return Trajectory(qid=qid, question="Who?", answers=["Ada Lovelace", "Lovelace"], variant="pf",
                      steps=steps, em=em, terminated="final" if em else "max_steps").to_dict()


READ_FIRST = [{"skill_id": "insufficient_exploration", "type": "MODIFY_ACTION", "applied": True}]


def _episodes() -> list[dict]:
    return [
        # the policy answered right after its search; a PF made it READ, the episode ran out of steps
        _episode("blocked", [_step(0, ("SEARCH", "who"), ("SEARCH", "who")),
                             _step(1, ("FINAL", "the Ada Lovelace!"), ("READ", "d1"), READ_FIRST)]),
        # a wrong FINAL rewritten: not a correct answer taken away
        _episode("wrong", [_step(0, ("FINAL", "Babbage"), ("READ", "d1"), READ_FIRST)]),
        # a correct FINAL that ran (only its spelling changed by a PF): kept
        _episode("kept", [_step(0, ("FINAL", "ada lovelace"), ("FINAL", "Ada Lovelace"))], em=1.0),
        # an unparseable step has no audit
        Trajectory(qid="noaudit", question="Who?", answers=["x"], variant="pf",
                   steps=[StepRecord(index=0, raw_output="??", parse_error="no action")]).to_dict(),
    ]


def test_a_correct_final_rewritten_by_a_pf_is_counted_with_the_pf_that_did_it(tmp_path: Path) -> None:
    eps = _episodes()
    trajs = [Trajectory.from_dict(e) for e in eps]
    assert blocked_answers(trajs[0]) == [{"step": 1, "to": "READ[d1]", "skill_ids": ["insufficient_exploration"]}]
    assert [blocked_answers(t) for t in trajs[1:]] == [[], [], []]
    f = tmp_path / "trained_pf.jsonl"
    f.write_text("".join(json.dumps(e) + "\n" for e in eps) + "not json\n" + '{"qid": "no fields"}\n')
    assert blocked_in_file(f) == {"n": 4, "episodes": 1, "by_skill": {"insufficient_exploration": 1}, "unreadable": 2}
    assert blocked_in_file(tmp_path / "absent.jsonl") == {"n": 0, "episodes": 0, "by_skill": {}, "unreadable": 0}


def _grid(root: Path) -> Path:
    g = root / "experiment"
    eps = _episodes()[:3]
    untrained = [{**e, "steps": [], "em": 0.0} for e in eps]
    for path, rows in ((g / "eval_untrained" / "generated" / "untrained_pf.jsonl", untrained),
                       (g / "E2_cpu" / "eval" / "generated" / "trained_pf.jsonl", eps)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(e) + "\n" for e in rows))
    (g / "E2_cpu" / "phase_0" / "train" / "round_0").mkdir(parents=True)
    (g / "E2_cpu" / "phase_0" / "train" / "round_0" / "round.json").write_text("{}")
    (g / "E2_cpu" / "phase_0" / "train" / "train_metrics.json").write_text('{"history": []}')
    (g / "E2_cpu" / "phase_0" / "train" / "adapter").mkdir()
    (g / "E2_cpu" / "phase_0" / "train" / "adapter" / "adapter_model.safetensors").write_bytes(b"\0" * 4096)
    (g / "E2_cpu" / "experiment.json").write_text('{"name": "E2_cpu"}')
    grid = {"presets": ["E2_cpu"], "base_model": "m", "untrained": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.0}},
            "experiments": {"E2_cpu": {"eval": {"trained_pf": {"n": 3, "em": 1 / 3, "f1": 1 / 3}}, "wall_s": 9.0}}}
    (g / "grid.json").write_text(json.dumps(grid))
    return g


def _bench_report(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the script imports its sibling ``results``
    spec = importlib.util.spec_from_file_location("grid_report_bench", ROOT / "bench" / "grid_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_archive_is_small_and_reports_like_the_run_folder(tmp_path: Path, monkeypatch) -> None:
    g = _grid(tmp_path)
    hops = {"blocked": 1, "wrong": 1, "kept": 1}
    written = archive_grid(g, tmp_path / "archive" / "E2_cpu-seed42", hops)
    a = tmp_path / "archive" / "E2_cpu-seed42"
    names = {p.relative_to(a).as_posix() for p in written}
    assert {"grid.json", HOPS_FILE, "E2_cpu/experiment.json", "E2_cpu/phase_0/train/train_metrics.json",
            "eval_untrained/generated/untrained_pf.jsonl", "E2_cpu/eval/generated/trained_pf.jsonl"} == names
    assert not (a / "E2_cpu" / "phase_0" / "train" / "adapter").exists()
    slim = [json.loads(x) for x in (a / "E2_cpu/eval/generated/trained_pf.jsonl").read_text().splitlines()]
    step = slim[0]["steps"][1]
    assert step["prompt_messages"] == [] and len(step["observation"]) == 200 and step["audit"]["state"] == {}
    assert step["audit"]["feedback"] == {"score": 1.0}  # lists and payloads go, numbers stay
    assert Trajectory.from_dict(slim[0]).audits()[1].a_orig == Action("FINAL", "the Ada Lovelace!")
    assert slim_episode(slim[0]) == slim[0]  # archiving an archive changes nothing

    outs = []
    for d in (g, a):
        bench = _bench_report(monkeypatch)
        if d is g:  # the run folder reads hop counts from prepared data, which this test has not made
            bench._hops = lambda grid_dir, data_dir: dict(hops)
        report = bench.Report("test")
        assert bench.report_grid(report, d, "ran", None) is not None
        outs.append([x for x in report.lines if not x.startswith("- outputs:") and not x.startswith("### ")])
    assert outs[0] == outs[1]
    text = "\n".join(outs[1])
    assert "| E2_cpu | trained_pf | 1/3 | insufficient_exploration 1 |" in text
    assert "| E2_cpu | trained_pf - untrained_pf | +0.333" in text


def test_a_grid_that_has_not_finished_is_reported_from_its_finished_tasks(tmp_path: Path, monkeypatch) -> None:
    """No grid.json yet: the untrained evaluation's metrics and each finished preset's experiment.json
    make the section, which says it is partial; without the untrained evaluation there is nothing."""
    g = _grid(tmp_path)
    (g / "grid.json").unlink()
    (g / "eval_untrained" / "metrics.json").write_text(json.dumps(
        {"generated": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.0}}, "provenance": {}}))
    (g / "E2_cpu" / "experiment.json").write_text(json.dumps(
        {"name": "E2_cpu", "eval": {"trained_pf": {"n": 3, "em": 1 / 3, "f1": 1 / 3}}, "wall_s": 9.0}))
    bench = _bench_report(monkeypatch)
    bench._hops = lambda grid_dir, data_dir: {"blocked": 1, "wrong": 1, "kept": 1}
    report = bench.Report("test")
    grid = bench.report_grid(report, g, "ran", None)
    assert grid is not None and grid["partial"] and grid["presets"] == ["E2_cpu"]
    text = "\n".join(report.lines)
    assert "- partial: the grid had not finished; presets evaluated so far: E2_cpu" in text
    assert "| E2_cpu | trained_pf - untrained_pf | +0.333" in text
    (g / "eval_untrained" / "metrics.json").unlink()
    assert bench.report_grid(bench.Report("test"), g, "ran", None) is None


def test_a_grid_run_in_parts_is_merged_into_one_archive(tmp_path: Path, monkeypatch) -> None:
    """Two parts of one seed's grid (E2 here, E3 on another machine) with the same untrained answers
    make one archive with both presets, both parts' provenance and the held-out template flags; a part
    whose untrained agent answered differently is refused and leaves the archive as it was."""
    hops, seen = {"blocked": 1, "wrong": 1, "kept": 1}, {"blocked": False, "wrong": False, "kept": True}
    first = _grid(tmp_path / "a")
    second = _grid(tmp_path / "b")
    (second / "E2_cpu").rename(second / "E3_cpu")
    grid = json.loads((second / "grid.json").read_text())
    grid["experiments"] = {"E3_cpu": grid["experiments"]["E2_cpu"]}
    grid["presets"], grid["provenance"] = ["E3_cpu"], {"git_commit": "b" * 40}
    (second / "grid.json").write_text(json.dumps(grid))
    dest = tmp_path / "archive" / "s42"
    archive_grid(first, dest, hops, seen, merge=True)
    archive_grid(second, dest, hops, seen, merge=True)
    merged = json.loads((dest / "grid.json").read_text())
    assert merged["presets"] == ["E2_cpu", "E3_cpu"] and set(merged["experiments"]) == {"E2_cpu", "E3_cpu"}
    assert [p["presets"] for p in merged[PARTS_KEY]] == [["E2_cpu"], ["E3_cpu"]]
    assert merged[PARTS_KEY][1]["provenance"] == {"git_commit": "b" * 40}
    assert (dest / "E2_cpu" / "eval" / "generated" / "trained_pf.jsonl").is_file()
    assert (dest / "E3_cpu" / "eval" / "generated" / "trained_pf.jsonl").is_file()
    assert json.loads((dest / TEMPLATES_FILE).read_text()) == seen
    archive_grid(first, dest, hops, seen, merge=True)  # E2 measured again (a later preset starts from it)
    assert json.loads((dest / "grid.json").read_text())[PARTS_KEY][-1]["rerun_same_answers"] == {"E2_cpu": True}

    bench = _bench_report(monkeypatch)
    report = bench.Report("test")
    assert bench.report_grid(report, dest, "ran", None) is not None
    text = "\n".join(report.lines)
    assert "| E2_cpu | trained_pf - untrained_pf | +0.333" in text and "| E3_cpu | trained_pf - untrained_pf | +0.333" in text
    assert "seen +1.000" in text  # the one seen-template question was answered, from the archived flags

    other = _grid(tmp_path / "c")
    f = other / "eval_untrained" / "generated" / "untrained_pf.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    rows[0]["em"] = 1.0
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    with pytest.raises(ArchiveMergeError, match="answered differently"):
        archive_grid(other, dest, hops, seen, merge=True)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == before


def test_an_archived_untrained_evaluation_is_a_cache_hit_on_a_fresh_machine(tmp_path: Path, prefect_harness) -> None:
    """The archive keeps the cached result record of the untrained evaluation (found by its arms and
    scores among the records of every evaluation); removing the record from the task result storage is
    a fresh machine (the task runs again), and restoring it makes the same key a cache hit again."""
    from prefect import flow, task

    from hasp.track.grid_archive import RECORDS_DIR, keep_untrained_record, restore_untrained
    from hasp.tasks.cache import BY_CACHE_KEY

    calls: list[str] = []
    summaries = {"k-untrained": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.1}},
                 "k-trained": {"trained_pf": {"n": 3, "em": 1 / 3, "f1": 0.4}}}

    @task(name="evaluate-arms", cache_policy=BY_CACHE_KEY, persist_result=True)
    def evaluate_arms_double(cache_key: str) -> dict:
        calls.append(cache_key)
        return {arm: {**s, "eval_wall_s": 1.5} for arm, s in summaries[cache_key].items()}

    @flow
    def grid_double(key: str) -> dict:
        return evaluate_arms_double(key)

    key = f"k-untrained-{tmp_path.name}"
    summaries[key] = summaries["k-untrained"]
    grid_double(key), grid_double("k-trained")
    assert calls == [key, "k-trained"]
    storage = prefect_harness / "storage"
    g = _grid(tmp_path)
    (g / "eval_untrained" / "metrics.json").write_text(json.dumps(
        {"generated": summaries["k-untrained"], "provenance": {}}))
    dest = tmp_path / "archive" / "s42"
    archive_grid(g, dest, {"blocked": 1, "wrong": 1, "kept": 1})
    kept = keep_untrained_record(storage, g, dest)
    assert kept == dest / RECORDS_DIR / f"evaluate-arms-{key}"

    (storage / kept.name).unlink()  # a fresh machine: no record under this key
    grid_double(key)
    assert calls == [key, "k-trained", key]
    (storage / kept.name).unlink()
    run = tmp_path / "run" / "s42"
    written = restore_untrained(dest, run, storage)
    assert (run / "eval_untrained" / "generated" / "untrained_pf.jsonl").is_file() and storage / kept.name in written
    assert grid_double(key)["untrained_pf"]["f1"] == 0.1
    assert calls == [key, "k-trained", key]  # served from the restored record
    assert restore_untrained(dest, run, storage) == []  # the run folder has its untrained evaluation already


def test_a_grid_still_running_archives_its_finished_presets(tmp_path: Path, monkeypatch) -> None:
    """Without grid.json the report's partial grid is archived: the untrained evaluation and the presets
    that finished, not the files of a preset still evaluating; the next part merges into it."""
    g = _grid(tmp_path)
    (g / "grid.json").unlink()
    (g / "eval_untrained" / "metrics.json").write_text(json.dumps(
        {"generated": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.0}}, "provenance": {"git_commit": "a" * 40}}))
    (g / "E2_cpu" / "experiment.json").write_text(json.dumps(
        {"name": "E2_cpu", "eval": {"trained_pf": {"n": 3, "em": 1 / 3, "f1": 1 / 3}}, "wall_s": 9.0}))
    running = g / "GRPO_cpu" / "eval" / "generated" / "trained_pf.jsonl"
    running.parent.mkdir(parents=True)
    running.write_text(json.dumps(_episodes()[0]) + "\n")
    bench = _bench_report(monkeypatch)
    bench._hops = lambda grid_dir, data_dir: {"blocked": 1, "wrong": 1, "kept": 1}
    archive = tmp_path / "archive"
    assert bench.report_grid(bench.Report("test"), g, "ran", None, archive, merge=True) is not None
    dest = archive / g.name
    assert (dest / "E2_cpu" / "eval" / "generated" / "trained_pf.jsonl").is_file()
    assert not (dest / "GRPO_cpu").exists()
    merged = json.loads((dest / "grid.json").read_text())
    assert merged["presets"] == ["E2_cpu"] and merged["partial"] is True
    assert merged["provenance"] == {"git_commit": "a" * 40}


def test_a_part_archived_while_running_then_finished_is_one_part(tmp_path: Path, monkeypatch) -> None:
    """A later part running in a folder that still has the earlier part's grid.json is archived from its
    own finished presets (not from the stale grid.json), keeps what the archive knew that a running part
    cannot (base model, the untrained evaluation's wall time), and, archived again once it finished, is
    one part line: the finished part replaces the partial one it grew from."""
    import os

    g = _grid(tmp_path)
    grid = json.loads((g / "grid.json").read_text())
    grid["untrained"]["untrained_pf"]["eval_wall_s"] = 5.0
    (g / "grid.json").write_text(json.dumps(grid))
    (g / "eval_untrained" / "metrics.json").write_text(json.dumps(
        {"generated": {"untrained_pf": {"n": 3, "em": 0.0, "f1": 0.0}}, "provenance": {}}))
    bench = _bench_report(monkeypatch)
    bench._hops = lambda grid_dir, data_dir: {"blocked": 1, "wrong": 1, "kept": 1}
    archive = tmp_path / "archive"
    dest = archive / g.name
    assert bench.report_grid(bench.Report("test"), g, "first part", None, archive, merge=True) is not None

    record = {"eval": {"trained_pf": {"n": 3, "em": 1 / 3, "f1": 1 / 3}}, "wall_s": 9.0}
    later = (g / "grid.json").stat().st_mtime + 10
    for name in ("E1_cpu", "E4_cpu"):
        f = g / name / "eval" / "generated" / "trained_pf.jsonl"
        f.parent.mkdir(parents=True)
        f.write_text("".join(json.dumps(e) + "\n" for e in _episodes()[:3]))
    (g / "E1_cpu" / "experiment.json").write_text(json.dumps({"name": "E1_cpu", **record}))
    os.utime(g / "E1_cpu" / "experiment.json", (later, later))  # E4_cpu is still evaluating
    assert bench.report_grid(bench.Report("test"), g, "second part", None, archive, merge=True) is not None
    merged = json.loads((dest / "grid.json").read_text())
    assert merged["presets"] == ["E2_cpu", "E1_cpu"] and merged["partial"] is True
    assert merged["base_model"] == "m" and merged["untrained"]["untrained_pf"]["eval_wall_s"] == 5.0
    assert [(p["presets"], p.get("partial", False)) for p in merged[PARTS_KEY]] == [(["E2_cpu"], False),
                                                                                    (["E1_cpu"], True)]
    assert "rerun_same_answers" not in merged[PARTS_KEY][-1]  # E2_cpu's earlier record was not read again
    assert not (dest / "E4_cpu").exists()

    grid.update(presets=["E1_cpu", "E4_cpu"], experiments={"E1_cpu": record, "E4_cpu": record})
    (g / "grid.json").write_text(json.dumps(grid))  # the part ends: its grid.json
    (g / "E4_cpu" / "experiment.json").write_text(json.dumps({"name": "E4_cpu", **record}))
    os.utime(g / "E4_cpu" / "experiment.json", (later - 20, later - 20))
    os.utime(g / "E1_cpu" / "experiment.json", (later - 20, later - 20))
    report = bench.Report("test")
    assert bench.report_grid(report, g, "second part", None, archive, merge=True) is not None
    merged = json.loads((dest / "grid.json").read_text())
    assert merged["presets"] == ["E2_cpu", "E1_cpu", "E4_cpu"] and "partial" not in merged
    assert [p["presets"] for p in merged[PARTS_KEY]] == [["E2_cpu"], ["E1_cpu", "E4_cpu"]]
    assert "rerun_same_answers" not in merged[PARTS_KEY][-1]  # the same run, not a second measurement
    text = "\n".join(report.lines)
    assert "- partial:" not in text and "| E4_cpu | trained_pf - untrained_pf | +0.333" in text
