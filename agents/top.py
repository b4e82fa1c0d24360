"""``lockstep top``: a live view of agents, claims, checks in flight and recent gates.

Fed the way a late subscriber must be (zguide's clone pattern): subscribe to PUB
first, then take a ``status`` snapshot, then apply publications whose ``seq`` is newer
than the snapshot's.  A gap in ``seq`` (PUB drops silently at its high-water mark) or a
new epoch means updates were missed: take a fresh snapshot.  Publications that change
agents or claims also trigger a snapshot (coalesced to at most a few per second), so
the tables always show the coordinator's own view, never a local reconstruction.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio
import zmq
from rich.console import Group
from rich.table import Table
from rich.text import Text

from protocol import messages as m
from protocol.codec import decode_publication
from protocol.trio_zmq import TrioSocket

RECENT = 12  # gate decisions shown
REFRESH = 0.5  # seconds between redraws (ages move on)
STATE_KINDS = ("agent.", "claim.")
GATE_KINDS = ("intent.decided", "job.finished", "done.decided", "verify.refused", "rule.response", "notice")


@dataclass
class View:
    snapshot: m.StatusReply | None = None
    seq: int = 0
    epoch: int = 0
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # in flight
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    gaps: int = 0
    stale_snapshot: bool = True

    def take(self, snapshot: m.StatusReply) -> None:
        self.snapshot, self.seq, self.epoch = snapshot, snapshot.seq, snapshot.epoch
        self.stale_snapshot = False

    def apply(self, pub: m.Publication) -> None:
        """One sequenced update; marks the snapshot stale when it must be retaken."""
        if pub.epoch != self.epoch or pub.seq > self.seq + 1:
            self.gaps += pub.epoch == self.epoch  # a restart is not a gap
            self.stale_snapshot = True
        if pub.epoch == self.epoch and pub.seq <= self.seq:
            return  # already in the snapshot
        self.seq = max(self.seq, pub.seq) if pub.epoch == self.epoch else pub.seq
        if pub.kind.startswith(STATE_KINDS):
            self.stale_snapshot = True
        if pub.kind == "job.started":
            self.jobs[pub.data["job"]] = {"job": pub.data["job"], "kind": pub.data["kind"], "agent": pub.agent, "done": 0, "since": time.monotonic()}
        elif pub.kind == "job.progress" and pub.data.get("job") in self.jobs:
            self.jobs[pub.data["job"]]["done"] += 1
        elif pub.kind == "job.finished":
            self.jobs.pop(pub.data.get("job"), None)
        if pub.kind in GATE_KINDS:
            self.recent.appendleft((time.strftime("%H:%M:%S"), pub))


def _age(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 60 else f"{seconds / 60:.0f}m"


def _usage(pid: int | None) -> str:
    if pid is None:
        return "-"
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return f"{process.cpu_percent():4.0f}%  {process.memory_info().rss / 2**20:5.0f} MiB"
    except psutil.Error:
        return "-"


def _describe(pub: m.Publication) -> tuple[str, str]:
    data = pub.data
    if pub.kind == "intent.decided":
        return data.get("verdict", "?"), f"intent {', '.join(data.get('paths', []))}: {data.get('reason', '')}"
    if pub.kind == "job.finished":
        return data.get("verdict", "?"), f"{data.get('kind')} {data.get('job')}: {data.get('reason', '')}"
    if pub.kind == "done.decided":
        return data.get("verdict", "?"), f"done: {data.get('reason', '')}"
    if pub.kind == "rule.response":
        return data.get("action", "?"), f"{data.get('finding')}: {data.get('outcome', '')}"
    return pub.kind, data.get("message") or data.get("reason") or ""


def render(view: View) -> Group:
    snap = view.snapshot
    if snap is None:
        return Group(Text("waiting for the coordinator…"))
    head = Text(f"lockstep top — mode {snap.mode}, epoch {snap.epoch}, seq {view.seq}" + (f", {view.gaps} gaps recovered" if view.gaps else ""), style="bold")
    agents = Table(title="agents", expand=True)
    for column in ("name", "state", "pid", "heartbeat age", "cpu  memory", "worktree"):
        agents.add_column(column)
    styles = {"alive": "green", "stale": "yellow", "gone": "red"}
    for a in snap.agents:
        agents.add_row(a.name, Text(a.state, style=styles.get(a.state, "")), str(a.pid or "-"), _age(a.last_seen_ago), _usage(a.pid) if a.state == "alive" else "-", a.worktree)
    claims = Table(title="claims", expand=True)
    for column in ("pattern", "holder", "token", "access", "age", "stale"):
        claims.add_column(column)
    for c in snap.claims:
        claims.add_row(c.pattern, c.holder, str(c.token), c.access, _age(c.since_ago), "")
    for h in snap.holds:
        claims.add_row(h.pattern, h.former_holder, "-", "held", "-", Text(f"stale holder; free in {h.free_in:.1f}s", style="yellow"))
    jobs = Table(title="checks in flight", expand=True)
    for column in ("job", "kind", "agent", "results", "running for"):
        jobs.add_column(column)
    for j in view.jobs.values():
        jobs.add_row(j["job"], j["kind"], j["agent"] or "-", str(j["done"]), _age(time.monotonic() - j["since"]))
    gates = Table(title="recent gate decisions", expand=True)
    for column in ("time", "agent", "verdict", "what"):
        gates.add_column(column)
    for when, pub in view.recent:
        verdict, what = _describe(pub)
        style = "green" if verdict in ("allow", "pass") else "red" if verdict in ("block", "fail", "escalate") else ""
        gates.add_row(when, pub.agent or "-", Text(verdict, style=style), what)
    return Group(head, agents, claims, jobs, gates)


async def follow(conn, pub_endpoint: str, view: View, on_change, *, until=None) -> None:
    """Subscribe, snapshot, then apply sequenced updates; call ``on_change`` after each."""
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.SUB)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.SUBSCRIBE, b"")
    raw.connect(pub_endpoint)
    sub = TrioSocket(raw)
    try:
        async with trio.open_nursery() as nursery:

            async def refresh() -> None:
                while True:
                    if view.stale_snapshot:
                        view.take(await conn.request(m.Status()))
                    on_change()
                    if until is not None and until(view):
                        nursery.cancel_scope.cancel()
                        return
                    await trio.sleep(REFRESH)

            nursery.start_soon(refresh)
            while True:
                frames = await sub.recv_multipart()
                view.apply(decode_publication(frames[-1]))
    finally:
        sub.close()
