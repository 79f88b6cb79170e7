"""Non-ASCII-heavy read, or an accent-stripped answer → fixed spelling note (INJECT_CONTEXT,
prompt-equivalent).

Reads ctx keys: action_history, read_count, all_read_contents.
"""

import re
import unicodedata

from hasp.pf.search_support import just_read, last_read_text
from hasp.pf import register_pf
from hasp.pf.bases import HintPF

MIN_NON_ASCII = 20


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def non_ascii_letters(text):
    # the regex skips the ASCII bulk in C; only the few non-ASCII characters reach Python
    return sum(1 for ch in _NON_ASCII.findall(text) if ch.isalpha())


def fold(text):
    """Lower-case, accents removed (NFKD, combining marks dropped)."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch)).lower()


def stripped_accents(ctx, answer):
    """Is the answer a piece of the read text with its accents lost (found only after folding)?"""
    ans = " ".join(answer.split())
    if len(ans) < 3 or non_ascii_letters(ans):
        return False
    read = str(ctx.get("all_read_contents", ""))
    return fold(ans) in fold(read) and ans.lower() not in read.lower()


@register_pf("language_barrier")
class LanguageBarrierPF(HintPF):
    max_fires = 1
    hint = ("[LANGUAGE NOTE] The documents spell names with non-English letters or accents. "
            "Copy each name exactly as written there; do not translate or strip accents.")
    why = "non-ASCII names in the evidence"

    def should_activate(self, ctx, action_type, arg):
        if just_read(ctx) and non_ascii_letters(last_read_text(ctx)) >= MIN_NON_ASCII:
            return True
        return action_type == "FINAL" and stripped_accents(ctx, arg)
