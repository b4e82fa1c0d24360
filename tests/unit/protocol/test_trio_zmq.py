"""Tests of protocol.trio_zmq: trio tasks sharing pyzmq sockets without lost wake-ups."""

from __future__ import annotations

import contextlib
import itertools
import time

import pytest
import trio
import trio.testing
import zmq

from protocol.trio_zmq import ReadableAny, TrioSocket, open_socket

_endpoint_numbers = itertools.count()


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.term()  # hangs (and the test times out) if any socket was left open


@pytest.fixture
async def make_socket(ctx):
    """Factory of adapted sockets (linger=0), all closed at teardown via open_socket."""
    with contextlib.ExitStack() as stack:
        def make(socket_type: int, **options) -> TrioSocket:
            return stack.enter_context(open_socket(ctx, socket_type, linger=0, **options))

        yield make


@pytest.fixture
def endpoint():
    return f"inproc://trio-zmq-test-{next(_endpoint_numbers)}"


@pytest.fixture
async def dealer_router(make_socket, endpoint):
    """An adapted DEALER ``b"d"`` connected to an adapted ROUTER that already knows it."""
    router = make_socket(zmq.ROUTER, router_mandatory=1)
    router.socket.bind(endpoint)
    dealer = make_socket(zmq.DEALER, routing_id=b"d")
    dealer.socket.connect(endpoint)
    with trio.fail_after(5):
        await dealer.send_multipart([b"hello"])
        assert await router.recv_multipart() == [b"d", b"hello"]
    return dealer, router


class NaiveTrioSocket:
    """Reference of the broken design: try NOBLOCK, wait on the FD only after zmq.Again."""

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self.fd = socket.get(zmq.FD)

    async def recv_multipart(self) -> list[bytes]:
        while True:
            try:
                return self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                await trio.lowlevel.wait_readable(self.fd)

    async def send_multipart(self, frames) -> None:
        while True:
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK)
                return
            except zmq.Again:
                await trio.lowlevel.wait_readable(self.fd)


async def _run_lost_wakeup_scenario(receiving, dealer_raw, router_raw, window):
    """Task A awaits ``receiving.recv_multipart()``; the message arrives and a raw EVENTS
    read eats the fd edge; then ``receiving.send_multipart`` is awaited.  Returns what A
    received within ``window`` seconds after that send (A is cancelled afterwards)."""
    received: list[list[bytes]] = []
    got_message = trio.Event()

    async def task_a():
        received.append(await receiving.recv_multipart())
        got_message.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(task_a)
        await trio.testing.wait_all_tasks_blocked()  # A sleeps in wait_readable(fd)
        # From here until the send below, no trio checkpoint: A cannot run.
        router_raw.send_multipart([b"d", b"to-a"], zmq.NOBLOCK)
        deadline = time.monotonic() + 5
        while not dealer_raw.get(zmq.EVENTS) & zmq.POLLIN:  # consumes the fd edge
            assert time.monotonic() < deadline, "message never arrived"
        await receiving.send_multipart([b"from-b"])
        with trio.move_on_after(window):
            await got_message.wait()
        nursery.cancel_scope.cancel()
    return received


async def test_no_lost_wakeup_when_another_call_consumes_the_fd_edge(dealer_router):
    """The deterministic lost-wake-up case.

    A naive adapter (NOBLOCK, on ``zmq.Again`` wait on ``zmq.FD``) hangs here: A sleeps on
    the fd; the message's arrival signals the fd once (an edge), but a zmq call on the
    socket -- here a raw ``EVENTS`` read, in real code another task's send -- processes
    that signal and clears the fd before trio polls it.  Nothing else will ever signal
    the fd for that message, so A sleeps forever with a message waiting.  The adapter
    wakes A after its own ``send_multipart`` so that A re-reads ``EVENTS`` and sees POLLIN.
    """
    dealer, router = dealer_router
    with trio.fail_after(5):
        received = await _run_lost_wakeup_scenario(dealer, dealer.socket, router.socket, 5)
        assert received == [[b"to-a"]]
        assert await router.recv_multipart() == [b"d", b"from-b"]


