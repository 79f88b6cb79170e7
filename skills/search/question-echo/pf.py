"""FINAL that only repeats the question's words → SEARCH an unused question query (MODIFY_ACTION).

Reads ctx keys: question, queries, step_count, max_steps, _final_redirects. Code handler.
"""

import re

from hasp.domains.search.pf_bases import FinalRedirectPF
from hasp.domains.search.pf_support import is_question, names, used_query
from hasp.pf import register_pf
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
class QuestionEchoPF(FinalRedirectPF):
    def problem(self, ctx, answer):
        return "the answer repeats the question" if echoes(str(ctx.get("question", "")), answer) else None

    def target(self, ctx, arg):
        return unused_query(ctx)
