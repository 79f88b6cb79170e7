"""Single-token FINAL to a multi-part question → fixed warning (INJECT_CONTEXT)."""

import re

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_MULTI = re.compile(r"\b(both|two|three|and (what|which|who|when|where))\b", re.I)


@register_pf("answer_completeness")
class AnswerCompletenessPF(ProgramFunction):
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "FINAL" and len(arg.split()) <= 1
                and bool(_MULTI.search(ctx.get("question", ""))))

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(
            type=InterventionType.INJECT_CONTEXT,
            context_text="[COMPLETENESS WARNING] The question has several parts; your answer may "
                         "cover only one of them.",
            reason="single-token answer to multi-part question")
