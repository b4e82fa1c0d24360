"""Status replies rendered a slice per turn, so a big one never holds up everyone else.

A status lists up to ~10,000 claims (``STATUS_LIST_LIMIT``).  Built in one go, the rows
of 2,000 claims took 5 ms of the loop, and every other peer's request waited behind
them: a client polling ``status`` as fast as it could raised a quiet client's round trip
16-fold.  The core takes the status's view in its turn (``Core.status``: counts, agents,
holds, and a copy of the claim entries to list; an entry never changes once granted,
so the copy stays true to that moment).  The loop then renders at most
``ROWS_PER_TURN`` rows per turn, over all pending statuses in turn (so many statuses at
once cost no more per turn than one), other peers' requests in between, and sends each
reply when its rows are done.  One status per peer is rendered at a time: the peer's
later messages wait behind it, in order.
"""

from __future__ import annotations

import msgspec

from protocol.messages import ClaimInfo, StatusReply

from .core import StatusParts, claim_rows, sorted_for_status

ROWS_PER_TURN = 256  # ~0.4 ms of rows per turn: what another peer's request may wait for


class StatusRender:
    def __init__(self, peer: bytes, parts: StatusParts) -> None:
        self.peer = peer
        self.req = parts.reply.req
        self._parts = parts
        self._entries = sorted_for_status(parts.entries)
        self._rows: list[ClaimInfo] = []

    @property
    def done(self) -> bool:
        return len(self._rows) == len(self._entries)

    def step(self, rows: int) -> int:
        """Render up to ``rows`` more rows; how many it rendered."""
        start = len(self._rows)
        self._rows += claim_rows(self._entries[start : start + rows], self._parts.now)
        return len(self._rows) - start

    def reply(self) -> StatusReply:
        return msgspec.structs.replace(self._parts.reply, claims=self._rows)
