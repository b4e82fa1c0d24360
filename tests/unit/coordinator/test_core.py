"""Unit tests of the pure core: claims, modes, fencing, liveness, restart."""

from __future__ import annotations

import math

import pytest

from protocol import messages as m

from .core_driver import HOST, Driver


def test_exclusive_claims_conflict_across_agents_and_name_the_holder():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    granted = d.claim(a, "src/api/")
    assert isinstance(granted, m.Granted) and granted.token >= 1
    refused = d.claim(b, "src/api/handlers.py")
    assert isinstance(refused, m.Refused)
    assert [(c.holder, c.pattern) for c in refused.conflicts] == [("alice", "src/api/")]
    assert "alice" in refused.reason
    assert "claim.refused" in d.kinds()


def test_disjoint_claims_are_both_granted():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    assert isinstance(d.claim(a, "docs/**"), m.Granted)
    assert isinstance(d.claim(b, "src/**"), m.Granted)


def test_multi_path_claim_is_all_or_nothing_with_one_token():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "src/x.py")
    refused = d.claim(b, "src/y.py", "src/x.py")
    assert isinstance(refused, m.Refused)
    assert d.status().claims and all(c.holder == "alice" for c in d.status().claims)
    granted = d.claim(b, "src/y.py", "src/z.py")
    assert isinstance(granted, m.Granted)
    tokens = {c.token for c in d.status().claims if c.holder == "bob"}
    assert tokens == {granted.token}


def test_shared_claims_coexist_but_exclude_an_exclusive_one():
    d = Driver()
    a, b, c = d.hello("a"), d.hello("b"), d.hello("c")
    assert isinstance(d.claim(a, "package.json", shared=True), m.Granted)
    assert isinstance(d.claim(b, "package.json", shared=True), m.Granted)
    assert isinstance(d.claim(c, "package.json"), m.Refused)


def test_warn_mode_grants_with_warnings_and_publishes_them():
    d = Driver(mode="parallel-warn")
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "src/x.py")
    granted = d.claim(b, "src/*.py")
    assert isinstance(granted, m.Granted)
    assert [w.holder for w in granted.warnings] == ["alice"]
    assert any(p.kind == "claim.granted" and p.data.get("warnings") for p in d.publications)


def test_serial_mode_refuses_everyone_while_one_agent_writes():
    d = Driver(mode="serial")
    a, b = d.hello("alice"), d.hello("bob")
    assert isinstance(d.claim(a, "src/x.py"), m.Granted)
    refused = d.claim(b, "docs/unrelated.md")
    assert isinstance(refused, m.Refused) and refused.conflicts[0].holder == "alice"
    decision = d.intent(b, "README.md")
    assert decision.verdict == "block" and decision.holders == ["alice"]


def test_intent_auto_claims_an_unclaimed_path_and_blocks_a_later_writer():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    first = d.intent(a, "src/new.py")
    assert first.verdict == "allow" and first.token is not None
    second = d.intent(b, "src/new.py")
    assert second.verdict == "block" and second.holders == ["alice"]
    assert d.intent(a, "src/new.py").token == first.token  # the writer keeps its grant


def test_auto_claim_can_be_turned_off():
    d = Driver(auto_claim=False)
    a, b = d.hello("alice"), d.hello("bob")
    assert d.intent(a, "src/new.py").verdict == "allow"
    assert d.intent(b, "src/new.py").verdict == "allow"
    assert d.status().claims == []


def test_warn_mode_intent_on_someone_elses_path_warns_and_claims_nothing():
    d = Driver(mode="parallel-warn")
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "src/")
    decision = d.intent(b, "src/x.py")
    assert decision.verdict == "warn" and decision.token is None and decision.holders == ["alice"]
    assert {c.holder for c in d.status().claims} == {"alice"}


