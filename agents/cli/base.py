"""The ``lockstep`` command line.

Exit codes (scripts rely on them): 0 ok / granted / allowed (warn included),
1 refused / blocked / failed, 2 usage or bad input, 3 coordinator unreachable.
Every command that prints state takes ``--json``; in JSON mode an error prints
``{"error": {"code": ..., "message": ...}}`` on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from functools import wraps
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable

import click
import msgspec
import trio

from agents.client import (
    CoordinatorUnreachable,
    RequestFailed,
    open_agent,
    open_connection,
    resolve_endpoint,
)
from agents.paths import repo_relative
from probes.config import MODES, parse_duration
from protocol import discovery
from protocol import messages as m
from protocol.errors import LockstepError, PeerError

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DETACHED_ENV = "LOCKSTEP_DETACHED"  # set for the background child of `serve --detach`
# Error codes that mean "your input is wrong" (exit 2); every other error code exits 1.
BAD_INPUT_CODES = {"malformed", "unknown_type", "version", "too_large", "bad_path", "bad_agent", "bad_request", "wrong_repo"}

try:
    __version__ = version("lockstep")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"


class Failure(Exception):
    """Ends a command with an error message and an exit code."""

    def __init__(self, code: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.code, self.message, self.exit_code = code, message, exit_code


def _emit_error(as_json: bool, code: str, message: str) -> None:
    if as_json:
        click.echo(json.dumps({"error": {"code": code, "message": message}}))
    else:
        click.echo(f"lockstep: {message}", err=True)


def handle_errors(fn: Callable) -> Callable:
    """Turn every expected failure into its message and exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except Failure as exc:
            _emit_error(as_json, exc.code, exc.message)
            sys.exit(exc.exit_code)
        except CoordinatorUnreachable as exc:
            _emit_error(as_json, "unreachable", str(exc))
            sys.exit(EXIT_UNREACHABLE)
        except (RequestFailed, PeerError) as exc:
            _emit_error(as_json, exc.code, exc.message)
            sys.exit(EXIT_USAGE if exc.code in BAD_INPUT_CODES else EXIT_REFUSED)
        except LockstepError as exc:
            _emit_error(as_json, "error", str(exc))
            sys.exit(EXIT_REFUSED)

    return wrapper


def _out(as_json: bool, payload: Any, text: str) -> None:
    click.echo(json.dumps(msgspec.to_builtins(payload)) if as_json else text)


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
endpoint_option = click.option(
    "--endpoint",
    metavar="URL",
    help="Coordinator endpoint (ipc://PATH or tcp://127.0.0.1:PORT). Default: LOCKSTEP_ENDPOINT, else the "
    "running coordinator of this repository, found from any of its worktrees.",
)
agent_option = click.option(
    "--agent",
    metavar="NAME",
    envvar="LOCKSTEP_AGENT",
    help="Act as this agent (default: LOCKSTEP_AGENT). A new name opens a session.",
)


def _seconds(text: str, flag: str) -> float:
    """A flag's duration: a plain number of seconds, or 250ms / 30s / 5m / 1h30m."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text, where=flag)


def _need_agent(agent: str | None) -> str:
    if not agent:
        raise Failure(
            "bad_agent",
            "no agent named: pass --agent NAME or set LOCKSTEP_AGENT=NAME (e.g. export LOCKSTEP_AGENT=alice)",
            EXIT_USAGE,
        )
    return agent


def _paths(args: tuple[str, ...]) -> list[str]:
    place = discovery.locate()
    return [repo_relative(arg, place) for arg in args]


def _as_agent(agent: str | None, endpoint: str | None, pid: int | None, body: Callable) -> Any:
    """Run ``body(session)`` as ``agent`` in a one-shot call (attaches to a live session)."""
    name = _need_agent(agent)

    async def main() -> Any:
        async with open_agent(name, endpoint=endpoint, kind="oneshot", pid=pid, heartbeat=False) as session:
            return await body(session)

    return trio.run(main)


def ask(endpoint: str | None, message: m.Request) -> m.Reply:
    """One anonymous request to this repository's coordinator (no agent session)."""
    address = resolve_endpoint(discovery.locate(), endpoint)

    async def request() -> m.Reply:
        async with open_connection(address) as conn:
            return await conn.request(message)

    return trio.run(request)


