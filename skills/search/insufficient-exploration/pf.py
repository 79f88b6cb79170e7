"""FINAL with search results but no READ → READ the best unread result (MODIFY_ACTION); code handler.

Reads ctx keys: has_read, search_count, last_search_hits, seen_hits, read_ids, step_count,
max_steps, _final_redirects.
"""

from hasp.domains.search.pf_bases import FinalRedirectPF
from hasp.domains.search.pf_support import unread_hits
from hasp.pf import register_pf


@register_pf("insufficient_exploration")
class InsufficientExplorationPF(FinalRedirectPF):
    redirect, max_fires = "READ", 2

    def problem(self, ctx, answer):
        if ctx.get("search_count", 0) > 0 and not ctx.get("has_read") and unread_hits(ctx):
            return "answered from result snippets without reading a document"
        return None

    def target(self, ctx, arg):
        return next(iter(unread_hits(ctx)), None)
