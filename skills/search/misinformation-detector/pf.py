"""≥2 read documents with contradiction signals → fixed cross-check warning (INJECT_CONTEXT,
prompt-equivalent); LLM handler.

Reads ctx keys: read_count, contradictory_sources, all_read_contents, question.
"""

import re

from hasp.pf import register_pf
from hasp.pf.bases import HintPF
from hasp.pf.teacher_ask import teacher_objection

_CONTRADICTION = re.compile(r"\b(contrary to|disputed|should not be confused|incorrectly|mistakenly|"
                            r"other sources|some accounts|conflicting)\b", re.I)


def conflicting(ctx):
    return int(ctx.get("read_count", 0)) >= 2 and (
        bool(ctx.get("contradictory_sources")) or bool(_CONTRADICTION.search(str(ctx.get("all_read_contents", "")))))


@register_pf("misinformation_detector")
class MisinformationDetectorPF(HintPF):
    watches = ("FINAL",)
    max_fires = 1
    handler_kind = "llm"
    hint = ("[CROSS-CHECK WARNING] The documents you read disagree or deny some claims. Decide "
            "which document is about the exact entity in the question, and answer from that one.")
    why = "contradiction signals in read documents"

    def should_activate(self, ctx, action_type, arg):
        return action_type == "FINAL" and conflicting(ctx)

    def check_final(self, ctx, answer, teacher=None):
        if teacher is None or not conflicting(ctx):
            return None
        return teacher_objection(teacher, (
            f"Question: {ctx.get('question', '')}\nDocuments read:\n{str(ctx.get('all_read_contents', ''))[-1500:]}\n"
            f"Proposed answer: {answer[:200]}\nThe documents partly conflict. Does the answer follow from the "
            "document about the exact entity in the question?"), who=self.skill_id)
