"""≥2 read documents with contradiction signals → fixed cross-check warning (INJECT_CONTEXT,
prompt-equivalent); LLM handler.

Reads ctx keys: read_count, contradictory_sources, all_read_contents, question.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import FinalHintPF

_CONTRADICTION = re.compile(r"\b(contrary to|disputed|should not be confused|incorrectly|mistakenly|"
                            r"other sources|some accounts|conflicting)\b", re.I)


def conflicting(ctx):
    return int(ctx.get("read_count", 0)) >= 2 and (
        bool(ctx.get("contradictory_sources")) or bool(_CONTRADICTION.search(str(ctx.get("all_read_contents", "")))))


@register_pf("misinformation_detector")
class MisinformationDetectorPF(FinalHintPF):
    hint = ("[CROSS-CHECK WARNING] The documents you read disagree or deny some claims. Decide "
            "which document is about the exact entity in the question, and answer from that one.")
    why = "contradiction signals in read documents"
    ask = ("The documents partly conflict. Does the answer follow from the document about the exact entity "
           "in the question?")

    def fires(self, ctx, answer):
        return conflicting(ctx)

    def evidence(self, ctx, answer):
        return f"Documents read:\n{str(ctx.get('all_read_contents', ''))[-1500:]}\n"
