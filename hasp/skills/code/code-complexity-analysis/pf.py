"""Time-complexity traps: deep loop nests, pairwise scans over one sequence, sorting or
linear searches inside loops, exponential recursion without memoisation."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.pf import register_pf

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MEMO = {"lru_cache", "cache", "memoize", "memoized"}


@register_pf("code_complexity_analysis")
class CodeComplexityAnalysisPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_complexity_risks(view.tree))


def _iter_key(loop):
    """A comparable description of what a for-loop walks over (None for while loops)."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    it = loop.iter
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("range", "enumerate")
            and it.args):
        a = it.args[-1] if it.func.id == "range" else it.args[0]
        if isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == "len" and a.args:
            a = a.args[0]
        return ast.dump(a)
    return ast.dump(it)


def _nests(node, stack, out):
    if isinstance(node, _LOOPS):
        stack = stack + [node]
        out.append(list(stack))
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            _nests(child, [], out)
        else:
            _nests(child, stack, out)


def _decorated_with_memo(fn):
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in _MEMO:
            return True
    return False


def find_complexity_risks(tree):
    found = []
    chains = []
    _nests(tree, [], chains)
    deep = [c for c in chains if len(c) >= 3]
    if deep:
        c = max(deep, key=len)
        found.append((c[-1].lineno, f"{len(c)} nested loops (from line {c[0].lineno}): O(n^{len(c)}) work"))
    for c in chains:
        if len(c) == 2:
            k0, k1 = _iter_key(c[0]), _iter_key(c[1])
            if k0 is not None and k0 == k1:
                found.append((c[1].lineno, f"pairwise scan: this loop walks the same sequence as the loop on "
                                           f"line {c[0].lineno}, O(n^2)"))
    for loop in [n for n in ast.walk(tree) if isinstance(n, _LOOPS)]:
        for stmt in loop.body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Call):
                    f = n.func
                    is_sort = (isinstance(f, ast.Name) and f.id == "sorted") or (
                        isinstance(f, ast.Attribute) and f.attr == "sort")
                    if is_sort:
                        found.append((n.lineno, "sorting inside a loop: O(n^2 log n) overall; sort once outside"))
                    elif isinstance(f, ast.Attribute) and f.attr == "index" and n.args:
                        found.append((n.lineno, "`.index(...)` inside a loop scans the sequence every iteration"))
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == fn.name]
        if len(calls) >= 2 and not _decorated_with_memo(fn):
            found.append((fn.lineno, f"`{fn.name}` calls itself {len(calls)} times per call without memoisation: "
                                     "exponential time (add functools.lru_cache or iterate bottom-up)"))
    return sorted(set(found))
