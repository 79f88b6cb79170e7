"""Sign-only mistakes in the reasoning or the answer → the exact step, corrected (INJECT_CONTEXT)."""

import re

from hasp.domains.math.answers import arithmetic_claims, clean_answer, extract_final_answer, parse_number
from hasp.domains.math.game24 import TARGET, verify_expression
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.domains.math.task import game24_numbers
from hasp.pf import register_pf

# -(A + B) = -A + B  or  -(A - B) = -A - B : the inner sign was not flipped
_UNFLIPPED = re.compile(
    r"-\s*\(\s*([A-Za-z0-9^]+)\s*([+-])\s*([A-Za-z0-9^]+)\s*\)\s*=\s*-\s*\1\s*\2\s*\3(?![A-Za-z0-9^])")


def _flip(sign):
    return "-" if sign == "+" else "+"


def findings(ctx, arg, limit=3):
    out = []
    thought = str(ctx.get("thought", "")).replace("−", "-").replace("–", "-")
    nums = game24_numbers(ctx)
    if nums:
        v = verify_expression(clean_answer(arg), nums)
        if v.value == -TARGET:
            out.append(f"FINAL[{arg}] evaluates to -{TARGET}: a subtraction has its operands in the wrong order.")
    for c in arithmetic_claims(thought):
        if c.sign_flip:
            out.append(f"'{c.text}' has the wrong sign: {c.lhs} = {c.lhs_value}.")
    for m in _UNFLIPPED.finditer(thought):
        a, s, b = m.groups()
        out.append(f"'{m.group(0).strip()}' does not flip the inner sign: -({a} {s} {b}) = -{a} {_flip(s)} {b}.")
    if not nums:
        concl = extract_final_answer(thought)
        c = parse_number(clean_answer(concl)) if concl else None
        f = parse_number(clean_answer(arg))
        if c is not None and f is not None and c != 0 and f == -c:
            out.append(f"Your reasoning concludes {clean_answer(concl)} but FINAL[{clean_answer(arg)}] has the "
                       f"opposite sign.")
    return out[:limit]


@register_pf("algebraic_sign_error")
class AlgebraicSignErrorPF(MathFindingsPF):
    on_game24 = True
    scan = staticmethod(findings)
