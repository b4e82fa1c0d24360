"""`lockstep ledger compact`: old events go, the state a restart rebuilds stays exact."""

from __future__ import annotations

import sqlite3

from .conftest import cli, status

FAST = ("--heartbeat", "0.2", "--liveness", "20", "--lock-delay", "1")


def _kinds(repo) -> list[str]:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        return [kind for (kind,) in conn.execute("SELECT kind FROM events ORDER BY id")]
    finally:
        conn.close()


def _state(repo) -> dict:
    now = status(repo)
    return {
        "claims": sorted((c["pattern"], c["holder"], c["token"], c["access"]) for c in now["claims"]),
        "agents": sorted((a["name"], a["state"], a["session"]) for a in now["agents"]),
    }


def test_compaction_keeps_the_state_exact_across_a_restart_and_tokens_go_on_rising(repo, coordinator, agents):
    first = coordinator(*FAST)
    alice = agents("alice", repo.root)
    for i in range(3):  # one-shot CLI sessions: each joins and leaves
        assert cli("claim", f"docs/{i}.md", "--agent", "bob", cwd=repo.other).rc == 0
        assert cli("release", f"docs/{i}.md", "--agent", "bob", cwd=repo.other).rc == 0
    frank = agents("frank", repo.other)  # a long session's churn
    for i in range(30):
        frank.do("claim", paths=[f"lib/{i}.py"])
        frank.do("release", paths=[f"lib/{i}.py"])
    assert cli("claim", "docs/0.md", "--agent", "carol", cwd=repo.other).rc == 0
    assert cli("claim", "docs/", "--agent", "erin", cwd=repo.other).rc == 1  # refused: a record, no state
    token = alice.do("claim", paths=["src/app.py"])["token"]  # the newest event (always kept)
    before, events_before = _state(repo), len(_kinds(repo))
    compacted = cli("ledger", "compact", "--keep", "0", "--json", cwd=repo.root)
    assert compacted.rc == 0, compacted
    assert compacted.json["removed"] > 60 and compacted.json["kept"] < events_before
    kinds = _kinds(repo)
    assert kinds[-1] == "ledger.compacted" and "claim.refused" not in kinds
    assert _state(repo) == before  # the running registry is untouched
    assert alice.do("intent", paths=["src/app.py"], token=token)["verdict"] == "allow"
    # a hard kill: the next start has only the snapshot and the few events after it
    first.kill()
    coordinator(*FAST)
    after = _state(repo)
    assert after["claims"] == before["claims"]
    assert after["agents"] == before["agents"]
    assert alice.do("claim", paths=["src/other.py"])["token"] > token  # the high-water mark held
    assert cli("claim", "src/app.py", "--agent", "dave", cwd=repo.other).rc == 1  # alice still holds it


def test_compaction_keeps_young_events(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    events = len(_kinds(repo))
    compacted = cli("ledger", "compact", "--json", cwd=repo.root)  # the default keeps 30 days
    assert compacted.rc == 0 and compacted.json["removed"] == 0 and compacted.json["kept"] == events
    assert cli("ledger", "compact", "--keep", "soon", cwd=repo.root).rc == 2
