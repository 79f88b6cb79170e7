"""The stack as services, each a real server on this machine: an MLflow tracking server (sqlite
backend, local artifact store served over HTTP), a Prefect server, a process work pool with a real
worker, the evolution flow deployed there on its cron schedule and run to COMPLETED; and a DVC
local-directory remote that a fresh ``git clone`` pulls from. The commands are the ones
``docs/services.md`` gives; only the model is a double (a scripted OpenAI endpoint).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from doubles import OpenAIEndpointDouble

from hasp.flows.services import (ServiceError, mlflow_server_command, port_in_use, prefect_server_command,
                            prefect_worker_command, running, wait_healthy)
from hasp.llm.server import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.services
PY = sys.executable
PYTHONPATH = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
POOL = "hasp-test-pool"
DEPLOYMENT = "hasp-evolve/nightly-evolve"
EXPERIMENT = "hasp-services-test"


def sh(cmd: list[str], env: dict[str, str], cwd: Path = ROOT, ok: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r


def tiny_params(work: Path, base_url: str, experiment: str = EXPERIMENT) -> Path:
    """The flow tests' tiny epoch, its model calls going to the endpoint double, logged to ``experiment``."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"].update(n_questions=10)
    params["agent"].update(max_steps=3)
    params["llm"].update(base_url=base_url, model="double-model", max_concurrency=2)
    params["evolve"].update(max_candidates=2, min_cluster_size=2)
    params["train"].update(enabled=False)
    params["tracking"]["experiment"] = experiment
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """MLflow server and Prefect server (started side by side), the work pool, a worker."""
    work = tmp_path_factory.mktemp("services")
    mlflow_port, prefect_port = free_port(), free_port()
    api = f"http://127.0.0.1:{prefect_port}/api"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PREFECT_HOME": str(work / "prefect"), "PREFECT_API_URL": api,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{work / 'prefect.db'}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with contextlib.ExitStack() as stack:
        ml = stack.enter_context(running("mlflow server", mlflow_server_command(
            mlflow_port, f"sqlite:///{work / 'mlflow.db'}", work / "mlartifacts"), port=mlflow_port, env=env,
            log=work / "mlflow.log"))
        pf = stack.enter_context(running("prefect server", prefect_server_command(prefect_port), port=prefect_port,
                                         env=env, log=work / "prefect.log"))
        wait_healthy("mlflow server", ml, f"http://127.0.0.1:{mlflow_port}/health", 240, work / "mlflow.log")
        wait_healthy("prefect server", pf, f"{api}/health", 240, work / "prefect.log")
        sh([PY, "-m", "prefect", "work-pool", "create", POOL, "--type", "process"], env)
        worker = stack.enter_context(running("prefect worker", prefect_worker_command(POOL), log=work / "worker.log",
                                             env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}))
        yield {"work": work, "env": env, "api": api, "mlflow": f"http://127.0.0.1:{mlflow_port}", "worker": worker}
        groups = [p.pid for p in (worker, pf, ml)]
        for pid in groups:  # all three stop at once; each exit below then waits for its own
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    home = f"PREFECT_HOME={work / 'prefect'}".encode()
    end = time.monotonic() + 20
    while leftovers(groups, home) and time.monotonic() < end:
        time.sleep(0.2)
    assert not leftovers(groups, home), f"left behind by the stack: {leftovers(groups, home)}"