def test_files_a_call_may_rewrite_are_checked_against_holders_but_never_claimed():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "src/held.py")
    # a formatter over src: the held file among its candidates refuses the call, naming it
    blocked = d.send(m.Intent(session=b, paths=[], maybe=["src/free.py", "src/held.py"]))
    assert blocked.verdict == "block" and blocked.holders == ["alice"] and blocked.token is None
    assert [c.pattern for c in blocked.conflicts] == ["src/held.py"] and "your own files" in blocked.reason
    # nothing held among them: allowed, and nothing claimed for bob
    allowed = d.send(m.Intent(session=b, paths=["src/mine.py"], maybe=["src/free.py", "src/mine.py"]))
    assert allowed.verdict == "allow" and allowed.paths == ["src/mine.py"]
    assert {c.pattern: c.holder for c in d.status().claims} == {"src/held.py": "alice", "src/mine.py": "bob"}
    only_maybe = d.send(m.Intent(session=b, paths=[], maybe=["src/free.py"]))
    assert only_maybe.verdict == "allow" and only_maybe.token is None and "the 1 file this call may rewrite" in only_maybe.reason
    assert [r.maybe for r in d.records if r.KIND == "intent.decided"][-3:] == [2, 1, 1]
    # in parallel-warn the same call is warned, and still claims nothing
    w = Driver(mode="parallel-warn")
    a, b = w.hello("alice"), w.hello("bob")
    w.claim(a, "src/held.py")
    warned = w.send(m.Intent(session=b, paths=[], maybe=["src/held.py"]))
    assert warned.verdict == "warn" and warned.holders == ["alice"]
    assert [c.holder for c in w.status().claims] == ["alice"]
    # candidates are concrete files too; an intent with neither is refused as before
    assert d.send(m.Intent(session=b, paths=[], maybe=["src/*.py"])).code == "bad_path"
    assert d.send(m.Intent(session=b, paths=[])).code == "bad_request"


def test_intent_takes_concrete_paths_only():
    d = Driver()
    a = d.hello("alice")
    error = d.intent(a, "src/*.py")
    assert isinstance(error, m.Error) and error.code == "bad_path"


def test_fencing_refuses_released_and_superseded_tokens():
    d = Driver()
    a = d.hello("alice")
    old = d.claim(a, "src/x.py", shared=True).token
    new = d.claim(a, "src/x.py").token  # claiming in another access mode supersedes
    assert new > old
    assert d.claim(a, "src/x.py").token == new  # claiming it again the same way does not
    assert d.intent(a, "src/x.py", token=old).verdict == "block"
    assert d.intent(a, "src/x.py", token=new).verdict == "allow"
    d.send(m.Release(session=a, paths=["src/x.py"]))
    blocked = d.intent(a, "src/x.py", token=new)
    assert blocked.verdict == "block" and "not the current grant" in blocked.reason


@pytest.mark.parametrize("token", [0, -1, -(2**63)])
def test_a_token_that_is_not_positive_is_bad_input_that_says_so(token):
    # it was a block saying the token "was released, expired or superseded"
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "src/x.py")
    before = len(d.records)
    error = d.intent(a, "src/x.py", token=token)
    assert isinstance(error, m.Error) and error.code == "bad_request", error
    assert error.message.startswith("token must be a positive integer") and error.message.endswith(f"not {token}")
    assert len(d.records) == before


@pytest.mark.parametrize("token", [2**63 - 1, 2**64 - 1, 999])
def test_a_token_never_granted_is_blocked_as_never_granted(token):
    d = Driver()
    a = d.hello("alice")
    granted = d.claim(a, "src/x.py").token
    blocked = d.intent(a, "src/x.py", token=token)
    assert blocked.verdict == "block" and blocked.token is None
    assert blocked.reason.startswith(f"token {token} was never granted (every grant so far has a token below {granted + 1})"), blocked.reason
    assert d.intent(a, "src/x.py", token=granted).verdict == "allow"


def test_tokens_strictly_increase_and_survive_restart_above_the_reservation():
    d = Driver()
    a = d.hello("alice")
    tokens = [d.claim(a, f"f{i}.py").token for i in range(5)]
    assert tokens == sorted(set(tokens))
    d2 = d.restart(at=100.0)
    a2 = d2.send(m.Hello(agent="alice", session=a))
    assert a2.resumed and a2.session == a
    later = d2.claim(a, "g.py").token
    assert later > max(tokens)
    # every restart opens a new epoch, recorded durably
    assert d2.core.registry.epoch == d.core.registry.epoch + 1
    started = [r for r in d2.records if r.KIND == "coordinator.started"]
    assert started[-1].DURABLE and started[-1].epoch == d2.core.registry.epoch


def test_token_reservation_is_durable_and_restart_issues_above_it():
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "x.py")
    reservation = next(r for r in d.records if r.KIND == "tokens.reserved")
    assert reservation.DURABLE
    # Simulate losing every non-durable record (power loss): tokens must still go up.
    durable_only = [r for r in d.records if r.DURABLE]
    d2 = Driver(history=durable_only, now=50.0)
    a2 = d2.hello("alice")
    assert d2.claim(a2, "y.py").token > reservation.upto


