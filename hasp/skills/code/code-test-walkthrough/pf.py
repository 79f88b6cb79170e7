"""Prompt-equivalent (App. B.5, Table 9): fires on competitive-programming-style code
(``class Solution`` or stdin handling), no static check.

It only records that the reminder applied; the behaviour change comes from this skill's
SKILL.md text in the system prompt. ``intervene`` returns a NOOP audit record."""

from hasp.domains.code.task import code_view
from hasp.pf import register_pf
from hasp.pf.bases import AuditOnlyPF


def contest_style(ctx, arg):
    code = code_view(arg).code
    return "class Solution" in code or "stdin" in code


@register_pf("code_test_walkthrough")
class CodeTestWalkthroughPF(AuditOnlyPF):
    why = "audit: class Solution / stdin style code"
    fires = staticmethod(contest_style)
