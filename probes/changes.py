"""What a command changed in a git worktree, and undoing it path by path.

An ``autofix`` check (a formatter, a fixer) rewrites files.  To keep it in its agent's
lane, the job runner takes a ``snapshot`` of the worktree before it runs, asks
``changed_paths`` afterwards, and ``undo``es the changes to paths another agent holds.

Theory: a file is *dirty* when ``git status`` lists it (modified, added, deleted or
untracked).  The snapshot keeps the bytes of every dirty file (a clean file's bytes are
in git already).  After the command, a path changed when it is dirty now or was dirty
before, and its bytes differ from what they were: for a path clean before, from the
committed bytes.  A path ignored by git is never seen (build output, caches).  Undo
puts back the snapshot's bytes, or the committed ones (``git checkout``), or removes a
file the command created.  A snapshot holds at most ``SNAPSHOT_LIMIT`` bytes of
content; beyond that a path is kept by hash only and cannot be undone (``undo``
returns False).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import msgspec

from protocol.files import FileTooLarge, NotRegularFile, read_regular, sha256_regular

SNAPSHOT_LIMIT = 64 * 1024 * 1024
GIT_TIMEOUT = 60.0


class Snapshot(msgspec.Struct, frozen=True):
    contents: dict[str, bytes | None]  # dirty path -> its bytes (None: absent)
    digests: dict[str, str | None]  # dirty path -> sha256 of its bytes (None: absent)


def _git(worktree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=worktree, capture_output=True, timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL,
    )


def dirty_paths(worktree: Path) -> list[str]:
    """Repo-relative paths ``git status`` lists in ``worktree`` (untracked files
    one by one, renames as their two paths)."""
    done = _git(worktree, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    if done.returncode != 0:
        raise OSError(f"git status failed in {worktree}: {done.stderr.decode(errors='replace').strip()}")
    return [entry[3:].decode(errors="surrogateescape") for entry in done.stdout.split(b"\0") if len(entry) > 3]


def _hashed(path: Path) -> tuple[str | None, bytes | None]:
    """The file's SHA-256 and bytes: (None, None) when there is no file there (or a
    directory, a FIFO, a device: nothing a formatter rewrites); bytes None when it is
    over ``SNAPSHOT_LIMIT`` (hashed in chunks, never held whole)."""
    try:
        data = read_regular(path, SNAPSHOT_LIMIT)
    except (FileNotFoundError, NotADirectoryError, NotRegularFile):
        return None, None
    except FileTooLarge:
        return sha256_regular(path), None
    return hashlib.sha256(data).hexdigest(), data


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def snapshot(worktree: Path) -> Snapshot:
    contents: dict[str, bytes | None] = {}
    digests: dict[str, str | None] = {}
    kept = 0
    for path in dirty_paths(worktree):
        digest, data = _hashed(worktree / path)
        digests[path] = digest
        if digest is None or (data is not None and kept + len(data) <= SNAPSHOT_LIMIT):
            contents[path] = data
            kept += len(data or b"")
    return Snapshot(contents=contents, digests=digests)


def _committed(worktree: Path, path: str) -> bytes | None:
    done = _git(worktree, "show", f"HEAD:{path}")
    return done.stdout if done.returncode == 0 else None


def changed_paths(worktree: Path, before: Snapshot) -> list[str]:
    """Paths whose bytes differ from ``before`` (see the module docstring), sorted."""
    candidates = set(before.digests) | set(dirty_paths(worktree))
    changed = []
    for path in candidates:
        now = _hashed(worktree / path)[0]
        was = before.digests[path] if path in before.digests else _digest(_committed(worktree, path))
        if now != was:
            changed.append(path)
    return sorted(changed)


def undo(worktree: Path, path: str, before: Snapshot) -> bool:
    """Put ``path`` back as it was in ``before``; False when it cannot be."""
    target = worktree / path
    if path in before.digests:
        if path not in before.contents:
            return False  # over the snapshot's budget: kept by hash only
        data = before.contents[path]
    else:
        data = _committed(worktree, path)  # clean before: the committed bytes, or absent
    if data is None:
        try:
            os.remove(target)
        except FileNotFoundError:
            pass
        return True
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return True