async def test_naive_wrapper_really_loses_the_wakeup(dealer_router):
    """The same scenario with the naive wrapper must hang: proves the test above bites."""
    dealer, router = dealer_router
    with trio.fail_after(5):
        naive = NaiveTrioSocket(dealer.socket)
        received = await _run_lost_wakeup_scenario(naive, dealer.socket, router.socket, 0.5)
        assert received == []  # A missed the wake-up ...
        # ... although the message was there all along, and B's send went through.
        assert dealer.recv_multipart_nowait() == [b"to-a"]
        assert await router.recv_multipart() == [b"d", b"from-b"]


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_concurrent_sender_and_receiver_on_one_socket(make_socket, endpoint, transport):
    """tcp adds zmq's I/O thread, so state changes race with the tasks' EVENTS reads."""
    message_count = 20_000
    echo = make_socket(zmq.ROUTER, router_mandatory=1)
    echo.socket.bind(endpoint if transport == "inproc" else "tcp://127.0.0.1:*")
    client = make_socket(zmq.DEALER, routing_id=b"client")
    client.socket.connect(echo.socket.get(zmq.LAST_ENDPOINT).decode())

    async def echo_forever():
        while True:
            await echo.wait_readable()
            for message in echo.drain(100):
                await echo.send_multipart(message)

    async def send_all():
        for number in range(message_count):
            await client.send_multipart([b"%d" % number])

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(echo_forever)
            nursery.start_soon(send_all)
            for number in range(message_count):
                assert await client.recv_multipart() == [b"%d" % number]
            nursery.cancel_scope.cancel()


async def test_drain_returns_at_most_limit_and_everything_available(dealer_router):
    dealer, router = dealer_router
    with trio.fail_after(5):
        assert dealer.drain(10) == []
        for number in range(5):
            await router.send_multipart([b"d", b"%d" % number])
        await dealer.wait_readable()
        assert dealer.drain(3) == [[b"0"], [b"1"], [b"2"]]
        assert dealer.drain(10) == [[b"3"], [b"4"]]
        assert dealer.drain(10) == []
        assert dealer.recv_multipart_nowait() is None


async def test_drain_stops_once_the_messages_hold_max_bytes(dealer_router):
    dealer, router = dealer_router
    with trio.fail_after(5):
        for number in range(5):
            await router.send_multipart([b"d", b"%d" % number + b"x" * 99])  # 100 bytes each
        await dealer.wait_readable()
        assert [m[0][:1] for m in dealer.drain(10, max_bytes=250)] == [b"0", b"1", b"2"]  # the third crosses it
        assert [m[0][:1] for m in dealer.drain(10, max_bytes=100)] == [b"3"]
        assert [m[0][:1] for m in dealer.drain(10)] == [b"4"]


async def test_close_wakes_waiting_tasks_with_closed_resource_error(dealer_router):
    dealer, _router = dealer_router
    outcomes: list[str] = []

    async def receive():
        with pytest.raises(trio.ClosedResourceError):
            await dealer.recv_multipart()
        outcomes.append("closed")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert dealer._fd_waiter_scope is not None  # one on the fd ...
            assert len(dealer._parked_waiters) == 1  # ... and one parked
            dealer.close()
        assert outcomes == ["closed", "closed"]
        assert dealer.closed
        with pytest.raises(trio.ClosedResourceError):
            await dealer.recv_multipart()
        with pytest.raises(trio.ClosedResourceError):
            dealer.send_multipart_nowait([b"x"])


async def test_two_receivers_on_one_socket_each_get_a_message(dealer_router):
    dealer, router = dealer_router
    received: list[list[bytes]] = []

    async def receive():
        received.append(await dealer.recv_multipart())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert dealer._fd_waiter_scope is not None
            assert len(dealer._parked_waiters) == 1
            await router.send_multipart([b"d", b"one"])
            await router.send_multipart([b"d", b"two"])
        assert sorted(received) == [[b"one"], [b"two"]]


