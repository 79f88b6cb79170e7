"""Empty-input edge cases: max()/min() without default, division by len(), an empty case the
problem spells out but the code never tests."""

import ast
import re

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import entry_point_of, guards_empty, param_names
from hasp.pf import register_pf

_EMPTY_SPEC = re.compile(r"\b(empty|no elements|no such|is none|return none|return -1|if there (?:is|are) no)\b", re.I)
_REDUCERS = {"max", "min"}


@register_pf("code_edge_cases")
class CodeEdgeCasesPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_edge_case_risks(view.tree, str(ctx.get("question", "")), entry_point_of(ctx, view)))


def _param_arg(call, params):
    if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in params:
        return call.args[0].id
    return None


def find_edge_case_risks(tree, question, entry):
    found = []
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for fn in fns:
        params = set(param_names(fn))
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                name = n.func.id
                p = _param_arg(n, params)
                if (name in _REDUCERS and p and len(n.args) == 1
                        and not any(k.arg == "default" for k in n.keywords) and not guards_empty(fn, p)):
                    found.append((n.lineno, f"`{name}({p})` raises ValueError when `{p}` is empty"))
                if name == "reduce" and len(n.args) == 2 and isinstance(n.args[1], ast.Name) \
                        and n.args[1].id in params and not guards_empty(fn, n.args[1].id):
                    found.append((n.lineno, f"`reduce(..., {n.args[1].id})` without an initial value raises "
                                            "TypeError on an empty sequence"))
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                r = n.right
                if (isinstance(r, ast.Call) and isinstance(r.func, ast.Name) and r.func.id == "len"
                        and r.args and isinstance(r.args[0], ast.Name) and r.args[0].id in params
                        and not guards_empty(fn, r.args[0].id)):
                    found.append((n.lineno, f"dividing by `len({r.args[0].id})` raises ZeroDivisionError "
                                            "for an empty input"))
    target = next((f for f in fns if f.name == entry), None)
    if target is not None and _EMPTY_SPEC.search(question or ""):
        params = param_names(target)
        if params and not any(guards_empty(target, p) for p in params):
            m = _EMPTY_SPEC.search(question)
            found.append((target.lineno, f"the problem specifies a special case (\"{m.group(0)}\"), and "
                                         f"`{target.name}` has no explicit branch for it: check that the general "
                                         "code returns exactly what is asked there"))
    return sorted(set(found))
