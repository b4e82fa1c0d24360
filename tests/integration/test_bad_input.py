"""Garbage, oversized and hostile frames: clear errors, and everyone else still served."""

from __future__ import annotations

import signal
import time

import msgspec
import zmq

from protocol import messages as m
from protocol.codec import decode_reply, encode

from .conftest import agent_state, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


class RawClient:
    """A hand-written DEALER client, as a buggy or hostile peer would be."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def reply(self, timeout_ms: int = 5000):
        assert self.sock.poll(timeout_ms), "no reply"
        return decode_reply(self.sock.recv_multipart()[-1])

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def test_garbage_and_oversized_frames_get_errors_and_others_keep_their_service(repo, coordinator, agents):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        cases = [
            (b"\xff\x00garbage", "malformed"),
            (encode({"type": "launch_missiles", "req": 5}), "unknown_type"),
            (encode({"type": "claim", "req": 6, "session": 7, "paths": "x"}), "malformed"),
            (encode({"type": "claim", "req": 7, "session": "s", "paths": ["x"], "surprise": 1}), "malformed"),
            (b"\x00" * (m.MAX_MESSAGE_BYTES + 10), "too_large"),
            (encode(m.Hello(agent="../evil")), "bad_agent"),
            (encode(m.Hello(agent="x", v=999)), "version"),
        ]
        for frame, code in cases:
            raw.send(frame)
            reply = raw.reply()
            assert isinstance(reply, m.Error) and reply.code == code, (frame[:40], reply)
            assert reply.message
        raw.send(encode({"type": "claim", "req": 6, "session": 7, "paths": "x"}))
        assert raw.reply().req == 6  # the error names the request it answers, when it can
        raw.send(b"two", b"frames")
        assert raw.reply().code == "malformed"
        # a path that escapes the repository, from a well-formed session
        raw.send(encode(m.Hello(agent="mallory", kind="oneshot", req=1)))
        session = raw.reply().session
        raw.send(encode(m.Claim(session=session, paths=["../../etc/passwd"], req=2)))
        assert raw.reply().code == "bad_path"
        # above the hard cap the frame is dropped with its connection; nobody else notices
        raw.send(b"\x00" * (m.HARD_FRAME_LIMIT + 1))
        assert alice.do("intent", paths=["src/app.py"], token=token)["verdict"] == "allow"
        assert agent_state(repo, "alice") == "alive"
        assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]} == {"src/app.py": "alice"}
    finally:
        raw.close()


def test_a_flood_of_garbage_does_not_starve_a_heartbeating_agent(repo, coordinator, agents):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    alice.do("claim", paths=["src/app.py"])
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        for _ in range(20_000):
            raw.send(b"junk")
        deadline = time.monotonic() + 30
        replies = 0
        while replies < 20_000 and time.monotonic() < deadline:
            if raw.sock.poll(1000):
                raw.sock.recv_multipart()
                replies += 1
        assert replies == 20_000
        assert agent_state(repo, "alice") == "alive"
        assert alice.do("status")["epoch"] == 1
    finally:
        raw.close()


def test_an_agent_that_never_heartbeats_after_hello_goes_stale(repo, coordinator):
    coordinator(*FAST)
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        raw.send(encode(m.Hello(agent="quiet", req=1)))
        session = raw.reply().session
        raw.send(encode(m.Claim(session=session, paths=["q.py"], req=2)))
        assert isinstance(raw.reply(), m.Granted)
        wait_until(lambda: agent_state(repo, "quiet") == "stale", timeout=10, what="quiet to go stale")
        raw.send(encode(m.Heartbeat(session=session)))
        expired = raw.reply()
        assert isinstance(expired, m.Error) and expired.code == "session_expired"
    finally:
        raw.close()


def test_a_paused_coordinator_extends_leases_when_it_wakes(repo, coordinator, agents):
    c = coordinator("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")  # silence limit 1s
    alice = agents("alice", repo.root)
    alice.do("claim", paths=["src/app.py"])
    alice.signal(signal.SIGSTOP)  # alice is silent while the coordinator is paused...
    c.proc.send_signal(signal.SIGSTOP)
    time.sleep(3.0)  # the pause itself (3x the silence limit), not a synchronisation
    alice.signal(signal.SIGCONT)
    c.proc.send_signal(signal.SIGCONT)
    # ...but a paused coordinator does not count its own pause as anyone's silence
    assert agent_state(repo, "alice") == "alive"
    assert alice.do("claim", paths=["src/other.py"])["type"] == "granted"
    tail = [e for e in msgspec.json.decode(b"[" + b",".join(_tail(repo)) + b"]")]
    assert "coordinator.paused" in [e["kind"] for e in tail]
    assert "agent.stale" not in [e["kind"] for e in tail]


def _tail(repo) -> list[bytes]:
    from .conftest import cli

    return [line.encode() for line in cli("ledger", "tail", "-n", "50", "--json", cwd=repo.root).out.splitlines()]
