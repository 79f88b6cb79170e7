"""The versioned skill library on disk: load the active version of every skill.

The folder layout is ``hasp.pf.layout``. Only the highest version of each skill id is
active; older versions stay on disk for replay. A ``pf.py`` is imported in-process only when
``hasp.pf.trust.trusted_pf`` says it is the project's own seed code; every other one, wherever
its folder is, is only ever executed through ``hasp.pf.sandboxed.SandboxedPF`` (a separate,
resource-limited process). Files are read through ``hasp.pf.folder_files`` (regular files only).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import stat
from dataclasses import dataclass, field
from pathlib import Path

from hasp.config import SandboxParams
from hasp.pf.base import ProgramFunction
from hasp.pf.conditions import invalid_phases
from hasp.pf.declared import compile_declaration
from hasp.pf.equivalence import only_modifies
from hasp.pf.folder_files import present, read_bytes, read_text, walk_tree
from hasp.pf.layout import VERSION_DIR, Version, active_versions, candidate_versions, folder_refusal, scan_versions
from hasp.pf.registry import collecting
from hasp.pf.skill_md import HASP_FILE, SKILL_FILE, SkillFormatError, SkillSpec, load_skill
from hasp.pf.texts import apply_texts
from hasp.pf.trust import trusted_pf
from hasp.pyast import parse_python

log = logging.getLogger(__name__)

__all__ = ["Skill", "SkillLibrary", "library_hash", "load_library", "MAX_LIBRARY_SIZE",
           "VERSION_DIR", "active_versions", "scan_versions"]

MAX_LIBRARY_SIZE = 50


@dataclass
class Skill:
    """One skill version: its spec, its PF (if it has code) and where it came from."""

    spec: SkillSpec
    path: Path
    version: int
    generated: bool
    pf: ProgramFunction | None = None

    @property
    def skill_id(self) -> str:
        return self.spec.skill_id


@dataclass
class SkillLibrary:
    domain: str
    root: Path
    skills: list[Skill] = field(default_factory=list)
    load_errors: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [s.skill_id for s in self.skills]

    def get(self, skill_id: str) -> Skill | None:
        return next((s for s in self.skills if s.skill_id == skill_id), None)

    def pfs(self) -> list[ProgramFunction]:
        """Active PFs, highest priority first (the dispatcher's evaluation order)."""
        return [s.pf for s in self.skills if s.pf is not None]

    def known_ids(self) -> set[str]:
        """Loaded skill ids plus those present on disk: a skill that failed to load is already in
        ``load_errors``, so a reference to it is not also reported as an unknown id."""
        return set(self.ids) | set(scan_versions(self.root))

    def content_hash(self) -> str:
        return library_hash(self.root)

    def sandbox_weaker(self) -> list[str]:
        """Isolation layers missing in the sandboxes this library's generated PFs started so far
        (only ever non-empty under ``sandbox.allow_weaker``): what a run must record."""
        out: list[str] = []
        for s in self.skills:
            for w in getattr(s.pf, "weaker", None) or ():
                if w not in out:
                    out.append(w)
        return out

    def close(self) -> None:
        for s in self.skills:
            closer = getattr(s.pf, "close", None)
            if callable(closer):
                closer()


def library_hash(root: Path) -> str:
    """Content hash of every SKILL.md / hasp.yaml / pf.py under ``root`` (the cache key for a library)."""
    h = hashlib.sha256()
    if root.exists():
        # snapshots and in-flight admission temp dirs are not the active library; the walk is iterative
        # and capped (``walk_tree``), so a deep or huge tree is refused in lines, not by a crash
        _, files, refused = walk_tree(root, ("snapshots", ".*", "__pycache__", "*.pyc"))
        for line in refused:  # relative, like the names below: a hash of content, not of where it sits
            h.update(line.replace(str(root), "").encode())
        for p in files:
            if p.name in (SKILL_FILE, HASP_FILE, "pf.py") and stat.S_ISREG(p.lstat().st_mode):
                h.update(str(p.relative_to(root)).encode())
                try:
                    h.update(read_bytes(p))
                except SkillFormatError as e:  # the loader refuses it the same way
                    h.update(str(e).encode())
    return h.hexdigest()[:16]


def import_trusted_pf(pf_path: Path, skill_id: str, source: str | None = None) -> ProgramFunction:
    """Run a trusted ``pf.py`` in-process and instantiate the PF registered under ``skill_id``.

    ``source`` is the text the trust decision was taken on (read from ``pf_path`` when None):
    that text, not whatever the path holds by now, is what runs. Callers ask
    ``hasp.pf.trust.trusted_pf`` first."""
    source = read_text(pf_path) if source is None else source
    mod_name = f"hasp_skills.{pf_path.parent.parent.name}.{pf_path.parent.name}"
    spec = importlib.util.spec_from_loader(mod_name, loader=None, origin=str(pf_path))
    if spec is None:
        raise ImportError(f"cannot import {pf_path}")
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(pf_path)
    with collecting() as found:
        exec(compile(parse_python(source), str(pf_path), "exec"), module.__dict__)  # noqa: S102 - trusted seed code only
    if skill_id not in found:
        raise SkillFormatError(f"{pf_path}: no @register_pf({skill_id!r}) class (found {sorted(found)})")
    return found[skill_id]()


def _sandboxed_pf(source: str, skill_id: str, sandbox: SandboxParams | None) -> ProgramFunction:
    from hasp.pf.sandboxed import SandboxedPF

    return SandboxedPF(source, skill_id=skill_id, sandbox=sandbox)


def _checked_phases(spec: SkillSpec, domain: str, folder: Path, generated: bool, errors: list[str]) -> SkillSpec:
    """Phase conditions the domain cannot evaluate: a seed skill is broken (raise); a generated one
    (written by the student model) keeps its PF and loses only the bad phase, reported in ``errors``."""
    bad = invalid_phases(spec, domain, f"{folder}/{HASP_FILE}")
    if not bad:
        return spec
    if not generated:
        raise SkillFormatError(next(iter(bad.values())))
    for msg in bad.values():
        errors.append(f"{msg} (phase dropped)")
        log.warning("%s (phase dropped)", msg)
    return spec.model_copy(update={"phases": {k: v for k, v in spec.phases.items() if k not in bad}})


def _checked_texts(spec: SkillSpec, folder: Path, generated: bool, sandboxed: bool, errors: list[str]) -> SkillSpec:
    """``texts:`` reach an in-process PF only: a generated or sandboxed PF says what its own code
    says, so its texts are dropped and reported in ``errors``, not silently kept."""
    if not ((generated or sandboxed) and spec.texts):
        return spec
    msg = (f"{folder}/{HASP_FILE}: texts: a {'generated' if generated else 'sandboxed'} PF keeps its texts "
           f"in its code ({', '.join(spec.texts)} dropped)")
    errors.append(msg)
    log.warning(msg)
    return spec.model_copy(update={"texts": {}})


def _load_version(base: str, domain: str, found: Version, errors: list[str],
                  sandbox: SandboxParams | None = None, probe: bool = False) -> Skill:
    """One version as the loader activates it; ``probe``: every check short of running a PF (the
    declaration compiled, a ``pf.py`` parsed), so a snapshot picks the version the loader picks."""
    version, folder, generated = found
    spec = load_skill(folder)
    why = folder_refusal(folder, spec.skill_id, version if generated else spec.version, generated)
    if why or spec.name != folder.name:
        raise SkillFormatError(why or f"{folder}/{SKILL_FILE}: name {spec.name!r} != folder name")
    if generated and spec.version != version:
        raise SkillFormatError(f"{folder}/{HASP_FILE}: version {spec.version} != folder version {version}")
    spec = _checked_phases(spec, domain, folder, generated, errors)
    pf_path = folder / "pf.py"
    pf: ProgramFunction | None = None
    sandboxed = False
    if spec.pf is not None:
        if present(pf_path):
            raise SkillFormatError(f"{folder}/{HASP_FILE}: pf: a skill declares its PF under pf: or in pf.py, not both")
        pf = compile_declaration(base, spec.pf, f"{folder}/{HASP_FILE}: pf", domain)
    elif present(pf_path) and probe:
        parse_python(read_text(pf_path))
    elif present(pf_path):
        source = read_text(pf_path)
        sandboxed = not trusted_pf(folder, source)
        pf = _sandboxed_pf(source, base, sandbox) if sandboxed else import_trusted_pf(pf_path, base, source)
        pf.modify_only = only_modifies(source, base)
    spec = _checked_texts(spec, folder, generated, sandboxed, errors)
    if spec.texts and not probe:
        if pf is None:
            raise SkillFormatError(f"{folder}/{HASP_FILE}: texts: the skill has no PF to set them on")
        apply_texts(pf, spec.texts, f"{folder}/{HASP_FILE}")
    return Skill(spec=spec, path=folder, version=version, generated=generated, pf=pf)


BUILT_IN_DOMAINS = ("search", "math", "code")


def library_domain(root: Path) -> str:
    """The domain of a library given without one: its folder's name when that is a built-in domain
    (the seed layout), else the ``domain`` most of its skills declare (read defensively; a folder
    that does not load says nothing), else search."""
    if root.name in BUILT_IN_DOMAINS:
        return root.name
    declared: dict[str, int] = {}
    for versions in (scan_versions(root).values() if root.is_dir() else ()):
        try:
            d = load_skill(versions[-1][1]).domain
        except Exception:  # noqa: BLE001 - the loader reports the folder; here it just does not vote
            continue
        declared[d] = declared.get(d, 0) + 1
    return max(sorted(declared), key=declared.__getitem__) if declared else "search"


def loaded_versions(root: Path, domain: str | None = None, include_generated: bool = True) -> dict[str, Version]:
    """The version of each skill id that ``load_library`` activates: the highest one whose files pass
    every load check (``_load_version(probe=True)``), no PF run. What a snapshot copies."""
    domain = domain or library_domain(root)
    out: dict[str, Version] = {}
    for base, versions in candidate_versions(root, include_generated).items():
        for found in versions:
            try:
                _load_version(base, domain, found, [], probe=True)
            except Exception:  # noqa: BLE001 - the loader skips it the same way
                continue
            out[base] = found
            break
    return out


def load_library(root: Path, domain: str | None = None, *, max_size: int = MAX_LIBRARY_SIZE,
                 include_generated: bool = True, sandbox: SandboxParams | None = None) -> SkillLibrary:
    """Load the highest working version of every skill under ``root``.

    A ``pf.py`` that is not shipped seed code (``hasp.pf.trust``) runs in the sandbox under
    ``sandbox`` (the params section: weaker-mode opt-in, caps, CPU budget; schema defaults when None).

    A broken skill folder never stops the load: it is skipped and reported in ``load_errors``
    (and the log), so one bad SKILL.md cannot take a rollout down. When the highest version is
    broken the next one down is tried, so a bad admitted version degrades the skill to its last
    working version instead of removing it; the fallback is reported too.
    """
    domain = domain or library_domain(root)
    lib = SkillLibrary(domain=domain, root=root)
    for base, versions in candidate_versions(root, include_generated).items():
        for i, found in enumerate(versions):
            try:
                skill = _load_version(base, domain, found, lib.load_errors, sandbox)
            except Exception as e:  # noqa: BLE001 - a broken skill is reported, not fatal
                msg = f"skipped skill {found[1]}: {e}"
                log.warning(msg)
                lib.load_errors.append(msg)
                continue
            if i:
                msg = f"skill {base}: using {skill.path} (v{skill.version}) because a newer version is broken"
                log.warning(msg)
                lib.load_errors.append(msg)
            lib.skills.append(skill)
            break
    lib.skills.sort(key=lambda s: (-s.spec.priority, s.skill_id))
    if len(lib.skills) > max_size:
        dropped = [s.skill_id for s in lib.skills[max_size:]]
        log.warning("library %s over cap %d; inactive: %s", root, max_size, dropped)
        lib.skills = lib.skills[:max_size]
    return lib