def test_silent_agent_goes_stale_and_its_paths_are_held_for_the_lock_delay():
    d = Driver(heartbeat=1.0, liveness=3, lock_delay=10.0)
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "src/x.py")
    d.heartbeat(b, at=2.0)
    d.tick(2.9)
    assert d.status().agents[0].state == "alive"
    d.heartbeat(b, at=3.5)
    d.tick(3.5)  # alice silent for 3.5s > 3s
    states = {ag.name: ag.state for ag in d.status().agents}
    assert states == {"alice": "stale", "bob": "alive"}
    expired = [r for r in d.records if r.KIND == "claim.expired"]
    assert expired and "no heartbeat" in expired[0].reason
    refused = d.claim(b, "src/x.py")
    assert isinstance(refused, m.Refused)
    assert refused.conflicts[0].holder == "alice" and 0 < refused.conflicts[0].retry_after <= 10.0
    d.advance(13.6, keep_alive=(b,))
    assert isinstance(d.claim(b, "src/x.py"), m.Granted)


def test_exited_process_frees_paths_at_once():
    d = Driver(lock_delay=10.0)
    a = d.hello("alice", kind="run", pid=4242, host=HOST)
    b = d.hello("bob")
    d.claim(a, "src/x.py")
    d.exited(a, at=0.5)
    assert {ag.name: ag.state for ag in d.status().agents}["alice"] == "gone"
    assert isinstance(d.claim(b, "src/x.py"), m.Granted)


def test_stale_agent_speaking_again_is_told_its_session_expired():
    d = Driver(heartbeat=1.0, liveness=3)
    a = d.hello("alice")
    d.claim(a, "src/x.py")
    d.tick(5.0)
    reply = d.heartbeat(a, at=5.1)
    assert isinstance(reply, m.Error) and reply.code == "session_expired"
    welcome = d.send(m.Hello(agent="alice", session=a))
    assert welcome.session != a and not welcome.resumed and "expired" in welcome.notice
    assert [c for c in d.status().claims if c.holder == "alice"] == []


def test_oneshot_session_lives_for_its_ttl_renewed_by_each_call():
    d = Driver(oneshot_ttl=60.0)
    s = d.hello("cli", kind="oneshot")
    d.claim(s, "a.py")
    d.tick(50.0)
    assert d.send(m.Hello(agent="cli", kind="oneshot"), at=50.0).session == s  # renews
    d.tick(100.0)
    assert d.status().agents[0].state == "alive"
    d.tick(111.0)
    assert d.status().agents[0].state == "stale"


def test_oneshot_call_acts_within_a_live_agents_session():
    d = Driver()
    run = d.hello("alice", kind="run")
    attached = d.send(m.Hello(agent="alice", kind="oneshot"))
    assert attached.session == run and attached.resumed
    # but a second long-lived session for a live name is refused
    error = d.send(m.Hello(agent="alice", kind="run"))
    assert isinstance(error, m.Error) and error.code == "agent_live"


def test_a_heartbeat_is_answered_only_when_the_client_listens_for_the_coordinator():
    d = Driver()
    a = d.hello("alice")
    assert d.send(m.Heartbeat(session=a)) is None
    answer = d.send(m.Heartbeat(session=a, echo=True, req=7))
    assert isinstance(answer, m.Ok) and answer.req == 7


def test_an_attached_client_follows_its_agent_into_a_renewed_session():
    d = Driver(heartbeat=1.0, liveness=3)
    run = d.hello("alice", kind="run", pid=4242, host=HOST)
    attached = d.send(m.Hello(agent="alice", kind="oneshot")).session
    assert attached == run
    d.tick(5.0)  # the wrapper was paused: its session ends
    renewed = d.send(m.Hello(agent="alice", kind="run", session=run, pid=4242, host=HOST))
    assert renewed.session != run and "expired" in renewed.notice
    # the attached client comes back with the ended session: it is told the live one
    follow = d.send(m.Hello(agent="alice", kind="oneshot", session=run))
    assert isinstance(follow, m.Welcome) and follow.session == renewed.session
    assert run in follow.notice and renewed.session in follow.notice
    # the renewed session kept its pid watch
    live = [a for a in d.status().agents if a.state == "alive"]
    assert [(a.session, a.pid) for a in live] == [(renewed.session, 4242)]


