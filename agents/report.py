"""``lockstep report``: one self-contained HTML page from the ledger.

The post-mortem of a day of parallel agents at a glance: one lane per agent with the
claims it held (what, from when to when, and who was refused because of it), its gate
decisions, its verify runs and checks with their results, and its stale / gone events;
the coordinator's own starts, stops and pauses on a lane of their own.

``build`` is pure (events in, ``Timeline`` out); ``to_html`` renders it with inline CSS
and no script, so the file opens anywhere and can be mailed or attached to a ticket.
Every element a reader (or a test) looks for carries a class and ``data-`` attributes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from html import escape
from typing import Any, Iterable

GATE_KINDS = {"intent.decided", "done.decided", "verify.refused", "rule.response"}
LIVENESS_KINDS = {"agent.joined", "agent.stale", "agent.left", "agent.blocked", "agent.unblocked"}
COORDINATOR_KINDS = {"coordinator.started", "coordinator.stopped", "coordinator.paused"}
RELEASE_KINDS = {"claim.released", "claim.expired"}


@dataclass
class Refusal:
    ts: float
    by: str  # the agent that was refused
    what: str  # "claim src/a.py" or "intent src/a.py"


@dataclass
class Span:
    """Something that lasted: a claim held (``claim``) or a job run (``verify``/``check``/``plan``)."""

    kind: str
    agent: str
    label: str
    start: float
    end: float | None = None  # None: still held / running when the ledger ends
    token: int | None = None
    job: str = ""
    open_patterns: set[str] = field(default_factory=set)
    outcome: str = ""  # released / expired / pass / fail / ...
    detail: str = ""
    refusals: list[Refusal] = field(default_factory=list)


@dataclass
class Mark:
    """Something that happened at one moment: a gate decision, a liveness event."""

    ts: float
    agent: str | None
    kind: str
    verdict: str
    text: str


@dataclass
class Timeline:
    start: float
    end: float
    events: int
    agents: list[str]
    spans: list[Span]
    marks: list[Mark]

    def spans_of(self, agent: str, kinds: Iterable[str]) -> list[Span]:
        kinds = set(kinds)
        return [s for s in self.spans if s.agent == agent and s.kind in kinds]

    def marks_of(self, agent: str | None, kinds: Iterable[str]) -> list[Mark]:
        kinds = set(kinds)
        return [k for k in self.marks if k.agent == agent and k.kind in kinds]


def _patterns(data: dict) -> list[str]:
    return [str(p) for p in data.get("patterns") or data.get("paths") or []]


def build(events: Iterable[Any], *, since: float | None = None, until: float | None = None) -> Timeline:
    """Replay ledger events (oldest first) into spans and marks, then keep what
    overlaps ``[since, until]``.  Everything is replayed so a claim granted before
    ``since`` and still held shows from the window's start."""
    spans: list[Span] = []
    marks: list[Mark] = []
    holding: dict[tuple[str, int], Span] = {}  # (agent, token) -> its open claim span
    running: dict[str, Span] = {}  # job -> its open job span
    agents: dict[str, None] = {}
    count, first, last = 0, None, None
    for e in events:
        count += 1
        first = e.ts if first is None else first
        last = e.ts
        data = e.data or {}
        if e.agent:
            agents.setdefault(e.agent, None)
        if e.kind == "claim.granted" and e.agent:
            patterns = _patterns(data)
            span = Span("claim", e.agent, ", ".join(patterns), e.ts, token=e.token, open_patterns=set(patterns),
                        detail=f"{data.get('access', 'exclusive')}" + (" (auto)" if data.get("auto") else ""))
            holding[(e.agent, e.token)] = span
            spans.append(span)
        elif e.kind in RELEASE_KINDS and e.agent:
            span = holding.get((e.agent, e.token))
            if span is not None:
                span.open_patterns -= set(_patterns(data))
                if not span.open_patterns:
                    span.end, span.outcome = e.ts, e.kind.split(".")[1]
                    span.detail += f"; {data.get('reason', '')}".rstrip("; ")
                    del holding[(e.agent, e.token)]
            if e.kind == "claim.expired":
                marks.append(Mark(e.ts, e.agent, e.kind, "expired", f"claims expired: {', '.join(_patterns(data))} ({data.get('reason', '')})"))
        elif e.kind == "claim.refused" and e.agent:
            what = f"claim {', '.join(_patterns(data))}"
            _blame(holding, data.get("conflicts") or [], Refusal(e.ts, e.agent, what))
            marks.append(Mark(e.ts, e.agent, e.kind, "refused", f"{what}: {data.get('reason', '')}"))
        elif e.kind == "job.started":
            kind = str(data.get("kind", "job"))
            label = kind if kind != "check" else f"check {(data.get('probe') or {}).get('name') or (data.get('probe') or {}).get('kind', '')}".strip()
            span = Span(kind, e.agent or "", label, e.ts, job=str(data.get("job", "")))
            running[span.job] = span
            spans.append(span)
        elif e.kind in ("verify.finished", "job.finished"):
            span = running.pop(str(data.get("job", "")), None)
            if span is not None:
                span.end, span.outcome = e.ts, str(data.get("verdict", ""))
                failed = data.get("failed") or []
                span.detail = (f"failed: {', '.join(failed)}; " if failed else "") + str(data.get("reason", ""))
        elif e.kind in GATE_KINDS:
            if e.kind == "intent.decided" and data.get("verdict") in ("block", "warn"):
                _blame(holding, data.get("conflicts") or [], Refusal(e.ts, e.agent or "?", f"intent {', '.join(_patterns(data))} ({data.get('verdict')})"))
            verdict = str(data.get("verdict") or data.get("action") or ("escalate" if e.kind == "verify.refused" else ""))
            what = f"intent {', '.join(_patterns(data))}: " if e.kind == "intent.decided" else f"{e.kind.split('.')[0]}: "
            marks.append(Mark(e.ts, e.agent, e.kind, verdict, what + str(data.get("reason") or data.get("outcome") or "")))
        elif e.kind in LIVENESS_KINDS:
            marks.append(Mark(e.ts, e.agent, e.kind, e.kind.split(".")[1], str(data.get("reason") or data.get("worktree") or "")))
        elif e.kind in COORDINATOR_KINDS:
            text = data.get("reason") or (f"mode {data.get('mode')}, epoch {data.get('epoch')}" if "mode" in data else f"paused {data.get('gap', '?')}s")
            marks.append(Mark(e.ts, None, e.kind, e.kind.split(".")[1], str(text)))
    start = since if since is not None else (first if first is not None else time.time())
    end = until if until is not None else (last if last is not None else start)
    end = max(end, start)
    spans = [s for s in spans if s.start <= end and (s.end is None or s.end >= start)]
    marks = [k for k in marks if start <= k.ts <= end]
    shown = {s.agent for s in spans} | {k.agent for k in marks}
    return Timeline(start, end, count, [a for a in agents if a in shown], spans, marks)


