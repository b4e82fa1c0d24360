"""Let trio tasks use (sync) pyzmq sockets without blocking and without lost wake-ups.

Theory.  ``zmq.FD`` is not "readable when the socket has a message".  It is the socket's
command-mailbox signal, readable while commands are pending, and *any* zmq call on the
socket (send, recv, even reading ``zmq.EVENTS``) processes those commands and so clears
it.  It behaves like an edge: it fires once per state change and whoever makes the next
zmq call consumes the edge, whether or not they care about it.  The only safe way to sleep
is therefore::

    read EVENTS; if the flag we need is absent, wait on the fd -- with no zmq call between.

A naive wrapper that waits on the fd only after ``zmq.Again`` breaks as soon as two tasks
share a socket: task A reads EVENTS (nothing), sleeps on the fd; a message arrives (edge);
task B sends, which processes the command and eats the edge; A sleeps forever although a
message is waiting.  Hence this module's rules:

* exactly one task waits on the fd (trio allows only one), the others park;
* after every zmq call made through the adapter, all waiters are woken (the parked ones
  unparked, the fd waiter's cancel scope cancelled) and each re-reads EVENTS;
* a waiter's own EVENTS read is a zmq call too: if what it saw satisfies some *other*
  waiter, it wakes them all.  If it satisfies nobody, sleeping on the fd stays valid,
  because any later change raises a fresh edge;
* when the fd slot is left empty while others are parked, they are woken so one takes it.

Calls made directly on ``.socket`` (other than before any task waits) bypass these rules;
follow them with :meth:`TrioSocket.wake_waiters`.  zmq sockets are not thread-safe: never
hand one to ``trio.to_thread``.
"""

from __future__ import annotations

import contextlib
import errno
import select
from collections.abc import Iterator, Sequence
from typing import Any

import trio
import zmq

# Backoff when sends keep failing although EVENTS says POLLOUT: with ROUTER_MANDATORY,
# "writable" means *some* peer is writable, so a full peer would make us spin.
_SEND_BACKOFF_FIRST = 0.001
_SEND_BACKOFF_MAX = 0.05
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)


