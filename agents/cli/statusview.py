"""What `lockstep status` prints: its JSON document and its text, from a ``StatusReply``.

Without click, so the status verb's fast path (``agents.cli.fast``) renders it too.
"""

from __future__ import annotations

import time

from protocol import messages as m


def status_payload(reply: m.StatusReply) -> dict:
    now = time.time()
    return {
        "mode": reply.mode,
        "epoch": reply.epoch,
        "endpoints": reply.endpoints,
        "pub": reply.pub,
        "seq": reply.seq,
        "agents": [
            {
                "name": a.name,
                "state": a.state,
                "pid": a.pid,
                "worktree": a.worktree,
                "last_seen": round(now - a.last_seen_ago, 3),
                "last_seen_ago": a.last_seen_ago,
                "session": a.session,
                "kind": a.kind,
                "reason": a.reason,
                "ttl_left": a.ttl_left,
            }
            for a in reply.agents
        ],
        "claims": [
            {
                "pattern": c.pattern,
                "holder": c.holder,
                "token": c.token,
                "access": c.access,
                "since": round(now - c.since_ago, 3),
                "expires_in": c.expires_in,
            }
            for c in reply.claims
        ],
        "holds": reply.holds,
        "merge_holds": reply.merge_holds,
        "jobs": reply.jobs,
        "landings": reply.landings,
        "statistics": reply.statistics,
        "counts": reply.counts,
        "summarised": reply.summarised,
        "claims_by_holder": reply.claims_by_holder,
        "note": reply.note,
    }


def status_text(reply: m.StatusReply) -> str:
    lines = [f"mode {reply.mode}, epoch {reply.epoch}, endpoint {', '.join(reply.endpoints)}", "", "agents:"]
    durability = reply.statistics.get("durability")
    if durability:  # what an answer survives (fsync = process-crash | power-loss)
        lines[0] += f", durability {durability}"
        source = reply.statistics.get("durability_source")
        if source:
            lines[0] += f" ({source})"
    storage_error = (reply.statistics.get("storage") or {}).get("error")
    if storage_error:  # the coordinator fails closed: say so before anything else
        lines[:0] = [f"UNAVAILABLE: {storage_error}", ""]
    for a in reply.agents or []:
        extra = f"  ({a.reason})" if a.reason else ""
        if a.ttl_left is not None:
            extra += f"  (one-shot: TTL {a.ttl_left:.0f}s left)"
        lines.append(f"  {a.name:<16} {a.state:<6} pid {a.pid or '-':<8} seen {a.last_seen_ago:6.1f}s ago  {a.worktree}{extra}")
    if not reply.agents:
        lines.append("  (none)")
    lines += ["", "claims:"]
    for c in reply.claims:
        lines.append(f"  {c.pattern:<32} {c.holder:<16} token {c.token:<6} {c.access:<9} {c.since_ago:6.1f}s")
    if reply.summarised:  # too many to list: counts, and how to narrow it down
        for holder, count in reply.claims_by_holder.items():
            lines.append(f"  {holder:<32} {count:,} claims")
        lines += ["", f"note: {reply.note}"]
    elif not reply.claims:
        lines.append("  (none)")
    if reply.holds:
        lines += ["", "held after a stale holder (lock delay):"]
        for h in reply.holds:
            lines.append(f"  {h.pattern:<32} was {h.former_holder:<12} free in {h.free_in:.1f}s")
    if reply.merge_holds:
        lines += ["", "held until merged (released, but their commits have not reached the integration branch):"]
        for mh in reply.merge_holds:
            lines.append(f"  {mh.path:<32} {mh.holder:<16} branch {mh.branch:<16} {len(mh.commits)} commit(s)")
    if reply.landings:
        lines += ["", "merge queue (`lockstep land`):"]
        for q in reply.landings:
            lines.append(f"  {q.position:>2}. {q.branch:<20} -> {q.target:<10} {q.agent or '-':<16} {q.stage:<10} job {q.job}, queued {q.took:.1f}s")
    return "\n".join(lines)
