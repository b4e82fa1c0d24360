"""A restart in a stricter mode: of each conflict among restored claims the oldest grant
stays, the others are revoked (policy.restart_revocations, Core.start)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import policy
from coordinator.core import Core
from coordinator.effects import Send
from coordinator.registry import Registry
from coordinator.settings import Settings
from ledger import records as rec
from protocol import messages as m
from protocol.paths import overlaps

from .core_driver import Driver


def _warn_mode_claims(claims: list[tuple[str, str, bool]]) -> Driver:
    d = Driver(mode="parallel-warn")
    sessions = {}
    for agent, path, shared in claims:
        if agent not in sessions:
            sessions[agent] = d.hello(agent)
        assert isinstance(d.claim(sessions[agent], path, shared=shared), m.Granted)
    return d


def _conflicting_pairs(registry) -> list:
    entries = list(registry.all_entries())
    return [
        (a, b) for i, a in enumerate(entries) for b in entries[i + 1 :]
        if a.agent != b.agent and "exclusive" in (a.access, b.access) and overlaps(a.pattern, b.pattern)
    ]


def test_serial_keeps_the_oldest_writer_and_says_why():
    d = _warn_mode_claims([("a", "src/", False), ("b", "src/app.py", False), ("c", "docs/x.md", False)])
    after = d.restart(at=50.0, mode="serial")
    assert sorted((e.agent, e.pattern.text) for e in after.core.registry.all_entries()) == [("a", "src/")]
    revoked = [r for r in after.records if isinstance(r, rec.ClaimReleased) and r.revoked is True]
    assert sorted(r.agent for r in revoked) == ["b", "c"]
    assert all("serial mode" in r.reason and "a's older grant of src/" in r.reason for r in revoked)
    released = [p for p in after.publications if p.kind == "claim.released"]
    assert sorted(p.agent for p in released) == ["b", "c"] and all(p.data["revoked"] for p in released)


def test_strict_keeps_disjoint_writers_and_shared_readers_apart_from_writers():
    d = _warn_mode_claims([("a", "src/", False), ("b", "src/app.py", False), ("c", "docs/x.md", False), ("d", "src/*.py", True)])
    after = d.restart(at=50.0, mode="parallel-strict")
    assert sorted((e.agent, e.pattern.text) for e in after.core.registry.all_entries()) == [("a", "src/"), ("c", "docs/x.md")]


def test_a_revoked_holder_hears_it_on_its_next_message_once():
    d = _warn_mode_claims([("a", "src/", False), ("b", "src/app.py", False)])
    b = next(s for s, agent in d.core.registry.sessions.items() if agent.name == "b")
    after = d.restart(at=50.0, mode="serial")
    seen = len(after.publications)
    after.send(m.Heartbeat(session=b))
    after.send(m.Heartbeat(session=b))
    notices = [p for p in after.publications[seen:] if p.kind == "notice"]
    assert len(notices) == 1 and notices[0].agent == "b" and "revoked at restart" in notices[0].data["message"]


def test_the_same_lax_mode_revokes_nothing():
    d = _warn_mode_claims([("a", "src/", False), ("b", "src/app.py", False)])
    after = d.restart(at=50.0, mode="parallel-warn")
    assert len(list(after.core.registry.all_entries())) == 2


_PATHS = st.sampled_from(["src/", "src/app.py", "src/*.py", "src/**", "docs/x.md", "docs/", "tests/t.py", "**/*.md"])


@settings(max_examples=60, deadline=None)
@given(
    claims=st.lists(st.tuples(st.sampled_from("abcd"), _PATHS, st.booleans()), max_size=10),
    mode=st.sampled_from(["serial", "parallel-strict"]),
)
def test_after_a_stricter_restart_no_two_agents_conflict(claims, mode):
    d = _warn_mode_claims(claims)
    before = {(e.agent, e.pattern.text, e.token) for e in d.core.registry.all_entries()}
    after = d.restart(at=50.0, mode=mode).core.registry
    assert _conflicting_pairs(after) == []
    if mode == "serial":
        assert len(after.exclusive_holders()) <= 1
    kept = {(e.agent, e.pattern.text, e.token) for e in after.all_entries()}
    assert kept <= before
    if before:  # the oldest grant always stays
        assert min(before, key=lambda k: (k[2], k[1])) in kept
    assert policy.restart_revocations(after, mode) == []


def test_shown_times_come_from_the_records_times_and_the_snapshot_across_a_restart():
    d = Driver(heartbeat=1.0, liveness=3)
    a = d.hello("alice")
    d.claim(a, "src/x.py")
    d.send(m.Bye(session=a))
    core = Core(Settings(heartbeat=1.0, liveness=3), repo="/repo/.git", host="h")
    # every record was written at wall time 1000; the restart is at wall time 1060
    core.start(d.records, 7.0, times=[1000.0] * len(d.records), wall=1060.0)
    [alice] = _status(core, 7.0).agents
    assert alice.state == "gone" and alice.last_seen_ago == 60.0
    # a snapshot taken at wall 1100, 10 s after a grant; restored at wall 1200: 110 s old
    session = _reply(core.receive("p", m.Hello(agent="bob"), 8.0)).session
    core.receive("p", m.Claim(session=session, paths=["docs/"]), 8.0)
    snap = core.registry.snapshot(18.0, 1.0, wall=1100.0)
    restored = Registry.from_snapshot(snap, 3.0, wall=1200.0)
    [entry] = restored.all_entries()
    assert 3.0 - entry.granted == 110.0
    assert restored.sessions[session].last_seen == 3.0  # the lease starts afresh


def _reply(effects):
    return next(e.message for e in effects if isinstance(e, Send))


def _status(core: Core, now: float) -> m.StatusReply:
    return _reply(core.receive("p", m.Status(), now))
