"""``ast.parse`` that gives the same tree in a busy multi-threaded process as in a quiet one.

Why: in CPython 3.11 the depth counter used while turning a parse tree into ``ast`` objects lives in
interpreter-wide state. When a garbage-collector finalizer lets another thread run in the middle of
that conversion and the other thread parses too (a Prefect worker loading a flow's entrypoint beside a
running flow, for instance), the first call fails its balance check with ``SystemError: AST constructor
recursion depth mismatch``. Only the check fails — the counter is set afresh by every call — so parsing
again gives the right tree. Our own calls are serialised by a lock; calls made by other libraries cannot
be, hence the retry.
"""
from __future__ import annotations

import ast
import logging
import threading

log = logging.getLogger(__name__)

#: serialises the package's own parses
_LOCK = threading.Lock()

#: parses tried before the SystemError is let through
ATTEMPTS = 5

_RACE = "recursion depth mismatch"


def parse_python(source: str, mode: str = "exec") -> ast.Module:
    """``ast.parse(source, mode=mode)``, retried when another thread's parse upset the conversion.

    Syntax errors and every other exception pass through unchanged."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with _LOCK:
                return ast.parse(source, mode=mode)
        except SystemError as e:
            if _RACE not in str(e) or attempt == ATTEMPTS:
                raise
            log.warning("ast.parse raced with another thread's parse (%s); parsing again (%d/%d)",
                        e, attempt, ATTEMPTS)
    raise AssertionError("unreachable")
