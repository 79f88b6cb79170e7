"""Answer not in final form → the exactly simplified value (INJECT_CONTEXT)."""

import math
import re
from fractions import Fraction

from hasp.domains.math.answers import clean_answer, format_number, parse_number
from hasp.domains.math.game24 import evaluate_arithmetic
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

_M_PLUS_N = re.compile(r"\b([mp])\s*\+\s*([nq])\b")
_COPRIME = re.compile(r"relatively prime|coprime|lowest terms", re.I)
_COMMON_FRACTION = re.compile(r"common fraction|simplest (?:fractional )?form|as a fraction", re.I)
_SLASH_FRAC = re.compile(r"^\s*([+-]?)\s*(\d+)\s*/\s*(\d+)\s*$")
_TEX_FRAC = re.compile(r"^\s*([+-]?)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}\s*$")
_RADICAL = re.compile(r"(\d*)\s*(?:\\sqrt\s*\{\s*(\d+)\s*\}|sqrt\s*\(\s*(\d+)\s*\)|√\s*\(?\s*(\d+)\s*\)?)")
_OPERATOR = re.compile(r"\d\s*[-+*/^×·]\s*[\d(]|\)\s*[-+*/^×·]")


def _square_part(n):
    """(k, m) with n = k^2 * m and m square-free."""
    k = 1
    for p in range(2, math.isqrt(n) + 1):
        while n % (p * p) == 0:
            n //= p * p
            k *= p
    return k, n


def findings(ctx, arg):
    ans = clean_answer(arg)
    q = str(ctx.get("question", ""))
    out = []
    frac = _SLASH_FRAC.match(ans) or _TEX_FRAC.match(ans)
    value = parse_number(ans)
    if frac and int(frac.group(3)) != 0:
        num, den = int(frac.group(2)), int(frac.group(3))
        g = math.gcd(num, den)
        if g > 1:
            red = Fraction(num, den)
            out.append(f"{ans} is not reduced: dividing by {g} gives {frac.group(1)}{format_number(red)}.")
    elif value is None and _OPERATOR.search(ans) and not re.search(r"[A-Za-z\\]", ans):
        try:
            v = evaluate_arithmetic(ans.replace("×", "*").replace("·", "*"), extended=True)
            out.append(f"{ans} is not evaluated: it equals {format_number(v)}.")
        except ValueError:
            pass
    for m in _RADICAL.finditer(ans):
        radicand = int(next(g for g in m.groups()[1:] if g))
        if radicand > 1:
            k, rest = _square_part(radicand)
            if k > 1:
                coef = (int(m.group(1)) if m.group(1) else 1) * k
                simpler = str(coef) if rest == 1 else f"{coef}\\sqrt{{{rest}}}"
                out.append(f"{m.group(0).strip()} simplifies to {simpler}.")
    mn = _M_PLUS_N.search(q)
    if mn and _COPRIME.search(q) and value is not None and value.denominator != 1:
        red = abs(value)
        out.append(f"The question asks for {mn.group(0)}, not the fraction itself: with "
                   f"{mn.group(1)}/{mn.group(2)} = {format_number(red)} in lowest terms, "
                   f"{mn.group(0)} = {red.numerator + red.denominator}.")
    if (_COMMON_FRACTION.search(q) and value is not None and value.denominator != 1
            and re.fullmatch(r"[+-]?\d*\.\d+", ans)):
        out.append(f"The question asks for a common fraction: {ans} = {format_number(value)}.")
    return out


@register_pf("simplification_incomplete")
class SimplificationIncompletePF(MathFindingsPF):
    scan = staticmethod(findings)
