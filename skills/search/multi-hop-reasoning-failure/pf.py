"""Multi-hop FINAL naming an unsearched entity from too few reads → SEARCH that entity (MODIFY_ACTION).

Reads ctx keys: question, read_count, all_read_contents, queries, step_count, max_steps,
_final_redirects. Code handler with the same test.
"""

from hasp.domains.search.pf_support import (can_redirect_final, hop_count, is_multi_hop, names,
                                            note_final_redirect)
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf


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
class MultiHopReasoningFailurePF(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 1
    handler_kind = "code"

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and can_redirect_final(ctx) and bridge_answer(ctx, arg) is not None

    def intervene(self, ctx, action_type, arg, teacher=None):
        note_final_redirect(ctx)
        bridge = bridge_answer(ctx, arg)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH", new_action_arg=bridge,
                            reason=f"'{bridge}' is an intermediate entity after {ctx.get('read_count', 0)} read(s)")

    def check_final(self, ctx, answer, teacher=None):
        bridge = bridge_answer(ctx, answer)
        return f"'{bridge}' looks like an intermediate entity of a multi-hop question" if bridge else None