def test_a_returning_long_lived_client_takes_over_a_one_shot_session_opened_meanwhile():
    d = Driver(heartbeat=1.0, liveness=3)
    run = d.hello("alice", kind="run")
    d.tick(5.0)  # paused: ended
    placeholder = d.hello("alice", kind="oneshot")  # a CLI call while the wrapper was away
    token = d.claim(placeholder, "src/x.py").token
    back = d.send(m.Hello(agent="alice", kind="run", session=run, pid=4242, host=HOST))
    assert isinstance(back, m.Welcome) and back.session == placeholder and "took over" in back.notice
    assert "agent.adopted" in d.kinds()
    (agent,) = [a for a in d.status().agents if a.state == "alive"]
    assert (agent.kind, agent.pid) == ("run", 4242)
    assert [(c.pattern, c.token) for c in d.status().claims] == [("src/x.py", token)]
    # a run session again: silence ends it (a one-shot TTL no longer does)
    d.tick(9.5)
    assert [a.state for a in d.status().agents if a.session == placeholder] == ["stale"]
    # and replay rebuilds the same
    d2 = d.restart(at=20.0)
    adopted = [a for a in d2.status().agents if a.session == placeholder]
    assert adopted[0].kind == "run" and adopted[0].pid == 4242


def test_a_returning_client_is_refused_when_another_long_lived_process_has_the_name():
    d = Driver(heartbeat=1.0, liveness=3)
    first = d.hello("alice", kind="run")
    d.tick(5.0)
    d.hello("alice", kind="session")  # another process took the name
    error = d.send(m.Hello(agent="alice", kind="run", session=first))
    assert isinstance(error, m.Error) and error.code == "agent_live"


def test_restart_gives_live_sessions_a_fresh_lease_not_an_expiry():
    d = Driver(heartbeat=1.0, liveness=3)
    a = d.hello("alice")
    d.claim(a, "src/x.py")
    d2 = d.restart(at=1000.0)  # a long downtime
    d2.tick(1001.0)
    assert d2.status().agents[0].state == "alive"
    assert [c.pattern for c in d2.status().claims] == ["src/x.py"]
    d2.tick(1003.5)  # ...but silence after the restart still counts
    assert d2.status().agents[0].state == "stale"


def test_a_paused_coordinator_extends_leases_instead_of_expiring_everyone():
    d = Driver(heartbeat=1.0, liveness=3)
    a = d.hello("alice")
    d.claim(a, "src/x.py")
    d.tick(0.2)
    d.jump(30.0)  # the loop stood still for ~30s
    assert "coordinator.paused" in d.kinds()
    assert d.status().agents[0].state == "alive"
    d.tick(30.2)
    d.tick(33.3)
    assert d.status().agents[0].state == "stale"


def test_a_clock_kept_without_ticks_is_no_pause_and_the_next_status_records_nothing():
    """While the ledger cannot be written the shell does not tick (nothing may expire)
    but keeps the core's clock (``keep_time``): the next message, a status, must record
    nothing, since no commit could hold it.  Without the kept clock the same quiet is
    taken for a stalled loop."""
    for kept in (True, False):
        d = Driver(heartbeat=0.5, liveness=20)
        d.hello("alice")
        before = len(d.records)
        at = d.now
        while at < d.now + 5.0:
            at += 0.1
            if kept:
                d.core.keep_time(at)
        d.now = at
        assert isinstance(d.send(m.Status()), m.StatusReply)
        paused = [r for r in d.records[before:] if r.KIND == "coordinator.paused"]
        assert (paused == []) is kept, (kept, paused)


def test_claim_ttl_expires_and_frees_at_once():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "x.py", ttl=5.0)
    for t in (1.0, 2.0, 3.0, 4.0, 5.5):
        d.heartbeat(a, at=t)
        d.heartbeat(b, at=t)
        d.tick(t)
    assert isinstance(d.claim(b, "x.py"), m.Granted)


def test_force_release_frees_a_live_holder_and_notifies_it():
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "src/api/")
    released = d.send(m.Release(paths=["src/api/x.py"], force=True, reason="stuck", by="ops"))
    assert isinstance(released, m.Released) and released.holders == ["alice"]
    notice = [p for p in d.publications if p.kind == "notice"]
    assert notice and notice[0].agent == "alice" and "stuck" in notice[0].data["message"]
    record = [r for r in d.records if r.KIND == "claim.released"][-1]
    assert record.forced and "stuck" in record.reason


def test_force_release_needs_a_reason():
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "x.py")
    error = d.send(m.Release(paths=["x.py"], force=True))
    assert isinstance(error, m.Error) and error.code == "bad_request"


@pytest.mark.parametrize(
    "message, code",
    [
        (m.Hello(agent="bad name!"), "bad_agent"),
        (m.Hello(agent=""), "bad_agent"),
        (m.Hello(agent="a", v=99), "version"),
        (m.Hello(agent="a", repo="/other/.git"), "wrong_repo"),
        (m.Claim(session="nope", paths=["x"]), "unknown_session"),
    ],
)
def test_bad_requests_get_a_coded_error_and_change_nothing(message, code):
    d = Driver()
    before = len(d.records)
    reply = d.send(message)
    assert isinstance(reply, m.Error) and reply.code == code and reply.message
    assert len(d.records) == before


