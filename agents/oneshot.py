"""The blocking client: a one-shot call to a repository's coordinator, no event loop.

    with open_oneshot("alice") as agent:          # attach to alice's live session, or open one
        decision = agent.intent(["src/api/x.py"])   # Decision (allow / warn / block)
    reply = ask(None, m.Status())                   # an anonymous request

The CLI's one-shot verbs (``intent``, ``claim``, ``release``, ``status``, ``hook``,
``guard``, ``check``, ``verify``, ``done``) run once per edit or commit, so they pay
only for what they use: pyzmq, msgspec and the wire types; no trio (``agents.client``,
the long-lived trio client, is for ``run``, ``top`` and the demo).

* One DEALER socket, one request at a time: send, then wait (``zmq.Socket.poll``) for
  the reply with the same ``req`` for at most ``LOCKSTEP_TIMEOUT`` seconds (default
  2), else ``CoordinatorUnreachable`` (exit 3).  Replies to other requests and frames
  we cannot decode are skipped.
* A one-shot call naming a live agent acts within that agent's session; otherwise the
  coordinator opens a one-shot session (a TTL, or ``--pid``).  One-shot calls never end
  a session.  If the session expired, or the coordinator came back at another
  endpoint, the client says hello again (resume or renew) and sends once more, exactly
  as ``agents.client`` does.
"""

from __future__ import annotations

import itertools
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import msgspec
import zmq

from protocol import curve
from protocol import messages as m
from protocol.codec import decode_reply, encode
from protocol.discovery import Place, discover_endpoint, locate
from protocol.errors import LockstepError

DEFAULT_TIMEOUT = 2.0
POLL_SLICE_MS = 2**31 - 1  # zmq_poll takes a C int of milliseconds (24.8 days): longer waits are polled in slices
EXPIRED = ("session_expired", "unknown_session")  # error codes that mean "say hello again"


def default_timeout() -> float:
    """``LOCKSTEP_TIMEOUT`` in seconds (default 2); anything but a positive number is
    bad input, not silently the default."""
    text = os.environ.get("LOCKSTEP_TIMEOUT")
    if text is None or text.strip() == "":
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        from protocol.errors import UsageError

        raise UsageError(f"LOCKSTEP_TIMEOUT={text!r}: use a positive number of seconds, e.g. LOCKSTEP_TIMEOUT=5")
    return value


class CoordinatorUnreachable(LockstepError):
    """No coordinator answered (exit code 3)."""

    code = "unreachable"

    @property
    def message(self) -> str:
        return str(self)


class RequestFailed(LockstepError):
    """The coordinator answered with an ``Error``: ``code`` and ``message`` say why."""

    def __init__(self, error: m.Error) -> None:
        super().__init__(error.message)
        self.code = error.code
        self.message = error.message


class UnexpectedReply(LockstepError):
    """The coordinator answered with a reply of another type (mismatched versions?)."""


def expect(reply: m.Reply, kind: type) -> m.Reply:
    if not isinstance(reply, kind):
        raise UnexpectedReply(f"the coordinator answered {type(reply).__name__} where {kind.__name__} was expected")
    return reply


def resolve_endpoint(place: Place, endpoint: str | None = None) -> str:
    found = discover_endpoint(place, endpoint)
    if found is None:
        state = Path(place.state_dir) / "coordinator.json"
        why = f"{state} is damaged" if state.exists() else f"no {state}"
        raise CoordinatorUnreachable(
            f"no coordinator is running for {place.repo_id} ({why}); "
            "start one with `lockstep serve`, or pass --endpoint / LOCKSTEP_ENDPOINT"
        )
    if found.startswith("ipc://") and not found.startswith("ipc://@"):
        if not Path(found[len("ipc://") :]).exists():
            raise CoordinatorUnreachable(f"no coordinator is listening at {found}; start one with `lockstep serve`")
    return found


def follow_coordinator(place: Place | None, conn) -> bool:
    """The coordinator may have restarted at another endpoint (a new tcp port): follow
    its state file.  True if ``conn`` (either client's connection: it has ``endpoint``
    and ``move_to``) moved; the caller then resumes the session."""
    if place is None:
        return False
    try:
        endpoint = resolve_endpoint(place)
    except CoordinatorUnreachable:
        return False
    if endpoint == conn.endpoint:
        return False
    conn.move_to(endpoint)
    return True


Notice = Callable[[str], None]


def stderr_notice(text: str) -> None:
    import sys

    print(f"lockstep: {text}", file=sys.stderr)


def make_hello(name: str, place: Place, *, kind: str = "session", pid: int | None = None, ttl: float | None = None) -> m.Hello:
    started = None
    if pid is not None:
        from protocol.procs import process_started  # psutil: only when a pid is watched

        started = process_started(pid)
    return m.Hello(
        agent=name,
        kind=kind,
        repo=place.repo_id,
        worktree=str(place.worktree),
        host=_hostname(),
        pid=pid,
        pid_started=started,
        ttl=ttl,
    )


