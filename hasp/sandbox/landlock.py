"""Landlock: confine file writes to the child's private directory.

Where the kernel has Landlock, a program under test may write, create and
remove files beneath its own temp dir (and write ``/dev/null``) and nowhere
else; from ABI 4 TCP bind/connect are refused and from ABI 6 signals and
abstract unix sockets are scoped to the sandbox. The seccomp profile is then
the lighter one (``PROGRAM_PROFILE``); without Landlock the strict profile
makes even the temp dir read-only.

A PF worker needs no file at all once it is set up, so ``deny_all_files`` handles every
filesystem right (reading included) and grants none: even code that got past the static
policy and the restricted runtime cannot open a file, and from ABI 6 cannot signal a
process outside its own Landlock domain.

Both children always ask for Landlock: on a kernel without it the layer is missing like
any other (the child refuses, or records it under ``sandbox.allow_weaker``), because
without it a worker running as ``nobody`` can still read every world-readable file.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

# syscall numbers are the same on every architecture; rights from <linux/landlock.h>
_NR_CREATE, _NR_ADD_RULE, _NR_RESTRICT = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_WRITE_RIGHTS = {  # right -> first ABI that knows it
    1 << 1: 1,   # WRITE_FILE
    1 << 4: 1,   # REMOVE_DIR
    1 << 5: 1,   # REMOVE_FILE
    1 << 6: 1,   # MAKE_CHAR
    1 << 7: 1,   # MAKE_DIR
    1 << 8: 1,   # MAKE_REG
    1 << 9: 1,   # MAKE_SOCK
    1 << 10: 1,  # MAKE_FIFO
    1 << 11: 1,  # MAKE_BLOCK
    1 << 12: 1,  # MAKE_SYM
    1 << 13: 2,  # REFER (cross-directory rename/link)
    1 << 14: 3,  # TRUNCATE
}
_FS_EXECUTE = 1 << 0
_FS_READ_RIGHTS = {1 << 2: 1, 1 << 3: 1, 1 << 15: 5}  # READ_FILE, READ_DIR, IOCTL_DEV -> first ABI
_FS_DEVNULL_RIGHTS = (1 << 1) | (1 << 14)    # WRITE_FILE | TRUNCATE on /dev/null
_FS_DEVICE_RIGHTS = (1 << 6) | (1 << 11)     # no device nodes even in the temp dir
_NET_TCP = (1 << 0) | (1 << 1)               # BIND_TCP | CONNECT_TCP (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)                # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> None:
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}")


@lru_cache(maxsize=1)
def abi() -> int:
    """The kernel's Landlock ABI version (< 1: not available)."""
    try:
        return int(_libc().syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return -1


class _Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _restrict(handled: dict[int, int], prot: dict, rules: Callable[[Any, int, int, int], None]) -> int:
    """Create a ruleset handling ``handled`` rights (those the kernel's ABI knows), let ``rules(libc,
    ruleset fd, fs rights, ABI)`` add exceptions, then restrict the calling process; returns the ABI."""
    libc = _libc()
    level = int(libc.syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    if level < 1:
        _fail("landlock unsupported")
    fs = _FS_EXECUTE
    for right, since in handled.items():
        if level >= since:
            fs |= right
    attr = _Attr(fs, _NET_TCP if level >= 4 else 0, _SCOPES if level >= 6 else 0)
    size = 8 if level < 4 else 16 if level < 6 else 24
    rfd = libc.syscall(_NR_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        _fail("landlock_create_ruleset")
    try:
        rules(libc, rfd, fs, level)
        if libc.syscall(_NR_RESTRICT, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            _fail("landlock_restrict_self")
    finally:
        os.close(rfd)
    prot["landlock_net"] = level >= 4
    prot["landlock_scoped"] = level >= 6
    return level


def deny_all_files(prot: dict) -> int:
    """No filesystem access at all for the calling process; returns the ABI (raises OSError)."""
    level = _restrict({**_FS_WRITE_RIGHTS, **_FS_READ_RIGHTS}, prot, lambda *_: None)
    prot["landlock_files"] = "none"
    return level


def restrict_writes_to(workdir: str, prot: dict) -> int:
    """Writes only beneath ``workdir`` (and to /dev/null) for the calling process; returns the ABI."""

    def rules(libc: Any, rfd: int, fs: int, level: int) -> None:
        for path, rights in ((workdir, fs & ~_FS_EXECUTE & ~_FS_DEVICE_RIGHTS),
                             (os.devnull, fs & _FS_DEVNULL_RIGHTS)):
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _Beneath(rights, pfd)
                if libc.syscall(_NR_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    _fail(f"landlock_add_rule({path})")
            finally:
                os.close(pfd)

    return _restrict(_FS_WRITE_RIGHTS, prot, rules)