def _conflict_lines(conflicts: list[m.Conflict]) -> str:
    return "\n".join(f"  {c.pattern}: {c.reason}" for c in conflicts)


# ====================================================================== the group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="lockstep")
def main() -> None:
    """Lockstep: one coordinator for many coding agents working on one repository.

    Agents claim files, folders and globs; the coordinator grants or refuses them
    (modes parallel-strict, parallel-warn, serial), fences writes with tokens, notices
    dead or frozen agents and frees their claims, and records everything in a SQLite
    ledger. Start with `lockstep demo`, then `lockstep serve` in your repository.

    Exit codes: 0 ok/granted/allowed, 1 refused/blocked, 2 usage or bad input,
    3 coordinator unreachable.
    """


# ---------------------------------------------------------------------- serve / stop


@main.command()
@click.option("--mode", type=click.Choice(MODES), help="Conflict policy (default parallel-strict).")
@click.option("--heartbeat", metavar="S", help="Seconds between agent heartbeats (default 1s).")
@click.option("--liveness", type=int, metavar="N", help="Heartbeats missed before an agent is stale (default 3).")
@click.option("--lock-delay", metavar="S", help="How long a stale holder's paths stay held (default 10s).")
@click.option("--no-auto-claim", is_flag=True, help="Allowed intents do not claim unclaimed paths.")
@click.option("--oneshot-ttl", metavar="S", help="Life of a session opened by a one-shot call (default 15m).")
@click.option(
    "--endpoint",
    metavar="URL",
    help="Where to listen: ipc://PATH or tcp://127.0.0.1:PORT (default: LOCKSTEP_ENDPOINT, else an ipc socket "
    "in the state directory). Non-loopback addresses are refused: there is no authentication yet.",
)
@click.option("--pub-endpoint", metavar="URL", help="Publication endpoint (default: beside the request endpoint).")
@click.option("--probe-limit", type=click.IntRange(min=1), metavar="N", help="Probes run at once (default: the CPU count).")
@click.option("--detach", is_flag=True, help="Run in the background; return once it serves.")
@json_option
@handle_errors
def serve(mode, heartbeat, liveness, lock_delay, no_auto_claim, oneshot_ttl, endpoint, pub_endpoint, probe_limit, detach, as_json):
    """Run the coordinator for the repository of the current directory.

    One per repository: every worktree finds it. Settings come from these flags, then
    the [coordinator] table of lockstep.toml at the repository root, then defaults.
    State (endpoints, ledger.db, coordinator.log) lives in <git common dir>/lockstep.
    """
    from coordinator.settings import load_settings  # the one import of the server side

    place = discovery.locate()
    settings = load_settings(
        place.worktree,
        mode=mode,
        heartbeat=None if heartbeat is None else _seconds(heartbeat, "--heartbeat"),
        liveness=liveness,
        lock_delay=None if lock_delay is None else _seconds(lock_delay, "--lock-delay"),
        auto_claim=False if no_auto_claim else None,
        oneshot_ttl=None if oneshot_ttl is None else _seconds(oneshot_ttl, "--oneshot-ttl"),
    )
    state_dir = discovery.ensure_state_dir(place)
    rpc, pub = discovery.default_endpoints(state_dir)
    rpc = discovery.check_endpoint(endpoint or os.environ.get("LOCKSTEP_ENDPOINT") or rpc)
    pub = discovery.check_endpoint(pub_endpoint or (_pub_beside(rpc) if endpoint else pub))
    if detach:
        return _serve_detached(place, as_json)
    try:
        lock_fd = discovery.acquire_serve_lock(state_dir)
    except discovery.AlreadyServing as exc:
        info = exc.info
        raise Failure(
            "already_serving",
            f"a coordinator is already serving {place.repo_id} (pid {info.get('pid', '?')}, "
            f"endpoint {', '.join(info.get('endpoints', ['?']))}); stop it with `lockstep stop`",
            EXIT_REFUSED,
        ) from None
    _setup_logging(state_dir, foreground=not os.environ.get(DETACHED_ENV))
    from coordinator.server import Server

    try:
        reason = trio.run(Server(place, settings, rpc, pub, probe_limit).serve)
    finally:
        os.close(lock_fd)
    if as_json:
        click.echo(json.dumps({"stopped": reason}))


