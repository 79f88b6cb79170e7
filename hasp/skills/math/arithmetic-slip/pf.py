"""Wrong numeric step in the reasoning / FINAL ≠ own conclusion / 24-game value ≠ 24 → exact
recomputation of what is wrong (INJECT_CONTEXT)."""

from fractions import Fraction

from hasp.domains.math.answers import arithmetic_claims, clean_answer, extract_final_answer, parse_number
from hasp.domains.math.game24 import TARGET, verify_expression
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.domains.math.task import game24_numbers
from hasp.pf import register_pf


def show(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{v.numerator}/{v.denominator} (about {float(v):.6g})"


def findings(ctx, arg, limit=4):
    out = []
    nums = game24_numbers(ctx)
    thought = str(ctx.get("thought", ""))
    if nums:
        v = verify_expression(clean_answer(arg), nums)
        if v.code == "zero_division":
            out.append(f"FINAL[{arg}] divides by zero.")
        elif v.value is not None and v.value not in (TARGET, -TARGET):
            out.append(f"FINAL[{arg}] evaluates to {show(v.value)}, not {TARGET}.")
    for c in arithmetic_claims(thought):
        if not c.correct and not c.sign_flip:
            out.append(f"'{c.text}' is wrong: {c.lhs} = {show(c.lhs_value)}.")
    if not nums:
        concl = extract_final_answer(thought)
        a = parse_number(clean_answer(concl)) if concl else None
        b = parse_number(clean_answer(arg))
        if a is not None and b is not None and a != b and a != -b:
            out.append(f"Your reasoning concludes {clean_answer(concl)} but FINAL says {clean_answer(arg)}.")
    return out[:limit]


@register_pf("arithmetic_slip")
class ArithmeticSlipPF(MathFindingsPF):
    on_game24 = True
    scan = staticmethod(findings)
