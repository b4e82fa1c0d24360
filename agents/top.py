"""``lockstep top``: a live view of agents, claims, checks in flight and recent gates.

Fed the way a late subscriber must be (zguide's clone pattern): subscribe to PUB
first, then take a ``status`` snapshot, then apply publications whose ``seq`` is newer
than the snapshot's.  A gap in ``seq`` (PUB drops silently at its high-water mark) or a
new epoch means updates were missed: take a fresh snapshot.  Publications that change
agents or claims also trigger a snapshot (coalesced to at most a few per second), so
the tables always show the coordinator's own view, never a local reconstruction.

Ages move on between snapshots: every age in a snapshot is "seconds ago *when the
snapshot was taken*", so each frame adds the time elapsed since then.  Heartbeats are
not published, so the snapshot is also retaken every ``RESNAPSHOT`` seconds.

Keys (read from the terminal in cbreak mode): ``q`` quits, ``s`` cycles the sort
(agent / age / path), ``/`` starts typing an agent filter (Enter applies, Esc clears),
``p`` or space pauses the frame, ``j``/``k`` or the arrows select an agent, whose
claims, last gate decisions and running jobs fill the detail pane.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import psutil
import trio
import zmq
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from protocol import curve
from protocol import messages as m
from protocol.codec import decode_publication
from protocol.trio_zmq import TrioSocket

RECENT = 12  # gate decisions shown
PER_AGENT = 5  # gate decisions kept per agent for the detail pane
REFRESH = 0.5  # seconds between redraws (ages move on)
RESNAPSHOT = 2.0  # seconds between snapshots even when nothing was published (heartbeat ages)
STATE_KINDS = ("agent.", "claim.", "land.")
UNANNOUNCED = "write.unannounced"  # a write seen after the fact to a path another agent holds
GATE_KINDS = (
    "intent.decided", "job.finished", "done.decided", "verify.refused", "rule.response", "rule.resolved", "notice",
    "task.queued", "message.sent", UNANNOUNCED,
)
SORTS = ("agent", "age", "path")
ELLIPSIS = "…"


@dataclass
class View:
    snapshot: m.StatusReply | None = None
    taken_at: float = 0.0  # time.monotonic() when the snapshot arrived
    seq: int = 0
    epoch: int = 0
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # in flight
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    by_agent: dict[str, deque] = field(default_factory=dict)  # agent -> its last gate decisions
    unannounced: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # newest first: see ``note_unannounced``
    gaps: int = 0
    stale_snapshot: bool = True
    storage_error: str = ""  # why the coordinator cannot write its ledger ("" while it can)

    def take(self, snapshot: m.StatusReply, now: float | None = None) -> None:
        """A fresh snapshot: the coordinator's view, running jobs included."""
        now = time.monotonic() if now is None else now
        self.snapshot, self.seq, self.epoch, self.taken_at = snapshot, snapshot.seq, snapshot.epoch, now
        self.jobs = {
            j.job: {"job": j.job, "kind": j.kind, "agent": j.agent, "done": j.done, "since": now - j.running_for}
            for j in snapshot.jobs
        }
        self.storage_error = storage_error(snapshot)
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
        if pub.kind == "coordinator.storage":  # the ledger failed, or is writable again
            self.storage_error = "" if pub.data.get("writable") else str(pub.data.get("error") or "ledger cannot be written")
        if pub.kind == "job.started":
            self.jobs[pub.data["job"]] = {"job": pub.data["job"], "kind": pub.data["kind"], "agent": pub.agent, "done": 0, "since": time.monotonic()}
        elif pub.kind == "job.progress" and pub.data.get("job") in self.jobs:
            self.jobs[pub.data["job"]]["done"] += 1
        elif pub.kind == "job.finished":
            self.jobs.pop(pub.data.get("job"), None)
        if pub.kind in GATE_KINDS:
            self.remember(time.strftime("%H:%M:%S"), pub)

    def remember(self, when: str, pub: m.Publication, at: float | None = None) -> None:
        """A gate decision seen at ``at`` (time.time(); now if None), shown as ``when``."""
        if pub.kind == UNANNOUNCED:
            self.note_unannounced(time.time() if at is None else at, pub)
        self.recent.appendleft((when, pub))
        if pub.agent:
            self.by_agent.setdefault(pub.agent, deque(maxlen=PER_AGENT)).appendleft((when, pub))

    def note_unannounced(self, at: float, pub: m.Publication) -> None:
        """A write nobody announced to paths another agent holds: who wrote which paths,
        whose they are, what saw it, and when (seconds since the epoch)."""
        data = pub.data
        self.unannounced.appendleft({
            "at": round(at, 3),
            "agent": pub.agent,
            "paths": list(data.get("paths", [])),
            "holders": list(data.get("holders", [])),
            "source": data.get("source", ""),
        })

    def frozen(self) -> View:
        """A copy that later updates do not touch (what a paused frame shows)."""
        return replace(
            self,
            jobs={k: dict(v) for k, v in self.jobs.items()},
            recent=deque(self.recent, maxlen=RECENT),
            by_agent={k: deque(v, maxlen=PER_AGENT) for k, v in self.by_agent.items()},
            unannounced=deque(self.unannounced, maxlen=RECENT),
        )


