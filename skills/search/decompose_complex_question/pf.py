"""Multi-hop question at the first SEARCH → fixed decomposition hint (INJECT_CONTEXT)."""

import re

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf

_OF_THE = re.compile(r"\bof (the|a|an)\b", re.I)
_POSSESSIVE = re.compile(r"\w's\b")
_RELATIVE = re.compile(r"\b(who|which|that|whose)\b.*\b(who|which|that|whose)\b", re.I)


def is_multi_hop(question):
    return (len(_OF_THE.findall(question)) + len(_POSSESSIVE.findall(question)) >= 2
            or bool(_RELATIVE.search(question)))


@register_pf("decompose_complex_question")
class DecomposeComplexQuestionPF(ProgramFunction):
    max_fires = 1

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "SEARCH" and ctx.get("search_count", 0) == 0
                and is_multi_hop(ctx.get("question", "")))

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(
            type=InterventionType.INJECT_CONTEXT,
            context_text="[DECOMPOSITION HINT] This question has several hops. Find the first "
                         "entity, READ its document, then search for the next entity.",
            reason="multi-hop question")
