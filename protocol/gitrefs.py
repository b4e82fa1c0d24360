"""Read git refs from the files git keeps, without running git.

Both sides need this and both need it cheap: an agent's client reads its worktree's
``HEAD`` on every intent (spawning ``git rev-parse`` would cost ~2 ms a call), and the
coordinator watches the integration branch's ref by ``stat`` and reads it on change.

Theory (git's on-disk layout, stable since git 2.5):

* A worktree's top holds ``.git``: a directory (the main worktree: the git dir, which
  is also the common dir) or a file ``gitdir: PATH`` (a linked worktree).  A linked
  worktree's git dir holds ``commondir``, the common dir relative to the git dir.
* ``HEAD`` (in the git dir) is ``ref: refs/heads/NAME`` or a detached commit id.
* Branch refs live in the common dir: a loose file ``refs/heads/NAME`` holding the id,
  else a line ``ID refs/heads/NAME`` in ``packed-refs`` (loose wins).

Anything unexpected (reftable, a missing file, a symref chain) answers ``None``: the
caller treats "head unknown" as "no freshness check", never as a crash.
"""

from __future__ import annotations

import os
from pathlib import Path

HEX = frozenset("0123456789abcdef")


def git_dirs(worktree: str | os.PathLike) -> tuple[Path, Path] | None:
    """(git dir, common dir) of the worktree whose top is ``worktree``."""
    dot_git = Path(worktree) / ".git"
    try:
        if dot_git.is_dir():
            git_dir = dot_git
        else:
            text = dot_git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = Path(worktree) / text[len("gitdir:") :].strip()
        try:
            common = git_dir / (git_dir / "commondir").read_text().strip()
        except FileNotFoundError:
            common = git_dir
    except OSError:
        return None
    return git_dir, common


def is_commit_id(text: str) -> bool:
    return len(text) in (40, 64) and set(text) <= HEX


def read_ref(common: str | os.PathLike, name: str) -> str | None:
    """The commit id of ``name`` (``refs/heads/...``) in the common dir, or None."""
    try:
        value = (Path(common) / name).read_text().strip()
        return value if is_commit_id(value) else None
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        pass
    except OSError:
        return None
    return packed_refs(common).get(name)


def packed_refs(common: str | os.PathLike) -> dict[str, str]:
    try:
        text = (Path(common) / "packed-refs").read_text()
    except OSError:
        return {}
    refs = {}
    for line in text.splitlines():
        if not line or line[0] in "#^":
            continue
        commit, _, name = line.partition(" ")
        if is_commit_id(commit):
            refs[name] = commit
    return refs


def symbolic_head(git_dir: str | os.PathLike) -> str | None:
    """``refs/heads/NAME`` that ``HEAD`` points to, or None (detached or unreadable)."""
    try:
        text = (Path(git_dir) / "HEAD").read_text().strip()
    except OSError:
        return None
    return text[len("ref:") :].strip() if text.startswith("ref:") else None


def read_head(worktree: str | os.PathLike) -> str | None:
    """The commit id checked out in ``worktree`` (its top), or None if unknown."""
    dirs = git_dirs(worktree)
    if dirs is None:
        return None
    git_dir, common = dirs
    try:
        text = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    if text.startswith("ref:"):
        return read_ref(common, text[len("ref:") :].strip())
    return text if is_commit_id(text) else None


def merge_heads(worktree: str | os.PathLike) -> list[str]:
    """The commits a merge in progress in ``worktree`` brings (``MERGE_HEAD`` in its git
    dir, one id a line; an octopus merge has several), or [] when no merge is under way.
    Inside git's ``pre-merge-commit`` hook there is no ``MERGE_HEAD`` yet: git names the
    merged commits in ``GITHEAD_<id>`` variables of the hook's environment instead."""
    dirs = git_dirs(worktree)
    if dirs is None:
        return []
    try:
        text = (dirs[0] / "MERGE_HEAD").read_text()
    except OSError:
        return sorted(name[len("GITHEAD_") :] for name in os.environ if name.startswith("GITHEAD_") and is_commit_id(name[len("GITHEAD_") :]))
    return [line.strip() for line in text.splitlines() if is_commit_id(line.strip())]


def head_branch(worktree: str | os.PathLike) -> str | None:
    """The branch (``refs/heads/NAME``) checked out in ``worktree``, or None."""
    dirs = git_dirs(worktree)
    return None if dirs is None else symbolic_head(dirs[0])