def _hostname() -> str:
    """``socket.gethostname()`` without importing ``socket`` (the same value on POSIX)."""
    try:
        return os.uname().nodename
    except AttributeError:  # no uname (Windows)
        import socket

        return socket.gethostname()


def _poll_ms(seconds: float) -> int:
    """One poll's timeout: ``seconds`` in milliseconds, at least 1, at most what zmq_poll takes
    (a LOCKSTEP_TIMEOUT of a month overflowed it; one of 1e308 s, in milliseconds, is
    infinite, which no integer holds: capped before it is multiplied)."""
    return max(1, round(min(seconds, POLL_SLICE_MS / 1000) * 1000))


class Connection:
    """One DEALER socket to the coordinator; one request at a time."""

    def __init__(self, endpoint: str, timeout: float | None = None) -> None:
        self.endpoint = endpoint
        self.timeout = default_timeout() if timeout is None else timeout
        self._req_ids = itertools.count(1)
        self._context = zmq.Context()
        self._sock = self._context.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RECONNECT_IVL, 50)
        self._sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self._sock.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:PORT
        # A joined clone's keys (protocol.curve); a handshake the coordinator refuses
        # (a revoked or unknown key) is seen on a monitor socket, not as a silence.
        self._monitor = None
        try:
            if curve.secure(self._sock, endpoint):
                self._monitor = self._sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            self._sock.connect(endpoint)
        except zmq.ZMQError as exc:  # "tcp://host" without a port, "ipc://", a key that is not Z85
            self.close()
            from protocol.errors import UsageError

            raise UsageError(f"cannot connect to {endpoint!r}: {zmq.strerror(exc.errno)}; use ipc://PATH or tcp://HOST:PORT") from None

    def request(self, message: m.Request, timeout: float | None = None) -> m.Reply:
        """Send and wait for the matching reply; ``Error`` replies raise ``RequestFailed``."""
        req = next(self._req_ids)
        frame = encode(msgspec.structs.replace(message, req=req))
        if len(frame) > m.MAX_MESSAGE_BYTES:
            # The coordinator refuses it; past HARD_FRAME_LIMIT its socket drops the
            # connection unanswered, which read as "unreachable" (exit 3): say it here.
            message_text = (f"message of {len(frame)} bytes exceeds the cap of {m.MAX_MESSAGE_BYTES}: "
                            "name fewer paths at a time (or their folder, or a glob)")
            raise RequestFailed(m.Error(req=req, code="too_large", message=message_text))
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        if not self._wait(zmq.POLLOUT, deadline):
            raise self._unreachable()
        self._sock.send(frame, zmq.NOBLOCK)
        while self._wait(zmq.POLLIN, deadline):
            frames = self._sock.recv_multipart(zmq.NOBLOCK)
            try:
                reply = decode_reply(frames[-1])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue  # a newer coordinator's message we cannot read; nothing waits on it
            if reply.req != req:
                continue  # the answer to an earlier request we gave up on
            if isinstance(reply, m.Error):
                raise RequestFailed(reply)
            return reply
        raise self._unreachable()

    def _wait(self, event: int, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if self._monitor is None:
            while left > 0:
                if self._sock.poll(_poll_ms(left), event):
                    return True
                left = deadline - time.monotonic()
            return False
        poller = zmq.Poller()
        poller.register(self._sock, event)
        poller.register(self._monitor, zmq.POLLIN)
        while left > 0:
            ready = dict(poller.poll(_poll_ms(left)))
            if self._monitor in ready:
                raise key_refused(self.endpoint)
            if self._sock in ready:
                return True
            left = deadline - time.monotonic()
        return False

    def _unreachable(self) -> CoordinatorUnreachable:
        return CoordinatorUnreachable(
            f"no answer from the coordinator at {self.endpoint} within {self.timeout:g}s "
            "(is `lockstep serve` running for this repository?)"
        )

    def move_to(self, endpoint: str) -> None:
        """Follow a coordinator that came back at another endpoint."""
        self._sock.disconnect(self.endpoint)
        self._sock.connect(endpoint)
        self.endpoint = endpoint

    def close(self) -> None:
        if self._monitor is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._context.term()



def key_refused(endpoint: str) -> "RequestFailed":
    """What a CURVE handshake the coordinator refused means (seen on a monitor socket)."""
    return RequestFailed(m.Error(
        code="revoked",
        message=f"the coordinator at {endpoint} refused this clone's key (revoked, or from another "
        "coordinator): ask its operator for a new `lockstep invite` and run `lockstep join` again",
    ))

@contextmanager
def open_connection(endpoint: str, timeout: float | None = None) -> Iterator[Connection]:
    conn = Connection(endpoint, timeout)
    try:
        yield conn
    finally:
        conn.close()


def ask(endpoint: str | None, message: m.Request, cwd: str | os.PathLike | None = None) -> m.Reply:
    """One anonymous request to this repository's coordinator (no agent session)."""
    with open_connection(resolve_endpoint(locate(cwd), endpoint)) as conn:
        return conn.request(message)


class OneShotSession:
    """An agent's session seen from one call.  Use ``open_oneshot``."""

    def __init__(self, conn: Connection, hello: m.Hello, on_notice: Notice, place: Place | None = None) -> None:
        self.conn = conn
        self._place = place  # where to rediscover the coordinator (None: a fixed endpoint)
        self._hello = hello
        self._on_notice = on_notice
        self.welcome: m.Welcome | None = None

    @property
    def name(self) -> str:
        return self._hello.agent

    @property
    def session(self) -> str:
        assert self.welcome is not None, "use open_oneshot(): the session is opened on entry"
        return self.welcome.session

    def hello(self) -> m.Welcome:
        welcome = expect(self.conn.request(self._hello), m.Welcome)
        self.welcome = welcome
        if welcome.notice:
            self._on_notice(welcome.notice)
        return welcome

    def _renew(self, stale_session: str) -> None:
        """Say hello again with our session: the coordinator resumes it if it is still
        live (e.g. after a restart), else opens a new one with no claims and says so."""
        self._hello = msgspec.structs.replace(self._hello, session=stale_session)
        try:
            self.hello()
        finally:
            self._hello = msgspec.structs.replace(self._hello, session=None)

    def call(self, build: Callable[[str], m.Request]) -> m.Reply:
        """Send ``build(session_id)``.  If the session expired, or the coordinator came
        back elsewhere, say hello again (resume or renew) and send it once more."""
        session = self.session
        try:
            return self.conn.request(build(session))
        except RequestFailed as exc:
            if exc.code not in EXPIRED:
                raise
        except CoordinatorUnreachable:
            if not self._rediscover():
                raise  # same endpoint: nothing answers there
        self._renew(session)
        return self.conn.request(build(self.session))

    def _rediscover(self) -> bool:
        return follow_coordinator(self._place, self.conn)

    def head(self) -> str | None:
        """The commit checked out in this agent's worktree, read from .git's files (no git)."""
        from protocol.gitrefs import read_head

        return read_head(self._hello.worktree) if self._hello.worktree else None

    def merging(self) -> list[str]:
        """The commits a merge in progress in this agent's worktree brings (``MERGE_HEAD``):
        the commit that concludes it has them too, so what they bring is no stale base."""
        from protocol.gitrefs import merge_heads

        return merge_heads(self._hello.worktree) if self._hello.worktree else []

    def claim(self, paths: list[str], *, shared: bool = False, ttl: float | None = None, retry: bool = False) -> m.Granted | m.Refused:
        """``retry``: a retry of a refused claim while waiting (not recorded as another refusal)."""
        head, merging = self.head(), self.merging()
        return self.call(lambda s: m.Claim(session=s, paths=list(paths), shared=shared, ttl=ttl, head=head, merging=merging, retry=retry))

    def intent(self, paths: list[str], *, token: int | None = None, maybe: list[str] = ()) -> m.Decision:
        """Ask before writing ``paths`` (and, not claimed, the files the call ``maybe`` rewrites)."""
        head, merging = self.head(), self.merging()
        return self.call(lambda s: m.Intent(session=s, paths=list(paths), token=token, head=head, merging=merging, maybe=list(maybe)))

    def wrote(self, paths: list[str], *, source: str = "") -> m.Decision:
        """Report files already written (seen after the fact): free ones are claimed,
        ones another agent holds become a ``write.unannounced`` event."""
        head, merging = self.head(), self.merging()
        return self.call(lambda s: m.Wrote(session=s, paths=list(paths), source=source, head=head, merging=merging))

    def release(self, paths: list[str] = (), *, all: bool = False) -> m.Released:
        """Release; the worktree's uncommitted paths go along, so the coordinator warns
        about (and records) released paths whose changes are not committed."""
        from protocol.uncommitted import uncommitted_paths

        dirty = uncommitted_paths(self._hello.worktree) if self._hello.worktree else None
        return self.call(lambda s: m.Release(session=s, paths=list(paths), all=all, uncommitted=dirty))

    def status(self) -> m.StatusReply:
        return self.conn.request(m.Status())


@contextmanager
def open_oneshot(
    name: str,
    *,
    cwd: str | os.PathLike | None = None,
    endpoint: str | None = None,
    pid: int | None = None,
    timeout: float | None = None,
    on_notice: Notice = stderr_notice,
) -> Iterator[OneShotSession]:
    """Attach to ``name``'s live session, or open a one-shot one (a TTL, or as long as
    ``pid`` lives).  Leaving never ends the session."""
    place = locate(cwd)
    address = resolve_endpoint(place, endpoint)
    with open_connection(address, timeout) as conn:
        fixed = endpoint or os.environ.get("LOCKSTEP_ENDPOINT")
        agent = OneShotSession(conn, make_hello(name, place, kind="oneshot", pid=pid), on_notice, None if fixed else place)
        agent.hello()
        yield agent
