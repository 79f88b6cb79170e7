"""The results file: a script's section replaces only itself; markdown output renders as markdown."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _results():
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_console_text_is_fenced_markdown_is_not_and_other_sections_stay(tmp_path: Path) -> None:
    results = _results()
    path = tmp_path / "RESULTS.md"
    text = results.Report("Speed", note="alone on the machine")
    text.line("tokens/s   12.5")
    text.write(path)
    table = results.Report("Grid", markdown=True)
    table.line("| arm | EM |\n|---|---|\n| trained_pf | 0.5 |")
    table.write(path)
    out = path.read_text()
    speed, grid = out.split("## Speed\n")[1].split("## Grid\n")
    assert "- note: alone on the machine" in speed and "\n```\ntokens/s   12.5\n```\n" in speed
    from hasp.provenance import provenance

    prov = provenance()  # the checkout's commit, the lock file's hash and the package versions
    assert f"- provenance: commit {prov.git_commit[:12]}" in speed
    assert f"requirements.lock {prov.lock_sha256[:12]}" in speed and f"mlflow {prov.packages['mlflow']}" in speed
    assert "```" not in grid and "\n| trained_pf | 0.5 |\n" in grid

    again = results.Report("Speed")
    again.line("tokens/s   13.0")
    again.write(path)
    out2 = path.read_text()
    assert out2.count("## Speed\n") == 1 and "13.0" in out2 and "12.5" not in out2
    assert out2.split("## Grid\n")[1] == grid  # the other section is left as it was