class TrioSocket:
    """A ``zmq.Socket`` usable from many trio tasks at once (one trio run, one thread)."""

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self._fd: int = socket.get(zmq.FD)  # cached: unreadable once the socket is closed
        self._closed = False
        self._fd_waiter_scope: trio.CancelScope | None = None  # set while a task waits on fd
        self._parked_waiters = trio.lowlevel.ParkingLot()
        self._waiter_count_by_flag = {zmq.POLLIN: 0, zmq.POLLOUT: 0}

    # -- waking -------------------------------------------------------------------------

    def wake_waiters(self) -> None:
        """Make every waiting task re-read EVENTS (call after any raw zmq call)."""
        self._parked_waiters.unpark_all()
        if self._fd_waiter_scope is not None:
            self._fd_waiter_scope.cancel()

    def _after_zmq_call(self) -> None:
        if any(self._waiter_count_by_flag.values()):
            self.wake_waiters()

    def _flags_wanted_by_others(self, my_flag: int) -> int:
        return sum(flag for flag, count in self._waiter_count_by_flag.items()
                   if count - (flag == my_flag) > 0)

    async def _wait_for(self, flag: int) -> bool:
        """Return once ``EVENTS & flag``; raise ``trio.ClosedResourceError`` on close.
        Returns whether it had to wait (and so passed through the scheduler)."""
        self._waiter_count_by_flag[flag] += 1
        waited = False
        try:
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("socket was closed")
                events = self.socket.get(zmq.EVENTS)  # may consume someone's edge
                if events & self._flags_wanted_by_others(flag):
                    self.wake_waiters()
                if events & flag:
                    return waited
                waited = True
                if self._fd_waiter_scope is None:
                    with trio.CancelScope() as scope:  # cancelled = "re-check EVENTS"
                        self._fd_waiter_scope = scope
                        try:
                            await trio.lowlevel.wait_readable(self._fd)
                        finally:
                            self._fd_waiter_scope = None
                else:
                    await self._parked_waiters.park()
        finally:
            self._waiter_count_by_flag[flag] -= 1
            if self._fd_waiter_scope is None and self._parked_waiters:
                self._parked_waiters.unpark_all()  # nobody watches the fd: one must take it

    async def wait_readable(self) -> None:
        """Return when the socket has a message to receive (``EVENTS & POLLIN``).

        Always a checkpoint, but only one: a wake-up from the fd is already a pass
        through the scheduler (this loop runs once per burst of messages, so a second
        pass per wake-up showed up as CPU under many idle-ish agents).  After a
        ready-at-once checkpoint another task may have taken the message: callers
        that drain must accept an empty batch."""
        if not await self._wait_for(zmq.POLLIN):
            await trio.lowlevel.checkpoint()

    # -- non-blocking calls -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("socket was closed")

    def send_multipart_nowait(self, frames: Sequence[Any], copy: bool = True) -> bool:
        """Send one multipart message if possible now; False on ``zmq.Again``.

        Frames are sent one by one with plain-int flags: pyzmq's ``send_multipart``
        combines enum flags per frame, which cost more than the send itself for the
        small messages we send.  (``copy=False`` only pays off for frames of tens of KB.)
        A multipart message is atomic in zmq: only the first frame can raise Again."""
        self._check_open()
        send = self.socket.send
        try:
            for frame in frames[:-1]:
                send(frame, _NOBLOCK_MORE, copy=copy)
            send(frames[-1], _NOBLOCK, copy=copy)
            return True
        except zmq.Again:
            return False
        finally:
            self._after_zmq_call()

    def send_routed_nowait(self, peer: bytes, frame: bytes) -> str:
        """On a ROUTER with ``ROUTER_MANDATORY``: send one frame to ``peer``.  Returns
        ``"sent"``, ``"full"`` (the peer's pipe is at its SNDHWM) or ``"gone"`` (no such
        peer is connected)."""
        self._check_open()
        send = self.socket.send
        try:
            send(peer, _NOBLOCK_MORE)  # routing fails here, or not at all
            send(frame, _NOBLOCK)
            return "sent"
        except zmq.Again:
            return "full"
        except zmq.ZMQError as exc:
            if exc.errno == errno.EHOSTUNREACH:
                return "gone"
            raise
        finally:
            self._after_zmq_call()

    def recv_multipart_nowait(self) -> list[bytes] | None:
        """Receive one multipart message if one is waiting, else None."""
        self._check_open()
        try:
            return self.socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        finally:
            self._after_zmq_call()

    def drain(self, limit: int, max_bytes: int | None = None) -> list[list[bytes]]:
        """Receive up to ``limit`` multipart messages that are already waiting, stopping
        once they hold ``max_bytes`` (the message that crosses it is the last)."""
        self._check_open()
        messages: list[list[bytes]] = []
        left = max_bytes
        try:
            while len(messages) < limit:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
                messages.append(frames)
                if left is not None:
                    left -= sum(map(len, frames))
                    if left <= 0:
                        break
        except zmq.Again:
            pass
        finally:
            self._after_zmq_call()
        return messages

    def drain_frames(self, limit: int, max_bytes: int | None = None) -> list[list[zmq.Frame]]:
        """Like ``drain`` but as ``zmq.Frame`` objects, whose properties (e.g. the
        ``User-Id`` a ZAP handler gave the connection) can be read."""
        self._check_open()
        messages: list[list[zmq.Frame]] = []
        left = max_bytes
        try:
            while len(messages) < limit:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
                messages.append(frames)
                if left is not None:
                    left -= sum(len(f) for f in frames)
                    if left <= 0:
                        break
        except zmq.Again:
            pass
        finally:
            self._after_zmq_call()
        return messages

    # -- blocking calls -----------------------------------------------------------------

    async def send_multipart(self, frames: Sequence[Any], copy: bool = True) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        failed_sends = 0
        while not self.send_multipart_nowait(frames, copy=copy):
            failed_sends += 1
            if failed_sends > 1:  # POLLOUT was claimed yet the send failed: back off
                await trio.sleep(min(_SEND_BACKOFF_FIRST * 2 ** (failed_sends - 2),
                                     _SEND_BACKOFF_MAX))
            await self._wait_for(zmq.POLLOUT)
        await trio.lowlevel.cancel_shielded_checkpoint()  # sent: never raise Cancelled now

    async def recv_multipart(self) -> list[bytes]:
        await trio.lowlevel.checkpoint_if_cancelled()
        while (message := self.recv_multipart_nowait()) is None:
            await self._wait_for(zmq.POLLIN)
        await trio.lowlevel.cancel_shielded_checkpoint()  # never drop a received message
        return message

    # -- closing ------------------------------------------------------------------------

    def close(self, linger: int = 0) -> None:
        """Close the socket; tasks waiting on it get ``trio.ClosedResourceError``."""
        if self._closed:
            return
        self._closed = True
        try:
            trio.lowlevel.notify_closing(self._fd)
        except RuntimeError:
            pass  # not inside trio.run: then no task can be waiting on the fd
        self.wake_waiters()  # a ReadableAny waits on its own epoll, not on this fd
        self.socket.close(linger=linger)

    @property
    def closed(self) -> bool:
        return self._closed


