"""≥3 denial/contrast cues in the last results → fixed distractor warning (INJECT_CONTEXT, prompt-equivalent).

Reads ctx keys: last_search_results_text.
"""

import re

from hasp.domains.search.pf_support import count_matches
from hasp.pf import register_pf
from hasp.pf.bases import HintPF

_CUES = re.compile(r"\b(not|never|no longer|contrary|however|although|disputed|incorrectly|mistakenly|"
                   r"falsely|should not be confused|unlike)\b", re.I)
MIN_CUES = 3


@register_pf("adversarial_distraction")
class AdversarialDistractionPF(HintPF):
    watches = ("READ", "FINAL")
    max_fires = 1
    hint = ("[DISTRACTOR NOTE] These results deny or contrast several claims. A value named in a "
            "'not' or 'contrary to' sentence is not the answer; use facts stated plainly about "
            "the exact entity.")
    why = "denial/contrast cues in results"

    def should_activate(self, ctx, action_type, arg):
        return (action_type in ("READ", "FINAL")
                and count_matches(_CUES, str(ctx.get("last_search_results_text", ""))) >= MIN_CUES)
