"""SEARCH with no content word from question or evidence → a question-built query (MODIFY_ACTION).

Reads ctx keys: question, all_read_contents, last_search_results_text, queries.
"""

from hasp.domains.search.pf_support import names, used_query
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import content_tokens, keyword_query


def drifted(ctx, query):
    """No content word shared with the question or with what the tools returned."""
    toks = set(content_tokens(query))
    if not toks or not toks.isdisjoint(content_tokens(str(ctx.get("question", "")))):
        return False
    # read documents and results tokenised apart (each memoised) = the tokens of evidence_text(ctx)
    return (toks.isdisjoint(content_tokens(str(ctx.get("all_read_contents", ""))))
            and toks.isdisjoint(content_tokens(str(ctx.get("last_search_results_text", "")))))


def anchored_query(ctx):
    question = str(ctx.get("question", ""))
    for cand in [keyword_query(question), *names(question)]:
        if cand and not used_query(ctx, cand):
            return cand
    return None


@register_pf("query_drift")
class QueryDriftPF(ProgramFunction):
    watches = ("SEARCH",)
    max_fires = 2

    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH" and drifted(ctx, arg) and anchored_query(ctx) is not None

    def intervene(self, ctx, action_type, arg, teacher=None):
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=anchored_query(ctx), reason=f"query {arg[:60]!r} shares no word "
                                                                       "with question or evidence")
