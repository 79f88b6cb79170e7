"""The epoch's file names live in ``hasp.artifacts`` alone: a literal elsewhere in the code is a second
place to rename when a file moves, and the phase graph (hence ``dvc.yaml``) would not follow it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hasp import artifacts as art
from hasp.evolve.phase_graph import BY_NAME, PHASES

ROOT = Path(__file__).resolve().parents[1]
#: where the package's code lives; the seed skills under hasp/skills are package data, not epoch code
SCANNED = ("hasp", "flows", "tasks")
OWNER = ROOT / "hasp" / "artifacts.py"
SUMMARY = re.compile(r"(^|/)summary_[\w*]*\.json$")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (prose may name a file; code may not)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _literal_names(text: str) -> str | None:
    """The epoch file a string constant spells (whole, or as a path's last part), else None."""
    for name in art.FILES:
        if text == name or text.endswith("/" + name):
            return name
    if SUMMARY.search(text) or text == "summary_":
        return "summary_<phase>.json"
    return None


def _offences(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    # docstrings, and the first part of an f"summary_{phase}.json" (reported once, as the f-string)
    skip = _docstrings(tree) | {id(n.values[0]) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) and n.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            name = _literal_names(node.value)
            if name:
                found.append(f"{path.relative_to(root)}:{node.lineno}: literal {node.value!r}; use hasp.artifacts")
        elif isinstance(node, ast.JoinedStr) and node.values:  # f"summary_{phase}.json"
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("summary_"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: f-string summary name; use "
                             "hasp.artifacts.summary_file")
    return found


def _code_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*.py")):
            if p != OWNER and p.relative_to(ROOT).parts[:2] != ("hasp", "skills"):
                files.append(p)
    return files


def test_no_epoch_file_literal_outside_artifacts() -> None:
    offences = [line for p in _code_files() for line in _offences(p)]
    assert not offences, "\n".join(offences)


def test_scan_finds_a_literal(tmp_path: Path) -> None:
    """The scan is not vacuous: each way of spelling a name is caught, prose is not."""
    p = tmp_path / "m.py"
    p.write_text('"""Writes rollout.jsonl."""\n'
                 'a = "rollout.jsonl"\n'
                 'b = "outputs/epoch_0/sft.jsonl"\n'
                 'c = f"summary_{a}.json"\n'
                 'd = "summary_gate.json"\n'
                 'e = "the clusters.json of the epoch"\n'
                 'f = f"{a}/gate.json"\n', encoding="utf-8")
    lines = _offences(p, tmp_path)
    assert [ln.split(":")[1] for ln in lines] == ["2", "3", "4", "5", "7"]


def test_names_are_distinct_and_summaries_round_trip() -> None:
    assert len(set(art.FILES)) == len(art.FILES)
    for phase in ("rollout", "build_data", art.BUDGET):
        assert art.summary_phase(art.summary_file(phase)) == phase
    assert art.summary_phase(art.GATE) is None
    assert Path(art.summary_file("gate")).match(art.SUMMARY_GLOB)


def test_phase_graph_declares_its_files_from_artifacts() -> None:
    """Every epoch file the graph's stages write or read is a name of ``hasp.artifacts``, and each
    phase with a DVC stage writes its own summary."""
    known = {*art.FILES, art.LIBRARY}
    for ph in PHASES:
        for t in (*ph.outs, *ph.inputs, *ph.metrics):
            if t.startswith("{epoch}/"):
                name = t.removeprefix("{epoch}/")
                assert name in known or art.summary_phase(name), f"{ph.name}: {t}"
    for name in ("rollout", "analyse", "propose", "validate", "review", "gate", "admit", "build_data"):
        assert f"{{epoch}}/{art.summary_file(name)}" in BY_NAME[name].metrics
