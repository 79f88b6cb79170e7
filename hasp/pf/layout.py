"""Where a library keeps its skill versions on disk, and which version of each skill is active.

Layout (per domain)::

    <library>/<name>/SKILL.md + hasp.yaml + pf.py              seed skills (project code)
    <library>/generated/<name>-v<N>/SKILL.md + hasp.yaml + ...  admitted versions
    <library>/library_history.json                             every admission decision

(the shipped seed libraries are ``hasp/skills/<domain>/``, ``hasp.seeds``)

``<name>`` is the kebab form of the snake_case skill id, so every folder name equals its
SKILL.md ``name`` as the Agent Skills spec requires. It is its own module because both the
loader and the static analyses walk versions, and neither should import the other for it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from hasp.pf.skill_md import SKILL_FILE, SkillFormatError, kebab, load_skill, snake

GENERATED_DIR = "generated"
#: an admitted version's folder: ``<name>-v<N>`` (``<name>`` itself may end in ``-v2``)
#: ASCII only (``re.ASCII``, ``[0-9]``, ``\Z``): a Unicode digit or a trailing line break is not a version
VERSION_DIR = re.compile(r"^(?P<name>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)-v(?P<n>[0-9]{1,6})\Z", re.ASCII)
SEED_DIR = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*\Z", re.ASCII)

log = logging.getLogger(__name__)

Version = tuple[int, Path, bool]  # (version, folder, generated)


def version_name(skill_id: str, version: int) -> str:
    """Folder name (= SKILL.md name) of an admitted version."""
    return f"{kebab(skill_id)}-v{version}"


def _seed_version(folder: Path) -> int:
    try:
        return load_skill(folder).version
    except SkillFormatError:
        return 1


def _linked(path: Path) -> bool:
    if path.is_symlink():
        log.warning("%s: is a symbolic link; skill folders are real folders (skipped)", path)
        return True
    return False


def scan_versions(root: Path) -> dict[str, list[Version]]:
    """All versions per skill id: (version, folder, generated). A symlinked skill folder or
    ``generated/`` is skipped with a logged line, so the loader, the snapshot, the library hash and
    admission all see the same folders."""
    out: dict[str, list[Version]] = {}
    if not root.exists():
        return out
    for d in sorted(p for p in root.iterdir() if p.is_dir() and (p / SKILL_FILE).exists()):
        if SEED_DIR.match(d.name) and not _linked(d):
            out.setdefault(snake(d.name), []).append((_seed_version(d), d, False))
    gen = root / GENERATED_DIR
    if gen.exists() and not _linked(gen):
        for d in sorted(p for p in gen.iterdir() if p.is_dir() and not _linked(p)):
            m = VERSION_DIR.match(d.name)
            if m and (d / SKILL_FILE).exists():
                out.setdefault(snake(m["name"]), []).append((int(m["n"]), d, True))
    return out


def active_versions(root: Path, include_generated: bool = True) -> dict[str, Version]:
    """The version of each skill id that the loader activates: (version, folder, generated).

    Highest version wins; a generated version beats a seed with the same number.
    """
    out: dict[str, Version] = {}
    for base, versions in scan_versions(root).items():
        if not include_generated:
            versions = [v for v in versions if not v[2]]
        if versions:
            out[base] = max(versions, key=lambda t: (t[0], t[2]))
    return out


def candidate_versions(root: Path, include_generated: bool = True) -> dict[str, list[Version]]:
    """Every version of each skill id, best first (the order of :func:`active_versions`), so a
    loader can fall back to the next version when the best one is broken."""
    out: dict[str, list[Version]] = {}
    for base, versions in scan_versions(root).items():
        if not include_generated:
            versions = [v for v in versions if not v[2]]
        if versions:
            out[base] = sorted(versions, key=lambda t: (t[0], t[2]), reverse=True)
    return out


def folder_refusal(folder: Path, skill_id: str, version: int, generated: bool) -> str | None:
    """Why ``folder``'s name does not fit the skill it holds (None when it does)."""
    want = version_name(skill_id, version) if generated else kebab(skill_id)
    if folder.name != want:
        return f"{folder}: folder name {folder.name!r} != {want!r} (from skill_id {skill_id!r})"
    return None
