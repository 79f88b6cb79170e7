"""Answer in a different unit from the one asked → the mismatch and the exact conversion
(INJECT_CONTEXT)."""

import re
from fractions import Fraction

from hasp.domains.math.answers import clean_answer, format_number, parse_number
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.pf import register_pf

# unit word -> (dimension, canonical name, size in the dimension's base unit; None = not exact)
UNITS = {}
for names, dim, canon, size in [
    (("second", "seconds", "sec", "secs"), "time", "seconds", Fraction(1)),
    (("minute", "minutes", "min", "mins"), "time", "minutes", Fraction(60)),
    (("hour", "hours", "hr", "hrs"), "time", "hours", Fraction(3600)),
    (("day", "days"), "time", "days", Fraction(86400)),
    (("week", "weeks"), "time", "weeks", Fraction(604800)),
    (("millimeter", "millimeters", "mm"), "length", "millimeters", Fraction(1, 1000)),
    (("centimeter", "centimeters", "cm"), "length", "centimeters", Fraction(1, 100)),
    (("meter", "meters", "metre", "metres"), "length", "meters", Fraction(1)),
    (("kilometer", "kilometers", "km"), "length", "kilometers", Fraction(1000)),
    (("inch", "inches"), "length", "inches", Fraction(254, 10000)),
    (("foot", "feet", "ft"), "length", "feet", Fraction(3048, 10000)),
    (("yard", "yards"), "length", "yards", Fraction(9144, 10000)),
    (("mile", "miles"), "length", "miles", Fraction(1609344, 1000)),
    (("degree", "degrees"), "angle", "degrees", None),
    (("radian", "radians"), "angle", "radians", None),
    (("cent", "cents"), "money", "cents", Fraction(1, 100)),
    (("dollar", "dollars"), "money", "dollars", Fraction(1)),
]:
    for n in names:
        UNITS[n] = (dim, canon, size)

_WORD = "|".join(sorted(UNITS, key=len, reverse=True))
_ASKED = [
    re.compile(rf"\bhow many\s+(?:more\s+|fewer\s+)?({_WORD})\b", re.I),
    re.compile(rf"\bnumber of\s+({_WORD})\b", re.I),
    re.compile(rf"\b(?:in|into)\s+(?:\\text\{{\s*)?({_WORD})\b", re.I),
    re.compile(r"\b(degree) measure\b", re.I),
]
_VALUE_UNIT = re.compile(rf"(-?\d+(?:\.\d+)?(?:/\d+)?)\s*(?:\\text\{{\s*|\\,\s*|\\ )?({_WORD})\b", re.I)


def asked_unit(question):
    for rx in _ASKED:
        m = rx.search(question)
        if m:
            return UNITS[m.group(1).lower()]
    return None


def answer_unit(arg, thought, value):
    """(unit tuple, where) for the unit the answer carries: in FINAL itself, else in the reasoning
    next to the answer's value (last mention wins)."""
    m = re.search(rf"\b({_WORD})\b", arg, re.I)
    if m:
        return UNITS[m.group(1).lower()], "FINAL"
    if value is None:
        return None
    found = None
    for m in _VALUE_UNIT.finditer(thought):
        if parse_number(m.group(1)) == value:
            found = UNITS[m.group(2).lower()]
    return (found, "reasoning") if found else None


def mismatch(ctx, arg):
    q = str(ctx.get("question", ""))
    want = asked_unit(q)
    if want is None:
        return None
    value = parse_number(clean_answer(arg))
    got = answer_unit(arg, str(ctx.get("thought", "")), value)
    if got is None or got[0][1] == want[1]:
        return None
    (gdim, gname, gsize), where = got
    wdim, wname, wsize = want
    shown = clean_answer(arg)
    text = f"The question asks for {wname} but {shown} is in {gname} (unit taken from the {where})."
    if gdim == wdim and value is not None and gsize and wsize:
        conv = value * gsize / wsize
        exact = format_number(conv) if conv.denominator == 1 else f"{float(conv):.6g}"
        text += f" {shown} {gname} = {exact} {wname}."
    elif gdim != wdim:
        text += f" These are different kinds of quantity ({gdim} vs {wdim}); re-read what is asked."
    return text


@register_pf("units_dimension_mismatch")
class UnitsDimensionMismatchPF(MathFindingsPF):
    check = staticmethod(mismatch)

    def reason(self, ctx, arg, found):
        return "answer unit differs from asked unit"
