"""Prompt-equivalent (App. B.5, Table 9): a weak question-text signal, no static check.

It only records that the reminder applied; the behaviour change comes from this skill's
SKILL.md text in the system prompt. ``intervene`` returns a NOOP audit record."""

import re

from hasp.pf import register_pf
from hasp.pf.bases import AuditOnlyPF

_SIGNAL = re.compile(r"\b(negative|integers?)\b", re.I)


@register_pf("code_negative_handling")
class CodeNegativeHandlingPF(AuditOnlyPF):
    why = "audit: question mentions negative numbers / integers"

    def fires(self, ctx, arg):
        return _SIGNAL.search(str(ctx.get("question", "")))
