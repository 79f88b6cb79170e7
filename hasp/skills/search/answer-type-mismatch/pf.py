"""FINAL whose shape does not fit the asked type (year / number / person) → warning naming both
(dynamic INJECT_CONTEXT); code handler.

Reads ctx keys: question.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import FinalCheckPF

_ASKS_YEAR = re.compile(r"\b(what|which) year\b|^\s*(in )?when\b|\bwhat date\b", re.I)
_ASKS_NUMBER = re.compile(r"\bhow (many|much|old|long|far)\b", re.I)
_ASKS_PERSON = re.compile(r"^\s*(who|whom)\b", re.I)
_YEAR = re.compile(r"\b\d{3,4}\b")
_NUMBER = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|hundred|thousand)\b",
                     re.I)
_ONLY_DIGITS = re.compile(r"^[\d\s.,/-]+$")


def expected_kind(question):
    if _ASKS_YEAR.search(question):
        return "a year"
    if _ASKS_NUMBER.search(question):
        return "a number"
    if _ASKS_PERSON.search(question):
        return "a name"
    return None


def mismatch(question, answer):
    """The expected kind when the answer does not have its shape, else None."""
    kind = expected_kind(question)
    ans = answer.strip()
    if not kind or not ans:
        return None
    if kind == "a year" and not _YEAR.search(ans):
        return kind
    if kind == "a number" and not _NUMBER.search(ans):
        return kind
    if kind == "a name" and _ONLY_DIGITS.match(ans):
        return kind
    return None


@register_pf("answer_type_mismatch")
class AnswerTypeMismatchPF(FinalCheckPF):
    def problem(self, ctx, answer):
        return mismatch(str(ctx.get("question", "")), answer)

    def objection(self, kind):
        return f"the question asks for {kind}"

    def warning(self, ctx, arg, kind):
        return (f"[ANSWER TYPE] The question asks for {kind}, but '{arg[:60]}' is not {kind}. "
                f"Find {kind} in the documents.")

    def reason(self, kind):
        return f"expected {kind}"
