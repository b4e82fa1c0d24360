"""The registry's shortcuts for the common records change nothing (hypothesis).

``Registry.apply`` takes grants and releases by their exact types, before its match; a
record of a subclass of those types goes through the match instead.  The same random
ledger, applied once as it is and once as such subclasses, must leave the same state:
the same snapshot, and the same claims and holds in the same order (which decides the
order of the conflicts a refusal lists).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.registry import Registry
from ledger import records as rec


class _Granted(rec.ClaimGranted, frozen=True, kw_only=True):
    """A grant the exact-type shortcut does not recognise."""


class _Released(rec.ClaimReleased, frozen=True, kw_only=True):
    """A release the exact-type shortcut does not recognise."""


AGENTS = ["ann", "bob"]
PATTERNS = ["src/a.py", "src/b.py", "src/", "src/*.py", "docs/x.md", "**/x.md", "a/b/c.py", "./src//a.py"]


@st.composite
def ledgers(draw) -> list[rec.Record]:
    """Sessions joining, then grants (some superseding, some with a TTL), releases and
    expiries (some with a lock delay) of what was granted, or of what never was."""
    records: list[rec.Record] = [rec.CoordinatorStarted(epoch=1)]
    records += [rec.AgentJoined(agent=name, session=f"1.{i}") for i, name in enumerate(AGENTS, 1)]
    token = 0
    granted: list[tuple[str, str, int, list[str]]] = []
    for _ in range(draw(st.integers(0, 30))):
        action = draw(st.sampled_from(["grant", "grant", "release", "expire", "stray"]))
        if action == "grant" or not granted:
            i = draw(st.integers(0, len(AGENTS) - 1))
            token += 1
            patterns = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3))
            records.append(
                rec.ClaimGranted(
                    agent=AGENTS[i], session=f"1.{i + 1}", token=token, patterns=patterns,
                    access=draw(st.sampled_from(["exclusive", "shared"])), ttl=draw(st.sampled_from([None, 5.0])),
                )
            )
            granted.append((AGENTS[i], f"1.{i + 1}", token, patterns))
            continue
        agent, session, held_token, patterns = draw(st.sampled_from(granted))
        if action == "stray":  # a release of a superseded or unknown token changes nothing
            held_token += draw(st.integers(1, 3))
        released = rec.ClaimExpired if action == "expire" else rec.ClaimReleased
        records.append(
            released(
                agent=agent, session=session, token=held_token,
                patterns=draw(st.lists(st.sampled_from(patterns), min_size=1)),
                hold_for=draw(st.sampled_from([0.0, 2.0])),
            )
        )
    return records


def _as_subclasses(record: rec.Record) -> rec.Record:
    if type(record) is rec.ClaimGranted:
        return _Granted(**{f: getattr(record, f) for f in record.__struct_fields__})
    if type(record) is rec.ClaimReleased:
        return _Released(**{f: getattr(record, f) for f in record.__struct_fields__})
    return record


def _state(reg: Registry, now: float):
    claims = [(p.text, e.agent, e.session, e.token, e.access, e.since, e.expires_at, e.granted) for p, e in reg.claims]
    holds = [(p.text, h.former, h.token, h.until) for p, h in reg.holds]
    by_agent = {name: [(text, e.token) for text, e in mine.items()] for name, mine in reg.claims_by_agent.items()}
    seen = {s: (a.seen, a.last_seen) for s, a in reg.sessions.items()}
    expiring = [(e.pattern.text, e.token) for e in reg.expiring.values()]
    return (
        reg.snapshot(now, 2.0), claims, holds, by_agent, list(by_agent), seen, expiring,
        dict(reg.exclusive_count), reg.claim_chars, reg.next_token,
    )


@settings(max_examples=300, deadline=None)
@given(ledgers())
def test_grants_and_releases_apply_the_same_through_the_shortcut_and_the_match(records):
    shortcut, general = Registry(), Registry()
    for step, record in enumerate(records):
        now = 10.0 + step
        shortcut.apply(record, now, now - 0.5)
        general.apply(_as_subclasses(record), now, now - 0.5)
        assert _state(shortcut, now) == _state(general, now)
