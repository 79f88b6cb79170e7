"""FINAL whose words are <30% present in the evidence → SEARCH the question (MODIFY_ACTION); code handler.

Reads ctx keys: question, search_count, all_read_contents, last_search_results_text, queries,
step_count, max_steps, _final_redirects.
"""

import re

from hasp.domains.search.pf_bases import FinalRedirectPF
from hasp.pf.search_support import evidence_text, grounded_fraction, names, used_query
from hasp.pf import register_pf
from hasp.textutil import content_tokens, keyword_query

HEDGE = re.compile(r"\b(unknown|not sure|unsure|don'?t know|cannot|can'?t|no information|not found|"
                   r"unclear|none|n/?a|maybe|probably|possibly|guess)\b", re.I)
MIN_GROUNDED = 0.3


def ungrounded(ctx, answer):
    return (ctx.get("search_count", 0) > 0 and bool(content_tokens(answer)) and not HEDGE.search(answer)
            and grounded_fraction(answer, evidence_text(ctx)) < MIN_GROUNDED)


def fresh_query(ctx):
    """A query not run yet: the question's key words, else one of its names."""
    question = str(ctx.get("question", ""))
    for cand in [keyword_query(question), *names(question)]:
        if cand and not used_query(ctx, cand):
            return cand
    return None


@register_pf("reasoning_hallucination")
class ReasoningHallucinationPF(FinalRedirectPF):
    def problem(self, ctx, answer):
        return "the answer does not appear in the retrieved text" if ungrounded(ctx, answer) else None

    def target(self, ctx, arg):
        return fresh_query(ctx)
