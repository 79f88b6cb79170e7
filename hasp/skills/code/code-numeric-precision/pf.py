"""Floating-point traps: exact float comparison, float square roots for integer questions,
true division in an int-returning function, math.pow for integers, banker's rounding."""

import ast
import re

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.pf import register_pf

_AWAY_FROM_ZERO = re.compile(r"away from zero|round(?:ing)? half up|\.5\b", re.I)


@register_pf("code_numeric_precision")
class CodeNumericPrecisionPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_numeric_risks(view.tree, str(ctx.get("question", ""))))


def _is_floaty(node):
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) \
            and type(node.right.value) is float:
        return True
    return isinstance(node, ast.Call) and _call_name(node) in ("math.sqrt", "sqrt", "math.pow", "float")


def _call_name(call):
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f"{f.value.id}.{f.attr}"
    return ""


def _is_sqrt(node):
    return (isinstance(node, ast.Call) and _call_name(node) in ("math.sqrt", "sqrt")) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant)
        and node.right.value == 0.5)


def _returns_int(fn):
    r = fn.returns
    return isinstance(r, ast.Name) and r.id == "int"


def find_numeric_risks(tree, question):
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq)) for o in n.ops):
            if any(_is_floaty(x) for x in [n.left, *n.comparators]):
                found.append((n.lineno, "exact ==/!= on a float value; rounding error makes it flip"))
        if isinstance(n, ast.Call) and _call_name(n) == "int" and n.args and _is_sqrt(n.args[0]):
            found.append((n.lineno, "int(sqrt(...)) is wrong for large integers; use math.isqrt"))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "is_integer" \
                and _is_sqrt(n.func.value):
            found.append((n.lineno, "sqrt(...).is_integer() misjudges large squares; use math.isqrt(x) ** 2 == x"))
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        if not _returns_int(fn):
            continue
        for r in [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]:
            top = r.value
            if isinstance(top, ast.BinOp) and isinstance(top.op, ast.Div):
                found.append((r.lineno, f"`{fn.name}` is declared `-> int` but returns a true division (a float); "
                                        "use // or int() deliberately"))
            if isinstance(top, ast.Call) and _call_name(top) == "math.pow":
                found.append((r.lineno, "math.pow returns a float and loses precision beyond 2**53; use ** or pow()"))
    if _AWAY_FROM_ZERO.search(question or ""):
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _call_name(n) == "round":
                found.append((n.lineno, "round() rounds halves to even (round(2.5) == 2), but the problem asks "
                                        "for a different tie rule"))
    return sorted(set(found))