class ReadableAny:
    """One task waiting until any of several sockets has a message, with no task per
    socket: the sockets' fds are registered in an epoll of our own, and the task waits
    on that epoll's fd (readable while any of theirs is).  The waiting task takes each
    socket's fd-waiter slot, so every zmq call made through the adapter on any of them
    wakes it to re-read ``EVENTS``, exactly as for one socket (see the module's rules).

    (A nursery with one waiting task per socket did the same at every wait: two tasks
    spawned, one cancelled, ~1/5 of the request loop's CPU per serial request.)
    Linux only (epoll), like trio's own I/O on Linux.  Close it after the sockets."""

    def __init__(self, sockets: Sequence[TrioSocket]) -> None:
        self.sockets = tuple(sockets)
        self._epoll = select.epoll()
        for sock in self.sockets:
            self._epoll.register(sock._fd, select.EPOLLIN)

    async def wait(self) -> None:
        """Return when one of the sockets has a message (``EVENTS & POLLIN``); raise
        ``trio.ClosedResourceError`` if one is closed.  Always a checkpoint."""
        if any(sock._fd_waiter_scope is not None for sock in self.sockets):
            await self._wait_in_tasks()  # another task waits on one of the fds: take turns
            return
        for sock in self.sockets:
            sock._waiter_count_by_flag[zmq.POLLIN] += 1
        waited = False
        try:
            while True:
                ready = False
                for sock in self.sockets:
                    if sock._closed:
                        raise trio.ClosedResourceError("socket was closed")
                    events = sock.socket.get(zmq.EVENTS)  # may consume someone's edge
                    if events & sock._flags_wanted_by_others(zmq.POLLIN):
                        sock.wake_waiters()
                    ready = ready or bool(events & zmq.POLLIN)
                if ready:
                    break
                if any(sock._fd_waiter_scope is not None for sock in self.sockets):
                    break  # another task took a slot while we looked: take turns (below)
                waited = True
                with trio.CancelScope() as scope:  # cancelled = "re-check EVENTS"
                    for sock in self.sockets:
                        sock._fd_waiter_scope = scope
                    try:
                        await trio.lowlevel.wait_readable(self._epoll.fileno())
                    finally:
                        for sock in self.sockets:
                            sock._fd_waiter_scope = None
        finally:
            for sock in self.sockets:
                sock._waiter_count_by_flag[zmq.POLLIN] -= 1
                if sock._fd_waiter_scope is None and sock._parked_waiters:
                    sock._parked_waiters.unpark_all()  # nobody watches its fd: one must take it
        if not ready:
            await self._wait_in_tasks()
        elif not waited:
            await trio.lowlevel.checkpoint()

    async def _wait_in_tasks(self) -> None:
        async with trio.open_nursery() as nursery:
            async def wait(sock: TrioSocket) -> None:
                await sock.wait_readable()
                nursery.cancel_scope.cancel()

            for sock in self.sockets:
                nursery.start_soon(wait, sock)

    def close(self) -> None:
        try:
            trio.lowlevel.notify_closing(self._epoll.fileno())
        except RuntimeError:
            pass  # not inside trio.run: nobody waits
        self._epoll.close()


@contextlib.contextmanager
def open_socket(ctx: zmq.Context, socket_type: int, **options: Any) -> Iterator[TrioSocket]:
    """Create a socket, set ``options`` (e.g. ``linger=0, routing_id=b"a"``), wrap it,
    and close it on exit.  Option names are ``zmq`` socket option names, any case."""
    socket = ctx.socket(socket_type)
    try:
        for name, value in options.items():
            socket.set(zmq.SocketOption[name.upper()], value)
    except BaseException:
        socket.close(linger=0)
        raise
    trio_socket = TrioSocket(socket)
    try:
        yield trio_socket
    finally:
        trio_socket.close(linger=options.get("linger", 0))
