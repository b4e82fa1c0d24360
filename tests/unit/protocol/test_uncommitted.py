"""Which released paths have uncommitted changes (protocol/uncommitted.py)."""

from __future__ import annotations

import subprocess

from protocol.paths import Pattern
from protocol.uncommitted import fold, touched, uncommitted_paths


def test_touched_keeps_the_paths_a_pattern_matches():
    patterns = [Pattern.parse("src/"), Pattern.parse("docs/*.md"), Pattern.parse("a.py")]
    paths = ["src/x/y.py", "docs/r.md", "docs/sub/r.md", "a.py", "b.py", "weird/[x].py"]
    assert touched(patterns, paths) == ["src/x/y.py", "docs/r.md", "a.py"]


def test_uncommitted_paths_reads_modified_staged_deleted_and_untracked(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    for name in ("kept.py", "mod.py", "gone.py", "staged.py"):
        (tmp_path / name).write_text("1\n")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    (tmp_path / "mod.py").write_text("2\n")
    (tmp_path / "gone.py").unlink()
    (tmp_path / "staged.py").write_text("2\n")
    git("add", "staged.py")
    (tmp_path / "new dir").mkdir()
    (tmp_path / "new dir" / "n.py").write_text("3\n")
    assert uncommitted_paths(str(tmp_path)) == ["gone.py", "mod.py", "new dir/n.py", "staged.py"]


def test_uncommitted_paths_outside_a_repository_is_unknown(tmp_path):
    assert uncommitted_paths(str(tmp_path)) is None


def test_fold_keeps_every_path_covered_folding_the_biggest_folders_first():
    paths = [f"build/o{i}.o" for i in range(50)] + ["src/app.py", "src/lib/a.py", "src/lib/b.py", "top.txt"]
    assert fold(paths, limit=10) == ["build/", "src/app.py", "src/lib/a.py", "src/lib/b.py", "top.txt"]
    assert fold(paths, limit=4) == ["build/", "src/app.py", "src/lib/", "top.txt"]
    assert fold(["a/b/c/1", "a/b/c/2", "a/x/1", "z"], limit=2) == ["a/", "z"]
    assert fold(["a", "b"], limit=5) == ["a", "b"]


def test_a_folded_folder_is_touched_by_any_pattern_that_reaches_into_it():
    patterns = [Pattern.parse("build/x.o"), Pattern.parse("**/*.py")]
    assert touched(patterns, ["build/", "docs/", "other/"]) == ["build/", "docs/", "other/"]
    assert touched([Pattern.parse("src/")], ["build/", "src/lib/", "a[1]/"]) == ["src/lib/"]
