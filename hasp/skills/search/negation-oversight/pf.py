"""Ignored negation in the question, or answer only in negated sentences → fixed reminder
(INJECT_CONTEXT, prompt-equivalent); LLM handler.

Reads ctx keys: question, thought, all_read_contents.
"""

import re

from hasp.pf.search_support import sentences
from hasp.pf import register_pf
from hasp.pf.bases import FinalHintPF

_NEG = re.compile(r"\b(not|never|except|without|none|neither|nor|no)\b|n't\b", re.I)


def negated_answer_sentences(ctx, answer):
    """Read sentences with the answer, if every one of them is negated (else [])."""
    ans = " ".join(answer.split()).strip(" .\"'").lower()
    if len(ans) < 2:
        return []
    hits = [s for s in sentences(str(ctx.get("all_read_contents", ""))) if ans in s.lower()]
    return hits if hits and all(_NEG.search(s) for s in hits) else []


def overlooked(ctx, answer):
    question_neg = bool(_NEG.search(str(ctx.get("question", "")))) and not _NEG.search(str(ctx.get("thought", "")))
    return question_neg or bool(negated_answer_sentences(ctx, answer))


@register_pf("negation_oversight")
class NegationOversightPF(FinalHintPF):
    hint = ("[NEGATION REMINDER] A negation matters here: either the question says 'not'/'never'/"
            "'except', or your answer comes from a sentence that denies it. Re-read that "
            "sentence before answering.")
    why = "negation in question or evidence"
    fires = staticmethod(overlooked)

    def teacher_question(self, ctx, answer):
        evidence = " ".join(negated_answer_sentences(ctx, answer))[:600] or "(none)"
        return (f"Question: {ctx.get('question', '')}\nProposed answer: {answer[:200]}\n"
                f"Evidence sentences with the answer: {evidence}\n"
                "Does the answer respect every negation in the question and the evidence?")
