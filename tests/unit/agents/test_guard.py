"""agents.guard: reading the names a commit or push touches."""

from __future__ import annotations

from agents.guard import name_status_paths


def test_both_names_of_renames_and_copies_and_every_deletion() -> None:
    out = "R100\0held.py\0moved.py\0C075\0src/a.py\0src/b.py\0D\0gone.py\0M\0x[1].py\0A\0new file.txt\0"
    assert name_status_paths(out) == ["held.py", "moved.py", "src/a.py", "src/b.py", "gone.py", "x[1].py", "new file.txt"]


def test_log_output_with_empty_commit_separators_and_repeats() -> None:
    out = "\0M\0a.py\0\0M\0a.py\0R090\0b\0c\0"
    assert name_status_paths(out) == ["a.py", "b", "c"]


def test_empty_and_truncated_output() -> None:
    assert name_status_paths("") == []
    assert name_status_paths("R100\0only-one\0") == ["only-one"]
