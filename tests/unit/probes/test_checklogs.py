"""The kept output of checks: paths, and the ring that bounds what is kept."""

from __future__ import annotations

import os

from probes import checklogs


def make_run(state_dir, job: str, size: int, age: int) -> None:
    path = checklogs.log_path(state_dir, job, "test")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path.parent, ns=(age, age))


def test_paths_stay_inside_the_state_directory(tmp_path):
    path = checklogs.log_path(tmp_path, "../../etc", "a/b")
    assert path.resolve().is_relative_to((tmp_path / checklogs.LOG_DIR).resolve())
    assert checklogs.job_logs(tmp_path, "nothing") == []


def test_the_oldest_runs_go_beyond_the_count(tmp_path):
    for n in range(6):
        make_run(tmp_path, f"1.{n}", 10, age=10**9 * (n + 1))
    assert checklogs.prune(tmp_path, keep_runs=4, keep_bytes=10**6) == ["1.0", "1.1"]
    assert sorted(p.name for p in (tmp_path / checklogs.LOG_DIR).iterdir()) == ["1.2", "1.3", "1.4", "1.5"]


def test_the_oldest_runs_go_beyond_the_size_and_the_newest_always_stays(tmp_path):
    for n in range(3):
        make_run(tmp_path, f"1.{n}", 100, age=10**9 * (n + 1))
    make_run(tmp_path, "1.3", 1000, age=10**9 * 9)  # newest, alone over the bound
    assert checklogs.prune(tmp_path, keep_runs=10, keep_bytes=250) == ["1.0", "1.1", "1.2"]
    assert [p.name for p in checklogs.job_logs(tmp_path, "1.3")] == ["test.log"]
