"""Children end with their parent: a guarded child outlives neither SIGKILL nor SIGTERM of the
process that started it, and one left behind by a crash is found at start. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hasp.llm.guard import guarded, stale_children

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _parent_with_child(tmp_path: Path, tag: str) -> tuple[subprocess.Popen, int]:
    """A parent process that starts a guarded ``sleep``-like child and prints the child's pid."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        from hasp.llm.guard import guarded
        cmd = [sys.executable, "-c", "import time; time.sleep(600)", "{tag}"]
        guard = subprocess.Popen(guarded(cmd), start_new_session=True)
        kids = []
        for _ in range(300):
            kids = open(f"/proc/{{guard.pid}}/task/{{guard.pid}}/children").read().split()
            if kids:
                break
            time.sleep(0.1)
        print(guard.pid, kids[0], flush=True)
        time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    if len(line.split()) != 2:
        parent.kill()
        raise AssertionError(f"parent did not report its child: {line!r}")
    guard_pid, child_pid = map(int, line.split())
    assert _alive(guard_pid) and _alive(child_pid)
    return parent, child_pid


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_guarded_child_ends_with_its_parent(tmp_path: Path, sig: int) -> None:
    parent, child = _parent_with_child(tmp_path, f"hasp-test-child-{sig}")
    os.kill(parent.pid, sig)
    parent.wait(timeout=10)
    assert _wait_gone(child, 15), "the child outlived its parent"


def test_an_orphan_is_reported_at_start(tmp_path: Path) -> None:
    """A guard killed together with its parent (SIGKILL to both) leaves the command running: the
    next start finds it."""
    tag = f"hasp-test-orphan-{os.getpid()}"
    parent, child = _parent_with_child(tmp_path, tag)
    guard = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(guard, signal.SIGKILL)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    try:
        end = time.monotonic() + 10
        found = []
        while time.monotonic() < end and not found:
            found = [c for c in stale_children(tag) if c.pid == child]
            time.sleep(0.2)
        assert found, "the orphan was not found"
    finally:
        os.kill(child, signal.SIGKILL)


def test_guarded_command_line() -> None:
    cmd = guarded(["echo", "x"], parent=123)
    assert cmd[1:5] == ["-m", "hasp.llm.guard", "123", "--"] and cmd[-2:] == ["echo", "x"]


def _pids_with(text: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"):
                    out.append(int(proc.name))
            except OSError:
                pass
    return out


@pytest.mark.services
def test_prefect_server_of_a_run_ends_when_the_run_is_killed(tmp_path: Path) -> None:
    """``hasp evolve run`` owns its Prefect API server: a SIGKILL of the run ends the server too."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import time
        from hasp.flows.prefect_server import owned_prefect_server
        with owned_prefect_server() as url:
            print(url, flush=True)
            time.sleep(600)
    """))
    env = {**ENV, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert run.stdout is not None
    url = run.stdout.readline().strip()
    port = url.rsplit(":", 1)[1].split("/")[0]
    servers = _pids_with(f"--port {port} ")
    assert url.startswith("http://127.0.0.1:") and servers, url
    run.kill()
    run.wait(timeout=10)
    for pid in servers:
        assert _wait_gone(pid, 30), f"Prefect server {pid} outlived the run"


@pytest.mark.services
def test_run_logs_reach_the_owned_prefect_server_before_it_stops(tmp_path: Path) -> None:
    """Task logs still queued when the block ends are sent while the server is up; stopping it first
    left Prefect's exit-time drain retrying a closed port (one "Error logging to API" and a long hang)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import time
        from prefect import flow, task, get_run_logger
        from hasp.flows.prefect_server import owned_prefect_server

        @task
        def episode(i):
            for j in range(5):
                get_run_logger().info("episode %d step %d", i, j)
                time.sleep(0.2)

        @flow
        def batch():
            for f in [episode.submit(i) for i in range(4)]:
                f.result()

        with owned_prefect_server():
            batch()
        print("block left", flush=True)
    """))
    env = {**ENV, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_SERVER_ANALYTICS_ENABLED", None)  # the owned server turns it off itself
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "block left" in run.stdout
    assert "Error logging to API" not in run.stderr, run.stderr[-2000:]
    assert "telemetry" not in run.stderr, run.stderr[-2000:]


def test_sandbox_folders_of_a_killed_run_are_swept_at_the_next_start(tmp_path: Path, caplog) -> None:
    """A process that made sandbox folders is SIGKILLed: its folders stay behind. The next process's
    first sandbox folder removes them (and only them: a live process's folder is kept), in one log line."""
    import logging
    import tempfile

    from hasp.sandbox import spawn

    script = tmp_path / "maker.py"
    script.write_text(textwrap.dedent("""
        import time
        from hasp.sandbox.spawn import make_workdir
        print(make_workdir("hasp_sbx_"), make_workdir("hasp_code_"), flush=True)
        time.sleep(600)
    """))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**ENV, "TMPDIR": str(tmp)}
    killed = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    alive = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert killed.stdout is not None and alive.stdout is not None
        left = killed.stdout.readline().split()
        kept = alive.stdout.readline().split()
        killed.kill()
        killed.wait(timeout=10)
        assert len(left) == 2 and all(Path(d).is_dir() for d in left + kept)
        assert all(f"pid{killed.pid}-" in d for d in left)
        old = tempfile.tempdir
        tempfile.tempdir = str(tmp)
        spawn._SWEPT.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="hasp.sandbox.spawn"):
                mine = spawn.make_workdir("hasp_sbx_")
        finally:
            tempfile.tempdir = old
        spawn.remove_workdir(mine)
        assert not Path(left[0]).exists() and Path(left[1]).exists()  # each prefix is swept by its own kind
        assert all(Path(d).is_dir() for d in kept)
        lines = [r.getMessage() for r in caplog.records if "sandbox folder" in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith("removed 1 sandbox folder(s)")
        assert spawn.sweep_stale_workdirs("hasp_code_", str(tmp)) == 1 and not Path(left[1]).exists()
        # a command sweeps at start, even one that never makes a sandbox folder of its own
        again = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
        assert again.stdout is not None
        more = again.stdout.readline().split()
        again.kill()
        again.wait(timeout=10)
        cli = subprocess.run([sys.executable, "-m", "hasp.cli", "--help"], capture_output=True, text=True,
                             env={**env, "HASP_LOG": "WARNING"}, timeout=120)
        assert cli.returncode == 0 and not any(Path(d).exists() for d in more)
        assert [x for x in cli.stderr.splitlines() if "sandbox folder" in x] == [
            f"WARNING hasp.sandbox.spawn: removed 2 sandbox folder(s) {tmp}/hasp_* left by processes that were killed"]
        assert all(Path(d).is_dir() for d in kept)
    finally:
        alive.kill()
        alive.wait(timeout=10)
        killed.kill()
