"""`[handoff] required`: done waits for a passing handoff since the last write, and a
block a handoff finding raised is lifted only by a passing handoff (the pure core)."""

from __future__ import annotations

from ledger import records as rec
from protocol import messages as m

from .core_driver import Driver
from .test_core import _verify


def _handoff(d: Driver, agent: str, *, passed: bool, score: int = 90, false: tuple[str, ...] = (), target: str = "/w/bob/HANDOFF.md", job: str = "9.1"):
    facts = [{"kind": "commit", "claim": "abc1234", "section": "", "holds": False, "note": note} for note in false]
    result = {
        "name": "handoff", "kind": "handoff", "target": target, "verdict": "pass" if passed else "fail",
        "finding": None if passed else "handoff incomplete",
        "details": {"score": score, "threshold": 85, "passed": passed, "facts": facts, "missing": [f"false: {n}" for n in false]},
    }
    d._absorb(d.core.job_result(job, "check", agent, result, d.now))


def test_done_needs_a_passing_handoff_since_the_last_write():
    d = Driver(handoff_required=True)
    s = d.hello("bob")
    d.intent(s, "a.py")
    _verify(d, s, passed=True)
    refused = d.send(m.Done(session=s))
    assert refused.verdict == "block" and "a handoff is required" in refused.reason
    assert "`lockstep check handoff HANDOFF.md --agent bob`" in refused.reason

    _handoff(d, "bob", passed=False, score=40, false=("commit abc1234 is cited, but no such commit in the repository",))
    refused = d.send(m.Done(session=s))
    assert refused.verdict == "block"
    assert "did not pass (job 9.1, score 40, threshold 85): 1 false fact: commit abc1234 is cited" in refused.reason

    _handoff(d, "bob", passed=True, score=95)
    assert d.send(m.Done(session=s)).verdict == "pass"
    [checked] = [r for r in d.records if isinstance(r, rec.HandoffChecked) and r.passed]
    assert checked.agent == "bob" and checked.score == 95

    d.intent(s, "a.py")
    _verify(d, s, passed=True)
    stale = d.send(m.Done(session=s))
    assert stale.verdict == "block" and "wrote since its handoff was checked" in stale.reason
    # and it all survives a restart (the ledger has it)
    d2 = d.restart(at=10.0)
    assert d2.core.registry.handoffs == d.core.registry.handoffs


def test_a_lower_threshold_on_the_command_line_does_not_pass_the_gate_nor_lift_a_block():
    d = Driver(handoff_required=True)
    s = d.hello("bob")
    _handoff(d, "bob", passed=True, score=50)  # checked with --threshold 50
    refused = d.send(m.Done(session=s))
    assert refused.verdict == "block" and "scores 50, below the threshold 85" in refused.reason
    [checked] = [r for r in d.records if isinstance(r, rec.HandoffChecked)]
    assert checked.threshold == 85 and not checked.passed
    d._absorb(d.core.note(rec.AgentBlocked(agent="bob", reason="handoff incomplete", lifted_by="handoff"), d.now))
    _handoff(d, "bob", passed=True, score=50)
    assert "bob" in d.core.registry.blocked


def test_another_note_does_not_count():
    d = Driver(handoff_required=True, handoff_path="docs/HANDOFF.md")
    s = d.hello("bob")
    _handoff(d, "bob", passed=True, target="/w/bob/other.md")
    assert "no check of it is recorded" in d.send(m.Done(session=s)).reason
    _handoff(d, "bob", passed=True, target="/w/bob/docs/HANDOFF.md")
    assert d.send(m.Done(session=s)).verdict == "pass"


def test_only_the_agents_named_need_a_handoff():
    d = Driver(handoff_required=True, handoff_agents=["bob"])
    carol = d.hello("carol")
    assert d.send(m.Done(session=carol)).verdict == "pass"
    bob = d.hello("bob")
    assert d.send(m.Done(session=bob)).verdict == "block"


def test_a_handoff_block_is_lifted_by_a_passing_handoff_not_by_a_passing_verify():
    d = Driver()
    s = d.hello("bob")
    blocked = rec.AgentBlocked(agent="bob", reason="handoff incomplete: fix it", lifted_by="handoff", allow=["HANDOFF.md"])
    d._absorb(d.core.note(blocked, d.now))
    # It may still fix its note, and nothing else.
    assert d.send(m.Intent(session=s, paths=["HANDOFF.md"])).verdict == "allow"
    assert d.send(m.Intent(session=s, paths=["src/a.py"])).verdict == "block"
    _verify(d, s, passed=True)
    assert "bob" in d.core.registry.blocked
    assert "blocked by a rule" in d.send(m.Done(session=s)).reason
    _handoff(d, "bob", passed=False, score=30)
    assert "bob" in d.core.registry.blocked
    _handoff(d, "bob", passed=True)
    assert "bob" not in d.core.registry.blocked
    assert d.send(m.Intent(session=s, paths=["src/a.py"])).verdict == "allow"


def test_a_verify_block_is_still_lifted_by_a_passing_verify_and_both_need_both():
    d = Driver()
    s = d.hello("bob")
    d._absorb(d.core.note(rec.AgentBlocked(agent="bob", reason="build produced nothing"), d.now))
    d._absorb(d.core.note(rec.AgentBlocked(agent="bob", reason="handoff incomplete", lifted_by="handoff"), d.now))
    _handoff(d, "bob", passed=True)
    assert "bob" in d.core.registry.blocked  # the verify block stands
    d2 = d.restart(at=5.0)
    assert d2.core.registry.block_lifts == {"bob": ["verify"]}
    _verify(d, s, passed=True)
    assert "bob" not in d.core.registry.blocked
