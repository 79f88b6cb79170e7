"""Lists used as queues, sets or counters: pop(0)/insert(0), xs = xs[1:], membership and
.count() in a list inside a loop."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.pf import register_pf

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_LISTY_ANN = {"list", "List", "Sequence", "tuple", "Tuple"}


@register_pf("code_data_structure_choice")
class CodeDataStructureChoicePF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_structure_risks(view.tree))


def _list_names(fn):
    """Names bound to lists in the function: list literals/comprehensions/list() and list-annotated params."""
    names = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.List, ast.ListComp)) or (
                isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id in ("list", "sorted")):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
        ann = a.annotation
        base = ann.value if isinstance(ann, ast.Subscript) else ann
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        if base_name in _LISTY_ANN:
            names.add(a.arg)
    # rebinding to a set/dict anywhere removes it
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and (isinstance(n.value, (ast.Set, ast.SetComp, ast.Dict, ast.DictComp)) or (
                isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id in ("set", "frozenset", "dict", "Counter", "defaultdict"))):
            names -= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return names


def _inside_loop(fn):
    """Nodes that sit inside a loop body (or a comprehension) of ``fn``."""
    inside = set()
    for n in ast.walk(fn):
        if isinstance(n, _LOOPS):
            for stmt in n.body:
                inside |= set(ast.walk(stmt))
            if isinstance(n, ast.While):
                inside |= set(ast.walk(n.test))
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inside |= set(ast.walk(n.elt if not isinstance(n, ast.DictComp) else n.value))
            for g in n.generators:
                for cond in g.ifs:
                    inside |= set(ast.walk(cond))
    return inside


def find_structure_risks(tree):
    found = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        lists = _list_names(fn)
        hot = _inside_loop(fn)
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                recv, attr = n.func.value.id, n.func.attr
                first = n.args[0] if n.args else None
                if attr == "pop" and isinstance(first, ast.Constant) and first.value == 0:
                    found.append((n.lineno, f"`{recv}.pop(0)` shifts the whole list (O(n)); use deque.popleft()"))
                elif attr == "insert" and isinstance(first, ast.Constant) and first.value == 0:
                    found.append((n.lineno, f"`{recv}.insert(0, ...)` shifts the whole list; use deque.appendleft()"))
                elif attr == "count" and n in hot and recv in lists:
                    found.append((n.lineno, f"`{recv}.count(...)` inside a loop rescans the list each time; "
                                            "count once with collections.Counter"))
            if isinstance(n, ast.Compare) and n in hot and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops):
                for c in n.comparators:
                    if isinstance(c, ast.Name) and c.id in lists:
                        found.append((n.lineno, f"membership test in the list `{c.id}` inside a loop is O(n) "
                                                "per test; keep a set alongside it"))
            if (isinstance(n, ast.Assign) and n in hot and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and isinstance(n.value, ast.Subscript) and isinstance(n.value.value, ast.Name)
                    and n.value.value.id == n.targets[0].id and isinstance(n.value.slice, ast.Slice)
                    and n.value.slice.lower is not None and n.value.slice.upper is None):
                found.append((n.lineno, f"`{n.targets[0].id} = {n.targets[0].id}[k:]` in a loop copies the list "
                                        "every time; use an index or a deque"))
    return sorted(set(found))
