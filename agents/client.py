"""The trio client library: talk to a repository's coordinator as an agent.

    async with open_agent("alice") as agent:          # hello + background heartbeats
        grant = await agent.claim(["src/api/"])         # Granted | Refused
        decision = await agent.intent(["src/api/x.py"]) # Decision (allow / warn / block)

* ``Connection`` owns one DEALER socket.  A reader task matches replies to requests by
  ``req``; many requests may be in flight.  A request that gets no answer within the
  timeout raises ``CoordinatorUnreachable``.
* ``AgentSession`` heartbeats every ``heartbeat`` seconds (the interval the coordinator
  sent in its welcome).  If the coordinator says the session expired (the agent was
  paused or silent past its lease, and its claims were released), the client opens a
  new session — with no claims — and reports it through ``on_notice``; the request
  that hit the expiry is retried in the new session, so a stale fencing token is
  refused by the coordinator, not hidden by the client.
* Heartbeats go both ways: the coordinator answers each of ours (``echo``).  After
  ``heartbeat x liveness`` of silence the client reports "coordinator unreachable"
  once (``on_notice``; ``reachable`` turns False) without waiting for a request; when
  the coordinator speaks again it says hello with its session, so the session and its
  pid watch are registered again, and reports that too.
* After a coordinator restart the socket reconnects by itself and the session resumes
  with its claims (the coordinator rebuilt them from its ledger).  If the coordinator
  moved to another endpoint, the heartbeats or the next failing request rediscover it.
* A renewal keeps everything but the claims: the hello carries the worktree, host and
  the watched pid (``watch`` puts it there), so the new session is watched at once.

This client is for long-lived processes (``lockstep run``, ``top``, the demo).  The
one-shot CLI verbs use ``agents.oneshot``, the blocking client with the same session
rules that imports no event loop; the exceptions and helpers both share live there.
"""

from __future__ import annotations

import itertools
import os
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

import msgspec
import trio
import zmq

from agents.oneshot import (  # shared with the blocking client; re-exported here
    DEFAULT_TIMEOUT,
    CoordinatorUnreachable,
    RequestFailed,
    UnexpectedReply,
    default_timeout,
    expect,
    follow_coordinator,
    key_refused,
    make_hello,
    resolve_endpoint,
    stderr_notice,
)
from protocol import curve
from protocol import messages as m
from protocol.codec import decode_reply, encode
from protocol.discovery import Place, locate
from protocol.errors import single_errors
from protocol.gitrefs import merge_heads, read_head
from protocol.procs import is_same_process, process_started
from protocol.trio_zmq import TrioSocket
from protocol.uncommitted import uncommitted_paths

__all__ = [
    "DEFAULT_TIMEOUT",
    "AgentSession",
    "Connection",
    "CoordinatorUnreachable",
    "RequestFailed",
    "UnexpectedReply",
    "default_timeout",
    "expect",
    "make_hello",
    "open_agent",
    "open_connection",
    "resolve_endpoint",
]

REDISCOVER_EVERY = 5  # heartbeats between looks at the state file (did the coordinator move?)

