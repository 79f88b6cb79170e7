"""Static AST policy for untrusted (generated) PF code.

This is the first of three layers that keep a candidate PF contained:

1. **this policy** — rejects code that imports anything outside a small
   allow-list, calls the dynamic-execution builtins, touches dunder / frame /
   code internals, or tries to patch the PF runtime;
2. **the restricted runtime** in ``hasp.pf.sandbox_driver`` — a safe builtins
   dict, an ``__import__`` that only hands out trimmed proxy modules, and a
   guarded ``getattr``;
3. **the OS boundary** (``hasp.sandbox.lockdown``) — a separate process under another uid, with
   rlimits, its own network namespace, a seccomp allow-list and (where the kernel has it) Landlock
   denying every file; a layer that cannot be installed is a refusal unless the user opted into
   a weaker mode.

Layers 1 and 2 are Python-level and can have holes; layer 3 is what actually
contains a candidate. Layer 1 mainly exists to reject hostile or sloppy code
early, with a readable reason the proposer can act on.

``check_policy(code)`` returns a list of human-readable violations (empty = ok).

It reads every node of the tree: node types are an allow-list (``ALLOWED_NODES``), so
syntax added to the language later is refused until someone reads it here; names bound
or read by ``match`` patterns go through the same rules as attributes and assignments;
``str.format`` / ``format_map`` are only allowed on a literal template without
attribute or index fields (a template built at run time can walk ``{0.__globals__}``).
``_sunder_`` attributes are the enum machinery (``_convert_`` reads any loaded module's
globals by name) and are refused even on ``self`` / ``cls``.

Code the standard library compiles on a PF's behalf (the methods ``dataclasses`` writes
from field names) is checked with the same rules: ``check_policy(text, generated=...)``
names the few dunders and receivers that generator emits, nothing else is relaxed.
The tree's depth is measured iteratively and bounded before the recursive visitor runs,
so no input can make the check itself crash.

Why a hand-written checker rather than RestrictedPython: RestrictedPython compiles a
rewritten tree with guard calls inserted (``_getattr_``, ``_getitem_``, ``_write_``) and
its maintainers say it is not a sandbox; we do not rewrite candidate code (what is
validated is what runs), we only need to refuse, and the OS layer is the real boundary.
We take its design — an explicit visit per allowed node type, everything else refused,
and its ``safer_getattr`` rule that ``str.format`` is unsafe — without the dependency.
"""

from __future__ import annotations

import ast
import re

from hasp.pyast import parse_python

#: stdlib modules a PF may import (and, for dotted names, their listed submodules)
ALLOWED_MODULES: frozenset[str] = frozenset({
    "re", "math", "string", "collections", "collections.abc", "itertools", "functools",
    "typing", "dataclasses", "json", "statistics", "difflib", "enum", "__future__",
})

#: the names the sandbox preamble provides (the PF interface)
PREAMBLE_NAMES: frozenset[str] = frozenset({
    "ProgramFunction", "Intervention", "InterventionType", "register_pf", "Teacher",
})

#: hasp modules a PF may import the preamble names from (served by the preamble, not the real modules)
HASP_MODULES: frozenset[str] = frozenset({
    "hasp", "hasp.pf", "hasp.pf.base", "hasp.pf.intervention", "hasp.pf.registry",
})

#: builtins a PF may neither call nor name
FORBIDDEN_NAMES: frozenset[str] = frozenset({
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "input",
    "breakpoint", "exit", "quit", "memoryview", "help", "copyright", "credits", "license",
    "__builtins__", "__builtin__", "__loader__", "__spec__", "__build_class__", "__file__",
    "__cached__", "__package__", "__path__", "__subclasses__", "__globals__", "__code__",
    "__dict__", "__class__", "__bases__", "__mro__", "__closure__", "__func__", "__self__",
})

#: dunder names that may appear as plain names
ALLOWED_DUNDER_NAMES: frozenset[str] = frozenset({"__name__"})
#: dunder names that may be *assigned* in a class body
ALLOWED_CLASS_DUNDER_STORES: frozenset[str] = frozenset({"__slots__", "__doc__"})
#: the only dunder attribute that may be accessed (``super().__init__()``)
ALLOWED_DUNDER_ATTRS: frozenset[str] = frozenset({"__init__"})