def storage_error(snapshot: m.StatusReply) -> str:
    """The coordinator's storage condition in a status: why it cannot write its ledger
    (it then grants nothing), or "" when it can."""
    return str((snapshot.statistics.get("storage") or {}).get("error") or "")


def storage_json(view: View) -> dict:
    """``top --json``'s ``storage``: whether the ledger can be written, and if not why."""
    return {"writable": not view.storage_error, "error": view.storage_error}


def seed_from_ledger(view: View, events) -> None:
    """Fill the gate history from the ledger's newest events (oldest first), so the
    detail pane has the last decisions of agents that decided before ``top`` opened."""
    kinds = {"verify.finished": "job.finished", **{k: k for k in GATE_KINDS}}
    for e in events:
        if e.kind in kinds:
            pub = m.Publication(seq=0, epoch=e.epoch, kind=kinds[e.kind], agent=e.agent, data=e.data)
            view.remember(time.strftime("%H:%M:%S", time.localtime(e.ts)), pub, at=e.ts)


@dataclass
class Controls:
    """What the keys changed: sort, filter, pause, selection, quit."""

    sort: str = "agent"
    filter: str = ""
    typing: str | None = None  # the filter being typed after "/"
    paused_at: float | None = None
    frozen: View | None = None
    selected: int = 0
    quit: bool = False

    def key(self, key: str, view: View, now: float) -> None:
        if self.typing is not None:
            if key in ("\r", "\n"):
                self.filter, self.typing, self.selected = self.typing.strip(), None, 0
            elif key == "esc":
                self.filter, self.typing = "", None
            elif key in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            elif len(key) == 1 and key.isprintable():
                self.typing += key
            return
        if key in ("q", "Q", "\x03"):
            self.quit = True
        elif key == "s":
            self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        elif key == "/":
            self.typing = ""
        elif key == "esc":
            self.filter = ""
        elif key in ("p", " "):
            if self.paused_at is None:
                self.paused_at, self.frozen = now, view.frozen()
            else:
                self.paused_at, self.frozen = None, None
        elif key in ("j", "down"):
            self.selected += 1
        elif key in ("k", "up"):
            self.selected = max(0, self.selected - 1)


def split_keys(data: str) -> list[str]:
    """Terminal input to key names: arrows and a lone Esc are escape sequences."""
    keys, i = [], 0
    arrows = {"\x1b[A": "up", "\x1b[B": "down", "\x1bOA": "up", "\x1bOB": "down"}
    while i < len(data):
        seq = data[i : i + 3]
        if seq in arrows:
            keys.append(arrows[seq])
            i += 3
        elif data[i] == "\x1b":
            keys.append("esc")
            i += 1
        else:
            keys.append(data[i])
            i += 1
    return keys


# ------------------------------------------------------------------------ rendering


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def shorten_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut from the middle: paths that share a
    long prefix still differ in what they show."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    tail = (width - 1) // 2 + (width - 1) % 2
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + text[len(text) - tail :]


