"""The agent lifecycle table (coordinator/lifecycle.py) and its use by core and registry."""

from __future__ import annotations

import pytest

from coordinator import lifecycle
from coordinator.lifecycle import (
    ALIVE,
    EVENTS,
    GONE,
    LEFT,
    SILENT,
    STALE,
    STATES,
    IllegalTransition,
)
from ledger import records as rec
from protocol import messages as m
from protocol.errors import LocalError

from .core_driver import Driver


def test_only_alive_sessions_end_and_stale_and_gone_are_final():
    for state in STATES:
        for event in EVENTS:
            if state == ALIVE:
                assert lifecycle.transition(state, event).to in (STALE, GONE)
            else:
                with pytest.raises(IllegalTransition):
                    lifecycle.transition(state, event)
    silent, left = lifecycle.transition(ALIVE, SILENT), lifecycle.transition(ALIVE, LEFT)
    assert (silent.to, silent.record, silent.release, silent.hold) == (STALE, rec.AgentStale, rec.ClaimExpired, True)
    assert (left.to, left.record, left.release, left.hold) == (GONE, rec.AgentLeft, rec.ClaimReleased, False)
    assert issubclass(IllegalTransition, LocalError)  # our bug, never a peer's fault


def test_an_illegal_transition_raises_and_changes_nothing():
    d = Driver()
    s = d.hello("dev")
    d.claim(s, "a.py")
    d.send(m.Bye(session=s))
    agent = d.core.registry.sessions[s]
    assert agent.state == GONE
    before = (list(d.records), agent.reason, len(d.core.registry.claims), len(d.core.registry.holds))
    with pytest.raises(IllegalTransition):
        d.core._end(agent, SILENT, "again", d.now)
    assert d.core._flush() == []  # nothing recorded, published or sent
    assert (list(d.records), agent.reason, len(d.core.registry.claims), len(d.core.registry.holds)) == before


def test_replaying_a_record_the_table_refuses_changes_nothing():
    d = Driver()
    s = d.hello("dev")
    d.send(m.Bye(session=s, reason="done"))
    reg = d.core.registry
    reg.apply(rec.AgentStale(agent="dev", session=s, reason="late"), d.now)
    assert (reg.sessions[s].state, reg.sessions[s].reason) == (GONE, "done")