def _pub_beside(endpoint: str) -> str:
    if endpoint.startswith("tcp://"):
        host, port = endpoint.rsplit(":", 1)
        return f"{host}:{int(port) + 1}" if port != "0" and port != "*" else f"{host}:0"
    return endpoint + ".pub"


def _setup_logging(state_dir: Path, foreground: bool) -> None:
    handlers: list[logging.Handler] = [logging.FileHandler(state_dir / discovery.LOG_FILE)]
    if foreground:  # a detached coordinator's stderr is the log file already
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers, force=True)


def _serve_detached(place: discovery.Place, as_json: bool) -> None:
    argv = [a for a in sys.argv[1:] if a != "--detach"]
    state_dir = place.state_dir
    log_path = state_dir / discovery.LOG_FILE
    with open(log_path, "ab") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            env={**os.environ, DETACHED_ENV: "1"},
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            raise Failure("serve_failed", f"the coordinator exited with code {code}; see {log_path}", EXIT_REFUSED if code == 1 else code)
        info = discovery.read_state(state_dir)
        if info and info.get("pid") == child.pid:
            _out(as_json, info, f"lockstep: serving {place.repo_id} (pid {child.pid}) on {info['endpoints'][0]}; log: {log_path}")
            return
        time.sleep(0.05)
    child.terminate()
    raise Failure("serve_failed", f"the coordinator did not start within 15s; see {log_path}", EXIT_REFUSED)


@main.command()
@endpoint_option
@json_option
@handle_errors
def stop(endpoint, as_json):
    """Stop this repository's coordinator cleanly (claims stay in the ledger)."""
    place = discovery.locate()
    info = discovery.read_state(place.state_dir) or {}
    reply = ask(endpoint, m.Shutdown(reason="lockstep stop"))
    pid = info.get("pid")
    if pid and not endpoint:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and discovery.read_state(place.state_dir) is not None:
            time.sleep(0.05)
    _out(as_json, {"stopped": True, "pid": pid, "message": reply.message}, f"lockstep: {reply.message}")


# ---------------------------------------------------------------------- claims


