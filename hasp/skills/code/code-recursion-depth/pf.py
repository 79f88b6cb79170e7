"""Recursion that can run out of stack: no base case, depth linear in the input,
sys.setrecursionlimit."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import param_names
from hasp.pf import register_pf


@register_pf("code_recursion_depth")
class CodeRecursionDepthPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_recursion_risks(view.tree))


def _self_calls(fn):
    out = []
    stack = list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue  # nested scopes are their own functions
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name:
            out.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return sorted(out, key=lambda c: (c.lineno, c.col_offset))


def _has_base_case(fn, calls):
    """A branch, or a return/raise that does not recurse."""
    call_ids = {id(c) for c in calls}
    for n in ast.walk(fn):
        if isinstance(n, (ast.If, ast.IfExp, ast.Match, ast.Try, ast.BoolOp)):
            return True
        if isinstance(n, ast.Return) and (n.value is None or not any(id(s) in call_ids for s in ast.walk(n.value))):
            return True
    return False


def _shrinks_linearly(call, params):
    """An argument like `n - 1` or `xs[1:]` on a parameter: depth grows with the input."""
    for a in call.args:
        if (isinstance(a, ast.BinOp) and isinstance(a.op, ast.Sub) and isinstance(a.left, ast.Name)
                and a.left.id in params and isinstance(a.right, ast.Constant) and type(a.right.value) is int
                and 0 < a.right.value <= 2):
            return f"`{ast.unparse(a)}`"
        if (isinstance(a, ast.Subscript) and isinstance(a.value, ast.Name) and a.value.id in params
                and isinstance(a.slice, ast.Slice) and (a.slice.lower is not None or a.slice.upper is not None)):
            return f"`{ast.unparse(a)}`"
    return None


def find_recursion_risks(tree):
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        calls = _self_calls(fn)
        if not calls:
            continue
        if not _has_base_case(fn, calls):
            found.append((fn.lineno, f"`{fn.name}` always calls itself: there is no base case, so it ends in "
                                     "RecursionError"))
            continue
        params = set(param_names(fn))
        for c in calls:
            step = _shrinks_linearly(c, params)
            if step:
                found.append((c.lineno, f"recursion depth grows with the input ({step} per call): inputs of "
                                        "~1000 elements/steps hit the recursion limit"))
                break
    for n in ast.walk(tree):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "setrecursionlimit"):
            found.append((n.lineno, "raising the recursion limit trades RecursionError for a possible interpreter "
                                    "crash; prefer iteration"))
    return sorted(set(found))
