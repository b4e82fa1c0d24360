"""The turn-end gate under [land] required, as a pure decision over the registry."""

from __future__ import annotations

from coordinator.integration import IntegrationIndex
from coordinator.landgate import land_stop
from coordinator.registry import Registry
from ledger import records as rec
from protocol import messages as m

HEAD, TIP, TREE, OTHER_TREE = "a" * 40, "b" * 40, "c" * 40, "d" * 40


def _index() -> IntegrationIndex:
    index = IntegrationIndex("refs/heads/main")
    index.advance(TIP, [])
    return index


def _stop(tree: str = TREE, head_tree: str = TREE, branch: str = "refs/heads/bob", head: str = HEAD) -> m.Verify:
    return m.Verify(session="s1", turn_end=True, tree=tree, head_tree=head_tree, branch=branch, head=head)


def test_nothing_to_land_onto_leaves_the_decision_to_the_verify_gate():
    reg = Registry()
    assert land_stop(reg, None, "bob", _stop()).action == "verify"  # no git repository
    assert land_stop(reg, _index(), "bob", _stop(branch="")).action == "verify"  # detached HEAD
    assert land_stop(reg, _index(), "bob", _stop(branch="refs/heads/main")).action == "verify"  # on main itself


def test_uncommitted_content_blocks_once_a_turn_then_lets_the_turn_end():
    reg = Registry()
    first = land_stop(reg, _index(), "bob", _stop(tree=OTHER_TREE))
    assert (first.action, first.verdict) == ("decide", "block") and "commit" in first.reason
    reg.apply(rec.StopDecided(agent="bob", verdict="block", reason=first.reason, tree=OTHER_TREE), 0.0)
    again = land_stop(reg, _index(), "bob", _stop(tree=OTHER_TREE))
    assert (again.verdict, "not landed" in again.reason) == ("escalate", True)
    reg.apply(rec.TurnStarted(agent="bob"), 0.0)  # a new turn is told again
    assert land_stop(reg, _index(), "bob", _stop(tree=OTHER_TREE)).verdict == "block"


def test_a_head_is_landed_joined_or_queued_and_a_reported_refusal_ends_the_turn():
    reg = Registry()
    assert land_stop(reg, _index(), "bob", _stop(head=TIP)).verdict == "allow"  # the branch is main's tip
    assert land_stop(reg, _index(), "bob", _stop()).action == "land"
    reg.apply(rec.LandQueued(agent="bob", job="1.1", branch="refs/heads/bob", head=HEAD), 0.0)
    joined = land_stop(reg, _index(), "bob", _stop())
    assert (joined.action, joined.job) == ("join", "1.1")
    assert land_stop(reg, _index(), "alice", _stop()).action == "land"  # another agent's landing is its own
    reg.apply(rec.LandRefused(agent="bob", job="1.1", branch="refs/heads/bob", head=HEAD, verdict="failed", reason="test failed"), 0.0)
    ended = land_stop(reg, _index(), "bob", _stop())
    assert ended.verdict == "escalate" and "failed: test failed" in ended.reason
    reg.apply(rec.TurnStarted(agent="bob"), 0.0)
    assert land_stop(reg, _index(), "bob", _stop()).action == "land"  # a new turn lands it afresh
    reg.apply(rec.LandQueued(agent="bob", job="1.2", branch="refs/heads/bob", head=HEAD), 0.0)
    reg.apply(rec.LandLanded(agent="bob", job="1.2", branch="refs/heads/bob", head=HEAD, commit="e" * 40, base=TIP), 0.0)
    landed = land_stop(reg, _index(), "bob", _stop())
    assert landed.verdict == "allow" and "eeeeeeeeee" in landed.reason and not reg.open_landings


def test_the_gates_state_survives_a_snapshot():
    reg = Registry()
    reg.apply(rec.LandQueued(agent="bob", job="1.1", branch="refs/heads/bob", head=HEAD), 0.0)
    reg.apply(rec.StopDecided(agent="bob", verdict="block", reason="commit", tree=OTHER_TREE), 0.0)
    reg.apply(rec.LandLanded(agent="carol", job="1.0", branch="refs/heads/carol", head=TIP, commit="e" * 40, base=HEAD), 0.0)
    back = Registry.from_snapshot(reg.snapshot(0.0, 1.0), 0.0)
    assert back.open_landings == reg.open_landings and back.turn_reported == reg.turn_reported
    assert back.landed_heads == {TIP: "e" * 40}
