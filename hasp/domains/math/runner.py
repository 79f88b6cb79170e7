"""Math episodes through the shared single-step runner (``hasp.agent.single_step``).

The domain supplies four functions — ``build_messages``, ``split_output`` (extract), ``math_ctx``
(the ``pre_final`` PF context) and ``score`` (exact equivalence / the exact 24-game verifier) —
and everything else (dispatcher, audit events, revision turn, trajectories) is shared with code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hasp.agent.loop import AgentConfig, Policy
from hasp.records import Trajectory
from hasp.agent.single_step import evaluate_variants, library_info, run_single_step, skills_prompt
from hasp.agent.variants import Variant, get_variant
from hasp.domains.math.datasets import MathItem
from hasp.domains.math.task import build_messages, math_ctx, score, split_output_for
from hasp.pf.base import Teacher
from hasp.pf.library import SkillLibrary, load_library

DOMAIN = "math"
FORMAT_HINT = "end with exactly one line FINAL[answer]"


def episode_fn(policy: Policy, library: SkillLibrary | None, cfg: AgentConfig, variant: Variant | str, *,
               teacher: Teacher | None = None, revise: bool = True, label: str | None = None,
               score_steps: bool = True) -> Callable[[MathItem], Trajectory]:
    """``item -> Trajectory`` for one variant: ``react`` (no PFs, no skills), ``prompt`` (skill
    summaries in the system prompt), ``pf`` (the library's PFs on the FINAL answer)."""
    v = get_variant(variant) if isinstance(variant, str) else variant
    pfs = library.pfs() if (library is not None and v.use_pfs) else []
    skills_text = skills_prompt(library) if (library is not None and v.skills_in_prompt) else ""

    def run(item: MathItem) -> Trajectory:
        fmt = {"last": "final"}  # how the current step's answer was found; read by the ctx builder

        def extract(text: str) -> tuple[str, str | None]:
            thought, answer, fmt["last"] = split_output_for(item, text)
            return thought, answer

        return run_single_step(
            qid=item.id, question=item.problem, answers=item.answers,
            messages=build_messages(item, skills_text), policy=policy, pfs=pfs, variant=v, cfg=cfg,
            extract=extract, scorer=lambda answer: score(item, answer),
            ctx_builder=lambda thought, answer: math_ctx(item, thought, answer_format=fmt["last"]),
            teacher=teacher, revise=revise, label=label, format_hint=FORMAT_HINT, score_steps=score_steps)

    return run


def evaluate_domain(domain: str, items: Sequence[MathItem], variants: Sequence[str], policy: Policy,
                    library_root: Path | None, out_dir: Path, concurrency: int = 8, *,
                    cfg: AgentConfig | None = None, teacher: Teacher | None = None, revise: bool = True,
                    progress: bool = True) -> dict[str, dict[str, Any]]:
    """Every variant over ``items``: ``out_dir/<variant>.jsonl`` + ``metrics.json``; returns
    ``{variant: summary}`` (``accuracy`` = ``em``)."""
    cfg = cfg or AgentConfig(max_steps=1, max_tokens=256)
    lib = load_library(Path(library_root), domain or DOMAIN) if library_root is not None else None
    try:
        res = evaluate_variants(
            items, variants,
            lambda v: episode_fn(policy, lib, cfg, v, teacher=teacher, revise=revise),
            Path(out_dir), concurrency=concurrency, progress=progress, desc=domain or DOMAIN,
            extra_metrics=lambda s: library_info(lib))
        return res
    finally:
        if lib is not None:
            lib.close()
