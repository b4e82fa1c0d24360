"""A status rendered a slice per turn (coordinator/statusrender.py) says exactly what
the core's one-go status says, and takes one turn per ``ROWS_PER_TURN`` claims."""

from __future__ import annotations

import math

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.effects import Send
from coordinator.statusrender import ROWS_PER_TURN, StatusRender
from protocol import messages as m

from .core_driver import Driver


def _held(claims_per_agent: list[int]) -> Driver:
    d = Driver()
    for i, count in enumerate(claims_per_agent):
        session = d.hello(f"agent{i}")
        for j in range(count):
            d.claim(session, f"src/{i}/f{j}.py", *([f"src/{i}/g{j}.py"] if j % 3 == 0 else []))
    d.advance(d.now + 1.5)  # ages to list
    return d


def _rendered(d: Driver, query: m.Status) -> tuple[m.StatusReply, int]:
    effects, parts = d.core.status("peer", query, d.now)
    assert not [e for e in effects if isinstance(e, Send)] and parts is not None
    render, turns = StatusRender(b"peer", parts), 0
    while True:
        turns += 1
        assert render.step(ROWS_PER_TURN) <= ROWS_PER_TURN
        if render.done:
            return render.reply(), turns


def _without_counters(reply: m.StatusReply) -> dict:
    out = msgspec.to_builtins(reply)
    del out["statistics"]  # the core counts each status it answers
    return out


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=3))
def test_a_status_rendered_in_slices_is_the_status_answered_in_one_go(claims_per_agent):
    d = _held(claims_per_agent)
    for query in (m.Status(req=7), m.Status(req=8, agent="agent0"), m.Status(req=9, path="src/0/**")):
        sliced, turns = _rendered(d, query)
        whole = d.send(query)
        assert _without_counters(sliced) == _without_counters(whole)
        assert turns == max(1, math.ceil(len(whole.claims) / ROWS_PER_TURN))


def test_the_claim_rows_are_listed_by_token_then_pattern_across_slices():
    d = _held([3 * ROWS_PER_TURN, 5])
    reply, turns = _rendered(d, m.Status(req=1))
    keys = [(c.token, c.pattern) for c in reply.claims]
    assert turns > 3 and keys == sorted(keys) and len(set(keys)) == len(keys) == reply.counts["claims"]


def test_a_bad_query_is_answered_at_once_and_renders_nothing():
    d = _held([2])
    effects, parts = d.core.status("peer", m.Status(req=3, agent="no such name!"), d.now)
    assert parts is None
    assert [(e.peer, e.message.code) for e in effects if isinstance(e, Send)] == [("peer", "bad_agent")]
