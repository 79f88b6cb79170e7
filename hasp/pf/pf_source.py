"""Read a PF's declared facts from its source with ``ast``, without executing it.

Why static: generated PF code is untrusted and only ever runs in the sandbox, yet
listing or comparing skills (``hasp skills``, the A+B check) needs its class
attributes. Parsing answers that for seed and generated code alike, with no
process start and no import side effects.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

#: class attributes of ``ProgramFunction`` a listing shows, with the base-class defaults
PF_ATTR_DEFAULTS: dict[str, Any] = {"needs_teacher": False, "max_fires": None, "handler_kind": None,
                                     "watches": None}


@dataclass
class PFClass:
    """The PF class found in a source: its node, registered id and literal class attributes."""

    node: ast.ClassDef
    skill_id: str
    attrs: dict[str, Any]


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


def _literal_attrs(cls: ast.ClassDef) -> dict[str, Any]:
    """Class-level ``name = <literal>`` / ``name: T = <literal>`` assignments (non-literals skipped)."""
    out: dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        else:
            continue
        try:
            out[target] = ast.literal_eval(value)
        except ValueError:
            continue
    return out


def find_pf_class(tree: ast.Module, skill_id: str | None = None) -> PFClass | None:
    """The ``@register_pf`` class (the one for ``skill_id`` when given); None if there is none."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            sid = _registered_id(node)
            if sid is not None and (skill_id is None or sid == skill_id):
                return PFClass(node=node, skill_id=sid, attrs={**PF_ATTR_DEFAULTS, **_literal_attrs(node)})
    return None


def pf_attrs(source: str, skill_id: str | None = None) -> dict[str, Any]:
    """Declared ``needs_teacher`` / ``max_fires`` / ``handler_kind`` (base defaults when absent).

    Raises ``SyntaxError`` for unparsable code and ``LookupError`` when no PF class is registered.
    """
    found = find_pf_class(ast.parse(source), skill_id)
    if found is None:
        raise LookupError(f"no @register_pf({skill_id!r}) class" if skill_id else "no @register_pf class")
    return dict(found.attrs)
