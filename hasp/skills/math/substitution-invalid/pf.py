"""Derived values that fail the problem's equations / positivity, or 24-game numbers used
wrongly → the failing substitution, computed exactly (INJECT_CONTEXT)."""

import re

from hasp.domains.math.answers import clean_answer, format_number, parse_number
from hasp.domains.math.game24 import evaluate_arithmetic, verify_expression
from hasp.domains.math.pf_bases import MathFindingsPF
from hasp.domains.math.task import game24_numbers
from hasp.pf import register_pf

_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.S)
_ASSIGN = re.compile(r"(?<![\w\\)])([a-z])\s*=\s*(-?\s*\\[dt]?frac\{\d+\}\{\d+\}|-?\s*\d+(?:\.\d+)?(?:\s*/\s*\d+)?)")
_ASKED = re.compile(r"(?:solve for|find|compute|determine|what is|value of)\s+(?:the value of\s+)?\$?([a-z])\$?\s*(?:[.?]|$)",
                    re.I)
_VAR = r"(?:\$[a-z]\$|\b[a-z]\b)"
_POSITIVE = re.compile(rf"(?i:positive) (?:real |whole )?(?:numbers?|integers?|reals?)\s+"
                       rf"({_VAR}(?:\s*(?:,\s*and|,|and)\s*{_VAR})*)")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")


def equations(question):
    """Single-'=' equations in math mode in the problem, over lower-case variables only."""
    out = []
    for m in _MATH.finditer(question):
        seg = next(g for g in m.groups() if g is not None)
        for part in re.split(r",|\\quad|\\text\{\s*and\s*\}|\band\b", seg):
            part = part.strip()
            if (part.count("=") == 1 and not re.search(r"[<>]|\\(?:le|ge|ne|neq|leq|geq|approx)\b", part)
                    and not re.search(r"[A-Z]", part)):  # capitals are points/sets (AB = 5 is a length)
                out.append(part)
    return out


def assignments(thought):
    """Variables the reasoning gives exactly one value (x = 3); a variable with two values is dropped."""
    vals = {}
    for m in _ASSIGN.finditer(thought):
        tail = thought[m.end():]
        if re.match(r"\s*[+\-*/^(]|\w|\.\d", tail):
            continue  # the right-hand side goes on: "x = 3y", "x = 3 + y"
        if thought[:m.start()].rstrip()[-1:] in ("+", "-", "*", "/", "^", "×", "·"):
            continue  # the left-hand side is longer: "x + y = 35"
        v = parse_number(m.group(2).replace(" ", ""))
        if v is not None:
            vals.setdefault(m.group(1), set()).add(v)
    return {k: next(iter(s)) for k, s in vals.items() if len(s) == 1}


def _arith(tex):
    s = tex
    for _ in range(5):
        s2 = _FRAC.sub(r"((\1)/(\2))", s)
        if s2 == s:
            break
        s = s2
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\left", "").replace("\\right", "")
    s = s.replace("{", "(").replace("}", ")")
    return None if "\\" in s else s


def evaluate_with(side, values):
    """Exact value of one side with the variables replaced, or None if it cannot be evaluated."""
    s = _arith(side)
    if s is None:
        return None
    letters = set(re.findall(r"[A-Za-z]", s))
    if not letters or not letters <= set(values):
        return None
    s = re.sub(r"[A-Za-z]", lambda m: f"({format_number(values[m.group(0)])})", s)
    s = re.sub(r"(?<=[\d)])\s*(?=\()", "*", s)
    try:
        return evaluate_arithmetic(s, extended=True)
    except ValueError:
        return None


def findings(ctx, arg, limit=3):
    nums = game24_numbers(ctx)
    if nums:
        v = verify_expression(clean_answer(arg), nums)
        return [f"FINAL[{arg}]: {v.reason}."] if v.code == "numbers" else []
    question = str(ctx.get("question", ""))
    values = assignments(str(ctx.get("thought", "")))
    asked = _ASKED.search(question)
    ans = parse_number(clean_answer(arg))
    if asked and ans is not None:
        values[asked.group(1)] = ans
    out = []
    if not values:
        return out
    for m in _POSITIVE.finditer(question):
        for var in re.findall(r"\b[a-z]\b", re.sub(r"\band\b|\$", " ", m.group(1))):
            if var in values and values[var] <= 0:
                out.append(f"{var} = {format_number(values[var])}, but the problem says {var} is positive.")
    for eq in equations(question):
        lhs, rhs = eq.split("=")
        a, b = evaluate_with(lhs, values), evaluate_with(rhs, values)
        if a is None and b is None:
            continue
        if a is None or b is None:  # one side is a bare constant: evaluate it alone
            const = lhs if a is None else rhs
            try:
                c = evaluate_arithmetic(_arith(const) or "", extended=True)
            except ValueError:
                continue
            a, b = (c, b) if a is None else (a, c)
        if a != b:
            names = set(re.findall(r"[a-z]", _arith(eq) or ""))
            used = ", ".join(f"{k} = {format_number(v)}" for k, v in sorted(values.items()) if k in names)
            out.append(f"Substituting {used} into ${eq.strip()}$ gives {format_number(a)} on the left but "
                       f"{format_number(b)} on the right.")
    return list(dict.fromkeys(out))[:limit]


@register_pf("substitution_invalid")
class SubstitutionInvalidPF(MathFindingsPF):
    on_game24 = True
    scan = staticmethod(findings)
