"""The import layers of ``hasp/``, checked on the source so a violation fails before anyone reads it.

Every ``import`` counts, including the ones inside functions: a function-local import hides a
cycle from the interpreter at load time but not from a reader, and it still makes the lower
module depend on the upper one. Each failure line names the file, the line and the rule broken.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hasp"

#: top to bottom; a package imports only from its own layer or below
LAYERS: dict[str, tuple[str, ...]] = {
    "cli": ("hasp.cli", "hasp.api"),
    "apps": ("hasp.evolve", "hasp.train", "hasp.eval"),
    "episode": ("hasp.episode",),
    "domains": ("hasp.domains",),
    "agent": ("hasp.agent",),
    "base": ("hasp.pf", "hasp.sandbox", "hasp.llm", "hasp.signals", "hasp.track"),
    "core": ("hasp", "hasp.config", "hasp.records", "hasp.atomic", "hasp.textutil", "hasp.progress", "hasp.stats",
             "hasp.processes", "hasp.bounded", "hasp.artifacts",
             "hasp.prompts", "hasp.seeds", "hasp.action_format", "hasp.fingerprint", "hasp.console", "hasp.provenance", "hasp.pyast", "hasp.embedded_models"),
}
RANK = {pkg: len(LAYERS) - i for i, pkgs in enumerate(LAYERS.values()) for pkg in pkgs}
CORE = set(LAYERS["core"])

#: same-layer imports that are refused although the layer allows them
FORBIDDEN_PAIRS: dict[tuple[str, str], str] = {
    ("hasp.eval", "hasp.evolve"): "apps: eval does not import evolve",
    ("hasp.train", "hasp.evolve"): "apps: train does not import evolve",
    ("hasp.eval", "hasp.train"): "apps: eval and train do not import each other",
    ("hasp.train", "hasp.eval"): "apps: eval and train do not import each other",
}
#: packages that may import nothing from ``hasp`` but the core layer
CORE_ONLY = {
    "hasp.sandbox": "base: hasp.sandbox is generic isolation and imports only the core layer",
    "hasp.track": "base: hasp.track imports only the core layer",
}
#: orchestration stays outside the library; only the CLI reaches it, and only inside a function
ORCHESTRATION = ("hasp.flows", "hasp.tasks", "prefect")


@dataclass(frozen=True)
class Import:
    src: str  # importing module, dotted
    path: str  # its file, relative to the repository
    line: int
    target: str  # imported module, dotted (a ``hasp`` module when it resolves to one)
    local: bool  # inside a function

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.src} imports {self.target}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: the package's modules; the seed skills under ``hasp/skills`` are package data (run by the library loader)
MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))
                            if p.relative_to(PKG).parts[0] != "skills"}


def _package(module: str) -> str:
    """``hasp.agent.loop`` -> ``hasp.agent``; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def _resolve(name: str) -> str:
    """The deepest ``hasp`` module a dotted name reaches (``hasp.pf.base.ProgramFunction`` -> ``hasp.pf.base``)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return name


def _imports_of(module: str, path: Path, root: Path = ROOT) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = str(path.relative_to(root))
    is_pkg = path.name == "__init__.py"
    out: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append(Import(module, rel, child.lineno, _resolve(a.name), local))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")[: len(module.split(".")) - child.level + (1 if is_pkg else 0)]
                    stem = ".".join(base + ([child.module] if child.module else []))
                else:
                    stem = child.module or ""
                for a in child.names:
                    out.append(Import(module, rel, child.lineno, _resolve(f"{stem}.{a.name}"), local))
            visit(child, inner)

    visit(tree, False)
    return out


IMPORTS: list[Import] = [i for m, p in MODULES.items() for i in _imports_of(m, p)]
INTERNAL = [i for i in IMPORTS if i.target in MODULES and i.target != i.src]


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    nodes = set(edges) | {t for ts in edges.values() for t in ts}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def _report(problems: list[str]) -> None:
    lines = sorted(set(problems))
    if lines:
        pytest.fail(f"{len(lines)} import rule violation(s):\n" + "\n".join(lines), pytrace=False)


def test_every_package_has_a_layer() -> None:
    """A new package must be placed in the table before its imports can be judged."""
    _report([f"{p.relative_to(ROOT)}: package {_package(m)} has no layer (add it to LAYERS in tests/test_layers.py)"
             for m, p in MODULES.items() if _package(m) not in RANK])


def test_no_module_cycles() -> None:
    """Two modules that import each other (at any depth) cannot be read or tested apart."""
    edges: dict[str, set[str]] = {}
    for i in INTERNAL:
        edges.setdefault(i.src, set()).add(i.target)
    problems = []
    for comp in _cycles(edges):
        names = " <-> ".join(sorted(comp))
        problems += [f"{i.where()} — rule: no module cycles ({names})"
                     for i in INTERNAL if i.src in comp and i.target in comp]
    _report(problems)


def test_no_package_cycles() -> None:
    """Packages of one layer may import each other, but never both ways round.

    Only same-layer edges are followed: a cycle across layers contains an upward import, which
    ``test_no_upward_imports`` names on its own line."""
    same = [i for i in INTERNAL if _package(i.src) != _package(i.target) and _package(i.src) in RANK
            and RANK[_package(i.src)] == RANK.get(_package(i.target))]
    edges: dict[str, set[str]] = {}
    for i in same:
        edges.setdefault(_package(i.src), set()).add(_package(i.target))
    problems = []
    for comp in _cycles(edges):
        names = " <-> ".join(sorted(comp))
        problems += [f"{i.where()} — rule: no package cycles ({names})" for i in same
                     if _package(i.src) in comp and _package(i.target) in comp]
    _report(problems)


def test_no_upward_imports() -> None:
    """A package imports only from its own layer or below, with the per-layer exceptions above."""
    problems = []
    for i in INTERNAL:
        a, b = _package(i.src), _package(i.target)
        if a == b or a not in RANK or b not in RANK:
            continue
        if RANK[b] > RANK[a]:
            problems.append(f"{i.where()} — rule: layer {_layer(a)} does not import layer {_layer(b)}")
        elif (a, b) in FORBIDDEN_PAIRS:
            problems.append(f"{i.where()} — rule: {FORBIDDEN_PAIRS[(a, b)]}")
        elif a in CORE_ONLY and b not in CORE:
            problems.append(f"{i.where()} — rule: {CORE_ONLY[a]}")
    _report(problems)


def test_orchestration_only_from_the_cli() -> None:
    """``hasp`` is a library: Prefect, ``flows`` and ``tasks`` sit on top of it, reached only from the CLI."""
    problems = []
    for i in IMPORTS:
        top = next((o for o in ORCHESTRATION if i.target == o or i.target.startswith(o + ".")), None)
        if top is None:
            continue
        if _package(i.src) not in LAYERS["cli"]:
            problems.append(f"{i.where()} — rule: only the CLI modules import {top}")
        elif not i.local:
            problems.append(f"{i.where()} — rule: the CLI imports {top} inside the command that needs it")
    _report(problems)


def _layer(pkg: str) -> str:
    return next(name for name, pkgs in LAYERS.items() if pkg in pkgs)


def test_the_checker_sees_function_local_and_relative_imports(tmp_path: Path) -> None:
    """The rules are only as good as the parser: a hidden import must be found."""
    src = tmp_path / "hasp" / "agent" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text("def f():\n    from hasp.agent import loop\n    from . import harness\n", encoding="utf-8")
    found = _imports_of("hasp.agent.x", src, root=tmp_path)
    assert [(i.line, i.target, i.local) for i in found] == [(2, "hasp.agent.loop", True),
                                                            (3, "hasp.agent.harness", True)]
