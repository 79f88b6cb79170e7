"""FINAL that only repeats the question's words → SEARCH an unused question query (MODIFY_ACTION).

Reads ctx keys: question, queries, step_count, max_steps, _final_redirects. Code handler.
"""

import re

from hasp.domains.search.pf_support import can_redirect_final, is_question, names, note_final_redirect, used_query
from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import content_tokens, keyword_query

_CHOICE = re.compile(r"\bor\b", re.I)
_YES_NO = re.compile(r"^\s*(yes|no)\b", re.I)


def echoes(question, answer):
    if _CHOICE.search(question) or _YES_NO.match(answer):
        return False
    toks = set(content_tokens(answer))
    if is_question(answer) and answer.strip().endswith("?"):
        return True
    return bool(toks) and toks <= set(content_tokens(question))


def unused_query(ctx):
    question = str(ctx.get("question", ""))
    for cand in [keyword_query(question), *names(question)]:
        if cand and not used_query(ctx, cand):
            return cand
    return None


@register_pf("question_echo")
class QuestionEchoPF(ProgramFunction):
    watches = ("FINAL",)
    max_fires = 1
    handler_kind = "code"

    def should_activate(self, ctx, action_type, arg):
        return (action_type == "FINAL" and can_redirect_final(ctx) and echoes(str(ctx.get("question", "")), arg)
                and unused_query(ctx) is not None)

    def intervene(self, ctx, action_type, arg, teacher=None):
        note_final_redirect(ctx)
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=unused_query(ctx), reason=f"answer {arg[:60]!r} repeats the question")

    def check_final(self, ctx, answer, teacher=None):
        return "the answer repeats the question" if echoes(str(ctx.get("question", "")), answer) else None
