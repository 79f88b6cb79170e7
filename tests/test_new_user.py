"""What a new user meets first: commands outside the repository, the demo's table, piped tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from hasp.config import Params

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def hasp(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hasp.cli", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300)


def test_commands_outside_the_repository_run_on_the_built_in_defaults(tmp_path: Path) -> None:
    r = hasp("params", "--out", "resolved.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notice = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(notice) == 1 and "built-in defaults" in notice[0] and str(tmp_path) in notice[0]
    resolved = yaml.safe_load((tmp_path / "resolved.yaml").read_text())
    assert Params.model_validate(resolved) == Params()

    r = hasp("data", "prepare", "--out", "data", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "built-in defaults" in r.stderr and (tmp_path / "data" / "test.jsonl").is_file()

    # `hasp eval` gets past its params (and fails on what is really wrong) without starting a model
    r = hasp("eval", "--domain", "nope", "--dataset", "generated", cwd=tmp_path)
    assert r.returncode == 2 and "built-in defaults" in r.stderr and "--domain 'nope'" in r.stderr
    assert "no such params file" not in r.stderr


def test_a_named_params_file_must_exist_and_a_present_one_is_read_silently(tmp_path: Path) -> None:
    r = hasp("params", "--out", "x.yaml", "--params", "missing.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "missing.yaml: no such params file" in r.stderr
    (tmp_path / "params.yaml").write_text("data: {seed: 11}\n")
    r = hasp("params", "--out", "x.yaml", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip() == ""
    assert yaml.safe_load((tmp_path / "x.yaml").read_text())["data"]["seed"] == 11


def test_the_demo_table_says_what_ran_and_keeps_every_column_when_piped(tmp_path: Path, capsys) -> None:
    from hasp.cli import benchmark_title, print_results
    from hasp.domains.search.generator import QAItem

    rows = [QAItem(f"q{i}", "Who?", ["A"], hops, ["d"] * hops) for i, hops in enumerate((1, 1, 2))]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    title = benchmark_title(tmp_path)
    assert title == "Test split (generated benchmark, 3 questions: 1-hop 2, 2-hop 1)"
    summary = {"n": 3, "em": 0.333, "f1": 0.5, "answered_rate": 1.0, "mean_steps": 3.0, "pf_fires_total": 4,
               "modified_steps": 1, "parse_error_rate": 0.0}
    print_results({"react": summary, "trained_pf_teacher_before": summary}, title)
    out = capsys.readouterr().out  # captured: not a terminal
    assert "…" not in out
    for text in (title, "trained_pf_teacher_before", "answered", "PF fires", "modified", "parse err"):
        assert text in out
