"""Uncommitted changes in a worktree, and which released paths they touch.

A path released (or freed when a session ends) while its changes are not committed is
work another agent will not see from ``main``: Lockstep says so (a warning in the
reply, a ledger event) instead of dropping it silently.  Both sides need this: a
client reads its own worktree before it releases; the coordinator reads an ended
session's worktree.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from protocol.errors import PeerError
from protocol.paths import Pattern

MAX_PATHS = 1000  # sent and recorded at most: a huge dirty tree is named, not listed
GIT_TIMEOUT_S = 5.0


def uncommitted_paths(worktree: str, timeout: float = GIT_TIMEOUT_S) -> list[str] | None:
    """Repo-relative paths with uncommitted changes in ``worktree`` (modified, staged,
    deleted, renamed and untracked files), or None when git cannot tell."""
    try:
        proc = subprocess.run(
            ["git", "-C", worktree, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    paths = []
    for entry in proc.stdout.split(b"\0"):
        if len(entry) > 3:  # "XY path"
            paths.append(entry[3:].decode("utf-8", "surrogateescape"))
    return sorted(set(paths))[:MAX_PATHS]


def touched(patterns: Iterable[Pattern], paths: Iterable[str]) -> list[str]:
    """The ``paths`` that some pattern matches."""
    patterns = list(patterns)
    found = []
    for path in paths:
        try:
            if any(p.matches(path) for p in patterns):
                found.append(path)
        except PeerError:  # a name the pattern grammar refuses cannot have been claimed
            continue
    return found
