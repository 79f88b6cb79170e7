"""Content fingerprints: hashes of files, folders and source code, never of path strings.

A cache key built from them changes when a skill file, a dataset row, a knob or a module's source
changes, and stays the same when the project moves or an unchanged step runs again. The Prefect cache
(``hasp.tasks.cache``) and the phase graph (``hasp.evolve.phase_graph``) both key on these.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from hasp.pyast import parse_python
from hasp.atomic import write_json_atomic

#: entries kept in the hash cache file (oldest dropped first)
HASH_CACHE_ENTRIES = 256


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


def default_cache_dir() -> Path:
    """``$HASP_CACHE`` or ``~/.cache/hasp``: what HASP computes once per machine (the prepared model
    folder, the hash cache of large files) lives under it."""
    return Path(os.environ.get("HASP_CACHE") or Path.home() / ".cache" / "hasp")


def _stamp(p: Path) -> str | None:
    """What changes when a file or folder is rewritten: size and mtime of every file (None: missing)."""
    if p.is_file():
        st = p.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(p)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()
    return None


def cached_content_hash(path: Path | str, cache_file: Path | None = None) -> str:
    """``content_hash(path)``, remembered by (path, size, mtime) in ``cache_file`` (default
    ``<default_cache_dir()>/content_hashes.json``).

    Why: a model's weights are hundreds of megabytes and every run records their hash; re-reading
    them for an unchanged file would cost each run seconds. A rewrite changes size or mtime, so the
    stamp misses and the bytes are read again. A cache file that cannot be read or written only
    costs the re-read."""
    p = Path(path).resolve()
    stamp = _stamp(p)
    if stamp is None:
        return content_hash(p)
    cache_file = cache_file or default_cache_dir() / "content_hashes.json"
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(str(p))
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
        return hit["sha256"]
    digest = content_hash(p)
    cache.pop(str(p), None)
    cache[str(p)] = {"stamp": stamp, "sha256": digest}
    kept = dict(list(cache.items())[-HASH_CACHE_ENTRIES:])
    try:
        write_json_atomic(kept, cache_file)
    except OSError:
        pass
    return digest


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
    missing = [r for r in roots if _module_file(r, pkg_dir) is None]
    if missing:  # a key that silently leaves a module out does not see edits to it
        raise ValueError(f"unknown module(s) {', '.join(missing)} under {package}: the code key would miss them")
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
        todo += _package_imports(f.read_text(encoding="utf-8"), package)
    return sorted(set(seen.values()))


def is_module(name: str, package: str = "hasp") -> bool:
    """Whether ``name`` is a module (or package) of ``package`` on disk."""
    return _module_file(name, package_dir(package)) is not None


def package_imports(source: str, package: str = "hasp") -> tuple[str, ...]:
    """Module names under ``package`` that ``source`` imports (see ``_package_imports``)."""
    return _package_imports(source, package)


@functools.lru_cache(maxsize=2048)
def _package_imports(source: str, package: str) -> tuple[str, ...]:
    """Module names under ``package`` that ``source`` imports (and the submodules a ``from x import y``
    may name). Kept per source text: every task's cache key walks the same closure, and parsing it again
    each time cost seconds per epoch."""
    tree = parse_python(source)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name.split(".")[0] == package]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == package:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]  # submodules named in ``from x import y``
    return tuple(names)


def key_of(*parts: Any) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
    return h.hexdigest()[:32]


def source_key(files: list[Path]) -> str:
    """Code key of source files: their names and contents (the code part of a task's cache key)."""
    return key_of(*[(f.name, content_hash(f)) for f in files])
