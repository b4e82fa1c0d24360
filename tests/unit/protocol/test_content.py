"""protocol.content: a worktree's content id is its files as they are, whenever they
were written (against a real git repository)."""

from __future__ import annotations

import os
import subprocess

from protocol.content import content_id, head_tree


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_an_edit_made_in_the_second_of_the_last_commit_changes_the_content_id(tmp_path):
    """Git trusts an index entry's stat only when the index is older than the file's
    mtime second (racy git).  An agent that commits and edits the same file within one
    second leaves a file whose stat matches its entry; the id must still see the edit.
    The second is made by hand (a past time on the file, its entry and the index), so
    the test does not depend on the clock."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    _git(tmp_path, "config", "core.trustctime", "false")  # an edit's ctime is now: only mtimes can be made equal
    calc = tmp_path / "calc.py"
    calc.write_text("def add(a, b):\n    return a + b\n")
    second = (int(os.stat(calc).st_mtime) - 60) * 10**9  # a minute ago, on a whole second
    os.utime(calc, ns=(second, second))
    _git(tmp_path, "add", "calc.py")
    _git(tmp_path, "commit", "-qm", "add")
    index = tmp_path / ".git" / "index"
    committed = head_tree(tmp_path)
    assert content_id(tmp_path) == committed

    calc.write_text("def add(a, b):\n    return a - b\n")  # the same size
    os.utime(calc, ns=(second, second))  # ... and the same second as its entry
    os.utime(index, ns=(second, second))  # the index written in that second too
    edited = content_id(tmp_path)
    assert edited != committed
    _git(tmp_path, "add", "calc.py")  # what git add -A would store: the edit
    assert edited == _git(tmp_path, "write-tree")
