"""Replies a peer has not taken yet, bounded in bytes per peer.

A ROUTER queues what is sent to each peer in a pipe bounded by a *message count*
(``SNDHWM``), not by bytes: with 100,000 messages allowed and an 11 MB ``status``
reply, a client that sends requests and never reads grew the coordinator by gigabytes.
So the shell keeps zmq's share small and counts the rest in bytes:

* the ROUTER's per-peer pipe holds at most ``PIPE_REPLIES`` messages, and with
  ``ROUTER_MANDATORY`` a full pipe is reported (``FULL``) instead of dropping silently;
* a reply that does not fit waits here, in its peer's queue, and so does every later
  reply to that peer (their order is kept); the shell retries the queues with back-off;
* a peer whose queue would pass ``budget`` bytes is **cut off**: its queued replies and
  this one are dropped and ``send`` returns a ``CutOff`` for the shell to record and
  log.  While its pipe stays full, later replies to it are dropped too (counted, no new
  event); the first reply its pipe takes again ends the cut-off.

Nothing else about the peer changes: its requests are still handled (heartbeats keep
its session alive), only the answers it does not read are thrown away.  Memory held
for one peer is at most ``budget`` plus ``PIPE_REPLIES`` replies inside zmq.

Pure bookkeeping around a ``send(peer, frame) -> SENT | FULL | GONE`` callable, so it is
tested without sockets; one trio thread uses it (the ROUTER is not thread-safe anyway).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

SENT, FULL, GONE = "sent", "full", "gone"  # what one ROUTER send did

PIPE_REPLIES = 16  # the ROUTER's SNDHWM: replies zmq holds for one peer
CUT_OFF_REMEMBERED = 10_000  # cut-off peers remembered (a peer that left is never heard of again)


@dataclass(frozen=True)
class CutOff:
    """A peer passed its budget: what was dropped."""

    peer: bytes
    replies: int
    bytes: int


class PeerQueues:
    def __init__(self, send: Callable[[bytes, bytes], str], budget: int) -> None:
        self._send = send
        self.budget = budget
        self._queues: dict[bytes, deque[bytes]] = {}
        self._bytes: dict[bytes, int] = {}
        self._cut: dict[bytes, int] = {}  # cut-off peer -> replies dropped since
        self.cut_offs = 0
        self.replies_dropped = 0
        self.bytes_dropped = 0

    def send(self, peer: bytes, frame: bytes) -> CutOff | None:
        """Send ``frame`` to ``peer`` now, or queue it behind the peer's earlier replies;
        a ``CutOff`` if this reply would take the peer over its budget."""
        if peer in self._cut:
            outcome = self._send(peer, frame)
            if outcome == FULL:
                self._cut[peer] += 1
                self._dropped(1, len(frame))
            else:  # it reads again (or left): the cut-off is over
                del self._cut[peer]
            return None
        queue = self._queues.get(peer)
        if queue is None:
            if self._send(peer, frame) != FULL:
                return None  # sent, or the peer is gone (its reply goes with it, as in zmq)
            queue = self._queues[peer] = deque()
            self._bytes[peer] = 0
        held = self._bytes[peer] + len(frame)
        if held > self.budget:
            cut = CutOff(peer=peer, replies=len(queue) + 1, bytes=held)
            del self._queues[peer], self._bytes[peer]
            self._cut[peer] = 0
            if len(self._cut) > CUT_OFF_REMEMBERED:
                del self._cut[next(iter(self._cut))]
            self.cut_offs += 1
            self._dropped(cut.replies, cut.bytes)
            return cut
        queue.append(frame)
        self._bytes[peer] = held
        return None

    def flush(self) -> int:
        """Send what the peers' pipes take now, in order; how many replies left."""
        moved = 0
        for peer in list(self._queues):
            queue = self._queues[peer]
            while queue:
                outcome = self._send(peer, queue[0])
                if outcome == FULL:
                    break
                frame = queue.popleft()
                self._bytes[peer] -= len(frame)
                if outcome == GONE:  # the peer left: nobody will read the rest
                    self._dropped(1 + len(queue), len(frame) + self._bytes[peer])
                    queue.clear()
                else:
                    moved += 1
            if not queue:
                del self._queues[peer], self._bytes[peer]
        return moved

    def pending(self) -> bool:
        return bool(self._queues)

    def held_bytes(self, peer: bytes) -> int:
        return self._bytes.get(peer, 0)

    def statistics(self) -> dict:
        return {
            "peers_waiting": len(self._queues),
            "bytes_waiting": sum(self._bytes.values()),
            "peers_cut_off": len(self._cut),
            "cut_offs": self.cut_offs,
            "replies_dropped": self.replies_dropped,
            "bytes_dropped": self.bytes_dropped,
            "budget_bytes": self.budget,
        }

    def _dropped(self, replies: int, size: int) -> None:
        self.replies_dropped += replies
        self.bytes_dropped += size
