"""Prompt-equivalent (App. B.5, Table 9): fires on competitive-programming-style code
(``class Solution`` or stdin handling), no static check.

It only records that the reminder applied; the behaviour change comes from this skill's
SKILL.md text in the system prompt. ``intervene`` returns a NOOP audit record."""

from hasp.domains.code.task import code_view
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("code_test_walkthrough")
class CodeTestWalkthroughPF(ProgramFunction):
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        if action_type != "FINAL":
            return False
        code = code_view(arg).code
        return "class Solution" in code or "stdin" in code

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.NOOP,
                            reason="audit: class Solution / stdin style code")
