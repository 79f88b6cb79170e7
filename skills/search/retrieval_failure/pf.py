"""SEARCH with more than 15 words → a short query (MODIFY_ACTION); teacher-assisted when available."""

import re

from hasp.pf import Intervention, InterventionType, ProgramFunction, register_pf
from hasp.textutil import keyword_query

_QUOTED = re.compile(r"\"([^\"]{3,80})\"")


@register_pf("retrieval_failure")
class RetrievalFailurePF(ProgramFunction):
    needs_teacher = True
    max_fires = 3
    max_words = 15

    def should_activate(self, ctx, action_type, arg):
        return action_type == "SEARCH" and len(arg.split()) > self.max_words

    def _shorten(self, arg, question):
        m = _QUOTED.search(arg)
        return m.group(1) if m else (keyword_query(arg) or keyword_query(question))

    def intervene(self, ctx, action_type, arg, teacher=None):
        if teacher is not None:
            try:
                clean = teacher.generate(
                    messages=[{"role": "user", "content":
                               f"Question: {ctx.get('question', '')}\nThis search query is too long:\n"
                               f"{arg[:500]}\nWrite a search query of at most 8 words for the same "
                               "information. Reply with the query only."}],
                    max_tokens=32, temperature=0.0).strip().strip("'\"")
                if 1 < len(clean.split()) <= 12:
                    return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                                        new_action_arg=clean, reason="teacher shortened long query")
            except Exception:  # noqa: BLE001 - the deterministic path is the documented fallback
                pass
        return Intervention(type=InterventionType.MODIFY_ACTION, new_action_type="SEARCH",
                            new_action_arg=self._shorten(arg, ctx.get("question", "")),
                            reason="shortened long query")
