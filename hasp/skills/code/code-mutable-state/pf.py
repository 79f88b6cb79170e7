"""Shared mutable state: mutable default arguments and in-place changes to the caller's arguments."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import param_names
from hasp.pf import register_pf

_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
             "add", "discard", "popitem", "setdefault"}
_COPIES = {"list", "dict", "set", "sorted", "tuple", "copy", "deepcopy", "deque", "Counter", "bytearray"}


@register_pf("code_mutable_state")
class CodeMutableStatePF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_mutation_risks(view.tree))


def _is_mutable_default(d):
    if isinstance(d, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    return isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id in ("list", "dict", "set",
                                                                                      "defaultdict", "Counter")


def _rebound_lines(fn, name):
    """Lines where ``name`` is rebound (after which it is no longer the caller's object)."""
    lines = []
    for n in ast.walk(fn):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                lines.append(n.lineno)
        if isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.target, ast.Name) and n.target.id == name:
            lines.append(getattr(n, "lineno", 0) or 0)
    return lines


def find_mutation_risks(tree):
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        a = fn.args
        for d in [*a.defaults, *[k for k in a.kw_defaults if k is not None]]:
            if _is_mutable_default(d):
                found.append((d.lineno, f"mutable default `{ast.unparse(d)}` in `{fn.name}` is created once and "
                                        "shared by every call"))
        for p in param_names(fn):
            rebound = _rebound_lines(fn, p)

            def live(line, rebound=rebound):
                return not any(r < line for r in rebound)

            for n in ast.walk(fn):
                hit = None
                if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                        and n.func.value.id == p and n.func.attr in _MUTATORS):
                    hit = f"`{p}.{n.func.attr}(...)` changes the caller's `{p}` in place"
                elif isinstance(n, (ast.Assign, ast.AugAssign, ast.Delete)):
                    targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
                    for t in targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == p:
                            hit = f"item assignment into the caller's `{p}`"
                if hit and live(n.lineno):
                    found.append((n.lineno, hit))
    return sorted(set(found))
