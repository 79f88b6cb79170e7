"""Multi-hop FINAL naming an unsearched entity from too few reads → SEARCH that entity (MODIFY_ACTION).

Reads ctx keys: question, read_count, all_read_contents, queries, step_count, max_steps,
_final_redirects. Code handler with the same test.
"""

from hasp.domains.search.pf_bases import FinalRedirectPF
from hasp.pf.search_support import hop_count, is_multi_hop, names
from hasp.pf import register_pf


def bridge_answer(ctx, answer):
    """The read-document name the answer equals, if the answer looks like an intermediate entity."""
    question = str(ctx.get("question", ""))
    ans = " ".join(answer.split()).strip(" .\"'")
    if not ans or not is_multi_hop(question) or int(ctx.get("read_count", 0)) >= hop_count(question):
        return None
    if ans.lower() in question.lower():
        return None
    searched = " ".join(str(q) for q in ctx.get("queries") or []).lower()
    for name in names(str(ctx.get("all_read_contents", ""))):
        if name.lower() == ans.lower() and name.lower() not in searched:
            return name
    return None


@register_pf("multi_hop_reasoning_failure")
class MultiHopReasoningFailurePF(FinalRedirectPF):
    # the intermediate entity the answer names is both what is wrong and what to search next
    problem = target = staticmethod(bridge_answer)

    def objection(self, bridge):
        return f"'{bridge}' looks like an intermediate entity of a multi-hop question"

    def why(self, ctx, arg):
        return f"'{bridge_answer(ctx, arg)}' is an intermediate entity after {ctx.get('read_count', 0)} read(s)"
