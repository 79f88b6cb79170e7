"""Released versions of a served library: publish, changelog, rollback and the trace watermark, through
the module and the `hasp skills publish | log | rollback` commands, on copies of the real seed library."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hasp.cli import app
from hasp.evolve import release
from hasp.pf.library import load_library
from hasp.seeds import seed_library


@pytest.fixture()
def served(tmp_path: Path) -> tuple[Path, Path]:
    """A served library (the seeds) and an evolved one that dropped premature_final."""
    lib, evolved = tmp_path / "search", tmp_path / "evolved" / "search"
    shutil.copytree(seed_library("search"), lib)
    shutil.copytree(seed_library("search"), evolved)
    shutil.rmtree(evolved / "premature-final")
    return lib, evolved


def _ids(lib: Path) -> set[str]:
    return set(load_library(lib, "search").ids)


def test_publish_makes_the_evolved_library_live_and_the_first_state_restorable(served):
    lib, evolved = served
    seeds = _ids(lib)
    e = release.publish(lib, evolved, {"epoch_dir": "outputs/epoch_0", "anchors": {"n": 3}})
    assert (e.version, e.previous, e.removed, e.added) == (2, 1, ["premature_final"], [])
    assert _ids(lib) == seeds - {"premature_final"}  # what an agent loading the folder now gets
    assert release.live_version(lib) == 2
    log = release.changelog(lib)
    assert [(x.version, x.action) for x in log] == [(1, "init"), (2, "publish")]
    assert log[1].evidence == {"epoch_dir": "outputs/epoch_0", "anchors": {"n": 3}}
    back = release.rollback(lib)
    assert (back.version, back.previous, back.added) == (1, 2, ["premature_final"])
    assert _ids(lib) == seeds and release.live_version(lib) == 1
    assert release.rollback(lib, to=2).version == 2 and _ids(lib) == seeds - {"premature_final"}


def test_the_watermark_lives_with_the_library_and_survives_publish_and_rollback(served):
    lib, evolved = served
    assert release.watermark(lib) is None
    release.set_watermark(lib, {"until": "2026-01-02T00:00:00+00:00", "files": {"a.jsonl": 7}})
    assert release.live_version(lib) == 1  # marking traces read releases the folder as it stands
    release.publish(lib, evolved)
    release.rollback(lib)
    assert release.watermark(lib) == {"until": "2026-01-02T00:00:00+00:00", "files": {"a.jsonl": 7}}


def test_bad_release_state_and_changelog_lines_say_file_line_and_field(served, caplog):
    lib, evolved = served
    with pytest.raises(release.ReleaseError, match="never released"):
        release.rollback(lib)
    release.publish(lib, evolved)
    with pytest.raises(release.ReleaseError, match=r"no release v9 \(released: v1, v2\)"):
        release.rollback(lib, to=9)
    with (lib / ".hasp" / "changelog.jsonl").open("a") as f:
        f.write('{"version": 3, "action": "publi\n')
    assert [x.version for x in release.changelog(lib)] == [1, 2]
    assert "changelog.jsonl:3: changelog entry skipped" in caplog.text
    (lib / ".hasp" / "state.json").write_text('{"version": "two"}')
    with pytest.raises(release.ReleaseError, match=r"state.json: field 'version' must be an integer"):
        release.live_version(lib)
    with pytest.raises(release.ReleaseError, match="no such library folder to publish"):
        release.publish(lib, lib.parent / "missing")


def test_the_cli_publishes_logs_and_rolls_back(served, tmp_path):
    lib, evolved = served
    cli = CliRunner()
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps({"traces": {"n": 12}}))
    r = cli.invoke(app, ["skills", "publish", str(lib), "--from", str(evolved), "--evidence", str(ev)])
    assert r.exit_code == 0, r.output
    assert "v2 live (from v1)" in r.output and "premature_final" in r.output
    r = cli.invoke(app, ["skills", "log", str(lib), "--json"])
    entries = [json.loads(x) for x in r.output.splitlines()]
    assert entries[-1]["evidence"] == {"source": str(evolved), "traces": {"n": 12}}
    r = cli.invoke(app, ["skills", "rollback", str(lib)])
    assert r.exit_code == 0 and "v1 live again (was v2)" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    r = cli.invoke(app, ["skills", "publish", str(lib), "--from", str(evolved), "--evidence", str(bad)])
    assert r.exit_code == 2 and "must hold a JSON object" in r.output


_HOLDER = """
import sys, time
from pathlib import Path
from hasp.evolve.release import lock
with lock(Path(sys.argv[1]), "the holder"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_one_process_at_a_time_changes_a_served_library_and_a_killed_holder_leaves_no_lock(served, tmp_path):
    import subprocess
    import sys

    lib, evolved = served
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(lib)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(release.ReleaseError) as e:
            with release.lock(lib, "a second nightly run"):
                pass
        assert str(lib / ".hasp" / "lock") in str(e.value) and "a second nightly run waits" in str(e.value)
        r = CliRunner().invoke(app, ["skills", "rollback", str(lib)])
        assert r.exit_code == 2 and "another process is changing" in r.output
        r = CliRunner().invoke(app, ["skills", "publish", str(lib), "--from", str(evolved)])
        assert r.exit_code == 2 and release.live_version(lib) is None  # nothing was released
    finally:
        holder.kill()  # SIGKILL: no clean-up ran; the OS lock goes with the process
        holder.wait()
    with release.lock(lib):
        pass
    r = CliRunner().invoke(app, ["skills", "publish", str(lib), "--from", str(evolved)])
    assert r.exit_code == 0 and release.live_version(lib) == 2
    with pytest.raises(release.ReleaseError, match="not a skill library folder"):
        with release.lock(tmp_path / "nowhere"):
            pass
    assert not (tmp_path / "nowhere").exists()


def test_a_nightly_deployment_runs_one_flow_run_at_a_time():
    import argparse

    from hasp.flows.schedule import add_arguments, schedule_kwargs

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    assert schedule_kwargs(ap.parse_args(["--traces", "logs"]))["concurrency_limit"] == 1
    assert "concurrency_limit" not in schedule_kwargs(ap.parse_args([]))
    assert schedule_kwargs(ap.parse_args(["--traces", "logs", "--timezone", "Europe/Berlin"]))["concurrency_limit"] == 1


def test_state_without_its_changelog_is_said_once_and_publishing_goes_on(served, caplog):
    lib, evolved = served
    release.init(lib)
    (lib / ".hasp" / "changelog.jsonl").unlink()
    with caplog.at_level("WARNING", logger="hasp.evolve.release"):
        entry = release.publish(lib, evolved)
    assert entry.version == 2 and release.live_version(lib) == 2
    assert [r.getMessage() for r in caplog.records if "without a changelog" in r.getMessage()] != []
