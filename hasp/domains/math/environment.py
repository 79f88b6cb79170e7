"""The math item as a single-step environment of the agent loop (``hasp.agent.single_step``).

The domain supplies four functions — ``build_messages``, ``split_output_for`` (extract), ``math_ctx``
(the ``pre_final`` PF context) and ``score`` (exact equivalence / the exact 24-game verifier) — and the
reply grammar; the loop, the harness, audit events and the revision turn are the ones search and code use.
"""

from __future__ import annotations

from hasp.agent.single_step import SingleStepEnvironment
from hasp.domains.math.datasets import MathItem
from hasp.domains.math.task import answer_grammar, build_messages, math_ctx, score, split_output_for

FORMAT_HINT = "end with exactly one line FINAL[answer]"


def environment(item: MathItem, max_tokens: int) -> SingleStepEnvironment:
    """One math episode's environment; ``max_tokens`` bounds the reasoning the reply grammar admits."""
    fmt = {"last": "final"}  # how the current step's answer was found; read by the ctx builder

    def extract(text: str) -> tuple[str, str | None]:
        thought, answer, fmt["last"] = split_output_for(item, text)
        return thought, answer

    return SingleStepEnvironment(
        messages=lambda system_text: build_messages(item, system_text), extract=extract,
        scorer=lambda answer: score(item, answer),
        ctx_builder=lambda thought, answer: math_ctx(item, thought, answer_format=fmt["last"]),
        grammar=answer_grammar(max_tokens), format_hint=FORMAT_HINT)