@pytest.mark.parametrize("ttl", [0.0, -1.0, math.nan, math.inf])
def test_a_ttl_that_is_not_positive_and_finite_is_refused(ttl):
    # an infinite TTL was granted, then status showed "expires_in": Infinity (not JSON)
    d = Driver()
    assert isinstance(d.send(m.Hello(agent="bob", kind="oneshot", ttl=ttl)), m.Error)
    a = d.hello("alice")
    before = len(d.records)
    reply = d.claim(a, "x.py", ttl=ttl)
    assert isinstance(reply, m.Error) and reply.code == "bad_request" and "finite" in reply.message
    assert len(d.records) == before and d.status().claims == []


@pytest.mark.parametrize("ttl", [5e-324, 1e-320, 0.009])
def test_a_ttl_below_the_minimum_is_refused_not_granted_expired(ttl):
    # a claim of ttl 5e-324 was granted, already expired when its reply left
    d = Driver()
    error = d.send(m.Hello(agent="bob", kind="oneshot", ttl=ttl))
    assert isinstance(error, m.Error) and error.code == "bad_request" and "at least 0.01 s" in error.message
    a = d.hello("alice")
    before = len(d.records)
    reply = d.claim(a, "x.py", ttl=ttl)
    assert isinstance(reply, m.Error) and reply.code == "bad_request", reply
    assert reply.message == f"ttl {ttl:g} s is too short: at least 0.01 s (it would expire before it is used)"
    assert len(d.records) == before and d.status().claims == []
    assert isinstance(d.claim(a, "x.py", ttl=0.01), m.Granted)  # the minimum itself is granted



def test_release_of_all_with_paths_is_refused_and_releases_nothing():
    # the MCP release tool passed both on, and every claim went
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "x.py", "y.py")
    reply = d.send(m.Release(session=a, paths=["x.py"], all=True))
    assert isinstance(reply, m.Error) and reply.code == "bad_request"
    assert sorted(c.pattern for c in d.status().claims) == ["x.py", "y.py"]


def test_paths_escaping_the_repo_are_refused():
    d = Driver()
    a = d.hello("alice")
    for bad in ("../etc/passwd", "/etc/passwd", "src/../../x"):
        reply = d.claim(a, bad)
        assert isinstance(reply, m.Error) and reply.code == "bad_path", bad


def test_bye_frees_claims_at_once():
    d = Driver(lock_delay=10.0)
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(a, "x.py")
    d.send(m.Bye(session=a))
    assert isinstance(d.claim(b, "x.py"), m.Granted)


def test_publications_are_sequenced_without_gaps():
    d = Driver()
    a = d.hello("alice")
    d.claim(a, "x.py")
    d.intent(a, "x.py")
    seqs = [p.seq for p in d.publications]
    assert seqs == list(range(1, len(seqs) + 1))
    assert d.status().seq == seqs[-1]


def test_start_from_a_snapshot_equals_start_from_the_whole_ledger():
    d = Driver(heartbeat=1.0, liveness=3, lock_delay=5.0)
    a, b, c = d.hello("alice"), d.hello("bob"), d.hello("carol", kind="oneshot")
    d.claim(a, "src/", "docs/x.md")
    d.claim(b, "tests/**", shared=True)
    d.claim(c, "tmp.txt", ttl=30.0)
    d.advance(2.0, keep_alive=(b, c))
    d.advance(4.0, keep_alive=(b,))  # alice goes stale: her paths are held
    snap = d.core.registry.snapshot(d.now, d.core.settings.lock_delay)
    cut = len(d.records)
    d.claim(b, "more/")
    full = d.restart(at=100.0)
    from_snapshot = Driver(history=d.records[cut:], now=100.0, snapshot=snap, heartbeat=1.0, liveness=3, lock_delay=5.0)
    left, right = full.status(), from_snapshot.status()
    assert left.epoch == right.epoch
    assert left.claims == right.claims
    assert left.holds == right.holds
    assert [(x.name, x.state, x.session) for x in left.agents] == [(x.name, x.state, x.session) for x in right.agents]
    assert full.claim(b, "z.py").token == from_snapshot.claim(b, "z.py").token


def _verify(d: Driver, session: str, passed: bool, failed=("test",)):
    accepted = d.send(m.Verify(session=session))
    if not isinstance(accepted, m.Accepted):
        return accepted
    gate = m.Gate(subject="verify", verdict="pass" if passed else "fail", reason="", job=accepted.job, agent="dev",
                  results=[] if passed else [{"name": n, "verdict": "fail"} for n in failed])
    d._absorb(d.core.job_finished(accepted.job, "verify", gate, d.now))
    return accepted


