"""SKILL.md: YAML frontmatter + markdown body, parsed into a typed ``SkillSpec``.

The frontmatter carries the HASP fields (App. B.3) and the two keys the Agent
Skills format needs (``name``, ``description``), so a skill folder can also be
dropped into other agent tools.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import frontmatter
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

PHASES = ("post_search", "post_read", "pre_final")


class SkillFormatError(ValueError):
    """A SKILL.md that cannot be used; the message names the file and the problem."""


class PhaseSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    #: AND-ed; names or small JSON objects, evaluated by ``hasp.pf.conditions``
    conditions: list[str | dict[str, Any]] = Field(default_factory=list)
    priority_boost: float = 0.0
    action: str = ""
    text: str = ""


class SkillSpec(BaseModel):
    """Typed frontmatter of a SKILL.md plus its body."""

    model_config = ConfigDict(extra="allow")
    skill_id: str
    name: str = ""
    description: str = ""
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
    body: str = ""

    @field_validator("skill_id")
    @classmethod
    def _id_ok(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{2,63}", v):
            raise ValueError(f"skill_id {v!r} must be snake_case, 3-64 chars")
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


def parse_skill_md(text: str, source: str = "<string>") -> SkillSpec:
    """Parse SKILL.md text; any problem becomes one ``SkillFormatError`` naming ``source``."""
    try:
        post = frontmatter.loads(text)
    except (yaml.YAMLError, ValueError) as e:
        raise SkillFormatError(f"{source}: invalid YAML frontmatter: {e}") from e
    meta: dict[str, Any] = dict(post.metadata)
    if not meta:
        raise SkillFormatError(f"{source}: missing YAML frontmatter (--- ... ---)")
    if "skill_id" not in meta:
        raise SkillFormatError(f"{source}: frontmatter has no skill_id")
    meta.setdefault("name", str(meta["skill_id"]).replace("_", "-"))
    meta.setdefault("description", str(meta.get("system_summary", "")).strip())
    try:
        return SkillSpec(**meta, body=post.content)
    except ValidationError as e:
        msgs = "; ".join(f"{'.'.join(map(str, er['loc']))}: {er['msg']}" for er in e.errors())
        raise SkillFormatError(f"{source}: {msgs}") from e


def load_skill_md(path: Path) -> SkillSpec:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SkillFormatError(f"{path}: cannot read: {e}") from e
    return parse_skill_md(text, str(path))


def render_skill_md(spec: SkillSpec) -> str:
    """Write a SkillSpec back as SKILL.md text (frontmatter + body)."""
    meta = spec.model_dump(exclude={"body"}, exclude_defaults=False)
    meta["phases"] = {k: {kk: vv for kk, vv in v.items() if vv not in ("", [], 0.0)}
                      for k, v in meta["phases"].items()}
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n\n" + spec.body.strip() + "\n"
