"""The step after a READ of a dense document (≥8 numbers or ≥12 names) → fixed careful-reading
reminder (INJECT_CONTEXT, prompt-equivalent).

Reads ctx keys: action_history, read_count, all_read_contents.
"""

import re

from hasp.domains.search.pf_support import count_matches, just_read, last_read_text, names
from hasp.pf import register_pf
from hasp.pf.bases import HintPF

_NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\b")
MIN_NUMBERS = 8
MIN_NAMES = 12


def dense(text):
    return count_matches(_NUMBER, text) >= MIN_NUMBERS or len(names(text)) >= MIN_NAMES


@register_pf("reading_comprehension_error")
class ReadingComprehensionErrorPF(HintPF):
    max_fires = 2
    hint = ("[READ CAREFULLY] The document you read lists many names and numbers. Locate the one "
            "sentence about the entity and relation the question asks for, and extract only that.")
    why = "dense document read"

    def should_activate(self, ctx, action_type, arg):
        return just_read(ctx) and dense(last_read_text(ctx))
