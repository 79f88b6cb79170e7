"""Prompt-equivalence of a PF (criterion A+B, paper App. B.5), decided from its source with ``ast``.

A PF is prompt-equivalent when
  (A) its ``intervene`` only ever constructs ``INJECT_CONTEXT`` or ``NOOP`` interventions
      (never ``MODIFY_ACTION``), and
  (B) every injected ``context_text`` is a constant: a string literal or an expression
      of literals (concatenation, a literal-valued conditional, a module/class constant,
      a local assigned only literals) — no f-string, ``.format``/``%``/``join`` or other
      runtime value.
Such a PF adds nothing a phase-instruction text in SKILL.md could not, which is why the
count matters when judging where a library's gains come from.

The check is static and conservative: what it cannot prove (an intervention type passed
in a variable, ``Intervention.from_dict``, a context built by a helper call) counts as
*not* A+B, and the report says why. ``intervene`` is followed into the methods it calls
on ``self`` and the module-level functions it calls, because PFs often build their
``Intervention`` in a helper. Nothing is executed, so generated (untrusted) code is
analysed the same way as seed code.
"""

from __future__ import annotations

import ast
import string
from dataclasses import dataclass, field
from pathlib import Path

from hasp.pf.declaration import PFDeclaration
from hasp.pf.layout import active_versions
from hasp.pf.folder_files import present, read_text
from hasp.pf.skill_md import HASP_FILE, SkillFormatError, load_skill
from hasp.pf.pf_source import PFClass, assignments, find_definition, find_pf_class, module_name
from hasp.pyast import parse_python

ALLOWED_TYPES = frozenset({"INJECT_CONTEXT", "NOOP"})
_TYPE_NAMES = frozenset({"MODIFY_ACTION", "INJECT_CONTEXT", "NOOP"})
_CONTEXT_POS = 3  # Intervention(type, new_action_type, new_action_arg, context_text, ...)

Func = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class EquivalenceReport:
    """A+B verdict for one PF source, with the reasons when it is not A+B."""

    skill_id: str
    a: bool = False
    b: bool = False
    types: list[str] = field(default_factory=list)  # intervention types intervene can construct
    reasons: list[str] = field(default_factory=list)
    path: str = ""

    @property
    def prompt_equivalent(self) -> bool:
        return self.a and self.b


class _Module:
    """One module's constants and functions, the names a function defined in it resolves."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.consts = _Scope._single_assignments(tree.body)
        self.funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        # a module name re-bound inside any function (``global X``) is not a constant
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                for name in node.names:
                    self.consts.pop(name, None)


class _Scope:
    """Class constants, methods and, per function, the module it was defined in.

    A PF inherits methods and constants from its project base classes: a base's ``intervene``
    that injects ``self.hint`` is A+B exactly when the subclass sets ``hint`` to a literal, so
    methods and class constants are merged along the class chain (most derived wins), while
    bare names inside a method still resolve in the module that defines that method.
    """

    def __init__(self, found: PFClass) -> None:
        self.class_consts: dict[str, ast.expr] = {}
        self.methods: dict[str, Func] = {}
        self._module_of: dict[int, _Module] = {}
        self._modules: dict[int, _Module] = {}
        for cls, tree in reversed(found.chain or [(found.node, ast.Module(body=[], type_ignores=[]))]):
            mod = self._module(tree)
            self.class_consts.update(self._single_assignments(cls.body))
            for n in cls.body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.methods[n.name] = n
                    self._module_of[id(n)] = mod
        for fn in self.methods.values():  # ``self.x = ...`` in any method: x is not a constant
            for node in ast.walk(fn):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            self.class_consts.pop(t.attr, None)

    def _module(self, tree: ast.Module) -> _Module:
        if id(tree) not in self._modules:
            mod = self._modules[id(tree)] = _Module(tree)
            for fn in mod.funcs.values():
                self._module_of[id(fn)] = mod
        return self._modules[id(tree)]

    def module(self, fn: Func) -> _Module:
        return self._module_of[id(fn)]

    def where(self, fn: Func, node: ast.AST) -> str:
        """``line N`` in the PF's source, ``<module> line N`` in an inherited or imported one."""
        name = module_name(self.module(fn).tree)
        return f"{name} line {node.lineno}" if name else f"line {node.lineno}"

    def function(self, fn: Func, name: str) -> Func | None:
        """The function a bare ``name()`` in ``fn`` calls: defined in fn's module or imported from
        the project (a helper that builds the Intervention counts as part of the PF)."""
        mod = self.module(fn)
        if name in mod.funcs:
            return mod.funcs[name]
        found = find_definition(mod.tree, name, (ast.FunctionDef, ast.AsyncFunctionDef))
        if found is None:
            return None
        node, tree = found
        self._module(tree)
        return node

    @staticmethod
    def _single_assignments(body: list[ast.stmt]) -> dict[str, ast.expr]:
        seen: dict[str, ast.expr | None] = {}
        for name, value in assignments(body):
            seen[name] = None if name in seen else value  # assigned twice -> not a constant
        return {k: v for k, v in seen.items() if v is not None}


