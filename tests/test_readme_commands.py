"""Every `hasp …` command the README shows exists, and every option it passes is one the command takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hasp.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCKS = re.findall(r"```bash\n(.*?)```", README, re.S)
_CMDS = sorted({m.group(1).strip() for b in _BLOCKS for line in b.splitlines()
                for m in [re.search(r"(?:^|&&\s*)hasp ([^#]+)", line)] if m})
_INLINE = sorted(set(re.findall(r"`hasp ([^`]+)`", README)))


def _command(words: list[str]) -> list[str]:
    """The subcommand path of a command line (words up to the first option or argument)."""
    path = []
    for w in words:
        if w.startswith("-") or "/" in w or "." in w or ":" in w:
            break
        path.append(w)
    return path[:2] if path and path[0] in ("skills", "model", "evolve", "track", "data") else path[:1]


def test_the_readme_shows_commands():
    assert len(_CMDS) >= 3 and len(_INLINE) >= 5, (_CMDS, _INLINE)


@pytest.mark.parametrize("line", _CMDS + _INLINE)
def test_a_readme_command_exists_and_takes_its_options(line):
    words = line.split()
    path = _command(words)
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, (line, r.output)
    for opt in (w.split("=")[0] for w in words if w.startswith("--")):
        assert opt in r.output, f"README runs `hasp {line}`, but `hasp {' '.join(path)}` has no {opt}"

