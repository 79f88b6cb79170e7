"""SEARCH nearly identical (token Jaccard > 0.5) to a recent query → fixed reminder (INJECT_CONTEXT,
prompt-equivalent).

Reads ctx keys: queries.
"""

from hasp.pf import register_pf
from hasp.pf.bases import HintPF
from hasp.textutil import jaccard

MIN_SIMILARITY = 0.5


@register_pf("iterative_refinement")
class IterativeRefinementPF(HintPF):
    watches = ("SEARCH",)
    max_fires = 3
    hint = ("[SEARCH REFINEMENT] This search is almost the same as an earlier one. "
            "Search for a different entity from the question, or READ a result.")
    why = "near-duplicate query"

    def should_activate(self, ctx, action_type, arg):
        if action_type != "SEARCH":
            return False
        return any(jaccard(arg, str(q)) > MIN_SIMILARITY for q in (ctx.get("queries") or [])[-3:])