async def test_send_to_full_peer_backs_off_and_is_cancellable(make_socket, endpoint):
    """ROUTER_MANDATORY reports POLLOUT while *some* peer is writable, so a send to a
    full peer fails again and again: the adapter must back off, not spin."""

    class CountingTrioSocket(TrioSocket):
        send_attempts = 0

        def send_multipart_nowait(self, frames, copy=False):
            self.send_attempts += 1
            return super().send_multipart_nowait(frames, copy=copy)

    router = CountingTrioSocket(make_socket(zmq.ROUTER, router_mandatory=1, sndhwm=1).socket)
    router.socket.bind(endpoint)
    full_peer = make_socket(zmq.DEALER, routing_id=b"full", rcvhwm=1)
    full_peer.socket.connect(endpoint)
    free_peer = make_socket(zmq.DEALER, routing_id=b"free")
    free_peer.socket.connect(endpoint)
    with trio.fail_after(5):
        for peer in (full_peer, free_peer):
            await peer.send_multipart([b"hello"])
            await router.recv_multipart()
        for _ in range(100):  # fill the pipe to full_peer, which never reads
            if not router.send_multipart_nowait([b"full", b"filler"]):
                break
        else:
            pytest.fail("the pipe to the full peer never filled")
        assert router.socket.get(zmq.EVENTS) & zmq.POLLOUT  # free_peer is writable

        router.send_attempts = 0
        with trio.move_on_after(0.3) as window:
            await router.send_multipart([b"full", b"stuck"])
        assert window.cancelled_caught
        assert router.send_attempts < 50  # a spinning loop makes thousands
        await router.send_multipart([b"free", b"fine"])
        assert await free_peer.recv_multipart() == [b"fine"]


async def test_fd_waiter_wakes_a_parked_waiter_of_the_other_direction(make_socket, endpoint):
    """R waits on the fd for POLLIN while S is parked waiting for POLLOUT.  When the peer
    frees the pipe, the fd fires for POLLOUT: R's EVENTS read consumes that edge, so R
    must wake S, or S sleeps forever (no adapter call would ever wake it)."""
    peer = make_socket(zmq.DEALER, rcvhwm=1)
    peer.socket.bind(endpoint)
    dealer = make_socket(zmq.DEALER, sndhwm=1)
    dealer.socket.connect(endpoint)
    received: list[list[bytes]] = []
    sent = trio.Event()

    async def receive():
        received.append(await dealer.recv_multipart())

    async def send():
        await dealer.send_multipart([b"late"])
        sent.set()

    with trio.fail_after(5):
        for _ in range(100):  # fill the pipe to the peer, which does not read yet
            if not dealer.send_multipart_nowait([b"filler"]):
                break
        else:
            pytest.fail("the pipe to the peer never filled")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()  # R on the fd
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()  # S parked
            assert dealer._fd_waiter_scope is not None
            assert len(dealer._parked_waiters) == 1
            assert peer.drain(100)  # frees room: the dealer's fd fires for POLLOUT
            await sent.wait()
            await peer.send_multipart([b"for-r"])
        assert received == [[b"for-r"]]
        assert await peer.recv_multipart() == [b"late"]


async def test_cancelled_fd_waiter_hands_the_fd_to_a_parked_waiter(dealer_router):
    dealer, router = dealer_router
    received: list[list[bytes]] = []

    async def receive(task_status=trio.TASK_STATUS_IGNORED):
        with trio.CancelScope() as scope:
            task_status.started(scope)
            received.append(await dealer.recv_multipart())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            fd_waiter_scope = await nursery.start(receive)
            await trio.testing.wait_all_tasks_blocked()  # first receiver on the fd
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()  # second one parked
            assert len(dealer._parked_waiters) == 1
            fd_waiter_scope.cancel()
            await trio.testing.wait_all_tasks_blocked()  # second one took over the fd
            await router.send_multipart([b"d", b"for-the-second"])
        assert received == [[b"for-the-second"]]


