"""Hostile frames against a real coordinator: nothing a peer sends can end it.

Each test reproduces a failure seen when the coordinator was attacked black-box (a
frame that killed it, a path that printed a traceback) and checks what must hold now:
the peer gets an error, the coordinator keeps granting, its ledger is intact, and the
registry it holds is the one a replay of its ledger gives.
"""

from __future__ import annotations

import sqlite3

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import messages as m
from protocol.codec import decode_request, encode
from protocol.errors import PeerError

from .conftest import status
from .test_bad_input import RawClient

# Leases long enough that an agent never goes stale while its coordinator restarts.
STEADY = ("--heartbeat", "0.5", "--liveness", "20", "--lock-delay", "1")
DEEP = 100_000  # ~100 KB of nested arrays: enough to raise RecursionError in msgspec


def _str(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 32
    return bytes([0xA0 | len(raw)]) + raw


def _map(*pairs: tuple[str, bytes]) -> bytes:
    assert len(pairs) < 16
    return bytes([0x80 | len(pairs)]) + b"".join(_str(k) + v for k, v in pairs)


def nested_arrays(depth: int) -> bytes:
    return b"\x91" * depth + b"\x01"


def nested_maps(depth: int) -> bytes:
    return b"\x81\xa1k" * depth + b"\x01"


def deep_frames(depth: int = DEEP, nest=nested_arrays) -> list[bytes]:
    """The frames that killed the coordinator, and their relatives."""
    deep = nest(depth)
    return [
        _map(("type", _str("status")), ("req", deep)),  # inside a map value
        _map(("type", _str("status")), ("req", _str("1")), ("x", deep)),  # under a field the decoder skips
        _map(("x", deep), ("type", _str("status"))),  # before the tag
        _map(("type", _str("check")), ("req", b"\x07"), ("probe", _map(("kind", _str("cmd")), ("params", _map(("x", deep)))))),
        deep,  # the whole frame
    ]


def assert_still_serving(repo, raw: RawClient, alice, token: int) -> None:
    """The coordinator answers, grants, and fences as before."""
    assert alice.do("intent", paths=["src/app.py"], token=token)["verdict"] == "allow"
    assert alice.do("claim", paths=["src/new.py"])["type"] == "granted"
    alice.do("release", paths=["src/new.py"])
    raw.send(encode(m.Status(req=99)))
    assert isinstance(raw.reply(), m.StatusReply)


def assert_ledger_intact_and_replayed(repo, c) -> None:
    """``PRAGMA integrity_check`` passes, and a coordinator restarted from the ledger
    alone (killed: no snapshot at stop) holds exactly the claims this one held."""
    before = sorted((x["pattern"], x["holder"], x["token"], x["access"]) for x in status(repo)["claims"])
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    c.kill()
    c.start()
    after = sorted((x["pattern"], x["holder"], x["token"], x["access"]) for x in status(repo)["claims"])
    assert after == before


def send_and_expect_error(raw: RawClient, frame: bytes, req: int = 0) -> m.Error:
    raw.send(frame)
    reply = raw.reply()
    assert isinstance(reply, m.Error), reply
    return reply


def test_a_deeply_nested_frame_gets_malformed_and_the_coordinator_keeps_serving(repo, coordinator, agents):
    c = coordinator(*STEADY)
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        for nest in (nested_arrays, nested_maps):
            for frame in deep_frames(DEEP if nest is nested_arrays else DEEP // 3, nest):
                assert len(frame) < m.MAX_MESSAGE_BYTES
                assert send_and_expect_error(raw, frame).code == "malformed"
                assert c.proc.poll() is None
        # an element bomb: an array that says it holds 200,000 nils
        bomb = b"\xdd" + (200_000).to_bytes(4, "big") + b"\xc0" * 200_000
        assert send_and_expect_error(raw, bomb).code == "malformed"
        # moderately nested check params (a real probe's shape) still decode
        params = {"x": [[[[{"a": [1, 2, {"b": None}]}]]]]}
        raw.send(encode(m.Check(req=8, probe=m.ProbeRequest(kind="no-such-kind", params=params))))
        assert raw.reply().req == 8
        assert_still_serving(repo, raw, alice, token)
    finally:
        raw.close()
    assert_ledger_intact_and_replayed(repo, c)


# ------------------------------------------------------------------ fuzz

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20) | st.binary(max_size=20)
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5), max_leaves=40)
_tags = st.sampled_from(["hello", "hb", "watch", "claim", "release", "intent", "status", "bye", "check", "verify", "done", "job", "plan_run", "nope"])
_fields = st.sampled_from(["req", "session", "paths", "agent", "probe", "params", "token", "kind", "v", "all", "force", "x"])


@st.composite
def _mutated_message(draw) -> bytes:
    """A message-shaped map: a known tag, then fields with any values."""
    body = {"type": draw(_tags)}
    for field in draw(st.lists(_fields, max_size=5)):
        body[field] = draw(_values)
    return msgspec.msgpack.encode(body)


@st.composite
def _deep_frame(draw) -> bytes:
    depth = draw(st.integers(1, 120_000))
    nest = draw(st.sampled_from([nested_arrays, nested_maps]))
    frames = deep_frames(depth if nest is nested_arrays else max(1, depth // 3), nest)
    return draw(st.sampled_from(frames))


_frames = (
    st.binary(max_size=300)
    | _values.map(msgspec.msgpack.encode)
    | _mutated_message()
    | _deep_frame()
    | st.builds(lambda head, n, body: head + n.to_bytes(4, "big") + body, st.sampled_from([b"\xdd", b"\xdf", b"\xc6", b"\xdb", b"\xc9"]), st.integers(0, 2**32 - 1), st.binary(max_size=64))
)


def _harmless(protected: set[str]):
    """Frames the fuzzer must not send: a valid ``shutdown`` stops the coordinator, and
    a valid request in a test agent's session acts for it (both on purpose: features,
    not crashes)."""

    def check(frame: bytes) -> bool:
        try:
            message = decode_request(frame)
        except PeerError:
            return True
        return not isinstance(message, m.Shutdown) and getattr(message, "session", None) not in protected

    return check


def test_thousands_of_fuzzed_frames_leave_the_coordinator_granting_and_its_ledger_whole(repo, coordinator, agents):
    c = coordinator(*STEADY)
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    raw = RawClient(status(repo)["endpoints"][0])
    sent = [0]

    @settings(max_examples=2500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frame=_frames.filter(_harmless({alice.session})))
    def send_one(frame: bytes) -> None:
        raw.send(frame)
        raw.send(encode(m.Status(req=424242)))  # every frame before it was handled
        while True:
            reply = raw.reply()
            if isinstance(reply, m.StatusReply) and reply.req == 424242:
                break
        sent[0] += 1

    try:
        send_one()
        assert sent[0] >= 2000
        assert c.proc.poll() is None
        assert_still_serving(repo, raw, alice, token)
    finally:
        raw.close()
    assert_ledger_intact_and_replayed(repo, c)
