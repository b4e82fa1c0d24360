"""`lockstep top`'s view: snapshot plus sequenced updates, gaps healed by a new snapshot."""

from __future__ import annotations

from agents.top import View, render
from protocol import messages as m


def _snapshot(seq: int, epoch: int = 1) -> m.StatusReply:
    return m.StatusReply(mode="parallel-strict", epoch=epoch, endpoints=[], pub=[], agents=[], claims=[], seq=seq)


def _pub(seq: int, topic: str, epoch: int = 1, **data) -> m.Publication:
    return m.Publication(seq=seq, epoch=epoch, kind=topic, agent="a", data=data)


def test_updates_already_in_the_snapshot_are_ignored_and_newer_ones_applied():
    view = View()
    view.take(_snapshot(seq=5))
    view.apply(_pub(4, "intent.decided", verdict="allow"))
    assert not view.recent and not view.stale_snapshot
    view.apply(_pub(6, "intent.decided", verdict="block", paths=["x"], reason="held"))
    assert view.seq == 6 and len(view.recent) == 1 and not view.stale_snapshot


def test_a_gap_in_seq_asks_for_a_new_snapshot():
    view = View()
    view.take(_snapshot(seq=5))
    view.apply(_pub(8, "job.started", job="1.1", kind="verify"))
    assert view.stale_snapshot and view.gaps == 1
    view.take(_snapshot(seq=8))
    assert not view.stale_snapshot


def test_a_new_epoch_is_not_a_gap_but_needs_a_snapshot():
    view = View()
    view.take(_snapshot(seq=50, epoch=1))
    view.apply(_pub(1, "coordinator.stopped", epoch=2))
    assert view.stale_snapshot and view.gaps == 0 and view.seq == 1


def test_claim_and_agent_changes_refresh_the_tables_and_jobs_are_tracked():
    view = View()
    view.take(_snapshot(seq=0))
    view.apply(_pub(1, "claim.granted", token=3))
    assert view.stale_snapshot
    view.take(_snapshot(seq=1))
    view.apply(_pub(2, "job.started", job="1.2", kind="check"))
    view.apply(_pub(3, "job.progress", job="1.2"))
    assert view.jobs["1.2"]["done"] == 1
    view.apply(_pub(4, "job.finished", job="1.2", kind="check", verdict="pass", reason="ok"))
    assert view.jobs == {} and view.recent[0][1].kind == "job.finished"
    assert render(view) is not None
