"""The retention policy in lockstep.toml ([ledger] keep and max_size), applied by the
coordinator by itself: old events go, the file shrinks, and the registry a restart
rebuilds is the one before."""

from __future__ import annotations

import json
import sqlite3

import pytest

from agents.oneshot import open_oneshot

from .conftest import cli, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "20", "--lock-delay", "1")


def _ledger(repo, sql: str, *args) -> list:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _compactions(repo, by: str) -> list[int]:
    rows = _ledger(repo, "SELECT data FROM events WHERE kind = 'ledger.compacted' AND json_extract(data, '$.by') = ?", by)
    return [int(json.loads(data)["removed"]) for (data,) in rows]


def _registry(repo) -> dict:
    """What a restart must rebuild exactly: claims with their tokens, sessions and their
    states, merge holds, the gate's view of each agent."""
    now = status(repo)
    return {
        "claims": sorted((c["pattern"], c["holder"], c["token"], c["access"]) for c in now["claims"]),
        "agents": sorted((a["name"], a["state"], a["session"]) for a in now["agents"]),
        "merge_holds": now.get("merge_holds"),
    }


def _build_state(repo, alice, intents: int) -> int:
    """Claims held and released, a refusal, and ``intents`` write intents of one
    one-shot agent on the same 100 paths (the bulk of the events, ~4 KB each); returns
    the highest token handed out."""
    for i in range(10):
        assert cli("claim", f"docs/{i}.md", "--agent", "bob", cwd=repo.other).rc == 0
        assert cli("release", f"docs/{i}.md", "--agent", "bob", cwd=repo.other).rc == 0
    assert cli("claim", "docs/0.md", "--agent", "carol", cwd=repo.other).rc == 0
    assert cli("claim", "docs/", "--agent", "erin", cwd=repo.other).rc == 1  # refused: a record, no state
    token = 0
    paths = [f"lib/a_module_with_a_long_name_{i:03d}.py" for i in range(100)]
    with open_oneshot("dave", cwd=repo.other, on_notice=lambda text: None) as dave:
        for _ in range(intents):
            decision = dave.intent(paths)
            assert decision.verdict == "allow"
            token = max(token, decision.token or 0)
    return max(token, alice.do("claim", paths=["src/app.py"])["token"])


def test_the_size_budget_is_kept_by_itself_and_a_restart_rebuilds_the_same_registry(repo, coordinator, agents):
    (repo.root / "lockstep.toml").write_text('[ledger]\nmax_size = "1MB"\n')
    first = coordinator(*FAST)
    alice = agents("alice", repo.root)
    token = _build_state(repo, alice, intents=500)  # about 2 MB of events
    before = _registry(repo)
    path = repo.state_dir / "ledger.db"
    # the oldest events go, the pages are given back and, once idle, the WAL is emptied:
    # the file shrinks under the budget
    wait_until(lambda: _compactions(repo, "max_size"), timeout=60, what="a compaction by max_size")
    wal = path.with_name("ledger.db-wal")
    wait_until(lambda: wal.stat().st_size == 0 and path.stat().st_size < 1_000_000, timeout=60,
               what="the WAL emptied into a ledger file under 1MB")
    assert _ledger(repo, "SELECT min(id) FROM events")[0][0] > 100  # the first events are gone
    assert _registry(repo) == before  # the running registry is untouched
    first.kill()  # a hard kill: the next start has only the snapshot and the events after it
    coordinator(*FAST)
    assert _registry(repo) == before
    assert alice.do("claim", paths=["src/other.py"])["token"] > token  # the high-water mark held
    assert cli("claim", "src/app.py", "--agent", "frank", cwd=repo.other).rc == 1  # alice still holds it
    assert cli("claim", "docs/0.md", "--agent", "frank", cwd=repo.other).rc == 1  # and carol hers


def test_keep_removes_old_events_at_start_and_keeps_the_registry(repo, coordinator, agents):
    first = coordinator(*FAST)
    alice = agents("alice", repo.root)
    token = _build_state(repo, alice, intents=50)
    events = _ledger(repo, "SELECT count(*) FROM events")[0][0]
    before = _registry(repo)
    first.kill()
    (repo.root / "lockstep.toml").write_text('[ledger]\nkeep = "0s"\n')  # everything the snapshot covers
    coordinator(*FAST)
    removed = wait_until(lambda: _compactions(repo, "keep"), timeout=30, what="a compaction by keep")
    assert sum(removed) > events // 2
    kinds = [kind for (kind,) in _ledger(repo, "SELECT kind FROM events")]
    assert "claim.refused" not in kinds and "ledger.compacted" in kinds
    assert _registry(repo) == before
    assert alice.do("claim", paths=["src/other.py"])["token"] > token


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('keep = "soon"', "[ledger] key 'keep': 'soon' is not a duration"),
        ("keep = -1", "[ledger] key 'keep': -1 is not a duration"),
        ('max_size = "lots"', "[ledger] key 'max_size': 'lots' is not a size"),
        ("max_size = 1000", "[ledger] key 'max_size': 1000 is too small"),
        ('max_size = "2XB"', "[ledger] key 'max_size': '2XB' is not a size"),
        ("maxsize = 1", "[ledger]: unknown key 'maxsize'"),
    ],
)
def test_a_bad_retention_setting_is_refused_in_one_line(repo, line, fragment):
    (repo.root / "lockstep.toml").write_text(f"[ledger]\n{line}\n")
    result = cli("serve", cwd=repo.root, timeout=30)
    assert result.rc == 2, result
    assert fragment in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
