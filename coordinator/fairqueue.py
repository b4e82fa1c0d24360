"""Fair turns between peers: one flooding client cannot fill every batch.

The request loop reads what the ROUTER has (zmq already fair-queues its pipes) into one
queue per peer, then takes each turn's batch round-robin, at most ``per_peer`` messages
of one peer per turn; a peer with messages left goes to the back of the line.  A quiet
client's request thus waits behind at most ``per_peer`` messages of each busy peer
instead of a whole batch of one flooder's (a batch is handled and committed before any
of its replies leave).  A ``status`` costs the whole registry: each peer has at most
one at a time, its rows rendered a slice per turn (statusrender.py).  ``limit`` (messages)
and ``byte_limit`` (their bytes: a frame may be a megabyte) bound what is read off the
socket but not yet handled: past either the loop stops reading, and the rest waits in
zmq's per-peer pipes (whose high-water mark pushes back on the flooder, not on everyone).
"""

from __future__ import annotations

from collections import deque


class FairQueue:
    def __init__(self, per_peer: int, limit: int, byte_limit: int = 1 << 62) -> None:
        self.per_peer = per_peer
        self.limit = limit
        self.byte_limit = byte_limit
        self._queues: dict[bytes, deque] = {}  # insertion order is the round-robin order
        self._count = 0
        self._bytes = 0  # of the queued messages' frames

    def __len__(self) -> int:
        return self._count

    def room(self) -> int:
        """How many more messages may be read off the socket now."""
        return max(0, self.limit - self._count) if self._bytes < self.byte_limit else 0

    def room_bytes(self) -> int:
        """How many more bytes may be read off the socket now."""
        return max(0, self.byte_limit - self._bytes)

    def put_all(self, messages: list[list[bytes]]) -> None:
        """Queue multipart messages (the first frame names the peer), in arrival order."""
        queues = self._queues
        size = 0
        for frames in messages:
            queue = queues.get(frames[0])
            if queue is None:
                queue = queues[frames[0]] = deque()
            queue.append(frames)
            size += _size(frames)
        self._count += len(messages)
        self._bytes += size

    def put_back(self, messages: list[list[bytes]]) -> None:
        """Return one peer's messages, taken but not handled, to the front of its queue
        (in order): they come before anything it sent after them."""
        if not messages:
            return
        queue = self._queues.setdefault(messages[0][0], deque())
        queue.extendleft(reversed(messages))
        self._count += len(messages)
        self._bytes += sum(map(_size, messages))

    def take(self, limit: int) -> list[list[bytes]]:
        """This turn's batch: round-robin, at most ``per_peer`` of each peer."""
        batch: list[list[bytes]] = []
        queues = self._queues
        for peer in list(queues):
            if len(batch) >= limit:
                break
            queue = queues.pop(peer)
            for _ in range(min(self.per_peer, len(queue), limit - len(batch))):
                batch.append(queue.popleft())
            if queue:
                queues[peer] = queue  # to the back of the line
        self._count -= len(batch)
        self._bytes -= sum(map(_size, batch))
        return batch


def _size(frames: list[bytes]) -> int:
    return sum(map(len, frames))
