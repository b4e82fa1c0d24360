"""A ``rollback`` response with no command: put an agent's worktree back to the content
its last passing verify run saw.

Theory
------
A passing verify run records the content id of the worktree it ran on (``tree``: the
git tree of its files, protocol/content.py), and ``git add`` in a scratch index stored
that tree's blobs, so the content a verify vouched for is in the object database.  A
rollback compares that tree with the worktree's content now (``git diff-tree``) and,
path by path, restores what changed: a changed or deleted file gets the passed
content back (``git restore --source=TREE --worktree``: the index is not touched, so
nothing is staged), a file added since is removed.  A path another agent holds is never
touched: the caller looks the holders up between ``changes_since`` and ``restore`` (on its
own thread: the registry is not shared with the worker) and records exactly what was
restored and kept.  For an agent on another host the same two steps run there, in its
clone, by its ``lockstep worker`` (work of kind ``restore``), with the other agents'
claims sent along.

Both run git, in a worker thread (the caller's ``trio.to_thread``); raise ``ContentError``
when git cannot read the worktree or the tree is gone (pruned by ``git gc``).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .content import ContentError, _git, content_id

PATHS_LISTED = 50  # paths named in the one-line outcome (the record lists them all)


class Restored(msgspec.Struct, frozen=True, kw_only=True):
    tree: str  # the content restored to
    restored: list[str] = []  # paths given their passed content back
    removed: list[str] = []  # paths added since, removed
    kept: dict[str, str] = {}  # path -> the other agent holding it (not touched)


def changes_since(worktree: Path, tree: str) -> list[tuple[str, str]]:
    """(git status letter, path) of each file that differs between content ``tree`` and
    the worktree now: A added since, M changed, D deleted, T type changed."""
    now = content_id(worktree)
    if now == tree:
        return []
    listing = _git(worktree, "diff-tree", "-r", "--no-renames", "--name-status", "-z", tree, now)
    fields = [f for f in listing.split("\0") if f]
    return list(zip(fields[0::2], fields[1::2]))


def restore(worktree: Path, tree: str, changes: list[tuple[str, str]], kept: dict[str, str]) -> Restored:
    """Undo ``changes`` (from ``changes_since``) except the ``kept`` paths (others hold them)."""
    restored = [path for status, path in changes if path not in kept and status != "A"]
    removed = [path for status, path in changes if path not in kept and status == "A"]
    for start in range(0, len(restored), 200):
        _git(worktree, "restore", f"--source={tree}", "--worktree", "--", *restored[start : start + 200])
    for path in removed:
        try:
            os.remove(Path(worktree, path))
        except FileNotFoundError:
            pass
    return Restored(tree=tree, restored=restored, removed=removed, kept=kept)


def describe(result: Restored, job: str) -> str:
    """The one-line outcome of a rollback."""
    if not (result.restored or result.removed or result.kept):
        return f"nothing to roll back: the worktree already holds what verify run {job} passed on"
    parts = []
    if result.restored:
        parts.append(f"restored {_names(result.restored)}")
    if result.removed:
        parts.append(f"removed {_names(result.removed)} (added since)")
    if result.kept:
        parts.append("left " + ", ".join(f"{path} (held by {holder})" for path, holder in list(result.kept.items())[:PATHS_LISTED]))
    return f"rolled back to what verify run {job} passed on (tree {result.tree[:12]}): " + "; ".join(parts)


def _names(paths: list[str]) -> str:
    shown = ", ".join(paths[:PATHS_LISTED])
    return shown + (f" and {len(paths) - PATHS_LISTED} more" if len(paths) > PATHS_LISTED else "")


__all__ = ["ContentError", "Restored", "changes_since", "describe", "restore"]
