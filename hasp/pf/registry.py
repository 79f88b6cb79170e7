"""Name → PF class registry, filled by the ``@register_pf`` decorator.

A registry records which module built each PF so a run can log where its skills
came from. Loading a skill folder imports its ``pf.py`` under a scoped registry
(see ``collecting``) so two versions of one skill never overwrite each other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from hasp.pf.base import ProgramFunction

P = TypeVar("P", bound=type[ProgramFunction])

REGISTRY: dict[str, type[ProgramFunction]] = {}
#: per thread: libraries are loaded from several threads at once (SAGE's chain rollouts), and a class
#: registered while one thread imports a pf.py must land in that thread's bucket
_local = threading.local()


def _collectors() -> list[dict[str, type[ProgramFunction]]]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def register_pf(skill_id: str) -> Callable[[P], P]:
    """Class decorator: give the PF its id and make it discoverable."""

    def deco(cls: P) -> P:
        if not (isinstance(cls, type) and issubclass(cls, ProgramFunction)):
            raise TypeError(f"@register_pf({skill_id!r}) must decorate a ProgramFunction subclass")
        cls.skill_id = skill_id
        stack = _collectors()
        target = stack[-1] if stack else REGISTRY
        target[skill_id] = cls
        return cls

    return deco


@contextlib.contextmanager
def collecting() -> Iterator[dict[str, type[ProgramFunction]]]:
    """Collect registrations made inside the block into a fresh dict instead of REGISTRY."""
    bucket: dict[str, type[ProgramFunction]] = {}
    stack = _collectors()
    stack.append(bucket)
    try:
        yield bucket
    finally:
        stack.pop()