def _local_assignments(fn: Func) -> dict[str, list[ast.expr | str]]:
    """Every value bound to each local name in ``fn``: the expression, or a string saying how
    the name is bound when there is no single expression (parameter, loop target, ``+=``...)."""
    out: dict[str, list[ast.expr | str]] = {}

    def bind(name: str, val: ast.expr | str) -> None:
        out.setdefault(name, []).append(val)

    args = fn.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            bind(a.arg, "a parameter")
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        bind(n.id, node.value if t is n else "an unpacked value")
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            bind(node.target.id, "an augmented assignment (+=)")
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
            bind(node.target.id, node.value if node.value is not None else "a declaration")
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for n in ast.walk(node.target):
                if isinstance(n, ast.Name):
                    bind(n.id, "a loop value")
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                for n in ast.walk(item.optional_vars) if item.optional_vars is not None else []:
                    if isinstance(n, ast.Name):
                        bind(n.id, "a with-statement value")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind(node.name, "an exception")
    return out


def _why_not_constant(expr: ast.expr | None, scope: _Scope, fn: Func, depth: int = 0) -> str | None:
    """None when ``expr`` is a constant string expression, else a short reason."""
    if expr is None:
        return "a value bound at run time"
    if depth > 20:
        return "a constant chain too deep to follow"
    if isinstance(expr, ast.Constant):
        return None
    if isinstance(expr, ast.JoinedStr):
        return "an f-string"
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Mod):
            return "%-formatting"
        if not isinstance(expr.op, (ast.Add, ast.Mult)):
            return f"a {type(expr.op).__name__} expression"
        return (_why_not_constant(expr.left, scope, fn, depth + 1)
                or _why_not_constant(expr.right, scope, fn, depth + 1))
    if isinstance(expr, ast.IfExp):  # choosing between literals substitutes nothing
        return (_why_not_constant(expr.body, scope, fn, depth + 1)
                or _why_not_constant(expr.orelse, scope, fn, depth + 1))
    if isinstance(expr, ast.Name):
        local = _local_assignments(fn).get(expr.id)
        if local is not None:
            for val in local:
                why = val if isinstance(val, str) else _why_not_constant(val, scope, fn, depth + 1)
                if why:
                    return f"local '{expr.id}', which holds {why}"
            return None
        consts = scope.module(fn).consts
        if expr.id in consts:
            why = _why_not_constant(consts[expr.id], scope, fn, depth + 1)
            return f"module name '{expr.id}', which holds {why}" if why else None
        return f"the runtime value '{expr.id}'"
    if (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)
            and expr.value.id in ("self", "cls") and expr.attr in scope.class_consts):
        why = _why_not_constant(scope.class_consts[expr.attr], scope, fn, depth + 1)
        return f"class attribute '{expr.attr}', which holds {why}" if why else None
    if isinstance(expr, ast.Call):
        f = expr.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "?"
        return f"the result of a call to {name}()"
    return f"a runtime expression ({type(expr).__name__})"


