"""Try, after the lockdown, what hostile code would try, and report what happened.

Used by the PF probe (``hasp.pf.sandboxed.probe``) to show which layers hold on this
machine (measured, not assumed): fork, a TCP connect, a write outside and inside
the private directory, a read of a world-readable file, and a 2 GB allocation.
"""

from __future__ import annotations

import os


def probe_protections(workdir: str) -> dict[str, str]:
    """Try the things hostile code would try, *after* the lockdown, with the real os module."""
    out: dict[str, str] = {}

    def attempt(name, fn):
        try:
            r = fn()
            out[name] = f"ALLOWED ({r})"
        except BaseException as e:  # noqa: BLE001
            out[name] = f"blocked ({type(e).__name__}: {e})"

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def sock():
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", 9))
        finally:
            s.close()
        return "connected"

    outside = f"/tmp/hasp_sandbox_probe_{os.getpid()}"

    def write_outside():
        try:
            with open(outside, "w") as f:
                f.write("x")
        finally:
            if os.path.exists(outside):  # an empty file can be created when only FSIZE=0 holds
                os.unlink(outside)
        return outside

    def write_workdir():
        p = os.path.join(workdir, "probe.txt")
        with open(p, "w") as f:
            f.write("x")
        return p

    def read_file():
        with open("/etc/passwd") as f:  # world-readable on every Linux host
            return f"{len(f.read())} bytes"

    def big_alloc():
        b = bytearray(2 * 1024 ** 3)
        return len(b)

    attempt("fork", fork)
    attempt("socket_connect", sock)
    attempt("write_outside_workdir", write_outside)
    attempt("write_workdir", write_workdir)
    attempt("read_world_readable_file", read_file)
    attempt("alloc_2GB", big_alloc)
    return out

