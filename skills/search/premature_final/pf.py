"""FINAL before any SEARCH → SEARCH for the question's key words (MODIFY_ACTION)."""

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import keyword_query


@register_pf("premature_final")
class PrematureFinalPF(ProgramFunction):
    max_fires = 2

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and ctx.get("search_count", 0) == 0

    def intervene(self, ctx, action_type, arg, teacher=None):
        query = keyword_query(ctx.get("question", "")) or arg
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=query, reason="FINAL before any SEARCH")
