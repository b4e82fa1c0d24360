"""Reading a file that anyone with the worktree controls: only a regular file, and only
as much of it as the reader can hold.

A path in a worktree may be a symlink to ``/dev/zero`` or ``/dev/urandom`` (endless:
read whole, it takes all memory), a FIFO (``open`` blocks until a writer comes, which
may be never), a socket, or a file of many GB (a handoff check of a symlink to
``/dev/zero`` once grew its worker by GBs until the timeout).  So a file is opened without blocking,
checked to be a regular file on the open descriptor (no window for a swap between a
check and the open), and read up to a limit.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

CHUNK = 1 << 20


class NotRegularFile(OSError):
    """The path is a device, a FIFO, a socket or a directory: it has no bytes to read."""


class FileTooLarge(OSError):
    """The regular file holds more than the reader's limit."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit:,} bytes ({size:,})", path)
        self.size = size


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | Path) -> int:
    """A descriptor of the regular file ``path`` (symlinks followed), opened for reading
    without blocking; ``NotRegularFile`` for anything else, ``OSError`` as ``open``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, f"{_kind(mode)}, not a file", str(path))
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: ``FileTooLarge``
    if it holds more (also if it grows past ``limit`` while read)."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLarge(str(path), size, limit)
        chunks, total = [], 0
        while chunk := os.read(fd, min(CHUNK, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(str(path), total, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def sha256_regular(path: str | Path) -> str:
    """The SHA-256 of the regular file ``path``, read in chunks (any size)."""
    fd = open_regular(path)
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)
