"""Gaps or double counting in a case analysis → what is missing or repeated (INJECT_CONTEXT)."""

import re
from collections import Counter

from hasp.domains.math.answers import clean_answer, parse_number
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

_CASE = re.compile(r"\bcase\s*(\d+)\b", re.I)
_TUPLE = re.compile(r"\(\s*(-?\d+(?:\s*,\s*-?\d+)+)\s*\)")
_ARROW_RESULT = re.compile(r"(?:->|→|=>|⇒|gives)[^\n]*?(\(\s*-?\d+(?:\s*,\s*-?\d+)+\s*\))")
_ABS = re.compile(r"\|[^|$]*\b[a-y]\b[^|$]*\||absolute value", re.I)
_ARRAY_SPEC = re.compile(r"\{[|clr ]+\}")  # {|c|c|c|} column specs are not absolute values
_COMPLEX = re.compile(r"complex|\bmodulus\b", re.I)
_NEG_BRANCH = re.compile(r"negative|<\s*0|\\lt\s*0|≤\s*0|\\le\s*0|<=\s*0|-\s*\(|both signs|±|\\pm", re.I)


def _norm_tuple(t):
    return "(" + ",".join(x.strip() for x in t.strip("() ").split(",")) + ")"


def findings(ctx, arg):
    thought = str(ctx.get("thought", "")).replace("−", "-")
    question = str(ctx.get("question", ""))
    out = []
    cases = sorted({int(n) for n in _CASE.findall(thought)})
    if len(cases) >= 2:
        missing = [n for n in range(cases[0], cases[-1] + 1) if n not in cases]
        if missing:
            out.append(f"You analysed cases {', '.join(map(str, cases))} but case "
                       f"{', '.join(map(str, missing))} is missing.")
    ans = parse_number(clean_answer(arg))
    results = [_norm_tuple(t) for t in _ARROW_RESULT.findall(thought)]
    if not results:
        results = [_norm_tuple("(" + t + ")") for t in _TUPLE.findall(thought)]
    if results and ans is not None and ans == len(results):
        counts = Counter(results)
        if len(counts) < len(results):
            reps = [f"{t} appears {k} times" for t, k in counts.most_common() if k > 1][:3]
            out.append(f"Your count {len(results)} is the number of listed results, but only {len(counts)} are "
                       f"distinct: {'; '.join(reps)}. Count distinct outcomes, not orderings.")
    m = _ABS.search(_ARRAY_SPEC.sub(" ", question))
    if m and not _COMPLEX.search(question) and not _NEG_BRANCH.search(thought):
        out.append(f"The problem contains an absolute value ({m.group(0)[:40]}) but your reasoning never treats "
                   f"the case where its inside is negative.")
    return out


@register_pf("case_incompleteness")
class CaseIncompletenessPF(MathFindingsPF):
    scan = staticmethod(findings)
