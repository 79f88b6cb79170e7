"""FINAL with no READ but with search results → READ the best unread result (MODIFY_ACTION)."""

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("insufficient_exploration")
class InsufficientExplorationPF(ProgramFunction):
    max_fires = 2

    def _best_unread(self, ctx):
        read = set(ctx.get("read_ids", []))
        for hit in list(ctx.get("last_search_hits", [])) + list(ctx.get("seen_hits", [])):
            if hit.get("id") and hit["id"] not in read:
                return hit["id"]
        return None

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "FINAL" and not ctx.get("has_read")
                and ctx.get("search_count", 0) > 0 and self._best_unread(ctx) is not None)

    def intervene(self, ctx, action_type, arg, teacher=None):
        doc = self._best_unread(ctx)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ",
                            new_action_arg=doc, reason=f"FINAL without READ; reading {doc}")
