"""The integration-branch index against real git repositories in tmp dirs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from coordinator.gitrefs import RefWatcher, default_branch
from coordinator.integration import Change, IntegrationIndex, parse_log
from protocol.gitrefs import git_dirs, head_branch, read_head


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit(cwd: Path, files: dict[str, str], message: str, author: str = "t") -> str:
    for name, text in files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)
    git(cwd, "add", "-A")
    git(cwd, "-c", f"user.name={author}", "-c", "user.email=t@example.com", "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(root, {"a.py": "1\n", "docs/b.md": "1\n"}, "init")
    other = tmp_path / "wt-w1"
    git(root, "worktree", "add", "-q", "-b", "w1", str(other))
    return root, other


def run(fn):
    return trio.run(fn)


def test_reads_heads_from_files_like_git(repo):
    root, other = repo
    assert read_head(root) == git(root, "rev-parse", "HEAD")
    assert read_head(other) == git(other, "rev-parse", "HEAD")
    assert head_branch(other) == "refs/heads/w1"
    git(root, "pack-refs", "--all")  # packed refs only
    assert read_head(other) == git(other, "rev-parse", "HEAD")
    git(other, "checkout", "-q", "--detach")
    assert read_head(other) == git(other, "rev-parse", "HEAD")
    assert git_dirs(root)[1] == git_dirs(other)[1].resolve()


def test_head_unknown_outside_git(tmp_path):
    assert read_head(tmp_path) is None
    (tmp_path / ".git").write_text("garbage")
    assert read_head(tmp_path) is None


def test_default_branch_is_main_worktrees(repo):
    root, _ = repo
    assert default_branch(root / ".git") == "refs/heads/main"
    git(root, "checkout", "-q", "-b", "trunk")
    assert default_branch(root / ".git") == "refs/heads/trunk"


def test_parse_log_keeps_odd_names():
    text = "\x1eabc\x1fw1\x1ffirst\0\na\0b c\0\x1edef\x1fw2\x1fsecond\0\na\0"
    assert parse_log(text) == [(Change("abc", "w1", "first"), ["a", "b c"]), (Change("def", "w2", "second"), ["a"])]


def test_index_follows_main_and_judges_stale_heads(repo):
    root, other = repo
    watcher = RefWatcher(root / ".git")
    base = git(other, "rev-parse", "HEAD")

    async def main():
        await watcher.sync()
        index = watcher.index
        assert index.tip == base and set(index.newest) == {"a.py", "docs/b.md"}
        changed = commit(root, {"a.py": "2\n"}, "change a", author="w2")
        moved = await watcher.sync()
        assert "refs/heads/main" in moved and index.tip == changed
        assert index.newest["a.py"] == Change(changed, "w2", "change a")
        await watcher.ensure_lag(base)
        assert index.stale("a.py", base) == Change(changed, "w2", "change a")
        assert index.stale("docs/b.md", base) is None  # main did not change it since
        assert index.stale("a.py", changed) is None  # the tip itself is fresh
        assert index.stale("a.py", None) is None  # unknown head: no verdict
        git(other, "merge", "-q", "main")
        merged = read_head(other)
        await watcher.sync()
        await watcher.ensure_lag(merged)
        assert index.stale("a.py", merged) is None
        assert index.statistics().rebuilds == 1  # only the first read was from scratch

    run(main)


def test_update_reads_only_the_new_commits(repo):
    root, _ = repo
    watcher = RefWatcher(root / ".git")

    async def main():
        await watcher.sync()
        before = watcher.index.statistics().commits_read
        for i in range(3):
            commit(root, {f"f{i}.py": "x"}, f"c{i}")
        await watcher.sync()
        assert watcher.index.statistics().commits_read - before == 3
        assert await watcher.sync() == []  # nothing moved: a stat, no git

    run(main)


def test_rewritten_branch_is_read_again(repo):
    root, _ = repo
    watcher = RefWatcher(root / ".git")

    async def main():
        await watcher.sync()
        commit(root, {"gone.py": "x"}, "to be dropped")
        await watcher.sync()
        assert "gone.py" in watcher.index.newest
        git(root, "reset", "-q", "--hard", "HEAD~1")
        await watcher.sync()
        assert "gone.py" not in watcher.index.newest
        assert watcher.index.statistics().rebuilds == 2

    run(main)


def test_agent_branches_are_followed(repo):
    root, other = repo
    watcher = RefWatcher(root / ".git")

    async def main():
        await watcher.sync()
        tip = commit(other, {"a.py": "w1\n"}, "w1 work", author="w1")
        moved = await watcher.sync()
        assert moved == ["refs/heads/w1"] and watcher.index.branches["refs/heads/w1"] == tip

    run(main)


def test_unknown_head_is_never_stale(repo):
    root, _ = repo
    watcher = RefWatcher(root / ".git")

    async def main():
        await watcher.sync()
        commit(root, {"a.py": "2\n"}, "change a")
        await watcher.sync()
        await watcher.ensure_lag("0" * 40)
        assert watcher.index.stale("a.py", "0" * 40) is None

    run(main)


def test_lag_cache_is_bounded():
    index = IntegrationIndex("refs/heads/main")
    index.advance("t", [(Change("c", "w", "s"), ["p"])])
    for i in range(5000):
        index.set_lag(f"{i:040d}", frozenset({"c"}))
    assert len(index.lags) <= 4096
    assert index.stale("p", f"{4999:040d}") == Change("c", "w", "s")