def _claim_payload(reply: m.Granted | m.Refused) -> dict:
    if isinstance(reply, m.Granted):
        return {"granted": True, "token": reply.token, "patterns": reply.patterns, "conflicts": [], "warnings": reply.warnings}
    return {"granted": False, "token": None, "reason": reply.reason, "conflicts": reply.conflicts, "warnings": []}


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--shared", is_flag=True, help="Claim for shared use (others may share it; nobody may take it exclusively).")
@click.option("--ttl", metavar="S", help="Release the claim by itself after this long (e.g. 30m).")
@click.option("--wait", metavar="S", help="If refused, keep trying for up to this long.")
@agent_option
@click.option("--pid", type=int, help="With a new agent name: its session lives as long as this local process.")
@endpoint_option
@json_option
@handle_errors
def claim(paths, shared, ttl, wait, agent, pid, endpoint, as_json):
    """Claim files, folders (dir/) or globs (src/**/*.py) for an agent.

    A multi-path claim is all-or-nothing and gets one fencing token. Exit 0 when
    granted (warnings included), 1 when refused (the holders are named).
    """
    patterns = _paths(paths)
    ttl_s = None if ttl is None else _seconds(ttl, "--ttl")
    wait_s = 0.0 if wait is None else _seconds(wait, "--wait")

    async def body(session):
        deadline = trio.current_time() + wait_s
        while True:
            reply = await session.claim(patterns, shared=shared, ttl=ttl_s)
            left = deadline - trio.current_time()
            if isinstance(reply, m.Granted) or left <= 0:
                return reply
            hint = min((c.retry_after for c in reply.conflicts if c.retry_after), default=None)
            await trio.sleep(min(left, max(0.05, hint) if hint else 0.2))

    reply = _as_agent(agent, endpoint, pid, body)
    payload = _claim_payload(reply)
    if isinstance(reply, m.Granted):
        text = f"granted {', '.join(reply.patterns)} (token {reply.token})"
        if reply.warnings:
            text += "\nwarnings:\n" + _conflict_lines(reply.warnings)
        _out(as_json, payload, text)
        return
    _out(as_json, payload, f"refused: {reply.reason}")
    sys.exit(EXIT_REFUSED)


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--all", "release_all", is_flag=True, help="Release every claim of the agent.")
@click.option("--force", is_flag=True, help="Operator: free whoever holds PATH (logged; the holder is notified).")
@click.option("--reason", metavar="TEXT", help="Why (required with --force).")
@agent_option
@endpoint_option
@json_option
@handle_errors
def release(paths, release_all, force, reason, agent, endpoint, as_json):
    """Release an agent's claims on PATHs, or --all of them; --force frees anyone's."""
    if force:
        if not paths or not reason:
            raise Failure("bad_request", "--force needs the PATHs to free and --reason TEXT", EXIT_USAGE)
        by = agent or os.environ.get("USER") or "operator"
        reply = ask(endpoint, m.Release(paths=_paths(paths), force=True, reason=reason, by=by))
    else:
        if not paths and not release_all:
            raise Failure("bad_request", "name the PATHs to release, or pass --all", EXIT_USAGE)
        patterns = _paths(paths) if paths else []

        async def body(session):
            return await session.release(patterns, all=release_all)

        reply = _as_agent(agent, endpoint, None, body)
    payload = {"released": reply.patterns, "holders": reply.holders}
    _out(as_json, payload, f"released {', '.join(reply.patterns) or 'nothing'}")


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--token", type=int, help="The fencing token of the grant this write relies on.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def intent(paths, token, agent, endpoint, as_json):
    """Ask before writing these files: allow, warn or block.

    In the parallel modes an allowed intent on an unclaimed path claims it for the
    writer (auto-claim). With --token, the write is refused unless that token is the
    agent's live grant of each path. Exit 0 on allow/warn, 1 on block.
    """
    targets = _paths(paths)

    async def body(session):
        return await session.intent(targets, token=token)

    reply: m.Decision = _as_agent(agent, endpoint, None, body)
    payload = {
        "verdict": reply.verdict,
        "reason": reply.reason,
        "token": reply.token,
        "holders": reply.holders,
        "conflicts": reply.conflicts,
        "paths": reply.paths,
    }
    _out(as_json, payload, f"{reply.verdict}: {reply.reason}")
    if reply.verdict == "block":
        sys.exit(EXIT_REFUSED)


# ---------------------------------------------------------------------- state


def _status_payload(reply: m.StatusReply) -> dict:
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
        "statistics": reply.statistics,
    }


def _status_text(reply: m.StatusReply) -> str:
    lines = [f"mode {reply.mode}, epoch {reply.epoch}, endpoint {', '.join(reply.endpoints)}", "", "agents:"]
    for a in reply.agents or []:
        extra = f"  ({a.reason})" if a.reason else ""
        lines.append(f"  {a.name:<16} {a.state:<6} pid {a.pid or '-':<8} seen {a.last_seen_ago:6.1f}s ago  {a.worktree}{extra}")
    if not reply.agents:
        lines.append("  (none)")
    lines += ["", "claims:"]
    for c in reply.claims:
        lines.append(f"  {c.pattern:<32} {c.holder:<16} token {c.token:<6} {c.access:<9} {c.since_ago:6.1f}s")
    if not reply.claims:
        lines.append("  (none)")
    if reply.holds:
        lines += ["", "held after a stale holder (lock delay):"]
        for h in reply.holds:
            lines.append(f"  {h.pattern:<32} was {h.former_holder:<12} free in {h.free_in:.1f}s")
    return "\n".join(lines)


