"""Provenance: what produced a result, collected on this checkout, in a folder that is not one, for a
weights file hashed once, and read back from a real MLflow store after a tracked run."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from hasp.config import Params, load_params
from hasp.fingerprint import cached_content_hash, content_hash
from hasp.provenance import (LOCK_FILE, NOT_GIVEN, NOT_INSTALLED, PACKAGES, TAG_PREFIX, UNKNOWN, Provenance,
                             git_state, provenance, repo_root)

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture()
def hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The hash cache in tmp, so a test never reads or writes the user's ``~/.cache/hasp``."""
    monkeypatch.setenv("HASP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "content_hashes.json"


def test_fields_on_this_checkout(tmp_path: Path, hash_cache: Path) -> None:
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.jsonl").write_text('{"q": 1}\n')
    p = Params()
    prov = provenance(params=p, data_dir=data, library=ROOT / "hasp" / "skills" / "search", model=weights)

    assert repo_root() == ROOT
    assert re.fullmatch(r"[0-9a-f]{40}", prov.git_commit) and prov.git_commit == _git("rev-parse", "HEAD")
    assert isinstance(prov.git_dirty, bool) and prov.git_dirty == bool(_git("status", "--porcelain"))
    assert prov.git_reason == ""
    assert prov.lock_file == LOCK_FILE
    assert prov.lock_sha256 == hashlib.sha256((ROOT / LOCK_FILE).read_bytes()).hexdigest()
    assert set(prov.packages) == set(PACKAGES)
    for name, version in prov.packages.items():
        try:
            assert version == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert version == NOT_INSTALLED
    assert prov.model == str(weights.resolve())
    assert prov.model_sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert prov.data_hash == content_hash(data)
    assert prov.library_hash == content_hash(ROOT / "hasp" / "skills" / "search")
    assert prov.params_hash == provenance(params=Params()).params_hash
    assert prov.params_hash != provenance(params=p.model_copy(update={"agent": p.agent.model_copy(
        update={"max_steps": p.agent.max_steps + 1})})).params_hash

    tags = prov.tags()
    assert tags[f"{TAG_PREFIX}git_commit"] == prov.git_commit
    assert tags[f"{TAG_PREFIX}git_dirty"] in ("true", "false")
    assert tags[f"{TAG_PREFIX}package.mlflow"] == prov.packages["mlflow"]
    assert all(k.startswith(TAG_PREFIX) and isinstance(v, str) for k, v in tags.items())
    assert prov.to_dict()["packages"] == prov.packages
    line = prov.header()
    assert prov.git_commit[:12] in line and prov.model_sha256[:12] in line and prov.data_hash[:12] in line
    assert prov.library_hash[:12] in line and prov.params_hash[:12] in line


def test_inputs_not_named_have_the_same_tags_as_named_ones() -> None:
    bare, full = provenance(), provenance(params=Params(), library=ROOT / "hasp" / "skills" / "search")
    assert set(bare.tags()) == set(full.tags())
    assert bare.tags()[f"{TAG_PREFIX}model_sha256"] == NOT_GIVEN and bare.data_hash == NOT_GIVEN


def test_a_folder_that_is_not_a_git_checkout_gives_unknown_with_a_reason(tmp_path: Path) -> None:
    (tmp_path / "hasp").mkdir()
    (tmp_path / "hasp" / "__init__.py").write_text("")
    commit, dirty, reason = git_state(tmp_path)
    assert (commit, dirty) == (UNKNOWN, None)
    assert str(tmp_path) in reason and "git" in reason.lower()
    prov = Provenance(git_commit=commit, git_dirty=dirty, git_reason=reason, lock_file="", lock_sha256="missing")
    assert prov.tags()[f"{TAG_PREFIX}git_dirty"] == UNKNOWN
    assert prov.commit_text().startswith(f"{UNKNOWN} (")


def test_a_copy_of_the_package_inside_another_repository_is_not_that_repositorys_code(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "hasp").mkdir()
    (tmp_path / "hasp" / "__init__.py").write_text("")  # present, never committed
    commit, dirty, reason = git_state(tmp_path)
    assert (commit, dirty) == (UNKNOWN, None) and reason


def test_without_git_on_the_path_the_commit_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    commit, dirty, reason = git_state(ROOT)
    assert (commit, dirty) == (UNKNOWN, None) and "git is not installed" in reason


def test_the_weights_hash_is_read_once_per_file_version(tmp_path: Path, hash_cache: Path) -> None:
    """Same size and mtime: the cached hash comes back without reading the bytes (the content was
    changed behind the cache's back, so a re-read would give another hash). A new mtime re-reads."""
    f = tmp_path / "w.gguf"
    f.write_bytes(b"A" * 4096)
    first = cached_content_hash(f)
    assert first == hashlib.sha256(b"A" * 4096).hexdigest() and hash_cache.is_file()
    st = f.stat()
    f.write_bytes(b"B" * 4096)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert provenance(model=f).model_sha256 == first  # not re-read
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert provenance(model=f).model_sha256 == hashlib.sha256(b"B" * 4096).hexdigest()


def test_a_model_folder_is_hashed_by_its_content_and_cached(tmp_path: Path, hash_cache: Path) -> None:
    folder = tmp_path / "merged"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    assert provenance(model=folder).model_sha256 == content_hash(folder)
    (folder / "model.safetensors").write_bytes(b"\1" * 2048)  # a new size: the stamp misses
    assert provenance(model=folder).model_sha256 == content_hash(folder)


def test_a_remote_model_is_named_not_hashed(hash_cache: Path) -> None:
    prov = provenance(model="SmolLM2 at http://127.0.0.1:9/v1")
    assert (prov.model, prov.model_sha256) == ("SmolLM2 at http://127.0.0.1:9/v1", UNKNOWN)


def test_the_embedded_model_is_the_gguf_llamacpp_serves(hash_cache: Path) -> None:
    from hasp.llm.endpoints import served_model
    from hasp.llm.model_prep import gguf_path

    llm = Params().llm
    assert served_model(llm) == gguf_path()
    assert served_model(llm.model_copy(update={"base_url": "http://127.0.0.1:9/v1", "model": "m"})) == \
        "m at http://127.0.0.1:9/v1"


def test_tags_read_back_from_a_real_mlflow_store_after_a_tracked_grid(tmp_path: Path, hash_cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The grid's MLflow task on a recorded grid: parent and child carry the grid's provenance; a run
    started with no provenance still carries the code and environment."""
    import mlflow

    from hasp.track.grid_report import log_grid
    from hasp.track.mlflow_run import start_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    p = load_params(ROOT / "params.yaml")
    weights = tmp_path / "base.gguf"
    weights.write_bytes(b"GGUF-weights")
    prov = provenance(params=p, library=ROOT / "hasp" / "skills" / "search", model=weights)
    grid = {"untrained": {}, "experiments": {
        "E1_cpu": {"preset": {"loop": {"kind": "open", "phases": 1}}, "train": {}, "phases": [], "eval": {},
                   "gains": {}, "wall_s": 1.0}}}
    res = log_grid(tmp_path, p, grid, run_name="grid-provenance", provenance=prov)
    with start_run("plain", "bare") as ml:
        bare_id = ml.active_run().info.run_id

    client = mlflow.tracking.MlflowClient()
    for run_id in (res["parent_run_id"], res["child_run_ids"]["E1_cpu"]):
        tags = client.get_run(run_id).data.tags
        assert tags["hasp.provenance.git_commit"] == _git("rev-parse", "HEAD")
        assert tags["hasp.provenance.git_dirty"] == str(prov.git_dirty).lower()
        assert tags["hasp.provenance.lock_sha256"] == prov.lock_sha256
        assert tags["hasp.provenance.model_sha256"] == hashlib.sha256(b"GGUF-weights").hexdigest()
        assert tags["hasp.provenance.library_hash"] == content_hash(ROOT / "hasp" / "skills" / "search")
        assert tags["hasp.provenance.params_hash"] == prov.params_hash
        assert tags["hasp.provenance.package.torch"] == prov.packages["torch"]
    assert client.get_run(res["child_run_ids"]["E1_cpu"]).data.tags["hasp.experiment"] == "E1_cpu"
    bare = client.get_run(bare_id).data.tags
    assert bare["hasp.provenance.git_commit"] == prov.git_commit and bare["hasp.provenance.model"] == NOT_GIVEN


def test_the_training_run_of_hasp_train_names_its_start_model_and_rows(tmp_path: Path, hash_cache: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from hasp.cli.train import track_training
    from hasp.train.run import TrainSummary

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    rows = tmp_path / "sft.jsonl"
    rows.write_text('{"prompt": "q", "completion": "a"}\n')
    start = tmp_path / "start"
    start.mkdir()
    (start / "config.json").write_text("{}")
    (start / "model.safetensors").write_bytes(b"\0" * 512)
    p = Params()
    summary = TrainSummary(recipe="sft", start_model=str(start), adapter_dir=str(tmp_path / "no_adapter"))
    run_id = track_training(p, p.train, summary, True, data=rows)
    tags = mlflow.tracking.MlflowClient().get_run(run_id).data.tags
    assert tags["hasp.provenance.model"] == str(start.resolve())
    assert tags["hasp.provenance.model_sha256"] == content_hash(start)
    assert tags["hasp.provenance.data_hash"] == content_hash(rows)
    assert tags["hasp.provenance.library_hash"] == NOT_GIVEN
    assert tags["hasp.provenance.params_hash"] == provenance(params=p).params_hash
    assert tags["hasp.recipe"] == "sft"
