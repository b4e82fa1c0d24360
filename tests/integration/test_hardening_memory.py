"""Bounded memory per peer (issue 7, failure 3): a client that sends requests and never
reads its replies is cut off at its byte budget; the coordinator's memory stays bounded,
the cut-off is in the ledger and the log, and every other client is still served.

Real coordinator process, real zmq sockets, a real never-reading DEALER."""

from __future__ import annotations

import json
import sqlite3

import psutil
import zmq

from protocol import messages as m
from protocol.codec import encode

from .conftest import wait_until
from .test_bad_input import RawClient

STEADY = ("--heartbeat", "1", "--liveness", "30")
CLAIMS = 1000
LONG = "/".join(["d" * 60] * 7)  # a ~430-character directory: a status reply of ~0.5 MB
STATUSES = 1500  # ~750 MB of replies if nothing bounded them
GROWTH_BOUND = 300 * 1024 * 1024  # generous: the budget is 16 MiB, plus 16 replies in zmq


def _events(repo, kind: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        return conn.execute("select agent, session, data from events where kind = ?", (kind,)).fetchall()
    finally:
        conn.close()


def _hold_many_claims(raw: RawClient) -> str:
    raw.send(encode(m.Hello(agent="hoarder", req=1)))
    session = raw.reply().session
    for start in range(0, CLAIMS, 250):
        paths = [f"{LONG}/f{i}.py" for i in range(start, start + 250)]
        raw.send(encode(m.Claim(session=session, paths=paths, req=2 + start)))
        assert isinstance(raw.reply(timeout_ms=20_000), m.Granted)
    return session


def _messages_handled(raw: RawClient, req: int, counter: str = "messages") -> int:
    raw.send(encode(m.Status(req=req)))
    reply = raw.reply(timeout_ms=20_000)
    return reply.statistics["core"][counter]


def _growth_while(process: psutil.Process, before: int, handled, what: str) -> int:
    """The coordinator's peak RSS over ``before`` until ``handled(poll)`` says the flood
    was handled (``poll`` numbers the quiet client's status requests)."""
    peak, polls = before, 0

    def done() -> bool:
        nonlocal peak, polls
        peak = max(peak, process.memory_info().rss)
        polls += 1
        return handled(polls)

    wait_until(done, timeout=240, interval=0.2, what=what)
    return max(peak, process.memory_info().rss) - before


def _dealer(option: int, value: int) -> zmq.Socket:
    """A DEALER in a context of its own (``sock.context.term()`` after closing it)."""
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(option, value)
    return sock


def test_a_client_that_never_reads_is_cut_off_and_the_others_are_still_served(repo, coordinator):
    c = coordinator(*STEADY)
    endpoint = json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0]
    quiet = RawClient(endpoint)
    hog = _dealer(zmq.RCVHWM, 1)  # it holds (almost) nothing itself: the coordinator must
    try:
        session = _hold_many_claims(quiet)
        coordinator_process = psutil.Process(c.pid)
        start = _messages_handled(quiet, 90_000)
        before = coordinator_process.memory_info().rss
        hog.connect(endpoint)
        for i in range(STATUSES):  # requests it will never read the answers of
            assert hog.poll(20_000, zmq.POLLOUT), "the coordinator stopped taking requests"
            hog.send(encode(m.Status(req=i)), zmq.NOBLOCK)
        # The quiet client is answered all along, while the hog's requests are handled.
        growth = _growth_while(
            coordinator_process, before, lambda poll: _messages_handled(quiet, 90_000 + poll) >= start + STATUSES + poll,
            "the coordinator to handle every status of the hog",
        )
        assert growth < GROWTH_BOUND, f"coordinator grew by {growth >> 20} MiB"

        cut = _events(repo, "peer.cut_off")
        assert cut, "no peer.cut_off event in the ledger"
        data = json.loads(cut[0][2])
        assert data["bytes"] > data["budget"] == 16 * 1024 * 1024 and data["replies"] >= 1 and data["peer"]

        # The quiet client is still served, grants included; its session was never harmed.
        quiet.send(encode(m.Claim(session=session, paths=["src/after.py"], req=99_999)))
        assert isinstance(quiet.reply(timeout_ms=20_000), m.Granted)
        assert "cut off connection" in (repo.state_dir / "coordinator.log").read_text()
    finally:
        hog.close()
        hog.context.term()
        quiet.close()


BIG_FRAMES = 1500  # ~1.5 GB of requests if the coordinator took them all in


def test_a_client_sending_megabyte_frames_faster_than_they_are_read_does_not_grow_the_coordinator(repo, coordinator):
    c = coordinator(*STEADY)
    endpoint = json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0]
    quiet = RawClient(endpoint)
    flood = _dealer(zmq.SNDHWM, 10 * BIG_FRAMES)  # the flooder would hold them all: the coordinator must not
    frame = encode(m.SendText(to="bob", text="x" * (m.HARD_FRAME_LIMIT - 100)))  # refused too_large, after reading
    try:
        quiet.send(encode(m.Hello(agent="quiet", req=1)))
        session = quiet.reply().session
        coordinator_process = psutil.Process(c.pid)
        start = _messages_handled(quiet, 90_000, "errors")
        before = coordinator_process.memory_info().rss
        flood.connect(endpoint)
        for _ in range(BIG_FRAMES):
            flood.send(frame)  # queued in the flooder's own socket once the coordinator pushes back
        growth = _growth_while(  # each frame refused too_large
            coordinator_process, before, lambda poll: _messages_handled(quiet, 90_000 + poll, "errors") >= start + BIG_FRAMES,
            "the coordinator to refuse every big frame",
        )
        assert growth < GROWTH_BOUND, f"coordinator grew by {growth >> 20} MiB"
        quiet.send(encode(m.Claim(session=session, paths=["src/after.py"], req=99_999)))
        assert isinstance(quiet.reply(timeout_ms=20_000), m.Granted)
    finally:
        flood.close()
        flood.context.term()
        quiet.close()