def _fit(rows: list[list[Any]], headers: list[str], flex: int, width: int) -> None:
    """Shorten column ``flex`` (a str column) in place so the table fits ``width``
    (rich's default box: three characters per column plus one)."""
    other = sum(
        max([len(h)] + [len(r[i].plain if isinstance(r[i], Text) else str(r[i])) for r in rows])
        for i, h in enumerate(headers)
        if i != flex
    )
    budget = max(8, width - other - 3 * len(headers) - 1)
    for r in rows:
        r[flex] = shorten_middle(r[flex], budget)


def _usage(pid: int | None) -> str:
    if pid is None:
        return "-"
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return f"{process.cpu_percent():3.0f}% {process.memory_info().rss / 2**20:4.0f}M"
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
    if pub.kind == "verify.refused":
        return "escalate", f"verify: {data.get('reason', '')}"
    if pub.kind == "rule.response":
        return data.get("action", "?"), f"{data.get('finding')}: {data.get('outcome', '')}"
    if pub.kind == "rule.resolved":
        return "resolved", f"{data.get('finding')} ({', '.join(data.get('probes', []))}) cleared"
    if pub.kind == "task.queued":
        return "task", f"task {data.get('id')} for {pub.agent or 'anyone'}: {data.get('task')}"
    if pub.kind == "message.sent":
        return "message", f"to {pub.agent} from {data.get('sender') or 'the operator'}: {data.get('text')}"
    if pub.kind == UNANNOUNCED:
        return "unannounced", f"wrote {', '.join(data.get('paths', []))}, held by {', '.join(data.get('holders', []))}"
    return pub.kind, data.get("message") or data.get("reason") or ""


def _verdict(verdict: str) -> Text:
    style = "green" if verdict in ("allow", "pass", "resolved") else "red" if verdict in ("block", "fail", "escalate", "unannounced") else "yellow"
    return Text(verdict, style=style)


def _matches(name: str | None, wanted: str) -> bool:
    return not wanted or (name is not None and wanted.casefold() in name.casefold())


def visible_agents(view: View, controls: Controls, now: float) -> list[tuple[m.AgentInfo, float]]:
    """(agent, heartbeat age now) filtered and sorted as the keys asked."""
    elapsed = now - view.taken_at
    rows = [(a, a.last_seen_ago + elapsed) for a in view.snapshot.agents if _matches(a.name, controls.filter)]
    key = {"agent": lambda r: r[0].name, "age": lambda r: -r[1], "path": lambda r: (r[0].worktree, r[0].name)}[controls.sort]
    return sorted(rows, key=key)


def visible_claims(view: View, controls: Controls, now: float) -> list[tuple[m.ClaimInfo, float]]:
    elapsed = now - view.taken_at
    rows = [(c, c.since_ago + elapsed) for c in view.snapshot.claims if _matches(c.holder, controls.filter)]
    key = {
        "agent": lambda r: (r[0].holder, r[0].pattern),
        "age": lambda r: -r[1],
        "path": lambda r: (r[0].pattern, r[0].holder),
    }[controls.sort]
    return sorted(rows, key=key)