def test_done_passes_only_after_a_passing_verify_that_started_after_the_last_write():
    d = Driver()
    s = d.hello("dev")
    assert d.send(m.Done(session=s)).verdict == "pass"  # wrote nothing
    d.intent(s, "a.py")
    assert "no verify run" in d.send(m.Done(session=s)).reason
    _verify(d, s, passed=False)
    blocked = d.send(m.Done(session=s))
    assert blocked.verdict == "block" and "test" in blocked.reason
    _verify(d, s, passed=True)
    assert d.send(m.Done(session=s)).verdict == "pass"
    d.intent(s, "a.py")
    assert d.send(m.Done(session=s)).verdict == "block"


def test_a_verify_that_started_before_the_last_write_does_not_count():
    d = Driver()
    s = d.hello("dev")
    d.intent(s, "a.py")
    accepted = d.send(m.Verify(session=s))
    d.intent(s, "b.py")  # written while the verify ran
    gate = m.Gate(subject="verify", verdict="pass", reason="", job=accepted.job, agent="dev")
    d._absorb(d.core.job_finished(accepted.job, "verify", gate, d.now))
    assert d.send(m.Done(session=s)).verdict == "block"


def test_the_repair_loop_stops_re_running_after_max_failing_rounds():
    d = Driver(max_repair_loops=2)
    s = d.hello("dev")
    d.intent(s, "a.py")
    assert isinstance(_verify(d, s, passed=False), m.Accepted)
    d.intent(s, "a.py")  # a repair attempt does not reset the bound
    assert isinstance(_verify(d, s, passed=False), m.Accepted)
    refused = d.send(m.Verify(session=s))
    assert isinstance(refused, m.Gate) and refused.verdict == "escalate" and "not re-running" in refused.reason
    assert isinstance(d.send(m.Verify(session=s, new_turn=True)), m.Accepted)
    # and it all survives a restart (the ledger has it)
    d2 = d.restart(at=10.0)
    assert d2.core.registry.failing_rounds == d.core.registry.failing_rounds


def test_policy_off_does_not_gate_done():
    d = Driver(verify_policy="off")
    s = d.hello("dev")
    d.intent(s, "a.py")
    assert d.send(m.Done(session=s)).verdict == "pass"


def test_a_bug_in_a_handler_is_answered_internal_and_the_core_keeps_serving(monkeypatch):
    d = Driver()
    a = d.hello("alice")

    def broken(self, peer, msg, now):
        raise ZeroDivisionError("oops")

    monkeypatch.setitem(type(d.core)._HANDLERS, m.Intent, broken)
    reply = d.send(m.Intent(session=a, paths=["x.py"]))
    assert isinstance(reply, m.Error) and reply.code == "internal" and "oops" in reply.message
    assert isinstance(d.claim(a, "x.py"), m.Granted)  # everyone else, and alice, still served


def _decide_write_lost(d: Driver, job: str = "j"):
    from probes.rules import Finding, RuleTable

    decisions = d.core.decide_rules(job, [Finding(finding="write lost", probe="w", agent="dev")], RuleTable(), d.now)
    d._absorb(decisions.effects)
    (response,) = decisions.responses
    return response


def test_rule_retry_counts_are_ledger_records_and_survive_a_restart():
    d = Driver()
    d.hello("dev")
    first = _decide_write_lost(d)
    assert (first.action, first.params["attempt"]) == ("retry", 1)
    assert d.kinds()[-1] == "rule.decided"
    d2 = d.restart(at=5.0)  # a restart mid-repair-loop continues the count
    second = _decide_write_lost(d2)
    assert (second.action, second.params["attempt"]) == ("retry", 2)
    d3 = d2.restart(at=10.0)
    assert _decide_write_lost(d3).params["attempt"] == 3
    bound = _decide_write_lost(d3)  # the default bound is 3 retries: a person decides now
    assert bound.action == "notify" and "retry bound reached" in bound.reason


