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
from protocol.paths import Pattern, escape, overlaps

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
    return fold(paths)


def fold(paths: Iterable[str], limit: int = MAX_PATHS) -> list[str]:
    """At most ``limit`` entries that still cover every one of ``paths``: over the limit,
    the folders with the most entries are folded into one entry each (``build/``) until
    they fit, a level up when no folder has two.  (Cutting the sorted list instead
    dropped what sorted last: a release of ``src/x.py`` beside 1,000 untracked files
    under ``build/`` said nothing of its changes.)"""
    entries = set(paths)
    while len(entries) > limit:
        groups: dict[str, list[str]] = {}
        for entry in entries:
            names = entry.rstrip("/").split("/")
            if len(names) > 1:
                groups.setdefault("/".join(names[:-1]) + "/", []).append(entry)
        if not groups:
            break
        excess = len(entries) - limit
        chosen = {}
        for folder, members in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
            if excess <= 0 or len(members) < 2:
                break
            chosen[folder] = members
            excess -= len(members) - 1
        for folder, members in (chosen or groups).items():  # none has two: all go a level up
            entries.difference_update(members)
            entries.add(folder)
    return sorted(entries)[:limit]


def touched(patterns: Iterable[Pattern], paths: Iterable[str]) -> list[str]:
    """The ``paths`` that some pattern matches; a folder (``build/``, as ``fold`` names
    one) is touched when some pattern could match a file in it."""
    patterns = list(patterns)
    found = []
    for path in paths:
        try:
            if path.endswith("/"):
                folder = Pattern.parse(escape(path.rstrip("/")) + "/")
                hit = any(overlaps(p, folder) for p in patterns)
            else:
                hit = any(p.matches(path) for p in patterns)
        except PeerError:  # a name the pattern grammar refuses cannot have been claimed
            continue
        if hit:
            found.append(path)
    return found