def render(view: View, controls: Controls | None = None, *, width: int = 100, now: float | None = None) -> Group:
    """One frame; ``now`` (time.monotonic()) moves every age on from the snapshot's."""
    controls = controls or Controls()
    if controls.frozen is not None:
        view, now = controls.frozen, controls.paused_at
    now = time.monotonic() if now is None else now
    snap = view.snapshot
    if snap is None:
        return Group(Text("waiting for the coordinator…"))
    elapsed = now - view.taken_at
    state = [f"sort: {controls.sort}"]
    if controls.typing is not None:
        state.append(f"filter: {controls.typing}▏ (Enter applies, Esc clears)")
    elif controls.filter:
        state.append(f"filter: {controls.filter}")
    if controls.paused_at is not None:
        state.append("PAUSED")
    head = Text(
        f"lockstep top — mode {snap.mode}, epoch {snap.epoch}, seq {view.seq}"
        + (f", {view.gaps} gaps recovered" if view.gaps else "")
        + "  |  " + ", ".join(state),
        style="bold",
    )
    head.append(", ledger writable" if not view.storage_error else "", style="bold")
    keys = Text("q quit  s sort  / filter  p pause  j/k select", style="dim")
    parts: list[Any] = [head, keys]
    if view.storage_error:  # failing closed: nothing is granted until the ledger is writable
        parts.insert(1, Text(f"STORAGE: {view.storage_error}", style="bold red"))

    agents = visible_agents(view, controls, now)
    controls.selected = min(controls.selected, max(0, len(agents) - 1))
    selected = agents[controls.selected][0].name if agents else None
    headers = ["", "name", "state", "pid", "heartbeat age", "cpu mem", "worktree"]
    styles = {"alive": "green", "stale": "yellow", "gone": "red"}
    rows = [
        [
            "›" if a.name == selected else "",
            a.name,
            Text(a.state, style=styles.get(a.state, "")),
            str(a.pid or "-"),
            _age(age),
            _usage(a.pid) if a.state == "alive" else "-",
            a.worktree,
        ]
        for a, age in agents
    ]
    _fit(rows, headers, 6, width)
    parts.append(_table("agents", headers, rows))

    headers = ["pattern", "holder", "token", "access", "age", "note"]
    rows = [
        [c.pattern, c.holder, str(c.token), c.access, _age(age), "" if c.expires_in is None else f"expires in {_age(max(0.0, c.expires_in - elapsed))}"]
        for c, age in visible_claims(view, controls, now)
    ]
    for h in snap.holds:
        if _matches(h.former_holder, controls.filter) and h.free_in - elapsed > 0:
            rows.append([h.pattern, h.former_holder, "-", "held", "-", Text(f"stale holder; free in {h.free_in - elapsed:.1f}s", style="yellow")])
    for mh in snap.merge_holds:
        if _matches(mh.holder, controls.filter):
            rows.append([mh.path, mh.holder, "-", "merge-hold", "-", Text(f"until branch {mh.branch} is merged", style="magenta")])
    _fit(rows, headers, 0, width)
    parts.append(_table("claims", headers, rows))

    if selected is not None:
        parts.append(_detail(view, selected, now, width))

    headers = ["job", "kind", "agent", "results", "running for"]
    rows = [
        [j["job"], j["kind"], j["agent"] or "-", str(j["done"]), _age(now - j["since"])]
        for j in view.jobs.values()
        if _matches(j["agent"], controls.filter)
    ]
    parts.append(_table("checks in flight", headers, rows))

    if snap.landings:
        headers = ["#", "branch", "onto", "agent", "stage", "queued for"]
        rows = [
            [str(q.position), q.branch, q.target, q.agent or "-", q.stage, _age(q.took + now - view.taken_at)]
            for q in snap.landings
            if _matches(q.agent, controls.filter)
        ]
        parts.append(_table("merge queue", headers, rows))

    headers = ["time", "agent", "verdict", "what"]
    rows = []
    for when, pub in view.recent:
        if _matches(pub.agent, controls.filter):
            verdict, what = _describe(pub)
            rows.append([when, pub.agent or "-", _verdict(verdict), what])
    _fit(rows, headers, 3, width)
    parts.append(_table("recent gate decisions", headers, rows))

    headers = ["time", "writer", "paths", "held by", "seen by"]
    rows = [
        [time.strftime("%H:%M:%S", time.localtime(w["at"])), w["agent"] or "-", ", ".join(w["paths"]), ", ".join(w["holders"]), w["source"] or "-"]
        for w in view.unannounced
        if _matches(w["agent"], controls.filter) or any(_matches(h, controls.filter) for h in w["holders"])
    ]
    _fit(rows, headers, 2, width)
    parts.append(_table("unannounced writes", headers, rows))
    return Group(*parts)


def _table(title: str, headers: list[str], rows: list[list[Any]]) -> Table:
    table = Table(title=title, expand=True)
    for header in headers:
        table.add_column(header, no_wrap=True, overflow="ellipsis")
    for row in rows:
        # Cells are data (paths, messages, worktrees): plain text, never rich markup,
        # or a path like '\\[bold]x' would style the view and a stray '[/x]' end it.
        table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
    return table