def test_an_edit_batch_is_verified_by_the_core_after_a_quiet_spell_even_across_a_restart():
    from coordinator.checks import EDIT_BATCH_QUIET

    d = Driver(verify_policy="after-each-edit-batch")
    s = d.hello("dev", worktree="/w/dev")
    d.intent(s, "a.py")
    d.advance(EDIT_BATCH_QUIET / 2, keep_alive=(s,))
    d.intent(s, "b.py")  # extends the batch
    d.tick(EDIT_BATCH_QUIET * 1.2)
    assert "job.started" not in d.kinds()
    d.intent(s, "c.py")
    d2 = d.restart(at=d.now + 1)  # the batch is in the ledger: the restarted core still verifies it
    d2.tick(d2.now + EDIT_BATCH_QUIET + 0.3)
    started = [r for r in d2.records if r.KIND == "job.started"]
    assert [(r.kind, r.agent, r.cwd) for r in started] == [("verify", "dev", "/w/dev")]
    assert d2.core.registry.edit_batches == {}
    d2.tick(d2.now + EDIT_BATCH_QUIET * 3)
    assert sum(r.KIND == "job.started" for r in d2.records) == 1  # once per batch


def test_without_the_edit_batch_policy_the_core_starts_no_verify():
    d = Driver()
    s = d.hello("dev")
    d.intent(s, "a.py")
    d.advance(10.0, keep_alive=(s,))
    assert "job.started" not in d.kinds()


def test_a_write_seen_after_the_fact_claims_a_free_path_and_reports_a_held_one():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(b, "src/held.py")
    free = d.send(m.Wrote(session=a, paths=["src/free.py"], source="claude PostToolUse Bash"))
    assert free.verdict == "allow" and free.token is not None
    assert [c.holder for c in d.status().claims if c.pattern == "src/free.py"] == ["alice"]
    assert "write.unannounced" not in d.kinds()
    held = d.send(m.Wrote(session=a, paths=["src/free.py", "src/held.py"], source="claude PostToolUse Bash"))
    assert held.verdict == "block" and held.holders == ["bob"]
    event = next(r for r in d.records if r.KIND == "write.unannounced")
    assert (event.agent, event.paths, event.holders, event.source) == ("alice", ["src/held.py"], ["bob"], "claude PostToolUse Bash")
    assert any(p.kind == "write.unannounced" and p.data["paths"] == ["src/held.py"] for p in d.publications)


def test_a_write_after_the_fact_in_warn_mode_warns_and_is_still_reported():
    d = Driver(mode="parallel-warn")
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(b, "src/held.py")
    decision = d.send(m.Wrote(session=a, paths=["src/held.py"]))
    assert decision.verdict == "warn" and decision.holders == ["bob"]
    assert "write.unannounced" in d.kinds()


def test_a_write_after_the_fact_still_claims_the_free_paths_beside_a_held_one():
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(b, "src/held.py")
    decision = d.send(m.Wrote(session=a, paths=["src/held.py", "src/free.py"]))
    assert decision.verdict == "block" and decision.holders == ["bob"]
    assert {c.pattern: c.holder for c in d.status().claims} == {"src/held.py": "bob", "src/free.py": "alice"}


def test_in_warn_mode_a_write_after_the_fact_still_claims_the_free_paths_beside_a_held_one():
    d = Driver(mode="parallel-warn")
    a, b = d.hello("alice"), d.hello("bob")
    d.claim(b, "src/held.py")
    decision = d.send(m.Wrote(session=a, paths=["src/free.py", "src/held.py"], source="run watcher"))
    assert decision.verdict == "warn" and decision.holders == ["bob"]
    assert {c.pattern: c.holder for c in d.status().claims} == {"src/held.py": "bob", "src/free.py": "alice"}
    event = next(r for r in d.records if r.KIND == "write.unannounced")
    assert (event.agent, event.paths, event.holders, event.source) == ("alice", ["src/held.py"], ["bob"], "run watcher")


def test_names_and_messages_with_control_characters_are_refused_but_a_ledgers_old_ones_still_release():
    """An ESC in a claimed name or a message reached terminals raw (status, top, inbox):
    a claim named ``x\\x1b]0;...\\x07`` retitled the reader's terminal."""
    import msgspec

    from ledger import records as rec

    d = Driver()
    a = d.hello("alice")
    for refused in (d.claim(a, "x\x1b]0;owned\x07.txt"), d.intent(a, "src/a\nb.py")):
        assert isinstance(refused, m.Error) and refused.code == "bad_path" and "control character" in refused.message
    assert d.status().claims == []
    # A write seen after the fact still reports the call's other files.
    seen = d.send(m.Wrote(session=a, paths=["ok.txt", "esc\x1b.txt"], source="test"))
    assert isinstance(seen, m.Decision) and seen.paths == ["ok.txt"]
    assert [c.pattern for c in d.status().claims] == ["ok.txt"]
    d.send(m.Release(session=a, paths=["ok.txt"]))
    bad = d.send(m.SendText(to="alice", text="hi\x1b[2J"))
    assert isinstance(bad, m.Error) and bad.code == "bad_request" and "U+001B" in bad.message
    assert isinstance(d.send(m.SendText(to="alice", text="two lines\n\tand a tab")), m.Ok)
    # A ledger written before the check may hold such a claim: it loads, and releases.
    assert isinstance(d.claim(a, "src/plain.py"), m.Granted)
    history = [
        msgspec.structs.replace(r, patterns=["src/we\nird.py"]) if isinstance(r, rec.ClaimGranted) else r for r in d.records
    ]
    later = Driver(history=history, now=d.now + 1)
    assert [c.pattern for c in later.status().claims] == ["src/we\nird.py"]
    released = later.send(m.Release(session=a, paths=["src/we\nird.py"]))
    assert isinstance(released, m.Released) and released.patterns == ["src/we\nird.py"]


