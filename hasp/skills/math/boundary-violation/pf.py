"""Numeric FINAL outside the range the problem implies → the bound and the phrase implying it
(INJECT_CONTEXT)."""

import re

from hasp.domains.math.answers import UNIT_WORDS, clean_answer, format_number, parse_number
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

_REMAINDER = re.compile(r"remainder when .{1,200}? (?:is )?divided by \$?\s*(\d+)", re.I | re.S)
_COUNT = re.compile(r"\b(how many|number of)\s+(\w+)", re.I)
_PROB = re.compile(r"\bprobability\b", re.I)
_M_PLUS_N = re.compile(r"\$?\s*[mnpq]\s*\+\s*[mnpq]\s*\$?")
_SMALLEST_POS = re.compile(r"\b(smallest|least|largest|greatest|minimum|maximum)\s+(possible\s+)?positive\s+"
                           r"(integer|value|number|real)", re.I)
_ACUTE = re.compile(r"\bacute angle\b", re.I)
_DIGIT = re.compile(r"\b(which|what) digit\b", re.I)
_UNITS = {u.split()[-1].lower() for u in UNIT_WORDS}


def violation(ctx, arg):
    """(bound description, quoted trigger) for the first broken bound, else None."""
    v = parse_number(clean_answer(arg))
    if v is None:
        return None
    q = str(ctx.get("question", ""))
    shown = format_number(v)
    is_int = v.denominator == 1
    m = _REMAINDER.search(q)
    if m:
        n = int(m.group(1))
        if not is_int or not 0 <= v < n:
            return (f"a remainder on division by {n} must be an integer from 0 to {n - 1}"
                    + (f"; reduce {shown} mod {n}" if is_int else ""), m.group(0)[-60:])
    if "aime" in str(ctx.get("source", "")).lower() and (not is_int or not 0 <= v <= 999):
        return "an AIME answer is an integer from 0 to 999", "AIME"
    for m in _COUNT.finditer(q):
        if m.group(2).lower() in _UNITS:
            if v < 0:
                return f"a quantity of {m.group(2)} cannot be negative", m.group(0)
            continue
        if not is_int or v < 0:
            return "a count must be a non-negative integer", m.group(0)
    if _PROB.search(q) and not _M_PLUS_N.search(q) and not 0 <= v <= 1:
        return "a probability must lie between 0 and 1", "probability"
    m = _SMALLEST_POS.search(q)
    if m and (v <= 0 or (m.group(3).lower() == "integer" and not is_int)):
        return f"the question asks for a positive {m.group(3).lower()}", m.group(0)
    if _ACUTE.search(q) and not 0 < v < 90:
        return "an acute angle is strictly between 0 and 90 degrees", "acute angle"
    m = _DIGIT.search(q)
    if m and (not is_int or not 0 <= v <= 9):
        return "a digit is an integer from 0 to 9", m.group(0)
    return None


@register_pf("boundary_violation")
class BoundaryViolationPF(MathFindingsPF):
    check = staticmethod(violation)

    def render(self, ctx, arg, found):
        bound, trigger = found[0]
        return (f"[RANGE CHECK] FINAL[{clean_answer(arg)}] is out of range: {bound} "
                f"(the problem says \"{trigger.strip()}\"). Find the step that left the allowed range.")

    def reason(self, ctx, arg, found):
        return f"{clean_answer(arg)} violates: {found[0][0]}"
