"""Loopback ports for tests that start servers on a fixed ``llm.port`` (and the student on port + 1)."""

from __future__ import annotations

import socket


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair(start: int = 20000, stop: int = 30000) -> int:
    """A port p with p and p + 1 both free now, so a test does not collide with a server another run
    on the machine has open (a fixed port would)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        first = s.getsockname()[1]
    for p in [first, *range(start, stop, 2)]:
        if p + 1 < 65536 and _free(p) and _free(p + 1):
            return p
    raise RuntimeError("no two adjacent free loopback ports")
