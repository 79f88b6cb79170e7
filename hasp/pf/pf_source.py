"""Read a PF's declared facts from its source with ``ast``, without executing it.

Why static: generated PF code is untrusted and only ever runs in the sandbox, yet
listing or comparing skills (``hasp skills``, the A+B check) needs its class
attributes. Parsing answers that for seed and generated code alike, with no
process start and no import side effects.

A PF class may inherit from a shared base in the project (``hasp.pf.base``, a
domain's ``pf_bases``): those are followed by reading the base's module source from
the installed ``hasp`` package, never by importing it, so the attributes and
methods a PF inherits count as its own.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hasp.pyast import parse_python

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: the runtime's root class: what it defines is the interface, not behaviour to analyse
_ROOT_CLASS = "ProgramFunction"

#: class attributes of ``ProgramFunction`` a listing shows, with the base-class defaults
PF_ATTR_DEFAULTS: dict[str, Any] = {"needs_teacher": False, "max_fires": None, "handler_kind": None,
                                     "watches": None}


@dataclass
class PFClass:
    """The PF class found in a source: its node, registered id, literal class attributes
    (inherited ones included) and its class chain, most derived first, each with its module."""

    node: ast.ClassDef
    skill_id: str
    attrs: dict[str, Any]
    chain: list[tuple[ast.ClassDef, ast.Module]] = field(default_factory=list)


#: dotted name of each project module parsed here, by ``id`` of its tree (trees are cached, so stable)
_MODULE_NAMES: dict[int, str] = {}


@lru_cache(maxsize=64)
def _project_module(dotted: str) -> ast.Module | None:
    """The parsed source of a ``hasp`` module, located on disk (not imported)."""
    parts = dotted.split(".")
    if parts[0] != "hasp":
        return None
    base = _PACKAGE_ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if parts[1:] and path.is_file():
            tree = parse_python(path.read_text(encoding="utf-8"))
            _MODULE_NAMES[id(tree)] = dotted
            return tree
    return None


def module_name(tree: ast.Module) -> str | None:
    """The dotted name of a project module this module read, None for the PF's own source."""
    return _MODULE_NAMES.get(id(tree))


def find_definition(tree: ast.Module, name: str, kinds: tuple[type, ...] = (ast.ClassDef,),
                    depth: int = 0) -> tuple[Any, ast.Module] | None:
    """The class or function ``name`` as seen from ``tree``: defined there, or imported from a
    project module (followed through re-exports); with the module that defines it."""
    for node in tree.body:
        if isinstance(node, kinds) and node.name == name:
            return node, tree
    if depth > 5:
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    mod = _project_module(node.module)
                    return find_definition(mod, alias.name, kinds, depth + 1) if mod is not None else None
    return None


def class_chain(cls: ast.ClassDef, tree: ast.Module) -> list[tuple[ast.ClassDef, ast.Module]]:
    """``cls`` and the project classes it inherits from, most derived first (left-first, no repeats)."""
    out: list[tuple[ast.ClassDef, ast.Module]] = []

    def walk(c: ast.ClassDef, t: ast.Module) -> None:
        if any(c is seen for seen, _ in out) or c.name == _ROOT_CLASS:
            return
        out.append((c, t))
        for b in c.bases:
            name = b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
            found = find_definition(t, name) if name and name != _ROOT_CLASS else None
            if found is not None:
                walk(*found)

    walk(cls, tree)
    return out


def _registered_id(cls: ast.ClassDef) -> str | None:
    for dec in cls.decorator_list:
        if not isinstance(dec, ast.Call):
            continue
        fn = dec.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        if name == "register_pf" and dec.args and isinstance(dec.args[0], ast.Constant) \
                and isinstance(dec.args[0].value, str):
            return dec.args[0].value
    return None


def assignments(body: list[ast.stmt]) -> list[tuple[str, ast.expr | None]]:
    """Every name a statement list binds at its top level, with the expression bound to it
    (None when there is no single one: ``+=``, unpacking a non-tuple, a bare annotation).
    ``a, b = x, y`` binds ``a`` to ``x`` and ``b`` to ``y``."""
    out: list[tuple[str, ast.expr | None]] = []
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            pairs: list[tuple[ast.expr, ast.expr | None]] = [(t, stmt.value) for t in stmt.targets]
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            pairs = [(stmt.target, stmt.value if isinstance(stmt, ast.AnnAssign) else None)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Tuple):
                elts = target.elts
                same = (isinstance(value, ast.Tuple) and len(value.elts) == len(elts)
                        and not any(isinstance(e, ast.Starred) for e in (*elts, *value.elts)))
                values: list[ast.expr | None] = list(value.elts) if same else [None] * len(elts)  # type: ignore[union-attr]
                out += [(e.id, v) for e, v in zip(elts, values) if isinstance(e, ast.Name)]
            elif isinstance(target, ast.Name):
                out.append((target.id, value))
    return out


def _literal_attrs(cls: ast.ClassDef) -> dict[str, Any]:
    """Class-level assignments of literals (``name = <literal>``, also in a tuple assignment)."""
    out: dict[str, Any] = {}
    for name, value in assignments(cls.body):
        if value is None:
            continue
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, TypeError):
            continue
    return out


def find_pf_class(tree: ast.Module, skill_id: str | None = None) -> PFClass | None:
    """The ``@register_pf`` class (the one for ``skill_id`` when given); None if there is none."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            sid = _registered_id(node)
            if sid is not None and (skill_id is None or sid == skill_id):
                chain = class_chain(node, tree)
                attrs = dict(PF_ATTR_DEFAULTS)
                for c, _ in reversed(chain):
                    attrs.update(_literal_attrs(c))
                return PFClass(node=node, skill_id=sid, attrs=attrs, chain=chain)
    return None


def pf_attrs(source: str, skill_id: str | None = None) -> dict[str, Any]:
    """Declared ``needs_teacher`` / ``max_fires`` / ``handler_kind`` (base defaults when absent).

    Raises ``SyntaxError`` for unparsable code and ``LookupError`` when no PF class is registered.
    """
    found = find_pf_class(parse_python(source), skill_id)
    if found is None:
        raise LookupError(f"no @register_pf({skill_id!r}) class" if skill_id else "no @register_pf class")
    return dict(found.attrs)
