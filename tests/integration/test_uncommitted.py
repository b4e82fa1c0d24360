"""Releasing a path with uncommitted changes: a warning in the reply and a ledger event,
whether the holder releases it or its session ends."""

from __future__ import annotations

import json
import sqlite3

from .conftest import cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _events(repo) -> list[dict]:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT agent, data FROM events WHERE kind = 'release.uncommitted' ORDER BY id").fetchall()
    finally:
        conn.close()
    return [{"agent": agent, **json.loads(data)} for agent, data in rows]


def test_release_with_uncommitted_changes_warns_and_is_recorded(repo, coordinator):
    coordinator(*FAST)
    wt = repo.other
    assert cli("claim", "src/", "docs/", "--agent", "bob", cwd=wt).rc == 0
    (wt / "src" / "app.py").write_text("print('changed')\n")  # modified
    (wt / "src" / "new.py").write_text("x = 1\n")  # untracked
    (wt / "elsewhere.txt").write_text("not claimed\n")  # not under a released path
    released = cli("release", "--all", "--agent", "bob", "--json", cwd=wt)
    assert released.rc == 0, released
    assert released.json["uncommitted"] == ["src/app.py", "src/new.py"]
    assert "uncommitted changes to src/app.py, src/new.py" in released.json["warning"]
    [event] = _events(repo)
    assert event["agent"] == "bob" and event["paths"] == ["src/app.py", "src/new.py"]
    assert event["when"] == "release" and event["patterns"] == ["docs/", "src/"]
    text = cli("claim", "src/app.py", "--agent", "bob", cwd=wt)
    assert text.rc == 0
    assert "warning: released with uncommitted changes" in cli("release", "src/app.py", "--agent", "bob", cwd=wt).out


def test_a_clean_release_says_nothing(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/", "--agent", "bob", cwd=repo.other).rc == 0
    (repo.other / "elsewhere.txt").write_text("not claimed\n")
    released = cli("release", "src/", "--agent", "bob", "--json", cwd=repo.other)
    assert released.rc == 0 and released.json["uncommitted"] == [] and released.json["warning"] == ""
    assert _events(repo) == []


def test_a_session_that_ends_with_uncommitted_changes_is_recorded(repo, coordinator, agents):
    coordinator(*FAST)
    bob = agents("bob", repo.other)
    bob.do("claim", paths=["src/app.py"])
    (repo.other / "src" / "app.py").write_text("print('half done')\n")
    assert bob.do("exit") == {"event": "bye"}
    [event] = wait_until(lambda: _events(repo), timeout=20, what="the release.uncommitted event")
    assert event["agent"] == "bob" and event["paths"] == ["src/app.py"] and event["when"] == "session end"
    assert event["worktree"] == str(repo.other)


def test_a_release_beside_a_thousand_untracked_files_still_names_its_changes(repo, coordinator):
    coordinator(*FAST)
    wt = repo.other
    assert cli("claim", "src/", "--agent", "bob", cwd=wt).rc == 0
    (wt / "src" / "app.py").write_text("print('changed')\n")
    (wt / "build").mkdir()
    for i in range(1_200):  # more than a release carries, all sorting before src/
        (wt / "build" / f"out{i:04d}.o").write_text("")
    released = cli("release", "--all", "--agent", "bob", "--json", cwd=wt)
    assert released.rc == 0, released
    assert released.json["uncommitted"] == ["src/app.py"]
    [event] = _events(repo)
    assert event["paths"] == ["src/app.py"]