#: non-dunder attributes that reach interpreter internals (frames, code objects, MRO)
UNSAFE_ATTRS: frozenset[str] = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "cr_frame", "cr_code", "cr_await",
    "cr_origin", "ag_frame", "ag_code", "ag_await", "f_back", "f_builtins", "f_code",
    "f_globals", "f_locals", "f_trace", "f_lasti", "tb_frame", "tb_next", "tb_lasti",
    "co_code", "co_consts", "co_names", "func_globals", "func_code", "mro", "get_field",
    "format_field", "get_type_hints", "ForwardRef", "_evaluate", "f_lineno", "Formatter", "vformat",
})

#: runtime objects that must never be patched or shadowed
PROTECTED_NAMES: frozenset[str] = frozenset({
    "Dispatcher", "DispatchResult", "Fired", "ProgramFunction", "Intervention",
    "InterventionType", "register_pf", "SandboxedPF", "REGISTRY",
})

#: magic hooks that would run candidate code at surprising times (GC, attribute lookup, class creation)
FORBIDDEN_METHODS: frozenset[str] = frozenset({
    "__del__", "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__reduce__",
    "__reduce_ex__", "__init_subclass__", "__set_name__", "__class_getitem__", "__instancecheck__",
    "__subclasscheck__", "__mro_entries__", "__prepare__", "__getstate__", "__setstate__",
    "__format__", "__index__",
})

#: names ``getattr``-style builtins are checked on when given a literal attribute name
ATTR_BUILTINS: frozenset[str] = frozenset({"getattr", "setattr", "delattr", "hasattr"})

MAX_CODE_CHARS = 100_000
MAX_AST_NODES = 20_000
#: deepest nesting of AST nodes accepted; real PF code stays far below it, and it keeps
#: the recursive visitor (about two frames per level) well inside the interpreter's limit
MAX_AST_DEPTH = 100

#: the node types a PF may contain; anything else (async code, await, new syntax) is refused
ALLOWED_NODES: frozenset[type] = frozenset({
    ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If,
    ast.With, ast.withitem, ast.Raise, ast.Try, ast.ExceptHandler, ast.Assert, ast.Delete,
    ast.Pass, ast.Break, ast.Continue, ast.Return, ast.FunctionDef, ast.ClassDef, ast.Lambda,
    ast.arguments, ast.arg, ast.keyword, ast.Import, ast.ImportFrom, ast.alias, ast.Global,
    ast.Nonlocal, ast.Yield, ast.YieldFrom,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Dict, ast.Set, ast.List, ast.Tuple,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Compare,
    ast.Call, ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.Starred, ast.Name,
    ast.NamedExpr, ast.JoinedStr, ast.FormattedValue,
    ast.Load, ast.Store, ast.Del,
    ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.MatMult, ast.Div, ast.Mod, ast.Pow,
    ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.FloorDiv,
    ast.Invert, ast.Not, ast.UAdd, ast.USub,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn,
    ast.Match, ast.match_case, ast.MatchValue, ast.MatchSingleton, ast.MatchSequence,
    ast.MatchMapping, ast.MatchClass, ast.MatchStar, ast.MatchAs, ast.MatchOr,
}) | frozenset(getattr(ast, n) for n in ("TryStar",) if hasattr(ast, n))

#: str methods that read attributes/items of their arguments as the template says
FORMAT_METHODS: frozenset[str] = frozenset({"format", "format_map"})

# "{0.__class__}" / "{x[__globals__]}": str.format walks attributes of its arguments
_FORMAT_DUNDER = re.compile(r"\{[^{}]*(\.|\[)\s*_")
# a dunder identifier inside a string: "__builtins__", "__globals__" used as keys or names
_DUNDER_IN_STR = re.compile(r"__[A-Za-z][A-Za-z0-9_]*?__")
_HARMLESS_DUNDER_STR = frozenset({"__init__", "__name__", "__main__"})


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def is_sunder(name: str) -> bool:
    """``_name_``: enum's internal protocol (``_convert_``, ``_member_map_``, ...)."""
    return len(name) > 2 and name[0] == name[-1] == "_" and name[1] != "_" and name[-2] != "_"


