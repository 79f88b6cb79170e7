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


def _thought(ctx):
    return str(ctx.get("thought", "")).replace("−", "-")


def missing_case(ctx, arg):
    """Numbered cases with a gap (case 1, 2, 4)."""
    cases = sorted({int(n) for n in _CASE.findall(_thought(ctx))})
    missing = [n for n in range(cases[0], cases[-1] + 1) if n not in cases] if len(cases) >= 2 else []
    if not missing:
        return None
    return (f"You analysed cases {', '.join(map(str, cases))} but case "
            f"{', '.join(map(str, missing))} is missing.")


def repeated_outcome(ctx, arg):
    """A count that equals the number of listed results although some results repeat."""
    thought = _thought(ctx)
    ans = parse_number(clean_answer(arg))
    results = [_norm_tuple(t) for t in _ARROW_RESULT.findall(thought)]
    if not results:
        results = [_norm_tuple("(" + t + ")") for t in _TUPLE.findall(thought)]
    if not results or ans is None or ans != len(results):
        return None
    counts = Counter(results)
    if len(counts) == len(results):
        return None
    reps = [f"{t} appears {k} times" for t, k in counts.most_common() if k > 1][:3]
    return (f"Your count {len(results)} is the number of listed results, but only {len(counts)} are "
            f"distinct: {'; '.join(reps)}. Count distinct outcomes, not orderings.")


def unhandled_absolute_value(ctx, arg):
    """An absolute value in the problem whose negative branch the reasoning never treats."""
    question = str(ctx.get("question", ""))
    m = _ABS.search(_ARRAY_SPEC.sub(" ", question))
    if not m or _COMPLEX.search(question) or _NEG_BRANCH.search(_thought(ctx)):
        return None
    return (f"The problem contains an absolute value ({m.group(0)[:40]}) but your reasoning never treats "
            f"the case where its inside is negative.")


@register_pf("case_incompleteness")
class CaseIncompletenessPF(MathFindingsPF):
    checks = (missing_case, repeated_outcome, unhandled_absolute_value)