class Connection:
    def __init__(self, endpoint: str, timeout: float, sock: TrioSocket, monitor: zmq.Socket | None = None) -> None:
        self.endpoint = endpoint
        # With CURVE keys: where libzmq reports a handshake the coordinator refused (a
        # revoked key), read when a request goes unanswered (else it reads as "unreachable").
        self._monitor = monitor
        self.timeout = timeout
        self._sock = sock
        self._req_ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel] = {}
        self.unsolicited: list[m.Message] = []  # answers to one-way messages (heartbeats)
        self._unsolicited_event = trio.Event()
        # Called by the reader with each unsolicited message; True = taken (not queued).
        # Saves a trip through the scheduler per message (a worker's ``work``).
        self.take_unsolicited: Callable[[m.Message], bool] | None = None
        self.last_heard = trio.current_time()  # when the coordinator last said anything
        self._heard = trio.Event()

    async def request(self, message: m.Request, timeout: float | None = None) -> m.Reply:
        """Send and wait for the matching reply; ``Error`` replies raise ``RequestFailed``."""
        req = next(self._req_ids)
        send, receive = trio.open_memory_channel(1)
        self._waiting[req] = send
        try:
            with trio.move_on_after(self.timeout if timeout is None else timeout):
                await self._sock.send_multipart([encode(msgspec.structs.replace(message, req=req))])
                reply = await receive.receive()
                if isinstance(reply, m.Error):
                    raise RequestFailed(reply)
                return reply
            if self._monitor is not None and self._monitor.poll(0):
                raise key_refused(self.endpoint)
            raise CoordinatorUnreachable(
                f"no answer from the coordinator at {self.endpoint} within {self.timeout:g}s "
                "(is `lockstep serve` running for this repository?)"
            )
        finally:
            del self._waiting[req]

    def move_to(self, endpoint: str) -> None:
        """Follow a coordinator that came back at another endpoint."""
        self._sock.socket.disconnect(self.endpoint)
        self._sock.socket.connect(endpoint)
        self._sock.wake_waiters()
        self.endpoint = endpoint

    def send_oneway(self, message: m.Request) -> bool:
        return self._sock.send_multipart_nowait([encode(message)])

    async def next_unsolicited(self) -> m.Message:
        while not self.unsolicited:
            await self._unsolicited_event.wait()
            self._unsolicited_event = trio.Event()
        return self.unsolicited.pop(0)

    async def heard_since(self, moment: float) -> None:
        """Return once the coordinator has said anything after ``moment``."""
        while self.last_heard <= moment:
            await self._heard.wait()

    async def _read_replies(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            self.last_heard = trio.current_time()
            self._heard.set()
            self._heard = trio.Event()
            try:
                reply = decode_reply(frames[-1])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a newer coordinator's message we cannot read; nothing waits on it
            waiter = self._waiting.get(reply.req)
            if waiter is not None:
                waiter.send_nowait(reply)
            elif self.take_unsolicited is None or not self.take_unsolicited(reply):
                self.unsolicited.append(reply)
                self._unsolicited_event.set()


@asynccontextmanager
async def open_connection(endpoint: str, timeout: float | None = None) -> AsyncIterator[Connection]:
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.RECONNECT_IVL, 50)
    raw.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    raw.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:PORT
    monitor = None
    if curve.secure(raw, endpoint):  # a joined clone's keys (protocol.curve)
        monitor = raw.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    sock = TrioSocket(raw)
    try:
        raw.connect(endpoint)
        conn = Connection(endpoint, default_timeout() if timeout is None else timeout, sock, monitor)
        with single_errors():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn._read_replies)
                try:
                    yield conn
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        if monitor is not None:
            raw.disable_monitor()
            monitor.close(linger=0)
        sock.close()


Notice = Callable[[str], None]


