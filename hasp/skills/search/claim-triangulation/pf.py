"""Numeric/date FINAL resting on one read document → fixed second-source hint (INJECT_CONTEXT,
prompt-equivalent); LLM handler.

Reads ctx keys: read_count, last_search_hits, seen_hits, read_ids, step_count, max_steps,
all_read_contents, question.
"""

import re

from hasp.pf.search_support import steps_left, unread_hits
from hasp.pf import register_pf
from hasp.pf.bases import FinalHintPF

_DIGIT = re.compile(r"\d")


def single_source(ctx, answer):
    return (bool(_DIGIT.search(answer)) and int(ctx.get("read_count", 0)) == 1 and bool(unread_hits(ctx))
            and steps_left(ctx) >= 1)


@register_pf("claim_triangulation")
class ClaimTriangulationPF(FinalHintPF):
    hint = ("[VERIFICATION HINT] This specific number or date comes from a single document. "
            "If steps allow, READ one more relevant result to confirm it.")
    why = "numeric answer from one source"
    fires = staticmethod(single_source)
    ask = "Does this document clearly state this answer for the entity in the question?"

    def evidence(self, ctx, answer):
        return f"The only document read:\n{str(ctx.get('all_read_contents', ''))[:1200]}\n"
