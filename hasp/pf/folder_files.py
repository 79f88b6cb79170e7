"""Read and copy the files of a skill folder, the one defensive way every reader uses.

Why: a skill folder comes from anywhere (a download, a student model, a pull request). A symlink
named ``pf.py`` would put a host file into a validation report or a snapshot; a FIFO named
``hasp.yaml`` blocks ``read()`` forever; a device or a huge file exhausts memory; one non-UTF-8
byte is a ``UnicodeDecodeError`` that names no file. Here each is a ``SkillFormatError`` naming the
file, raised before any content is used: only regular files, opened with ``O_NOFOLLOW |
O_NONBLOCK`` (a symlink fails to open, a FIFO cannot block) and checked with ``fstat`` on the
opened descriptor, at most ``MAX_FILE_BYTES``, decoded as UTF-8. YAML in them is read by
``hasp.bounded`` (no aliases, depth and node caps, bounded integers).
"""

from __future__ import annotations

import copy
import errno
import fnmatch
import functools
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from hasp.bounded import ParseRefused, yaml_load

log = logging.getLogger(__name__)

#: bytes of one skill folder file (the largest seed file is a few KB)
MAX_FILE_BYTES = 256 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class SkillFormatError(ValueError):
    """A skill folder or SKILL.md that cannot be used; the message names the file and the problem."""


def present(path: Path) -> bool:
    """Whether anything sits at ``path`` (a symlink too, even a dangling one), so that a symlinked
    ``pf.py`` is refused by the reader instead of silently treated as absent."""
    return os.path.lexists(path)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: Path) -> int:
    """A descriptor on ``path`` when it is a regular file (raises ``SkillFormatError`` otherwise)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SkillFormatError(f"{path}: is a symbolic link (only regular files are read)") from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing
            raise SkillFormatError(f"{path}: {_kind(os.lstat(path).st_mode)} (only regular files are read)") from None
        raise SkillFormatError(f"{path}: cannot read: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SkillFormatError(f"{path}: is {_kind(mode)} (only regular files are read)")
    return fd


def read_bytes(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The content of the regular file ``path``, at most ``max_bytes`` (more is a refusal)."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise SkillFormatError(f"{path}: {size} bytes (at most {max_bytes})")
        chunks, got = [], 0
        while True:
            chunk = os.read(fd, max_bytes + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > max_bytes:  # grew while being read
                raise SkillFormatError(f"{path}: more than {max_bytes} bytes")
        return b"".join(chunks)
    except OSError as e:
        raise SkillFormatError(f"{path}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)


def read_text(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8; a bad byte is one line naming the file and its offset."""
    data = read_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SkillFormatError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def parse_yaml(text: str, source: str) -> Any:
    """YAML from a skill folder or a reply, bounded (``hasp.bounded``); a refusal names ``source`` and the line.

    A library is re-read at every phase of an epoch (versions, known ids, the active set), and the bounded
    composer costs milliseconds per file, so results are kept per text: each caller gets its own copy."""
    try:
        return copy.deepcopy(_parsed(text))
    except ParseRefused as e:
        raise SkillFormatError(f"{source}: invalid YAML: {e}") from None


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Any:
    return yaml_load(text)


#: a skill folder's tree as copies and hashes walk it: deeper, wider or larger is refused, never
#: followed (a deep tree once crashed the snapshot and the library hash by recursion)
MAX_TREE_DEPTH = 12
MAX_TREE_ENTRIES = 5000
MAX_TREE_BYTES = 32 * 1024 * 1024


def walk_tree(root: Path, skip: tuple[str, ...] = ("__pycache__", "*.pyc"), *, max_depth: int = MAX_TREE_DEPTH,
              max_entries: int = MAX_TREE_ENTRIES) -> tuple[list[Path], list[Path], list[str]]:
    """``(directories, regular files, refusals)`` below ``root``, sorted, walked with an explicit stack
    (no recursion) and never through a symlink; names matching ``skip`` (fnmatch) are left out
    silently, a symlink, a special file, a level past ``max_depth`` or an entry past ``max_entries``
    is left out with a line in ``refusals``."""
    dirs: list[Path] = []
    files: list[Path] = []
    left: list[str] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            left.append(f"{folder}: cannot list: {e.strerror}")
            continue
        for entry in entries:
            if any(fnmatch.fnmatch(entry.name, pat) for pat in skip):
                continue
            seen += 1
            path = Path(entry.path)
            if seen > max_entries:
                left.append(f"{root}: more than {max_entries} entries (the rest not read)")
                return sorted(dirs), sorted(files), left
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 > max_depth:
                    left.append(f"{path}: deeper than {max_depth} levels (not read)")
                    continue
                dirs.append(path)
                stack.append((path, depth + 1))
            elif entry.is_file(follow_symlinks=False):
                files.append(path)
            elif entry.is_symlink():
                left.append(f"{path}: is a symbolic link (not followed)")
            else:
                left.append(f"{path}: not a regular file or folder (not read)")
    return sorted(dirs), sorted(files), left


def copy_folder(src: Path, dst: Path, skip: tuple[str, ...] = ("__pycache__", "*.pyc"),
                max_bytes: int = MAX_TREE_BYTES) -> list[str]:
    """Copy what is inside ``src`` to ``dst``: regular files and directories only (``walk_tree``'s caps).
    A symlink, a special file, a file over ``MAX_FILE_BYTES`` or past ``max_bytes`` in all is left out
    (never a symlink's target), with a logged line; names matching a ``skip`` pattern are left out
    silently. Returns the lines logged."""
    dirs, files, left = walk_tree(src, skip)
    dst.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        (dst / d.relative_to(src)).mkdir(parents=True, exist_ok=True)
    total = 0
    for f in files:
        try:
            size = os.lstat(f).st_size
            if size > MAX_FILE_BYTES or total + size > max_bytes:
                raise SkillFormatError(f"{f}: {size} bytes (a file at most {MAX_FILE_BYTES}, a folder at most "
                                       f"{max_bytes})")
            copy_file(f, dst / f.relative_to(src))
            total += size
        except (SkillFormatError, OSError) as e:
            left.append(f"{e} (not copied)")
    for line in left:
        log.warning(line)
    return left


def copy_file(src: Path, dst: Path) -> None:
    """Copy the regular file ``src`` (never a symlink's target: ``SkillFormatError``) with its times and mode."""
    fd = _open_regular(src)
    with os.fdopen(fd, "rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    shutil.copystat(src, dst, follow_symlinks=False)
