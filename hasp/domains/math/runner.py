"""Math episodes through the shared single-step runner (``hasp.agent.single_step``); ``hasp eval
--domain math`` runs them.

The domain supplies four functions — ``build_messages``, ``split_output`` (extract), ``math_ctx``
(the ``pre_final`` PF context) and ``score`` (exact equivalence / the exact 24-game verifier) —
and everything else (dispatcher, audit events, revision turn, trajectories) is shared with code.
"""

from __future__ import annotations

from collections.abc import Callable

from hasp.agent.loop import AgentConfig, Policy
from hasp.records import Trajectory
from hasp.agent.single_step import run_single_step, skills_prompt
from hasp.agent.variants import Variant, get_variant
from hasp.domains.math.datasets import MathItem
from hasp.domains.math.task import answer_grammar, build_messages, math_ctx, score, split_output_for
from hasp.pf.base import Teacher
from hasp.pf.library import SkillLibrary

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
            teacher=teacher, revise=revise, label=label, format_hint=FORMAT_HINT, score_steps=score_steps,
            grammar=answer_grammar(cfg.max_tokens))

    return run

