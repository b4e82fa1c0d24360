"""Paths in a worktree that are not plain files: a symlink to /dev/zero, a FIFO, a file
bigger than its reader should hold, text that is not UTF-8.

Each once hung or ran a process out of memory when read whole (a handoff check on a
symlink to /dev/zero grew its worker to 3.6 GB in 8 s before the timeout killed it; a
plan given as a FIFO never returned; a non-UTF-8 plan printed a traceback).  Now each
is refused at once with a line saying what the path is, and the exit code of bad input.
"""

from __future__ import annotations

import os
import subprocess

from probes import changes

from .conftest import cli

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def test_a_handoff_note_that_is_a_device_fails_at_once_naming_it(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "HANDOFF.md").symlink_to("/dev/zero")
    checked = cli("check", "handoff", "HANDOFF.md", "--json", cwd=repo.root, timeout=20)
    assert checked.rc == 1, checked
    (result,) = checked.json["results"]
    assert result["finding"] == "handoff incomplete" and "a device, not a file" in result["reason"]
    assert result["duration"] < 20  # not the probe timeout: refused unread (a semantic bound, not a speed one)


def test_a_consistency_source_over_max_body_or_not_a_file_is_named_not_read_whole(repo, coordinator):
    (repo.root / "lockstep.toml").write_text('[http]\nmax_body = "1MB"\n')
    coordinator(*FAST)
    (repo.root / "small.json").write_text('{"v": 1}')
    (repo.root / "big.json").write_text('{"v": 1, "pad": "' + "x" * 1_000_000 + '"}')
    (repo.root / "zero.json").symlink_to("/dev/zero")
    checked = cli("check", "consistency", "small.json", "big.json", "zero.json", "--json-path", "$.v", "--json", cwd=repo.root, timeout=20)
    assert checked.rc == 1, checked
    reason = checked.json["results"][0]["reason"]
    assert "big.json: it is larger than [http] max_body (1000000 bytes)" in reason and "a device, not a file" in reason


def test_serve_refuses_a_config_that_is_a_device_and_plan_run_a_plan_that_is_a_fifo_or_not_text(repo):
    (repo.root / "lockstep.toml").symlink_to("/dev/zero")
    served = cli("serve", cwd=repo.root, timeout=20)
    assert served.rc == 2 and served.err.strip() == f"lockstep: {repo.root / 'lockstep.toml'}: cannot be read: a device, not a file"
    os.remove(repo.root / "lockstep.toml")
    os.mkfifo(repo.root / "PLAN.toml")
    planned = cli("plan", "run", "PLAN.toml", cwd=repo.root, timeout=20)  # a blocking read would time out here
    assert planned.rc == 2 and planned.err.strip() == "lockstep: PLAN.toml: cannot be read: a FIFO, not a file"
    (repo.root / "latin1.toml").write_bytes(b'[[step]]\nname = "caf\xe9"\n')
    planned = cli("plan", "run", "latin1.toml", cwd=repo.root, timeout=20)
    assert planned.rc == 2 and "latin1.toml: not UTF-8 text" in planned.err and "Traceback" not in planned.err


def test_an_autofix_snapshot_skips_devices_and_hashes_a_file_over_its_budget_in_chunks(repo, monkeypatch):
    """Before an autofix check runs, the dirty files are kept to undo its edits out of
    the agent's lane: a dirty symlink to /dev/zero once made that read run for ever."""
    monkeypatch.setattr(changes, "SNAPSHOT_LIMIT", 1000)
    (repo.root / "zero").symlink_to("/dev/zero")
    (repo.root / "big.bin").write_bytes(b"b" * 5000)
    (repo.root / "note.txt").write_text("before")
    before = changes.snapshot(repo.root)
    assert before.contents["note.txt"] == b"before"
    assert "big.bin" in before.digests and "big.bin" not in before.contents  # hash only: cannot be undone
    (repo.root / "note.txt").write_text("after")
    (repo.root / "big.bin").write_bytes(b"c" * 5000)
    assert changes.changed_paths(repo.root, before) == ["big.bin", "note.txt"]
    assert changes.undo(repo.root, "note.txt", before) and (repo.root / "note.txt").read_text() == "before"
    assert not changes.undo(repo.root, "big.bin", before)
    subprocess.run(["git", "status", "--short"], cwd=repo.root, check=True, capture_output=True)  # the repo is still whole