def leftovers(groups: list[int], marker: bytes) -> dict[int, str]:
    """Live processes (zombies excluded) in one of ``groups`` or with ``marker`` in their environment
    (a flow run the worker started in a session of its own), with their command."""
    out = {}
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] != "Z" and (int(stat[2]) in groups or marker in (proc / "environ").read_bytes().split(b"\0")):
                out[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except (OSError, ValueError, IndexError):
            continue
    return out


@pytest.fixture(scope="module")
def deployed_run(stack):
    """Deploy the evolution flow to the pool and run it once now; the run's state and the deployment."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    work, env = stack["work"], stack["env"]
    with OpenAIEndpointDouble(reply=lambda body: "Thought: done\nAction: FINAL[Paris]") as ep:
        params = tiny_params(work, ep.base_url)
        shutil.copytree(ROOT / "hasp" / "skills" / "search", work / "skills" / "search",
                        ignore=shutil.ignore_patterns("__pycache__"))
        out = sh([PY, "-m", "hasp.flows.deploy", "--pool", POOL, "--cron", "0 2 * * *", "--timezone", "UTC",
                  "--epochs", "1", "--mode", "lite", "--filtering", "full", "--params", str(params),
                  "--out", str(work / "outputs"), "--library", str(work / "skills" / "search"),
                  "--env", f"MLFLOW_TRACKING_URI={stack['mlflow']}"], env).stdout
        assert DEPLOYMENT in out
        said = sh([PY, "-m", "prefect", "deployment", "run", DEPLOYMENT], env).stdout
        run_id = re.search(r"UUID: ([0-9a-f-]{36})", said)
        assert run_id, said
        with temporary_settings(updates={PREFECT_API_URL: stack["api"]}), get_client(sync_client=True) as client:
            dep = client.read_deployment_by_name(DEPLOYMENT)
            run = client.read_flow_run(run_id.group(1))
            end = time.monotonic() + 240
            while not run.state.is_final() and time.monotonic() < end:
                time.sleep(1)
                run = client.read_flow_run(run.id)
            scheduled = scheduled_runs(client, dep.id)
        yield {"run": run, "deployment": dep, "requests": ep.requests, "scheduled": scheduled}


def run_now(stack, deployment: str, timeout_s: float = 240):
    """``prefect deployment run`` of ``deployment`` now, waited for on the worker; the final flow run."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    said = sh([PY, "-m", "prefect", "deployment", "run", deployment], stack["env"]).stdout
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", said)
    assert run_id, said
    with temporary_settings(updates={PREFECT_API_URL: stack["api"]}), get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id.group(1))
        end = time.monotonic() + timeout_s
        while not run.state.is_final() and time.monotonic() < end:
            time.sleep(1)
            run = client.read_flow_run(run.id)
    return run


def test_the_nightly_deployment_reads_each_batch_of_traces_once(stack, deployed_run):
    """The nightly flow deployed on the pool, run twice by the worker over a growing trace folder (the
    trajectories the deployed evolution logged): each run reads only the lines logged since the last,
    and the watermark kept with the served library moves past each batch."""
    from hasp.evolve import release

    work, env = stack["work"], stack["env"]
    logged = (work / "outputs" / "epoch_0" / "rollout.jsonl").read_text().splitlines(keepends=True)
    half = len(logged) // 2
    assert half >= 1
    traces, served, nightly = work / "agent_logs", work / "served" / "search", work / "nightly"
    traces.mkdir()
    shutil.copytree(ROOT / "hasp" / "skills" / "search", served, ignore=shutil.ignore_patterns("__pycache__"))
    (traces / "agent.jsonl").write_text("".join(logged[:half]))
    with OpenAIEndpointDouble(reply=lambda body: "Thought: done\nAction: FINAL[Paris]") as ep:
        params = tiny_params(work, ep.base_url, experiment=f"{EXPERIMENT}-nightly")  # apart from the evolution's run
        out = sh([PY, "-m", "hasp.flows.deploy", "--pool", POOL, "--name", "nightly-traces", "--cron", "0 3 * * *",
                  "--mode", "lite", "--filtering", "full", "--params", str(params), "--out", str(nightly),
                  "--library", str(served), "--traces", str(traces),
                  "--env", f"MLFLOW_TRACKING_URI={stack['mlflow']}"], env).stdout
        assert "hasp-nightly/nightly-traces" in out
        first = run_now(stack, "hasp-nightly/nightly-traces")
        with (traces / "agent.jsonl").open("a") as f:
            f.write("".join(logged[half:]))
        second = run_now(stack, "hasp-nightly/nightly-traces")
    log = (work / "worker.log").read_text(errors="replace")[-3000:]
    assert first.state.is_completed() and second.state.is_completed(), f"{first.state} {second.state}\n{log}"
    runs = sorted(nightly.glob("run-*"), key=lambda p: p.stat().st_mtime)
    assert len(runs) == 2
    assert (runs[0] / "traces" / "agent.jsonl").read_text().splitlines(keepends=True) == logged[:half]
    assert (runs[1] / "traces" / "agent.jsonl").read_text().splitlines(keepends=True) == logged[half:]
    for run, n in zip(runs, (half, len(logged) - half)):
        summary = json.loads((run / "epoch_0" / "summary_rollout.json").read_text())
        assert summary["traces"]["n_read"] == n
    assert release.watermark(served)["files"]["agent.jsonl"]["lines"] == len(logged)


