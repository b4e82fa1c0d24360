"""agents.guard: which files a commit or a push touches (real git), and where the hooks
are installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agents import guard
from agents.guard import ZERO_SHA, GuardError, install, pushed_files, staged_files

IDENTITY = ["-c", "user.email=t@example.com", "-c", "user.name=t"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _write(root: Path, path: str, text: str = "x\n") -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    for path in ("src/keep.py", "src/old.py", "src/gone.py", "docs/a.md"):
        _write(root, path, f"{path}\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    return root


# ---------------------------------------------------------------------- pre-commit


def test_staged_files_are_the_added_changed_deleted_ones_and_both_names_of_a_rename(repo: Path):
    _write(repo, "src/new.py")
    _write(repo, "docs/a.md", "changed\n")
    _git(repo, "mv", "src/old.py", "src/renamed.py")
    _git(repo, "rm", "-q", "src/gone.py")
    _write(repo, "src/keep.py", "changed but not staged\n")
    _write(repo, "untracked.txt")
    _git(repo, "add", "src/new.py", "docs/a.md")
    assert sorted(staged_files(repo)) == ["docs/a.md", "src/gone.py", "src/new.py", "src/old.py", "src/renamed.py"]


def test_nothing_staged_is_no_files(repo: Path):
    assert staged_files(repo) == []


def test_odd_file_names_come_through_whole(repo: Path):
    name = "src/with space\tand tab.py"
    _write(repo, name)
    _git(repo, "add", ".")
    assert staged_files(repo) == [name]


def test_staged_files_from_a_second_worktree_are_its_own(repo: Path, tmp_path: Path):
    other = tmp_path / "wt-b"
    _git(repo, "worktree", "add", "-q", str(other))
    _write(other, "src/bob.py")
    _git(other, "add", "src/bob.py")
    assert staged_files(other) == ["src/bob.py"]
    assert staged_files(repo) == []


# ---------------------------------------------------------------------- pre-push


def _commit(root: Path, *paths: str) -> str:
    for path in paths:
        _write(root, path, f"{path} {os.urandom(4).hex()}\n")
    _git(root, "add", *paths)
    _git(root, "commit", "-q", "-m", "change")
    return _git(root, "rev-parse", "HEAD")


def test_an_update_pushes_the_files_changed_since_the_remote_commit(repo: Path):
    base = _git(repo, "rev-parse", "HEAD")
    _commit(repo, "src/a.py")
    head = _commit(repo, "docs/b.md", "src/keep.py")
    line = f"refs/heads/main {head} refs/heads/main {base}\n"
    assert pushed_files(repo, line) == ["docs/b.md", "src/a.py", "src/keep.py"]


def test_a_new_branch_pushes_what_no_remote_branch_has(repo: Path, tmp_path: Path):
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-q", "origin", "main")  # origin/main now has the first commit
    head = _commit(repo, "src/feature.py")
    line = f"refs/heads/topic {head} refs/heads/topic {ZERO_SHA}\n"
    assert pushed_files(repo, line) == ["src/feature.py"]


def test_deleting_a_branch_pushes_no_files_and_junk_lines_are_skipped(repo: Path):
    head = _git(repo, "rev-parse", "HEAD")
    lines = (
        f"(delete) {ZERO_SHA} refs/heads/old {head}\n"
        "not a ref line\n\n"
        f"refs/heads/x --output=/tmp/x refs/heads/x {head}\n"  # never handed to git as an option
        f"refs/heads/x {head} refs/heads/x HEAD~1\n"  # only object names, as git sends them
    )
    assert pushed_files(repo, lines) == []


def test_several_refs_are_merged_and_sorted(repo: Path):
    base = _git(repo, "rev-parse", "HEAD")
    first = _commit(repo, "src/z.py")
    second = _commit(repo, "src/a.py")
    lines = f"refs/heads/x {first} refs/heads/x {base}\nrefs/heads/y {second} refs/heads/y {first}\n"
    assert pushed_files(repo, lines) == ["src/a.py", "src/z.py"]


def test_an_unknown_commit_is_a_guard_error(repo: Path):
    head = _git(repo, "rev-parse", "HEAD")
    with pytest.raises(GuardError):
        pushed_files(repo, f"refs/heads/main {'1' * 40} refs/heads/main {head}\n")


def test_a_remote_tip_we_never_fetched_counts_as_a_new_branch(repo: Path, tmp_path: Path):
    """A force push over a remote branch that moved since the last fetch: git hands the
    hook the remote's tip, which this clone lacks; the push sends what no remote branch
    we know has (git's `..` range failed, refusing the push with git's error)."""
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(repo, "remote", "add", "origin", str(remote))
    _git(repo, "push", "-q", "origin", "main")
    head = _commit(repo, "src/mine.py")
    line = f"refs/heads/main {head} refs/heads/main {'2' * 40}\n"
    assert pushed_files(repo, line) == ["src/mine.py"]


def test_a_git_failure_is_one_line(repo: Path):
    with pytest.raises(GuardError) as failure:
        guard._git(repo, "diff", "--no-such-option")
    assert "\n" not in str(failure.value) and "no-such-option" in str(failure.value)


# ---------------------------------------------------------------------- install


def test_install_writes_both_hooks_into_the_common_hooks_folder(repo: Path, tmp_path: Path):
    other = tmp_path / "wt-b"
    _git(repo, "worktree", "add", "-q", str(other))
    written = install(other)  # from a second worktree: the hooks serve every worktree
    assert written == [(repo / ".git" / "hooks" / hook).resolve() for hook in guard.HOOKS]
    for path in written:
        assert os.access(path, os.X_OK)
        assert f"-m agents.cli guard {guard.GUARD_COMMAND[path.name]}" in path.read_text()
    assert install(repo) == written  # installing again is fine


def test_install_respects_core_hooks_path(repo: Path):
    _git(repo, "config", "core.hooksPath", "githooks")
    written = install(repo)
    assert written == [(repo / "githooks" / hook).resolve() for hook in guard.HOOKS]


def test_a_relative_core_hooks_path_gets_the_hooks_in_every_worktree(repo: Path, tmp_path: Path):
    """git resolves a relative core.hooksPath in the worktree that commits: one folder per
    worktree, and every one needs the hooks, or commits there are never checked."""
    other = tmp_path / "wt-b"
    _git(repo, "worktree", "add", "-q", str(other))
    _git(repo, "config", "core.hooksPath", ".githooks")
    written = install(other)
    assert sorted(written) == sorted((top / ".githooks" / hook).resolve() for top in (repo, other) for hook in guard.HOOKS)
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    project = str(Path(__file__).resolve().parents[3])
    hook = subprocess.run(["git", *IDENTITY, "hook", "run", "pre-commit", "--", "--help"], cwd=repo, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": project})
    # The main worktree's commits run it too (`git hook run` shows the hook's output on stderr).
    assert hook.returncode == 0 and "guard pre-commit" in hook.stderr, hook


def test_install_never_overwrites_someone_elses_hook(repo: Path):
    theirs = repo / ".git" / "hooks" / "pre-commit"
    theirs.write_text("#!/bin/sh\nexec make lint\n")
    with pytest.raises(GuardError) as caught:
        install(repo)
    assert "lockstep guard pre-commit" in str(caught.value)
    assert theirs.read_text() == "#!/bin/sh\nexec make lint\n"


def test_install_keeps_a_users_own_hook_that_runs_the_guard(repo: Path):
    """The refusal above says to add `lockstep guard pre-commit` to one's own hook; doing
    so and installing again rewrote that hook as Lockstep's, dropping the user's lines."""
    theirs = repo / ".git" / "hooks" / "pre-commit"
    text = "#!/bin/sh\nmake lint || exit 1\nlockstep guard pre-commit\n"
    theirs.write_text(text)
    kept: list[Path] = []
    written = install(repo, kept)
    assert theirs.read_text() == text
    assert kept == [theirs.resolve()] and written == [(repo / ".git" / "hooks" / h).resolve() for h in ("pre-push", "pre-merge-commit", "reference-transaction")]
    assert install(repo) == written  # Lockstep's own hook is rewritten; the user's never


def test_the_agent_is_lockstep_agent_if_set(monkeypatch):
    monkeypatch.setenv("LOCKSTEP_AGENT", "bob")
    assert guard.agent_name() == "bob"
    monkeypatch.setenv("LOCKSTEP_AGENT", "")
    assert guard.agent_name() is None
    monkeypatch.delenv("LOCKSTEP_AGENT")
    assert guard.agent_name() is None


def test_a_silent_coordinator_is_waited_for_once_per_push(repo: Path, tmp_path: Path, monkeypatch):
    """pre-push asked a coordinator that does not answer twice (its status, then the
    check), each time for the whole LOCKSTEP_TIMEOUT: a hung coordinator doubled the wait."""
    from click.testing import CliRunner

    from agents.cli import main

    from .test_oneshot import Router

    silent = Router(tmp_path / "rpc.sock", lambda request: [])
    try:
        _write(repo, "src/new.py")
        _git(repo, "add", ".")
        _git(repo, "commit", "-q", "-m", "new")
        updates = f"refs/heads/main {_git(repo, 'rev-parse', 'HEAD')} refs/heads/main {ZERO_SHA}\n"
        monkeypatch.chdir(repo)
        monkeypatch.setenv("LOCKSTEP_TIMEOUT", "0.3")
        said = CliRunner().invoke(main, ["guard", "pre-push", "--endpoint", silent.endpoint, "origin", "url"], input=updates)
        assert said.exit_code == 0 and "not checked" in said.output, said.output
        assert len(silent.seen) == 1, silent.seen
    finally:
        silent.close()


def test_the_refusal_for_someone_elses_pre_push_hook_says_the_guard_needs_the_ref_lines(repo: Path):
    """A user's pre-push hook that reads git's ref lines itself, then runs the guard as
    the refusal said, left the guard an empty stdin: every push passed unchecked."""
    theirs = repo / ".git" / "hooks" / "pre-push"
    theirs.write_text("#!/bin/sh\nwhile read local_ref local_sha remote_ref remote_sha; do :; done\n")
    with pytest.raises(GuardError) as caught:
        install(repo)
    said = str(caught.value)
    assert 'lockstep guard pre-push "$@"' in said and "stdin" in said and "refs=$(cat)" in said
