"""agents.paths.repo_relative: command-line paths become repository-relative patterns,
like git: relative to the current directory, symlinks resolved, every worktree one
namespace, folders by a trailing / or by being a directory, globs kept as written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agents.paths import repo_relative
from protocol.discovery import locate
from protocol.errors import PeerError


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A repository with one commit, a second worktree beside it (``../wt-b``)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    (root / "src" / "api").mkdir(parents=True)
    (root / "src" / "api" / "x.py").write_text("x = 1\n")
    (root / "docs").mkdir()
    _git(root, "init", "-q", "-b", "main")
    _git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "init")
    _git(root, "worktree", "add", "-q", str(tmp_path / "wt-b"))
    return root


def test_paths_are_relative_to_the_current_directory(repo: Path):
    place = locate(repo)
    assert repo_relative("src/api/x.py", place, repo) == "src/api/x.py"
    assert repo_relative("x.py", place, repo / "src" / "api") == "src/api/x.py"
    assert repo_relative("../README.md", place, repo / "src") == "README.md"
    assert repo_relative("./src/../src/new.py", place, repo) == "src/new.py"  # need not exist


def test_an_absolute_path_inside_the_worktree_is_made_relative(repo: Path):
    assert repo_relative(str(repo / "src" / "api" / "x.py"), locate(repo), "/") == "src/api/x.py"


def test_the_current_directory_is_used_when_no_cwd_is_given(repo: Path, monkeypatch):
    monkeypatch.chdir(repo / "src")
    assert repo_relative("api/x.py", locate()) == "src/api/x.py"


def test_a_directory_or_a_trailing_slash_means_the_folder(repo: Path):
    place = locate(repo)
    assert repo_relative("src/api", place, repo) == "src/api/"  # an existing directory
    assert repo_relative("build/", place, repo) == "build/"  # a trailing slash, even if missing
    assert repo_relative("build", place, repo) == "build"  # a missing name is a file
    assert repo_relative(".", place, repo) == "**"  # the whole repository
    assert repo_relative(str(repo), place, "/") == "**"


def test_a_glob_resolves_only_its_literal_folders(repo: Path):
    place = locate(repo)
    assert repo_relative("*.py", place, repo / "src" / "api") == "src/api/*.py"
    assert repo_relative("src/**/*.py", place, repo) == "src/**/*.py"
    assert repo_relative("../**/test_?.py", place, repo / "src") == "**/test_?.py"
    assert repo_relative("src/[ab]*.py", place, repo) == "src/[ab]*.py"


def test_symlinks_are_resolved(repo: Path):
    (repo / "link").symlink_to(repo / "src" / "api")
    assert repo_relative("link/x.py", locate(repo), repo) == "src/api/x.py"


def test_a_path_in_another_worktree_names_the_same_repository_path(repo: Path):
    other = repo.parent / "wt-b"
    assert repo_relative(str(other / "src" / "api" / "x.py"), locate(repo), repo) == "src/api/x.py"
    assert repo_relative(str(repo / "docs" / "a.md"), locate(other), other) == "docs/a.md"
    assert repo_relative("x.py", locate(other), other / "src" / "api") == "src/api/x.py"


@pytest.mark.parametrize("arg", ["/etc/hosts", "../../elsewhere.py", "../outside/"])
def test_a_path_outside_every_worktree_is_bad_input(repo: Path, arg: str):
    with pytest.raises(PeerError) as caught:
        repo_relative(arg, locate(repo), repo)
    assert caught.value.code == "bad_path" and "outside the repository" in caught.value.message


def test_a_symlink_leading_out_of_the_repository_is_outside(repo: Path, tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    (repo / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PeerError) as caught:
        repo_relative("out/x.py", locate(repo), repo)
    assert caught.value.code == "bad_path"


def test_an_empty_path_is_bad_input(repo: Path):
    with pytest.raises(PeerError) as caught:
        repo_relative("", locate(repo), repo)
    assert caught.value.code == "bad_path"


def test_the_result_is_validated_like_any_pattern(repo: Path):
    with pytest.raises(PeerError) as caught:
        repo_relative("src/[", locate(repo), repo)  # an unclosed class
    assert caught.value.code == "bad_path"


def test_outside_git_the_directory_itself_is_the_root(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    place = locate(plain)
    assert not place.in_git
    assert repo_relative("sub/a.txt", place, plain) == "sub/a.txt"
    assert repo_relative("a.txt", place, plain / "sub") == "sub/a.txt"
    with pytest.raises(PeerError):
        repo_relative("../x", place, plain)


def test_a_relative_cwd_is_taken_from_the_process_directory(repo: Path, monkeypatch):
    monkeypatch.chdir(repo)
    assert repo_relative("x.py", locate(), os.path.join("src", "api")) == "src/api/x.py"
