"""What a restart keeps: the times people are shown (from the ledger, not the restart),
and no conflicting writers when the coordinator comes back in a stricter mode."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
import zmq

from protocol.codec import decode_publication

from .conftest import agent_state, cli, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "20", "--lock-delay", "1")


def _by_name(items, key):
    return {item[key]: item for item in items}


@pytest.mark.parametrize("how", ["stop", "kill"])  # a snapshot restores it, or a replay of the ledger
def test_since_and_last_seen_come_from_the_ledger_across_a_restart(repo, coordinator, agents, how):
    first = coordinator(*FAST)
    assert cli("claim", "src/a.py", "--agent", "one", cwd=repo.root).rc == 0
    gone = agents("gone", repo.other)
    gone.do("claim", paths=["docs/"])
    assert gone.do("exit") == {"event": "bye"}  # it says bye on the way out
    wait_until(lambda: _by_name(status(repo)["agents"], "name")["gone"]["state"] == "gone", what="gone to be gone")
    # time passes (polled, not slept): the grant and both agents are seconds old
    wait_until(lambda: time.time() - status(repo)["claims"][0]["since"] >= 2.0, timeout=20, what="the claim to age")
    before = status(repo)
    first.kill() if how == "kill" else first.stop()
    restarted = time.time()
    coordinator(*FAST)
    after = status(repo)
    assert after["epoch"] == before["epoch"] + 1
    claim_before, claim_after = before["claims"][0], after["claims"][0]
    assert claim_after["pattern"] == "src/a.py"
    assert abs(claim_after["since"] - claim_before["since"]) < 1.0  # the same moment, not the restart's
    assert restarted - claim_after["since"] >= 1.5
    agents_before, agents_after = _by_name(before["agents"], "name"), _by_name(after["agents"], "name")
    for name in ("one", "gone"):
        assert abs(agents_after[name]["last_seen"] - agents_before[name]["last_seen"]) < 1.0, name
        assert restarted - agents_after[name]["last_seen"] >= 1.5, name
    assert agents_after["gone"]["state"] == "gone"


def test_status_shows_a_one_shot_sessions_remaining_ttl(repo, coordinator):
    coordinator(*FAST, "--oneshot-ttl", "600")
    assert cli("claim", "src/a.py", "--agent", "one", cwd=repo.root).rc == 0
    agent = _by_name(status(repo)["agents"], "name")["one"]
    assert agent["kind"] == "oneshot"
    assert 590 < agent["ttl_left"] <= 600
    assert "TTL" in cli("status", cwd=repo.root).out
    # a session bound to a process has no TTL
    assert cli("claim", "src/b.py", "--agent", "two", "--pid", str(os.getpid()), cwd=repo.root).rc == 0
    assert _by_name(status(repo)["agents"], "name")["two"]["ttl_left"] is None


def _revocations(repo) -> list[tuple[str, int, dict]]:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT agent, token, data FROM events WHERE kind = 'claim.released'").fetchall()
    finally:
        conn.close()
    return [(agent, token, json.loads(data)) for agent, token, data in rows if json.loads(data).get("revoked")]


@pytest.mark.parametrize("mode", ["serial", "parallel-strict"])
def test_a_restart_in_a_stricter_mode_keeps_the_oldest_grant_and_revokes_the_rest(repo, coordinator, agents, mode):
    first = coordinator(*FAST, "--mode", "parallel-warn")
    a = agents("a", repo.root)
    a_token = a.do("claim", paths=["src/"])["token"]
    b_grant = cli("claim", "src/app.py", "--agent", "b", "--json", cwd=repo.other)  # granted with a warning
    assert b_grant.rc == 0, b_grant
    b_token = b_grant.json["token"]
    first.stop()
    coordinator(*FAST, "--mode", mode)
    claims = status(repo)["claims"]
    assert [(c["pattern"], c["holder"], c["token"]) for c in claims] == [("src/", "a", a_token)]  # one writer
    # the ledger says why, and the log says it
    [(agent, token, data)] = _revocations(repo)
    assert (agent, token, data["patterns"]) == ("b", b_token, ["src/app.py"])
    assert f"{mode} mode" in data["reason"] and "a's older grant of src/" in data["reason"]
    assert "revoked at restart" in (repo.state_dir / "coordinator.log").read_text()
    # the holder is told on its next call (a notice to it, published too); its write is refused
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    for topic in (b"notice", b"claim."):
        sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(status(repo)["pub"][0])
    try:
        def subscribed(n=[0]):  # a SUB socket joins asynchronously: publish until one is seen
            n[0] += 1
            cli("claim", f"docs/{n[0]}.md", "--agent", "c", cwd=repo.root)  # granted or refused: published
            return sub.poll(200)
        wait_until(subscribed, timeout=10, what="the subscription")
        while sub.poll(100):
            sub.recv_multipart()
        decided = cli("intent", "src/app.py", "--agent", "b", "--json", cwd=repo.other)
        assert decided.rc == 1 and decided.json["verdict"] == "block", decided
        assert "revoked at restart" in decided.err
        assert sub.poll(5000)
        publication = decode_publication(sub.recv_multipart()[1])
        assert publication.kind == "notice" and publication.agent == "b"
        assert "revoked at restart" in publication.data["message"]
    finally:
        sub.close()
        ctx.term()
    assert agent_state(repo, "a") == "alive"
    assert a.do("intent", paths=["src/app.py"], token=a_token)["verdict"] == "allow"


def test_a_restart_in_the_same_lax_mode_revokes_nothing(repo, coordinator, agents):
    first = coordinator(*FAST, "--mode", "parallel-warn")
    a = agents("a", repo.root)
    a.do("claim", paths=["src/"])
    assert cli("claim", "src/app.py", "--agent", "b", cwd=repo.other).rc == 0
    first.stop()
    coordinator(*FAST, "--mode", "parallel-warn")
    assert sorted(c["holder"] for c in status(repo)["claims"]) == ["a", "b"]
    assert _revocations(repo) == []
