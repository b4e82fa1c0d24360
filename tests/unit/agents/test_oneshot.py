"""agents.oneshot, the blocking client, against a real ROUTER socket scripted here:
replies are matched by ``req``, silence is ``CoordinatorUnreachable`` after the timeout,
an expired session is renewed once, and nothing is found where nothing serves."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import msgspec
import pytest
import zmq

from agents.oneshot import (
    CoordinatorUnreachable,
    RequestFailed,
    ask,
    open_connection,
    open_oneshot,
    resolve_endpoint,
)
from protocol import messages as m
from protocol.codec import decode_request, encode
from protocol.discovery import locate
from protocol.errors import UsageError

Script = Callable[[m.Request], list[bytes]]  # a request -> the frames to answer with


class Router:
    """A ROUTER on an ipc socket in a thread, answering each request by ``script``."""

    def __init__(self, path: Path, script: Script) -> None:
        self.endpoint = f"ipc://{path}"
        self.seen: list[m.Request] = []
        self._context = zmq.Context()
        self._sock = self._context.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(self.endpoint)
        self._script = script
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(20):
                continue
            identity, frame = self._sock.recv_multipart()
            request = decode_request(frame)
            self.seen.append(request)
            for reply in self._script(request):
                self._sock.send_multipart([identity, reply])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        self._context.term()


@pytest.fixture
def router(tmp_path: Path):
    made: list[Router] = []

    def make(script: Script) -> Router:
        made.append(Router(tmp_path / f"rpc{len(made)}.sock", script))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _welcome(req: int, session: str = "S1", notice: str = "") -> bytes:
    return encode(m.Welcome(req=req, session=session, agent="alice", epoch=1, mode="parallel-strict",
                            heartbeat=1.0, liveness=3, notice=notice))


def test_the_reply_with_the_request_id_is_the_answer(router):
    def script(request):
        return [
            b"\x00not msgpack",  # undecodable: skipped
            encode(m.Ok(req=request.req + 100, message="someone else's")),  # another request's answer
            encode(m.Ok(req=request.req, message="mine")),
        ]

    r = router(script)
    with open_connection(r.endpoint, timeout=5) as conn:
        assert conn.request(m.Status()).message == "mine"
        assert conn.request(m.Status()).message == "mine"
    assert [req.req for req in r.seen] == [1, 2]  # each request gets its own id


def test_an_error_reply_raises_request_failed_with_its_code(router):
    r = router(lambda request: [encode(m.Error(req=request.req, code="bad_path", message="outside"))])
    with open_connection(r.endpoint, timeout=5) as conn, pytest.raises(RequestFailed) as caught:
        conn.request(m.Status())
    assert (caught.value.code, caught.value.message) == ("bad_path", "outside")


def test_silence_is_unreachable_after_the_timeout(router):
    r = router(lambda request: [])
    with open_connection(r.endpoint, timeout=0.2) as conn, pytest.raises(CoordinatorUnreachable) as caught:
        conn.request(m.Status())
    assert f"no answer from the coordinator at {r.endpoint} within 0.2s" in str(caught.value)
    assert caught.value.code == "unreachable"


def test_the_timeout_comes_from_lockstep_timeout(router, monkeypatch):
    monkeypatch.setenv("LOCKSTEP_TIMEOUT", "0.15")
    r = router(lambda request: [])
    with open_connection(r.endpoint) as conn:
        assert conn.timeout == 0.15
    monkeypatch.delenv("LOCKSTEP_TIMEOUT")  # unset: the default
    with open_connection(r.endpoint) as conn:
        assert conn.timeout == 2.0
    monkeypatch.setenv("LOCKSTEP_TIMEOUT", "soon")  # unreadable: our user's bad input
    with pytest.raises(UsageError):
        open_connection(r.endpoint).__enter__()


def test_a_one_shot_session_says_hello_then_acts_in_it(router, tmp_path: Path):
    def script(request):
        if isinstance(request, m.Hello):
            return [_welcome(request.req)]
        return [encode(m.Decision(req=request.req, verdict="allow", reason="free", paths=list(request.paths)))]

    r = router(script)
    with open_oneshot("alice", cwd=tmp_path, endpoint=r.endpoint, timeout=5) as agent:
        decision = agent.intent(["src/x.py"], token=7)
    assert decision.verdict == "allow"
    hello, intent = r.seen
    assert (hello.agent, hello.kind, hello.pid, hello.session) == ("alice", "oneshot", None, None)
    assert hello.repo == locate(tmp_path).repo_id
    assert (intent.session, intent.paths, intent.token) == ("S1", ["src/x.py"], 7)


def test_an_expired_session_is_renewed_once_and_the_request_sent_again(router, tmp_path: Path):
    notices: list[str] = []
    sessions = iter(["S1", "S2"])

    def script(request):
        if isinstance(request, m.Hello):
            session = next(sessions)
            return [_welcome(request.req, session, notice="new session" if session == "S2" else "")]
        if request.session == "S1":
            return [encode(m.Error(req=request.req, code="session_expired", message="expired"))]
        return [encode(m.Released(req=request.req, patterns=list(request.paths)))]

    r = router(script)
    with open_oneshot("alice", cwd=tmp_path, endpoint=r.endpoint, timeout=5, on_notice=notices.append) as agent:
        released = agent.release(["src/"])
    assert released.patterns == ["src/"]
    kinds = [(type(req).__name__, getattr(req, "session", None)) for req in r.seen]
    assert kinds == [("Hello", None), ("Release", "S1"), ("Hello", "S1"), ("Release", "S2")]
    assert notices == ["new session"]


def test_other_refusals_are_not_retried(router, tmp_path: Path):
    def script(request):
        if isinstance(request, m.Hello):
            return [_welcome(request.req)]
        return [encode(m.Error(req=request.req, code="bad_request", message="nothing to release"))]

    r = router(script)
    with open_oneshot("alice", cwd=tmp_path, endpoint=r.endpoint, timeout=5) as agent:
        with pytest.raises(RequestFailed):
            agent.release([], all=False)
    assert len(r.seen) == 2


def test_an_anonymous_request_needs_no_session(router, tmp_path: Path, monkeypatch):
    r = router(lambda request: [encode(m.Ok(req=request.req, message="pong"))])
    monkeypatch.chdir(tmp_path)
    assert ask(r.endpoint, m.Status()).message == "pong"
    assert [type(req) for req in r.seen] == [m.Status]


def test_nothing_is_found_where_nothing_serves(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("LOCKSTEP_ENDPOINT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    place = locate(tmp_path)
    with pytest.raises(CoordinatorUnreachable) as caught:
        resolve_endpoint(place)
    assert "no coordinator is running" in str(caught.value)
    with pytest.raises(CoordinatorUnreachable) as caught:
        resolve_endpoint(place, f"ipc://{tmp_path}/gone.sock")
    assert "no coordinator is listening" in str(caught.value)


def test_the_request_sent_carries_the_message_unchanged_but_for_req(router):
    r = router(lambda request: [encode(m.Ok(req=request.req))])
    claim = m.Claim(session="S", paths=["a/", "b.py"], shared=True, ttl=30.0)
    with open_connection(r.endpoint, timeout=5) as conn:
        conn.request(claim)
    assert msgspec.structs.replace(r.seen[0], req=0) == claim
