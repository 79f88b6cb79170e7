"""FINAL before any SEARCH → SEARCH for the question's key words (MODIFY_ACTION); code handler.

Reads ctx keys: question, search_count, step_count, max_steps, _final_redirects.
"""

from hasp.domains.search.pf_support import can_redirect_final, note_final_redirect
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import keyword_query


@register_pf("premature_final")
class PrematureFinalPF(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 2
    handler_kind = "code"

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and ctx.get("search_count", 0) == 0 and can_redirect_final(ctx)

    def intervene(self, ctx, action_type, arg, teacher=None):
        note_final_redirect(ctx)
        query = keyword_query(str(ctx.get("question", ""))) or arg
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=query, reason="FINAL before any SEARCH")

    def check_final(self, ctx, answer, teacher=None):
        if ctx.get("search_count", 0) == 0:
            return "answered without any search"
        return None
