"""The content identity of a worktree: the git tree id of its files as they are now.

A verify result is about content, not about who announced what: two worktrees (or one
worktree at two moments) with the same files get the same id, and any edit - announced
or not, by an editor, a shell command or a formatter - gives another.

Theory: the id is what ``git write-tree`` would give after ``git add -A``: tracked
files as they are on disk and untracked files git does not ignore; ignored files
(build output, caches, the state directory inside ``.git``) are not content.  It is
computed in a temporary index (``GIT_INDEX_FILE``), started as a copy of the real one
(its times included: git's racy-entry check compares them) so ``git add`` reuses its
stat cache and hashes only files that changed; the real index is only read, never
written.  ``git add`` stores the blobs of changed files in the
object database (loose objects, as ``git stash`` would), which ``git gc`` prunes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

GIT_TIMEOUT = 60.0


class ContentError(OSError):
    """The worktree's content could not be read (not a git worktree, git failed)."""


def _git(worktree: Path | str, *args: str, env: dict | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=worktree, capture_output=True, timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL, env=env,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ContentError(f"git {args[0]} could not run in {worktree}: {exc}") from None
    if done.returncode != 0:
        raise ContentError(f"git {args[0]} failed in {worktree}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode().strip()


def content_id(worktree: Path | str) -> str:
    """The tree id of ``worktree``'s content now (see the module docstring)."""
    top, index = _git(worktree, "rev-parse", "--show-toplevel", "--git-path", "index").splitlines()[:2]
    real_index = Path(worktree, index)  # relative to where git ran; an absolute path stays itself
    with tempfile.TemporaryDirectory(prefix="lockstep-content-") as scratch:
        temporary = Path(scratch, "index")
        try:
            # With its times: git trusts an entry's stat only if the index is older than
            # the file's mtime second (racy git).  A copy made a second later made a file
            # edited in the second of the last commit look unchanged (same size), and its
            # content id the commit's.
            shutil.copy2(real_index, temporary)
        except FileNotFoundError:
            pass  # no index yet (nothing staged ever): git starts an empty one
        except OSError as exc:
            raise ContentError(f"cannot copy the index of {top}: {exc}") from None
        env = {**os.environ, "GIT_INDEX_FILE": str(temporary)}
        _git(top, "add", "--all", "--", ".", env=env)
        return _git(top, "write-tree", env=env)


def head_tree(worktree: Path | str) -> str:
    """The tree id of the commit checked out (``""`` before the first commit)."""
    try:
        return _git(worktree, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
    except ContentError:
        return ""
