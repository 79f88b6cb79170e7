"""Multi-hop question at the first SEARCH → fixed decomposition hint (INJECT_CONTEXT, prompt-equivalent).

Reads ctx keys: question, search_count.
"""

from hasp.domains.search.pf_support import is_multi_hop
from hasp.pf import register_pf
from hasp.pf.bases import HintPF


@register_pf("decompose_complex_question")
class DecomposeComplexQuestionPF(HintPF):
    watches = ("SEARCH",)
    max_fires = 1
    hint = ("[DECOMPOSITION HINT] This question has several hops. Find the first "
            "entity, READ its document, then search for the next entity.")
    why = "multi-hop question"

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "SEARCH" and ctx.get("search_count", 0) == 0
                and is_multi_hop(str(ctx.get("question", ""))))
