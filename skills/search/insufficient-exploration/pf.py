"""FINAL with search results but no READ → READ the best unread result (MODIFY_ACTION); code handler.

Reads ctx keys: has_read, search_count, last_search_hits, seen_hits, read_ids, step_count,
max_steps, _final_redirects.
"""

from hasp.domains.search.pf_support import can_redirect_final, note_final_redirect, unread_hits
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("insufficient_exploration")
class InsufficientExplorationPF(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 2
    handler_kind = "code"

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "FINAL" and not ctx.get("has_read") and ctx.get("search_count", 0) > 0
                and bool(unread_hits(ctx)) and can_redirect_final(ctx))

    def intervene(self, ctx, action_type, arg, teacher=None):
        note_final_redirect(ctx)
        doc = unread_hits(ctx)[0]
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ",
                            new_action_arg=doc, reason=f"FINAL without READ; reading {doc}")

    def check_final(self, ctx, answer, teacher=None):
        if ctx.get("search_count", 0) > 0 and not ctx.get("has_read") and unread_hits(ctx):
            return "answered from result snippets without reading a document"
        return None