#: what ``dataclasses`` writes into the methods it compiles from field names (Python 3.11)
DATACLASS_GENERATED = {
    "dunders": frozenset({
        "__create_fn__", "__dataclass_builtins_object__", "__dataclass_self__", "__class__",
        "__qualname__", "__setattr__", "__delattr__", "__post_init__", "__init__", "__repr__",
        "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
    }),
    "private_receivers": frozenset({"other", "__dataclass_self__"}),
}


def _template_walks(template: str) -> bool:
    """True when a ``str.format`` template has a field with attribute or index access
    (``{0.x}``, ``{a[k]}``) or cannot be parsed (then it is refused as well)."""
    import string

    try:
        for _, field, spec, _ in string.Formatter().parse(template):
            for part in (field, spec):
                if part and ("." in part.split(":")[0] or "[" in part):
                    return True
            if spec and "{" in spec and _template_walks(spec):
                return True
    except (ValueError, TypeError):
        return True
    return False


def _tree_depth(tree: ast.AST) -> int:
    """Deepest node nesting, measured without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if d > deepest:
            deepest = d
            if d > MAX_AST_DEPTH:
                return d
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))
    return deepest


def _root_name(node: ast.AST) -> str | None:
    """``a.b.c`` / ``a[0].b`` → ``a``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _PolicyVisitor(ast.NodeVisitor):
    def __init__(self, generated: dict | None = None) -> None:
        extra = (generated or {}).get("dunders", frozenset())
        self.dunder_names = ALLOWED_DUNDER_NAMES | extra
        self.dunder_attrs = ALLOWED_DUNDER_ATTRS | extra
        self.forbidden_methods = FORBIDDEN_METHODS - extra
        self.private_receivers = frozenset({"self", "cls"}) | (generated or {}).get("private_receivers", frozenset())
        self.violations: list[str] = []
        self.module_aliases: set[str] = set()  # names bound to imported modules
        self._class_depth = 0
        self._func_depth = 0
        self._format_ok: set[int] = set()  # id() of ``"literal".format`` attributes that are calls

    # -------------------------------------------------------------- helpers
    def bad(self, node: ast.AST, msg: str) -> None:
        line = getattr(node, "lineno", "?")
        self.violations.append(f"line {line}: {msg}")

    def _check_binding(self, node: ast.AST, name: str, what: str) -> None:
        if name in PROTECTED_NAMES:
            self.bad(node, f"{what} rebinds protected runtime name {name!r}")

    # -------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            mod = alias.name
            if mod in HASP_MODULES:
                pass
            elif mod not in ALLOWED_MODULES:
                self.bad(node, f"import of {mod!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_MODULES - {'__future__'}))})")
            bound = alias.asname or mod.split(".")[0]
            self._check_binding(node, bound, "import")
            self.module_aliases.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level:
            self.bad(node, "relative imports are not allowed")
            return
        if mod in HASP_MODULES:
            for alias in node.names:
                if alias.name not in PREAMBLE_NAMES and f"{mod}.{alias.name}" not in HASP_MODULES:
                    self.bad(node, f"from {mod} import {alias.name}: only {sorted(PREAMBLE_NAMES)} are provided")
                elif alias.asname and alias.asname != alias.name:
                    self._check_binding(node, alias.asname, "import alias")
            return
        if mod not in ALLOWED_MODULES:
            self.bad(node, f"import from {mod!r} is not allowed")
            return
        for alias in node.names:
            if alias.name == "*":
                self.bad(node, f"from {mod} import * is not allowed")
                continue
            if alias.name.startswith("_") and mod != "__future__":
                self.bad(node, f"import of private name {mod}.{alias.name} is not allowed")
            if alias.name in UNSAFE_ATTRS:
                self.bad(node, f"import of {mod}.{alias.name} is not allowed")
            self._check_binding(node, alias.asname or alias.name, "import")
            if f"{mod}.{alias.name}" in ALLOWED_MODULES:
                self.module_aliases.add(alias.asname or alias.name)

    # -------------------------------------------------------------- names / attributes
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in FORBIDDEN_NAMES:
            self.bad(node, f"use of {name!r} is not allowed")
        elif _is_dunder(name) and name not in self.dunder_names:
            in_class_store = (isinstance(node.ctx, ast.Store) and self._class_depth and not self._func_depth
                              and name in ALLOWED_CLASS_DUNDER_STORES)
            if not in_class_store:
                self.bad(node, f"use of dunder name {name!r} is not allowed")
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not self._func_depth and not self._class_depth:
            self._check_binding(node, name, "assignment")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if _is_dunder(attr):
            if attr not in self.dunder_attrs:
                self.bad(node, f"access to dunder attribute {attr!r} is not allowed")
            elif isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bad(node, f"assignment to dunder attribute {attr!r} is not allowed")
        elif attr in UNSAFE_ATTRS:
            self.bad(node, f"access to interpreter-internal attribute {attr!r} is not allowed")
        elif is_sunder(attr):
            self.bad(node, f"access to enum-internal attribute {attr!r} is not allowed")
        elif attr.startswith("_"):
            base = node.value
            ok = isinstance(base, ast.Name) and base.id in self.private_receivers
            if not ok:
                self.bad(node, f"private attribute {attr!r} may only be accessed on self/cls")
        elif attr in FORMAT_METHODS and id(node) not in self._format_ok:
            self.bad(node, f".{attr} is only allowed as a direct call on a string literal without "
                           "attribute or index fields")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root_name(node)
            if root in PROTECTED_NAMES:
                self.bad(node, f"patching {root}.{attr} is not allowed")
            elif root in self.module_aliases:
                self.bad(node, f"patching module attribute {root}.{attr} is not allowed")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and _root_name(node) in PROTECTED_NAMES:
            self.bad(node, f"patching {_root_name(node)}[...] is not allowed")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            if _FORMAT_DUNDER.search(node.value):
                self.bad(node, "format string walks into private/dunder attributes")
            bad = sorted({m for m in _DUNDER_IN_STR.findall(node.value) if m not in _HARMLESS_DUNDER_STR})
            if bad:
                self.bad(node, f"string mentions interpreter internals {bad}")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self.generic_visit(node)

    # -------------------------------------------------------------- calls
    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Name):
            if fn.id in ATTR_BUILTINS and len(node.args) >= 2:
                target, name = node.args[0], node.args[1]
                on_self = isinstance(target, ast.Name) and target.id in ("self", "cls")
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)) and not on_self:
                    self.bad(node, f"{fn.id}() with a computed attribute name is only allowed on self/cls")
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    n = name.value
                    if n.startswith("_") and not (isinstance(target, ast.Name) and target.id in ("self", "cls")
                                                  and not _is_dunder(n) and not is_sunder(n)):
                        self.bad(node, f"{fn.id}(..., {n!r}) is not allowed")
                    elif n in UNSAFE_ATTRS:
                        self.bad(node, f"{fn.id}(..., {n!r}) is not allowed")
                if fn.id in ("setattr", "delattr") and _root_name(target) in PROTECTED_NAMES:
                    self.bad(node, f"{fn.id} on {_root_name(target)} is not allowed")
                if fn.id in ("setattr", "delattr") and _root_name(target) in self.module_aliases:
                    self.bad(node, f"{fn.id} on module {_root_name(target)} is not allowed")
            if fn.id in ATTR_BUILTINS and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value in FORMAT_METHODS:
                    self.bad(node, f"{fn.id}(..., {name.value!r}) is not allowed")
        elif isinstance(fn, ast.Attribute) and fn.attr in FORMAT_METHODS:
            recv = fn.value
            if isinstance(recv, ast.Constant) and isinstance(recv.value, str) and not _template_walks(recv.value):
                self._format_ok.add(id(fn))
        self.generic_visit(node)

    # -------------------------------------------------------------- match patterns
    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # ``case C(attr=p)`` reads ``subject.attr``: the same rules as ``subject.attr``
        for attr in node.kwd_attrs:
            if _is_dunder(attr) or attr in UNSAFE_ATTRS or attr.startswith("_") or attr in FORMAT_METHODS:
                self.bad(node, f"match pattern reads attribute {attr!r}, which is not allowed")
        self.generic_visit(node)

    def _pattern_name(self, node: ast.AST, name: str | None) -> None:
        if name is None:
            return
        if name in FORBIDDEN_NAMES or _is_dunder(name):
            self.bad(node, f"match pattern binds {name!r}, which is not allowed")
        if not self._func_depth and not self._class_depth:
            self._check_binding(node, name, "match pattern")

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        self._pattern_name(node, node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        self._pattern_name(node, node.name)
        self.generic_visit(node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self._pattern_name(node, node.rest)
        self.generic_visit(node)

    # -------------------------------------------------------------- scopes / statements
    def visit_Global(self, node: ast.Global) -> None:
        for n in node.names:
            if n in PROTECTED_NAMES or n in PREAMBLE_NAMES or _is_dunder(n) or n in self.module_aliases:
                self.bad(node, f"global {n} (a runtime/module name) is not allowed")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        for n in node.names:
            if n in PROTECTED_NAMES or n in PREAMBLE_NAMES or _is_dunder(n):
                self.bad(node, f"nonlocal {n} (a runtime name) is not allowed")

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in self.forbidden_methods:
            self.bad(node, f"defining {node.name} is not allowed")
        if not self._class_depth and not self._func_depth:
            self._check_binding(node, node.name, "def")
        for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                  *([node.args.vararg] if node.args.vararg else []),
                  *([node.args.kwarg] if node.args.kwarg else [])]:
            if a.arg in FORBIDDEN_NAMES or (_is_dunder(a.arg) and a.arg not in self.dunder_names):
                self.bad(node, f"parameter name {a.arg!r} is not allowed")
        for d in node.decorator_list:
            self.visit(d)
        self.visit(node.args)
        if node.returns:
            self.visit(node.returns)
        self._func_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self._func_depth -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._func_depth += 1
        self.generic_visit(node)
        self._func_depth -= 1

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if not self._class_depth and not self._func_depth:
            self._check_binding(node, node.name, "class")
        for k in node.keywords:
            if k.arg == "metaclass":
                self.bad(node, "custom metaclasses are not allowed")
        for b in [*node.bases, *node.decorator_list, *node.keywords]:
            self.visit(b)
        saved = self._func_depth
        self._func_depth = 0
        self._class_depth += 1
        for stmt in node.body:
            self.visit(stmt)
        self._class_depth -= 1
        self._func_depth = saved

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name and (node.name in PROTECTED_NAMES or _is_dunder(node.name)):
            self.bad(node, f"except ... as {node.name} is not allowed")
        self.generic_visit(node)


def check_policy(code: str, *, generated: dict | None = None) -> list[str]:
    """Return the policy violations of ``code`` (empty list = acceptable).

    A syntax error is reported as a single violation; callers that want to tell
    syntax from policy apart should ``ast.parse`` first. ``generated`` (e.g.
    ``DATACLASS_GENERATED``) is for text a standard-library generator built from a PF's
    names: the extra dunders and private-attribute receivers that generator writes.
    """
    if len(code) > MAX_CODE_CHARS:
        return [f"code too long ({len(code)} > {MAX_CODE_CHARS} chars)"]
    try:
        tree = parse_python(code, mode="exec")
    except SyntaxError as e:
        return [f"syntax error: {e.msg} (line {e.lineno})"]
    except ValueError as e:  # null bytes
        return [f"syntax error: {e}"]
    except (RecursionError, MemoryError):
        return [f"code nests too deeply to parse (limit {MAX_AST_DEPTH} levels)"]
    n_nodes, odd = 0, set()
    for node in ast.walk(tree):  # iterative
        n_nodes += 1
        if type(node) not in ALLOWED_NODES:
            odd.add(type(node).__name__)
    if n_nodes > MAX_AST_NODES:
        return [f"code too large ({n_nodes} AST nodes > {MAX_AST_NODES})"]
    depth = _tree_depth(tree)
    if depth > MAX_AST_DEPTH:
        return [f"code nests too deeply ({depth}+ levels > {MAX_AST_DEPTH})"]
    v = _PolicyVisitor(generated)
    for name in sorted(odd):
        v.violations.append(f"syntax {name} is not allowed in a PF")
    try:
        v.visit(tree)
    except RecursionError:  # unreachable under the depth bound; refuse rather than crash
        return [f"code nests too deeply (limit {MAX_AST_DEPTH} levels)"]
    # de-duplicate, keep order
    seen: set[str] = set()
    return [m for m in v.violations if not (m in seen or seen.add(m))]
