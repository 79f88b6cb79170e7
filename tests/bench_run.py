"""Run a bench script in the test process, its results section redirected to a temp file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_bench(name: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Run ``bench/<name>.py`` in this process with ``argv``; it must finish, print, and write its
    section (unless ``--no-write``) to the temp results file."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "bench"))
    import results

    written = tmp_path / "RESULTS.md"
    original = results.Report.write
    monkeypatch.setattr(results.Report, "write", lambda self, path=written: original(self, written))
    spec = importlib.util.spec_from_file_location(f"bench_run_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py", *argv])
    import inspect

    rc = module.main(argv) if inspect.signature(module.main).parameters else module.main()
    assert rc in (0, None)
    out = capsys.readouterr().out
    assert out.strip(), "the script printed nothing"
    if "--no-write" not in argv:
        assert "\n## " in "\n" + written.read_text()  # its section, in the temp file
