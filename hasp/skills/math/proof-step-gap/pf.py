"""No derivation, or a step asserted with "clearly"/"obviously" → ask to justify that step,
quoted (INJECT_CONTEXT)."""

import re

from hasp.domains.math.answers import clean_answer
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

_HAND_WAVE = re.compile(r"\b(clearly|obviously|it is (?:easy|clear|obvious) (?:to see )?that|trivially|evidently|"
                        r"it is well[- ]known|by inspection|it is easy to see)\b", re.I)
_MATHY = re.compile(r"\d|=|[+\-*/^]")
_SENTENCE = re.compile(r"[^.!?\n]+")
MIN_WORDS = 12
LONG_PROBLEM_CHARS = 150


def findings(ctx, arg):
    thought = str(ctx.get("thought", ""))
    question = str(ctx.get("question", ""))
    out = []
    words = thought.split()
    if len(question) >= LONG_PROBLEM_CHARS and (len(words) < MIN_WORDS or not _MATHY.search(thought)):
        out.append(f"FINAL[{clean_answer(arg)}] comes with {'no' if not words else 'only a ' + str(len(words)) + '-word'} "
                   f"derivation for a {len(question.split())}-word problem; write the steps that lead to it.")
    quoted = []
    for s in _SENTENCE.findall(thought):
        if _HAND_WAVE.search(s):
            s = " ".join(s.split())
            quoted.append(s if len(s) <= 120 else s[:117] + "...")
    if quoted:
        out.append("Justify these asserted steps: " + "; ".join(f"'{q}'" for q in quoted[:2]) + ".")
    return out


@register_pf("proof_step_gap")
class ProofStepGapPF(MathFindingsPF):
    max_fires = 1
    scan = staticmethod(findings)