class AgentSession:
    """One agent's session.  Use ``open_agent``; all methods are safe to call concurrently."""

    def __init__(self, conn: Connection, hello: m.Hello, on_notice: Notice, place: Place | None = None) -> None:
        self.conn = conn
        self._place = place  # where to rediscover the coordinator (None: a fixed endpoint)
        self._hello = hello
        self._on_notice = on_notice
        self.welcome: m.Welcome | None = None
        self._rehello_lock = trio.Lock()
        self.reachable = True  # False from heartbeat x liveness of silence until it speaks again

    @property
    def name(self) -> str:
        return self._hello.agent

    @property
    def session(self) -> str:
        assert self.welcome is not None, "use open_agent(): the session is opened on entry"
        return self.welcome.session

    async def hello(self) -> m.Welcome:
        welcome = expect(await self.conn.request(self._hello), m.Welcome)
        self.welcome = welcome
        if welcome.notice:
            self._on_notice(welcome.notice)
        return welcome

    async def _renew(self, stale_session: str, *, to_send: bool = False) -> None:
        """Say hello again with our session: the coordinator resumes it if it is still
        live (e.g. after a restart), else opens a new one with no claims and says so.

        A session that ended because its watched process exited is not renewed by the
        heartbeat (nothing is left to keep alive); a request still to send (``to_send``:
        the last writes ``run`` reports) renews it without the pid watch."""
        async with self._rehello_lock:
            if self.welcome is not None and self.welcome.session != stale_session:
                return  # another task already did
            pid = self._hello.pid
            if pid is not None and not is_same_process(pid, self._hello.pid_started):
                if not to_send:
                    return
                self._hello = msgspec.structs.replace(self._hello, pid=None, pid_started=None)
            self._hello = msgspec.structs.replace(self._hello, session=stale_session)
            await self.hello()
            self._hello = msgspec.structs.replace(self._hello, session=None)

    async def call(self, build: Callable[[str], m.Request]) -> m.Reply:
        """Send ``build(session_id)``.  If the session expired, or the coordinator came
        back elsewhere, say hello again (resume or renew) and send it once more."""
        session, endpoint = self.session, self.conn.endpoint
        try:
            return await self.conn.request(build(session))
        except RequestFailed as exc:
            if exc.code not in ("session_expired", "unknown_session"):
                raise
        except CoordinatorUnreachable:
            moved = self._rediscover() or self.conn.endpoint != endpoint  # (the heartbeat task may have moved us)
            if not moved:
                raise  # same endpoint: the socket reconnects by itself when it is back
        await self._renew(session, to_send=True)
        return await self.conn.request(build(self.session))

    def _rediscover(self) -> bool:
        return follow_coordinator(self._place, self.conn)

    def head(self) -> str | None:
        """The commit checked out in this agent's worktree, read from .git's files (no git)."""
        return read_head(self._hello.worktree) if self._hello.worktree else None

    def merging(self) -> list[str]:
        """The commits a merge in progress in this agent's worktree brings (``MERGE_HEAD``):
        the commit that concludes it has them too, so what they bring is no stale base."""
        return merge_heads(self._hello.worktree) if self._hello.worktree else []

    async def claim(self, paths: list[str], *, shared: bool = False, ttl: float | None = None) -> m.Granted | m.Refused:
        head, merging = self.head(), self.merging()
        return await self.call(lambda s: m.Claim(session=s, paths=list(paths), shared=shared, ttl=ttl, head=head, merging=merging))

    async def intent(self, paths: list[str], *, token: int | None = None) -> m.Decision:
        head, merging = self.head(), self.merging()
        return await self.call(lambda s: m.Intent(session=s, paths=list(paths), token=token, head=head, merging=merging))

    async def wrote(self, paths: list[str], *, source: str = "") -> m.Decision:
        """Report files already written (a watcher saw them): see ``m.Wrote``."""
        head, merging = self.head(), self.merging()
        return await self.call(lambda s: m.Wrote(session=s, paths=list(paths), source=source, head=head, merging=merging))

    async def release(self, paths: list[str] = (), *, all: bool = False) -> m.Released:
        """Release; the worktree's uncommitted paths go along (see ``m.Release``)."""
        dirty = await trio.to_thread.run_sync(uncommitted_paths, self._hello.worktree) if self._hello.worktree else None
        return await self.call(lambda s: m.Release(session=s, paths=list(paths), all=all, uncommitted=dirty))

    async def watch(self, pid: int) -> None:
        """Have the coordinator watch ``pid``: its exit ends this session at once.  The
        pid is kept in our hello, so a renewed session is watched from its first moment."""
        started = process_started(pid)
        self._hello = msgspec.structs.replace(self._hello, pid=pid, pid_started=started)
        await self.call(lambda s: m.Watch(session=s, pid=pid, pid_started=started))

    async def status(self) -> m.StatusReply:
        return await self.conn.request(m.Status())

    async def bye(self, reason: str = "bye") -> None:
        await self.conn.request(m.Bye(session=self.session, reason=reason))

    async def heartbeat_forever(self) -> None:
        """Heartbeat both ways: ours say the agent is alive; the coordinator's answers
        (``echo``) say it is.  On a "session expired" answer, open a new session and say
        so; after heartbeat x liveness of silence, say the coordinator is unreachable
        (once) and register again when it is back."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_unsolicited)
            nursery.start_soon(self._watch_coordinator)
            for beat in itertools.count(1):
                self.conn.send_oneway(m.Heartbeat(session=self.session, echo=True))
                rediscover = not self.reachable or beat % REDISCOVER_EVERY == 0
                if rediscover and self._rediscover():
                    try:
                        await self._renew(self.session)
                    except (CoordinatorUnreachable, RequestFailed) as exc:
                        self._on_notice(f"the coordinator moved to {self.conn.endpoint} but did not answer: {exc}")
                await trio.sleep(self.welcome.heartbeat)

    async def _watch_coordinator(self) -> None:
        """Majordomo's other half: the coordinator is gone after heartbeat x liveness of
        silence.  Say so once; when it speaks again, say hello with our session (it
        resumes, or renews with our pid watch) and say that too."""
        conn = self.conn
        while True:
            limit = self.welcome.heartbeat * self.welcome.liveness
            await trio.sleep_until(conn.last_heard + limit)
            silent_since = conn.last_heard
            if trio.current_time() < silent_since + limit:
                continue  # it spoke meanwhile
            self.reachable = False
            self._on_notice(
                f"coordinator unreachable: nothing heard from {conn.endpoint} for {limit:g}s "
                f"(heartbeat {self.welcome.heartbeat:g}s x liveness {self.welcome.liveness}); "
                "will register again when it is back"
            )
            await conn.heard_since(silent_since)
            self.reachable = True
            try:
                await self._renew(self.session)
            except (CoordinatorUnreachable, RequestFailed) as exc:
                self._on_notice(f"the coordinator at {conn.endpoint} is back but did not take our session: {exc}")
                continue
            how = "resumed" if self.welcome.resumed else "opened"
            self._on_notice(f"coordinator reachable again at {conn.endpoint}; session {self.session} {how}")

    async def _watch_unsolicited(self) -> None:
        said = ""  # each heartbeat meets the same refusal: say it once, not once a beat
        while True:
            reply = await self.conn.next_unsolicited()
            if isinstance(reply, m.Error) and reply.code in ("session_expired", "unknown_session"):
                try:
                    await self._renew(self.session)
                    said = ""
                except (CoordinatorUnreachable, RequestFailed) as exc:
                    if f"{exc}" != said:
                        said = f"{exc}"
                        self._on_notice(f"could not open a new session: {exc}")


@asynccontextmanager
async def open_agent(
    name: str,
    *,
    cwd: str | os.PathLike | None = None,
    endpoint: str | None = None,
    kind: str = "session",
    pid: int | None = None,
    timeout: float | None = None,
    heartbeat: bool = True,
    on_notice: Notice = stderr_notice,
) -> AsyncIterator[AgentSession]:
    """Open (or, for ``kind="oneshot"``, attach to) ``name``'s session; heartbeat while
    inside; say bye on a clean exit of a ``session``/``run`` kind."""
    place = locate(cwd)
    address = resolve_endpoint(place, endpoint)
    async with open_connection(address, timeout) as conn:
        fixed = endpoint or os.environ.get("LOCKSTEP_ENDPOINT")
        agent = AgentSession(conn, make_hello(name, place, kind=kind, pid=pid), on_notice, None if fixed else place)
        await agent.hello()
        try:
            with single_errors():
                async with trio.open_nursery() as nursery:
                    if heartbeat and kind != "oneshot":
                        nursery.start_soon(agent.heartbeat_forever)
                    yield agent
                    nursery.cancel_scope.cancel()
        finally:
            if kind != "oneshot":  # free our claims now rather than after the lease
                with trio.CancelScope(shield=True), trio.move_on_after(conn.timeout):
                    try:
                        await agent.bye()
                    except (RequestFailed, CoordinatorUnreachable):
                        pass  # already gone: nothing left to release