def _is_intervention_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "Intervention") or (
        isinstance(f, ast.Attribute) and f.attr == "Intervention")


def _is_from_dict(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_dict"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "Intervention")


def _type_of(call: ast.Call, scope: _Scope, fn: Func) -> str | None:
    """The intervention type of an ``Intervention(...)`` call: a type name, or None when unknown."""
    expr = next((k.value for k in call.keywords if k.arg == "type"), call.args[0] if call.args else None)
    if expr is None:
        return "NOOP"  # the dataclass default
    consts = scope.module(fn).consts
    if isinstance(expr, ast.Name) and expr.id in consts:
        expr = consts[expr.id]
    if isinstance(expr, ast.Attribute) and expr.attr in _TYPE_NAMES:
        return expr.attr
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and expr.value.upper() in _TYPE_NAMES:
        return expr.value.upper()
    return None


def _context_arg(call: ast.Call) -> ast.expr | None:
    kw = next((k.value for k in call.keywords if k.arg == "context_text"), None)
    if kw is None and len(call.args) > _CONTEXT_POS:
        return call.args[_CONTEXT_POS]
    return kw


def _callee(call: ast.Call, scope: _Scope, fn: Func) -> Func | None:
    """The PF's own method (``self.x()``) or module function (``x()``) a call in ``fn`` runs, if it is one."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
        return scope.methods.get(f.attr)
    if isinstance(f, ast.Name):
        return scope.function(fn, f.id)
    return None


def _reachable(start: Func, scope: _Scope) -> list[Func]:
    """``start`` plus the methods (``self.x()``) and module functions (``x()``) it calls, transitively."""
    order, todo, seen = [], [start], {id(start)}
    while todo:
        fn = todo.pop()
        order.append(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            target = _callee(node, scope, fn)
            if target is not None and id(target) not in seen:
                seen.add(id(target))
                todo.append(target)
    return order


def analyse_source(source: str, skill_id: str | None = None, path: str = "<string>") -> EquivalenceReport:
    """The A+B verdict for the PF registered as ``skill_id`` (or the first ``@register_pf`` class)."""
    rep = EquivalenceReport(skill_id=skill_id or "", path=path)
    try:
        tree = parse_python(source)
    except SyntaxError as e:
        rep.reasons.append(f"source does not parse: {e.msg} (line {e.lineno})")
        return rep
    found = find_pf_class(tree, skill_id)
    if found is None:
        rep.reasons.append(f"no @register_pf({skill_id!r}) class" if skill_id else "no @register_pf class")
        return rep
    rep.skill_id = found.skill_id
    scope = _Scope(found)
    intervene = scope.methods.get("intervene")
    if intervene is None:
        rep.reasons.append("A: the class defines no intervene method")
        return rep
    types: set[str] = set()
    why_not_a: list[str] = []
    why_not_b: list[str] = []
    n_calls = 0
    for fn in _reachable(intervene, scope):
        for node in ast.walk(fn):
            if _is_from_dict(node):
                why_not_a.append(f"{scope.where(fn, node)}: Intervention.from_dict - type not statically known")
                continue
            if isinstance(node, ast.Assign):  # iv.type = ... / iv.context_text = ...
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and t.attr == "type":
                        why_not_a.append(f"{scope.where(fn, node)}: intervention type assigned after construction")
                    if isinstance(t, ast.Attribute) and t.attr == "context_text":
                        why = _why_not_constant(node.value, scope, fn)
                        if why:
                            why_not_b.append(f"{scope.where(fn, node)}: context_text set to {why}")
                continue
            if not _is_intervention_call(node):
                continue
            n_calls += 1
            kind = _type_of(node, scope, fn)
            if kind is None:
                why_not_a.append(f"{scope.where(fn, node)}: intervention type not statically known")
            else:
                types.add(kind)
                if kind == "MODIFY_ACTION":
                    why_not_a.append(f"{scope.where(fn, node)}: constructs MODIFY_ACTION")
            if kind != "NOOP":
                why = _why_not_constant(_context_arg(node), scope, fn) if _context_arg(node) is not None else None
                if why:
                    why_not_b.append(f"{scope.where(fn, node)}: context_text is {why}")
    if n_calls == 0 and not why_not_a:
        why_not_a.append("intervene constructs no Intervention")
    rep.types = sorted(types)
    rep.a, rep.b = not why_not_a, not why_not_b
    rep.reasons = [f"A: {r}" for r in why_not_a] + [f"B: {r}" for r in why_not_b]
    return rep


def only_modifies(source: str, skill_id: str | None = None) -> bool:
    """True when every value ``intervene`` can return is provably a ``MODIFY_ACTION``.

    Proven path by path: each ``return`` in ``intervene`` must be an ``Intervention(...)`` call
    whose type is statically MODIFY_ACTION, or a call of a module function / ``self`` method
    that passes the same test. Anything else (a variable, a module-level constant, an imported
    helper, a bare ``return``, ``from_dict``) answers False. The dispatcher uses it to skip, after
    a rewrite was applied on a step, PFs whose own rewrite could not be applied (one per step).
    """
    try:
        tree = parse_python(source)
    except SyntaxError:
        return False
    found = find_pf_class(tree, skill_id)
    if found is None:
        return False
    scope = _Scope(found)
    intervene = scope.methods.get("intervene")
    return intervene is not None and _returns_only_modify(intervene, scope, set())


def _returns_only_modify(fn: Func, scope: _Scope, seen: set[int]) -> bool:
    seen.add(id(fn))
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if not returns:
        return False
    for ret in returns:
        v = ret.value
        if v is None or not isinstance(v, ast.Call):
            return False
        if _is_intervention_call(v):
            if _type_of(v, scope, fn) != "MODIFY_ACTION":
                return False
            continue
        target = _callee(v, scope, fn)
        if target is None or id(target) in seen or not _returns_only_modify(target, scope, seen):
            return False
    return True


def _declared(folder: Path) -> PFDeclaration | None:
    try:
        return load_skill(folder).pf
    except SkillFormatError:
        return None


def analyse_file(pf_path: Path, skill_id: str | None = None) -> EquivalenceReport:
    try:
        source = read_text(pf_path)
    except SkillFormatError as e:
        return EquivalenceReport(skill_id=skill_id or pf_path.parent.name, path=str(pf_path), reasons=[str(e)])
    return analyse_source(source, skill_id, str(pf_path))


def analyse_declaration(decl: PFDeclaration, skill_id: str, path: str = "") -> EquivalenceReport:
    """A+B of a declared PF (``hasp.pf.declaration``), read off its fields: (A) it injects rather
    than rewrites; (B) its text has no ``{source}`` placeholder, so it is a constant."""
    rep = EquivalenceReport(skill_id=skill_id, path=path)
    if decl.rewrite is not None:
        rep.types, rep.b = ["MODIFY_ACTION"], True  # B holds vacuously: no text is injected
        rep.reasons.append(f"constructs MODIFY_ACTION (declared rewrite to {decl.rewrite.action})")
        return rep
    rep.types, rep.a = ["INJECT_CONTEXT"], True
    fields = [name for _, name, _, _ in string.Formatter().parse(decl.inject or "") if name is not None]
    rep.b = not fields
    if fields:
        rep.reasons.append(f"injected text fills {{{'}, {'.join(fields)}}} at run time")
    return rep


def analyse_library(root: Path, *, include_generated: bool = True) -> list[EquivalenceReport]:
    """A+B for the active version of every skill under ``root`` (sorted by skill id).

    A skill without ``pf.py`` or a declared PF is reported as not A+B (a prompt-only skill, not a PF).
    """
    out = []
    for base, (_version, folder, _generated) in sorted(active_versions(root, include_generated).items()):
        pf_path = folder / "pf.py"
        decl = _declared(folder)
        if decl is not None:
            out.append(analyse_declaration(decl, base, f"{folder}/{HASP_FILE}"))
            continue
        if not present(pf_path):
            out.append(EquivalenceReport(skill_id=base, path=str(folder), reasons=["no pf.py (prompt-only skill)"]))
            continue
        out.append(analyse_file(pf_path, base))
    return out
