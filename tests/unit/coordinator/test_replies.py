"""PeerQueues: unread replies bounded in bytes per peer (the pipe is simulated)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.replies import FULL, GONE, SENT, PeerQueues


class Pipes:
    """Each peer's zmq pipe: ``room[peer]`` more messages fit; absent peers are gone."""

    def __init__(self, **room: int) -> None:
        self.room = {k.encode(): v for k, v in room.items()}
        self.sent: dict[bytes, list[bytes]] = {}

    def __call__(self, peer: bytes, frame: bytes) -> str:
        if peer not in self.room:
            return GONE
        if self.room[peer] == 0:
            return FULL
        self.room[peer] -= 1
        self.sent.setdefault(peer, []).append(frame)
        return SENT


def test_replies_wait_in_order_behind_a_full_pipe_and_leave_when_it_drains():
    pipes = Pipes(a=1)
    q = PeerQueues(pipes, budget=100)
    for frame in (b"1", b"22", b"333"):
        assert q.send(b"a", frame) is None
    assert pipes.sent[b"a"] == [b"1"] and q.held_bytes(b"a") == 5
    pipes.room[b"a"] = 1
    assert q.flush() == 1 and q.held_bytes(b"a") == 3
    assert q.send(b"a", b"4") is None  # still behind the queued one: order is kept
    pipes.room[b"a"] = 10
    q.flush()
    assert pipes.sent[b"a"] == [b"1", b"22", b"333", b"4"] and not q.pending()


def test_a_peer_over_its_budget_is_cut_off_once_and_others_are_untouched():
    pipes = Pipes(hog=0, quiet=100)
    q = PeerQueues(pipes, budget=10)
    assert q.send(b"hog", b"x" * 6) is None
    cut = q.send(b"hog", b"y" * 6)
    assert cut is not None and (cut.peer, cut.replies, cut.bytes) == (b"hog", 2, 12)
    assert not q.pending() and q.held_bytes(b"hog") == 0
    for _ in range(5):  # still not reading: dropped at once, no second cut-off
        assert q.send(b"hog", b"z" * 6) is None
    assert q.cut_offs == 1 and q.replies_dropped == 7 and not q.pending()
    assert q.send(b"quiet", b"ok") is None and pipes.sent[b"quiet"] == [b"ok"]
    pipes.room[b"hog"] = 1  # it reads again: the cut-off is over, replies queue again
    assert q.send(b"hog", b"back") is None and pipes.sent[b"hog"] == [b"back"]
    assert q.send(b"hog", b"q") is None and q.held_bytes(b"hog") == 1


def test_replies_to_a_peer_that_left_are_dropped():
    pipes = Pipes(a=0)
    q = PeerQueues(pipes, budget=100)
    q.send(b"a", b"123")
    del pipes.room[b"a"]
    q.flush()
    assert not q.pending() and q.replies_dropped == 1
    assert q.send(b"nobody", b"x") is None and not q.pending()


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"a", b"b"]), st.binary(max_size=40), st.integers(0, 3)), max_size=60))
def test_held_bytes_never_pass_the_budget_and_no_reply_is_reordered(steps):
    pipes = Pipes(a=0, b=0)
    q = PeerQueues(pipes, budget=64)
    for peer, frame, room in steps:
        q.send(peer, frame)
        assert q.held_bytes(peer) <= 64
        pipes.room[peer] += room
        q.flush()
    for peer, sent in pipes.sent.items():
        order = [frame for p, frame, _ in steps if p == peer]
        it = iter(order)
        assert all(any(frame == other for other in it) for frame in sent)  # a subsequence
