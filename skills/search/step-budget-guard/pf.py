"""SEARCH with ≤1 step left and nothing read → READ the best unread result (MODIFY_ACTION).

Reads ctx keys: step_count, max_steps, read_count, last_search_hits, seen_hits, read_ids.
"""

from hasp.domains.search.pf_support import steps_left, unread_hits
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


@register_pf("step_budget_guard")
class StepBudgetGuardPF(ProgramFunction):
    watches = ("SEARCH",)
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "SEARCH" and steps_left(ctx) <= 1 and int(ctx.get("read_count", 0)) == 0
                and bool(unread_hits(ctx)))

    def intervene(self, ctx, action_type, arg, teacher=None):
        doc = unread_hits(ctx)[0]
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="READ", new_action_arg=doc,
                            reason=f"{steps_left(ctx)} step(s) left and nothing read; reading {doc}")
