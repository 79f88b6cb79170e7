"""FINAL before any SEARCH → SEARCH for the question's key words (MODIFY_ACTION); code handler.

Reads ctx keys: question, search_count, step_count, max_steps, _final_redirects.
"""

from hasp.domains.search.pf_bases import FinalRedirectPF
from hasp.pf import register_pf
from hasp.textutil import keyword_query


@register_pf("premature_final")
class PrematureFinalPF(FinalRedirectPF):
    max_fires = 2

    def problem(self, ctx, answer):
        return "answered without any search" if ctx.get("search_count", 0) == 0 else None

    def target(self, ctx, arg):
        return keyword_query(str(ctx.get("question", ""))) or arg
