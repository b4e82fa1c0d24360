"""`lockstep report` and `lockstep where`: the ledger as a page to look at, and where a
repository's coordinator keeps its files (neither needs a running coordinator)."""

from __future__ import annotations

import json
import os
import time

import click

from protocol import discovery

from .base import (
    EXIT_REFUSED,
    EXIT_USAGE,
    Failure,
    _out,
    handle_errors,
    json_option,
    main,
)

SINCE_HELP = "Only from this time: a duration ago (30m, 2h, 1d) or a local date-time (2026-12-01T09:00)."


def since_option(fn):
    return click.option("--since", metavar="WHEN", help=SINCE_HELP)(fn)


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``--since``: a duration ago (``90s``, ``30m``, ``2h``, ``1d``) or an ISO date-time
    (local time unless it names a zone); anything else is bad input (exit 2)."""
    if text is None:
        return None
    now = time.time() if now is None else now
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        pass
    stripped = text.strip().lower()
    if stripped.endswith("d") and stripped[:-1].replace(".", "", 1).isdigit():
        seconds: float | None = float(stripped[:-1]) * 86400
    else:
        from probes.config import duration_problem

        seconds, _ = duration_problem(stripped)
    if seconds is None:
        raise Failure("usage", f"--since {text!r}: use a duration ago (30m, 2h, 1d) or a date-time (2026-12-01T09:00)", EXIT_USAGE)
    # longer ago than the epoch is from the beginning (a time before it crashed the report's localtime)
    return max(0.0, now - seconds)


def open_ledger(place):
    """The ledger of this repository, read-only; exit 1 if no coordinator ever served it."""
    from ledger import LedgerMissing, open_readonly

    path = place.state_dir / discovery.LEDGER_FILE
    try:
        return open_readonly(path)
    except LedgerMissing:
        raise Failure("no_ledger", f"no ledger at {path}: no coordinator has served this repository yet", EXIT_REFUSED) from None


@main.command()
@since_option
@click.option("--html", "html_file", metavar="FILE", required=True, help="Write the page here ('-' for stdout).")
@click.option("--title", default="", help="The page's title (default: the repository's name).")
@json_option
@handle_errors
def report(since, html_file, title, as_json):
    """Write one self-contained HTML page from the ledger: a timeline per agent of the
    claims it held (and who was refused because of them), its gate decisions, verify
    runs and checks with their results, and its stale / gone events.

    \b
    Examples:
      lockstep report --html day.html
      lockstep report --since 2h --html last-two-hours.html
      lockstep report --since 2026-12-01T09:00 --html - > morning.html
    """
    from agents.report import build, to_html

    if html_file == "-" and as_json:
        raise Failure("usage", "--html - writes the page to stdout, where --json writes its document: write the page to a file", EXIT_USAGE)
    start = parse_since(since)
    place = discovery.locate()
    with open_ledger(place) as reader:
        timeline = build(reader.events(), since=start, until=time.time() if start is not None else None)
    name = os.path.basename(os.path.dirname(place.repo_id)) if place.in_git else os.path.basename(place.repo_id)
    page = to_html(timeline, title=title or f"Lockstep report: {name}")
    if html_file == "-":
        click.echo(page, nl=False)
        return
    try:
        with open(html_file, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise Failure("usage", f"cannot write {html_file}: {exc.strerror}", EXIT_USAGE) from None
    payload = {
        "html": os.path.abspath(html_file),
        "from": timeline.start,
        "to": timeline.end,
        "events": timeline.events,
        "agents": timeline.agents,
        "claims": sum(s.kind == "claim" for s in timeline.spans),
        "refusals": sum(len(s.refusals) for s in timeline.spans),
    }
    _out(as_json, payload, f"wrote {html_file}: {timeline.events} events, {len(timeline.agents)} agents ({', '.join(timeline.agents) or 'none'})")


@main.command()
@json_option
@handle_errors
def where(as_json):
    """Print where this repository's coordinator keeps its files: the state directory,
    the ledger, the log, and the endpoints (the running coordinator's, else the ones
    `serve` would use). Works from any worktree, and in a linked worktree, where `.git`
    is a file, not a directory.

    \b
    Examples:
      lockstep where
      sqlite3 -readonly "$(lockstep where --json | jq -r .ledger)" "select kind, count(*) from events group by kind"
      tail -f "$(lockstep where --json | jq -r .log)"
    """
    place = discovery.locate()
    info = discovery.read_state(place.state_dir)
    running = False
    if info and isinstance(info.get("pid"), int):
        import psutil

        running = psutil.pid_exists(info["pid"])
    if running:
        endpoints, pub = list(info.get("endpoints") or []), list(info.get("pub") or [])
    else:
        rpc, pub_default = discovery.default_endpoints(place.state_dir)
        endpoints, pub = [rpc], [pub_default]
    payload = {
        "worktree": str(place.worktree),
        "repo": place.repo_id,
        "state_dir": str(place.state_dir),
        "ledger": str(place.state_dir / discovery.LEDGER_FILE),
        "log": str(place.state_dir / discovery.LOG_FILE),
        "state_file": str(place.state_dir / discovery.STATE_FILE),
        "running": running,
        "pid": info.get("pid") if running else None,
        "endpoints": endpoints,
        "pub": pub,
    }
    text = "\n".join(
        [
            f"worktree   {payload['worktree']}",
            f"state dir  {payload['state_dir']}",
            f"ledger     {payload['ledger']}",
            f"log        {payload['log']}",
            f"endpoint   {', '.join(endpoints)}" + ("" if running else "  (default; no coordinator running)"),
            f"publishes  {', '.join(pub)}",
            f"running    {'pid ' + str(payload['pid']) if running else 'no'}",
        ]
    )
    if as_json:
        click.echo(json.dumps(payload))
    else:
        click.echo(text)
