"""Prompt-equivalent (App. B.5, Table 9): a weak question-text signal, no static check.

It only records that the reminder applied; the behaviour change comes from this skill's
SKILL.md text in the system prompt. ``intervene`` returns a NOOP audit record."""

import re

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_SIGNAL = re.compile(r"\b(negative|integers?)\b", re.I)


@register_pf("code_negative_handling")
class CodeNegativeHandlingPF(ProgramFunction):
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and bool(_SIGNAL.search(str(ctx.get("question", ""))))

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.NOOP,
                            reason="audit: question mentions negative numbers / integers")
