"""FINAL with a year absent from the read documents → warning naming it and the documents'
years (dynamic INJECT_CONTEXT); code handler.

Reads ctx keys: has_read, all_read_contents.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import FinalCheckPF

_YEAR = re.compile(r"\b(1\d{3}|20\d{2}|[1-9]\d{2})\b")


def unsupported_years(ctx, answer):
    if not ctx.get("has_read"):
        return []
    known = set(_YEAR.findall(str(ctx.get("all_read_contents", ""))))
    return sorted({y for y in _YEAR.findall(answer) if y not in known})


def document_years(ctx, limit=5):
    seen = []
    for y in _YEAR.findall(str(ctx.get("all_read_contents", ""))):
        if y not in seen:
            seen.append(y)
    return seen[:limit]


@register_pf("temporal_confusion")
class TemporalConfusionPF(FinalCheckPF):
    def problem(self, ctx, answer):
        return unsupported_years(ctx, answer) or None

    def objection(self, bad):
        return f"year {', '.join(bad)} is not in the read documents"

    def warning(self, ctx, arg, bad):
        given = ", ".join(document_years(ctx)) or "none"
        return (f"[DATE CHECK] {', '.join(bad or ())} does not occur in any document you read (their years: {given}). "
                "Take the year from the sentence about the event the question asks for.")

    def reason(self, bad):
        return f"unsupported year(s) {', '.join(bad or ())}"
