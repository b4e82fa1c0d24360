"""`lockstep status`, `ledger tail` and `top`: what the coordinator knows."""

from __future__ import annotations

import json
import os
import sys
import time

import click

from protocol import discovery
from protocol import messages as m

from .base import (
    EXIT_USAGE,
    Failure,
    Int64,
    _out,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)
from .output import age_seconds
from .statusview import status_payload as _status_payload


@main.command()
@click.option("--agent", "agent", metavar="NAME", help="Only this agent, its claims and holds.")
@click.option("--path", "path", metavar="PATTERN", help="Only claims and holds overlapping this path or glob (relative to the current directory).")
@endpoint_option
@json_option
@handle_errors
def status(agent, path, endpoint, as_json):
    """Show the mode, agents (alive / stale / gone) and live claims.

    Over about a megabyte of claims and holds, status shows counts (per holder) and a
    note instead of the lists: narrow it down with --agent and --path.

    \b
    Examples:
      lockstep status --agent alice
      lockstep status --path 'src/api/**'
      lockstep status --json | jq '.claims[] | {pattern, holder}'
    """
    from .fast import status as status_verb

    status_verb(agent, path, endpoint, as_json=as_json)


@main.group()
def ledger():
    """Read the ledger (works whether or not the coordinator runs)."""


FOLLOW_POLL = 0.2  # seconds between looks for new events under --follow


@ledger.command("tail")
@click.option("-n", "count", type=Int64(minimum=0), default=20, show_default=True, help="How many of the newest (matching) events.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended (like tail -f); Ctrl-C ends.")
@click.option("--agent", "agents", metavar="NAME", multiple=True, help="Only this agent's events (repeatable).")
@click.option("--kind", "kinds", metavar="GLOB", multiple=True, help="Only kinds matching this glob, e.g. 'claim.*' (repeatable).")
@click.option("--since", metavar="WHEN", help="Only events from this time: a duration ago (30m, 2h, 1d) or a local date-time.")
@json_option
@handle_errors
def ledger_tail(count, follow, agents, kinds, since, as_json):
    """Print the newest events; with --json, one JSON object per line (JSON lines, also
    under --follow). Filters combine: --agent and --kind may be repeated.

    \b
    Examples:
      lockstep ledger tail -n 50
      lockstep ledger tail --follow --kind 'claim.*' --agent alice
      lockstep ledger tail --since 1h --kind 'verify.*' --json | jq .data.failed
    """
    import fnmatch
    from collections import deque

    import msgspec

    from .report import open_ledger, parse_since

    start = parse_since(since)

    def wanted(e) -> bool:
        return (
            (not agents or e.agent in agents)
            and (not kinds or any(fnmatch.fnmatchcase(e.kind, k) for k in kinds))
            and (start is None or e.ts >= start)
        )

    def show(e) -> None:
        if as_json:
            click.echo(json.dumps(msgspec.to_builtins(e)))
        else:
            when = time.strftime("%H:%M:%S", time.localtime(e.ts))
            detail = e.data.get("reason") or e.data.get("patterns") or e.data.get("paths") or ""
            if e.kind == "deploy.seen":  # the deploy history: which bundle, where
                size = e.data.get("size")
                detail = f"{e.data.get('url', '')} {str(e.data.get('hash', ''))[:12]}" + (f" ({size} bytes)" if size is not None else "")
            token = f" token {e.token}" if e.token is not None else ""
            click.echo(f"{e.id:>7} {when} e{e.epoch} {e.kind:<20} {e.agent or '':<14}{token} {detail}")

    with open_ledger(discovery.locate()) as reader:
        seen = reader.last_id()
        if agents or kinds or start is not None:
            newest: deque = deque(maxlen=count)
            for e in reader.events():
                if wanted(e):
                    newest.append(e)
            events = list(newest)
        else:
            events = reader.tail(count)
        last = max(seen, events[-1].id) if events else seen  # everything up to here was looked at
        try:
            for e in events:
                show(e)
            while follow:
                for e in reader.events(after=last):
                    last = e.id
                    if wanted(e):
                        show(e)
                time.sleep(FOLLOW_POLL)  # the ledger is a file another process appends to: look again
        except KeyboardInterrupt:
            return
        except BrokenPipeError:  # `| head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return


