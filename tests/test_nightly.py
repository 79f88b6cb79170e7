"""The nightly flow: two nights over a growing trace folder; the second reads only the new lines, a
night that admits releases the served library's next version with its evidence, and a rollback
restores the one before. The flow is the real Prefect flow; its model clients are doubles
(``doubles.flow_with_doubles``), the traces are the trajectories an epoch of the same policy wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doubles import flow_params_with_doubles, flow_with_doubles

from hasp.evolve import release

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory, prefect_harness):
    work = tmp_path_factory.mktemp("nightly")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    flow_params_with_doubles(work, "hasp-nightly-test", max_candidates=1, min_cluster_size=2)
    flow_with_doubles(mp, work, ROOT / "hasp" / "skills" / "search")
    from hasp.flows.evolve import evolve_flow

    # what the agent logged: the trajectories of one rollout of the same policy on the train split
    evolve_flow(epochs=1, mode="lite", filtering="none", params_path=str(work / "params.yaml"),
                out_root=str(work / "logged"), library=str(work / "skills" / "search"), final_eval=False)
    logged = (work / "logged" / "epoch_0" / "rollout.jsonl").read_text().splitlines(keepends=True)
    assert len(logged) >= 4
    yield work, logged
    mp.undo()


def _night(work: Path, filtering: str) -> dict:
    from hasp.flows.nightly import nightly_flow

    return nightly_flow(traces=str(work / "traces"), library=str(work / "skills" / "search"),
                        params_path=str(work / "params.yaml"), out_root=str(work / "nightly"), mode="lite",
                        filtering=filtering)


def test_two_nights_read_two_batches_and_release_what_they_admit(env):
    work, logged = env
    half = len(logged) // 2
    (work / "traces").mkdir()
    (work / "traces" / "agent.jsonl").write_text("".join(logged[:half]))
    first = _night(work, "none")  # every candidate that compiles is admitted
    assert first["new_lines"] == half and first["admitted"] >= 1 and first["released"] == 2
    lib = work / "skills" / "search"
    entry = release.changelog(lib)[-1]
    assert (entry.version, entry.action, entry.previous) == (2, "publish", 1) and entry.added
    assert entry.evidence["traces"]["new_lines"] == half
    assert entry.evidence["traces"]["files"] == {"agent.jsonl": half}
    assert entry.evidence["traces"]["read"]["n_read"] == half
    # the next night: only the lines logged since, read from the released library
    with (work / "traces" / "agent.jsonl").open("a") as f:
        f.write("".join(logged[half:]))
    second = _night(work, "full")
    assert second["new_lines"] == len(logged) - half
    batch = Path(second["run_dir"]) / "traces" / "agent.jsonl"
    assert batch.read_text().splitlines(keepends=True) == logged[half:]
    rolled = json.loads((Path(second["run_dir"]) / "epoch_0" / "summary_rollout.json").read_text())
    assert rolled["traces"]["n_read"] == len(logged) - half
    # a night with nothing new does nothing; a rollback restores the library the first night replaced
    assert _night(work, "full")["new_lines"] == 0
    live = release.live_version(lib)
    added = {sid for e in release.changelog(lib) if e.action == "publish" for sid in e.added}
    assert live == (3 if second["released"] else 2) and second["version"] == live
    back = release.rollback(lib, to=1)
    assert back.previous == live and set(back.removed) == added
    # a run started while another process changes the library refuses at once, with the lock's path
    with release.lock(lib, "the test's holder"):
        with pytest.raises(release.ReleaseError, match="another process is changing"):
            _night(work, "full")
    assert release.live_version(lib) == 1
