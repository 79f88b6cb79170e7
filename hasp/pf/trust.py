"""Whether a skill folder's ``pf.py`` may run in-process: the one place that decides.

Why: a ``pf.py`` imported in-process can do anything the user running HASP can (write files as
root, read secrets into a report). Where a folder sits says nothing about who wrote it, so trust
is explicit and narrow:

* the project's own code: a ``pf.py`` whose bytes are those of a seed the package ships, as its
  manifest (``hasp/skills/SEEDS.sha256``) lists them (seed folders only, never ``generated/``); a
  file written below the seed root afterwards is not in the manifest. A library
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
#: the shipped seeds' ``pf.py`` digests, one ``<sha256>  <domain>/<name>/pf.py`` line each, written
#: with the seeds and checked against them by the test suite (``write_manifest``): a file that
#: appears below the seed root later is not in it, so it is not trusted
MANIFEST = "SEEDS.sha256"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seed_pf_files(root: Path = SEED_ROOT) -> list[Path]:
    """The seed ``pf.py`` files as they are on disk (real folders only): what ``write_manifest`` lists."""
    return [pf for pf in sorted(root.glob(f"*/*/{PF_FILE}"))
            if pf.parent.name != GENERATED_DIR and not pf.parent.is_symlink() and not pf.is_symlink()]


def manifest_text(root: Path = SEED_ROOT) -> str:
    """The manifest of the seeds under ``root``."""
    return "".join(f"{_digest(read_bytes(pf))}  {pf.relative_to(root).as_posix()}\n" for pf in seed_pf_files(root))


@lru_cache(maxsize=4)
def _manifest(path: str, mtime_ns: int) -> frozenset[str]:
    out = set()
    try:
        text = read_bytes(Path(path)).decode("ascii")
    except (SkillFormatError, UnicodeDecodeError):
        return frozenset()  # an unreadable manifest trusts nothing
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        if len(digest) == 64 and rel.endswith(f"/{PF_FILE}"):
            out.add(digest)
    return frozenset(out)


def seed_digests(root: Path = SEED_ROOT) -> frozenset[str]:
    """sha256 of every shipped seed ``pf.py``, as the package's manifest lists them."""
    path = root / MANIFEST
    try:
        mtime = os.lstat(path).st_mtime_ns
    except OSError:
        return frozenset()
    return _manifest(str(path), mtime)


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
