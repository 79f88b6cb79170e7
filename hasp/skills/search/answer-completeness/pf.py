"""One-item FINAL to a multi-part question → fixed completeness warning (INJECT_CONTEXT,
prompt-equivalent); LLM handler.

Reads ctx keys: question.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import FinalHintPF

_MULTI = re.compile(r"\b(both|two|three|each of|and (what|which|who|when|where|how))\b", re.I)
_LIST = re.compile(r",|/|;|\band\b|&", re.I)


def partial(question, answer):
    return bool(_MULTI.search(question)) and bool(answer.strip()) and not _LIST.search(answer)


@register_pf("answer_completeness")
class AnswerCompletenessPF(FinalHintPF):
    hint = ("[COMPLETENESS WARNING] The question asks for more than one thing, and your answer "
            "names only one. Give every requested part in FINAL.")
    why = "one-item answer to multi-part question"
    ask = "Does the answer give every item the question asks for?"

    def fires(self, ctx, answer):
        return partial(str(ctx.get("question", "")), answer)
