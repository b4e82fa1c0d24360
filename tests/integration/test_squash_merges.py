"""Merge holds end when main has the branch's changes, however they got there: a squash
merge or a rebase merge brings them without the branch's commits."""

from __future__ import annotations

import json

from .conftest import cli, wait_until
from .test_merges import FAST, _git, _merge_holds


def _commit(worktree, path, text, message):
    (worktree / path).write_text(text)
    assert _git(worktree, "add", path).returncode == 0
    done = _git(worktree, "commit", "-qm", message)
    assert done.returncode == 0, done.stderr
    return _git(worktree, "rev-parse", "HEAD").stdout.strip()


def _bob_commits_and_releases(repo, changes):
    """bob claims the files, commits each (path, text) in turn, releases: -> the commits."""
    paths = sorted({path for path, _ in changes})
    assert cli("intent", *paths, "--agent", "bob", cwd=repo.other).rc == 0
    commits = [_commit(repo.other, path, text, f"bob: {path}") for path, text in changes]
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert set(_merge_holds(repo)) == set(paths)
    return commits


def _freed_reasons(repo):
    tail = cli("ledger", "tail", "-n", "200", "--json", cwd=repo.root).out.splitlines()
    return [r["data"]["reason"] for r in map(json.loads, tail) if r["kind"] == "merge.freed"]


def test_a_squash_merge_frees_the_merge_holds(repo, coordinator):
    coordinator(*FAST)
    _bob_commits_and_releases(repo, [("src/app.py", "one\n"), ("src/app.py", "two\n"), ("src/b.py", "b\n")])
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 1
    assert _git(repo.root, "merge", "-q", "--squash", "wt-bob").returncode == 0
    assert _git(repo.root, "commit", "-qm", "bob's work (squashed)").returncode == 0
    wait_until(lambda: not _merge_holds(repo), what="the squash merge to free the merge holds")
    assert _freed_reasons(repo) == ["main has its changes (a squash or rebase merge)"]
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    # bob's commits are still not on main, but what they changed is: once he merges main
    # (no conflict: the same changes), writing and releasing again holds nothing
    assert _git(repo.other, "merge", "-q", "--no-edit", "main").returncode == 0
    assert cli("intent", "src/b.py", "--agent", "bob", cwd=repo.other).rc == 0
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert not _merge_holds(repo)


def test_a_squash_merge_frees_the_merge_holds_of_a_deleted_branch(repo, coordinator):
    """The forge deletes the branch after squashing it: the newest held commit stands for it."""
    coordinator(*FAST)
    _bob_commits_and_releases(repo, [("src/app.py", "one\n"), ("src/app.py", "two\n")])
    assert _git(repo.other, "checkout", "-q", "--detach").returncode == 0
    assert _git(repo.root, "branch", "-D", "wt-bob").returncode == 0
    (repo.root / "src" / "app.py").write_text("two\n")
    assert _git(repo.root, "commit", "-qam", "bob's work (squashed on the forge)").returncode == 0
    wait_until(lambda: not _merge_holds(repo), what="the squash merge to free the merge hold")


def test_a_rebase_merge_frees_the_merge_holds(repo, coordinator):
    coordinator(*FAST)
    commits = _bob_commits_and_releases(repo, [("src/app.py", "bob\n"), ("src/b.py", "b\n")])
    _commit(repo.root, "src/main.py", "main moved on\n", "someone else's work")  # no fast-forward
    picked = _git(repo.root, "cherry-pick", *commits)  # what a forge's rebase merge does
    assert picked.returncode == 0, picked.stderr
    wait_until(lambda: not _merge_holds(repo), what="the rebase merge to free the merge holds")
    assert cli("intent", "src/app.py", "src/b.py", "--agent", "alice", cwd=repo.root).rc == 0


def test_main_with_only_part_of_the_branchs_changes_keeps_the_rest_held(repo, coordinator):
    coordinator(*FAST)
    first, _second, other = _bob_commits_and_releases(
        repo, [("src/app.py", "one\n"), ("src/app.py", "two\n"), ("src/b.py", "b\n")]
    )
    # main takes bob's first change to app.py and his b.py, not his second app.py change
    assert _git(repo.root, "cherry-pick", "-n", first, other).returncode == 0
    assert _git(repo.root, "commit", "-qm", "part of bob's work").returncode == 0
    wait_until(lambda: "src/b.py" not in _merge_holds(repo), what="b.py's merge hold to be freed")
    assert "src/app.py" in _merge_holds(repo)  # decided at the same tip as b.py
    refused = cli("intent", "src/app.py", "--agent", "alice", "--json", cwd=repo.root)
    assert refused.rc == 1 and "held until bob's 2 commits touching it reach main" in refused.json["reason"]
