"""Cache keys of the evolution flow: built from content, the same in every process state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hasp.fingerprint import content_hash, key_of, module_closure

ROOT = Path(__file__).resolve().parents[1]


def test_module_closure_follows_function_level_imports():
    files = {str(f.relative_to(ROOT)) for f in module_closure(("hasp.evolve.epoch",))}
    assert "hasp/evolve/epoch.py" in files and "hasp/evolve/__init__.py" in files and "hasp/__init__.py" in files
    assert "hasp/train/data.py" in files  # imported inside a function body of hasp.evolve.propose
    # the epoch's evaluation stage runs through the evaluation runner; the command and its MLflow logger do not
    assert "hasp/eval/runner.py" in files and "hasp/eval/cli.py" not in files and "hasp/eval/tracking.py" not in files


def test_how_results_are_logged_is_not_in_the_key_of_what_produced_them():
    """Editing MLflow logging must not re-run rollouts or training (hours), only the tracking task."""
    from hasp.flows.experiment import GRID_MODULES
    from hasp.evolve.phase_graph import epoch_code_paths

    phases = {*epoch_code_paths(), *(str(f.relative_to(ROOT)) for f in module_closure(GRID_MODULES))}
    assert not [f for f in phases if f.startswith("hasp/track/")]
    tracking = {str(f.relative_to(ROOT)) for f in module_closure(("hasp.track.grid_report",))}
    assert {"hasp/track/grid_report.py", "hasp/track/mlflow_run.py"} <= tracking


def test_code_version_does_not_depend_on_what_is_imported():
    # The regression: the key came from sys.modules, so a second identical flow run in the same
    # interpreter (after more hasp modules had been imported lazily) missed the whole cache.
    probe = ("import hasp.flows.evolve as fe; a = fe.code_version(); import hasp.eval.cli, hasp.pf.search_support;"
             " print(a == fe.code_version(), a)")
    outs = [subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
            .stdout.split() for _ in range(2)]
    assert outs[0][0] == "True" and outs[0] == outs[1]


def test_content_hash_ignores_bytecode_and_hidden_files(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    h = content_hash(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / ".tmp-admit").mkdir()
    (tmp_path / ".tmp-admit" / "pf.py").write_text("y = 2\n")
    assert content_hash(tmp_path) == h
    (tmp_path / "a.py").write_text("x = 2\n")
    assert content_hash(tmp_path) != h and key_of("t", h) != key_of("t", content_hash(tmp_path))


def test_filtering_ablation_rows_share_the_phase_a_to_e_keys(tmp_path):
    """One run per filtering row on the same seed data reuses rollouts, clusters, candidates and reviews:
    those phases do not read the gate-only knobs; admission re-runs."""
    from hasp.config import load_params
    from hasp.evolve.phase_graph import cache_key

    lay = {"data": tmp_path / "data", "epoch": tmp_path / "epoch_0", "library": ROOT / "hasp" / "skills" / "search"}
    base = load_params(ROOT / "params.yaml")
    for row in ("none", "exec", "teacher"):
        other = load_params(ROOT / "params.yaml", {"evolve.filtering": row, "evolve.val_gate": False})
        for shared in ("rollout", "analyse", "propose", "review"):
            assert cache_key(shared, other, lay) == cache_key(shared, base, lay), (row, shared)
        assert cache_key("admit", other, lay) != cache_key("admit", base, lay)
    changed = load_params(ROOT / "params.yaml", {"evolve.max_candidates": 1})
    assert cache_key("propose", changed, lay) != cache_key("propose", base, lay)
