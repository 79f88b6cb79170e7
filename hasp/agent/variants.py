"""Agent variants as plain data: which harness surfaces exist (paper Table 5 rows, App. G.1).

A variant says which surfaces *exist*; ``HarnessParams`` master switches may still turn them
off. The teacher reaches an episode only through a variant with ``use_teacher``.

* ``react``        multi-loop ReAct, no skills
* ``prompt``       skills as text only: ranked skill summaries in the system prompt + phase reminders
* ``pf``           PF only: PF dispatch, code handlers, phase reminders; teacher-assisted PFs use
                   their deterministic paths and llm handlers are skipped
* ``pf_teacher``   Full: ``pf`` + teacher (teacher-assisted PFs, llm handlers, teacher PF
                   selection and difficulty score)
* ``teacher_only`` no PFs; the teacher post-processes the FINAL answer into a short span
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str
    use_pfs: bool
    skills_in_prompt: bool = False
    description: str = ""
    use_teacher: bool = False
    phase_instructions: bool = False
    teacher_postprocess: bool = False


VARIANTS: dict[str, Variant] = {
    "react": Variant("react", use_pfs=False, description="multi-loop ReAct, no skills"),
    "prompt": Variant("prompt", use_pfs=False, skills_in_prompt=True, phase_instructions=True,
                      description="skills as prompt text only"),
    "pf": Variant("pf", use_pfs=True, phase_instructions=True, description="PF-only harness, no teacher"),
    "pf_teacher": Variant("pf_teacher", use_pfs=True, phase_instructions=True, use_teacher=True,
                          description="PFs + teacher (full inference-time harness)"),
    "teacher_only": Variant("teacher_only", use_pfs=False, use_teacher=True, teacher_postprocess=True,
                            description="no PFs; teacher post-processes the FINAL answer"),
}


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown agent variant {name!r}; choose from {sorted(VARIANTS)}") from None
