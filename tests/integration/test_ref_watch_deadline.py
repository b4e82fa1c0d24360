"""The ref watcher's git calls have a deadline: a git that hangs is ended, logged and
tried again; the coordinator keeps serving meanwhile."""

from __future__ import annotations

import os
import shutil

from .conftest import cli, status, wait_until
from .test_merges import FAST, _commit_in, _git, _merge_holds


def _hanging_git(tmp_path, switch):
    """A ``git`` earlier on PATH: while ``switch`` exists, the coordinator's ``git log``
    (it names the repository with ``--git-dir=``) hangs; everything else is git."""
    real = shutil.which("git")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{switch}" ]; then\n'
        '  case "$1 $*" in --git-dir=*" log "*) exec sleep 300 ;; esac\n'
        "fi\n"
        f'exec "{real}" "$@"\n'
    )
    fake.chmod(0o755)
    return bin_dir


def test_a_hung_git_in_the_ref_watcher_is_ended_logged_and_tried_again(repo, coordinator, tmp_path, monkeypatch):
    switch = tmp_path / "hang"
    monkeypatch.setenv("PATH", f"{_hanging_git(tmp_path, switch)}{os.pathsep}{os.environ['PATH']}")
    (repo.root / "lockstep.toml").write_text("[land]\ngit_timeout = 1\n")
    assert _git(repo.root, "add", "lockstep.toml").returncode == 0
    assert _git(repo.root, "commit", "-qm", "a short git deadline").returncode == 0
    coordinator(*FAST)
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    _commit_in(repo.other, "bob's change\n", "bob's change")
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert "src/app.py" in _merge_holds(repo)
    switch.touch()  # from now on the watcher's git log hangs
    assert _git(repo.root, "merge", "-q", "wt-bob").returncode == 0
    log = repo.state_dir / "coordinator.log"
    wait_until(lambda: "git log timed out after 1 s" in log.read_text(), timeout=20, what="the timeout in the log")
    # still serving, and judging on what it knew: the hold waits for the watcher
    assert "src/app.py" in _merge_holds(repo)
    assert cli("intent", "src/other.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert status(repo)["statistics"]["integration"]["branch"] == "main"
    wait_until(lambda: log.read_text().count("timed out after 1 s") >= 2, timeout=20, what="a second try")
    switch.unlink()  # git answers again: the next try catches up and frees the hold
    wait_until(lambda: not _merge_holds(repo), timeout=20, what="the merge hold to be freed after the retry")
    assert "following refs/heads/main again" in log.read_text()