@pytest.fixture
async def two_routers(make_socket):
    """Two adapted ROUTERs, each with an adapted DEALER (``b"d0"``, ``b"d1"``) it knows."""
    pairs = []
    for number in range(2):
        router = make_socket(zmq.ROUTER, router_mandatory=1)
        router.socket.bind(f"inproc://trio-zmq-any-{next(_endpoint_numbers)}")
        dealer = make_socket(zmq.DEALER, routing_id=b"d%d" % number)
        dealer.socket.connect(router.socket.get(zmq.LAST_ENDPOINT).decode())
        with trio.fail_after(5):
            await dealer.send_multipart([b"hello"])
            assert await router.recv_multipart() == [b"d%d" % number, b"hello"]
        pairs.append((router, dealer))
    return pairs


def _waiting(nursery, either: ReadableAny) -> trio.Event:
    """Start a task waiting on ``either``; the event is set when its wait returns."""
    woke = trio.Event()

    async def wait():
        await either.wait()
        woke.set()

    nursery.start_soon(wait)
    return woke


@pytest.mark.parametrize("which", [0, 1])
async def test_readable_any_wakes_for_a_message_on_either_socket(two_routers, which):
    (router0, _), (router1, _) = two_routers
    either = ReadableAny([router0, router1])
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                woke = _waiting(nursery, either)
                await trio.testing.wait_all_tasks_blocked()
                assert router0._fd_waiter_scope is router1._fd_waiter_scope is not None  # one wait, both slots
                assert not woke.is_set()
                await two_routers[which][1].send_multipart([b"ping"])
                await woke.wait()
            assert [router0, router1][which].drain(10) == [[b"d%d" % which, b"ping"]]
            assert [router0, router1][1 - which].drain(10) == []
            assert router0._fd_waiter_scope is router1._fd_waiter_scope is None
            await two_routers[0][1].send_multipart([b"ready"])  # a message waiting: returns at once
            await either.wait()
    finally:
        either.close()


async def test_readable_any_loses_no_wakeup_when_another_call_consumes_the_fd_edge(two_routers):
    """The deterministic lost-wake-up case of one socket, for a wait on two: the message
    arrives on the second router, a raw EVENTS read eats its fd edge, then another task
    sends through the adapter on that router: the waiter must re-read EVENTS and wake."""
    (router0, _), (router1, dealer1) = two_routers
    either = ReadableAny([router0, router1])
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                woke = _waiting(nursery, either)
                await trio.testing.wait_all_tasks_blocked()  # asleep on the epoll's fd
                # From here until the send below, no trio checkpoint: the waiter cannot run.
                dealer1.socket.send(b"to-router1", zmq.NOBLOCK)
                deadline = time.monotonic() + 5
                while not router1.socket.get(zmq.EVENTS) & zmq.POLLIN:  # consumes the fd edge
                    assert time.monotonic() < deadline, "message never arrived"
                assert router1.send_routed_nowait(b"d1", b"reply") == "sent"
                with trio.move_on_after(5):
                    await woke.wait()
                assert woke.is_set()
            assert router1.drain(10) == [[b"d1", b"to-router1"]]
            assert await dealer1.recv_multipart() == [b"reply"]
    finally:
        either.close()


async def test_readable_any_takes_turns_with_another_waiter_and_sees_close(two_routers):
    """Another task already waits on one of the fds: the wait still returns for a message
    on either socket; closing a socket ends a wait with ClosedResourceError."""
    (router0, dealer0), (router1, dealer1) = two_routers
    either = ReadableAny([router0, router1])
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(router0.wait_readable)  # holds router0's fd slot
                await trio.testing.wait_all_tasks_blocked()
                woke = _waiting(nursery, either)
                await trio.testing.wait_all_tasks_blocked()
                await dealer1.send_multipart([b"ping"])
                await woke.wait()
                await dealer0.send_multipart([b"for-the-other-waiter"])  # ends the first task
            assert router1.drain(10) == [[b"d1", b"ping"]]
            assert router0.drain(10) == [[b"d0", b"for-the-other-waiter"]]

            async def wait_until_closed():
                with pytest.raises(trio.ClosedResourceError):
                    await either.wait()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_until_closed)
                await trio.testing.wait_all_tasks_blocked()
                router1.close()
    finally:
        either.close()