def scheduled_runs(client, deployment_id) -> list:
    """The runs the server's scheduler created from the deployment's cron schedule (it runs within
    seconds of a deployment change). ``limit`` and ``sort`` are explicit: Prefect 3.8.8's client
    sends them as null by default, which this server refuses."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterState
    from prefect.client.schemas.sorting import FlowRunSort

    end = time.monotonic() + 60
    while True:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type={"any_": ["SCHEDULED"]})),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=10, offset=0)
        if runs or time.monotonic() > end:
            return runs
        time.sleep(1)


def test_deployed_evolution_completes_on_the_worker(stack, deployed_run):
    run, dep = deployed_run["run"], deployed_run["deployment"]
    log = (stack["work"] / "worker.log").read_text(errors="replace")[-3000:]
    assert run.state.is_completed(), f"{run.state}\n{log}"
    assert dep.work_pool_name == POOL and dep.entrypoint == "flows/evolve.py:evolve_flow"
    assert [(s.schedule.cron, s.schedule.timezone) for s in dep.schedules] == [("0 2 * * *", "UTC")]
    assert dep.parameters["epochs"] == 1 and dep.parameters["mode"] == "lite"
    # the cron schedule is live: the scheduler has queued the next nights, each at 02:00 UTC
    starts = [r.expected_start_time for r in deployed_run["scheduled"]]
    assert starts and all((t.hour, t.minute, t.utcoffset().total_seconds()) == (2, 0, 0) for t in starts), \
        (stack["work"] / "prefect.log").read_text(errors="replace")[-2000:]
    assert deployed_run["requests"] > 0  # the run's model calls reached the endpoint
    assert (stack["work"] / "outputs" / "epoch_0" / "admission.json").exists()


def test_the_run_logged_to_the_mlflow_server_over_http(stack, deployed_run):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=stack["mlflow"])
    exp = client.get_experiment_by_name(EXPERIMENT)
    assert exp is not None and exp.artifact_location.startswith("mlflow-artifacts:")  # proxied by the server
    (r,) = client.search_runs([exp.experiment_id])
    assert [m.step for m in client.get_metric_history(r.info.run_id, "library_size")] == [0]
    assert "final.pf.em" in r.data.metrics
    arts = {a.path for a in client.list_artifacts(r.info.run_id, "epoch_0")}
    assert "epoch_0/review_histogram.json" in arts
    got = Path(client.download_artifacts(r.info.run_id, "epoch_0/review_histogram.json", str(stack["work"] / "dl")))
    json.loads(got.read_text())
    # the server stored it in its own artifact folder, not the client's
    assert list((stack["work"] / "mlartifacts").rglob("review_histogram.json"))


def deploy_error(api: str, argv: list[str], monkeypatch, capsys) -> list[str]:
    """``hasp.flows.deploy`` in this process against ``api``: its exit code must be 2; its stderr lines."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    import hasp.flows.deploy

    monkeypatch.setenv("PREFECT_API_URL", api)
    with temporary_settings(updates={PREFECT_API_URL: api}), pytest.raises(SystemExit) as e:
        hasp.flows.deploy.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


def test_deploy_refuses_a_missing_pool_in_one_line(stack, monkeypatch, capsys):
    assert deploy_error(stack["api"], ["--pool", "no-such-pool"], monkeypatch, capsys) == [
        f"error: work pool 'no-such-pool' does not exist on {stack['api']}: create it with "
        "`prefect work-pool create no-such-pool --type process`"]


def test_a_nightly_deployment_over_missing_traces_is_one_line(monkeypatch, capsys, tmp_path):
    api = f"http://127.0.0.1:{free_port()}/api"  # refused before any server is asked
    assert deploy_error(api, ["--pool", POOL, "--traces", str(tmp_path / "nowhere")], monkeypatch, capsys) == [
        f"error: --traces {tmp_path / 'nowhere'}: no such file or folder (where the agent logs its traces)"]
    (tmp_path / "logs").mkdir()
    assert deploy_error(api, ["--pool", POOL, "--traces", str(tmp_path / "logs"), "--epochs", "2"], monkeypatch,
                        capsys) == ["error: --traces runs one epoch per batch of traces: leave --epochs at 1"]


def test_deploy_without_a_server_is_one_line(monkeypatch, capsys):
    api = f"http://127.0.0.1:{free_port()}/api"
    assert deploy_error(api, ["--pool", POOL], monkeypatch, capsys) == [
        f"error: no Prefect server answers at PREFECT_API_URL={api}: start it with `prefect server start`"]
    monkeypatch.delenv("PREFECT_API_URL")
    import hasp.flows.deploy

    with pytest.raises(SystemExit):
        hasp.flows.deploy.main(["--pool", POOL])
    assert capsys.readouterr().err.startswith("error: PREFECT_API_URL is not set: start a server")


