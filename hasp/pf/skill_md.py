"""A skill folder: ``SKILL.md`` (Agent Skills) + ``hasp.yaml`` (HASP's fields), parsed into a ``SkillSpec``.

Why two files: other agent tools load a folder whose SKILL.md frontmatter holds only the
Agent Skills keys (``name`` = folder name, ``description``, optional ``license``,
``allowed-tools``, ``metadata``, ``compatibility``) and is readable by a strict YAML
parser. HASP's structured fields (priority, phases, conditions...) do not fit there, so
they live in a sidecar ``hasp.yaml`` next to it. Both files have a closed schema: an
unknown key (a typo such as ``priorty``) is one error line naming the file and the key,
never a silently applied default.

A student's candidate is one SKILL.md text whose frontmatter carries both key sets
(``parse_skill_md``); admission splits it into the two files (``render_skill_folder``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import frontmatter
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hasp.pf.declaration import PFDeclaration
from hasp.pf.folder_files import SkillFormatError, parse_yaml, read_text

__all__ = ["SkillFormatError", "SkillSpec", "PhaseSpec", "load_skill", "parse_skill_md", "split_frontmatter",
           "render_skill_md", "render_skill_folder", "write_skill_folder", "kebab", "snake"]

PHASES = ("post_search", "post_read", "pre_final")
SKILL_FILE = "SKILL.md"
HASP_FILE = "hasp.yaml"

#: frontmatter keys the Agent Skills spec allows in SKILL.md
AGENT_SKILLS_KEYS = ("name", "description", "license", "allowed-tools", "metadata", "compatibility")
#: HASP's own keys, kept in hasp.yaml
HASP_KEYS = ("skill_id", "title", "version", "priority", "error_category", "domain", "applicable_modes",
             "applicable_phases", "trigger_keywords", "always_on", "system_summary", "phases", "texts", "pf")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
#: snake_case with single underscores, so its kebab form is a valid Agent Skills name (and back)
SKILL_ID = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
#: room left in a 64-char name for the ``-v<N>`` suffix of an admitted version
MAX_SKILL_ID = MAX_NAME - 8


def kebab(skill_id: str) -> str:
    """The Agent Skills name (and seed folder name) of a snake_case skill id."""
    return skill_id.replace("_", "-")


def snake(name: str) -> str:
    """The skill id of a kebab-case folder name."""
    return name.replace("-", "_")


class PhaseSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: AND-ed; names or small JSON objects, evaluated by ``hasp.pf.conditions``
    conditions: list[str | dict[str, Any]] = Field(default_factory=list)
    priority_boost: float = 0.0
    action: str = ""
    text: str = ""


class SkillSpec(BaseModel):
    """One skill: the Agent Skills keys, HASP's keys and the markdown body."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)
    skill_id: str
    name: str = ""
    description: str = Field("", max_length=MAX_DESCRIPTION)
    license: str = ""
    allowed_tools: str = Field("", alias="allowed-tools")
    metadata: dict[str, str] = Field(default_factory=dict)
    compatibility: str = Field("", max_length=500)
    title: str = ""
    version: int = 1
    priority: float = 0.5
    error_category: str = ""
    domain: str = "search"
    applicable_modes: list[str] = Field(default_factory=lambda: ["all"])
    applicable_phases: list[str] = Field(default_factory=list)
    trigger_keywords: list[str] = Field(default_factory=list)
    #: always kept by PF selection: normalises the action/observation streams others read (App. B.4)
    always_on: bool = False
    system_summary: str = ""
    phases: dict[str, PhaseSpec] = Field(default_factory=dict)
    #: what the PF says (label, advice...) as data: text attribute name -> string (``hasp.pf.texts``)
    texts: dict[str, str] = Field(default_factory=dict)
    #: the PF declared as data (``hasp.pf.declaration``) instead of a pf.py
    pf: PFDeclaration | None = None
    body: str = ""

    @field_validator("skill_id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not (3 <= len(v) <= MAX_SKILL_ID and SKILL_ID.fullmatch(v)):
            raise ValueError(f"skill_id {v!r} must be snake_case (single underscores), 3-{MAX_SKILL_ID} chars")
        return v

    @field_validator("phases")
    @classmethod
    def _phases_ok(cls, v: dict[str, PhaseSpec]) -> dict[str, PhaseSpec]:
        bad = set(v) - set(PHASES)
        if bad:
            raise ValueError(f"unknown phase(s) {sorted(bad)}; allowed: {list(PHASES)}")
        return v

    def phase_text(self, phase: str) -> str:
        """Text shown for a phase: frontmatter ``text`` or the body's '## Phase: <phase>' section."""
        spec = self.phases.get(phase)
        if spec is None:
            return ""
        if spec.text:
            return spec.text.strip()
        m = re.search(rf"^##\s*Phase:\s*{phase}\s*$(.*?)(?=^##\s|\Z)", self.body, re.M | re.S)
        return m.group(1).strip() if m else ""


def _unknown_keys(meta: dict[str, Any], allowed: tuple[str, ...], source: str) -> None:
    for key in meta:
        if key not in allowed:
            raise SkillFormatError(f"{source}: unknown key {key!r} (allowed: {', '.join(allowed)})")
    phases = meta.get("phases") or {}
    for pname, phase in phases.items() if isinstance(phases, dict) else ():
        for key in phase if isinstance(phase, dict) else ():
            if key not in PhaseSpec.model_fields:
                raise SkillFormatError(f"{source}: unknown key {key!r} in phases.{pname} "
                                       f"(allowed: {', '.join(PhaseSpec.model_fields)})")


def _build(meta: dict[str, Any], body: str, source: str) -> SkillSpec:
    try:
        return SkillSpec(**meta, body=body)
    except (ValidationError, TypeError) as e:
        msgs = (e.errors() if isinstance(e, ValidationError) else [{"loc": (), "msg": str(e)}])
        raise SkillFormatError(f"{source}: " + "; ".join(
            f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in msgs)) from e


class _BoundedYAML(frontmatter.YAMLHandler):
    """python-frontmatter's split, with the frontmatter read by the bounded loader."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def load(self, fm: str, **kwargs: object) -> Any:
        return parse_yaml(fm, self.source)


def split_frontmatter(text: str, source: str) -> tuple[dict[str, Any], str]:
    """(frontmatter mapping, markdown body) of a SKILL.md text; the YAML is read bounded (no aliases,
    depth cap, bounded integers), and every failure is one ``SkillFormatError`` naming ``source``."""
    meta, body = frontmatter.parse(text, handler=_BoundedYAML(source))
    if not meta:
        raise SkillFormatError(f"{source}: missing YAML frontmatter (--- ... ---)")
    return dict(meta), body


def parse_skill_md(text: str, source: str = "<string>") -> SkillSpec:
    """A candidate SKILL.md whose frontmatter carries both key sets (the student's format)."""
    meta, body = split_frontmatter(text, source)
    _unknown_keys(meta, AGENT_SKILLS_KEYS + HASP_KEYS, source)
    if "skill_id" not in meta:
        raise SkillFormatError(f"{source}: frontmatter has no skill_id")
    meta.setdefault("name", kebab(str(meta["skill_id"])))
    meta.setdefault("description", str(meta.get("system_summary", "")).strip())
    return _build(meta, body, source)


def _required_agent_keys(meta: dict[str, Any], source: str) -> None:
    """The Agent Skills spec requires ``name`` and ``description``; other tools refuse a folder
    without them, so HASP refuses it too instead of defaulting them to empty strings."""
    for key in ("name", "description"):
        value = meta.get(key)
        if not isinstance(value, str) or not value.strip():
            got = "missing" if key not in meta else f"got {value!r}"
            raise SkillFormatError(f"{source}: required key {key!r} must be a non-empty string ({got})")


def load_skill(folder: Path) -> SkillSpec:
    """The skill in ``folder``: SKILL.md (Agent Skills keys only) merged with hasp.yaml (HASP keys only)."""
    md_path, hasp_path = folder / SKILL_FILE, folder / HASP_FILE
    md_text = read_text(md_path)
    hasp_text = read_text(hasp_path)
    md_meta, body = split_frontmatter(md_text, str(md_path))
    _unknown_keys(md_meta, AGENT_SKILLS_KEYS, str(md_path))
    _required_agent_keys(md_meta, str(md_path))
    hasp_meta = parse_yaml(hasp_text, str(hasp_path)) or {}
    if not isinstance(hasp_meta, dict):
        raise SkillFormatError(f"{hasp_path}: must be a YAML mapping")
    _unknown_keys(hasp_meta, HASP_KEYS, str(hasp_path))
    if "skill_id" not in hasp_meta:
        raise SkillFormatError(f"{hasp_path}: no skill_id")
    return _build({**hasp_meta, **md_meta}, body, str(folder))


def _dump(meta: dict[str, Any]) -> str:
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def _hasp_meta(spec: SkillSpec) -> dict[str, Any]:
    meta = spec.model_dump(include=set(HASP_KEYS))
    meta["phases"] = {k: {kk: vv for kk, vv in v.items() if vv not in ("", [], 0.0)}
                      for k, v in meta["phases"].items()}
    if spec.pf is not None:
        meta["pf"] = spec.pf.model_dump(exclude_defaults=True)
    absent = {"pf": spec.pf is None, "texts": not spec.texts}
    return {k: meta[k] for k in HASP_KEYS if not absent.get(k)}


def _agent_skills_meta(spec: SkillSpec, name: str) -> dict[str, Any]:
    meta = spec.model_dump(include={"description", "license", "allowed_tools", "metadata", "compatibility"},
                           by_alias=True)
    return {"name": name, **{k: meta[k] for k in AGENT_SKILLS_KEYS[1:] if meta[k]}}


def render_skill_md(spec: SkillSpec) -> str:
    """The candidate format: one frontmatter with both key sets, then the body."""
    meta = {**_agent_skills_meta(spec, spec.name or kebab(spec.skill_id)), **_hasp_meta(spec)}
    return "---\n" + _dump(meta) + "---\n\n" + spec.body.strip() + "\n"


def render_skill_folder(spec: SkillSpec, name: str) -> dict[str, str]:
    """File name -> text of a skill folder named ``name`` (SKILL.md and hasp.yaml)."""
    md = "---\n" + _dump(_agent_skills_meta(spec, name)) + "---\n\n" + spec.body.strip() + "\n"
    return {SKILL_FILE: md, HASP_FILE: _dump(_hasp_meta(spec))}


def write_skill_folder(folder: Path, spec: SkillSpec) -> Path:
    """Write ``spec`` as a skill folder (SKILL.md + hasp.yaml) named ``folder``; its name becomes SKILL.md's."""
    folder.mkdir(parents=True, exist_ok=True)
    for file_name, text in render_skill_folder(spec, folder.name).items():
        (folder / file_name).write_text(text, encoding="utf-8")
    return folder