@main.command()
@click.option("--once", is_flag=True, help="Print one frame and exit (no live updates).")
@endpoint_option
@json_option
@handle_errors
def top(once, endpoint, as_json):
    """A live view: agents (state, heartbeat age, CPU and memory), claims (holder, age,
    token, held after a stale holder), checks in flight, recent gate decisions and
    unannounced writes (a write nobody asked for, to a path another agent holds).

    Fed by a snapshot plus sequenced publications, so a late viewer sees the current
    state and a dropped update is noticed and healed; ages move on every frame.

    \b
    Keys:  q quit    s sort by agent / age / path    / filter by agent (Enter, Esc)
           p pause   j/k or arrows select an agent (its claims, gates and jobs below)

    \b
    Examples:
      lockstep top
      lockstep top --once
      lockstep top --json | jq .jobs
    """
    import msgspec
    import trio
    from rich.console import Console

    from agents.client import open_connection, resolve_endpoint
    from agents.top import View, render, run_live, seed_from_ledger, storage_json

    if not (once or as_json) and (sys.stdout is None or not sys.stdout.isatty()):
        # the live view draws on a terminal's screen: into a file or a pipe it drew
        # nothing and never ended
        once = True
        click.echo("lockstep: not a terminal: one frame, as with --once", err=True)
    place = discovery.locate()
    address = resolve_endpoint(place, endpoint)
    view = View()

    async def main_top():
        async with open_connection(address) as conn:
            view.take(await conn.request(m.Status()))
            seed_from_ledger(view, _recent_events(place))
            if once or as_json:
                return
            await run_live(conn, view, Console())

    try:
        trio.run(main_top)
    except KeyboardInterrupt:
        if once or as_json:
            raise  # a frame cut short: exit 130 as every verb (fast.run)
        return  # Ctrl-C quits the live view, as `q` does
    if as_json:
        payload = {**_status_payload(view.snapshot), "storage": storage_json(view), "unannounced": list(view.unannounced)}
        click.echo(json.dumps(msgspec.to_builtins(payload)))
    elif once:
        console = Console()
        console.print(render(view, width=console.size.width))


def _recent_events(place, count: int = 500) -> list:
    """The ledger's newest events, for the gate history of a view opened late."""
    from ledger import LedgerError, open_readonly

    try:
        with open_readonly(place.state_dir / discovery.LEDGER_FILE) as reader:
            return reader.tail(count)
    except LedgerError:
        return []


COMPACT_TIMEOUT_S = 600.0  # a big ledger takes a while; the coordinator serves meanwhile


def _keep_seconds(text: str) -> float:
    """--keep: 30d, 12h, 90m, or any --ttl-style duration."""
    return age_seconds(text, "--keep")


@ledger.command("compact")
@click.option("--keep", default=None, metavar="AGE", help="Keep events younger than this (30d, 12h, 0 for none; default: [ledger] keep, 30d).")
@endpoint_option
@json_option
@handle_errors
def ledger_compact(keep, endpoint, as_json):
    """Remove old events from the ledger now, through the running coordinator (which
    also applies [ledger] keep and max_size by itself): it saves a registry snapshot
    first, then removes events that snapshot covers and that are older than --keep, in
    short slices while it keeps serving, then returns the freed space to the file
    system. Sessions, claims, merge holds, gate state and the token counter stay exactly
    as they were, across restarts too; unfinished plans, the merge queue's landings and
    the newest build hash per target are kept.

    \b
    Examples:
      lockstep ledger compact
      lockstep ledger compact --keep 7d --json
    """
    from agents.oneshot import open_connection, resolve_endpoint

    seconds = None if keep is None else _keep_seconds(keep)
    if seconds is not None and not seconds >= 0:
        raise Failure("bad_request", f"--keep {keep}: must be 0 or more", EXIT_USAGE)
    with open_connection(resolve_endpoint(discovery.locate(), endpoint)) as conn:
        # A small question first, answered at once: with no coordinator at the endpoint the
        # verb says so within the usual timeout (exit 3), not after COMPACT_TIMEOUT_S.
        conn.request(m.Status(path="lockstep.toml"))
        reply = conn.request(m.Compact(keep=seconds), timeout=COMPACT_TIMEOUT_S)
    payload = {
        "removed": reply.removed, "kept": reply.kept, "upto": reply.upto,
        "db_size_bytes": reply.db_size_bytes, "wal_size_bytes": reply.wal_size_bytes,
    }
    _out(as_json, payload, f"removed {reply.removed} events (covered by the snapshot at event {reply.upto}); {reply.kept} kept")
