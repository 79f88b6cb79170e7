"""Name → PF class registry, filled by the ``@register_pf`` decorator.

A registry records which module built each PF so a run can log where its skills
came from. Loading a skill folder imports its ``pf.py`` under a scoped registry
(see ``collecting``) so two versions of one skill never overwrite each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

from hasp.pf.base import ProgramFunction

P = TypeVar("P", bound=type[ProgramFunction])

REGISTRY: dict[str, type[ProgramFunction]] = {}
_collectors: list[dict[str, type[ProgramFunction]]] = []


def register_pf(skill_id: str) -> Callable[[P], P]:
    """Class decorator: give the PF its id and make it discoverable."""

    def deco(cls: P) -> P:
        if not (isinstance(cls, type) and issubclass(cls, ProgramFunction)):
            raise TypeError(f"@register_pf({skill_id!r}) must decorate a ProgramFunction subclass")
        cls.skill_id = skill_id
        target = _collectors[-1] if _collectors else REGISTRY
        target[skill_id] = cls
        return cls

    return deco


@contextlib.contextmanager
def collecting() -> Iterator[dict[str, type[ProgramFunction]]]:
    """Collect registrations made inside the block into a fresh dict instead of REGISTRY."""
    bucket: dict[str, type[ProgramFunction]] = {}
    _collectors.append(bucket)
    try:
        yield bucket
    finally:
        _collectors.pop()