def _detail(view: View, name: str, now: float, width: int) -> Panel:
    """The selected agent: its claims, its last gate decisions, its running jobs."""
    elapsed = now - view.taken_at
    lines: list[Text] = []
    claims = [c for c in view.snapshot.claims if c.holder == name]
    lines.append(Text("claims: " + ("none" if not claims else ""), style="bold"))
    for c in claims:
        lines.append(Text(f"  {shorten_middle(c.pattern, max(10, width - 40))}  {c.access}  token {c.token}  {_age(c.since_ago + elapsed)}"))
    decisions = view.by_agent.get(name, ())
    lines.append(Text("last gate decisions: " + ("none seen" if not decisions else ""), style="bold"))
    for when, pub in decisions:
        verdict, what = _describe(pub)
        lines.append(Text.assemble(f"  {when} ", _verdict(verdict), f" {shorten_middle(what, max(10, width - 24))}"))
    jobs = [j for j in view.jobs.values() if j["agent"] == name]
    lines.append(Text("running jobs: " + ("none" if not jobs else ""), style="bold"))
    for j in jobs:
        lines.append(Text(f"  {j['kind']} {j['job']}  {j['done']} results  {_age(now - j['since'])}"))
    return Panel(Group(*lines), title=f"agent {name}", title_align="left")


# --------------------------------------------------------------------- live loop


def publication_endpoint(request_endpoint: str, snapshot: m.StatusReply) -> str:
    """Where this viewer subscribes.  On the coordinator's host: its first publication
    endpoint (ipc).  From a joined clone on another host (the request went over CURVE
    with the clone's key): the CURVE publication endpoint, with the same key — the ipc
    one exists only on the coordinator's host."""
    if curve.has_keys(request_endpoint):
        for endpoint in snapshot.pub:
            if curve.has_keys(endpoint):
                return endpoint
    return snapshot.pub[0]


async def follow(conn, pub_endpoint: str, view: View, on_change: Callable[[], None], *, until=None) -> None:
    """Subscribe, snapshot, then apply sequenced updates; call ``on_change`` after each."""
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.SUB)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.SUBSCRIBE, b"")
    raw.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:PORT
    curve.secure(raw, pub_endpoint)  # a joined clone's key, as for its requests
    raw.connect(pub_endpoint)
    sub = TrioSocket(raw)
    try:
        async with trio.open_nursery() as nursery:

            async def refresh() -> None:
                while True:
                    if view.stale_snapshot or time.monotonic() - view.taken_at >= RESNAPSHOT:
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


async def read_keys(on_key: Callable[[str], None]) -> None:
    """Feed keys from a terminal stdin (cbreak mode, restored on exit); without a
    terminal there are no keys and Ctrl-C quits."""
    if sys.stdin is None or not os.isatty(fd := sys.stdin.fileno()):  # None: started with stdin closed (`<&-`)
        await trio.sleep_forever()
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        while True:
            await trio.lowlevel.wait_readable(fd)
            data = os.read(fd, 64).decode(errors="replace")
            if not data:
                await trio.sleep_forever()  # stdin closed
            for key in split_keys(data):
                on_key(key)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def run_live(conn, view: View, console) -> None:
    """The interactive view until ``q`` (or Ctrl-C)."""
    from rich.live import Live

    controls = Controls()

    def frame() -> Group:
        return render(view, controls, width=console.size.width)

    with Live(frame(), console=console, auto_refresh=False, screen=True, transient=True) as live:
        async with trio.open_nursery() as nursery:

            def redraw() -> None:
                live.update(frame(), refresh=True)

            def on_key(key: str) -> None:
                controls.key(key, view, time.monotonic())
                if controls.quit:
                    nursery.cancel_scope.cancel()
                else:
                    redraw()

            nursery.start_soon(read_keys, on_key)
            await follow(conn, publication_endpoint(conn.endpoint, view.snapshot), view, redraw)
