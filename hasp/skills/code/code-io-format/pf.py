"""I/O contract: the tests call the function and compare its return value. Flags reading
stdin, printing instead of returning, missing return values, return types that contradict
the signature."""

import ast

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import entry_point_of
from hasp.pf import register_pf

_ANN_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}
_COLLECTION_ANN = {"list", "List", "tuple", "Tuple", "dict", "Dict", "set", "Set"}


@register_pf("code_io_format")
class CodeIOFormatPF(CodeFindingsPF):
    find = staticmethod(lambda ctx, view: find_io_risks(view.tree, entry_point_of(ctx, view)))


def _is_generator(fn):
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn))


def _ann_name(ann):
    base = ann.value if isinstance(ann, ast.Subscript) else ann
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def find_io_risks(tree, entry):
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "input":
            found.append((n.lineno, "reads stdin with input(); the tests pass arguments, stdin is empty"))
        if isinstance(n, ast.Attribute) and n.attr == "stdin" and isinstance(n.value, ast.Name) and n.value.id == "sys":
            found.append((n.lineno, "reads sys.stdin; the tests pass arguments, stdin is empty"))
    fns = [f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fn = next((f for f in fns if f.name == entry), None) if entry else (fns[0] if len(fns) == 1 else None)
    if fn is None or _is_generator(fn):
        return sorted(set(found))
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    valued = [r for r in returns
              if r.value is not None and not (isinstance(r.value, ast.Constant) and r.value.value is None)]
    prints = [n for n in ast.walk(fn)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"]
    body_is_stub = all(isinstance(s, (ast.Pass, ast.Expr)) for s in fn.body)
    if not valued and prints:
        found.append((prints[0].lineno, f"`{fn.name}` prints its result but returns None"))
    elif not valued and not body_is_stub:
        found.append((fn.lineno, f"`{fn.name}` never returns a value, so every call returns None"))
    ann = _ann_name(fn.returns) if fn.returns is not None else None
    if ann in _ANN_TYPES:
        ok = _ANN_TYPES[ann]
        for r in valued:
            v = r.value
            if isinstance(v, ast.Constant) and v.value is not None and type(v.value) not in ok:
                found.append((r.lineno, f"returns {v.value!r} ({type(v.value).__name__}) but the signature "
                                        f"says -> {ann}"))
            if ann != "str" and isinstance(v, ast.JoinedStr):
                found.append((r.lineno, f"returns an f-string but the signature says -> {ann}"))
    elif ann in _COLLECTION_ANN:
        for r in valued:
            if isinstance(r.value, ast.Constant) and isinstance(r.value.value, (str, int, float)):
                found.append((r.lineno, f"returns the scalar {r.value.value!r} but the signature says -> {ann}"))
    return sorted(set(found))
