"""One-item FINAL to a multi-part question → fixed completeness warning (INJECT_CONTEXT,
prompt-equivalent); LLM handler.

Reads ctx keys: question.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import HintPF
from hasp.pf.teacher_ask import teacher_objection

_MULTI = re.compile(r"\b(both|two|three|each of|and (what|which|who|when|where|how))\b", re.I)
_LIST = re.compile(r",|/|;|\band\b|&", re.I)


def partial(question, answer):
    return bool(_MULTI.search(question)) and bool(answer.strip()) and not _LIST.search(answer)


@register_pf("answer_completeness")
class AnswerCompletenessPF(HintPF):
    watches = ("FINAL",)
    max_fires = 1
    handler_kind = "llm"
    hint = ("[COMPLETENESS WARNING] The question asks for more than one thing, and your answer "
            "names only one. Give every requested part in FINAL.")
    why = "one-item answer to multi-part question"

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and partial(str(ctx.get("question", "")), arg)

    def check_final(self, ctx, answer, teacher=None):
        question = str(ctx.get("question", ""))
        if teacher is None or not partial(question, answer):
            return None
        return teacher_objection(teacher, (
            f"Question: {question}\nProposed answer: {answer[:200]}\n"
            "Does the answer give every item the question asks for?"), who=self.skill_id)