def test_bad_deploy_arguments_are_one_line_before_any_server(tmp_path, capsys):
    import hasp.flows.deploy

    (tmp_path / "params.yaml").write_text("agent: {max_stepz: 3}\n")
    for argv, start in ((["--source", str(tmp_path)], f"error: --source {tmp_path}: no flows/evolve.py there"),
                        (["--params", str(tmp_path / "params.yaml")], f"error: {tmp_path / 'params.yaml'}"),
                        (["--env", "NOEQUALS"], "error: --env 'NOEQUALS': expected KEY=VALUE")):
        with pytest.raises(SystemExit) as e:
            hasp.flows.deploy.main(["--pool", POOL, *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith(start), (argv, err)


def test_a_port_in_use_and_a_server_that_dies_are_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_in_use(port)
        with pytest.raises(ServiceError, match=f"^mlflow server: port {port} on 127.0.0.1 is in use"):
            with running("mlflow server", [PY, "-c", "pass"], port=port):
                pass
    log = tmp_path / "dead.log"
    with pytest.raises(ServiceError, match=r"^prefect server exited with code 3 while starting \(log: "):
        with running("prefect server", [PY, "-c", "import sys; sys.exit(3)"], health_url="http://127.0.0.1:9/x",
                     log=log):
            pass


# ----------------------------------------------------------------------------- DVC remote
def test_dvc_push_then_pull_into_a_fresh_clone(tmp_path):
    """The datasets and an admitted library made in one checkout are pushed to a local-directory
    remote; a fresh clone pulls them (metrics included) byte for byte and is up to date, and forcing
    the data stage there gives the same dvc.lock. The library is the ``admit`` stage's output for an epoch whose phases found
    nothing (their files written as empty lists, no model run): the seed library and its history."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    dvc = [PY, "-m", "dvc"]
    repo, clone, remote = tmp_path / "repo", tmp_path / "clone", tmp_path / "remote"
    repo.mkdir()
    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("hasp",):  # the seed library ships inside it (hasp/skills)
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    sh(["git", "init", "-q"], env, repo)
    sh(dvc + ["init", "-q"], env, repo)
    sh(dvc + ["remote", "add", "-d", "local", str(remote)], env, repo)
    sh(dvc + ["repro", "prepare"], env, repo)
    (repo / "outputs" / "epoch_0").mkdir()
    for name in ("candidates", "validation", "reviews", "gate", "anchors", "judge_gate", "clusters"):
        (repo / "outputs" / "epoch_0" / f"{name}.json").write_text("[]\n")
    sh(dvc + ["repro", "--single-item", "admit"], env, repo)
    library = sorted(p.relative_to(repo) for p in (repo / "outputs" / "epoch_0" / "library").rglob("*") if p.is_file())
    assert Path("outputs/epoch_0/library/library_history.json") in library
    sh(["git", "add", "-A"], env, repo)
    sh(["git", "commit", "-qm", "data"], env, repo)
    sh(dvc + ["push"], env, repo)
    assert list((remote / "files" / "md5").rglob("*"))
    sh(["git", "clone", "-q", str(repo), str(clone)], env, tmp_path)
    assert not (clone / "outputs" / "data" / "test.jsonl").exists()
    sh(dvc + ["pull", "prepare", "admit"], env, clone)
    pulled = [Path("outputs/data") / n for n in ("corpus.jsonl", "train.jsonl", "val.jsonl", "test.jsonl")] + library
    for rel in pulled:
        assert (clone / rel).read_bytes() == (repo / rel).read_bytes(), rel
    # metrics files are cached outputs too, so the pulled clone is up to date as it stands ...
    status = sh(dvc + ["status", "prepare"], env, clone).stdout
    assert "up to date" in status, status
    assert (clone / "outputs" / "data" / "summary.json").read_bytes() == \
        (repo / "outputs" / "data" / "summary.json").read_bytes()
    # ... and forcing the stage again in the clone makes the same data, byte for byte (same dvc.lock)
    sh(dvc + ["repro", "--force", "prepare"], env, clone)
    sh(["git", "diff", "--exit-code", "dvc.lock"], env, clone)
