"""Unproved pattern / formula used outside its preconditions → the sentence and the missing
condition (INJECT_CONTEXT)."""

import re

from hasp.domains.math.answers import parse_number
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

_PATTERN = re.compile(r"\b(pattern|it seems|seems to|appears to|presumably|conjecture|i guess|in general|"
                      r"this continues)\b", re.I)
_PROOF = re.compile(r"\b(prove|proof|proven|induction|inductive)\b", re.I)
_SMALL_CASE = re.compile(r"\bn\s*=\s*(\d{1,2})\b")
_BIG = re.compile(r"\b(\d{3,})\b")
_AMGM = re.compile(r"\bAM\s*[-–]?\s*GM\b", re.I)
_NONNEG = re.compile(r"positive|non-?negative|nonneg|\\geq?\s*0|≥\s*0|>\s*0", re.I)
_GEOM = re.compile(r"infinite geometric|geometric series|sum to infinity|a\s*/\s*\(\s*1\s*-\s*r\s*\)", re.I)
_RATIO = re.compile(r"\br\s*=\s*(-?\d+(?:\.\d+)?(?:/\d+)?)")
_VIETA = re.compile(r"\bvieta", re.I)
_COUNTING = re.compile(r"\b(how many|number of|ordered pairs|count)\b", re.I)
_TUPLE = re.compile(r"\(\s*(-?\d+(?:\s*,\s*-?\d+){1,5})\s*\)")
_SENTENCE = re.compile(r"[^.!?\n]+")


def _sentence_with(text, rx):
    for s in _SENTENCE.findall(text):
        if rx.search(s):
            s = " ".join(s.split())
            return s if len(s) <= 140 else s[:137] + "..."
    return ""


def permuted_pair(thought):
    """Two listed tuples that are reorderings of each other, e.g. ('(1,2,-3)', '(1,-3,2)'), else None."""
    seen = {}
    for t in _TUPLE.findall(thought.replace("−", "-")):
        vals = tuple(int(x) for x in t.split(","))
        key = tuple(sorted(vals))
        if key in seen and seen[key] != vals:
            show = lambda v: "(" + ",".join(map(str, v)) + ")"  # noqa: E731
            return show(seen[key]), show(vals)
        seen.setdefault(key, vals)
    return None


def findings(ctx, arg):
    thought = str(ctx.get("thought", ""))
    question = str(ctx.get("question", ""))
    out = []
    if _PATTERN.search(thought) and not _PROOF.search(thought):
        cases = sorted({int(n) for n in _SMALL_CASE.findall(thought)})
        big = [b for b in _BIG.findall(question) if int(b) > max(cases or [0]) + 10]
        msg = f"You relied on a pattern ('{_sentence_with(thought, _PATTERN)}')"
        if cases:
            msg += f" read from n = {', '.join(map(str, cases))}"
        if big:
            msg += f" and applied it to {big[0]}"
        out.append(msg + " without proving it; prove it or test more cases.")
    if _AMGM.search(thought) and not _NONNEG.search(question):
        out.append(f"You used AM-GM ('{_sentence_with(thought, _AMGM)}'), which needs non-negative terms, but "
                   f"the problem does not say the quantities are non-negative.")
    if _GEOM.search(thought):
        for m in _RATIO.finditer(thought):
            r = parse_number(m.group(1))
            if r is not None and abs(r) >= 1:
                out.append(f"You summed an infinite geometric series with r = {m.group(1)}, but it only "
                           f"converges for |r| < 1.")
                break
    if _VIETA.search(thought) and _COUNTING.search(question):
        pair = permuted_pair(thought)
        if pair:
            out.append(f"Vieta's formulas are symmetric in the roots: {pair[0]} and {pair[1]} are the same roots "
                       f"in another order and give the same coefficients, so count root multisets, not orderings.")
    return out


@register_pf("overgeneralization")
class OvergeneralizationPF(MathFindingsPF):
    scan = staticmethod(findings)
