"""Agent variants as plain data: which harness surfaces are on (paper Table 5 rows)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str
    use_pfs: bool
    skills_in_prompt: bool = False
    description: str = ""


VARIANTS: dict[str, Variant] = {
    "react": Variant("react", use_pfs=False, description="multi-loop ReAct, no skills"),
    "prompt": Variant("prompt", use_pfs=False, skills_in_prompt=True,
                      description="skills as prompt text only"),
    "pf": Variant("pf", use_pfs=True, description="PF-only harness"),
}


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown agent variant {name!r}; choose from {sorted(VARIANTS)}") from None
