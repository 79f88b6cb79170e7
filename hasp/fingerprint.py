"""Content fingerprints: hashes of files, folders and source code, never of path strings.

A cache key built from them changes when a skill file, a dataset row, a knob or a module's source
changes, and stays the same when the project moves or an unchanged step runs again. The Prefect cache
(``tasks.cache``) and the phase graph (``hasp.evolve.phase_graph``) both key on these.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path
from typing import Any


def content_hash(path: Path | str) -> str:
    """sha256 of a file, or of every file under a folder (relative names + bytes)."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_file():
        h.update(p.read_bytes())
    elif p.is_dir():
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            rel = f.relative_to(p)
            if "__pycache__" in rel.parts or any(part.startswith(".") for part in rel.parts):
                continue
            h.update(str(rel).encode())
            h.update(f.read_bytes())
    else:
        h.update(b"<missing>")
    return h.hexdigest()


def _module_file(name: str, package_dir: Path) -> Path | None:
    """``hasp.a.b`` -> ``<package_dir>/a/b.py`` or ``.../a/b/__init__.py``; None for names that
    are not modules (``from hasp.a import some_function``). Resolved on disk: nothing is imported."""
    base = package_dir.joinpath(*name.split(".")[1:])
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def package_dir(package: str = "hasp") -> Path:
    """The folder ``package`` is imported from (found without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {package!r} not found")
    return Path(next(iter(spec.submodule_search_locations)))


def module_closure(roots: tuple[str, ...], package: str = "hasp") -> list[Path]:
    """Source files of ``roots`` and of every ``package`` module they import, read from the
    code (function-level imports included) rather than from ``sys.modules``.

    Why: which modules happen to be imported depends on what ran before in the process, so a key
    built from ``sys.modules`` changed between two identical flow runs in one interpreter and the
    second run missed the cache.
    """
    pkg_dir = package_dir(package)
    seen: dict[str, Path] = {}
    todo = [*roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        f = _module_file(name, pkg_dir)
        if f is None:
            continue
        seen[name] = f
        parents = name.split(".")
        todo += [".".join(parents[:i]) for i in range(1, len(parents))]  # packages' __init__ run too
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == package]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] == package:
                todo.append(node.module)
                todo += [f"{node.module}.{a.name}" for a in node.names]  # submodules named in ``from x import y``
    return sorted(set(seen.values()))


def key_of(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()[:32]


def source_key(files: list[Path]) -> str:
    """Code key of source files: their names and contents (the code part of a task's cache key)."""
    return key_of(*[(f.name, content_hash(f)) for f in files])
