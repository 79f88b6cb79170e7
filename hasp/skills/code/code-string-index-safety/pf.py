"""Indexing that raises on empty or unexpected input (s[0] on a parameter, .index(), .split()[k])."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import guards_empty, param_names
from hasp.pf import register_pf


@register_pf("code_string_index_safety")
class CodeStringIndexSafetyPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_index_risks(view.tree))


def _in_try(node, parents):
    p = parents.get(node)
    while p is not None:
        if isinstance(p, ast.Try):
            return True
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        p = parents.get(p)
    return False


def _membership_tested(fn, receiver):
    """`x in receiver` / `x not in receiver` somewhere in the function."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
            if any(isinstance(c, ast.Name) and c.id == receiver for c in n.comparators):
                return True
    return False


def find_index_risks(tree):
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        parents = {c: p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        params = set(param_names(fn))
        for n in ast.walk(fn):
            # s[0] / s[-1] on a parameter that is never checked for emptiness
            if (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in params
                    and isinstance(n.ctx, ast.Load)):
                idx = n.slice
                k = None
                if isinstance(idx, ast.Constant) and type(idx.value) is int:
                    k = idx.value
                elif (isinstance(idx, ast.UnaryOp) and isinstance(idx.op, ast.USub)
                      and isinstance(idx.operand, ast.Constant) and type(idx.operand.value) is int):
                    k = -idx.operand.value
                if k is not None and not guards_empty(fn, n.value.id) and not _in_try(n, parents):
                    need = abs(k) + (k >= 0)
                    when = "is empty" if need == 1 else f"has fewer than {need} elements"
                    found.append((n.lineno, f"`{n.value.id}[{k}]` raises IndexError when `{n.value.id}` "
                                            f"{when}; nothing checks its length"))
            if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
                continue
            # xs.index(v) without a membership test or a try
            if (n.func.attr == "index" and isinstance(n.func.value, ast.Name)
                    and not _membership_tested(fn, n.func.value.id) and not _in_try(n, parents)):
                found.append((n.lineno, f"`{n.func.value.id}.index(...)` raises ValueError when the value is "
                                        "absent (str.find returns -1 instead)"))
        # s.split(sep)[k] with k >= 1
        for n in ast.walk(fn):
            if (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call)
                    and isinstance(n.value.func, ast.Attribute) and n.value.func.attr in ("split", "rsplit")
                    and isinstance(n.slice, ast.Constant) and type(n.slice.value) is int and n.slice.value >= 1
                    and not _in_try(n, parents)):
                found.append((n.lineno, f"`.{n.value.func.attr}(...)[{n.slice.value}]` raises IndexError when "
                                        "the separator does not occur"))
    return sorted(set(found))
