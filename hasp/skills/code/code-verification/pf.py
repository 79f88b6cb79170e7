"""Last check before submission: the code parses, defines the function the tests call, has no
placeholder left, and runs nothing at import time that could fail or hang."""

import ast
import re

from hasp.domains.code.pf_bases import CodeFindingsPF
from hasp.domains.code.task import entry_point_of
from hasp.pf import register_pf

_TODO = re.compile(r"#\s*(TODO|FIXME|XXX)\b|your code here", re.I)
_TOP_LEVEL_OK = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                 ast.Assign, ast.AnnAssign, ast.Pass)


@register_pf("code_verification")
class CodeVerificationPF(CodeFindingsPF):
    needs_tree = False
    find = staticmethod(lambda ctx, view: find_verification_issues(view, entry_point_of(ctx, view)))


def _is_main_guard(node):
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _is_stub(fn):
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # docstring
    if not body:
        return "only a docstring"
    if all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                        and s.value.value is Ellipsis) for s in body):
        return "`pass` / `...` only"
    for s in ast.walk(fn):
        if isinstance(s, ast.Raise) and s.exc is not None:
            exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return "`raise NotImplementedError`"
    return None


def find_verification_issues(view, entry):
    if view.tree is None:
        return [(view.error_line, f"the code does not parse: {view.error}")]
    found = []
    defined = [f.name for f in view.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    nested = [f.name for f in view.functions()]
    if entry and entry not in defined:
        where = " (only as a method or nested function)" if entry in nested else ""
        found.append((0, f"the tests call `{entry}`, but it is not defined at module level{where}; "
                         f"defined: {', '.join(defined) or 'nothing'}"))
    for f in view.tree.body:
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and (not entry or f.name == entry):
            stub = _is_stub(f)
            if stub:
                found.append((f.lineno, f"`{f.name}` is a placeholder ({stub})"))
    for i, line in enumerate(view.lines, 1):
        if _TODO.search(line):
            found.append((i, "unfinished: a TODO/placeholder comment is left in the code"))
    for node in view.tree.body:
        if isinstance(node, _TOP_LEVEL_OK) or _is_main_guard(node):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # module docstring
        kind = type(node).__name__.lower()
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            fn = node.value.func
            kind = f"call to {getattr(fn, 'id', getattr(fn, 'attr', '?'))}()"
        found.append((node.lineno, f"module-level {kind} runs on import; if it fails or waits for input "
                                   "the whole submission fails"))
    return sorted(set(found))
