"""Round-robin turns between peers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.fairqueue import FairQueue


def msgs(peer: bytes, n: int, start: int = 0) -> list[list[bytes]]:
    return [[peer, str(start + i).encode()] for i in range(n)]


def test_a_flood_takes_at_most_its_share_of_a_turn_and_a_quiet_peer_is_served_in_the_first():
    q = FairQueue(per_peer=4, limit=10_000)
    q.put_all(msgs(b"flood", 1000) + msgs(b"quiet", 1))
    batch = q.take(1024)
    assert [f[0] for f in batch].count(b"flood") == 4 and [b"quiet", b"0"] in batch
    assert len(q) == 996


def test_leftovers_go_to_the_back_of_the_line():
    q = FairQueue(per_peer=1, limit=100)
    q.put_all(msgs(b"a", 3) + msgs(b"b", 1) + msgs(b"c", 2))
    assert [f[0] for f in q.take(2)] == [b"a", b"b"]
    assert [f[0] for f in q.take(10)] == [b"c", b"a"]
    assert [f[0] for f in q.take(10)] == [b"c", b"a"]
    assert len(q) == 0 and q.room() == 100


@given(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.integers(1, 50)), max_size=20), st.integers(1, 8), st.integers(1, 64))
def test_every_message_comes_out_once_in_its_peers_order(puts, per_peer, limit):
    q = FairQueue(per_peer=per_peer, limit=10_000)
    sent: dict[bytes, list[bytes]] = {}
    for peer, n in puts:
        start = len(sent.get(peer, []))
        batch = msgs(peer, n, start)
        sent.setdefault(peer, []).extend(f[1] for f in batch)
        q.put_all(batch)
    got: dict[bytes, list[bytes]] = {}
    while len(q):
        batch = q.take(limit)
        assert 0 < len(batch) <= limit
        for peer in {f[0] for f in batch}:
            assert sum(1 for f in batch if f[0] == peer) <= per_peer
        for peer, body in batch:
            got.setdefault(peer, []).append(body)
    assert got == sent


def test_put_back_keeps_a_peers_order():
    q = FairQueue(per_peer=2, limit=100)
    q.put_all(msgs(b"a", 4))
    taken = q.take(10)
    q.put_back(taken[1:])
    assert [f[1] for f in q.take(10)] == [b"1", b"2"]
    assert [f[1] for f in q.take(10)] == [b"3"]
    assert len(q) == 0


def test_the_bytes_held_bound_what_is_read_as_well_as_the_count():
    q = FairQueue(per_peer=2, limit=100, byte_limit=3000)
    big = [[b"flood", b"x" * 995] for _ in range(3)]  # 1,000 bytes each, with the peer frame
    q.put_all(big[:2])
    assert q.room() == 98 and q.room_bytes() == 1000
    q.put_all(big[2:])
    assert q.room() == 0 and q.room_bytes() == 0  # full by bytes, though 97 more would fit by count
    taken = q.take(1)
    assert q.room() == 98 and q.room_bytes() == 1000
    q.put_back(taken)
    assert q.room() == 0
    q.take(10)
    q.take(10)
    assert len(q) == 0 and q.room() == 100 and q.room_bytes() == 3000