@main.command()
@endpoint_option
@json_option
@handle_errors
def status(endpoint, as_json):
    """Show the mode, agents (alive / stale / gone) and live claims."""
    reply = ask(endpoint, m.Status())
    _out(as_json, _status_payload(reply), _status_text(reply))


@main.group()
def ledger():
    """Read the ledger (works whether or not the coordinator runs)."""


@ledger.command("tail")
@click.option("-n", "count", type=int, default=20, show_default=True, help="How many of the newest events.")
@json_option
@handle_errors
def ledger_tail(count, as_json):
    """Print the newest events; with --json, one JSON object per line."""
    from ledger import LedgerMissing, open_readonly

    place = discovery.locate()
    path = place.state_dir / discovery.LEDGER_FILE
    try:
        reader = open_readonly(path)
    except LedgerMissing:
        raise Failure("no_ledger", f"no ledger at {path}: no coordinator has served this repository yet", EXIT_REFUSED) from None
    with reader:
        events = reader.tail(count)
    for e in events:
        if as_json:
            click.echo(json.dumps(msgspec.to_builtins(e)))
        else:
            when = time.strftime("%H:%M:%S", time.localtime(e.ts))
            detail = e.data.get("reason") or e.data.get("patterns") or e.data.get("paths") or ""
            token = f" token {e.token}" if e.token is not None else ""
            click.echo(f"{e.id:>7} {when} e{e.epoch} {e.kind:<20} {e.agent or '':<14}{token} {detail}")


@main.command()
@click.option("--once", is_flag=True, help="Print one frame and exit (no live updates).")
@endpoint_option
@json_option
@handle_errors
def top(once, endpoint, as_json):
    """A live view: agents (state, heartbeat age, CPU and memory), claims (holder, age,
    token, held after a stale holder), checks in flight and recent gate decisions.

    Fed by a snapshot plus sequenced publications, so a late viewer sees the current
    state and a dropped update is noticed and healed. Ctrl-C to quit.
    """
    from rich.console import Console
    from rich.live import Live

    from agents.top import View, follow, render

    place = discovery.locate()
    address = resolve_endpoint(place, endpoint)
    view = View()

    async def main_top():
        async with open_connection(address) as conn:
            view.take(await conn.request(m.Status()))
            if once or as_json:
                return
            with Live(render(view), console=Console(), refresh_per_second=4, screen=False) as live:
                await follow(conn, view.snapshot.pub[0], view, lambda: live.update(render(view)))

    try:
        trio.run(main_top)
    except KeyboardInterrupt:
        return
    if as_json:
        click.echo(json.dumps(_status_payload(view.snapshot)))
    elif once:
        Console().print(render(view))


# ---------------------------------------------------------------------- run / demo


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--agent", metavar="NAME", envvar="LOCKSTEP_AGENT", help="The agent's name (default LOCKSTEP_AGENT).")
@endpoint_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def run(agent, endpoint, as_json, command):
    """Run COMMAND as agent NAME: lockstep run --agent NAME -- CMD ARGS...

    Registers NAME with CMD's pid watched, heartbeats for it, sets LOCKSTEP_AGENT=NAME
    for CMD and its children, forwards SIGINT/SIGTERM, releases NAME's claims when CMD
    exits and exits with CMD's code (128+N if killed by signal N). Refused (exit 1) if
    NAME is already live; exit 3 without starting CMD if no coordinator answers.
    """
    from agents.run import run_as_agent

    sys.exit(run_as_agent(_need_agent(agent), list(command), endpoint, as_json))


@main.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway repository (its path is printed).")
@json_option
@handle_errors
def demo(keep, as_json):
    """A two-minute tour: a throwaway repository, three worktrees, three agents.

    Starts a coordinator, shows claims granted and refused, an intent blocked, one
    agent killed with SIGKILL and its claims released at once, then a summary.
    """
    from agents.demo import run_demo

    sys.exit(run_demo(keep=keep, as_json=as_json))