def _blame(holding: dict[tuple[str, int], Span], conflicts: list[dict], refusal: Refusal) -> None:
    """Note the refusal on each claim that caused it."""
    for c in conflicts:
        span = holding.get((c.get("holder"), c.get("token")))
        if span is None:  # no token in the conflict: any open claim of that holder with the pattern
            span = next((s for (holder, _), s in holding.items() if holder == c.get("holder") and c.get("pattern") in s.open_patterns), None)
        if span is not None and refusal not in span.refusals:
            span.refusals.append(refusal)


# ------------------------------------------------------------------------ HTML

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { margin: 0 0 .2em; } h2 { margin: 1.2em 0 .3em; font-size: 1.1em; }
.summary, .axis { color: #666; }
.lane { position: relative; background: #f6f6f6; border: 1px solid #ddd; margin: .3em 0; }
.span { position: absolute; height: 12px; border-radius: 3px; min-width: 2px; opacity: .85; }
.span.claim { background: #4a7bd0; } .span.claim.refusing { background: #d08a2a; }
.span.open { border-right: 3px solid #000; }
.span.verify, .span.check, .span.plan { background: #888; } .span.pass { background: #3a3; } .span.fail, .span.escalate { background: #c33; }
.mark { position: absolute; top: 0; width: 3px; height: 100%; }
.mark.allow, .mark.pass, .mark.joined, .mark.unblocked { background: #3a3; }
.mark.warn, .mark.stale, .mark.expired, .mark.paused { background: #e0a020; }
.mark.block, .mark.fail, .mark.escalate, .mark.refused, .mark.left, .mark.blocked, .mark.stopped { background: #c33; }
.mark.started { background: #36c; }
table { border-collapse: collapse; margin: .3em 0 .8em; }
td, th { border-bottom: 1px solid #eee; padding: 2px 8px; text-align: left; vertical-align: top; }
th { color: #555; font-weight: 600; }
.verdict-allow, .verdict-pass { color: #282; } .verdict-block, .verdict-fail, .verdict-escalate, .verdict-refused { color: #b22; }
.verdict-warn, .verdict-stale, .verdict-expired { color: #a70; }
"""


def _clock(ts: float | None) -> str:
    return "still open" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


class _Scale:
    def __init__(self, timeline: Timeline) -> None:
        self.start, self.width = timeline.start, max(timeline.end - timeline.start, 1e-6)

    def left(self, ts: float) -> float:
        return round(min(100.0, max(0.0, (ts - self.start) / self.width * 100)), 3)

    def span(self, start: float, end: float) -> tuple[float, float]:
        left = self.left(start)
        return left, round(max(0.0, self.left(end) - left), 3)


def _rows(spans: list[Span]) -> list[int]:
    """Greedy packing: each span gets the first row free at its start."""
    ends: list[float] = []
    rows = []
    for s in spans:
        end = s.end if s.end is not None else float("inf")
        for i, row_end in enumerate(ends):
            if row_end <= s.start:
                ends[i] = end
                rows.append(i)
                break
        else:
            ends.append(end)
            rows.append(len(ends) - 1)
    return rows


def _lane(timeline: Timeline, scale: _Scale, spans: list[Span], marks: list[Mark]) -> str:
    rows = _rows(spans)
    height = 14 + 16 * (max(rows) + 1 if rows else 0)
    parts = [f'<div class="lane" style="height:{height}px">']
    for mark in marks:
        title = f"{_clock(mark.ts)} {mark.kind} {mark.verdict}: {mark.text}"
        parts.append(
            f'<div class="mark {escape(mark.verdict)}" data-kind="{escape(mark.kind)}" style="left:{scale.left(mark.ts)}%;height:12px" title="{escape(title)}"></div>'
        )
    for span, row in zip(spans, rows):
        end = span.end if span.end is not None else timeline.end
        left, width = scale.span(max(span.start, timeline.start), end)
        classes = ["span", span.kind, span.outcome or "", "open" if span.end is None else "", "refusing" if span.refusals else ""]
        refused = "; refused: " + ", ".join(f"{r.by} ({r.what})" for r in span.refusals) if span.refusals else ""
        title = f"{span.label} {span.detail} {_clock(span.start)} – {_clock(span.end)}{refused}"
        parts.append(
            f'<div class="{escape(" ".join(c for c in classes if c))}" style="left:{left}%;width:{width}%;top:{14 + 16 * row}px" title="{escape(title)}"></div>'
        )
    parts.append("</div>")
    return "".join(parts)


def _agent_section(timeline: Timeline, scale: _Scale, agent: str) -> str:
    claims = timeline.spans_of(agent, ["claim"])
    jobs = timeline.spans_of(agent, ["verify", "check", "plan"])
    gates = timeline.marks_of(agent, GATE_KINDS | {"claim.refused"})
    liveness = timeline.marks_of(agent, LIVENESS_KINDS | {"claim.expired"})
    out = [f'<section class="agent" id="agent-{escape(agent)}" data-agent="{escape(agent)}">', f"<h2>{escape(agent)}</h2>"]
    out.append(_lane(timeline, scale, claims + jobs, gates + liveness))
    if claims:
        out.append('<table class="claims"><tr><th>claim</th><th>token</th><th>access</th><th>from</th><th>to</th><th>held</th><th>refused because of it</th></tr>')
        for s in claims:
            held = _duration((s.end if s.end is not None else timeline.end) - s.start)
            refusals = "".join(
                f'<li class="refusal" data-by="{escape(r.by)}">{escape(r.by)} at {_clock(r.ts)[11:]}: {escape(r.what)}</li>' for r in s.refusals
            )
            out.append(
                f'<tr class="claim" data-pattern="{escape(s.label)}" data-token="{s.token}" data-outcome="{escape(s.outcome or "held")}">'
                f"<td>{escape(s.label)}</td><td>{s.token}</td><td>{escape(s.detail)}</td><td>{_clock(s.start)}</td>"
                f"<td>{_clock(s.end)}{' (' + escape(s.outcome) + ')' if s.outcome else ''}</td><td>{held}</td>"
                f"<td><ul>{refusals}</ul></td></tr>"
            )
        out.append("</table>")
    if jobs:
        out.append('<table class="jobs"><tr><th>run</th><th>job</th><th>from</th><th>to</th><th>result</th></tr>')
        for s in jobs:
            out.append(
                f'<tr class="job {escape(s.kind)}" data-job="{escape(s.job)}" data-kind="{escape(s.kind)}" data-outcome="{escape(s.outcome or "running")}">'
                f"<td>{escape(s.label)}</td><td>{escape(s.job)}</td><td>{_clock(s.start)}</td><td>{_clock(s.end)}</td>"
                f'<td class="verdict-{escape(s.outcome)}">{escape(s.outcome or "running")} {escape(s.detail)}</td></tr>'
            )
        out.append("</table>")
    for css, title, rows in (("gates", "gate decision", gates), ("liveness", "liveness", liveness)):
        if rows:
            out.append(f'<table class="{css}"><tr><th>time</th><th>{title}</th><th>verdict</th><th>what</th></tr>')
            for k in rows:
                out.append(
                    f'<tr class="{css[:-1] if css == "gates" else "event"}" data-kind="{escape(k.kind)}" data-verdict="{escape(k.verdict)}">'
                    f"<td>{_clock(k.ts)}</td><td>{escape(k.kind)}</td><td class=\"verdict-{escape(k.verdict)}\">{escape(k.verdict)}</td>"
                    f"<td>{escape(k.text)}</td></tr>"
                )
            out.append("</table>")
    out.append("</section>")
    return "\n".join(out)


def to_html(timeline: Timeline, *, title: str = "Lockstep report") -> str:
    scale = _Scale(timeline)
    coordinator = [k for k in timeline.marks if k.agent is None]
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="summary">{_clock(timeline.start)} to {_clock(timeline.end)} '
        f"({_duration(timeline.end - timeline.start)}): {timeline.events} ledger events, {len(timeline.agents)} agents. "
        "Blue bars: claims held (orange: someone was refused because of it; a black edge: still held); "
        "grey / green / red bars: checks and verify runs; ticks: gate decisions and liveness events "
        "(hover for details).</p>",
        '<section class="coordinator"><h2>coordinator</h2>',
        _lane(timeline, scale, [], coordinator),
        '<table class="coordinator-events"><tr><th>time</th><th>event</th><th>what</th></tr>',
        *(
            f'<tr class="event" data-kind="{escape(k.kind)}"><td>{_clock(k.ts)}</td><td>{escape(k.kind)}</td><td>{escape(k.text)}</td></tr>'
            for k in coordinator
        ),
        "</table></section>",
        *(_agent_section(timeline, scale, agent) for agent in timeline.agents),
    ]
    if not timeline.agents:
        body.append('<p class="empty">No agent did anything in this window.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
