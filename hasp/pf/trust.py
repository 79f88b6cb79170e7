"""Whether a skill folder's ``pf.py`` may run in-process: the one place that decides.

Why: a ``pf.py`` imported in-process can do anything the user running HASP can (write files as
root, read secrets into a report). Where a folder sits says nothing about who wrote it, so trust
is explicit and narrow:

* the project's own code: a ``pf.py`` whose bytes are those of a seed folder shipped in the
  package's ``hasp/skills/`` tree (``SEED_ROOT``; seed folders only, never ``generated/``). A library
  copied for an epoch, a val-gate copy or a snapshot thus still runs its seeds in-process, while
  an edited copy, or any other folder, does not;
* a folder the user names as trusted (``hasp skills validate --trusted DIR``, which warns).

Every other ``pf.py``, wherever it is, runs in the PF sandbox (``hasp.pf.sandboxed``). The
decision is taken on the source text that is then executed, so what was checked is what runs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from hasp.pf.folder_files import SkillFormatError, read_bytes
from hasp.pf.layout import GENERATED_DIR
from hasp.seeds import SEED_LIBRARIES

#: the seed libraries shipped inside the package: ``hasp/skills/<domain>/<name>/`` (``hasp.seeds``)
SEED_ROOT = SEED_LIBRARIES
PF_FILE = "pf.py"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seed_pf_files(root: Path) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime) of every seed ``pf.py`` (the cache key of their digests)."""
    out = []
    for pf in sorted(root.glob(f"*/*/{PF_FILE}")):
        if pf.parent.name == GENERATED_DIR or pf.parent.is_symlink():
            continue
        try:
            st = os.lstat(pf)
        except OSError:
            continue
        out.append((str(pf), st.st_size, st.st_mtime_ns))
    return tuple(out)


@lru_cache(maxsize=4)
def _digests(files: tuple[tuple[str, int, int], ...]) -> frozenset[str]:
    out = set()
    for path, _size, _mtime in files:
        try:
            out.add(_digest(read_bytes(Path(path))))
        except SkillFormatError:
            continue  # a seed pf.py that is not a regular file is trusted by no one
    return frozenset(out)


def seed_digests(root: Path = SEED_ROOT) -> frozenset[str]:
    """sha256 of every shipped seed ``pf.py``."""
    return _digests(_seed_pf_files(root))


def _inside(folder: Path, roots: Iterable[Path]) -> bool:
    here = folder.resolve()
    return any(here == r or r in here.parents for r in (Path(p).resolve() for p in roots))


def trusted_pf(folder: Path, source: str, trusted: Iterable[Path] = ()) -> bool:
    """True when ``source`` (the ``pf.py`` text of ``folder``) may be imported in-process: the folder
    is (inside) one the user marked ``trusted``, or it is not a generated version and ``source`` is
    byte for byte a shipped seed's ``pf.py``."""
    if _inside(folder, trusted):
        return True
    if folder.parent.name == GENERATED_DIR:
        return False
    return _digest(source.encode("utf-8")) in seed_digests()