def test_live_sessions_are_bounded_and_a_live_agent_still_resumes(monkeypatch):
    from coordinator import core

    monkeypatch.setattr(core, "MAX_LIVE_SESSIONS", 3)
    d = Driver()
    sessions = [d.hello(f"a{n}") for n in range(3)]
    recorded = len(d.records)
    refused = d.send(m.Hello(agent="one-too-many"))
    assert isinstance(refused, m.Error) and refused.code == "refused" and "3 sessions are live" in refused.message
    assert len(d.records) == recorded  # nothing recorded
    resumed = d.send(m.Hello(agent="a0", session=sessions[0]))
    assert isinstance(resumed, m.Welcome) and resumed.resumed
    assert isinstance(d.send(m.Bye(session=sessions[1])), m.Ok)  # one ends: room for one
    assert isinstance(d.send(m.Hello(agent="now-it-fits")), m.Welcome)


def test_live_claims_are_bounded_a_claim_past_them_is_refused_and_an_intent_allowed_unclaimed(monkeypatch):
    from coordinator import core

    monkeypatch.setattr(core, "MAX_LIVE_CLAIMS", 3)
    d = Driver()
    a, b = d.hello("alice"), d.hello("bob")
    assert isinstance(d.claim(a, "src/1.py", "src/2.py"), m.Granted)
    recorded = len(d.records)
    refused = d.claim(b, "src/3.py", "src/4.py")
    assert isinstance(refused, m.Error) and refused.code == "refused" and "at most 3" in refused.message
    assert len(d.records) == recorded  # nothing recorded
    assert isinstance(d.claim(a, "src/1.py", "src/2.py"), m.Granted)  # a re-claim adds nothing: still answered
    assert isinstance(d.claim(b, "src/3.py"), m.Granted)  # the last one that fits
    decision = d.intent(b, "src/5.py")
    assert decision.verdict == "allow" and decision.token is None and "not claimed" in decision.reason
    assert d.intent(a, "src/3.py").verdict == "block"  # a held path is still in the way


@pytest.mark.parametrize("timeout", [5e-324, 0.009, 86400.5, 1e308, math.nan])
def test_a_check_timeout_out_of_bounds_is_refused_before_a_job_opens(timeout):
    # 5e-324 opened a job that "timed out"; 1e308 one a hung check held for ever
    d = Driver()
    before = len(d.records)
    probe = m.ProbeRequest(kind="command", params={"shell": "true"}, timeout=timeout)
    reply = d.send(m.Check(probe=probe, cwd="/repo"))
    assert isinstance(reply, m.Error) and reply.code == "bad_request", reply
    assert reply.message.startswith("timeout must be between 0.01 s and 86400 s (a day)")
    assert len(d.records) == before
    assert isinstance(d.send(m.Check(probe=m.ProbeRequest(kind="command", params={"shell": "true"}, timeout=86400), cwd="/repo")), m.Accepted)


@pytest.mark.parametrize("pid", [0, -1, 2**31, 2**63 - 1])
def test_a_pid_that_is_no_pid_t_is_refused_before_it_is_watched(pid):
    # a hello with pid 2**31 reached the pid watcher, whose os.pidfd_open raised
    # OverflowError and ended the coordinator
    d = Driver()
    before = len(d.records)
    error = d.send(m.Hello(agent="bob", kind="oneshot", pid=pid, host=HOST))
    assert isinstance(error, m.Error) and error.code == "bad_request", error
    assert error.message == f"pid must be a process id (1 to 2147483647), not {pid}"
    a = d.hello("alice")
    error = d.send(m.Watch(session=a, pid=pid))
    assert isinstance(error, m.Error) and error.code == "bad_request", error
    assert len(d.records) == before + 1  # alice's hello only
